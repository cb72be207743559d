#!/usr/bin/env bash
# Converts Fashion-MNIST (Debian package dataset-fashion-mnist, installed at /usr/share/datasets/fashion-mnist)
# to TFRecord shards: OUTPUT_DIR/train-0000N-of-0000K and OUTPUT_DIR/test-00000-of-00001.
# Usage: scripts/prepare_fashion_mnist.sh OUTPUT_DIR [TRAIN_SHARDS=4] [SOURCE_DIR]
#   TERNGRAD_DATA: the terngrad-data program (default: $BUILD_DIR/terngrad-data, then PATH; scripts/lib/common.sh).
set -euo pipefail
OUT=${1:?usage: $0 OUTPUT_DIR [TRAIN_SHARDS] [SOURCE_DIR]}
SHARDS=${2:-4}
SRC=${3:-/usr/share/datasets/fashion-mnist}
# shellcheck source=lib/common.sh
source "$(dirname "$0")/lib/common.sh"
BIN=$(tg_binary terngrad-data)
for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz; do
  [[ -f $SRC/$f ]] || { echo "missing $SRC/$f (apt-get install dataset-fashion-mnist)" >&2; exit 1; }
done
"$BIN" convert-idx --images "$SRC/train-images-idx3-ubyte.gz" --labels "$SRC/train-labels-idx1-ubyte.gz" \
  --subset train --num_shards "$SHARDS" --output_dir "$OUT"
"$BIN" convert-idx --images "$SRC/t10k-images-idx3-ubyte.gz" --labels "$SRC/t10k-labels-idx1-ubyte.gz" \
  --subset test --num_shards 1 --output_dir "$OUT"
"$BIN" inspect --data_dir "$OUT" --subset test > /dev/null
echo "converted Fashion-MNIST into $OUT (train: $SHARDS shards, test: 1)"
