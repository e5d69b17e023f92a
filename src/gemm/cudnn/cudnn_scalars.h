// The one CUDA kernel the cuDNN runner needs: the per-call scalars of the epilogue, in
// device memory so that no host synchronization is needed to read amax. Lives in its own
// .cu because cudnn_gemm.cpp is plain C++ (built by the host compiler).
#pragma once

#include "nvfp4/nvfp4.h"

namespace nvfp4::detail {

// out[0] = alpha = S_dec(amax_a) * S_dec(amax_b) (the contract's exact fp32 form; 1 when
// amax_a is null, for operands without a per-tensor scale: MXFP4),
// out[4] = beta: each scalar 16-byte aligned, as cuDNN expects of every tensor. One
// thread, on `stream`; reports a launch failure as NVFP4_ERROR_CUDA.
nvfp4_status_t cudnn_gemm_scalars(const float* amax_a, const float* amax_b, float beta, float* out,
                                  nvfp4_stream_t stream);

}  // namespace nvfp4::detail
