// The grouped FP32-output configuration (sm90_grouped_cutlass.cuh): weight gradients into FP32
// master weights, and FP16 outputs (FP32, then rounded once by the runner: the epilogue's own
// rounding, so the bits are those of an FP16 epilogue).
#include "gemm/sm90/sm90_grouped_cutlass.cuh"

NVFP4_SM90_GROUPED_ENTRY(kSm90GroupedF32, "grouped 128x256x64 f32", NVFP4_DTYPE_FLOAT32,
                         nvfp4::detail::sm90::GroupedBf16Gemm<float>)
