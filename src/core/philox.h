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
#if defined(__CUDA_ARCH__)
  hi = __umulhi(a, b);  // two 32-bit multiplies instead of a 64-bit product and its halves
  lo = a * b;
#else
  uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
#endif
}

// The ten round keys of a key (k0, k1): k[2r] = k0 + r * W0, k[2r + 1] = k1 + r * W1.
struct PhiloxKeys {
  uint32_t k[20];
};

NVFP4_HD PhiloxKeys philox_keys(uint64_t seed) {
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  PhiloxKeys rk;
#pragma unroll
  for (int r = 0; r < 10; ++r) {
    rk.k[2 * r] = static_cast<uint32_t>(seed) + static_cast<uint32_t>(r) * kW0;
    rk.k[2 * r + 1] = static_cast<uint32_t>(seed >> 32) + static_cast<uint32_t>(r) * kW1;
  }
  return rk;
}

// Ten rounds with the round keys given. (The kernels pass keys computed once on the host,
// which then sit in the constant bank and cost no instructions.)
NVFP4_HD Philox4 philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, const PhiloxKeys& rk) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
#pragma unroll
  for (int r = 0; r < 10; ++r) {
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo32(kM0, c0, hi0, lo0);
    mulhilo32(kM1, c2, hi1, lo1);
    uint32_t n0 = hi1 ^ c1 ^ rk.k[2 * r];
    uint32_t n2 = hi0 ^ c3 ^ rk.k[2 * r + 1];
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
  }
  return {{c0, c1, c2, c3}};
}

// The 128 random bits of counter group `group`: counter (group, offset), key seed.
NVFP4_HD Philox4 philox_group(const PhiloxKeys& rk, uint64_t offset, uint64_t group) {
  return philox4x32_10(static_cast<uint32_t>(group), static_cast<uint32_t>(group >> 32),
                       static_cast<uint32_t>(offset), static_cast<uint32_t>(offset >> 32), rk);
}

NVFP4_HD Philox4 philox_group(uint64_t seed, uint64_t offset, uint64_t group) {
  return philox_group(philox_keys(seed), offset, group);
}

}  // namespace nvfp4::core
