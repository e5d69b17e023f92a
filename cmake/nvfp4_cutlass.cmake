# Hopper GEMM kernels (CUTLASS 3.x sm90 + the hand-written small-M kernel).
# Included by CMakeLists.txt inside the CUDA branch, in its scope: it appends to
# NVFP4_OBJECTS and marks nvfp4_host with NVFP4_HAS_SM90_GEMM.
#
# The CUTLASS headers are found by cmake/nvfp4_find_cutlass.cmake.

if(NOT "90a" IN_LIST NVFP4_CUDA_ARCHS)
  return()
endif()

include(${CMAKE_CURRENT_LIST_DIR}/nvfp4_find_cutlass.cmake)

file(GLOB NVFP4_SM90_CU CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/src/gemm/cutlass/sm90_*.cu)
if(NOT NVFP4_SM90_CU)
  return()
endif()

# sm_90a only: wgmma and setmaxnreg exist on no other target, and one CUTLASS kernel
# file costs ~100 CPU-seconds per target it is compiled for.
add_library(nvfp4_sm90 OBJECT ${NVFP4_SM90_CU})
set_target_properties(nvfp4_sm90 PROPERTIES CUDA_ARCHITECTURES "90a-real")
target_include_directories(nvfp4_sm90 SYSTEM PRIVATE "${NVFP4_CUTLASS_DIR}")
target_link_libraries(nvfp4_sm90 PRIVATE nvfp4_core CUDA::cudart_static)
target_compile_definitions(nvfp4_sm90 PRIVATE NVFP4_WITH_CUDA NVFP4_HAS_SM90_GEMM)
target_compile_options(nvfp4_sm90 PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:${NVFP4_CUDA_FLAGS} --expt-relaxed-constexpr>)

list(APPEND NVFP4_OBJECTS $<TARGET_OBJECTS:nvfp4_sm90>)
target_compile_definitions(nvfp4_host PRIVATE NVFP4_HAS_SM90_GEMM)
