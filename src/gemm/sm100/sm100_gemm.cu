// sm_100 family (B200 / GB200 cc 10.0, B300 / GB300 cc 10.3) and sm_110 (Thor): NVFP4 x
// NVFP4 block-scaled GEMM on tcgen05 tensor cores, one CUTLASS kernel per output dtype.
// Compiled for the 10.x / 11.x targets of the build (cmake/nvfp4_gemm.cmake). Built here,
// not yet run on hardware: the host-side checks (scale layout, can_implement, shared
// memory) are in tests/cpp/test_blackwell_host.cpp.
#include "gemm/common/sm1xx_blockscaled.cuh"
#include "gemm/common/sm1xx_checks.h"

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
// MXFP4 x MXFP4 (mx_float4_t: E8M0 scales over 32 values), BF16 output only: the dtype
// training writes; one more instantiation per output dtype would lengthen every build.
using CfgMxBF16 = blockscaled::BlockScaledGemm<Arch, Tile, Cluster, cutlass::bfloat16_t, blockscaled::ElementMxfp4>;

constexpr const char* kArch = "sm100";

// Shared memory per CTA: 227 KB, the opt-in maximum per block on sm_100 / sm_103 / sm_110. CUTLASS sizes the mainloop stages to fit its own idea of
// the capacity; this keeps a header update from silently producing a kernel that cannot
// launch. (Bytes used are also reported by sm100_smem_bytes for the build checks.)
constexpr int kSmemLimit = 232448;
static_assert(CfgF32::kSmemBytes <= kSmemLimit, "sm100 fp32-output GEMM exceeds the shared memory of its target");
static_assert(CfgF16::kSmemBytes <= kSmemLimit, "sm100 fp16-output GEMM exceeds the shared memory of its target");
static_assert(CfgBF16::kSmemBytes <= kSmemLimit, "sm100 bf16-output GEMM exceeds the shared memory of its target");
static_assert(CfgMxBF16::kSmemBytes <= kSmemLimit, "sm100 mxfp4 GEMM exceeds the shared memory of its target");

template <class F>
nvfp4_status_t by_job(const GemmJob& job, F&& f) {
  if (job.format == Format::kMxfp4) {
    if (job.d_dtype == NVFP4_DTYPE_BFLOAT16) return f(blockscaled::Runner<CfgMxBF16>{});
    return fail(NVFP4_ERROR_NOT_SUPPORTED, "cutlass sm100 mxfp4: the output dtype must be bfloat16");
  }
  switch (job.d_dtype) {
    case NVFP4_DTYPE_FLOAT32: return f(blockscaled::Runner<CfgF32>{});
    case NVFP4_DTYPE_FLOAT16: return f(blockscaled::Runner<CfgF16>{});
    case NVFP4_DTYPE_BFLOAT16: return f(blockscaled::Runner<CfgBF16>{});
    default: return fail(NVFP4_ERROR_NOT_SUPPORTED, "cutlass sm100: output dtype must be float32, float16 or bfloat16");
  }
}

}  // namespace

size_t sm100_gemm_workspace_size(const GemmJob& job) {
  size_t bytes = 0;
  by_job(job, [&](auto r) {
    bytes = decltype(r)::plan(job).total;
    return NVFP4_SUCCESS;
  });
  return bytes;
}

nvfp4_status_t sm100_gemm_can_implement(const GemmJob& job) {
  return by_job(job, [&](auto r) { return decltype(r)::can_implement(job, kArch); });
}

nvfp4_status_t sm100_gemm(const GemmJob& job, void* workspace, size_t workspace_bytes, nvfp4_stream_t stream) {
  return by_job(job, [&](auto r) {
    return decltype(r)::run(job, workspace, workspace_bytes, reinterpret_cast<cudaStream_t>(stream), kArch);
  });
}

bool sm100_mx_applicable(const GemmJob& job) { return job.d_dtype == NVFP4_DTYPE_BFLOAT16; }

std::string sm100_mx_compare_scale_layout(int64_t rows, int64_t k) {
  return blockscaled::compare_scale_layout<CfgMxBF16::SfConfig>(rows, k);
}

int sm100_mx_smem_bytes(nvfp4_dtype_t d, int* limit) {
  if (limit != nullptr) *limit = kSmemLimit;
  return d == NVFP4_DTYPE_BFLOAT16 ? CfgMxBF16::kSmemBytes : 0;
}

std::string sm100_compare_scale_layout(int64_t rows, int64_t k) {
  // The three kernels share one mainloop layout; checking each guards against a future
  // per-dtype tile change that would also change the scale layout.
  std::string s = blockscaled::compare_scale_layout<CfgBF16::SfConfig>(rows, k);
  if (s.empty()) s = blockscaled::compare_scale_layout<CfgF16::SfConfig>(rows, k);
  if (s.empty()) s = blockscaled::compare_scale_layout<CfgF32::SfConfig>(rows, k);
  return s;
}

int sm100_smem_bytes(nvfp4_dtype_t d, int* limit) {
  if (limit != nullptr) *limit = kSmemLimit;
  switch (d) {
    case NVFP4_DTYPE_FLOAT32: return CfgF32::kSmemBytes;
    case NVFP4_DTYPE_FLOAT16: return CfgF16::kSmemBytes;
    case NVFP4_DTYPE_BFLOAT16: return CfgBF16::kSmemBytes;
    default: return 0;
  }
}

}  // namespace nvfp4::detail
