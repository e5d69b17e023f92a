// Shared by sm100_gemm.cu and sm120_gemm.cu: the NVFP4 / MXFP4 block-scaled GEMM built
// from CUTLASS's CollectiveBuilder, the host code around it (argument building, the
// workspace plan, can_implement, launch) and ArchGemms, which makes one architecture's
// four kernels and its entry-point table (BlockscaledGemms, gemm/backends.h) from a traits
// struct. Each architecture's file only says its tile, cluster and shared-memory limit;
// CUTLASS types never leave the .cu files that include this header.
//
// D[M,N] = alpha * (A^ @ B^T) + beta * C + bias, with
//   A   [M, K/2] packed E2M1, K-major ("row-major A")
//   B   [N, K/2] packed E2M1, K-major ("column-major B" in CUTLASS's K x N view)
//   SFA, SFB     NVFP4: E4M3 scales over 16 values (UE4M3 to CUTLASS: same bits, the sign
//                is always 0); MXFP4 (mx_float4_t): E8M0 scales over 32 values (UE8M0);
//                128x4-swizzled = Sm1xxBlkScaledConfig's K-major layout
//   alpha        fp32 on the device, S_dec(amax_a) * S_dec(amax_b) (MXFP4: 1), read by pointer
//   C            [M, N] in D's dtype (a 16-bit C for an fp32 D is widened first, exactly)
//   bias         [N] fp32 (a 16-bit bias is widened first, exactly)
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <string>

#include "cutlass/cutlass.h"
#include "cute/tensor.hpp"
#include "cutlass/detail/sm100_blockscaled_layout.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"

#include "core/common.h"
#include "core/scale.h"
#include "core/swizzle.h"
#include "gemm/backends.h"
#include "cuda/device.h"

namespace nvfp4::detail::blockscaled {

using ElementNvfp4 = cutlass::nv_float4_t<cutlass::float_e2m1_t>;  // scales float_ue4m3_t, 16 values
using ElementMxfp4 = cutlass::mx_float4_t<cutlass::float_e2m1_t>;  // scales float_ue8m0_t, 32 values

// One GEMM type per (architecture, tile, cluster, output dtype). The fusion is
// LinCombPerColBias: D = beta * C + (alpha * acc + bias[n]); a null bias pointer reads
// as zeros and beta == 0 skips C entirely, so one instantiation covers every epilogue.
template <class ArchTag_, class TileShape, class ClusterShape, class ElementD_, class ElementIn = ElementNvfp4>
struct BlockScaledGemm {
  using ArchTag = ArchTag_;
  using Data = typename ElementIn::DataType;          // float_e2m1_t, packed two a byte
  using Scale = typename ElementIn::ScaleFactorType;  // float_ue4m3_t or float_ue8m0_t
  static constexpr bool kMx = cute::is_same_v<ElementIn, ElementMxfp4>;
  using ElementD = ElementD_;
  using ElementC = ElementD_;
  using ElementAcc = float;
  using ElementBias = float;
  static constexpr int kAlignAB = 32;  // elements: 16 bytes of packed E2M1 (TMA minimum)
  static constexpr int kAlignCD = 128 / cutlass::sizeof_bits<ElementD>::value;

  using Fusion = cutlass::epilogue::fusion::LinCombPerColBias<ElementD, ElementAcc, ElementBias, ElementC,
                                                              ElementAcc>;

  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      ArchTag, cutlass::arch::OpClassBlockScaledTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, ElementAcc, ElementAcc, ElementC,
      cutlass::layout::RowMajor, kAlignCD, ElementD, cutlass::layout::RowMajor, kAlignCD,
      cutlass::epilogue::collective::EpilogueScheduleAuto, Fusion>::CollectiveOp;

  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      ArchTag, cutlass::arch::OpClassBlockScaledTensorOp, ElementIn, cutlass::layout::RowMajor, kAlignAB,
      ElementIn, cutlass::layout::ColumnMajor, kAlignAB, ElementAcc, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename Epilogue::SharedStorage))>,
      cutlass::gemm::collective::KernelScheduleAuto>::CollectiveOp;

  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, Mainloop, Epilogue, void>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  using SfConfig = typename Mainloop::Sm1xxBlkScaledConfig;
  // Dynamic shared memory one CTA asks for (mainloop stages + epilogue + pipeline state).
  static constexpr int kSmemBytes = static_cast<int>(Kernel::SharedStorageSize);

  static constexpr int kScaleBlock = kMx ? 32 : core::kBlock;
  static_assert(SfConfig::SFVecSize == kScaleBlock, "NVFP4 has one scale per 16 elements, MXFP4 per 32");
};

// ---- tiny kernels that run before the GEMM, on the same stream ----
// Templated on the architecture tag so that the sm100 and sm120 files each own a kernel of
// a distinct name, compiled for their own targets (the build checks look them up by name).

// alpha = (1/S_enc(amax_a)) * (1/S_enc(amax_b)), the contract's exact fp32 form; 1 for
// operands without a per-tensor scale (MXFP4: null amax pointers).
template <class ArchTag>
__global__ void alpha_kernel(const float* amax_a, const float* amax_b, float* alpha) {
  *alpha = core::gemm_alpha(amax_a, amax_b);
}

// Widening copy (16-bit -> fp32 is exact), for a bias or C whose dtype the epilogue does
// not take directly.
template <class ArchTag>
__global__ void widen_kernel(const void* src, nvfp4_dtype_t dtype, int64_t n, float* dst) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = gpu::load_as_float(src, dtype, i);
}

template <class ArchTag>
inline void launch_widen(const void* src, nvfp4_dtype_t dtype, int64_t n, float* dst, cudaStream_t stream) {
  int64_t blocks = (n + 255) / 256;
  if (blocks > 4096) blocks = 4096;
  widen_kernel<ArchTag><<<static_cast<unsigned>(blocks), 256, 0, stream>>>(src, dtype, n, dst);
}

// ---- host side ----

using gpu::align_up;
using gpu::aligned16;
using gpu::dtype_bytes;

// Every operand here is a single dense matrix whose second mode is contiguous (A, B and
// the scales K-major, C and D row-major): stride (ld, 1, 0) over (rows, cols, batch).
template <class Stride>
Stride packed_stride(int64_t ld) {
  static_assert(cute::is_static<cute::remove_cvref_t<decltype(cute::get<1>(Stride{}))>>::value &&
                    decltype(cute::get<1>(Stride{}))::value == 1,
                "expected a unit stride in the second mode");
  Stride s{};
  cute::get<0>(s) = static_cast<cute::remove_cvref_t<decltype(cute::get<0>(s))>>(ld);
  cute::get<2>(s) = 0;
  return s;
}

// Where each piece lives in the caller's workspace. Every offset is 256-byte aligned; the
// plan depends only on shapes and dtypes, so the size query and the run agree.
struct WorkspacePlan {
  size_t alpha = 0;        // 1 float
  size_t bias = 0;         // N floats, when a bias is given (always widened / realigned)
  size_t c = 0;            // M*N floats, when C is 16-bit and D is fp32
  size_t cutlass = 0;      // what CUTLASS asks for
  size_t total = 0;
  bool has_bias = false, widen_c = false;
};

template <class Cfg>
struct Runner {
  using Gemm = typename Cfg::Gemm;
  using ElementD = typename Cfg::ElementD;
  using Args = typename Gemm::Arguments;
  static constexpr nvfp4_dtype_t kDtype =
      cute::is_same_v<ElementD, float> ? NVFP4_DTYPE_FLOAT32
      : cute::is_same_v<ElementD, cutlass::half_t> ? NVFP4_DTYPE_FLOAT16 : NVFP4_DTYPE_BFLOAT16;

  // C is read only when beta != 0 (api.cpp refuses beta != 0 without C).
  static bool uses_c(const GemmJob& job) { return job.c != nullptr && job.beta != 0.0f; }
  static bool widen_c(const GemmJob& job) { return uses_c(job) && job.c_dtype != job.d_dtype; }

  // Shape, dtype, layout and alignment rules that hold before CUTLASS is asked; each
  // refusal says what to change. arch names the target in messages ("sm100").
  static nvfp4_status_t precheck(const GemmJob& job, const char* arch) {
    std::string who = std::string("cutlass ") + arch + (Cfg::kMx ? " mxfp4: " : ": ");
    if ((job.format == Format::kMxfp4) != Cfg::kMx)
      return fail(NVFP4_ERROR_INTERNAL, who + "operand format routed to the wrong kernel");
    if (job.layout != NVFP4_SCALES_SWIZZLED)
      return fail(NVFP4_ERROR_NOT_SUPPORTED,
                  who + "native FP4 operands need swizzled (128x4) scales; swizzle linear scales first");
    if (job.d_dtype != kDtype) return fail(NVFP4_ERROR_INTERNAL, who + "output dtype routed to the wrong kernel");
    if (job.m <= 0 || job.n <= 0 || job.k <= 0 || job.m > INT_MAX || job.n > INT_MAX || job.k > INT_MAX)
      return fail(NVFP4_ERROR_NOT_SUPPORTED, who + "M, N, K must each lie in [1, 2^31)");
    if (job.k % Cfg::kAlignAB != 0)
      return fail(NVFP4_ERROR_NOT_SUPPORTED,
                  who + "K must be a multiple of 32 (16-byte rows of packed FP4), got K=" + std::to_string(job.k) +
                      "; pad K with zeros");
    if ((job.n * int64_t(dtype_bytes(job.d_dtype))) % 16 != 0)
      return fail(NVFP4_ERROR_NOT_SUPPORTED,
                  who + "N * sizeof(output) must be a multiple of 16 bytes (TMA), got N=" + std::to_string(job.n));
    if (widen_c(job) && !(job.d_dtype == NVFP4_DTYPE_FLOAT32))
      return fail(NVFP4_ERROR_NOT_SUPPORTED,
                  who + "C must have the output dtype (an fp32 output also takes a 16-bit C)");
    const void* ptrs[] = {job.a, job.b, job.sfa, job.sfb, job.d, uses_c(job) && !widen_c(job) ? job.c : nullptr};
    const char* names[] = {"a", "b", "a.scales", "b.scales", "d", "c"};
    for (int i = 0; i < 6; ++i)
      if (ptrs[i] && !aligned16(ptrs[i]))
        return fail(NVFP4_ERROR_NOT_SUPPORTED, who + names[i] + " must be 16-byte aligned");
    return NVFP4_SUCCESS;
  }

  static cutlass::KernelHardwareInfo hw_info() {
    cutlass::KernelHardwareInfo hw;
    // The SM count sizes the persistent grid. Without a device (host-only checks) it
    // stays 0, which CUTLASS's host-side checks never read.
    int dev = 0;
    if (cudaGetDevice(&dev) == cudaSuccess) {
      const int sms = gpu::sm_count(dev, 0);
      if (sms > 0) {
        hw.device_id = dev;
        hw.sm_count = sms;
      }
    }
    (void)cudaGetLastError();  // a failed query must not leak into the caller's error state
    return hw;
  }

  // Pointers may be null (size queries, host-only checks): CUTLASS's host checks look at
  // shapes and strides only.
  static Args make_args(const GemmJob& job, const float* alpha, const float* bias, const void* c,
                        const cutlass::KernelHardwareInfo& hw) {
    const int m = static_cast<int>(job.m), n = static_cast<int>(job.n), k = static_cast<int>(job.k);
    using Kernel = typename Cfg::Kernel;
    auto stride_a = packed_stride<typename Kernel::StrideA>(k);
    auto stride_b = packed_stride<typename Kernel::StrideB>(k);
    auto stride_c = packed_stride<typename Kernel::StrideC>(n);
    auto stride_d = packed_stride<typename Kernel::StrideD>(n);
    auto problem = cute::make_shape(m, n, k, 1);
    auto layout_sfa = Cfg::SfConfig::tile_atom_to_shape_SFA(problem);
    auto layout_sfb = Cfg::SfConfig::tile_atom_to_shape_SFB(problem);

    const bool use_c = c != nullptr && uses_c(job);
    Args args{cutlass::gemm::GemmUniversalMode::kGemm,
              {m, n, k, 1},
              {reinterpret_cast<const typename Cfg::Data*>(job.a), stride_a,
               reinterpret_cast<const typename Cfg::Data*>(job.b), stride_b,
               reinterpret_cast<const typename Cfg::Scale*>(job.sfa), layout_sfa,
               reinterpret_cast<const typename Cfg::Scale*>(job.sfb), layout_sfb},
              {{},
               // Without C the epilogue never reads it (beta = 0 and no beta pointer), but
               // the TMA descriptor still wants a real address: D's.
               static_cast<const ElementD*>(use_c ? c : job.d),
               stride_c,
               static_cast<ElementD*>(job.d),
               stride_d},
              hw};
    auto& fusion = args.epilogue.thread;
    fusion.alpha_ptr = alpha;
    fusion.beta = use_c ? job.beta : 0.0f;
    fusion.bias_ptr = bias;
    return args;
  }

  static WorkspacePlan plan(const GemmJob& job) {
    WorkspacePlan p;
    size_t off = 256;  // alpha at 0
    p.has_bias = job.bias != nullptr;
    if (p.has_bias) {
      p.bias = off;
      off = align_up(off + size_t(job.n) * 4, 256);
    }
    p.widen_c = widen_c(job);
    if (p.widen_c) {
      p.c = off;
      off = align_up(off + size_t(job.m) * size_t(job.n) * 4, 256);
    }
    p.cutlass = off;
    Args args = make_args(job, nullptr, nullptr, nullptr, hw_info());
    off = align_up(off + Gemm::get_workspace_size(args), 256);
    p.total = off;
    return p;
  }

  static nvfp4_status_t can_implement(const GemmJob& job, const char* arch) {
    nvfp4_status_t st = precheck(job, arch);
    if (st != NVFP4_SUCCESS) return st;
    // Stand-in pointers: can_implement reads shapes and strides, never memory.
    const float* fake_alpha = reinterpret_cast<const float*>(uintptr_t(256));
    Args args = make_args(job, fake_alpha, job.bias ? fake_alpha : nullptr, job.c, cutlass::KernelHardwareInfo{});
    cutlass::Status s = Gemm::can_implement(args);
    if (s != cutlass::Status::kSuccess)
      return fail(NVFP4_ERROR_NOT_SUPPORTED, std::string("cutlass ") + arch + ": can_implement refused M=" +
                                                 std::to_string(job.m) + " N=" + std::to_string(job.n) +
                                                 " K=" + std::to_string(job.k) + ": " +
                                                 cutlassGetStatusString(s));
    return NVFP4_SUCCESS;
  }

  static nvfp4_status_t run(const GemmJob& job, void* workspace, size_t workspace_bytes, cudaStream_t stream,
                            const char* arch) {
    nvfp4_status_t st = can_implement(job, arch);
    if (st != NVFP4_SUCCESS) return st;
    const std::string who = std::string("cutlass ") + arch + ": ";
    WorkspacePlan p = plan(job);
    if (workspace_bytes < p.total || (p.total && !workspace))
      return fail(NVFP4_ERROR_WORKSPACE, who + "workspace of " + std::to_string(workspace_bytes) +
                                             " bytes, need " + std::to_string(p.total));
    if (reinterpret_cast<uintptr_t>(workspace) % 256 != 0)
      return fail(NVFP4_ERROR_INVALID_ARGUMENT, who + "workspace must be 256-byte aligned");
    auto* ws = static_cast<uint8_t*>(workspace);
    float* alpha = reinterpret_cast<float*>(ws + p.alpha);
    float* bias = p.has_bias ? reinterpret_cast<float*>(ws + p.bias) : nullptr;
    const void* c = uses_c(job) ? job.c : nullptr;

    using ArchTag = typename Cfg::ArchTag;
    alpha_kernel<ArchTag><<<1, 1, 0, stream>>>(job.amax_a, job.amax_b, alpha);
    if (bias) launch_widen<ArchTag>(job.bias, job.bias_dtype, job.n, bias, stream);
    if (p.widen_c) {
      float* cw = reinterpret_cast<float*>(ws + p.c);
      launch_widen<ArchTag>(job.c, job.c_dtype, job.m * job.n, cw, stream);
      c = cw;
    }
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
      return fail(NVFP4_ERROR_CUDA, who + "prologue launch failed: " + cudaGetErrorString(e));

    Args args = make_args(job, alpha, bias, c, hw_info());
    Gemm gemm;
    cutlass::Status s = gemm.initialize(args, ws + p.cutlass, stream);
    if (s != cutlass::Status::kSuccess) {
      e = cudaGetLastError();
      return fail(NVFP4_ERROR_CUDA, who + "initialize failed: " + cutlassGetStatusString(s) +
                                        (e != cudaSuccess ? std::string(" (") + cudaGetErrorString(e) + ")" : ""));
    }
    s = gemm.run(stream);
    e = cudaGetLastError();
    if (s != cutlass::Status::kSuccess || e != cudaSuccess)
      return fail(NVFP4_ERROR_CUDA, who + "launch failed: " + cutlassGetStatusString(s) +
                                        (e != cudaSuccess ? std::string(" (") + cudaGetErrorString(e) + ")" : ""));
    return NVFP4_SUCCESS;
  }
};

// Compares CUTLASS's scale-factor layout (the one the kernel will read) with
// core::swizzle_offset for an operand of `rows` rows and K = k, over the whole padded
// [roundup(rows,128), roundup(k/V,4)] range (V = 16 values a scale for NVFP4, 32 for
// MXFP4), for both the SFA and the SFB role. Host only. Returns "" when they agree, else
// the first difference.
template <class SfConfig>
std::string compare_scale_layout(int64_t rows, int64_t k) {
  constexpr int64_t kV = SfConfig::SFVecSize;
  const int64_t cols = (k + kV - 1) / kV;
  const int64_t rp = core::swizzled_rows(rows), cp = core::swizzled_cols(cols);
  auto sfa = SfConfig::tile_atom_to_shape_SFA(cute::make_shape(int(rows), 1, int(k), 1));
  auto sfb = SfConfig::tile_atom_to_shape_SFB(cute::make_shape(1, int(rows), int(k), 1));
  const int64_t span_a = cute::cosize(cute::filter_zeros(sfa)), span_b = cute::cosize(cute::filter_zeros(sfb));
  if (span_a != rp * cp || span_b != rp * cp)
    return "rows=" + std::to_string(rows) + " k=" + std::to_string(k) + ": CUTLASS spans " +
           std::to_string(span_a) + "/" + std::to_string(span_b) + " bytes, swizzled_size is " +
           std::to_string(rp * cp);
  for (int64_t r = 0; r < rp; ++r) {
    for (int64_t c = 0; c < cp; ++c) {
      // Scale column c covers elements [Vc, Vc+V); any of them maps to the same byte.
      const int64_t want = core::swizzle_offset(r, c, cols);
      const int64_t got_a = sfa(cute::make_coord(int(r), int(c * kV), 0));
      const int64_t got_b = sfb(cute::make_coord(int(r), int(c * kV + kV - 1), 0));
      if (got_a != want || got_b != want)
        return "rows=" + std::to_string(rows) + " k=" + std::to_string(k) + ": scale (" + std::to_string(r) +
               ", " + std::to_string(c) + ") is at " + std::to_string(want) + " in nvfp4, at " +
               std::to_string(got_a) + " (SFA) / " + std::to_string(got_b) + " (SFB) in CUTLASS";
    }
  }
  return "";
}

// ---- one architecture: four kernels and the table of its entry points ----
// Traits: Arch (the CUTLASS arch tag), Tile, Cluster, kSmemLimit (the per-block opt-in
// maximum of the targets the file is compiled for) and kName ("sm100").
template <class T>
struct ArchGemms {
  using CfgF32 = BlockScaledGemm<typename T::Arch, typename T::Tile, typename T::Cluster, float>;
  using CfgF16 = BlockScaledGemm<typename T::Arch, typename T::Tile, typename T::Cluster, cutlass::half_t>;
  using CfgBF16 = BlockScaledGemm<typename T::Arch, typename T::Tile, typename T::Cluster, cutlass::bfloat16_t>;
  // MXFP4 x MXFP4 (mx_float4_t: E8M0 scales over 32 values), BF16 output only: the dtype
  // training writes; one more instantiation per output dtype would lengthen every build.
  using CfgMxBF16 =
      BlockScaledGemm<typename T::Arch, typename T::Tile, typename T::Cluster, cutlass::bfloat16_t, ElementMxfp4>;

  // CUTLASS sizes the mainloop stages to fit its own idea of the capacity; these keep a
  // header update from silently producing a kernel that cannot launch.
  static_assert(CfgF32::kSmemBytes <= T::kSmemLimit, "fp32-output GEMM exceeds the shared memory of its target");
  static_assert(CfgF16::kSmemBytes <= T::kSmemLimit, "fp16-output GEMM exceeds the shared memory of its target");
  static_assert(CfgBF16::kSmemBytes <= T::kSmemLimit, "bf16-output GEMM exceeds the shared memory of its target");
  static_assert(CfgMxBF16::kSmemBytes <= T::kSmemLimit, "mxfp4 GEMM exceeds the shared memory of its target");

  template <class F>
  static nvfp4_status_t by_job(const GemmJob& job, F&& f) {
    if (job.format == Format::kMxfp4) {
      if (job.d_dtype == NVFP4_DTYPE_BFLOAT16) return f(Runner<CfgMxBF16>{});
      return fail(NVFP4_ERROR_NOT_SUPPORTED,
                  std::string("cutlass ") + T::kName + " mxfp4: the output dtype must be bfloat16");
    }
    switch (job.d_dtype) {
      case NVFP4_DTYPE_FLOAT32: return f(Runner<CfgF32>{});
      case NVFP4_DTYPE_FLOAT16: return f(Runner<CfgF16>{});
      case NVFP4_DTYPE_BFLOAT16: return f(Runner<CfgBF16>{});
      default:
        return fail(NVFP4_ERROR_NOT_SUPPORTED,
                    std::string("cutlass ") + T::kName + ": output dtype must be float32, float16 or bfloat16");
    }
  }

  static size_t workspace_size(const GemmJob& job) {
    size_t bytes = 0;
    by_job(job, [&](auto r) {
      bytes = decltype(r)::plan(job).total;
      return NVFP4_SUCCESS;
    });
    return bytes;
  }

  static nvfp4_status_t can_implement(const GemmJob& job) {
    return by_job(job, [&](auto r) { return decltype(r)::can_implement(job, T::kName); });
  }

  static nvfp4_status_t run(const GemmJob& job, void* workspace, size_t workspace_bytes, nvfp4_stream_t stream) {
    return by_job(job, [&](auto r) {
      return decltype(r)::run(job, workspace, workspace_bytes, reinterpret_cast<cudaStream_t>(stream), T::kName);
    });
  }

  static bool mx_applicable(const GemmJob& job) { return job.d_dtype == NVFP4_DTYPE_BFLOAT16; }

  static std::string compare_scale_layout(int64_t rows, int64_t k) {
    // The three kernels share one mainloop layout; checking each guards against a future
    // per-dtype tile change that would also change the scale layout.
    std::string s = blockscaled::compare_scale_layout<typename CfgBF16::SfConfig>(rows, k);
    if (s.empty()) s = blockscaled::compare_scale_layout<typename CfgF16::SfConfig>(rows, k);
    if (s.empty()) s = blockscaled::compare_scale_layout<typename CfgF32::SfConfig>(rows, k);
    return s;
  }

  static int smem_bytes(nvfp4_dtype_t d, int* limit) {
    if (limit != nullptr) *limit = T::kSmemLimit;
    switch (d) {
      case NVFP4_DTYPE_FLOAT32: return CfgF32::kSmemBytes;
      case NVFP4_DTYPE_FLOAT16: return CfgF16::kSmemBytes;
      case NVFP4_DTYPE_BFLOAT16: return CfgBF16::kSmemBytes;
      default: return 0;
    }
  }

  static std::string mx_compare_scale_layout(int64_t rows, int64_t k) {
    return blockscaled::compare_scale_layout<typename CfgMxBF16::SfConfig>(rows, k);
  }

  static int mx_smem_bytes(nvfp4_dtype_t d, int* limit) {
    if (limit != nullptr) *limit = T::kSmemLimit;
    return d == NVFP4_DTYPE_BFLOAT16 ? CfgMxBF16::kSmemBytes : 0;
  }

  static const BlockscaledGemms& table() {
    static const BlockscaledGemms t{T::kName,      &workspace_size, &can_implement,          &run,
                                    &mx_applicable, &compare_scale_layout, &smem_bytes, &mx_compare_scale_layout,
                                    &mx_smem_bytes};
    return t;
  }
};

}  // namespace nvfp4::detail::blockscaled
