# shellcheck shell=bash
# The GPU bundle (sourced by scripts/gpu_check.sh): everything the device run needs, built on this machine for
# sm_90 and packed into one compressed archive that runs on a bare GPU machine with only its driver and the
# python3 wheels of cuDNN, cuBLAS and NCCL.
#   gb_prepare BUILD_DIR ARCHIVE  builds the programs below in BUILD_DIR (reused when it was configured with CUDA
#                                 and sm_90 among CMAKE_CUDA_ARCHITECTURES; else BUILD_DIR is configured for
#                                 sm_90 only) and packs them (xz -0: fast; about 20 MiB) with every shared library they load that is neither
#                                 the C runtime (glibc) nor a CUDA library (tg_is_cuda_library: libcuda, cuDNN,
#                                 cuBLAS, NCCL; the CUDA runtime is linked statically) into ARCHIVE (tar.xz, at
#                                 most GB_MAX_MIB); the RUNPATHs of the build tree are removed from the copies
#   gb_verify ARCHIVE             unpacks ARCHIVE into an empty folder and checks it as the GPU machine will use
#                                 it: every program resolves each library it needs from the bundle's lib/ (only
#                                 glibc from the system, only CUDA libraries found elsewhere: tg_cuda_lib_search),
#                                 `ldd` shows no "not found" but CUDA libraries, each program answers --help (the
#                                 tests --gtest_list_tests), cuda_ops_check --versions names the cuDNN, cuBLAS and
#                                 NCCL it loaded, and terngrad-train runs CPU LeNet steps
#   gb_unpack ARCHIVE DIR         unpacks ARCHIVE into DIR (its programs in DIR/bin, libraries in DIR/lib)
#   gb_arch_check ARCHS CAP       whether a bundle built for CMAKE_CUDA_ARCHITECTURES ARCHS (e.g. "80;90") runs on a
#                                 GPU of compute capability CAP (nvidia-smi's "9.0"): prints nothing when one of its
#                                 architectures is the GPU's, a note when the GPU is newer (its kernels then come
#                                 from the PTX, compiled by the driver at the first launches), and returns 1 with the
#                                 reason when every architecture is newer than the GPU (no kernel could load)
# Layout inside the archive: bin/ (terngrad-train, terngrad-eval, terngrad-data, cuda_ops_check, pipeline_check,
# exchange_replay),
# bin/tests/ (the GoogleTest programs of GB_TESTS), lib/, bench/ (the PyTorch peers), include/ (fmt and spdlog
# headers, for the fallback build on the GPU machine), MANIFEST (commit, CUDA architectures, the newest glibc
# symbol version the programs need).

GB_MAX_MIB=40

gb_arch_check() {
  local archs=$1 cap=${2//./} a lowest=""
  [[ $cap =~ ^[0-9]+$ ]] || { echo "cannot read the GPU's compute capability ('$2')" && return 1; }
  for a in ${archs//;/ }; do
    a=${a%%-*}
    [[ $a =~ ^[0-9]+$ ]] || continue
    [[ $a == "$cap" ]] && return 0
    [[ -z $lowest || $a -lt $lowest ]] && lowest=$a
  done
  if [[ -z $lowest ]]; then echo "the bundle names no CUDA architecture ('$archs')" && return 1; fi
  if ((cap < lowest)); then
    echo "the bundle is built for sm_${archs//;/, sm_}; this GPU is sm_$cap, older than all of them (rebuild with" \
      "CMAKE_CUDA_ARCHITECTURES=$cap)"
    return 1
  fi
  echo "note: this GPU is sm_$cap, the bundle has sm_${archs//;/, sm_}: its kernels come from the PTX (JIT-compiled" \
    "at the first launches)"
}
GB_PROGRAMS=(terngrad-train terngrad-eval terngrad-data cuda_ops_check pipeline_check exchange_replay)
GB_TESTS=(cuda_backend_test cuda_mixed_precision_test codec_ops_test codec_range_test ternary_codec_test
  scaler_bucket_test backend_ops_table_test coded_update_test padding_test nccl_communicator_test loopback_communicator_test)
GB_PEERS=(bench/torch_amp_peer.py)
# glibc's libraries (and the vDSO): the system's, never packed.
gb_is_c_runtime() { [[ $1 =~ ^(linux-vdso|ld-linux-x86-64|libc|libm|libdl|libpthread|librt|libresolv|libutil|libanl|libmvec)\.so ]]; }

gb_die() {
  echo "gpu_check: $*" >&2
  return 1
}

# Whether BUILD_DIR's cache says CUDA with sm_90 (90, 90a, 90-real, ... in CMAKE_CUDA_ARCHITECTURES).
gb_build_has_sm90() {
  local cache=$1/CMakeCache.txt archs
  [[ -f $cache ]] || return 1
  grep -q '^TG_CUDA_BUILT:INTERNAL=ON' "$cache" || return 1
  archs=$(sed -n 's/^CMAKE_CUDA_ARCHITECTURES:[A-Z]*=//p' "$cache")
  [[ ";$archs;" =~ \;90(a|-real|-virtual)?\; ]]
}

gb_prepare() {
  local build=$1 archive=$2 root stage t lib name path exe
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  command -v xz > /dev/null || gb_die "--prepare needs xz (apt-get install xz-utils)" || return 1
  if gb_build_has_sm90 "$build"; then
    echo "gpu_check --prepare: reusing $build (CUDA, architectures $(sed -n 's/^CMAKE_CUDA_ARCHITECTURES:[A-Z]*=//p' \
      "$build/CMakeCache.txt"))"
  else
    if [[ -f $build/CMakeCache.txt ]]; then
      gb_die "$build is configured without CUDA or without sm_90 in CMAKE_CUDA_ARCHITECTURES; give another BUILD_DIR"
      return 1
    fi
    echo "gpu_check --prepare: configuring $build for sm_90"
    cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DTG_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
      -DTG_BUILD_BENCH=OFF > "$build.configure.log" 2>&1 ||
      { tail -20 "$build.configure.log" >&2; gb_die "configure failed (log: $build.configure.log)"; return 1; }
  fi
  local -a targets=("${GB_PROGRAMS[@]}" "${GB_TESTS[@]}")
  echo "gpu_check --prepare: building ${targets[*]}"
  cmake --build "$build" -j"${JOBS:-$(nproc)}" --target "${targets[@]}" > "$build/gpu_bundle_build.log" 2>&1 ||
    { grep -m 20 -E 'error|Error' "$build/gpu_bundle_build.log" >&2;
      gb_die "build failed (log: $build/gpu_bundle_build.log)"; return 1; }

  stage=$(mktemp -d /tmp/tg_bundle_stage.XXXXXX)
  mkdir -p "$stage/bin/tests" "$stage/lib" "$stage/bench"
  for t in "${GB_PROGRAMS[@]}"; do cp "$build/$t" "$stage/bin/"; done
  for t in "${GB_TESTS[@]}"; do cp "$build/tests/$t" "$stage/bin/tests/"; done
  for t in "${GB_PEERS[@]}"; do cp "$root/$t" "$stage/bench/"; done
  # fmt and spdlog headers: the fallback build on the GPU machine (-DTG_GPU_CHECK_ONLY=ON -DTG_DEPS_DIR=<unpacked>)
  mkdir -p "$stage/include"
  for t in fmt spdlog; do [[ -d /usr/include/$t ]] && cp -r "/usr/include/$t" "$stage/include/"; done
  # The libraries: every one ldd resolves for a program, but glibc's and the CUDA ones.
  local -A libs=()
  for exe in "$stage"/bin/* "$stage"/bin/tests/*; do
    [[ -f $exe ]] || continue
    while read -r name path; do
      gb_is_c_runtime "$name" || tg_is_cuda_library "$name" && continue
      [[ $path == /* ]] || { rm -rf "$stage"; gb_die "$(basename "$exe") needs $name, which is not found here"; return 1; }
      libs[$name]=$path
    done < <(ldd "$exe" | awk '$2 == "=>" {print $1, $3}')
  done
  for lib in "${!libs[@]}"; do cp -L "${libs[$lib]}" "$stage/lib/$lib"; done
  # No RUNPATH pointing into this machine's folders: the device run's LD_LIBRARY_PATH decides.
  # shellcheck disable=SC2016 # a CMake variable
  echo 'file(RPATH_REMOVE FILE "${FILE}")' > "$stage/rpath_remove.cmake"
  for exe in "$stage"/bin/* "$stage"/bin/tests/*; do
    [[ -f $exe ]] && cmake -DFILE="$exe" -P "$stage/rpath_remove.cmake"
  done
  rm -f "$stage/rpath_remove.cmake"
  strip --strip-unneeded "$stage"/bin/* "$stage"/bin/tests/* 2> /dev/null || true
  {
    echo "commit $(git -C "$root" rev-parse HEAD 2> /dev/null || echo unknown)$(git -C "$root" diff --quiet HEAD 2> /dev/null || echo ' (with uncommitted changes)')"
    echo "built $(date -u +%FT%TZ) on $(uname -m), $(sed -n 's/^PRETTY_NAME=//p' /etc/os-release 2> /dev/null | tr -d '"')"
    echo "cuda_architectures $(sed -n 's/^CMAKE_CUDA_ARCHITECTURES:[A-Z]*=//p' "$build/CMakeCache.txt")"
    echo "nvcc $(sed -n 's/^set(CMAKE_CUDA_COMPILER_VERSION "\(.*\)")/\1/p' "$build"/CMakeFiles/*/CMakeCUDACompiler.cmake |
      tail -1)"
    echo "glibc_needed $(gb_glibc_needed "$stage")"
    echo "cuda_libraries $(gb_cuda_needed "$stage" | tr '\n' ' ')"
    echo "programs ${GB_PROGRAMS[*]}"
    echo "tests ${GB_TESTS[*]}"
    echo "libraries $(cd "$stage/lib" && ls | tr '\n' ' ')"
  } > "$stage/MANIFEST"
  mkdir -p "$(dirname "$archive")"
  rm -f "$archive.tmp"
  (cd "$stage" && tar -cf - MANIFEST bin lib bench include) | xz -T"${JOBS:-$(nproc)}" -0 > "$archive.tmp" ||
    { rm -rf "$stage" "$archive.tmp"; gb_die "packing $archive failed"; return 1; }
  rm -rf "$stage"
  local mib=$(($(stat -c %s "$archive.tmp") / 1048576))
  if ((mib > GB_MAX_MIB)); then
    rm -f "$archive.tmp"
    gb_die "the bundle is ${mib} MiB, over the ${GB_MAX_MIB} MiB limit"
    return 1
  fi
  mv "$archive.tmp" "$archive"
  echo "gpu_check --prepare: $archive ($(du -h "$archive" | cut -f1), ${#libs[@]} libraries)"
}

# The newest GLIBC_x.y symbol version any file under DIR needs.
gb_glibc_needed() {
  find "$1" -type f \( -path '*/bin/*' -o -path '*/lib/*' \) -exec objdump -T {} + 2> /dev/null |
    grep -oE 'GLIBC_[0-9]+\.[0-9]+' | sort -t. -k2,2n -u | sort -V | tail -1
}

# The CUDA libraries the programs under DIR name (NEEDED), one a line.
gb_cuda_needed() {
  local f n
  for f in "$1"/bin/* "$1"/bin/tests/* "$1"/lib/*; do
    [[ -f $f ]] || continue
    readelf -d "$f" 2> /dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'
  done | while read -r n; do tg_is_cuda_library "$n" && echo "$n"; done | sort -u
}

gb_unpack() {
  local archive=$1 dir=$2
  [[ -f $archive ]] || { gb_die "no bundle at $archive: run scripts/gpu_check.sh --prepare here first"; return 1; }
  mkdir -p "$dir"
  if command -v xz > /dev/null; then
    xz -dc "$archive" | tar -xf - -C "$dir"
  else  # no xz on the machine: python3's lzma
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1], "r:xz").extractall(sys.argv[2])' "$archive" "$dir"
  fi || { gb_die "cannot unpack $archive"; return 1; }
  [[ -f $dir/MANIFEST ]] || { gb_die "$archive holds no MANIFEST: not a terngrad GPU bundle"; return 1; }
}

# gb_library_path DIR: the LD_LIBRARY_PATH of the unpacked bundle in DIR: its lib/, then the folders of the CUDA
# libraries it names (tg_cuda_lib_search); the missing ones are left in TG_CUDA_LIB_MISSING.
gb_library_path() {
  local dir=$1 wanted
  wanted=$(sed -n 's/^cuda_libraries //p' "$dir/MANIFEST")
  # shellcheck disable=SC2086 # a list of names
  tg_cuda_lib_search $wanted
  local IFS=:
  echo "$dir/lib${TG_CUDA_LIB_DIRS[*]:+:${TG_CUDA_LIB_DIRS[*]}}"
}

gb_verify() {
  local dir rc
  dir=$(mktemp -d /tmp/tg_bundle_verify.XXXXXX)
  gb_verify_in "$1" "$dir"
  rc=$?
  rm -rf "$dir"
  return $rc
}

# gb_verify_in ARCHIVE DIR: gb_verify's checks, unpacked into the empty folder DIR.
gb_verify_in() {
  local archive=$1 dir=$2 exe name path bad=0 out
  gb_unpack "$archive" "$dir" || return 1
  local libpath
  libpath=$(gb_library_path "$dir")
  if ((${#TG_CUDA_LIB_MISSING[@]})); then
    echo "gpu_check --verify: CUDA libraries not found on this machine (${TG_CUDA_LIB_MISSING[*]}; looked in" \
      "$TG_CUDA_LIB_WHERE): the programs cannot start here" >&2
    return 1
  fi
  echo "gpu_check --verify: unpacked into $dir; LD_LIBRARY_PATH=$libpath"
  for exe in "$dir"/bin/* "$dir"/bin/tests/*; do
    [[ -f $exe ]] || continue
    while read -r name path; do
      if [[ $path == "not" ]]; then
        tg_is_cuda_library "$name" && continue
        echo "  FAIL $(basename "$exe"): $name not found" && bad=1
      elif ! gb_is_c_runtime "$name" && ! tg_is_cuda_library "$name" && [[ $path != "$dir/lib/"* ]]; then
        echo "  FAIL $(basename "$exe"): $name resolves to $path, outside the bundle" && bad=1
      fi
    done < <(LD_LIBRARY_PATH=$libpath ldd "$exe" | awk '$2 == "=>" {print $1, $3}')
  done
  for exe in "${GB_PROGRAMS[@]}"; do
    out=$(LD_LIBRARY_PATH=$libpath "$dir/bin/$exe" --help 2>&1) ||
      { echo "  FAIL $exe --help: $(tail -1 <<< "$out")" && bad=1; }
  done
  for exe in "${GB_TESTS[@]}"; do
    out=$(LD_LIBRARY_PATH=$libpath "$dir/bin/tests/$exe" --gtest_list_tests 2>&1) ||
      { echo "  FAIL $exe --gtest_list_tests: $(tail -1 <<< "$out")" && bad=1; }
  done
  if out=$(LD_LIBRARY_PATH=$libpath "$dir/bin/cuda_ops_check" --versions 2>&1); then
    sed 's/^/  /' <<< "$out"
  else
    echo "  FAIL cuda_ops_check --versions: $(tail -1 <<< "$out")" && bad=1
  fi
  if out=$(LD_LIBRARY_PATH=$libpath "$dir/bin/terngrad-train" --device cpu --benchmark_mode --net lenet \
    --dataset fashion_mnist --batch_size 8 --max_steps 2 --log_every 1 --threads 1 --train_dir "$dir/lenet" 2>&1); then
    echo "  terngrad-train: 2 CPU LeNet steps: $(grep -oE 'step 2, entropy_loss = [0-9.]+' <<< "$out" | head -1)"
  else
    echo "  FAIL terngrad-train CPU LeNet steps: $(tail -1 <<< "$out")" && bad=1
  fi
  if ((bad)); then
    echo "gpu_check --verify: FAIL ($archive)"
    return 1
  fi
  echo "gpu_check --verify: PASS ($(sed -n 's/^commit //p' "$dir/MANIFEST"); $(find "$dir/bin" -type f | wc -l)" \
    "programs, $(find "$dir/lib" -type f | wc -l) libraries, glibc >= $(sed -n 's/^glibc_needed GLIBC_//p' \
      "$dir/MANIFEST") needed)"
}
