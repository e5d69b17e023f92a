// Grouped (MoE) quantization on CUDA (nvfp4_grouped_quantize): x [T, K] token-sorted into E
// groups by offs, each group quantized as its own tensor. In stream order, no host
// synchronization, offs read on the device only:
//   1. cudaMemsetAsync: the per-group amaxes (reduced into with atomics) and the scale buffers
//      (their padding is zero; the quantize pass writes the scales of the groups' blocks);
//   2. the amax pass: max |x_g| (or of its Hadamard transform) per group and direction;
//   3. the quantize pass: codes and block scales, and zero codes where no group is (rows past
//      the last group, the columnwise buffer's unused tail), so that every byte is written.
// A work item is one 16-value block of an orientation: a row block (r, j) of x for the rowwise
// direction, a token block (k, j) of x_g^T for the columnwise one. Columnwise items run with k
// fastest, so the 16 strided loads of a warp's items are each one contiguous read of x.
// Both passes find an item's group with a binary search in the group table (grouped_table.cuh)
// that each CTA builds from offs. The arithmetic is the core functions' (the CPU reference's),
// so results are bit-identical to cpu_grouped_quantize, hence to nvfp4_quantize per group.
#include <cuda_runtime.h>

#include <string>

#include "core/block.h"
#include "core/rht.h"
#include "core/scale.h"
#include "core/swizzle.h"
#include "cuda/device.h"
#include "grouped.h"
#include "quant/common.cuh"
#include "quant/grouped_table.cuh"

namespace nvfp4::detail {
namespace {

using grouped::Table;
using grouped::kThreads;

struct Args {
  const void* x;
  int64_t t, k;
  int e;
  const int32_t* offs;
  int32_t* offs_error;
  GroupedOut row, col;
  int64_t row_items, col_items;  // blocks of each direction's index space (0: not requested)
  nvfp4_rounding_t rounding;
  uint32_t rht;
  uint32_t sign_mask;
  uint64_t seed, offset;
  const uint64_t* offset_device;
};

template <class In>
__device__ __forceinline__ float load_x(const void* x, int64_t i);
template <>
__device__ __forceinline__ float load_x<float>(const void* x, int64_t i) {
  return static_cast<const float*>(x)[i];
}
struct Half {};
struct Bf16 {};
template <>
__device__ __forceinline__ float load_x<Half>(const void* x, int64_t i) {
  return core::fp16_to_float(static_cast<const uint16_t*>(x)[i]);
}
template <>
__device__ __forceinline__ float load_x<Bf16>(const void* x, int64_t i) {
  return core::bf16_to_float(static_cast<const uint16_t*>(x)[i]);
}

// One item: its group (e: none) and the 16 values of its block, transformed where asked.
struct Item {
  int g;
  int64_t row, blk;  // orientation row (x row r, or feature k) and block column j
  float v[16];
};

template <class In>
__device__ __forceinline__ void load_item(const Table& tab, const Args& a, bool col, int64_t q, Item& it) {
  if (!col) {
    const int64_t nb = a.k / 16;
    it.row = q / nb;
    it.blk = q - it.row * nb;
    it.g = grouped::group_of_row(tab, a.e, it.row);
    if (it.g >= a.e) return;
    const int64_t base = it.row * a.k + it.blk * 16;
#pragma unroll
    for (int i = 0; i < 16; ++i) it.v[i] = load_x<In>(a.x, base + i);
    if (a.rht & NVFP4_RHT_ROWWISE) core::rht16(it.v, a.sign_mask);
    return;
  }
  it.g = grouped::group_of_col_block(tab, a.e, a.k, q);
  if (it.g >= a.e) return;
  const int64_t local = q - a.k * tab.ps[it.g] / 16;
  it.row = local % a.k;  // feature
  it.blk = local / a.k;  // token block within the group
  const int64_t s = grouped::start_of(tab, it.g), m = tab.end[it.g] - s;
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const int64_t j = it.blk * 16 + i;
    it.v[i] = j < m ? load_x<In>(a.x, (s + j) * a.k + it.row) : 0.0f;
  }
  if (a.rht & NVFP4_RHT_COLUMNWISE) core::rht16(it.v, a.sign_mask);
}

__device__ __forceinline__ uint32_t item_amax_bits(const Item& it) {
  return core::float_bits(core::block_amax16(it.v)) & 0x7fffffffu;
}

// Pass 2. Each CTA takes a contiguous chunk of one direction's items (blockIdx.y: 0 rowwise,
// 1 columnwise), 256 consecutive items an iteration; items are in group order, so all threads
// agree on the groups an iteration spans. Inside a group the CTA keeps per-thread maxima and
// issues one reduction and atomicMax per group it leaves; groups that begin and end inside one
// iteration (small ones) go straight to atomicMax.
template <class In>
__global__ void __launch_bounds__(kThreads) grouped_amax_kernel(Args a) {
  __shared__ Table tab;
  grouped::load_table(tab, a.offs, a.e, a.t);
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 && a.offs_error != nullptr)
    *a.offs_error = static_cast<int32_t>(tab.bits);
  const bool col = blockIdx.y == 1;
  const int64_t n = col ? a.col_items : a.row_items;
  float* amax = col ? a.col.amax : a.row.amax;
  if (n == 0) return;
  const int64_t chunk = (n + gridDim.x - 1) / gridDim.x;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * chunk;
  const int64_t c1 = c0 + chunk < n ? c0 + chunk : n;
  if (c0 >= c1) return;
  auto group_at = [&](int64_t q) {
    if (!col) return grouped::group_of_row(tab, a.e, q / (a.k / 16));
    return grouped::group_of_col_block(tab, a.e, a.k, q);
  };
  int cur = group_at(c0);
  uint32_t m = 0u;
  for (int64_t base = c0; base < c1; base += kThreads) {
    const int64_t q = base + threadIdx.x;
    Item it;
    it.g = a.e;
    uint32_t bits = 0u;
    if (q < c1) {
      load_item<In>(tab, a, col, q, it);
      if (it.g < a.e) bits = item_amax_bits(it);
    }
    const int64_t last = base + kThreads - 1 < c1 - 1 ? base + kThreads - 1 : c1 - 1;
    const int hi = group_at(last);  // the same for every thread
    if (hi == cur) {
      m = max(m, bits);
      continue;
    }
    if (q < c1 && it.g == cur) m = max(m, bits);
    quant::block_reduce_amax(m, cur < a.e ? amax + cur : nullptr, nullptr);
    if (q < c1 && it.g > cur && it.g < hi && it.g < a.e)
      atomicMax(reinterpret_cast<unsigned int*>(amax + it.g), bits);
    cur = hi;
    m = (q < c1 && it.g == hi) ? bits : 0u;
  }
  quant::block_reduce_amax(m, cur < a.e ? amax + cur : nullptr, nullptr);
}

// Pass 3: a persistent grid over both directions' items.
template <class In>
__global__ void __launch_bounds__(kThreads) grouped_quantize_kernel(Args a) {
  __shared__ Table tab;
  grouped::load_table(tab, a.offs, a.e, a.t);
  const uint64_t off0 = a.offset + (a.offset_device != nullptr ? *a.offset_device : 0ull);
  const core::PhiloxKeys keys = core::philox_keys(a.seed);
  const int64_t total = a.row_items + a.col_items;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t u = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; u < total; u += stride) {
    const bool col = u >= a.row_items;
    const int64_t q = col ? u - a.row_items : u;
    Item it;
    load_item<In>(tab, a, col, q, it);
    uint8_t* out;
    if (!col) {
      out = a.row.data + q * 8;
    } else if (it.g < a.e) {
      const int64_t mp = tab.ps[it.g + 1] - tab.ps[it.g];
      out = a.col.data + a.k * tab.ps[it.g] / 2 + it.row * (mp / 2) + it.blk * 8;
    } else {
      out = a.col.data + q * 8;  // past the last group: blocks in order, zero codes
    }
    uint32_t lo = 0u, hi = 0u;
    if (it.g < a.e) {
      const core::GlobalScale gs = core::make_global_scale((col ? a.col.amax : a.row.amax)[it.g]);
      const uint8_t sb = core::block_scale_e4m3(core::block_amax16(it.v), gs.enc);
      const float enc = core::block_encode_factor(sb, gs.dec);
      int64_t idx0, scale_at;
      if (!col) {
        const int64_t lr = it.row - grouped::start_of(tab, it.g);
        idx0 = lr * a.k + it.blk * 16;
        scale_at = tab.rs[it.g] * core::swizzled_cols(a.k / 16) + core::swizzle_offset(lr, it.blk, a.k / 16);
      } else {
        const int64_t mp = tab.ps[it.g + 1] - tab.ps[it.g];
        idx0 = it.row * mp + it.blk * 16;
        scale_at = core::swizzled_rows(a.k) * tab.qs[it.g] + core::swizzle_offset(it.row, it.blk, mp / 16);
      }
      core::Packed16 p;
      if (a.rounding == NVFP4_ROUND_STOCHASTIC) {
        uint32_t rnd[16];
        const core::Philox4 w =
            core::philox_words16(keys, off0 + (static_cast<uint64_t>(it.g) << 32), static_cast<uint64_t>(idx0));
#pragma unroll
        for (int i = 0; i < 16; ++i) rnd[i] = (w.v[i >> 2] >> (8 * (i & 3))) & 0xffu;
        p = core::encode_block_sr(it.v, enc, rnd);
      } else {
        p = core::encode_block_rn(it.v, enc);
      }
      lo = p.lo;
      hi = p.hi;
      (col ? a.col.scales : a.row.scales)[scale_at] = sb;
    }
    // 8 bytes, 8-byte aligned (data buffers are 16-byte aligned, blocks 8 bytes apart)
    *reinterpret_cast<uint2*>(out) = make_uint2(lo, hi);
  }
}

template <class In>
nvfp4_status_t launch(const Args& a, cudaStream_t stream) {
  const unsigned dirs = a.col_items > 0 ? 2u : 1u;
  // the amax pass: about two CTAs per SM and direction
  const int sms = gpu::sm_count(gpu::current_device());
  const int64_t most = ((a.row_items > a.col_items ? a.row_items : a.col_items) + kThreads - 1) / kThreads;
  int64_t gx = 2 * static_cast<int64_t>(sms);
  if (gx > most) gx = most;
  if (gx < 1) gx = 1;
  grouped_amax_kernel<In><<<dim3(static_cast<unsigned>(gx), dirs), kThreads, 0, stream>>>(a);
  if (nvfp4_status_t s = gpu::check_launch("grouped quantize (amax pass)"); s != NVFP4_SUCCESS) return s;
  const unsigned grid = quant::persistent_grid(grouped_quantize_kernel<In>, kThreads, 0,
                                               (a.row_items + a.col_items + kThreads - 1) / kThreads);
  grouped_quantize_kernel<In><<<grid, kThreads, 0, stream>>>(a);
  return gpu::check_launch("grouped quantize");
}

}  // namespace

nvfp4_status_t cuda_grouped_quantize(const GroupedQuantJob& job, nvfp4_stream_t s) {
  const cudaStream_t stream = reinterpret_cast<cudaStream_t>(s);
  if (job.e > grouped::kMaxGroups)
    return fail(NVFP4_ERROR_NOT_SUPPORTED, "groups.count: the CUDA kernels take at most " +
                                               std::to_string(grouped::kMaxGroups) + " groups, got " +
                                               std::to_string(job.e));
  for (const GroupedOut* o : {&job.row, &job.col}) {
    if (!o->amax) continue;
    cudaError_t e = cudaMemsetAsync(o->amax, 0, static_cast<size_t>(job.e) * sizeof(float), stream);
    const int64_t sb = o == &job.row ? job.row_scale_bytes : job.col_scale_bytes;
    if (e == cudaSuccess && sb > 0) e = cudaMemsetAsync(o->scales, 0, static_cast<size_t>(sb), stream);
    if (e != cudaSuccess) return gpu::cuda_error(e, "grouped quantize: cudaMemsetAsync");
  }
  Args a{};
  a.x = job.x;
  a.t = job.t;
  a.k = job.k;
  a.e = static_cast<int>(job.e);
  a.offs = job.offs;
  a.offs_error = job.offs_error;
  a.row = job.row;
  a.col = job.col;
  a.row_items = job.row.amax ? job.t * job.k / 16 : 0;
  a.col_items = job.col.amax ? job.col_data_bytes / 8 : 0;
  a.rounding = job.cfg.rounding;
  a.rht = job.cfg.rht;
  a.sign_mask = job.cfg.rht_sign_mask;
  a.seed = job.cfg.seed;
  a.offset = job.cfg.offset;
  a.offset_device = job.cfg.offset_device;
  // Nothing to quantize (T or K is 0): only the offs check remains to be reported.
  if (a.row_items == 0 && a.col_items == 0 && job.offs_error == nullptr) return NVFP4_SUCCESS;
  // The columnwise direction sits at blockIdx.y == 1 of the amax pass; without a rowwise one
  // its CTAs at y == 0 find no items.
  switch (job.dtype) {
    case NVFP4_DTYPE_FLOAT16: return launch<Half>(a, stream);
    case NVFP4_DTYPE_BFLOAT16: return launch<Bf16>(a, stream);
    default: return launch<float>(a, stream);
  }
}

}  // namespace nvfp4::detail
