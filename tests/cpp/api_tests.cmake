# C API tests (argument checking, capabilities, CPU and GPU round trips).
# Included from tests/cpp/CMakeLists.txt:  include(${CMAKE_CURRENT_LIST_DIR}/api_tests.cmake)
# Paths are relative to this file so that it works from whichever directory includes it.

find_package(Threads REQUIRED)
# One case per topic (test_api_main.cpp lists them), each in a file of its own.
set(NVFP4_TEST_API_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/test_api_main.cpp ${CMAKE_CURRENT_LIST_DIR}/test_api_args.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_api_gemm_args.cpp ${CMAKE_CURRENT_LIST_DIR}/test_api_hardening.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_api_caps.cpp ${CMAKE_CURRENT_LIST_DIR}/test_api_roundtrip.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_api_fp8.cpp ${CMAKE_CURRENT_LIST_DIR}/c_callers.c)
set(NVFP4_TEST_API_CASES args_quantize args_cuda_descriptors args_dequantize args_swizzle args_gemm args_cxx
    args_threads hardening caps cpu_roundtrip fp8)
add_executable(nvfp4_test_api ${NVFP4_TEST_API_SOURCES})
target_link_libraries(nvfp4_test_api PRIVATE nvfp4::nvfp4 Threads::Threads)
if(NVFP4_WITH_CUDA)
  # The GPU round trip cudaMallocs its buffers, so it needs the runtime itself; static, as
  # the library links it, so that the binary runs where only the driver is installed.
  target_compile_definitions(nvfp4_test_api PRIVATE NVFP4_TEST_CUDA)
  target_link_libraries(nvfp4_test_api PRIVATE CUDA::cudart_static)
endif()

foreach(_case IN LISTS NVFP4_TEST_API_CASES ITEMS gpu_roundtrip)
  add_test(NAME nvfp4_api_${_case} COMMAND nvfp4_test_api ${_case})
  # 77: "skipped" (gpu_roundtrip without a usable GPU), reported as such by ctest.
  set_tests_properties(nvfp4_api_${_case} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300 LABELS "api")
endforeach()
set_tests_properties(nvfp4_api_gpu_roundtrip PROPERTIES LABELS "api;gpu")
