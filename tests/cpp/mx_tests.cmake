# MXFP4 C++ tests. Included from tests/cpp/CMakeLists.txt.

# The nvfp4_mx_* C API and its C++ layer (argument checks, CPU and GPU round trips).
add_executable(nvfp4_test_mx_api ${CMAKE_CURRENT_LIST_DIR}/test_mx_api.cpp)
target_link_libraries(nvfp4_test_mx_api PRIVATE nvfp4::nvfp4)
if(NVFP4_WITH_CUDA)
  target_compile_definitions(nvfp4_test_mx_api PRIVATE NVFP4_TEST_CUDA)
  target_link_libraries(nvfp4_test_mx_api PRIVATE CUDA::cudart_static)
endif()
foreach(_case IN ITEMS args cpu_roundtrip cpu_gemm gpu_roundtrip)
  add_test(NAME nvfp4_mx_api_${_case} COMMAND nvfp4_test_mx_api ${_case})
  set_tests_properties(nvfp4_mx_api_${_case} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300 LABELS "mx;api")
endforeach()
set_tests_properties(nvfp4_mx_api_gpu_roundtrip PROPERTIES LABELS "mx;api;gpu")

# The same tests against the library's host sources compiled with ASan + UBSan and
# -fstrict-enums (CPU-only configurations, as fuzz_tests.cmake does for the NVFP4 API).
if(NOT NVFP4_WITH_CUDA AND CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
  include(CheckCXXSourceCompiles)
  set(CMAKE_REQUIRED_FLAGS "-fsanitize=address,undefined")
  set(CMAKE_REQUIRED_LINK_OPTIONS "-fsanitize=address,undefined")
  check_cxx_source_compiles("int main() { return 0; }" NVFP4_MX_HAVE_ASAN_UBSAN)
  unset(CMAKE_REQUIRED_FLAGS)
  unset(CMAKE_REQUIRED_LINK_OPTIONS)
  if(NVFP4_MX_HAVE_ASAN_UBSAN)
    get_target_property(_nvfp4_mx_host_src nvfp4_host SOURCES)
    get_target_property(_nvfp4_mx_host_dir nvfp4_host SOURCE_DIR)
    set(_nvfp4_mx_san_src "")
    foreach(_f IN LISTS _nvfp4_mx_host_src)
      if(NOT IS_ABSOLUTE "${_f}")
        set(_f "${_nvfp4_mx_host_dir}/${_f}")
      endif()
      list(APPEND _nvfp4_mx_san_src "${_f}")
    endforeach()
    add_executable(nvfp4_test_mx_api_sanitized ${CMAKE_CURRENT_LIST_DIR}/test_mx_api.cpp ${_nvfp4_mx_san_src})
    target_link_libraries(nvfp4_test_mx_api_sanitized PRIVATE nvfp4_core)
    target_include_directories(nvfp4_test_mx_api_sanitized PRIVATE ${PROJECT_BINARY_DIR}/generated)
    target_compile_definitions(nvfp4_test_mx_api_sanitized PRIVATE NVFP4_BUILDING)
    set(_nvfp4_mx_san -fsanitize=address,undefined -fno-sanitize=bounds -fno-sanitize-recover=all -fno-omit-frame-pointer)
    target_compile_options(nvfp4_test_mx_api_sanitized PRIVATE ${_nvfp4_mx_san} -fstrict-enums -O1 -g)
    target_link_options(nvfp4_test_mx_api_sanitized PRIVATE ${_nvfp4_mx_san})
    foreach(_case IN ITEMS args cpu_roundtrip cpu_gemm)
      add_test(NAME nvfp4_mx_api_sanitized_${_case} COMMAND nvfp4_test_mx_api_sanitized ${_case})
      set_tests_properties(nvfp4_mx_api_sanitized_${_case} PROPERTIES TIMEOUT 300 LABELS "mx;api;sanitized"
        ENVIRONMENT "ASAN_OPTIONS=detect_leaks=1:abort_on_error=1;UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1")
    endforeach()
  endif()
endif()

# Host-only checks against CUTLASS's definitions (scale layout of MX operands, E8M0
# conversions). The test needs only headers: the
# CUTLASS C++ headers and the CUDA toolkit's (CUTLASS includes cuda/std/*); it is built with
# the host compiler, so it runs in CPU-only configurations too, and is skipped (with a
# message) where either set of headers is missing.

set(_nvfp4_mx_cutlass "${NVFP4_CUTLASS_DIR}")
if(NOT _nvfp4_mx_cutlass OR NOT EXISTS "${_nvfp4_mx_cutlass}/cutlass/cutlass.h")
  # Same lookup as cmake/nvfp4_find_cutlass.cmake, but a miss is not an error here.
  find_program(_nvfp4_mx_py NAMES python3 python)
  if(_nvfp4_mx_py)
    execute_process(
      COMMAND "${_nvfp4_mx_py}" -c
              "import importlib.util as u, os; s = u.find_spec('cutlass_library'); print(os.path.join(list(s.submodule_search_locations)[0], 'source', 'include'))"
      OUTPUT_VARIABLE _nvfp4_mx_cutlass OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  endif()
endif()
find_package(CUDAToolkit QUIET)
if(NOT _nvfp4_mx_cutlass OR NOT EXISTS "${_nvfp4_mx_cutlass}/cutlass/cutlass.h" OR NOT CUDAToolkit_FOUND)
  message(STATUS "nvfp4: MXFP4 CUTLASS layout test skipped (needs the CUTLASS and CUDA toolkit headers)")
  return()
endif()
set(_nvfp4_mx_cuda_inc ${CUDAToolkit_INCLUDE_DIRS})
foreach(_d IN LISTS CUDAToolkit_INCLUDE_DIRS)
  if(EXISTS "${_d}/cccl/cuda/std/utility")
    list(APPEND _nvfp4_mx_cuda_inc "${_d}/cccl")
  endif()
endforeach()

add_executable(nvfp4_test_mx_layout_host ${CMAKE_CURRENT_LIST_DIR}/test_mx_layout_host.cpp)
target_link_libraries(nvfp4_test_mx_layout_host PRIVATE nvfp4_core)
target_include_directories(nvfp4_test_mx_layout_host SYSTEM PRIVATE "${_nvfp4_mx_cutlass}" ${_nvfp4_mx_cuda_inc})
add_test(NAME nvfp4_mx_layout_host COMMAND nvfp4_test_mx_layout_host)
set_tests_properties(nvfp4_mx_layout_host PROPERTIES TIMEOUT 300 LABELS "mx;host")
