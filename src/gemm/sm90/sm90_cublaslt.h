// The BF16 engine of the Hopper two-step runner where NVIDIA's own kernels are the faster:
// cuBLASLt, loaded at run time (libcublasLt.so.13, the one the CUDA 13 toolkit and torch's
// wheels ship), multiplying the operands the runner would hand CUTLASS. See sm90_cublaslt.cu.
#pragma once

#include <cstddef>

#include "gemm/backends.h"

namespace nvfp4::detail {

// Whether the two-step runner multiplies this job's decoded operands with cuBLASLt: NVFP4 (an
// amax each), operands as codes (the runner decodes them first) or decoded values
// (nvfp4_gemm_decoded), no bias, no C, D in BF16 or FP32 with rows of 16-byte multiples,
// operands and D 256-byte aligned, and either NVFP4_SM90_CUBLASLT=1 or, unset, the shapes
// where it was measured faster (sm90_cublaslt.cu); "0" never, nor while a CUTLASS setting
// (NVFP4_SM90_TILE, _SWIZZLE, _RASTER, _SPLITS) is given. With NVFP4_SM90_CUBLASLT=1 and no
// loadable libcublasLt a job it would take fails naming the library, and with a CUTLASS
// setting as well every job fails naming both (the status returned).
nvfp4_status_t sm90_cublaslt_choose(const GemmJob& job, int sm_count, bool* use, const char** why);

// Workspace of a job it takes: 256 bytes for alpha and beta, then cuBLASLt's own.
size_t sm90_cublaslt_workspace_size();

// D = alpha * (A @ B^T) on the decoded operands a_bf16 [M, K] and b_bf16 [N, K], alpha =
// core::gemm_alpha_of(amax_a, amax_b) formed on the device by one small kernel; the job as
// sm90_cublaslt_choose accepted it. workspace: sm90_cublaslt_workspace_size() bytes.
nvfp4_status_t sm90_cublaslt_gemm(const GemmJob& job, const void* a_bf16, const void* b_bf16, void* workspace,
                                  size_t workspace_bytes, nvfp4_stream_t stream);

}  // namespace nvfp4::detail
