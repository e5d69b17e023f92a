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

NVFP4_HD void rht16(float (&v)[16], uint32_t sign_mask) {
#pragma unroll
  for (int i = 0; i < 16; ++i)
    if ((sign_mask >> i) & 1u) v[i] = -v[i];
#pragma unroll
  for (int h = 1; h < 16; h <<= 1) {
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      if ((i & h) == 0) {
        float a = v[i], b = v[i + h];
        v[i] = a + b;
        v[i + h] = a - b;
      }
    }
  }
#pragma unroll
  for (int i = 0; i < 16; ++i) v[i] *= 0.25f;
}

}  // namespace nvfp4::core
