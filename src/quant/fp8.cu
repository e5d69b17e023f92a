// CUDA kernels of nvfp4_fp8_cast (the FP8 baseline recipes): an amax pass, then one cast
// pass that writes q and/or its transpose from a single read of x.
//
//  - fp8_amax_kernel: persistent grid, 16-element units (16-byte loads), integer max of
//    the absolute values' bits (NaN wins), one atomicMax per CTA into the zeroed amax.
//  - fp8_cast_kernel: 32x32 tiles, 256 threads (32 x 8). Each thread derives s from the
//    amax (or reads the delayed scale), casts its elements (fp32 product, a clamp that
//    keeps NaN, the round-to-nearest-even conversion with saturation, which after the
//    clamp changes nothing), writes q row by row and, through a padded shared tile, q^T
//    column by column; both stores are 32 contiguous bytes per warp.
//  - fp8_delayed_kernel: nvfp4_fp8_delayed_update, one CTA (the history is short).
// No host synchronization; every output byte is written.
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "fp8_internal.h"
#include "quant/common.cuh"

namespace nvfp4::detail::quant {
namespace {

template <class T>
__global__ void __launch_bounds__(kThreads) fp8_amax_kernel(const void* x, int64_t units, float* out) {
  const char* p = static_cast<const char*>(x);
  uint32_t m = 0u;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t u = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; u < units; u += stride) {
    RawBlock<T> b;
    load_block<T>(b, p + u * kBlock * T::kBytes);
    m = max(m, raw_absmax_bits<T>(b));
  }
  block_reduce_amax(m, out, nullptr);
}

template <class T>
__device__ __forceinline__ float load_elem(const void* x, int64_t i);
template <>
__device__ __forceinline__ float load_elem<F32>(const void* x, int64_t i) {
  return __ldg(static_cast<const float*>(x) + i);
}
template <>
__device__ __forceinline__ float load_elem<BF16>(const void* x, int64_t i) {
  return __uint_as_float(static_cast<uint32_t>(__ldg(static_cast<const unsigned short*>(x) + i)) << 16);
}
template <>
__device__ __forceinline__ float load_elem<F16>(const void* x, int64_t i) {
  return __half2float(__ushort_as_half(__ldg(static_cast<const unsigned short*>(x) + i)));
}

struct CastArgs {
  const void* x;
  int64_t rows, cols;
  int64_t tiles_r;
  float fmax, scaled_max;
  const float* scale;  // delayed scaling, else nullptr
  const float* amax;   // current scaling
  uint8_t* q;
  uint8_t* qt;
  float* scale_inv;
};

template <class T, bool kE5M2>
__global__ void __launch_bounds__(256) fp8_cast_kernel(const CastArgs a) {
  __shared__ uint8_t tile[32][33];
  const float s = a.scale != nullptr ? *a.scale : fp8_scale(a.scaled_max, *a.amax, 1.0f);
  if (a.scale_inv != nullptr && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 && threadIdx.y == 0)
    *a.scale_inv = __frcp_rn(s);
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * 32;
  for (int64_t tr = blockIdx.y; tr < a.tiles_r; tr += gridDim.y) {
    const int64_t r0 = tr * 32;
#pragma unroll
    for (int i = ty; i < 32; i += 8) {
      const int64_t r = r0 + i, c = c0 + tx;
      uint8_t b = 0;
      if (r < a.rows && c < a.cols) {
        float v = __fmul_rn(load_elem<T>(a.x, r * a.cols + c), s);
        if (!isnan(v)) v = fminf(fmaxf(v, -a.fmax), a.fmax);
        b = static_cast<uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, kE5M2 ? __NV_E5M2 : __NV_E4M3));
        if (a.q != nullptr) a.q[r * a.cols + c] = b;
      }
      tile[i][tx] = b;
    }
    if (a.qt != nullptr) {
      __syncthreads();
#pragma unroll
      for (int i = ty; i < 32; i += 8) {
        const int64_t c = c0 + i, r = r0 + tx;
        if (c < a.cols && r < a.rows) a.qt[c * a.rows + r] = tile[tx][i];
      }
      __syncthreads();  // the tile is rewritten by the next row tile
    }
  }
}

template <class T>
nvfp4_status_t run(const Fp8Job& job, cudaStream_t stream) {
  const int64_t n = job.rows * job.cols;
  if (job.amax != nullptr) {
    if (cudaMemsetAsync(job.amax, 0, sizeof(float), stream) != cudaSuccess)
      return check_launch("nvfp4 fp8 cast: clearing amax");
    const int64_t units = n / kBlock;
    const unsigned grid = persistent_grid(fp8_amax_kernel<T>, kThreads, 0, (units + kThreads - 1) / kThreads);
    fp8_amax_kernel<T><<<grid, kThreads, 0, stream>>>(job.x, units, job.amax);
    if (nvfp4_status_t s = check_launch("nvfp4 fp8 amax kernel"); s != NVFP4_SUCCESS) return s;
  }
  // An empty x (either extent 0, the other possibly huge) has no tiles to walk.
  CastArgs a{job.x, job.rows, job.cols, n == 0 ? 0 : (job.rows + 31) / 32, job.fmax, job.scaled_max, job.scale,
             job.amax, job.q, job.qt, job.scale_inv};
  const dim3 block(32, 8);
  // An empty x still gets its scale_inv: one CTA whose tile loop does not run.
  const int64_t tiles_c = (job.cols + 31) / 32;
  const dim3 grid(static_cast<unsigned>(tiles_c > 0 ? tiles_c : 1),
                  static_cast<unsigned>(a.tiles_r < 1 ? 1 : a.tiles_r < 65535 ? a.tiles_r : 65535));
  if (job.e5m2)
    fp8_cast_kernel<T, true><<<grid, block, 0, stream>>>(a);
  else
    fp8_cast_kernel<T, false><<<grid, block, 0, stream>>>(a);
  return check_launch("nvfp4 fp8 cast kernel");
}

// nvfp4_fp8_delayed_update: one CTA. The history's amax (a block max reduction, NaN
// counting as 0), the new scale, then the left roll in place, chunk by chunk of blockDim
// entries in increasing order: every thread reads entry i + 1 before the barrier, writes
// entry i after it, so an entry is always read before it is overwritten.
constexpr int kDelayedThreads = 256;

__global__ void __launch_bounds__(kDelayedThreads) fp8_delayed_kernel(Fp8DelayedJob j) {
  __shared__ float red[kDelayedThreads / 32];
  float* h = j.history;
  const int t = threadIdx.x;
  float a = 0.0f;
  if (j.most_recent) {
    a = h[0];
  } else {
    for (int64_t i = t; i < j.len; i += kDelayedThreads) {
      const float v = h[i];
      if (!isnan(v) && v > a) a = v;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));
    if ((t & 31) == 0) red[t >> 5] = a;
    __syncthreads();
    a = red[0];
#pragma unroll
    for (int w = 1; w < kDelayedThreads / 32; ++w) a = fmaxf(a, red[w]);
  }
  const float first = h[0];
  if (t == 0) *j.scale = fp8_scale(j.scaled_max, a, *j.scale);
  __syncthreads();  // every thread has read h[0] and the history's amax
  for (int64_t base = 0; base + 1 < j.len; base += kDelayedThreads) {
    const int64_t i = base + t;
    const float next = i + 1 < j.len ? h[i + 1] : 0.0f;
    __syncthreads();
    if (i + 1 < j.len) h[i] = next;
    __syncthreads();
  }
  if (t == 0) {
    h[j.len - 1] = first;
    h[0] = 0.0f;
  }
}

}  // namespace
}  // namespace nvfp4::detail::quant

namespace nvfp4::detail {

nvfp4_status_t cuda_fp8_cast(const Fp8Job& job, nvfp4_stream_t stream_in) {
  const auto stream = reinterpret_cast<cudaStream_t>(stream_in);
  switch (job.dtype) {
    case NVFP4_DTYPE_FLOAT32: return quant::run<quant::F32>(job, stream);
    case NVFP4_DTYPE_FLOAT16: return quant::run<quant::F16>(job, stream);
    case NVFP4_DTYPE_BFLOAT16: return quant::run<quant::BF16>(job, stream);
    default: return fail(NVFP4_ERROR_INVALID_ARGUMENT, "nvfp4_fp8_cast: unsupported input dtype");
  }
}

nvfp4_status_t cuda_fp8_delayed_update(const Fp8DelayedJob& job, nvfp4_stream_t stream) {
  quant::fp8_delayed_kernel<<<1, quant::kDelayedThreads, 0, reinterpret_cast<cudaStream_t>(stream)>>>(job);
  return quant::check_launch("nvfp4 fp8 delayed-scaling update kernel");
}

}  // namespace nvfp4::detail
