// sm_100 family (and sm_110): the native grouped runner (gemm/common/sm1xx_grouped.cuh),
// CUTLASS's block-scaled ptr-array grouped GEMM on tcgen05 (1-SM MMA as in CUTLASS example 75,
// 128x128x256 tiles: 128x256 leaves no shared memory for an FP32 epilogue), BF16 and FP32
// outputs (FP16 through FP32). Built,
// not run on hardware; nvfp4_runner_check runs its host checks.
#include "gemm/common/sm1xx_grouped.cuh"

namespace nvfp4::detail {
namespace {

using namespace cute;
template <class D>
using Cfg = blockscaled_grouped::Config<cutlass::arch::Sm100, Shape<_128, _128, _256>, Shape<_1, _1, _1>,
                                        cutlass::gemm::KernelPtrArrayTmaWarpSpecialized1SmNvf4Sm100,
                                        cutlass::epilogue::PtrArrayTmaWarpSpecialized1Sm, D>;
using Bf16 = blockscaled_grouped::Runner<Cfg<cutlass::bfloat16_t>>;
using F32 = blockscaled_grouped::Runner<Cfg<float>>;
constexpr int kSmemLimit = 232448;  // the opt-in maximum per block on sm_100 / sm_103 / sm_110
static_assert(Cfg<cutlass::bfloat16_t>::kSmemBytes <= kSmemLimit, "sm100 grouped bf16 GEMM exceeds shared memory");
static_assert(Cfg<float>::kSmemBytes <= kSmemLimit, "sm100 grouped fp32 GEMM exceeds shared memory");

}  // namespace

bool sm100_grouped_applicable(const GroupedGemmJob& job) { return blockscaled_grouped::applicable(job); }

nvfp4_status_t sm100_grouped_workspace(const GemmJob& job, int, size_t* bytes) {
  const GroupedGemmJob& g = *job.grouped;
  *bytes = g.d_dtype == NVFP4_DTYPE_BFLOAT16 ? Bf16::plan(g).total : F32::plan(g).total;
  return NVFP4_SUCCESS;
}

nvfp4_status_t sm100_grouped_run(const GemmJob& job, int, void* ws, size_t ws_bytes, nvfp4_stream_t stream) {
  const GroupedGemmJob& g = *job.grouped;
  const auto s = reinterpret_cast<cudaStream_t>(stream);
  return g.d_dtype == NVFP4_DTYPE_BFLOAT16 ? Bf16::run(g, ws, ws_bytes, s, "sm100")
                                           : F32::run(g, ws, ws_bytes, s, "sm100");
}

nvfp4_status_t sm100_grouped_self_check(int* checked) {
  int a = 0, b = 0;
  if (nvfp4_status_t s = Bf16::self_check("sm100", kSmemLimit, &a); s != NVFP4_SUCCESS) return s;
  if (nvfp4_status_t s = F32::self_check("sm100", kSmemLimit, &b); s != NVFP4_SUCCESS) return s;
  *checked = a + b;
  return NVFP4_SUCCESS;
}

}  // namespace nvfp4::detail
