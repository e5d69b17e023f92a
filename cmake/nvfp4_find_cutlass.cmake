# Finds the CUTLASS C++ headers once for every GEMM target (Hopper and Blackwell) and sets
# the cache variable NVFP4_CUTLASS_DIR (the directory holding cutlass/ and cute/).
#
# CUTLASS is header-only. The pip wheel `nvidia-cutlass` ships the headers at
# <site-packages>/cutlass_library/source/include; -DNVFP4_CUTLASS_DIR=<cutlass>/include
# points elsewhere (a CUTLASS checkout).
include_guard(GLOBAL)
set(NVFP4_CUTLASS_DIR "" CACHE PATH "CUTLASS include directory (holds cutlass/cutlass.h)")
if(NOT NVFP4_CUTLASS_DIR OR NOT EXISTS "${NVFP4_CUTLASS_DIR}/cutlass/cutlass.h")
  # Ask the interpreter that builds the module (scikit-build passes it) where the package
  # lives, without importing it: its __init__ imports scipy & co, absent with --no-deps.
  set(_nvfp4_py "")
  foreach(_cand IN ITEMS "${Python_EXECUTABLE}" "${Python3_EXECUTABLE}")
    if(_cand AND EXISTS "${_cand}")
      set(_nvfp4_py "${_cand}")
      break()
    endif()
  endforeach()
  if(NOT _nvfp4_py)
    find_program(_nvfp4_py_prog NAMES python3 python)
    set(_nvfp4_py "${_nvfp4_py_prog}")
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
      "nvfp4: the GEMM kernels for ${NVFP4_CUDA_ARCHS} need the CUTLASS headers, which were not found.\n"
      "  Install them with:  pip install --no-deps nvidia-cutlass\n"
      "  (into the Python environment that builds nvfp4), or pass -DNVFP4_CUTLASS_DIR=<cutlass>/include,\n"
      "  or build the CPU backend only: -DNVFP4_WITH_CUDA=OFF.")
  endif()
  set(NVFP4_CUTLASS_DIR "${_nvfp4_inc}" CACHE PATH "CUTLASS include directory (holds cutlass/cutlass.h)" FORCE)
endif()
message(STATUS "nvfp4: CUTLASS headers: ${NVFP4_CUTLASS_DIR}")
