// MXFP4 quantization: rowwise, columnwise (x^T), or both from one read of x. One pass:
// MX has no per-tensor scale, so there is no amax pass before it.
//
// Work unit: a tile of 64 rows x 128 columns of x, 256 threads, persistent grid.
//  A. Thread t owns the 32-element row block (row t/4, block t%4) of the tile: four (bf16,
//     fp16) or eight (fp32) 16-byte loads. It quantizes the block along the row at once
//     (codes: one 16-byte store; a warp writes 8 rows x 64 contiguous bytes) and, when the
//     columnwise output is wanted, writes the raw values to shared memory.
//  B. After a barrier, thread t owns the column block (column t%128, rows 32*(t/128) ..
//     +31) of the tile: 32 shared-memory reads down the column, then the same block step,
//     and one 16-byte store into x^T (the tile's two column blocks of a column are one
//     32-byte sector of x^T).
// Shared memory is row-major with the 16-byte chunks of each 32-element block permuted by
// an XOR of low chunk-index bits chosen per (row parity, block), so that the phase-A
// 16-byte stores (a quarter-warp = 2 rows x 4 blocks, same chunk number) and the phase-B
// reads (a warp = one row, 32 consecutive columns) are free of bank conflicts.
// Tiles cover the padding of the swizzled scale layouts too (rows up to roundup(R,128),
// columns up to roundup(C,128)), so every byte of every output is written, padding as 0,
// and x^T's zero rows (R .. roundup(R,32)) are quantized from zeros like the reference.
#include "quant/mx_kernels.cuh"

namespace nvfp4::detail::quant::mx {
namespace {

constexpr int kTileRows = 64;
constexpr int kTileCols = 128;
constexpr int kRowBlocks = kTileCols / kBlock;  // 4 row blocks per tile row
static_assert(kTileRows * kRowBlocks == kThreads, "phase A: one row block per thread");
static_assert(kTileCols * (kTileRows / kBlock) == kThreads, "phase B: one column block per thread");

struct Args {
  const void* x;           // [rows, cols]
  int64_t rows, cols;      // cols % 32 == 0
  int64_t nb;              // cols / 32: scale columns of the rowwise output
  int64_t rp;              // roundup(rows, 32): width of x^T
  int64_t ncs;             // rp / 32: scale columns of the columnwise output
  // rowwise (rdata == nullptr: not requested)
  uint8_t* rdata;          // [rows, cols/2]
  uint8_t* rscales;        // linear [rows, nb] or swizzled [roundup(rows,128), roundup(nb,4)]
  uint32_t rrule;
  // columnwise (cdata == nullptr: not requested)
  uint8_t* cdata;          // [cols, rp/2]
  uint8_t* cscales;        // linear [cols, ncs] or swizzled [roundup(cols,128), roundup(ncs,4)]
  uint32_t crule;
  int swizzled;
  core::PhiloxKeys keys;   // round keys of the seed (in the constant bank, like every argument)
  uint64_t offset;
  const uint64_t* offset_device;  // optional: added to offset, read when the kernel runs
  int64_t tiles_c, tiles;  // tile grid (columns of tiles, total)
};

template <class T>
struct Smem {
  static constexpr int kRowBytes = kTileCols * T::kBytes;
  uint8_t buf[kTileRows * kRowBytes];
};

// The XOR applied to the chunk index of block `blk` in tile row `r` (stays inside the block).
template <class T>
__device__ __forceinline__ int chunk_xor(int r, int blk) {
  if constexpr (T::kBytes == 4) return (blk & 3) | ((r & 1) << 2);  // 8 chunks a block
  else return ((blk >> 1) & 1) | ((r & 1) << 1);                     // 4 chunks a block
}

// Byte offset of element (r, c) of the tile in shared memory.
template <class T>
__device__ __forceinline__ int elem_offset(int r, int c) {
  const int byte = c * T::kBytes;
  const int chunk = (byte >> 4) ^ chunk_xor<T>(r, c / kBlock);
  return r * Smem<T>::kRowBytes + (chunk << 4) + (byte & 15);
}

template <class T>
__device__ __forceinline__ float smem_elem(const uint8_t* buf, int r, int c) {
  if constexpr (T::kBytes == 4) {
    return *reinterpret_cast<const float*>(buf + elem_offset<T>(r, c));
  } else {
    return lo_f<T>(*reinterpret_cast<const uint16_t*>(buf + elem_offset<T>(r, c)));
  }
}

template <class T, bool kRowSR, bool kColSR>
__global__ void __launch_bounds__(kThreads) mx_quantize_kernel(const Args a) {
  __shared__ __align__(16) Smem<T> sm;
  const bool do_row = a.rdata != nullptr, do_col = a.cdata != nullptr;
  const uint64_t offset = (kRowSR || kColSR) ? a.offset + (a.offset_device ? *a.offset_device : 0u) : 0u;
  const char* x = static_cast<const char*>(a.x);
  const int t = threadIdx.x;
  const int ra = t / kRowBlocks, ba = t % kRowBlocks;  // phase A: row block (ra, ba)
  const int cb = t % kTileCols, kb = t / kTileCols;    // phase B: column cb, column block kb
  // Padded extents of the swizzled scale matrices (their padding is written as 0).
  const int64_t r_sw_rows = core::swizzled_rows(a.rows), r_sw_cols = core::swizzled_cols(a.nb);
  const int64_t c_sw_rows = core::swizzled_rows(a.cols), c_sw_cols = core::swizzled_cols(a.ncs);

  for (int64_t tile = blockIdx.x; tile < a.tiles; tile += gridDim.x) {
    const int64_t tr = tile / a.tiles_c, tc = tile % a.tiles_c;

    // ---- phase A: one row block ----
    {
      const int64_t r = tr * kTileRows + ra, b = tc * kRowBlocks + ba;
      const bool valid = r < a.rows && b < a.nb;
      RawBlock<T, kBlock> raw;
      if (valid) {
        load_block<T>(raw, x + (static_cast<uint64_t>(r) * a.cols + b * kBlock) * T::kBytes);
      } else {
        zero_block<T>(raw);  // x^T's padding rows (and columns past x, never stored) are zeros
      }
      if (do_col) {
        const int sx = chunk_xor<T>(ra, ba);
#pragma unroll
        for (int i = 0; i < Layout<T, kBlock>::kChunks; ++i)
          *reinterpret_cast<uint4*>(sm.buf + ra * Smem<T>::kRowBytes +
                                    ((ba * Layout<T, kBlock>::kChunks + i) ^ sx) * 16) = raw.c[i];
      }
      if (do_row) {
        if (valid) {
          float v[kBlock];
          to_float<T>(raw, v);
          const uint64_t e0 = static_cast<uint64_t>(r) * a.cols + b * kBlock;  // Philox index of v[0]
          const Encoded o = encode_block<kRowSR>(v, a.rrule, a.keys, offset, e0);
          *reinterpret_cast<uint4*>(a.rdata + e0 / 2) = o.codes;
          a.rscales[a.swizzled ? core::swizzle_offset(r, b, a.nb) : r * a.nb + b] = static_cast<uint8_t>(o.scale);
        } else if (a.swizzled && r < r_sw_rows && b < r_sw_cols) {
          a.rscales[core::swizzle_offset(r, b, a.nb)] = 0;
        }
      }
    }

    // ---- phase B: one column block of x^T ----
    if (do_col) {
      __syncthreads();
      const int64_t c = tc * kTileCols + cb, k = tr * (kTileRows / kBlock) + kb;
      if (c < a.cols && k < a.ncs) {
        float v[kBlock];
#pragma unroll
        for (int i = 0; i < kBlock; ++i) v[i] = smem_elem<T>(sm.buf, kb * kBlock + i, cb);
        const uint64_t e0 = static_cast<uint64_t>(c) * a.rp + k * kBlock;  // Philox index in x^T
        const Encoded o = encode_block<kColSR>(v, a.crule, a.keys, offset, e0);
        *reinterpret_cast<uint4*>(a.cdata + e0 / 2) = o.codes;
        a.cscales[a.swizzled ? core::swizzle_offset(c, k, a.ncs) : c * a.ncs + k] = static_cast<uint8_t>(o.scale);
      } else if (a.swizzled && c < c_sw_rows && k < c_sw_cols) {
        a.cscales[core::swizzle_offset(c, k, a.ncs)] = 0;
      }
      __syncthreads();  // the next tile's phase A overwrites the shared tile
    }
  }
}

template <class T, bool kRowSR, bool kColSR>
nvfp4_status_t run(const Args& a, cudaStream_t stream) {
  auto kernel = mx_quantize_kernel<T, kRowSR, kColSR>;
  kernel<<<persistent_grid(kernel, kThreads, 0, a.tiles), kThreads, 0, stream>>>(a);
  return check_launch("nvfp4 MXFP4 quantize kernel");
}

template <class T>
nvfp4_status_t dispatch(const Args& a, bool row_sr, bool col_sr, cudaStream_t stream) {
  if (row_sr) return col_sr ? run<T, true, true>(a, stream) : run<T, true, false>(a, stream);
  return col_sr ? run<T, false, true>(a, stream) : run<T, false, false>(a, stream);
}

}  // namespace
}  // namespace nvfp4::detail::quant::mx

namespace nvfp4::detail {

nvfp4_status_t cuda_mx_quantize(const MxQuantJob& job, nvfp4_stream_t s) {
  using namespace quant::mx;
  const cudaStream_t stream = reinterpret_cast<cudaStream_t>(s);
  if (job.rows == 0 || job.cols == 0 || (!job.row.data && !job.col.data)) return NVFP4_SUCCESS;
  Args a{};
  a.x = job.x;
  a.rows = job.rows;
  a.cols = job.cols;
  a.nb = job.cols / kBlock;
  a.rp = mx_padded_rows(job.rows);
  a.ncs = a.rp / kBlock;
  a.rdata = job.row.data;
  a.rscales = job.row.scales;
  a.rrule = job.row.rule;
  a.cdata = job.col.data;
  a.cscales = job.col.scales;
  a.crule = job.col.rule;
  a.swizzled = job.swizzled;
  a.keys = core::philox_keys(job.seed);
  a.offset = job.offset;
  a.offset_device = job.offset_device;
  // Rows and columns to cover: the data, and the padding of the swizzled scales.
  const int64_t rows_ext = job.swizzled ? core::swizzled_rows(job.rows) : a.rp;
  const int64_t cols_ext = job.swizzled ? core::round_up(job.cols, 128) : job.cols;
  const int64_t tiles_r = (rows_ext + kTileRows - 1) / kTileRows;
  a.tiles_c = (cols_ext + kTileCols - 1) / kTileCols;
  a.tiles = tiles_r * a.tiles_c;
  const bool row_sr = job.row.data && job.row.rounding == NVFP4_ROUND_STOCHASTIC;
  const bool col_sr = job.col.data && job.col.rounding == NVFP4_ROUND_STOCHASTIC;
  switch (job.dtype) {
    case NVFP4_DTYPE_FLOAT32: return dispatch<quant::F32>(a, row_sr, col_sr, stream);
    case NVFP4_DTYPE_FLOAT16: return dispatch<quant::F16>(a, row_sr, col_sr, stream);
    case NVFP4_DTYPE_BFLOAT16: return dispatch<quant::BF16>(a, row_sr, col_sr, stream);
    default: return fail(NVFP4_ERROR_INVALID_ARGUMENT, "nvfp4 MXFP4 quantize: unsupported input dtype");
  }
}

}  // namespace nvfp4::detail
