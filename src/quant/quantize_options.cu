// The recipe options of 0.3 on the GPU (4over6 scale selection, the E4M3 bound, one amax per
// row, a given amax, MS-EDEN): src/core/options.h defines them, src/cpu/quantize.cpp is the
// reference. These kernels are written for exactness first: one thread per 16-element block
// (a 16x16 tile for 2D), each calling the same core functions as the CPU reference on the
// same FP32 values, so the bytes agree by construction. They are not the fast path: the
// contract's quantizations (quantize_rowwise.cu, quantize_tile.cu) never come here.
//
// Stream order, no host synchronization:
//  1. the amax outputs zeroed, then filled with the amax the scales derive from, before the
//     bound: max |x| (amax.cu), one per row of each output (rows_amax_kernel, cols_amax_kernel),
//     amax_in (copied), or for MS-EDEN the largest corrected block scale (eden_max_kernel,
//     atomicMax on the bits);
//  2. swizzled scale buffers zeroed (their padding), then the quantize kernel per output
//     (1D) or one tile kernel for both outputs (2D: the 4over6 choice is made once per tile,
//     on x's own rows, so the outputs stay transposes of each other);
//  3. finalize_amax: the stored amax (fl(1.75 a) for the bound 256, 10.5 max f for MS-EDEN).
#include "core/options.h"
#include "quant/common.cuh"
#include "quant/launch.cuh"

namespace nvfp4::detail::quant {
namespace {

__device__ __forceinline__ float load_elem(const void* x, nvfp4_dtype_t dt, int64_t i) {
  switch (dt) {
    case NVFP4_DTYPE_FLOAT16: return core::fp16_to_float(static_cast<const uint16_t*>(x)[i]);
    case NVFP4_DTYPE_BFLOAT16: return core::bf16_to_float(static_cast<const uint16_t*>(x)[i]);
    default: return static_cast<const float*>(x)[i];
  }
}

struct OptArgs {
  const void* x;
  nvfp4_dtype_t dtype;
  int64_t rows, cols;       // x [rows, cols]
  nvfp4_quant_config_t cfg;
};

// One output orientation: v [vrows, vcols] is x (rowwise) or x^T zero-padded to
// vcols = roundup(rows, 16) (columnwise).
struct OutArgs {
  uint8_t* data;
  uint8_t* scales;
  float* amax;      // [1] or [vrows] (row_amax)
  int64_t vrows, vcols;
  bool columnwise, rht, row_amax;
};

// Block j of row r of the orientation, after the RHT where it applies.
__device__ __forceinline__ void load_vblock(const OptArgs& a, const OutArgs& o, int64_t r, int64_t j, float (&v)[16]) {
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const int64_t c = j * 16 + i;
    if (!o.columnwise) {
      v[i] = load_elem(a.x, a.dtype, r * a.cols + c);
    } else {
      v[i] = c < a.rows ? load_elem(a.x, a.dtype, c * a.cols + r) : 0.0f;  // x^T, zero padding
    }
  }
  if (o.rht) core::rht16(v, a.cfg.rht_sign_mask);
}

__device__ __forceinline__ void store_vblock(const OptArgs& a, const OutArgs& o, int64_t r, int64_t j,
                                             const core::Packed16& p, uint8_t sb) {
  const int64_t sc = o.vcols / 16;
  uint8_t* d = o.data + r * (o.vcols / 2) + j * 8;
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    d[b] = static_cast<uint8_t>(p.lo >> (8 * b));
    d[4 + b] = static_cast<uint8_t>(p.hi >> (8 * b));
  }
  o.scales[a.cfg.scale_layout == NVFP4_SCALES_SWIZZLED ? core::swizzle_offset(r, j, sc) : r * sc + j] = sb;
}

// detail::sr_index on the device: the orientation's width is a multiple of 16 here.
__device__ __forceinline__ uint64_t philox_index(int64_t r, int64_t c, int64_t vcols) {
  return static_cast<uint64_t>(r) * static_cast<uint64_t>(vcols) + static_cast<uint64_t>(c);
}

// Block u of an orientation as (row, block column). Rowwise, consecutive u walk along a row
// (each thread reads its own 16 contiguous values); columnwise, along the rows of x^T's block
// column, so that the threads of a warp read neighbouring columns of x (coalesced) rather than
// blocks 16 rows apart.
__device__ __forceinline__ void block_of(const OutArgs& o, int64_t u, int64_t& r, int64_t& j) {
  const int64_t sc = o.vcols / 16;
  if (o.columnwise) {
    r = u % o.vrows;
    j = u / o.vrows;
  } else {
    r = u / sc;
    j = u % sc;
  }
}

__device__ __forceinline__ uint64_t offset_of(const nvfp4_quant_config_t& c) {
  return c.offset + (c.offset_device ? *c.offset_device : 0);
}

__global__ void rows_amax_kernel(const OptArgs a, float* out) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  for (int64_t r = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32; r < a.rows; r += warps) {
    uint32_t m = 0u;  // bits of non-negative floats: a NaN wins
    for (int64_t c = lane; c < a.cols; c += 32)
      m = max(m, core::float_bits(load_elem(a.x, a.dtype, r * a.cols + c)) & 0x7fffffffu);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (lane == 0) out[r] = core::bits_float(m);
  }
}

// One amax per column of x (the rows of the columnwise output; its zero padding changes no max).
__global__ void cols_amax_kernel(const OptArgs a, float* out) {
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < a.cols;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint32_t m = 0u;
    for (int64_t r = 0; r < a.rows; ++r) m = max(m, core::float_bits(load_elem(a.x, a.dtype, r * a.cols + c)) & 0x7fffffffu);
    out[c] = core::bits_float(m);
  }
}

__global__ void copy_amax_kernel(const float* in, float* out0, float* out1) {
  if (out0) *out0 = *in;
  if (out1) *out1 = *in;
}

__global__ void eden_max_kernel(const OptArgs a, const OutArgs o) {
  const int64_t sc = o.vcols / 16, n = o.vrows * sc;
  uint32_t m = 0u;
  for (int64_t u = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; u < n;
       u += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t r, j;
    block_of(o, u, r, j);
    float v[16];
    load_vblock(a, o, r, j, v);
    m = max(m, core::float_bits(core::eden_block(v).f) & 0x7fffffffu);
  }
  block_reduce_amax(m, o.amax, nullptr);
}

// 1D blocks of one orientation.
__global__ void quantize_1d_kernel(const OptArgs a, const OutArgs o) {
  const nvfp4_quant_config_t& cfg = a.cfg;
  const int64_t sc = o.vcols / 16, n = o.vrows * sc;
  const uint64_t off = offset_of(cfg);
  const bool fos = cfg.scale_select != NVFP4_SELECT_NONE, mse = cfg.scale_select == NVFP4_SELECT_4OVER6_MSE;
  const float denom = core::kE2M1Max * static_cast<float>(cfg.e4m3_bound);
  for (int64_t u = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; u < n;
       u += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t r, j;
    block_of(o, u, r, j);
    float v[16];
    load_vblock(a, o, r, j, v);
    core::Packed16 p;
    uint8_t sb;
    if (cfg.rounding == NVFP4_ROUND_EDEN) {
      const core::GlobalScale gs = core::make_global_scale(core::eden_amax(*o.amax));
      const core::EdenBlock b = core::eden_block(v);
      const core::Philox4 rnd = core::philox_words16(cfg.seed, off, philox_index(r, j * 16, o.vcols));
      p = b.p;
      sb = core::e4m3_encode_sr(b.f * gs.enc, rnd.v[0]);
    } else {
      const float ar = o.row_amax ? o.amax[r] : *o.amax;
      const core::GlobalScale gs = core::make_global_scale(core::bound_amax(ar, cfg.e4m3_bound));
      const float bamax = core::block_amax16(v);
      if (fos) {
        const core::FourOverSixScales s = core::fos_scales(bamax, gs.enc);
        core::Packed16 p4, p6;
        const float e4 = core::fos_candidate(v, s.map4, gs.dec, ar, denom, mse, p4);
        const float e6 = core::fos_candidate(v, s.map6, gs.dec, ar, denom, mse, p6);
        const bool pick4 = e4 < e6;
        p = pick4 ? p4 : p6;
        sb = pick4 ? s.map4 : s.map6;
      } else {
        sb = core::block_scale_e4m3(bamax, gs.enc);
        const float e = core::block_encode_factor(sb, gs.dec);
        if (cfg.rounding == NVFP4_ROUND_STOCHASTIC) {
          uint32_t rnd[16];
          core::philox_block16(cfg.seed, off, philox_index(r, j * 16, o.vcols), rnd);
          p = core::encode_block_sr(v, e, rnd);
        } else {
          p = core::encode_block_rn(v, e);
        }
      }
    }
    store_vblock(a, o, r, j, p, sb);
  }
}

// 2D tiles: tile (ti, tj) of x, written to whichever outputs exist (null data: not wanted).
__global__ void quantize_2d_kernel(const OptArgs a, const OutArgs row, const OutArgs col) {
  const nvfp4_quant_config_t& cfg = a.cfg;
  const int64_t tr = (a.rows + 15) / 16, tc = a.cols / 16, n = tr * tc;
  const bool fos = cfg.scale_select != NVFP4_SELECT_NONE, mse = cfg.scale_select == NVFP4_SELECT_4OVER6_MSE;
  const float denom = core::kE2M1Max * static_cast<float>(cfg.e4m3_bound);
  const float* amax_src = row.data ? row.amax : col.amax;  // equal: the tensor's (or the given) amax
  const float ar = *amax_src;
  const core::GlobalScale gs = core::make_global_scale(core::bound_amax(ar, cfg.e4m3_bound));
  for (int64_t u = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; u < n;
       u += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t ti = u / tc, tj = u % tc;
    float t[16][16];
    float m = 0.0f;
    for (int i = 0; i < 16; ++i) {
      const int64_t r = ti * 16 + i;
      for (int c = 0; c < 16; ++c) {
        t[i][c] = r < a.rows ? load_elem(a.x, a.dtype, r * a.cols + tj * 16 + c) : 0.0f;
        m = core::nan_max(m, core::abs_f(t[i][c]));
      }
    }
    uint8_t sb;
    bool pick4 = false;
    float e;
    if (fos) {
      const core::FourOverSixScales s = core::fos_scales(m, gs.enc);
      float e4[16], e6[16];
      core::Packed16 q;
      for (int i = 0; i < 16; ++i) {
        e4[i] = core::fos_candidate(t[i], s.map4, gs.dec, ar, denom, mse, q);
        e6[i] = core::fos_candidate(t[i], s.map6, gs.dec, ar, denom, mse, q);
      }
      pick4 = core::fos_tile_error(e4) < core::fos_tile_error(e6);
      sb = pick4 ? s.map4 : s.map6;
    } else {
      sb = core::block_scale_e4m3(m, gs.enc);
    }
    e = core::block_encode_factor(sb, gs.dec);
    if (row.data) {
      for (int i = 0; i < 16; ++i)
        if (ti * 16 + i < a.rows) store_vblock(a, row, ti * 16 + i, tj, core::encode_block_rn(t[i], e), sb);
    }
    if (col.data) {
      for (int c = 0; c < 16; ++c) {
        float v[16];
        for (int i = 0; i < 16; ++i) v[i] = t[i][c];
        store_vblock(a, col, tj * 16 + c, ti, core::encode_block_rn(v, e), sb);
      }
    }
  }
}

__global__ void finalize_amax_kernel(float* amax, int64_t n, uint32_t bound, int eden) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    amax[i] = eden ? core::eden_amax(amax[i]) : core::bound_amax(amax[i], bound);
}

unsigned grid_for(int64_t items) {
  const int64_t g = (items + kThreads - 1) / kThreads;
  return static_cast<unsigned>(g < 1 ? 1 : (g > 65535 ? 65535 : g));
}

}  // namespace

bool needs_options_path(const QuantJob& job) {
  // a given amax alone takes the ordinary kernels (quantize.cu hands it over as the partial)
  return job.cfg.scale_select != NVFP4_SELECT_NONE || job.cfg.amax_mode == NVFP4_AMAX_ROWS ||
         job.cfg.rounding == NVFP4_ROUND_EDEN;
}

nvfp4_status_t launch_options(const QuantJob& job, cudaStream_t stream) {
  const nvfp4_quant_config_t& cfg = job.cfg;
  OptArgs a{job.x, job.dtype, job.rows, job.cols, cfg};
  const int64_t rp = (job.rows + 15) / 16 * 16;
  OutArgs row{job.row.data, job.row.scales, job.row.amax, job.rows, job.cols, false,
              (cfg.rht & NVFP4_RHT_ROWWISE) != 0, cfg.amax_mode == NVFP4_AMAX_ROWS};
  OutArgs col{job.col.data, job.col.scales, job.col.amax, job.cols, rp, true, (cfg.rht & NVFP4_RHT_COLUMNWISE) != 0,
              cfg.amax_mode == NVFP4_AMAX_ROWS};
  const bool eden = cfg.rounding == NVFP4_ROUND_EDEN;

  // 1. the amax each output's scales derive from
  for (const OutArgs* o : {&row, &col}) {
    if (!o->data) continue;
    const size_t n = o->row_amax ? static_cast<size_t>(o->vrows) : 1;
    if (nvfp4_status_t s = memset_async(o->amax, n * sizeof(float), stream, "nvfp4 quantize"); s != NVFP4_SUCCESS) return s;
  }
  if (eden) {
    for (const OutArgs* o : {&row, &col}) {
      if (!o->data) continue;
      eden_max_kernel<<<grid_for(o->vrows * (o->vcols / 16)), kThreads, 0, stream>>>(a, *o);
      if (nvfp4_status_t s = check_launch("nvfp4 MS-EDEN scale max kernel"); s != NVFP4_SUCCESS) return s;
    }
  } else if (cfg.amax_mode == NVFP4_AMAX_GIVEN) {
    copy_amax_kernel<<<1, 1, 0, stream>>>(cfg.amax_in, row.data ? row.amax : nullptr, col.data ? col.amax : nullptr);
    if (nvfp4_status_t s = check_launch("nvfp4 amax copy kernel"); s != NVFP4_SUCCESS) return s;
  } else {
    if (cfg.amax_mode == NVFP4_AMAX_ROWS) {  // no RHT (checked by the API)
      if (row.data) {
        rows_amax_kernel<<<grid_for(job.rows * 32), kThreads, 0, stream>>>(a, row.amax);
        if (nvfp4_status_t s = check_launch("nvfp4 row amax kernel"); s != NVFP4_SUCCESS) return s;
      }
      if (col.data) {
        cols_amax_kernel<<<grid_for(job.cols), kThreads, 0, stream>>>(a, col.amax);
        if (nvfp4_status_t s = check_launch("nvfp4 column amax kernel"); s != NVFP4_SUCCESS) return s;
      }
    } else if (nvfp4_status_t s = launch_amax(job, stream, false, nullptr); s != NVFP4_SUCCESS) {
      return s;
    }
  }

  // 2. codes and scales
  for (const OutArgs* o : {&row, &col}) {
    if (!o->data || cfg.scale_layout != NVFP4_SCALES_SWIZZLED) continue;
    if (nvfp4_status_t s = memset_async(o->scales, static_cast<size_t>(core::swizzled_size(o->vrows, o->vcols / 16)),
                                        stream, "nvfp4 quantize");
        s != NVFP4_SUCCESS)
      return s;
  }
  if (cfg.block == NVFP4_BLOCK_2D) {
    quantize_2d_kernel<<<grid_for(((job.rows + 15) / 16) * (job.cols / 16)), kThreads, 0, stream>>>(a, row, col);
    if (nvfp4_status_t s = check_launch("nvfp4 quantize (2D options) kernel"); s != NVFP4_SUCCESS) return s;
  } else {
    for (const OutArgs* o : {&row, &col}) {
      if (!o->data) continue;
      quantize_1d_kernel<<<grid_for(o->vrows * (o->vcols / 16)), kThreads, 0, stream>>>(a, *o);
      if (nvfp4_status_t s = check_launch("nvfp4 quantize (options) kernel"); s != NVFP4_SUCCESS) return s;
    }
  }

  // 3. the stored amax
  for (const OutArgs* o : {&row, &col}) {
    if (!o->data || (!eden && cfg.e4m3_bound == 448u)) continue;
    const int64_t n = o->row_amax ? o->vrows : 1;
    finalize_amax_kernel<<<grid_for(n), kThreads, 0, stream>>>(o->amax, n, cfg.e4m3_bound, eden ? 1 : 0);
    if (nvfp4_status_t s = check_launch("nvfp4 amax finalize kernel"); s != NVFP4_SUCCESS) return s;
  }
  return NVFP4_SUCCESS;
}

}  // namespace nvfp4::detail::quant
