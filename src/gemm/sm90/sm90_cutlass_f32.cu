// FP32 output (also the target of the fallback path: odd N, C in another dtype, unaligned
// C/D): 128x128x64 tiles, no cluster, cooperative.
#include "gemm/sm90/sm90_cutlass_impl.cuh"

using Sm90F32Cfg = nvfp4::detail::sm90::Bf16Gemm<float, 128, 128, 64, 1, 1, nvfp4::detail::sm90::Cooperative>;
NVFP4_SM90_CUTLASS_ENTRY(kSm90F32, "fp32-out 128x128x64 1x1 cooperative", NVFP4_DTYPE_FLOAT32, Sm90F32Cfg)
