# shellcheck shell=bash
# Where the CUDA libraries of a terngrad binary come from at run time (sourced by scripts/gpu_check.sh and
# scripts/lib/gpu_bundle.sh): each library is looked for in the CUDA toolkit (CUDA_HOME, CUDA_PATH,
# /usr/local/cuda*), then the loader's cache (ldconfig -p), then the wheels of the machine's python3
# (nvidia-cudnn-cu13, nvidia-cublas, nvidia-nccl-cu13, ...). A wheel's whole tree is searched for the file: the
# layout differs between wheel generations (nvidia/cudnn/lib, nvidia/cu13/lib, ...), so none is assumed.
#   tg_is_cuda_library NAME    true for a library the GPU machine provides (the driver's libcuda, cuDNN, cuBLAS,
#                              NCCL, the CUDA runtime and its siblings): never packed into the bundle
#   tg_cuda_lib_search NAME... fills TG_CUDA_LIB_PATH[NAME] (the file found), TG_CUDA_LIB_FROM[NAME] (toolkit,
#                              system or "python3 wheel"), TG_CUDA_LIB_DIRS (their folders, in order, for
#                              LD_LIBRARY_PATH) and TG_CUDA_LIB_MISSING (names not found); TG_CUDA_LIB_WHERE says
#                              where it looked (for the one line naming a missing library)
#   tg_python_wheel_roots      prints the folders of python3's "nvidia" package, one a line (none: nothing)

# shellcheck disable=SC2034 # the results, read by the scripts that source this
declare -gA TG_CUDA_LIB_PATH=() TG_CUDA_LIB_FROM=()
TG_CUDA_LIB_DIRS=()
TG_CUDA_LIB_MISSING=()
# shellcheck disable=SC2034
TG_CUDA_LIB_WHERE=""

tg_is_cuda_library() {
  [[ $1 =~ ^lib(cuda|cudnn[a-z_]*|cublas|cublasLt|nccl|cudart|nvrtc|nvrtc-builtins|nvJitLink|cufft|curand|cusparse|cusolver|nvToolsExt|nvidia-ml)\.so ]]
}

tg_python_wheel_roots() {
  command -v python3 > /dev/null || return 0
  python3 - 2> /dev/null << 'EOF' || true
import os, site
roots = []
try:
    import nvidia
    roots += list(nvidia.__path__)
except Exception:
    pass
dirs = list(site.getsitepackages()) if hasattr(site, "getsitepackages") else []
dirs.append(site.getusersitepackages())
for d in dirs:
    q = os.path.join(d, "nvidia")
    if os.path.isdir(q) and q not in roots:
        roots.append(q)
print("\n".join(roots))
EOF
}

tg_cuda_lib_search() {
  local name dir found from
  local -a toolkit=() wheels=()
  for dir in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda /usr/local/cuda-*; do
    [[ -n $dir && -d $dir ]] || continue
    for sub in lib64 lib targets/x86_64-linux/lib; do [[ -d $dir/$sub ]] && toolkit+=("$dir/$sub"); done
  done
  mapfile -t wheels < <(tg_python_wheel_roots)
  # shellcheck disable=SC2034
  TG_CUDA_LIB_WHERE="the CUDA toolkit (${toolkit[*]:-none}), ldconfig -p, python3's wheels (${wheels[*]:-none})"
  for name in "$@"; do
    found="" from=""
    for dir in "${toolkit[@]}"; do
      if [[ -e $dir/$name ]]; then found=$dir/$name from=toolkit && break; fi
    done
    if [[ -z $found ]] && command -v ldconfig > /dev/null; then
      found=$(ldconfig -p 2> /dev/null | awk -v n="$name" '$1 == n && /x86-64/ {print $NF; exit}')
      [[ -n $found ]] && from=system
    fi
    if [[ -z $found ]]; then
      for dir in "${wheels[@]}"; do
        found=$(find -L "$dir" -name "$name" \( -type f -o -type l \) -print -quit 2> /dev/null)
        if [[ -n $found ]]; then from="python3 wheel" && break; fi
      done
    fi
    if [[ -z $found ]]; then
      TG_CUDA_LIB_MISSING+=("$name")
      continue
    fi
    # shellcheck disable=SC2034
    TG_CUDA_LIB_PATH[$name]=$found
    # shellcheck disable=SC2034
    TG_CUDA_LIB_FROM[$name]=$from
    dir=$(dirname "$found")
    [[ " ${TG_CUDA_LIB_DIRS[*]} " == *" $dir "* ]] || TG_CUDA_LIB_DIRS+=("$dir")
  done
}
