#!/usr/bin/python3
"""Renders the results files of bench/accuracy_bench.sh (kind accuracy) and bench/tta_bench.sh (kind tta) as
markdown: a provenance line, then the table.

    python3 bench/lib/render_accuracy.py bench/results/accuracy.tsv [bench/results/tta-lenet.tsv ...]
    python3 bench/lib/render_accuracy.py --target bench/results/accuracy.tsv [--net lenet] [--dataset fashion_mnist]
        [--workers 2] [--steps 1875] [--minus 0.3]
        prints the time-to-accuracy target: fp32's mean test accuracy over seeds minus 0.3 points, and its rows

accuracy: one line per (net, dataset, workers, variant): the seeds of the ok rows, test precision@1 as mean
+- sample standard deviation over the seeds, the gap of the mean to fp32's mean in points (100 x accuracy), the
paired difference to fp32 (seeds run by both: mean of the per-seed differences with its 95% confidence interval,
Student's t with n-1 degrees of freedom) and its verdict (the wording rules of `verdict` below),
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

EQUIVALENCE_POINTS = 0.3  # "within 0.3 points of fp32" needs the whole 95% interval inside +-0.3
# Student's t, two-sided 95% (the 0.975 quantile), by degrees of freedom; above 30 the normal's 1.96 plus its
# first correction (within 0.001 of the exact value).
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
        11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093,
        20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048,
        29: 2.045, 30: 2.042}


def t975(df):
    return T975[df] if df in T975 else 1.96 + 2.4 / df


def paired_difference(rows, ref_rows):
    """(n, mean, half_width) in points of the per-seed differences rows - ref_rows over the seeds both ran; the
    half width of the 95% interval is None with fewer than 2 pairs."""
    ref = {r["seed"]: float(r["precision_at_1"]) for r in ref_rows}
    diffs = [100 * (float(r["precision_at_1"]) - ref[r["seed"]]) for r in rows if r["seed"] in ref]
    if not diffs:
        return 0, None, None
    mean = statistics.fmean(diffs)
    if len(diffs) < 2:
        return 1, mean, None
    return len(diffs), mean, t975(len(diffs) - 1) * statistics.stdev(diffs) / math.sqrt(len(diffs))


def classify(mean, half, margin=EQUIVALENCE_POINTS):
    """The one rule both wordings apply: (direction, within, lo, hi) of a difference with its 95% half width;
    direction is "better" or "worse" only when the interval excludes 0 (else None), within only when the interval
    lies inside +-margin."""
    lo, hi = mean - half, mean + half
    direction = "better" if lo > 0 else "worse" if hi < 0 else None
    return direction, -margin <= lo and hi <= margin, lo, hi


def verdict(n, mean, half, margin=EQUIVALENCE_POINTS):
    """The words a difference to fp32 may be given: "better"/"worse" only when the 95% interval excludes 0, "within
    0.3 points of fp32" only when it lies inside +-0.3, both when both hold; otherwise "not resolved at n seeds".
    Never a bare direction."""
    if n == 0:
        return "no seed run by both"
    if half is None:
        return "1 seed: no interval"
    direction, within, lo, hi = classify(mean, half, margin)
    ci = "95%% CI %+.2f..%+.2f" % (lo, hi)
    if direction:
        return "%s (%s)%s" % (direction, ci, ", within %.1f points" % margin if within else "")
    if within:
        return "within %.1f points of fp32 (%s)" % (margin, ci)
    return "not resolved at %d seeds (%s)" % (n, ci)


def ci_text(n, mean, half):
    return "%+.2f ± %.2f" % (mean, half) if half is not None else ("%+.2f" % mean if n else "")


def read(path):
    meta, header, rows = {}, None, []
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("#"):
                if ": " in line:
                    k, v = line[2:].split(": ", 1)
                    if k == "resumed" and k in meta:  # every resumption is said, in order
                        meta[k] += "; resumed again " + v
                    else:
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
             meta.get("command", "?"), path)) + (" Resumed %s." % meta["resumed"] if "resumed" in meta else "") + (
                 " Binary: %s." % meta["version"] if "version" in meta else "") + (
                 " Peer: %s." % meta["peer"] if "peer" in meta else "")


def mb(b):
    return "%.2f MB" % (b / 1e6)


def fp32_mean(rows, net, dataset, workers=None, steps=None):
    acc = [float(r["precision_at_1"]) for r in rows
           if r["status"] == "ok" and r["variant"] == "fp32" and r["net"] == net and r["dataset"] == dataset and
           (workers is None or r["workers"] == str(workers)) and (steps is None or r["steps"] == str(steps))]
    return (statistics.fmean(acc), len(acc)) if acc else (None, 0)


def fp32_bytes_like(g, ref):
    """fp32's bytes to set a variant's against, like for like: for the hierarchical exchange (its bytes are those
    between the machines) fp32's bytes between the same machines (the fp32 runs' communicator bytes between the
    processes, each process an emulated machine); for a flat exchange fp32's ring over all the workers. Returns
    (bytes, a note for the table)."""
    if g[0].get("exchange", "").startswith("hierarchical"):
        return (statistics.fmean(float(r["wire_bytes_run"]) for r in ref),
                " (against fp32's between the same machines)")
    return statistics.fmean(float(r["bytes_run"]) for r in ref), ""


def render_accuracy(path, meta, rows):
    return "\n".join([provenance(path, meta), ""] + accuracy_table(rows))


def grouped(rows, key):
    """(groups, order): the rows by key(row), and the keys in the order first seen."""
    groups, order = {}, []
    for r in rows:
        k = key(r)
        if k not in groups:
            groups[k] = []
            order.append(k)
        groups[k].append(r)
    return groups, order


def unique(values):
    """The values without repeats, in the order first seen."""
    out = []
    for v in values:
        if v not in out:
            out.append(v)
    return out


def accuracy_table(rows):
    """The accuracy table's lines (scripts/check_readme_results.py renders README blocks with it)."""
    out = []
    ok = [r for r in rows if r["status"] == "ok"]
    groups, order = grouped(ok, lambda r: (r["net"], r["dataset"], int(r["workers"]), r["layout"], r["variant"],
                                           r["steps"]))
    variants = unique(k[4] for k in order)
    if "fp32" in variants:
        variants.remove("fp32")
        variants.insert(0, "fp32")
    order.sort(key=lambda k: (k[0], k[1], k[2], k[5], variants.index(k[4])))
    out.append("| net | dataset | workers (processes x workers) | steps | variant | exchange | seeds | test accuracy (mean ± sd) "
               "| gap to fp32 (points) | paired by seed (points, 95% CI) | verdict | bytes per worker, run | vs fp32's "
               "| bytes per step and worker | averaged-gradient error (non-zero codes) | train s (mean) |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for k in order:
        net, dataset, workers, layout, variant, steps = k
        g = groups[k]
        acc = [float(r["precision_at_1"]) for r in g]
        mean = statistics.fmean(acc)
        sd = statistics.stdev(acc) if len(acc) > 1 else float("nan")
        ref = groups.get((net, dataset, workers, layout, "fp32", steps))
        gap = paired = said = ""
        if ref and variant != "fp32":
            gap = "%+.2f" % (100 * (mean - statistics.fmean(float(r["precision_at_1"]) for r in ref)))
            n, d, half = paired_difference(g, ref)
            paired, said = ci_text(n, d, half), verdict(n, d, half)
        run_bytes = statistics.fmean(float(r["bytes_run"]) for r in g)
        if ref:
            fp32_bytes, how = fp32_bytes_like(g, ref)
        else:
            fp32_bytes, how = statistics.fmean(float(r["fp32_bytes_run"]) for r in g), " (fp32 by the byte model)"
        frac = run_bytes / fp32_bytes if fp32_bytes else float("nan")
        ratio = "%.4f (1/%.1f)%s" % (frac, 1 / frac, how) if frac > 0 else "-"
        seeds = ",".join(sorted((r["seed"] for r in g), key=int))
        sd_text = "%.4f" % sd if not math.isnan(sd) else "(1 seed)"
        probed = [r for r in g if r.get("quant_error", "-") not in ("", "-")]
        probe = "%.3f (%.1f%%)" % (statistics.fmean(float(r["quant_error"]) for r in probed),
                                   100 * statistics.fmean(float(r["nonzero_codes"]) for r in probed)) if probed else ""
        out.append("| %s | %s | %d (%s) | %s | %s | %s | %s | %.4f ± %s | %s | %s | %s | %s | %s | %s | %s | %.1f |" % (
            net, dataset, workers, layout.replace("x", " x "), steps, variant, g[0]["exchange"], seeds, mean, sd_text, gap,
            paired, said, mb(run_bytes), ratio, mb(statistics.fmean(float(r["bytes_per_step"]) for r in g)), probe,
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
    seeds (n), its paired difference to fp32 in points with the 95% interval's half width and the verdict's word,
    then the bytes per worker of each variant as a fraction of fp32's."""
    ok = [r for r in rows if r["status"] == "ok"]
    variants = unique(r["variant"] for r in ok)
    cell, order = grouped(ok, lambda r: (r["net"], r["dataset"], int(r["workers"]), r["layout"], r["steps"],
                                         r["variant"]))
    keys = unique(k[:5] for k in order)
    if "fp32" in variants:
        variants.remove("fp32")
        variants.insert(0, "fp32")
    keys.sort(key=lambda k: (k[0], k[1], k[2], k[4]))
    out = ["| net, dataset | workers | steps | " + " | ".join(variants) + " |",
           "|---|---|---|" + "---|" * len(variants)]
    for k in keys:
        ref = cell.get(k + ("fp32",))
        ref_mean = statistics.fmean(float(r["precision_at_1"]) for r in ref) if ref else None
        cells = []
        for v in variants:
            g = cell.get(k + (v,))
            if not g:
                cells.append("")
                continue
            acc = [float(r["precision_at_1"]) for r in g]
            mean = statistics.fmean(acc)
            text = "%.4f ± %s, n=%d" % (mean, "%.4f" % statistics.stdev(acc) if len(acc) > 1 else "-", len(acc))
            if v != "fp32" and ref_mean is not None:
                like, _ = fp32_bytes_like(g, ref)
                frac = statistics.fmean(float(r["bytes_run"]) for r in g) / like if like else float("nan")
                n, d, half = paired_difference(g, ref)
                text += " (**%s**: %s; 1/%.1f of the bytes)" % (ci_text(n, d, half), short_verdict(n, d, half),
                                                                1 / frac)
            cells.append(text)
        out.append("| %s, %s | %d | %s | %s |" % (k[0], k[1], k[2], k[4], " | ".join(cells)))
    return out


def short_verdict(n, mean, half, margin=EQUIVALENCE_POINTS):
    """verdict's word alone: better, worse, within 0.3, not resolved."""
    if half is None:
        return "no interval"
    direction, within, _, _ = classify(mean, half, margin)
    if direction:
        return direction + (", within %.1f" % margin if within else "")
    return "within %.1f" % margin if within else "not resolved"


def accuracy_verdicts(rows):
    """One sentence per (net, dataset, workers, variant) against fp32: what the README's accuracy prose may say."""
    ok = [r for r in rows if r["status"] == "ok"]
    cells, order = {}, []
    for r in ok:
        k = (r["net"], r["dataset"], int(r["workers"]), r["steps"], r["variant"])
        if k not in cells:
            cells[k] = []
            order.append(k)
        cells[k].append(r)
    out = []
    for k in sorted(order, key=lambda k: (k[0], k[1], k[2], k[3], order.index(k))):
        net, dataset, workers, steps, variant = k
        ref = cells.get((net, dataset, workers, steps, "fp32"))
        if variant == "fp32" or not ref:
            continue
        n, d, half = paired_difference(cells[k], ref)
        out.append("- %s, %s, %d workers, %s steps, %s against fp32: %s; mean paired difference %s points over %d "
                   "seeds." % (net, dataset, workers, steps, variant, verdict(n, d, half), "%+.2f" % d if n else "-",
                               n))
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
    groups, order = grouped(rows, lambda r: (r["rate"], int(r["machines"]), r["system"]))
    systems = unique(k[2] for k in order)
    rates = unique(k[0] for k in order)
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


def first_reaching(curve, target):
    """(seconds, step) of the first evaluation of a row's curve ("step:seconds:accuracy ...") at or above target;
    (inf, inf) when none is."""
    for point in curve.split():
        parts = point.split(":")
        if len(parts) == 3 and float(parts[2]) >= target:
            return float(parts[1]), float(parts[0])
    return math.inf, math.inf


def fp32_reference(meta):
    """fp32's mean accuracy the file's target was taken from ("target: 0.895033 (fp32's mean 0.898033 over ...")."""
    text = meta.get("target", "")
    marker = "fp32's mean "
    if marker not in text:
        return None
    return float(text.split(marker, 1)[1].split()[0])


TTA_MARGINS = (0.1, 0.2, 0.3)


def tta_margins(meta, rows, margins=TTA_MARGINS):
    """Time to accuracy at several targets from the same curves: fp32's mean minus each margin (points); per (link,
    machines, system) the median seconds over the repetitions (a repetition that never reached the target counts
    as infinitely long), the repetitions that reached it, and the median against our fp32's."""
    ref = fp32_reference(meta)
    if ref is None:
        return ["(this file's target names no fp32 mean: no other margin can be taken from its curves)"]
    groups, order = grouped([r for r in rows if r["status"] == "ok" and r.get("curve")],
                            lambda r: (r["rate"], int(r["machines"]), r["system"]))
    out = ["fp32's mean: %.6f; a target is that minus the margin (points); a cell: median seconds to the target "
           "(repetitions that reached it of all; against our fp32's median)." % ref, "",
           "| link | machines | system | " + " | ".join("-%.1f points (%.4f)" % (m, ref - m / 100) for m in margins)
           + " |", "|---|---|---|" + "---|" * len(margins)]

    def median_seconds(g, target):
        return median_inf([first_reaching(r["curve"], target)[0] for r in g])

    for k in order:
        rate, machines, system = k
        g = groups[k]
        cells = []
        for m in margins:
            target = ref - m / 100
            t = median_seconds(g, target)
            reached = sum(1 for r in g if not math.isinf(first_reaching(r["curve"], target)[0]))
            fp32 = groups.get((rate, machines, "ours fp32"))
            vs = ""
            if fp32 and system != "ours fp32":
                tf = median_seconds(fp32, target)
                vs = "; -" if math.isinf(t) or math.isinf(tf) or tf <= 0 else "; %.2fx" % (t / tf)
            cells.append("%s (%d of %d%s)" % ("not reached" if math.isinf(t) else "%.1f s" % t, reached, len(g), vs))
        out.append("| %s | %d | %s | %s |" % (rate, machines, system, " | ".join(cells)))
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
