# Hopper GEMM kernels (CUTLASS 3.x sm90 + the hand-written small-M kernel).
# Included by CMakeLists.txt inside the CUDA branch, in its scope: it appends to
# NVFP4_OBJECTS and marks nvfp4_host with NVFP4_HAS_SM90_GEMM.
#
# CUTLASS is header-only. The pip wheel `nvidia-cutlass` ships the C++ headers at
# <site-packages>/cutlass_library/source/include; -DNVFP4_CUTLASS_DIR=/path/to/include
# points elsewhere (a CUTLASS checkout's include/).

if(NOT "90a" IN_LIST NVFP4_CUDA_ARCHS)
  return()
endif()

set(NVFP4_CUTLASS_DIR "" CACHE PATH "CUTLASS include directory (holds cutlass/cutlass.h)")

if(NOT NVFP4_CUTLASS_DIR)
  # The interpreter that will import the module is the one whose site-packages we want;
  # CMakeLists.txt looks for Python only later, so try what scikit-build passes first.
  set(_nvfp4_py "")
  foreach(_cand IN ITEMS "${Python_EXECUTABLE}" "${Python3_EXECUTABLE}")
    if(_cand AND EXISTS "${_cand}")
      set(_nvfp4_py "${_cand}")
      break()
    endif()
  endforeach()
  if(NOT _nvfp4_py)
    find_program(_nvfp4_py_prog NAMES python3 python)
    if(_nvfp4_py_prog)
      set(_nvfp4_py "${_nvfp4_py_prog}")
    endif()
  endif()
  if(_nvfp4_py)
    execute_process(
      COMMAND "${_nvfp4_py}" -c
              "import cutlass_library, os; print(os.path.join(os.path.dirname(cutlass_library.__file__), 'source', 'include'))"
      OUTPUT_VARIABLE _nvfp4_cutlass_inc OUTPUT_STRIP_TRAILING_WHITESPACE
      ERROR_QUIET RESULT_VARIABLE _nvfp4_rc)
    if(_nvfp4_rc EQUAL 0 AND EXISTS "${_nvfp4_cutlass_inc}/cutlass/cutlass.h")
      set(NVFP4_CUTLASS_DIR "${_nvfp4_cutlass_inc}" CACHE PATH
          "CUTLASS include directory (holds cutlass/cutlass.h)" FORCE)
    endif()
  endif()
endif()

if(NOT NVFP4_CUTLASS_DIR OR NOT EXISTS "${NVFP4_CUTLASS_DIR}/cutlass/cutlass.h")
  message(FATAL_ERROR
    "nvfp4: the Hopper GEMM (90a in NVFP4_CUDA_ARCHS) needs the CUTLASS headers, which were not found.\n"
    "  Install them with:  pip install --no-deps nvidia-cutlass\n"
    "  (into the Python environment that builds nvfp4), or pass -DNVFP4_CUTLASS_DIR=<cutlass>/include,\n"
    "  or leave 90a out: NVFP4_CUDA_ARCHS=\"100a;120a\".")
endif()
message(STATUS "nvfp4: CUTLASS headers: ${NVFP4_CUTLASS_DIR}")

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
