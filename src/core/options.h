// The recipe options of a quantization (nvfp4_quant_config_t fields of 0.3), per block:
//
//  - 4over6 block scale selection ("Four Over Six", arXiv 2512.02010; TransformerEngine's
//    nvfp4_4over6): each block is quantized twice, with its amax mapped to 6 (the
//    contract's scale) and to 4 (a 1.5x larger scale, whose grid {0..4} x s is finer near
//    0.75 * amax), and keeps the candidate whose error against the input is smaller (MAE or
//    MSE; ties keep map-to-6). The rules are TransformerEngine's, in its order of FP32
//    operations:
//      base = (block_amax / 6) * S_enc
//      s_b6 = e4m3(clamp(base, +-448)),  s_b4 = e4m3(clamp(base * 1.5, +-448))
//      e    = min(1 / (float(s_b) * S_dec), FLT_MAX);  code = e2m1(clamp(x * e, +-6))
//      err  = sum over the 16 elements, in order, of |d| (MAE) or d * d (MSE), with
//             d = ((e2m1(code) * float(s_b)) * amax) / (6 * bound) - x
//    A 2D tile sums its 16 row errors as a tree (rows i and i+8, then i and i+4, then i
//    and i+2, then the last pair), as TransformerEngine's warp reduction does.
//  - The E4M3 bound: the per-tensor scale maps the amax to bound * 6 with bound 448 (the
//    contract) or 256 (TransformerEngine's 4over6 default: headroom for the 1.5x scale).
//    The tensor's stored amax is then A = fl(amax * 1.75), so that every decoder and GEMM
//    reads the tensor with the contract's S_dec = 1 / S_enc(A) = ~amax / 1536. (TE keeps
//    amax and a per-tensor bound: its S_enc = fl(1536 / amax) can differ from
//    fl(2688 / fl(1.75 amax)) by an ulp; docs/design.md §2 says how often.)
//  - MS-EDEN (Quartet II, arXiv 2601.22813), for gradient operands, replacing stochastic
//    rounding of the elements by an unbiased correction of the block scale. On the
//    RHT-rotated block v (the rotation's random signs come from the caller):
//      s  = trunc4(block_amax * (1/6))    (FP32 bits & 0xfff80000: 4 mantissa bits, toward 0)
//      e  = min(1 / s, FLT_MAX);  u_i = v_i * e;  q_i = e2m1_rn(clamp(u_i, +-6))
//      c  = (sum u_i * u_i) / (sum u_i * q_i)   (sums in order; c = 1 when the divisor is 0)
//      f  = s * c                              (the corrected block scale)
//    then for the tensor A = fl(max f * 10.5) (the largest corrected scale maps to E4M3
//    256: 10.5 = 2688 / 256, headroom for the rounding up), S_enc = S_enc(A) and the scale
//    byte rounds f * S_enc stochastically between its two E4M3 neighbours with 16 random
//    bits (unbiased to within 2^-16 of a gap). The codes q_i are those of the truncated
//    scale; the decoded block is q * e4m3(f * S_enc) * S_dec, whose expectation is q * f.
#pragma once
#include "block.h"
#include "e2m1.h"
#include "e4m3.h"
#include "scale.h"

namespace nvfp4::core {

// ---- the E4M3 bound ---------------------------------------------------------------------

// The amax a tensor stores (and its S_enc derives from) for a bound of 448 or 256.
NVFP4_HD float bound_amax(float amax, uint32_t e4m3_bound) {
  return e4m3_bound == 256u ? amax * 1.75f : amax;
}

// ---- 4over6 ------------------------------------------------------------------------------

struct FourOverSixScales {
  uint8_t map4, map6;
};

NVFP4_HD FourOverSixScales fos_scales(float block_amax, float s_enc) {
  const float base = (block_amax / kE2M1Max) * s_enc;
  return {e4m3_encode(clamp_sym(base * 1.5f, kE4M3Max)), e4m3_encode(clamp_sym(base, kE4M3Max))};
}

// The codes of v with scale byte s_b (round to nearest) and their error against v in the
// input domain: amax is the tensor's (or row's) amax before bound_amax, denom = 6 * bound.
NVFP4_HD float fos_candidate(const float (&v)[16], uint8_t s_b, float s_dec, float amax, float denom, bool mse,
                             Packed16& p) {
  const float e = block_encode_factor(s_b, s_dec);
  p = encode_block_rn(v, e);
  const float sf = e4m3_decode(s_b);
  float err = 0.0f;
  for (int i = 0; i < 16; ++i) {
    const uint32_t code = ((i < 8 ? p.lo : p.hi) >> (4 * (i & 7))) & 0xfu;
    const float val = ((e2m1_decode(code) * sf) * amax) / denom;
    const float d = val - v[i];
    err = err + (mse ? d * d : abs_f(d));
  }
  return err;
}

// TransformerEngine's reduction order of a 2D tile's 16 row errors.
NVFP4_HD float fos_tile_error(const float (&e)[16]) {
  float a[8], b[4];
  for (int i = 0; i < 8; ++i) a[i] = e[i] + e[i + 8];
  for (int i = 0; i < 4; ++i) b[i] = a[i] + a[i + 4];
  const float c0 = b[0] + b[2], c1 = b[1] + b[3];
  return c0 + c1;
}

// ---- MS-EDEN -----------------------------------------------------------------------------

constexpr float kEdenAmaxFactor = 10.5f;  // 2688 / 256

struct EdenBlock {
  Packed16 p;  // the codes
  float f;     // the corrected block scale
};

NVFP4_HD EdenBlock eden_block(const float (&v)[16]) {
  const float s = bits_float(float_bits(block_amax16(v) * (1.0f / 6.0f)) & 0xfff80000u);
  const float e = min_flt_max(1.0f / s);
  float u[16];
  for (int i = 0; i < 16; ++i) u[i] = v[i] * e;
  EdenBlock o;
  o.p = encode_block_rn(v, e);
  float uu = 0.0f, uq = 0.0f;
  for (int i = 0; i < 16; ++i) {
    const uint32_t code = ((i < 8 ? o.p.lo : o.p.hi) >> (4 * (i & 7))) & 0xfu;
    uu = uu + u[i] * u[i];
    uq = uq + u[i] * e2m1_decode(code);
  }
  const float c = uq == 0.0f ? 1.0f : uu / uq;
  o.f = s * c;
  return o;
}

// E4M3 byte of t >= 0 (or NaN) rounded stochastically with 16 random bits r: the upper
// neighbour with probability floor(2^16 f) / 2^16, f = (t - lo) / (hi - lo) (exact: the
// gap is a power of two and t - lo is exact). At or above 448: 448. NaN: 0x7f.
NVFP4_HD uint8_t e4m3_encode_sr(float t, uint32_t r) {
  if (is_nan(t)) return 0x7fu;
  if (!(t < kE4M3Max)) return 0x7eu;
  uint8_t b = e4m3_encode(t);
  float vb = e4m3_decode(b);
  if (vb == t) return b;
  const uint8_t lo = vb > t ? static_cast<uint8_t>(b - 1u) : b;
  const float flo = e4m3_decode(lo), fhi = e4m3_decode(static_cast<uint8_t>(lo + 1u));
  const float f = (t - flo) / (fhi - flo);
  const uint32_t q = static_cast<uint32_t>(f * 65536.0f);
  return (q + (r & 0xffffu)) >= 65536u ? static_cast<uint8_t>(lo + 1u) : lo;
}

// The tensor amax MS-EDEN stores, from the largest corrected block scale.
NVFP4_HD float eden_amax(float max_f) { return max_f * kEdenAmaxFactor; }

}  // namespace nvfp4::core
