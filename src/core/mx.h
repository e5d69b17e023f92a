// MXFP4 (OCP Microscaling v1.0): E2M1 elements, one E8M0 scale per 32 consecutive elements
// along the quantization axis, no per-tensor scale. A block of 32 decodes to
// e2m1(code_i) * 2^s. Shared by the CPU reference and the kernels.
//
// Scale rules: the E8M0 exponent s of a block with M = max |x_i|, computed exactly from
// the bits of M (no fp32 rounding of log2 or of M/6):
//   ocp       s = floor(log2 M) - 2            (the spec's; 2 = emax of E2M1). M / 2^s lies
//                                               in [4, 8), so values above 6 * 2^s saturate.
//   ceil      s = ceil(log2(M / 6))            (round the scale M/6 up to a power of two:
//                                               the smallest s with M <= 6 * 2^s, so nothing
//                                               saturates)
//   tetrajet  s = ceil(log2(2 M' / (Qp - Qn))) with Qp = 6, Qn = -6 and M' = M, or 1e-8
//             when M = 0 (Chen et al., "Oscillation-Reduced MXFP4 Training for Vision
//             Transformers", 2025, section 3.2, "truncation-free scaling"). For M > 0 it is
//             the ceil rule; a zero block gets s = -29 instead of the smallest scale.
// In all three, floor(log2 M) and "M > 1.5 * 2^floor(log2 M)" are read from the bits:
// ceil(log2(M/6)) = floor(log2 M) - 2 + [significand of M > 1.5].
//
// Range (E8M0 holds 2^-127 .. 2^127):
//   s < -127   clamped to -127 (byte 0x00). That only happens for M < 2^-125 (ocp) or
//              M <= 1.5 * 2^-126 (ceil); M / 2^-127 is then below 6, so nothing saturates:
//              the block just keeps fewer significant codes.
//   s > 127    the NaN byte. Unreachable from fp32 inputs: M <= FLT_MAX gives s <= 125
//              (ocp) and s <= 126 (ceil, tetrajet).
//   M = 0      byte 0x00 (2^-127) for ocp and ceil, 2^-29 for tetrajet; every code is 0
//              (with the input's sign: -0.0 gives 0x8).
//   M = NaN or +inf (a NaN or an infinity in the block): the NaN byte 0xFF, and every code
//              of the block is 0x7. The block decodes to NaN: no value of a block holding
//              an infinity or a NaN can be trusted, and a NaN scale says so.
//
// Codes: code_i = e2m1(clamp(x_i * 2^-s, -6, 6)) with the E2M1 rounding of e2m1.h, round to
// nearest even or stochastic. x_i * 2^-s is exact (a power-of-two scaling) unless it
// falls below 2^-126, where it rounds like any fp32 product (far below the 0.25 that the
// smallest nonzero code needs).
#pragma once
#include "block.h"
#include "common.h"
#include "e2m1.h"
#include "e8m0.h"

namespace nvfp4::core {

constexpr int kMxBlock = 32;  // elements per E8M0 scale

// Values of nvfp4_mx_scale_rule_t.
constexpr uint32_t kMxScaleOcp = 0;
constexpr uint32_t kMxScaleCeil = 1;
constexpr uint32_t kMxScaleTetraJet = 2;
constexpr float kTetraJetZeroAmax = 1e-8f;

// E8M0 byte for a block whose max |x| is `amax` (>= 0, or NaN), under `rule`.
NVFP4_HD uint32_t mx_scale_byte(float amax, uint32_t rule) {
  if (is_nan(amax) || amax > kFltMax) return kE8M0Nan;
  if (amax == 0.0f) {
    if (rule != kMxScaleTetraJet) return 0u;
    amax = kTetraJetZeroAmax;
  }
  const Log2Split l = log2_split(amax);
  int s = l.floor_log2 - 2;
  if (rule != kMxScaleOcp && l.above_1p5) s += 1;
  if (s < kE8M0MinExp) s = kE8M0MinExp;
  if (s > kE8M0MaxExp) return kE8M0Nan;
  return static_cast<uint32_t>(s + kE8M0Bias);
}

NVFP4_HD float mx_block_amax(const float (&v)[kMxBlock]) {
  float m = 0.0f;
#pragma unroll
  for (int i = 0; i < kMxBlock; ++i) m = nan_max(m, abs_f(v[i]));
  return m;
}

// 32 codes, element 8k + j in nibble j of w[k] (so w[0..3] are the block's 16 bytes in
// memory order, little-endian).
struct Packed32 {
  uint32_t w[4];
};

NVFP4_HD Packed32 mx_encode_rn(const float (&v)[kMxBlock], uint32_t scale_byte) {
  const float e = e8m0_encode_factor(scale_byte);
  Packed32 p = {{0u, 0u, 0u, 0u}};
#pragma unroll
  for (int i = 0; i < kMxBlock; ++i)
    p.w[i >> 3] |= e2m1_encode_rn(clamp_sym(v[i] * e, kE2M1Max)) << (4 * (i & 7));
  return p;
}

// Stochastic rounding with the NVFP4 contract: Philox words for 16 consecutive elements
// from philox_block16, element idx0 + i taking the i-th; a 32-element block is two such
// groups. idx0 % 32 == 0 (the index of element 0 of the block in its orientation).
NVFP4_HD Packed32 mx_encode_sr(const float (&v)[kMxBlock], uint32_t scale_byte, uint64_t seed, uint64_t offset,
                               uint64_t idx0) {
  const float e = e8m0_encode_factor(scale_byte);
  Packed32 p = {{0u, 0u, 0u, 0u}};
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    uint32_t rnd[16];
    philox_block16(seed, offset, idx0 + 16u * h, rnd);
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const int k = 16 * h + i;
      p.w[k >> 3] |= e2m1_encode_sr(clamp_sym(v[k] * e, kE2M1Max), rnd[i]) << (4 * (k & 7));
    }
  }
  return p;
}

// Decoded value of one code: e2m1(code) * 2^(b - 127), in fp32. Exact, except that a
// product of magnitude >= 2^128 (scale 2^127 with |code| >= 2, 2^126 with |code| >= 4)
// overflows to +-inf; the NaN byte gives NaN.
NVFP4_HD float mx_decode(uint32_t code4, uint32_t scale_byte) {
  return e2m1_decode(code4) * e8m0_decode(scale_byte);
}

}  // namespace nvfp4::core
