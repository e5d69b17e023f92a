// extern "C" entry points: validate every descriptor, dispatch to the CPU reference or
// the CUDA kernels, turn any failure into a status plus a thread-local message.
#include <cstdio>
#include <exception>
#include <string>

#include "core/rht.h"
#include "core/scale.h"
#include "core/swizzle.h"
#include "gemm/backends.h"
#include "internal.h"
#include "validate.h"

#if defined(NVFP4_WITH_CUDA)
#include <cuda_runtime_api.h>
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

NVFP4_API void nvfp4_quant_config_default(nvfp4_quant_config_t* cfg) {
  if (!cfg) return;
  cfg->block = NVFP4_BLOCK_1D;
  cfg->rounding = NVFP4_ROUND_NEAREST;
  cfg->scale_layout = NVFP4_SCALES_SWIZZLED;
  cfg->rht = NVFP4_RHT_NONE;
  cfg->rht_sign_mask = nvfp4::core::kDefaultRhtSignMask;
  cfg->seed = 0;
  cfg->offset = 0;
  cfg->offset_device = nullptr;
}

NVFP4_API uint32_t nvfp4_default_rht_sign_mask(void) { return nvfp4::core::kDefaultRhtSignMask; }

NVFP4_API nvfp4_status_t nvfp4_quantize(const nvfp4_tensor_t* input, const nvfp4_quant_config_t* cfg,
                                        nvfp4_quantized_t* rowwise, nvfp4_quantized_t* columnwise,
                                        nvfp4_stream_t stream) {
  return guarded([&]() -> nvfp4_status_t {
    check_descriptor(input, "input");
    if (!cfg) invalid("cfg: null");
    if (!rowwise && !columnwise) invalid("rowwise/columnwise: at least one output must be requested");
    if (!is_float_io(input->dtype))
      invalid(std::string("input: dtype must be float32, float16 or bfloat16, got ") + dtype_name(input->dtype));
    if (input->ndim < 1) invalid("input: must have at least 1 dimension");
    if (cfg->block != NVFP4_BLOCK_1D && cfg->block != NVFP4_BLOCK_2D) invalid("cfg.block: must be 1D or 2D");
    if (cfg->rounding != NVFP4_ROUND_NEAREST && cfg->rounding != NVFP4_ROUND_STOCHASTIC)
      invalid("cfg.rounding: must be NEAREST or STOCHASTIC");
    if (cfg->scale_layout != NVFP4_SCALES_LINEAR && cfg->scale_layout != NVFP4_SCALES_SWIZZLED)
      invalid("cfg.scale_layout: must be LINEAR or SWIZZLED");
    if (cfg->rht & ~(NVFP4_RHT_ROWWISE | NVFP4_RHT_COLUMNWISE)) invalid("cfg.rht: unknown bits");
    if (cfg->rht && cfg->block == NVFP4_BLOCK_2D) invalid("cfg.rht: the Hadamard transform applies to 1D blocks only");
    if (cfg->offset_device && reinterpret_cast<uintptr_t>(cfg->offset_device) % alignof(uint64_t) != 0)
      invalid("cfg.offset_device: must be 8-byte aligned");

    QuantJob job;
    job.x = input->data;
    job.dtype = input->dtype;
    job.cols = input->shape[input->ndim - 1];
    job.rows = job.cols == 0 ? 0 : numel(*input) / job.cols;
    job.cfg = *cfg;
    if (job.cols % 16 != 0)
      invalid("input: last dimension must be a multiple of 16, got " + std::to_string(job.cols));
    if (rowwise) {
      check_quantized(*input, rowwise, "rowwise", job.rows, job.cols, cfg->scale_layout);
      job.row = {static_cast<uint8_t*>(rowwise->data.data), static_cast<uint8_t*>(rowwise->scales.data),
                 static_cast<float*>(rowwise->amax.data)};
    }
    if (columnwise) {
      const int64_t rp = nvfp4::core::round_up(job.rows, 16);
      check_quantized(*input, columnwise, "columnwise", job.cols, rp, cfg->scale_layout);
      job.col = {static_cast<uint8_t*>(columnwise->data.data), static_cast<uint8_t*>(columnwise->scales.data),
                 static_cast<float*>(columnwise->amax.data)};
    }
    require_cuda_build(*input, "input");
    // Empty input: nothing to quantize, but amax is still defined (0). Backends never
    // see an empty job.
    if (job.rows == 0 || job.cols == 0) {
      for (const QuantOut* o : {&job.row, &job.col}) {
        if (!o->amax) continue;
        if (on_cuda(*input)) {
#if defined(NVFP4_WITH_CUDA)
          DeviceGuard g(*input);
          cudaError_t e = cudaMemsetAsync(o->amax, 0, sizeof(float), reinterpret_cast<cudaStream_t>(stream));
          if (e != cudaSuccess) raise(NVFP4_ERROR_CUDA, std::string("cudaMemsetAsync: ") + cudaGetErrorString(e));
#endif
        } else {
          *o->amax = 0.0f;
        }
      }
      return NVFP4_SUCCESS;
    }
    if (on_cuda(*input)) {
#if defined(NVFP4_WITH_CUDA)
      DeviceGuard g(*input);
      return cuda_quantize(job, stream);
#endif
    }
    (void)stream;
    return cpu_quantize(job);
  });
}

NVFP4_API nvfp4_status_t nvfp4_dequantize(const nvfp4_quantized_t* q, nvfp4_scale_layout_t layout,
                                          nvfp4_tensor_t* out, nvfp4_stream_t stream) {
  return guarded([&]() -> nvfp4_status_t {
    if (!q) invalid("q: null");
    check_descriptor(out, "out");
    if (!is_float_io(out->dtype)) invalid("out: dtype must be float32, float16 or bfloat16");
    if (layout != NVFP4_SCALES_LINEAR && layout != NVFP4_SCALES_SWIZZLED) invalid("scale_layout: unknown value");
    check_descriptor(&q->data, "q.data");
    if (q->data.ndim != 2) invalid("q.data: must have 2 dimensions");
    const int64_t rows = q->data.shape[0], cols = q->data.shape[1] * 2;
    if (cols % 16 != 0) invalid("q.data: 2 * shape[1] must be a multiple of 16");
    check_quantized(*out, q, "q", rows, cols, layout);
    check_shape2(out, "out", rows, cols);
    require_cuda_build(*out, "out");
    DequantJob job;
    job.data = static_cast<const uint8_t*>(q->data.data);
    job.scales = static_cast<const uint8_t*>(q->scales.data);
    job.amax = static_cast<const float*>(q->amax.data);
    job.rows = rows;
    job.cols = cols;
    job.layout = layout;
    job.out = out->data;
    job.out_dtype = out->dtype;
    if (on_cuda(*out)) {
#if defined(NVFP4_WITH_CUDA)
      DeviceGuard g(*out);
      return cuda_dequantize(job, stream);
#endif
    }
    (void)stream;
    return cpu_dequantize(job);
  });
}

static nvfp4_status_t swizzle_impl(const nvfp4_tensor_t* src, nvfp4_tensor_t* dst, bool to_swizzled,
                                   nvfp4_stream_t stream) {
  return guarded([&]() -> nvfp4_status_t {
    const char* sn = to_swizzled ? "linear" : "swizzled";
    const char* dn = to_swizzled ? "swizzled" : "linear";
    check_descriptor(src, sn);
    check_descriptor(dst, dn);
    if (!is_byte(src->dtype) || !is_byte(dst->dtype)) invalid("scales: dtype must be float8_e4m3fn or uint8");
    const nvfp4_tensor_t* lin = to_swizzled ? src : dst;
    const nvfp4_tensor_t* swz = to_swizzled ? dst : src;
    if (lin->ndim != 2) invalid("linear: must have 2 dimensions [rows, cols]");
    const int64_t R = lin->shape[0], C = lin->shape[1];
    check_shape2(swz, to_swizzled ? "swizzled" : "swizzled",
                 nvfp4::core::swizzled_rows(R), nvfp4::core::swizzled_cols(C));
    check_same_device(*src, dst, dn);
    require_cuda_build(*src, sn);
    SwizzleJob job{static_cast<const uint8_t*>(src->data), static_cast<uint8_t*>(dst->data), R, C, to_swizzled};
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

static GemmJob make_gemm_job(const nvfp4_gemm_args_t* args) {
  if (!args) invalid("args: null");
  if (!args->a || !args->b) invalid(std::string(args->a ? "b" : "a") + ": null");
  if (args->scale_layout != NVFP4_SCALES_LINEAR && args->scale_layout != NVFP4_SCALES_SWIZZLED)
    invalid("scale_layout: unknown value");
  if (static_cast<unsigned>(args->backend) > NVFP4_BACKEND_CUDNN) invalid("backend: unknown value");
  check_descriptor(args->d, "d");
  check_descriptor(&args->a->data, "a.data");
  check_descriptor(&args->b->data, "b.data");
  if (args->a->data.ndim != 2 || args->b->data.ndim != 2) invalid("a/b: data must have 2 dimensions [rows, K/2]");
  const int64_t M = args->a->data.shape[0], N = args->b->data.shape[0];
  const int64_t K = args->a->data.shape[1] * 2;
  if (args->b->data.shape[1] * 2 != K)
    invalid("b: K mismatch: a has K=" + std::to_string(K) + ", b has K=" + std::to_string(args->b->data.shape[1] * 2));
  if (K % 16 != 0 || K == 0) invalid("a: K must be a positive multiple of 16, got " + std::to_string(K));
  const nvfp4_tensor_t& ref = *args->d;
  check_quantized(ref, args->a, "a", M, K, args->scale_layout);
  check_quantized(ref, args->b, "b", N, K, args->scale_layout);
  if (!is_float_io(ref.dtype)) invalid("d: dtype must be float32, float16 or bfloat16");
  check_shape2(args->d, "d", M, N);
  GemmJob job;
  job.a = static_cast<const uint8_t*>(args->a->data.data);
  job.sfa = static_cast<const uint8_t*>(args->a->scales.data);
  job.amax_a = static_cast<const float*>(args->a->amax.data);
  job.b = static_cast<const uint8_t*>(args->b->data.data);
  job.sfb = static_cast<const uint8_t*>(args->b->scales.data);
  job.amax_b = static_cast<const float*>(args->b->amax.data);
  job.m = M;
  job.n = N;
  job.k = K;
  job.layout = args->scale_layout;
  job.d = ref.data;
  job.d_dtype = ref.dtype;
  job.beta = args->beta;
  if (args->c) {
    check_descriptor(args->c, "c");
    if (!is_float_io(args->c->dtype)) invalid("c: dtype must be float32, float16 or bfloat16");
    check_shape2(args->c, "c", M, N);
    check_same_device(ref, args->c, "c");
    job.c = args->c->data;
    job.c_dtype = args->c->dtype;
  } else if (args->beta != 0.0f) {
    invalid("beta: nonzero beta needs c");
  }
  if (args->bias) {
    check_descriptor(args->bias, "bias");
    if (!is_float_io(args->bias->dtype)) invalid("bias: dtype must be float32, float16 or bfloat16");
    if (numel(*args->bias) != N || args->bias->ndim != 1)
      invalid("bias: expected shape [" + std::to_string(N) + "], got " + shape_str(*args->bias));
    check_same_device(ref, args->bias, "bias");
    job.bias = args->bias->data;
    job.bias_dtype = args->bias->dtype;
  }
  require_cuda_build(ref, "d");
  return job;
}

NVFP4_API nvfp4_status_t nvfp4_gemm_workspace_size(const nvfp4_gemm_args_t* args, size_t* bytes) {
  return guarded([&]() -> nvfp4_status_t {
    if (!bytes) invalid("bytes: null");
    *bytes = 0;
    GemmJob job = make_gemm_job(args);
    if (on_cuda(*args->d)) {
#if defined(NVFP4_WITH_CUDA)
      DeviceGuard g(*args->d);
      return gemm_workspace_size(job, args->backend, true, bytes);
#endif
    }
    return gemm_workspace_size(job, args->backend, false, bytes);
  });
}

NVFP4_API nvfp4_status_t nvfp4_gemm(const nvfp4_gemm_args_t* args, void* workspace, size_t workspace_bytes,
                                    nvfp4_stream_t stream) {
  return guarded([&]() -> nvfp4_status_t {
    GemmJob job = make_gemm_job(args);
    if (job.m == 0 || job.n == 0) return NVFP4_SUCCESS;
    if (on_cuda(*args->d)) {
#if defined(NVFP4_WITH_CUDA)
      DeviceGuard g(*args->d);
      return gemm_run(job, args->backend, true, workspace, workspace_bytes, stream);
#endif
    }
    return gemm_run(job, args->backend, false, workspace, workspace_bytes, stream);
  });
}

NVFP4_API int nvfp4_backend_supported(nvfp4_backend_t backend, int cc) {
  try {
    return backend_supported(backend, cc);
  } catch (...) {
    return 0;
  }
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
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return major * 10 + minor;
#else
  (void)device;
  return 0;
#endif
}

NVFP4_API const char* nvfp4_build_cuda_archs(void) { return NVFP4_CUDA_ARCHS_STRING; }

NVFP4_API const char* nvfp4_version_string(void) { return "0.1.0"; }

NVFP4_API const char* nvfp4_status_string(nvfp4_status_t status) {
  switch (status) {
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
