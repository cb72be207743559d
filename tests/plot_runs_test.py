#!/usr/bin/env python3
"""scripts/plot_runs.py on metrics files in terngrad-train's --metrics_jsonl line format and on a real train_dir
(tests/data/plot_runs: a 30-step, 2-worker LeNet TernGrad run's event files, evaluated with terngrad-eval
--eval_dir into the same folder, and its --metrics_jsonl file; tests/data/plot_runs/demo: the event files and
eval.jsonl of `DEMO_STEPS=300 DEMO_LEVER=0 scripts/demo.sh`, TernGrad and fp32 with --eval_every 20): the PNG is
written and valid, the demo's picture has two accuracy curves of at least 10 points over training time, several runs go
into one figure, the event files read the same figures as the metrics file (and as TensorBoard's own reader,
where it is installed), and every bad input is one "plot_runs.py: error:" line on stderr, exit 1, with no output
written and an existing output left as it was (usage errors: exit 2). No build needed. Exit 77 (SKIPPED) when
matplotlib is not installed, except under CI=true, where that fails. (ctest plot_runs, label unit.)"""
import glob
import importlib.util
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLOT = os.path.join(ROOT, "scripts", "plot_runs.py")
FIXTURE = os.path.join(ROOT, "tests", "data", "plot_runs")

# The line format of terngrad-train --metrics_jsonl (src/train/trainer_run.cc), as the binary writes it.
STEP = ('{"step": %d, "elapsed": %s, "exchange": "terngrad", "entropy_loss": 2.1177907, "reg_loss": 0.563260019, '
        '"total_loss": %s, "learning_rate": 0.00921954401, "examples_per_sec": %s, "sec_per_batch": 0.0772827888, '
        '"bytes_exchanged": %d, "fp32_bytes": %d, "payload_bytes": 314053, "wire_bytes": %d, "intra_node_bytes": '
        '%d, "inter_node_bytes": 0, "loss_scale": 1, "skipped_steps": 0, "host_syncs": 1, "time": {"input_wait": '
        '0.0068277437, "forward_backward": 0.0662047643, "scalers": 0.0011715873, "encode": 0.000700835, '
        '"comm_blocked": 0, "comm_in_flight": 0, "decode": 1.7148e-06, "optimizer_ema": 0.0023409951, "other": '
        '3.45611e-05, "comm_cpu": 0}, "process_time": [], "worker_forward_backward": [0.0662047643]}')
PROBE = ('{"quantization": true, "step": %d, "relative_error": 0.832954043, "nonzero_fraction": 0.174734093, '
         '"seconds": 0.022103828, "tensors": [{"name": "conv1/weights", "numel": 500, "relative_error": 0.955762123, '
         '"nonzero_fraction": 0.28, "scaler": 0.0998009071, "num_scalers": 1}]}')
SUMMARY = ('{"summary": true, "steps": %d, "median_examples_per_sec": 986.995416, "bytes_exchanged": %d, '
           '"fp32_bytes": %d, "final_loss": 1.21413994, "parameter_digest": "20d564bb", "time": {"input_wait": '
           '0.00431193788, "forward_backward": 0.0520075717, "scalers": 0.00284337986, "encode": 0.0011818995, '
           '"comm_blocked": 0, "comm_in_flight": 0, "decode": 1.62994e-06, "optimizer_ema": 0.00237752712, "other": '
           '9.443824e-05, "comm_cpu": 0}}')


def metrics_text(steps=60, every=10, per_step=314053, fp32=5024320, speed=900.0):
    lines = []
    for s in range(every, steps + 1, every):
        if s % 25 < every:
            lines.append(PROBE % (s - s % 25))
        lines.append(STEP % (s, 0.07 * s, 2.7 - 0.02 * s, speed + s, per_step, fp32, per_step, per_step))
    lines.append(SUMMARY % (steps, per_step * steps, fp32 * steps))
    return "\n".join(lines) + "\n"


def load_module():
    spec = importlib.util.spec_from_file_location("plot_runs", PLOT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def png_size(path):
    """(width, height) of a PNG file, or None when it is not one."""
    with open(path, "rb") as f:
        head = f.read(24)
    if len(head) < 24 or head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        return None
    return struct.unpack(">II", head[16:24])


class PlotRuns(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tg_plot_runs_")

    def tearDown(self):
        shutil.rmtree(self.dir)

    def path(self, name):
        return os.path.join(self.dir, name)

    def write(self, name, text, mode="w"):
        os.makedirs(os.path.dirname(self.path(name)), exist_ok=True)
        with open(self.path(name), mode) as f:
            f.write(text)
        return self.path(name)

    def plot(self, *args, cwd=None):
        return subprocess.run([sys.executable, PLOT, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, cwd=cwd or self.dir)

    def assert_png(self, path):
        size = png_size(path)
        self.assertIsNotNone(size, "%s is not a PNG" % path)
        self.assertTrue(600 <= size[0] <= 4000 and 600 <= size[1] <= 4000, size)
        self.assertGreater(os.path.getsize(path), 20000)  # eight panels of axes, lines and text

    def test_one_metrics_file(self):
        run = self.write("terngrad.jsonl", metrics_text())
        out = self.path("one.png")
        r = self.plot("-o", out, run)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "wrote %s (1 run)\n" % out)
        self.assert_png(out)
        self.assertEqual(sorted(os.listdir(self.dir)), ["one.png", "terngrad.jsonl"])  # no temporary left

    def test_default_output_without_evaluation(self):
        self.write("a/metrics.jsonl", metrics_text(per_step=0, fp32=0))  # 1 worker: nothing exchanged
        r = self.plot("a/metrics.jsonl")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "wrote runs.png (1 run)\n")
        self.assert_png(self.path("runs.png"))

    def test_two_runs_train_dir_and_metrics_file(self):
        fp32 = self.write("fp32.jsonl", metrics_text(steps=30, per_step=5024320, speed=700.0))
        out = self.path("both.png")
        r = self.plot("-o", out, "--label", "TernGrad", os.path.join(FIXTURE, "terngrad"), fp32)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "wrote %s (2 runs)\n" % out)
        self.assert_png(out)

    def test_train_dir_reads_what_the_metrics_say(self):
        m = load_module()
        events = m.load(os.path.join(FIXTURE, "terngrad"))
        metrics = m.load(os.path.join(FIXTURE, "terngrad.jsonl"))
        with open(os.path.join(FIXTURE, "terngrad.jsonl")) as f:
            summary = [json.loads(line) for line in f if line.strip()][-1]
        self.assertEqual(events["label"], "terngrad")
        self.assertEqual(events["step"], [10, 20, 30])
        self.assertEqual(events["step"], metrics["step"])
        for key in ("loss", "speed"):  # float32 in the event file
            for e, j in zip(events[key], metrics[key]):
                self.assertAlmostEqual(e, j, delta=1e-6 * abs(j))
        self.assertEqual(events["bytes"][-1], summary["bytes_exchanged"])
        self.assertEqual(events["fp32"][-1], summary["fp32_bytes"])
        self.assertEqual(metrics["bytes"][-1], summary["bytes_exchanged"])
        for e, j in zip(events["time"], metrics["time"]):  # the event file begins just before the first step
            self.assertTrue(0 <= e - j < 0.5, (events["time"], metrics["time"]))
        with open(os.path.join(FIXTURE, "terngrad", "eval.jsonl")) as f:
            evaluated = json.loads(f.readline())
        self.assertEqual(events["acc"], {30: evaluated["precision_at_1"]})
        self.assertEqual(metrics["acc"], {})
        # A record still being written (the file cut short) is left out, not an error.
        cut = shutil.copytree(os.path.join(FIXTURE, "terngrad"), self.path("cut"))
        trainer = min(glob.glob(os.path.join(cut, "events.out.tfevents.*")))
        with open(trainer, "r+b") as f:
            f.truncate(os.path.getsize(trainer) - 7)
        self.assertEqual(m.load(cut)["step"], [10, 20])
        try:
            from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
        except ImportError:
            return
        original = min(glob.glob(os.path.join(FIXTURE, "terngrad", "events.out.tfevents.*")))
        losses = [v.tensor.float_val[0] for e in EventFileLoader(original).Load() for v in e.summary.value
                  if v.tag == "losses/total_loss"]
        self.assertEqual(losses, events["loss"])

    def test_the_demos_runs_have_learning_curves(self):
        m = load_module()
        runs = [m.load(os.path.join(FIXTURE, "demo", name)) for name in ("terngrad", "fp32")]
        for run in runs:
            self.assertGreaterEqual(len(run["acc"]), 10, run["label"])
            self.assertTrue(run["timed"], run["label"])  # run/train_seconds: training time, evaluations left out
            self.assertEqual(max(run["acc"]), 300)
            self.assertTrue(all(0.5 < a < 1 for a in run["acc"].values()), run["acc"])
            times = [m.time_at(run, s) for s in sorted(run["acc"])]
            self.assertEqual(times, sorted(times))
        out = self.path("demo.png")
        r = self.plot("-o", out, "--label", "TernGrad", "--label", "fp32",
                      *[os.path.join(FIXTURE, "demo", n) for n in ("terngrad", "fp32")])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assert_png(out)

    def test_training_time_joins_a_resumed_runs_files(self):
        m = load_module()
        # A run to step 20, resumed from its checkpoint of step 10 after a pause: the second file's times count from
        # 0 at step 10 and are joined where the first had reached step 10; what the first logged after is replaced.
        first = {0: 0.0, 10: 1.0, 20: 2.0}
        second = {10: 0.0, 20: 1.5, 30: 2.5}
        self.assertEqual(m.training_time([first, second]), {0: 0.0, 10: 1.0, 20: 2.5, 30: 3.5})
        self.assertEqual(m.training_time([{}, first]), first)  # an evaluator's file holds no training time
        self.assertEqual(m.training_time([]), {})
        # The cross-entropy is read beside the total loss, from the event files and from the metrics file.
        events = m.load(os.path.join(FIXTURE, "terngrad"))
        metrics = m.load(os.path.join(FIXTURE, "terngrad.jsonl"))
        for e, j in zip(events["xent"], metrics["xent"]):
            self.assertAlmostEqual(e, j, delta=1e-6 * abs(j))
        self.assertFalse(events["timed"])  # written before run/train_seconds: wall time
        out = self.path("total.png")
        r = self.plot("-o", out, "--total_loss", os.path.join(FIXTURE, "terngrad"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assert_png(out)

    def test_bad_inputs(self):
        metrics = self.write("ok.jsonl", metrics_text())
        os.makedirs(self.path("empty"))
        junk = self.write("junk/events.out.tfevents.1.vm", b"\x05\x00\x00\x00\x00\x00\x00\x00" + b"\xff" * 20, "wb")
        cases = [  # arguments, what the error line names
            ([self.path("missing")], self.path("missing")),
            ([self.write("notes.txt", "hello\n")], "notes.txt"),
            ([self.write("empty.jsonl", "")], "empty.jsonl"),
            ([self.write("image.png", b"\x89PNG\r\n\x1a\n\x00\xff\xfe", "wb")], "image.png"),
            ([self.write("eval.json", '{"step": 30, "precision_at_1": 0.6718}\n')], "eval.json"),
            ([self.write("list.jsonl", "[1, 2]\n")], "list.jsonl"),
            ([metrics, self.path("empty")], "empty"),
            ([os.path.dirname(junk)], "junk"),
            ([self.write("evalonly/eval.jsonl", "{}\n")], "evalonly"),
        ]
        out = self.path("keep.png")
        for args, where in cases:
            with open(out, "wb") as f:
                f.write(b"an earlier figure")
            r = self.plot("-o", out, *args)
            with self.subTest(args=args):
                self.assertEqual(r.returncode, 1, r.stderr)
                self.assertEqual(r.stdout, "")
                lines = r.stderr.splitlines()
                self.assertEqual(len(lines), 1, r.stderr)
                self.assertTrue(lines[0].startswith("plot_runs.py: error: ") and where in lines[0], lines[0])
                with open(out, "rb") as f:
                    self.assertEqual(f.read(), b"an earlier figure")
        # An output that cannot be written: nothing is left behind.
        os.makedirs(self.path("out_is_a_folder"))
        for out in (self.path("no/such/folder/x.png"), self.path("notes.txt/x.png"), self.path("out_is_a_folder")):
            before = sorted(os.listdir(self.dir))
            r = self.plot("-o", out, metrics)
            with self.subTest(out=out):
                self.assertEqual(r.returncode, 1, r.stderr)
                lines = r.stderr.splitlines()
                self.assertEqual(len(lines), 1, r.stderr)
                self.assertTrue(lines[0].startswith("plot_runs.py: error: cannot write ") and out in lines[0])
                self.assertEqual(sorted(os.listdir(self.dir)), before)
                self.assertEqual(os.listdir(self.path("out_is_a_folder")), [])

    def test_usage_errors(self):
        metrics = self.write("ok.jsonl", metrics_text())
        for args in ([], ["--bogus", metrics], ["--label", "a", "--label", "b", metrics], ["-o"]):
            r = self.plot(*args)
            with self.subTest(args=args):
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn("usage:", r.stderr)
                self.assertFalse(os.path.exists(self.path("runs.png")))


if __name__ == "__main__":
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        if os.environ.get("CI") == "true":
            print("FAIL: matplotlib is not installed (CI=true; scripts/setup.sh installs it)")
            sys.exit(1)
        print("SKIPPED: matplotlib is not installed (scripts/setup.sh installs it)")
        sys.exit(77)
    unittest.main()
