// The environment variables the library reads on a call (benchmark and test settings that
// choose a kernel, a tile configuration or a launch geometry). Their values are checked
// here, at the C API entry points, against what each one accepts: a value the library
// does not know is refused with the variable named (NVFP4_ERROR_INVALID_ARGUMENT), never
// read as "unset". An empty value is the same as unset.
#pragma once

namespace nvfp4::detail {

// Whether any NVFP4_* variable is set: one pass over the environment, where the checks and
// the GEMM environment key would otherwise look each of their ~17 names up (a linear scan of
// the environment each) on every call. With none set, every variable is unset.
bool any_nvfp4_setting();

// The GEMM settings (NVFP4_SM90_*, NVFP4_CUDNN_EPILOGUE, NVFP4_CUDNN_AUTOTUNE; the removed
// NVFP4_SM90_STREAM_DEBUG is refused). Throws validate.h's Error on a bad value.
void check_gemm_settings();

// The quantization settings (NVFP4_QUANT_GRID_CAP, NVFP4_QUANT_WORKSPACE; NVFP4_QUANT_LEGACY and
// NVFP4_QUANT_COOP, removed, are refused).
void check_quant_settings();

}  // namespace nvfp4::detail
