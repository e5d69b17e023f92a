// extern "C" entry point of the FP8 cast (nvfp4_fp8_cast): validates every descriptor with
// the shared checks of validate.h, then runs the CPU reference or the CUDA kernels.
#include <cmath>
#include <string>
#include <vector>

#include "fp8_internal.h"
#include "settings.h"
#include "validate.h"

#if defined(NVFP4_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

using namespace nvfp4::detail;

namespace {

// A float32 scalar (one element, any rank): 4-byte alignment is enough here, also on CUDA
// (a slot of a scale or amax-history buffer), unlike the 16 bytes of other tensors.
void check_scalar(const nvfp4_tensor_t& ref, const nvfp4_tensor_t* t, const char* name) {
  const std::string n(name);
  if (!t) invalid(n + ": null descriptor");
  if (t->ndim < 0 || t->ndim > NVFP4_MAX_DIMS) invalid(n + ": ndim " + std::to_string(t->ndim) + " out of range");
  if (enum_bits(t->dtype) != NVFP4_DTYPE_FLOAT32)
    invalid(n + ": dtype must be float32, got code " + std::to_string(enum_bits(t->dtype)));
  for (int i = 0; i < t->ndim; ++i)
    if (t->shape[i] != 1) invalid(n + ": must hold exactly one element, got shape " + shape_str(*t));
  const int64_t dev = enum_bits(t->device_type);
  if (dev != NVFP4_DEVICE_CPU && dev != NVFP4_DEVICE_CUDA) invalid(n + ": unknown device type " + std::to_string(dev));
  check_same_device(ref, t, name);
  if (!t->data) invalid(n + ": null data pointer");
  if (reinterpret_cast<uintptr_t>(t->data) % alignof(float) != 0) invalid(n + ": must be 4-byte aligned");
}

void check_bytes(const nvfp4_tensor_t& ref, const nvfp4_tensor_t* t, const char* name, int64_t r, int64_t c) {
  check_descriptor(t, name);
  if (t->dtype != NVFP4_DTYPE_UINT8)
    invalid(std::string(name) + ": dtype must be uint8 (FP8 bytes), got " + dtype_name(t->dtype));
  check_shape2(t, name, r, c);
  check_same_device(ref, t, name);
}

}  // namespace

extern "C" {

NVFP4_API nvfp4_status_t nvfp4_fp8_cast(const nvfp4_tensor_t* x, const nvfp4_fp8_config_t* cfg, nvfp4_tensor_t* q,
                                        nvfp4_tensor_t* qt, nvfp4_tensor_t* scale_inv, nvfp4_tensor_t* amax,
                                        nvfp4_stream_t stream) {
  return guarded([&]() -> nvfp4_status_t {
    const SettingsScope settings(check_quant_settings());
    check_descriptor(x, "x");
    if (!cfg) invalid("cfg: null");
    if (!is_float_io(x->dtype))
      invalid(std::string("x: dtype must be float32, float16 or bfloat16, got ") + dtype_name(x->dtype));
    if (x->ndim != 2) invalid("x: must have 2 dimensions [rows, cols], got " + shape_str(*x));
    Fp8Job job;
    job.x = x->data;
    job.dtype = x->dtype;
    job.rows = x->shape[0];
    job.cols = x->shape[1];
    if (job.cols % 16 != 0) invalid("x: cols must be a multiple of 16, got " + std::to_string(job.cols));
    const auto format = checked_enum(cfg->format, NVFP4_FP8_E5M2 + 1, "cfg.format", "E4M3 or E5M2");
    job.e5m2 = format == NVFP4_FP8_E5M2;
    job.fmax = job.e5m2 ? 57344.0f : 448.0f;
    if (!std::isfinite(cfg->margin)) invalid("cfg.margin: must be finite, got " + std::to_string(cfg->margin));
    job.scaled_max = static_cast<float>(static_cast<double>(job.fmax) * std::exp2(-static_cast<double>(cfg->margin)));
    if (!q && !qt) invalid("q/qt: at least one output must be requested");
    std::vector<ByteRange> outs;
    if (q) {
      check_bytes(*x, q, "q", job.rows, job.cols);
      job.q = static_cast<uint8_t*>(q->data);
      outs.push_back(byte_range(*q, "q"));
    }
    if (qt) {
      check_bytes(*x, qt, "qt", job.cols, job.rows);
      job.qt = static_cast<uint8_t*>(qt->data);
      outs.push_back(byte_range(*qt, "qt"));
    }
    if (scale_inv) {
      check_scalar(*x, scale_inv, "scale_inv");
      job.scale_inv = static_cast<float*>(scale_inv->data);
      outs.push_back(byte_range(*scale_inv, "scale_inv"));
    }
    if (amax) {
      check_scalar(*x, amax, "amax");
      job.amax = static_cast<float*>(amax->data);
      outs.push_back(byte_range(*amax, "amax"));
    }
    std::vector<ByteRange> ins{byte_range(*x, "x")};
    if (cfg->scale) {
      check_scalar(*x, cfg->scale, "cfg.scale");
      job.scale = static_cast<const float*>(cfg->scale->data);
      ins.push_back(byte_range(*cfg->scale, "cfg.scale"));
    } else if (!amax) {
      invalid("amax: required with current scaling (cfg.scale null): the cast reads the amax it writes there");
    }
    if (cfg->amax_accumulate != 0 && cfg->amax_accumulate != 1)
      invalid("cfg.amax_accumulate: must be 0 or 1, got " + std::to_string(cfg->amax_accumulate));
    if (cfg->amax_accumulate) {
      if (!cfg->scale)
        invalid("cfg.amax_accumulate: only with delayed scaling (cfg.scale set); current scaling derives s from "
                "the amax of x alone");
      if (!amax) invalid("amax: required with cfg.amax_accumulate");
      job.amax_accumulate = true;
    }
    for (size_t i = 0; i < outs.size(); ++i) {
      for (const ByteRange& in : ins) check_disjoint(outs[i], in);
      for (size_t j = 0; j < i; ++j) check_disjoint(outs[i], outs[j]);
    }
    require_cuda_build(*x, "x");
    if (on_cuda(*x)) {
      if (reinterpret_cast<uintptr_t>(x->data) % 16 != 0) invalid("x: CUDA tensors must be 16-byte aligned");
    }
    if (job.rows == 0 || job.cols == 0) {
      // nothing to cast; the scalars still follow the contract (amax of nothing is 0)
      if (!on_cuda(*x)) return cpu_fp8_cast(job);
#if defined(NVFP4_WITH_CUDA)
      DeviceGuard g(*x);
      return cuda_fp8_cast(job, stream);
#endif
    }
    if (on_cuda(*x)) {
#if defined(NVFP4_WITH_CUDA)
      DeviceGuard g(*x);
      return cuda_fp8_cast(job, stream);
#endif
    }
    (void)stream;
    return cpu_fp8_cast(job);
  });
}

NVFP4_API nvfp4_status_t nvfp4_fp8_delayed_update(nvfp4_tensor_t* history, nvfp4_tensor_t* scale,
                                                  nvfp4_fp8_format_t format, float margin,
                                                  nvfp4_fp8_amax_algo_t algo, nvfp4_stream_t stream) {
  return guarded([&]() -> nvfp4_status_t {
    check_descriptor(history, "history", alignof(float));
    if (history->dtype != NVFP4_DTYPE_FLOAT32)
      invalid(std::string("history: dtype must be float32, got ") + dtype_name(history->dtype));
    if (history->ndim != 1 || history->shape[0] < 1)
      invalid("history: must have 1 dimension of at least 1 element, got " + shape_str(*history));
    check_scalar(*history, scale, "scale");
    const auto fmt = checked_enum(format, NVFP4_FP8_E5M2 + 1, "format", "E4M3 or E5M2");
    const auto a = checked_enum(algo, NVFP4_FP8_AMAX_MOST_RECENT + 1, "algo", "AMAX_MAX or AMAX_MOST_RECENT");
    if (!std::isfinite(margin)) invalid("margin: must be finite, got " + std::to_string(margin));
    check_disjoint(byte_range(*scale, "scale"), byte_range(*history, "history"));
    require_cuda_build(*history, "history");
    Fp8DelayedJob job;
    job.history = static_cast<float*>(history->data);
    job.len = history->shape[0];
    job.scale = static_cast<float*>(scale->data);
    const double fmax = fmt == NVFP4_FP8_E5M2 ? 57344.0 : 448.0;
    job.scaled_max = static_cast<float>(fmax * std::exp2(-static_cast<double>(margin)));
    job.most_recent = a == NVFP4_FP8_AMAX_MOST_RECENT;
    if (on_cuda(*history)) {
#if defined(NVFP4_WITH_CUDA)
      DeviceGuard g(*history);
      return cuda_fp8_delayed_update(job, stream);
#endif
    }
    (void)stream;
    return cpu_fp8_delayed_update(job);
  });
}

}  // extern "C"
