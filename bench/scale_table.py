#!/usr/bin/env python3
"""scale_table.py: the table of a bench/scale_bench.sh results file: per net, rate, layout and exchange the medians
over the repeats of s/step, the compute-only s/step, the link overhead (step - compute-only) and its ratio to the
compute-only step, the overhead against our fp32's, and the bytes per step inside and between nodes.

Usage: bench/scale_table.py RESULTS.tsv [--markdown]
"""
import csv
import statistics
import sys
from collections import defaultdict


def num(x):
    try:
        return float(x)
    except ValueError:
        return None


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    md = "--markdown" in sys.argv
    rows = list(csv.DictReader((l for l in open(sys.argv[1]) if not l.startswith("#")), delimiter="\t"))
    groups = defaultdict(list)
    order = []
    for r in rows:
        key = (r["net"], r["rate"], "%sx%sx%s" % (r["nodes"], r["procs_per_node"], r["replicas"]), r["exchange"])
        if key not in groups:
            order.append(key)
        groups[key].append(r)

    def med(rs, field):
        v = [num(r[field]) for r in rs if r["status"] == "ok" and num(r[field]) is not None]
        return statistics.median(v) if v else None

    head = ["net", "rate", "layout MxPxR", "exchange", "s/step", "compute-only", "overhead", "step/compute",
            "overhead/fp32's", "intra MB/step", "inter MB/step", "machine-1 link MB/step", "runs"]
    out = []
    for key in order:
        rs = groups[key]
        step, comp, over = med(rs, "step_s"), med(rs, "compute_s"), med(rs, "overhead_s")
        fp32 = groups.get(key[:3] + ("fp32",)) if not key[3].startswith("ddp") else groups.get(key[:3] + ("ddp_fp32",))
        f_over = med(fp32, "overhead_s") if fp32 else None
        mb = lambda f: "%.2f" % (med(rs, f) / 1e6) if med(rs, f) is not None else "-"
        fail = [r["status"] for r in rs if r["status"] != "ok"]
        fmt = lambda v, p="%.3f": (p % v) if v is not None else "-"
        out.append(list(key) + [fmt(step), fmt(comp), fmt(over), fmt(step / comp if step and comp else None, "%.2fx"),
                                fmt(over / f_over if over is not None and f_over else None, "%.2f"),
                                mb("intra_node_bytes"), mb("inter_node_bytes"), mb("machine1_link_bytes_per_step"),
                                "%d ok%s" % (len(rs) - len(fail), (", " + fail[0]) if fail else "")])
    if md:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for o in out:
            print("| " + " | ".join(o) + " |")
    else:
        w = [max(len(str(x)) for x in col) for col in zip(head, *out)]
        for o in [head] + out:
            print("  ".join(str(x).ljust(n) for x, n in zip(o, w)))


if __name__ == "__main__":
    main()
