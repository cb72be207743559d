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

DATE=$(date | tr ' ' '_' | tr ':' '-')
FOLDER_NAME=${DATASET_NAME}_${NET}_${IMAGE_SIZE}_${OPTIMIZER}_${GRAD_BITS}_${BASE_LR}_${CLIP_FACTOR}_${WEIGHT_DECAY}_${MOMENTUM}_${SIZE_TO_BINARIZE}_${TRAIN_BATCH_SIZE}_${NUM_NODES}_${DATE}
TRAIN_DIR=$ROOT_WORKSPACE/${DATASET_NAME}_training_data/$FOLDER_NAME
EVAL_DIR=$ROOT_WORKSPACE/${DATASET_NAME}_eval_data/$FOLDER_NAME
INFO_DIR=$ROOT_WORKSPACE/${DATASET_NAME}_info
mkdir -p "$TRAIN_DIR" "$EVAL_DIR" "$INFO_DIR"
echo "training into $TRAIN_DIR; logs in $INFO_DIR"

"$BUILD_DIR/terngrad-eval" --checkpoint_dir "$TRAIN_DIR" --data_dir "$DATA_DIR" --subset test \
  --batch_size "$VAL_BATCH_SIZE" --eval_interval_secs "$EVAL_INTERVAL_SECS" --max_steps "$MAX_STEPS" \
  --restore_avg_var "$RESTORE_AVG_VAR" --device "${DEVICE/cuda/cuda:0}" > "$INFO_DIR/eval_${FOLDER_NAME}_info.txt" 2>&1 &
EVAL_PID=$!
trap 'kill $EVAL_PID 2>/dev/null || true' INT TERM

"$BUILD_DIR/terngrad-train" --train_dir "$TRAIN_DIR" --data_dir "$DATA_DIR" --dataset "$DATASET_NAME" \
  --device "$DEVICE" --num_gpus "$NUM_GPUS" --num_nodes "$NUM_NODES" --net "$NET" --image_size "$IMAGE_SIZE" \
  --optimizer "$OPTIMIZER" --initial_learning_rate "$BASE_LR" --learning_rate_decay_type "$LR_DECAY_TYPE" \
  --grad_bits "$GRAD_BITS" --clip_factor "$CLIP_FACTOR" --weight_decay "$WEIGHT_DECAY" --momentum "$MOMENTUM" \
  --size_to_binarize "$SIZE_TO_BINARIZE" --batch_size "$TRAIN_BATCH_SIZE" --save_iter "$SAVE_ITER" \
  --quantize_logits="$QUANTIZE_LOGITS" --max_steps "$MAX_STEPS" --seed "$SEED" \
  --metrics_jsonl "$INFO_DIR/training_${FOLDER_NAME}_metrics.jsonl" 2>&1 | tee "$INFO_DIR/training_${FOLDER_NAME}_info.txt"

wait $EVAL_PID
tail -n 1 "$INFO_DIR/eval_${FOLDER_NAME}_info.txt"
