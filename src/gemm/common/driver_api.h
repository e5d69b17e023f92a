// The one CUDA driver function the GEMMs call on the host: cuTensorMapEncodeTiled, which
// builds a TMA descriptor (CUTLASS's sm90/sm100/sm120 kernels: one per operand, every GEMM).
//
// The library links the CUDA runtime statically and not the driver, so that it loads where
// no driver is installed (the CPU backend). CUTLASS reaches the driver function through
// cudaGetDriverEntryPointByVersion on every descriptor it builds — a symbol lookup by name
// per call, several per GEMM. nvfp4internal_cuTensorMapEncodeTiled looks the function up once
// (the driver entry point of a fixed ABI version cannot change in a process) and forwards to it.
// (Its name is outside the exported nvfp4_* pattern of src/nvfp4.map: it stays internal.)
// The GEMM objects are compiled with CUTLASS_ENABLE_DIRECT_CUDA_DRIVER_CALL and
// cuTensorMapEncodeTiled=nvfp4internal_cuTensorMapEncodeTiled (cmake/nvfp4_gemm.cmake), so
// that CUTLASS's direct call lands here; the .so keeps no undefined driver symbol
// (tests/python/test_build_targets.py).
#pragma once

#include <cuda.h>

extern "C" CUresult nvfp4internal_cuTensorMapEncodeTiled(
    CUtensorMap* tensorMap, CUtensorMapDataType tensorDataType, cuuint32_t tensorRank, void* globalAddress,
    const cuuint64_t* globalDim, const cuuint64_t* globalStrides, const cuuint32_t* boxDim,
    const cuuint32_t* elementStrides, CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
    CUtensorMapL2promotion l2Promotion, CUtensorMapFloatOOBfill oobFill);
