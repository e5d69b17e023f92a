// FP32 output (weight gradients into FP32 master weights), problems whose 128x256 tiles fill
// the machine: 128x256x64 tiles, 2x1 cluster (each B tile multicast to two CTAs), two
// consumer warpgroups cooperating on one tile. The BF16 large configuration's shape with an
// FP32 epilogue: on the 128x128 one the 400M model's weight-gradient GEMMs took up to 1.3x
// cuBLAS's time (bench/NOTES.md).
#include "gemm/sm90/sm90_cutlass_impl.cuh"

using Sm90F32LargeCfg = nvfp4::detail::sm90::Bf16Gemm<float, 128, 256, 64, 2, 1, nvfp4::detail::sm90::Cooperative>;
NVFP4_SM90_CUTLASS_ENTRY(kSm90F32Large, "fp32-out 128x256x64 2x1 cooperative", NVFP4_DTYPE_FLOAT32, Sm90F32LargeCfg)
