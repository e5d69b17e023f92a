// Quantization of one 16-element block: the one place where the scale formulas, the
// rounding and the packing meet. The CPU reference and every kernel call this.
#pragma once
#include "common.h"
#include "e2m1.h"
#include "e4m3.h"
#include "philox.h"
#include "scale.h"

namespace nvfp4::core {

NVFP4_HD float block_amax16(const float (&v)[16]) {
  float m = 0.0f;
#pragma unroll
  for (int i = 0; i < 16; ++i) m = nan_max(m, abs_f(v[i]));
  return m;
}

// Encodes v[0..15] with the decode-scale byte s_b into 8 packed bytes (as two words).
// Stochastic rounding draws element i's random byte from `rnd[i]` (see philox_block16).
struct Packed16 {
  uint32_t lo, hi;  // bytes 0..3 and 4..7, little-endian: element 0 in the low nibble
};

NVFP4_HD Packed16 encode_block_rn(const float (&v)[16], float e) {
  uint32_t w[2] = {0u, 0u};
#pragma unroll
  for (int i = 0; i < 16; ++i)
    w[i >> 3] |= e2m1_encode_rn(clamp_sym(v[i] * e, kE2M1Max)) << (4 * (i & 7));
  return {w[0], w[1]};
}

NVFP4_HD Packed16 encode_block_sr(const float (&v)[16], float e, const uint32_t (&rnd)[16]) {
  uint32_t w[2] = {0u, 0u};
#pragma unroll
  for (int i = 0; i < 16; ++i)
    w[i >> 3] |= e2m1_encode_sr(clamp_sym(v[i] * e, kE2M1Max), rnd[i]) << (4 * (i & 7));
  return {w[0], w[1]};
}

// Random bytes for the 16 consecutive elements idx0 .. idx0+15 (idx0 % 16 == 0), one
// byte each in rnd[i] (0..255): a single Philox4x32-10 call with counter group idx0 / 16,
// whose 128 output bits are read as 16 little-endian bytes, byte i serving element
// idx0 + i (that is, byte i % 4 of output word i / 4). "idx" is the element's linear
// index in the orientation being quantized (row * roundup(cols, 16) + col).
NVFP4_HD Philox4 philox_words16(const PhiloxKeys& rk, uint64_t offset, uint64_t idx0) {
  return philox_group(rk, offset, idx0 >> 4);
}

NVFP4_HD Philox4 philox_words16(uint64_t seed, uint64_t offset, uint64_t idx0) {
  return philox_words16(philox_keys(seed), offset, idx0);
}

NVFP4_HD void philox_block16(uint64_t seed, uint64_t offset, uint64_t idx0, uint32_t (&rnd)[16]) {
  const Philox4 p = philox_words16(seed, offset, idx0);
#pragma unroll
  for (int i = 0; i < 16; ++i) rnd[i] = (p.v[i >> 2] >> (8 * (i & 3))) & 0xffu;
}

}  // namespace nvfp4::core
