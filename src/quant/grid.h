// The quantization kernels' persistent grids: gpu::persistent_grid with the test-only cap
// NVFP4_QUANT_GRID_CAP, with which tests check that no result depends on the launch
// configuration (read at each launch); and the passes' memset helper.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>

#include "cuda/device.h"
#include "settings.h"

namespace nvfp4::detail::quant {

inline int64_t grid_cap_from_env() {
  const char* v = setting("NVFP4_QUANT_GRID_CAP");
  return v ? std::strtol(v, nullptr, 10) : 0;
}

template <class Kernel>
inline unsigned persistent_grid(Kernel kernel, int threads, size_t smem, int64_t work_items) {
  return gpu::persistent_grid(kernel, threads, smem, work_items, grid_cap_from_env());
}

using gpu::allow_dynamic_smem;
using gpu::check_launch;

// Zeroes n bytes at p on `stream` (nothing for n = 0); NVFP4_ERROR_CUDA naming `who` if the
// memset cannot be queued. The quantization passes' one memset helper.
inline nvfp4_status_t memset_async(void* p, size_t n, cudaStream_t stream, const char* who) {
  if (n == 0) return NVFP4_SUCCESS;
  const cudaError_t e = cudaMemsetAsync(p, 0, n, stream);
  return e == cudaSuccess ? NVFP4_SUCCESS : gpu::cuda_error(e, std::string(who) + ": cudaMemsetAsync");
}

}  // namespace nvfp4::detail::quant
