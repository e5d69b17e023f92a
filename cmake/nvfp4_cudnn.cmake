# cuDNN GEMM backend (src/gemm/cudnn/). Included by CMakeLists.txt inside the CUDA branch,
# in its scope. Build-time needs only headers; libcudnn.so.9 is dlopen'ed at run time
# when the backend is first used, so the library builds and runs without cuDNN.
#
# Headers, each found in the Python environment that builds nvfp4 or given by a cache
# variable (a directory holding the named header):
#   NVFP4_CUDNN_FRONTEND_INCLUDE_DIR  cudnn_frontend.h  pip install --no-deps nvidia-cudnn-frontend
#   NVFP4_CUDNN_INCLUDE_DIR           cudnn.h           pip install --no-deps nvidia-cudnn-jit-cu13
#                                                         (74 MB; or nvidia-cudnn-cu13, 517 MB, or a
#                                                         system cuDNN 9 dev package)
#   NVFP4_NVRTC_INCLUDE_DIR           nvrtc.h           the CUDA toolkit, or
#                                                         pip install --no-deps nvidia-cuda-nvrtc
# All three found: cudnn_gemm.cpp joins nvfp4_host, which gets NVFP4_HAS_CUDNN, and the
# cmake variable NVFP4_HAS_CUDNN is ON. Otherwise a warning, and the rest still builds.
# NVFP4_WITH_CUDNN=OFF leaves the backend out without looking.

option(NVFP4_WITH_CUDNN "Build the cuDNN GEMM backend when its headers are found" ON)
set(NVFP4_HAS_CUDNN OFF)
set(NVFP4_TARGETS_CUDNN "")
if(NOT NVFP4_WITH_CUDNN)
  return()
endif()

# Candidate directories: every site-packages of the interpreter, then the CUDA toolkit.
set(_nvfp4_py "")
foreach(_cand IN ITEMS "${Python_EXECUTABLE}" "${Python3_EXECUTABLE}")
  if(_cand AND EXISTS "${_cand}")
    set(_nvfp4_py "${_cand}")
    break()
  endif()
endforeach()
if(NOT _nvfp4_py)
  find_program(_nvfp4_cudnn_py NAMES python3 python)
  set(_nvfp4_py "${_nvfp4_cudnn_py}")
endif()
set(_nvfp4_site "")
if(_nvfp4_py)
  execute_process(
    COMMAND "${_nvfp4_py}" -c
            "import site, sys; p = site.getsitepackages() + [site.getusersitepackages()] + sys.path; print(';'.join(dict.fromkeys(x for x in p if x)))"
    OUTPUT_VARIABLE _nvfp4_site OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
endif()
set(_nvfp4_frontend_hints "")
set(_nvfp4_cudnn_hints "")
set(_nvfp4_nvrtc_hints ${CUDAToolkit_INCLUDE_DIRS})
foreach(_s IN LISTS _nvfp4_site)
  list(APPEND _nvfp4_frontend_hints "${_s}/include")
  list(APPEND _nvfp4_cudnn_hints "${_s}/nvidia/cudnn/include" "${_s}/nvidia/cu13/include"
                                 "${_s}/nvidia/cu12/include" "${_s}/nvidia/cudnn_jit/include")
  list(APPEND _nvfp4_nvrtc_hints "${_s}/nvidia/cu13/include" "${_s}/nvidia/cuda_nvrtc/include"
                                 "${_s}/nvidia/cu12/include")
endforeach()
if(DEFINED ENV{CUDNN_PATH})
  list(PREPEND _nvfp4_cudnn_hints "$ENV{CUDNN_PATH}/include")
endif()
list(APPEND _nvfp4_cudnn_hints ${CUDAToolkit_INCLUDE_DIRS})

find_path(NVFP4_CUDNN_FRONTEND_INCLUDE_DIR cudnn_frontend.h HINTS ${_nvfp4_frontend_hints}
          DOC "directory of cudnn_frontend.h (pip nvidia-cudnn-frontend: <site-packages>/include)")
find_path(NVFP4_CUDNN_INCLUDE_DIR cudnn.h HINTS ${_nvfp4_cudnn_hints}
          PATHS /usr/include /usr/include/x86_64-linux-gnu /usr/local/cuda/include
          DOC "directory of cudnn.h, cuDNN 9 (pip nvidia-cudnn-jit-cu13 or nvidia-cudnn-cu13: <site-packages>/nvidia/*/include)")
find_path(NVFP4_NVRTC_INCLUDE_DIR nvrtc.h HINTS ${_nvfp4_nvrtc_hints}
          DOC "directory of nvrtc.h (CUDA toolkit, or pip nvidia-cuda-nvrtc: <site-packages>/nvidia/cu13/include)")

set(_nvfp4_missing "")
# A directory given by hand must hold its header (find_path keeps whatever was set).
foreach(_pair IN ITEMS "NVFP4_CUDNN_FRONTEND_INCLUDE_DIR:cudnn_frontend.h" "NVFP4_CUDNN_INCLUDE_DIR:cudnn.h"
                       "NVFP4_NVRTC_INCLUDE_DIR:nvrtc.h")
  string(REPLACE ":" ";" _pair "${_pair}")
  list(GET _pair 0 _var)
  list(GET _pair 1 _hdr)
  if(${_var} AND NOT EXISTS "${${_var}}/${_hdr}")
    string(APPEND _nvfp4_missing "\n  ${_var}=${${_var}} has no ${_hdr}")
  endif()
endforeach()
if(NOT NVFP4_CUDNN_FRONTEND_INCLUDE_DIR)
  string(APPEND _nvfp4_missing "\n  cudnn_frontend.h: pip install --no-deps nvidia-cudnn-frontend")
endif()
if(NOT NVFP4_CUDNN_INCLUDE_DIR)
  string(APPEND _nvfp4_missing "\n  cudnn.h (cuDNN 9): pip install --no-deps nvidia-cudnn-jit-cu13")
elseif(EXISTS "${NVFP4_CUDNN_INCLUDE_DIR}/cudnn_version.h")
  file(STRINGS "${NVFP4_CUDNN_INCLUDE_DIR}/cudnn_version.h" _nvfp4_cudnn_major REGEX "^#define CUDNN_MAJOR [0-9]+")
  string(REGEX REPLACE ".* ([0-9]+)$" "\\1" _nvfp4_cudnn_major "${_nvfp4_cudnn_major}")
  if(NOT _nvfp4_cudnn_major EQUAL 9)
    string(APPEND _nvfp4_missing "\n  cudnn.h of cuDNN 9 (found major ${_nvfp4_cudnn_major} in ${NVFP4_CUDNN_INCLUDE_DIR})")
  endif()
endif()
if(NOT NVFP4_NVRTC_INCLUDE_DIR)
  string(APPEND _nvfp4_missing "\n  nvrtc.h: pip install --no-deps nvidia-cuda-nvrtc")
endif()
if(_nvfp4_missing)
  message(WARNING "nvfp4: building without the cuDNN GEMM backend; missing headers:${_nvfp4_missing}\n"
                  "  (or set NVFP4_CUDNN_FRONTEND_INCLUDE_DIR / NVFP4_CUDNN_INCLUDE_DIR / NVFP4_NVRTC_INCLUDE_DIR)")
  return()
endif()
message(STATUS "nvfp4: cuDNN backend headers: ${NVFP4_CUDNN_FRONTEND_INCLUDE_DIR}, ${NVFP4_CUDNN_INCLUDE_DIR}, "
               "${NVFP4_NVRTC_INCLUDE_DIR}")

# The frontend only in the files that define, build and run graphs (it is large and slow
# to compile: ~35 CPU-seconds a file), as system headers; no JSON: we key graphs ourselves.
# Loading libcudnn.so.9 needs no cuDNN header at all.
set(_nvfp4_cudnn_cpp ${CMAKE_CURRENT_SOURCE_DIR}/src/gemm/cudnn/cudnn_gemm.cpp
                     ${CMAKE_CURRENT_SOURCE_DIR}/src/gemm/cudnn/cudnn_graph.cpp
                     ${CMAKE_CURRENT_SOURCE_DIR}/src/gemm/cudnn/cudnn_autotune.cpp)
target_sources(nvfp4_host PRIVATE ${_nvfp4_cudnn_cpp} ${CMAKE_CURRENT_SOURCE_DIR}/src/gemm/cudnn/cudnn_library.cpp)
set_source_files_properties(${_nvfp4_cudnn_cpp} PROPERTIES
  COMPILE_DEFINITIONS "NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING;CUDNN_FRONTEND_SKIP_JSON_LIB"
  COMPILE_OPTIONS "-isystem;${NVFP4_CUDNN_FRONTEND_INCLUDE_DIR};-isystem;${NVFP4_CUDNN_INCLUDE_DIR};-isystem;${NVFP4_NVRTC_INCLUDE_DIR}")
target_compile_definitions(nvfp4_host PRIVATE NVFP4_HAS_CUDNN)
target_link_libraries(nvfp4_host PRIVATE ${CMAKE_DL_LIBS})

# Its small kernels (alpha and beta on the device), for every target of the build.
add_library(nvfp4_cudnn_kernels OBJECT ${CMAKE_CURRENT_SOURCE_DIR}/src/gemm/cudnn/cudnn_scalars.cu)
nvfp4_cuda_targets(nvfp4_cudnn_kernels ${NVFP4_CUDA_ARCHS})
target_link_libraries(nvfp4_cudnn_kernels PRIVATE nvfp4_core CUDA::cudart_static)
target_compile_definitions(nvfp4_cudnn_kernels PRIVATE NVFP4_WITH_CUDA NVFP4_HAS_CUDNN)
target_compile_options(nvfp4_cudnn_kernels PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:${NVFP4_CUDA_FLAGS}>)
list(APPEND NVFP4_OBJECTS $<TARGET_OBJECTS:nvfp4_cudnn_kernels>)
set(NVFP4_TARGETS_CUDNN "${NVFP4_CUDA_ARCHS}")
set(NVFP4_HAS_CUDNN ON)
