// CPU reference quantizer: the oracle the kernels are tested against, bit for bit.
// It favours obviousness over speed: materialize each orientation in fp32, take its
// amax, then quantize block by block with the shared core functions.
#include <algorithm>
#include <vector>

#include "core/block.h"
#include "core/rht.h"
#include "core/swizzle.h"
#include "cpu/io.h"
#include "internal.h"

namespace nvfp4::detail {
namespace {

using cpu::load;

// One orientation to quantize: v is [rows, cols] (cols a multiple of 16), already
// transposed/padded/Hadamard-transformed as the direction asks.
void quantize_orientation(const std::vector<float>& v, int64_t rows, int64_t cols,
                          const nvfp4_quant_config_t& cfg, const QuantOut& out) {
  const int64_t sc = cols / core::kBlock;  // scale columns
  float amax = 0.0f;
  for (float f : v) amax = core::nan_max(amax, core::abs_f(f));
  *out.amax = amax;
  const core::GlobalScale gs = core::make_global_scale(amax);

  const bool swz = cfg.scale_layout == NVFP4_SCALES_SWIZZLED;
  if (swz) std::fill_n(out.scales, core::swizzled_size(rows, sc), uint8_t{0});

  // 2D: one scale per 16x16 tile, from the tile's amax; computed once per tile row band.
  std::vector<uint8_t> tile_scale;
  if (cfg.block == NVFP4_BLOCK_2D) {
    const int64_t tr = (rows + 15) / 16;
    tile_scale.resize(static_cast<size_t>(tr * sc));
    for (int64_t ti = 0; ti < tr; ++ti)
      for (int64_t tj = 0; tj < sc; ++tj) {
        float m = 0.0f;
        for (int64_t r = ti * 16; r < std::min(rows, ti * 16 + 16); ++r)
          for (int64_t c = tj * 16; c < tj * 16 + 16; ++c) m = core::nan_max(m, core::abs_f(v[r * cols + c]));
        tile_scale[ti * sc + tj] = core::block_scale_e4m3(m, gs.enc);
      }
  }

  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < sc; ++j) {
      float blk[16];
      for (int i = 0; i < 16; ++i) blk[i] = v[r * cols + j * 16 + i];
      const uint8_t sb = cfg.block == NVFP4_BLOCK_2D ? tile_scale[(r / 16) * sc + j]
                                                     : core::block_scale_e4m3(core::block_amax16(blk), gs.enc);
      const float e = core::block_encode_factor(sb, gs.dec);
      core::Packed16 p;
      if (cfg.rounding == NVFP4_ROUND_STOCHASTIC) {
        uint32_t rnd[16];
        core::philox_block16(cfg.seed, cfg.offset, sr_index(r, j * 16, cols), rnd);
        p = core::encode_block_sr(blk, e, rnd);
      } else {
        p = core::encode_block_rn(blk, e);
      }
      uint8_t* d = out.data + r * (cols / 2) + j * 8;
      for (int b = 0; b < 4; ++b) {
        d[b] = static_cast<uint8_t>(p.lo >> (8 * b));
        d[4 + b] = static_cast<uint8_t>(p.hi >> (8 * b));
      }
      out.scales[swz ? core::swizzle_offset(r, j, sc) : r * sc + j] = sb;
    }
  }
}

void apply_rht_rows(std::vector<float>& v, int64_t rows, int64_t cols, uint32_t signs) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; j += 16) {
      float blk[16];
      std::copy_n(&v[r * cols + j], 16, blk);
      core::rht16(blk, signs);
      std::copy_n(blk, 16, &v[r * cols + j]);
    }
}

}  // namespace

nvfp4_status_t cpu_quantize(const QuantJob& job_in) {
  // The counter behind offset_device is read now, when the work runs (kernels read it
  // on the device the same way).
  QuantJob job = job_in;
  if (job.cfg.offset_device) job.cfg.offset += *job.cfg.offset_device;
  job.cfg.offset_device = nullptr;
  const int64_t R = job.rows, C = job.cols;
  if (job.row.data) {
    std::vector<float> v(static_cast<size_t>(R * C));
    for (int64_t i = 0; i < R * C; ++i) v[i] = load(job.x, job.dtype, i);
    if (job.cfg.rht & NVFP4_RHT_ROWWISE) apply_rht_rows(v, R, C, job.cfg.rht_sign_mask);
    quantize_orientation(v, R, C, job.cfg, job.row);
  }
  if (job.col.data) {
    const int64_t Rp = core::round_up(R, 16);
    std::vector<float> v(static_cast<size_t>(C * Rp), 0.0f);  // x^T, zero padded
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < C; ++c) v[c * Rp + r] = load(job.x, job.dtype, r * C + c);
    if (job.cfg.rht & NVFP4_RHT_COLUMNWISE) apply_rht_rows(v, C, Rp, job.cfg.rht_sign_mask);
    quantize_orientation(v, C, Rp, job.cfg, job.col);
  }
  return NVFP4_SUCCESS;
}

}  // namespace nvfp4::detail
