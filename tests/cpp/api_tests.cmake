# C API tests (argument checking, capabilities, CPU and GPU round trips).
# Included from tests/cpp/CMakeLists.txt:  include(${CMAKE_CURRENT_LIST_DIR}/api_tests.cmake)
# Paths are relative to this file so that it works from whichever directory includes it.

find_package(Threads REQUIRED)
add_executable(nvfp4_test_api ${CMAKE_CURRENT_LIST_DIR}/test_api.cpp ${CMAKE_CURRENT_LIST_DIR}/c_callers.c)
target_link_libraries(nvfp4_test_api PRIVATE nvfp4::nvfp4 Threads::Threads)
if(NVFP4_WITH_CUDA)
  # The GPU round trip cudaMallocs its buffers, so it needs the runtime itself; static, as
  # the library links it, so that the binary runs where only the driver is installed.
  target_compile_definitions(nvfp4_test_api PRIVATE NVFP4_TEST_CUDA)
  target_link_libraries(nvfp4_test_api PRIVATE CUDA::cudart_static)
endif()

foreach(_case IN ITEMS args hardening caps cpu_roundtrip fp8 gpu_roundtrip)
  add_test(NAME nvfp4_api_${_case} COMMAND nvfp4_test_api ${_case})
  # 77: "skipped" (gpu_roundtrip without a usable GPU), reported as such by ctest.
  set_tests_properties(nvfp4_api_${_case} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300 LABELS "api")
endforeach()
set_tests_properties(nvfp4_api_gpu_roundtrip PROPERTIES LABELS "api;gpu")
