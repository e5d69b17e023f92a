# Resolves NVFP4_CUDA_ARCHS (the CUDA targets of the build) and provides
# nvfp4_cuda_targets(<target> <list>) to compile one OBJECT library for a list of them.
# Included by CMakeLists.txt after enable_language(CUDA), in its scope.
#
# NVFP4_CUDA_ARCHS (cache variable or environment variable; the environment wins):
#   ""/"auto"  the GPUs visible at build time, if any (as "native"); otherwise "all"
#   "native"   the family target of each GPU visible at build time
#   "all"      90a;100f;110f;120f: Hopper, and the Blackwell families sm_100 (B200, GB200,
#              B300, GB300), sm_110 (Jetson Thor) and sm_120 (RTX 50, RTX PRO Blackwell, GB10)
#   a list     any of 90a, 100a, 100f, 103a, 103f, 110a, 110f, 120a, 120f, 121a, 121f
#              (semicolons or commas)
#
# Targets, as nvcc 13 names them: "a" (architecture-specific) cubins run on exactly one
# compute capability, "f" (family-specific, CUDA >= 12.9) cubins on every member of the
# family from that one on: sm_100f on 10.0 and 10.3, sm_110f on 11.0, sm_120f on 12.0 and
# 12.1. Both enable the block-scaled tensor-core instructions; the family target is the
# default so that one build covers B300 and GB10 as well.
#
# Sets NVFP4_CUDA_ARCHS to the resolved list (what nvfp4_build_cuda_archs() reports).

set(_nvfp4_known 90a 100a 100f 103a 103f 110a 110f 120a 120f 121a 121f)
set(_nvfp4_all 90a 100f 110f 120f)

# Family target of a compute capability (major*10+minor), or "" when nvfp4 has no kernels
# for it.
function(_nvfp4_target_of_cc cc out)
  if(cc EQUAL 90)
    set(t 90a)
  elseif(cc GREATER_EQUAL 100 AND cc LESS 110)
    set(t 100f)
  elseif(cc GREATER_EQUAL 110 AND cc LESS 120)
    set(t 110f)
  elseif(cc GREATER_EQUAL 120 AND cc LESS 130)
    set(t 120f)
  else()
    set(t "")
  endif()
  set(${out} "${t}" PARENT_SCOPE)
endfunction()

# Compute capabilities of the visible GPUs, through the query tool nvcc itself uses for
# -arch=native; empty without a driver or a GPU.
function(_nvfp4_visible_ccs out)
  set(ccs "")
  get_filename_component(_bin "${CMAKE_CUDA_COMPILER}" DIRECTORY)
  find_program(_nvfp4_devq __nvcc_device_query HINTS "${_bin}" "${CUDAToolkit_BIN_DIR}" NO_CACHE)
  if(_nvfp4_devq)
    execute_process(COMMAND "${_nvfp4_devq}" OUTPUT_VARIABLE _o ERROR_QUIET RESULT_VARIABLE _rc TIMEOUT 60)
    if(_rc EQUAL 0)
      string(REGEX MATCHALL "[0-9]+" ccs "${_o}")
    endif()
  endif()
  set(${out} "${ccs}" PARENT_SCOPE)
endfunction()

set(_nvfp4_req "${NVFP4_CUDA_ARCHS}")
string(REPLACE "," ";" _nvfp4_req "${_nvfp4_req}")
string(STRIP "${_nvfp4_req}" _nvfp4_req)
string(TOLOWER "${_nvfp4_req}" _nvfp4_req)
set(_nvfp4_how "as given")
if(_nvfp4_req STREQUAL "" OR _nvfp4_req STREQUAL "auto" OR _nvfp4_req STREQUAL "native")
  _nvfp4_visible_ccs(_nvfp4_ccs)
  set(_nvfp4_resolved "")
  set(_nvfp4_skipped "")
  foreach(_cc IN LISTS _nvfp4_ccs)
    _nvfp4_target_of_cc(${_cc} _t)
    if(_t)
      list(APPEND _nvfp4_resolved ${_t})
    else()
      list(APPEND _nvfp4_skipped ${_cc})
    endif()
  endforeach()
  list(REMOVE_DUPLICATES _nvfp4_resolved)
  if(_nvfp4_skipped)
    message(WARNING "nvfp4: no CUDA kernels for the visible GPU(s) of compute capability ${_nvfp4_skipped} "
                    "(nvfp4 runs on 9.0, 10.x, 11.x and 12.x)")
  endif()
  if(_nvfp4_resolved)
    set(_nvfp4_how "native: GPU(s) of compute capability ${_nvfp4_ccs} visible")
  elseif(_nvfp4_req STREQUAL "native")
    message(FATAL_ERROR "nvfp4: NVFP4_CUDA_ARCHS=native, but no supported GPU is visible to this build "
                        "(compute capabilities seen: '${_nvfp4_ccs}'). List targets instead, e.g. "
                        "NVFP4_CUDA_ARCHS=\"90a;100f;120f\", or use NVFP4_CUDA_ARCHS=all.")
  else()
    set(_nvfp4_resolved ${_nvfp4_all})
    set(_nvfp4_how "no supported GPU visible: every target")
  endif()
elseif(_nvfp4_req STREQUAL "all")
  set(_nvfp4_resolved ${_nvfp4_all})
  set(_nvfp4_how "all")
else()
  set(_nvfp4_resolved "")
  foreach(_a IN LISTS _nvfp4_req)
    string(STRIP "${_a}" _a)
    string(REGEX REPLACE "^sm_" "" _a "${_a}")
    string(REGEX REPLACE "-real$" "" _a "${_a}")
    if(_a STREQUAL "")
      continue()
    endif()
    if(NOT _a IN_LIST _nvfp4_known)
      message(FATAL_ERROR "nvfp4: unknown CUDA target '${_a}' in NVFP4_CUDA_ARCHS='${NVFP4_CUDA_ARCHS}'; "
                          "use native, all, or a list of: ${_nvfp4_known}")
    endif()
    list(APPEND _nvfp4_resolved ${_a})
  endforeach()
  list(REMOVE_DUPLICATES _nvfp4_resolved)
endif()
if(NOT _nvfp4_resolved)
  message(FATAL_ERROR "nvfp4: NVFP4_CUDA_ARCHS='${NVFP4_CUDA_ARCHS}' names no CUDA target; build the CPU backend "
                      "alone with -DNVFP4_WITH_CUDA=OFF")
endif()
set(NVFP4_CUDA_ARCHS "${_nvfp4_resolved}")
message(STATUS "nvfp4: CUDA targets ${NVFP4_CUDA_ARCHS} (${_nvfp4_how})")

# nvfp4_targets_matching(<out> <regex>): the entries of NVFP4_CUDA_ARCHS matching regex.
function(nvfp4_targets_matching out regex)
  set(r "")
  foreach(_a IN LISTS NVFP4_CUDA_ARCHS)
    if(_a MATCHES "${regex}")
      list(APPEND r ${_a})
    endif()
  endforeach()
  set(${out} "${r}" PARENT_SCOPE)
endfunction()

# nvfp4_cuda_targets(<target> <list>): compile <target>'s CUDA sources for exactly these
# targets, SASS only (these targets have no PTX forward compatibility, and PTX would double
# the compile time). The gencode flags are spelled out rather than left to
# CUDA_ARCHITECTURES so that "f" targets work with any CMake >= 3.24.
function(nvfp4_cuda_targets target)
  set(flags "")
  foreach(_a IN LISTS ARGN)
    list(APPEND flags "--generate-code=arch=compute_${_a},code=sm_${_a}")
  endforeach()
  set_target_properties(${target} PROPERTIES CUDA_ARCHITECTURES OFF)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:${flags}>)
endfunction()
