// The device-side FP4 pieces of the Hopper kernels that read NVFP4 operands themselves (the
// fused small-M kernels, sm90_small_m*.cu, and the FP4-reading GEMM, sm90_direct.cu): the
// decode of E2M1 codes and E4M3 block scales to FP16, and the epilogue.
//
// Decode of one E2M1 code c = (s, e1 e0, m): the byte s|0|0|e1 e0|m|0|0 read as E4M3
// equals value(c) * 2^-6 exactly, subnormal codes included (both formats put the implicit
// bit at the same exponent), so cvt.rn.f16x2.e4m3x2 decodes two codes at once; the 2^6
// goes into the block scale, which is multiplied in FP16 (exact: E2M1 x E4M3 has <= 6
// significant bits and lies in [2^-10, 2688]). tests/python/test_gemm_cuda.py checks this
// for all 16 codes x all 127 finite scales.
//
// K order: the mma only needs its two operands to agree on which k each register slot
// holds, and a block scale covers 16 consecutive elements, so these kernels permute k
// inside each 8-element word to what decode8 produces cheaply, identically for both
// operands: slot pairs (e0,e2),(e4,e6) | (e1,e3),(e5,e7) of each 32-bit word.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/device.h"
#include "internal.h"

namespace nvfp4::detail::sm90 {

// Two E4M3 bytes (low byte -> low half) to two FP16.
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t v16) {
  uint32_t r;
  asm("{\n .reg .b16 t;\n cvt.u16.u32 t, %1;\n cvt.rn.f16x2.e4m3x2 %0, t;\n}\n" : "=r"(r) : "r"(v16));
  return r;
}

__device__ __forceinline__ uint32_t hmul2(uint32_t a, uint32_t b) {
  __half2 r = __hmul2(*reinterpret_cast<__half2*>(&a), *reinterpret_cast<__half2*>(&b));
  return *reinterpret_cast<uint32_t*>(&r);
}

// Block scale byte -> FP16 pair (s * 2^6, s * 2^6), undoing decode8's 2^-6.
__device__ __forceinline__ uint32_t scale_pair(uint32_t sb) {
  const uint32_t s = e4m3x2_to_f16x2(sb | (sb << 8));
  return hmul2(s, 0x54005400u);  // 64.0 in both halves
}

// Two block-scale bytes (low byte first) -> their FP16 pairs (s0 * 2^6, s0 * 2^6) and
// (s1 * 2^6, s1 * 2^6): one conversion for both.
__device__ __forceinline__ void scale_pairs2(uint32_t s2, uint32_t& p0, uint32_t& p1) {
  const uint32_t s = hmul2(e4m3x2_to_f16x2(s2), 0x54005400u);
  p0 = __byte_perm(s, 0u, 0x1010);
  p1 = __byte_perm(s, 0u, 0x3232);
}

// 8 E2M1 codes (element i in nibble i) times the block scale -> 4 FP16 pairs in the
// kernels' K order: (e0,e2), (e4,e6), (e1,e3), (e5,e7). Exact (see the top of the file).
__device__ __forceinline__ void decode8(uint32_t w, uint32_t scale2, uint32_t (&d)[4]) {
  // Even elements (low nibbles) and odd elements (high nibbles) as E4M3 bytes s|00|eem|00.
  const uint32_t ev = ((w << 4) & 0x80808080u) | ((w << 2) & 0x1c1c1c1cu);
  const uint32_t od = (w & 0x80808080u) | ((w >> 2) & 0x1c1c1c1cu);
  // One asm block, so that the 16-bit halves are operand selectors, not extra shifts.
  uint32_t f[4];
  asm("{\n .reg .b16 e0, e1, o0, o1;\n"
      " mov.b32 {e0, e1}, %4;\n"
      " mov.b32 {o0, o1}, %5;\n"
      " cvt.rn.f16x2.e4m3x2 %0, e0;\n"
      " cvt.rn.f16x2.e4m3x2 %1, e1;\n"
      " cvt.rn.f16x2.e4m3x2 %2, o0;\n"
      " cvt.rn.f16x2.e4m3x2 %3, o1;\n}\n"
      : "=r"(f[0]), "=r"(f[1]), "=r"(f[2]), "=r"(f[3])
      : "r"(ev), "r"(od));
#pragma unroll
  for (int i = 0; i < 4; ++i) d[i] = hmul2(f[i], scale2);
}

// The output side of both kernels: alpha, bias, beta * C and the output dtype.
struct Epilogue {
  const float* amax_a;
  const float* amax_b;
  const void* c;  // null when beta == 0 (C is then not read, as in CUTLASS)
  nvfp4_dtype_t c_dtype;
  float beta;
  const void* bias;
  nvfp4_dtype_t bias_dtype;
  void* d;
  nvfp4_dtype_t d_dtype;
};

// Same order of operations as the CUTLASS epilogue: beta * C + (alpha * acc + bias).
__device__ __forceinline__ void store_output(const Epilogue& e, float alpha, float acc, int tok, int n, int ldd) {
  float v = alpha * acc;
  if (e.bias != nullptr) v = v + gpu::load_as_float(e.bias, e.bias_dtype, n);
  const int64_t o = static_cast<int64_t>(tok) * ldd + n;
  if (e.c != nullptr) v = e.beta * gpu::load_as_float(e.c, e.c_dtype, o) + v;
  gpu::store_from_float(e.d, e.d_dtype, o, v);
}

}  // namespace nvfp4::detail::sm90
