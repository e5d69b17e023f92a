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
// Stochastic rounding draws element i's bits from `rnd[i]`.
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

// Random words for 16 consecutive elements starting at idx0 (idx0 % 16 == 0).
NVFP4_HD void philox_block16(uint64_t seed, uint64_t offset, uint64_t idx0, uint32_t (&rnd)[16]) {
#pragma unroll
  for (int g = 0; g < 4; ++g) {
    Philox4 p = philox_group(seed, offset, (idx0 >> 2) + g);
#pragma unroll
    for (int j = 0; j < 4; ++j) rnd[4 * g + j] = p.v[j];
  }
}

}  // namespace nvfp4::core
