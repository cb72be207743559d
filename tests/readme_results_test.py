#!/usr/bin/env python3
"""scripts/check_readme_results.py on a throw-away git repository: a README block quoting a results file passes
only when the file names a commit of the repository's history that is an ancestor of HEAD, was measured on a
clean tree by the command the block names, has every provenance field and enough interleaved repetitions (a
Google Benchmark file: at least 3), and the block's
text is what the file renders to; every refusal is one line naming the command to re-run. A decimal figure in a
paragraph that names a results file must be in that file. A block without its
results file must hold the TODO line naming its command. The renderers' words: a ratio below 1 is "more", never
"less"; a difference to fp32 is "better"/"worse" only when its paired 95% interval excludes 0, "within 0.3 points"
only when the interval lies inside +-0.3, else "not resolved"; time to accuracy at several margins from the same
curves. (ctest readme_results_check, label unit.)"""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECK = os.path.join(ROOT, "scripts", "check_readme_results.py")
sys.path.insert(0, os.path.join(ROOT, "scripts"))
sys.path.insert(0, os.path.join(ROOT, "bench", "lib"))
import check_readme_results  # noqa: E402
import render_accuracy  # noqa: E402
import render_results  # noqa: E402
COMMAND = "bench/inproc_bench.sh -r 3"


def git(repo, *args):
    return subprocess.run(["git", "-C", repo, *args], check=True, stdout=subprocess.PIPE,
                          universal_newlines=True).stdout.strip()


def results_text(commit, reps=3, tree="clean", command=COMMAND, drop=None, s_fp32="0.0100"):
    header = {"format": "terngrad-results 1", "kind": "inproc", "command": command, "commit": commit, "tree": tree,
              "date": "2026-12-01T10:00:00Z", "cpu": "Test CPU, 2 cores", "isa": "AVX2 (avx2)",
              "flags": "build Release", "load": "0.10 0.20 0.30"}
    lines = ["# %s: %s" % (k, v) for k, v in header.items() if k != drop]
    lines.append("rep\tnet\tbatch\tmethod\tsteps\ts_per_step\tforward_backward_ms\tscalers_ms\tencode_ms\tdecode_ms\t"
                 "optimizer_ms\tstatus")
    for rep in range(1, reps + 1):
        lines.append("%d\tlenet\t64\tfp32\t400\t%s\t8.0\t0\t0\t0.1\t0.3\tok" % (rep, s_fp32))
        lines.append("%d\tlenet\t64\tterngrad\t400\t0.0095\t8.0\t0.2\t0.2\t0.1\t0.3\tok" % rep)
    return "\n".join(lines) + "\n"


class ReadmeResults(unittest.TestCase):
    def setUp(self):
        self.repo = tempfile.mkdtemp(prefix="tg_readme_results_")
        git(self.repo, "init", "-q")
        git(self.repo, "config", "user.email", "t@example.invalid")
        git(self.repo, "config", "user.name", "t")
        self.write("README.md", "# x\n")
        git(self.repo, "add", ".")
        git(self.repo, "commit", "-q", "-m", "first")
        self.first = git(self.repo, "rev-parse", "HEAD")
        os.makedirs(os.path.join(self.repo, "bench", "results"))

    def tearDown(self):
        shutil.rmtree(self.repo)

    def write(self, path, text):
        with open(os.path.join(self.repo, path), "w") as f:
            f.write(text)

    def read(self, path):
        with open(os.path.join(self.repo, path)) as f:
            return f.read()

    def readme(self, view=""):
        self.write("README.md", "# x\n\n<!-- results: bench/results/r.tsv; command: %s%s -->\nold\n<!-- results end -->\n"
                   % (COMMAND, "; view: " + view if view else ""))

    def run_check(self, *args):
        p = subprocess.run([sys.executable, CHECK, "--repo", self.repo, *args, "README.md"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, universal_newlines=True)
        return p.returncode, p.stdout

    def refused(self, reason):
        rc, out = self.run_check()
        self.assertEqual(rc, 1, out)
        first = out.splitlines()[0]
        self.assertIn(reason, first)
        self.assertTrue(first.startswith("README.md:3: bench/results/r.tsv: "), first)
        self.assertTrue(first.endswith("re-run: " + COMMAND), first)

    def test_the_memory_tables_give_the_per_image_slope_and_the_ratios(self):
        # Peaks of 1.0 and 2.6 GB at batches 16 and 32 (100 MB an image), PyTorch's 2.0 and 4.0 (125 MB); steps of
        # ours 1.0, 1.1, 1.2 s against the build before's 1.0 s.
        header = ["# format: terngrad-results 1", "# kind: memory", "# command: bench/memory_bench.sh", "# commit: x",
                  "# tree: clean", "# date: d", "# cpu: c", "# isa: AVX2 (avx2)", "# flags: f", "# load: 0",
                  "# threads: 2; torch: 2.15.0; base: /b"]
        rows = ["rep\tnet\tbatch\timpl\tsetting\tpeak_rss_bytes\tstep_s\tplanned_activations_bytes\tstatus"]
        for rep, step in ((1, 1.0), (2, 1.1), (3, 1.2)):
            for b, ours, torch in ((16, 1.0e9, 2.0e9), (32, 2.6e9, 4.0e9)):
                rows += ["%d\tresnet50\t%d\tours\tliveness\t%d\t%s\t-\tok" % (rep, b, ours, step),
                         "%d\tresnet50\t%d\tbase\tdefault\t%d\t1.0\t-\tok" % (rep, b, 3 * ours),
                         "%d\tresnet50\t%d\ttorch\tfp32\t%d\t2.0\t-\tok" % (rep, b, torch)]
        sys.path.insert(0, os.path.dirname(CHECK))
        import check_readme_results as c
        path = os.path.join(self.repo, "m.tsv")
        self.write("m.tsv", "\n".join(header + rows) + "\n")
        h, r = c.read_results(path)
        table = "\n".join(render_results.memory_table(h, r))
        self.assertIn("| resnet50 (16, 32) | ours, liveness | 1.00 GB | 2.60 GB | 100.0 MB | 0.80x | 0.65x | 1.100 s "
                      "| 0.55x |", table)
        self.assertIn("| resnet50 (16, 32) | PyTorch 2.15.0 | 2.00 GB | 4.00 GB | 125.0 MB | 1.00x |", table)
        steps = "\n".join(render_results.memory_steps(h, r))
        self.assertIn("| resnet50 | 16 | 1.100 s | 1.000 s | 1.100 | 1.000-1.200 | 3 |", steps)

    def test_a_pytorch_row_measured_now_needs_its_peer_line(self):
        rows = [{"framework": "pytorch", "images_per_sec": "10"}, {"framework": "terngrad", "images_per_sec": "20"}]
        with self.assertRaises(check_readme_results.Refused) as e:
            check_readme_results.mark_peer(self.repo, {"commit": self.first}, rows)
        self.assertIn("has PyTorch rows but no `peer:` line", str(e.exception))
        header = {"commit": self.first, "peer": "torch 2.15.0 (/venv/bin/python)"}
        check_readme_results.mark_peer(self.repo, header, rows)
        self.assertTrue(header["_torch_rows"])
        check_readme_results.mark_peer(self.repo, {"commit": self.first}, rows[1:])  # no PyTorch row: no peer needed

    def test_missing_results_file_needs_the_to_be_measured_line(self):
        self.readme()
        rc, out = self.run_check()
        self.assertEqual(rc, 1, out)  # "old" is not the to-be-measured line
        rc, out = self.run_check("--write")
        self.assertEqual(rc, 0, out)
        text = self.read("README.md")
        self.assertIn("**TODO (to be measured):**", text)
        self.assertIn("`%s` writes `bench/results/r.tsv`" % COMMAND, text)
        rc, out = self.run_check()
        self.assertEqual(rc, 0, out)
        self.assertIn("1 wait to be measured", out)

    def test_a_good_file_renders_and_its_figures_must_match(self):
        self.readme()
        self.write("bench/results/r.tsv", results_text(self.first))
        rc, out = self.run_check("--write")
        self.assertEqual(rc, 0, out)
        text = self.read("README.md")
        self.assertIn("| lenet | 64 | 0.0100 | 0.0095 | 0.95x |", text)
        self.assertIn("commit `%s`" % self.first[:10], text)
        rc, out = self.run_check()
        self.assertEqual(rc, 0, out)
        # A quoted figure that differs from the file's value is refused.
        self.write("README.md", text.replace("0.95x", "0.90x"))
        rc, out = self.run_check()
        self.assertEqual(rc, 1, out)
        self.assertIn("differs from what the file renders to", out)

    def test_prose_figures_next_to_a_results_file_must_be_in_it(self):
        self.readme()
        self.write("bench/results/r.tsv", results_text(self.first))
        rc, out = self.run_check("--write")
        self.assertEqual(rc, 0, out)
        text = self.read("README.md")
        # A figure of the file (0.0095, 0.95 as a percentage of 0.0095 x 100), a version and a size: accepted.
        good = ("\nIn `bench/results/r.tsv` TernGrad takes 0.0095 s, 0.95% of a second, with PyTorch 2.15 and 1.2\n"
                "million elements.\n\n```\nbench/x.sh 7.77 # commands are not figures\n```\n")
        self.write("README.md", text + good)
        rc, out = self.run_check()
        self.assertEqual(rc, 0, out)
        # A figure the file does not hold (1.49) is refused naming the paragraph's line; without the reference the
        # paragraph needs an allowed phrase for it (README.md is read whole).
        bad = "\nThe step (`bench/results/r.tsv`) took\n1.49 s.\n"
        self.write("README.md", text + good + bad)
        rc, out = self.run_check()
        self.assertEqual(rc, 1, out)
        line = (text + good).count("\n") + 2
        self.assertIn("README.md:%d: the figure 1.49 is in none of bench/results/r.tsv" % line, out)
        self.write("README.md", text + good + bad.replace("(`bench/results/r.tsv`) ", ""))
        rc, out = self.run_check()
        self.assertEqual(rc, 1, out)
        self.assertIn("the figure 1.49 (", out)
        os.makedirs(os.path.join(self.repo, "docs"))
        self.write("docs/figures-allowed.tsv", "README.md\ttook 1.49 s\ta test's made-up figure\n")
        rc, out = self.run_check()
        self.assertEqual(rc, 0, out)

    def test_median_of_an_even_count_is_the_mean_of_the_middle_two(self):
        self.readme()
        lines = results_text(self.first, reps=4).splitlines()
        # fp32 s/step of the four repetitions: 0.0100, 0.0100, 0.0100 -> make them 0.010, 0.012, 0.014, 0.020
        vals = iter(["0.0100", "0.0120", "0.0140", "0.0200"])
        lines = [l.replace("\t0.0100\t", "\t%s\t" % next(vals)) if "\tfp32\t" in l else l for l in lines]
        self.write("bench/results/r.tsv", "\n".join(lines) + "\n")
        rc, out = self.run_check("--write")
        self.assertEqual(rc, 0, out)
        self.assertIn("| lenet | 64 | 0.0130 |", self.read("README.md"))

    def test_a_commit_outside_the_history_is_refused(self):
        self.readme()
        self.write("bench/results/r.tsv", results_text("0" * 40))
        self.refused("is not a commit of this repository's history")

    def test_a_commit_of_another_branch_is_refused(self):
        git(self.repo, "checkout", "-q", "-b", "other")
        self.write("other.txt", "x")
        git(self.repo, "add", "other.txt")
        git(self.repo, "commit", "-q", "-m", "other")
        other = git(self.repo, "rev-parse", "HEAD")
        git(self.repo, "checkout", "-q", "-")
        self.readme()
        self.write("bench/results/r.tsv", results_text(other))
        self.refused("is not an ancestor of HEAD")

    def test_a_later_commit_quoting_an_earlier_measurement_passes(self):
        self.write("code.txt", "later")
        git(self.repo, "add", "code.txt")
        git(self.repo, "commit", "-q", "-m", "later")
        self.readme()
        self.write("bench/results/r.tsv", results_text(self.first))
        rc, out = self.run_check("--write")
        self.assertEqual(rc, 0, out)

    def test_missing_fields_modified_tree_other_command_and_too_few_repetitions_are_refused(self):
        self.readme()
        self.write("bench/results/r.tsv", results_text(self.first, drop="isa"))
        self.refused("lacks the provenance field isa")
        self.write("bench/results/r.tsv", results_text(self.first, tree="modified"))
        self.refused("measured on a modified tree")
        self.write("bench/results/r.tsv", results_text(self.first, command="bench/inproc_bench.sh -r 1"))
        self.refused("was written by `bench/inproc_bench.sh -r 1`")
        self.write("bench/results/r.tsv", results_text(self.first, reps=2))
        self.refused("a speed comparison from 2 repetition(s)")

    def test_repetitions_that_are_not_interleaved_are_refused(self):
        self.readme()
        lines = results_text(self.first).splitlines()
        header = [l for l in lines if l.startswith("#") or l.startswith("rep\t")]
        rows = [l for l in lines if l not in header]
        # Every repetition of fp32 first, then every one of TernGrad: one system after the other.
        one_after_other = [l for l in rows if "\tfp32\t" in l] + [l for l in rows if "\tterngrad\t" in l]
        self.write("bench/results/r.tsv", "\n".join(header + one_after_other) + "\n")
        self.refused("its repetitions are not interleaved: row 4 is repetition 1 after repetition 3")
        self.write("bench/results/r.tsv", "\n".join(header + rows) + "\n")
        rc, out = self.run_check("--write")
        self.assertEqual(rc, 0, out)

    def test_a_figure_in_a_paragraph_without_a_results_file_needs_an_allowed_phrase(self):
        # The audit's example: a speed figure in a plain paragraph of a fully read file (docs/*.md).
        os.makedirs(os.path.join(self.repo, "docs"))
        self.write("docs/status.md", "# s\n\nOur step is 1.49x faster than PyTorch's.\n\nMomentum 0.9 as the paper.\n")
        rc, out = self.run_check("docs/status.md")
        self.assertEqual(rc, 1, out)
        self.assertIn("docs/status.md:3: the figure 1.49 (", out)
        self.assertIn("names no results file", out)
        self.assertIn("docs/status.md:5: the figure 0.9 (", out)
        # An allowed phrase with its reason covers the constant; the speed figure stays refused.
        self.write("docs/figures-allowed.tsv", "docs/status.md\tMomentum 0.9\tthe paper's recipe constant\n")
        rc, out = self.run_check("docs/status.md")
        self.assertEqual(rc, 1, out)
        self.assertNotIn("the figure 0.9", out)
        self.assertIn("the figure 1.49", out)
        # Named beside its results file, the figure must be that file's.
        git(self.repo, "add", ".")
        git(self.repo, "commit", "-q", "-m", "docs")
        self.write("bench/results/r.tsv", results_text(git(self.repo, "rev-parse", "HEAD"), s_fp32="1.49"))
        self.write("docs/status.md", "# s\n\nOur step is 1.49 s (bench/results/r.tsv).\n\nMomentum 0.9 as the paper.\n")
        rc, out = self.run_check("docs/status.md")
        self.assertEqual(rc, 0, out)
        # A row that covers nothing any more is stale.
        self.write("docs/status.md", "# s\n\nOur step is 1.49 s (bench/results/r.tsv).\n")
        rc, out = self.run_check("docs/status.md")
        self.assertEqual(rc, 1, out)
        self.assertIn("the allowed phrase 'Momentum 0.9' of docs/status.md covers no figure there any more", out)

    def test_a_google_benchmark_file_needs_three_repetitions(self):
        self.write("README.md", "# x\n\n<!-- results: bench/results/r.tsv; command: %s -->\nold\n<!-- results end -->\n"
                   % COMMAND)
        text = results_text(self.first).replace("# kind: inproc", "# kind: gbench").splitlines()
        text = [l for l in text if l.startswith("#")] + ["# repetitions: 2", "# interleaved: random",
                                                         "name\trun_type\taggregate\trepetition\titerations\t"
                                                         "real_time\tcpu_time\ttime_unit",
                                                         "BM_x\taggregate\tmedian\t-\t10\t1.5\t1.5\tms"]
        self.write("bench/results/r.tsv", "\n".join(text) + "\n")
        self.refused("a benchmark of 2 repetition(s); at least 3 are needed")
        self.write("bench/results/r.tsv", "\n".join(text).replace("# repetitions: 2", "# repetitions: 3") + "\n")
        rc, out = self.run_check("--write")
        self.assertEqual(rc, 0, out)
        self.assertIn("| BM_x | 1.5 ms |", self.read("README.md"))


def accuracy_rows(pairs):
    """Rows of an accuracy file: (seed, fp32 accuracy, terngrad accuracy) per seed."""
    rows = []
    for seed, fp32, tern in pairs:
        for variant, acc in (("fp32", fp32), ("terngrad", tern)):
            rows.append({"net": "lenet", "dataset": "fashion_mnist", "workers": "2", "layout": "2x1", "steps": "1875",
                         "variant": variant, "seed": str(seed), "precision_at_1": "%.4f" % acc, "status": "ok"})
    return rows


class RenderedWords(unittest.TestCase):
    def test_a_ratio_below_one_is_more_not_less(self):
        # The audit's example: TernGrad's link overhead 1.152 s against DDP fp32's 0.790 s.
        self.assertEqual(render_results.fewer_or_more(1.152, 0.790, "DDP fp32's"), "1.46x more than DDP fp32's")
        self.assertEqual(render_results.fewer_or_more(0.180, 0.790, "DDP fp32's"), "4.39x less than DDP fp32's")

    def test_a_difference_is_claimed_only_with_an_interval_that_excludes_zero(self):
        # 3 seeds of -0.26 points with the paired spread seen (t = -1.9, as the audit found): not resolved.
        rows = accuracy_rows([(1, 0.8997, 0.8944), (2, 0.8960, 0.8955), (3, 0.8983, 0.8963)])
        n, mean, half = render_accuracy.paired_difference([r for r in rows if r["variant"] == "terngrad"],
                                                          [r for r in rows if r["variant"] == "fp32"])
        self.assertEqual(n, 3)
        self.assertAlmostEqual(mean, -0.26, places=6)
        self.assertGreater(half, abs(mean))
        self.assertTrue(render_accuracy.verdict(n, mean, half).startswith("not resolved at 3 seeds (95% CI -"))
        # Every seed 0.5 points down, spread 0.05: worse, and not within 0.3.
        self.assertEqual(render_accuracy.verdict(*render_accuracy.paired_difference(
            [{"seed": str(i), "precision_at_1": "%.4f" % (0.895 - 0.0005 * (i % 2))} for i in range(8)],
            [{"seed": str(i), "precision_at_1": "0.9000"} for i in range(8)]))[:5], "worse")
        # A tight interval around 0: within 0.3 points (equivalence), no direction.
        self.assertEqual(render_accuracy.verdict(8, 0.02, 0.1), "within 0.3 points of fp32 (95% CI -0.08..+0.12)")
        self.assertEqual(render_accuracy.verdict(8, -0.2, 0.05), "worse (95% CI -0.25..-0.15), within 0.3 points")
        self.assertEqual(render_accuracy.verdict(1, -0.2, None), "1 seed: no interval")
        lines = render_accuracy.accuracy_verdicts(rows)
        self.assertEqual(len(lines), 1)
        self.assertIn("terngrad against fp32: not resolved at 3 seeds", lines[0])

    def test_a_pytorch_row_without_a_peer_line_says_so(self):
        rows = [{"system": "ddp", "step_s": "1.0"}, {"system": "ours", "step_s": "0.5"}]
        self.assertTrue(check_readme_results.has_torch_rows(rows))
        self.assertFalse(check_readme_results.has_torch_rows([{"system": "ours"}]))
        self.assertEqual(check_readme_results.unrecorded_peer({"threads": "2; torch: 2.15.0+cu132; base: x"}),
                         "torch 2.15.0+cu132 (the file's threads line)")
        self.assertIn("defaulted to Debian's PyTorch 1.13",
                      check_readme_results.unrecorded_peer({"_before_pypi_peer": True}))
        self.assertEqual(check_readme_results.unrecorded_peer({}), "not recorded in the file")

    def test_time_to_accuracy_at_several_margins_from_the_same_curves(self):
        meta = {"target": "0.895000 (fp32's mean 0.898000 over 3 seeds minus 0.3 points)"}

        def row(system, rep, curve):
            return {"rate": "1gbit", "machines": "2", "system": system, "rep": str(rep), "status": "ok",
                    "curve": curve}
        rows = [row("ours fp32", 1, "75:10:0.8950 150:20:0.8975"), row("ours fp32", 2, "75:10:0.8960 150:20:0.8990"),
                row("ours TernGrad", 1, "75:2:0.8952 150:4:0.8960"), row("ours TernGrad", 2, "75:2:0.8930 150:4:0.8955")]
        out = render_accuracy.tta_margins(meta, rows, margins=(0.1, 0.3))
        self.assertIn("| 1gbit | 2 | ours fp32 | 20.0 s (2 of 2) | 10.0 s (2 of 2) |", out)
        # TernGrad: -0.1 (0.8970) never reached; -0.3 (0.8950): 2 s and 4 s, median 3 s, 0.30x fp32's 10 s.
        self.assertIn("| 1gbit | 2 | ours TernGrad | not reached (0 of 2; -) | 3.0 s (2 of 2; 0.30x) |", out)


if __name__ == "__main__":
    unittest.main(verbosity=2)
