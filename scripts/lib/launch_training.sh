# shellcheck shell=bash
# The shared body of the scripts/run_multi_gpus_*.sh launchers (sourced, not run; call launch_training).
# The recipe is the launcher's CONFIG (a configs/*.ini file, passed as --config): this file adds only what the
# launcher decides (device, GPUs, folders, data, evaluation) and what the user overrides from the
# environment. A variable of TG_OVERRIDES that is set becomes --flag=value after --config (the command line
# wins over the file); an unset one leaves the config's value. Then, as the reference's scripts, it
#   - names the output folders from the resolved settings (the override, else the config's value):
#     <dataset>_<net>_<size>_<optimizer>_<bits>_<lr>_<clip>_<wd>_<momentum>_<size_to_binarize>_<batch>_<nodes>[_<gpus>]_<date>
#     in ROOT_WORKSPACE/<dataset>_training_data/ and _eval_data/, logs in ROOT_WORKSPACE/<dataset>_info/;
#   - evaluates while it trains: by default the training itself, every EVAL_EVERY steps (max_steps / 20) and after
#     the last (terngrad-train --eval_every: the learning curve lands in the train_dir, where scripts/plot_runs.py
#     and TensorBoard read it); with EVAL_EVERY=0, as the reference did, terngrad-eval in the background polling
#     the train_dir every EVAL_INTERVAL_SECS into the eval_dir (it exits after the checkpoint of max_steps);
#   - runs terngrad-train and waits for it (and the background evaluation).
# A failed training ends the background evaluation too (trap EXIT); INT/TERM first ask the training to stop (it
# saves a checkpoint and exits), then end both. DRY_RUN=1 prints the folders and the commands and runs nothing.
# With DEVICE=cuda both first say, in one line, that the GPU path has not yet been run on a GPU device.
# From the launcher: CONFIG DEVICE NUM_GPUS VAL_BATCH_SIZE EVAL_INTERVAL_SECS [NUM_NODES] [FOLDER_WITH_GPUS=1].
# From the environment: BUILD_DIR ROOT_WORKSPACE DATA_DIR EVAL_EVERY RESTORE_AVG_VAR(true) EVAL_SUBSET(the
# dataset's) DRY_RUN, and the variables of TG_OVERRIDES.
# Several machines (NVIDIA's scripts start them with one mpiexec the same way): HOSTS=a:8,b:8 (host:slots) or
# HOSTFILE=FILE (Open MPI's hostfile) makes the training one `mpirun -np <slots> -H ...` of one process per slot,
# each with GPUS_PER_PROCESS GPUs (1; a process takes the GPUs after those of the processes before it on its
# host) and one worker per GPU; the processes of one host form a node (--ranks_per_node RANKS_PER_NODE to set it),
# so `--exchange auto` is hierarchical with TernGrad. MPIRUN (mpirun) and MPI_ARGS (extra mpirun arguments) are
# passed through; the evaluation runs on this machine.
# Pinning (default; PIN=0 leaves placement to the OS): every process is bound to its own cores and its compute
# team to them (OMP_PROC_BIND=close, OMP_PLACES=cores; not with CPU_REPLICAS > 1, whose teams would share them):
# mpirun --bind-to core --map-by slot:PE=<threads> on the CPU (THREADS per process: the cores divided among the
# host's slots), --bind-to socket with GPUs; a single CPU process keeps its team on its cores. Unpinned, the ranks of one host and their threads migrate between
# cores and compute slower (bench/README.md, "Placement").

# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

# Environment variable (the reference scripts' names) : terngrad-train flag.
TG_OVERRIDES=(
  DATASET_NAME:dataset NET:net IMAGE_SIZE:image_size NUM_CLASSES:num_classes NUM_NODES:num_nodes
  TRAIN_BATCH_SIZE:batch_size MAX_STEPS:max_steps OPTIMIZER:optimizer BASE_LR:initial_learning_rate
  LR_DECAY_TYPE:learning_rate_decay_type NUM_EPOCHS_PER_DECAY:num_epochs_per_decay
  LR_DECAY_FACTOR:learning_rate_decay_factor WARMUP_STEPS:warmup_steps MOMENTUM:momentum
  WEIGHT_DECAY:weight_decay DROPOUT_KEEP_PROB:dropout_keep_prob LABEL_SMOOTHING:label_smoothing
  GRAD_BITS:grad_bits CLIP_FACTOR:clip_factor SIZE_TO_BINARIZE:size_to_binarize QUANTIZE_LOGITS:quantize_logits
  SAVE_ITER:save_iter SEED:seed
)

# The value of "KEY = value" in $CONFIG ("" when the file has no such line; '#' and ';' lines are comments).
config_value() {
  awk -v key="$1" '
    /^[ \t]*[#;]/ { next }
    index($0, "=") {
      k = substr($0, 1, index($0, "=") - 1); v = substr($0, index($0, "=") + 1)
      gsub(/^[ \t]+|[ \t]+$/, "", k); gsub(/^[ \t]+|[ \t]+$/, "", v); gsub(/^"|"$/, "", v)
      if (k == key) value = v
    }
    END { print value }' "$CONFIG"
}

# VAR KEY: the override $VAR, else the config's KEY, else an error naming both.
resolved() {
  local value=${!1:-}
  [[ -n $value ]] || value=$(config_value "$2")
  [[ -n $value ]] || tg_die "$CONFIG has no '$2' and $1 is not set: the folder name needs it"
  echo "$value"
}

# Slots of HOSTS (a:8,b:8 -> 16) or of HOSTFILE ("host slots=8" lines), and the slots of one host.
host_slots() {
  if [[ -n ${HOSTS:-} ]]; then
    local total=0 per="" entry n
    for entry in ${HOSTS//,/ }; do
      [[ $entry =~ ^[A-Za-z0-9._-]+:([1-9][0-9]*)$ ]] || tg_die "HOSTS=$HOSTS: '$entry' is not host:slots (e.g. a:8,b:8)"
      n=${BASH_REMATCH[1]}
      [[ -z $per || $per == "$n" ]] || tg_die "HOSTS=$HOSTS: every host must have the same number of slots"
      per=$n
      total=$((total + n))
    done
    echo "$total $per"
  else
    [[ -f $HOSTFILE ]] || tg_die "HOSTFILE=$HOSTFILE: no such file"
    awk '/^[ \t]*(#|$)/ { next }
         { s = 1; for (i = 2; i <= NF; ++i) if ($i ~ /^slots=/) s = substr($i, 7) + 0
           if (per != "" && s != per) bad = 1; per = s; total += s }
         END { if (bad || total == 0) exit 1; print total, per }' "$HOSTFILE" ||
      tg_die "HOSTFILE=$HOSTFILE: no host, or hosts with different slots"
  fi
}

# LAUNCHER_ARRAY TRAIN_ARGS_ARRAY: the mpirun prefix for HOSTS/HOSTFILE and the flags it implies (NUM_GPUS and
# NUM_NODES become GPUS_PER_PROCESS: one worker per GPU of each process), or, for one process, the pinning of its
# compute team.
multi_host_launcher() {
  local -n launch=$1 args=$2
  local pin=${PIN:-1}
  # One compute team per process: its threads bound one per core (several CPU replicas' teams would share them).
  local team_binding=0
  [[ $pin == 1 && ${CPU_REPLICAS:-1} == 1 ]] && team_binding=1
  if [[ -z ${HOSTS:-} && -z ${HOSTFILE:-} ]]; then
    if [[ $team_binding == 1 ]]; then
      launch=(env OMP_PROC_BIND=close OMP_PLACES=cores)
    fi
    return 0
  fi
  local slots total per gpus=${GPUS_PER_PROCESS:-1}
  slots=$(host_slots)
  total=${slots% *}
  per=${slots#* }
  [[ $gpus =~ ^[1-9][0-9]*$ ]] || tg_die "GPUS_PER_PROCESS=$gpus must be a positive integer"
  launch=("${MPIRUN:-mpirun}" -np "$total")
  # Open MPI refuses to start as root unless told: a launcher run as root tells it (and the command shows it).
  [[ $(id -u) == 0 ]] && launch+=(--allow-run-as-root)
  if [[ -n ${HOSTS:-} ]]; then launch+=(-H "$HOSTS"); else launch+=(--hostfile "$HOSTFILE"); fi
  if [[ $DEVICE == cpu ]]; then
    local threads=${THREADS:-$(($(nproc) / per))}
    ((threads >= 1)) || threads=1
    [[ $pin == 1 ]] && launch+=(--bind-to core --map-by "slot:PE=$threads")
    args+=(--threads "$threads")
  else
    [[ $pin == 1 ]] && launch+=(--bind-to socket --map-by slot)
    launch+=(-x CUDA_MODULE_LOADING=EAGER)
  fi
  NUM_GPUS=$gpus
  # shellcheck disable=SC2034  # NUM_NODES is read through TG_OVERRIDES (${!var})
  NUM_NODES=$gpus
  if [[ $DEVICE == cpu ]]; then
    # shellcheck disable=SC2034  # read through TG_OVERRIDES
    NUM_NODES=${CPU_REPLICAS:-1}
    [[ -n ${CPU_REPLICAS:-} ]] && args+=(--cpu_replicas "$CPU_REPLICAS")
  fi
  [[ $team_binding == 1 ]] && launch+=(-x OMP_PROC_BIND=close -x OMP_PLACES=cores)
  [[ -n ${RANKS_PER_NODE:-} ]] && args+=(--ranks_per_node "$RANKS_PER_NODE")
  local extra=()
  read -r -a extra <<< "${MPI_ARGS:-}"
  launch+=("${extra[@]}")
}

# The device and workers of the ImageNet launchers: DEVICE defaults to tg_default_device (cpu until the GPU path has
# passed its device check); on cuda NUM_GPUS (8) GPUs of one worker each, on cpu NUM_GPUS=1 and NUM_NODES (8) workers.
imagenet_devices() {
  DEVICE=${DEVICE:-$(tg_default_device)}
  if [[ $DEVICE == cuda* ]]; then
    NUM_GPUS=${NUM_GPUS:-8}
    NUM_NODES=${NUM_NODES:-$NUM_GPUS}
  else
    NUM_GPUS=${NUM_GPUS:-1}
    NUM_NODES=${NUM_NODES:-8}
    [[ $NUM_GPUS == 1 ]] || tg_die "DEVICE=cpu needs NUM_GPUS=1 (set NUM_NODES for the number of workers)"
  fi
}

stop_training() {  # EXIT_STATUS: asks the training to stop (checkpoint, exit), waits for it, exits
  kill -TERM "$TRAIN_PID" 2> /dev/null || true
  wait "$TRAIN_PID" 2> /dev/null || true
  exit "$1"
}

launch_training() {
  local given=$CONFIG  # a relative one: from the current folder, else from the repository root
  case "$CONFIG" in /*) ;; *) [[ -f $CONFIG ]] || CONFIG=$TG_ROOT/$CONFIG ;; esac
  [[ -f $CONFIG ]] || tg_die "CONFIG=$given: no such file"
  CONFIG=$(cd "$(dirname "$CONFIG")" && pwd)/$(basename "$CONFIG")
  TRAIN_BIN=$(tg_binary terngrad-train)
  EVAL_BIN=$(tg_binary terngrad-eval)

  local train_prefix=() launch_args=()
  multi_host_launcher train_prefix launch_args
  local dataset folder="" field
  dataset=$(resolved DATASET_NAME dataset)
  for field in DATASET_NAME:dataset NET:net IMAGE_SIZE:image_size OPTIMIZER:optimizer GRAD_BITS:grad_bits \
    BASE_LR:initial_learning_rate CLIP_FACTOR:clip_factor WEIGHT_DECAY:weight_decay MOMENTUM:momentum \
    SIZE_TO_BINARIZE:size_to_binarize TRAIN_BATCH_SIZE:batch_size NUM_NODES:num_nodes; do
    folder+=${folder:+_}$(resolved "${field%%:*}" "${field#*:}")
  done
  [[ ${FOLDER_WITH_GPUS:-0} == 1 ]] && folder=${folder}_${NUM_GPUS}
  folder=${folder}_$(date | tr ' ' '_' | tr ':' '-')

  ROOT_WORKSPACE=${ROOT_WORKSPACE:-$HOME/dataset/results/$dataset}
  DATA_DIR=${DATA_DIR:-$HOME/dataset/${dataset}-data}
  local train_dir=$ROOT_WORKSPACE/${dataset}_training_data/$folder
  local eval_dir=$ROOT_WORKSPACE/${dataset}_eval_data/$folder
  local info_dir=$ROOT_WORKSPACE/${dataset}_info
  local train_log=$info_dir/training_${folder}_info.txt eval_log=$info_dir/eval_${folder}_info.txt

  local max_steps every
  max_steps=${MAX_STEPS:-$(config_value max_steps)}
  max_steps=${max_steps:-1000}  # the trainer's default
  every=${EVAL_EVERY:-$((max_steps / 20 > 0 ? max_steps / 20 : 1))}
  [[ $every =~ ^[0-9]+$ ]] || tg_die "EVAL_EVERY=$every: a number of steps (0: terngrad-eval beside the training)"
  local eval_args=(--checkpoint_dir "$train_dir" --eval_dir "$eval_dir" --data_dir "$DATA_DIR"
    --batch_size "$VAL_BATCH_SIZE" --eval_interval_secs "$EVAL_INTERVAL_SECS"
    --restore_avg_var "${RESTORE_AVG_VAR:-true}" --device "${DEVICE/%cuda/cuda:0}")
  if [[ -n ${EVAL_SUBSET:-} ]]; then eval_args+=(--subset "$EVAL_SUBSET"); fi
  local train_args=(--config "$CONFIG") pair var
  for pair in "${TG_OVERRIDES[@]}"; do
    var=${pair%%:*}
    if [[ -n ${!var:-} ]]; then train_args+=("--${pair#*:}=${!var}"); fi
  done
  train_args+=(--train_dir "$train_dir" --data_dir "$DATA_DIR" --device "$DEVICE" --num_gpus "$NUM_GPUS"
    --metrics_jsonl "$info_dir/training_${folder}_metrics.jsonl" "${launch_args[@]}")
  if [[ $every -gt 0 ]]; then
    train_args+=(--eval_every "$every")
    if [[ -n ${EVAL_SUBSET:-} ]]; then train_args+=(--eval_subset "$EVAL_SUBSET"); fi
  fi

  # Said once, in the dry run as at a real start, by every launcher run on a GPU.
  if [[ $DEVICE == cuda* ]]; then
    echo "note: the GPU path is compiled and tested against the CPU reference in unit tests but has not yet been" \
      "run on a GPU device"
  fi
  if [[ ${DRY_RUN:-0} == 1 ]]; then
    echo "train_dir: $train_dir"
    echo "eval_dir: $eval_dir"
    echo "logs: $train_log $eval_log"
    if [[ $every -eq 0 ]]; then echo "eval: $(printf '%q ' "$EVAL_BIN" "${eval_args[@]}")"; fi
    echo "train: $(printf '%q ' "${train_prefix[@]}" "$TRAIN_BIN" "${train_args[@]}")"
    return 0
  fi

  mkdir -p "$train_dir" "$info_dir"
  echo "training into $train_dir; logs in $info_dir"
  EVAL_PID=""
  if [[ $every -eq 0 ]]; then
    mkdir -p "$eval_dir"
    "$EVAL_BIN" "${eval_args[@]}" > "$eval_log" 2>&1 &
    EVAL_PID=$!
    # Whatever ends this script (a failed training included) ends the evaluation polling beside it.
    trap 'kill "$EVAL_PID" 2> /dev/null || true' EXIT
  fi
  # Several GPUs in one process: CUDA loads every kernel at start (NCCL's documented hazard: a lazily loaded
  # kernel during a collective can hang the GPUs); the trainer also syncs a warm-up step before the first collective.
  if [[ $DEVICE == cuda* && ${NUM_GPUS:-1} -gt 1 ]]; then export CUDA_MODULE_LOADING=${CUDA_MODULE_LOADING:-EAGER}; fi
  "${train_prefix[@]}" "$TRAIN_BIN" "${train_args[@]}" > >(tee "$train_log") 2>&1 &
  TRAIN_PID=$!
  trap 'stop_training 130' INT
  trap 'stop_training 143' TERM
  local status=0
  wait "$TRAIN_PID" || status=$?
  if [[ $status -ne 0 ]]; then
    echo "$(basename "$0"): the training failed (exit $status; log $train_log)${EVAL_PID:+; evaluation stopped}" >&2
    exit "$status"
  fi
  if [[ -z $EVAL_PID ]]; then  # the training's last evaluation: its final checkpoint's accuracy
    grep "test precision@1" "$train_log" | tail -n 1
    return 0
  fi
  wait "$EVAL_PID" || echo "$(basename "$0"): the evaluation ended with exit $? (log $eval_log)" >&2
  tail -n 1 "$eval_log"
}
