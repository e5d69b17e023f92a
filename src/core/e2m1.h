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

// Stochastic rounding between the two E2M1 neighbours of v (|v| <= 6 expected, larger
// saturates): rounds away from zero with probability (|v| - lo) / (hi - lo).
// The grid gaps are powers of two, so that fraction is exact in fp32; `rnd` supplies
// 24 uniform bits (its top 24), compared exactly.
NVFP4_HD uint32_t e2m1_encode_sr(float v, uint32_t rnd) {
  if (is_nan(v)) return 0x7u;
  uint32_t sign = (float_bits(v) >> 28) & 8u;
  float a = abs_f(v);
  if (a >= 6.0f) return sign | 7u;
  uint32_t lo;
  float gap_inv;
  if (a < 2.0f) {
    lo = static_cast<uint32_t>(a * 2.0f);  // truncation: 0..3
    gap_inv = 2.0f;
  } else if (a < 4.0f) {
    lo = static_cast<uint32_t>(a) + 2u;    // 2 -> 4, 3 -> 5
    gap_inv = 1.0f;
  } else {
    lo = 6u;
    gap_inv = 0.5f;
  }
  float frac = (a - e2m1_magnitude(lo)) * gap_inv;             // exact, in [0, 1)
  float u = static_cast<float>(rnd >> 8) * 5.9604644775390625e-08f;  // k * 2^-24, exact
  return sign | (u < frac ? lo + 1u : lo);
}

NVFP4_HD uint8_t pack_e2m1x2(uint32_t lo, uint32_t hi) {
  return static_cast<uint8_t>((lo & 0xfu) | ((hi & 0xfu) << 4));
}

}  // namespace nvfp4::core
