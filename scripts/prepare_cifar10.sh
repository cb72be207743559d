#!/usr/bin/env bash
# Converts CIFAR-10 (binary version) to TFRecord shards: OUTPUT_DIR/train-*-of-N and test-00000-of-00001.
# Usage: scripts/prepare_cifar10.sh ARCHIVE_OR_DIR OUTPUT_DIR [TRAIN_SHARDS=10]
#   ARCHIVE_OR_DIR: a local cifar-10-binary.tar.gz, or a folder holding data_batch_{1..5}.bin and
#   test_batch.bin (or cifar-10-batches-bin/). Nothing is downloaded.
#   TERNGRAD_DATA: the terngrad-data program (default: $BUILD_DIR/terngrad-data, then PATH; scripts/lib/common.sh).
set -euo pipefail
SRC=${1:?usage: $0 ARCHIVE_OR_DIR OUTPUT_DIR [TRAIN_SHARDS]}
OUT=${2:?usage: $0 ARCHIVE_OR_DIR OUTPUT_DIR [TRAIN_SHARDS]}
SHARDS=${3:-10}
# shellcheck source=lib/common.sh
source "$(dirname "$0")/lib/common.sh"
BIN=$(tg_binary terngrad-data)
if [[ -f $SRC ]]; then
  TMP=$(mktemp -d)
  trap 'rm -rf "$TMP"' EXIT
  tar -xzf "$SRC" -C "$TMP"
  SRC=$TMP
fi
[[ -d $SRC ]] || { echo "$SRC is neither an archive nor a folder" >&2; exit 1; }
"$BIN" convert-cifar10 --input_dir "$SRC" --output_dir "$OUT" --train_shards "$SHARDS" --test_shards 1
