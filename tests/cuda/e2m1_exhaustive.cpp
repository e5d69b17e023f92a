// Exhaustive host check of the E2M1 rules in src/core/e2m1.h, over every fp32 a in [0, 6]:
//  - e2m1_rn_word (minimum of three rounded sums) against the comparison chain of the
//    format's definition (<=0.25 -> 0, <0.75 -> 1, <=1.25 -> 2, <1.75 -> 3, <=2.5 -> 4,
//    <3.5 -> 5, <=5 -> 6, else 7), with the multiplies separate and fused;
//  - e2m1_fixed's host form against a * 2^-126 rounded toward zero (what the GPU computes
//    with one multiply), and its fields against the definition of the SR contract: bits
//    22..24 = the grid point at or below a, bits 14..21 = floor(256 f) with f the position
//    of a inside its gap;
//  - the kernels' packed encoders (quant::encode8_rn / encode8_sr, host-compiled: the same
//    source with the host forms of the byte permute and of the core rules) against the
//    per-element rules on 2 million random blocks of 8 (random bits, small multiples of
//    1/16, -0.0, random scale factors and random Philox words).
// Not part of the build (about a minute on one core):
//   g++ -O2 -frounding-math -I src tests/cuda/e2m1_exhaustive.cpp -o /tmp/e2m1_exhaustive && /tmp/e2m1_exhaustive
#include <cfenv>
#include <cmath>
#include <cstdio>

#include <random>

#include "core/block.h"
#include "quant/codec.cuh"

using namespace nvfp4::core;

static uint32_t rn_chain(float a) {
  return a <= 0.25f ? 0u : a < 0.75f ? 1u : a <= 1.25f ? 2u : a < 1.75f ? 3u
       : a <= 2.5f ? 4u : a < 3.5f ? 5u : a <= 5.0f ? 6u : 7u;
}

static uint32_t rn_fused(float a) {
  const uint32_t t0 = float_bits(std::fma(a, 2.0f, 8388608.0f)), t1 = float_bits(a + 8388610.0f),
                 t2 = float_bits(std::fma(a, 0.5f, 8388612.0f));
  const uint32_t m = t0 < t1 ? t0 : t1;
  return (m < t2 ? m : t2) - 0x4B000000u;
}

int main() {
  static const double grid[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  unsigned long long n = 0, bad_rn = 0, bad_rn_fused = 0, bad_rz = 0, bad_fields = 0;
  for (uint32_t u = 0; u <= float_bits(6.0f); ++u, ++n) {
    const float a = bits_float(u);
    const uint32_t want = rn_chain(a);
    if (e2m1_rn_word(a) != (0x4B000000u | want)) ++bad_rn;
    if (rn_fused(a) != want) ++bad_rn_fused;
    const uint32_t f = e2m1_fixed(a);
    std::fesetround(FE_TOWARDZERO);
    volatile float p = a * 1.17549435082228751e-38f;
    std::fesetround(FE_TONEAREST);
    if (float_bits(p) != f) ++bad_rz;
    uint32_t lo = 0;
    while (lo < 7 && grid[lo + 1] <= a) ++lo;
    const double frac = lo < 7 ? (a - grid[lo]) / (grid[lo + 1] - grid[lo]) : 0.0;
    if ((f >> 22) != lo || ((f >> 14) & 0xffu) != static_cast<uint32_t>(std::floor(frac * 256.0))) ++bad_fields;
  }
  std::printf("%llu fp32 values in [0, 6]: rn %llu wrong, rn (fused) %llu wrong, fixed vs RZ multiply %llu wrong, "
              "fixed fields %llu wrong\n", n, bad_rn, bad_rn_fused, bad_rz, bad_fields);

  std::mt19937_64 g(1);
  unsigned long long blocks = 0, bad_pack_rn = 0, bad_pack_sr = 0;
  for (int it = 0; it < 2000000; ++it, ++blocks) {
    float x[8];
    for (float& f : x) {
      f = bits_float(static_cast<uint32_t>(g()));
      if (is_nan(f)) f = 0.5f;  // NaN blocks are replaced as a whole by the kernels
      if (it % 3 == 0) f = static_cast<float>(static_cast<int>(g() % 200) - 100) / 16.0f;
      if (it % 7 == 0 && (g() & 1)) f = -0.0f;
    }
    const float e = it % 5 == 0 ? 1.0f : bits_float(0x30000000u + static_cast<uint32_t>(g() % 0x20000000u));
    const uint32_t w0 = static_cast<uint32_t>(g()), w1 = static_cast<uint32_t>(g());
    uint32_t want_rn = 0, want_sr = 0;
    for (int i = 0; i < 8; ++i) {
      const float y = clamp_sym(x[i] * e, kE2M1Max);
      want_rn |= e2m1_encode_rn(y) << (4 * i);
      want_sr |= e2m1_encode_sr(y, ((i < 4 ? w0 : w1) >> (8 * (i & 3))) & 0xffu) << (4 * i);
    }
    if (nvfp4::detail::quant::encode8_rn(x, e) != want_rn) ++bad_pack_rn;
    if (nvfp4::detail::quant::encode8_sr(x, e, w0, w1) != want_sr) ++bad_pack_sr;
  }
  std::printf("%llu random blocks of 8: encode8_rn %llu wrong, encode8_sr %llu wrong\n", blocks, bad_pack_rn,
              bad_pack_sr);
  return (bad_rn || bad_rn_fused || bad_rz || bad_fields || bad_pack_rn || bad_pack_sr) ? 1 : 0;
}
