// Reading and writing the three floating-point dtypes of the C API through fp32, for the
// CPU reference: widening is exact, narrowing rounds to nearest even (core/common.h's
// conversions, the ones the kernels' results are compared with).
#pragma once

#include <cstdint>

#include "core/common.h"
#include "nvfp4/nvfp4.h"

namespace nvfp4::detail::cpu {

inline float load(const void* x, nvfp4_dtype_t dt, int64_t i) {
  switch (dt) {
    case NVFP4_DTYPE_FLOAT16: return core::fp16_to_float(static_cast<const uint16_t*>(x)[i]);
    case NVFP4_DTYPE_BFLOAT16: return core::bf16_to_float(static_cast<const uint16_t*>(x)[i]);
    default: return static_cast<const float*>(x)[i];
  }
}

inline void store(void* out, nvfp4_dtype_t dt, int64_t i, float v) {
  switch (dt) {
    case NVFP4_DTYPE_FLOAT16: static_cast<uint16_t*>(out)[i] = core::float_to_fp16(v); break;
    case NVFP4_DTYPE_BFLOAT16: static_cast<uint16_t*>(out)[i] = core::float_to_bf16(v); break;
    default: static_cast<float*>(out)[i] = v; break;
  }
}

}  // namespace nvfp4::detail::cpu
