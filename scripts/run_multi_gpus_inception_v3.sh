#!/usr/bin/env bash
# Inception-v3 (aux head, label smoothing 0.1) on ImageNet with TernGrad on 8 GPUs, in the style of the
# reference's run_multi_gpus_alexnet.sh: settings at the top (each can be overridden from the environment),
# output folders named from the settings, evaluation of the checkpoints launched in the background beside
# training, logs to files.
# The recipe is configs/imagenet_inception_v3_terngrad.ini's; GRAD_BITS=32 CLIP_FACTOR=0 gives the fp32 baseline.
# Usage: scripts/run_multi_gpus_inception_v3.sh
set -euo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-build}
case "$BUILD_DIR" in /*) ;; *) BUILD_DIR=$HERE/$BUILD_DIR ;; esac

DATASET_NAME=${DATASET_NAME:-imagenet}
ROOT_WORKSPACE=${ROOT_WORKSPACE:-$HOME/dataset/results/$DATASET_NAME}
DATA_DIR=${DATA_DIR:-$HOME/dataset/imagenet-data}       # made by scripts/prepare_imagenet.sh
DEVICE=${DEVICE:-cuda}
NUM_GPUS=${NUM_GPUS:-8}
NUM_NODES=${NUM_NODES:-$NUM_GPUS}                        # workers: one per GPU
OPTIMIZER=${OPTIMIZER:-momentum}
NET=${NET:-inception_v3}
IMAGE_SIZE=${IMAGE_SIZE:-299}
NUM_CLASSES=${NUM_CLASSES:-1001}
GRAD_BITS=${GRAD_BITS:-1}
BASE_LR=${BASE_LR:-0.1}                                  # 0.1 per 256 images
CLIP_FACTOR=${CLIP_FACTOR:-2.5}
WEIGHT_DECAY=${WEIGHT_DECAY:-0.00004}
MOMENTUM=${MOMENTUM:-0.9}
LR_DECAY_TYPE=${LR_DECAY_TYPE:-cosine}
WARMUP_STEPS=${WARMUP_STEPS:-25022}                      # 5 epochs at batch 256
LABEL_SMOOTHING=${LABEL_SMOOTHING:-0.1}
SIZE_TO_BINARIZE=${SIZE_TO_BINARIZE:-800}                # BN gammas/betas stay fp32
DROPOUT_KEEP_PROB=${DROPOUT_KEEP_PROB:-0.8}
TRAIN_BATCH_SIZE=${TRAIN_BATCH_SIZE:-256}                # total over all workers
SAVE_ITER=${SAVE_ITER:-5000}
QUANTIZE_LOGITS=${QUANTIZE_LOGITS:-false}
VAL_BATCH_SIZE=${VAL_BATCH_SIZE:-50}
MAX_STEPS=${MAX_STEPS:-500456}                           # 100 epochs
EVAL_INTERVAL_SECS=${EVAL_INTERVAL_SECS:-900}
RESTORE_AVG_VAR=${RESTORE_AVG_VAR:-true}
SEED=${SEED:-1}

EVAL_SUBSET=validation
FOLDER_WITH_GPUS=1
EXTRA_TRAIN_FLAGS=(--num_classes "$NUM_CLASSES" --warmup_steps "$WARMUP_STEPS" --label_smoothing "$LABEL_SMOOTHING"
  --dropout_keep_prob "$DROPOUT_KEEP_PROB")
source "$HERE/scripts/lib/launch_training.sh"
