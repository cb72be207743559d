#!/usr/bin/env python3
"""Writes the small crafted inputs of the data tests (tests/data/*), with Python's own gzip/zlib and a
hand-built tf.Example encoder, independent of terngrad's writer. Run from anywhere: python3 make_fixtures.py

  records.tfrecord        plain TFRecord: records b"first", b"", b"x" * 1000, bytes(range(256))
  records.tfrecord.gz     the same bytes through gzip.compress (what TFRecordOptions('GZIP') writes)
  records.tfrecord.zlib   the same bytes through zlib.compress (what TFRecordOptions('ZLIB') writes)
  raw_overflow.tfrecord   one tf.Example: 2 bytes of RAW pixels with image/height 2, image/width
                          3074457345618258603, image/channels 3 (h*w*c = 2^64 + 2: wraps to 2 in uint64)
  jpeg_bomb.tfrecord      one tf.Example whose image/encoded is a JPEG header (SOI, SOF0, SOS, EOI) claiming
                          32000 x 32000 x 3 pixels (3.07 GB once decoded)
"""
import gzip
import os
import struct
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def frame(rec):
    header = struct.pack("<Q", len(rec))
    return header + struct.pack("<I", masked(header)) + rec + struct.pack("<I", masked(rec))


def varint(n):
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field(num, payload):  # length-delimited field
    return varint(num << 3 | 2) + varint(len(payload)) + payload


def example(features):
    entries = b""
    for key, value in sorted(features.items()):
        if isinstance(value, bytes):
            feature = field(1, field(1, value))  # bytes_list { value }
        else:
            feature = field(3, field(1, varint(value)))  # int64_list { packed value }
        entries += field(1, field(1, key.encode()) + field(2, feature))
    return field(1, entries)  # Example.features


def write(name, data):
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(data)


def main():
    plain = b"".join(frame(r) for r in [b"first", b"", b"x" * 1000, bytes(range(256))])
    write("records.tfrecord", plain)
    write("records.tfrecord.gz", gzip.compress(plain, mtime=0))
    write("records.tfrecord.zlib", zlib.compress(plain))
    write("raw_overflow.tfrecord", frame(example({
        "image/encoded": b"\x07\x07", "image/format": b"RAW", "image/class/label": 1,
        "image/height": 2, "image/width": 3074457345618258603, "image/channels": 3})))
    sof0 = b"\xff\xc0" + struct.pack(">HBHHB", 17, 8, 32000, 32000, 3) + b"\x01\x22\x00\x02\x11\x01\x03\x11\x01"
    sos = b"\xff\xda" + struct.pack(">HB", 12, 3) + b"\x01\x00\x02\x11\x03\x11\x00\x3f\x00"
    bomb = b"\xff\xd8" + sof0 + sos + b"\xff\xd9"
    write("jpeg_bomb.tfrecord", frame(example({
        "image/encoded": bomb, "image/format": b"JPEG", "image/class/label": 1,
        "image/height": 32000, "image/width": 32000, "image/channels": 3})))


if __name__ == "__main__":
    main()
