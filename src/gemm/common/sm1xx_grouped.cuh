// Shared by sm100_grouped.cu and sm120_grouped.cu: the native Blackwell grouped runner of
// nvfp4_grouped_gemm, CUTLASS's block-scaled ptr-array grouped GEMM on the FP4 codes and E4M3
// scales as the grouped layouts store them (each group's scales are one standard 128x4-swizzled
// block, the layout Sm1xxBlkScaledConfig computes for the group's problem). No decode pass:
//
//   1. setup (one CTA): the group table from offs on the device (quant/grouped_table.cuh, the
//      clamp every grouped kernel applies), the offs error word, and per group the problem
//      shape, A/B/SFA/SFB/D pointers, strides, scale-factor layouts and alpha_g;
//   2. zero: the rows of D no group writes (ragged M) or the D[g] of empty groups (ragged K);
//   3. the grouped GEMM, alpha_g through the epilogue's pointer array;
//   4. FP16 output only: the FP32 result rounded once into D.
// Built for the Blackwell targets and checked on the host (nvfp4_runner_check); not run on
// hardware. CUTLASS types stay in the .cu files that include this header.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/detail/sm100_blockscaled_layout.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"

#include "core/scale.h"
#include "core/swizzle.h"
#include "gemm/backends.h"
#include "cuda/device.h"
#include "gemm/common/sm1xx_blockscaled.cuh"
#include "grouped.h"
#include "quant/grouped_table.cuh"

namespace nvfp4::detail::blockscaled_grouped {

using ElementIn = cutlass::nv_float4_t<cutlass::float_e2m1_t>;

// One grouped GEMM type per (architecture, tile, cluster, schedules, output dtype).
template <class ArchTag_, class TileShape, class ClusterShape, class MainloopSchedule, class EpilogueSchedule,
          class ElementD_>
struct Config {
  using ArchTag = ArchTag_;
  using Data = typename ElementIn::DataType;
  using Scale = typename ElementIn::ScaleFactorType;
  using ElementD = ElementD_;
  using ElementC = ElementD_;  // never read: beta is 0
  using ProblemShape = cutlass::gemm::GroupProblemShape<cute::Shape<int32_t, int32_t, int32_t>>;
  static constexpr int kAlignAB = 32;  // 16 bytes of packed E2M1
  static constexpr int kAlignD = 128 / cutlass::sizeof_bits<ElementD>::value;

  using Fusion = cutlass::epilogue::fusion::LinearCombination<ElementD, float, ElementC, float>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      ArchTag, cutlass::arch::OpClassBlockScaledTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, ElementC, cutlass::layout::RowMajor*, kAlignD,
      ElementD, cutlass::layout::RowMajor*, kAlignD, EpilogueSchedule, Fusion>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      ArchTag, cutlass::arch::OpClassBlockScaledTensorOp, ElementIn, cutlass::layout::RowMajor*, kAlignAB,
      ElementIn, cutlass::layout::ColumnMajor*, kAlignAB, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename Epilogue::SharedStorage))>,
      MainloopSchedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  using StrideA = typename Kernel::InternalStrideA;
  using StrideB = typename Kernel::InternalStrideB;
  using StrideD = typename Kernel::InternalStrideD;
  using LayoutSFA = typename Mainloop::InternalLayoutSFA;
  using LayoutSFB = typename Mainloop::InternalLayoutSFB;
  using SfConfig = typename Mainloop::Sm1xxBlkScaledConfig;
  using Shape3 = typename ProblemShape::UnderlyingProblemShape;
  static constexpr int kSmemBytes = static_cast<int>(Kernel::SharedStorageSize);
  static_assert(SfConfig::SFVecSize == 16, "NVFP4: one scale per 16 values");
};

// The per-group arrays CUTLASS reads, in the workspace.
template <class Cfg>
struct Arrays {
  typename Cfg::Shape3* problems;
  const typename Cfg::Data** a;
  const typename Cfg::Data** b;
  const typename Cfg::Scale** sfa;
  const typename Cfg::Scale** sfb;
  typename Cfg::ElementD** d;
  typename Cfg::StrideA* da;
  typename Cfg::StrideB* db;
  typename Cfg::StrideD* dd;
  typename Cfg::LayoutSFA* lsfa;
  typename Cfg::LayoutSFB* lsfb;
  float* alpha;
  const float** alpha_ptrs;
  int64_t* counts;  // [E + 1]: per group M (ragged M) or padded K (ragged K); then the end row
};

struct Job {
  nvfp4_grouped_kind_t kind;
  int e;
  int64_t t, n, k;
  const int32_t* offs;
  int32_t* offs_error;
  const uint8_t *a, *sfa, *b, *sfb;
  const float *amax_a, *amax_b;
  void* d;        // what CUTLASS writes (T for FP16 output)
  int64_t d_elt;  // its bytes per element
};

template <class Stride>
__host__ __device__ Stride k_major(int64_t ld) {
  Stride s{};
  cute::get<0>(s) = ld;
  return s;
}

template <class Cfg>
__global__ void __launch_bounds__(grouped::kThreads) grouped_blockscaled_setup_kernel(Job j, Arrays<Cfg> w) {
  __shared__ grouped::Table tab;
  grouped::load_table(tab, j.offs, j.e, j.t);
  if (threadIdx.x == 0 && j.offs_error != nullptr) *j.offs_error = static_cast<int32_t>(tab.bits);
  const int64_t cp = core::swizzled_cols(j.k / 16);
  char* d = static_cast<char*>(j.d);
  using Data = typename Cfg::Data;
  using Scale = typename Cfg::Scale;
  for (int g = threadIdx.x; g < j.e; g += grouped::kThreads) {
    const int64_t s = grouped::start_of(tab, g), m = tab.end[g] - s;
    w.alpha[g] = core::gemm_alpha(j.amax_a + g, j.amax_b + g);
    w.alpha_ptrs[g] = w.alpha + g;
    int32_t pm, pn, pk;
    if (j.kind == NVFP4_GROUPED_RAGGED_M) {
      pm = static_cast<int32_t>(m);
      pn = static_cast<int32_t>(j.n);
      pk = static_cast<int32_t>(j.k);
      w.a[g] = reinterpret_cast<const Data*>(j.a + s * j.k / 2);
      w.b[g] = reinterpret_cast<const Data*>(j.b + g * j.n * j.k / 2);
      w.sfa[g] = reinterpret_cast<const Scale*>(j.sfa + tab.rs[g] * cp);
      w.sfb[g] = reinterpret_cast<const Scale*>(j.sfb + g * core::swizzled_rows(j.n) * cp);
      w.d[g] = reinterpret_cast<typename Cfg::ElementD*>(d + s * j.n * j.d_elt);
      w.da[g] = k_major<typename Cfg::StrideA>(j.k);
      w.db[g] = k_major<typename Cfg::StrideB>(j.k);
      w.dd[g] = k_major<typename Cfg::StrideD>(j.n);
      w.counts[g] = m;
    } else {
      const int64_t mp = tab.ps[g + 1] - tab.ps[g];
      pm = mp > 0 ? static_cast<int32_t>(j.n) : 0;  // an empty group is skipped, then zeroed
      pn = static_cast<int32_t>(j.k);
      pk = static_cast<int32_t>(mp > 0 ? mp : kGroupTokenAlign);
      w.a[g] = reinterpret_cast<const Data*>(j.a + j.n * tab.ps[g] / 2);
      w.b[g] = reinterpret_cast<const Data*>(j.b + j.k * tab.ps[g] / 2);
      w.sfa[g] = reinterpret_cast<const Scale*>(j.sfa + core::swizzled_rows(j.n) * tab.qs[g]);
      w.sfb[g] = reinterpret_cast<const Scale*>(j.sfb + core::swizzled_rows(j.k) * tab.qs[g]);
      w.d[g] = reinterpret_cast<typename Cfg::ElementD*>(d + g * j.n * j.k * j.d_elt);
      w.da[g] = k_major<typename Cfg::StrideA>(pk);
      w.db[g] = k_major<typename Cfg::StrideB>(pk);
      w.dd[g] = k_major<typename Cfg::StrideD>(j.k);
      w.counts[g] = mp;
    }
    w.problems[g] = cute::make_shape(pm, pn, pk);
    w.lsfa[g] = Cfg::SfConfig::tile_atom_to_shape_SFA(cute::make_shape(pm, pn, pk, 1));
    w.lsfb[g] = Cfg::SfConfig::tile_atom_to_shape_SFB(cute::make_shape(pm, pn, pk, 1));
  }
  if (j.kind == NVFP4_GROUPED_RAGGED_M && threadIdx.x == 0) w.counts[j.e] = j.e > 0 ? tab.end[j.e - 1] : 0;
}

// What the grouped GEMM does not write: ragged M, rows [counts[E], T) of D; ragged K, D[g] of
// each empty group (blockIdx.y == g).
template <class ArchTag>
__global__ void __launch_bounds__(256) grouped_blockscaled_zero_kernel(Job j, const int64_t* counts) {
  int64_t begin, end;  // 4-byte words
  if (j.kind == NVFP4_GROUPED_RAGGED_M) {
    begin = counts[j.e] * j.n * j.d_elt / 4;
    end = j.t * j.n * j.d_elt / 4;
  } else {
    const int g = blockIdx.y;
    if (counts[g] != 0) return;
    begin = g * j.n * j.k * j.d_elt / 4;
    end = begin + j.n * j.k * j.d_elt / 4;
  }
  uint32_t* w = static_cast<uint32_t*>(j.d);
  for (int64_t i = begin + static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < end;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    w[i] = 0u;
}

template <class ArchTag>
__global__ void __launch_bounds__(256) grouped_blockscaled_half_kernel(const float* t, __half* d, int64_t count) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    d[i] = __float2half_rn(t[i]);
}

// Where each part lives in the workspace (256-byte aligned; the plan depends on shapes only).
struct Plan {
  size_t problems = 0, a = 0, b = 0, sfa = 0, sfb = 0, d = 0, da = 0, db = 0, dd = 0, lsfa = 0, lsfb = 0,
         alpha = 0, alpha_ptrs = 0, counts = 0, t = 0, cutlass = 0, total = 0;
  bool via_f32 = false;
  int64_t d_count = 0;
};

inline unsigned grid_for(int64_t items, int64_t per_sm) {
  int64_t g = (items + 255) / 256;
  const int64_t cap = static_cast<int64_t>(gpu::sm_count(gpu::current_device())) * per_sm;
  if (g > cap) g = cap;
  return static_cast<unsigned>(g < 1 ? 1 : g);
}

// The rules this runner adds to the grouped API's: packed FP4 rows of 16 bytes (K, and the
// padded tokens of a ragged K, multiples of 32), 16-byte output rows, at most kMaxGroups.
inline bool applicable(const GroupedGemmJob& g) {
  const int64_t out_elt = g.d_dtype == NVFP4_DTYPE_BFLOAT16 ? 2 : 4;  // FP16 goes through FP32
  const int64_t d_row = g.kind == NVFP4_GROUPED_RAGGED_M ? g.n : g.k;
  return g.e <= grouped::kMaxGroups && (g.kind == NVFP4_GROUPED_RAGGED_K || g.k % 32 == 0) &&
         (d_row * out_elt) % 16 == 0 && g.n < INT32_MAX && g.k < INT32_MAX && g.t < INT32_MAX;
}

template <class Cfg>
struct Runner {
  using Gemm = typename Cfg::Gemm;
  using Args = typename Gemm::Arguments;

  static cutlass::KernelHardwareInfo hw_info() {
    cutlass::KernelHardwareInfo hw;
    int dev = 0;
    if (cudaGetDevice(&dev) == cudaSuccess) {
      const int sms = gpu::sm_count(dev, 0);
      if (sms > 0) {
        hw.device_id = dev;
        hw.sm_count = sms;
      }
    }
    (void)cudaGetLastError();
    return hw;
  }

  // host_problems: optional host copies of the problem shapes (host checks only).
  static Args make_args(int groups, const Arrays<Cfg>& w, typename Cfg::Shape3* host_problems,
                        const cutlass::KernelHardwareInfo& hw) {
    Args args{cutlass::gemm::GemmUniversalMode::kGrouped,
              {groups, w.problems, host_problems},
              {w.a, w.da, w.b, w.db, w.sfa, w.lsfa, w.sfb, w.lsfb},
              {{}, const_cast<const typename Cfg::ElementC**>(w.d), w.dd, w.d, w.dd},
              hw};
    auto& fusion = args.epilogue.thread;
    fusion.alpha = 1.0f;
    fusion.beta = 0.0f;  // C is never read
    fusion.alpha_ptr = nullptr;
    fusion.beta_ptr = nullptr;
    fusion.alpha_ptr_array = w.alpha_ptrs;
    fusion.beta_ptr_array = nullptr;
    fusion.dAlpha = {cute::_0{}, cute::_0{}, 1};
    fusion.dBeta = {cute::_0{}, cute::_0{}, 0};
    return args;
  }

  static Arrays<Cfg> arrays(uint8_t* ws, const Plan& p) {
    Arrays<Cfg> w;
    w.problems = reinterpret_cast<typename Cfg::Shape3*>(ws + p.problems);
    w.a = reinterpret_cast<const typename Cfg::Data**>(ws + p.a);
    w.b = reinterpret_cast<const typename Cfg::Data**>(ws + p.b);
    w.sfa = reinterpret_cast<const typename Cfg::Scale**>(ws + p.sfa);
    w.sfb = reinterpret_cast<const typename Cfg::Scale**>(ws + p.sfb);
    w.d = reinterpret_cast<typename Cfg::ElementD**>(ws + p.d);
    w.da = reinterpret_cast<typename Cfg::StrideA*>(ws + p.da);
    w.db = reinterpret_cast<typename Cfg::StrideB*>(ws + p.db);
    w.dd = reinterpret_cast<typename Cfg::StrideD*>(ws + p.dd);
    w.lsfa = reinterpret_cast<typename Cfg::LayoutSFA*>(ws + p.lsfa);
    w.lsfb = reinterpret_cast<typename Cfg::LayoutSFB*>(ws + p.lsfb);
    w.alpha = reinterpret_cast<float*>(ws + p.alpha);
    w.alpha_ptrs = reinterpret_cast<const float**>(ws + p.alpha_ptrs);
    w.counts = reinterpret_cast<int64_t*>(ws + p.counts);
    return w;
  }

  static Plan plan(const GroupedGemmJob& g) {
    Plan p;
    const size_t e = static_cast<size_t>(g.e);
    size_t off = 0;
    auto part = [&](size_t& at, size_t bytes) {
      at = off;
      off += gpu::align_up(bytes);
    };
    part(p.problems, e * sizeof(typename Cfg::Shape3));
    part(p.a, e * sizeof(void*));
    part(p.b, e * sizeof(void*));
    part(p.sfa, e * sizeof(void*));
    part(p.sfb, e * sizeof(void*));
    part(p.d, e * sizeof(void*));
    part(p.da, e * sizeof(typename Cfg::StrideA));
    part(p.db, e * sizeof(typename Cfg::StrideB));
    part(p.dd, e * sizeof(typename Cfg::StrideD));
    part(p.lsfa, e * sizeof(typename Cfg::LayoutSFA));
    part(p.lsfb, e * sizeof(typename Cfg::LayoutSFB));
    part(p.alpha, e * sizeof(float));
    part(p.alpha_ptrs, e * sizeof(float*));
    part(p.counts, (e + 1) * sizeof(int64_t));
    p.via_f32 = g.d_dtype == NVFP4_DTYPE_FLOAT16;
    p.d_count = g.kind == NVFP4_GROUPED_RAGGED_M ? g.t * g.n : g.e * g.n * g.k;
    part(p.t, p.via_f32 ? static_cast<size_t>(p.d_count) * sizeof(float) : 0);
    p.cutlass = off;
    Arrays<Cfg> none{};
    off += gpu::align_up(Gemm::get_workspace_size(make_args(static_cast<int>(g.e), none, nullptr, hw_info())));
    p.total = off;
    return p;
  }

  static nvfp4_status_t run(const GroupedGemmJob& g, void* workspace, size_t workspace_bytes, cudaStream_t stream,
                            const char* arch) {
    const std::string who = std::string("grouped gemm (cutlass ") + arch + "): ";
    const Plan p = plan(g);
    if (workspace_bytes < p.total || workspace == nullptr)
      return fail(NVFP4_ERROR_WORKSPACE, who + "workspace of " + std::to_string(workspace_bytes) + " bytes, need " +
                                             std::to_string(p.total));
    if (reinterpret_cast<uintptr_t>(workspace) % gpu::kWorkspaceAlign != 0)
      return fail(NVFP4_ERROR_INVALID_ARGUMENT, "workspace: must be 256-byte aligned");
    auto* ws = static_cast<uint8_t*>(workspace);
    const Arrays<Cfg> w = arrays(ws, p);
    Job j{};
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
    j.d = p.via_f32 ? static_cast<void*>(ws + p.t) : g.d;
    j.d_elt = p.via_f32 || g.d_dtype == NVFP4_DTYPE_FLOAT32 ? 4 : 2;
    using ArchTag = typename Cfg::ArchTag;
    grouped_blockscaled_setup_kernel<Cfg><<<1, grouped::kThreads, 0, stream>>>(j, w);
    if (nvfp4_status_t s = gpu::check_launch(who + "setup"); s != NVFP4_SUCCESS) return s;
    const bool ragged_m = g.kind == NVFP4_GROUPED_RAGGED_M;
    const int64_t words = (ragged_m ? g.t * g.n : g.n * g.k) * j.d_elt / 4;
    if (words > 0) {
      const dim3 grid(grid_for(words, ragged_m ? 8 : 1), ragged_m ? 1u : static_cast<unsigned>(g.e));
      grouped_blockscaled_zero_kernel<ArchTag><<<grid, 256, 0, stream>>>(j, w.counts);
      if (nvfp4_status_t s = gpu::check_launch(who + "zero fill"); s != NVFP4_SUCCESS) return s;
    }
    if (p.d_count > 0) {
      Args args = make_args(j.e, w, nullptr, hw_info());
      Gemm gemm;
      cutlass::Status st = gemm.can_implement(args);
      if (st != cutlass::Status::kSuccess)
        return fail(NVFP4_ERROR_NOT_SUPPORTED, who + "CUTLASS cannot run these groups: " + cutlassGetStatusString(st));
      st = gemm.initialize(args, ws + p.cutlass, stream);
      if (st != cutlass::Status::kSuccess)
        return fail(NVFP4_ERROR_CUDA, who + "initialize failed: " + cutlassGetStatusString(st));
      st = gemm.run(stream);
      const cudaError_t e = cudaGetLastError();
      if (st != cutlass::Status::kSuccess || e != cudaSuccess)
        return fail(NVFP4_ERROR_CUDA, who + "launch failed: " + cutlassGetStatusString(st) + " / " +
                                          cudaGetErrorString(e));
    }
    if (p.via_f32 && p.d_count > 0) {
      grouped_blockscaled_half_kernel<ArchTag><<<grid_for(p.d_count, 8), 256, 0, stream>>>(
          reinterpret_cast<const float*>(ws + p.t), static_cast<__half*>(g.d), p.d_count);
      if (nvfp4_status_t s = gpu::check_launch(who + "FP16 rounding"); s != NVFP4_SUCCESS) return s;
    }
    return NVFP4_SUCCESS;
  }

  // Host only: CUTLASS's per-group scale layout is the swizzle nvfp4 writes, and
  // can_implement takes the per-group problems of both forms (given as host shapes).
  static nvfp4_status_t self_check(const char* arch, int limit, int* checked) {
    int n = 0;
    if (Cfg::kSmemBytes <= 0 || Cfg::kSmemBytes > limit)
      return fail(NVFP4_ERROR_INTERNAL, std::string(arch) + " grouped: shared memory " +
                                            std::to_string(Cfg::kSmemBytes) + " above " + std::to_string(limit));
    ++n;
    const int64_t rows[] = {1, 17, 128, 129, 768, 4097, 14336};
    const int64_t ks[] = {32, 64, 2048, 4128};
    for (int64_t r : rows)
      for (int64_t k : ks) {
        const std::string diff = blockscaled::compare_scale_layout<typename Cfg::SfConfig>(r, k);
        if (!diff.empty()) return fail(NVFP4_ERROR_INTERNAL, std::string(arch) + " grouped scale layout: " + diff);
        ++n;
      }
    // ragged M (Qwen3-30B-A3B's and Mixtral's experts, empty and tiny groups) and ragged K
    std::vector<typename Cfg::Shape3> probs = {cute::make_shape(0, 768, 2048), cute::make_shape(1, 768, 2048),
                                                cute::make_shape(129, 14336, 4096), cute::make_shape(4097, 4096, 14336),
                                                cute::make_shape(768, 2048, 32), cute::make_shape(4096, 14336, 4128)};
    const uintptr_t fake = uintptr_t(1) << 32;  // stand-in device arrays: can_implement reads host shapes only
    Arrays<Cfg> w{};
    w.problems = reinterpret_cast<typename Cfg::Shape3*>(fake);
    Args args = make_args(static_cast<int>(probs.size()), w, probs.data(), cutlass::KernelHardwareInfo{});
    const cutlass::Status st = Gemm::can_implement(args);
    if (st != cutlass::Status::kSuccess)
      return fail(NVFP4_ERROR_INTERNAL, std::string(arch) + " grouped: can_implement refused the documented "
                                                            "problems: " + cutlassGetStatusString(st));
    ++n;
    *checked = n;
    return NVFP4_SUCCESS;
  }
};

}  // namespace nvfp4::detail::blockscaled_grouped
