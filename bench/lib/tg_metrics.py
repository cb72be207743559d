#!/usr/bin/python3
"""Reads a terngrad-train --metrics_jsonl file (one JSON object per logged step, then a summary object) for the
accuracy benchmarks (bench/accuracy_bench.sh, bench/tta_bench.sh). Prints one line of tab-separated fields.

    python3 bench/lib/tg_metrics.py bytes METRICS.jsonl
        steps, bytes_per_step, bytes_run, fp32_bytes_per_step, fp32_bytes_run, wire_bytes_per_step,
        wire_bytes_run, median examples/sec, parameter digest, step_seconds (the run's summed step times)
    python3 bench/lib/tg_metrics.py steptime METRICS.jsonl
        the steps' times summed up to each logged step, as "step:seconds" words
    python3 bench/lib/tg_metrics.py quantization METRICS.jsonl
        the --quantization_error_every probes' mean relative error of the averaged gradient, their mean fraction
        of non-zero codes, and how many probes there were ("-  -  0" without any)

What the fields are (src/train/trainer_run.cc, include/terngrad/exchange/gradient_scheme.h):
  bytes_exchanged  per logged step: the bytes the exchange's algorithms moved per worker in that step (the
                   window's last step); in the summary: summed over every step of the run
  fp32_bytes       the same for a ring all-reduce of the same gradients in fp32
  wire_bytes       per logged step only: the bytes moved into this (the chief's) process by its collectives
                   (the communicator's byte model). The run's total is the summary's `wire_bytes` when the
                   trainer writes one, else each window's last-step value times the window's steps (exact
                   when the bytes only change at a window boundary: --log_every dividing --fp32_warmup_steps)
  sec_per_batch    the window's mean step time: the time of the steps only (forward, backward, exchange,
                   update), without the start, the log windows' gathers and the checkpoint saves; summed
                   over the windows it is the training time up to a logged step (what tta_bench.sh's
                   clock is, as the peer's: the metrics' own `elapsed`, wall seconds since the first step,
                   also counts the checkpoint saves, one every K steps there)
"""
import json
import sys


def read(path):
    steps, summary, probes = [], None, []
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            row = json.loads(line)
            if row.get("summary"):
                summary = row
            elif row.get("quantization"):  # a --quantization_error_every probe, not a logged step
                probes.append(row)
            elif "step" in row:
                steps.append(row)
    if not steps:
        sys.exit("tg_metrics: no logged step in %s" % path)
    return steps, summary, probes


def step_times(steps):
    """(step, seconds of the steps up to it) at each logged step."""
    out, total, prev = [], 0.0, 0
    for r in steps:
        total += r["sec_per_batch"] * (r["step"] - prev)
        prev = r["step"]
        out.append((r["step"], total))
    return out


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("bytes", "steptime", "quantization"):
        sys.exit(__doc__)
    steps, summary, probes = read(sys.argv[2])
    if sys.argv[1] == "quantization":
        if not probes:
            print("-\t-\t0")
            return
        err = sum(p["relative_error"] for p in probes) / len(probes)
        nonzero = sum(p["nonzero_fraction"] for p in probes) / len(probes)
        print("%.4f\t%.4f\t%d" % (err, nonzero, len(probes)))
        return
    if sys.argv[1] == "steptime":
        print(" ".join("%d:%.6f" % st for st in step_times(steps)))
        return
    last = steps[-1]
    n = summary["steps"] if summary else last["step"]
    wire_run, prev = 0, 0
    for r in steps:
        wire_run += r.get("wire_bytes", 0) * (r["step"] - prev)
        prev = r["step"]
    if summary and "wire_bytes" in summary:
        wire_run = summary["wire_bytes"]
    fields = [
        n,
        last["bytes_exchanged"],
        summary["bytes_exchanged"] if summary else last["bytes_exchanged"] * n,
        last["fp32_bytes"],
        summary["fp32_bytes"] if summary else last["fp32_bytes"] * n,
        last.get("wire_bytes", 0),
        wire_run,
        "%.1f" % (summary["median_examples_per_sec"] if summary else last["examples_per_sec"]),
        summary["parameter_digest"] if summary else "-",
        "%.3f" % step_times(steps)[-1][1],
    ]
    print("\t".join(str(f) for f in fields))


if __name__ == "__main__":
    main()
