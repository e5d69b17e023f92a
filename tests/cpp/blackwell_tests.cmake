# Host-only tests of the Blackwell CUTLASS runners and the cuDNN loader (no GPU needed).
# Included from tests/cpp/CMakeLists.txt. The runners' symbols are internal to the shared
# library, so the test links the same objects the library is made of.

if(NOT NVFP4_WITH_CUDA OR NOT (NVFP4_HAS_SM100_GEMM OR NVFP4_HAS_SM120_GEMM OR NVFP4_HAS_CUDNN))
  return()
endif()

add_executable(nvfp4_test_blackwell_host ${CMAKE_CURRENT_LIST_DIR}/test_blackwell_host.cpp ${NVFP4_OBJECTS})
target_link_libraries(nvfp4_test_blackwell_host PRIVATE nvfp4_core CUDA::cudart_static ${CMAKE_DL_LIBS})
target_compile_definitions(nvfp4_test_blackwell_host PRIVATE NVFP4_WITH_CUDA
  $<$<BOOL:${NVFP4_HAS_SM100_GEMM}>:NVFP4_HAS_SM100_GEMM>
  $<$<BOOL:${NVFP4_HAS_SM120_GEMM}>:NVFP4_HAS_SM120_GEMM>
  $<$<BOOL:${NVFP4_HAS_CUDNN}>:NVFP4_HAS_CUDNN>)
set_target_properties(nvfp4_test_blackwell_host PROPERTIES LINKER_LANGUAGE CXX)

add_test(NAME nvfp4_blackwell_host COMMAND nvfp4_test_blackwell_host)
set_tests_properties(nvfp4_blackwell_host PROPERTIES TIMEOUT 300 LABELS "blackwell;host")
if(NVFP4_HAS_CUDNN)
  # The runner must report a missing libcudnn.so.9 as NVFP4_ERROR_CUDNN, not crash.
  add_test(NAME nvfp4_cudnn_missing COMMAND nvfp4_test_blackwell_host)
  set_tests_properties(nvfp4_cudnn_missing PROPERTIES TIMEOUT 300 LABELS "cudnn;host"
    ENVIRONMENT "NVFP4_CUDNN_PATH=/nonexistent/libcudnn.so.9")
endif()
