// Gather rows on the GPU (nvfp4.h's gather section); cpu/gather.cpp is the reference, bit for
// bit. Each entry point is one kernel, one pass over its input:
//  - gather_quantize: a warp quantizes a band of 16 rows x 4 tiles (64 columns). Lane (q, h)
//    holds rows q and q + 8 of tile column h, so that each row's 4 blocks are 256 contiguous
//    bytes of fp32 (128 of a 16-bit dtype) read by 4 neighbouring lanes, and the tile amax is a
//    shuffle max over the 8 lanes of one tile column. Each lane then encodes its two blocks
//    (the per-block step of the tile kernel: quant/common.cuh) and writes their codes and the
//    tile's scale into the two rows. Nothing but the encode table is shared.
//  - gather_assemble: the first CTAs take 64x64 elements of W each: one read of the rows'
//    codes, copied to W's rowwise data and transposed through shared memory into W^T's (a byte
//    of W^T holds rows 2p and 2p+1 of one column of W). The CTAs after them write the swizzled
//    scales of both orientations, four output bytes a thread, every byte of the padded layouts
//    once (padding 0), and the two amaxes. The scales are 1/8 of the code bytes.
#include <algorithm>

#include "gather.h"
#include "quant/common.cuh"

namespace nvfp4::detail::quant {
namespace {

// ---- quantization ----------------------------------------------------------------------
struct QuantArgs {
  const void* x;        // [rows, cols]
  int64_t rows, cols;   // rows % 16 == 0, cols % 16 == 0
  int64_t nb;           // cols / 16
  const float* amax;
  uint8_t* out;         // [>= rows, row_bytes]
  int64_t row_bytes;
  int64_t groups;       // ceil(nb / 4): 4-tile column groups of a band
  int64_t units;        // rows / 16 * groups
};

// 8 code bytes at p (4-byte aligned when `aligned`).
__device__ __forceinline__ void store_codes(uint8_t* p, const Encoded& e, bool aligned) {
  if (aligned) {
    reinterpret_cast<uint32_t*>(p)[0] = e.lo;
    reinterpret_cast<uint32_t*>(p)[1] = e.hi;
  } else {
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      p[b] = static_cast<uint8_t>(e.lo >> (8 * b));
      p[4 + b] = static_cast<uint8_t>(e.hi >> (8 * b));
    }
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads) gather_quantize_kernel(const QuantArgs a) {
  __shared__ EncodeTable tab;
  const core::GlobalScale gs = core::make_global_scale(*a.amax);
  const TensorScale ts = make_tensor_scale(gs);
  fill_encode_table(tab, gs.dec);
  __syncthreads();

  const int lane = threadIdx.x & 31, q = lane & 7, h = lane >> 3;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (kThreads / 32);
  const char* x = static_cast<const char*>(a.x);
  const int64_t cb = a.cols / 2;
  const bool aligned = a.row_bytes % 4 == 0;  // out is 16-byte aligned (checked by the API)
  const core::PhiloxKeys none{};               // round to nearest: no random bits

  for (int64_t u = static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + (threadIdx.x >> 5); u < a.units; u += warps) {
    const int64_t ti = u / a.groups, j = (u % a.groups) * 4 + h;
    const bool ok = j < a.nb;  // the last group of a band may have fewer than 4 tiles
    RawBlock<T> b[2];
    uint32_t m = 0u;
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const int64_t r = ti * 16 + q + 8 * k;
      if (ok) {
        load_block<T>(b[k], x + (r * a.cols + j * kBlock) * T::kBytes);
        m = max(m, raw_absmax_bits<T>(b[k]));
      }
    }
    // the tile's amax (bits of a magnitude: NaN wins) over the 8 lanes of its column
#pragma unroll
    for (int o = 1; o < 8; o <<= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (!ok) continue;
    const uint32_t s = block_scale_byte(m, ts);
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      float v[kBlock];
      to_float<T>(b[k], v);
      const Encoded e = encode_with_scale<false>(v, s, tab, none, 0, 0);
      uint8_t* row = a.out + (ti * 16 + q + 8 * k) * a.row_bytes;
      store_codes(row + j * 8, e, aligned);
      row[cb + j] = static_cast<uint8_t>(s);
    }
  }

  // the zero bytes past each row's scales
  const int64_t pad = a.row_bytes - cb - a.nb;
  if (pad > 0) {
    const int64_t n = a.rows * pad;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * kThreads)
      a.out[(i / pad) * a.row_bytes + cb + a.nb + i % pad] = 0;
  }
}

// ---- assembly --------------------------------------------------------------------------
constexpr int kTile = 64;               // elements of W per side of a code tile
constexpr int kSmemRow = kTile / 2 + 1;  // bytes; the odd stride spreads a column over the banks

struct AssembleArgs {
  const uint8_t* in;    // [>= n, row_bytes]
  int64_t row_bytes;
  int64_t n, k;
  const float* amax;
  uint8_t* rdata;       // [n, k/2] or null
  uint8_t* rscales;     // swizzled [roundup(n,128), roundup(k/16,4)]
  float* ramax;
  uint8_t* cdata;       // [k, n/2] or null
  uint8_t* cscales;     // swizzled [roundup(k,128), roundup(n/16,4)]
  float* camax;
  int64_t tiles_c;      // ceil(k / 64)
  int64_t code_ctas;    // ceil(n / 64) * tiles_c
  int64_t rwords, cwords;  // 4-byte words of the two swizzled scale buffers (0: not written)
};

// 4 bytes of a swizzled [roundup(rows,128), cp] layout starting at byte 4w: row r, columns c..c+3.
__device__ __forceinline__ void swizzled_word(int64_t w, int64_t cp, int64_t& r, int64_t& c) {
  const int64_t o = 4 * w, tile = o / 512, in_tile = o % 512;
  r = (tile / (cp / 4)) * 128 + ((in_tile % 16) / 4) * 32 + in_tile / 16;
  c = (tile % (cp / 4)) * 4;
}

__global__ void __launch_bounds__(kThreads) gather_assemble_kernel(const AssembleArgs a) {
  const int t = threadIdx.x;
  const int64_t cb = a.k / 2;
  if (static_cast<int64_t>(blockIdx.x) < a.code_ctas) {
    __shared__ uint8_t tile[kTile][kSmemRow];
    const int64_t r0 = (blockIdx.x / a.tiles_c) * kTile, c0 = (blockIdx.x % a.tiles_c) * kTile;
    // 8 code bytes (16 elements) of row lr: every row and every 8-byte chunk lies wholly
    // inside W or wholly outside (n % 16 == 0, k % 16 == 0)
    const int lr = t >> 2, ch = t & 3;
    const int64_t byte0 = c0 / 2 + 8 * ch;
    const bool ok = r0 + lr < a.n && byte0 < cb;
    uint32_t lo = 0u, hi = 0u;
    if (ok) {
      const uint8_t* src = a.in + (r0 + lr) * a.row_bytes + byte0;
      if (a.row_bytes % 8 == 0) {  // in is 16-byte aligned (checked by the API)
        const uint2 v = *reinterpret_cast<const uint2*>(src);
        lo = v.x;
        hi = v.y;
      } else {
#pragma unroll
        for (int b = 0; b < 4; ++b) {
          lo |= static_cast<uint32_t>(src[b]) << (8 * b);
          hi |= static_cast<uint32_t>(src[4 + b]) << (8 * b);
        }
      }
      if (a.rdata) *reinterpret_cast<uint2*>(a.rdata + (r0 + lr) * cb + byte0) = make_uint2(lo, hi);
    }
    if (!a.cdata) return;
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      tile[lr][8 * ch + b] = static_cast<uint8_t>(lo >> (8 * b));
      tile[lr][8 * ch + 4 + b] = static_cast<uint8_t>(hi >> (8 * b));
    }
    __syncthreads();
    // W^T row c0 + lc, bytes of W rows r0 + 16 pc .. + 15 (8 bytes: one 16-row tile)
    const int lc = t >> 2, pc = t & 3;
    if (c0 + lc < a.k && r0 + 16 * pc < a.n) {
      uint32_t w[2] = {0u, 0u};
      const int shift = 4 * (lc & 1);
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        const uint32_t nib = (tile[16 * pc + i][lc >> 1] >> shift) & 0xFu;
        w[i >> 3] |= nib << (4 * (i & 7));
      }
      *reinterpret_cast<uint2*>(a.cdata + (c0 + lc) * (a.n / 2) + r0 / 2 + 8 * pc) = make_uint2(w[0], w[1]);
    }
    return;
  }

  // scales and amaxes
  const int64_t nb = a.k / 16, tb = a.n / 16;
  const int64_t first = (static_cast<int64_t>(blockIdx.x) - a.code_ctas) * kThreads + t;
  const int64_t stride = (static_cast<int64_t>(gridDim.x) - a.code_ctas) * kThreads;
  if (first == 0) {
    if (a.ramax) *a.ramax = *a.amax;
    if (a.camax) *a.camax = *a.amax;
  }
  const int64_t rcp = (nb + 3) / 4 * 4, ccp = (tb + 3) / 4 * 4;
  for (int64_t w = first; w < a.rwords + a.cwords; w += stride) {
    int64_t r, c;
    uint32_t v = 0u;
    if (w < a.rwords) {  // W: block (r, c) is row r's scale c
      swizzled_word(w, rcp, r, c);
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (r < a.n && c + e < nb) v |= static_cast<uint32_t>(a.in[r * a.row_bytes + cb + c + e]) << (8 * e);
      reinterpret_cast<uint32_t*>(a.rscales)[w] = v;
    } else {  // W^T: block (r, b) is tile (b, r / 16)'s scale, from the tile's first row
      swizzled_word(w - a.rwords, ccp, r, c);
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (r < a.k && c + e < tb) v |= static_cast<uint32_t>(a.in[16 * (c + e) * a.row_bytes + cb + r / 16]) << (8 * e);
      reinterpret_cast<uint32_t*>(a.cscales)[w - a.rwords] = v;
    }
  }
}

template <class T>
nvfp4_status_t launch_quantize(const QuantArgs& a, cudaStream_t stream) {
  auto kernel = gather_quantize_kernel<T>;
  // one warp per unit; enough CTAs for the padding loop when there are few units
  const int64_t work = std::max<int64_t>((a.units + kThreads / 32 - 1) / (kThreads / 32), 1);
  const unsigned grid = persistent_grid(kernel, kThreads, 0, work);
  kernel<<<grid, kThreads, 0, stream>>>(a);
  return check_launch("nvfp4 gather rows quantize kernel");
}

}  // namespace
}  // namespace nvfp4::detail::quant

namespace nvfp4::detail {

nvfp4_status_t cuda_gather_quantize(const GatherQuantJob& j, nvfp4_stream_t s) {
  using namespace quant;
  const cudaStream_t stream = reinterpret_cast<cudaStream_t>(s);
  // rows past x's: zero
  if (nvfp4_status_t st = memset_async(j.out + j.rows * j.row_bytes,
                                       static_cast<size_t>((j.rows_out - j.rows) * j.row_bytes), stream,
                                       "nvfp4 gather rows");
      st != NVFP4_SUCCESS)
    return st;
  if (j.rows == 0) return NVFP4_SUCCESS;
  if (j.cols == 0) return memset_async(j.out, static_cast<size_t>(j.rows * j.row_bytes), stream, "nvfp4 gather rows");
  QuantArgs a{};
  a.x = j.x;
  a.rows = j.rows;
  a.cols = j.cols;
  a.nb = j.cols / kBlock;
  a.amax = j.amax;
  a.out = j.out;
  a.row_bytes = j.row_bytes;
  a.groups = (a.nb + 3) / 4;
  a.units = j.rows / 16 * a.groups;
  switch (j.dtype) {
    case NVFP4_DTYPE_FLOAT32: return launch_quantize<F32>(a, stream);
    case NVFP4_DTYPE_FLOAT16: return launch_quantize<F16>(a, stream);
    case NVFP4_DTYPE_BFLOAT16: return launch_quantize<BF16>(a, stream);
    default: return fail(NVFP4_ERROR_INVALID_ARGUMENT, "nvfp4 gather rows quantize: unsupported input dtype");
  }
}

nvfp4_status_t cuda_gather_assemble(const GatherAssembleJob& j, nvfp4_stream_t s) {
  using namespace quant;
  const cudaStream_t stream = reinterpret_cast<cudaStream_t>(s);
  AssembleArgs a{};
  a.in = j.in;
  a.row_bytes = j.row_bytes;
  a.n = j.n;
  a.k = j.k;
  a.amax = j.amax;
  a.rdata = j.row.data;
  a.rscales = j.row.scales;
  a.ramax = j.row.amax;
  a.cdata = j.col.data;
  a.cscales = j.col.scales;
  a.camax = j.col.amax;
  a.tiles_c = (j.k + kTile - 1) / kTile;
  a.code_ctas = ((j.n + kTile - 1) / kTile) * a.tiles_c;
  a.rwords = j.row.data ? core::swizzled_size(j.n, j.k / 16) / 4 : 0;
  a.cwords = j.col.data ? core::swizzled_size(j.k, j.n / 16) / 4 : 0;
  const int64_t scale_ctas = std::min<int64_t>(std::max<int64_t>((a.rwords + a.cwords + kThreads - 1) / kThreads, 1), 4096);
  const int64_t grid = a.code_ctas + scale_ctas;
  if (grid > INT32_MAX) return fail(NVFP4_ERROR_NOT_SUPPORTED, "nvfp4 gather rows assemble: weight too large for the kernel");
  gather_assemble_kernel<<<static_cast<unsigned>(grid), kThreads, 0, stream>>>(a);
  return check_launch("nvfp4 gather rows assemble kernel");
}

}  // namespace nvfp4::detail
