// sm_120 family (RTX 50 series and RTX PRO Blackwell cc 12.0, DGX Spark GB10 cc 12.1): the
// block-scaled GEMMs on the warp-level block-scaled tensor cores
// (gemm/common/sm1xx_blockscaled.cuh), with this architecture's tile, cluster and
// shared-memory limit. Compiled for the 12.x targets of the build (cmake/nvfp4_gemm.cmake).
// Built here, not yet run on hardware: the host-side checks (scale layout, can_implement,
// shared memory) are in tests/cpp/test_blackwell_host.cpp.
#include "gemm/common/sm1xx_blockscaled.cuh"

namespace nvfp4::detail {
namespace {

using namespace cute;

struct Sm120 {
  using Arch = cutlass::arch::Sm120;
  // sm_120 has no CTA pairs, no multicast and about 100 KB of shared memory per block:
  // one CTA per 128x128 output tile, K = 128 per stage (64 bytes of FP4, two 64-element
  // scale blocks), the shape CUTLASS's own sm120 NVFP4 examples use.
  using Tile = Shape<_128, _128, _128>;
  using Cluster = Shape<_1, _1, _1>;
  // 99 KB, the opt-in maximum per block on sm_120 / sm_121.
  static constexpr int kSmemLimit = 101376;
  static constexpr const char* kName = "sm120";
};

}  // namespace

const BlockscaledGemms& sm120_gemms() { return blockscaled::ArchGemms<Sm120>::table(); }

}  // namespace nvfp4::detail
