// One CUTLASS sm90 GEMM configuration per compilation, for sweep.py: BF16 operands (K-major),
// FP32 accumulation, D = alpha[0] * A B^T in BF16 or FP32 (-DOUT_F32), the same template
// shape as the library's src/gemm/sm90/sm90_cutlass_impl.cuh (LinCombPerColBias epilogue,
// or LinearCombination with -DNOBIAS=1). The tile (TM x TN x TK), cluster (CM x CN),
// schedule (-DPINGPONG=1: ping-pong, else cooperative) and scheduler (-DSTREAMK=1) come from
// -D flags; the configuration is exported as <NAME>_ws / <NAME>_run (C symbols, for ctypes).
#include <cuda_runtime.h>
#include <type_traits>
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"

#ifndef OUT_F32
using ElementD = cutlass::bfloat16_t;
#else
using ElementD = float;
#endif
#if PINGPONG
using MainSched = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
using EpiSched = cutlass::epilogue::TmaWarpSpecialized;
#else
using MainSched = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
using EpiSched = cutlass::epilogue::TmaWarpSpecializedCooperative;
#endif
#if STREAMK
using Scheduler = cutlass::gemm::StreamKScheduler;
#else
using Scheduler = void;
#endif

using ElementA = cutlass::bfloat16_t;
using ElementC = ElementD;
using TileShape = cute::Shape<cute::Int<TM>, cute::Int<TN>, cute::Int<TK>>;
using ClusterShape = cute::Shape<cute::Int<CM>, cute::Int<CN>, cute::_1>;
#if NOBIAS
using FusionOp = cutlass::epilogue::fusion::LinearCombination<ElementD, float, ElementC, float>;
#else
using FusionOp = cutlass::epilogue::fusion::LinCombPerColBias<ElementD, float, float, ElementC, float>;
#endif
constexpr int kAlignAB = 8;
constexpr int kAlignCD = 16 / sizeof(ElementD);
using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, float, float, ElementC, cutlass::layout::RowMajor, kAlignCD,
    ElementD, cutlass::layout::RowMajor, kAlignCD, EpiSched, FusionOp>::CollectiveOp;
using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA, cutlass::layout::RowMajor, kAlignAB, ElementA,
    cutlass::layout::ColumnMajor, kAlignAB, float, TileShape, ClusterShape,
    cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
        sizeof(typename CollectiveEpilogue::SharedStorage))>,
    MainSched>::CollectiveOp;
using GemmKernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, CollectiveMainloop,
                                                        CollectiveEpilogue, Scheduler>;
using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;

template <class Stride>
static Stride packed(int64_t ld, int64_t batch) {
  Stride s{};
  cute::get<0>(s) = ld;
  cute::get<2>(s) = batch;
  return s;
}

static typename Gemm::Arguments make_args(int m, int n, int k, const void* a, const void* b, void* d,
                                          const float* alpha, int sms) {
  typename Gemm::Arguments args{};
  args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
  args.problem_shape = cute::make_shape(m, n, k, 1);
  args.mainloop.ptr_A = static_cast<const ElementA*>(a);
  args.mainloop.dA = packed<typename GemmKernel::StrideA>(k, int64_t(m) * k);
  args.mainloop.ptr_B = static_cast<const ElementA*>(b);
  args.mainloop.dB = packed<typename GemmKernel::StrideB>(k, int64_t(n) * k);
  auto& f = args.epilogue.thread;
  f.alpha = 1.0f;
  f.alpha_ptr = alpha;
  f.beta = 0.0f;
#if !NOBIAS
  f.bias_ptr = nullptr;
#endif
  args.epilogue.ptr_C = static_cast<const ElementC*>(d);
  args.epilogue.dC = packed<typename GemmKernel::StrideC>(n, int64_t(m) * n);
  args.epilogue.ptr_D = static_cast<ElementD*>(d);
  args.epilogue.dD = packed<typename GemmKernel::StrideD>(n, int64_t(m) * n);
  args.hw_info.device_id = 0;
  args.hw_info.sm_count = sms;
#if STREAMK
  args.scheduler.reduction_mode = cutlass::gemm::kernel::detail::ReductionMode::Deterministic;
#endif
  return args;
}

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
extern "C" size_t CAT(NAME, _ws)(int m, int n, int k, int sms) {
  return Gemm::get_workspace_size(make_args(m, n, k, nullptr, nullptr, nullptr, nullptr, sms));
}
extern "C" int CAT(NAME, _run)(int m, int n, int k, const void* a, const void* b, void* d, const float* alpha,
                               void* ws, int sms, void* stream) {
  static Gemm gemm;
  auto args = make_args(m, n, k, a, b, d, alpha, sms);
  if (Gemm::can_implement(args) != cutlass::Status::kSuccess) return 1;
  auto s = static_cast<cudaStream_t>(stream);
  if (gemm.initialize(args, ws, s) != cutlass::Status::kSuccess) return 2;
  if (gemm.run(s) != cutlass::Status::kSuccess) return 3;
  return cudaGetLastError() == cudaSuccess ? 0 : 4;
}
