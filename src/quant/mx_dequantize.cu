// MXFP4 dequantization: out[r, c] = e2m1(code) * 2^(scale - 127) in fp32 (core::mx_decode),
// stored as fp32, fp16 or bf16 with the core conversions, so it matches the CPU reference
// bit for bit. One thread per 32-element block: a 16-byte load of codes, one scale byte,
// 16-byte stores; grid-stride over a persistent grid.
#include "quant/mx_kernels.cuh"

namespace nvfp4::detail::quant::mx {
namespace {

struct DequantArgs {
  const uint8_t* data;    // [rows, cols/2]
  const uint8_t* scales;  // linear [rows, nb] or swizzled [roundup(rows,128), roundup(nb,4)]
  int64_t rows;
  int64_t nb;             // cols / 32
  int swizzled;
  void* out;              // [rows, cols]
};

template <int kOutBytes, bool kBf16>
__global__ void __launch_bounds__(kThreads) mx_dequantize_kernel(const DequantArgs a) {
  const int64_t n = a.rows * a.nb;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; g < n;
       g += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t r = g / a.nb, b = g % a.nb;
    const uint4 d = *reinterpret_cast<const uint4*>(a.data + g * 16);
    const uint32_t sb = a.scales[a.swizzled ? core::swizzle_offset(r, b, a.nb) : g];
    float v[kBlock];
#pragma unroll
    for (int i = 0; i < kBlock; ++i) v[i] = core::mx_decode((word_of(d, i >> 3) >> (4 * (i & 7))) & 0xfu, sb);
    if constexpr (kOutBytes == 4) {
      float4* o = reinterpret_cast<float4*>(static_cast<float*>(a.out) + g * kBlock);
#pragma unroll
      for (int j = 0; j < kBlock / 4; ++j) o[j] = make_float4(v[4 * j], v[4 * j + 1], v[4 * j + 2], v[4 * j + 3]);
    } else {
      uint4* o = reinterpret_cast<uint4*>(static_cast<uint16_t*>(a.out) + g * kBlock);
#pragma unroll
      for (int j = 0; j < kBlock / 8; ++j) {
        uint32_t w[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const float lo = v[8 * j + 2 * k], hi = v[8 * j + 2 * k + 1];
          const uint32_t l = kBf16 ? core::float_to_bf16(lo) : core::float_to_fp16(lo);
          const uint32_t h = kBf16 ? core::float_to_bf16(hi) : core::float_to_fp16(hi);
          w[k] = l | (h << 16);
        }
        o[j] = make_uint4(w[0], w[1], w[2], w[3]);
      }
    }
  }
}

template <int kOutBytes, bool kBf16>
nvfp4_status_t run(const DequantArgs& a, cudaStream_t stream) {
  auto kernel = mx_dequantize_kernel<kOutBytes, kBf16>;
  const int64_t blocks = a.rows * a.nb;
  kernel<<<persistent_grid(kernel, kThreads, 0, (blocks + kThreads - 1) / kThreads), kThreads, 0, stream>>>(a);
  return check_launch("nvfp4 MXFP4 dequantize kernel");
}

}  // namespace
}  // namespace nvfp4::detail::quant::mx

namespace nvfp4::detail {

nvfp4_status_t cuda_mx_dequantize(const MxDequantJob& job, nvfp4_stream_t s) {
  using namespace quant::mx;
  const cudaStream_t stream = reinterpret_cast<cudaStream_t>(s);
  if (job.rows == 0 || job.cols == 0) return NVFP4_SUCCESS;
  const DequantArgs a{job.data, job.scales, job.rows, job.cols / kBlock, job.swizzled, job.out};
  switch (job.out_dtype) {
    case NVFP4_DTYPE_FLOAT32: return run<4, false>(a, stream);
    case NVFP4_DTYPE_FLOAT16: return run<2, false>(a, stream);
    case NVFP4_DTYPE_BFLOAT16: return run<2, true>(a, stream);
    default: return fail(NVFP4_ERROR_INVALID_ARGUMENT, "nvfp4 MXFP4 dequantize: unsupported output dtype");
  }
}

}  // namespace nvfp4::detail
