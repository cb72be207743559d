#!/usr/bin/env bash
# AlexNet (the reference's two-branch variant with BN) on ImageNet with TernGrad on 8 GPUs, in the style of the
# reference's run_multi_gpus_alexnet.sh: settings at the top, output folders named from the settings, evaluation
# launched in the background beside training, logs to files. The defaults are the poster's 8-worker row: momentum,
# base LR 0.04, total batch 1024, dropout keep 0.8, clip 2.5 sigma, size_to_binarize 9217 (fc6, fc7 and the
# convolutions ternarized), exponential decay by 0.1 every 20 epochs, 92500 iterations.
# Usage: scripts/run_multi_gpus_alexnet.sh   (edit the settings below, or override them from the environment;
#        e.g. GRAD_BITS=32 DROPOUT_KEEP_PROB=0.5 for the floating baseline, DEVICE=cpu NUM_GPUS=1 on the CPU)
set -euo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$HERE/build}

DATASET_NAME=${DATASET_NAME:-imagenet}
ROOT_WORKSPACE=${ROOT_WORKSPACE:-$HOME/dataset/results/$DATASET_NAME}
DATA_DIR=${DATA_DIR:-$HOME/dataset/${DATASET_NAME}-data}   # made by scripts/prepare_imagenet.sh
DEVICE=${DEVICE:-cuda}                                     # cuda or cpu
NUM_GPUS=${NUM_GPUS:-8}
NUM_NODES=${NUM_NODES:-$NUM_GPUS}                          # workers: one per GPU
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0,1,2,3,4,5,6,7}
OPTIMIZER=${OPTIMIZER:-momentum}
NET=${NET:-alexnet}
IMAGE_SIZE=${IMAGE_SIZE:-224}
GRAD_BITS=${GRAD_BITS:-1}
BASE_LR=${BASE_LR:-0.04}
CLIP_FACTOR=${CLIP_FACTOR:-2.5}
WEIGHT_DECAY=${WEIGHT_DECAY:-0.0005}
DROPOUT_KEEP_PROB=${DROPOUT_KEEP_PROB:-0.8}
MOMENTUM=${MOMENTUM:-0.9}
LR_DECAY_TYPE=${LR_DECAY_TYPE:-exponential}
NUM_EPOCHS_PER_DECAY=${NUM_EPOCHS_PER_DECAY:-20}           # decay_steps = int(1281167 / 1024 * 20) = 25022
LR_DECAY_FACTOR=${LR_DECAY_FACTOR:-0.1}
SIZE_TO_BINARIZE=${SIZE_TO_BINARIZE:-9217}
TRAIN_BATCH_SIZE=${TRAIN_BATCH_SIZE:-1024}                  # total over all workers
SAVE_ITER=${SAVE_ITER:-5000}
QUANTIZE_LOGITS=${QUANTIZE_LOGITS:-false}
VAL_BATCH_SIZE=${VAL_BATCH_SIZE:-50}
MAX_STEPS=${MAX_STEPS:-92500}
EVAL_INTERVAL_SECS=${EVAL_INTERVAL_SECS:-900}
RESTORE_AVG_VAR=${RESTORE_AVG_VAR:-true}
SEED=${SEED:-1}

if [[ $DEVICE == cpu && $NUM_GPUS != 1 ]]; then
  echo "run_multi_gpus_alexnet.sh: DEVICE=cpu needs NUM_GPUS=1 (set NUM_NODES for the number of workers)" >&2
  exit 1
fi

EVAL_SUBSET=validation
FOLDER_WITH_GPUS=1
EXTRA_TRAIN_FLAGS=(--num_epochs_per_decay "$NUM_EPOCHS_PER_DECAY" --learning_rate_decay_factor "$LR_DECAY_FACTOR"
  --dropout_keep_prob "$DROPOUT_KEEP_PROB")
source "$HERE/scripts/lib/launch_training.sh"
