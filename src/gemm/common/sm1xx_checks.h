// Host-only hooks into the Blackwell CUTLASS files for tests (tests/cpp/test_blackwell_host.cpp):
// they answer without a GPU, so the layout and shape rules of kernels that this project
// cannot run are still checked wherever the files are built.
#pragma once

#include <cstdint>
#include <string>

#include "nvfp4/nvfp4.h"

namespace nvfp4::detail {

// "" when the scale-factor layout CUTLASS computes for an operand of `rows` rows and
// inner size k equals core::swizzle_offset everywhere in the padded range (both the SFA
// and the SFB role, every output dtype's kernel); otherwise the first difference.
// smemXXX_bytes: dynamic shared memory of the output dtype's kernel, and in *limit the
// per-block maximum of the target it was checked against at compile time.
#if defined(NVFP4_HAS_SM100_GEMM)
std::string sm100_compare_scale_layout(int64_t rows, int64_t k);
int sm100_smem_bytes(nvfp4_dtype_t d, int* limit);
// The same for the MXFP4 kernel (BF16 output only; 0 bytes for another dtype).
std::string sm100_mx_compare_scale_layout(int64_t rows, int64_t k);
int sm100_mx_smem_bytes(nvfp4_dtype_t d, int* limit);
#endif
#if defined(NVFP4_HAS_SM120_GEMM)
std::string sm120_compare_scale_layout(int64_t rows, int64_t k);
int sm120_smem_bytes(nvfp4_dtype_t d, int* limit);
// The same for the MXFP4 kernel (BF16 output only; 0 bytes for another dtype).
std::string sm120_mx_compare_scale_layout(int64_t rows, int64_t k);
int sm120_mx_smem_bytes(nvfp4_dtype_t d, int* limit);
#endif

}  // namespace nvfp4::detail
