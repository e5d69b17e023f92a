# C API tests of the grouped (MoE) entry points (test_grouped_api.cpp).
add_executable(nvfp4_test_grouped_api ${CMAKE_CURRENT_LIST_DIR}/test_grouped_api.cpp)
target_link_libraries(nvfp4_test_grouped_api PRIVATE nvfp4::nvfp4)
foreach(_case IN ITEMS args cpu)
  add_test(NAME nvfp4_grouped_${_case} COMMAND nvfp4_test_grouped_api ${_case})
  set_tests_properties(nvfp4_grouped_${_case} PROPERTIES TIMEOUT 300 LABELS "api")
endforeach()
