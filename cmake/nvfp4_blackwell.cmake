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
# Found once per build tree. NVFP4_CUTLASS_DIR (given by hand, or found by
# cmake/nvfp4_cutlass.cmake for Hopper) wins; otherwise a previous configure's
# NVFP4_CUTLASS_INCLUDE_DIR; otherwise the pip wheel nvidia-cutlass.
set(NVFP4_CUTLASS_DIR "" CACHE PATH "CUTLASS include directory (holds cutlass/cutlass.h)")
if(NVFP4_CUTLASS_DIR AND EXISTS "${NVFP4_CUTLASS_DIR}/cutlass/cutlass.h")
  set(NVFP4_CUTLASS_INCLUDE_DIR "${NVFP4_CUTLASS_DIR}" CACHE PATH
      "CUTLASS include directory used by nvfp4 (holds cutlass/cutlass.h)" FORCE)
elseif(NOT NVFP4_CUTLASS_INCLUDE_DIR)
  # pip's nvidia-cutlass keeps the C++ headers inside the cutlass_library package. Ask
  # the interpreter that builds the module (scikit-build passes it) where that package
  # is, without importing it: its __init__ imports scipy & co, absent with --no-deps.
  set(_nvfp4_py "")
  foreach(_cand IN ITEMS "${Python_EXECUTABLE}" "${Python3_EXECUTABLE}")
    if(_cand AND EXISTS "${_cand}")
      set(_nvfp4_py "${_cand}")
      break()
    endif()
  endforeach()
  if(NOT _nvfp4_py)
    find_program(_nvfp4_bw_py NAMES python3 python)
    set(_nvfp4_py "${_nvfp4_bw_py}")
  endif()
  set(_nvfp4_inc "")
  if(_nvfp4_py)
    execute_process(
      COMMAND "${_nvfp4_py}" -c
              "import importlib.util as u, os; s = u.find_spec('cutlass_library'); print(os.path.join(list(s.submodule_search_locations)[0], 'source', 'include'))"
      OUTPUT_VARIABLE _nvfp4_inc OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _nvfp4_rc)
    if(NOT _nvfp4_rc EQUAL 0)
      set(_nvfp4_inc "")
    endif()
  endif()
  if(NOT _nvfp4_inc OR NOT EXISTS "${_nvfp4_inc}/cutlass/cutlass.h")
    message(FATAL_ERROR
      "nvfp4: the Blackwell GEMMs (100a/120a in NVFP4_CUDA_ARCHS) need the CUTLASS headers, which were not found.\n"
      "  Install them with:  pip install --no-deps nvidia-cutlass\n"
      "  (into the Python environment that builds nvfp4), or pass -DNVFP4_CUTLASS_DIR=<cutlass>/include,\n"
      "  or leave 100a and 120a out of NVFP4_CUDA_ARCHS.")
  endif()
  set(NVFP4_CUTLASS_INCLUDE_DIR "${_nvfp4_inc}" CACHE PATH
      "CUTLASS include directory used by nvfp4 (holds cutlass/cutlass.h)" FORCE)
endif()
if(NOT EXISTS "${NVFP4_CUTLASS_INCLUDE_DIR}/cutlass/cutlass.h")
  message(FATAL_ERROR "nvfp4: NVFP4_CUTLASS_INCLUDE_DIR=${NVFP4_CUTLASS_INCLUDE_DIR} has no cutlass/cutlass.h "
                      "(remove it from the cache or point it at a CUTLASS include/ directory)")
endif()
# The sm100 block-scaled builders need CUTLASS >= 3.8; the headers we build against are 4.x.
file(STRINGS "${NVFP4_CUTLASS_INCLUDE_DIR}/cutlass/version.h" _nvfp4_cutlass_major
     REGEX "^#define CUTLASS_MAJOR [0-9]+")
string(REGEX REPLACE ".* ([0-9]+)$" "\\1" _nvfp4_cutlass_major "${_nvfp4_cutlass_major}")
if(_nvfp4_cutlass_major LESS 4)
  message(FATAL_ERROR "nvfp4: CUTLASS ${_nvfp4_cutlass_major}.x at ${NVFP4_CUTLASS_INCLUDE_DIR} is too old for "
                      "the Blackwell block-scaled GEMMs; pip install --no-deps 'nvidia-cutlass>=4'")
endif()
message(STATUS "nvfp4: CUTLASS headers (Blackwell): ${NVFP4_CUTLASS_INCLUDE_DIR}")

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
