// One CUTLASS sm90 grouped (ptr-array) BF16 GEMM configuration for the Hopper grouped runner:
// TMA loads per group, wgmma, FP32 accumulation, epilogue alpha[g] * acc with alpha read from
// device memory per group. Problem shapes, pointers and strides come from device arrays the
// runner's setup kernel wrote from offs; no problem shape is known on the host (CUTLASS's
// persistent group scheduler reads them on the device). Included only by the
// sm90_grouped_*.cu files, each instantiating one output dtype.
#pragma once

#include <cuda_runtime.h>

#include <cstring>
#include <string>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/numeric_types.h"

#include "gemm/sm90/sm90_cutlass_launch.cuh"

#include "gemm/sm90/sm90_grouped.h"

namespace nvfp4::detail::sm90 {

template <class ElementD_>
struct GroupedBf16Gemm {
  using ElementA = cutlass::bfloat16_t;
  using ElementB = cutlass::bfloat16_t;
  using ElementD = ElementD_;
  using ElementC = ElementD_;  // never read: beta is 0 (the pointer arrays of D stand in for C)
  using ElementAcc = float;

  using ProblemShape = cutlass::gemm::GroupProblemShape<cute::Shape<int32_t, int32_t, int32_t>>;
  // TN: A [M,K] row-major and B [N,K] row-major (B^T column-major), both K-major.
  using LayoutA = cutlass::layout::RowMajor;
  using LayoutB = cutlass::layout::ColumnMajor;
  using LayoutD = cutlass::layout::RowMajor;
  static constexpr int kAlignAB = 16 / sizeof(ElementA);
  static constexpr int kAlignD = 16 / sizeof(ElementD);

  using TileShape = cute::Shape<cute::_128, cute::_256, cute::_64>;
  using ClusterShape = cute::Shape<cute::_2, cute::_1, cute::_1>;
  using MainloopSchedule = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative;
  using EpilogueSchedule = cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative;

  using FusionOp = cutlass::epilogue::fusion::LinearCombination<ElementD, float, ElementC, float>;
  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, ElementAcc, float, ElementC, LayoutD*, kAlignD, ElementD,
      LayoutD*, kAlignD, EpilogueSchedule, FusionOp>::CollectiveOp;
  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA, LayoutA*, kAlignAB, ElementB, LayoutB*,
      kAlignAB, ElementAcc, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      MainloopSchedule>::CollectiveOp;
  using GemmKernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, CollectiveMainloop, CollectiveEpilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;

  using StrideA = typename GemmKernel::InternalStrideA;
  using StrideB = typename GemmKernel::InternalStrideB;
  using StrideD = typename GemmKernel::InternalStrideD;
  using Shape3 = typename ProblemShape::UnderlyingProblemShape;
  // The setup kernel writes each stride as its int64 leading dimension and each problem shape
  // as three int32: the types must hold exactly that (checked again on the host, by value).
  static_assert(sizeof(StrideA) == sizeof(int64_t) && sizeof(StrideB) == sizeof(int64_t) &&
                    sizeof(StrideD) == sizeof(int64_t),
                "K-major / row-major ptr-array strides hold one int64 leading dimension");
  static_assert(sizeof(Shape3) == 3 * sizeof(int32_t), "a group's problem shape is three int32");

  // The device arrays, typed as CUTLASS reads them (the host never dereferences them).
  template <class T>
  static T as(const void* p) {
    return reinterpret_cast<T>(reinterpret_cast<uintptr_t>(p));
  }

  static typename Gemm::Arguments arguments(const Sm90GroupedArgs& p) {
    typename Gemm::Arguments args{};
    args.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
    args.problem_shape = {p.groups, as<Shape3*>(p.problems), nullptr};
    args.mainloop.ptr_A = as<const ElementA**>(p.a);
    args.mainloop.dA = as<StrideA*>(p.lda);
    args.mainloop.ptr_B = as<const ElementB**>(p.b);
    args.mainloop.dB = as<StrideB*>(p.ldb);
    auto& fusion = args.epilogue.thread;
    fusion.alpha = 1.0f;
    fusion.beta = 0.0f;  // C is never read
    fusion.alpha_ptr = nullptr;
    fusion.beta_ptr = nullptr;
    fusion.alpha_ptr_array = p.alpha;  // group g's alpha is *alpha[g] (CUTLASS example 57's form)
    fusion.beta_ptr_array = nullptr;
    fusion.dAlpha = {cute::_0{}, cute::_0{}, 1};
    fusion.dBeta = {cute::_0{}, cute::_0{}, 0};
    args.epilogue.ptr_C = as<const ElementC**>(p.d);
    args.epilogue.dC = as<StrideD*>(p.ldd);
    args.epilogue.ptr_D = as<ElementD**>(p.d);
    args.epilogue.dD = as<StrideD*>(p.ldd);
    args.hw_info.device_id = p.device;
    args.hw_info.sm_count = p.sm_count;
    return args;
  }

  static size_t workspace_size(const Sm90GroupedArgs& p) { return Gemm::get_workspace_size(arguments(p)); }

  // The element layouts the setup kernel writes, checked by value.
  static nvfp4_status_t check_layouts() {
    auto same = [](const auto& s, int64_t v) {
      int64_t w = 0;
      std::memcpy(&w, &s, sizeof w);
      return w == v;
    };
    StrideA sa{};
    cute::get<0>(sa) = 1234567;
    StrideB sb{};
    cute::get<0>(sb) = 7654321;
    StrideD sd{};
    cute::get<0>(sd) = 42;
    Shape3 shape = cute::make_shape(11, 22, 33);
    int32_t raw[3];
    std::memcpy(raw, &shape, sizeof raw);
    if (!same(sa, 1234567) || !same(sb, 7654321) || !same(sd, 42) || raw[0] != 11 || raw[1] != 22 || raw[2] != 33)
      return fail(NVFP4_ERROR_INTERNAL, "grouped gemm (cutlass sm90): CUTLASS's stride or problem-shape layout "
                                        "is not the one the setup kernel writes");
    return NVFP4_SUCCESS;
  }

  static nvfp4_status_t run(const Sm90GroupedArgs& p, void* workspace, nvfp4_stream_t stream, const char* name) {
    if (nvfp4_status_t s = check_layouts(); s != NVFP4_SUCCESS) return s;
    typename Gemm::Arguments args = arguments(p);
    cutlass::Status st = Gemm::can_implement(args);
    if (st != cutlass::Status::kSuccess)
      return fail(NVFP4_ERROR_NOT_SUPPORTED, std::string("grouped gemm (cutlass sm90 ") + name +
                                                 "): CUTLASS cannot run these groups: " + cutlassGetStatusString(st));
    auto cuda_stream = reinterpret_cast<cudaStream_t>(stream);
    st = initialize_and_run<Gemm>(args, workspace, cuda_stream);
    cudaError_t e = cudaGetLastError();
    if (st != cutlass::Status::kSuccess || e != cudaSuccess)
      return fail(NVFP4_ERROR_CUDA, std::string("grouped gemm (cutlass sm90 ") + name + "): initialize or launch failed: " +
                                        cutlassGetStatusString(st) + " / " + cudaGetErrorName(e) + " (" +
                                        cudaGetErrorString(e) + ")");
    return NVFP4_SUCCESS;
  }
};

}  // namespace nvfp4::detail::sm90

#define NVFP4_SM90_GROUPED_ENTRY(var, label, dtype, Cfg)                                            \
  namespace nvfp4::detail {                                                                           \
  namespace {                                                                                         \
  size_t var##_ws(const Sm90GroupedArgs& p) { return Cfg::workspace_size(p); }                        \
  nvfp4_status_t var##_check() { return Cfg::check_layouts(); }                                       \
  nvfp4_status_t var##_run(const Sm90GroupedArgs& p, void* ws, nvfp4_stream_t s) {                    \
    return Cfg::run(p, ws, s, label);                                                                 \
  }                                                                                                   \
  }                                                                                                   \
  const Sm90GroupedKernel var = {label, dtype, &var##_ws, &var##_check, &var##_run};                  \
  }
