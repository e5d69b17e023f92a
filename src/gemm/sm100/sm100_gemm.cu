// sm_100a (B200 / GB200): NVFP4 x NVFP4 block-scaled GEMM on tcgen05 tensor cores, one
// CUTLASS kernel per output dtype. Compiled for sm_100a only (cmake/nvfp4_blackwell.cmake).
// Built here, not yet run on hardware: the host-side checks (scale layout, can_implement)
// are covered by tests/cpp/test_blackwell_host.cpp.
#include "gemm/cutlass/sm1xx_blockscaled.cuh"
#include "gemm/cutlass/sm1xx_checks.h"

namespace nvfp4::detail {
namespace {

using namespace cute;

// 2-SM MMA (256 rows across a CTA pair) with K = 256 per stage: 128 bytes of FP4, one
// 128-byte swizzle atom, and four 64-element scale blocks per stage. The cluster is just
// the CTA pair the 2-SM instruction needs; larger clusters would add multicast but also
// raise the minimum grid for small M. N = 128 rather than 256: with the per-column bias
// broadcast and C in the epilogue, a 256-wide tile spills (255 registers + 400 bytes of
// stack in the 16-bit kernels) and an fp32 one leaves no shared memory for the mainloop.
using Arch = cutlass::arch::Sm100;
using Tile = Shape<_256, _128, _256>;
using Cluster = Shape<_2, _1, _1>;
using CfgF32 = blockscaled::BlockScaledGemm<Arch, Tile, Cluster, float>;
using CfgF16 = blockscaled::BlockScaledGemm<Arch, Tile, Cluster, cutlass::half_t>;
using CfgBF16 = blockscaled::BlockScaledGemm<Arch, Tile, Cluster, cutlass::bfloat16_t>;

constexpr const char* kArch = "sm100";

template <class F>
nvfp4_status_t by_dtype(nvfp4_dtype_t d, F&& f) {
  switch (d) {
    case NVFP4_DTYPE_FLOAT32: return f(blockscaled::Runner<CfgF32>{});
    case NVFP4_DTYPE_FLOAT16: return f(blockscaled::Runner<CfgF16>{});
    case NVFP4_DTYPE_BFLOAT16: return f(blockscaled::Runner<CfgBF16>{});
    default: return fail(NVFP4_ERROR_NOT_SUPPORTED, "cutlass sm100: output dtype must be float32, float16 or bfloat16");
  }
}

}  // namespace

size_t sm100_gemm_workspace_size(const GemmJob& job) {
  size_t bytes = 0;
  by_dtype(job.d_dtype, [&](auto r) {
    bytes = decltype(r)::plan(job).total;
    return NVFP4_SUCCESS;
  });
  return bytes;
}

nvfp4_status_t sm100_gemm_can_implement(const GemmJob& job) {
  return by_dtype(job.d_dtype, [&](auto r) { return decltype(r)::can_implement(job, kArch); });
}

nvfp4_status_t sm100_gemm(const GemmJob& job, void* workspace, size_t workspace_bytes, nvfp4_stream_t stream) {
  return by_dtype(job.d_dtype, [&](auto r) {
    return decltype(r)::run(job, workspace, workspace_bytes, reinterpret_cast<cudaStream_t>(stream), kArch);
  });
}

std::string sm100_compare_scale_layout(int64_t rows, int64_t k) {
  // The three kernels share one mainloop layout; checking each guards against a future
  // per-dtype tile change that would also change the scale layout.
  std::string s = blockscaled::compare_scale_layout<CfgBF16::SfConfig>(rows, k);
  if (s.empty()) s = blockscaled::compare_scale_layout<CfgF16::SfConfig>(rows, k);
  if (s.empty()) s = blockscaled::compare_scale_layout<CfgF32::SfConfig>(rows, k);
  return s;
}

}  // namespace nvfp4::detail
