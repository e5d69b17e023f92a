// CPU reference of the gather rows (nvfp4.h's gather section). The quantization is the
// reference quantizer itself (2D, nearest, the given amax, linear scales), its codes and
// scales then laid out as rows; the assembly copies and transposes byte by byte.
#include <algorithm>
#include <vector>

#include "core/swizzle.h"
#include "gather.h"

namespace nvfp4::detail {

nvfp4_status_t cpu_gather_quantize(const GatherQuantJob& j) {
  const int64_t R = j.rows, C = j.cols, cb = C / 2, sb = C / 16;
  std::fill_n(j.out, j.rows_out * j.row_bytes, uint8_t{0});
  if (R == 0 || C == 0) return NVFP4_SUCCESS;
  std::vector<uint8_t> data(static_cast<size_t>(R * cb)), scales(static_cast<size_t>(R * sb));
  float amax_out = 0.0f;
  QuantJob q;
  q.x = j.x;
  q.dtype = j.dtype;
  q.rows = R;
  q.cols = C;
  nvfp4_quant_config_default(&q.cfg);
  q.cfg.block = NVFP4_BLOCK_2D;
  q.cfg.scale_layout = NVFP4_SCALES_LINEAR;
  q.cfg.amax_mode = NVFP4_AMAX_GIVEN;
  q.cfg.amax_in = j.amax;
  q.row = {data.data(), scales.data(), &amax_out};
  if (nvfp4_status_t s = cpu_quantize(q); s != NVFP4_SUCCESS) return s;
  for (int64_t r = 0; r < R; ++r) {
    uint8_t* row = j.out + r * j.row_bytes;
    std::copy_n(&data[r * cb], cb, row);
    std::copy_n(&scales[r * sb], sb, row + cb);
  }
  return NVFP4_SUCCESS;
}

nvfp4_status_t cpu_gather_assemble(const GatherAssembleJob& j) {
  const int64_t N = j.n, K = j.k, cb = K / 2, nb = K / 16, tb = N / 16;
  auto code = [&](int64_t r, int64_t c) -> uint8_t { return (j.in[r * j.row_bytes + c / 2] >> (4 * (c & 1))) & 0xF; };
  auto scale = [&](int64_t r, int64_t b) { return j.in[r * j.row_bytes + cb + b]; };
  if (j.row.data) {
    for (int64_t r = 0; r < N; ++r) std::copy_n(j.in + r * j.row_bytes, cb, j.row.data + r * cb);
    std::fill_n(j.row.scales, core::swizzled_size(N, nb), uint8_t{0});
    for (int64_t r = 0; r < N; ++r)
      for (int64_t b = 0; b < nb; ++b) j.row.scales[core::swizzle_offset(r, b, nb)] = scale(r, b);
    *j.row.amax = *j.amax;
  }
  if (j.col.data) {
    for (int64_t c = 0; c < K; ++c)
      for (int64_t p = 0; p < N / 2; ++p)
        j.col.data[c * (N / 2) + p] = static_cast<uint8_t>(code(2 * p, c) | (code(2 * p + 1, c) << 4));
    std::fill_n(j.col.scales, core::swizzled_size(K, tb), uint8_t{0});
    for (int64_t c = 0; c < K; ++c)
      for (int64_t b = 0; b < tb; ++b) j.col.scales[core::swizzle_offset(c, b, tb)] = scale(16 * b, c / 16);
    *j.col.amax = *j.amax;
  }
  return NVFP4_SUCCESS;
}

}  // namespace nvfp4::detail
