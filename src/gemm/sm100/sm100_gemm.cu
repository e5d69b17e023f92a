// sm_100 family (B200 / GB200 cc 10.0, B300 / GB300 cc 10.3) and sm_110 (Thor): the
// block-scaled GEMMs on tcgen05 tensor cores (gemm/common/sm1xx_blockscaled.cuh), with this
// architecture's tile, cluster and shared-memory limit. Compiled for the 10.x / 11.x
// targets of the build (cmake/nvfp4_gemm.cmake). Built here, not yet run on hardware: the
// host-side checks (scale layout, can_implement, shared memory) are in
// tests/cpp/test_blackwell_host.cpp.
#include "gemm/common/sm1xx_blockscaled.cuh"

namespace nvfp4::detail {
namespace {

using namespace cute;

struct Sm100 {
  using Arch = cutlass::arch::Sm100;
  // 2-SM MMA (256 rows across a CTA pair) with K = 256 per stage: 128 bytes of FP4, one
  // 128-byte swizzle atom, and four 64-element scale blocks per stage. The cluster is just
  // the CTA pair the 2-SM instruction needs; larger clusters would add multicast but also
  // raise the minimum grid for small M. N = 128 rather than 256: with the per-column bias
  // broadcast and C in the epilogue, a 256-wide tile spills (255 registers + 400 bytes of
  // stack in the 16-bit kernels) and an fp32 one leaves no shared memory for the mainloop.
  using Tile = Shape<_256, _128, _256>;
  using Cluster = Shape<_2, _1, _1>;
  // 227 KB, the opt-in maximum per block on sm_100 / sm_103 / sm_110.
  static constexpr int kSmemLimit = 232448;
  static constexpr const char* kName = "sm100";
};

}  // namespace

const BlockscaledGemms& sm100_gemms() { return blockscaled::ArchGemms<Sm100>::table(); }

}  // namespace nvfp4::detail
