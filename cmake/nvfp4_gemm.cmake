# The per-architecture GEMM kernels (src/gemm/sm90, sm100, sm120). Included by
# CMakeLists.txt inside the CUDA branch, in its scope, after cmake/nvfp4_archs.cmake.
#
# Each folder is one OBJECT library compiled for the entries of NVFP4_CUDA_ARCHS that it
# runs on, and no others (one CUTLASS kernel file costs ~100 CPU-seconds and ~5 GB of
# memory per target):
#   sm90   90a                              wgmma, setmaxnreg: sm_90a only
#   sm100  10x and 11x entries (100f, 103a, 110f, ...)   tcgen05 block-scaled MMA
#   sm120  12x entries (120f, 121a, ...)    warp-level block-scaled MMA
# For each library built it appends to NVFP4_OBJECTS, defines NVFP4_HAS_SM<nn>_GEMM on
# nvfp4_host, sets the cmake variable NVFP4_HAS_SM<nn>_GEMM and records the targets in
# NVFP4_TARGETS_SM<nn> (written into nvfp4_build_config.h: dispatch answers from them).

set(NVFP4_HAS_SM90_GEMM OFF)
set(NVFP4_HAS_SM100_GEMM OFF)
set(NVFP4_HAS_SM120_GEMM OFF)
set(NVFP4_TARGETS_SM90 "")
set(NVFP4_TARGETS_SM100 "")
set(NVFP4_TARGETS_SM120 "")

nvfp4_targets_matching(_nvfp4_t90 "^90a$")
nvfp4_targets_matching(_nvfp4_t100 "^1[01][0-9][af]$")
nvfp4_targets_matching(_nvfp4_t120 "^12[0-9][af]$")
if(NOT (_nvfp4_t90 OR _nvfp4_t100 OR _nvfp4_t120))
  return()
endif()

include(${CMAKE_CURRENT_LIST_DIR}/nvfp4_find_cutlass.cmake)

# The Blackwell builders and the family targets (100f, 120f) were verified with CUTLASS
# 4.2 (nvidia-cutlass 4.2.0.0); 4.0/4.1 lack parts of the family-target support.
file(STRINGS "${NVFP4_CUTLASS_DIR}/cutlass/version.h" _nvfp4_cv REGEX "^#define CUTLASS_(MAJOR|MINOR) [0-9]+")
string(REGEX REPLACE ".*CUTLASS_MAJOR ([0-9]+).*" "\\1" _nvfp4_cmaj "${_nvfp4_cv}")
string(REGEX REPLACE ".*CUTLASS_MINOR ([0-9]+).*" "\\1" _nvfp4_cmin "${_nvfp4_cv}")
set(NVFP4_CUTLASS_VERSION "${_nvfp4_cmaj}.${_nvfp4_cmin}")
message(STATUS "nvfp4: CUTLASS ${NVFP4_CUTLASS_VERSION}")
if((_nvfp4_t100 OR _nvfp4_t120) AND NVFP4_CUTLASS_VERSION VERSION_LESS 4.2)
  message(FATAL_ERROR "nvfp4: CUTLASS ${NVFP4_CUTLASS_VERSION} at ${NVFP4_CUTLASS_DIR} is too old for the Blackwell "
                      "block-scaled GEMMs (>= 4.2 needed); pip install --no-deps 'nvidia-cutlass>=4.2'")
endif()

# _nvfp4_gemm_object(<nn> <targets> <extra CUDA flags...>)
function(_nvfp4_gemm_object nn targets)
  # Kernels (.cu) and the host code that plans their launches (.cpp: no device code).
  file(GLOB src CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/gemm/sm${nn}/*.cu ${PROJECT_SOURCE_DIR}/src/gemm/sm${nn}/*.cpp)
  if(NOT src OR NOT targets)
    return()
  endif()
  add_library(nvfp4_sm${nn} OBJECT ${src})
  nvfp4_cuda_targets(nvfp4_sm${nn} ${targets})
  target_include_directories(nvfp4_sm${nn} SYSTEM PRIVATE "${NVFP4_CUTLASS_DIR}")
  target_link_libraries(nvfp4_sm${nn} PRIVATE nvfp4_core CUDA::cudart_static)
  target_compile_definitions(nvfp4_sm${nn} PRIVATE NVFP4_WITH_CUDA NVFP4_HAS_SM${nn}_GEMM)
  # CUTLASS's TMA descriptors through the driver function looked up once, not by name on
  # every call (src/gemm/common/driver_api.h); the same in every GEMM object, so that the
  # CUTLASS wrapper template has one definition in the library.
  target_compile_definitions(nvfp4_sm${nn} PRIVATE CUTLASS_ENABLE_DIRECT_CUDA_DRIVER_CALL
                             cuTensorMapEncodeTiled=nvfp4internal_cuTensorMapEncodeTiled)
  target_compile_options(nvfp4_sm${nn} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:${ARGN}>)
  target_compile_definitions(nvfp4_host PRIVATE NVFP4_HAS_SM${nn}_GEMM)
  set(NVFP4_OBJECTS ${NVFP4_OBJECTS} $<TARGET_OBJECTS:nvfp4_sm${nn}> PARENT_SCOPE)
  set(NVFP4_HAS_SM${nn}_GEMM ON PARENT_SCOPE)
  set(NVFP4_TARGETS_SM${nn} "${targets}" PARENT_SCOPE)
endfunction()

# Hopper: the exact emulation keeps -fmad=false (the decode and epilogue kernels match the
# CPU reference's fp32 arithmetic).
_nvfp4_gemm_object(90 "${_nvfp4_t90}" ${NVFP4_CUDA_FLAGS} --expt-relaxed-constexpr)
# Blackwell: no -fmad=false; the GEMM's epilogue is bounded, not bit-exact, and CUTLASS's
# fused multiply-adds are part of its numerics.
_nvfp4_gemm_object(100 "${_nvfp4_t100}" --expt-relaxed-constexpr -Xcompiler=-ffp-contract=off)
_nvfp4_gemm_object(120 "${_nvfp4_t120}" --expt-relaxed-constexpr -Xcompiler=-ffp-contract=off)
