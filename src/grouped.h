// Internal interface of the grouped (mixture-of-experts) entry points (api_grouped.cpp) with the
// CPU reference (cpu/grouped.cpp) and the CUDA kernels (quant/grouped.cu, gemm/sm90/sm90_grouped*.cu).
// The layouts are those of nvfp4.h's grouped section; the sizes here are the host's upper bounds
// (T, E and the features only: offs is never read on the host for CUDA tensors).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/common.h"
#include "internal.h"

namespace nvfp4::detail {

// Token padding of a group's columnwise orientation (the K of the weight-gradient GEMM; native
// FP4 GEMMs need K % 32 == 0). The same value as the dense layers' token padding.
constexpr int64_t kGroupTokenAlign = 32;

// Upper bounds of the grouped buffers for T tokens in E groups of `features` columns (checked
// for overflow by the API before use).
//   rowwise scale rows:        roundup(T + 127 E, 128)
//   columnwise data bytes:     features * (T + 31 E) / 2
//   columnwise scale bytes:    roundup(features, 128) * ((T + 63 E) / 16)
NVFP4_HD int64_t grouped_row_scale_rows(int64_t t, int64_t e) { return (t + 127 * e + 127) / 128 * 128; }
NVFP4_HD int64_t grouped_col_tokens(int64_t t, int64_t e) { return t + (kGroupTokenAlign - 1) * e; }
NVFP4_HD int64_t grouped_col_scale_cols(int64_t t, int64_t e) { return (t + 63 * e) / 16; }

// A direction is requested iff its amax is set ([E], never empty); data may be null when the
// direction has no elements (T = 0).
struct GroupedOut {
  uint8_t* data = nullptr;
  uint8_t* scales = nullptr;
  float* amax = nullptr;      // [E]; null: direction not requested
};

// x [T, K] in E groups (nvfp4_grouped_quantize). cfg is validated: 1D, swizzled.
struct GroupedQuantJob {
  const void* x = nullptr;
  nvfp4_dtype_t dtype = NVFP4_DTYPE_FLOAT32;
  int64_t t = 0, k = 0, e = 0;
  const int32_t* offs = nullptr;  // [E], in x's memory space
  int32_t* offs_error = nullptr;  // optional [1]
  nvfp4_quant_config_t cfg{};
  GroupedOut row, col;
  // bytes of each buffer (every byte is written)
  int64_t row_scale_bytes = 0, col_data_bytes = 0, col_scale_bytes = 0;
};

// One grouped GEMM (nvfp4_grouped_gemm), validated.
//   RAGGED_M: a rowwise grouped [T, K]; b batched [E, N, K]; d [T, N].
//   RAGGED_K: a columnwise grouped of dY [T, N] (n = N), b of X [T, K] (k = K); d [E, N, K].
struct GroupedGemmJob {
  nvfp4_grouped_kind_t kind = NVFP4_GROUPED_RAGGED_M;
  const uint8_t* a = nullptr;
  const uint8_t* sfa = nullptr;
  const float* amax_a = nullptr;  // [E]
  const uint8_t* b = nullptr;
  const uint8_t* sfb = nullptr;
  const float* amax_b = nullptr;  // [E]
  const int32_t* offs = nullptr;
  int32_t* offs_error = nullptr;
  int64_t t = 0, e = 0, n = 0, k = 0;
  void* d = nullptr;
  nvfp4_dtype_t d_dtype = NVFP4_DTYPE_BFLOAT16;
};

// ---- CPU reference (cpu/grouped.cpp); offs already checked on the host ----
nvfp4_status_t cpu_grouped_quantize(const GroupedQuantJob& job);
nvfp4_status_t cpu_grouped_gemm(const GroupedGemmJob& job);

// x [E, N, K] as E tensors (nvfp4_batched_quantize); N, K multiples of 16. Outputs stacked:
// rowwise [E, N, K/2] + [E, roundup(N,128), roundup(K/16,4)], columnwise [E, K, N/2] +
// [E, roundup(K,128), roundup(N/16,4)], amax [E] each.
struct BatchedQuantJob {
  const void* x = nullptr;
  nvfp4_dtype_t dtype = NVFP4_DTYPE_FLOAT32;
  int64_t e = 0, n = 0, k = 0;
  nvfp4_quant_config_t cfg{};
  GroupedOut row, col;
  int64_t row_scale_bytes = 0, col_scale_bytes = 0;
};

#if defined(NVFP4_WITH_CUDA)
// ---- CUDA (quant/grouped.cu): one setup kernel, one amax pass, one quantize pass ----
nvfp4_status_t cuda_grouped_quantize(const GroupedQuantJob& job, nvfp4_stream_t stream);
// quant/batched.cu: one amax pass and one quantize pass over 16x16 tiles of every tensor
nvfp4_status_t cuda_batched_quantize(const BatchedQuantJob& job, nvfp4_stream_t stream);
#endif

}  // namespace nvfp4::detail
