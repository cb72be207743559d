#!/usr/bin/env bash
# LeNet on MNIST with several workers, in the style of the reference's run_multi_gpus_lenet.sh: the recipe is
# configs/mnist_lenet_terngrad.ini (the reference's settings with TernGrad), this script decides the device,
# the folders (named from the settings) and the evaluation launched in the background beside training.
# Usage: scripts/run_multi_gpus_lenet.sh
#   Environment: CONFIG (configs/mnist_lenet_fp32.ini: the reference's fp32 run; configs/fashion_mnist_*.ini),
#   DEVICE (cpu | cuda), NUM_GPUS, DATA_DIR, ROOT_WORKSPACE, BUILD_DIR, DRY_RUN=1 (print the commands), and
#   any setting of the reference's script (NUM_NODES, GRAD_BITS, BASE_LR, SEED, MAX_STEPS, ...: the list is
#   TG_OVERRIDES in scripts/lib/launch_training.sh); one that is unset keeps the config's value.
set -euo pipefail
# shellcheck source=lib/launch_training.sh
source "$(dirname "$0")/lib/launch_training.sh"

CONFIG=${CONFIG:-$TG_ROOT/configs/mnist_lenet_terngrad.ini}
DEVICE=${DEVICE:-cpu}
NUM_GPUS=${NUM_GPUS:-1}
VAL_BATCH_SIZE=${VAL_BATCH_SIZE:-100}
EVAL_INTERVAL_SECS=${EVAL_INTERVAL_SECS:-1}
launch_training
