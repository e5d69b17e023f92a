// The group table of a grouped (MoE) tensor, built on the device from offs by every CTA that
// needs it (a block-wide scan over at most kMaxGroups groups, a few microseconds' worth of work
// spread over 256 threads), so that no kernel depends on a value read on the host.
//
// Every kernel sees offs through the same clamp (nvfp4.h): end_g = min(max(0, offs[0..g]), T),
// the running maximum, so a decreasing, negative or too large entry can never make a group
// reach outside [0, T), and the NVFP4_OFFS_* bits say what was corrected.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "grouped.h"

namespace nvfp4::detail::grouped {

constexpr int kThreads = 256;
constexpr int kMaxGroups = 1024;  // 4 per thread; the API refuses more on CUDA
constexpr int kPerThread = kMaxGroups / kThreads;

// 32 KiB of shared memory. For group g (0 <= g < E):
//   end[g]   clamped end row; rows [end[g-1], end[g]) (end[-1] = 0)
//   rs[g]    rowwise scale-row start: sum_{h<g} roundup(m_h, 128)
//   ps[g]    columnwise padded-token start: sum_{h<g} roundup(m_h, 32); ps[E] = the total
//   qs[g]    columnwise scale-column start: sum_{h<g} roundup(roundup(m_h, 32) / 16, 4)
struct Table {
  int64_t end[kMaxGroups];
  int64_t rs[kMaxGroups];
  int64_t ps[kMaxGroups + 1];
  int64_t qs[kMaxGroups];
  int64_t warp_tot[3][kThreads / 32];
  uint32_t bits;
};

__device__ __forceinline__ int64_t start_of(const Table& t, int g) { return g == 0 ? 0 : t.end[g - 1]; }

template <class Op>
__device__ __forceinline__ int64_t warp_inclusive(int64_t v, Op op) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int64_t u = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v = op(v, u);
  }
  return v;
}

// Exclusive block-wide scan of one value per thread (blockDim.x == kThreads). slot: a row of
// warp_tot no other scan of this call uses.
template <class Op>
__device__ __forceinline__ int64_t block_exclusive(int64_t v, Op op, int64_t identity, int64_t* slot) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t inc = warp_inclusive(v, op);
  if (lane == 31) slot[warp] = inc;
  __syncthreads();
  int64_t base = identity;
  for (int w = 0; w < warp; ++w) base = op(base, slot[w]);
  int64_t ex = __shfl_up_sync(0xffffffffu, inc, 1);
  if (lane == 0) ex = identity;
  return op(base, ex);
}

struct MaxOp {
  __device__ int64_t operator()(int64_t a, int64_t b) const { return a > b ? a : b; }
};
struct AddOp {
  __device__ int64_t operator()(int64_t a, int64_t b) const { return a + b; }
};

// Builds the table of E <= kMaxGroups groups over t rows. Every thread of the CTA calls it.
__device__ inline void load_table(Table& tab, const int32_t* offs, int e, int64_t t) {
  const int g0 = threadIdx.x * kPerThread;
  int64_t raw[kPerThread], pre[kPerThread];
  uint32_t bits = 0;
  int64_t run = 0;  // prefix max within this thread's groups (0: the clamp at 0)
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    raw[i] = g0 + i < e ? static_cast<int64_t>(offs[g0 + i]) : 0;
    pre[i] = run;  // max over this thread's earlier groups
    run = raw[i] > run ? raw[i] : run;
  }
  if (threadIdx.x == 0) tab.bits = 0;
  const int64_t before = block_exclusive(run, MaxOp{}, 0, tab.warp_tot[0]);
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    if (g0 + i >= e) break;
    const int64_t prev = before > pre[i] ? before : pre[i];  // max(0, offs[0..g-1])
    if (raw[i] < 0) bits |= NVFP4_OFFS_NEGATIVE;
    if (raw[i] > t) bits |= NVFP4_OFFS_PAST_END;
    if (raw[i] >= 0 && raw[i] < prev) bits |= NVFP4_OFFS_DECREASING;
    const int64_t m = raw[i] > prev ? raw[i] : prev;
    tab.end[g0 + i] = m < t ? m : t;
  }
  if (bits) atomicOr(&tab.bits, bits);
  __syncthreads();
  int64_t r[kPerThread], p[kPerThread], q[kPerThread];
  int64_t sr = 0, sp = 0, sq = 0;
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int g = g0 + i;
    const int64_t m = g < e ? tab.end[g] - start_of(tab, g) : 0;
    const int64_t mp = (m + kGroupTokenAlign - 1) / kGroupTokenAlign * kGroupTokenAlign;
    r[i] = sr;
    p[i] = sp;
    q[i] = sq;
    sr += (m + 127) / 128 * 128;
    sp += mp;
    sq += (mp / 16 + 3) / 4 * 4;
  }
  const int64_t br = block_exclusive(sr, AddOp{}, 0, tab.warp_tot[0]);
  const int64_t bp = block_exclusive(sp, AddOp{}, 0, tab.warp_tot[1]);
  const int64_t bq = block_exclusive(sq, AddOp{}, 0, tab.warp_tot[2]);
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int g = g0 + i;
    if (g >= e) break;
    tab.rs[g] = br + r[i];
    tab.ps[g] = bp + p[i];
    tab.qs[g] = bq + q[i];
    if (g == e - 1) tab.ps[e] = bp + sp;
  }
  __syncthreads();
}

// The group of row r: the g with start(g) <= r < end[g], or e when r is in no group.
__device__ __forceinline__ int group_of_row(const Table& tab, int e, int64_t r) {
  int lo = 0, hi = e;  // first g with end[g] > r
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (tab.end[mid] > r) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

// The group whose columnwise blocks hold block q (blocks of group g: [f * ps[g] / 16,
// f * ps[g+1] / 16) for f features), or e past the last group.
__device__ __forceinline__ int group_of_col_block(const Table& tab, int e, int64_t f, int64_t q) {
  int lo = 0, hi = e;  // first g with f * ps[g+1] > 16 q
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (f * tab.ps[mid + 1] > 16 * q) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

}  // namespace nvfp4::detail::grouped
