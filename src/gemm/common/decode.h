// Small kernels around a tensor-core GEMM (FP4 -> BF16 decode, alpha, epilogues), shared
// by the Hopper runner, the cuDNN runner and any runner that emulates through BF16.
// Compiled for every CUDA target (gemm/common/decode.cu). Plain pointers only.
#pragma once

#include <cstddef>
#include <cstdint>

#include "internal.h"

namespace nvfp4::detail {

// One FP4 operand to decode: data [rows, k/2] packed E2M1, scales in `layout`
// (NVFP4: E4M3, linear [rows, k/16] or swizzled; MXFP4: E8M0, linear [rows, k/32] or
// swizzled, k % 32 == 0), out [rows, out_ld] BF16 row-major (out_ld >= k).
struct DecodeOperand {
  const uint8_t* data = nullptr;
  const uint8_t* scales = nullptr;
  bool mx = false;
  int64_t rows = 0, k = 0;
  nvfp4_scale_layout_t layout = NVFP4_SCALES_SWIZZLED;
  void* out = nullptr;  // __nv_bfloat16
  int64_t out_ld = 0;
};

// Everything a two-step GEMM needs before its tensor-core kernel, in one launch:
// both operands decoded (value * block scale, exact in BF16 except that MXFP4 magnitudes
// >= 2^128 become inf) and the bias converted to fp32 and zero-padded to n_pad (CUTLASS
// reads it as a vector of 16-byte chunks). (alpha is the GEMM epilogue's: sm90_cutlass.h.)
struct GemmPrep {
  DecodeOperand a, b;                 // b.rows == 0: decode a only
  const void* bias = nullptr;         // [n] in bias_dtype, optional
  nvfp4_dtype_t bias_dtype = NVFP4_DTYPE_FLOAT32;
  float* bias_f32 = nullptr;          // [n_pad], written when bias_f32 != null (zeros if no bias)
  int64_t n = 0, n_pad = 0;
};
nvfp4_status_t gemm_prep(const GemmPrep& p, nvfp4_stream_t stream);

// d[m, n] = round(beta * c[m, n] + t[m, n]) for m < rows, n < cols; t is fp32 with row
// stride t_ld (alpha * acc + bias, already formed by the GEMM). c is optional (c_dtype),
// d is d_dtype; both dense [rows, cols].
struct GemmFinalize {
  const float* t = nullptr;
  int64_t t_ld = 0;
  const void* c = nullptr;
  nvfp4_dtype_t c_dtype = NVFP4_DTYPE_FLOAT32;
  float beta = 0.0f;
  void* d = nullptr;
  nvfp4_dtype_t d_dtype = NVFP4_DTYPE_FLOAT32;
  int64_t rows = 0, cols = 0;
};
nvfp4_status_t gemm_finalize(const GemmFinalize& f, nvfp4_stream_t stream);

// d[m, n] = round(beta * c[m, n] + (alpha[0] * acc[m, n] + bias[n])) for m < rows,
// n < cols: the epilogue of a GEMM whose tensor-core part wrote only the fp32 product acc
// (row stride acc_ld). alpha is on the device; bias and c are optional (their dtypes
// given), c and d dense [rows, cols]. The cuDNN runner uses it where cuDNN refuses the
// fused epilogue.
struct GemmEpilogue {
  const float* acc = nullptr;
  int64_t acc_ld = 0;
  const float* alpha = nullptr;
  const void* bias = nullptr;
  nvfp4_dtype_t bias_dtype = NVFP4_DTYPE_FLOAT32;
  const void* c = nullptr;
  nvfp4_dtype_t c_dtype = NVFP4_DTYPE_FLOAT32;
  float beta = 0.0f;
  void* d = nullptr;
  nvfp4_dtype_t d_dtype = NVFP4_DTYPE_FLOAT32;
  int64_t rows = 0, cols = 0;
};
nvfp4_status_t gemm_epilogue(const GemmEpilogue& e, nvfp4_stream_t stream);

}  // namespace nvfp4::detail
