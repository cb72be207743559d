#!/usr/bin/env bash
# CifarNet on CIFAR-10 with several workers, in the style of the reference's run_multi_gpus_cifar10.sh: the
# recipe is configs/cifar10_cifarnet_terngrad.ini (the reference's settings), this script decides the device,
# the folders (named from the settings) and the evaluation launched in the background beside training.
# Usage: scripts/run_multi_gpus_cifar10.sh
#   Environment: CONFIG (configs/cifar10_cifarnet_fp32.ini: the floating baseline), DEVICE (cpu | cuda),
#   NUM_GPUS (with cuda: 2 as the reference), DATA_DIR (made by scripts/prepare_cifar10.sh), ROOT_WORKSPACE,
#   BUILD_DIR, DRY_RUN=1 (print the commands), and any setting of the reference's script (NUM_NODES,
#   GRAD_BITS, BASE_LR, SEED, MAX_STEPS, ...: the list is TG_OVERRIDES in scripts/lib/launch_training.sh);
#   one that is unset keeps the config's value.
set -euo pipefail
# shellcheck source=lib/launch_training.sh
source "$(dirname "$0")/lib/launch_training.sh"

CONFIG=${CONFIG:-$TG_ROOT/configs/cifar10_cifarnet_terngrad.ini}
DEVICE=${DEVICE:-cpu}
NUM_GPUS=${NUM_GPUS:-1}
VAL_BATCH_SIZE=${VAL_BATCH_SIZE:-50}
EVAL_INTERVAL_SECS=${EVAL_INTERVAL_SECS:-10}
launch_training
