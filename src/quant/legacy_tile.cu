// The quantize kernels as they were before the 8-bit stochastic-rounding contract, kept
// only so that one benchmark run can time both (NVFP4_QUANT_LEGACY=1 selects them; see
// quantize.cu). Their RTN outputs equal the current kernels'; their SR outputs follow the
// previous contract (24 random bits per element, one Philox call per 4 elements) and so
// differ from the CPU reference. To be deleted once the new kernels are measured.
#include "quant/common.cuh"
#include "quant/launch.cuh"
#include "quant/legacy.cuh"

namespace nvfp4::detail::quant::legacy {
namespace {

struct TileArgs {
  const void* x;         // [rows, cols]
  int rows;              // < 2^31 (checked by the launcher)
  int64_t cols;          // % 16 == 0
  int nb;                // cols / 16
  // rowwise output (rdata == nullptr: not requested)
  uint8_t* rdata;        // [rows, cols/2]
  uint8_t* rscales;      // linear [rows, nb] or swizzled [roundup(rows,128), roundup(nb,4)]
  const float* ramax;
  // columnwise output (cdata == nullptr: not requested), the quantization of x^T [cols, rp]
  uint8_t* cdata;        // [cols, rp/2]
  uint8_t* cscales;      // linear [cols, csc] or swizzled [crows_sw, ccp]
  const float* camax;
  int64_t rp;            // roundup(rows, 16)
  int csc;               // rp / 16
  int ccp;               // roundup(csc, 4)
  int64_t crows_sw;      // roundup(cols, 128)
  int swizzled, row_rht, col_rht;
  uint32_t sign_mask;
  uint64_t seed, offset;
  const uint64_t* offset_device;  // optional: added to offset, read when the kernel runs
  int tiles_r, tiles_c;  // tiles_c covers the widest padded output
};

struct Cursor {
  int tr, tc;
  int64_t base;  // tr * 128 * cols + tc * 64
};

template <class T>
struct Smem {
  static constexpr int kRowBytes = 64 * T::kBytes;  // one tile row
  uint8_t buf[128 * kRowBytes];
};

// Byte offset of 16-byte chunk j of tile row r.
template <class T>
__device__ __forceinline__ int chunk_offset(int r, int j) {
  return r * Smem<T>::kRowBytes + ((j ^ (((r >> 4) ^ r) & 7)) << 4);
}

template <class T, bool kSR, bool k2D>
__global__ void __launch_bounds__(kThreads, 2) tile_kernel(const TileArgs a) {
  __shared__ __align__(16) Smem<T> sm;
  __shared__ EncodeTable tab_r, tab_c;
  __shared__ uint32_t tam[2][8][4];  // 2D: amax bits of the tile's 8 x 4 16x16 tiles, double-buffered

  const bool do_row = a.rdata != nullptr, do_col = a.cdata != nullptr;
  const uint64_t sr_offset = kSR ? a.offset + (a.offset_device ? *a.offset_device : 0) : 0;
  TensorScale ts_r{}, ts_c{};
  if (do_row) {
    const core::GlobalScale g = core::make_global_scale(*a.ramax);
    ts_r = make_tensor_scale(g);
    fill_encode_table(tab_r, g.dec);
  }
  if (do_col) {
    const core::GlobalScale g = core::make_global_scale(*a.camax);
    ts_c = make_tensor_scale(g);
    fill_encode_table(tab_c, g.dec);
  }
  if (threadIdx.x < 64) (&tam[0][0][0])[threadIdx.x] = 0u;
  __syncthreads();

  const int64_t total = static_cast<int64_t>(a.tiles_r) * a.tiles_c;
  if (static_cast<int64_t>(blockIdx.x) >= total) return;

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const char* x = static_cast<const char*>(a.x);

  // Phase A: two row blocks, rows rt[k] of the tile, block bq of its 4.
  const int bq = lane & 3, ri = lane >> 2;
  int rt[2];
  rt[0] = 2 * warp + (ri & 1) + 32 * (ri >> 1);
  rt[1] = rt[0] + 16;
  uint64_t off[2];
#pragma unroll
  for (int k = 0; k < 2; ++k) off[k] = static_cast<uint64_t>(rt[k]) * a.cols + bq * kBlock;
  // Phase B: row block rb of the tile, word wq of a 16-byte chunk column.
  const int rb = lane >> 2, wq = lane & 3;

  const int step_r = static_cast<int>(gridDim.x / a.tiles_c), step_c = static_cast<int>(gridDim.x % a.tiles_c);
  const int64_t row_elems = 128 * a.cols;
  const int64_t d_base = step_r * row_elems + static_cast<int64_t>(step_c) * 64;
  const int64_t wrap_base = static_cast<int64_t>(a.tiles_c) * 64 - row_elems;
  Cursor cur;
  {
    const int64_t t = total - 1 - blockIdx.x;
    cur.tr = static_cast<int>(t / a.tiles_c);
    cur.tc = static_cast<int>(t % a.tiles_c);
    cur.base = cur.tr * row_elems + static_cast<int64_t>(cur.tc) * 64;
  }
  auto next = [&](const Cursor& c) {
    Cursor n;
    n.tr = c.tr - step_r;
    n.tc = c.tc - step_c;
    n.base = c.base - d_base;
    if (n.tc < 0) {
      n.tc += a.tiles_c;
      n.tr -= 1;
      n.base += wrap_base;
    }
    return n;
  };
  auto valid = [&](const Cursor& c, int k) { return rt[k] < a.rows - c.tr * 128 && bq < a.nb - c.tc * 4; };
  auto load = [&](RawBlock<T> (&b)[2], const Cursor& c) {
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      if (valid(c, k))
        load_block<T>(b[k], x + (static_cast<uint64_t>(c.base) + off[k]) * T::kBytes);
      else
        zero_block<T>(b[k]);
    }
  };

  // Rowwise outputs of one block (scale byte s, codes o).
  auto store_row = [&](const Cursor& c, int k, const Encoded& o) {
    const bool ok = valid(c, k);
    const int64_t r = static_cast<int64_t>(c.tr) * 128 + rt[k];
    const int blk = c.tc * 4 + bq;
    if (ok) {
      const uint64_t e0 = static_cast<uint64_t>(c.base) + off[k];
      *reinterpret_cast<uint2*>(a.rdata + e0 / 2) = make_uint2(o.lo, o.hi);
    }
    if (a.swizzled) {
      if (blk < (a.nb + 3) / 4 * 4) a.rscales[core::swizzle_offset(r, blk, a.nb)] = ok ? o.scale : 0u;
    } else if (ok) {
      a.rscales[r * a.nb + blk] = static_cast<uint8_t>(o.scale);
    }
  };

  auto phase_a = [&](const RawBlock<T> (&b)[2], const Cursor& c, int pb) {
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      if (do_col) {
#pragma unroll
        for (int i = 0; i < Layout<T>::kChunks; ++i)
          *reinterpret_cast<uint4*>(sm.buf + chunk_offset<T>(rt[k], bq * Layout<T>::kChunks + i)) = b[k].c[i];
      }
      if constexpr (k2D) {
        atomicMax(&tam[pb][rt[k] >> 4][bq], raw_absmax_bits<T>(b[k]));
      } else if (do_row) {
        float v[kBlock];
        to_float<T>(b[k], v);
        uint32_t bamax;
        if (a.row_rht) {
          core::rht16(v, a.sign_mask);
          bamax = absmax_bits(v);
        } else {
          bamax = raw_absmax_bits<T>(b[k]);
        }
        const uint64_t e0 = static_cast<uint64_t>(c.base) + off[k];
        store_row(c, k, legacy_encode_block<kSR>(v, bamax, ts_r, tab_r, a.seed, sr_offset, e0));
      }
    }
    if (k2D && threadIdx.x < 32) (&tam[pb ^ 1][0][0])[threadIdx.x] = 0u;  // for the next tile
  };

  auto phase_a2 = [&](const RawBlock<T> (&b)[2], const Cursor& c, int pb) {
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      float v[kBlock];
      to_float<T>(b[k], v);
      const uint32_t s = block_scale_byte(tam[pb][rt[k] >> 4][bq], ts_r);
      const uint64_t e0 = static_cast<uint64_t>(c.base) + off[k];
      store_row(c, k, legacy_encode_with_scale<kSR>(v, s, tab_r, a.seed, sr_offset, e0));
    }
  };

  // One column block: column cl of the tile, row block rb.
  auto col_block = [&](float (&v)[kBlock], const Cursor& c, int cl, int pb) {
    const int64_t col = static_cast<int64_t>(c.tc) * 64 + cl;
    const int64_t r0 = static_cast<int64_t>(c.tr) * 128 + 16 * rb;
    uint32_t s;
    if constexpr (k2D) {
      s = block_scale_byte(tam[pb][rb][cl >> 4], ts_c);
    } else {
      if (a.col_rht) core::rht16(v, a.sign_mask);
      s = block_scale_byte(absmax_bits(v), ts_c);
    }
    const uint64_t idx0 = static_cast<uint64_t>(col) * static_cast<uint64_t>(a.rp) + static_cast<uint64_t>(r0);
    const Encoded o = legacy_encode_with_scale<kSR>(v, s, tab_c, a.seed, sr_offset, idx0);
    const bool ok = col < a.cols && r0 < a.rp;
    if (ok) *reinterpret_cast<uint2*>(a.cdata + idx0 / 2) = make_uint2(o.lo, o.hi);
    const int sci = c.tr * 8 + rb;  // scale column of x^T
    if (a.swizzled) {
      if (col < a.crows_sw && sci < a.ccp) a.cscales[core::swizzle_offset(col, sci, a.csc)] = ok ? o.scale : 0u;
    } else if (ok) {
      a.cscales[col * a.csc + sci] = static_cast<uint8_t>(o.scale);
    }
  };

  auto phase_b = [&](const Cursor& c, int pb) {
    constexpr int kUnits = T::kBytes == 4 ? 2 : 1;  // 16-byte chunk columns per thread
#pragma unroll
    for (int u = 0; u < kUnits; ++u) {
      const int q = warp + 8 * u;
      uint32_t w[16];
#pragma unroll
      for (int i = 0; i < 16; ++i)
        w[i] = *reinterpret_cast<const uint32_t*>(sm.buf + chunk_offset<T>(16 * rb + i, q) + 4 * wq);
      const int word = 4 * q + wq;
      if constexpr (T::kBytes == 4) {
        float v[kBlock];
#pragma unroll
        for (int i = 0; i < 16; ++i) v[i] = __uint_as_float(w[i]);
        col_block(v, c, word, pb);
      } else {
        float v[kBlock];
#pragma unroll
        for (int i = 0; i < 16; ++i) v[i] = lo_f<T>(w[i]);
        col_block(v, c, 2 * word, pb);
#pragma unroll
        for (int i = 0; i < 16; ++i) v[i] = hi_f<T>(w[i]);
        col_block(v, c, 2 * word + 1, pb);
      }
    }
  };

  auto step = [&](const RawBlock<T> (&b)[2], RawBlock<T> (&nb_)[2], const Cursor& c, const Cursor& n, bool more,
                  int pb) {
    // 1D is done with b after phase A, so the next tile's loads can fly during both
    // phases; 2D still needs b after the barrier.
    if (!k2D && more) load(nb_, n);
    phase_a(b, c, pb);
    __syncthreads();
    if (k2D && do_row) phase_a2(b, c, pb);
    if (k2D && more) load(nb_, n);
    if (do_col) phase_b(c, pb);
    __syncthreads();
  };

  RawBlock<T> ping[2], pong[2];
  load(ping, cur);
  int pb = 0;
  while (true) {
    Cursor n = next(cur);
    bool more = n.tr >= 0;
    step(ping, pong, cur, n, more, pb);
    pb ^= 1;
    if (!more) break;
    cur = n;
    n = next(cur);
    more = n.tr >= 0;
    step(pong, ping, cur, n, more, pb);
    pb ^= 1;
    if (!more) break;
    cur = n;
  }
}

template <class T, bool kSR, bool k2D>
nvfp4_status_t run(const QuantJob& job, cudaStream_t stream) {
  TileArgs a{};
  a.x = job.x;
  a.rows = static_cast<int>(job.rows);
  a.cols = job.cols;
  a.nb = static_cast<int>(job.cols / kBlock);
  a.rdata = job.row.data;
  a.rscales = job.row.scales;
  a.ramax = job.row.amax;
  a.cdata = job.col.data;
  a.cscales = job.col.scales;
  a.camax = job.col.amax;
  a.rp = (job.rows + 15) / 16 * 16;
  a.csc = static_cast<int>(a.rp / 16);
  a.ccp = (a.csc + 3) / 4 * 4;
  a.crows_sw = (job.cols + 127) / 128 * 128;
  a.swizzled = job.cfg.scale_layout == NVFP4_SCALES_SWIZZLED;
  a.row_rht = (job.cfg.rht & NVFP4_RHT_ROWWISE) != 0;
  a.col_rht = (job.cfg.rht & NVFP4_RHT_COLUMNWISE) != 0;
  a.sign_mask = job.cfg.rht_sign_mask;
  a.seed = job.cfg.seed;
  a.offset = job.cfg.offset;
  a.offset_device = job.cfg.offset_device;
  // Columns to cover: x itself, the rowwise swizzled padding (to 64) and the columnwise
  // swizzled padding (rows of x^T to 128).
  int64_t cols_ext = job.cols;
  if (a.swizzled && a.rdata) cols_ext = std::max<int64_t>(cols_ext, (job.cols + 63) / 64 * 64);
  if (a.swizzled && a.cdata) cols_ext = std::max<int64_t>(cols_ext, a.crows_sw);
  const int64_t tiles_r = (job.rows + 127) / 128, tiles_c = (cols_ext + 63) / 64;
  if (tiles_r * tiles_c > INT32_MAX || a.nb > INT32_MAX / 2)
    return fail(NVFP4_ERROR_NOT_SUPPORTED, "nvfp4 quantize: tensor too large for the CUDA kernels");
  a.tiles_r = static_cast<int>(tiles_r);
  a.tiles_c = static_cast<int>(tiles_c);
  auto kernel = tile_kernel<T, kSR, k2D>;
  const unsigned grid = persistent_grid(kernel, kThreads, 0, tiles_r * tiles_c);
  kernel<<<grid, kThreads, 0, stream>>>(a);
  return check_launch("nvfp4 tile quantize kernel");
}

template <class T>
nvfp4_status_t dispatch(const QuantJob& job, cudaStream_t stream) {
  const bool sr = job.cfg.rounding == NVFP4_ROUND_STOCHASTIC;
  if (job.cfg.block == NVFP4_BLOCK_2D) return sr ? run<T, true, true>(job, stream) : run<T, false, true>(job, stream);
  return sr ? run<T, true, false>(job, stream) : run<T, false, false>(job, stream);
}

}  // namespace

nvfp4_status_t launch_tile_legacy(const QuantJob& job, cudaStream_t stream) {
  if (job.rows > INT32_MAX - 256)
    return fail(NVFP4_ERROR_NOT_SUPPORTED, "nvfp4 quantize: more than 2^31 rows is not supported on CUDA");
  switch (job.dtype) {
    case NVFP4_DTYPE_FLOAT32: return dispatch<F32>(job, stream);
    case NVFP4_DTYPE_FLOAT16: return dispatch<F16>(job, stream);
    case NVFP4_DTYPE_BFLOAT16: return dispatch<BF16>(job, stream);
    default: return fail(NVFP4_ERROR_INVALID_ARGUMENT, "nvfp4 quantize: unsupported input dtype");
  }
}

}  // namespace nvfp4::detail::quant::legacy
