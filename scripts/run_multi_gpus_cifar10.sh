#!/usr/bin/env bash
# CifarNet on CIFAR-10 with several workers, in the style of the reference's run_multi_gpus_cifar10.sh: settings at the
# top, output folders named from the settings, evaluation launched in the background beside training.
# Usage: scripts/run_multi_gpus_cifar10.sh   (edit the settings below, or override them from the environment)
set -euo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$HERE/build}

DATASET_NAME=${DATASET_NAME:-cifar10}
ROOT_WORKSPACE=${ROOT_WORKSPACE:-$HOME/dataset/results/$DATASET_NAME}
DATA_DIR=${DATA_DIR:-$HOME/dataset/${DATASET_NAME}-data}   # made by scripts/prepare_cifar10.sh
DEVICE=${DEVICE:-cpu}                                     # cpu or cuda
NUM_GPUS=${NUM_GPUS:-1}
NUM_NODES=${NUM_NODES:-2}                                  # workers
OPTIMIZER=${OPTIMIZER:-adam}
NET=${NET:-cifar10_alexnet}
IMAGE_SIZE=${IMAGE_SIZE:-24}
GRAD_BITS=${GRAD_BITS:-1}
BASE_LR=${BASE_LR:-0.0002}
CLIP_FACTOR=${CLIP_FACTOR:-2.5}
WEIGHT_DECAY=${WEIGHT_DECAY:-0.004}
MOMENTUM=${MOMENTUM:-0.9}
LR_DECAY_TYPE=${LR_DECAY_TYPE:-exponential}
SIZE_TO_BINARIZE=${SIZE_TO_BINARIZE:-1}
TRAIN_BATCH_SIZE=${TRAIN_BATCH_SIZE:-128}                   # total over all workers
SAVE_ITER=${SAVE_ITER:-2000}
QUANTIZE_LOGITS=${QUANTIZE_LOGITS:-true}
VAL_BATCH_SIZE=${VAL_BATCH_SIZE:-50}
MAX_STEPS=${MAX_STEPS:-300000}
EVAL_INTERVAL_SECS=${EVAL_INTERVAL_SECS:-10}
RESTORE_AVG_VAR=${RESTORE_AVG_VAR:-true}
SEED=${SEED:-123}

EVAL_SUBSET=test
EXTRA_TRAIN_FLAGS=(--num_epochs_per_decay "${NUM_EPOCHS_PER_DECAY:-200}")
source "$HERE/scripts/lib/launch_training.sh"
