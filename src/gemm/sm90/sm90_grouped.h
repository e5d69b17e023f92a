// The CUTLASS sm90 grouped (ptr-array) BF16 GEMMs behind the Hopper grouped runner
// (sm90_grouped.cu), seen from plain C++: no CUTLASS type leaves the sm90_grouped_*.cu files.
//
//   for each group g < groups: D_g[M_g, N_g] = alpha[g] * (A_g[M_g, K_g] @ B_g[N_g, K_g]^T)
//   A_g, B_g: BF16, K-major (row stride lda_g / ldb_g); D_g row-major (row stride ldd_g);
//   FP32 accumulation, one rounding to D's dtype. Everything per group lives on the device,
//   written by the runner's setup kernel: problem shapes (int32 M, N, K; a group with M = 0 is
//   skipped), the three pointer arrays and the three leading dimensions (int64).
#pragma once

#include <cstddef>
#include <cstdint>

#include "internal.h"

namespace nvfp4::detail {

struct Sm90GroupedArgs {
  int groups = 0;
  const int32_t* problems = nullptr;  // device [groups][3]: M, N, K
  const void* const* a = nullptr;     // device [groups] bf16 pointers
  const void* const* b = nullptr;
  void* const* d = nullptr;
  const int64_t* lda = nullptr;       // device [groups] leading dimensions (elements)
  const int64_t* ldb = nullptr;
  const int64_t* ldd = nullptr;
  const float* const* alpha = nullptr;  // device [groups] pointers, alpha[g] -> group g's alpha
  int device = 0;
  int sm_count = 0;
};

struct Sm90GroupedKernel {
  const char* name;
  nvfp4_dtype_t d_dtype;
  // CUTLASS's own workspace for `groups` groups (no pointer is read).
  size_t (*workspace_size)(const Sm90GroupedArgs&);
  // Host-only: that the per-group arrays' element layouts (int32 x3 problem shape, int64
  // strides) are what this file's CUTLASS types are. SUCCESS or NVFP4_ERROR_INTERNAL.
  nvfp4_status_t (*check_layouts)();
  nvfp4_status_t (*run)(const Sm90GroupedArgs&, void* workspace, nvfp4_stream_t stream);
};

// 128x256x64 tiles, cluster 2x1, cooperative (the large configuration of the dense runner).
extern const Sm90GroupedKernel kSm90GroupedBf16;
extern const Sm90GroupedKernel kSm90GroupedF32;

}  // namespace nvfp4::detail
