#!/usr/bin/python3
"""Renders the results files of bench/accuracy_bench.sh (kind accuracy) and bench/tta_bench.sh (kind tta) as
markdown: a provenance line, then the table.

    python3 bench/lib/render_accuracy.py bench/results/accuracy.tsv [bench/results/tta-lenet.tsv ...]
    python3 bench/lib/render_accuracy.py --target bench/results/accuracy.tsv [--net lenet] [--dataset fashion_mnist]
        [--workers 2] [--steps 1875] [--minus 0.3]
        prints the time-to-accuracy target: fp32's mean test accuracy over seeds minus 0.3 points, and its rows

accuracy: one line per (net, dataset, workers, variant): the seeds of the ok rows, test precision@1 as mean
+- sample standard deviation over the seeds, the gap of the mean to fp32's mean in points (100 x accuracy),
the bytes moved per worker over the run as a fraction of fp32's (fp32's measured rows of the same net, dataset
and workers, else the runs' own fp32 byte model), the steady bytes per step and worker, the mean over the seeds
of each run's mean --quantization_error_every probe (|decoded average - fp32 average| / |fp32 average|, and the
fraction of non-zero codes), and the mean training wall seconds. Failed rows are listed below the table.

tta: one line per (link, machines, system): the median over the repetitions of the seconds to the target
(a repetition that did not reach it counts as infinitely long, so the median is `not reached` when half or
more did not), of the steps to it, of the final accuracy and of the evaluation seconds, and the median time
to target against our fp32's and DDP fp32's at the same link and machines (below 1: faster).
"""
import argparse
import math
import statistics
import sys


def read(path):
    meta, header, rows = {}, None, []
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("#"):
                if ": " in line:
                    k, v = line[2:].split(": ", 1)
                    meta.setdefault(k, v)
                continue
            if not line:
                continue
            cells = line.split("\t")
            if header is None:
                header = cells
            else:
                rows.append(dict(zip(header, cells + [""] * (len(header) - len(cells)))))
    return meta, rows


def provenance(path, meta):
    cpu = meta.get("cpu", "?")
    isa = meta.get("isa", "?").split(" ")[0]
    return ("Measured at commit `%s` (%s) on %s, %s, load %s; command `%s`; raw data: `%s`." %
            (meta.get("commit", "?")[:10], meta.get("date", "?"), cpu, isa, meta.get("load", "?"),
             meta.get("command", "?"), path)) + (" Resumed %s." % meta["resumed"] if "resumed" in meta else "")


def mb(b):
    return "%.2f MB" % (b / 1e6)


def fp32_mean(rows, net, dataset, workers=None, steps=None):
    acc = [float(r["precision_at_1"]) for r in rows
           if r["status"] == "ok" and r["variant"] == "fp32" and r["net"] == net and r["dataset"] == dataset and
           (workers is None or r["workers"] == str(workers)) and (steps is None or r["steps"] == str(steps))]
    return (statistics.fmean(acc), len(acc)) if acc else (None, 0)


def render_accuracy(path, meta, rows):
    return "\n".join([provenance(path, meta), ""] + accuracy_table(rows))


def accuracy_table(rows):
    """The accuracy table's lines (scripts/check_readme_results.py renders README blocks with it)."""
    out = []
    ok = [r for r in rows if r["status"] == "ok"]
    groups, order = {}, []
    for r in ok:
        k = (r["net"], r["dataset"], int(r["workers"]), r["layout"], r["variant"], r["steps"])
        if k not in groups:
            groups[k] = []
            order.append(k)
        groups[k].append(r)
    variants = []
    for k in order:
        if k[4] not in variants:
            variants.append(k[4])
    if "fp32" in variants:
        variants.remove("fp32")
        variants.insert(0, "fp32")
    order.sort(key=lambda k: (k[0], k[1], k[2], k[5], variants.index(k[4])))
    out.append("| net | dataset | workers (processes x workers) | steps | variant | exchange | seeds | test accuracy (mean ± sd) "
               "| gap to fp32 (points) | bytes per worker, run | vs fp32's | bytes per step and worker "
               "| averaged-gradient error (non-zero codes) | train s (mean) |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for k in order:
        net, dataset, workers, layout, variant, steps = k
        g = groups[k]
        acc = [float(r["precision_at_1"]) for r in g]
        mean = statistics.fmean(acc)
        sd = statistics.stdev(acc) if len(acc) > 1 else float("nan")
        ref = groups.get((net, dataset, workers, layout, "fp32", steps))
        gap = ""
        if ref and variant != "fp32":
            gap = "%+.2f" % (100 * (mean - statistics.fmean(float(r["precision_at_1"]) for r in ref)))
        run_bytes = statistics.fmean(float(r["bytes_run"]) for r in g)
        if ref:
            fp32_bytes, how = statistics.fmean(float(r["bytes_run"]) for r in ref), ""
        else:
            fp32_bytes, how = statistics.fmean(float(r["fp32_bytes_run"]) for r in g), " (fp32 by the byte model)"
        frac = run_bytes / fp32_bytes if fp32_bytes else float("nan")
        ratio = "%.4f (1/%.1f)%s" % (frac, 1 / frac, how) if frac > 0 else "-"
        seeds = ",".join(sorted((r["seed"] for r in g), key=int))
        sd_text = "%.4f" % sd if not math.isnan(sd) else "(1 seed)"
        probed = [r for r in g if r.get("quant_error", "-") not in ("", "-")]
        probe = "%.3f (%.1f%%)" % (statistics.fmean(float(r["quant_error"]) for r in probed),
                                   100 * statistics.fmean(float(r["nonzero_codes"]) for r in probed)) if probed else ""
        out.append("| %s | %s | %d (%s) | %s | %s | %s | %s | %.4f ± %s | %s | %s | %s | %s | %s | %.1f |" % (
            net, dataset, workers, layout.replace("x", " x "), steps, variant, g[0]["exchange"], seeds, mean, sd_text, gap,
            mb(run_bytes), ratio, mb(statistics.fmean(float(r["bytes_per_step"]) for r in g)), probe,
            statistics.fmean(float(r["train_wall_s"]) for r in g)))
    failed = [r for r in rows if r["status"] != "ok"]
    if failed:
        out.append("")
        out.append("Failed runs (%d):" % len(failed))
        for r in failed:
            out.append("- %s %s %s workers %s seed %s: %s" % (r["net"], r["dataset"], r["workers"], r["variant"],
                                                               r["seed"], r["note"]))
    return out


def accuracy_pivot(rows):
    """One line per (net, dataset, workers, steps), one column per variant: the test accuracy's mean +- sd over the
    seeds and its gap to fp32's mean in points; then the bytes per worker of each variant as a fraction of fp32's."""
    ok = [r for r in rows if r["status"] == "ok"]
    variants, keys, cell = [], [], {}
    for r in ok:
        if r["variant"] not in variants:
            variants.append(r["variant"])
        k = (r["net"], r["dataset"], int(r["workers"]), r["layout"], r["steps"])
        if k not in keys:
            keys.append(k)
        cell.setdefault(k + (r["variant"],), []).append(r)
    if "fp32" in variants:
        variants.remove("fp32")
        variants.insert(0, "fp32")
    keys.sort(key=lambda k: (k[0], k[1], k[2], k[4]))
    out = ["| net, dataset | workers | steps | " + " | ".join(variants) + " |",
           "|---|---|---|" + "---|" * len(variants)]
    for k in keys:
        ref = cell.get(k + ("fp32",))
        ref_mean = statistics.fmean(float(r["precision_at_1"]) for r in ref) if ref else None
        ref_bytes = statistics.fmean(float(r["bytes_run"]) for r in ref) if ref else None
        cells = []
        for v in variants:
            g = cell.get(k + (v,))
            if not g:
                cells.append("")
                continue
            acc = [float(r["precision_at_1"]) for r in g]
            mean = statistics.fmean(acc)
            text = "%.4f ± %s" % (mean, "%.4f" % statistics.stdev(acc) if len(acc) > 1 else "(1 seed)")
            if v != "fp32" and ref_mean is not None:
                frac = statistics.fmean(float(r["bytes_run"]) for r in g) / ref_bytes if ref_bytes else float("nan")
                text += " (**%+.2f**; 1/%.1f of the bytes)" % (100 * (mean - ref_mean), 1 / frac)
            cells.append(text)
        out.append("| %s, %s | %d | %s | %s |" % (k[0], k[1], k[2], k[4], " | ".join(cells)))
    return out


def median_inf(values):
    """The middle value, or the mean of the middle two; math.inf for a repetition that never reached it."""
    v = sorted(values)
    n = len(v)
    if n == 0:
        return float("nan")
    if n % 2:
        return v[n // 2]
    a, b = v[n // 2 - 1], v[n // 2]
    return math.inf if math.isinf(a) or math.isinf(b) else 0.5 * (a + b)


def render_tta(path, meta, rows):
    return "\n".join([provenance(path, meta)] + tta_table(meta, rows))


def tta_table(meta, rows):
    """The target line, an empty line and the time-to-accuracy table's lines."""
    out = []
    if "target" in meta:
        out.append("Target: %s." % meta["target"])
    out.append("")
    groups, order = {}, []
    for r in rows:
        k = (r["rate"], int(r["machines"]), r["system"])
        if k not in groups:
            groups[k] = []
            order.append(k)
        groups[k].append(r)
    systems = []
    for k in order:
        if k[2] not in systems:
            systems.append(k[2])
    rates = []
    for k in order:
        if k[0] not in rates:
            rates.append(k[0])
    order.sort(key=lambda k: (rates.index(k[0]), k[1], systems.index(k[2])))

    def ttt(g):
        return median_inf([float(r["seconds_to_target"]) if r["status"] == "ok" and r["seconds_to_target"] not in
                           ("", "-", "not reached") else math.inf for r in g])

    out.append("| link | machines | system | repetitions (reached) | s to target (median) | steps to target (median) "
               "| vs our fp32 | vs DDP fp32 | final accuracy (median) | train s, whole run (median) "
               "| eval s (median, untimed) |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|")
    for k in order:
        rate, machines, system = k
        g = groups[k]
        okg = [r for r in g if r["status"] == "ok"]
        reached = [r for r in okg if r["steps_to_target"] not in ("", "-", "not reached")]
        t = ttt(g)
        steps = median_inf([float(r["steps_to_target"]) if r in reached else math.inf for r in g])

        def vs(ref_system):
            ref = groups.get((rate, machines, ref_system))
            if not ref or ref_system == system:
                return ""
            tr = ttt(ref)
            if math.isinf(t) or math.isinf(tr) or tr <= 0:
                return "-"
            return "%.2fx" % (t / tr)

        def med(field):
            v = [float(r[field]) for r in okg if r[field] not in ("", "-")]
            return statistics.median(v) if v else float("nan")

        out.append("| %s | %d | %s | %d (%d) | %s | %s | %s | %s | %.4f | %.1f | %.1f |" % (
            rate, machines, system, len(g), len(reached), "not reached" if math.isinf(t) else "%.1f" % t,
            "not reached" if math.isinf(steps) else "%.0f" % steps, vs("ours fp32"), vs("DDP fp32"),
            med("final_accuracy"), med("train_s"), med("eval_s")))
    failed = [r for r in rows if r["status"] != "ok"]
    if failed:
        out.append("")
        out.append("Failed or missing runs (%d):" % len(failed))
        for r in failed:
            out.append("- %s %s machines %s rep %s: %s %s" % (r["rate"], r["machines"], r["system"], r["rep"],
                                                              r["status"], r["note"]))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--target", action="store_true", help="print the TTA target from an accuracy results file")
    ap.add_argument("--net", default="lenet")
    ap.add_argument("--dataset", default="fashion_mnist")
    ap.add_argument("--workers", type=int, default=None, help="fp32's rows of this many workers (default: all)")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--minus", type=float, default=0.3, help="points below fp32's mean")
    args = ap.parse_args()
    if args.target:
        meta, rows = read(args.files[0])
        mean, n = fp32_mean(rows, args.net, args.dataset, args.workers, args.steps)
        if mean is None:
            sys.exit("render_accuracy: no ok fp32 row of %s on %s%s%s in %s" % (
                args.net, args.dataset, "" if args.workers is None else " at %d workers" % args.workers,
                "" if args.steps is None else ", %d steps" % args.steps, args.files[0]))
        print("%.6f %.6f %d" % (mean - args.minus / 100, mean, n))
        return
    for i, path in enumerate(args.files):
        meta, rows = read(path)
        kind = meta.get("kind")
        if i:
            print()
        if kind == "accuracy":
            print(render_accuracy(path, meta, rows))
        elif kind == "tta":
            print(render_tta(path, meta, rows))
        else:
            sys.exit("render_accuracy: %s is of kind %r, not accuracy or tta" % (path, kind))


if __name__ == "__main__":
    main()
