// BF16 output, medium problems (M up to ~1024, or few 128x256 tiles): 128x128x64 tiles,
// no cluster, ping-pong (two consumer warpgroups on two tiles, one's epilogue overlapping
// the other's mainloop).
#include "gemm/sm90/sm90_cutlass_impl.cuh"

using Sm90Bf16MediumCfg = nvfp4::detail::sm90::Bf16Gemm<cutlass::bfloat16_t, 128, 128, 64, 1, 1,
                                                        nvfp4::detail::sm90::Pingpong>;
NVFP4_SM90_CUTLASS_ENTRY(kSm90Bf16Medium, "bf16 128x128x64 1x1 pingpong", NVFP4_DTYPE_BFLOAT16, Sm90Bf16MediumCfg)
