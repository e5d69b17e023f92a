// FP4 -> BF16 operand decode and the fp32 -> output finalization:
// the small kernels around a BF16 tensor-core GEMM that emulates an NVFP4 GEMM exactly.
//
// Why BF16 is exact: an E2M1 value (at most 2 significant bits) times an E4M3 scale (at
// most 4) has at most 6 significant bits and lies in [2^-10, 2688] (or is 0 / NaN), well
// inside BF16's 8-bit significand and range. The per-tensor scale stays out (alpha).
// MXFP4: an E2M1 value times 2^(b-127) has at most 2 significant bits and lies in
// [2^-128, 6 * 2^127]: exact in fp32 and BF16 (same exponent range, 2^-128 a subnormal of
// both) up to 2^128, where both overflow to inf; the NaN scale byte gives NaN.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>

#include "core/e2m1.h"
#include "core/e4m3.h"
#include "core/e8m0.h"
#include "core/scale.h"
#include "core/swizzle.h"
#include "gemm/backends.h"
#include "gemm/common/decode.h"
#include "cuda/device.h"
#include "quant/codec.cuh"

namespace nvfp4::detail {
namespace {

using gpu::load_as_float;
using gpu::store_from_float;

// Splits a flat block index into (row, block column). 32-bit division when it fits:
// this kernel is memory-bound, but 64-bit division costs ~70 instructions a block.
__device__ __forceinline__ void split_index(int64_t idx, int64_t cols, int64_t& r, int64_t& c) {
  if (idx < 0xffffffffLL && cols < 0xffffffffLL) {
    uint32_t q = static_cast<uint32_t>(idx) / static_cast<uint32_t>(cols);
    r = q;
    c = idx - static_cast<int64_t>(q) * cols;
  } else {
    r = idx / cols;
    c = idx - r * cols;
  }
}

constexpr int kPrepThreads = 256;
constexpr int kBlocksPerThread = 2;  // independent loads in flight per thread

__global__ void __launch_bounds__(kPrepThreads) gemm_prep_kernel(GemmPrep p, int64_t blocks_a,
                                                                 int64_t blocks_total,
                                                                 bool aligned8) {
  // The E2M1 code -> value table (MXFP4's decode), built from the one definition of the format.
  __shared__ float lut[16];
  gpu::fill_e2m1_table(lut);
  __syncthreads();

  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t nthreads = static_cast<int64_t>(gridDim.x) * blockDim.x;

  if (p.bias_f32 != nullptr) {
    for (int64_t i = tid; i < p.n_pad; i += nthreads)
      p.bias_f32[i] = (p.bias != nullptr && i < p.n) ? load_as_float(p.bias, p.bias_dtype, i) : 0.0f;
  }

  for (int64_t base = tid; base < blocks_total; base += nthreads * kBlocksPerThread) {
    uint2 raw[kBlocksPerThread];
    uint32_t sbyte[kBlocksPerThread];
    bool umx[kBlocksPerThread];
    __nv_bfloat16* dst[kBlocksPerThread];
#pragma unroll
    for (int u = 0; u < kBlocksPerThread; ++u) {
      const int64_t idx = base + u * nthreads;
      dst[u] = nullptr;
      if (idx >= blocks_total) continue;
      // Field by field: a reference to either parameter struct would force a local copy.
      const bool in_a = idx < blocks_a;
      const int64_t k = in_a ? p.a.k : p.b.k;
      const int64_t cols = k / 16;
      int64_t r, c;
      split_index(in_a ? idx : idx - blocks_a, cols, r, c);
      const uint8_t* src = (in_a ? p.a.data : p.b.data) + r * (k / 2) + c * 8;
      if (aligned8) {
        raw[u] = __ldg(reinterpret_cast<const uint2*>(src));
      } else {
        uint32_t w[2] = {0u, 0u};
#pragma unroll
        for (int i = 0; i < 8; ++i) w[i >> 2] |= static_cast<uint32_t>(__ldg(src + i)) << (8 * (i & 3));
        raw[u] = make_uint2(w[0], w[1]);
      }
      const nvfp4_scale_layout_t layout = in_a ? p.a.layout : p.b.layout;
      // A 16-value unit: its own E4M3 scale (NVFP4), or half of a 32-value E8M0 block (MXFP4).
      const bool mx = in_a ? p.a.mx : p.b.mx;
      const int64_t scols = mx ? cols / 2 : cols, sc = mx ? c / 2 : c;
      const int64_t so = layout == NVFP4_SCALES_LINEAR ? r * scols + sc : core::swizzle_offset(r, sc, scols);
      sbyte[u] = __ldg((in_a ? p.a.scales : p.b.scales) + so);
      umx[u] = mx;
      dst[u] = static_cast<__nv_bfloat16*>(in_a ? p.a.out : p.b.out) + r * (in_a ? p.a.out_ld : p.b.out_ld) + c * 16;
    }
#pragma unroll
    for (int u = 0; u < kBlocksPerThread; ++u) {
      if (dst[u] == nullptr) continue;
      // value * scale is exact in fp32 and in BF16 (see the top of the file for MXFP4's limits);
      // NVFP4 through the quantizers' decode (the same bits as their decoded outputs)
      uint32_t packed[8];
      if (umx[u])
        gpu::decode16_bf16(raw[u].x, raw[u].y, core::e8m0_decode(static_cast<uint8_t>(sbyte[u])), lut, packed);
      else
        quant::decode16_e4m3_bf16(raw[u].x, raw[u].y, sbyte[u], packed);
      uint4* d4 = reinterpret_cast<uint4*>(dst[u]);
      d4[0] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
      d4[1] = make_uint4(packed[4], packed[5], packed[6], packed[7]);
    }
  }
}

__global__ void __launch_bounds__(256) gemm_finalize_kernel(GemmFinalize f) {
  const int64_t total = f.rows * f.cols;
  const int64_t nthreads = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += nthreads) {
    int64_t r, c;
    split_index(i, f.cols, r, c);
    float v = f.t[r * f.t_ld + c];
    // Same order as the CUTLASS epilogue: beta * C + (alpha * acc + bias).
    if (f.c != nullptr) v = f.beta * load_as_float(f.c, f.c_dtype, i) + v;
    store_from_float(f.d, f.d_dtype, i, v);
  }
}

__global__ void __launch_bounds__(256) gemm_epilogue_kernel(GemmEpilogue e) {
  const int64_t total = e.rows * e.cols;
  const int64_t nthreads = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const float alpha = e.alpha[0];
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += nthreads) {
    int64_t r, c;
    split_index(i, e.cols, r, c);
    // The association of every fused epilogue here: beta * C + (alpha * acc + bias).
    float v = alpha * e.acc[r * e.acc_ld + c];
    if (e.bias != nullptr) v = v + load_as_float(e.bias, e.bias_dtype, c);
    if (e.c != nullptr) v = e.beta * load_as_float(e.c, e.c_dtype, i) + v;
    store_from_float(e.d, e.d_dtype, i, v);
  }
}

int device_sm_count() { return gpu::sm_count(gpu::current_device()); }

}  // namespace

nvfp4_status_t gemm_prep(const GemmPrep& p, nvfp4_stream_t stream) {
  auto check_op = [](const DecodeOperand& op, const char* name) -> nvfp4_status_t {
    if (op.rows == 0) return NVFP4_SUCCESS;
    if (op.k <= 0 || op.k % (op.mx ? 32 : 16) != 0 || op.out_ld < op.k || op.out_ld % 8 != 0)
      return fail(NVFP4_ERROR_INVALID_ARGUMENT,
                  std::string(name) + ": K must be a positive multiple of " + (op.mx ? "32" : "16"));
    if (reinterpret_cast<uintptr_t>(op.out) % 16 != 0)
      return fail(NVFP4_ERROR_INVALID_ARGUMENT, std::string(name) + ": the BF16 output must be 16-byte aligned");
    return NVFP4_SUCCESS;
  };
  if (nvfp4_status_t s = check_op(p.a, "a"); s != NVFP4_SUCCESS) return s;
  if (nvfp4_status_t s = check_op(p.b, "b"); s != NVFP4_SUCCESS) return s;

  const int64_t blocks_a = p.a.rows * (p.a.k / 16);
  const int64_t blocks_b = p.b.rows * (p.b.k / 16);
  const int64_t total = blocks_a + blocks_b;
  const bool aligned8 = (p.a.rows == 0 || reinterpret_cast<uintptr_t>(p.a.data) % 8 == 0) &&
                        (p.b.rows == 0 || reinterpret_cast<uintptr_t>(p.b.data) % 8 == 0);

  int64_t threads_needed = (total + kBlocksPerThread - 1) / kBlocksPerThread;
  if (p.bias_f32 != nullptr && p.n_pad > threads_needed) threads_needed = p.n_pad;
  if (threads_needed < 1) threads_needed = 1;
  int64_t grid = (threads_needed + kPrepThreads - 1) / kPrepThreads;
  // Grid-stride beyond a few waves: launch cost stays flat for huge operands.
  const int64_t cap = static_cast<int64_t>(device_sm_count()) * 64;
  if (grid > cap) grid = cap;

  gemm_prep_kernel<<<static_cast<unsigned>(grid), kPrepThreads, 0, reinterpret_cast<cudaStream_t>(stream)>>>(
      p, blocks_a, total, aligned8);
  return gpu::check_launch("gemm: FP4 -> BF16 decode launch");
}

nvfp4_status_t gemm_finalize(const GemmFinalize& f, nvfp4_stream_t stream) {
  const int64_t total = f.rows * f.cols;
  if (total == 0) return NVFP4_SUCCESS;
  int64_t grid = (total + 255) / 256;
  const int64_t cap = static_cast<int64_t>(device_sm_count()) * 32;
  if (grid > cap) grid = cap;
  gemm_finalize_kernel<<<static_cast<unsigned>(grid), 256, 0, reinterpret_cast<cudaStream_t>(stream)>>>(f);
  return gpu::check_launch("gemm: epilogue launch");
}

nvfp4_status_t gemm_epilogue(const GemmEpilogue& e, nvfp4_stream_t stream) {
  const int64_t total = e.rows * e.cols;
  if (total == 0) return NVFP4_SUCCESS;
  int64_t grid = (total + 255) / 256;
  const int64_t cap = static_cast<int64_t>(device_sm_count()) * 32;
  if (grid > cap) grid = cap;
  gemm_epilogue_kernel<<<static_cast<unsigned>(grid), 256, 0, reinterpret_cast<cudaStream_t>(stream)>>>(e);
  return gpu::check_launch("gemm: epilogue (alpha, bias, beta*C) launch");
}

nvfp4_status_t sm90_decode_bf16(const uint8_t* data, const uint8_t* scales, bool mx, int64_t rows, int64_t k,
                                nvfp4_scale_layout_t layout, void* out_bf16, nvfp4_stream_t stream) {
  if (rows == 0 || k == 0) return NVFP4_SUCCESS;
  GemmPrep p;
  p.a.data = data;
  p.a.scales = scales;
  p.a.mx = mx;
  p.a.rows = rows;
  p.a.k = k;
  p.a.layout = layout;
  p.a.out = out_bf16;
  p.a.out_ld = k;
  return gemm_prep(p, stream);
}

}  // namespace nvfp4::detail
