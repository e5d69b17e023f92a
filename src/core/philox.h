// Philox4x32-10 (Salmon et al., SC'11): counter-based, so the random bits of an
// element depend only on (seed, offset, element index), never on how the work is
// split across threads. The CPU reference and the kernels call the same function.
//
// Convention: key = (seed lo, seed hi); counter = (g lo, g hi, offset lo, offset hi)
// for group g. How the 128 output bits are shared out among elements is decided by the
// caller (core/block.h: one group per 16 elements, one byte each).
#pragma once
#include "common.h"

namespace nvfp4::core {

struct Philox4 {
  uint32_t v[4];
};

NVFP4_HD void mulhilo32(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}

NVFP4_HD Philox4 philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0,
                               uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
#pragma unroll
  for (int r = 0; r < 10; ++r) {
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo32(kM0, c0, hi0, lo0);
    mulhilo32(kM1, c2, hi1, lo1);
    // Round keys written as key + r * W (not bumped in place): the same values, and the
    // compiler can then keep the ten keys of a kernel's seed out of its inner loops.
    uint32_t n0 = hi1 ^ c1 ^ (k0 + static_cast<uint32_t>(r) * kW0);
    uint32_t n2 = hi0 ^ c3 ^ (k1 + static_cast<uint32_t>(r) * kW1);
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
  }
  return {{c0, c1, c2, c3}};
}

// The 128 random bits of counter group `group`.
NVFP4_HD Philox4 philox_group(uint64_t seed, uint64_t offset, uint64_t group) {
  return philox4x32_10(static_cast<uint32_t>(group), static_cast<uint32_t>(group >> 32),
                       static_cast<uint32_t>(offset), static_cast<uint32_t>(offset >> 32),
                       static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

}  // namespace nvfp4::core
