// E2M1 (FP4): sign bit 3, magnitude codes 0..7 = {0, 0.5, 1, 1.5, 2, 3, 4, 6}.
// Two codes per byte: element 2i in the low nibble, 2i+1 in the high nibble.
#pragma once
#include "common.h"

namespace nvfp4::core {

NVFP4_HD float e2m1_magnitude(uint32_t code3) {
  // 0, 0.5, 1, 1.5 are code/2; 2, 3 are code-2; 4, 6 are 4 and 6.
  return code3 < 4 ? 0.5f * static_cast<float>(code3)
                   : (code3 < 6 ? static_cast<float>(code3) - 2.0f : (code3 == 6 ? 4.0f : 6.0f));
}

NVFP4_HD float e2m1_decode(uint32_t code4) {
  float m = e2m1_magnitude(code4 & 7u);
  return (code4 & 8u) ? -m : m;
}

// Round-to-nearest-even with saturation, on |v|; the sign of v is kept (so -0.1 -> 0x8).
// NaN has no E2M1 encoding: it becomes 0x7 (+6). Its block scale is NaN by then
// (a NaN reaches every amax), so it still decodes to NaN.
NVFP4_HD uint32_t e2m1_encode_rn(float v) {
  if (is_nan(v)) return 0x7u;
  uint32_t sign = (float_bits(v) >> 28) & 8u;
  float a = abs_f(v);
  uint32_t m = a <= 0.25f ? 0u
             : a < 0.75f  ? 1u
             : a <= 1.25f ? 2u
             : a < 1.75f  ? 3u
             : a <= 2.5f  ? 4u
             : a < 3.5f   ? 5u
             : a <= 5.0f  ? 6u
                          : 7u;
  return sign | m;
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
