// Device pieces shared by the hand-written warp-specialized Hopper GEMMs (sm90_direct.cu,
// sm90_rs.cu): mbarriers and named barriers, TMA and bulk copies, the wgmma shared-memory
// descriptor, and the epilogue's staging of an m64n256 FP32 accumulator fragment.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include <cute/arch/mma_sm90_gmma.hpp>

#include "cuda/device.h"
#include "gemm/sm90/sm90_fp4_decode.cuh"

namespace nvfp4::detail::sm90 {

// ---- mbarriers, named barriers, proxy fence ---------------------------------------------
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(gpu::smem_u32(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];\n" ::"r"(gpu::smem_u32(bar)) : "memory");
}
// Arrives and adds `bytes` to the transaction count the phase waits for (TMA / bulk copies).
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(gpu::smem_u32(bar)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  const uint32_t addr = gpu::smem_u32(bar);
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(addr), "r"(parity)
        : "memory");
  }
}
// A barrier among the 128 threads of one warpgroup (ids 1..3; 0 is __syncthreads).
__device__ __forceinline__ void wg_barrier(int id) { asm volatile("bar.sync %0, 128;\n" ::"r"(id) : "memory"); }
// Generic-proxy writes to shared memory become visible to wgmma (the async proxy).
__device__ __forceinline__ void fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// ---- TMA and bulk copies -------------------------------------------------------------------
// The box at (x, y) of a 2D tensor map into shared memory, completing on `bar`.
__device__ __forceinline__ void tma_load_2d(void* dst, const void* map, int x, int y, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          gpu::smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(gpu::smem_u32(bar))
      : "memory");
}
// `bytes` contiguous bytes (16-byte aligned, a multiple of 16), completing on `bar`.
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   gpu::smem_u32(dst)),
               "l"(src), "r"(bytes), "r"(gpu::smem_u32(bar))
               : "memory");
}

// ---- wgmma ---------------------------------------------------------------------------------
// Descriptor of a K-major 16-bit tile in the 128-byte swizzle: rows of 128 bytes, 8-row groups
// 1024 bytes apart (the stride), start address in 16-byte units. Advancing K by 16 elements
// inside the 64-element row is +32 bytes on the start address.
__device__ __forceinline__ uint64_t sw128_desc(uint32_t addr) {
  uint64_t d = static_cast<uint64_t>((addr & 0x3ffff) >> 4);
  d |= static_cast<uint64_t>(1) << 16;          // leading byte offset (unused by this layout)
  d |= static_cast<uint64_t>(1024 >> 4) << 32;  // stride byte offset
  d |= static_cast<uint64_t>(1) << 62;          // 128-byte swizzle
  return d;
}

__device__ __forceinline__ void fence_acc(float (&acc)[128]) {
#pragma unroll
  for (int i = 0; i < 128; ++i) cute::warpgroup_fence_operand(acc[i]);
}

// ---- epilogue ------------------------------------------------------------------------------
// A consumer warpgroup's m64n256 accumulators into its 64-row tile of shared memory (`ld`
// floats a row), so that the stores to D can be row-contiguous. Accumulator i of the
// fragment: row 16 * warp + lane / 4 (+ 8 for i % 4 >= 2), column 8 * (i / 4) + 2 * (lane % 4)
// + i % 2.
__device__ __forceinline__ void stage_acc(const float (&acc)[128], float* tile, int ld, int warp, int lane) {
#pragma unroll
  for (int i = 0; i < 128; i += 2) {
    const int row = 16 * warp + lane / 4 + ((i & 2) ? 8 : 0);
    const int col = 8 * (i / 4) + 2 * (lane % 4);
    *reinterpret_cast<float2*>(tile + row * ld + col) = make_float2(acc[i], acc[i + 1]);
  }
}

// beta * C + (alpha * acc + bias) for each element of a staged 64 x 256 tile whose first
// element is D[row0, col0], one element per thread and step (any dtype, C, N).
__device__ __forceinline__ void store_tile_per_element(const Epilogue& e, float alpha, const float* tile, int ld,
                                                       int row0, int col0, int m, int n, int t128) {
#pragma unroll 1
  for (int i = t128; i < 64 * 256; i += 128) {
    const int r = i / 256, cl = i % 256;
    const int row = row0 + r, col = col0 + cl;
    if (row >= m || col >= n) continue;
    store_output(e, alpha, tile[r * ld + cl], row, col, n);
  }
}

}  // namespace nvfp4::detail::sm90
