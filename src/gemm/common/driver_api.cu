// nvfp4internal_cuTensorMapEncodeTiled: the driver's cuTensorMapEncodeTiled, looked up once
// (gemm/common/driver_api.h says why).
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include "gemm/common/driver_api.h"

namespace {

PFN_cuTensorMapEncodeTiled_v12000 lookup() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q{};
  if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();  // the caller reports the failure as its own
    return nullptr;
  }
  return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
}

}  // namespace

extern "C" CUresult nvfp4internal_cuTensorMapEncodeTiled(
    CUtensorMap* tensorMap, CUtensorMapDataType tensorDataType, cuuint32_t tensorRank, void* globalAddress,
    const cuuint64_t* globalDim, const cuuint64_t* globalStrides, const cuuint32_t* boxDim,
    const cuuint32_t* elementStrides, CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
    CUtensorMapL2promotion l2Promotion, CUtensorMapFloatOOBfill oobFill) {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = lookup();  // thread-safe, once
  if (fn == nullptr) return CUDA_ERROR_NOT_FOUND;
  return fn(tensorMap, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides, boxDim, elementStrides,
            interleave, swizzle, l2Promotion, oobFill);
}
