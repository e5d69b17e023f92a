// Internal interface of the gather-row entry points (api_gather.cpp) with the CPU reference
// (cpu/gather.cpp) and the CUDA kernels (quant/gather.cu). The layout is nvfp4.h's gather
// section; everything here has been validated by the API.
#pragma once

#include <cstdint>

#include "internal.h"

namespace nvfp4::detail {

// x [rows, cols] quantized in 16x16 tiles with the given amax into out [rows_out, row_bytes].
struct GatherQuantJob {
  const void* x = nullptr;
  nvfp4_dtype_t dtype = NVFP4_DTYPE_FLOAT32;
  int64_t rows = 0, cols = 0;       // rows % 16 == 0, cols % 16 == 0
  const float* amax = nullptr;      // [1]
  uint8_t* out = nullptr;           // [rows_out, row_bytes]
  int64_t rows_out = 0, row_bytes = 0;
};

// Gather rows in [>= n, row_bytes] of W [n, k] -> W (row) and W^T (col), swizzled scales; a
// direction whose data is null is not written.
struct GatherAssembleJob {
  const uint8_t* in = nullptr;
  int64_t row_bytes = 0;
  int64_t n = 0, k = 0;             // n % 16 == 0, k % 16 == 0
  const float* amax = nullptr;      // [1]
  QuantOut row, col;
};

nvfp4_status_t cpu_gather_quantize(const GatherQuantJob& job);
nvfp4_status_t cpu_gather_assemble(const GatherAssembleJob& job);
#if defined(NVFP4_WITH_CUDA)
nvfp4_status_t cuda_gather_quantize(const GatherQuantJob& job, nvfp4_stream_t stream);
nvfp4_status_t cuda_gather_assemble(const GatherAssembleJob& job, nvfp4_stream_t stream);
#endif

}  // namespace nvfp4::detail
