#!/usr/bin/env python3
"""terngrad-import checked against PyTorch, logit for logit: for every importable network (resnet50 and
inception_v3 from torchvision, lenet and cifarnet as the PyTorch modules below, the README's documented layout)
a model with random weights and random batch-norm statistics is saved as safetensors (written by hand: an 8-byte
header length, the JSON header, the raw tensors) and exported to ONNX (training mode, no constant folding: batch
norm kept), both files are imported, and terngrad-eval's logits (`--dump_logits`) on a TFRecord shard of random
images equal PyTorch's on exactly the tensor terngrad-eval fed the net (`--dump_inputs`): max |ours - torch| /
max |torch| <= 1e-4 and the same arg-max for every example. Then a LeNet imported from PyTorch trains on with
TernGrad (2 workers) on Fashion-MNIST and its test cross-entropy falls below the imported weights'.
Bad inputs: a file of neither format, a truncated safetensors header, a tensor of another shape or dtype, missing
and unexpected tensors (all listed), an eval-mode ONNX export with batch norm folded away, alexnet, an
--output_dir that already holds a checkpoint (left intact): one line, non-zero exit, nothing written.

Needs torch and torchvision (scripts/setup.sh installs Debian's python3-torch and python3-torchvision; the ctest
`torch_import` runs this with /usr/bin/python3, TG_TORCH_PYTHON to override). Without them: exit 77 (SKIPPED,
with the reason); under CI=true a failure.
Usage: torch_import_test.py BIN_DIR [unittest arguments]   (BIN_DIR holds terngrad-import/-eval/-train/-data)
"""
import json
import os
import struct
import sys

TOLERANCE = 1e-4

try:
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    import torchvision
    MISSING = None
except ImportError as e:  # reported in main()
    MISSING = str(e)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import program_harness  # noqa: E402
from program_harness import fashion_mnist_shards, relative_error, run, write_raw_shard  # noqa: E402


# ---- the PyTorch modules of our LeNet and CifarNet (README "Start from trained weights") -----------------------------
if MISSING is None:
    class LeNet(nn.Module):
        """Our lenet with --padding_style torch: 5x5 SAME convolutions, 2x2/2 max pools."""

        def __init__(self, num_classes=10, channels=1, image_size=28):
            super().__init__()
            self.conv1 = nn.Conv2d(channels, 20, 5, padding=2)
            self.conv2 = nn.Conv2d(20, 50, 5, padding=2)
            s = image_size // 2 // 2
            self.fc3 = nn.Linear(50 * s * s, 500)
            self.logits = nn.Linear(500, num_classes)

        def forward(self, x):
            x = F.max_pool2d(F.relu(self.conv1(x)), 2, 2)
            x = F.max_pool2d(F.relu(self.conv2(x)), 2, 2)
            return self.logits(F.relu(self.fc3(torch.flatten(x, 1))))

    class CifarNet(nn.Module):
        """Our cifarnet with --padding_style torch: TF's LRN(radius 4, bias 1, alpha 0.001/9) is PyTorch's
        LocalResponseNorm(9, alpha=0.001, beta=0.75, k=1) (PyTorch divides alpha by the window)."""

        def __init__(self, num_classes=10, image_size=24):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 64, 5, padding=2)
            self.conv2 = nn.Conv2d(64, 64, 5, padding=2)
            self.pool = nn.MaxPool2d(3, 2, padding=1)
            self.lrn = nn.LocalResponseNorm(9, alpha=0.001, beta=0.75, k=1.0)
            s = (image_size - 1) // 2 + 1
            s = (s - 1) // 2 + 1
            self.fc3 = nn.Linear(64 * s * s, 384)
            self.fc4 = nn.Linear(384, 192)
            self.logits = nn.Linear(192, num_classes)

        def forward(self, x):
            x = self.lrn(self.pool(F.relu(self.conv1(x))))
            x = self.pool(self.lrn(F.relu(self.conv2(x))))
            x = F.relu(self.fc3(torch.flatten(x, 1)))
            return self.logits(F.relu(self.fc4(x)))


# ---- files ---------------------------------------------------------------------------------------------------------
SAFETENSORS_DTYPES = {"float32": "F32", "float16": "F16", "int64": "I64", "float64": "F64"}


def write_safetensors(path, tensors, header_extra=None):
    """tensors: name -> numpy array. The format: u64 LE header length, JSON header, the raw little-endian data."""
    header, blobs, offset = {}, [], 0
    for name, a in tensors.items():
        a = np.ascontiguousarray(a)
        data = a.astype(a.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": SAFETENSORS_DTYPES[str(a.dtype)], "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = {"format": "pt"}
    if header_extra:
        header.update(header_extra)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def state_arrays(model):
    return {k: v.detach().cpu().numpy() for k, v in model.state_dict().items()}


def evaluate(checkpoint_dir, data_dir, out_dir, *args):
    """terngrad-eval of the latest checkpoint with its dumps: (inputs NHWC, logits, labels)."""
    return program_harness.evaluate(checkpoint_dir, data_dir, out_dir, *args)[1:]


def cross_entropy(logits, labels):
    z = logits.astype(np.float64) - logits.max(axis=1, keepdims=True)
    return float(np.mean(np.log(np.exp(z).sum(axis=1)) - z[np.arange(len(labels)), labels]))


def randomize_batch_norm(model, generator):
    """Batch-norm statistics and affine parameters away from their initial 0 / 1, so that a mapping error shows."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                n = m.num_features
                m.weight.copy_(0.5 + torch.rand(n, generator=generator))
                m.bias.copy_(0.1 * torch.randn(n, generator=generator))
                m.running_mean.copy_(0.1 * torch.randn(n, generator=generator))
                m.running_var.copy_(0.5 + torch.rand(n, generator=generator))


# net -> (dataset, eval subset, stored image size, channels, examples)
NETS = {
    "lenet": ("mnist", "test", 28, 1, 16),
    "cifarnet": ("cifar10", "test", 32, 3, 16),
    "resnet50": ("imagenet", "validation", 256, 3, 4),
    "inception_v3": ("imagenet", "validation", 320, 3, 3),
}


EXPORT_SIZE = {"lenet": 28, "cifarnet": 24, "resnet50": 64, "inception_v3": 299}


def torch_model(net):
    torch.manual_seed(7)
    if net == "lenet":
        return LeNet()
    if net == "cifarnet":
        return CifarNet()
    if net == "resnet50":
        m = torchvision.models.resnet50(weights=None)
    else:
        m = torchvision.models.inception_v3(weights=None, aux_logits=True, init_weights=False, transform_input=False)
    randomize_batch_norm(m, torch.Generator().manual_seed(11))
    return m


class TorchImportTest(program_harness.ProgramTestCase):
    tmp_prefix = "tg_import_"

    def data_dir(self, net):
        dataset, subset, size, channels, n = NETS[net]
        d = os.path.join(self.tmp, "data_" + net)
        if not os.path.isdir(d):
            os.makedirs(d)
            rng = np.random.default_rng(5)
            images = rng.integers(0, 256, size=(n, size, size, channels), dtype=np.uint8)
            write_raw_shard(os.path.join(d, f"{subset}-00000-of-00001"), images, rng.integers(1, 10, size=n))
        return d

    def import_ok(self, net, path, out, fmt="auto"):
        p = run("terngrad-import", "--net", net, "--input", path, "--output_dir", out, "--format", fmt)
        self.assertIn(f"imported {net} from {path}", p.stdout)
        self.assertIn("padding torch", p.stdout)
        return p.stdout

    def import_fails(self, what, *args, expect=()):
        out = os.path.join(self.tmp, "refused")
        p = run("terngrad-import", *args, expect_ok=False)
        self.assertNotEqual(p.returncode, 0, f"{what}: terngrad-import accepted it")
        lines = p.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, f"{what}: one line expected:\n{p.stderr}")
        for text in expect:
            self.assertIn(text, lines[0], what)
        self.assertFalse(os.path.exists(os.path.join(out, "model.ckpt-0")), f"{what}: a checkpoint was written")
        return lines[0]

    def check_logits(self, net, model, checkpoint_dir, what):
        dataset, subset, size, channels, n = NETS[net]
        inputs, logits, labels = evaluate(checkpoint_dir, self.data_dir(net), os.path.join(checkpoint_dir, "eval"),
                                          "--batch_size", n)
        self.assertEqual(len(logits), n)
        model.eval()
        with torch.no_grad():
            want = model(torch.from_numpy(inputs).permute(0, 3, 1, 2).contiguous()).numpy()
        self.assertEqual(logits.shape, want.shape)
        err = relative_error(logits, want)
        print(f"{net} {what}: {n} images {inputs.shape[1]}x{inputs.shape[2]}, max relative error of the logits "
              f"{err:.2e}", flush=True)
        self.assertLessEqual(err, TOLERANCE, f"{net} {what}")
        np.testing.assert_array_equal(np.argmax(logits, axis=1), np.argmax(want, axis=1), f"{net} {what}")

    def check_net(self, net):
        model = torch_model(net)
        dataset, subset, size, channels, n = NETS[net]
        side = EXPORT_SIZE[net]  # the ONNX file's input size (the weights do not depend on it)
        example_input = torch.randn(2, channels, side, side)
        onnx_path = os.path.join(self.tmp, net + ".onnx")
        # Tracing in training mode runs the model once in train mode, which moves the BN statistics: the file holds
        # the values after that pass, and so does the model; both imports are compared with it.
        torch.onnx.export(model, example_input, onnx_path, training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False, opset_version=13, input_names=["images"])
        st_path = os.path.join(self.tmp, net + ".safetensors")
        write_safetensors(st_path, state_arrays(model))
        files = [("safetensors", st_path), ("onnx", onnx_path)]
        if net in ("lenet", "cifarnet"):  # no batch norm to fold: an eval-mode export keeps every weight
            eval_path = os.path.join(self.tmp, net + "_eval.onnx")
            torch.onnx.export(model.eval(), example_input, eval_path, opset_version=13)
            files.append(("onnx (eval-mode export)", eval_path))
        for fmt, path in files:
            out = os.path.join(self.tmp, f"{net}_{fmt.split()[0]}" + ("_eval" if "eval" in fmt else ""))
            self.import_ok(net, path, out)
            self.check_logits(net, model, out, f"from {fmt}")
        return model

    def test_lenet(self):
        self.check_net("lenet")

    def test_cifarnet(self):
        self.check_net("cifarnet")

    def test_resnet50(self):
        model = self.check_net("resnet50")
        # An eval-mode export folds batch norm into the convolutions: refused, with the way out.
        folded = os.path.join(self.tmp, "resnet50_eval.onnx")
        torch.onnx.export(model.eval(), torch.randn(1, 3, 64, 64), folded, do_constant_folding=True, opset_version=13)
        self.import_fails("folded ONNX", "--net", "resnet50", "--input", folded, "--output_dir",
                          os.path.join(self.tmp, "refused"), expect=("eval-mode ONNX export", "TrainingMode.TRAINING"))

    def test_inception_v3(self):
        self.check_net("inception_v3")

    def test_bad_inputs(self):
        out = os.path.join(self.tmp, "refused")
        lenet = state_arrays(LeNet())
        good = os.path.join(self.tmp, "bad_good.safetensors")
        write_safetensors(good, lenet)

        text = os.path.join(self.tmp, "notes.txt")
        with open(text, "w") as f:
            f.write("these are not weights\n" * 10)
        self.import_fails("neither format", "--net", "lenet", "--input", text, "--output_dir", out,
                          expect=(text, "neither a safetensors file", "nor an ONNX model"))

        truncated = os.path.join(self.tmp, "truncated.safetensors")
        with open(good, "rb") as f:
            data = f.read()
        with open(truncated, "wb") as f:
            f.write(data[:40])
        self.import_fails("truncated header", "--net", "lenet", "--input", truncated, "--output_dir", out,
                          "--format", "safetensors", expect=(truncated, "truncated safetensors header"))
        short = os.path.join(self.tmp, "short_data.safetensors")
        with open(short, "wb") as f:
            f.write(data[:-100])
        self.import_fails("truncated data", "--net", "lenet", "--input", short, "--output_dir", out,
                          expect=(short, "outside the file"))

        wrong_shape = dict(lenet, **{"fc3.weight": np.zeros((500, 100), np.float32)})
        path = os.path.join(self.tmp, "wrong_shape.safetensors")
        write_safetensors(path, wrong_shape)
        self.import_fails("wrong shape", "--net", "lenet", "--input", path, "--output_dir", out,
                          expect=(path, "'fc3.weight'", "(500, 100)", "(500, 2450)"))

        wrong_dtype = dict(lenet, **{"conv1.bias": np.zeros(20, np.int64)})
        path = os.path.join(self.tmp, "wrong_dtype.safetensors")
        write_safetensors(path, wrong_dtype)
        self.import_fails("wrong dtype", "--net", "lenet", "--input", path, "--output_dir", out,
                          expect=(path, "'conv1.bias'", "I64"))

        missing = {k: v for k, v in lenet.items() if not k.startswith("conv2.")}
        path = os.path.join(self.tmp, "missing.safetensors")
        write_safetensors(path, missing)
        self.import_fails("missing tensors", "--net", "lenet", "--input", path, "--output_dir", out,
                          expect=(path, "2 tensors", "conv2.weight", "conv2.bias"))

        extra = dict(lenet, **{"fc9.weight": np.zeros((3, 3), np.float32), "head.bias": np.zeros(3, np.float32)})
        path = os.path.join(self.tmp, "extra.safetensors")
        write_safetensors(path, extra)
        self.import_fails("unexpected tensors", "--net", "lenet", "--input", path, "--output_dir", out,
                          expect=(path, "fc9.weight", "head.bias"))

        bad_json = os.path.join(self.tmp, "bad_json.safetensors")
        with open(bad_json, "wb") as f:
            body = b'{"conv1.weight": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]'
            f.write(struct.pack("<Q", len(body)) + body + b"\0" * 4)
        self.import_fails("malformed header", "--net", "lenet", "--input", bad_json, "--output_dir", out,
                          expect=(bad_json, "invalid JSON"))

        self.import_fails("alexnet", "--net", "alexnet", "--input", good, "--output_dir", out,
                          expect=("alexnet cannot be imported",))

        # An --output_dir with a checkpoint is refused and left as it was.
        taken = os.path.join(self.tmp, "taken")
        self.import_ok("lenet", good, taken)
        with open(os.path.join(taken, "model.ckpt-0"), "rb") as f:
            before = f.read()
        p = run("terngrad-import", "--net", "lenet", "--input", good, "--output_dir", taken, expect_ok=False)
        self.assertEqual(p.returncode, 1)
        self.assertIn("already holds a checkpoint", p.stderr)
        with open(os.path.join(taken, "model.ckpt-0"), "rb") as f:
            self.assertEqual(f.read(), before)

        # A checkpoint of another network as --pretrained_model_checkpoint_path: refused naming both.
        p = run("terngrad-train", "--net", "cifarnet", "--dataset", "cifar10", "--benchmark_mode", "--max_steps", 1,
                "--train_dir", os.path.join(self.tmp, "other_net"), "--pretrained_model_checkpoint_path", taken,
                expect_ok=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("holds --net lenet, this run is --net cifarnet", p.stderr)

    def test_fine_tune_with_terngrad(self):
        """A LeNet imported from PyTorch trains on with TernGrad: the test cross-entropy falls."""
        data = fashion_mnist_shards(self, os.path.join(self.tmp, "fashion_mnist"))
        torch.manual_seed(3)
        weights = os.path.join(self.tmp, "lenet_torch.safetensors")
        write_safetensors(weights, state_arrays(LeNet()))
        imported = os.path.join(self.tmp, "lenet_imported")
        self.import_ok("lenet", weights, imported)
        _, before, labels = evaluate(imported, data, os.path.join(self.tmp, "ft_before"), "--batch_size", 500)
        train_dir = os.path.join(self.tmp, "lenet_fine_tuned")
        p = run("terngrad-train", "--train_dir", train_dir, "--dataset", "fashion_mnist", "--data_dir", data, "--net",
                "lenet", "--pretrained_model_checkpoint_path", imported, "--num_nodes", 2, "--batch_size", 64,
                "--max_steps", 150, "--optimizer", "momentum", "--initial_learning_rate", 0.01, "--grad_bits", 1,
                "--threads", 1, "--log_every", 1000, "--seed", 3)
        self.assertIn("--padding_style torch", p.stderr + p.stdout)  # taken from the imported checkpoint
        self.assertIn("started from", p.stderr + p.stdout)
        _, after, labels_after = evaluate(train_dir, data, os.path.join(self.tmp, "ft_after"), "--batch_size", 500,
                                          "--restore_avg_var", "false")
        np.testing.assert_array_equal(labels, labels_after)
        ce_before, ce_after = cross_entropy(before, labels), cross_entropy(after, labels)
        print(f"lenet imported from PyTorch, 150 TernGrad steps on 2 workers: test cross-entropy {ce_before:.3f} -> "
              f"{ce_after:.3f} (10,000 Fashion-MNIST test images)", flush=True)
        self.assertLess(ce_after, ce_before - 0.5)
        with open(os.path.join(train_dir, "flags.ini")) as f:
            self.assertIn("padding_style = torch", f.read())


def setup(argv):
    torch.set_num_threads(1)
    return f"torch {torch.__version__}, torchvision {torchvision.__version__}, numpy {np.__version__}"


def main():
    return program_harness.main("torch_import_test", __doc__, 1, MISSING,
                                "scripts/setup.sh installs python3-torch and python3-torchvision (for /usr/bin/python3)",
                                setup)


if __name__ == "__main__":
    sys.exit(main())
