# C API tests of the gather-row entry points (test_gather_api.cpp).
add_executable(nvfp4_test_gather_api ${CMAKE_CURRENT_LIST_DIR}/test_gather_api.cpp)
target_link_libraries(nvfp4_test_gather_api PRIVATE nvfp4::nvfp4)
foreach(_case IN ITEMS args cpu)
  add_test(NAME nvfp4_gather_${_case} COMMAND nvfp4_test_gather_api ${_case})
  set_tests_properties(nvfp4_gather_${_case} PROPERTIES TIMEOUT 300 LABELS "api")
endforeach()
