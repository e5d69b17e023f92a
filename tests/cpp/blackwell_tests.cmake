# Host-only tests of the GEMM runners (runner table, Blackwell CUTLASS runners, cuDNN
# graphs and loader) and of the E2M1 encoders against NVIDIA's host model; no GPU needed.
# Included from tests/cpp/CMakeLists.txt. The runners' symbols are internal to the shared
# library, so the test links the same objects the library is made of.

if(NOT NVFP4_WITH_CUDA)
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

# Every float through the reference, the kernels' software encoder and cuda_fp4.hpp's host
# model of cvt.rn.satfinite.e2m1x2 (~1 CPU-minute), and the NaN-block replacement.
add_executable(nvfp4_test_e2m1_host_model ${CMAKE_CURRENT_LIST_DIR}/e2m1_host_model.cpp)
target_link_libraries(nvfp4_test_e2m1_host_model PRIVATE nvfp4_core CUDA::toolkit)
find_package(Threads REQUIRED)
target_link_libraries(nvfp4_test_e2m1_host_model PRIVATE Threads::Threads)
add_test(NAME nvfp4_e2m1_nan_block COMMAND nvfp4_test_e2m1_host_model nan-block)
add_test(NAME nvfp4_e2m1_exhaustive COMMAND nvfp4_test_e2m1_host_model exhaustive)
set_tests_properties(nvfp4_e2m1_nan_block nvfp4_e2m1_exhaustive PROPERTIES TIMEOUT 1800 LABELS "host")
