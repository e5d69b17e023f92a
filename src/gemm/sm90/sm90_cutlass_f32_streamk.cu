// FP32 output (weight gradients into FP32 master weights) with few output tiles over a
// long K: 128x128x64 tiles, no cluster, cooperative, stream-K scheduler (sm90_gemm.cu says
// when it is chosen).
#include "gemm/sm90/sm90_cutlass_impl.cuh"

using Sm90F32StreamKCfg = nvfp4::detail::sm90::Bf16Gemm<float, 128, 128, 64, 1, 1, nvfp4::detail::sm90::Cooperative,
                                                        cutlass::gemm::StreamKScheduler>;
NVFP4_SM90_CUTLASS_ENTRY(kSm90F32StreamK, "fp32-out 128x128x64 1x1 cooperative stream-K", NVFP4_DTYPE_FLOAT32,
                         Sm90F32StreamKCfg)
