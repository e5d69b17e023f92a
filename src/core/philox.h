// Philox4x32-10 (Salmon et al., SC'11): counter-based, so the random bits of an
// element depend only on (seed, offset, element index), never on how the work is
// split across threads. The CPU reference and the kernels call the same function.
//
// Convention: key = (seed lo, seed hi); counter = (idx/4 lo, idx/4 hi, offset lo,
// offset hi); element idx takes output word idx % 4. "idx" is the element's linear
// index in the tensor being quantized (for a columnwise output: in the transpose).
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
    uint32_t n0 = hi1 ^ c1 ^ k0;
    uint32_t n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += kW0;
    k1 += kW1;
  }
  return {{c0, c1, c2, c3}};
}

// The four random words that serve elements 4*group .. 4*group+3.
NVFP4_HD Philox4 philox_group(uint64_t seed, uint64_t offset, uint64_t group) {
  return philox4x32_10(static_cast<uint32_t>(group), static_cast<uint32_t>(group >> 32),
                       static_cast<uint32_t>(offset), static_cast<uint32_t>(offset >> 32),
                       static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

NVFP4_HD uint32_t philox_element(uint64_t seed, uint64_t offset, uint64_t idx) {
  return philox_group(seed, offset, idx >> 2).v[idx & 3];
}

}  // namespace nvfp4::core
