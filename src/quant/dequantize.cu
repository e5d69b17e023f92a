// Dequantization of both block formats by one kernel: out[r, c] is the block's decoded
// value in fp32 — NVFP4: (e2m1(code) * e4m3(scale)) * S_dec over 16-value blocks; MXFP4:
// core::mx_decode(code, e8m0 scale) over 32-value blocks — stored as fp32, fp16 or bf16
// with the core conversions, so it matches the CPU reference bit for bit. The formats
// differ only in the block decode (a small struct each); the walk, the scale lookup and the
// stores are shared. One thread per block: one load of the block's codes, one scale byte,
// 16-byte stores; grid-stride over a persistent grid, walking (row, block) without
// divisions.
#include "core/mx.h"
#include "mx_internal.h"
#include "quant/common.cuh"

namespace nvfp4::detail {
namespace {

using quant::kThreads;

struct DequantArgs {
  const uint8_t* data;    // [rows, cols/2]
  const uint8_t* scales;  // linear [rows, nb] or swizzled
  const float* amax;      // [1] (NVFP4) or null (MXFP4)
  int64_t rows;
  int64_t nb;             // blocks per row
  int swizzled;
  void* out;              // [rows, cols]
};

struct Nvfp4Block {
  static constexpr int kBlock = 16;
  float s_dec;
  __device__ explicit Nvfp4Block(const float* amax) : s_dec(core::global_decode_scale(*amax)) {}
  __device__ __forceinline__ void decode(const uint8_t* codes, uint32_t scale, float (&v)[kBlock]) const {
    const uint2 d = *reinterpret_cast<const uint2*>(codes);
    const float sf = core::e4m3_decode(scale);
#pragma unroll
    for (int i = 0; i < kBlock; ++i) {
      const uint32_t code = ((i < 8 ? d.x : d.y) >> (4 * (i & 7))) & 0xfu;
      v[i] = (core::e2m1_decode(code) * sf) * s_dec;
    }
  }
};

struct MxBlock {
  static constexpr int kBlock = core::kMxBlock;
  __device__ explicit MxBlock(const float*) {}
  __device__ __forceinline__ void decode(const uint8_t* codes, uint32_t scale, float (&v)[kBlock]) const {
    const uint4 d = *reinterpret_cast<const uint4*>(codes);
#pragma unroll
    for (int i = 0; i < kBlock; ++i) v[i] = core::mx_decode((quant::word_of(d, i >> 3) >> (4 * (i & 7))) & 0xfu, scale);
  }
};

// v as kOutBytes-wide values at out + first (16-byte stores; N is a multiple of 8)
template <int kOutBytes, bool kBf16, int N>
__device__ __forceinline__ void store_block(void* out, int64_t first, const float (&v)[N]) {
  if constexpr (kOutBytes == 4) {
    float4* o = reinterpret_cast<float4*>(static_cast<float*>(out) + first);
#pragma unroll
    for (int j = 0; j < N / 4; ++j) o[j] = make_float4(v[4 * j], v[4 * j + 1], v[4 * j + 2], v[4 * j + 3]);
  } else {
    uint4* o = reinterpret_cast<uint4*>(static_cast<uint16_t*>(out) + first);
#pragma unroll
    for (int j = 0; j < N / 8; ++j) {
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

template <class Fmt, int kOutBytes, bool kBf16>
__global__ void __launch_bounds__(kThreads) dequantize_kernel(const DequantArgs a) {
  const Fmt fmt(a.amax);
  const int64_t n = a.rows * a.nb;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  int64_t g = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  int64_t r = g / a.nb, b = g % a.nb;
  const int64_t dr = stride / a.nb, db = stride % a.nb;
  for (; g < n; g += stride) {
    const uint8_t sb = a.scales[a.swizzled ? core::swizzle_offset(r, b, a.nb) : g];
    float v[Fmt::kBlock];
    fmt.decode(a.data + g * (Fmt::kBlock / 2), sb, v);
    store_block<kOutBytes, kBf16>(a.out, g * Fmt::kBlock, v);
    b += db;
    r += dr;
    if (b >= a.nb) {
      b -= a.nb;
      ++r;
    }
  }
}

template <class Fmt, int kOutBytes, bool kBf16>
nvfp4_status_t run(const DequantArgs& a, cudaStream_t stream, const char* what) {
  auto kernel = dequantize_kernel<Fmt, kOutBytes, kBf16>;
  const int64_t blocks = a.rows * a.nb;
  const unsigned grid = quant::persistent_grid(kernel, kThreads, 0, (blocks + kThreads - 1) / kThreads);
  kernel<<<grid, kThreads, 0, stream>>>(a);
  return quant::check_launch(what);
}

template <class Fmt>
nvfp4_status_t dispatch(const DequantArgs& a, nvfp4_dtype_t out_dtype, cudaStream_t stream, const char* what) {
  switch (out_dtype) {
    case NVFP4_DTYPE_FLOAT32: return run<Fmt, 4, false>(a, stream, what);
    case NVFP4_DTYPE_FLOAT16: return run<Fmt, 2, false>(a, stream, what);
    case NVFP4_DTYPE_BFLOAT16: return run<Fmt, 2, true>(a, stream, what);
    default: return fail(NVFP4_ERROR_INVALID_ARGUMENT, std::string(what) + ": unsupported output dtype");
  }
}

}  // namespace

nvfp4_status_t cuda_dequantize(const DequantJob& job, nvfp4_stream_t s) {
  if (job.rows == 0 || job.cols == 0) return NVFP4_SUCCESS;
  const DequantArgs a{job.data, job.scales, job.amax, job.rows, job.cols / Nvfp4Block::kBlock,
                      job.layout == NVFP4_SCALES_SWIZZLED, job.out};
  return dispatch<Nvfp4Block>(a, job.out_dtype, reinterpret_cast<cudaStream_t>(s), "nvfp4 dequantize");
}

nvfp4_status_t cuda_mx_dequantize(const MxDequantJob& job, nvfp4_stream_t s) {
  if (job.rows == 0 || job.cols == 0) return NVFP4_SUCCESS;
  const DequantArgs a{job.data, job.scales, nullptr, job.rows, job.cols / MxBlock::kBlock, job.swizzled, job.out};
  return dispatch<MxBlock>(a, job.out_dtype, reinterpret_cast<cudaStream_t>(s), "nvfp4 MXFP4 dequantize");
}

}  // namespace nvfp4::detail
