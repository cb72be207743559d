#!/usr/bin/env bash
# As the reference's split_dataset.sh: gives worker WORKER_ID of WORKER_NUM its contiguous block of the
# train-* shards of DATA_DIR (alphabetical order) as symbolic links in DATA_DIR/worker_<ID>_of_<NUM>/.
# The number of train-* files must be a multiple of WORKER_NUM.
# Usage: scripts/split_dataset.sh DATA_DIR WORKER_NUM WORKER_ID
set -euo pipefail
DATA_DIR=${1:?usage: $0 DATA_DIR WORKER_NUM WORKER_ID}
NUM=${2:?}; ID=${3:?}
[[ $NUM =~ ^[0-9]+$ && $ID =~ ^[0-9]+$ && $NUM -gt 0 && $ID -lt $NUM ]] || { echo "need 0 <= WORKER_ID < WORKER_NUM" >&2; exit 1; }
DATA_DIR=$(cd "$DATA_DIR" && pwd)
mapfile -t FILES < <(find "$DATA_DIR" -mindepth 1 -maxdepth 1 -name 'train-*' -printf '%f\n' | LC_ALL=C sort)
TOTAL=${#FILES[@]}
[[ $TOTAL -gt 0 ]] || { echo "no train-* files in $DATA_DIR" >&2; exit 1; }
(( TOTAL % NUM == 0 )) || { echo "$TOTAL train-* files are not divisible by $NUM workers" >&2; exit 1; }
K=$(( TOTAL / NUM ))
DEST="$DATA_DIR/worker_${ID}_of_${NUM}"
mkdir -p "$DEST"
for (( i = ID * K; i < (ID + 1) * K; i++ )); do
  ln -sfn "$DATA_DIR/${FILES[$i]}" "$DEST/${FILES[$i]}"
done
echo "$DEST: ${K} shards (${FILES[$((ID * K))]} .. ${FILES[$(((ID + 1) * K - 1))]})"
