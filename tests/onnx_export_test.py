#!/usr/bin/env python3
"""terngrad-export checked against a real runtime: every network of the registry is trained a few steps, exported
to ONNX, checked by onnx.checker (full check) and run by ONNX Runtime on exactly the tensor terngrad-eval fed the
net (`--dump_inputs`); its logits must match terngrad-eval's (`--dump_logits`): max |onnx - eval| / max |eval|
<= 1e-4 over the whole array, and the same arg-max for every example. On Fashion-MNIST (a LeNet trained 300 steps
on the real data), precision@1 over the 10,000 test images from ONNX Runtime's logits equals terngrad-eval's.
Also: both padding styles (--padding_style torch: symmetric pads, average pools counting the padding), every
opset the exporter offers that ONNX Runtime 1.31 runs (13, 17, 21, 26), raw weights against
`--restore_avg_var=false`, a fixed batch, the metadata, and the bad inputs (no checkpoint, an unknown net, another
checkpoint format version, an output that cannot be written: one line, exit 1, no file, an older file intact).

Needs numpy, onnx and onnxruntime (scripts/setup.sh installs them into /opt/terngrad-venv, which the ctest
`onnx_export` runs this with). Without them: exit 77 (SKIPPED, with the reason); under CI=true a failure.
Layer cases no registry net has (grouped and depthwise convolutions, asymmetric kernels and pads, a flatten read
by a non-FC layer, batch norm on (N, C)) come from tests/onnx_export_cases.cc, checked the same way.
Usage: onnx_export_test.py BIN_DIR CASES_PROGRAM [unittest arguments]
  (BIN_DIR holds terngrad-train/-eval/-export/-data; CASES_PROGRAM is the onnx_export_cases program)
"""
import os
import struct
import subprocess
import sys

CASES = ""
TOLERANCE = 1e-4

try:
    import numpy as np
    import onnx
    import onnxruntime as ort
    MISSING = None
except ImportError as e:  # reported in main()
    MISSING = str(e)


# ---- the programs (tests/program_harness.py) ----------------------------------------------------------------------
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import program_harness  # noqa: E402
from program_harness import evaluate, fashion_mnist_shards, relative_error, run, write_raw_shard  # noqa: E402
from make_fixtures import crc32c  # noqa: E402  (tests/data, on the path through program_harness)


# One thread per program: ctest runs two tests at once on a 2-core machine, where OpenMP teams of 2 spin-wait.
def train(train_dir, *args):
    run("terngrad-train", "--train_dir", train_dir, "--log_every", 1000, "--seed", 3, "--threads", 1, *args)


def export(train_dir, output, *args):
    p = run("terngrad-export", "--checkpoint_dir", train_dir, "--output", output, *args)
    return p.stdout


def ort_outputs(model_path, inputs, batch=None):
    session = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    step = batch or len(inputs)
    logits, probabilities = [], []
    for i in range(0, len(inputs), step):
        out = dict(zip(names, session.run(None, {"images": inputs[i:i + step]})))
        logits.append(out["logits"])
        probabilities.append(out["probabilities"])
    return np.concatenate(logits), np.concatenate(probabilities)


def metadata(model):
    return {p.key: p.value for p in model.metadata_props}


def top1_hits(logits, labels):
    """TF's in_top_k as terngrad-eval counts: no class scores strictly above the label's."""
    target = logits[np.arange(len(labels)), labels]
    return int(np.sum(np.sum(logits > target[:, None], axis=1) == 0))


class OnnxExportTest(program_harness.ProgramTestCase):
    tmp_prefix = "tg_onnx_"
    lenet = None  # (train_dir, data_dir) of the LeNet trained on Fashion-MNIST
    lenet_eval_result = None  # its evaluate() result

    # ---- shared runs ------------------------------------------------------------------------------------------------
    def lenet_run(self):
        if OnnxExportTest.lenet is None:
            data = fashion_mnist_shards(self, os.path.join(self.tmp, "fashion_mnist"))
            train_dir = os.path.join(self.tmp, "lenet")
            train(train_dir, "--dataset", "fashion_mnist", "--data_dir", data, "--net", "lenet", "--batch_size", 64,
                  "--max_steps", 300, "--optimizer", "momentum", "--initial_learning_rate", 0.01, "--grad_bits", 1)
            OnnxExportTest.lenet = (train_dir, data)
        return OnnxExportTest.lenet

    def lenet_eval(self):
        """terngrad-eval of the LeNet (EMA weights) on the whole test set, with its dumps."""
        if OnnxExportTest.lenet_eval_result is None:
            train_dir, data = self.lenet_run()
            OnnxExportTest.lenet_eval_result = evaluate(train_dir, data, os.path.join(self.tmp, "lenet_eval"))
        return OnnxExportTest.lenet_eval_result

    def check_model(self, path, net, eval_record, weights="ema"):
        model = onnx.load(path)
        onnx.checker.check_model(model, full_check=True)
        meta = metadata(model)
        self.assertEqual(meta["net"], net)
        self.assertEqual(meta["weights"], weights)
        self.assertEqual(int(meta["step"]), eval_record["step"])
        self.assertEqual(meta["parameter_digest"], eval_record["parameter_digest"])
        for key in ("dataset", "image_size", "num_classes", "input_layout", "preprocessing", "weights_digest"):
            self.assertTrue(meta.get(key), f"metadata {key} missing")
        self.assertEqual([o.name for o in model.graph.output], ["logits", "probabilities"])
        self.assertFalse([n.name for n in model.graph.node if "AuxLogits" in n.name or "loss" in n.name])
        self.assertFalse([n for n in model.graph.node if n.op_type == "Dropout"])
        return model

    def check_outputs(self, path, inputs, want, what, batch=None):
        logits, probabilities = ort_outputs(path, inputs, batch)
        self.assertEqual(logits.shape, want.shape)
        err = relative_error(logits, want)
        print(f"{what}: {len(inputs)} examples, max relative error of the logits {err:.2e}", flush=True)
        self.assertLessEqual(err, TOLERANCE, what)
        np.testing.assert_array_equal(np.argmax(logits, axis=1), np.argmax(want, axis=1), what)
        expected = np.exp(want - want.max(axis=1, keepdims=True))
        expected /= expected.sum(axis=1, keepdims=True)
        np.testing.assert_allclose(probabilities, expected, atol=1e-5, err_msg=what)
        return logits

    # ---- the five networks ------------------------------------------------------------------------------------------
    def test_lenet_fashion_mnist_precision(self):
        train_dir, _ = self.lenet_run()
        record, inputs, logits, labels = self.lenet_eval()
        self.assertEqual(inputs.shape, (10000, 28, 28, 1))
        path = os.path.join(self.tmp, "lenet.onnx")
        export(train_dir, path)
        self.check_model(path, "lenet", record)
        ort_logits = self.check_outputs(path, inputs, logits, "lenet (Fashion-MNIST test set)")
        hits = top1_hits(ort_logits, labels)
        print(f"lenet: precision @ 1 ONNX Runtime {hits / len(labels):.4f}, terngrad-eval "
              f"{record['precision_at_1']:.4f}", flush=True)
        self.assertEqual(hits, round(record["precision_at_1"] * record["examples"]))
        self.assertGreater(record["precision_at_1"], 0.7)  # trained: the comparison means something

    def test_lenet_opsets_raw_weights_fixed_batch(self):
        train_dir, data = self.lenet_run()
        record, inputs, logits, _ = self.lenet_eval()
        inputs, logits = inputs[:500], logits[:500]  # the first 500 test images are enough here
        for opset in (13, 17, 21, 26):
            path = os.path.join(self.tmp, f"lenet_opset{opset}.onnx")
            export(train_dir, path, "--opset", opset)
            model = self.check_model(path, "lenet", record)
            self.assertEqual(model.opset_import[0].version, opset)
            self.check_outputs(path, inputs, logits, f"lenet opset {opset}")
        raw_record, raw_inputs, raw_logits, _ = evaluate(train_dir, data, os.path.join(self.tmp, "lenet_eval_raw"),
                                                         "--restore_avg_var=false")
        path = os.path.join(self.tmp, "lenet_raw.onnx")
        export(train_dir, path, "--weights", "raw", "--batch_size", 50)
        model = self.check_model(path, "lenet", raw_record, weights="raw")
        self.assertEqual(model.graph.input[0].type.tensor_type.shape.dim[0].dim_value, 50)
        self.assertNotEqual(metadata(model)["weights_digest"],
                            metadata(onnx.load(os.path.join(self.tmp, "lenet_opset17.onnx")))["weights_digest"])
        self.check_outputs(path, raw_inputs[:500], raw_logits[:500], "lenet raw weights, batch 50", batch=50)

    def synthetic_net(self, net, dataset, image_size, source_size, subset, *train_args, name=None):
        """A few steps of --benchmark_mode, then eval at batch 2 on 3 RAW images (a partial last batch)."""
        name = name or net
        train_dir = os.path.join(self.tmp, name)
        train(train_dir, "--benchmark_mode", "--dataset", dataset, "--net", net, "--image_size", image_size,
              "--batch_size", 2, "--max_steps", 3, "--optimizer", "momentum", "--initial_learning_rate", 0.01,
              *train_args)
        data = os.path.join(self.tmp, name + "_data")
        os.makedirs(data, exist_ok=True)
        rng = np.random.default_rng(7)
        images = rng.integers(0, 256, size=(3, source_size, source_size, 3), dtype=np.uint8)
        write_raw_shard(os.path.join(data, f"{subset}-00000-of-00001"), images, [1, 2, 3])
        record, inputs, logits, _ = evaluate(train_dir, data, os.path.join(self.tmp, name + "_eval"), "--batch_size", 2)
        self.assertEqual(inputs.shape, (3, image_size, image_size, 3))
        path = os.path.join(self.tmp, name + ".onnx")
        export(train_dir, path)
        self.check_model(path, net, record)
        self.check_outputs(path, inputs, logits, f"{net} at {image_size}x{image_size}")

    def test_cifarnet(self):
        self.synthetic_net("cifarnet", "cifar10", 24, 32, "test")

    def test_alexnet(self):
        # 96 pixels: pool5 is 2x2x256, so fc6's weight rows are permuted for the NCHW flatten.
        self.synthetic_net("alexnet", "imagenet", 96, 120, "validation")

    def test_resnet50(self):
        self.synthetic_net("resnet50", "imagenet", 64, 80, "validation")

    def test_inception_v3(self):
        self.synthetic_net("inception_v3", "imagenet", 75, 90, "validation")

    def test_torch_padding_style(self):
        # PyTorch's padding: symmetric pads at stride 2 (ResNet-50) and average pools counting the padding
        # (Inception-v3's count_include_pad=1), as a checkpoint of terngrad-import records it.
        self.synthetic_net("resnet50", "imagenet", 64, 80, "validation", "--padding_style", "torch",
                           name="resnet50_torch_padding")
        self.synthetic_net("inception_v3", "imagenet", 75, 90, "validation", "--padding_style", "torch",
                           name="inception_v3_torch_padding")

    def test_layer_cases(self):
        for opset in (13, 26):
            out = os.path.join(self.tmp, f"cases{opset}")
            os.makedirs(out)
            subprocess.run([CASES, out, str(opset)], check=True)
            for case in ("grouped", "branches"):
                path = os.path.join(out, case + ".onnx")
                model = onnx.load(path)
                onnx.checker.check_model(model, full_check=True)
                inputs = np.load(os.path.join(out, case + "_inputs.npy"))
                self.check_outputs(path, inputs, np.load(os.path.join(out, case + "_logits.npy")),
                                   f"layer case {case}, opset {opset}")
        ops = {n.name: n for n in onnx.load(os.path.join(self.tmp, "cases13", "grouped.onnx")).graph.node}
        attrs = {name: {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute} for name, n in ops.items()}
        self.assertEqual(attrs["conv1"]["group"], 2)
        self.assertEqual(attrs["conv1"]["pads"], [0, 0, 1, 1])
        self.assertEqual(attrs["depthwise"]["group"], 6)
        self.assertEqual(attrs["avgpool"]["pads"], [0, 0, 1, 1])
        self.assertEqual(attrs["avgpool"]["count_include_pad"], 0)
        self.assertEqual(ops["flatten/to_nhwc"].op_type, "Transpose")

    # ---- bad input --------------------------------------------------------------------------------------------------
    @staticmethod
    def read(path):
        with open(path, "rb") as f:
            return f.read()

    def export_fails(self, args, output, names):
        before = self.read(output) if os.path.exists(output) else None
        folder = os.path.dirname(output)
        listing = sorted(os.listdir(folder)) if os.path.isdir(folder) else None
        p = run("terngrad-export", *args, "--output", output, expect_ok=False)
        self.assertEqual(p.returncode, 1, p.stderr)
        lines = p.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, p.stderr)
        self.assertTrue(lines[0].startswith("terngrad-export: error: "), lines[0])
        self.assertIn(names, lines[0])
        if before is None:
            self.assertFalse(os.path.exists(output))
        else:
            self.assertEqual(self.read(output), before)  # the older file intact
        if listing is not None:
            self.assertEqual(sorted(os.listdir(folder)), listing)  # no temporary file left
        return lines[0]

    def patched_checkpoint(self, name, old, new):
        """A copy of the LeNet checkpoint whose header starts with `new` instead of `old` (same length), crc fixed."""
        train_dir, _ = self.lenet_run()
        data = bytearray(self.read(os.path.join(train_dir, "model.ckpt-300")))
        length = struct.unpack_from("<Q", data, 8)[0]
        header = bytes(data[16:16 + length])
        self.assertTrue(header.startswith(old), header[:16])  # fields in number order: format_version, model
        header = new + header[len(old):]
        data[16:16 + length] = header
        struct.pack_into("<I", data, 16 + length, crc32c(header))
        path = os.path.join(self.tmp, name)
        with open(path, "wb") as f:
            f.write(data)
        return path

    def test_bad_input(self):
        out_dir = os.path.join(self.tmp, "bad")
        os.makedirs(out_dir)
        output = os.path.join(out_dir, "model.onnx")
        empty = os.path.join(self.tmp, "empty_train_dir")
        os.makedirs(empty)
        self.export_fails(["--checkpoint_dir", empty], output, empty)
        with open(output, "wb") as f:
            f.write(b"an older export")
        self.export_fails(["--checkpoint_dir", empty], output, empty)
        os.remove(output)
        unknown = self.patched_checkpoint("unknown.ckpt", b"\x08\x01\x12\x05lenet", b"\x08\x01\x12\x05lenex")
        line = self.export_fails(["--checkpoint_path", unknown], output, "'lenex' is not a known network")
        self.assertIn(unknown, line)
        version = self.patched_checkpoint("version.ckpt", b"\x08\x01\x12\x05lenet", b"\x08\x07\x12\x05lenet")
        line = self.export_fails(["--checkpoint_path", version], output, "format version 7")
        self.assertIn(version, line)
        train_dir, _ = self.lenet_run()
        not_a_folder = os.path.join(self.tmp, "a_file")
        with open(not_a_folder, "w") as f:
            f.write("x")
        self.export_fails(["--checkpoint_dir", train_dir], os.path.join(not_a_folder, "model.onnx"),
                          os.path.join(not_a_folder, "model.onnx"))
        self.export_fails(["--checkpoint_dir", train_dir], os.path.join(self.tmp, "no", "such", "model.onnx"),
                          os.path.join(self.tmp, "no", "such", "model.onnx"))


def setup(argv):
    global CASES
    CASES = os.path.abspath(argv[2])
    return f"onnx {onnx.__version__}, onnxruntime {ort.__version__}, numpy {np.__version__}"


def main():
    return program_harness.main("onnx_export_test", __doc__, 2, MISSING,
                                "scripts/setup.sh installs numpy, onnx and onnxruntime into /opt/terngrad-venv", setup)


if __name__ == "__main__":
    sys.exit(main())
