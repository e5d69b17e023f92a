// extern "C" entry points that belong to no format: the error state behind
// nvfp4_last_error, the scale swizzle, device and build queries, version and status strings.
// Quantization is in api_quantize.cpp, the GEMMs in api_gemm.cpp, the FP8 cast in
// api_fp8.cpp; each validates every descriptor (validate.h) and turns any failure into a
// status plus the thread-local message kept here.
#include <string>

#include "core/swizzle.h"
#include "internal.h"
#include "validate.h"

#if defined(NVFP4_WITH_CUDA)
#include <cuda_runtime_api.h>

#include "cuda/device.h"
#endif

#ifndef NVFP4_CUDA_ARCHS_STRING
#define NVFP4_CUDA_ARCHS_STRING ""
#endif

namespace nvfp4::detail {
namespace {
thread_local std::string g_last_error;
}  // namespace

nvfp4_status_t fail(nvfp4_status_t status, const std::string& message) {
  g_last_error = message;
  return status;
}
void clear_error() { g_last_error.clear(); }

}  // namespace nvfp4::detail

using namespace nvfp4::detail;

extern "C" {

static nvfp4_status_t swizzle_impl(const nvfp4_tensor_t* src, nvfp4_tensor_t* dst, bool to_swizzled,
                                   nvfp4_stream_t stream) {
  return guarded([&]() -> nvfp4_status_t {
    const char* sn = to_swizzled ? "linear" : "swizzled";
    const char* dn = to_swizzled ? "swizzled" : "linear";
    check_descriptor(src, sn);
    check_descriptor(dst, dn);
    if (!is_byte(src->dtype))
      invalid(std::string(sn) + ": dtype must be float8_e4m3fn or uint8, got " + dtype_name(src->dtype));
    if (!is_byte(dst->dtype))
      invalid(std::string(dn) + ": dtype must be float8_e4m3fn or uint8, got " + dtype_name(dst->dtype));
    const nvfp4_tensor_t* lin = to_swizzled ? src : dst;
    const nvfp4_tensor_t* swz = to_swizzled ? dst : src;
    if (lin->ndim != 2) invalid("linear: must have 2 dimensions [rows, cols], got " + shape_str(*lin));
    const int64_t R = lin->shape[0], C = lin->shape[1];
    int64_t rp = 0, cp = 0;
    if (!nvfp4::core::swizzled_shape_checked(R, C, &rp, &cp))
      invalid("linear: shape " + shape_str(*lin) + " is too large: its swizzled layout overflows int64");
    check_shape2(swz, "swizzled", rp, cp);
    check_same_device(*src, dst, dn);
    check_disjoint(byte_range(*dst, dn), byte_range(*src, sn));
    require_cuda_build(*src, sn);
    SwizzleJob job{static_cast<const uint8_t*>(src->data), static_cast<uint8_t*>(dst->data), R, C, to_swizzled};
    if (rp == 0 || cp == 0) return NVFP4_SUCCESS;  // nothing to write
    if (on_cuda(*src)) {
#if defined(NVFP4_WITH_CUDA)
      DeviceGuard g(*src);
      return cuda_swizzle(job, stream);
#endif
    }
    (void)stream;
    return cpu_swizzle(job);
  });
}

NVFP4_API nvfp4_status_t nvfp4_swizzle_scales(const nvfp4_tensor_t* linear, nvfp4_tensor_t* swizzled,
                                              nvfp4_stream_t stream) {
  return swizzle_impl(linear, swizzled, true, stream);
}

NVFP4_API nvfp4_status_t nvfp4_unswizzle_scales(const nvfp4_tensor_t* swizzled, nvfp4_tensor_t* linear,
                                                nvfp4_stream_t stream) {
  return swizzle_impl(swizzled, linear, false, stream);
}

NVFP4_API int nvfp4_cuda_device_count(void) {
#if defined(NVFP4_WITH_CUDA)
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
#else
  return 0;
#endif
}

NVFP4_API int nvfp4_cuda_device_cc(int device) {
#if defined(NVFP4_WITH_CUDA)
  return gpu::compute_capability(device);
#else
  (void)device;
  return 0;
#endif
}

NVFP4_API const char* nvfp4_build_cuda_archs(void) { return NVFP4_CUDA_ARCHS_STRING; }

#define NVFP4_STR2(x) #x
#define NVFP4_STR(x) NVFP4_STR2(x)
NVFP4_API const char* nvfp4_version_string(void) {
  return NVFP4_STR(NVFP4_VERSION_MAJOR) "." NVFP4_STR(NVFP4_VERSION_MINOR) "." NVFP4_STR(NVFP4_VERSION_PATCH);
}

NVFP4_API const char* nvfp4_status_string(nvfp4_status_t status_in) {
  const int64_t s = enum_bits(status_in);
  if (s < NVFP4_SUCCESS || s > NVFP4_ERROR_INTERNAL) return "unknown status";
  switch (static_cast<nvfp4_status_t>(s)) {
    case NVFP4_SUCCESS: return "success";
    case NVFP4_ERROR_INVALID_ARGUMENT: return "invalid argument";
    case NVFP4_ERROR_NOT_SUPPORTED: return "not supported";
    case NVFP4_ERROR_CUDA: return "CUDA error";
    case NVFP4_ERROR_CUDNN: return "cuDNN error";
    case NVFP4_ERROR_WORKSPACE: return "workspace too small";
    case NVFP4_ERROR_INTERNAL: return "internal error";
  }
  return "unknown status";
}

NVFP4_API const char* nvfp4_last_error(void) { return g_last_error.c_str(); }

}  // extern "C"
