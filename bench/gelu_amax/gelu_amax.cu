// GELU (tanh form) and its backward, in BF16, computing as they store their output the two
// maxima an NVFP4 quantization of that output needs: max |y| (the rowwise output's amax) and
// max |H diag(s) y| over 16-row column groups (the columnwise RHT output's amax). A prototype
// for bench/bench_gelu_amax.py in the library's style — the work unit of the amax pass
// (src/quant/amax.cu: a 16-row group x 8 bytes a thread, 16 loads in flight), the transform as
// core::fwht16_scaled computes it, one partial per CTA and maximum as the quantization's
// workspace holds them; the BF16 conversions and the maxima are quant/common.cuh's — not a
// library kernel: no C API, no checks beyond the launcher's.
//
// The activation follows the tanh-form formula in float32, in the order PyTorch's CUDA kernels
// write it (x^3 as (x * x) * x; inner = beta * (x + kappa * x^3); 0.5 * x * (1 + tanh(inner));
// the backward's 0.5 * (1 + t) + 0.5 * x * (1 - t^2) * beta * (1 + 3 kappa x^2), times dy), so
// that the benchmark can report whether the output bits equal torch's.
//
// Built by the benchmark with nvcc into a shared library (extern "C" launcher, raw pointers,
// the caller's stream); tests/python/test_bench.py compiles it for sm_90a.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/rht.h"
#include "quant/common.cuh"

namespace {

using nvfp4::detail::quant::absmax_bits;
using nvfp4::detail::quant::block_max_bits;
using nvfp4::detail::quant::BF16;
using nvfp4::detail::quant::hi_f;
using nvfp4::detail::quant::lo_f;
using nvfp4::detail::quant::kThreads;
constexpr float kBeta = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kKappa = 0.044715f;

__device__ __forceinline__ float gelu_tanh(float x) {
  const float x3 = x * x * x;
  const float inner = kBeta * (x + kKappa * x3);
  return 0.5f * x * (1.0f + tanhf(inner));
}

__device__ __forceinline__ float gelu_tanh_bwd(float dy, float x) {
  const float x2 = x * x;
  const float x3 = x2 * x;
  const float t = tanhf(kBeta * (x + kKappa * x3));
  const float left = 0.5f * x;
  const float right = 1.0f + t;
  const float d_left = 0.5f * right;
  const float d_tanh = 1.0f - t * t;
  const float d_inner = kBeta * (1.0f + 3.0f * kKappa * x2);
  return dy * (d_left + left * d_tanh * d_inner);
}

__device__ __forceinline__ uint32_t pack(float a, float b) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// kBwd: out = gelu'(h) * a (a = dy); else out = gelu(a). parts: [2 * gridDim.x] uint32, the
// CTA's max |out| bits at blockIdx.x and its max |H s out| bits at gridDim.x + blockIdx.x.
template <bool kBwd>
__global__ void __launch_bounds__(kThreads) gelu_amax_kernel(const uint16_t* a, const uint16_t* h, uint16_t* out,
                                                            uint32_t* parts, int64_t rows, int64_t cols,
                                                            uint32_t sign_mask) {
  const int64_t nq = cols / 4;  // 8-byte strips a row group
  const int64_t n = nq * ((rows + 15) / 16);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  uint32_t m_plain = 0u, m_rht = 0u;
  for (int64_t u = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; u < n; u += stride) {
    const int64_t g = u / nq, q = u % nq;
    const int64_t base = g * 16 * cols + q * 4;
    uint2 in[16], hin[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const bool ok = g * 16 + i < rows;
      const uint64_t off = static_cast<uint64_t>(base + i * cols);
      in[i] = ok ? __ldg(reinterpret_cast<const uint2*>(a + off)) : make_uint2(0u, 0u);
      if constexpr (kBwd) hin[i] = ok ? __ldg(reinterpret_cast<const uint2*>(h + off)) : make_uint2(0u, 0u);
    }
    float v[4][16];  // the stored values, by column
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      float y[4] = {lo_f<BF16>(in[i].x), hi_f<BF16>(in[i].x), lo_f<BF16>(in[i].y), hi_f<BF16>(in[i].y)};
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        if constexpr (kBwd) {
          const float hx[4] = {lo_f<BF16>(hin[i].x), hi_f<BF16>(hin[i].x), lo_f<BF16>(hin[i].y), hi_f<BF16>(hin[i].y)};
          y[c] = gelu_tanh_bwd(y[c], hx[c]);
        } else {
          y[c] = gelu_tanh(y[c]);
        }
      }
      const uint2 w = make_uint2(pack(y[0], y[1]), pack(y[2], y[3]));
      if (g * 16 + i < rows) *reinterpret_cast<uint2*>(out + static_cast<uint64_t>(base + i * cols)) = w;
      v[0][i] = lo_f<BF16>(w.x);
      v[1][i] = hi_f<BF16>(w.x);
      v[2][i] = lo_f<BF16>(w.y);
      v[3][i] = hi_f<BF16>(w.y);
    }
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      m_plain = max(m_plain, absmax_bits(v[c]));
#pragma unroll
      for (int i = 0; i < 16; ++i)
        if ((sign_mask >> i) & 1u) v[c][i] = -v[c][i];
      nvfp4::core::fwht16_scaled(v[c]);
      m_rht = max(m_rht, absmax_bits(v[c]));
    }
  }
  uint32_t m[2] = {m_plain, m_rht};
  block_max_bits(m);
  if (threadIdx.x == 0) {
    parts[blockIdx.x] = m[0];
    parts[gridDim.x + blockIdx.x] = m[1];
  }
}

}  // namespace

// Returns 0, or the CUDA error code of the launch. grid: the number of CTAs (and of partials
// a maximum); cols % 4 == 0 and 8-byte aligned rows are the caller's to ensure.
extern "C" int gelu_amax_launch(int bwd, const void* a, const void* h, void* out, void* parts, int64_t rows,
                                int64_t cols, uint32_t sign_mask, int grid, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (bwd)
    gelu_amax_kernel<true><<<grid, kThreads, 0, s>>>(static_cast<const uint16_t*>(a), static_cast<const uint16_t*>(h),
                                                     static_cast<uint16_t*>(out), static_cast<uint32_t*>(parts), rows,
                                                     cols, sign_mask);
  else
    gelu_amax_kernel<false><<<grid, kThreads, 0, s>>>(static_cast<const uint16_t*>(a), nullptr,
                                                      static_cast<uint16_t*>(out), static_cast<uint32_t*>(parts), rows,
                                                      cols, sign_mask);
  return static_cast<int>(cudaGetLastError());
}
