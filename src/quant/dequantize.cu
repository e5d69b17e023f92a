// Dequantization: out[r, c] = (e2m1(code) * e4m3(scale)) * S_dec, in fp32, stored as
// fp32, fp16 or bf16 with the core conversions (so it matches the CPU reference bit for
// bit). One thread per 16-element block: an 8-byte load of codes, one scale byte, and
// 16-byte stores; grid-stride over a persistent grid, walking (row, block) without
// divisions.
#include "quant/common.cuh"

namespace nvfp4::detail {
namespace {

using quant::kThreads;

struct DequantArgs {
  const uint8_t* data;    // [rows, cols/2]
  const uint8_t* scales;  // linear [rows, nb] or swizzled
  const float* amax;      // [1]
  int64_t rows;
  int64_t nb;             // cols / 16
  int swizzled;
  void* out;              // [rows, cols]
};

template <int kOutBytes, bool kBf16>
__global__ void __launch_bounds__(kThreads) dequantize_kernel(const DequantArgs a) {
  const float s_dec = core::global_decode_scale(*a.amax);
  const int64_t n = a.rows * a.nb;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  int64_t g = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  int64_t r = g / a.nb, b = g % a.nb;
  const int64_t dr = stride / a.nb, db = stride % a.nb;
  for (; g < n; g += stride) {
    const uint2 d = *reinterpret_cast<const uint2*>(a.data + g * 8);
    const uint8_t sb = a.scales[a.swizzled ? core::swizzle_offset(r, b, a.nb) : g];
    const float sf = core::e4m3_decode(sb);
    float v[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const uint32_t code = ((i < 8 ? d.x : d.y) >> (4 * (i & 7))) & 0xfu;
      v[i] = (core::e2m1_decode(code) * sf) * s_dec;
    }
    if constexpr (kOutBytes == 4) {
      float4* o = reinterpret_cast<float4*>(static_cast<float*>(a.out) + g * 16);
#pragma unroll
      for (int j = 0; j < 4; ++j) o[j] = make_float4(v[4 * j], v[4 * j + 1], v[4 * j + 2], v[4 * j + 3]);
    } else {
      uint32_t w[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const uint32_t lo = kBf16 ? core::float_to_bf16(v[2 * j]) : core::float_to_fp16(v[2 * j]);
        const uint32_t hi = kBf16 ? core::float_to_bf16(v[2 * j + 1]) : core::float_to_fp16(v[2 * j + 1]);
        w[j] = lo | (hi << 16);
      }
      uint4* o = reinterpret_cast<uint4*>(static_cast<uint16_t*>(a.out) + g * 16);
      o[0] = make_uint4(w[0], w[1], w[2], w[3]);
      o[1] = make_uint4(w[4], w[5], w[6], w[7]);
    }
    b += db;
    r += dr;
    if (b >= a.nb) {
      b -= a.nb;
      ++r;
    }
  }
}

template <int kOutBytes, bool kBf16>
nvfp4_status_t run(const DequantArgs& a, cudaStream_t stream) {
  auto kernel = dequantize_kernel<kOutBytes, kBf16>;
  const int64_t blocks = a.rows * a.nb;
  const unsigned grid = quant::persistent_grid(kernel, kThreads, 0, (blocks + kThreads - 1) / kThreads);
  kernel<<<grid, kThreads, 0, stream>>>(a);
  return quant::check_launch("nvfp4 dequantize kernel");
}

}  // namespace

nvfp4_status_t cuda_dequantize(const DequantJob& job, nvfp4_stream_t s) {
  const cudaStream_t stream = reinterpret_cast<cudaStream_t>(s);
  if (job.rows == 0 || job.cols == 0) return NVFP4_SUCCESS;
  const DequantArgs a{job.data, job.scales, job.amax, job.rows, job.cols / 16,
                      job.layout == NVFP4_SCALES_SWIZZLED, job.out};
  switch (job.out_dtype) {
    case NVFP4_DTYPE_FLOAT32: return run<4, false>(a, stream);
    case NVFP4_DTYPE_FLOAT16: return run<2, false>(a, stream);
    case NVFP4_DTYPE_BFLOAT16: return run<2, true>(a, stream);
    default: return fail(NVFP4_ERROR_INVALID_ARGUMENT, "nvfp4 dequantize: unsupported output dtype");
  }
}

}  // namespace nvfp4::detail
