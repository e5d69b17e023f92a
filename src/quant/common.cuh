// Device-side pieces shared by the quantization kernels: input element types, 16-byte
// loads, the per-block quantization step and NaN-propagating max reductions (launch
// geometry comes from quant/grid.h).
//
// The format rules (global/block scales, E4M3, Philox, RHT, swizzle) come from src/core;
// the only thing re-expressed here is the E2M1 rounding of an already-scaled value,
// which the reference writes as a chain of comparisons. codec.cuh carries an exact,
// cheaper form of it (see there for why it is identical).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "core/block.h"
#include "core/e4m3.h"
#include "core/rht.h"
#include "core/scale.h"
#include "core/swizzle.h"
#include "internal.h"
#include "quant/codec.cuh"
#include "quant/grid.h"

namespace nvfp4::detail::quant {

constexpr int kBlock = core::kBlock;  // 16 elements per block scale

// ---- input element types -------------------------------------------------------------
// A 16-byte chunk holds kPerChunk elements; a block of N elements (16 here, 32 for the
// MXFP4 kernels, mx_kernels.cuh) is kChunks chunks.
struct F32 {
  static constexpr int kBytes = 4;
};
struct F16 {
  static constexpr int kBytes = 2;
};
struct BF16 {
  static constexpr int kBytes = 2;
};

template <class T, int N = kBlock>
struct Layout {
  static constexpr int kPerChunk = 16 / T::kBytes;
  static constexpr int kChunks = N / kPerChunk;  // chunks per N-element block
};

// Two 16-bit elements packed in a word -> float. bf16 is a shift (what bf16_to_float does);
// fp16 uses the hardware conversion, exact for every finite value and infinity. A NaN
// element may come out with another payload than core::fp16_to_float gives, which cannot
// show: a NaN makes its block's encode factor NaN and every code of the block 0x7, and the
// amaxes are taken from the raw bits, never from these floats.
template <class T>
__device__ __forceinline__ float lo_f(uint32_t w);
template <class T>
__device__ __forceinline__ float hi_f(uint32_t w);
template <>
__device__ __forceinline__ float lo_f<BF16>(uint32_t w) {
  return core::bf16_to_float(static_cast<uint16_t>(w));
}
template <>
__device__ __forceinline__ float hi_f<BF16>(uint32_t w) {
  return __uint_as_float(w & 0xffff0000u);
}
template <>
__device__ __forceinline__ float lo_f<F16>(uint32_t w) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(w)));
}
template <>
__device__ __forceinline__ float hi_f<F16>(uint32_t w) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(w >> 16)));
}

// Chunks of one N-element block, raw.
template <class T, int N = kBlock>
struct RawBlock {
  uint4 c[Layout<T, N>::kChunks];
};

template <class T, int N>
__device__ __forceinline__ void load_block(RawBlock<T, N>& b, const void* p) {
  const uint4* q = static_cast<const uint4*>(p);
#pragma unroll
  for (int i = 0; i < Layout<T, N>::kChunks; ++i) b.c[i] = __ldg(q + i);
}

template <class T, int N>
__device__ __forceinline__ void zero_block(RawBlock<T, N>& b) {
#pragma unroll
  for (int i = 0; i < Layout<T, N>::kChunks; ++i) b.c[i] = make_uint4(0u, 0u, 0u, 0u);
}

__device__ __forceinline__ uint32_t word_of(const uint4& q, int i) {
  return i == 0 ? q.x : i == 1 ? q.y : i == 2 ? q.z : q.w;
}

template <class T, int N>
__device__ __forceinline__ void to_float(const RawBlock<T, N>& b, float (&v)[N]) {
#pragma unroll
  for (int i = 0; i < Layout<T, N>::kChunks; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t w = word_of(b.c[i], j);
      if constexpr (T::kBytes == 4) {
        v[4 * i + j] = __uint_as_float(w);
      } else {
        v[8 * i + 2 * j] = lo_f<T>(w);
        v[8 * i + 2 * j + 1] = hi_f<T>(w);
      }
    }
  }
}

// ---- NaN-propagating maxima --------------------------------------------------------
// All maxima are of magnitudes, so they can be taken on bit patterns: for non-negative
// floats the order of the bits is the order of the values, and any NaN (sign cleared)
// lies above +inf. The result is NaN exactly when some input is NaN (its payload may be
// another NaN's than the reference's first one; only NaN-ness is used anywhere).

// max |v| of a raw 16-element block, as fp32 bits.
template <class T>
__device__ __forceinline__ uint32_t raw_absmax_bits(const RawBlock<T>& b) {
  if constexpr (T::kBytes == 4) {
    uint32_t m = 0u;
#pragma unroll
    for (int i = 0; i < Layout<T>::kChunks; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) m = max(m, word_of(b.c[i], j) & 0x7fffffffu);
    return m;
  } else {
    uint32_t m = 0u;  // two 16-bit maxima side by side
#pragma unroll
    for (int i = 0; i < Layout<T>::kChunks; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) m = __vmaxu2(m, word_of(b.c[i], j) & 0x7fff7fffu);
    const uint32_t h = max(m & 0xffffu, m >> 16);
    if constexpr (std::is_same_v<T, BF16>) {
      return h << 16;
    } else {
      return __float_as_uint(core::fp16_to_float(static_cast<uint16_t>(h)));
    }
  }
}

__device__ __forceinline__ float fmax_nan(float a, float b) {
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

__device__ __forceinline__ uint32_t absmax_bits(const float (&v)[kBlock]) {
  float m = 0.0f;
#pragma unroll
  for (int i = 0; i < kBlock; ++i) m = fmax_nan(m, fabsf(v[i]));
  return __float_as_uint(m) & 0x7fffffffu;
}

// The max of each of bits[0..N-1] over the CTA's threads, returned to every thread (N
// maxima in one pair of barriers). Called by every thread of the CTA at the same point: it
// synchronizes the CTA.
template <int N>
__device__ __forceinline__ void block_max_bits(uint32_t (&bits)[N]) {
  __shared__ uint32_t red[N][32];
  __syncthreads();  // red may still be read by a previous call
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
#pragma unroll
    for (int i = 0; i < N; ++i) bits[i] = max(bits[i], __shfl_xor_sync(0xffffffffu, bits[i], o));
  if ((threadIdx.x & 31) == 0)
#pragma unroll
    for (int i = 0; i < N; ++i) red[i][threadIdx.x >> 5] = bits[i];
  __syncthreads();
  const int nw = (blockDim.x + 31) >> 5;
  for (int w = 0; w < nw; ++w)
#pragma unroll
    for (int i = 0; i < N; ++i) bits[i] = max(bits[i], red[i][w]);
}

__device__ __forceinline__ uint32_t block_max_bits(uint32_t bits) {
  uint32_t b[1] = {bits};
  block_max_bits(b);
  return b[0];
}

// Block-wide max of `bits`, then one atomicMax per destination dst0/dst1, and the CTA's
// maximum stored as its partial part0[blockIdx.x] / part1[blockIdx.x] (the amax pass with a
// workspace; stored even when 0, so no slot keeps an earlier call's value). atomicMax on the
// bits of non-negative floats is a float max that lets NaN win; so is the integer max of the
// partials. Called by every thread of the CTA at the same point.
__device__ __forceinline__ void block_reduce_amax(uint32_t bits, float* dst0, float* dst1, uint32_t* part0 = nullptr,
                                                  uint32_t* part1 = nullptr) {
  bits = block_max_bits(bits);
  if (threadIdx.x == 0) {
    if (dst0) atomicMax(reinterpret_cast<unsigned int*>(dst0), bits);
    if (dst1) atomicMax(reinterpret_cast<unsigned int*>(dst1), bits);
    if (part0) part0[blockIdx.x] = bits;
    if (part1) part1[blockIdx.x] = bits;
  }
}

// The tensor amaxes a quantize kernel starts from, one per output it writes (the tile kernel
// with both orientations has two: their partials are read in one loop and reduced in one
// block-wide pass). Output i's is *amax[i], where the amax pass reduced into it with atomics;
// else (parts[i] set) the max of the n[i] partials that pass left in the workspace, one per
// CTA, which CTA 0 also stores into *amax[i] so that the output holds the tensor amax once the
// kernel is done (no kernel of the call reads it in between). Called by every thread of the
// CTA at the same point: it synchronizes the CTA when it reduces partials.
template <int N>
__device__ __forceinline__ void tensor_amaxes(float* const (&amax)[N], const uint32_t* const (&parts)[N],
                                              const int (&n)[N], float (&out)[N]) {
  uint32_t m[N];
  bool any = false;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    m[i] = 0u;
    if (parts[i] == nullptr) continue;
    any = true;
    for (int j = threadIdx.x; j < n[i]; j += blockDim.x) m[i] = max(m[i], parts[i][j]);
  }
  if (any) block_max_bits(m);
#pragma unroll
  for (int i = 0; i < N; ++i) {
    out[i] = parts[i] != nullptr ? __uint_as_float(m[i]) : *amax[i];
    if (parts[i] != nullptr && blockIdx.x == 0 && threadIdx.x == 0) *amax[i] = out[i];
  }
}

__device__ __forceinline__ float tensor_amax(float* amax, const uint32_t* parts, int n) {
  float* const a[1] = {amax};
  const uint32_t* const p[1] = {parts};
  const int c[1] = {n};
  float out[1];
  tensor_amaxes(a, p, c, out);
  return out[0];
}

// ---- the per-block step --------------------------------------------------------------
// What a CTA derives once from a tensor amax.
struct TensorScale {
  float enc;        // S_enc
  float enc_div6;   // S_enc * (1/6), the factor of core::block_scale_e4m3
};

__device__ __forceinline__ TensorScale make_tensor_scale(const core::GlobalScale& gs) {
  return {gs.enc, gs.enc * (1.0f / 6.0f)};
}

// core::block_scale_e4m3(bamax, S_enc): e4m3(clamp(min(bamax * (S_enc/6), FLT_MAX), +-448)).
// Its argument is >= 0 or NaN, and on that domain the saturating hardware conversion
// gives the same byte as clamping and then core::e4m3_encode (checked for every such
// fp32 value against NVIDIA's host reference of the instruction): values above 448 and
// +inf saturate to 0x7e, NaN gives 0x7f.
__device__ __forceinline__ uint32_t block_scale_byte(uint32_t bamax_bits, const TensorScale& ts) {
  const float v = __uint_as_float(bamax_bits) * ts.enc_div6;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  unsigned short r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.0f), "f"(v));
  return r & 0xffu;
#else
  return core::block_scale_e4m3(__uint_as_float(bamax_bits), ts.enc);
#endif
}

// Per-CTA table of encode factors, one per E4M3 scale byte: e = block_encode_factor(s, S_dec)
// computed once per byte value instead of a division per block.
struct EncodeTable {
  float e[256];
};

__device__ __forceinline__ void fill_encode_table(EncodeTable& t, float s_dec) {
  for (int i = threadIdx.x; i < 256; i += blockDim.x)
    t.e[i] = core::block_encode_factor(static_cast<uint8_t>(i), s_dec);
}

// The table with every factor times 1/4, for blocks whose values come 4x too large (an RHT
// without its final 1/4: see quarter_foldable).
__device__ __forceinline__ void fill_encode_table_quarter(EncodeTable& t, float s_dec) {
  for (int i = threadIdx.x; i < 256; i += blockDim.x)
    t.e[i] = core::block_encode_factor(static_cast<uint8_t>(i), s_dec) * 0.25f;
}

// Whether a block's RHT may leave its final multiply by 1/4 to the block's scale and encode
// factors: quantizing 4v with the factors of ts and tab times 1/4 then gives the codes and
// scale byte of v, bit for bit, when every product by 1/4 involved is exact. 4v -> v is exact
// for the butterfly's sums of a BF16 block (multiples of 2^-133: a quarter stays on fp32's
// grid, subnormals included; infinities and NaN stay what they are); the factors' quarters
// are exact while no factor falls below 2^-124 — the smallest encode factor is that of the
// largest scale (448), ~6 / tensor amax, so this fails only for a tensor amax above ~1.3e38
// (or a NaN or negative given one). Then each product x * e' equals (x / 4) * e exactly
// before its one rounding, and likewise the block amax times the scale factor. Uniform over
// a CTA (a function of the tensor's scale alone).
__device__ __forceinline__ bool quarter_foldable(const TensorScale& ts, float s_dec) {
  const float e_min = core::block_encode_factor(static_cast<uint8_t>(0x7e), s_dec);
  return e_min >= 0x1p-124f && ts.enc_div6 >= 0x1p-124f;
}

struct Encoded {
  uint32_t lo, hi;  // 16 codes, element 0 in the low nibble of lo
  uint32_t scale;   // E4M3 byte
};

// The decoded values of an encoded block (nvfp4_quantize_decoded): decode16_e4m3_bf16
// (codec.cuh), the decode the GEMM's decode pass runs, of the block's codes with its E4M3
// scale. 32 bytes at dst, 16-byte aligned.
__device__ __forceinline__ void store_decoded(void* dst, const Encoded& o) {
  uint32_t packed[8];
  decode16_e4m3_bf16(o.lo, o.hi, o.scale, packed);
  uint4* d = static_cast<uint4*>(dst);
  d[0] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
  d[1] = make_uint4(packed[4], packed[5], packed[6], packed[7]);
}

// store_decoded for a row block of a 128 x 64 tile whose lanes hold row blocks as (ri, bq) =
// (lane / 4, lane % 4) (the rowwise and tile kernels' phase A), through the warp's staging
// area in shared memory (kRowStageChunks 16-byte chunks: 8 rows x 8 a warp): the quad of a
// tile row stages its 4 blocks, then lane bq stores chunks bq and 4 + bq, so that two lanes
// fill each 32-byte sector in one store instruction (a lane storing its own block writes
// every sector it touches in two halves, one per instruction: twice the L2 write requests).
// Every lane of the warp calls it: it synchronizes the warp. row: the tile row's first
// decoded element; row_ok: the row lies inside x; blocks: how many of its 4 blocks do.
constexpr int kRowStageChunks = 64;
__device__ __forceinline__ void store_decoded_row_staged(uint4* stage, int ri, int bq, const Encoded& o,
                                                         __nv_bfloat16* row, bool row_ok, int blocks) {
  uint4* s = stage + 8 * ri;
  store_decoded(s + 2 * bq, o);
  __syncwarp();
  uint4* dst = reinterpret_cast<uint4*>(row);
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int j = 4 * i + bq;  // of block j / 2
    if (row_ok && j / 2 < blocks) dst[j] = s[j];
  }
  __syncwarp();  // before the staging area is written again
}

// Quantizes v[0..15] with the scale byte `scale`. `idx0` is the Philox index of v[0]
// and `keys` the round keys of the seed (stochastic rounding only).
template <bool kSR>
__device__ __forceinline__ Encoded encode_with_scale(const float (&v)[kBlock], uint32_t scale, const EncodeTable& tab,
                                                     const core::PhiloxKeys& keys, uint64_t offset, uint64_t idx0) {
  Encoded o;
  o.scale = scale;
  const float e = tab.e[scale];
  if constexpr (kSR) {
    // the random bytes of core::philox_block16, still packed in their four words
    const core::Philox4 p = core::philox_words16(keys, offset, idx0);
    o.lo = encode8_sr(v, e, p.v[0], p.v[1]);
    o.hi = encode8_sr(v + 8, e, p.v[2], p.v[3]);
  } else {
    o.lo = encode8_rn(v, e);
    o.hi = encode8_rn(v + 8, e);
  }
  // A NaN factor (NaN in the block or in the tensor amax) makes every x*e NaN, which
  // the reference encodes as 0x7.
  if (core::is_nan(e)) o.lo = o.hi = 0x77777777u;
  return o;
}

// Quantizes v[0..15] whose block amax is `bamax_bits`.
template <bool kSR>
__device__ __forceinline__ Encoded encode_block(const float (&v)[kBlock], uint32_t bamax_bits, const TensorScale& ts,
                                                const EncodeTable& tab, const core::PhiloxKeys& keys, uint64_t offset,
                                                uint64_t idx0) {
  return encode_with_scale<kSR>(v, block_scale_byte(bamax_bits, ts), tab, keys, offset, idx0);
}

// ---- host helpers --------------------------------------------------------------------
constexpr int kThreads = 256;

}  // namespace nvfp4::detail::quant
