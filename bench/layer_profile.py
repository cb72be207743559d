#!/usr/bin/python3
"""Rows of bench/layer_profile.sh's results file from one profiled run (ours or PyTorch's).

    python3 bench/layer_profile.py ours LOG METRICS TRACE WARMUP PREFIX
    python3 bench/layer_profile.py pytorch LOG JSON WARMUP PREFIX

LOG is the run's output with oneDNN's verbose lines (ONEDNN_VERBOSE=1; oneDNN 2.x `onednn_verbose,exec,...` and
3.x `onednn_verbose,v1,primitive,exec,...` are both read). PREFIX is the first columns of every row (rep, isa,
net, batch), tab-separated. Prints tab-separated rows: PREFIX, system, kind, name, pass, impl, ms_per_step,
calls_per_step, status, where kind is
  step       the whole training step: the median over the timed steps (ours: sec_per_batch of the metrics after
             WARMUP steps; PyTorch: its plain timed steps)
  primitive  one oneDNN primitive execution kind, keyed by its problem (e.g. convolution
             mb40_ic48oc128_ih27...): pass is oneDNN's prop_kind (forward_training, backward_data,
             backward_weights, ...), impl its implementation (jit:avx2, gemm:jit, lrn_ref:any, ...); the median
             execution time times the executions per step (every step runs the same primitives)
  layer      ours: one layer's forward or backward span on the --timeline_layers trace (median over the traced
             steps; a backward span includes the weight-gradient and input-gradient work)
  op         PyTorch: one operator with its input shapes, self CPU time per step under torch.profiler
"""
import collections
import json
import statistics
import sys


def onednn_rows(log, steps):
    """{(primitive, problem, prop_kind, impl): (median ms, executions per step)} of a verbose log."""
    times = collections.defaultdict(list)
    with open(log, errors="replace") as f:
        for line in f:
            p = line.rstrip("\n").split(",")
            if not p or p[0] not in ("onednn_verbose", "dnnl_verbose"):
                continue
            if len(p) > 1 and p[1] == "v1":
                p = p[:1] + p[2:]
            if len(p) > 1 and p[1] == "primitive":
                p = p[:1] + p[2:]
            if len(p) < 10 or p[1] != "exec":
                continue
            try:
                ms = float(p[-1])
            except ValueError:
                continue
            times[(p[3], p[-2], p[5], p[4])].append(ms)
    return {k: (statistics.median(v), len(v) / steps) for k, v in times.items()}


def emit(prefix, system, kind, name, pass_, impl, ms, calls, status="ok"):
    print("\t".join([prefix, system, kind, name, pass_, impl, "%.4f" % ms, "%.2f" % calls, status]))


def ours(log, metrics, trace, warmup, prefix):
    rows = [json.loads(line) for line in open(metrics) if line.strip()]
    steps = [r for r in rows if "step" in r]
    timed = [r["sec_per_batch"] for r in steps if r["step"] > warmup]
    if not timed:
        raise SystemExit("layer_profile.py: %s has no step after the %d warm-up steps" % (metrics, warmup))
    emit(prefix, "ours", "step", "-", "-", "-", 1e3 * statistics.median(timed), 1)
    for (prim, problem, prop, impl), (ms, calls) in sorted(onednn_rows(log, len(steps)).items()):
        emit(prefix, "ours", "primitive", "%s %s" % (prim, problem), prop, impl, ms * calls, calls)
    events = json.load(open(trace))["traceEvents"]
    spans = collections.defaultdict(list)
    order = []
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("layer_forward", "layer_backward") and e.get("tid") == 0:
            key = (e["name"], e["cat"][6:])
            if key not in spans:
                order.append(key)
            spans[key].append(e["dur"] / 1e3)
    traced = len({e["args"]["step"] for e in events if e.get("ph") == "X"})
    for key in order:
        emit(prefix, "ours", "layer", key[0], key[1], "-", statistics.median(spans[key]), len(spans[key]) / traced)


def pytorch(log, out_json, warmup, prefix):
    d = json.load(open(out_json))
    emit(prefix, "pytorch", "step", "-", "-", "-", 1e3 * d["median_s"], 1)
    for (prim, problem, prop, impl), (ms, calls) in sorted(onednn_rows(log, warmup + 2 * d["steps"]).items()):
        emit(prefix, "pytorch", "primitive", "%s %s" % (prim, problem), prop, impl, ms * calls, calls)
    for o in d["ops"]:
        if o["ms_per_step"] >= 0.05:
            emit(prefix, "pytorch", "op", o["name"], "-", o["shapes"].replace("\t", " "), o["ms_per_step"],
                 o["calls_per_step"])


def main():
    if len(sys.argv) == 7 and sys.argv[1] == "ours":
        ours(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6])
    elif len(sys.argv) == 6 and sys.argv[1] == "pytorch":
        pytorch(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
