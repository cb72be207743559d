#!/usr/bin/env python3
"""The renderers of results files (bench/results/*.tsv, format: bench/lib/results.sh): for each kind, its views,
each a function (header, rows) -> the lines a README block holds after its provenance line. What
scripts/check_readme_results.py checks the blocks against; the accuracy and time-to-accuracy kinds come from
render_accuracy.py beside this file. A table that lacks a column a view needs raises Refused naming it."""
import os
import re
import statistics
import sys

MIN_REPS = 3  # a speed comparison from fewer repetitions is not a figure to quote


class Refused(Exception):
    """A results file or block the check refuses; the message is one line."""


def need(rows, *cols):
    for c in cols:
        if rows and c not in rows[0]:
            raise Refused("the table has no column '%s'" % c)


def num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def med(values):
    v = [x for x in values if x is not None]
    return statistics.median(v) if v else None  # the middle value, or the mean of the middle two


def reps_of(rows):
    return len({r.get("rep") for r in rows})


def fmt_s(x):
    return "%.3f" % x


def fmt_rate(x):
    return "%.1f" % x if x >= 10 else "%.2f" % x


def mb(x):
    return "%.2f MB" % (x / 1e6)


def fewer_reps_note(rows):
    n = reps_of(rows)
    return [] if n >= MIN_REPS else ["(%d repetition%s: fewer than %d, not a figure to quote)" % (n, "" if n == 1 else "s",
                                                                                               MIN_REPS)]


# ---- renderers: kind -> view -> function(header, rows) -> lines ---------------------------------------------
def link_cells(rows):
    """{(rate, model, system, method): step rows}, {(model, system): compute rows}."""
    need(rows, "rep", "rate", "model", "system", "mode", "method", "batch_per_worker", "median_s", "bytes_trainer",
         "wire_rx_per_step", "status", "note")
    steps, compute = {}, {}
    for r in rows:
        if r["mode"] == "compute":
            compute.setdefault((r["model"], r["system"]), []).append(r)
        else:
            steps.setdefault((r["rate"], r["model"], r["system"], r["method"]), []).append(r)
    return steps, compute


def ok_median(rs, field="median_s"):
    return med(num(r[field]) for r in rs if r["status"] == "ok")


def paired_overhead(step_rows, compute_rows):
    """Link overhead, the one definition of every table (link and scale): the median over repetitions of the step
    minus the compute-only step of the same repetition (interleaved runs, close in time: a drift of the machine
    cancels within a pair); None without an ok pair."""
    compute = {r["rep"]: num(r["median_s"]) for r in compute_rows if r["status"] == "ok"}
    return med(num(r["median_s"]) - compute[r["rep"]] for r in step_rows if r["status"] == "ok" and r["rep"] in compute)


def why_not(rs):
    """The reason of a cell with no ok run: the first failed or missing row's status and note."""
    bad = [r for r in rs if r["status"] != "ok"]
    if not bad:
        return "no run"
    return "%s (%d of %d runs): %s" % (bad[0]["status"], len(bad), len(rs), bad[0]["note"] or "see the log")


SYSTEM = {"ours": "terngrad", "ddp": "PyTorch DDP"}
METHOD = {"terngrad": "TernGrad", "fp32": "fp32", "fp16": "fp16", "powersgd": "PowerSGD"}


def link_table(header, rows):
    steps, compute = link_cells(rows)
    out = ["| rate | model | system | method | batch/worker | step s (median; runs: min-max) | compute-only s "
           "| link overhead s | overhead vs our fp32 | bytes/step, trainer | bytes/step on the wire (into rank 0) |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    overhead = {}
    for key, rs in steps.items():
        rate, model, system, method = key
        o = paired_overhead(rs, compute.get((model, system), []))
        if o is not None:
            overhead[key] = o
    for key, rs in steps.items():
        rate, model, system, method = key
        batch = rs[0]["batch_per_worker"]
        crs = compute.get((model, system), [])
        c = ok_median(crs)
        c_cell = fmt_s(c) if c is not None else "n/a: " + why_not(crs)
        standin = [r["note"] for r in crs if r["note"].startswith("stand-in")]
        if c is not None and standin:
            c_cell += " (%s)" % standin[0]
        t = ok_median(rs)
        if t is None:
            out.append("| %s | %s | %s | %s | %s | %s | %s | n/a | n/a | | |" % (rate, model, SYSTEM[system],
                                                                             METHOD[method], batch, why_not(rs), c_cell))
            continue
        times = sorted(num(r["median_s"]) for r in rs if r["status"] == "ok")
        step_cell = "%s (%d: %s-%s)" % (fmt_s(t), len(times), fmt_s(times[0]), fmt_s(times[-1]))
        if len(times) < len(rs):
            step_cell += " (%d not ok)" % (len(rs) - len(times))
        o = overhead.get(key)
        ref = overhead.get((rate, model, "ours", "fp32"))
        ratio = "%.2fx" % (o / ref) if o is not None and o > 0 and ref and ref > 0 else "n/a (an overhead <= 0)"
        trainer = mb(ok_median(rs, "bytes_trainer")) if system == "ours" else "-"
        wire = ok_median(rs, "wire_rx_per_step")
        out.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            rate, model, SYSTEM[system], METHOD[method], batch, step_cell, c_cell,
            fmt_s(o) if o is not None else "n/a", ratio, trainer, mb(wire) if wire is not None else "-"))
    return out + fewer_reps_note(rows)


def fewer_or_more(ours, theirs, whose, digits="%.2f"):
    """ours against theirs (both > 0) as "Nx less than X" or "Nx more than X" with N >= 1: a ratio below 1 is never
    written as "less" (0.69x less meant 1.46x more)."""
    if ours <= theirs:
        return (digits + "x less than %s") % (theirs / ours, whose)
    return (digits + "x more than %s") % (ours / theirs, whose)


def link_headline(header, rows):
    steps, compute = link_cells(rows)
    out = []
    rates = [r for r in dict.fromkeys(k[0] for k in steps) if r != "none"]
    models = list(dict.fromkeys(k[1] for k in steps))
    for rate in rates:
        for model in models:
            def cell(system, method):
                rs, crs = steps.get((rate, model, system, method), []), compute.get((model, system), [])
                t, c, o = ok_median(rs), ok_median(crs), paired_overhead(rs, crs)
                return (t, c, o) if t is not None and c is not None and o is not None else None
            tern, ours32, ddp32 = cell("ours", "terngrad"), cell("ours", "fp32"), cell("ddp", "fp32")
            if not tern:
                continue
            parts = ["TernGrad %s s" % fmt_s(tern[2])]
            ends = ["%s s" % fmt_s(tern[0])]
            less, faster = [], []
            for name, c in (("our fp32", ours32), ("DDP fp32", ddp32)):
                if not c:
                    why = why_not(steps.get((rate, model, "ddp" if "DDP" in name else "ours", "fp32"), []))
                    parts.append("%s n/a (%s)" % (name, why))
                    continue
                parts.append("%s %s s" % (name, fmt_s(c[2])))
                ends.append("%s %s s" % (name, fmt_s(c[0])))
                less.append(fewer_or_more(tern[2], c[2], "%s's" % name) if tern[2] > 0 and c[2] > 0 else
                            "not comparable with %s's (an overhead <= 0)" % name)
                faster.append("%.2fx %s" % (c[0] / tern[0], name))
            line = ("**%s at %s, 2 workers: link overhead (median over repetitions of step - the same repetition's "
                    "compute-only step) %s" % (model, rate, ", ".join(parts)))
            line += ("; TernGrad's is %s**" % " and ".join(less)) if less else "**"
            line += " (end to end: TernGrad %s%s)." % (", ".join(ends), "; " + ", ".join(faster) if faster else "")
            out.append(line)
    return (out or ["(no TernGrad row with its compute-only step in this file)"]) + fewer_reps_note(rows)


def no_ok(rs):
    """The cell of a figure with no ok run: its runs' status (failed, missing), never empty."""
    statuses = sorted({r["status"] for r in rs if r["status"] != "ok"})
    return ", ".join(statuses) if statuses else "no run"


def inproc_table(header, rows):
    need(rows, "rep", "net", "batch", "method", "s_per_step", "status")
    phases = [c for c in rows[0] if c.endswith("_ms")] if rows else []
    out = ["| model | total batch | fp32 s/step | TernGrad s/step | TernGrad / fp32 | TernGrad phases, ms/step (%s) |"
           % ", ".join(p[:-3] for p in phases), "|---|---|---|---|---|---|"]
    for net in dict.fromkeys(r["net"] for r in rows):
        rs = [r for r in rows if r["net"] == net]
        f = med(num(r["s_per_step"]) for r in rs if r["method"] == "fp32" and r["status"] == "ok")
        t = med(num(r["s_per_step"]) for r in rs if r["method"] == "terngrad" and r["status"] == "ok")
        ph = ", ".join("%.1f" % med(num(r[p]) for r in rs if r["method"] == "terngrad" and r["status"] == "ok")
                       if t is not None else "n/a" for p in phases)
        out.append("| %s | %s | %s | %s | %s | %s |" % (
            net, rs[0]["batch"], "%.4f" % f if f is not None else no_ok(r for r in rs if r["method"] == "fp32"),
            "%.4f" % t if t is not None else no_ok(r for r in rs if r["method"] == "terngrad"),
            "%.2fx" % (t / f) if f and t else "n/a", ph))
    return out + fewer_reps_note(rows)


ELASTIC_CASES = {
    "killed": "3 machines, one's process killed (kill -9)",
    "link": "3 machines, rank 0's link cut (`ip link set down`)",
    "stopped": "3 machines, one's processes stopped (SIGSTOP), continued later",
    "grow": "2 machines, a third appears (scale-up at a step boundary)",
}


def elastic_table(header, rows):
    need(rows, "rep", "case", "loss_to_step_s", "from_step", "steps_lost", "equal_to_by_hand")
    out = ["| case | loss to the first step on the new layout, s (median, range) | steps lost (median) "
           "| final checkpoint = by-hand resume |", "|---|---|---|---|"]
    for case in dict.fromkeys(r["case"] for r in rows):
        rs = [r for r in rows if r["case"] == case]
        secs = [num(r["loss_to_step_s"]) for r in rs]
        lost = [num(r["steps_lost"]) for r in rs if r["steps_lost"] not in ("", "-")]
        out.append("| %s | %.1f (%.1f-%.1f) | %s | %d of %d |" % (
            ELASTIC_CASES.get(case, case), med(secs), min(secs), max(secs),
            "%.0f" % med(lost) if lost else "n/a", sum(r["equal_to_by_hand"] == "yes" for r in rs), len(rs)))
    return out + fewer_reps_note(rows)


BUSY_POLICIES = {
    ("idle", "default"): "idle machine, OpenMP's default (what terngrad-train keeps there)",
    ("idle", "passive"): "idle machine, OMP_WAIT_POLICY=passive forced",
    ("busy", "default"): "one busy process beside, OpenMP's default (before)",
    ("busy", "auto"): "one busy process beside, terngrad-train as it is (restarts itself passive)",
}


def busy_machine_table(header, rows):
    need(rows, "rep", "machine", "policy", "examples_per_sec")
    base = med(num(r["examples_per_sec"]) for r in rows if (r["machine"], r["policy"]) == ("idle", "default"))
    out = ["| LeNet, --threads 2 | examples/sec, median (range) | vs idle, default |", "|---|---|---|"]
    for key in dict.fromkeys((r["machine"], r["policy"]) for r in rows):
        v = [num(r["examples_per_sec"]) for r in rows if (r["machine"], r["policy"]) == key]
        out.append("| %s | %.0f (%.0f-%.0f) | %s |" % (BUSY_POLICIES.get(key, " ".join(key)), med(v), min(v), max(v),
                                                      "%.2fx" % (med(v) / base) if base else "n/a"))
    return out + fewer_reps_note(rows)


def train_step_table(header, rows):
    need(rows, "rep", "net", "threads", "framework", "images_per_sec", "status")
    out = ["| network | threads | terngrad images/s | PyTorch images/s | terngrad / PyTorch | runs (ok) |",
           "|---|---|---|---|---|---|"]
    for key in dict.fromkeys((r["net"], r["threads"]) for r in rows):
        rs = [r for r in rows if (r["net"], r["threads"]) == key]
        a = [num(r["images_per_sec"]) for r in rs if r["framework"] == "terngrad" and r["status"] == "ok"]
        b = [num(r["images_per_sec"]) for r in rs if r["framework"] == "pytorch" and r["status"] == "ok"]
        ma, mb_ = med(a), med(b)
        out.append("| %s | %s | %s | %s | %s | %d/%d |" % (
            key[0], key[1], fmt_rate(ma) if ma else no_ok(r for r in rs if r["framework"] == "terngrad"),
            fmt_rate(mb_) if mb_ else no_ok(r for r in rs if r["framework"] == "pytorch"),
            "%.2fx" % (ma / mb_) if ma and mb_ else "n/a", len(a), len(b)))
    return out + fewer_reps_note(rows)


def precision_table(header, rows):
    need(rows, "rep", "net", "batch", "impl", "precision", "images_per_sec", "status")
    out = ["| net | batch | ours fp32 | ours bf16 | bf16/fp32 | torch fp32 | torch bf16 | torch bf16/fp32 "
           "| ours bf16 / torch bf16 |", "|---|---|---|---|---|---|---|---|---|"]
    for net in dict.fromkeys(r["net"] for r in rows):
        rs = [r for r in rows if r["net"] == net]
        m = {(i, p): med(num(r["images_per_sec"]) for r in rs if (r["impl"], r["precision"]) == (i, p)
                         and r["status"] == "ok") for i in ("ours", "torch") for p in ("fp32", "bf16")}
        bad = {(i, p): no_ok(r for r in rs if (r["impl"], r["precision"]) == (i, p)) for (i, p) in m}
        cell = lambda k: fmt_rate(m[k]) if m[k] else bad[k]  # noqa: E731
        ratio = lambda a, b: "%.2f" % (m[a] / m[b]) if m[a] and m[b] else "n/a"  # noqa: E731
        out.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            net, rs[0]["batch"], cell(("ours", "fp32")), cell(("ours", "bf16")), ratio(("ours", "bf16"), ("ours", "fp32")),
            cell(("torch", "fp32")), cell(("torch", "bf16")), ratio(("torch", "bf16"), ("torch", "fp32")),
            ratio(("ours", "bf16"), ("torch", "bf16"))))
    return out + fewer_reps_note(rows)


def memory_table(header, rows):
    """bench/memory_bench.sh: peak resident memory at two batches, the per-image slope, the step time, against
    PyTorch (medians over the repetitions)."""
    need(rows, "rep", "net", "batch", "impl", "setting", "peak_rss_bytes", "step_s", "status")
    out = ["| net | setting | peak at batch b1 | peak at batch b2 | per extra image | per image / PyTorch's "
           "| peak / PyTorch's (b2) | step at b2 | step / PyTorch's (b2) |", "|---|---|---|---|---|---|---|---|---|"]
    for net in dict.fromkeys(r["net"] for r in rows):
        rs = [r for r in rows if r["net"] == net and r["status"] == "ok"]
        batches = sorted({int(r["batch"]) for r in rows if r["net"] == net})
        if len(batches) != 2:
            raise Refused("net %s: %d batch sizes, the slope needs 2" % (net, len(batches)))
        b1, b2 = batches
        keys = list(dict.fromkeys((r["impl"], r["setting"]) for r in rows if r["net"] == net))

        def m(key, b, field):
            return med(num(r[field]) for r in rs if (r["impl"], r["setting"]) == key and int(r["batch"]) == b)
        torch = next((k for k in keys if k[0] == "torch"), None)
        slope = lambda k: (m(k, b2, "peak_rss_bytes") - m(k, b1, "peak_rss_bytes")) / (b2 - b1)  # noqa: E731
        ok = lambda k: all(m(k, b, "peak_rss_bytes") is not None for b in (b1, b2))  # noqa: E731
        version = re.search(r"torch: ([^;]+)", header.get("threads", ""))
        names = {"torch": "PyTorch %s" % (version.group(1) if version else ""), "base": "before (base build)"}
        for k in keys:
            name = names.get(k[0], "ours, liveness + recompute %s" % k[1] if k[1] in ("bn_relu", "blocks")
                             else "ours, %s" % k[1])
            if not ok(k):
                out.append("| %s (%d, %d) | %s | %s |  |  |  |  |  |  |" % (net, b1, b2, name,
                                                                         no_ok(r for r in rows if r["net"] == net and (r["impl"], r["setting"]) == k)))
                continue
            t_ok = torch is not None and ok(torch)
            step, tstep = m(k, b2, "step_s"), (m(torch, b2, "step_s") if t_ok else None)
            out.append("| %s (%d, %d) | %s | %.2f GB | %.2f GB | %.1f MB | %s | %s | %s | %s |" % (
                net, b1, b2, name, m(k, b1, "peak_rss_bytes") / 1e9, m(k, b2, "peak_rss_bytes") / 1e9,
                slope(k) / 1e6, "%.2fx" % (slope(k) / slope(torch)) if t_ok and slope(torch) > 0 else "n/a",
                "%.2fx" % (m(k, b2, "peak_rss_bytes") / m(torch, b2, "peak_rss_bytes")) if t_ok else "n/a",
                "%.3f s" % step if step else "n/a", "%.2fx" % (step / tstep) if step and tstep else "n/a"))
    return out + fewer_reps_note(rows)


def memory_summary(header, rows):
    """bench/memory_bench.sh, one row per network: the memory per extra image of each setting and its ratio to
    PyTorch's, the peak at the larger batch and the step time, ours by liveness against PyTorch."""
    need(rows, "rep", "net", "batch", "impl", "setting", "peak_rss_bytes", "step_s", "status")
    cols = [("torch", "fp32"), ("base", "default"), ("ours", "liveness"), ("ours", "bn_relu"), ("ours", "blocks")]
    out = ["| net (batches) | per extra image: PyTorch | before | liveness | + recompute bn_relu | + recompute blocks "
           "| peak, liveness / PyTorch | step, liveness / PyTorch |", "|---|---|---|---|---|---|---|---|"]
    for net in dict.fromkeys(r["net"] for r in rows):
        rs = [r for r in rows if r["net"] == net and r["status"] == "ok"]
        b1, b2 = sorted({int(r["batch"]) for r in rows if r["net"] == net})

        def m(key, b, field):
            return med(num(r[field]) for r in rs if (r["impl"], r["setting"]) == key and int(r["batch"]) == b)

        def slope(key):
            a, b = m(key, b1, "peak_rss_bytes"), m(key, b2, "peak_rss_bytes")
            return (b - a) / (b2 - b1) if a is not None and b is not None else None
        torch = slope(cols[0])
        cells = []
        for k in cols:
            s = slope(k)
            if s is None:
                cells.append("")
            elif k == cols[0] or not torch:
                cells.append("%.1f MB" % (s / 1e6))
            else:
                cells.append("%.1f MB (%.2fx)" % (s / 1e6, s / torch))
        ours, theirs = ("ours", "liveness"), cols[0]
        peak = [m(k, b2, "peak_rss_bytes") for k in (ours, theirs)]
        step = [m(k, b2, "step_s") for k in (ours, theirs)]
        out.append("| %s (%d, %d) | %s | %s | %s |" % (
            net, b1, b2, " | ".join(cells), "%.2fx" % (peak[0] / peak[1]) if all(peak) else "n/a",
            "%.2fx" % (step[0] / step[1]) if all(step) else "n/a"))
    return out + fewer_reps_note(rows)


def memory_steps(header, rows):
    """bench/memory_bench.sh -S liveness,base: the step time of ours against the build before (-B), per network and
    batch: medians, their ratio, and the range of the per-repetition ratios."""
    need(rows, "rep", "net", "batch", "impl", "setting", "step_s", "status")
    out = ["| net | batch | ours, liveness: step (median) | before: step (median) | ours / before | per-repetition "
           "ratios (min-max) | repetitions |", "|---|---|---|---|---|---|---|"]
    for key in dict.fromkeys((r["net"], r["batch"]) for r in rows):
        rs = [r for r in rows if (r["net"], r["batch"]) == key and r["status"] == "ok"]
        a = {r["rep"]: num(r["step_s"]) for r in rs if (r["impl"], r["setting"]) == ("ours", "liveness")}
        b = {r["rep"]: num(r["step_s"]) for r in rs if r["impl"] == "base"}
        pairs = [a[k] / b[k] for k in a if k in b and a[k] and b[k]]
        ma, mb_ = med(a.values()), med(b.values())
        out.append("| %s | %s | %s | %s | %s | %s | %d |" % (
            key[0], key[1], "%.3f s" % ma if ma else "n/a", "%.3f s" % mb_ if mb_ else "n/a",
            "%.3f" % (ma / mb_) if ma and mb_ else "n/a",
            "%.3f-%.3f" % (min(pairs), max(pairs)) if pairs else "n/a", len(pairs)))
    return out + fewer_reps_note(rows)


def memory_plan_table(header, rows):
    """bench/memory_plan.sh: planned bytes per device (terngrad-train --plan_memory) and the largest batch that
    fits in the budget."""
    need(rows, "net", "device", "precision", "batch", "recompute", "planned_bytes", "activations_bytes",
         "budget", "largest_batch")
    out = ["| net | device | precision | batch | --recompute | planned per device | of which activations "
           "| largest batch in %s |" % rows[0]["budget"], "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append("| %s | %s | %s | %s | %s | %.1f GiB | %.1f GiB | %s |" % (
            r["net"], r["device"], r["precision"], r["batch"], r["recompute"], num(r["planned_bytes"]) / 2**30,
            num(r["activations_bytes"]) / 2**30, r["largest_batch"]))
    return out


def demo_table(header, rows):
    need(rows, "run", "steps", "test_accuracy", "wire_bytes_per_worker", "fp32_wire_bytes_per_worker",
         "examples_per_sec")
    out = ["| run (%s steps) | test accuracy (precision @ 1, EMA weights) | gradient bytes on the wire per worker, "
           "whole run (the communicator's count) | examples/sec (this one run) |" % rows[0]["steps"],
           "|---|---|---|---|"]
    for r in rows:
        wire, fp32 = num(r["wire_bytes_per_worker"]), num(r["fp32_wire_bytes_per_worker"])
        less = " (%s)" % fewer_or_more(wire, fp32, "fp32", "%.1f") if wire and fp32 and r["run"] != "fp32" else ""
        out.append("| %s | %s | %s%s | %s |" % (r["run"], r["test_accuracy"], mb(wire) if wire is not None else "n/a",
                                               less, r["examples_per_sec"]))
    return out


def gbench_table(header, rows):
    need(rows, "name", "run_type", "aggregate", "real_time", "time_unit")
    aggregated = any(r["run_type"] == "aggregate" for r in rows)
    keep = [r for r in rows if (r["aggregate"] == "median" if aggregated else r["run_type"] == "iteration")]
    counters = [c for c in (rows[0] if rows else {}) if c.startswith("counter:")]
    out = ["| benchmark | %s time | %s |" % ("median" if aggregated else "", " | ".join(c[8:] for c in counters)),
           "|---|---|%s" % ("---|" * len(counters))]
    for r in keep:
        vals = [("%.4g" % num(r[c])) if num(r[c]) is not None else "" for c in counters]
        out.append("| %s | %.4g %s | %s |" % (r["name"], num(r["real_time"]), r["time_unit"], " | ".join(vals)))
    if header.get("interleaved") != "random":
        out.append("(the repetitions of each benchmark ran back to back, not interleaved with the others': compare a "
                   "benchmark's rows with care; bench/gbench_results.sh now interleaves them)")
    return out


def scale_cells(rows):
    """{(net, rate, layout): {exchange: rows}} in the file's order."""
    need(rows, "rep", "net", "exchange", "nodes", "procs_per_node", "replicas", "rate", "step_s", "compute_s",
         "overhead_s", "intra_node_bytes", "inter_node_bytes", "machine1_link_bytes_per_step", "status", "note")
    cells = {}
    for r in rows:
        key = (r["net"], r["rate"], "%s x %s x %s" % (r["nodes"], r["procs_per_node"], r["replicas"]))
        cells.setdefault(key, {}).setdefault(r["exchange"], []).append(r)
    return cells


SCALE_NAMES = {"none": "compute only (ours)", "fp32": "fp32", "fp16": "fp16", "allgather2": "TernGrad allgather2",
               "allgather2_ef": "TernGrad allgather2 + error feedback",
               "allgather2_df": "TernGrad allgather2, decoded before the update",
               "allgather2_serial": "TernGrad allgather2, after backward", "allreduce8": "TernGrad allreduce8",
               "hierarchical": "TernGrad hierarchical", "hierarchical16": "TernGrad hierarchical, fp16 in the node",
               "ddp_none": "compute only (PyTorch)", "ddp_fp32": "PyTorch DDP fp32"}


def cpu_cell(rows):
    """"codec + comm": the step's scalers + encode + decode ms (compute thread) and the collectives' CPU ms (the
    comm_cpu_ms column; files measured before it have none), medians over the repetitions; blank for rows
    without phase times (DDP, compute only)."""
    codec = [sum(num(r.get(c)) or 0.0 for c in ("scalers_ms", "encode_ms", "decode_ms")) for r in rows
             if r.get("status") == "ok" and num(r.get("encode_ms")) is not None]
    comm = [num(r.get("comm_cpu_ms")) for r in rows if r.get("status") == "ok" and num(r.get("comm_cpu_ms")) is not None]
    if not codec or max(codec) == 0 and not any(comm):
        return ""
    text = "%.0f" % statistics.median(codec)
    return text + (" + %.0f" % statistics.median(comm) if comm else "")


def scale_table(header, rows):
    """Per net, rate and layout (machines x processes x CPU replicas): every exchange's median s/step, the same
    system's compute-only step, the link overhead (their difference) as a multiple of the compute-only step and
    against that system's fp32 overhead, and the bytes per step inside and between nodes."""
    out = fewer_reps_note(rows)
    out += ["| net | link | machines x processes x replicas | exchange | s/step | compute-only | link overhead | "
            "overhead / compute | overhead / fp32's | codec + comm CPU ms | MB/step in node | MB/step between nodes | "
            "machine-1 link MB/step |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (net, rate, layout), by in scale_cells(rows).items():
        fp32 = {"ours": ok_median(by.get("fp32", []), "overhead_s"),
                "ddp": ok_median(by.get("ddp_fp32", []), "overhead_s")}
        for ex, rs in by.items():
            step, comp, over = ok_median(rs, "step_s"), ok_median(rs, "compute_s"), ok_median(rs, "overhead_s")
            name = SCALE_NAMES.get(ex, ex)
            if step is None:
                out.append("| %s | %s | %s | %s | %s | | | | | | | | |" % (net, rate, layout, name, why_not(rs)))
                continue
            base = fp32["ddp" if ex.startswith("ddp") else "ours"]
            cells = [fmt_s(step), fmt_s(comp) if comp else "",
                     fmt_s(over) if over is not None and ex not in ("none", "ddp_none") else "",
                     "%.2fx" % (over / comp) if over is not None and comp and ex not in ("none", "ddp_none") else "",
                     "%.2f" % (over / base) if over is not None and base and ex not in ("none", "ddp_none", "fp32",
                                                                                         "ddp_fp32") else "",
                     cpu_cell(rs),
                     mb(ok_median(rs, "intra_node_bytes")) if ok_median(rs, "intra_node_bytes") is not None else "",
                     mb(ok_median(rs, "inter_node_bytes")) if ok_median(rs, "inter_node_bytes") is not None else "",
                     mb(ok_median(rs, "machine1_link_bytes_per_step"))]
            out.append("| %s | %s | %s | %s | %s |" % (net, rate, layout, name, " | ".join(cells)))
    return out


PLACEMENTS = {"alone-pinned": "one process, pinned to core 0", "alone-unpinned": "one process, unpinned",
              "two-pinned": "two processes, each pinned to its own core", "two-unpinned": "two processes, unpinned",
              "two-on-core0": "two processes, both pinned to core 0"}


def placement_table(header, rows):
    """Per placement: the median s/step over its processes and repetitions, and the scheduler's counts per run
    (medians): migrations between cores, context switches, involuntary switches."""
    need(rows, "rep", "placement", "process", "step_s", "migrations", "switches", "involuntary", "status", "note")
    by = {}
    for r in rows:
        by.setdefault(r["placement"], []).append(r)
    out = fewer_reps_note(rows)
    out += ["| placement | s/step | migrations per run | context switches per run | involuntary per run |",
            "|---|---|---|---|---|"]
    for name, rs in by.items():
        step = ok_median(rs, "step_s")
        if step is None:
            out.append("| %s | %s | | | |" % (PLACEMENTS.get(name, name), why_not(rs)))
            continue
        out.append("| %s | %s | %.0f | %.0f | %.0f |" % (PLACEMENTS.get(name, name), fmt_s(step),
                                                          ok_median(rs, "migrations"), ok_median(rs, "switches"),
                                                          ok_median(rs, "involuntary")))
    return out


def profile_groups(rows):
    """{(net, batch, isa): rows} in the file's order."""
    groups = {}
    for r in rows:
        groups.setdefault((r["net"], r["batch"], r["isa"]), []).append(r)
    return groups


def profile_ms(rs, system, kind, name=None, pass_=None):
    """The median over repetitions of a row's ms per step (None when no repetition has it)."""
    return med(num(r["ms_per_step"]) for r in rs if r["system"] == system and r["kind"] == kind
               and r["status"] == "ok" and (name is None or r["name"] == name) and (pass_ is None or r["pass"] == pass_))


def isa_label(isa, header):
    return header.get("isa", "native").split(" (")[0] if isa == "native" else "AVX2 (restricted)"


def profile_steps(header, rows):
    need(rows, "rep", "isa", "net", "batch", "system", "kind", "name", "pass", "impl", "ms_per_step", "status")
    out = ["| network | batch | ISA | ours s/step | PyTorch s/step | ours' time / PyTorch's | ours outside oneDNN, s | "
           "PyTorch outside oneDNN, s | runs (ok) |", "|---|---|---|---|---|---|---|---|---|"]
    for (net, batch, isa), rs in profile_groups(rows).items():
        cells = []
        for system in ("ours", "pytorch"):
            step = profile_ms(rs, system, "step")
            # the step minus the oneDNN primitives, per repetition, then the median
            rest = med(num(r["ms_per_step"]) - sum(num(p["ms_per_step"]) for p in rs if p["rep"] == r["rep"] and
                                                   p["system"] == system and p["kind"] == "primitive")
                       for r in rs if r["system"] == system and r["kind"] == "step" and r["status"] == "ok")
            cells.append((step, rest))
        (a, ra), (b, rb) = cells
        ok = lambda system: sum(1 for r in rs if r["system"] == system and r["kind"] == "step" and  # noqa: E731
                                r["status"] == "ok")
        out.append("| %s | %s | %s | %s | %s | %s | %s | %s | %d/%d |" % (
            net, batch, isa_label(isa, header), fmt_s(a / 1e3) if a else no_ok(r for r in rs if r["system"] == "ours"),
            fmt_s(b / 1e3) if b else no_ok(r for r in rs if r["system"] == "pytorch"),
            "%.2fx" % (a / b) if a and b else "n/a", fmt_s(ra / 1e3) if ra is not None else "n/a",
            fmt_s(rb / 1e3) if rb is not None else "n/a", ok("ours"), ok("pytorch")))
    return out + fewer_reps_note(rows)


def short_primitive(name):
    """'convolution mb40_ic48oc128_ih27oh27kh5sh1...' -> 'conv 48->128 27x27 k5 s1'; other kinds alike."""
    kind, _, problem = name.partition(" ")
    m = re.match(r"mb\d+_(?:g\d+)?ic(\d+)oc(\d+)_ih(\d+)oh\d+kh(\d+)sh(\d+)", problem)
    if kind == "convolution" and m:
        return "conv %s->%s %sx%s k%s s%s" % (m.group(1), m.group(2), m.group(3), m.group(3), m.group(4), m.group(5))
    m = re.match(r"mb\d+ic(\d+)(?:ih\d+iw\d+)?oc(\d+)", problem)
    if kind == "inner_product" and m:
        return "fc %s->%s" % (m.group(1), m.group(2))
    m = re.match(r"mb\d+ic(\d+)_ih(\d+)oh\d+kh(\d+)sh(\d+)", problem)
    if kind.startswith("pooling") and m:
        return "pool %s %sx%s k%s s%s" % (m.group(1), m.group(2), m.group(2), m.group(3), m.group(4))
    m = re.match(r"mb\d+ic(\d+)ih(\d+)", problem)
    if kind == "lrn" and m:
        return "lrn %s %sx%s" % (m.group(1), m.group(2), m.group(2))
    return name


def short_pass(p):
    return {"forward_training": "fwd", "forward_inference": "fwd", "backward_data": "bwd-data",
            "backward_weights": "bwd-weights", "forward": "fwd", "backward": "bwd"}.get(p, p)


def profile_passes(header, rows, top=4):
    """Per network, batch and ISA: our heaviest layer passes and oneDNN primitives beside PyTorch's."""
    need(rows, "rep", "isa", "net", "batch", "system", "kind", "name", "pass", "impl", "ms_per_step", "status")
    out = ["| network, batch, ISA | ours: heaviest layer passes, ms/step | ours: heaviest oneDNN primitives, ms/step "
           "and implementation (PyTorch's same primitive) |", "|---|---|---|"]
    for (net, batch, isa), rs in profile_groups(rows).items():
        layers = {(r["name"], r["pass"]) for r in rs if r["system"] == "ours" and r["kind"] == "layer"}
        layer_ms = sorted(((profile_ms(rs, "ours", "layer", n, p), n, p) for n, p in layers), reverse=True)[:top]
        prims = {(r["name"], r["pass"], r["impl"]) for r in rs if r["system"] == "ours" and r["kind"] == "primitive"}
        prim_ms = sorted(((profile_ms(rs, "ours", "primitive", n, p), n, p, i) for n, p, i in prims), reverse=True)[:top]
        cells = []
        for ms, n, p, i in prim_ms:
            theirs = profile_ms(rs, "pytorch", "primitive", n, p)
            impl = next((r["impl"] for r in rs if r["system"] == "pytorch" and r["kind"] == "primitive" and
                         r["name"] == n and r["pass"] == p), "")
            mine = "%s %s: %.0f %s" % (short_primitive(n), short_pass(p), ms, i)
            cells.append("%s (PyTorch %s)" % (mine, "%.0f %s" % (theirs, impl) if theirs is not None
                                              else "ran no such primitive"))
        out.append("| %s, %s, %s | %s | %s |" % (
            net, batch, isa_label(isa, header),
            "<br>".join("%s %s: %.0f" % (n, short_pass(p), ms) for ms, n, p in layer_ms), "<br>".join(cells)))
    return out + fewer_reps_note(rows)


def accuracy_renderers():
    """The accuracy benchmarks' tables: bench/lib/render_accuracy.py, the renderer their scripts print with."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import render_accuracy  # noqa: E402

    return ({"table": lambda header, rows: render_accuracy.accuracy_table(rows),
             "pivot": lambda header, rows: render_accuracy.accuracy_pivot(rows),
             "verdicts": lambda header, rows: render_accuracy.accuracy_verdicts(rows)},
            {"table": lambda header, rows: render_accuracy.tta_table(header, rows),
             "margins": lambda header, rows: render_accuracy.tta_margins(header, rows)})


ACCURACY_VIEWS, TTA_VIEWS = accuracy_renderers()
RENDERERS = {
    "accuracy": ACCURACY_VIEWS,
    "tta": TTA_VIEWS,
    "link": {"table": link_table, "headline": link_headline},
    "inproc": {"table": inproc_table},
    "train_step": {"table": train_step_table},
    "precision": {"table": precision_table},
    "memory": {"table": memory_table, "summary": memory_summary, "steps": memory_steps},
    "memory_plan": {"table": memory_plan_table},
    "demo": {"table": demo_table},
    "gbench": {"table": gbench_table},
    "scale": {"table": scale_table},
    "placement": {"table": placement_table},
    "layer_profile": {"table": profile_steps, "passes": profile_passes},
    "elastic": {"table": elastic_table},
    "busy_machine": {"table": busy_machine_table},
}
SPEED_KINDS = {"busy_machine", "elastic", "link", "inproc", "train_step", "precision", "memory", "scale", "placement", "tta", "layer_profile"}  # comparisons of speed: at least MIN_REPS repetitions
