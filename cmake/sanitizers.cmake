# Sanitizer and fuzzing builds (included by the top CMakeLists.txt before any target exists, so the flags
# reach every library and executable of the build).
#   TG_SANITIZE: ASan + UBSan with -fno-sanitize-recover=all (the first report stops the test), gcc or clang;
#                scripts/test.sh --sanitize runs the suite of such a build (suppressions: tests/sanitizers/).
#   TG_FUZZ:     clang's libFuzzer: every library gets -fsanitize=fuzzer-no-link (coverage for the fuzzer)
#                plus ASan + UBSan; tests/fuzz links its targets with -fsanitize=fuzzer (scripts/fuzz.sh).
# Both switch the CUDA backend off (nvcc objects carry no instrumentation) and keep the normal build untouched.
if(NOT TG_SANITIZE AND NOT TG_FUZZ)
  return()
endif()
if(TG_CUDA STREQUAL "ON")
  message(FATAL_ERROR "TG_SANITIZE/TG_FUZZ builds are CPU-only: configure with -DTG_CUDA=OFF")
endif()
set(TG_CUDA OFF CACHE STRING "Build the CUDA backend: AUTO, ON or OFF" FORCE)

set(TG_SAN_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g)
if(TG_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "TG_FUZZ needs clang (libFuzzer): CC=clang CXX=clang++ cmake -DTG_FUZZ=ON ...")
  endif()
  list(APPEND TG_SAN_FLAGS -fsanitize=fuzzer-no-link)
endif()
add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:${TG_SAN_FLAGS}>")
add_link_options(-fsanitize=address,undefined)
message(STATUS "terngrad: sanitizer build (${TG_SAN_FLAGS}), CUDA backend off")
