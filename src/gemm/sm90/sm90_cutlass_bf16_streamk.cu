// BF16 output, few output tiles over a long K (the weight-gradient GEMMs of narrow layers,
// e.g. 768 x 768 x 16384): 128x128x64 tiles, no cluster, cooperative, stream-K scheduler
// (sm90_gemm.cu says when it is chosen).
#include "gemm/sm90/sm90_cutlass_impl.cuh"

using Sm90Bf16StreamKCfg = nvfp4::detail::sm90::Bf16Gemm<cutlass::bfloat16_t, 128, 128, 64, 1, 1,
                                                         nvfp4::detail::sm90::Cooperative,
                                                         cutlass::gemm::StreamKScheduler>;
NVFP4_SM90_CUTLASS_ENTRY(kSm90Bf16StreamK, "bf16 128x128x64 1x1 cooperative stream-K", NVFP4_DTYPE_BFLOAT16,
                         Sm90Bf16StreamKCfg)
