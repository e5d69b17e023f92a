// Host-only hooks into the Blackwell CUTLASS files for tests (tests/cpp/test_blackwell_host.cpp):
// they answer without a GPU, so the layout and shape rules of kernels that this project
// cannot run are still checked wherever the files are built.
#pragma once

#include <cstdint>
#include <string>

namespace nvfp4::detail {

// "" when the scale-factor layout CUTLASS computes for an operand of `rows` rows and
// inner size k equals core::swizzle_offset everywhere in the padded range (both the SFA
// and the SFB role, every output dtype's kernel); otherwise the first difference.
#if defined(NVFP4_HAS_SM100_GEMM)
std::string sm100_compare_scale_layout(int64_t rows, int64_t k);
#endif
#if defined(NVFP4_HAS_SM120_GEMM)
std::string sm120_compare_scale_layout(int64_t rows, int64_t k);
#endif

}  // namespace nvfp4::detail
