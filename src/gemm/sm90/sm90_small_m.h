// The fused small-M NVFP4 GEMM for Hopper (sm90_small_m.cu): FP4 bytes and E4M3 scales
// go from global memory to shared memory and are decoded in registers right before the
// tensor-core instruction, so no BF16/FP16 copy of either operand is ever written.
#pragma once

#include "internal.h"

namespace nvfp4::detail {

// Largest M the fused kernel takes; above it the GEMM is compute-bound and the two-step
// path (decode + CUTLASS wgmma) wins.
constexpr int64_t kSm90SmallMMax = 128;

// True if the fused kernel can run this job: 1 <= M <= kSm90SmallMMax, K % 32 == 0 (and
// K % 64 == 0 with linear scales), data pointers 16-byte aligned, scale pointers 4-byte
// aligned. It needs no workspace.
bool sm90_small_m_applicable(const GemmJob& job);

// Runs the job (which must be applicable) on `stream`: the streaming kernel for
// M <= kSm90StreamMMax where its limits allow, else the ring kernel.
nvfp4_status_t sm90_small_m_gemm(const GemmJob& job, nvfp4_stream_t stream);

// The register-streaming kernel (sm90_small_m_stream.cu). Leaves *launched false, with no
// error, when the job is outside its limits (M, K too long for its shared memory, a
// cluster that cannot be placed); the caller then runs the ring kernel.
constexpr int64_t kSm90StreamMMax = 32;
nvfp4_status_t sm90_small_m_stream_gemm(const GemmJob& job, nvfp4_stream_t stream, bool* launched);

}  // namespace nvfp4::detail
