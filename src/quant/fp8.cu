// CUDA kernels of nvfp4_fp8_cast (the FP8 baseline recipes) and of delayed scaling's
// history update. No host synchronization; every output byte is written.
//
//  - fp8_amax_kernel (current scaling only: the scale needs max |x| before any element is
//    cast): persistent grid, 16-element units read with 16-byte loads, two units per thread
//    in flight, an integer max of the absolute values' bits (NaN wins), one atomicMax per CTA
//    into the zeroed amax. It walks x from its end down (the end is what the kernel that
//    wrote x wrote last, still in L2); the cast then walks its row tiles up, starting on
//    what this pass read last. A cast with no amax pass (delayed scaling) walks down, from
//    the producer's last writes.
//  - fp8_cast_kernel: one CTA per 64x64 tile (a loop over row tiles past the grid's y
//    limit), 256 threads. Every thread issues its 16-byte loads first (2 for 16-bit inputs,
//    4 for float32), then derives s once (from the amax, or the delayed scale read when the
//    cast runs), casts (fp32 product, a clamp that keeps NaN, the saturating round-to-
//    nearest-even conversion, which after the clamp changes nothing), stores q with one
//    8- or 4-byte store per chunk, and puts the bytes in a shared tile. Then each thread
//    gathers 16 consecutive rows of one column from the tile and writes them to q^T as one
//    16-byte store: every warp stores whole 64-byte row segments of q^T. The shared tile's
//    words are XOR-swizzled by row group so that those column reads hit distinct banks.
//    With delayed scaling the same pass reduces max |x| (raw bits, NaN wins) and adds it
//    to *amax with one atomicMax per CTA: no amax pass.
//  - fp8_delayed_kernel: nvfp4_fp8_delayed_update, one CTA (the history is short).
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "fp8_internal.h"
#include "quant/common.cuh"

namespace nvfp4::detail::quant {
namespace {

// ---- the amax pass ------------------------------------------------------------------
template <class T>
__global__ void __launch_bounds__(kThreads) fp8_amax_kernel(const void* x, int64_t units, float* out) {
  const char* p = static_cast<const char*>(x);
  constexpr int64_t kUnitBytes = kBlock * T::kBytes;
  uint32_t m = 0u;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  // u counts from the end: unit units - 1 - u is read (descending; see the file's comment).
  const char* last = p + (units - 1) * kUnitBytes;
  for (int64_t u = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; u < units; u += 2 * stride) {
    RawBlock<T> b[2];
    load_block<T>(b[0], last - u * kUnitBytes);
    if (u + stride < units)
      load_block<T>(b[1], last - (u + stride) * kUnitBytes);
    else
      zero_block<T>(b[1]);
    m = max(m, max(raw_absmax_bits<T>(b[0]), raw_absmax_bits<T>(b[1])));
  }
  block_reduce_amax(m, out, nullptr);
}

// ---- the cast -----------------------------------------------------------------------
// One tile: kTile x kTile elements; a "chunk" is the 16 bytes of input one load brings
// (kPer elements), whose kPer output bytes one store writes.
constexpr int kTile = 64;
constexpr int kCastThreads = 256;
constexpr int kTileWords = kTile / 4;  // 32-bit words in a row of the byte tile

template <class T>
struct CastGeom {
  static constexpr int kPer = 16 / T::kBytes;                  // elements per chunk: 8 or 4
  static constexpr int kChunksRow = kTile / kPer;              // chunks per tile row
  static constexpr int kChunks = kTile * kChunksRow / kCastThreads;  // chunks per thread
  static_assert(kTile % kPer == 0 && (kTile * kChunksRow) % kCastThreads == 0, "chunks split evenly");
  static_assert(16 % kPer == 0, "cols % 16 == 0 keeps every chunk wholly inside or outside x");
};
static_assert(kCastThreads == kTile * 4, "the transposed phase: 4 threads (16 rows each) per tile column");

// The shared tile as words, row r's word w stored at w ^ swz(r). The transposed phase reads
// rows 16j + i (j = 0..3) of 8 neighbouring columns per warp: without the swizzle those
// four rows sit 4 x 16 words apart, in the same banks.
__device__ __forceinline__ int swz(int r) { return ((r >> 4) & 3) << 1; }

struct CastArgs {
  const void* x;
  int64_t rows, cols;
  int64_t tiles_r;
  float fmax, scaled_max;
  const float* scale;  // delayed scaling, else nullptr
  const float* amax;   // current scaling: max |x| from the amax pass
  float* amax_out;     // delayed scaling: max |x| is atomicMax'ed here (nullptr: not wanted)
  uint8_t* q;
  uint8_t* qt;
  float* scale_inv;
  bool qt_vec;         // rows % 16 == 0: q^T rows start 16-byte aligned
  bool ascending;      // row tiles walked up (after an amax pass), else down (see the file's comment)
};

template <bool kE5M2>
__device__ __forceinline__ uint32_t cast2(float a, float b, float s, float fmax) {
  float v0 = __fmul_rn(a, s), v1 = __fmul_rn(b, s);
  if (!isnan(v0)) v0 = fminf(fmaxf(v0, -fmax), fmax);
  if (!isnan(v1)) v1 = fminf(fmaxf(v1, -fmax), fmax);
  return static_cast<uint32_t>(__nv_cvt_float2_to_fp8x2(make_float2(v0, v1), __NV_SATFINITE,
                                                        kE5M2 ? __NV_E5M2 : __NV_E4M3));
}

// Chunk -> floats. 16-bit inputs convert exactly as core's bf16/fp16 readers (quant/common.cuh).
template <class T>
__device__ __forceinline__ void chunk_floats(const uint4& c, float (&v)[CastGeom<T>::kPer]) {
  if constexpr (T::kBytes == 4) {
    v[0] = __uint_as_float(c.x), v[1] = __uint_as_float(c.y), v[2] = __uint_as_float(c.z), v[3] = __uint_as_float(c.w);
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t w = word_of(c, j);
      v[2 * j] = lo_f<T>(w);
      v[2 * j + 1] = hi_f<T>(w);
    }
  }
}

// max |element| of a chunk as fp32 bits (raw_absmax_bits of quant/common.cuh, for one chunk).
template <class T>
__device__ __forceinline__ uint32_t chunk_absmax_bits(const uint4& c) {
  if constexpr (T::kBytes == 4) {
    return max(max(c.x & 0x7fffffffu, c.y & 0x7fffffffu), max(c.z & 0x7fffffffu, c.w & 0x7fffffffu));
  } else {
    const uint32_t m = __vmaxu2(__vmaxu2(c.x & 0x7fff7fffu, c.y & 0x7fff7fffu),
                                __vmaxu2(c.z & 0x7fff7fffu, c.w & 0x7fff7fffu));
    const uint32_t h = max(m & 0xffffu, m >> 16);
    if constexpr (std::is_same_v<T, BF16>) {
      return h << 16;
    } else {
      return __float_as_uint(core::fp16_to_float(static_cast<uint16_t>(h)));
    }
  }
}

template <class T, bool kE5M2>
__global__ void __launch_bounds__(kCastThreads) fp8_cast_kernel(const CastArgs a) {
  using G = CastGeom<T>;
  __shared__ uint32_t tile[kTile * kTileWords];
  const int tid = threadIdx.x;
  const float s = a.scale != nullptr ? *a.scale : fp8_scale(a.scaled_max, *a.amax, 1.0f);
  if (a.scale_inv != nullptr && blockIdx.x == 0 && blockIdx.y == 0 && tid == 0) *a.scale_inv = __frcp_rn(s);
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const char* x = static_cast<const char*>(a.x);
  uint32_t m = 0u;
  for (int64_t k = blockIdx.y; k < a.tiles_r; k += gridDim.y) {
    const int64_t r0 = (a.ascending ? k : a.tiles_r - 1 - k) * kTile;
    uint4 c[G::kChunks];
    bool in[G::kChunks];
#pragma unroll
    for (int i = 0; i < G::kChunks; ++i) {
      const int id = tid + i * kCastThreads, lr = id / G::kChunksRow, lc = (id % G::kChunksRow) * G::kPer;
      in[i] = r0 + lr < a.rows && c0 + lc < a.cols;
      c[i] = in[i] ? __ldg(reinterpret_cast<const uint4*>(x + ((r0 + lr) * a.cols + c0 + lc) * T::kBytes))
                   : make_uint4(0u, 0u, 0u, 0u);
    }
#pragma unroll
    for (int i = 0; i < G::kChunks; ++i) {
      const int id = tid + i * kCastThreads, lr = id / G::kChunksRow, lc = (id % G::kChunksRow) * G::kPer;
      if (a.amax_out != nullptr) m = max(m, chunk_absmax_bits<T>(c[i]));  // zeros outside x
      float v[G::kPer];
      chunk_floats<T>(c[i], v);
      uint32_t w[G::kPer / 4];
#pragma unroll
      for (int j = 0; j < G::kPer / 4; ++j)
        w[j] = cast2<kE5M2>(v[4 * j], v[4 * j + 1], s, a.fmax) |
               (cast2<kE5M2>(v[4 * j + 2], v[4 * j + 3], s, a.fmax) << 16);
      if (in[i] && a.q != nullptr) {
        uint8_t* dst = a.q + (r0 + lr) * a.cols + c0 + lc;  // 8- (or 4-) byte aligned: cols % 16 == 0
        if constexpr (G::kPer == 8)
          *reinterpret_cast<uint2*>(dst) = make_uint2(w[0], w[1]);
        else
          *reinterpret_cast<uint32_t*>(dst) = w[0];
      }
      if (a.qt != nullptr) {
        const int wi = lc / 4;  // the chunk's first word in its row; an 8-byte chunk stays contiguous
#pragma unroll
        for (int j = 0; j < G::kPer / 4; ++j) tile[lr * kTileWords + ((wi + j) ^ swz(lr))] = w[j];
      }
    }
    if (a.qt != nullptr) {
      __syncthreads();
      // thread -> (tile column lc, rows 16 g .. 16 g + 15); 4 neighbouring threads cover a column
      const int lc = tid >> 2, g = tid & 3;
      const int64_t col = c0 + lc, row = r0 + 16 * g;
      if (col < a.cols && row < a.rows) {
        // output word j: byte (lc & 3) of rows 16 g + 4 j .. + 3, gathered with three byte permutes
        const uint32_t pick = static_cast<uint32_t>(lc & 3) | static_cast<uint32_t>(4 + (lc & 3)) << 4;
        uint32_t o[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          uint32_t src[4];
#pragma unroll
          for (int b = 0; b < 4; ++b) {
            const int lr = 16 * g + 4 * j + b;
            src[b] = tile[lr * kTileWords + ((lc >> 2) ^ swz(lr))];
          }
          o[j] = __byte_perm(__byte_perm(src[0], src[1], pick), __byte_perm(src[2], src[3], pick), 0x5410);
        }
        uint8_t* dst = a.qt + col * a.rows + row;
        if (a.qt_vec && row + 16 <= a.rows) {
          *reinterpret_cast<uint4*>(dst) = make_uint4(o[0], o[1], o[2], o[3]);
        } else {
          const int64_t n = a.rows - row < 16 ? a.rows - row : 16;
          for (int b = 0; b < n; ++b) dst[b] = static_cast<uint8_t>(o[b >> 2] >> (8 * (b & 3)));
        }
      }
      __syncthreads();  // the tile is rewritten by the next row tile
    }
  }
  if (a.amax_out != nullptr) block_reduce_amax(m, a.amax_out, nullptr);
}

template <class T, bool kE5M2>
void launch_cast(const CastArgs& a, dim3 grid, cudaStream_t stream) {
  fp8_cast_kernel<T, kE5M2><<<grid, kCastThreads, 0, stream>>>(a);
}

template <class T>
nvfp4_status_t run(const Fp8Job& job, cudaStream_t stream) {
  const int64_t n = job.rows * job.cols;
  const bool current = job.scale == nullptr;
  // Current scaling: the amax pass fills *amax (cleared first). Delayed scaling: the cast
  // adds max |x| to *amax, cleared first unless the caller accumulates into it.
  if (job.amax != nullptr && !job.amax_accumulate) {
    if (cudaMemsetAsync(job.amax, 0, sizeof(float), stream) != cudaSuccess)
      return check_launch("nvfp4 fp8 cast: clearing amax");
  }
  if (current && n > 0) {
    const int64_t units = n / kBlock;
    const unsigned grid = persistent_grid(fp8_amax_kernel<T>, kThreads, 0, (units + 2 * kThreads - 1) / (2 * kThreads));
    fp8_amax_kernel<T><<<grid, kThreads, 0, stream>>>(job.x, units, job.amax);
    if (nvfp4_status_t s = check_launch("nvfp4 fp8 amax kernel"); s != NVFP4_SUCCESS) return s;
  }
  // An empty x (either extent 0, the other possibly huge) has no tiles to walk, but still
  // gets its scale_inv: one CTA whose tile loop does not run.
  const int64_t tiles_r = n == 0 ? 0 : (job.rows + kTile - 1) / kTile;
  const int64_t tiles_c = n == 0 ? 1 : (job.cols + kTile - 1) / kTile;
  if (tiles_c > 0x7fffffff) return fail(NVFP4_ERROR_INVALID_ARGUMENT, "nvfp4_fp8_cast: x has too many columns");
  CastArgs a{job.x, job.rows, job.cols, tiles_r, job.fmax, job.scaled_max, job.scale, current ? job.amax : nullptr,
             current ? nullptr : job.amax, job.q, job.qt, job.scale_inv, job.rows % 16 == 0, current};
  const int64_t grid_r = tiles_r < 1 ? 1 : tiles_r < 65535 ? tiles_r : 65535;  // the kernel loops past 65535
  const dim3 grid(static_cast<unsigned>(tiles_c), static_cast<unsigned>(grid_r));
  if (job.e5m2)
    launch_cast<T, true>(a, grid, stream);
  else
    launch_cast<T, false>(a, grid, stream);
  return check_launch("nvfp4 fp8 cast kernel");
}

// nvfp4_fp8_delayed_update: one CTA. The history's amax (a block max reduction, NaN
// counting as 0), the new scale, then the left roll in place, chunk by chunk of blockDim
// entries in increasing order: every thread reads entry i + 1 before the barrier, writes
// entry i after it, so an entry is always read before it is overwritten.
constexpr int kDelayedThreads = 256;

__global__ void __launch_bounds__(kDelayedThreads) fp8_delayed_kernel(Fp8DelayedJob j) {
  float* h = j.history;
  const int t = threadIdx.x;
  float a = 0.0f;
  if (j.most_recent) {
    a = h[0];
  } else {
    // The history's largest positive entry (NaN and non-positive entries skipped): as bits,
    // the integer max of non-negative floats is their float max.
    uint32_t m = 0u;
    for (int64_t i = t; i < j.len; i += kDelayedThreads) {
      const float v = h[i];
      if (v > 0.0f) m = max(m, __float_as_uint(v));
    }
    a = __uint_as_float(block_max_bits(m));
  }
  const float first = h[0];
  if (t == 0) *j.scale = fp8_scale(j.scaled_max, a, *j.scale);
  __syncthreads();  // every thread has read h[0] and the history's amax
  for (int64_t base = 0; base + 1 < j.len; base += kDelayedThreads) {
    const int64_t i = base + t;
    const float next = i + 1 < j.len ? h[i + 1] : 0.0f;
    __syncthreads();
    if (i + 1 < j.len) h[i] = next;
    __syncthreads();
  }
  if (t == 0) {
    h[j.len - 1] = first;
    h[0] = 0.0f;
  }
}

}  // namespace
}  // namespace nvfp4::detail::quant

namespace nvfp4::detail {

nvfp4_status_t cuda_fp8_cast(const Fp8Job& job, nvfp4_stream_t stream_in) {
  const auto stream = reinterpret_cast<cudaStream_t>(stream_in);
  switch (job.dtype) {
    case NVFP4_DTYPE_FLOAT32: return quant::run<quant::F32>(job, stream);
    case NVFP4_DTYPE_FLOAT16: return quant::run<quant::F16>(job, stream);
    case NVFP4_DTYPE_BFLOAT16: return quant::run<quant::BF16>(job, stream);
    default: return fail(NVFP4_ERROR_INVALID_ARGUMENT, "nvfp4_fp8_cast: unsupported input dtype");
  }
}

nvfp4_status_t cuda_fp8_delayed_update(const Fp8DelayedJob& job, nvfp4_stream_t stream) {
  quant::fp8_delayed_kernel<<<1, quant::kDelayedThreads, 0, reinterpret_cast<cudaStream_t>(stream)>>>(job);
  return quant::check_launch("nvfp4 fp8 delayed-scaling update kernel");
}

}  // namespace nvfp4::detail
