// E2M1 (FP4): sign bit 3, magnitude codes 0..7 = {0, 0.5, 1, 1.5, 2, 3, 4, 6}.
// Two codes per byte: element 2i in the low nibble, 2i+1 in the high nibble.
#pragma once
#include "common.h"

namespace nvfp4::core {

NVFP4_HD constexpr float e2m1_magnitude(uint32_t code3) {
  // 0, 0.5, 1, 1.5 are code/2; 2, 3 are code-2; 4, 6 are 4 and 6.
  return code3 < 4 ? 0.5f * static_cast<float>(code3)
                   : (code3 < 6 ? static_cast<float>(code3) - 2.0f : (code3 == 6 ? 4.0f : 6.0f));
}

NVFP4_HD float e2m1_decode(uint32_t code4) {
  float m = e2m1_magnitude(code4 & 7u);
  return (code4 & 8u) ? -m : m;
}

// Round-to-nearest-even of a magnitude a in [0, 6] (not NaN), as the word 0x4B000000 + code.
// Inside one binade the E2M1 grid is evenly spaced, and adding 2^23 (+ an even integer)
// to a value below 2^23 rounds it to an integer with fp32's own ties-to-even. So
//   rne(2a)      is the code where the spacing is 1/2 (a < 2),
//   rne(a) + 2   where it is 1 (2 <= a < 4),
//   rne(a/2) + 4 where it is 2 (4 <= a <= 6),
// and each of them is at least the right one elsewhere (the three lines cross where the
// spacing changes), so the code is their minimum. The three sums lie in [2^23, 2^24),
// where the order of the bits is the order of the values. Every fp32 a in [0, 6] gives
// the code of the thresholds <=0.25 -> 0, <0.75 -> 1, <=1.25 -> 2, <1.75 -> 3, <=2.5 -> 4,
// <3.5 -> 5, <=5 -> 6, else 7 (checked exhaustively: tests/cuda/e2m1_exhaustive.cpp).
// a * 2 and a * 0.5 + (2^23 + 4) round the same whether or not the multiply is fused
// (a * 0.5 loses bits only below 2^-125, far under the rounding point).
NVFP4_HD uint32_t e2m1_rn_word(float a) {
#if defined(__CUDA_ARCH__)
  const uint32_t t0 = __float_as_uint(__fmaf_rn(a, 2.0f, 8388608.0f));
  const uint32_t t1 = __float_as_uint(__fadd_rn(a, 8388610.0f));
  const uint32_t t2 = __float_as_uint(__fmaf_rn(a, 0.5f, 8388612.0f));
  return min(min(t0, t1), t2);
#else
  const uint32_t t0 = float_bits(a * 2.0f + 8388608.0f);
  const uint32_t t1 = float_bits(a + 8388610.0f);
  const uint32_t t2 = float_bits(a * 0.5f + 8388612.0f);
  const uint32_t m = t0 < t1 ? t0 : t1;
  return m < t2 ? m : t2;
#endif
}

// Round-to-nearest-even with saturation, on |v|; the sign of v is kept (so -0.1 -> 0x8).
// NaN has no E2M1 encoding: it becomes 0x7 (+6). Its block scale is NaN by then
// (a NaN reaches every amax), so it still decodes to NaN.
NVFP4_HD uint32_t e2m1_encode_rn(float v) {
  if (is_nan(v)) return 0x7u;
  uint32_t sign = (float_bits(v) >> 28) & 8u;
  float a = abs_f(v);
  if (!(a < kE2M1Max)) a = kE2M1Max;
  return sign | (e2m1_rn_word(a) & 7u);
}

// Magnitude a in [0, 6] (not NaN) in E2M1 fixed point: the bits of a * 2^-126 rounded
// toward zero. fp32's subnormals and E2M1's share their layout up to a shift: both are
// evenly spaced below their first normal binade, and E2M1's normal binades have one
// mantissa bit. So bits 22..24 hold the E2M1 magnitude code of the grid point at or below
// a (the truncation), and bits 0..21 hold 2^22 * f, with f = (a - lo) / (hi - lo) in
// [0, 1) the position of a inside its grid gap [lo, hi). On the device this is one
// multiply; the host form computes the same bits exactly.
NVFP4_HD uint32_t e2m1_fixed(float a) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(__fmul_rz(a, 1.17549435082228751e-38f));  // 2^-126
#else
  // a < 1: a * 2^23 is exact, the cast truncates; a >= 1: a * 2^-126 is a normal number,
  // exact, whose bits are a's with the exponent lowered by 126.
  return a < 1.0f ? static_cast<uint32_t>(a * 8388608.0f) : float_bits(a) - (126u << 23);
#endif
}

// Stochastic rounding of v to one of the two E2M1 neighbours of min(|v|, 6), sign kept,
// with the random byte `rnd & 0xff` (the contract: 8 random bits per element):
//   with a = min(|v|, 6) in the grid gap [lo, hi) and f = (a - lo) / (hi - lo),
//   the result is hi when floor(256 * f) + rnd >= 256, else lo.
// So hi comes with probability floor(256 f) / 256 for a uniform byte: the rounding is
// unbiased to within 1/256 of a gap, any deviation being toward zero, and values on the
// grid (f = 0) are never moved. In E2M1 fixed point the rule is one add: the random byte
// goes in just below the code, a carry out of the fraction rounds up.
NVFP4_HD uint32_t e2m1_encode_sr(float v, uint32_t rnd) {
  if (is_nan(v)) return 0x7u;
  uint32_t sign = (float_bits(v) >> 28) & 8u;
  float a = abs_f(v);
  if (!(a < kE2M1Max)) a = kE2M1Max;
  return sign | ((e2m1_fixed(a) + ((rnd & 0xffu) << 14)) >> 22);
}

NVFP4_HD uint8_t pack_e2m1x2(uint32_t lo, uint32_t hi) {
  return static_cast<uint8_t>((lo & 0xfu) | ((hi & 0xfu) << 4));
}

}  // namespace nvfp4::core
