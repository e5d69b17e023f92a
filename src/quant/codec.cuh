// E2M1 rounding of scaled values, eight at a time, for the kernels.
//
// The reference (core::e2m1_encode_rn / _sr on core::clamp_sym(x * e, 6)) is a chain of
// seven comparisons per element; in SASS that is ~35 instructions per element, about three
// times the budget of a kernel that must run at memory speed. The forms below compute
// the same codes with ~9 (RN) and ~19 (SR) instructions. They are exact, not approximate:
//
//  RN. Let a = min(|y|, 6) and c = 2^floor(log2(max(a, 1))), so c is 1, 2 or 4 and the
//      E2M1 spacing around a is c/2. M = c * 2^22 is a power of two whose fp32 ulp is
//      exactly c/2 and M / (c/2) = 2^23 is even, so fl(a + M) = M + n * c/2 where n is a / (c/2)
//      rounded to nearest, ties to even: the E2M1 rounding inside that binade (a < 2M,
//      so the sum stays in M's binade). Reading the bits, n = bits(a + M) - bits(M), and
//      the code is n + 2 * log2(c). The thresholds of the reference (0.25, 0.75, ..., 5)
//      are exactly the midpoints this rounding uses, with ties going to the even code.
//  SR. z = a / (c/2) (exact: a power-of-two scaling), fl = floor(z) via the round-toward-zero
//      add z + 2^23, frac = z - fl (exact); the reference rounds up iff u < frac with
//      u = (r >> 8) * 2^-24. u needs 24 fraction bits, one more than 1 + u can hold, so it is
//      split as V + b * 2^-24 with V = (r >> 9) * 2^-23 and b = bit 8 of r, and the test is
//      fl(frac - V) > b * 2^-24, which is exact: frac - V is exact whenever it lies near
//      2^-24 (both operands are multiples of frac's ulp there), and round-to-nearest keeps
//      its sign and its order with respect to 2^-24 elsewhere.
//  Sign: the sign of x * e is the sign of x (e > 0); x = -0.0 keeps it, as the reference does.
//  NaN:  the caller replaces the whole block by 0x7 codes when e is NaN, which is the only
//        way x * e can be NaN (a NaN x makes its block amax, hence e, NaN).
//
// Both forms were checked against core::e2m1_encode_rn/_sr on every fp32 value (RN) and on
// every fp32 value in [0, 6] with the random words at and around each decision boundary
// (SR); tests/python/test_quant_cuda.py sweeps the same boundaries on the GPU.
//
// On family-specific Blackwell targets (sm_100a, sm_120a, ...) RN uses the hardware
// cvt.rn.satfinite.e2m1x2.f32: round-to-nearest-even with saturation to +-6 that keeps the
// sign of zero, i.e. the reference rule on every non-NaN input (NaN blocks are replaced as
// above). SR has no hardware equivalent of the contract's rule and stays in software.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/common.h"

// -DNVFP4_QUANT_SOFTWARE_E2M1 keeps the software form on every target.
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FAMILY_SPECIFIC__) && !defined(NVFP4_QUANT_SOFTWARE_E2M1)
#if __CUDA_ARCH_FAMILY_SPECIFIC__ >= 1000
#define NVFP4_QUANT_HW_E2M1 1
#endif
#endif

#if defined(__CUDACC__)
#define NVFP4_QD __host__ __device__ __forceinline__
#else
#define NVFP4_QD inline
#endif

namespace nvfp4::detail::quant {

NVFP4_QD uint32_t umax32(uint32_t a, uint32_t b) { return a > b ? a : b; }

NVFP4_QD uint32_t byte_perm(uint32_t x, uint32_t y, uint32_t s) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(x, y, s);
#else
  const uint64_t xy = (static_cast<uint64_t>(y) << 32) | x;
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) r |= static_cast<uint32_t>((xy >> (8 * ((s >> (4 * i)) & 7))) & 0xffu) << (8 * i);
  return r;
#endif
}

// 2^23 + floor(z) for 0 <= z < 2^23: the round-toward-zero sum on the device.
NVFP4_QD float floor_plus_2p23(float z) {
#if defined(__CUDA_ARCH__)
  return __fadd_rz(z, 8388608.0f);
#else
  return 8388608.0f + std::floor(z);
#endif
}

// Sign bits of x[0..7] moved to bit 3 of their nibbles. The top byte of each float holds
// its sign in bit 7; bytes of the odd elements land on bits 7, 15, 23, 31 (nibbles 1, 3, 5,
// 7 already), those of the even elements four bits too high.
NVFP4_QD uint32_t signs8(const float* x) {
  const uint32_t u0 = core::float_bits(x[0]), u1 = core::float_bits(x[1]), u2 = core::float_bits(x[2]),
                 u3 = core::float_bits(x[3]), u4 = core::float_bits(x[4]), u5 = core::float_bits(x[5]),
                 u6 = core::float_bits(x[6]), u7 = core::float_bits(x[7]);
  const uint32_t odd = byte_perm(byte_perm(u1, u3, 0x73u), byte_perm(u5, u7, 0x73u), 0x5410u);
  const uint32_t even = byte_perm(byte_perm(u0, u2, 0x73u), byte_perm(u4, u6, 0x73u), 0x5410u);
  return (odd & 0x80808080u) | ((even >> 4) & 0x08080808u);
}

// Magnitude code of y (see the RN note above), plus kRnBias.
constexpr uint32_t kRnBias = 0x0B0000FEu;
NVFP4_QD uint32_t rn_code_biased(float y) {
  const float a = fminf(fabsf(y), 6.0f);
  const uint32_t c = umax32(core::float_bits(a), 0x3F800000u) & 0xFF800000u;
  const float t = a + core::bits_float(c + 0x0B000000u);
  return core::float_bits(t) - c + (c >> 22);
}

// Magnitude code of y rounded stochastically with the Philox word r, plus kSrBias.
constexpr uint32_t kSrBias = 0x4B0000FEu;
NVFP4_QD uint32_t sr_code_biased(float y, uint32_t r) {
  const float a = fminf(fabsf(y), 6.0f);
  const uint32_t c = umax32(core::float_bits(a), 0x3F800000u) & 0xFF800000u;
  const float z = a * core::bits_float(0x7F800000u - c);  // a * 2, a, a / 2
  const float t = floor_plus_2p23(z);
  const float frac = z - (t - 8388608.0f);
  const float v = core::bits_float(0x3F800000u + (r >> 9)) - 1.0f;
  const float thr = core::bits_float((r & 0x100u) * 0x338000u);  // 2^-24 when bit 8 is set
  const uint32_t up = (frac - v) > thr ? 1u : 0u;
  return core::float_bits(t) + (c >> 22) + up;
}

// Codes of x[0..7] * e, packed (element 0 in the low nibble). e > 0, not NaN.
NVFP4_QD uint32_t encode8_rn(const float* x, float e) {
#if defined(NVFP4_QUANT_HW_E2M1)
  uint32_t r;
  asm("{\n\t.reg .b8 b0, b1, b2, b3;\n\t"
      "cvt.rn.satfinite.e2m1x2.f32 b0, %2, %1;\n\t"
      "cvt.rn.satfinite.e2m1x2.f32 b1, %4, %3;\n\t"
      "cvt.rn.satfinite.e2m1x2.f32 b2, %6, %5;\n\t"
      "cvt.rn.satfinite.e2m1x2.f32 b3, %8, %7;\n\t"
      "mov.b32 %0, {b0, b1, b2, b3};\n\t}"
      : "=r"(r)
      : "f"(x[0] * e), "f"(x[1] * e), "f"(x[2] * e), "f"(x[3] * e), "f"(x[4] * e), "f"(x[5] * e),
        "f"(x[6] * e), "f"(x[7] * e));
  return r;
#else
  uint32_t acc = 0u;
#pragma unroll
  for (int i = 0; i < 8; ++i) acc += rn_code_biased(x[i] * e) << (4 * i);
  return (acc - kRnBias * 0x11111111u) | signs8(x);
#endif
}

NVFP4_QD uint32_t encode8_sr(const float* x, float e, const uint32_t* rnd) {
  uint32_t acc = 0u;
#pragma unroll
  for (int i = 0; i < 8; ++i) acc += sr_code_biased(x[i] * e, rnd[i]) << (4 * i);
  return (acc - kSrBias * 0x11111111u) | signs8(x);
}

}  // namespace nvfp4::detail::quant
