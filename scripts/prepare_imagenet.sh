#!/usr/bin/env bash
# Builds ImageNet-style TFRecord shards (train-NNNNN-of-01024, validation-NNNNN-of-00128; labels 1..K in the
# order of LABELS_FILE, 0 = background) from local folders: TRAIN_DIR/<synset>/*.JPEG and
# VALIDATION_DIR/<synset>/*.JPEG (validation images already sorted into synset folders).
# Usage: scripts/prepare_imagenet.sh TRAIN_DIR VALIDATION_DIR LABELS_FILE OUTPUT_DIR
# Environment, as the reference's script: RESIZE_DIMEN (0: keep sizes), RAW_PIXEL (True/False),
#   TRAIN_SHARDS (1024), VALIDATION_SHARDS (128), NUM_THREADS (8), QUALITY (90).
#   TERNGRAD_DATA: the terngrad-data program (default: $BUILD_DIR/terngrad-data, then PATH; scripts/lib/common.sh).
set -euo pipefail
TRAIN=${1:?usage: $0 TRAIN_DIR VALIDATION_DIR LABELS_FILE OUTPUT_DIR}
VAL=${2:?}; LABELS=${3:?}; OUT=${4:?}
# shellcheck source=lib/common.sh
source "$(dirname "$0")/lib/common.sh"
BIN=$(tg_binary terngrad-data)
ARGS=(--train_directory "$TRAIN" --validation_directory "$VAL" --labels_file "$LABELS" --output_dir "$OUT"
      --train_shards "${TRAIN_SHARDS:-1024}" --validation_shards "${VALIDATION_SHARDS:-128}"
      --num_threads "${NUM_THREADS:-8}" --resize "${RESIZE_DIMEN:-0}" --quality "${QUALITY:-90}")
case "${RAW_PIXEL:-False}" in True|true|1) ARGS+=(--raw_pixel) ;; esac
"$BIN" build-image-data "${ARGS[@]}"
