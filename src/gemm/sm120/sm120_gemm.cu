// sm_120a (RTX 50 series, RTX PRO 6000 Blackwell): NVFP4 x NVFP4 block-scaled GEMM on
// the warp-level block-scaled tensor cores, one CUTLASS kernel per output dtype.
// Compiled for sm_120a only (cmake/nvfp4_blackwell.cmake). Built here, not yet run on
// hardware: the host-side checks (scale layout, can_implement) are covered by
// tests/cpp/test_blackwell_host.cpp.
#include "gemm/cutlass/sm1xx_blockscaled.cuh"
#include "gemm/cutlass/sm1xx_checks.h"

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

constexpr const char* kArch = "sm120";

template <class F>
nvfp4_status_t by_dtype(nvfp4_dtype_t d, F&& f) {
  switch (d) {
    case NVFP4_DTYPE_FLOAT32: return f(blockscaled::Runner<CfgF32>{});
    case NVFP4_DTYPE_FLOAT16: return f(blockscaled::Runner<CfgF16>{});
    case NVFP4_DTYPE_BFLOAT16: return f(blockscaled::Runner<CfgBF16>{});
    default: return fail(NVFP4_ERROR_NOT_SUPPORTED, "cutlass sm120: output dtype must be float32, float16 or bfloat16");
  }
}

}  // namespace

size_t sm120_gemm_workspace_size(const GemmJob& job) {
  size_t bytes = 0;
  by_dtype(job.d_dtype, [&](auto r) {
    bytes = decltype(r)::plan(job).total;
    return NVFP4_SUCCESS;
  });
  return bytes;
}

nvfp4_status_t sm120_gemm_can_implement(const GemmJob& job) {
  return by_dtype(job.d_dtype, [&](auto r) { return decltype(r)::can_implement(job, kArch); });
}

nvfp4_status_t sm120_gemm(const GemmJob& job, void* workspace, size_t workspace_bytes, nvfp4_stream_t stream) {
  return by_dtype(job.d_dtype, [&](auto r) {
    return decltype(r)::run(job, workspace, workspace_bytes, reinterpret_cast<cudaStream_t>(stream), kArch);
  });
}

std::string sm120_compare_scale_layout(int64_t rows, int64_t k) {
  std::string s = blockscaled::compare_scale_layout<CfgBF16::SfConfig>(rows, k);
  if (s.empty()) s = blockscaled::compare_scale_layout<CfgF16::SfConfig>(rows, k);
  if (s.empty()) s = blockscaled::compare_scale_layout<CfgF32::SfConfig>(rows, k);
  return s;
}

}  // namespace nvfp4::detail
