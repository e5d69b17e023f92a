// CPU reference for MXFP4: the oracle the kernels are tested against, bit for bit.
// Materialize each orientation in fp32, then quantize it block by block with the shared
// core functions (core/mx.h).
#include <algorithm>
#include <vector>

#include "core/mx.h"
#include "core/swizzle.h"
#include "cpu/io.h"
#include "mx_internal.h"

namespace nvfp4::detail {
namespace {

using cpu::load;
using cpu::store;

// v is one orientation [rows, cols], cols % 32 == 0.
void quantize_orientation(const std::vector<float>& v, int64_t rows, int64_t cols, const MxQuantJob& job,
                          const MxOut& out, uint64_t offset) {
  const int64_t nb = cols / core::kMxBlock;
  if (job.swizzled) std::fill_n(out.scales, core::swizzled_size(rows, nb), uint8_t{0});
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < nb; ++j) {
      float blk[core::kMxBlock];
      std::copy_n(&v[r * cols + j * core::kMxBlock], core::kMxBlock, blk);
      const uint32_t sb = core::mx_scale_byte(core::mx_block_amax(blk), out.rule);
      const core::Packed32 p =
          out.rounding == NVFP4_ROUND_STOCHASTIC
              ? core::mx_encode_sr(blk, sb, job.seed, offset, sr_index(r, j * core::kMxBlock, cols))
              : core::mx_encode_rn(blk, sb);
      uint8_t* d = out.data + r * (cols / 2) + j * 16;
      for (int b = 0; b < 16; ++b) d[b] = static_cast<uint8_t>(p.w[b / 4] >> (8 * (b % 4)));
      out.scales[job.swizzled ? core::swizzle_offset(r, j, nb) : r * nb + j] = static_cast<uint8_t>(sb);
    }
  }
}

}  // namespace

nvfp4_status_t cpu_mx_quantize(const MxQuantJob& job) {
  // The counter behind offset_device is read when the work runs, as the kernels do.
  const uint64_t offset = job.offset + (job.offset_device ? *job.offset_device : 0u);
  const int64_t R = job.rows, C = job.cols;
  if (job.row.data) {
    std::vector<float> v(static_cast<size_t>(R * C));
    for (int64_t i = 0; i < R * C; ++i) v[i] = load(job.x, job.dtype, i);
    quantize_orientation(v, R, C, job, job.row, offset);
  }
  if (job.col.data) {
    const int64_t Rp = mx_padded_rows(R);
    std::vector<float> v(static_cast<size_t>(C * Rp), 0.0f);  // x^T, zero padded
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < C; ++c) v[c * Rp + r] = load(job.x, job.dtype, r * C + c);
    quantize_orientation(v, C, Rp, job, job.col, offset);
  }
  return NVFP4_SUCCESS;
}

nvfp4_status_t cpu_mx_dequantize(const MxDequantJob& job) {
  const int64_t nb = job.cols / core::kMxBlock;
  for (int64_t r = 0; r < job.rows; ++r)
    for (int64_t c = 0; c < job.cols; ++c) {
      const uint8_t byte = job.data[r * (job.cols / 2) + c / 2];
      const int64_t j = c / core::kMxBlock;
      const uint8_t sb = job.scales[job.swizzled ? core::swizzle_offset(r, j, nb) : r * nb + j];
      store(job.out, job.out_dtype, r * job.cols + c, core::mx_decode((c & 1) ? byte >> 4 : byte & 0xf, sb));
    }
  return NVFP4_SUCCESS;
}

}  // namespace nvfp4::detail
