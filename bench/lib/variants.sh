# variants.sh: the gradient-exchange variants of the accuracy benchmarks (bench/accuracy_bench.sh,
# bench/tta_bench.sh): a variant name becomes terngrad-train flags. Sourced.
#
# A variant is `fp32`, `fp16`, or TernGrad as the paper runs it (`terngrad`: --grad_bits 1 --clip_factor 2.5)
# with levers added by `+`; a TernGrad lever alone implies `terngrad` (`ef` is `terngrad+ef`):
#   ef           --error_feedback (each worker's rounding error carried to its next step)
#   bucketN      --scaler_bucket N (N elements share a scaler; 0: one per tensor; N a multiple of 256)
#   warmup       --fp32_warmup_steps 200 (fp32 exchange for the first 200 steps); warmupK: the first K
#   noclip       --clip_factor 0 (s = max|g|);   clipC: --clip_factor C
#   hier         --exchange hierarchical --ranks_per_node 1: each MPI process one emulated node, its workers'
#                gradients summed in fp32 inside it, 2-bit codes between the nodes (no error feedback)
# and PowerSGD as a base of its own (the fp32 recipe): `powersgdR` is --exchange powersgd --powersgd_rank R
# (`powersgd`: rank 2, PyTorch's PowerSGD peers' rank); of the levers only warmup[K] applies.
# Named combinations (VARIANT_ALIASES; a new one is one line): best = ef+bucket256+warmup.
# E.g. `ef+bucket256+warmup100`. A new lever is one case of variant_flags below.
#
#   variant_flags NAME       the flags, one line; status 1 and a message on stderr for a malformed name
#   variant_kind NAME        fp32, fp16 or terngrad: which recipe file (configs/<dataset>_<net>_<kind>.ini;
#                            fp16 reads the fp32 one)
#   variant_missing TRAIN NAME...
#                            the flags these variants need that TRAIN's --help does not list (one line, empty
#                            when this build has them all)
#   ini_value FILE KEY       the last `key = value` of an INI file (a recipe's max_steps, batch_size)
# shellcheck shell=bash

VARIANT_WARMUP_STEPS=200
declare -A VARIANT_ALIASES=(
  [best]="ef+bucket256+warmup"
)

variant_expand() {
  local v=$1
  [ -n "${VARIANT_ALIASES[$v]+x}" ] && v=${VARIANT_ALIASES[$v]}
  echo "$v"
}

variant_kind() {
  local v
  v=$(variant_expand "$1")
  case "$v" in
    fp32 | fp16) echo "$v" ;;
    powersgd*) echo fp32 ;;
    *) echo terngrad ;;
  esac
}

variant_flags() {
  local name=$1 v tok flags=() base="" levers=0 warm=0 clip=2.5 hier=0 ef=0 rank=2
  v=$(variant_expand "$name")
  [ -n "$v" ] || {
    echo "variants: an empty variant name" >&2
    return 1
  }
  local IFS=+
  for tok in $v; do
    case "$tok" in
      fp32 | fp16 | terngrad)
        [ -z "$base" ] || {
          echo "variants: '$name' names two bases ($base, $tok)" >&2
          return 1
        }
        base=$tok
        ;;
      powersgd | powersgd[0-9]*)
        [ -z "$base" ] || {
          echo "variants: '$name' names two bases ($base, $tok)" >&2
          return 1
        }
        [ "$tok" = powersgd ] || [[ "${tok#powersgd}" =~ ^[1-9][0-9]*$ ]] || {
          echo "variants: '$tok' in '$name': powersgdR takes a rank >= 1" >&2
          return 1
        }
        base=powersgd
        [ "$tok" = powersgd ] || rank=${tok#powersgd}
        ;;
      ef) flags+=(--error_feedback) levers=$((levers + 1)) ef=1 ;;
      bucket[0-9]*)
        local n=${tok#bucket}
        { [[ "$n" =~ ^[0-9]+$ ]] && [ $((n % 256)) = 0 ]; } || {
          echo "variants: '$tok' in '$name': the scaler bucket must be 0 or a multiple of 256" >&2
          return 1
        }
        flags+=(--scaler_bucket "$n") levers=$((levers + 1))
        ;;
      warmup) flags+=(--fp32_warmup_steps "$VARIANT_WARMUP_STEPS") levers=$((levers + 1)) warm=$((warm + 1)) ;;
      warmup[0-9]*)
        [[ "${tok#warmup}" =~ ^[0-9]+$ ]] || {
          echo "variants: '$tok' in '$name': warmupK takes a number of steps" >&2
          return 1
        }
        flags+=(--fp32_warmup_steps "${tok#warmup}") levers=$((levers + 1)) warm=$((warm + 1))
        ;;
      noclip) clip=0 levers=$((levers + 1)) ;;
      hier) flags+=(--exchange hierarchical --ranks_per_node 1) levers=$((levers + 1)) hier=1 ;;
      clip[0-9]*)
        [[ "${tok#clip}" =~ ^[0-9]+(\.[0-9]+)?$ ]] || {
          echo "variants: '$tok' in '$name': clipC takes a number" >&2
          return 1
        }
        clip=${tok#clip} levers=$((levers + 1))
        ;;
      *)
        echo "variants: unknown part '$tok' in '$name' (fp32, fp16, terngrad, powersgd[R], ef, bucketN, warmup[K], noclip, clipC, hier;" \
          "names: ${!VARIANT_ALIASES[*]})" >&2
        return 1
        ;;
    esac
  done
  case "${base:-terngrad}" in
    fp32 | fp16)
      [ "$levers" = 0 ] || {
        echo "variants: '$name': the TernGrad levers do not apply to $base" >&2
        return 1
      }
      if [ "$base" = fp32 ]; then echo "--grad_bits 32 --clip_factor 0"; else echo "--grad_bits 16 --clip_factor 0"; fi
      ;;
    powersgd)
      [ "$levers" = "$warm" ] || {
        echo "variants: '$name': of the levers only warmup[K] applies to powersgd" >&2
        return 1
      }
      IFS=' '
      echo "--grad_bits 32 --clip_factor 0 --exchange powersgd --powersgd_rank $rank${flags[*]:+ ${flags[*]}}"
      ;;
    terngrad)
      [ "$hier" = 0 ] || [ "$ef" = 0 ] || {
        echo "variants: '$name': error feedback is an option of the flat exchanges, not of hier" >&2
        return 1
      }
      IFS=' '
      echo "--grad_bits 1 --clip_factor $clip${flags[*]:+ ${flags[*]}}"
      ;;
  esac
}

variant_missing() {
  local train=$1 help v f missing=()
  shift
  help=$("$train" --help 2>&1)
  for v in "$@"; do
    for f in $(variant_flags "$v"); do
      [[ "$f" == --* ]] || continue
      grep -q -- "$f\b" <<<"$help" || [[ " ${missing[*]} " == *" $f "* ]] || missing+=("$f")
    done
  done
  echo "${missing[*]}"
}

ini_value() {
  awk -v key="$2" '/^[ \t]*[#;]/ { next } index($0, "=") {
      k = substr($0, 1, index($0, "=") - 1); v = substr($0, index($0, "=") + 1)
      gsub(/^[ \t]+|[ \t]+$/, "", k); gsub(/^[ \t]+|[ \t]+$/, "", v); if (k == key) value = v }
    END { print value }' "$1"
}
