"""What the Python tests of the programs share (onnx_export_test.py, torch_import_test.py): running a terngrad
program of the build folder, a TFRecord shard of raw images (tf.Example encoded by hand, tests/data/make_fixtures.py),
Fashion-MNIST as raw shards, terngrad-eval of a checkpoint with its dumps, the relative error of two arrays, a
TestCase with a temporary folder, and their main() (arguments, a missing dependency reported as SKIPPED, the
unittest run). `BIN` (the folder that holds
terngrad-train/-eval/-export/-import/-data) is set by main() from the first argument. numpy is imported by the
callers' checks of their own dependencies first, so a missing numpy is reported as theirs (exit 77)."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "data"))
from make_fixtures import example, frame  # noqa: E402

BIN = ""
SKIP = 77  # ctest's SKIP_RETURN_CODE
FASHION_MNIST = "/usr/share/datasets/fashion-mnist"  # Debian's dataset-fashion-mnist


def write_raw_shard(path, images, labels):
    """images: uint8 (N, H, W, C)."""
    with open(path, "wb") as f:
        for img, label in zip(images, labels):
            rec = example({"image/encoded": img.tobytes(), "image/format": b"RAW", "image/class/label": int(label),
                           "image/height": img.shape[0], "image/width": img.shape[1], "image/channels": img.shape[2]})
            f.write(frame(rec))


def run(program, *args, expect_ok=True):
    """Runs BIN/program with args (each made a string); an unexpected failure raises with its stderr's end."""
    p = subprocess.run([os.path.join(BIN, program)] + [str(a) for a in args], capture_output=True, text=True)
    if expect_ok and p.returncode != 0:
        raise AssertionError(f"{program} {' '.join(map(str, args))} exited {p.returncode}:\n{p.stderr[-3000:]}")
    return p


class ProgramTestCase(unittest.TestCase):
    """A TestCase with a temporary folder for the whole class (`tmp`, named from `tmp_prefix`), removed after its
    tests."""
    tmp_prefix = "tg_"
    tmp = None

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix=cls.tmp_prefix)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)


def fashion_mnist_shards(test, data_dir):
    """Fashion-MNIST's train and test sets converted to one raw shard each in data_dir; `test` (a TestCase) is
    skipped when the package is not installed, and fails for it under CI=true."""
    if not os.path.exists(os.path.join(FASHION_MNIST, "t10k-labels-idx1-ubyte.gz")):
        if os.environ.get("CI") == "true":
            test.fail(f"CI=true but Fashion-MNIST is missing from {FASHION_MNIST}")
        test.skipTest(f"Fashion-MNIST is not installed in {FASHION_MNIST} (package dataset-fashion-mnist)")
    for subset, idx in (("train", "train"), ("test", "t10k")):
        run("terngrad-data", "convert-idx", "--images", f"{FASHION_MNIST}/{idx}-images-idx3-ubyte.gz",
            "--labels", f"{FASHION_MNIST}/{idx}-labels-idx1-ubyte.gz", "--subset", subset, "--num_shards", 1,
            "--format", "raw", "--output_dir", data_dir)
    return data_dir


def main(name, usage_doc, arguments, missing, install, setup):
    """The main() of a test of the programs: `arguments` positional arguments (BIN_DIR first; fewer: the last line of
    usage_doc on stderr, exit 2), then unittest's. A missing dependency (`missing`: the ImportError's text; `install`:
    what installs it) is SKIPPED (exit 77), or FAILED under CI=true; else setup(argv) returns the line printed before
    the tests (the versions). Returns the exit status."""
    global BIN
    if len(sys.argv) < 1 + arguments:
        print(usage_doc.strip().splitlines()[-1], file=sys.stderr)
        return 2
    BIN = os.path.abspath(sys.argv[1])
    if missing:
        why = f"{missing}: {install}"
        if os.environ.get("CI") == "true":
            print(f"{name}: FAILED: CI=true but {why}")
            return 1
        print(f"{name}: SKIPPED: {why}")
        return SKIP
    print(setup(sys.argv), flush=True)
    program = unittest.main(argv=[sys.argv[0]] + sys.argv[1 + arguments:], exit=False, verbosity=2)
    return 0 if program.result.wasSuccessful() else 1


def evaluate(checkpoint_dir, data_dir, out_dir, *args):
    """terngrad-eval --run_once (one thread) of the latest checkpoint with every dump, its records in out_dir:
    (the last eval.jsonl record, inputs NHWC, logits, labels)."""
    import numpy as np
    os.makedirs(out_dir, exist_ok=True)
    paths = {k: os.path.join(out_dir, k + ".npy") for k in ("inputs", "logits", "labels")}
    run("terngrad-eval", "--checkpoint_dir", checkpoint_dir, "--data_dir", data_dir, "--run_once", "--eval_dir",
        out_dir, "--dump_inputs", paths["inputs"], "--dump_logits", paths["logits"], "--dump_labels", paths["labels"],
        "--threads", 1, *args)
    with open(os.path.join(out_dir, "eval.jsonl")) as f:
        record = json.loads(f.read().splitlines()[-1])
    return record, np.load(paths["inputs"]), np.load(paths["logits"]), np.load(paths["labels"])


def relative_error(got, want):
    """max |got - want| / max |want| (in double)."""
    import numpy as np
    return float(np.max(np.abs(got.astype(np.float64) - want)) / max(float(np.max(np.abs(want))), 1e-30))
