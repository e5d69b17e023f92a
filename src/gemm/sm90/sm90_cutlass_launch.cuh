// The host side of one CUTLASS 3.x sm90 GEMM launch, shared by the dense and grouped
// configurations: what GemmUniversalAdapter::initialize + run do, without their driver
// calls on every GEMM — a training step launches ~150 of these, and each call's host time
// is what a step at small sizes waits on:
//  - the kernel's dynamic shared-memory attribute (above 48 KiB a kernel must opt in) is set
//    once per (device, kernel) through gpu::allow_dynamic_smem;
//  - a cluster kernel is launched with its cluster shape as a launch attribute, without the
//    cudaFuncSetAttribute(NonPortableClusterSizeAllowed) CUTLASS's launcher makes before each
//    launch: the configurations' clusters (at most 2 CTAs) are of the portable sizes (<= 8),
//    which need no opt-in;
//  - TMA descriptors are built through a driver function pointer looked up once
//    (gemm/common/driver_api.h), not by name per descriptor.
#pragma once

#include <cuda_runtime.h>

#include "cute/layout.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/device_kernel.h"
#include "cutlass/kernel_launch.h"

#include "cuda/device.h"

namespace nvfp4::detail::sm90 {

// The launch of GemmUniversalAdapter::run (no programmatic dependent launch), for sm90
// kernels with a static cluster shape.
template <class Gemm>
cutlass::Status launch(typename Gemm::GemmKernel::Params& params, cudaStream_t stream) {
  using Kernel = typename Gemm::GemmKernel;
  using Cluster = typename Kernel::DispatchPolicy::ClusterShape;
  static_assert(cute::is_static_v<Cluster>, "a static cluster shape");
  constexpr unsigned cx = cute::size<0>(Cluster{}), cy = cute::size<1>(Cluster{}), cz = cute::size<2>(Cluster{});
  static_assert(cx * cy * cz <= 8, "larger clusters need cudaFuncAttributeNonPortableClusterSizeAllowed");
  const dim3 block = Kernel::get_block_shape();
  const dim3 grid = Gemm::get_grid_shape(params);
  constexpr int kSmem = static_cast<int>(Kernel::SharedStorageSize);
  if constexpr (cx * cy * cz == 1) {
    return cutlass::kernel_launch<Kernel>(grid, block, kSmem, stream, params, false);
  } else {
    if (grid.x % cx != 0 || grid.y % cy != 0 || grid.z % cz != 0) return cutlass::Status::kInvalid;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = cx;
    attr[0].val.clusterDim.y = cy;
    attr[0].val.clusterDim.z = cz;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = kSmem;
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    void* args[] = {&params};
    const cudaError_t e = cudaLaunchKernelExC(&cfg, reinterpret_cast<const void*>(&cutlass::device_kernel<Kernel>), args);
    return e == cudaSuccess ? cutlass::Status::kSuccess : cutlass::Status::kErrorInternal;
  }
}

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
  return launch<Gemm>(params, stream);
}

}  // namespace nvfp4::detail::sm90
