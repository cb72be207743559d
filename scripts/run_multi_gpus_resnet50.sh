#!/usr/bin/env bash
# ResNet-50 v1.5 on ImageNet with TernGrad on 8 GPUs, in the style of the reference's run_multi_gpus_alexnet.sh:
# the recipe is configs/imagenet_resnet50_terngrad.ini, this script decides the GPUs (one worker per GPU), the
# folders (named from the settings) and the evaluation launched in the background beside training.
# Usage: scripts/run_multi_gpus_resnet50.sh
#   Environment: CONFIG (configs/imagenet_resnet50_fp32.ini: the fp32 baseline), DEVICE (cpu until the GPU path has passed its device check, then cuda;
#   cpu: NUM_GPUS=1, NUM_NODES (8) workers),
#   NUM_GPUS (8), NUM_NODES (NUM_GPUS), DATA_DIR (made by scripts/prepare_imagenet.sh), ROOT_WORKSPACE,
#   BUILD_DIR, DRY_RUN=1 (print the commands), and any setting of the reference's scripts (GRAD_BITS, BASE_LR,
#   WARMUP_STEPS, MAX_STEPS, ...: the list is TG_OVERRIDES in scripts/lib/launch_training.sh); one that is
#   unset keeps the config's value.
set -euo pipefail
# shellcheck source=lib/launch_training.sh
source "$(dirname "$0")/lib/launch_training.sh"

CONFIG=${CONFIG:-$TG_ROOT/configs/imagenet_resnet50_terngrad.ini}
imagenet_devices  # DEVICE, NUM_GPUS, NUM_NODES
VAL_BATCH_SIZE=${VAL_BATCH_SIZE:-50}
EVAL_INTERVAL_SECS=${EVAL_INTERVAL_SECS:-900}
FOLDER_WITH_GPUS=1
launch_training
