#!/usr/bin/env bash
# LeNet on MNIST with several workers, in the style of the reference's run_multi_gpus_lenet.sh: settings at the
# top, output folders named from the settings, evaluation launched in the background beside training.
# Usage: scripts/run_multi_gpus_lenet.sh   (edit the settings below, or override them from the environment)
set -euo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$HERE/build}

DATASET_NAME=${DATASET_NAME:-mnist}                       # mnist or fashion_mnist
ROOT_WORKSPACE=${ROOT_WORKSPACE:-$HOME/dataset/results/$DATASET_NAME}
DATA_DIR=${DATA_DIR:-$HOME/dataset/${DATASET_NAME}-data}   # made by scripts/prepare_fashion_mnist.sh for fashion_mnist
DEVICE=${DEVICE:-cpu}                                     # cpu or cuda
NUM_GPUS=${NUM_GPUS:-1}
NUM_NODES=${NUM_NODES:-4}                                  # workers
OPTIMIZER=${OPTIMIZER:-momentum}
NET=${NET:-lenet}
IMAGE_SIZE=${IMAGE_SIZE:-28}
GRAD_BITS=${GRAD_BITS:-1}
BASE_LR=${BASE_LR:-0.01}
CLIP_FACTOR=${CLIP_FACTOR:-2.5}
WEIGHT_DECAY=${WEIGHT_DECAY:-0.0005}
MOMENTUM=${MOMENTUM:-0.9}
LR_DECAY_TYPE=${LR_DECAY_TYPE:-polynomial}
SIZE_TO_BINARIZE=${SIZE_TO_BINARIZE:-1}
TRAIN_BATCH_SIZE=${TRAIN_BATCH_SIZE:-64}                   # total over all workers
SAVE_ITER=${SAVE_ITER:-200}
QUANTIZE_LOGITS=${QUANTIZE_LOGITS:-true}
VAL_BATCH_SIZE=${VAL_BATCH_SIZE:-100}
MAX_STEPS=${MAX_STEPS:-10000}
EVAL_INTERVAL_SECS=${EVAL_INTERVAL_SECS:-1}
RESTORE_AVG_VAR=${RESTORE_AVG_VAR:-true}
SEED=${SEED:-123}

EVAL_SUBSET=test
EXTRA_TRAIN_FLAGS=()
source "$HERE/scripts/lib/launch_training.sh"
