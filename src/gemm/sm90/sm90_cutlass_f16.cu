// FP16 output: 128x128x64 tiles, no cluster, cooperative.
#include "gemm/sm90/sm90_cutlass_impl.cuh"

using Sm90F16Cfg = nvfp4::detail::sm90::Bf16Gemm<cutlass::half_t, 128, 128, 64, 1, 1,
                                                 nvfp4::detail::sm90::Cooperative>;
NVFP4_SM90_CUTLASS_ENTRY(kSm90F16, "fp16-out 128x128x64 1x1 cooperative", NVFP4_DTYPE_FLOAT16, Sm90F16Cfg)
