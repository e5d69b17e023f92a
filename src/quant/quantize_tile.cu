// Quantizations that need more than one row of x at a time: the columnwise output
// (quantization of x^T, with or without the rowwise one in the same pass), and 2D
// 16x16-tile quantization.
//
// Work unit: a tile of 128 rows x 64 columns of x, 256 threads, persistent grid. The
// amax pass walks x the other way (tile_walks_ascending, below): the variants with the
// cp.async ring take their tiles in ascending order, the amax pass having walked down from
// the end of x (where the kernel that wrote x left its last writes in L2) and left the
// start in L2; the others descending, after an amax pass that walked up (those variants'
// registers sit at the 128 the two CTAs per SM allow, and the ascending walk spilled
// some of them: bench/NOTES.md). Two ways to bring tiles in, chosen per variant by
// bench/bench_quant.py (H200, 2026-11-26):
//  - ring (the variants with an RHT, whose arithmetic is long enough for loads to hide
//    behind it: 1.1x faster this way): tiles arrive in shared memory by cp.async,
//    kStages - 1 tiles ahead of the one being quantized, so that the loads in flight do
//    not hold registers (a ring of kStages tile buffers; blocks outside x arrive as
//    zeros, the zero rows of x^T's padding). One barrier per tile (two for 2D): at the top
//    of a tile, after its copies have landed, it also retires the buffer the next copy
//    overwrites.
//  - registers (the others, 1.08x faster this way): each thread loads its two row blocks
//    of the next tile into registers while it works on the current one and stores them
//    to the single shared tile buffer in phase A; two barriers per tile.
//  A. Each thread takes two 16-element row blocks (the same thread/row mapping as the
//     rowwise kernel, so rowwise stores stay sector-sized) and, for 1D, quantizes them
//     along the row (RHT in registers when asked). For 2D it folds their amax into the
//     16x16 tile amax (shared-memory atomics) and quantizes after a barrier.
//  B. Each thread reads two column blocks (16 rows x 1 column) with 4-byte shared loads,
//     applies the RHT down the column when asked, and quantizes them: a warp's lanes
//     cover 8 row blocks x 4 words, so each column's 8 x 8 bytes of codes are one
//     contiguous 64-byte run of x^T.
// Shared memory holds 16-byte chunks XOR-swizzled by row ((row/16 ^ row) & 7) so that
// the 16-byte writes (cp.async or stores), the phase-A 16-byte loads and the phase-B
// column loads are free of bank conflicts.
// Every byte of every output is written, the padding of the swizzled scales and the
// zero-padded rows of x^T included.
#include "quant/common.cuh"
#include "quant/launch.cuh"

namespace nvfp4::detail::quant {
namespace {

struct TileArgs {
  const void* x;         // [rows, cols]
  int rows;              // < 2^31 (checked by the launcher)
  int64_t cols;          // % 16 == 0
  int nb;                // cols / 16
  // rowwise output (requested by the kernel's kRow; rdata == nullptr: decoded values only)
  uint8_t* rdata;        // [rows, cols/2]
  uint8_t* rscales;      // linear [rows, nb] or swizzled [roundup(rows,128), roundup(nb,4)]
  float* ramax;          // filled by the amax pass, or (partials) stored by CTA 0 here
  const uint32_t* rparts;  // the amax pass's partials (nullptr: it reduced into ramax)
  int nrparts;
  void* rdec;            // optional: bfloat16 [rows, cols], the decoded values
  // columnwise output (kCol; cdata == nullptr: decoded values only), the quantization of x^T [cols, rp]
  uint8_t* cdata;        // [cols, rp/2]
  uint8_t* cscales;      // linear [cols, csc] or swizzled [crows_sw, ccp]
  float* camax;          // filled by the amax pass, or (partials) stored by CTA 0 here
  const uint32_t* cparts;  // the amax pass's partials (nullptr: it reduced into camax)
  int ncparts;
  void* cdec;            // optional: bfloat16 [cols, rp]
  int64_t rp;            // roundup(rows, 16)
  int csc;               // rp / 16
  int ccp;               // roundup(csc, 4)
  int64_t crows_sw;      // roundup(cols, 128)
  int swizzled;
  uint32_t sign_mask;
  core::PhiloxKeys keys;  // round keys of the seed (in the constant bank, like every argument)
  uint64_t offset;
  const uint64_t* offset_device;  // optional: added to offset, read when the kernel runs
  int tiles_r, tiles_c;  // tiles_c covers the widest padded output
};

struct Cursor {
  int tr, tc;
  int64_t base;  // tr * 128 * cols + tc * 64
};

template <class T, bool kRing = false>
struct Smem {
  static constexpr int kRowBytes = 64 * T::kBytes;  // one tile row
  static constexpr int kTileBytes = 128 * kRowBytes;
  // tiles in the ring: 3 x 16 KiB for 16-bit inputs, 2 x 32 KiB for fp32; one otherwise
  static constexpr int kStages = !kRing ? 1 : T::kBytes == 4 ? 2 : 3;
  static constexpr int kBytes = kStages * kTileBytes;
};

// Which variants bring their tiles in by the cp.async ring (see the top of this file): those
// with a transform along rows or columns (2D has none). The kernels' kUseRing and the host's
// tile_walks_ascending both ask this.
constexpr bool uses_ring(bool row_rht, bool col_rht) { return row_rht || col_rht; }
template <bool k2D, bool kRowRht, bool kColRht>
constexpr bool kUseRing = uses_ring(kRowRht, kColRht);

// Byte offset of 16-byte chunk j of tile row r.
template <class T>
__device__ __forceinline__ int chunk_offset(int r, int j) {
  return r * Smem<T>::kRowBytes + ((j ^ (((r >> 4) ^ r) & 7)) << 4);
}

using gpu::cp_async16;  // 16 bytes global -> shared, asynchronously (cuda/device.h)
using gpu::cp_async_commit;
using gpu::cp_async_wait;

// Decoded values leave through a per-warp staging area in shared memory, so that each store
// instruction fills whole 32-byte sectors: rows as store_decoded_row_staged (common.cuh);
// columns alike, the 8 lanes of a column (one per row block) staging its 16 chunks, 4
// columns a warp at a stride of 17 chunks (fewer bank conflicts between them).
constexpr int kColStageStride = 17;
constexpr int kStageChunks = 4 * kColStageStride;
static_assert(kStageChunks >= kRowStageChunks, "the staging area holds a warp's rows");

// Which outputs and transforms a launch has are template parameters, so that each variant's
// loop holds only its own work (kRowRht: RHT along rows for the rowwise output, kColRht:
// along columns for the columnwise one; 1D only).
template <class T, bool kSR, bool k2D, bool kRow, bool kCol, bool kRowRht, bool kColRht>
__global__ void __launch_bounds__(kThreads, 2) tile_kernel(const TileArgs a) {
  static_assert(kRow || kCol, "nothing to write");
  static_assert(!k2D || (!kRowRht && !kColRht), "the RHT is 1D only");
  static_assert(kRow || !kRowRht, "row RHT without rowwise output");
  static_assert(kCol || !kColRht, "column RHT without columnwise output");
  constexpr bool kRing = kUseRing<k2D, kRowRht, kColRht>;
  constexpr bool kAscending = kRing;  // the walk's direction (top of the file; tile_walks_ascending)
  // Staged decoded stores (see kStageChunks) in the RTN variants; the SR ones keep direct
  // stores (staging there cost registers and made them slower: bench/NOTES.md, 2026-11-27).
  constexpr bool kStage = !kSR;
  using S = Smem<T, kRing>;
  extern __shared__ __align__(128) uint8_t ring[];  // S::kBytes, dynamic
  __shared__ EncodeTable tab_r, tab_c;
  __shared__ uint32_t tam[2][8][4];  // 2D: amax bits of the tile's 8 x 4 16x16 tiles, double-buffered
  __shared__ uint4 stage_all[kThreads / 32][kStageChunks];  // each warp's staging of decoded values

  constexpr bool do_row = kRow, do_col = kCol;
  const uint64_t sr_offset = kSR ? a.offset + (a.offset_device ? *a.offset_device : 0) : 0;
  TensorScale ts_r{}, ts_c{};  // set once the first tiles' loads are out (below)

  const int64_t total = static_cast<int64_t>(a.tiles_r) * a.tiles_c;
  const bool has_work = static_cast<int64_t>(blockIdx.x) < total;

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  uint4* const stage = stage_all[warp];
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
    const int64_t t = kAscending ? static_cast<int64_t>(blockIdx.x) : total - 1 - blockIdx.x;
    cur.tr = static_cast<int>(t / a.tiles_c);
    cur.tc = static_cast<int>(t % a.tiles_c);
    cur.base = cur.tr * row_elems + static_cast<int64_t>(cur.tc) * 64;
  }
  auto next = [&](const Cursor& c) {
    Cursor n;
    if constexpr (kAscending) {
      n.tr = c.tr + step_r;
      n.tc = c.tc + step_c;
      n.base = c.base + d_base;
      if (n.tc >= a.tiles_c) {
        n.tc -= a.tiles_c;
        n.tr += 1;
        n.base -= wrap_base;
      }
    } else {
      n.tr = c.tr - step_r;
      n.tc = c.tc - step_c;
      n.base = c.base - d_base;
      if (n.tc < 0) {
        n.tc += a.tiles_c;
        n.tr -= 1;
        n.base += wrap_base;
      }
    }
    return n;
  };
  // whether a cursor from next() is a tile (past the last or the first row of tiles: done)
  auto in_range = [&](const Cursor& c) {
    if constexpr (kAscending)
      return c.tr < a.tiles_r;
    else
      return c.tr >= 0;
  };
  auto valid = [&](const Cursor& c, int k) { return rt[k] < a.rows - c.tr * 128 && bq < a.nb - c.tc * 4; };
  // Ring: a block outside x arrives as zeros (the zero rows of x^T's padding). Registers:
  // it keeps whatever its registers held, and phase A stores zeros in its place. Nothing
  // computed from it is stored, and the 2D tile amax skips it.
  auto load_regs = [&](RawBlock<T> (&b)[2], const Cursor& c) {
#pragma unroll
    for (int k = 0; k < 2; ++k)
      if (valid(c, k)) load_block<T>(b[k], x + (static_cast<uint64_t>(c.base) + off[k]) * T::kBytes);
  };
  // The ring's copies: the four lanes of a tile row (bq = 0..3) copy its 16-byte chunks
  // j = 4 i + bq, so that each copy instruction of a warp fetches whole 64-byte runs of its
  // rows (full sectors; copying each lane's own block would fetch every sector in two halves,
  // one per instruction). A chunk lands where its block's reader expects it, and the barrier
  // that opens each tile makes every lane's copies visible to all.
  auto load = [&](uint8_t* buf, const Cursor& c) {
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const bool row_ok = rt[k] < a.rows - c.tr * 128;
      const uint64_t row = (static_cast<uint64_t>(c.base) + off[k]) * T::kBytes - bq * (kBlock * T::kBytes);
#pragma unroll
      for (int i = 0; i < Layout<T>::kChunks; ++i) {
        const int j = 4 * i + bq;
        const bool ok = row_ok && j / Layout<T>::kChunks < a.nb - c.tc * 4;
        cp_async16(buf + chunk_offset<T>(rt[k], j), ok ? x + row + 16 * j : x, ok ? 16 : 0);
      }
    }
  };
  // This thread's row block, from the ring (after the tile's barrier), or its registers.
  auto read_block = [&](const uint8_t* buf, int k) {
    RawBlock<T> b;
#pragma unroll
    for (int i = 0; i < Layout<T>::kChunks; ++i)
      b.c[i] = *reinterpret_cast<const uint4*>(buf + chunk_offset<T>(rt[k], bq * Layout<T>::kChunks + i));
    return b;
  };

  // RHT signs as +-1 factors, folded into the butterfly's first stage (core::rht16_fma); for
  // the columns of a BF16 x as sign bits flipped in the conversions instead (row i of a column
  // block: an add of the sign bit to the shifted low half, an xor on the high half, no
  // instruction of their own), the transform then core::fwht16_scaled: the same sums.
  constexpr bool kColSignInConversion = kColRht && std::is_same_v<T, BF16>;
  // With stochastic rounding those columns also leave the transform's final 1/4 to their
  // scale and encode factors (quarter_foldable, common.cuh: bit-identical codes and scales, 16
  // multiplies fewer a block) wherever the CTA's tensor scale allows it; else (a given tensor
  // amax above ~1.3e38) they multiply as before: a branch uniform over the CTA. Measured on an
  // H200 (bench/NOTES.md, 2026-11-30): 1.0-2.5% off the dY quantization in a step, and ~1% onto
  // the round-to-nearest X one, which keeps the multiplies.
  constexpr bool kColFold = kColSignInConversion && kSR;
  bool col_fold = false;
  float rht_sign[kBlock];
  uint32_t col_sign[kBlock];
#pragma unroll
  for (int i = 0; i < kBlock; ++i) {
    rht_sign[i] = ((a.sign_mask >> i) & 1u) ? -1.0f : 1.0f;
    col_sign[i] = ((a.sign_mask >> i) & 1u) ? 0x80000000u : 0u;
  }

  // Rowwise outputs of one block (scale byte s, codes o). A tile's 128 rows x 4 blocks are
  // exactly one 512-byte tile of the swizzled rowwise scales: that tile's offset is
  // uniform, the byte inside it a per-thread constant (soff_r).
  const int rcp4 = (a.nb + 3) / 4;  // swizzled scale tiles per 128-row band
  int soff_r[2];
#pragma unroll
  for (int k = 0; k < 2; ++k) soff_r[k] = (rt[k] & 31) * 16 + (rt[k] >> 5) * 4 + bq;
  // Both layouts store one byte per block at a per-tile base + a per-thread offset; the
  // swizzled one also writes 0 for blocks outside x that fall in the padding. Written as
  // one predicated store each (no branches).
  int64_t soff_lin[2];
#pragma unroll
  for (int k = 0; k < 2; ++k) soff_lin[k] = static_cast<int64_t>(rt[k]) * a.nb + bq;
  auto store_row = [&](const Cursor& c, int k, const Encoded& o) {
    const bool ok = valid(c, k);
    if (kStage && a.rdec) {  // the same for every lane: the whole warp stages
      store_decoded_row_staged(stage, ri, bq, o,
                               static_cast<__nv_bfloat16*>(a.rdec) + static_cast<uint64_t>(c.base) + off[k] - bq * kBlock,
                               rt[k] < a.rows - c.tr * 128, a.nb - c.tc * 4);
    } else if (ok && a.rdec) {
      store_decoded(static_cast<__nv_bfloat16*>(a.rdec) + static_cast<uint64_t>(c.base) + off[k], o);
    }
    if (a.rdata == nullptr) return;  // decoded values only
    if (ok) {
      const uint64_t e0 = static_cast<uint64_t>(c.base) + off[k];
      *reinterpret_cast<uint2*>(a.rdata + e0 / 2) = make_uint2(o.lo, o.hi);
    }
    // swizzled: tiles past the padded scale columns exist only for the columnwise padding
    const bool store = a.swizzled ? c.tc < rcp4 : ok;
    uint8_t* base = a.swizzled ? a.rscales + (static_cast<int64_t>(c.tr) * rcp4 + c.tc) * 512
                               : a.rscales + static_cast<int64_t>(c.tr) * 128 * a.nb + c.tc * 4;
    if (store) base[a.swizzled ? soff_r[k] : soff_lin[k]] = ok ? static_cast<uint8_t>(o.scale) : uint8_t{0};
  };

  auto own_block = [&](const uint8_t* buf, const RawBlock<T> (&regs)[2], int k) {
    if constexpr (kRing) return read_block(buf, k);
    else return regs[k];
  };
  auto phase_a = [&](uint8_t* buf, const RawBlock<T> (&regs)[2], const Cursor& c, int pb) {
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const bool ok = valid(c, k);
      if constexpr (!kRing && do_col) {  // the tile for phase B
#pragma unroll
        for (int i = 0; i < Layout<T>::kChunks; ++i) {
          uint4* q = reinterpret_cast<uint4*>(buf + chunk_offset<T>(rt[k], bq * Layout<T>::kChunks + i));
          *q = ok ? regs[k].c[i] : make_uint4(0u, 0u, 0u, 0u);
        }
      }
      if constexpr (k2D) {
        if (ok) atomicMax(&tam[pb][rt[k] >> 4][bq], raw_absmax_bits<T>(own_block(buf, regs, k)));
      } else if constexpr (do_row) {
        const RawBlock<T> b = own_block(buf, regs, k);
        float v[kBlock];
        to_float<T>(b, v);
        uint32_t bamax;
        if constexpr (kRowRht) {
          core::rht16_fma(v, rht_sign);
          bamax = absmax_bits(v);
        } else {
          bamax = raw_absmax_bits<T>(b);
        }
        const uint64_t e0 = static_cast<uint64_t>(c.base) + off[k];
        store_row(c, k, encode_block<kSR>(v, bamax, ts_r, tab_r, a.keys, sr_offset, e0));
      }
    }
    if (k2D && threadIdx.x < 32) (&tam[pb ^ 1][0][0])[threadIdx.x] = 0u;  // for the next tile
  };

  auto phase_a2 = [&](const uint8_t* buf, const RawBlock<T> (&regs)[2], const Cursor& c, int pb) {
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      float v[kBlock];
      to_float<T>(own_block(buf, regs, k), v);
      const uint32_t s = block_scale_byte(tam[pb][rt[k] >> 4][bq], ts_r);
      const uint64_t e0 = static_cast<uint64_t>(c.base) + off[k];
      store_row(c, k, encode_with_scale<kSR>(v, s, tab_r, a.keys, sr_offset, e0));
    }
  };

  // One column block: column cl of the tile, row block rb. Its element index in x^T is
  // col * rp + r0 = (tc * 64 * rp + tr * 128) + (cl * rp + 16 * rb): a per-tile uniform
  // part (ColTile) plus a per-thread constant, and likewise for its scale byte.
  constexpr int kColsPerThread = T::kBytes == 4 ? 1 : 2;  // columns in a 4-byte word
  constexpr int kUnitsB = T::kBytes == 4 ? 2 : 1;         // 16-byte chunk columns per thread
  auto col_of = [&](int u, int h) { return kColsPerThread * (4 * (warp + 8 * u) + wq) + h; };
  uint64_t coff[kUnitsB][kColsPerThread];  // cl * rp + 16 * rb
  int64_t csoff[kUnitsB][kColsPerThread];  // scale byte: swizzled, inside the tile's band; linear, cl * csc + rb
#pragma unroll
  for (int u = 0; u < kUnitsB; ++u)
#pragma unroll
    for (int h = 0; h < kColsPerThread; ++h) {
      const int cl = col_of(u, h);
      coff[u][h] = static_cast<uint64_t>(cl) * static_cast<uint64_t>(a.rp) + 16u * rb;
      csoff[u][h] = a.swizzled ? (rb >> 2) * 512 + (cl & 31) * 16 + (cl >> 5) * 4 + (rb & 3)
                               : static_cast<int64_t>(cl) * a.csc + rb;
    }

  struct ColTile {
    uint64_t idx;         // element index of the tile's origin in x^T
    uint8_t* data;        // a.cdata + idx / 2
    uint8_t* scales;      // the tile's scale bytes, less csoff
    int cols_left, rows_left;  // columns of x, rows of x^T (padded to 16) from the tile's origin
    int scols_left, srows_left;  // swizzled: columns/rows of the padded scale layout left
  };
  auto col_tile = [&](const Cursor& c) {
    ColTile t;
    t.idx = static_cast<uint64_t>(c.tc) * 64u * static_cast<uint64_t>(a.rp) + static_cast<uint64_t>(c.tr) * 128u;
    t.data = a.cdata + t.idx / 2;
    t.scales = a.swizzled ? a.cscales + (c.tc >> 1) * static_cast<int64_t>(a.ccp) * 128 + static_cast<int64_t>(c.tr) * 1024 +
                                (c.tc & 1) * 8
                          : a.cscales + static_cast<int64_t>(c.tc) * 64 * a.csc + c.tr * 8;
    t.cols_left = static_cast<int>(a.cols) - c.tc * 64;  // cols < 2^31 (checked by the launcher)
    t.rows_left = static_cast<int>(a.rp - static_cast<int64_t>(c.tr) * 128);
    t.scols_left = static_cast<int>(a.crows_sw) - c.tc * 64;
    t.srows_left = a.ccp - c.tr * 8;
    return t;
  };

  auto col_block = [&](float (&v)[kBlock], const Cursor& c, const ColTile& t, int u, int h, int pb) {
    const int cl = col_of(u, h);
    uint32_t s;
    if constexpr (k2D) {
      s = block_scale_byte(tam[pb][rb][cl >> 4], ts_c);
    } else {
      if constexpr (kColFold) {
        core::fwht16_stages(v);
        if (!col_fold) {
#pragma unroll
          for (int i = 0; i < kBlock; ++i) v[i] *= 0.25f;
        }
      } else if constexpr (kColSignInConversion) {
        core::fwht16_scaled(v);
      } else if constexpr (kColRht) {
        core::rht16_fma(v, rht_sign);
      }
      s = block_scale_byte(absmax_bits(v), ts_c);
    }
    const uint64_t idx0 = t.idx + coff[u][h];
    const Encoded o = encode_with_scale<kSR>(v, s, tab_c, a.keys, sr_offset, idx0);
    const bool ok = cl < t.cols_left && 16 * rb < t.rows_left;
    if (kStage && a.cdec) {  // the same for every lane: the whole warp stages
      // the 8 lanes of column cl (one per row block rb) stage its 16 chunks (256 bytes of
      // x^T's row cl), then lane rb stores chunks rb and 8 + rb: whole sectors per instruction
      uint4* col = stage + kColStageStride * wq;
      store_decoded(col + 2 * rb, o);
      __syncwarp();
      uint4* dst = reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(a.cdec) + idx0 - 16 * rb);
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int j = 8 * i + rb;  // of row block j / 2
        if (cl < t.cols_left && 16 * (j / 2) < t.rows_left) dst[j] = col[j];
      }
      __syncwarp();
    } else if (ok && a.cdec) {
      store_decoded(static_cast<__nv_bfloat16*>(a.cdec) + idx0, o);
    }
    if (a.cdata == nullptr) return;  // decoded values only
    if (ok) *reinterpret_cast<uint2*>(t.data + coff[u][h] / 2) = make_uint2(o.lo, o.hi);
    // swizzled: every byte inside the padded layout (0 outside x); linear: only x's
    const bool store = a.swizzled ? (cl < t.scols_left && rb < t.srows_left) : ok;
    if (store) t.scales[csoff[u][h]] = ok ? static_cast<uint8_t>(o.scale) : uint8_t{0};
  };

  auto phase_b = [&](const uint8_t* buf, const Cursor& c, int pb) {
    const ColTile t = col_tile(c);
#pragma unroll
    for (int u = 0; u < kUnitsB; ++u) {
      const int q = warp + 8 * u;
      uint32_t w[16];
#pragma unroll
      for (int i = 0; i < 16; ++i)
        w[i] = *reinterpret_cast<const uint32_t*>(buf + chunk_offset<T>(16 * rb + i, q) + 4 * wq);
      if constexpr (T::kBytes == 4) {
        float v[kBlock];
#pragma unroll
        for (int i = 0; i < 16; ++i) v[i] = __uint_as_float(w[i]);
        col_block(v, c, t, u, 0, pb);
      } else {
        float v[kBlock];
#pragma unroll
        for (int i = 0; i < 16; ++i)
          v[i] = kColSignInConversion ? __uint_as_float((w[i] << 16) + col_sign[i]) : lo_f<T>(w[i]);
        col_block(v, c, t, u, 0, pb);
#pragma unroll
        for (int i = 0; i < 16; ++i)
          v[i] = kColSignInConversion ? __uint_as_float((w[i] & 0xffff0000u) ^ col_sign[i]) : hi_f<T>(w[i]);
        col_block(v, c, t, u, 1, pb);
      }
    }
  };

  // The first tiles' loads go out before the tensor amax is known (the registers' first
  // tile, or the ring's first kStages - 1): the reduction of the amax pass's partials, the
  // encode tables and the CTA barrier then run while those loads are in flight instead of
  // ahead of them.
  RawBlock<T> ping[2], pong[2];  // the registers' tiles (unused by the ring)
  Cursor fetch = cur;            // the ring's next tile to copy
  bool fetch_more = true;
  auto issue = [&](int slot) {
    if (fetch_more) {
      load(ring + slot * S::kTileBytes, fetch);
      fetch = next(fetch);
      fetch_more = in_range(fetch);
    }
    cp_async_commit();
  };
  if (has_work) {
    if constexpr (!kRing) {
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        zero_block<T>(ping[k]);
        zero_block<T>(pong[k]);
      }
      load_regs(ping, cur);
    } else {
#pragma unroll
      for (int s = 0; s < S::kStages - 1; ++s) issue(s);
    }
  }
  {
    float am_r = 0.0f, am_c = 0.0f;
    if constexpr (do_row && do_col) {
      float* const am[2] = {a.ramax, a.camax};
      const uint32_t* const parts[2] = {a.rparts, a.cparts};
      const int n[2] = {a.nrparts, a.ncparts};
      float out[2];
      tensor_amaxes(am, parts, n, out);
      am_r = out[0];
      am_c = out[1];
    } else if constexpr (do_row)
      am_r = tensor_amax(a.ramax, a.rparts, a.nrparts);
    else
      am_c = tensor_amax(a.camax, a.cparts, a.ncparts);
    if constexpr (do_row) {
      const core::GlobalScale g = core::make_global_scale(am_r);
      ts_r = make_tensor_scale(g);
      fill_encode_table(tab_r, g.dec);
    }
    if constexpr (do_col) {
      const core::GlobalScale g = core::make_global_scale(am_c);
      ts_c = make_tensor_scale(g);
      if constexpr (kColFold) col_fold = quarter_foldable(ts_c, g.dec);
      if (col_fold) {
        ts_c.enc_div6 *= 0.25f;
        fill_encode_table_quarter(tab_c, g.dec);
      } else {
        fill_encode_table(tab_c, g.dec);
      }
    }
  }
  if (threadIdx.x < 64) (&tam[0][0][0])[threadIdx.x] = 0u;
  __syncthreads();
  if (!has_work) return;

  if constexpr (!kRing) {
    // Registers: tile i's blocks in ping/pong, the next tile's loads in flight during
    // both phases (1D is done with them after phase A; 2D still needs them after the
    // barrier, so its loads start after phase A2).
    uint8_t* buf = ring;
    auto step = [&](const RawBlock<T> (&b)[2], RawBlock<T> (&nb_)[2], const Cursor& c, const Cursor& n, bool more,
                    int pb) {
      if (!k2D && more) load_regs(nb_, n);
      phase_a(buf, b, c, pb);
      __syncthreads();
      if constexpr (k2D && do_row) phase_a2(buf, b, c, pb);
      if (k2D && more) load_regs(nb_, n);
      if constexpr (do_col) phase_b(buf, c, pb);
      __syncthreads();
    };
    int pb = 0;  // ping's loads were issued above
    while (true) {
      Cursor n = next(cur);
      bool more = in_range(n);
      step(ping, pong, cur, n, more, pb);
      pb ^= 1;
      if (!more) break;
      cur = n;
      n = next(cur);
      more = in_range(n);
      step(pong, ping, cur, n, more, pb);
      pb ^= 1;
      if (!more) break;
      cur = n;
    }
  } else {
    // The ring: tile i in buffer i % kStages. The copies of tile i + kStages - 1 are
    // issued right after the barrier that opens tile i: every thread has then finished
    // tile i - 1, whose buffer they overwrite. One commit group per tile (empty past the
    // last tile), so that "tile i has landed" is always "at most kStages - 2 groups pending".
    constexpr int kStages = S::kStages;
    static_assert(kStages >= 2, "a ring of one buffer");
    const RawBlock<T> none[2]{};  // unused: the ring reads its blocks from shared memory
    int slot = 0, pb = 0;  // the first kStages - 1 tiles were issued above
    while (true) {
      cp_async_wait<kStages - 2>();
      __syncthreads();
      issue(slot == 0 ? kStages - 1 : slot - 1);
      uint8_t* buf = ring + slot * S::kTileBytes;
      phase_a(buf, none, cur, pb);
      if constexpr (k2D) {
        __syncthreads();  // the 16x16 tile amaxes are complete
        if constexpr (do_row) phase_a2(buf, none, cur, pb);
      }
      if constexpr (do_col) phase_b(buf, cur, pb);
      pb ^= 1;
      const Cursor n = next(cur);
      if (!in_range(n)) break;
      cur = n;
      slot = slot == kStages - 1 ? 0 : slot + 1;
    }
    cp_async_wait<0>();  // the groups past the last tile are empty; leave none behind
  }
}

template <class T, bool kSR, bool k2D, bool kRow, bool kCol, bool kRowRht, bool kColRht>
nvfp4_status_t run(const QuantJob& job, cudaStream_t stream, const AmaxParts& parts) {
  TileArgs a{};
  a.x = job.x;
  a.rows = static_cast<int>(job.rows);
  a.cols = job.cols;
  a.nb = static_cast<int>(job.cols / kBlock);
  a.rdata = job.row.data;
  a.rscales = job.row.scales;
  a.ramax = job.row.amax;
  a.rparts = parts.row;
  a.nrparts = parts.nrow;
  a.rdec = job.row.dec;
  a.cdata = job.col.data;
  a.cscales = job.col.scales;
  a.camax = job.col.amax;
  a.cparts = parts.col;
  a.ncparts = parts.ncol;
  a.cdec = job.col.dec;
  a.rp = (job.rows + 15) / 16 * 16;
  a.csc = static_cast<int>(a.rp / 16);
  a.ccp = (a.csc + 3) / 4 * 4;
  a.crows_sw = (job.cols + 127) / 128 * 128;
  a.swizzled = job.cfg.scale_layout == NVFP4_SCALES_SWIZZLED;
  a.sign_mask = job.cfg.rht_sign_mask;
  a.keys = core::philox_keys(job.cfg.seed);
  a.offset = job.cfg.offset;
  a.offset_device = job.cfg.offset_device;
  // Columns to cover: x itself, the rowwise swizzled padding (to 64) and the columnwise
  // swizzled padding (rows of x^T to 128).
  int64_t cols_ext = job.cols;
  if (a.swizzled && a.rdata) cols_ext = std::max<int64_t>(cols_ext, (job.cols + 63) / 64 * 64);
  if (a.swizzled && a.cdata) cols_ext = std::max<int64_t>(cols_ext, a.crows_sw);
  const int64_t tiles_r = (job.rows + 127) / 128, tiles_c = (cols_ext + 63) / 64;
  if (tiles_r * tiles_c > INT32_MAX || cols_ext > INT32_MAX - 128)
    return fail(NVFP4_ERROR_NOT_SUPPORTED, "nvfp4 quantize: tensor too large for the CUDA kernels");
  a.tiles_r = static_cast<int>(tiles_r);
  a.tiles_c = static_cast<int>(tiles_c);
  auto kernel = tile_kernel<T, kSR, k2D, kRow, kCol, kRowRht, kColRht>;
  constexpr int smem = Smem<T, kUseRing<k2D, kRowRht, kColRht>>::kBytes;
  if (nvfp4_status_t st = allow_dynamic_smem(kernel, smem); st != NVFP4_SUCCESS) return st;
  const unsigned grid = persistent_grid(kernel, kThreads, smem, tiles_r * tiles_c);
  kernel<<<grid, kThreads, smem, stream>>>(a);
  return check_launch("nvfp4 tile quantize kernel");
}

// The RHT flags of a job's 1D tile-kernel variant: the transform along rows where the rowwise
// output is wanted and asks for it, along columns where the columnwise output asks for it.
struct RhtFlags {
  bool row, col;
};
RhtFlags tile_rht_flags(const QuantJob& job) {
  return {wanted(job.row) && (job.cfg.rht & NVFP4_RHT_ROWWISE) != 0, (job.cfg.rht & NVFP4_RHT_COLUMNWISE) != 0};
}

template <class T, bool kSR>
nvfp4_status_t dispatch_variant(const QuantJob& job, cudaStream_t stream, const AmaxParts& parts) {
  const bool row = wanted(job.row), col = wanted(job.col);
  if (job.cfg.block == NVFP4_BLOCK_2D) {
    if (row && col) return run<T, kSR, true, true, true, false, false>(job, stream, parts);
    if (row) return run<T, kSR, true, true, false, false, false>(job, stream, parts);
    return run<T, kSR, true, false, true, false, false>(job, stream, parts);
  }
  // 1D: this kernel always has the columnwise output (rowwise-only takes the rowwise kernel)
  const RhtFlags f = tile_rht_flags(job);
  const bool rrht = f.row, crht = f.col;
  if (!row) return crht ? run<T, kSR, false, false, true, false, true>(job, stream, parts)
                        : run<T, kSR, false, false, true, false, false>(job, stream, parts);
  if (rrht) return crht ? run<T, kSR, false, true, true, true, true>(job, stream, parts)
                        : run<T, kSR, false, true, true, true, false>(job, stream, parts);
  return crht ? run<T, kSR, false, true, true, false, true>(job, stream, parts)
              : run<T, kSR, false, true, true, false, false>(job, stream, parts);
}

template <class T>
nvfp4_status_t dispatch(const QuantJob& job, cudaStream_t stream, const AmaxParts& parts) {
  return job.cfg.rounding == NVFP4_ROUND_STOCHASTIC ? dispatch_variant<T, true>(job, stream, parts)
                                                    : dispatch_variant<T, false>(job, stream, parts);
}

}  // namespace

bool tile_walks_ascending(const QuantJob& job) {
  if (job.cfg.block != NVFP4_BLOCK_1D || !wanted(job.col)) return false;  // 2D, or the rowwise kernel's job
  const RhtFlags f = tile_rht_flags(job);
  return uses_ring(f.row, f.col);  // the ring's variants walk up (kAscending)
}

nvfp4_status_t launch_tile(const QuantJob& job, cudaStream_t stream, const AmaxParts& parts) {
  if (job.rows > INT32_MAX - 256)
    return fail(NVFP4_ERROR_NOT_SUPPORTED, "nvfp4 quantize: more than 2^31 rows is not supported on CUDA");
  switch (job.dtype) {
    case NVFP4_DTYPE_FLOAT32: return dispatch<F32>(job, stream, parts);
    case NVFP4_DTYPE_FLOAT16: return dispatch<F16>(job, stream, parts);
    case NVFP4_DTYPE_BFLOAT16: return dispatch<BF16>(job, stream, parts);
    default: return fail(NVFP4_ERROR_INVALID_ARGUMENT, "nvfp4 quantize: unsupported input dtype");
  }
}

}  // namespace nvfp4::detail::quant
