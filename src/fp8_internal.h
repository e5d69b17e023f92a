// Internal interface of the FP8 cast (api_fp8.cpp) with its CPU reference (cpu/fp8.cpp)
// and CUDA kernels (quant/fp8.cu). Plain pointers only: api_fp8.cpp has validated every
// descriptor before a job reaches a backend.
#pragma once

#include <cstdint>

#include "core/common.h"
#include "internal.h"
#include "nvfp4/nvfp4.h"

namespace nvfp4::detail {

// x [rows, cols] row-major. Current scaling (scale == nullptr): amax is written first, then
// s = fl(scaled_max / amax) (FLT_MAX where that is inf; 1 where amax is 0, inf or NaN).
// Delayed scaling: s = *scale, read when the cast runs; max |x| goes to amax when not null:
// written, or with amax_accumulate combined with what *amax holds (a max of the fp32 bit
// patterns, which for values with the sign bit clear is the float max with NaN winning).
struct Fp8Job {
  const void* x = nullptr;
  nvfp4_dtype_t dtype = NVFP4_DTYPE_FLOAT32;
  int64_t rows = 0, cols = 0;
  bool e5m2 = false;
  float fmax = 448.0f;        // largest finite value of the format
  float scaled_max = 448.0f;  // fmax * 2^-margin, rounded once to fp32
  const float* scale = nullptr;
  uint8_t* q = nullptr;       // [rows, cols] or null
  uint8_t* qt = nullptr;      // [cols, rows] or null
  float* scale_inv = nullptr; // [1] or null
  float* amax = nullptr;      // [1]; required with current scaling
  bool amax_accumulate = false;  // delayed scaling only
};


// Delayed scaling's update (nvfp4_fp8_delayed_update): history [len] in place, scale [1].
struct Fp8DelayedJob {
  float* history = nullptr;
  int64_t len = 0;
  float* scale = nullptr;
  float scaled_max = 448.0f;  // fmax * 2^-margin, rounded once to fp32
  bool most_recent = false;   // amax = history[0] rather than max(history)
};


// The one FP8 scale rule (host and device share it): scaled_max / amax (FLT_MAX where that
// is inf) when amax is finite and > 0, else `fallback`. Current scaling falls back to 1,
// delayed scaling to the scale it had.
NVFP4_HD float fp8_scale(float scaled_max, float amax, float fallback) {
  float s = scaled_max / amax;
  if (s > 3.40282346638528859812e+38f) s = 3.40282346638528859812e+38f;  // +inf -> FLT_MAX
  const bool ok = amax > 0.0f && amax <= 3.40282346638528859812e+38f;  // false for 0, inf, NaN
  return ok ? s : fallback;
}

nvfp4_status_t cpu_fp8_cast(const Fp8Job& job);
nvfp4_status_t cpu_fp8_delayed_update(const Fp8DelayedJob& job);
#if defined(NVFP4_WITH_CUDA)
nvfp4_status_t cuda_fp8_cast(const Fp8Job& job, nvfp4_stream_t stream);
nvfp4_status_t cuda_fp8_delayed_update(const Fp8DelayedJob& job, nvfp4_stream_t stream);
#endif

}  // namespace nvfp4::detail
