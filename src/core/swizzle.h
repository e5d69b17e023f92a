// The 128x4 scale layout shared by every backend: cuDNN F8_128x4, CUTLASS
// Sm1xxBlkScaledConfig (K-major SFA/SFB), cuBLASLt VEC16_UE4M3. For an operand of R rows
// and C = ceil(K/16) scale columns, padded to Rp = roundup(R,128), Cp = roundup(C,4):
// 128x4 tiles laid out row-tile-major; inside a tile, row r sits at (r%32)*16 +
// (r%128/32)*4 and column c at c%4. Padding bytes are zero.
#pragma once
#include "common.h"

namespace nvfp4::core {

// Plain round_up for sizes already validated (v + m - 1 fits); round_up_checked for
// anything derived from a caller's shape.
NVFP4_HD int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

NVFP4_HD bool round_up_checked(int64_t v, int64_t m, int64_t* out) {
  int64_t t = 0;
  if (m <= 0 || !size_add(v, m - 1, &t)) return false;
  *out = t / m * m;
  return true;
}

NVFP4_HD int64_t swizzled_rows(int64_t rows) { return round_up(rows, 128); }
NVFP4_HD int64_t swizzled_cols(int64_t cols) { return round_up(cols, 4); }
NVFP4_HD int64_t swizzled_size(int64_t rows, int64_t cols) {
  return swizzled_rows(rows) * swizzled_cols(cols);
}

// Shape of the swizzled scale matrix of a rows x cols linear one; false if it does not
// fit in int64 (rows, cols, and the byte count rows_p * cols_p).
NVFP4_HD bool swizzled_shape_checked(int64_t rows, int64_t cols, int64_t* rows_p, int64_t* cols_p) {
  int64_t n = 0;
  return round_up_checked(rows, 128, rows_p) && round_up_checked(cols, 4, cols_p) && size_mul(*rows_p, *cols_p, &n);
}

NVFP4_HD int64_t swizzle_offset(int64_t r, int64_t c, int64_t cols) {
  int64_t cp = swizzled_cols(cols);
  return (r / 128) * (cp / 4) * 512 + (c / 4) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4 +
         (c % 4);
}

}  // namespace nvfp4::core
