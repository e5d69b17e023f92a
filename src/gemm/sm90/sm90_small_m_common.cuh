// Device helpers shared by the two fused small-M NVFP4 kernels for Hopper
// (sm90_small_m_ring.cu: cp.async ring, any M <= 128; sm90_small_m_stream.cu: register
// streaming, M <= 32). Included only by those two files.
//
// Decode of the E2M1 codes and block scales, the K order both kernels use and the epilogue:
// gemm/sm90/sm90_fp4_decode.cuh.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/swizzle.h"
#include "cuda/device.h"
#include "gemm/sm90/sm90_fp4_decode.cuh"
#include "internal.h"

namespace nvfp4::detail::small_m {

using gpu::smem_u32;
// The FP4 decode and the epilogue, shared with the FP4-reading kernel (sm90_fp4_decode.cuh).
using sm90::decode8;
using sm90::e4m3x2_to_f16x2;
using sm90::Epilogue;
using sm90::hmul2;
using sm90::scale_pair;
using sm90::scale_pairs2;
using sm90::store_output;

__device__ __forceinline__ void mma16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

using gpu::load_as_float;
using gpu::store_from_float;

__host__ __device__ __forceinline__ int64_t scale_offset(bool swizzled, int64_t r, int64_t c, int64_t cols) {
  return swizzled ? core::swizzle_offset(r, c, cols) : r * cols + c;
}

}  // namespace nvfp4::detail::small_m
