# ctest cuda_libraries_discovery: cmake/cuda_libraries.cmake finds a library and its header in a python3 wheel
# tree it has to search (a layout of its own, nvidia/cu13/{lib,include}: no wheel layout is assumed), says where it
# came from, and reports a library it cannot find instead of going on without it.
# Run: cmake -DSOURCE_DIR=<repo> -DWORK_DIR=<empty folder> -P tests/cmake/cuda_libraries_test.cmake
include(${SOURCE_DIR}/cmake/cuda_libraries.cmake)
file(REMOVE_RECURSE ${WORK_DIR})
file(WRITE ${WORK_DIR}/nvidia/cu13/lib/libtgwheeltest.so.9 "")
file(WRITE ${WORK_DIR}/nvidia/cu13/include/tgwheeltest.h "")
set(ENV{PYTHONPATH} ${WORK_DIR})  # python3's nvidia namespace package now includes WORK_DIR/nvidia
set(CUDAToolkit_INCLUDE_DIRS ${WORK_DIR}/no_toolkit)
set(CUDAToolkit_LIBRARY_DIR ${WORK_DIR}/no_toolkit)

tg_find_cuda_library(TGWHEEL tgwheeltest.h LIBNAMES tgwheeltest libtgwheeltest.so.9 WHEEL_GLOBS libtgwheeltest.so.9)
if(NOT TGWHEEL_LIBRARY STREQUAL "${WORK_DIR}/nvidia/cu13/lib/libtgwheeltest.so.9"
   OR NOT TGWHEEL_INCLUDE_DIR STREQUAL "${WORK_DIR}/nvidia/cu13/include" OR NOT TGWHEEL_FROM STREQUAL "python3 wheel")
  message(FATAL_ERROR "wheel search: got '${TGWHEEL_LIBRARY}', '${TGWHEEL_INCLUDE_DIR}' from '${TGWHEEL_FROM}'")
endif()

tg_find_cuda_library(TGABSENT tgabsent.h LIBNAMES tgabsent WHEEL_GLOBS libtgabsent.so.1)
if(TGABSENT_FROM OR TGABSENT_LIBRARY)
  message(FATAL_ERROR "a missing library was reported found: '${TGABSENT_LIBRARY}' from '${TGABSENT_FROM}'")
endif()
file(REMOVE_RECURSE ${WORK_DIR})
message(STATUS "cuda_libraries_discovery: PASS (wheel tree searched; a missing library reported missing)")
