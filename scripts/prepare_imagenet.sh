#!/usr/bin/env bash
# Builds ImageNet-style TFRecord shards (train-NNNNN-of-01024, validation-NNNNN-of-00128; labels 1..K in the
# order of LABELS_FILE, 0 = background) from local folders: TRAIN_DIR/<synset>/*.JPEG and
# VALIDATION_DIR/<synset>/*.JPEG (validation images already sorted into synset folders).
# Usage: scripts/prepare_imagenet.sh TRAIN_DIR VALIDATION_DIR LABELS_FILE OUTPUT_DIR
# Environment, as the reference's script: RESIZE_DIMEN (0: keep sizes), RAW_PIXEL (True/False),
#   TRAIN_SHARDS (1024), VALIDATION_SHARDS (128), NUM_THREADS (8), QUALITY (90).
set -euo pipefail
TRAIN=${1:?usage: $0 TRAIN_DIR VALIDATION_DIR LABELS_FILE OUTPUT_DIR}
VAL=${2:?}; LABELS=${3:?}; OUT=${4:?}
HERE=$(cd "$(dirname "$0")/.." && pwd)
BIN=${TERNGRAD_DATA:-$HERE/build/terngrad-data}
[[ -x $BIN ]] || BIN=$(command -v terngrad-data || true)
[[ -n $BIN ]] || { echo "terngrad-data not found: build it or set TERNGRAD_DATA" >&2; exit 1; }
ARGS=(--train_directory "$TRAIN" --validation_directory "$VAL" --labels_file "$LABELS" --output_dir "$OUT"
      --train_shards "${TRAIN_SHARDS:-1024}" --validation_shards "${VALIDATION_SHARDS:-128}"
      --num_threads "${NUM_THREADS:-8}" --resize "${RESIZE_DIMEN:-0}" --quality "${QUALITY:-90}")
case "${RAW_PIXEL:-False}" in True|true|1) ARGS+=(--raw_pixel) ;; esac
"$BIN" build-image-data "${ARGS[@]}"
