// BF16 output, large problems (M >= ~1024): 128x256x64 tiles, 2x1 cluster (each B tile
// multicast to two CTAs), two consumer warpgroups cooperating on one tile.
#include "gemm/sm90/sm90_cutlass_impl.cuh"

using Sm90Bf16LargeCfg = nvfp4::detail::sm90::Bf16Gemm<cutlass::bfloat16_t, 128, 256, 64, 2, 1,
                                                       nvfp4::detail::sm90::Cooperative>;
NVFP4_SM90_CUTLASS_ENTRY(kSm90Bf16Large, "bf16 128x256x64 2x1 cooperative", NVFP4_DTYPE_BFLOAT16, Sm90Bf16LargeCfg)
