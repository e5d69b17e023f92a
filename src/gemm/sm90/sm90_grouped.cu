// The Hopper (sm_90a) grouped runner (cutlass-sm90-grouped): an exact emulation of
// nvfp4_grouped_gemm on BF16 tensor cores, in stream order and without reading offs on the host:
//
//   1. setup (one CTA): the group table from offs (quant/grouped_table.cuh, the clamp every
//      grouped kernel applies), the offs error word, and per group alpha_g, the problem shape,
//      the A/B/D pointers and leading dimensions CUTLASS's grouped kernel reads;
//   2. decode: both operands of every group FP4 -> BF16 into the workspace, one pass (value x
//      block scale, exact in BF16; the per-group scale stays out, as alpha_g);
//   3. zero: the rows of D that no group writes (ragged M) or the D[g] of empty groups
//      (ragged K), which the grouped kernel skips (their problems have M = 0);
//   4. CUTLASS's sm90 ptr-array grouped GEMM (sm90_grouped_*.cu), alpha_g in its epilogue;
//   5. FP16 output only: the FP32 result rounded once into D (what an FP16 epilogue rounds).
//
// Workspace, each part 256-byte aligned:
//   alpha f32[E] | alpha pointers [E] | problems i32[E][3] | ptr A, B, D [E] | ld A, B, D i64[E] |
//   counts i64[E + 1] | A bf16 | B bf16 | T f32 (FP16 output) | CUTLASS's
// A/B bf16 hold the decoded operands in the layout of their codes (value i of byte i/2):
// ragged M: A [T, K], B [E, N, K]; ragged K: the group-major blocks [N, Mp_g], [K, Mp_g].
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>

#include "core/e2m1.h"
#include "core/e4m3.h"
#include "core/scale.h"
#include "core/swizzle.h"
#include "gemm/backends.h"
#include "cuda/device.h"
#include "gemm/sm90/sm90_grouped.h"
#include "grouped.h"
#include "quant/grouped_table.cuh"

namespace nvfp4::detail {
namespace {

using grouped::kThreads;
using grouped::Table;

struct DeviceJob {
  nvfp4_grouped_kind_t kind;
  int e;
  int64_t t, n, k;
  const int32_t* offs;
  int32_t* offs_error;
  const uint8_t *a, *sfa, *b, *sfb;
  const float *amax_a, *amax_b;
  // workspace parts
  float* alpha;
  const float** alpha_ptrs;
  int32_t* problems;
  const void** pa;
  const void** pb;
  void** pd;
  int64_t *lda, *ldb, *ldd, *counts;
  __nv_bfloat16* a16;
  __nv_bfloat16* b16;
  void* d;            // what CUTLASS writes: the output, or T (FP32) for FP16 output
  int64_t d_elt;      // bytes per element of that buffer
};

__global__ void __launch_bounds__(kThreads) sm90_grouped_setup_kernel(DeviceJob j) {
  __shared__ Table tab;
  grouped::load_table(tab, j.offs, j.e, j.t);
  if (threadIdx.x == 0 && j.offs_error != nullptr) *j.offs_error = static_cast<int32_t>(tab.bits);
  auto* d = static_cast<char*>(j.d);
  for (int g = threadIdx.x; g < j.e; g += kThreads) {
    const int64_t s = grouped::start_of(tab, g), m = tab.end[g] - s;
    j.alpha[g] = core::gemm_alpha(j.amax_a + g, j.amax_b + g);
    j.alpha_ptrs[g] = j.alpha + g;
    int32_t* pr = j.problems + 3 * g;
    if (j.kind == NVFP4_GROUPED_RAGGED_M) {
      pr[0] = static_cast<int32_t>(m);
      pr[1] = static_cast<int32_t>(j.n);
      pr[2] = static_cast<int32_t>(j.k);
      j.pa[g] = j.a16 + s * j.k;
      j.pb[g] = j.b16 + g * j.n * j.k;
      j.pd[g] = d + s * j.n * j.d_elt;
      j.lda[g] = j.k;
      j.ldb[g] = j.k;
      j.ldd[g] = j.n;
      j.counts[g] = m;
    } else {
      const int64_t mp = tab.ps[g + 1] - tab.ps[g];
      pr[0] = mp > 0 ? static_cast<int32_t>(j.n) : 0;  // an empty group is skipped, then zeroed
      pr[1] = static_cast<int32_t>(j.k);
      pr[2] = static_cast<int32_t>(mp);
      j.pa[g] = j.a16 + j.n * tab.ps[g];
      j.pb[g] = j.b16 + j.k * tab.ps[g];
      j.pd[g] = d + g * j.n * j.k * j.d_elt;
      j.lda[g] = mp > 0 ? mp : kGroupTokenAlign;  // any valid stride: the group has no tile
      j.ldb[g] = j.lda[g];
      j.ldd[g] = j.k;
      j.counts[g] = mp;
    }
  }
  if (j.kind == NVFP4_GROUPED_RAGGED_M && threadIdx.x == 0)
    j.counts[j.e] = j.e > 0 ? tab.end[j.e - 1] : 0;  // the first row of no group
}

// 16 values of one block, decoded (value x block scale, exact in BF16), stored at out.
__device__ __forceinline__ void decode16(const uint8_t* codes, uint8_t sb, __nv_bfloat16* out) {
  const uint2 raw = __ldg(reinterpret_cast<const uint2*>(codes));
  const float scale = core::e4m3_decode(sb);
  uint32_t packed[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint32_t w = i < 4 ? raw.x : raw.y;
    const uint32_t byte = (w >> (8 * (i & 3))) & 0xffu;
    __nv_bfloat162 v = __floats2bfloat162_rn(core::e2m1_decode(byte & 15u) * scale,
                                             core::e2m1_decode(byte >> 4) * scale);
    packed[i] = *reinterpret_cast<uint32_t*>(&v);
  }
  uint4* d4 = reinterpret_cast<uint4*>(out);
  d4[0] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
  d4[1] = make_uint4(packed[4], packed[5], packed[6], packed[7]);
}

// Block q of a grouped columnwise direction of f features: its group (e: past the last one),
// the orientation row and block column, hence its scale byte.
__device__ __forceinline__ bool col_block(const Table& tab, int e, int64_t f, int64_t q, const uint8_t* scales,
                                          uint8_t& sb) {
  const int g = grouped::group_of_col_block(tab, e, f, q);
  if (g >= e) return false;
  const int64_t mp = tab.ps[g + 1] - tab.ps[g];
  const int64_t local = 8 * q - f * tab.ps[g] / 2;
  const int64_t row = local / (mp / 2), blk = (local % (mp / 2)) / 8;
  sb = __ldg(scales + core::swizzled_rows(f) * tab.qs[g] + core::swizzle_offset(row, blk, mp / 16));
  return true;
}

__global__ void __launch_bounds__(kThreads) sm90_grouped_decode_kernel(DeviceJob j, int64_t items_a,
                                                                       int64_t items_b) {
  __shared__ Table tab;
  grouped::load_table(tab, j.offs, j.e, j.t);
  const int64_t total = items_a + items_b;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  const int64_t kb = j.k / 16, cp = core::swizzled_cols(j.k / 16);
  for (int64_t u = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; u < total; u += stride) {
    const bool in_a = u < items_a;
    const int64_t q = in_a ? u : u - items_a;
    uint8_t sb = 0;
    if (j.kind == NVFP4_GROUPED_RAGGED_M) {
      if (in_a) {  // a grouped rowwise [T, K]
        const int64_t r = q / kb, blk = q - r * kb;
        const int g = grouped::group_of_row(tab, j.e, r);
        if (g >= j.e) continue;  // a row of no group: never read by the GEMM
        sb = __ldg(j.sfa + tab.rs[g] * cp + core::swizzle_offset(r - grouped::start_of(tab, g), blk, kb));
      } else {  // b batched [E, N, K]; an expert without rows is never read
        const int64_t per = j.n * kb;
        const int64_t g = q / per, local = q - g * per;
        if (tab.end[g] == grouped::start_of(tab, static_cast<int>(g))) continue;
        const int64_t r = local / kb, blk = local - r * kb;
        sb = __ldg(j.sfb + g * core::swizzled_rows(j.n) * cp + core::swizzle_offset(r, blk, kb));
      }
    } else if (!col_block(tab, j.e, in_a ? j.n : j.k, q, in_a ? j.sfa : j.sfb, sb)) {
      continue;
    }
    decode16((in_a ? j.a : j.b) + 8 * q, sb, (in_a ? j.a16 : j.b16) + 16 * q);
  }
}

// Zeroes what the grouped GEMM does not write: ragged M, rows [counts[E], T) of D (blockIdx.y
// == 0 only); ragged K, D[g] where group g is empty (blockIdx.y == g).
__global__ void __launch_bounds__(256) sm90_grouped_zero_kernel(DeviceJob j) {
  char* d = static_cast<char*>(j.d);
  int64_t begin, end;  // in 4-byte words
  if (j.kind == NVFP4_GROUPED_RAGGED_M) {
    begin = j.counts[j.e] * j.n * j.d_elt / 4;
    end = j.t * j.n * j.d_elt / 4;
  } else {
    const int g = blockIdx.y;
    if (j.counts[g] != 0) return;
    begin = g * j.n * j.k * j.d_elt / 4;
    end = begin + j.n * j.k * j.d_elt / 4;
  }
  uint32_t* w = reinterpret_cast<uint32_t*>(d);
  for (int64_t i = begin + static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < end;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    w[i] = 0u;
}

__global__ void __launch_bounds__(256) sm90_grouped_convert_kernel(const float* t, __half* d, int64_t count) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    d[i] = __float2half_rn(t[i]);
}

struct Plan {
  const Sm90GroupedKernel* kernel = nullptr;
  bool via_f32 = false;  // FP16 output: CUTLASS writes FP32 into T
  int64_t items_a = 0, items_b = 0, d_count = 0;
  size_t off_alpha = 0, off_alpha_ptrs = 0, off_prob = 0, off_pa = 0, off_pb = 0, off_pd = 0, off_lda = 0,
         off_ldb = 0, off_ldd = 0, off_cnt = 0, off_a = 0, off_b = 0, off_t = 0, off_cutlass = 0, total = 0;
  Sm90GroupedArgs args;
};

nvfp4_status_t make_plan(const GroupedGemmJob& g, Plan& pl) {
  pl = Plan{};
  if (g.e > grouped::kMaxGroups)
    return fail(NVFP4_ERROR_NOT_SUPPORTED, "groups.count: the CUDA grouped GEMM takes at most " +
                                               std::to_string(grouped::kMaxGroups) + " groups");
  pl.via_f32 = g.d_dtype == NVFP4_DTYPE_FLOAT16;
  pl.kernel = g.d_dtype == NVFP4_DTYPE_BFLOAT16 ? &kSm90GroupedBf16 : &kSm90GroupedF32;
  const int64_t e = g.e;
  if (g.kind == NVFP4_GROUPED_RAGGED_M) {
    pl.items_a = g.t * g.k / 16;
    pl.items_b = e * g.n * g.k / 16;
    pl.d_count = g.t * g.n;
  } else {
    pl.items_a = g.n * grouped_col_tokens(g.t, e) / 16;
    pl.items_b = g.k * grouped_col_tokens(g.t, e) / 16;
    pl.d_count = e * g.n * g.k;
  }
  size_t off = 0;
  auto part = [&](size_t& at, size_t bytes) {
    at = off;
    off += gpu::align_up(bytes);
  };
  const size_t E = static_cast<size_t>(e);
  part(pl.off_alpha, E * sizeof(float));
  part(pl.off_alpha_ptrs, E * sizeof(float*));
  part(pl.off_prob, E * 3 * sizeof(int32_t));
  part(pl.off_pa, E * sizeof(void*));
  part(pl.off_pb, E * sizeof(void*));
  part(pl.off_pd, E * sizeof(void*));
  part(pl.off_lda, E * sizeof(int64_t));
  part(pl.off_ldb, E * sizeof(int64_t));
  part(pl.off_ldd, E * sizeof(int64_t));
  part(pl.off_cnt, (E + 1) * sizeof(int64_t));
  part(pl.off_a, static_cast<size_t>(pl.items_a) * 16 * 2);
  part(pl.off_b, static_cast<size_t>(pl.items_b) * 16 * 2);
  part(pl.off_t, pl.via_f32 ? static_cast<size_t>(pl.d_count) * sizeof(float) : 0);
  pl.args.groups = static_cast<int>(e);
  pl.args.device = gpu::current_device();
  pl.args.sm_count = gpu::sm_count(pl.args.device);
  pl.off_cutlass = off;
  off += gpu::align_up(pl.kernel->workspace_size(pl.args));
  pl.total = off;
  return NVFP4_SUCCESS;
}

unsigned grid_for(int64_t items, int64_t per_sm) {
  int64_t g = (items + kThreads - 1) / kThreads;
  const int64_t cap = static_cast<int64_t>(gpu::sm_count(gpu::current_device())) * per_sm;
  if (g > cap) g = cap;
  return static_cast<unsigned>(g < 1 ? 1 : g);
}

}  // namespace

bool sm90_grouped_applicable(const GroupedGemmJob& g) {
  // TMA: every row of A, B and D starts 16-byte aligned; int32 problem shapes.
  const int64_t d_elt = g.d_dtype == NVFP4_DTYPE_BFLOAT16 || g.d_dtype == NVFP4_DTYPE_FLOAT16 ? 2 : 4;
  const int64_t d_row = g.kind == NVFP4_GROUPED_RAGGED_M ? g.n : g.k;
  const int64_t out_elt = g.d_dtype == NVFP4_DTYPE_FLOAT16 ? 4 : d_elt;  // FP16 goes through FP32
  return g.e <= grouped::kMaxGroups && (d_row * out_elt) % 16 == 0 && (d_row * d_elt) % 4 == 0 && g.k % 8 == 0 &&
         g.n < INT32_MAX && g.k < INT32_MAX && g.t < INT32_MAX;
}

nvfp4_status_t sm90_grouped_workspace(const GemmJob& job, int, size_t* bytes) {
  Plan pl;
  if (nvfp4_status_t s = make_plan(*job.grouped, pl); s != NVFP4_SUCCESS) return s;
  *bytes = pl.total;
  return NVFP4_SUCCESS;
}

nvfp4_status_t sm90_grouped_run(const GemmJob& job, int, void* workspace, size_t workspace_bytes,
                                nvfp4_stream_t s) {
  const GroupedGemmJob& g = *job.grouped;
  Plan pl;
  if (nvfp4_status_t st = make_plan(g, pl); st != NVFP4_SUCCESS) return st;
  if (workspace_bytes < pl.total || workspace == nullptr)
    return fail(NVFP4_ERROR_WORKSPACE, "grouped gemm (cutlass sm90): workspace of " + std::to_string(workspace_bytes) +
                                           " bytes, this problem needs " + std::to_string(pl.total) +
                                           " (query nvfp4_grouped_gemm_workspace_size with the same arguments)");
  if (reinterpret_cast<uintptr_t>(workspace) % gpu::kWorkspaceAlign != 0)
    return fail(NVFP4_ERROR_INVALID_ARGUMENT, "workspace: must be 256-byte aligned");
  if (nvfp4_status_t st = pl.kernel->check_layouts(); st != NVFP4_SUCCESS) return st;
  const cudaStream_t stream = reinterpret_cast<cudaStream_t>(s);
  auto* ws = static_cast<uint8_t*>(workspace);
  DeviceJob j{};
  j.kind = g.kind;
  j.e = static_cast<int>(g.e);
  j.t = g.t;
  j.n = g.n;
  j.k = g.k;
  j.offs = g.offs;
  j.offs_error = g.offs_error;
  j.a = g.a;
  j.sfa = g.sfa;
  j.b = g.b;
  j.sfb = g.sfb;
  j.amax_a = g.amax_a;
  j.amax_b = g.amax_b;
  j.alpha = reinterpret_cast<float*>(ws + pl.off_alpha);
  j.alpha_ptrs = reinterpret_cast<const float**>(ws + pl.off_alpha_ptrs);
  j.problems = reinterpret_cast<int32_t*>(ws + pl.off_prob);
  j.pa = reinterpret_cast<const void**>(ws + pl.off_pa);
  j.pb = reinterpret_cast<const void**>(ws + pl.off_pb);
  j.pd = reinterpret_cast<void**>(ws + pl.off_pd);
  j.lda = reinterpret_cast<int64_t*>(ws + pl.off_lda);
  j.ldb = reinterpret_cast<int64_t*>(ws + pl.off_ldb);
  j.ldd = reinterpret_cast<int64_t*>(ws + pl.off_ldd);
  j.counts = reinterpret_cast<int64_t*>(ws + pl.off_cnt);
  j.a16 = reinterpret_cast<__nv_bfloat16*>(ws + pl.off_a);
  j.b16 = reinterpret_cast<__nv_bfloat16*>(ws + pl.off_b);
  j.d = pl.via_f32 ? static_cast<void*>(ws + pl.off_t) : g.d;
  j.d_elt = pl.via_f32 || g.d_dtype == NVFP4_DTYPE_FLOAT32 ? 4 : 2;

  sm90_grouped_setup_kernel<<<1, kThreads, 0, stream>>>(j);
  if (nvfp4_status_t st = gpu::check_launch("grouped gemm: setup"); st != NVFP4_SUCCESS) return st;
  if (pl.items_a + pl.items_b > 0) {
    sm90_grouped_decode_kernel<<<grid_for(pl.items_a + pl.items_b, 8), kThreads, 0, stream>>>(j, pl.items_a,
                                                                                                pl.items_b);
    if (nvfp4_status_t st = gpu::check_launch("grouped gemm: FP4 -> BF16 decode"); st != NVFP4_SUCCESS) return st;
  }
  const bool ragged_m = g.kind == NVFP4_GROUPED_RAGGED_M;
  const int64_t zero_words = (ragged_m ? g.t * g.n : g.n * g.k) * j.d_elt / 4;
  if (zero_words > 0) {
    const dim3 grid(grid_for(zero_words, ragged_m ? 8 : 1), ragged_m ? 1u : static_cast<unsigned>(g.e));
    sm90_grouped_zero_kernel<<<grid, 256, 0, stream>>>(j);
    if (nvfp4_status_t st = gpu::check_launch("grouped gemm: zero fill"); st != NVFP4_SUCCESS) return st;
  }
  Sm90GroupedArgs a = pl.args;
  a.problems = j.problems;
  a.a = j.pa;
  a.b = j.pb;
  a.d = j.pd;
  a.lda = j.lda;
  a.ldb = j.ldb;
  a.ldd = j.ldd;
  a.alpha = j.alpha_ptrs;
  if (pl.d_count > 0 && g.n > 0 && g.k > 0) {
    if (nvfp4_status_t st = pl.kernel->run(a, ws + pl.off_cutlass, s); st != NVFP4_SUCCESS) return st;
  }
  if (pl.via_f32 && pl.d_count > 0) {
    sm90_grouped_convert_kernel<<<grid_for(pl.d_count, 8), 256, 0, stream>>>(
        reinterpret_cast<const float*>(ws + pl.off_t), static_cast<__half*>(g.d), pl.d_count);
    if (nvfp4_status_t st = gpu::check_launch("grouped gemm: FP16 rounding"); st != NVFP4_SUCCESS) return st;
  }
  return NVFP4_SUCCESS;
}

}  // namespace nvfp4::detail
