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
//      code in bits 22..24, floor(256 f) in bits 14..21) and r the element's random byte,
//      the reference's result is (F + r * 2^14) >> 22, i.e. the top byte of the 16-bit
//      value (F * 4) >> 16 plus r. Two such values share a 32-bit add (see encode8_sr).
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
#include "core/e4m3.h"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

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

// PTX prmt.b32 in its generic mode, and its host form: nibble i of the selector picks
// byte (s >> 4i) & 7 of {y, x}; with bit 3 of the nibble set, the picked byte's sign bit
// fills the whole byte. The device form is the instruction itself, not __byte_perm: the
// intrinsic is defined on bits 2..0 of each nibble only, and with it the sign-fill
// selectors below copied the float's top byte unchanged (an exponent bit became the E2M1
// sign). test_every_sign_pattern (tests/python/test_quant_cuda.py) covers every selector use here.
NVFP4_QD uint32_t byte_perm(uint32_t x, uint32_t y, uint32_t s) {
#if defined(__CUDA_ARCH__)
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(x), "r"(y), "r"(s));
  return r;
#else
  const uint64_t xy = (static_cast<uint64_t>(y) << 32) | x;
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) {
    const uint32_t sel = (s >> (4 * i)) & 0xfu;
    uint32_t b = static_cast<uint32_t>((xy >> (8 * (sel & 7u))) & 0xffu);
    if (sel & 8u) b = (b & 0x80u) ? 0xffu : 0u;
    r |= b << (8 * i);
  }
  return r;
#endif
}

// Packs eight codes: byte k of `even` holds the magnitude code of element 2k, byte k of
// `odd` that of element 2k+1 (bits 3..7 clear); the sign of x[i] goes to bit 3 of nibble i
// (x * e has x's sign, e > 0; -0.0 keeps it). The signs are gathered with the byte
// permute's sign-fill mode (0xff for a negative element's top byte, 0 otherwise), which
// only the prmt form above honours.
NVFP4_QD uint32_t pack8(uint32_t even, uint32_t odd, const float* x) {
  const uint32_t u0 = core::float_bits(x[0]), u1 = core::float_bits(x[1]), u2 = core::float_bits(x[2]),
                 u3 = core::float_bits(x[3]), u4 = core::float_bits(x[4]), u5 = core::float_bits(x[5]),
                 u6 = core::float_bits(x[6]), u7 = core::float_bits(x[7]);
  const uint32_t se = byte_perm(byte_perm(u0, u2, 0xFBu), byte_perm(u4, u6, 0xFBu), 0x5410u);
  const uint32_t so = byte_perm(byte_perm(u1, u3, 0xFBu), byte_perm(u5, u7, 0xFBu), 0x5410u);
  return (even | (se & 0x08080808u)) + ((odd | (so & 0x08080808u)) << 4);
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
  return pack8(even, odd, x);
#endif
}

// Codes of x[0..7] * e rounded stochastically (e > 0, not NaN): element i takes random
// byte i % 4 of w[i / 4] (w0 serves elements 0..3, w1 elements 4..7), each as
// core::e2m1_encode_sr(clamp(x[i] * e, 6), byte) would. Two elements share a word: bytes
// 2..3 of e2m1_fixed(a) * 4 (the code above floor(256 f)) make one 16-bit lane each, the
// two random bytes are added below the codes in one add (a lane sum is < 2^11, so nothing
// crosses into the other lane), and the carries leave each code in the lane's top byte.
NVFP4_QD uint32_t encode8_sr(const float* x, float e, uint32_t w0, uint32_t w1) {
  uint32_t f[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) f[i] = core::e2m1_fixed(fminf(fabsf(x[i] * e), 6.0f)) * 4u;
  // lanes (0, 2), (4, 6), (1, 3), (5, 7); random bytes 0 and 2, or 1 and 3, of a word
  const uint32_t p02 = byte_perm(f[0], f[2], 0x7632u) + byte_perm(w0, 0u, 0x4240u);
  const uint32_t p46 = byte_perm(f[4], f[6], 0x7632u) + byte_perm(w1, 0u, 0x4240u);
  const uint32_t p13 = byte_perm(f[1], f[3], 0x7632u) + byte_perm(w0, 0u, 0x4341u);
  const uint32_t p57 = byte_perm(f[5], f[7], 0x7632u) + byte_perm(w1, 0u, 0x4341u);
  return pack8(byte_perm(p02, p46, 0x7531u), byte_perm(p13, p57, 0x7531u), x);
}

// ---- E2M1 -> BF16: the decoded operands of the Hopper GEMM -----------------------------
// The bf16 bits of v >= 0 where bf16 holds v exactly (zero or normal), at compile time.
constexpr uint32_t bf16_bits_exact(float v) {
  if (v == 0.0f) return 0u;
  int e = 0;
  while (v >= 2.0f) v *= 0.5f, ++e;
  while (v < 1.0f) v *= 2.0f, --e;
  return (static_cast<uint32_t>(127 + e) << 7) | static_cast<uint32_t>((v - 1.0f) * 128.0f);
}
// Byte b (0: low, 1: high) of the bf16 bits of E2M1 magnitudes first .. first + 3
// (core::e2m1_magnitude's values, all exact in bf16), as one word: with the word for
// first = 4 beside it, an 8-entry table for the byte permute.
constexpr uint32_t e2m1_bf16_table(int b, uint32_t first) {
  uint32_t t = 0;
  for (uint32_t i = 0; i < 4; ++i)
    t |= ((bf16_bits_exact(core::e2m1_magnitude(first + i)) >> (8 * b)) & 0xffu) << (8 * i);
  return t;
}

// The bf16 bits of 8 packed codes (element 0 in the low nibble), unscaled: out[k] holds
// element 2k in its low half and 2k + 1 in its high half. Each magnitude nibble selects its
// value's low and high byte from 8-byte tables (one byte permute does four codes), the sign
// bits go to bit 7 of the high bytes (one more permute: bit 3 of byte k of c << 4 is the sign of
// code 2k, bit 7 of byte k of c that of code 2k + 1), and the low and high bytes are interleaved:
// 19 instructions for 8 values on the GPU, where a table lookup and a multiply per value cost 36.
NVFP4_QD void e2m1x8_bf16_words(uint32_t c, uint32_t (&out)[4]) {
  constexpr uint32_t kH0 = e2m1_bf16_table(1, 0), kH1 = e2m1_bf16_table(1, 4);
  constexpr uint32_t kL0 = e2m1_bf16_table(0, 0), kL1 = e2m1_bf16_table(0, 4);
  const uint32_t m = c & 0x77777777u, mh = m >> 16, c4 = c << 4;
  const uint32_t ha = byte_perm(kH0, kH1, m) | (byte_perm(c4, c, 0x5140u) & 0x80808080u);
  const uint32_t hb = byte_perm(kH0, kH1, mh) | (byte_perm(c4, c, 0x7362u) & 0x80808080u);
  const uint32_t la = byte_perm(kL0, kL1, m), lb = byte_perm(kL0, kL1, mh);
  out[0] = byte_perm(la, ha, 0x5140u);
  out[1] = byte_perm(la, ha, 0x7362u);
  out[2] = byte_perm(lb, hb, 0x5140u);
  out[3] = byte_perm(lb, hb, 0x7362u);
}

#if defined(__CUDACC__)
// bf16x2 (s, s) of the value of E4M3 scale byte b (exact: an E4M3 value has at most 4
// significant bits and lies in [2^-9, 448]). sm_89+: the hardware conversion to fp16 (exact
// as well), widened; elsewhere core::e4m3_decode.
__device__ __forceinline__ __nv_bfloat162 e4m3_bf16x2(uint32_t b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint32_t h2;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(static_cast<unsigned short>(b & 0xffu)));
  const float f = __half2float(__ushort_as_half(static_cast<unsigned short>(h2)));
#else
  const float f = core::e4m3_decode(static_cast<uint8_t>(b));
#endif
  return __floats2bfloat162_rn(f, f);
}

// The one decode of an NVFP4 block to the BF16 operand of the Hopper emulation (the GEMM's
// decode pass and the quantizers' decoded outputs both call it, so both give the same bits):
// 16 packed codes (lo, hi; element 0 in the low nibble of lo) times the value of the E4M3
// scale byte, as 8 bf16x2 words in element order. The products are exact in BF16 (an E2M1
// value has at most 2 significant bits, the scale 4; they lie in [2^-10, 2688]), so the BF16
// multiply gives the bits a float multiply rounded to BF16 gives; a NaN scale (0x7f, 0xff)
// gives NaN.
__device__ __forceinline__ void decode16_e4m3_bf16(uint32_t lo, uint32_t hi, uint32_t scale_byte,
                                                   uint32_t (&out)[8]) {
  const __nv_bfloat162 s = e4m3_bf16x2(scale_byte);
  uint32_t w[2][4];
  e2m1x8_bf16_words(lo, w[0]);
  e2m1x8_bf16_words(hi, w[1]);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint32_t u = w[i >> 2][i & 3];
    const __nv_bfloat162 p = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&u), s);
    out[i] = *reinterpret_cast<const uint32_t*>(&p);
  }
}
#endif

}  // namespace nvfp4::detail::quant
