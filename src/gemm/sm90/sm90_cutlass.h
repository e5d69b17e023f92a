// The CUTLASS sm90 BF16 GEMMs behind the Hopper runner, seen from plain C++: no CUTLASS
// type leaves the sm90_cutlass_*.cu files. Each configuration is compiled in its own file
// (one CUTLASS kernel costs ~100 CPU-seconds and ~5 GB to compile), so they build in
// parallel.
//
//   D[M,N] = alpha * (A[M,K] @ B[N,K]^T) + beta * C[M,N] + bias[N]
//   A, B: BF16, K-major (row stride K); C, D: row-major with row stride N, C in D's dtype;
//   alpha = core::gemm_alpha(amax_a, amax_b), formed by the epilogue from the two fp32 amax
//   on the device (1 when amax_a is null); bias: fp32 [>= N] or null. FP32 accumulation and
//   epilogue, one rounding to D's dtype.
#pragma once

#include <cstddef>
#include <cstdint>

#include "internal.h"

namespace nvfp4::detail {

struct Sm90CutlassArgs {
  int m = 0, n = 0, k = 0;
  const void* a = nullptr;      // bf16 [m, k]
  const void* b = nullptr;      // bf16 [n, k]
  const void* c = nullptr;      // [m, n] in d's dtype, or null
  float beta = 0.0f;
  void* d = nullptr;            // [m, n]
  const float* amax_a = nullptr; // device [1], or null with amax_b (alpha = 1: MXFP4)
  const float* amax_b = nullptr; // device [1]
  const float* bias = nullptr;  // device [n] (16-byte aligned, zero-padded to a multiple of 4), or null
  int device = 0;
  int sm_count = 0;
  // Persistent tile scheduler: largest swizzle of the tile order (1, 2, 4, 8; 0: CUTLASS's
  // default) and raster order (0: CUTLASS's heuristic, 1: along M, 2: along N).
  int swizzle = 0;
  int raster = 0;
  // Stream-K configurations only: 0 lets CUTLASS choose the decomposition; n > 1 forces
  // split-K with n splits of K.
  int splits = 0;
};

// One entry per compiled configuration.
struct Sm90CutlassKernel {
  const char* name;
  nvfp4_dtype_t d_dtype;
  // Bytes of workspace CUTLASS itself needs for this problem.
  size_t (*workspace_size)(const Sm90CutlassArgs&);
  // Checks can_implement, then launches on `stream`. `workspace` holds workspace_size() bytes.
  nvfp4_status_t (*run)(const Sm90CutlassArgs&, void* workspace, nvfp4_stream_t stream);
};

// Tile shapes (M x N x K), clusters and schedules; see the .cu files.
extern const Sm90CutlassKernel kSm90Bf16Large;   // 128x256x64, cluster 2x1, cooperative
extern const Sm90CutlassKernel kSm90Bf16Medium;  // 128x128x64, cluster 1x1, ping-pong
extern const Sm90CutlassKernel kSm90Bf16Medium2x1;  // 128x128x64, cluster 2x1, ping-pong
extern const Sm90CutlassKernel kSm90F16;         // 128x128x64, cluster 1x1, cooperative
extern const Sm90CutlassKernel kSm90F32;         // 128x128x64, cluster 1x1, cooperative
extern const Sm90CutlassKernel kSm90F32Large;    // 128x256x64, cluster 2x1, cooperative
extern const Sm90CutlassKernel kSm90Bf16StreamK; // 128x128x64, cluster 1x1, cooperative, stream-K
extern const Sm90CutlassKernel kSm90F32StreamK;  // 128x128x64, cluster 1x1, cooperative, stream-K

}  // namespace nvfp4::detail
