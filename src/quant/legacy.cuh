// Helpers of the legacy kernels (legacy_rowwise.cu, legacy_tile.cu): the stochastic
// rounding of the previous contract, 24 random bits per element taken from the element's
// own Philox word (one Philox4x32-10 call per 4 elements, counter idx / 4, word idx % 4),
// rounded up iff (r >> 8) * 2^-24 < f, and the RN encoder of that time (same codes as
// today's). Timing comparisons only; see legacy_rowwise.cu.
#pragma once

#include "quant/common.cuh"

namespace nvfp4::detail::quant::legacy {

// Philox4x32-10 as the kernels computed it then (64-bit products, keys bumped per round).
__device__ __forceinline__ core::Philox4 philox_old(uint64_t seed, uint64_t offset, uint64_t group) {
  uint32_t c0 = static_cast<uint32_t>(group), c1 = static_cast<uint32_t>(group >> 32);
  uint32_t c2 = static_cast<uint32_t>(offset), c3 = static_cast<uint32_t>(offset >> 32);
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
#pragma unroll
  for (int r = 0; r < 10; ++r) {
    const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0, p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0, n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c0 = n0;
    c1 = static_cast<uint32_t>(p1);
    c2 = n2;
    c3 = static_cast<uint32_t>(p0);
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {{c0, c1, c2, c3}};
}

__device__ __forceinline__ uint32_t signs8(const float* x) {
  const uint32_t u0 = __float_as_uint(x[0]), u1 = __float_as_uint(x[1]), u2 = __float_as_uint(x[2]),
                 u3 = __float_as_uint(x[3]), u4 = __float_as_uint(x[4]), u5 = __float_as_uint(x[5]),
                 u6 = __float_as_uint(x[6]), u7 = __float_as_uint(x[7]);
  const uint32_t odd = __byte_perm(__byte_perm(u1, u3, 0x73u), __byte_perm(u5, u7, 0x73u), 0x5410u);
  const uint32_t even = __byte_perm(__byte_perm(u0, u2, 0x73u), __byte_perm(u4, u6, 0x73u), 0x5410u);
  return (odd & 0x80808080u) | ((even >> 4) & 0x08080808u);
}

__device__ __forceinline__ uint32_t sr_code_biased24(float y, uint32_t r) {
  const float a = fminf(fabsf(y), 6.0f);
  const uint32_t c = umax32(__float_as_uint(a), 0x3F800000u) & 0xFF800000u;
  const float z = a * __uint_as_float(0x7F800000u - c);
  const float t = __fadd_rz(z, 8388608.0f);
  const float frac = z - (t - 8388608.0f);
  const float v = __uint_as_float(0x3F800000u + (r >> 9)) - 1.0f;
  const float thr = __uint_as_float((r & 0x100u) * 0x338000u);
  const uint32_t up = (frac - v) > thr ? 1u : 0u;
  return __float_as_uint(t) + (c >> 22) + up;
}

__device__ __forceinline__ uint32_t encode8_sr24(const float* x, float e, const uint32_t* rnd) {
  constexpr uint32_t kBias = 0x4B0000FEu;
  uint32_t acc = 0u;
#pragma unroll
  for (int i = 0; i < 8; ++i) acc += sr_code_biased24(x[i] * e, rnd[i]) << (4 * i);
  return (acc - kBias * 0x11111111u) | signs8(x);
}

// The RN encoder of that time: a + c * 2^22 rounded, c = 2^floor(log2(max(a, 1))).
__device__ __forceinline__ uint32_t encode8_rn_old(const float* x, float e) {
  constexpr uint32_t kBias = 0x0B0000FEu;
  uint32_t acc = 0u;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float a = fminf(fabsf(x[i] * e), 6.0f);
    const uint32_t c = umax32(__float_as_uint(a), 0x3F800000u) & 0xFF800000u;
    const float t = a + __uint_as_float(c + 0x0B000000u);
    acc += (__float_as_uint(t) - c + (c >> 22)) << (4 * i);
  }
  return (acc - kBias * 0x11111111u) | signs8(x);
}

template <bool kSR>
__device__ __forceinline__ Encoded legacy_encode_with_scale(const float (&v)[kBlock], uint32_t scale,
                                                            const EncodeTable& tab, uint64_t seed, uint64_t offset,
                                                            uint64_t idx0) {
  Encoded o;
  o.scale = scale;
  const float e = tab.e[scale];
  if constexpr (kSR) {
    uint32_t rnd[kBlock];
#pragma unroll
    for (int g = 0; g < 4; ++g) {
      const core::Philox4 p = philox_old(seed, offset, (idx0 >> 2) + g);
#pragma unroll
      for (int j = 0; j < 4; ++j) rnd[4 * g + j] = p.v[j];
    }
    o.lo = encode8_sr24(v, e, rnd);
    o.hi = encode8_sr24(v + 8, e, rnd + 8);
  } else {
    o.lo = encode8_rn_old(v, e);
    o.hi = encode8_rn_old(v + 8, e);
  }
  if (core::is_nan(e)) o.lo = o.hi = 0x77777777u;
  return o;
}

template <bool kSR>
__device__ __forceinline__ Encoded legacy_encode_block(const float (&v)[kBlock], uint32_t bamax_bits,
                                                       const TensorScale& ts, const EncodeTable& tab, uint64_t seed,
                                                       uint64_t offset, uint64_t idx0) {
  return legacy_encode_with_scale<kSR>(v, block_scale_byte(bamax_bits, ts), tab, seed, offset, idx0);
}

}  // namespace nvfp4::detail::quant::legacy
