"""What the Python tests of the programs share (onnx_export_test.py, torch_import_test.py): running a terngrad
program of the build folder, a TFRecord shard of raw images (tf.Example encoded by hand, tests/data/make_fixtures.py),
terngrad-eval of a checkpoint with its dumps, and the relative error of two arrays. Set `BIN` (the folder that
holds terngrad-train/-eval/-export/-import/-data) before running a program. numpy is imported by the callers'
checks of their own dependencies first, so a missing numpy is reported as theirs (exit 77)."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "data"))
from make_fixtures import example, frame  # noqa: E402

BIN = ""


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
