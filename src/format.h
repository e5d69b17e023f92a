// The FP4 formats as data. What one format does differently from another (the values per
// block scale, how the scale byte is encoded, whether a per-tensor FP32 scale travels with
// the tensor) is a FormatSpec constant here; the argument checks (validate.h), the C API's
// quantize, dequantize and GEMM paths (api_quantize.cpp, api_gemm.cpp) and the runner table
// (gemm/dispatch.cpp) take the format as a parameter. A new format is a new constant plus
// its kernels, not a parallel set of checks.
#pragma once

#include <cstdint>

#include "core/block.h"
#include "core/mx.h"
#include "internal.h"

namespace nvfp4::detail {

struct FormatSpec {
  Format id;
  const char* name;             // "nvfp4", "mxfp4": messages and runner descriptions
  int64_t block;                // values per scale byte, along K (and the columnwise padding)
  bool tensor_scale;            // an FP32 amax per direction (the GEMM's alpha comes from it)
  bool e4m3_scale_dtype;        // scale descriptors may say float8_e4m3fn as well as uint8
  const char* scale_dtypes;     // what the scale descriptor's dtype must be, for messages
  const char* block_note;       // after "a multiple of <block>" in the input-shape message
};

// E2M1 codes, one E4M3 scale per 16 values, one FP32 amax per tensor (per direction).
inline constexpr FormatSpec kNvfp4Format{Format::kNvfp4, "nvfp4", core::kBlock, true, true,
                                         "float8_e4m3fn or uint8", ""};
// E2M1 codes, one E8M0 scale (a power of two) per 32 values, no per-tensor scale.
inline constexpr FormatSpec kMxfp4Format{Format::kMxfp4, "mxfp4", core::kMxBlock, false, false,
                                         "uint8 (E8M0 bytes)", " (MXFP4 blocks)"};

inline const FormatSpec& format_spec(Format f) { return f == Format::kMxfp4 ? kMxfp4Format : kNvfp4Format; }

}  // namespace nvfp4::detail
