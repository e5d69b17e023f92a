// 16-point Random Hadamard Transform: v -> v . diag(signs) . H16 / 4, with H16 the
// Sylvester Hadamard matrix (orthonormal after the 1/4).
//
// The summation order is part of the contract (it decides the fp32 rounding): signs
// first (exact), then the in-place fast Walsh-Hadamard butterfly with strides 1, 2, 4,
// 8 — (a, b) -> (a + b, a - b) — then a multiply by 0.25 (exact). The result is kept
// in fp32 before quantization (TransformerEngine rounds it to the input dtype first;
// this is a deliberate difference: fp32 loses less and is what the kernels hold anyway).
#pragma once
#include "common.h"

namespace nvfp4::core {

// TransformerEngine's fixed wgrad sign vector, as a bitmask: bit i set means -1.
// [1,1,1,-1,1,-1,-1,-1,-1,-1,-1,1,-1,1,-1,-1]
constexpr uint32_t kDefaultRhtSignMask = 0xD7E8u;

// The butterfly's stages of strides kFrom, 2 kFrom, ... below kTo, in that order (the whole
// butterfly: 1 to 16; the kernels run parts of it where they fold a stage into other work).
template <int kFrom = 1, int kTo = 16>
NVFP4_HD void fwht16_stages(float (&v)[16]) {
#pragma unroll
  for (int h = kFrom; h < kTo; h <<= 1) {
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      if ((i & h) == 0) {
        float a = v[i], b = v[i + h];
        v[i] = a + b;
        v[i + h] = a - b;
      }
    }
  }
}

// The butterfly and the scaling, without the signs.
NVFP4_HD void fwht16_scaled(float (&v)[16]) {
  fwht16_stages(v);
#pragma unroll
  for (int i = 0; i < 16; ++i) v[i] *= 0.25f;
}

// rht16 with the signs given as factors s[i] = +-1 and applied inside the first butterfly
// stage: s[i] * v[i] +- s[i+1] * v[i+1] as fma(s[i], v[i], +-t) with t = s[i+1] * v[i+1].
// Every product by +-1 is exact (a sign flip, as in rht16), so each sum is rounded once,
// from the same operands: the results are rht16's, bit for bit, NaN and signed zeros
// included. (The kernels use it: a multiply-add is cheaper there than flipping signs.)
NVFP4_HD float fma_f(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return a * b + c;  // a = +-1: the product is exact, so this is the fused result
#endif
}

NVFP4_HD void rht16_fma(float (&v)[16], const float (&s)[16]) {
#pragma unroll
  for (int i = 0; i < 16; i += 2) {
    const float t = s[i + 1] * v[i + 1];
    const float a = v[i];
    v[i] = fma_f(s[i], a, t);
    v[i + 1] = fma_f(s[i], a, -t);
  }
  fwht16_stages<2>(v);
#pragma unroll
  for (int i = 0; i < 16; ++i) v[i] *= 0.25f;
}

NVFP4_HD void rht16(float (&v)[16], uint32_t sign_mask) {
#pragma unroll
  for (int i = 0; i < 16; ++i)
    if ((sign_mask >> i) & 1u) v[i] = -v[i];
  fwht16_scaled(v);
}

}  // namespace nvfp4::core
