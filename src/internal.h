// Internal interface between the C API (api*.cpp), the CPU reference (cpu/) and the CUDA
// kernels (quant/, gemm/). Plain pointers and sizes only: the C API validates every
// descriptor first, so what reaches a backend is already known to be well formed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "nvfp4/nvfp4.h"

// NVFP4_CUDA_ARCHS_STRING, written by CMake for the host objects.
#if __has_include("nvfp4_build_config.h")
#include "nvfp4_build_config.h"
#endif

namespace nvfp4::detail {

// ---- error reporting (thread-local message behind nvfp4_last_error) ----
nvfp4_status_t fail(nvfp4_status_t status, const std::string& message);
void clear_error();

// ---- quantization ----

// One output direction, requested when amax != nullptr (nvfp4_quantize always gives its
// codes; nvfp4_quantize_decoded may give the decoded values alone, data == nullptr).
struct QuantOut {
  uint8_t* data = nullptr;    // [rows_out, cols_out/2] packed E2M1 (cols_out padded to 16)
  uint8_t* scales = nullptr;  // linear [rows_out, cols_out/16] or swizzled
  float* amax = nullptr;      // [1]
  void* dec = nullptr;        // optional: bfloat16 [rows_out, cols_out], the decoded values
                              // (E2M1 x E4M3, no per-tensor scale); CUDA kernels and the CPU
                              // reference through nvfp4_quantize_decoded
};
inline bool wanted(const QuantOut& o) { return o.data != nullptr || o.dec != nullptr; }

// x is [rows, cols] row-major. Rowwise quantizes along cols (cols % 16 == 0); columnwise
// quantizes x^T along rows, padding rows up to a multiple of 16 with zeros.
struct QuantJob {
  const void* x = nullptr;
  nvfp4_dtype_t dtype = NVFP4_DTYPE_FLOAT32;  // float32, float16 or bfloat16
  int64_t rows = 0, cols = 0;
  nvfp4_quant_config_t cfg{};
  QuantOut row, col;
  // optional (CUDA): NVFP4_QUANTIZE_WORKSPACE_BYTES of scratch for the amax pass's partials
  // (one per CTA and direction), in place of zeroing the amax outputs first
  uint32_t* amax_ws = nullptr;
  // optional: the counter this call advances by one once its work has read it
  // (cfg.offset_counter; the API points cfg.offset_device at it for the reads)
  uint64_t* advance = nullptr;
};

// Element index that drives the stochastic-rounding bits of element (r, c) of a
// quantized orientation with `cols` columns (padded to 16): r * roundup(cols,16) + c.
inline uint64_t sr_index(int64_t r, int64_t c, int64_t cols) {
  return static_cast<uint64_t>(r) * static_cast<uint64_t>((cols + 15) / 16 * 16) +
         static_cast<uint64_t>(c);
}

struct DequantJob {
  const uint8_t* data = nullptr;    // [rows, cols/2]
  const uint8_t* scales = nullptr;  // linear [rows, cols/16] or swizzled
  const float* amax = nullptr;      // [1]
  int64_t rows = 0, cols = 0;
  nvfp4_scale_layout_t layout = NVFP4_SCALES_SWIZZLED;
  void* out = nullptr;              // [rows, cols]
  nvfp4_dtype_t out_dtype = NVFP4_DTYPE_FLOAT32;
};

struct SwizzleJob {
  const uint8_t* src = nullptr;
  uint8_t* dst = nullptr;
  int64_t rows = 0, cols = 0;  // of the linear [rows, cols] scale matrix
  bool to_swizzled = true;
};

// ---- GEMM: D[M,N] = alpha * A^[M,K] @ B^[N,K]^T + beta * C + bias ----

// Element format of both operands of a GEMM.
//   kNvfp4: E2M1 with one E4M3 scale per 16 values (scales [rows, K/16]) and the per-tensor
//           amax: alpha = S_dec(amax_a) * S_dec(amax_b).
//   kMxfp4: E2M1 with one E8M0 scale per 32 values (scales [rows, K/32]), no per-tensor
//           scale: alpha = 1, amax_a / amax_b are null.
//   kNvfp4Grouped: the grouped (MoE) GEMM of nvfp4_grouped_gemm; the job's `grouped` holds it
//           (grouped.h) and m, n, k are T, N, K for messages.
enum class Format : uint8_t { kNvfp4 = 0, kMxfp4 = 1, kNvfp4Grouped = 2 };
struct GroupedGemmJob;
struct GemmJob {
  Format format = Format::kNvfp4;
  const uint8_t* a = nullptr;   // [M, K/2]
  const uint8_t* sfa = nullptr; // scales of A in `layout`
  const float* amax_a = nullptr; // NVFP4 only
  const uint8_t* b = nullptr;   // [N, K/2]
  const uint8_t* sfb = nullptr;
  const float* amax_b = nullptr;
  int64_t m = 0, n = 0, k = 0;
  nvfp4_scale_layout_t layout = NVFP4_SCALES_SWIZZLED;
  const void* c = nullptr;      // [M, N] in c_dtype, optional
  nvfp4_dtype_t c_dtype = NVFP4_DTYPE_FLOAT32;
  float beta = 0.0f;
  const void* bias = nullptr;   // [N] in bias_dtype, optional
  nvfp4_dtype_t bias_dtype = NVFP4_DTYPE_FLOAT32;
  void* d = nullptr;            // [M, N] in d_dtype
  nvfp4_dtype_t d_dtype = NVFP4_DTYPE_FLOAT32;
  const GroupedGemmJob* grouped = nullptr;  // kNvfp4Grouped only
  // nvfp4_gemm_decoded: an operand given by its decoded values (bfloat16 [M, K] / [N, K]);
  // its codes and scales are then null. Only runners that take decoded operands see such a
  // job (gemm/dispatch.cpp); they read these where set.
  const void* a_dec = nullptr;
  const void* b_dec = nullptr;
};

// ---- CPU reference backend (cpu/) ----
nvfp4_status_t cpu_quantize(const QuantJob& job);
nvfp4_status_t cpu_dequantize(const DequantJob& job);
// out[rows, cols] bfloat16 = E2M1 value x E4M3 block scale of the codes (no per-tensor scale).
void cpu_decode_bf16(const uint8_t* data, const uint8_t* scales, int64_t rows, int64_t cols,
                     nvfp4_scale_layout_t layout, void* out);
nvfp4_status_t cpu_swizzle(const SwizzleJob& job);
nvfp4_status_t cpu_gemm(const GemmJob& job);

// ---- CUDA backends (quant/, gemm/); only linked when the build has CUDA ----
#if defined(NVFP4_WITH_CUDA)
nvfp4_status_t cuda_quantize(const QuantJob& job, nvfp4_stream_t stream);
// Adds one to a device counter, in stream order (one thread; QuantJob::advance where the
// amax pass could not do it).
nvfp4_status_t cuda_advance_counter(uint64_t* counter, nvfp4_stream_t stream);
nvfp4_status_t cuda_dequantize(const DequantJob& job, nvfp4_stream_t stream);
nvfp4_status_t cuda_swizzle(const SwizzleJob& job, nvfp4_stream_t stream);
#endif

}  // namespace nvfp4::detail
