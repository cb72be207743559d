# cuDNN, cuBLAS and NCCL for the CUDA backend, each looked for in this order: the CUDA toolkit, the system, then
# the pip wheels of the machine's python3 (nvidia-cudnn-cu13, nvidia-cublas, nvidia-nccl-cu13, ...). The wheels'
# tree is searched for the files themselves: their layout differs between wheel generations (nvidia/cudnn/lib,
# nvidia/cu13/lib, ...), so no layout is assumed. Every library is reported on one configure line with the
# place it came from; a missing one stops configure with one line naming every place searched.
#
# Sets:  CUDNN_INCLUDE_DIR, CUDNN_LIBRARY     (always: the CUDA backend needs cuDNN)
#        TG_CUBLAS_LIBRARIES                  (CUDA::cublas, or the wheel's libcublas + libcublasLt)
#        TG_CUBLAS_INCLUDE_DIR                (empty when the toolkit's headers are used)
#        NCCL_INCLUDE_DIR, NCCL_LIBRARY       (when tg_find_cuda_libraries(NCCL_REQUIRED) or when found)
#        TG_CUDA_WHEEL_LIBRARY_DIRS           (the wheel folders a library came from: the run's LD_LIBRARY_PATH)
# The caller has run find_package(CUDAToolkit).

# The folders of python3's "nvidia" namespace package (every site-packages that holds one), or nothing.
function(tg_python_wheel_roots out)
  set(roots)
  find_program(TG_PYTHON3 NAMES python3)
  if(TG_PYTHON3)
    execute_process(
      COMMAND ${TG_PYTHON3} -c
              "import site, sys, os\ntry:\n import nvidia; p = list(nvidia.__path__)\nexcept Exception:\n p = []\nfor d in site.getsitepackages() + [site.getusersitepackages()]:\n  q = os.path.join(d, 'nvidia')\n  if os.path.isdir(q) and q not in p: p.append(q)\nprint(';'.join(p))"
      OUTPUT_VARIABLE found
      OUTPUT_STRIP_TRAILING_WHITESPACE
      ERROR_QUIET
      RESULT_VARIABLE rc)
    if(rc EQUAL 0 AND found)
      set(roots ${found})
    endif()
  endif()
  set(${out} "${roots}" PARENT_SCOPE)
endfunction()

# The first file under the wheel roots whose name matches one of NAMES (glob patterns), preferring earlier
# patterns; "" when none.
function(tg_find_in_wheels out)
  cmake_parse_arguments(W "" "" "NAMES" ${ARGN})
  tg_python_wheel_roots(roots)
  set(hit "")
  foreach(pattern ${W_NAMES})
    foreach(root ${roots})
      file(GLOB_RECURSE files LIST_DIRECTORIES false "${root}/${pattern}" "${root}/*/${pattern}")
      list(SORT files)
      if(files)
        list(GET files 0 hit)
        break()
      endif()
    endforeach()
    if(hit)
      break()
    endif()
  endforeach()
  set(${out} "${hit}" PARENT_SCOPE)
endfunction()

# tg_find_cuda_library(PREFIX HEADER LIBNAMES... [REQUIRED] [WHY text]): PREFIX_INCLUDE_DIR and PREFIX_LIBRARY from
# the toolkit, the system, then the wheels; PREFIX_FROM says which. LIBNAMES are file names (libcudnn.so.9) or
# link names (cudnn).
function(tg_find_cuda_library prefix header)
  cmake_parse_arguments(L "REQUIRED" "WHY" "LIBNAMES;WHEEL_GLOBS" ${ARGN})
  set(from "")
  find_path(${prefix}_INCLUDE_DIR ${header} HINTS ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
  find_library(${prefix}_LIBRARY NAMES ${L_LIBNAMES} HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}
               PATH_SUFFIXES lib lib64)
  if(${prefix}_INCLUDE_DIR AND ${prefix}_LIBRARY AND TG_${prefix}_FROM)
    set(from "${TG_${prefix}_FROM}")  # found by an earlier configure
  elseif(${prefix}_INCLUDE_DIR AND ${prefix}_LIBRARY)
    set(from "toolkit or system")
  else()
    tg_find_in_wheels(h NAMES ${header})
    tg_find_in_wheels(l NAMES ${L_WHEEL_GLOBS})
    if(h AND l)
      get_filename_component(hdir "${h}" DIRECTORY)
      set(${prefix}_INCLUDE_DIR "${hdir}" CACHE PATH "${header} folder" FORCE)
      set(${prefix}_LIBRARY "${l}" CACHE FILEPATH "${prefix} library" FORCE)
      set(from "python3 wheel")
      get_filename_component(ldir "${l}" DIRECTORY)
      set(dirs ${TG_CUDA_WHEEL_LIBRARY_DIRS} ${ldir})
      list(REMOVE_DUPLICATES dirs)
      set(TG_CUDA_WHEEL_LIBRARY_DIRS "${dirs}" CACHE INTERNAL "")
    endif()
  endif()
  if(from)
    set(TG_${prefix}_FROM "${from}" CACHE INTERNAL "")
    message(STATUS "terngrad: ${prefix} ${${prefix}_LIBRARY} (headers ${${prefix}_INCLUDE_DIR}; from the ${from})")
  elseif(L_REQUIRED)
    tg_python_wheel_roots(roots)
    if(NOT roots)
      set(roots "none: python3 has no nvidia package")
    endif()
    message(FATAL_ERROR "terngrad: ${prefix} not found (${header} and ${L_LIBNAMES}${L_WHY}): looked in the CUDA "
                        "toolkit (${CUDAToolkit_INCLUDE_DIRS}, ${CUDAToolkit_LIBRARY_DIR}), the system's default "
                        "paths and python3's wheels (${roots}); set ${prefix}_INCLUDE_DIR and ${prefix}_LIBRARY")
  endif()
  set(${prefix}_FROM "${from}" PARENT_SCOPE)
endfunction()

# tg_find_cuda_libraries([NCCL_REQUIRED])
macro(tg_find_cuda_libraries)
  cmake_parse_arguments(TG_FCL "NCCL_REQUIRED" "" "" ${ARGN})
  tg_find_cuda_library(CUDNN cudnn.h LIBNAMES cudnn libcudnn.so.9 WHEEL_GLOBS libcudnn.so.9 libcudnn.so REQUIRED)
  # cuBLAS: the toolkit's CUDA::cublas when it has one, else the wheel's libcublas and libcublasLt.
  set(TG_CUBLAS_INCLUDE_DIR "")
  if(TARGET CUDA::cublas)
    set(TG_CUBLAS_LIBRARIES CUDA::cublas)
    message(STATUS "terngrad: CUBLAS CUDA::cublas (from the toolkit)")
  else()
    tg_find_cuda_library(CUBLAS cublas_v2.h LIBNAMES cublas libcublas.so.13 libcublas.so.12
                         WHEEL_GLOBS libcublas.so.13 libcublas.so.12 libcublas.so REQUIRED)
    tg_find_cuda_library(CUBLASLT cublasLt.h LIBNAMES cublasLt libcublasLt.so.13 libcublasLt.so.12
                         WHEEL_GLOBS libcublasLt.so.13 libcublasLt.so.12 libcublasLt.so REQUIRED)
    set(TG_CUBLAS_LIBRARIES ${CUBLAS_LIBRARY} ${CUBLASLT_LIBRARY})
    set(TG_CUBLAS_INCLUDE_DIR ${CUBLAS_INCLUDE_DIR})
  endif()
  if(TG_FCL_NCCL_REQUIRED)
    tg_find_cuda_library(NCCL nccl.h LIBNAMES nccl libnccl.so.2 WHEEL_GLOBS libnccl.so.2 libnccl.so REQUIRED
                         WHY ": NcclCommunicator, src/comm/nccl_communicator.cc")
  else()
    tg_find_cuda_library(NCCL nccl.h LIBNAMES nccl libnccl.so.2 WHEEL_GLOBS libnccl.so.2 libnccl.so)
  endif()
  if(NOT NCCL_FROM)
    set(NCCL_LIBRARY "")
    set(NCCL_INCLUDE_DIR "")
  endif()
endmacro()
