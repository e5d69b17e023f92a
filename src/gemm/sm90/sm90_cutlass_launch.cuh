// The host side of one CUTLASS 3.x sm90 GEMM launch, shared by the dense and grouped
// configurations: what GemmUniversalAdapter::initialize + run do, except that the
// kernel's dynamic shared-memory attribute (above 48 KiB a kernel must opt in) is set once
// per (device, kernel) through gpu::allow_dynamic_smem instead of by a driver call on every
// GEMM — a training step launches ~150 of these, and each call's host time is what a
// step at small sizes waits on.
#pragma once

#include <cuda_runtime.h>

#include "cutlass/cutlass.h"
#include "cutlass/device_kernel.h"

#include "cuda/device.h"

namespace nvfp4::detail::sm90 {

// Workspace set-up (stream-K's reduction state, the grouped problems' copies), the kernel's
// parameters (TMA descriptors), then the launch on `stream`. kErrorInternal where the
// shared-memory opt-in fails (the CUDA error stays readable for the caller's message).
template <class Gemm>
cutlass::Status initialize_and_run(typename Gemm::Arguments const& args, void* workspace, cudaStream_t stream) {
  using Kernel = typename Gemm::GemmKernel;
  cutlass::Status st = Kernel::initialize_workspace(args, workspace, stream, nullptr);
  if (st != cutlass::Status::kSuccess) return st;
  typename Kernel::Params params = Kernel::to_underlying_arguments(args, workspace);
  constexpr int kSmem = static_cast<int>(Kernel::SharedStorageSize);
  if constexpr (kSmem >= (48 << 10)) {
    if (gpu::allow_dynamic_smem(cutlass::device_kernel<Kernel>, kSmem) != NVFP4_SUCCESS)
      return cutlass::Status::kErrorInternal;
  }
  return Gemm::run(params, stream);
}

}  // namespace nvfp4::detail::sm90
