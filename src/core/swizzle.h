// The 128x4 scale layout shared by every backend: cuDNN F8_128x4, CUTLASS
// Sm1xxBlkScaledConfig (K-major SFA/SFB), cuBLASLt VEC16_UE4M3. For an operand of R rows
// and C = ceil(K/16) scale columns, padded to Rp = roundup(R,128), Cp = roundup(C,4):
// 128x4 tiles laid out row-tile-major; inside a tile, row r sits at (r%32)*16 +
// (r%128/32)*4 and column c at c%4. Padding bytes are zero.
#pragma once
#include "common.h"

namespace nvfp4::core {

NVFP4_HD int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

NVFP4_HD int64_t swizzled_rows(int64_t rows) { return round_up(rows, 128); }
NVFP4_HD int64_t swizzled_cols(int64_t cols) { return round_up(cols, 4); }
NVFP4_HD int64_t swizzled_size(int64_t rows, int64_t cols) {
  return swizzled_rows(rows) * swizzled_cols(cols);
}

NVFP4_HD int64_t swizzle_offset(int64_t r, int64_t c, int64_t cols) {
  int64_t cp = swizzled_cols(cols);
  return (r / 128) * (cp / 4) * 512 + (c / 4) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4 +
         (c % 4);
}

}  // namespace nvfp4::core
