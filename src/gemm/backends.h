// GEMM runners behind dispatch.cpp. Each is compiled only where its architecture is
// built (the NVFP4_HAS_* macros are set by cmake/nvfp4_*.cmake on the host objects).
// Every runner receives a GemmJob that api.cpp has validated; all pointers are on the
// current CUDA device; alpha = S_dec(A) * S_dec(B) is computed on the device from
// amax_a / amax_b (no host synchronization).
#pragma once

#include "internal.h"

namespace nvfp4::detail {

// Shared by all runners: the per-tensor alpha, on the device.
//   alpha = (amax_a / 2688) * (amax_b / 2688) in the exact fp32 form of the contract:
//   (1 / S_enc(amax_a)) * (1 / S_enc(amax_b)).

#if defined(NVFP4_HAS_SM90_GEMM)
// Hopper: exact emulation (FP4 -> BF16 decode, BF16 tensor cores, FP32 accumulation).
size_t sm90_gemm_workspace_size(const GemmJob& job);
nvfp4_status_t sm90_gemm(const GemmJob& job, void* workspace, size_t workspace_bytes,
                         nvfp4_stream_t stream);
// Decode an FP4 operand [rows, k] to BF16 (value * block scale, without the per-tensor
// scale, exact), row-major. Used by the cuDNN runner on Hopper too.
nvfp4_status_t sm90_decode_bf16(const uint8_t* data, const uint8_t* scales, int64_t rows, int64_t k,
                                nvfp4_scale_layout_t layout, void* out_bf16, nvfp4_stream_t stream);
// alpha[0] = S_dec(amax_a) * S_dec(amax_b), computed by a 1-thread kernel.
nvfp4_status_t gemm_alpha(const float* amax_a, const float* amax_b, float* alpha, nvfp4_stream_t stream);
#endif

#if defined(NVFP4_HAS_SM100_GEMM)
size_t sm100_gemm_workspace_size(const GemmJob& job);
// Host-only check (no launch): what CUTLASS's can_implement says of this problem.
nvfp4_status_t sm100_gemm_can_implement(const GemmJob& job);
nvfp4_status_t sm100_gemm(const GemmJob& job, void* workspace, size_t workspace_bytes,
                          nvfp4_stream_t stream);
#endif

#if defined(NVFP4_HAS_SM120_GEMM)
size_t sm120_gemm_workspace_size(const GemmJob& job);
nvfp4_status_t sm120_gemm_can_implement(const GemmJob& job);
nvfp4_status_t sm120_gemm(const GemmJob& job, void* workspace, size_t workspace_bytes,
                          nvfp4_stream_t stream);
#endif

#if defined(NVFP4_HAS_CUDNN)
// cc: compute capability of the current device (major*10+minor).
nvfp4_status_t cudnn_gemm_workspace_size(const GemmJob& job, int cc, size_t* bytes);
nvfp4_status_t cudnn_gemm(const GemmJob& job, int cc, void* workspace, size_t workspace_bytes,
                          nvfp4_stream_t stream);
// 1 if libcudnn.so.9 can be loaded and is recent enough; never throws.
int cudnn_available();
#endif

// dispatch.cpp
int backend_supported(nvfp4_backend_t backend, int cc);
nvfp4_backend_t resolve_backend(nvfp4_backend_t backend, int cc);
nvfp4_status_t gemm_workspace_size(const GemmJob& job, nvfp4_backend_t backend, bool on_cuda,
                                   size_t* bytes);
nvfp4_status_t gemm_run(const GemmJob& job, nvfp4_backend_t backend, bool on_cuda, void* workspace,
                        size_t workspace_bytes, nvfp4_stream_t stream);

}  // namespace nvfp4::detail
