# Blackwell GEMM kernels: CUTLASS block-scaled NVFP4 GEMMs for sm_100a and sm_120a.
# Included by CMakeLists.txt inside the CUDA branch, in its scope. For each of 100a / 120a
# in NVFP4_CUDA_ARCHS it builds src/gemm/cutlass/sm<arch>_*.cu into an OBJECT library
# for that target only, appends it to NVFP4_OBJECTS, and marks nvfp4_host with
# NVFP4_HAS_SM<arch>_GEMM. Sets, for the rest of the build:
#   NVFP4_CUTLASS_INCLUDE_DIR   the CUTLASS include directory (holds cutlass/ and cute/)
#   NVFP4_HAS_SM100_GEMM, NVFP4_HAS_SM120_GEMM   ON for the targets built (tests use them)

set(NVFP4_HAS_SM100_GEMM OFF)
set(NVFP4_HAS_SM120_GEMM OFF)
set(_nvfp4_bw_archs "")
foreach(_a IN ITEMS 100 120)
  if("${_a}a" IN_LIST NVFP4_CUDA_ARCHS)
    list(APPEND _nvfp4_bw_archs ${_a})
  endif()
endforeach()
if(NOT _nvfp4_bw_archs)
  return()
endif()

# ---- CUTLASS headers -----------------------------------------------------------------
include(${CMAKE_CURRENT_LIST_DIR}/nvfp4_find_cutlass.cmake)
set(NVFP4_CUTLASS_INCLUDE_DIR "${NVFP4_CUTLASS_DIR}")
# The sm100 block-scaled builders need CUTLASS >= 3.8; the headers we build against are 4.x.
file(STRINGS "${NVFP4_CUTLASS_INCLUDE_DIR}/cutlass/version.h" _nvfp4_cutlass_major
     REGEX "^#define CUTLASS_MAJOR [0-9]+")
string(REGEX REPLACE ".* ([0-9]+)$" "\\1" _nvfp4_cutlass_major "${_nvfp4_cutlass_major}")
if(_nvfp4_cutlass_major LESS 4)
  message(FATAL_ERROR "nvfp4: CUTLASS ${_nvfp4_cutlass_major}.x at ${NVFP4_CUTLASS_INCLUDE_DIR} is too old for "
                      "the Blackwell block-scaled GEMMs; pip install --no-deps 'nvidia-cutlass>=4'")
endif()

# ---- one OBJECT library per architecture -----------------------------------------------
# Each file is compiled for its own target only (~100 CPU-s and ~5 GB per CUTLASS file
# and target). No -fmad=false here: the GEMM's epilogue is bounded, not bit-exact, and
# CUTLASS's fused multiply-adds are part of its numerics.
foreach(_a IN LISTS _nvfp4_bw_archs)
  file(GLOB _nvfp4_src CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/src/gemm/cutlass/sm${_a}_*.cu)
  if(NOT _nvfp4_src)
    continue()
  endif()
  add_library(nvfp4_sm${_a} OBJECT ${_nvfp4_src})
  set_target_properties(nvfp4_sm${_a} PROPERTIES CUDA_ARCHITECTURES "${_a}a-real")
  target_include_directories(nvfp4_sm${_a} SYSTEM PRIVATE "${NVFP4_CUTLASS_INCLUDE_DIR}")
  target_link_libraries(nvfp4_sm${_a} PRIVATE nvfp4_core CUDA::cudart_static)
  target_compile_definitions(nvfp4_sm${_a} PRIVATE NVFP4_WITH_CUDA NVFP4_HAS_SM${_a}_GEMM)
  target_compile_options(nvfp4_sm${_a} PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -Xcompiler=-ffp-contract=off>)
  list(APPEND NVFP4_OBJECTS $<TARGET_OBJECTS:nvfp4_sm${_a}>)
  target_compile_definitions(nvfp4_host PRIVATE NVFP4_HAS_SM${_a}_GEMM)
  set(NVFP4_HAS_SM${_a}_GEMM ON)
endforeach()
