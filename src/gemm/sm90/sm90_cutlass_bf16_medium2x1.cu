// BF16 output, large problems over a short K (K <= 1024, N >= 2048): 128x128x64 tiles, 2x1
// cluster (each B tile multicast to two CTAs), ping-pong, so that one tile's epilogue
// overlaps the other warpgroup's mainloop, where the epilogue is a large part of a tile's time.
#include "gemm/sm90/sm90_cutlass_impl.cuh"

using Sm90Bf16Medium2x1Cfg = nvfp4::detail::sm90::Bf16Gemm<cutlass::bfloat16_t, 128, 128, 64, 2, 1,
                                                           nvfp4::detail::sm90::Pingpong>;
NVFP4_SM90_CUTLASS_ENTRY(kSm90Bf16Medium2x1, "bf16 128x128x64 2x1 pingpong", NVFP4_DTYPE_BFLOAT16,
                         Sm90Bf16Medium2x1Cfg)
