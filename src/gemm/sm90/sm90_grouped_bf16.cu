// The grouped BF16-output configuration (sm90_grouped_cutlass.cuh): fprop and dgrad of the
// grouped runner. One CUTLASS kernel per file, so that they compile in parallel.
#include "gemm/sm90/sm90_grouped_cutlass.cuh"

NVFP4_SM90_GROUPED_ENTRY(kSm90GroupedBf16, "grouped 128x256x64 bf16", NVFP4_DTYPE_BFLOAT16,
                         nvfp4::detail::sm90::GroupedBf16Gemm<cutlass::bfloat16_t>)
