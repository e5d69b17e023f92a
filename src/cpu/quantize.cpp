// CPU reference quantizer: the oracle the kernels are tested against, bit for bit.
// It favours obviousness over speed: materialize each orientation in fp32, take its
// amax, then quantize block by block with the shared core functions.
#include <algorithm>
#include <vector>

#include "core/block.h"
#include "core/options.h"
#include "core/rht.h"
#include "core/swizzle.h"
#include "cpu/io.h"
#include "internal.h"

namespace nvfp4::detail {
namespace {

using cpu::load;

// Whether the recipe options of 0.3 leave this quantization on the contract's path.
bool plain(const nvfp4_quant_config_t& cfg) {
  return cfg.scale_select == NVFP4_SELECT_NONE && cfg.amax_mode == NVFP4_AMAX_TENSOR && cfg.rounding != NVFP4_ROUND_EDEN;
}

// 2D with 4over6: which tiles take the map-to-4 candidate, decided once on x's own
// orientation (x [rows, cols], tiles of 16 rows x 16 columns; rows past the end are the zero
// padding, whose error is 0) so that the rowwise and columnwise outputs stay transposes.
std::vector<uint8_t> fos_tile_picks(const std::vector<float>& x, int64_t rows, int64_t cols, float amax,
                                    const nvfp4_quant_config_t& cfg) {
  const float A = core::bound_amax(amax, cfg.e4m3_bound);
  const core::GlobalScale gs = core::make_global_scale(A);
  const float denom = core::kE2M1Max * static_cast<float>(cfg.e4m3_bound);
  const bool mse = cfg.scale_select == NVFP4_SELECT_4OVER6_MSE;
  const int64_t tr = (rows + 15) / 16, tc = cols / 16;
  std::vector<uint8_t> pick(static_cast<size_t>(tr * tc));
  for (int64_t ti = 0; ti < tr; ++ti)
    for (int64_t tj = 0; tj < tc; ++tj) {
      float blk[16][16] = {};
      float m = 0.0f;
      for (int64_t r = ti * 16; r < std::min(rows, ti * 16 + 16); ++r)
        for (int c = 0; c < 16; ++c) {
          blk[r - ti * 16][c] = x[r * cols + tj * 16 + c];
          m = core::nan_max(m, core::abs_f(blk[r - ti * 16][c]));
        }
      const core::FourOverSixScales sc = core::fos_scales(m, gs.enc);
      float e4[16], e6[16];
      core::Packed16 p;
      for (int i = 0; i < 16; ++i) {
        e4[i] = core::fos_candidate(blk[i], sc.map4, gs.dec, amax, denom, mse, p);
        e6[i] = core::fos_candidate(blk[i], sc.map6, gs.dec, amax, denom, mse, p);
      }
      pick[ti * tc + tj] = core::fos_tile_error(e4) < core::fos_tile_error(e6);
    }
  return pick;
}

void store_block(const QuantOut& out, int64_t r, int64_t j, int64_t cols, bool swz, const core::Packed16& p,
                 uint8_t sb) {
  const int64_t sc = cols / core::kBlock;
  uint8_t* d = out.data + r * (cols / 2) + j * 8;
  for (int b = 0; b < 4; ++b) {
    d[b] = static_cast<uint8_t>(p.lo >> (8 * b));
    d[4 + b] = static_cast<uint8_t>(p.hi >> (8 * b));
  }
  out.scales[swz ? core::swizzle_offset(r, j, sc) : r * sc + j] = sb;
}

// One orientation with the recipe options: v [rows, cols] as quantize_orientation's.
// row_amax: one amax per row (NVFP4_AMAX_ROWS, the rowwise output). tile_pick: 2D 4over6
// choices from fos_tile_picks, indexed [row tile][column tile] of x; `transposed` says v is
// x^T (so tile (i, j) of v is tile (j, i) of x).
void quantize_orientation_options(const std::vector<float>& v, int64_t rows, int64_t cols,
                                  const nvfp4_quant_config_t& cfg, const QuantOut& out, bool row_amax,
                                  const std::vector<uint8_t>& tile_pick, bool transposed) {
  const int64_t sc = cols / core::kBlock;
  const bool swz = cfg.scale_layout == NVFP4_SCALES_SWIZZLED;
  if (swz) std::fill_n(out.scales, core::swizzled_size(rows, sc), uint8_t{0});

  if (cfg.rounding == NVFP4_ROUND_EDEN) {
    std::vector<core::EdenBlock> eb(static_cast<size_t>(rows * sc));
    float max_f = 0.0f;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < sc; ++j) {
        float blk[16];
        std::copy_n(&v[r * cols + j * 16], 16, blk);
        eb[r * sc + j] = core::eden_block(blk);
        max_f = core::nan_max(max_f, eb[r * sc + j].f);
      }
    const float A = core::eden_amax(max_f);
    *out.amax = A;
    const core::GlobalScale gs = core::make_global_scale(A);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < sc; ++j) {
        const core::Philox4 rnd = core::philox_words16(cfg.seed, cfg.offset, sr_index(r, j * 16, cols));
        const core::EdenBlock& b = eb[r * sc + j];
        store_block(out, r, j, cols, swz, b.p, core::e4m3_encode_sr(b.f * gs.enc, rnd.v[0]));
      }
    return;
  }

  // The amax each row's scales derive from, before the bound (a) and as stored (A).
  std::vector<float> a(static_cast<size_t>(row_amax ? rows : 1));
  if (row_amax) {
    for (int64_t r = 0; r < rows; ++r) {
      float m = 0.0f;
      for (int64_t c = 0; c < cols; ++c) m = core::nan_max(m, core::abs_f(v[r * cols + c]));
      a[r] = m;
    }
  } else if (cfg.amax_mode == NVFP4_AMAX_GIVEN) {
    a[0] = *cfg.amax_in;
  } else {
    float m = 0.0f;
    for (float f : v) m = core::nan_max(m, core::abs_f(f));
    a[0] = m;
  }
  for (size_t i = 0; i < a.size(); ++i) out.amax[i] = core::bound_amax(a[i], cfg.e4m3_bound);

  const bool fos = cfg.scale_select != NVFP4_SELECT_NONE;
  const bool mse = cfg.scale_select == NVFP4_SELECT_4OVER6_MSE;
  const float denom = core::kE2M1Max * static_cast<float>(cfg.e4m3_bound);
  const int64_t xtc = transposed ? rows / 16 : sc;  // column tiles of x, for tile_pick
  for (int64_t r = 0; r < rows; ++r) {
    const float ar = a[row_amax ? r : 0];
    const core::GlobalScale gs = core::make_global_scale(core::bound_amax(ar, cfg.e4m3_bound));
    for (int64_t j = 0; j < sc; ++j) {
      float blk[16];
      std::copy_n(&v[r * cols + j * 16], 16, blk);
      float bamax = core::block_amax16(blk);
      if (cfg.block == NVFP4_BLOCK_2D) {  // the tile's amax
        bamax = 0.0f;
        for (int64_t rr = r / 16 * 16; rr < std::min(rows, r / 16 * 16 + 16); ++rr)
          for (int c = 0; c < 16; ++c) bamax = core::nan_max(bamax, core::abs_f(v[rr * cols + j * 16 + c]));
      }
      core::Packed16 p;
      uint8_t sb;
      if (fos) {
        const core::FourOverSixScales s = core::fos_scales(bamax, gs.enc);
        bool pick4;
        core::Packed16 p4, p6;
        const float e4 = core::fos_candidate(blk, s.map4, gs.dec, ar, denom, mse, p4);
        const float e6 = core::fos_candidate(blk, s.map6, gs.dec, ar, denom, mse, p6);
        if (cfg.block == NVFP4_BLOCK_2D)
          pick4 = transposed ? tile_pick[j * xtc + r / 16] != 0 : tile_pick[(r / 16) * sc + j] != 0;
        else
          pick4 = e4 < e6;
        p = pick4 ? p4 : p6;
        sb = pick4 ? s.map4 : s.map6;
      } else {
        sb = core::block_scale_e4m3(bamax, gs.enc);
        const float e = core::block_encode_factor(sb, gs.dec);
        if (cfg.rounding == NVFP4_ROUND_STOCHASTIC) {
          uint32_t rnd[16];
          core::philox_block16(cfg.seed, cfg.offset, sr_index(r, j * 16, cols), rnd);
          p = core::encode_block_sr(blk, e, rnd);
        } else {
          p = core::encode_block_rn(blk, e);
        }
      }
      store_block(out, r, j, cols, swz, p, sb);
    }
  }
}

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
  const bool opts = !plain(job.cfg);
  // 2D 4over6: the tile choices of x's own orientation serve both outputs.
  std::vector<uint8_t> tile_pick;
  if (opts && job.cfg.block == NVFP4_BLOCK_2D && job.cfg.scale_select != NVFP4_SELECT_NONE) {
    std::vector<float> x(static_cast<size_t>(R * C));
    float m = 0.0f;
    for (int64_t i = 0; i < R * C; ++i) {
      x[i] = load(job.x, job.dtype, i);
      m = core::nan_max(m, core::abs_f(x[i]));
    }
    tile_pick = fos_tile_picks(x, R, C, job.cfg.amax_mode == NVFP4_AMAX_GIVEN ? *job.cfg.amax_in : m, job.cfg);
  }
  if (job.row.data) {
    std::vector<float> v(static_cast<size_t>(R * C));
    for (int64_t i = 0; i < R * C; ++i) v[i] = load(job.x, job.dtype, i);
    if (job.cfg.rht & NVFP4_RHT_ROWWISE) apply_rht_rows(v, R, C, job.cfg.rht_sign_mask);
    if (opts)
      quantize_orientation_options(v, R, C, job.cfg, job.row, job.cfg.amax_mode == NVFP4_AMAX_ROWS, tile_pick, false);
    else
      quantize_orientation(v, R, C, job.cfg, job.row);
  }
  if (job.col.data) {
    const int64_t Rp = core::round_up(R, 16);
    std::vector<float> v(static_cast<size_t>(C * Rp), 0.0f);  // x^T, zero padded
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < C; ++c) v[c * Rp + r] = load(job.x, job.dtype, r * C + c);
    if (job.cfg.rht & NVFP4_RHT_COLUMNWISE) apply_rht_rows(v, C, Rp, job.cfg.rht_sign_mask);
    if (opts)
      quantize_orientation_options(v, C, Rp, job.cfg, job.col, job.cfg.amax_mode == NVFP4_AMAX_ROWS, tile_pick, true);
    else
      quantize_orientation(v, C, Rp, job.cfg, job.col);
  }
  return NVFP4_SUCCESS;
}

}  // namespace nvfp4::detail
