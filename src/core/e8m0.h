// E8M0 (OCP Microscaling v1.0 scale format): an unsigned biased exponent, no sign and no
// mantissa. Byte b in 0..254 is 2^(b - 127); 0xFF is NaN. There is no zero and no
// infinity. Same bits as torch.float8_e8m0fnu and CUTLASS's float_ue8m0_t.
//
// Every value 2^-127 .. 2^127 is exactly representable in fp32 (2^-127 as a subnormal),
// so decoding is exact.
#pragma once
#include "common.h"

namespace nvfp4::core {

constexpr uint32_t kE8M0Nan = 0xFFu;
constexpr int kE8M0Bias = 127;
constexpr int kE8M0MinExp = -127;  // byte 0x00
constexpr int kE8M0MaxExp = 127;   // byte 0xFE

// Index of the highest set bit of u (u != 0).
NVFP4_HD int highest_bit(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return 31 - __clz(u);
#else
  return 31 - __builtin_clz(u);
#endif
}

// 2^e as fp32 for -149 <= e <= 127 (subnormal below -126), exact.
NVFP4_HD float exp2i(int e) {
  return e >= -126 ? bits_float(static_cast<uint32_t>(e + 127) << 23)
                   : bits_float(1u << (e + 149));
}

NVFP4_HD float e8m0_decode(uint32_t b) {
  b &= 0xFFu;
  return b == kE8M0Nan ? bits_float(0x7fc00000u) : exp2i(static_cast<int>(b) - kE8M0Bias);
}

// The factor that scales a block to E2M1 range, 2^-(b-127) = 1 / e8m0_decode(b), exact for
// every byte (2^-127 .. 2^127); NaN for the NaN byte.
NVFP4_HD float e8m0_encode_factor(uint32_t b) {
  b &= 0xFFu;
  return b == kE8M0Nan ? bits_float(0x7fc00000u) : exp2i(kE8M0Bias - static_cast<int>(b));
}

// floor(log2(a)) and whether a's significand (a / 2^floor(log2 a), in [1, 2)) exceeds 1.5,
// for finite a > 0, subnormals included; exact (read from the bits, no log2 rounding).
struct Log2Split {
  int floor_log2;
  bool above_1p5;
};

NVFP4_HD Log2Split log2_split(float a) {
  const uint32_t u = float_bits(a) & 0x7fffffffu;
  const uint32_t exp = u >> 23;
  const uint32_t m = exp ? ((u & 0x7fffffu) | 0x800000u) : (u & 0x7fffffu);  // integer significand
  const int hb = highest_bit(m);
  // a = m * 2^(max(exp,1) - 150); its leading bit is bit hb of m.
  return {hb + static_cast<int>(exp ? exp : 1u) - 150, 2u * m > (3u << hb)};
}

}  // namespace nvfp4::core
