# datasets.sh: the TFRecord shards of the accuracy benchmarks (bench/accuracy_bench.sh, bench/tta_bench.sh),
# converted once from idx files and reused. Sourced.
#
#   dataset_prepare DATASET OUT_DIR SHARDS DATA_PROGRAM [IDX_DIR]
#       converts DATASET's idx files to OUT_DIR/train-*-of-SHARDS and OUT_DIR/test-00000-of-00001 (nothing to do
#       when they are there); IDX_DIR holds train-images-idx3-ubyte, train-labels-idx1-ubyte,
#       t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte, each plain or .gz. Default IDX_DIR:
#         fashion_mnist  /usr/share/datasets/fashion-mnist (Debian's dataset-fashion-mnist)
#         mnist          none: no Debian package ships MNIST (only dataset-fashion-mnist); pass the folder
#   dataset_idx_default DATASET   the default IDX_DIR (empty for mnist)
# shellcheck shell=bash

dataset_idx_default() {
  case "$1" in
    fashion_mnist) echo /usr/share/datasets/fashion-mnist ;;
    *) echo "" ;;
  esac
}

# The idx file NAME in DIR, plain or gzipped; status 1 when neither is there.
dataset_idx_file() {
  local dir=$1 name=$2
  if [ -f "$dir/$name.gz" ]; then
    echo "$dir/$name.gz"
  elif [ -f "$dir/$name" ]; then
    echo "$dir/$name"
  else
    return 1
  fi
}

dataset_prepare() {
  local dataset=$1 out=$2 shards=$3 data=$4 idx=${5:-} f images labels
  if [ -f "$out/test-00000-of-00001" ] && [ -f "$out/train-$(printf '%05d' $((shards - 1)))-of-$(printf '%05d' "$shards")" ]; then
    return 0
  fi
  [ -n "$idx" ] || idx=$(dataset_idx_default "$dataset")
  [ -n "$idx" ] || {
    echo "datasets: $dataset needs the folder of its idx files (no Debian package ships it)" >&2
    return 1
  }
  for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
    dataset_idx_file "$idx" "$f" >/dev/null || {
      echo "datasets: no $idx/$f(.gz) for $dataset$([ "$dataset" = fashion_mnist ] && echo " (apt-get install dataset-fashion-mnist)")" >&2
      return 1
    }
  done
  rm -rf "$out"
  mkdir -p "$out"
  images=$(dataset_idx_file "$idx" train-images-idx3-ubyte)
  labels=$(dataset_idx_file "$idx" train-labels-idx1-ubyte)
  "$data" convert-idx --images "$images" --labels "$labels" --subset train --num_shards "$shards" --output_dir "$out" >/dev/null
  images=$(dataset_idx_file "$idx" t10k-images-idx3-ubyte)
  labels=$(dataset_idx_file "$idx" t10k-labels-idx1-ubyte)
  "$data" convert-idx --images "$images" --labels "$labels" --subset test --num_shards 1 --output_dir "$out" >/dev/null
  "$data" inspect --data_dir "$out" --subset test >/dev/null
  echo "datasets: converted $dataset from $idx into $out (train: $shards shards, test: 1)" >&2
}
