// CPU reference: decode and swizzle (the reference GEMM is in gemm.cpp).
#include <algorithm>
#include <vector>

#include "core/e2m1.h"
#include "core/e4m3.h"
#include "core/scale.h"
#include "core/swizzle.h"
#include "cpu/io.h"
#include "internal.h"

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

void cpu_decode_bf16(const uint8_t* data, const uint8_t* scales, int64_t rows, int64_t cols,
                     nvfp4_scale_layout_t layout, void* out) {
  const std::vector<float> v = decode_unscaled(data, scales, rows, cols, layout);
  for (int64_t i = 0; i < rows * cols; ++i) store(out, NVFP4_DTYPE_BFLOAT16, i, v[i]);
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

}  // namespace nvfp4::detail
