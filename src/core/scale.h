// Two-level NVFP4 scaling, all in fp32 and in this order (the order of the
// TransformerEngine reference quantizer; see docs/design.md, "Numerics"):
//   S_enc = min(448*6 / amax, FLT_MAX), 1 if that is 0 (amax = inf); S_dec = 1 / S_enc
//   s_b   = e4m3(clamp(min(block_amax * (S_enc * (1/6)), FLT_MAX), -448, 448))
//   e     = min(1 / (float(s_b) * S_dec), FLT_MAX);  code = e2m1(clamp(x * e, -6, 6))
// NaN is carried through every step, so a NaN amax gives NaN scales (0x7f) and a
// tensor that decodes to NaN rather than something that looks valid.
#pragma once
#include "common.h"
#include "e4m3.h"

namespace nvfp4::core {

NVFP4_HD float global_encode_scale(float amax) {
  float s = min_flt_max((kE4M3Max * kE2M1Max) / amax);  // amax = 0 -> inf -> FLT_MAX
  return s == 0.0f ? 1.0f : s;
}

NVFP4_HD float global_decode_scale(float amax) { return 1.0f / global_encode_scale(amax); }

// The amax whose decode scale is exactly 1 (448 * 6 / 2688 = 1 and 1 / 1 = 1 in fp32): what
// a GEMM epilogue that forms alpha from two amax reads for operands without a per-tensor
// scale (MXFP4), so that alpha = 1 * 1.
constexpr float kUnitScaleAmax = kE4M3Max * kE2M1Max;

// The GEMM's alpha: S_dec(A) * S_dec(B) in fp32 for NVFP4 operands, from the two amax values
// (a kernel that has loaded them, a CUTLASS epilogue leaf); every runner and the CPU reference
// compute it here or through gemm_alpha below.
NVFP4_HD float gemm_alpha_of(float amax_a, float amax_b) {
  return global_decode_scale(amax_a) * global_decode_scale(amax_b);
}

// The same from device or host pointers; 1 for operands without a per-tensor scale (MXFP4),
// which pass null amax pointers.
NVFP4_HD float gemm_alpha(const float* amax_a, const float* amax_b) {
  return amax_a == nullptr ? 1.0f : gemm_alpha_of(*amax_a, *amax_b);
}

NVFP4_HD uint8_t block_scale_e4m3(float block_amax, float s_enc) {
  float v = block_amax * (s_enc * (1.0f / 6.0f));
  return e4m3_encode(clamp_sym(min_flt_max(v), kE4M3Max));
}

NVFP4_HD float block_encode_factor(uint8_t s_b, float s_dec) {
  return min_flt_max(1.0f / (e4m3_decode(s_b) * s_dec));
}

// Everything a kernel needs per tensor, derived once from the amax.
struct GlobalScale {
  float enc;
  float dec;
};

NVFP4_HD GlobalScale make_global_scale(float amax) {
  float enc = global_encode_scale(amax);
  return {enc, 1.0f / enc};
}

}  // namespace nvfp4::core
