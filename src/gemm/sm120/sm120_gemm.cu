// sm_120 family (RTX 50 series and RTX PRO Blackwell cc 12.0, DGX Spark GB10 cc 12.1):
// NVFP4 x NVFP4 block-scaled GEMM on the warp-level block-scaled tensor cores, one CUTLASS
// kernel per output dtype. Compiled for the 12.x targets of the build
// (cmake/nvfp4_gemm.cmake). Built here, not yet run on hardware: the host-side checks
// (scale layout, can_implement, shared memory) are in tests/cpp/test_blackwell_host.cpp.
#include "gemm/common/sm1xx_blockscaled.cuh"
#include "gemm/common/sm1xx_checks.h"

namespace nvfp4::detail {
namespace {

using namespace cute;

// sm_120 has no CTA pairs, no multicast and about 100 KB of shared memory per block:
// one CTA per 128x128 output tile, K = 128 per stage (64 bytes of FP4, two 64-element
// scale blocks), the shape CUTLASS's own sm120 NVFP4 examples use.
using Arch = cutlass::arch::Sm120;
using Tile = Shape<_128, _128, _128>;
using Cluster = Shape<_1, _1, _1>;
using CfgF32 = blockscaled::BlockScaledGemm<Arch, Tile, Cluster, float>;
using CfgF16 = blockscaled::BlockScaledGemm<Arch, Tile, Cluster, cutlass::half_t>;
using CfgBF16 = blockscaled::BlockScaledGemm<Arch, Tile, Cluster, cutlass::bfloat16_t>;
// MXFP4 x MXFP4 (mx_float4_t: E8M0 scales over 32 values), BF16 output only: the dtype
// training writes; one more instantiation per output dtype would lengthen every build.
using CfgMxBF16 = blockscaled::BlockScaledGemm<Arch, Tile, Cluster, cutlass::bfloat16_t, blockscaled::ElementMxfp4>;

constexpr const char* kArch = "sm120";

// Shared memory per CTA: 99 KB, the opt-in maximum per block on sm_120 / sm_121. CUTLASS sizes the mainloop stages to fit its own idea of
// the capacity; this keeps a header update from silently producing a kernel that cannot
// launch. (Bytes used are also reported by sm120_smem_bytes for the build checks.)
constexpr int kSmemLimit = 101376;
static_assert(CfgF32::kSmemBytes <= kSmemLimit, "sm120 fp32-output GEMM exceeds the shared memory of its target");
static_assert(CfgF16::kSmemBytes <= kSmemLimit, "sm120 fp16-output GEMM exceeds the shared memory of its target");
static_assert(CfgBF16::kSmemBytes <= kSmemLimit, "sm120 bf16-output GEMM exceeds the shared memory of its target");
static_assert(CfgMxBF16::kSmemBytes <= kSmemLimit, "sm120 mxfp4 GEMM exceeds the shared memory of its target");

template <class F>
nvfp4_status_t by_job(const GemmJob& job, F&& f) {
  if (job.format == Format::kMxfp4) {
    if (job.d_dtype == NVFP4_DTYPE_BFLOAT16) return f(blockscaled::Runner<CfgMxBF16>{});
    return fail(NVFP4_ERROR_NOT_SUPPORTED, "cutlass sm120 mxfp4: the output dtype must be bfloat16");
  }
  switch (job.d_dtype) {
    case NVFP4_DTYPE_FLOAT32: return f(blockscaled::Runner<CfgF32>{});
    case NVFP4_DTYPE_FLOAT16: return f(blockscaled::Runner<CfgF16>{});
    case NVFP4_DTYPE_BFLOAT16: return f(blockscaled::Runner<CfgBF16>{});
    default: return fail(NVFP4_ERROR_NOT_SUPPORTED, "cutlass sm120: output dtype must be float32, float16 or bfloat16");
  }
}

}  // namespace

size_t sm120_gemm_workspace_size(const GemmJob& job) {
  size_t bytes = 0;
  by_job(job, [&](auto r) {
    bytes = decltype(r)::plan(job).total;
    return NVFP4_SUCCESS;
  });
  return bytes;
}

nvfp4_status_t sm120_gemm_can_implement(const GemmJob& job) {
  return by_job(job, [&](auto r) { return decltype(r)::can_implement(job, kArch); });
}

nvfp4_status_t sm120_gemm(const GemmJob& job, void* workspace, size_t workspace_bytes, nvfp4_stream_t stream) {
  return by_job(job, [&](auto r) {
    return decltype(r)::run(job, workspace, workspace_bytes, reinterpret_cast<cudaStream_t>(stream), kArch);
  });
}

bool sm120_mx_applicable(const GemmJob& job) { return job.d_dtype == NVFP4_DTYPE_BFLOAT16; }

std::string sm120_mx_compare_scale_layout(int64_t rows, int64_t k) {
  return blockscaled::compare_scale_layout<CfgMxBF16::SfConfig>(rows, k);
}

int sm120_mx_smem_bytes(nvfp4_dtype_t d, int* limit) {
  if (limit != nullptr) *limit = kSmemLimit;
  return d == NVFP4_DTYPE_BFLOAT16 ? CfgMxBF16::kSmemBytes : 0;
}

std::string sm120_compare_scale_layout(int64_t rows, int64_t k) {
  std::string s = blockscaled::compare_scale_layout<CfgBF16::SfConfig>(rows, k);
  if (s.empty()) s = blockscaled::compare_scale_layout<CfgF16::SfConfig>(rows, k);
  if (s.empty()) s = blockscaled::compare_scale_layout<CfgF32::SfConfig>(rows, k);
  return s;
}

int sm120_smem_bytes(nvfp4_dtype_t d, int* limit) {
  if (limit != nullptr) *limit = kSmemLimit;
  switch (d) {
    case NVFP4_DTYPE_FLOAT32: return CfgF32::kSmemBytes;
    case NVFP4_DTYPE_FLOAT16: return CfgF16::kSmemBytes;
    case NVFP4_DTYPE_BFLOAT16: return CfgBF16::kSmemBytes;
    default: return 0;
  }
}

}  // namespace nvfp4::detail
