#!/usr/bin/env python3
"""Plots terngrad-train runs side by side into one PNG: a grid of the training loss (cross-entropy), test accuracy,
examples/sec and the cumulative gradient bytes exchanged per worker (with fp32's equivalent dashed), each against
steps and against training time.

usage: plot_runs.py [-o OUT.png] [--label NAME]... [--total_loss] RUN [RUN...]
  RUN           a train_dir (what every terngrad-train run writes: its TensorBoard event files are read), or a
                metrics file (terngrad-train --metrics_jsonl FILE; parsed by bench/lib/tg_metrics.py)
  -o            the PNG to write (default runs.png), written to a temporary name beside it and renamed
  --label       the runs' names in the legend, in order (default: the folder's or the file's name)
  --total_loss  plot the total loss (cross-entropy + weight decay) instead of the cross-entropy
e.g.  scripts/plot_runs.py -o /tmp/cmp.png --label TernGrad --label fp32 /tmp/tg_quick/terngrad /tmp/tg_quick/fp32
A train_dir of a run with --eval_every N holds its learning curve (test accuracy every N steps).

What is read:
  - a train_dir: its events.out.tfevents.* files, read here (TFRecord framing and the few Event/Summary
    protobuf fields of scalars: no TensorBoard or TensorFlow needed; records are not CRC-checked, a partly
    written last record is ignored): losses/entropy_loss, losses/total_loss, examples_per_sec,
    exchange/bytes_per_step and exchange/fp32_bytes_per_step of each logged step. Training time: run/train_seconds
    (seconds of training since the run or its resume began, evaluations left out; each resume's file starts at 0
    at its first step and is joined where the training had reached that step, so pauses are left out too); an
    older run without it: wall time since its first event file began. Test accuracy: the "Accuracy @ 1" scalars
    (terngrad-train --eval_every, --eval_at_end) and eval.jsonl lines (terngrad-eval --eval_dir) in the folder.
  - a metrics file: its step lines (total_loss, examples_per_sec, bytes_exchanged, fp32_bytes; the
    quantization probes and the summary are skipped); wall time is the line's `elapsed` (seconds since the
    first step began). Test accuracy: an eval.jsonl in the same folder, if there is one.
  The bytes per logged step are the window's last step's: the cumulative bytes count them for every step of
  the window (exact when the bytes change only at a window boundary). An evaluation's point on the wall-time
  axis is when the training reached the evaluated step.
Errors (a missing path, a file or folder without metrics, an unwritable output): one line
"plot_runs.py: error: ..." on stderr, exit 1, and no output written; usage errors exit 2.
"""
import argparse
import glob
import json
import os
import struct
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "lib"))
import tg_metrics  # noqa: E402  (the --metrics_jsonl reader of the benchmarks)

PROG = "plot_runs.py"
TAGS = {"losses/total_loss": "loss", "losses/entropy_loss": "xent", "examples_per_sec": "speed",
        "exchange/bytes_per_step": "bytes", "exchange/fp32_bytes_per_step": "fp32", "Accuracy @ 1": "acc",
        "run/train_seconds": "train_s"}


class Bad(Exception):
    """Bad input: its message names what and where."""


# ---- TensorBoard event files ----------------------------------------------------------------------------------
def varint(buf, pos):
    value = shift = 0
    while True:
        b = buf[pos]
        value |= (b & 0x7F) << shift
        pos += 1
        if b < 0x80:
            return value, pos
        shift += 7


def fields(buf):
    """(field number, value) of a protobuf message: an int (varint) or the field's bytes."""
    pos = 0
    while pos < len(buf):
        key, pos = varint(buf, pos)
        wire = key & 7
        if wire == 0:
            value, pos = varint(buf, pos)
        elif wire in (1, 5):
            n = 8 if wire == 1 else 4
            value, pos = buf[pos:pos + n], pos + n
        elif wire == 2:
            n, pos = varint(buf, pos)
            value, pos = buf[pos:pos + n], pos + n
        else:
            raise ValueError("wire type %d" % wire)
        if pos > len(buf):
            raise ValueError("truncated field")
        yield key >> 3, value


def read_events(path, series):
    """Adds the scalars of TAGS in one event file to series[name][step] = (wall time, value); returns the wall
    time of the file's first record (None when it has none)."""
    with open(path, "rb") as f:
        data = f.read()
    first, pos = None, 0
    while pos + 12 <= len(data):
        (n,) = struct.unpack_from("<Q", data, pos)
        if pos + 16 + n > len(data):
            break  # a record still being written
        wall, step, values = 0.0, 0, []
        try:
            for num, value in fields(data[pos + 12:pos + 12 + n]):
                if num == 1:
                    (wall,) = struct.unpack("<d", value)
                elif num == 2:
                    step = value
                elif num == 5:  # Summary: repeated Value {tag = 1, simple_value = 2}
                    for vnum, v in fields(value):
                        if vnum == 1:
                            tag, simple = "", None
                            for k, x in fields(v):
                                if k == 1:
                                    tag = x.decode("utf-8", "replace")
                                elif k == 2:
                                    (simple,) = struct.unpack("<f", x)
                            if tag in TAGS and simple is not None:
                                values.append((TAGS[tag], simple))
        except (ValueError, IndexError, struct.error):
            raise ValueError("a malformed record at byte %d" % pos)
        first = wall if first is None else first
        for name, v in values:
            series.setdefault(name, {})[step] = (wall, v)
        pos += 16 + n
    return first


def eval_lines(path):
    """{step: precision@1} of a terngrad-eval --eval_dir eval.jsonl ({} when there is none)."""
    if not os.path.isfile(path):
        return {}
    try:
        with open(path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        return {int(r["step"]): float(r["precision_at_1"]) for r in rows}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise Bad("%s: not a terngrad-eval eval.jsonl (%s)" % (path, e))


def cumulative(steps, per_step):
    """The bytes up to each logged step: each window's last per-step value times the window's steps."""
    out, total, prev = [], 0.0, 0
    for s, b in zip(steps, per_step):
        total += b * (s - prev)
        prev = s
        out.append(total)
    return out


def interpolate(points, step):
    """The value at `step` of sorted (step, value) points, linear between them (the last one's beyond them)."""
    for (s0, v0), (s1, v1) in zip(points, points[1:]):
        if step <= s1:
            return v0 + (v1 - v0) * (step - s0) / max(1, s1 - s0)
    return points[-1][1] if points else 0.0


def training_time(files_train_s):
    """{step: training seconds} of a run from each event file's run/train_seconds (oldest file first): a file's
    times count from 0 at its run's first step; it is joined where the files before it had reached that step."""
    joined = {}
    for own in files_train_s:
        if not own:
            continue
        first = min(own)
        offset = interpolate(sorted(joined.items()), first) if joined else 0.0
        joined = {s: t for s, t in joined.items() if s < first}
        joined.update({s: offset + t for s, t in own.items()})
    return joined


def from_train_dir(path):
    files = glob.glob(os.path.join(path, "events.out.tfevents.*"))
    if not files:
        raise Bad("%s: no events.out.tfevents.* file (not a terngrad-train --train_dir?)" % path)
    series, start, per_file_train_s = {}, None, []
    # Oldest first (the name holds the start's seconds): a resumed run's later file wins on the same step.
    for f in sorted(files, key=lambda p: (p.split("tfevents.")[-1].split(".")[0].zfill(20), p)):
        own = {}
        try:
            first = read_events(f, own)
        except OSError as e:
            raise Bad("%s: %s" % (f, e.strerror or e))
        except ValueError as e:
            raise Bad("%s: not a TensorBoard event file (%s)" % (f, e))
        per_file_train_s.append({s: v for s, (_, v) in own.pop("train_s", {}).items()})
        for name, points in own.items():
            series.setdefault(name, {}).update(points)
        if start is None and "loss" in series:
            start = first  # the trainer's first event file: the run's start
    if "loss" not in series:
        raise Bad("%s: its event files hold no training scalars (losses/total_loss)" % path)
    steps = sorted(series["loss"])
    at = lambda name: [series.get(name, {}).get(s, (0, float("nan")))[1] for s in steps]  # noqa: E731
    acc = {s: v for s, (_, v) in series.get("acc", {}).items()}
    acc.update(eval_lines(os.path.join(path, "eval.jsonl")))
    train_s = training_time(per_file_train_s)
    if train_s:
        points = sorted(train_s.items())
        time = [train_s[s] if s in train_s else interpolate(points, s) for s in steps]
    else:
        time = [series["loss"][s][0] - start for s in steps]
    run = {"step": steps, "time": time, "loss": at("loss"), "speed": at("speed"),
           "bytes": cumulative(steps, at("bytes")), "acc": acc, "timed": bool(train_s)}
    if "xent" in series:
        run["xent"] = at("xent")
    if "fp32" in series:
        run["fp32"] = cumulative(steps, at("fp32"))
    return run


def from_metrics(path):
    try:
        steps, _, _ = tg_metrics.read(path)
    except SystemExit:  # tg_metrics: no logged step
        raise Bad("%s: no logged step (not a terngrad-train --metrics_jsonl file)" % path)
    except OSError as e:
        raise Bad("%s: %s" % (path, e.strerror or e))
    except UnicodeDecodeError:
        raise Bad("%s: not a terngrad-train --metrics_jsonl file (not text)" % path)
    except ValueError as e:
        raise Bad("%s: not a terngrad-train --metrics_jsonl file (a line is not JSON: %s)" % (path, e))
    except AttributeError:
        raise Bad("%s: not a terngrad-train --metrics_jsonl file (a line is not a JSON object)" % path)
    for i, row in enumerate(steps):
        missing = [k for k in ("total_loss", "elapsed", "examples_per_sec", "bytes_exchanged") if k not in row]
        if missing:
            raise Bad("%s: step line %d has no %s (not a terngrad-train --metrics_jsonl file)" %
                      (path, i + 1, ", ".join(missing)))
    col = lambda key: [float(r.get(key, "nan")) for r in steps]  # noqa: E731
    try:
        s = [int(r["step"]) for r in steps]
        run = {"step": s, "time": col("elapsed"), "loss": col("total_loss"), "speed": col("examples_per_sec"),
               "bytes": cumulative(s, col("bytes_exchanged")), "timed": True}
        if all("entropy_loss" in r for r in steps):
            run["xent"] = col("entropy_loss")
        if all("fp32_bytes" in r for r in steps):
            run["fp32"] = cumulative(s, col("fp32_bytes"))
    except (TypeError, ValueError) as e:
        raise Bad("%s: a step line has a field that is not a number (%s)" % (path, e))
    beside = os.path.join(os.path.dirname(os.path.abspath(path)), "eval.jsonl")
    run["acc"] = {} if os.path.abspath(path) == beside else eval_lines(beside)
    return run


def load(path):
    if os.path.isdir(path):
        run = from_train_dir(path)
    elif os.path.isfile(path):
        run = from_metrics(path)
    else:
        raise Bad("%s: no such file or folder" % path)
    name = os.path.basename(os.path.normpath(path))
    run["label"] = name[:-len(".jsonl")] if name.endswith(".jsonl") and name != ".jsonl" else name
    return run


# ---- the figure -----------------------------------------------------------------------------------------------
def time_at(run, step):
    """The time (training or wall) the training reached `step` (linear between logged steps, from (0, 0))."""
    pts = [(0, 0.0)] + list(zip(run["step"], run["time"]))
    for (s0, t0), (s1, t1) in zip(pts, pts[1:]):
        if step <= s1:
            return t0 + (t1 - t0) * (step - s0) / max(1, s1 - s0)
    return pts[-1][1]


def draw(plt, runs, total_loss=False):
    fig, axes = plt.subplots(4, 2, figsize=(13, 15), squeeze=False)
    dashed = False
    for i, run in enumerate(runs):
        color = "C%d" % (i % 10)
        curve = run["loss"] if total_loss or "xent" not in run else run["xent"]
        for col, x in enumerate(("step", "time")):
            loss, acc, speed, nbytes = (axes[r][col] for r in range(4))
            loss.plot(run[x], curve, color=color, label=run["label"])
            speed.plot(run[x], run["speed"], color=color)
            nbytes.plot(run[x], [b / 1e6 for b in run["bytes"]], color=color)
            if "fp32" in run and run["fp32"] != run["bytes"]:  # (an fp32 run's equivalent is itself)
                nbytes.plot(run[x], [b / 1e6 for b in run["fp32"]], color=color, linestyle="--")
                dashed = True
            evaluated = sorted(run["acc"].items())
            xs = [s if x == "step" else time_at(run, s) for s, _ in evaluated]
            acc.plot(xs, [a for _, a in evaluated], color=color, marker="o")
    xent = not total_loss and all("xent" in run for run in runs)
    titles = ["training loss (%s)" % ("cross-entropy" if xent else "total: cross-entropy + weight decay"),
              "test accuracy (precision @ 1)", "examples/sec", "gradient bytes exchanged per worker,\ncumulative (MB)"]
    timed = all(run.get("timed") for run in runs)
    time_label = "training time (s; evaluations and pauses left out)" if timed else "wall time (s since the run began)"
    for r, title in enumerate(titles):
        for col, xlabel in enumerate(("step", time_label)):
            axes[r][col].set_ylabel(title)
            axes[r][col].set_xlabel(xlabel)
            axes[r][col].grid(True, alpha=0.3)
    if not any(run["acc"] for run in runs):
        for ax in axes[1]:
            ax.text(0.5, 0.5, "no evaluation recorded", transform=ax.transAxes, ha="center", va="center")
    if dashed:
        for ax in axes[3]:
            ax.plot([], [], color="gray", label="exchanged")
            ax.plot([], [], color="gray", linestyle="--", label="fp32 equivalent")
            ax.legend(loc="upper left", fontsize="small")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=min(4, len(runs)))
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    return fig


def write_png(fig, out):
    folder = os.path.dirname(os.path.abspath(out))
    try:
        fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(out) + ".", suffix=".tmp", dir=folder)
    except OSError as e:
        raise Bad("cannot write %s: %s" % (out, e.strerror or e))
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as f:
            fig.savefig(f, format="png", dpi=100)
        os.replace(tmp, out)
    except BaseException as e:  # nothing is left behind, whatever failed
        os.unlink(tmp)
        if isinstance(e, OSError):
            raise Bad("cannot write %s: %s" % (out, e.strerror or e))
        raise


def main():
    p = argparse.ArgumentParser(prog=PROG, description="Plots terngrad-train runs into one PNG.")
    p.add_argument("runs", nargs="+", metavar="RUN", help="a train_dir or a --metrics_jsonl file")
    p.add_argument("-o", "--output", default="runs.png", help="the PNG to write (default runs.png)")
    p.add_argument("--label", action="append", default=[], help="a run's name, in the order of the runs")
    p.add_argument("--total_loss", action="store_true", help="the total loss instead of the cross-entropy")
    args = p.parse_args()
    if len(args.label) > len(args.runs):
        p.error("%d --label for %d runs" % (len(args.label), len(args.runs)))
    try:
        runs = [load(path) for path in args.runs]
        names = [run["label"] for run in runs]
        for run, path in zip(runs, args.runs):  # two runs of one name: name their folders too
            if names.count(run["label"]) > 1:
                run["label"] = os.path.join(os.path.basename(os.path.dirname(os.path.abspath(path))), run["label"])
        for run, label in zip(runs, args.label):
            run["label"] = label
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            raise Bad("matplotlib is not installed for %s (scripts/setup.sh installs it)" % sys.executable)
        write_png(draw(plt, runs, args.total_loss), args.output)
    except Bad as e:
        print("%s: error: %s" % (PROG, e), file=sys.stderr)
        return 1
    print("wrote %s (%d run%s)" % (args.output, len(runs), "" if len(runs) == 1 else "s"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
