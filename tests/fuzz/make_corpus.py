#!/usr/bin/env python3
"""Regenerates the seed corpora of tests/fuzz/corpus/ from real files of the project's own tools.

Usage: tests/fuzz/make_corpus.py BUILD_DIR   (a normal build with terngrad-data and terngrad-train)
  tfrecord/    shards written by terngrad-data: convert-idx (PNG and RAW, 3 Fashion-MNIST images),
               convert-cifar10 (2 synthetic records), build-image-data (JPEG and RAW from those PNGs)
  example/     single records of those shards (one per kind)
  image/       their image/encoded bytes (PNG gray, PNG RGB, JPEG RGB)
  checkpoint/  a LeNet checkpoint of a 1-step training: its header and tensor table cut off before the data,
               the same file reduced to its small tensors (header rewritten with protoc, valid CRCs), and the
               text index `checkpoint`
  config/      configs/*.ini
  torch_weights/  a small safetensors file (F32, F16, BF16 and I64 tensors, metadata, a padded header) and a small
               ONNX model (protoc-encoded: a Conv and a BatchNormalization node, initializers in raw_data and in
               float_data), the two inputs of terngrad-import
Only the standard library and protoc; the pieces are small so the corpora stay under 100 KB."""
import gzip, os, random, re, shutil, struct, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.join(ROOT, "tests/fuzz/corpus")
FMNIST = "/usr/share/datasets/fashion-mnist"


def crc32c(data, crc=0):
    table = crc32c.table
    if table is None:
        table = crc32c.table = [0] * 256
        for i in range(256):
            c = i
            for _ in range(8):
                c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
            table[i] = c
    crc ^= 0xFFFFFFFF
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF
crc32c.table = None


def records(path):
    data, pos, out = open(path, "rb").read(), 0, []
    while pos < len(data):
        (n,) = struct.unpack_from("<Q", data, pos)
        out.append(data[pos + 12:pos + 12 + n])
        pos += 16 + n
    return out


def varint(b, p):
    v = s = 0
    while True:
        v |= (b[p] & 0x7F) << s
        s += 7
        p += 1
        if not b[p - 1] & 0x80:
            return v, p


def fields(b):
    """(field number, value) of one protobuf message; length-delimited values as bytes."""
    p, out = 0, []
    while p < len(b):
        key, p = varint(b, p)
        if key & 7 == 0:
            v, p = varint(b, p)
        elif key & 7 == 2:
            n, p = varint(b, p)
            v, p = b[p:p + n], p + n
        else:
            raise ValueError("wire type %d" % (key & 7))
        out.append((key >> 3, v))
    return out


def encoded_image(example):
    """image/encoded of a serialized tf.Example (Example.features=1, Features.feature map=1)."""
    for _, features in fields(example):
        for _, entry in fields(features):
            kv = dict(fields(entry))
            if kv.get(1) == b"image/encoded":
                return dict(fields(dict(fields(kv[2]))[1]))[1]  # Feature.bytes_list=1, BytesList.value=1


def put(target, name, data):
    os.makedirs(os.path.join(CORPUS, target), exist_ok=True)
    with open(os.path.join(CORPUS, target, name), "wb") as f:
        f.write(data)


def main(build):
    run = lambda *a: subprocess.run([str(x) for x in a], check=True, stdout=subprocess.DEVNULL)
    data_bin, train_bin = os.path.join(build, "terngrad-data"), os.path.join(build, "terngrad-train")
    tmp = tempfile.mkdtemp(prefix="tg_corpus_")
    try:
        # Fashion-MNIST: the first 3 images and labels as plain idx files.
        imgs = gzip.open(FMNIST + "/train-images-idx3-ubyte.gz").read()
        labels = gzip.open(FMNIST + "/train-labels-idx1-ubyte.gz").read()
        open(tmp + "/img.idx", "wb").write(struct.pack(">IIII", 2051, 3, 28, 28) + imgs[16:16 + 3 * 784])
        open(tmp + "/lab.idx", "wb").write(struct.pack(">II", 2049, 3) + labels[8:11])
        for fmt in ("png", "raw"):
            run(data_bin, "convert-idx", "--images", tmp + "/img.idx", "--labels", tmp + "/lab.idx", "--subset",
                "train", "--num_shards", 1, "--format", fmt, "--output_dir", tmp + "/idx_" + fmt)
        # CIFAR-10 binary batches of 2 synthetic records each (label byte + 3x32x32 planes).
        os.makedirs(tmp + "/cifar_in")
        rng = random.Random(1)
        for name in ["data_batch_%d.bin" % i for i in range(1, 6)] + ["test_batch.bin"]:
            rec = b"".join(bytes([rng.randrange(10)]) + bytes(rng.randrange(256) for _ in range(3072)) for _ in range(2))
            open(tmp + "/cifar_in/" + name, "wb").write(rec)
        run(data_bin, "convert-cifar10", "--input_dir", tmp + "/cifar_in", "--output_dir", tmp + "/cifar",
            "--train_shards", 1, "--test_shards", 1)
        png_gray = encoded_image(records(tmp + "/idx_png/train-00000-of-00001")[0])
        png_rgb = encoded_image(records(tmp + "/cifar/test-00000-of-00001")[0])
        # build-image-data: two class folders of PNGs -> JPEG records (re-encoded) and RAW records.
        for cls, png in (("shirt", png_gray), ("truck", png_rgb)):
            os.makedirs("%s/images/%s" % (tmp, cls))
            open("%s/images/%s/a.png" % (tmp, cls), "wb").write(png)
        open(tmp + "/labels.txt", "w").write("shirt\ntruck\n")
        for extra, out in (([], "jpeg"), (["--raw_pixel"], "rawrgb")):
            run(data_bin, "build-image-data", "--train_directory", tmp + "/images", "--labels_file",
                tmp + "/labels.txt", "--output_dir", tmp + "/" + out, "--train_shards", 1, "--validation_fraction", 0,
                "--resize", 0,
                *extra)
        shards = {"mnist_png": tmp + "/idx_png/train-00000-of-00001", "mnist_raw": tmp + "/idx_raw/train-00000-of-00001",
                  "cifar_png": tmp + "/cifar/test-00000-of-00001", "jpeg": tmp + "/jpeg/train-00000-of-00001",
                  "raw_rgb": tmp + "/rawrgb/train-00000-of-00001"}
        for name, path in shards.items():
            put("tfrecord", name + ".tfrecord", open(path, "rb").read())
            put("example", name + ".example", records(path)[0])
        put("image", "gray.png", png_gray)
        put("image", "rgb.png", png_rgb)
        jpegs = [encoded_image(r) for r in records(shards["jpeg"])]
        put("image", "rgb.jpg", min(jpegs, key=len))
        # A 1-step LeNet training (synthetic input) for a real checkpoint and index.
        run(train_bin, "--benchmark_mode", "--net", "lenet", "--max_steps", 1, "--batch_size", 2, "--num_nodes", 1,
            "--threads", 1, "--train_dir", tmp + "/train", "--log_level", "error")
        ckpt = open(tmp + "/train/model.ckpt-1", "rb").read()
        (hlen,) = struct.unpack_from("<Q", ckpt, 8)
        header = ckpt[16:16 + hlen]
        put("checkpoint", "lenet_header_only.ckpt", ckpt[:16 + hlen + 4])
        put("checkpoint", "checkpoint.index", open(tmp + "/train/checkpoint", "rb").read())
        put("checkpoint", "lenet_small_tensors.ckpt", small_checkpoint(ckpt, header))
        for ini in sorted(os.listdir(ROOT + "/configs")):
            put("config", ini, open(os.path.join(ROOT, "configs", ini), "rb").read())
        put("torch_weights", "small.safetensors", small_safetensors())
        put("torch_weights", "small.onnx", small_onnx())
    finally:
        shutil.rmtree(tmp)


def small_checkpoint(ckpt, header):
    """The checkpoint reduced to its tensors of at most 256 bytes: header re-encoded by protoc, data copied."""
    proto = ["protoc", "-I", ROOT + "/proto", ROOT + "/proto/checkpoint.proto"]
    text = subprocess.run(proto + ["--decode=terngrad.CheckpointHeader"], input=header, check=True,
                          stdout=subprocess.PIPE).stdout.decode()
    old_offset = int(re.search(r"^data_offset: (\d+)", text, re.M).group(1))
    blocks = re.findall(r"^tensors \{\n.*?^\}\n", text, re.M | re.S)
    rest = re.sub(r"^tensors \{\n.*?^\}\n", "", text, flags=re.M | re.S)
    kept, data, offset = [], b"", 0
    for b in blocks:
        n = int(re.search(r"bytes: (\d+)", b).group(1))
        if n > 256:
            continue
        o = int(re.search(r"offset: (\d+)", b).group(1)) if "offset:" in b else 0
        chunk = ckpt[old_offset + o:old_offset + o + n]
        b = re.sub(r"  offset: \d+\n", "", b).replace("  bytes:", "  offset: %d\n  bytes:" % offset, 1)
        kept.append(b)
        data += chunk + bytes((64 - n % 64) % 64)
        offset += (n + 63) // 64 * 64
    for _ in range(3):  # data_offset depends on the header size
        body = re.sub(r"^data_offset: \d+", "data_offset: %d" % old_offset, rest, flags=re.M) + "".join(kept)
        h = subprocess.run(proto + ["--encode=terngrad.CheckpointHeader"], input=body.encode(), check=True,
                           stdout=subprocess.PIPE).stdout
        new_offset = (16 + len(h) + 4 + 63) // 64 * 64
        if new_offset == old_offset:
            break
        old_offset = new_offset
    out = ckpt[:8] + struct.pack("<Q", len(h)) + h + struct.pack("<I", crc32c(h))
    return out + bytes(old_offset - len(out)) + data


def small_safetensors():
    """A state_dict of 4 small tensors in the safetensors layout, header padded with spaces to 8 bytes."""
    import json
    tensors = [("conv1.weight", "F32", [2, 1, 3, 3], struct.pack("<18f", *[i / 7 for i in range(18)])),
               ("conv1.bias", "F16", [2], struct.pack("<2H", 0x3C00, 0xBC00)),
               ("bn1.running_var", "BF16", [2], struct.pack("<2H", 0x3F80, 0x4000)),
               ("bn1.num_batches_tracked", "I64", [], struct.pack("<q", 3))]
    header, data = {"__metadata__": {"format": "pt"}}, b""
    for name, dtype, shape, blob in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(blob)]}
        data += blob
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def small_onnx():
    """An ONNX ModelProto of a Conv and a BatchNormalization node over 3 initializers (protoc from text)."""
    raw = "".join("\\%03o" % b for b in struct.pack("<8f", *[0.5] * 8))
    text = """ir_version: 8
opset_import { domain: "" version: 13 }
graph {
  name: "g"
  node { input: "x" input: "conv.weight" output: "y" op_type: "Conv" }
  node { input: "y" input: "bn.weight" input: "bn.bias" input: "bn.running_mean" input: "bn.running_var"
         output: "z" op_type: "BatchNormalization" }
  initializer { dims: 2 dims: 1 dims: 2 dims: 2 data_type: 1 name: "conv.weight" raw_data: "%s" }
  initializer { dims: 2 data_type: 1 name: "bn.weight" float_data: 1 float_data: 2 }
  initializer { dims: 2 data_type: 11 name: "bn.bias" double_data: 0.5 double_data: -0.5 }
}
""" % raw
    return subprocess.run(["protoc", "-I", ROOT + "/proto", ROOT + "/proto/onnx.proto", "--encode=onnx.ModelProto"],
                          input=text.encode(), check=True, stdout=subprocess.PIPE).stdout


if __name__ == "__main__":
    main(sys.argv[1])
