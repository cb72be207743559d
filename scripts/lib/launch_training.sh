# Shared tail of the scripts/run_multi_gpus_*.sh launchers (sourced, not run): from the settings the launcher
# defined above it, names the output folders as the reference's scripts did
#   <dataset>_<net>_<size>_<optimizer>_<bits>_<lr>_<clip>_<wd>_<momentum>_<size_to_binarize>_<batch>_<nodes>[_<gpus>]_<date>
# starts terngrad-eval in the background on the train_dir (it exits after the checkpoint of MAX_STEPS), runs
# terngrad-train with the common flags plus EXTRA_TRAIN_FLAGS (an array), logs both to INFO_DIR, and waits.
# Settings read: BUILD_DIR DATASET_NAME ROOT_WORKSPACE DATA_DIR DEVICE NUM_GPUS NUM_NODES OPTIMIZER NET IMAGE_SIZE
# GRAD_BITS BASE_LR CLIP_FACTOR WEIGHT_DECAY MOMENTUM LR_DECAY_TYPE SIZE_TO_BINARIZE TRAIN_BATCH_SIZE SAVE_ITER
# QUANTIZE_LOGITS VAL_BATCH_SIZE MAX_STEPS EVAL_INTERVAL_SECS RESTORE_AVG_VAR SEED EVAL_SUBSET
# [FOLDER_WITH_GPUS=1] [EXTRA_TRAIN_FLAGS=(...)].

case "$BUILD_DIR" in /*) ;; *) BUILD_DIR=$(pwd)/$BUILD_DIR ;; esac
for bin in terngrad-train terngrad-eval; do
  [[ -x $BUILD_DIR/$bin ]] || { echo "$BUILD_DIR/$bin not found: build first (cmake --build $BUILD_DIR)" >&2; exit 1; }
done

DATE=$(date | tr ' ' '_' | tr ':' '-')
FOLDER_NAME=${DATASET_NAME}_${NET}_${IMAGE_SIZE}_${OPTIMIZER}_${GRAD_BITS}_${BASE_LR}_${CLIP_FACTOR}_${WEIGHT_DECAY}_${MOMENTUM}_${SIZE_TO_BINARIZE}_${TRAIN_BATCH_SIZE}_${NUM_NODES}
[[ ${FOLDER_WITH_GPUS:-0} == 1 ]] && FOLDER_NAME=${FOLDER_NAME}_${NUM_GPUS}
FOLDER_NAME=${FOLDER_NAME}_${DATE}
TRAIN_DIR=$ROOT_WORKSPACE/${DATASET_NAME}_training_data/$FOLDER_NAME
EVAL_DIR=$ROOT_WORKSPACE/${DATASET_NAME}_eval_data/$FOLDER_NAME
INFO_DIR=$ROOT_WORKSPACE/${DATASET_NAME}_info
mkdir -p "$TRAIN_DIR" "$EVAL_DIR" "$INFO_DIR"
echo "training into $TRAIN_DIR; logs in $INFO_DIR"

"$BUILD_DIR/terngrad-eval" --checkpoint_dir "$TRAIN_DIR" --eval_dir "$EVAL_DIR" --data_dir "$DATA_DIR" \
  --subset "$EVAL_SUBSET" --batch_size "$VAL_BATCH_SIZE" --eval_interval_secs "$EVAL_INTERVAL_SECS" \
  --max_steps "$MAX_STEPS" --restore_avg_var "$RESTORE_AVG_VAR" --device "${DEVICE/%cuda/cuda:0}" \
  > "$INFO_DIR/eval_${FOLDER_NAME}_info.txt" 2>&1 &
EVAL_PID=$!
# Whatever ends this script (a failed training included: set -e) ends the evaluation polling beside it.
trap 'kill $EVAL_PID 2>/dev/null || true' EXIT INT TERM

"$BUILD_DIR/terngrad-train" --train_dir "$TRAIN_DIR" --data_dir "$DATA_DIR" --dataset "$DATASET_NAME" \
  --device "$DEVICE" --num_gpus "$NUM_GPUS" --num_nodes "$NUM_NODES" --net "$NET" --image_size "$IMAGE_SIZE" \
  --optimizer "$OPTIMIZER" --initial_learning_rate "$BASE_LR" --learning_rate_decay_type "$LR_DECAY_TYPE" \
  --grad_bits "$GRAD_BITS" --clip_factor "$CLIP_FACTOR" --weight_decay "$WEIGHT_DECAY" --momentum "$MOMENTUM" \
  --size_to_binarize "$SIZE_TO_BINARIZE" --batch_size "$TRAIN_BATCH_SIZE" --save_iter "$SAVE_ITER" \
  --quantize_logits="$QUANTIZE_LOGITS" --max_steps "$MAX_STEPS" --seed "$SEED" \
  --metrics_jsonl "$INFO_DIR/training_${FOLDER_NAME}_metrics.jsonl" "${EXTRA_TRAIN_FLAGS[@]}" 2>&1 |
  tee "$INFO_DIR/training_${FOLDER_NAME}_info.txt"

wait $EVAL_PID
tail -n 1 "$INFO_DIR/eval_${FOLDER_NAME}_info.txt"
