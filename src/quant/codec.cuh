// E2M1 rounding of scaled values, eight at a time, for the kernels.
//
// The per-element rules are core::e2m1_encode_rn / _sr on core::clamp_sym(x * e, 6), whose
// arithmetic (core::e2m1_rn_word, core::e2m1_fixed) is written to be cheap on the GPU; the
// forms below apply it eight elements at a time and pack the codes with byte permutes
// (~7 instructions per element for either rounding, about half of them on the FP/FMA pipes):
//
//  RN. core::e2m1_rn_word (the minimum of three rounded sums: three FP32 operations and
//      one integer min per element), eight at a time, the codes gathered from the low bytes
//      with byte permutes.
//  SR. core::e2m1_encode_sr's own form, eight at a time: with F = core::e2m1_fixed(a) (the
//      code in bits 22..24, the fraction in 0..21) and r the element's random byte,
//      F * 4 + r * 2^16 holds (F + r * 2^14) >> 22, the reference's result, in its top
//      byte (F <= 7 * 2^22, so nothing reaches bit 32). Putting r in byte 2 takes one
//      byte permute, the multiply-add runs on the FMA pipe, and the eight top bytes are
//      gathered with byte permutes instead of eight shifts and adds.
//  Sign: the sign of x * e is the sign of x (e > 0); x = -0.0 keeps it, as the reference does.
//  NaN:  the caller replaces the whole block by 0x7 codes when e is NaN, which is the only
//        way x * e can be NaN (a NaN x makes its block amax, hence e, NaN).
//
// tests/cuda/e2m1_exhaustive.cpp checks the core rules against the comparison chain (RN)
// and the floor(256 f) definition (SR) on every fp32 in [0, 6]; tests/python/
// test_quant_cuda.py sweeps the decision boundaries of both forms on the GPU.
//
// On family-specific Blackwell targets (sm_100a, sm_120a, ...) RN uses the hardware
// cvt.rn.satfinite.e2m1x2.f32: round-to-nearest-even with saturation to +-6 that keeps the
// sign of zero, i.e. the reference rule on every non-NaN input (NaN blocks are replaced as
// above). SR stays in software everywhere: Blackwell's cvt.rs.satfinite.e2m1x4.f32 also
// takes 8 random bits per element and rounds by the carry of an add, but whether its
// results (and its byte-to-element assignment) equal the contract's is unverified.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/common.h"
#include "core/e2m1.h"

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
  uint32_t w[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) w[i] = core::e2m1_rn_word(fminf(fabsf(x[i] * e), 6.0f));
  const uint32_t even = byte_perm(byte_perm(w[0], w[2], 0x40u), byte_perm(w[4], w[6], 0x40u), 0x5410u);
  const uint32_t odd = byte_perm(byte_perm(w[1], w[3], 0x40u), byte_perm(w[5], w[7], 0x40u), 0x5410u);
  return (even + (odd << 4)) | signs8(x);
#endif
}

// Codes of x[0..7] * e rounded stochastically (e > 0, not NaN): element i takes random
// byte i % 4 of w[i / 4] (w[0] serves elements 0..3, w[1] elements 4..7), each as
// core::e2m1_encode_sr(clamp(x[i] * e, 6), byte) would.
NVFP4_QD uint32_t encode8_sr(const float* x, float e, uint32_t w0, uint32_t w1) {
  uint32_t s[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float a = fminf(fabsf(x[i] * e), 6.0f);
    const uint32_t r = byte_perm(i < 4 ? w0 : w1, 0u, 0x4044u | ((i & 3u) << 8));  // byte in bits 16..23
    s[i] = core::e2m1_fixed(a) * 4u + r;
  }
  const uint32_t even = byte_perm(byte_perm(s[0], s[2], 0x73u), byte_perm(s[4], s[6], 0x73u), 0x5410u);
  const uint32_t odd = byte_perm(byte_perm(s[1], s[3], 0x73u), byte_perm(s[5], s[7], 0x73u), 0x5410u);
  return (even + (odd << 4)) | signs8(x);
}

}  // namespace nvfp4::detail::quant
