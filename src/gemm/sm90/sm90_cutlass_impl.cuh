// One CUTLASS 3.x sm90 BF16 GEMM configuration: TMA loads, wgmma (warp-specialized),
// FP32 accumulation, and the epilogue beta * C + (alpha * acc + bias) with alpha formed in the
// epilogue from the two operands' amax in device memory. Included only by the
// sm90_cutlass_*.cu files, each instantiating one configuration; CUTLASS types stay in those
// translation units.
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <type_traits>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"
#include "cutlass/numeric_types.h"

#include "gemm/sm90/sm90_cutlass_launch.cuh"

#include "core/scale.h"
#include "gemm/sm90/sm90_cutlass.h"

namespace nvfp4::detail::sm90 {

// The schedule pairs that go together (mainloop, epilogue).
struct Cooperative {
  using Mainloop = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
  using Epilogue = cutlass::epilogue::TmaWarpSpecializedCooperative;
};
struct Pingpong {
  using Mainloop = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
  using Epilogue = cutlass::epilogue::TmaWarpSpecialized;
};

namespace evt = cutlass::epilogue::fusion;

// The alpha leaf's reduction of its two scalars: core::gemm_alpha_of, the function every
// runner uses, so the same bits.
template <class T>
struct AlphaOfAmaxes {
  CUTLASS_HOST_DEVICE T operator()(T amax_a, T amax_b) const { return core::gemm_alpha_of(amax_a, amax_b); }
};

// Scheduler: void (CUTLASS's persistent data-parallel scheduler) or
// cutlass::gemm::StreamKScheduler (stream-K: the K loop of some output tiles is split over
// several CTAs, so that few tiles still occupy every SM; partial sums are reduced in a
// fixed order, ReductionMode::Deterministic, so results are run-to-run bit-identical).
template <class ElementD_, int TileM, int TileN, int TileK, int ClusterM, int ClusterN, class Schedule,
          class Scheduler = void>
struct Bf16Gemm {
  using ElementA = cutlass::bfloat16_t;
  using ElementB = cutlass::bfloat16_t;
  using ElementD = ElementD_;
  using ElementC = ElementD_;  // C is read in D's dtype (the runner converts otherwise)
  using ElementAcc = float;
  using ElementCompute = float;
  using ElementBias = float;

  // TN: A [M,K] row-major and B [N,K] row-major (= B^T column-major) are both K-major.
  using LayoutA = cutlass::layout::RowMajor;
  using LayoutB = cutlass::layout::ColumnMajor;
  using LayoutC = cutlass::layout::RowMajor;
  using LayoutD = cutlass::layout::RowMajor;

  // 16-byte accesses everywhere (TMA needs 16-byte aligned rows anyway).
  static constexpr int kAlignAB = 16 / sizeof(cutlass::bfloat16_t);
  static constexpr int kAlignCD = 16 / sizeof(ElementD);

  using TileShape = cute::Shape<cute::Int<TileM>, cute::Int<TileN>, cute::Int<TileK>>;
  using ClusterShape = cute::Shape<cute::Int<ClusterM>, cute::Int<ClusterN>, cute::_1>;

  static_assert(TileK * sizeof(cutlass::bfloat16_t) % 128 == 0, "K tile must fill 128-byte swizzle rows");
  static_assert(TileM % 64 == 0 && TileN % 64 == 0, "wgmma tiles come in 64-row warpgroup slices");

  // CUTLASS's LinCombPerColBias tree (beta * C + (alpha * acc + bias), the same operations in
  // the same order) with one leaf changed: alpha is reduced from two scalars, amax_a and
  // amax_b, by AlphaOfAmaxes — so no kernel runs before the GEMM only to form it.
  using Scalar = evt::Sm90ScalarBroadcast<ElementCompute, cute::Stride<cute::_0, cute::_0, int64_t>>;
  using AlphaOfTwo = evt::Sm90ScalarBroadcast<ElementCompute, cute::Stride<cute::_0, cute::_0, int64_t>, 2,
                                              AlphaOfAmaxes>;
  using BiasRow = evt::Sm90RowBroadcast<0, TileShape, ElementBias, ElementCompute,
                                        cute::Stride<cute::_0, cute::_1, int64_t>, 16 / sizeof(ElementBias)>;
  template <class Out>
  using MulAdd = evt::Sm90Compute<cutlass::homogeneous_multiply_add, Out, ElementCompute,
                                  cutlass::FloatRoundStyle::round_to_nearest>;
  using FusionOp = evt::Sm90EVT<MulAdd<ElementD>,                // beta * C + (...)
                                Scalar,                          //   beta
                                evt::Sm90SrcFetch<ElementC>,     //   C
                                evt::Sm90EVT<MulAdd<ElementCompute>,  // alpha * acc + bias
                                             AlphaOfTwo,          //   alpha (amax_a, amax_b)
                                             evt::Sm90AccFetch,   //   acc
                                             BiasRow>>;           //   bias [N]

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, ElementAcc, ElementCompute, ElementC, LayoutC, kAlignCD,
      ElementD, LayoutD, kAlignCD, typename Schedule::Epilogue, FusionOp>::CollectiveOp;

  // As many mainloop stages as fit next to the epilogue's shared memory.
  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA, LayoutA, kAlignAB, ElementB, LayoutB, kAlignAB,
      ElementAcc, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      typename Schedule::Mainloop>::CollectiveOp;

  using GemmKernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, CollectiveMainloop,
                                                          CollectiveEpilogue, Scheduler>;
  static constexpr bool kStreamK = std::is_same_v<Scheduler, cutlass::gemm::StreamKScheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;

  template <class Stride>
  static Stride packed(int64_t ld, int64_t batch) {
    static_assert(cute::is_static_v<cute::remove_cvref_t<decltype(cute::get<1>(Stride{}))>>,
                  "expected a unit inner stride (K-major operands, row-major C/D)");
    Stride s{};
    cute::get<0>(s) = ld;
    cute::get<2>(s) = batch;
    return s;
  }

  static typename Gemm::Arguments arguments(const Sm90CutlassArgs& p) {
    using StrideA = typename GemmKernel::StrideA;
    using StrideB = typename GemmKernel::StrideB;
    using StrideC = typename GemmKernel::StrideC;
    using StrideD = typename GemmKernel::StrideD;
    // Every operand is dense with a unit inner stride: (rows, inner, batch) strides.
    StrideA da = packed<StrideA>(p.k, int64_t(p.m) * p.k);
    StrideB db = packed<StrideB>(p.k, int64_t(p.n) * p.k);
    StrideC dc = packed<StrideC>(p.n, int64_t(p.m) * p.n);
    StrideD dd = packed<StrideD>(p.n, int64_t(p.m) * p.n);

    typename Gemm::Arguments args{};
    args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
    args.problem_shape = cute::make_shape(p.m, p.n, p.k, 1);
    args.mainloop.ptr_A = static_cast<const ElementA*>(p.a);
    args.mainloop.dA = da;
    args.mainloop.ptr_B = static_cast<const ElementB*>(p.b);
    args.mainloop.dB = db;

    // The tree's arguments, leaf by leaf in the order of FusionOp.
    auto& fusion = args.epilogue.thread;
    auto& beta = fusion.op_0;
    beta.scalars[0] = p.c != nullptr ? p.beta : 0.0f;  // beta == 0: the epilogue never reads C
    beta.scalar_ptrs[0] = nullptr;
    auto& inner = fusion.op_2;
    auto& alpha = inner.op_0;
    // Null amax (MXFP4): kUnitScaleAmax, whose decode scale is exactly 1, so alpha = 1.
    alpha.scalars[0] = alpha.scalars[1] = core::kUnitScaleAmax;
    alpha.scalar_ptrs[0] = p.amax_a;
    alpha.scalar_ptrs[1] = p.amax_a != nullptr ? p.amax_b : nullptr;
    auto& bias = inner.op_2;
    bias.ptr_row = p.bias;
    bias.null_default = 0.0f;
    // Without C, point the source at D: a valid tensor for the TMA descriptor, never read.
    args.epilogue.ptr_C = static_cast<const ElementC*>(p.c != nullptr ? p.c : p.d);
    args.epilogue.dC = dc;
    args.epilogue.ptr_D = static_cast<ElementD*>(p.d);
    args.epilogue.dD = dd;

    args.hw_info.device_id = p.device;
    args.hw_info.sm_count = p.sm_count;
    if (p.swizzle > 0) args.scheduler.max_swizzle_size = p.swizzle;
    using Raster = cutlass::gemm::kernel::detail::RasterOrderOptions;
    args.scheduler.raster_order = p.raster == 1 ? Raster::AlongM : p.raster == 2 ? Raster::AlongN : Raster::Heuristic;
    if constexpr (kStreamK) {
      // CUTLASS decides per problem between data-parallel, stream-K and split-K units;
      // the reduction of partial tiles stays in one fixed order.
      using Mode = cutlass::gemm::kernel::detail::DecompositionMode;
      args.scheduler.decomposition_mode = p.splits > 1 ? Mode::SplitK : Mode::Heuristic;
      if (p.splits > 1) args.scheduler.splits = p.splits;
      args.scheduler.reduction_mode = cutlass::gemm::kernel::detail::ReductionMode::Deterministic;
    }
    return args;
  }

  static size_t workspace_size(const Sm90CutlassArgs& p) { return Gemm::get_workspace_size(arguments(p)); }

  static nvfp4_status_t run(const Sm90CutlassArgs& p, void* workspace, nvfp4_stream_t stream, const char* name) {
    typename Gemm::Arguments args = arguments(p);
    cutlass::Status st = Gemm::can_implement(args);
    if (st != cutlass::Status::kSuccess)
      return fail(NVFP4_ERROR_NOT_SUPPORTED, std::string("gemm (cutlass sm90 ") + name + "): CUTLASS cannot run M=" +
                                                 std::to_string(p.m) + " N=" + std::to_string(p.n) + " K=" +
                                                 std::to_string(p.k) + ": " + cutlassGetStatusString(st));
    auto cuda_stream = reinterpret_cast<cudaStream_t>(stream);
    st = initialize_and_run<Gemm>(args, workspace, cuda_stream);
    cudaError_t e = cudaGetLastError();
    if (st != cutlass::Status::kSuccess || e != cudaSuccess)
      return fail(NVFP4_ERROR_CUDA, std::string("gemm (cutlass sm90 ") + name + "): initialize or launch failed: " +
                                        cutlassGetStatusString(st) + " / " + cudaGetErrorName(e) + " (" +
                                        cudaGetErrorString(e) + ")");
    return NVFP4_SUCCESS;
  }
};

}  // namespace nvfp4::detail::sm90

// Defines the Sm90CutlassKernel entry `var` for configuration `Cfg`.
#define NVFP4_SM90_CUTLASS_ENTRY(var, label, dtype, Cfg)                                              \
  namespace nvfp4::detail {                                                                             \
  namespace {                                                                                           \
  size_t var##_ws(const Sm90CutlassArgs& p) { return Cfg::workspace_size(p); }                          \
  nvfp4_status_t var##_run(const Sm90CutlassArgs& p, void* ws, nvfp4_stream_t s) {                      \
    return Cfg::run(p, ws, s, label);                                                                   \
  }                                                                                                     \
  }                                                                                                     \
  const Sm90CutlassKernel var = {label, dtype, &var##_ws, &var##_run};                                  \
  }
