// The quantization kernels' persistent grids: gpu::persistent_grid with the test-only cap
// NVFP4_QUANT_GRID_CAP, with which tests check that no result depends on the launch
// configuration (read at each launch).
#pragma once

#include <cstdint>
#include <cstdlib>

#include "cuda/device.h"

namespace nvfp4::detail::quant {

inline int64_t grid_cap_from_env() {
  const char* v = std::getenv("NVFP4_QUANT_GRID_CAP");
  return v ? std::strtol(v, nullptr, 10) : 0;
}

template <class Kernel>
inline unsigned persistent_grid(Kernel kernel, int threads, size_t smem, int64_t work_items) {
  return gpu::persistent_grid(kernel, threads, smem, work_items, grid_cap_from_env());
}

using gpu::allow_dynamic_smem;
using gpu::check_launch;

}  // namespace nvfp4::detail::quant
