// extern "C" queries of the GEMM runner table (gemm/backends.h, gemm/dispatch.cpp):
// what this build can run where, for nvfp4.device_info() and the build checks.
#include <exception>
#include <string>

#include "gemm/backends.h"
#include "internal.h"

using namespace nvfp4::detail;

extern "C" {

NVFP4_API int nvfp4_runner_count(void) { return runner_count(); }

NVFP4_API nvfp4_status_t nvfp4_runner_info(int index, nvfp4_runner_info_t* info) {
  const Runner* r = runner_at(index);
  if (r == nullptr)
    return fail(NVFP4_ERROR_INVALID_ARGUMENT, "index: must lie in [0, " + std::to_string(runner_count()) +
                                                  "), got " + std::to_string(index));
  if (info == nullptr) return fail(NVFP4_ERROR_INVALID_ARGUMENT, "info: null");
  info->name = r->name;
  info->backend = r->backend;
  info->format = r->format == Format::kNvfp4          ? "nvfp4"
                 : r->format == Format::kMxfp4        ? "mxfp4"
                 : r->format == Format::kNvfp4Grouped ? "nvfp4-grouped"
                                                      : "?";
  info->family = r->family;
  info->cc_min = r->cc_min;
  info->cc_max = r->cc_max;
  const uint32_t own = r->objects & ~static_cast<uint32_t>(kObjCommon);
  info->targets = r->backend == NVFP4_BACKEND_REFERENCE || !r->built ? "" : object_targets(own ? own : kObjCommon);
  info->kernels = r->kernels;
  info->shapes = r->shapes;
  info->description = r->description;
  info->built = r->built ? 1 : 0;
  clear_error();
  return NVFP4_SUCCESS;
}

NVFP4_API int nvfp4_runner_compiled_for(int index, int cc) {
  const Runner* r = runner_at(index);
  return r != nullptr && runner_compiled_for(*r, cc) ? 1 : 0;
}

NVFP4_API int nvfp4_runner_supported(int index, int cc) {
  try {
    const Runner* r = runner_at(index);
    return r != nullptr && runner_usable(*r, cc) ? 1 : 0;
  } catch (...) {
    return 0;
  }
}

NVFP4_API nvfp4_status_t nvfp4_runner_check(int index, int* checked) {
  try {
    int n = 0;
    if (checked != nullptr) *checked = 0;
    const Runner* r = runner_at(index);
    if (r == nullptr)
      return fail(NVFP4_ERROR_INVALID_ARGUMENT, "index: must lie in [0, " + std::to_string(runner_count()) +
                                                    "), got " + std::to_string(index));
    nvfp4_status_t s = runner_self_check(*r, &n);
    if (checked != nullptr) *checked = n;
    if (s == NVFP4_SUCCESS) clear_error();
    return s;
  } catch (const std::exception& e) {
    return fail(NVFP4_ERROR_INTERNAL, std::string("runner check: ") + e.what());
  } catch (...) {
    return fail(NVFP4_ERROR_INTERNAL, "runner check: unknown exception");
  }
}

}  // extern "C"
