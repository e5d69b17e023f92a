# Randomized C API test (fuzz_api.cpp) under AddressSanitizer + UndefinedBehaviorSanitizer.
# Included from tests/cpp/CMakeLists.txt.
#
# In a CPU-only configuration (NVFP4_WITH_CUDA=OFF, what CI builds) the target compiles its
# own copy of the library's host sources with the sanitizers and -fstrict-enums, so the
# checks run inside instrumented library code and an enum range check that the compiler
# could fold away would show. With CUDA it links the ordinary library instead (no
# sanitizers inside libnvfp4; the statuses and messages are still checked).
#
# ctest runs it for NVFP4_FUZZ_SECONDS (default 20) seconds.
set(NVFP4_FUZZ_SECONDS 20 CACHE STRING "time budget of the nvfp4_fuzz_api ctest, in seconds")

add_executable(nvfp4_fuzz_api ${CMAKE_CURRENT_LIST_DIR}/fuzz_api.cpp ${CMAKE_CURRENT_LIST_DIR}/c_callers.c)
set(_nvfp4_fuzz_sanitized OFF)
if(NOT NVFP4_WITH_CUDA AND CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
  include(CheckCXXSourceCompiles)
  set(CMAKE_REQUIRED_FLAGS "-fsanitize=address,undefined")
  set(CMAKE_REQUIRED_LINK_OPTIONS "-fsanitize=address,undefined")
  check_cxx_source_compiles("int main() { return 0; }" NVFP4_HAVE_ASAN_UBSAN)
  unset(CMAKE_REQUIRED_FLAGS)
  unset(CMAKE_REQUIRED_LINK_OPTIONS)
  if(NVFP4_HAVE_ASAN_UBSAN)
    set(_nvfp4_fuzz_sanitized ON)
  endif()
endif()

if(_nvfp4_fuzz_sanitized)
  # The library's host sources, whatever files they are, made absolute.
  get_target_property(_nvfp4_host_src nvfp4_host SOURCES)
  get_target_property(_nvfp4_host_dir nvfp4_host SOURCE_DIR)
  set(_nvfp4_fuzz_src "")
  foreach(_f IN LISTS _nvfp4_host_src)
    if(NOT IS_ABSOLUTE "${_f}")
      set(_f "${_nvfp4_host_dir}/${_f}")
    endif()
    list(APPEND _nvfp4_fuzz_src "${_f}")
  endforeach()
  target_sources(nvfp4_fuzz_api PRIVATE ${_nvfp4_fuzz_src})
  target_link_libraries(nvfp4_fuzz_api PRIVATE nvfp4_core)
  target_include_directories(nvfp4_fuzz_api PRIVATE ${PROJECT_BINARY_DIR}/generated)
  target_compile_definitions(nvfp4_fuzz_api PRIVATE NVFP4_BUILDING)
  # -fno-sanitize=bounds: GCC 12 miscompiles a shift inside a loop over an array when the
  # bounds and shift checks are both on (the loop index becomes garbage); ASan covers
  # out-of-bounds accesses anyway.
  set(_nvfp4_san -fsanitize=address,undefined -fno-sanitize=bounds -fno-sanitize-recover=all -fno-omit-frame-pointer)
  target_compile_options(nvfp4_fuzz_api PRIVATE ${_nvfp4_san} $<$<COMPILE_LANGUAGE:CXX>:-fstrict-enums> -O1 -g)
  target_link_options(nvfp4_fuzz_api PRIVATE ${_nvfp4_san})
  message(STATUS "nvfp4: nvfp4_fuzz_api built with ASan + UBSan (${NVFP4_FUZZ_SECONDS} s under ctest)")

  # The deterministic C API tests too, against the same instrumented sources.
  add_executable(nvfp4_test_api_sanitized ${NVFP4_TEST_API_SOURCES} ${_nvfp4_fuzz_src})
  target_link_libraries(nvfp4_test_api_sanitized PRIVATE nvfp4_core Threads::Threads)
  target_include_directories(nvfp4_test_api_sanitized PRIVATE ${PROJECT_BINARY_DIR}/generated)
  target_compile_definitions(nvfp4_test_api_sanitized PRIVATE NVFP4_BUILDING)
  target_compile_options(nvfp4_test_api_sanitized PRIVATE ${_nvfp4_san} $<$<COMPILE_LANGUAGE:CXX>:-fstrict-enums> -O1 -g)
  target_link_options(nvfp4_test_api_sanitized PRIVATE ${_nvfp4_san})
  foreach(_case IN LISTS NVFP4_TEST_API_CASES)
    add_test(NAME nvfp4_api_sanitized_${_case} COMMAND nvfp4_test_api_sanitized ${_case})
    set_tests_properties(nvfp4_api_sanitized_${_case} PROPERTIES TIMEOUT 300 LABELS "api;sanitized"
      ENVIRONMENT "ASAN_OPTIONS=detect_leaks=1:abort_on_error=1;UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1")
  endforeach()
else()
  target_link_libraries(nvfp4_fuzz_api PRIVATE nvfp4::nvfp4)
  message(STATUS "nvfp4: nvfp4_fuzz_api built without sanitizers (CUDA build or no ASan/UBSan here)")
endif()

add_test(NAME nvfp4_fuzz_api COMMAND nvfp4_fuzz_api --seconds ${NVFP4_FUZZ_SECONDS})
math(EXPR _nvfp4_fuzz_timeout "${NVFP4_FUZZ_SECONDS} * 3 + 60")
set_tests_properties(nvfp4_fuzz_api PROPERTIES TIMEOUT ${_nvfp4_fuzz_timeout} LABELS "api;fuzz"
  ENVIRONMENT "ASAN_OPTIONS=detect_leaks=1:abort_on_error=1;UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1")
