// Batched quantization on CUDA (nvfp4_batched_quantize): E expert weights x [E, N, K] (N and K
// multiples of 16), each quantized as nvfp4_quantize quantizes x[g], in three launches for all
// experts (a per-expert loop of the dense path would cost three launches per expert). Work
// unit: one 16x16 tile, one half-warp, a row of the tile per lane. A tile holds whole blocks of
// both directions (the rows' 1x16 blocks along K, the columns' along N) and is one 2D scale
// tile, so 1D and 2D blocks, the Hadamard transform of either direction and stochastic rounding
// all stay inside it; the columns come from a shared-memory transpose. Tiles never straddle two
// experts (N % 16 == 0), so each CTA works on one expert (blockIdx.y) and reduces its amaxes
// once. The arithmetic is the core functions' (the CPU reference's): bit-identical results.
#include <cuda_runtime.h>

#include <string>

#include "core/block.h"
#include "core/rht.h"
#include "core/scale.h"
#include "core/swizzle.h"
#include "cuda/device.h"
#include "grouped.h"
#include "quant/common.cuh"

namespace nvfp4::detail {
namespace {

constexpr int kThreads = 256;
constexpr int kTilesPerCta = kThreads / 16;

struct Args {
  const void* x;
  nvfp4_dtype_t dtype;
  int64_t n, k;
  GroupedOut row, col;
  nvfp4_block_t block;
  nvfp4_rounding_t rounding;
  uint32_t rht, sign_mask;
  uint64_t seed, offset;
  const uint64_t* offset_device;
};

__device__ __forceinline__ float load(const void* x, nvfp4_dtype_t dt, int64_t i) {
  switch (dt) {
    case NVFP4_DTYPE_FLOAT16: return core::fp16_to_float(static_cast<const uint16_t*>(x)[i]);
    case NVFP4_DTYPE_BFLOAT16: return core::bf16_to_float(static_cast<const uint16_t*>(x)[i]);
    default: return static_cast<const float*>(x)[i];
  }
}

__device__ __forceinline__ uint32_t abs_bits(float f) { return core::float_bits(f) & 0x7fffffffu; }

// The tile's row this lane holds (zeros past the expert's last tile, which then writes nothing).
struct TileRow {
  bool valid;
  int64_t n0, k0;  // the tile's first row (within the expert) and column
  float v[16];
};

__device__ __forceinline__ TileRow load_row(const Args& a, int64_t g, int64_t tile, int lane) {
  TileRow t;
  const int64_t tiles_k = a.k / 16;
  t.valid = tile < (a.n / 16) * tiles_k;
  t.n0 = t.valid ? tile / tiles_k * 16 : 0;
  t.k0 = t.valid ? tile % tiles_k * 16 : 0;
  const int64_t base = ((g * a.n + t.n0 + lane) * a.k + t.k0);
#pragma unroll
  for (int i = 0; i < 16; ++i) t.v[i] = t.valid ? load(a.x, a.dtype, base + i) : 0.0f;
  return t;
}

// Column `lane` of the half-warp's tile, through shared memory (every lane of the warp calls it).
__device__ __forceinline__ void column(float (*tile)[17], const float (&v)[16], int lane, float (&c)[16]) {
#pragma unroll
  for (int i = 0; i < 16; ++i) tile[lane][i] = v[i];
  __syncwarp();
#pragma unroll
  for (int i = 0; i < 16; ++i) c[i] = tile[i][lane];
  __syncwarp();
}

// Max of bits over the 16 lanes of a half-warp.
__device__ __forceinline__ uint32_t half_warp_max(uint32_t b) {
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) b = max(b, __shfl_xor_sync(0xffffffffu, b, o));
  return b;
}

__global__ void __launch_bounds__(kThreads) batched_amax_kernel(Args a, int64_t tiles) {
  __shared__ float smem[kTilesPerCta][16][17];
  const int h = threadIdx.x / 16, lane = threadIdx.x % 16;
  const int64_t g = blockIdx.y;
  uint32_t row_m = 0u, col_m = 0u;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * kTilesPerCta; base < tiles;
       base += static_cast<int64_t>(gridDim.x) * kTilesPerCta) {
    TileRow t = load_row(a, g, base + h, lane);
    float w[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) w[i] = t.v[i];
    if (a.rht & NVFP4_RHT_ROWWISE) core::rht16(w, a.sign_mask);
    row_m = max(row_m, abs_bits(core::block_amax16(w)));
    float c[16];
    column(smem[h], t.v, lane, c);
    if (a.rht & NVFP4_RHT_COLUMNWISE) core::rht16(c, a.sign_mask);
    col_m = max(col_m, abs_bits(core::block_amax16(c)));
  }
  quant::block_reduce_amax(row_m, a.row.amax ? a.row.amax + g : nullptr, nullptr);
  quant::block_reduce_amax(col_m, a.col.amax ? a.col.amax + g : nullptr, nullptr);
}

__device__ __forceinline__ core::Packed16 encode(const Args& a, const float (&v)[16], float e, uint64_t offset,
                                                 uint64_t idx0) {
  if (a.rounding == NVFP4_ROUND_STOCHASTIC) {
    uint32_t rnd[16];
    core::philox_block16(a.seed, offset, idx0, rnd);
    return core::encode_block_sr(v, e, rnd);
  }
  return core::encode_block_rn(v, e);
}

__device__ __forceinline__ void store8(uint8_t* p, const core::Packed16& q) {
  *reinterpret_cast<uint2*>(p) = make_uint2(q.lo, q.hi);
}

__global__ void __launch_bounds__(kThreads) batched_quantize_kernel(Args a, int64_t tiles) {
  __shared__ float smem[kTilesPerCta][16][17];
  const int h = threadIdx.x / 16, lane = threadIdx.x % 16;
  const int64_t g = blockIdx.y;
  const uint64_t offset = a.offset + (a.offset_device != nullptr ? *a.offset_device : 0ull) +
                          (static_cast<uint64_t>(g) << 32);
  const bool two_d = a.block == NVFP4_BLOCK_2D;
  const int64_t cp = core::swizzled_cols(a.k / 16), nrp = core::swizzled_rows(a.n);
  const int64_t ncp = core::swizzled_cols(a.n / 16), kp = core::swizzled_rows(a.k);
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * kTilesPerCta; base < tiles;
       base += static_cast<int64_t>(gridDim.x) * kTilesPerCta) {
    TileRow t = load_row(a, g, base + h, lane);
    const float tile_amax = core::bits_float(half_warp_max(abs_bits(core::block_amax16(t.v))));
    float c[16];
    column(smem[h], t.v, lane, c);
    if (!t.valid) continue;  // after the warp-wide transpose
    const int64_t n = t.n0 + lane, k = t.k0 + lane;
    if (a.row.amax != nullptr) {
      const core::GlobalScale gs = core::make_global_scale(a.row.amax[g]);
      float w[16];
#pragma unroll
      for (int i = 0; i < 16; ++i) w[i] = t.v[i];
      if (a.rht & NVFP4_RHT_ROWWISE) core::rht16(w, a.sign_mask);
      const uint8_t sb = core::block_scale_e4m3(two_d ? tile_amax : core::block_amax16(w), gs.enc);
      const float e = core::block_encode_factor(sb, gs.dec);
      store8(a.row.data + ((g * a.n + n) * a.k + t.k0) / 2,
             encode(a, w, e, offset, static_cast<uint64_t>(n * a.k + t.k0)));
      a.row.scales[g * nrp * cp + core::swizzle_offset(n, t.k0 / 16, a.k / 16)] = sb;
    }
    if (a.col.amax != nullptr) {
      const core::GlobalScale gs = core::make_global_scale(a.col.amax[g]);
      if (a.rht & NVFP4_RHT_COLUMNWISE) core::rht16(c, a.sign_mask);
      const uint8_t sb = core::block_scale_e4m3(two_d ? tile_amax : core::block_amax16(c), gs.enc);
      const float e = core::block_encode_factor(sb, gs.dec);
      store8(a.col.data + ((g * a.k + k) * a.n + t.n0) / 2,
             encode(a, c, e, offset, static_cast<uint64_t>(k * a.n + t.n0)));
      a.col.scales[g * kp * ncp + core::swizzle_offset(k, t.n0 / 16, a.n / 16)] = sb;
    }
  }
}

}  // namespace

nvfp4_status_t cuda_batched_quantize(const BatchedQuantJob& job, nvfp4_stream_t s) {
  const cudaStream_t stream = reinterpret_cast<cudaStream_t>(s);
  for (const GroupedOut* o : {&job.row, &job.col}) {
    if (!o->amax) continue;
    cudaError_t e = cudaMemsetAsync(o->amax, 0, static_cast<size_t>(job.e) * sizeof(float), stream);
    const int64_t sb = o == &job.row ? job.row_scale_bytes : job.col_scale_bytes;
    if (e == cudaSuccess && sb > 0) e = cudaMemsetAsync(o->scales, 0, static_cast<size_t>(sb), stream);
    if (e != cudaSuccess) return gpu::cuda_error(e, "batched quantize: cudaMemsetAsync");
  }
  const int64_t tiles = (job.n / 16) * (job.k / 16);
  if (tiles == 0 || job.e == 0) return NVFP4_SUCCESS;
  if (job.e > 65535)
    return fail(NVFP4_ERROR_NOT_SUPPORTED, "input: at most 65535 tensors in one batched quantization on CUDA");
  Args a{};
  a.x = job.x;
  a.dtype = job.dtype;
  a.n = job.n;
  a.k = job.k;
  a.row = job.row;
  a.col = job.col;
  a.block = job.cfg.block;
  a.rounding = job.cfg.rounding;
  a.rht = job.cfg.rht;
  a.sign_mask = job.cfg.rht_sign_mask;
  a.seed = job.cfg.seed;
  a.offset = job.cfg.offset;
  a.offset_device = job.cfg.offset_device;
  // enough CTAs per expert for about four waves over all experts
  const int64_t sms = gpu::sm_count(gpu::current_device());
  int64_t gx = (tiles + kTilesPerCta - 1) / kTilesPerCta;
  const int64_t cap = (4 * sms * 6 + job.e - 1) / job.e;
  if (gx > cap) gx = cap;
  if (gx < 1) gx = 1;
  const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(job.e));
  batched_amax_kernel<<<grid, kThreads, 0, stream>>>(a, tiles);
  if (nvfp4_status_t st = gpu::check_launch("batched quantize (amax pass)"); st != NVFP4_SUCCESS) return st;
  batched_quantize_kernel<<<grid, kThreads, 0, stream>>>(a, tiles);
  return gpu::check_launch("batched quantize");
}

}  // namespace nvfp4::detail
