// E4M3 (FP8, "fn" flavour: no infinities, 0x7f/0xff are NaN, max 448), used for the
// block decode scales. Same bits as torch.float8_e4m3fn.
#pragma once
#include "common.h"

namespace nvfp4::core {

NVFP4_HD float e4m3_decode(uint32_t b) {
  uint32_t sign = (b & 0x80u) << 24;
  uint32_t exp = (b >> 3) & 0xfu;
  uint32_t man = b & 7u;
  if (exp == 0xf && man == 7) return bits_float(sign | 0x7fc00000u);
  if (exp == 0) {
    float v = static_cast<float>(man) * 0.001953125f;  // man * 2^-9
    return bits_float(float_bits(v) | sign);
  }
  return bits_float(sign | ((exp + 120u) << 23) | (man << 20));
}

// Round to nearest even, saturating to +-448 (what cvt.rn.satfinite.e4m3x2.f32 does);
// NaN -> 0x7f.
NVFP4_HD uint8_t e4m3_encode(float f) {
  if (is_nan(f)) return 0x7fu;
  uint32_t u = float_bits(f);
  uint32_t sign = (u >> 24) & 0x80u;
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x43e00000u) return static_cast<uint8_t>(sign | 0x7eu);  // > 448 (inf too)
  if (a < 0x3c800000u) {
    // below 2^-6: subnormal steps of 2^-9; a * 512 is exact
    float m = rint_even(bits_float(a) * 512.0f);  // 0..8; 8 is the smallest normal 0x08
    return static_cast<uint8_t>(sign | static_cast<uint32_t>(m));
  }
  a += 0x7ffffu + ((a >> 20) & 1u);  // round mantissa 23 -> 3 bits, nearest even
  uint32_t exp = (a >> 23) - 120u;   // rebias 127 -> 7
  uint32_t code = (exp << 3) | ((a >> 20) & 7u);
  if (code > 0x7eu) code = 0x7eu;     // 464 <= a rounds up past 448: saturate
  return static_cast<uint8_t>(sign | code);
}

}  // namespace nvfp4::core
