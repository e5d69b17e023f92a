#include "gemm/cudnn/cudnn_scalars.h"

#include <cuda_runtime.h>

#include <string>

#include "core/scale.h"
#include "cuda/device.h"
#include "internal.h"

namespace nvfp4::detail {
namespace {

__global__ void scalars_kernel(const float* amax_a, const float* amax_b, float beta, float* out) {
  // null amax pointers: operands without a per-tensor scale (MXFP4), alpha = 1
  out[0] = core::gemm_alpha(amax_a, amax_b);
  out[4] = beta;
}

}  // namespace

nvfp4_status_t cudnn_gemm_scalars(const float* amax_a, const float* amax_b, float beta, float* out,
                                  nvfp4_stream_t stream) {
  scalars_kernel<<<1, 1, 0, reinterpret_cast<cudaStream_t>(stream)>>>(amax_a, amax_b, beta, out);
  return gpu::check_launch("cudnn: scalar kernel launch");
}

}  // namespace nvfp4::detail
