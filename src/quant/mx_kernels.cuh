// Device helpers of the MXFP4 kernels (mx_quantize.cu; dequantize.cu decodes both formats): the per-block MX
// step. Input element types and the 16-byte loads of a block are the NVFP4 kernels'
// (common.cuh), over 32-element blocks. The format rules themselves come from src/core
// (mx.h, e8m0.h); the round-to-nearest E2M1 encoding uses the exact eight-at-a-time form
// of codec.cuh.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/block.h"
#include "core/mx.h"
#include "core/philox.h"
#include "core/swizzle.h"
#include "mx_internal.h"
#include "quant/codec.cuh"
#include "quant/common.cuh"
#include "quant/grid.h"

namespace nvfp4::detail::quant::mx {

constexpr int kBlock = core::kMxBlock;  // 32 elements per E8M0 scale
constexpr int kThreads = 256;

// ---- the per-block step --------------------------------------------------------------
// max |v| as a float whose NaN-ness and value are those of core::mx_block_amax: the bits
// of non-negative floats order like their values, and every NaN lies above +inf (the NaN
// payload may differ, which core::mx_scale_byte does not look at).
__device__ __forceinline__ float block_amax(const float (&v)[kBlock]) {
  uint32_t m = 0u;
#pragma unroll
  for (int i = 0; i < kBlock; ++i) m = max(m, __float_as_uint(v[i]) & 0x7fffffffu);
  return __uint_as_float(m);
}

struct Encoded {
  uint4 codes;     // 16 bytes, element 0 in the low nibble of .x
  uint32_t scale;  // E8M0 byte
};

// core::mx_encode_rn / core::mx_encode_sr of v under `rule`; idx0 = Philox index of v[0],
// keys the round keys of the seed (computed once on the host).
template <bool kSR>
__device__ __forceinline__ Encoded encode_block(const float (&v)[kBlock], uint32_t rule, const core::PhiloxKeys& keys,
                                                uint64_t offset, uint64_t idx0) {
  Encoded o;
  o.scale = core::mx_scale_byte(block_amax(v), rule);
  if (o.scale == core::kE8M0Nan) {
    // every x * NaN is NaN, which the reference encodes as 0x7 (RTN and SR alike)
    o.codes = make_uint4(0x77777777u, 0x77777777u, 0x77777777u, 0x77777777u);
  } else if constexpr (kSR) {
    // core::mx_encode_sr: per 16 elements one Philox group, element i taking byte i % 4
    // of word i / 4, which is what encode8_sr reads from the two words it is given.
    const float e = core::e8m0_encode_factor(o.scale);
    const core::Philox4 p0 = core::philox_words16(keys, offset, idx0);
    const core::Philox4 p1 = core::philox_words16(keys, offset, idx0 + 16u);
    o.codes = make_uint4(quant::encode8_sr(v, e, p0.v[0], p0.v[1]), quant::encode8_sr(v + 8, e, p0.v[2], p0.v[3]),
                         quant::encode8_sr(v + 16, e, p1.v[0], p1.v[1]),
                         quant::encode8_sr(v + 24, e, p1.v[2], p1.v[3]));
  } else {
    // encode8_rn(x, e) is e2m1_encode_rn(clamp(x * e, +-6)) for e > 0 (codec.cuh)
    const float e = core::e8m0_encode_factor(o.scale);
    o.codes = make_uint4(quant::encode8_rn(v, e), quant::encode8_rn(v + 8, e), quant::encode8_rn(v + 16, e),
                         quant::encode8_rn(v + 24, e));
  }
  return o;
}

}  // namespace nvfp4::detail::quant::mx
