// CPU reference: decode, swizzle and the reference GEMM (float64 accumulation).
#include <algorithm>
#include <vector>

#include "core/e2m1.h"
#include "core/e4m3.h"
#include "core/scale.h"
#include "core/swizzle.h"
#include "cpu/io.h"
#include "internal.h"
#include "mx_internal.h"

namespace nvfp4::detail {
namespace {

using cpu::load;
using cpu::store;

// Â = e2m1 value * block scale, without the per-tensor scale (exact in fp32 and bf16).
std::vector<float> decode_unscaled(const uint8_t* data, const uint8_t* scales, int64_t rows, int64_t cols,
                                   nvfp4_scale_layout_t layout) {
  const int64_t sc = cols / 16;
  std::vector<float> v(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const uint8_t byte = data[r * (cols / 2) + c / 2];
      const int64_t so = layout == NVFP4_SCALES_SWIZZLED ? core::swizzle_offset(r, c / 16, sc) : r * sc + c / 16;
      v[r * cols + c] = core::e2m1_decode((c & 1) ? byte >> 4 : byte & 0xf) * core::e4m3_decode(scales[so]);
    }
  return v;
}

}  // namespace

nvfp4_status_t cpu_dequantize(const DequantJob& job) {
  const float s_dec = core::global_decode_scale(*job.amax);
  const std::vector<float> v = decode_unscaled(job.data, job.scales, job.rows, job.cols, job.layout);
  for (int64_t i = 0; i < job.rows * job.cols; ++i) store(job.out, job.out_dtype, i, v[i] * s_dec);
  return NVFP4_SUCCESS;
}

nvfp4_status_t cpu_swizzle(const SwizzleJob& job) {
  const int64_t R = job.rows, C = job.cols;
  if (job.to_swizzled) {
    std::fill_n(job.dst, core::swizzled_size(R, C), uint8_t{0});
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < C; ++c) job.dst[core::swizzle_offset(r, c, C)] = job.src[r * C + c];
  } else {
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < C; ++c) job.dst[r * C + c] = job.src[core::swizzle_offset(r, c, C)];
  }
  return NVFP4_SUCCESS;
}

nvfp4_status_t cpu_gemm(const GemmJob& job) {
  const int64_t M = job.m, N = job.n, K = job.k;
  const bool mx = job.format == Format::kMxfp4;
  // Decoded without the per-tensor scale: value * block scale, exact in fp32 (MXFP4:
  // magnitudes >= 2^128 become inf, as on the GPU, whose BF16 has fp32's range).
  auto decode = [&](const uint8_t* data, const uint8_t* scales, int64_t rows) {
    if (!mx) return decode_unscaled(data, scales, rows, K, job.layout);
    std::vector<float> v(static_cast<size_t>(rows * K));
    MxDequantJob d;
    d.data = data;
    d.scales = scales;
    d.rows = rows;
    d.cols = K;
    d.swizzled = job.layout == NVFP4_SCALES_SWIZZLED;
    d.out = v.data();
    d.out_dtype = NVFP4_DTYPE_FLOAT32;
    cpu_mx_dequantize(d);
    return v;
  };
  const std::vector<float> a = decode(job.a, job.sfa, M);
  const std::vector<float> b = decode(job.b, job.sfb, N);
  // The same fp32 alpha every backend applies (MXFP4 has no per-tensor scale).
  const float alpha = core::gemm_alpha(job.amax_a, job.amax_b);
  for (int64_t i = 0; i < M; ++i) {
    const float* ar = &a[i * K];
    for (int64_t j = 0; j < N; ++j) {
      const float* br = &b[j * K];
      double acc = 0.0;  // products of two Â values are exact in double
      for (int64_t k = 0; k < K; ++k) acc += static_cast<double>(ar[k]) * br[k];
      double d = static_cast<double>(alpha) * acc;
      if (job.c && job.beta != 0.0f) d += static_cast<double>(job.beta) * load(job.c, job.c_dtype, i * N + j);
      if (job.bias) d += load(job.bias, job.bias_dtype, j);
      store(job.d, job.d_dtype, i * N + j, static_cast<float>(d));
    }
  }
  return NVFP4_SUCCESS;
}

}  // namespace nvfp4::detail
