// Scale layout conversion: linear [R, C] <-> the 128x4 swizzled [roundup(R,128),
// roundup(C,4)] (core::swizzle_offset). The four scales (r, 4j..4j+3) are four
// contiguous bytes of the swizzled layout, so each thread moves one such group: a
// 4-byte access on the swizzled side, byte accesses on the linear side (its rows need
// not be 4-byte aligned). Swizzling writes every destination byte, padding as 0.
#include "quant/common.cuh"

namespace nvfp4::detail {
namespace {

using quant::kThreads;

__global__ void __launch_bounds__(kThreads) swizzle_kernel(const uint8_t* __restrict__ src, uint8_t* __restrict__ dst,
                                                           int64_t R, int64_t C) {
  const int64_t groups = core::swizzled_cols(C) / 4;
  const int64_t n = core::swizzled_rows(R) * groups;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; g < n;
       g += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t r = g / groups, c0 = (g % groups) * 4;
    uint32_t w = 0u;
    if (r < R) {
#pragma unroll
      for (int k = 0; k < 4; ++k)
        if (c0 + k < C) w |= static_cast<uint32_t>(src[r * C + c0 + k]) << (8 * k);
    }
    *reinterpret_cast<uint32_t*>(dst + core::swizzle_offset(r, c0, C)) = w;
  }
}

__global__ void __launch_bounds__(kThreads) unswizzle_kernel(const uint8_t* __restrict__ src, uint8_t* __restrict__ dst,
                                                             int64_t R, int64_t C) {
  const int64_t groups = (C + 3) / 4;
  const int64_t n = R * groups;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; g < n;
       g += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t r = g / groups, c0 = (g % groups) * 4;
    const uint32_t w = *reinterpret_cast<const uint32_t*>(src + core::swizzle_offset(r, c0, C));
#pragma unroll
    for (int k = 0; k < 4; ++k)
      if (c0 + k < C) dst[r * C + c0 + k] = static_cast<uint8_t>(w >> (8 * k));
  }
}

}  // namespace

nvfp4_status_t cuda_swizzle(const SwizzleJob& job, nvfp4_stream_t s) {
  const cudaStream_t stream = reinterpret_cast<cudaStream_t>(s);
  const int64_t R = job.rows, C = job.cols;
  if (R == 0 || C == 0) return NVFP4_SUCCESS;  // both layouts are empty then
  if (job.to_swizzled) {
    const int64_t n = core::swizzled_size(R, C) / 4;
    const unsigned grid = quant::persistent_grid(swizzle_kernel, kThreads, 0, (n + kThreads - 1) / kThreads);
    swizzle_kernel<<<grid, kThreads, 0, stream>>>(job.src, job.dst, R, C);
    return quant::check_launch("nvfp4 swizzle kernel");
  }
  const int64_t n = R * ((C + 3) / 4);
  const unsigned grid = quant::persistent_grid(unswizzle_kernel, kThreads, 0, (n + kThreads - 1) / kThreads);
  unswizzle_kernel<<<grid, kThreads, 0, stream>>>(job.src, job.dst, R, C);
  return quant::check_launch("nvfp4 unswizzle kernel");
}

}  // namespace nvfp4::detail
