// Internal interface of the MXFP4 entry points (api_quantize.cpp) with the CPU reference
// (cpu/mx.cpp) and the CUDA kernels (quant/mx_*.cu). Plain pointers and sizes only:
// api_quantize.cpp has validated every descriptor before a job reaches a backend.
#pragma once

#include <cstdint>

#include "internal.h"
#include "nvfp4/nvfp4.h"

namespace nvfp4::detail {

// One output direction of an MXFP4 quantization. data == nullptr: not requested.
struct MxOut {
  uint8_t* data = nullptr;    // [rows_out, cols_out/2], two E2M1 codes a byte
  uint8_t* scales = nullptr;  // E8M0, linear [rows_out, cols_out/32] or swizzled
  uint32_t rounding = 0;      // nvfp4_rounding_t
  uint32_t rule = 0;          // nvfp4_mx_scale_rule_t
};

// x is [rows, cols] row-major with cols % 32 == 0. Rowwise quantizes along cols.
// Columnwise quantizes x^T [cols, rows] along rows, padded with zero rows up to
// roundup(rows, 32), and stores it as x^T: data [cols, roundup(rows,32)/2].
// Stochastic rounding: element (i, j) of an orientation of width W (cols, or
// roundup(rows, 32)) takes Philox word i * W + j of (seed, offset + *offset_device).
struct MxQuantJob {
  const void* x = nullptr;
  nvfp4_dtype_t dtype = NVFP4_DTYPE_FLOAT32;  // float32, float16 or bfloat16
  int64_t rows = 0, cols = 0;
  bool swizzled = true;
  uint64_t seed = 0, offset = 0;
  const uint64_t* offset_device = nullptr;  // optional, read when the work runs
  MxOut row, col;
};

struct MxDequantJob {
  const uint8_t* data = nullptr;    // [rows, cols/2]
  const uint8_t* scales = nullptr;  // linear [rows, cols/32] or swizzled
  int64_t rows = 0, cols = 0;       // cols % 32 == 0
  bool swizzled = true;
  void* out = nullptr;              // [rows, cols]
  nvfp4_dtype_t out_dtype = NVFP4_DTYPE_FLOAT32;
};

inline int64_t mx_padded_rows(int64_t rows) { return (rows + 31) / 32 * 32; }

nvfp4_status_t cpu_mx_quantize(const MxQuantJob& job);
nvfp4_status_t cpu_mx_dequantize(const MxDequantJob& job);

#if defined(NVFP4_WITH_CUDA)
nvfp4_status_t cuda_mx_quantize(const MxQuantJob& job, nvfp4_stream_t stream);
nvfp4_status_t cuda_mx_dequantize(const MxDequantJob& job, nvfp4_stream_t stream);
#endif

}  // namespace nvfp4::detail
