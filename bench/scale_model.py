#!/usr/bin/env python3
"""scale_model.py: a cost model of one data-parallel training step for each exchange, calibrated on the rows
bench/scale_bench.sh measured, validated against them, then extrapolated to clusters of 8-GPU nodes.

Usage:
  bench/scale_model.py calibrate ROWS.tsv... [-o MODEL.json]   fit the parameters, print every row's prediction
  bench/scale_model.py predict [-m MODEL.json] [--net resnet50|alexnet] [--compute S] [--gpus-per-node 8]
                               [--rates 1,10,25,100] [--nodes 2,4,...,128]   speed-up over fp32 ring all-reduce
  bench/scale_model.py selftest                                  the model's own checks (no data needed)

The model (per step, one rank; N = M nodes x L ranks per node, n gradient elements, b = 4 n fp32 bytes; the
TernGrad exchanges code n_t = n - n_f elements and send the n_f of the logits layer in fp32, as the trainer does
by default (`--quantize_logits=false`, the reference's rule): a ring all-reduce of 4 n_f more bytes):
  step      = compute + codec + exposed(comm)
  exposed   = max(0, comm - overlap * compute)          (what backward cannot hide; overlap in [0, 1))
  comm      = sum over the step's collectives of  bytes_on_the_busiest_link / bandwidth + messages * latency
  fp32      flat ring all-reduce over N ranks; a node's NIC carries one ring link: 2 (N-1)/N b
  fp16      the same with b/2
  allgather2  every worker's 2-bit codes: (N-1) n/4 over each ring link; decode sums N blocks
  allreduce8  int8 code sums by ring all-reduce: 2 (N-1)/N n
  hierarchical  inside the node a reduce-scatter of b ((L-1)/L b at the node's internal bandwidth); between nodes
              the L rings (one per local rank) share the node's NIC: (M-1) n/4 (allgather2, M < 8) or
              2 (M-1)/M n (allreduce8); then inside the node an all-gather of what crossed: the M nodes' codes of
              every shard ((L-1)/L M n/4; int8 sums from 8 nodes on, (L-1)/L n) and the fp32 part's sums. The
              codec encodes n/L elements; every rank decodes all n, summing M blocks (one with int8 sums). With
              one node: reduce-scatter + all-gather of b (2 (L-1)/L b), nothing coded
  hierarchical16  the same with fp16 inside the node (--local_bits 16): b/2 there, and the casts' passes
  codec     = (scalers + encode) per element x elements encoded + decode per element-block x blocks summed
A node's NIC is full duplex at `rate`; `efficiency` is the fraction of it a ring reaches. Calibrated on the CPU
emulation: efficiency, latency, overlap, intra_bandwidth (the node's internal links), encode_s (per element),
decode_s (per element and block). The calibration fits overlap 0 (the emulation's cores run compute and
communication alike, nothing is hidden); `predict` does not use it but assumes --overlap (default 0.5) for a GPU,
whose communication runs beside the compute: an assumption, not a measurement. Assumptions are listed by
`predict` and in bench/README.md.
"""
import argparse
import csv
import json
import math
import statistics
import sys

EXCHANGES = ["fp32", "fp16", "allgather2", "allreduce8", "hierarchical", "hierarchical16"]
# Variants scale_bench.sh measures that the model does not tell apart from their exchange (same bytes; the
# decode's place or error feedback's passes): their rows are left out of a calibration, and said so.
VARIANTS = {"allgather2_df": "allgather2", "allgather2_ef": "allgather2", "allgather2_serial": "allgather2"}
# Gradient elements of the networks (the registry's parameter counts; ImageNet, 1001 classes).
# (gradient elements, of which fp32 under TernGrad: the logits layer) as terngrad-train reports them
# ("net ... (N parameters)", "fp32: 2 tensors (K elements)"); ImageNet nets with 1001 classes.
NETS = {"resnet50": (25_559_081, 2048 * 1001 + 1001), "alexnet": (60_969_321, 4096 * 1001 + 1001),
        "lenet": (1_256_080, 500 * 10 + 10)}
DEFAULTS = {"efficiency": 0.9, "latency": 50e-6, "overlap": 0.0, "intra_bandwidth": 2.0e9,
            "encode_s": 2.0e-9, "decode_s": 0.5e-9}


def comm_and_codec(p, exchange, n, nodes, local, rate_bits, n_fp32=0):
    """Seconds of communication (unhidden) and of codec work of one step, for one rank; n_fp32 of the n elements
    stay fp32 under TernGrad."""
    N = nodes * local
    nic = p["efficiency"] * rate_bits / 8.0 if rate_bits else float("inf")  # bytes/s per node, each way
    intra = p["intra_bandwidth"]
    lat = p["latency"]
    b = 4.0 * n
    nt, bf = n - n_fp32, 4.0 * n_fp32  # ternary elements; fp32 bytes of the rest
    comm = 0.0
    codec = 0.0
    if N == 1 or exchange == "none":
        return 0.0, 0.0

    def ring_time(bytes_per_link, ranks, inter):
        if ranks <= 1:
            return 0.0
        bw = nic if inter else intra
        return bytes_per_link / bw + 2 * (ranks - 1) * lat

    multi = nodes > 1
    if exchange in ("fp32", "fp16"):
        payload = b if exchange == "fp32" else b / 2
        comm = ring_time(2 * (N - 1) / N * payload, N, multi)
        if exchange == "fp16":
            codec = n * p["encode_s"] * 0.25
    elif exchange in ("allgather2", "allreduce8"):
        fp32_part = ring_time(2 * (N - 1) / N * bf, N, multi)  # the logits layer's ring all-reduce
        if exchange == "allgather2":
            comm = ring_time((N - 1) * nt / 4.0, N, multi) + fp32_part
            codec = nt * p["encode_s"] + nt * N * p["decode_s"]
        else:
            comm = ring_time(2 * (N - 1) / N * nt, N, multi) + fp32_part
            codec = nt * p["encode_s"] + nt * p["decode_s"]
    elif exchange in ("hierarchical", "hierarchical16"):
        half = exchange == "hierarchical16"
        payload = b / 2 if half else b
        if nodes == 1:  # fp32 (or fp16) averaging inside the node, nothing coded
            comm = ring_time(2 * (local - 1) / local * payload, local, False)
            codec = n * p["encode_s"] * 0.25 if half else 0.0
            # the node's sum and the scatter back: two passes over the gradient (an upper bound: a bucket of one
            # large tensor is reduced in place without them)
            return comm, codec + n * p["decode_s"] * 2
        if local > 1:
            comm += ring_time((local - 1) / local * payload, local, False)  # the reduce-scatter
            if half:
                codec += n * p["encode_s"] * 0.25  # to fp16 and back
        # L rings of n/L each share the NIC; the fp32 part's shards cross in a ring all-reduce
        comm += ring_time(2 * (nodes - 1) / nodes * bf, nodes, True)
        if nodes < 8:
            comm += ring_time((nodes - 1) * nt / 4.0, nodes, True)
            crossed, blocks = nodes * nt / 4.0, nodes  # every node's codes of the shard
        else:
            comm += ring_time(2 * (nodes - 1) / nodes * nt, nodes, True)
            crossed, blocks = nt, 1  # int8 sums
        if local > 1:  # the all-gather of what crossed (codes or sums, and the fp32 part's sums) inside the node
            comm += ring_time((local - 1) / local * (crossed + bf), local, False)
        codec += (nt / local) * p["encode_s"] + nt * blocks * p["decode_s"]
        codec += n * p["decode_s"]  # the local sum: one pass over the gradient (an upper bound, as above)
    else:
        raise ValueError("unknown exchange " + exchange)
    return comm, codec


def predict_step(p, exchange, n, nodes, local, rate_bits, compute, n_fp32=0):
    comm, codec = comm_and_codec(p, exchange, n, nodes, local, rate_bits, n_fp32)
    return compute + codec + max(0.0, comm - p["overlap"] * compute)


def rate_of(text):
    text = text.strip().lower()
    if text in ("none", "", "inf"):
        return None
    units = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
    for u in ("t", "g", "m", "k", ""):
        if text.endswith(u + "bit"):
            return float(text[: -len(u + "bit")]) * units[u]
    raise ValueError("bad rate " + text)


def load_rows(paths):
    """The medians over the repetitions of each (net, exchange, layout, rate) cell of scale_bench results files
    (ours only: the compute-only and DDP rows are not exchanges of the model; the VARIANTS are left out, and named
    in the second value returned)."""
    cells = {}
    left_out = set()
    for path in paths:
        with open(path) as f:
            for r in csv.DictReader((l for l in f if not l.startswith("#")), delimiter="\t"):
                if r.get("status", "ok") != "ok" or r["exchange"] == "none" or r["exchange"].startswith("ddp"):
                    continue
                if r["exchange"] in VARIANTS:
                    left_out.add(r["exchange"])
                    continue
                if r["exchange"] not in EXCHANGES:
                    sys.exit("scale_model.py: %s: exchange '%s' is not one the model knows (%s)"
                             % (path, r["exchange"], ", ".join(EXCHANGES)))
                key = (r["net"], r["exchange"], int(r["nodes"]), int(r["ranks_per_node"]), r["rate"],
                       int(r["params"]))
                cells.setdefault(key, []).append((float(r["step_s"]), float(r["compute_s"])))
    rows = []
    for (net, ex, nodes, local, rate, n), v in cells.items():
        known = NETS.get(net)
        if not known or known[0] != n:
            sys.exit("scale_model.py: %s with %d parameters in %s: its fp32 part is not known (NETS: %s)"
                     % (net, n, ", ".join(paths), known))
        rows.append({"net": net, "exchange": ex, "nodes": nodes, "local": local, "rate": rate_of(rate), "n": n,
                     "n_fp32": known[1],
                     "step": statistics.median(s for s, _ in v), "compute": statistics.median(c for _, c in v)})
    if not rows:
        sys.exit("scale_model.py: no usable rows in " + ", ".join(paths))
    return rows, sorted(left_out)


def error(p, rows):
    return [predict_step(p, r["exchange"], r["n"], r["nodes"], r["local"], r["rate"], r["compute"], r["n_fp32"])
            / r["step"] - 1
            for r in rows]


def calibrate(rows):
    """Coordinate descent on log-scaled parameters, minimising the largest relative error (then the mean)."""
    p = dict(DEFAULTS)
    ranges = {"efficiency": (0.3, 1.0), "latency": (1e-6, 5e-3), "overlap": (0.0, 0.9),
              "intra_bandwidth": (1e8, 1e11), "encode_s": (1e-11, 1e-7), "decode_s": (1e-12, 1e-7)}

    def cost(q):
        e = [abs(x) for x in error(q, rows)]
        return (max(e), sum(e) / len(e))

    best = cost(p)
    for _ in range(60):
        improved = False
        for k, (lo, hi) in ranges.items():
            for f in (0.5, 0.8, 0.95, 1.05, 1.25, 2.0):
                q = dict(p)
                q[k] = min(hi, max(lo, p[k] * f if k != "overlap" else min(hi, max(lo, p[k] + (f - 1) / 2))))
                c = cost(q)
                if c < best:
                    best, p, improved = c, q, True
        if not improved:
            break
    return p


def cmd_calibrate(a):
    rows, left_out = load_rows(a.rows)
    for v in left_out:
        print("%s: rows left out (a variant of %s the model does not tell apart)" % (v, VARIANTS[v]))
    p = calibrate(rows)
    errs = error(p, rows)
    print("parameters: " + ", ".join("%s=%.4g" % kv for kv in p.items()))
    print("%-9s %-13s %5s %5s %8s %9s %9s %9s %7s" % ("net", "exchange", "nodes", "local", "rate", "compute",
                                                      "measured", "model", "error"))
    worst = 0.0
    for r, e in zip(rows, errs):
        worst = max(worst, abs(e))
        rate = "none" if r["rate"] is None else "%gG" % (r["rate"] / 1e9)
        model = r["step"] * (1 + e)
        print("%-9s %-13s %5d %5d %8s %9.3f %9.3f %9.3f %+6.1f%%" % (r["net"], r["exchange"], r["nodes"], r["local"],
                                                                   rate, r["compute"], r["step"], model, 100 * e))
    verdict = "within" if worst <= 0.25 else "NOT within"
    print("largest error %.1f%%: %s 25%% of every measured row" % (100 * worst, verdict))
    if a.output:
        with open(a.output, "w") as f:
            json.dump({"parameters": p, "rows": len(rows), "largest_error": worst}, f, indent=1)
    return 0 if worst <= 0.25 else 1


def cmd_predict(a):
    p = dict(DEFAULTS)
    if a.model:
        with open(a.model) as f:
            p.update(json.load(f)["parameters"])
    # The GPU side: NVLink inside the node, the codec at GPU memory speed (until a GPU run measures them).
    p["intra_bandwidth"] = a.intra_gbs * 1e9
    p["encode_s"] = 4.0 * 2 / (a.hbm_gbs * 1e9)  # read fp32 twice (scalers, encode)
    p["decode_s"] = 0.25 / (a.hbm_gbs * 1e9)     # read one 2-bit block per element
    p["overlap"] = a.overlap
    if a.latency_us is not None:
        p["latency"] = a.latency_us * 1e-6
    n, n_fp32 = NETS[a.net]
    L = a.gpus_per_node
    print("model: %s (%d parameters, %d of them fp32 under TernGrad), %d GPUs per node, compute %.3f s/step, "
          "overlap %.2f (assumed), NIC efficiency %.2f, "
          "latency %.0f us, NVLink %.0f GB/s, HBM %.0f GB/s" % (a.net, n, n_fp32, L, a.compute, p["overlap"],
                                                              p["efficiency"], p["latency"] * 1e6, a.intra_gbs,
                                                              a.hbm_gbs))
    print("speed-up over fp32 ring all-reduce (step time ratio); best exchange per cell marked *")
    for rate in a.rates:
        print("\n%g Gbit/s per node" % rate)
        print("%6s %6s " % ("nodes", "GPUs") + " ".join("%13s" % e for e in EXCHANGES) + "   auto picks")
        for m in a.nodes:
            steps = {e: predict_step(p, e, n, m, L, rate * 1e9, a.compute, n_fp32) for e in EXCHANGES}
            best = min(steps, key=steps.get)
            cells = []
            for e in EXCHANGES:
                cells.append("%12.2fx%s" % (steps["fp32"] / steps[e], "*" if e == best else " "))
            auto = auto_choice(m, L)
            print("%6d %6d " % (m, m * L) + " ".join(cells) + "   " + auto)
    return 0


def auto_choice(nodes, local, grad_bits=1):
    """--exchange auto, as exchange/scheme_registry.cc decides it."""
    if grad_bits != 1:
        return "fp32"
    if nodes > 1 and local > 1:
        return "hierarchical"
    return "allgather2" if nodes * local < 8 else "allreduce8"


def cmd_selftest(_):
    p = dict(DEFAULTS)
    n = 1_000_000
    # One rank: nothing to exchange.
    assert predict_step(p, "fp32", n, 1, 1, 1e9, 1.0) == 1.0
    # allgather2 traffic grows with N, allreduce8's does not: their crossover is at N = 8.
    ag = [comm_and_codec(p, "allgather2", n, k, 1, 1e9)[0] for k in (4, 8, 16)]
    ar = [comm_and_codec(p, "allreduce8", n, k, 1, 1e9)[0] for k in (4, 8, 16)]
    assert ag[0] < ar[0] and ag[2] > ar[2], (ag, ar)
    # Hierarchical moves 16x less than fp32 over the NIC (2 nodes).
    f = comm_and_codec(dict(p, latency=0), "fp32", n, 2, 8, 1e9)[0]
    h = comm_and_codec(dict(p, latency=0, intra_bandwidth=float("inf")), "hierarchical", n, 2, 8, 1e9)[0]
    assert 10 < f / h < 40, f / h
    # Inside the node (2 nodes x 8 ranks, an infinitely fast NIC): the reduce-scatter of b plus the M nodes' codes,
    # not the fp32 average's 2 (L-1)/L b.
    q = dict(p, latency=0, efficiency=1.0)
    inside = comm_and_codec(q, "hierarchical", n, 2, 8, None)[0] * q["intra_bandwidth"]
    assert abs(inside - 7 / 8 * (4 * n + 2 * n / 4)) < 1e-3 * n, inside
    # One node: fp32 averaging inside it, reduce-scatter + all-gather.
    one = comm_and_codec(q, "hierarchical", n, 1, 8, None)[0] * q["intra_bandwidth"]
    assert abs(one - 2 * 7 / 8 * 4 * n) < 1e-3 * n, one
    # The logits layer in fp32: AlexNet's 4.1 of 61 million elements more than double allgather2's bytes at N = 2.
    an, af = NETS["alexnet"]
    q = dict(p, latency=0)
    assert 2.0 < comm_and_codec(q, "allgather2", an, 2, 1, 1e9, af)[0] / comm_and_codec(q, "allgather2", an, 2, 1,
                                                                                         1e9)[0] < 2.3
    assert auto_choice(2, 8) == "hierarchical" and auto_choice(1, 4) == "allgather2" and auto_choice(16, 1) == "allreduce8"
    print("scale_model selftest: passed")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("calibrate")
    c.add_argument("rows", nargs="+")
    c.add_argument("-o", "--output")
    p = sub.add_parser("predict")
    p.add_argument("-m", "--model")
    p.add_argument("--net", choices=sorted(NETS), default="resnet50")
    p.add_argument("--compute", type=float, default=0.25, help="s/step of one GPU (default 0.25)")
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--overlap", type=float, default=0.5,
                   help="assumed fraction of a GPU step's compute that hides communication (not calibrated: the CPU "
                        "emulation fits 0)")
    p.add_argument("--intra-gbs", type=float, default=150.0, help="NVLink GB/s per GPU")
    p.add_argument("--hbm-gbs", type=float, default=3000.0, help="codec memory speed GB/s")
    p.add_argument("--latency-us", type=float, help="per-message latency between nodes (default: the calibrated "
                   "one; a CPU emulation's, far above NCCL's on a real fabric)")
    p.add_argument("--rates", type=lambda s: [float(x) for x in s.split(",")], default=[1, 10, 25, 100])
    p.add_argument("--nodes", type=lambda s: [int(x) for x in s.split(",")], default=[2, 4, 8, 16, 32, 64, 128])
    sub.add_parser("selftest")
    a = ap.parse_args()
    return {"calibrate": cmd_calibrate, "predict": cmd_predict, "selftest": cmd_selftest}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
