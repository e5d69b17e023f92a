// The FP4-reading Hopper GEMM (sm90_direct.cu): both operands arrive as packed E2M1 codes
// and 128x4-swizzled E4M3 scales and are decoded into shared memory inside the GEMM, so no
// BF16 copy of an operand goes to global memory. Warp-specialized: one producer
// warpgroup copies codes and scales (cp.async) and decodes B; two consumer warpgroups each
// decode their 64 rows of A and run wgmma (BF16, FP32 accumulation) on a 128 x 256 tile.
#pragma once

#include "internal.h"

namespace nvfp4::detail {

// True if the kernel can run this job: NVFP4 operands, swizzled scales, K % 32 == 0,
// codes and scales 16-byte aligned, M, N, K < 2^31. It needs no workspace. Off unless
// NVFP4_SM90_DIRECT=1 (read on each call) while it is measured against the two-step path.
bool sm90_direct_applicable(const GemmJob& job);

nvfp4_status_t sm90_direct_gemm(const GemmJob& job, nvfp4_stream_t stream);

}  // namespace nvfp4::detail
