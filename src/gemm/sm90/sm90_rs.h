// The Hopper GEMM that reads A as FP4 (sm90_rs.cu): A arrives as packed E2M1 codes and
// 128x4-swizzled E4M3 scales and is decoded in registers right before a register-sourced
// wgmma; B arrives decoded (BF16 [N, K], nvfp4_gemm_decoded's b_decoded) and goes to shared
// memory as it is. Warp-specialized: one producer warpgroup copies (cp.async), two consumer
// warpgroups decode their 64 rows of A and run wgmma (BF16, FP32 accumulation) on a
// 128 x 256 tile.
#pragma once

#include "internal.h"

namespace nvfp4::detail {

// True if the kernel can run this job: NVFP4, A as codes with swizzled scales, B decoded,
// K % 32 == 0, A's codes and scales and B 16-byte aligned, M, N, K < 2^31. No workspace.
// Off unless NVFP4_SM90_RS=1 (read on each call) while it is measured against the two-step
// path.
bool sm90_rs_applicable(const GemmJob& job);

nvfp4_status_t sm90_rs_gemm(const GemmJob& job, nvfp4_stream_t stream);

}  // namespace nvfp4::detail
