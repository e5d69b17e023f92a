// Host-only checks of the MXFP4 format against CUTLASS's own definitions (CUTLASS headers
// only: no GPU, no CUDA compiler, no kernel), so they run wherever the headers are found:
//   - the scale-factor layout CUTLASS builds for MX operands (32 elements per scale:
//     Sm1xxBlockScaledConfig<32>, what the sm100/sm120 mx_float4_t GEMMs use, and
//     Sm103BlockScaledConfig<32>) equals core::swizzle_offset over the whole padded range,
//     in both the SFA and the SFB role, for odd and real shapes;
//   - mx_float4_t's scale type is float_ue8m0_t, and core::e8m0_decode equals CUTLASS's
//     float_ue8m0_t -> float conversion for all 256 bytes;
//   - the "ceil" scale rule equals CUTLASS's float -> float_ue8m0_t conversion (round
//     toward +infinity, what sm_100's cvt.rp.satfinite.ue8m0x2.f32 does) of M / 6 wherever
//     M / 6 is a normal float, and the "ocp" rule equals the biased exponent of M minus 2.
// Prints "N passed, N failed" and exits non-zero on any failure.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "cutlass/detail/sm100_blockscaled_layout.hpp"
#include "cutlass/detail/sm103_blockscaled_layout.hpp"
#include "cutlass/float8.h"
#include "cutlass/float_subbyte.h"

#include "core/mx.h"
#include "core/swizzle.h"

namespace core = nvfp4::core;

static int g_passed = 0, g_failed = 0;

static void check(bool ok, const std::string& what) {
  if (ok) {
    ++g_passed;
  } else {
    ++g_failed;
    if (g_failed <= 20) std::printf("FAIL: %s\n", what.c_str());
  }
}

static_assert(std::is_same_v<cutlass::mx_float4_t<cutlass::float_e2m1_t>::ScaleFactorType, cutlass::float_ue8m0_t>,
              "MXFP4 operands carry E8M0 scales");
static_assert(core::kMxBlock == 32, "one E8M0 scale per 32 elements");

static uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
static float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// "" when CUTLASS's scale layout for an operand of `rows` rows and inner size k equals
// core::swizzle_offset (over 32-element blocks) everywhere in the padded range.
template <class Config>
static std::string compare_layout(int64_t rows, int64_t k) {
  const int64_t cols = (k + core::kMxBlock - 1) / core::kMxBlock;
  const int64_t rp = core::swizzled_rows(rows), cp = core::swizzled_cols(cols);
  auto sfa = Config::tile_atom_to_shape_SFA(cute::make_shape(int(rows), 1, int(k), 1));
  auto sfb = Config::tile_atom_to_shape_SFB(cute::make_shape(1, int(rows), int(k), 1));
  const int64_t span_a = cute::cosize(cute::filter_zeros(sfa)), span_b = cute::cosize(cute::filter_zeros(sfb));
  const std::string where = "rows=" + std::to_string(rows) + " k=" + std::to_string(k);
  if (span_a != rp * cp || span_b != rp * cp)
    return where + ": CUTLASS spans " + std::to_string(span_a) + "/" + std::to_string(span_b) +
           " bytes, swizzled_size is " + std::to_string(rp * cp);
  for (int64_t r = 0; r < rp; ++r)
    for (int64_t c = 0; c < cp; ++c) {
      // Scale column c covers elements [32c, 32c+32); the first and the last map to it.
      const int64_t want = core::swizzle_offset(r, c, cols);
      const int64_t got_a = sfa(cute::make_coord(int(r), int(c * core::kMxBlock), 0));
      const int64_t got_b = sfb(cute::make_coord(int(r), int(c * core::kMxBlock + core::kMxBlock - 1), 0));
      if (got_a != want || got_b != want)
        return where + ": scale (" + std::to_string(r) + ", " + std::to_string(c) + ") is at " +
               std::to_string(want) + " in nvfp4, at " + std::to_string(got_a) + " (SFA) / " +
               std::to_string(got_b) + " (SFB) in CUTLASS";
    }
  return "";
}

static void check_layouts() {
  using Sm100 = cutlass::detail::Sm1xxBlockScaledConfig<32>;
  using Sm103 = cutlass::detail::Sm103BlockScaledConfig<32>;
  static_assert(Sm100::SFVecSize == 32 && Sm103::SFVecSize == 32, "32-element scale vectors");
  const int64_t rows[] = {1, 7, 31, 128, 129, 255, 300, 4096};
  const int64_t ks[] = {32, 64, 96, 160, 256, 1056, 4096, 14336};
  for (int64_t r : rows)
    for (int64_t k : ks) {
      const std::string d100 = compare_layout<Sm100>(r, k);
      check(d100.empty(), "Sm1xxBlockScaledConfig<32> layout: " + d100);
      const std::string d103 = compare_layout<Sm103>(r, k);
      check(d103.empty(), "Sm103BlockScaledConfig<32> layout: " + d103);
    }
}

static void check_e8m0_decode() {
  for (uint32_t b = 0; b < 256; ++b) {
    const float want = float(cutlass::float_ue8m0_t::bitcast(static_cast<uint8_t>(b)));
    const float got = core::e8m0_decode(b);
    const bool ok = std::isnan(want) ? std::isnan(got) : bits(got) == bits(want);
    check(ok, "e8m0_decode(" + std::to_string(b) + ")");
    if (b != 0xFF) check(got == std::ldexp(1.0f, int(b) - 127), "e8m0_decode(" + std::to_string(b) + ") = 2^(b-127)");
  }
}

// Maxima to test the rules with: powers of two and 1.5 * 2^e with their fp32 neighbours,
// and random bit patterns, over every exponent.
static std::vector<float> maxima() {
  std::vector<float> v;
  for (int e = -149; e <= 127; ++e)
    for (double m : {1.0, 1.5}) {
      const float f = static_cast<float>(std::ldexp(m, e));
      if (f == 0.0f || std::isinf(f)) continue;
      v.push_back(f);
      v.push_back(std::nextafter(f, 0.0f));
      v.push_back(std::nextafter(f, INFINITY));
    }
  std::mt19937 rng(12345);
  for (int i = 0; i < 200000; ++i) v.push_back(from_bits(rng() % 0x7F800000u));
  v.push_back(3.4028234663852886e38f);
  return v;
}

static void check_rules() {
  const float lo = std::ldexp(6.0f, -126);  // M / 6 normal from here on
  int n_ceil = 0;
  for (float m : maxima()) {
    if (!(m > 0.0f) || std::isinf(m) || m == 0.0f) continue;
    const uint32_t ocp = core::mx_scale_byte(m, core::kMxScaleOcp);
    const int biased = int((bits(m) >> 23) & 0xFF);  // 0 for subnormals
    if (biased > 0) {
      const int want = biased - 2 < 0 ? 0 : biased - 2;
      check(ocp == uint32_t(want), "ocp rule at " + std::to_string(m) + ": " + std::to_string(ocp) + " != " +
                                       std::to_string(want));
    }
    if (m >= lo) {
      ++n_ceil;
      const uint32_t want = cutlass::float_ue8m0_t(m / 6.0f).storage;  // IEEE division, then round up
      const uint32_t ceil = core::mx_scale_byte(m, core::kMxScaleCeil);
      const uint32_t tj = core::mx_scale_byte(m, core::kMxScaleTetraJet);
      check(ceil == want && tj == want, "ceil/tetrajet rule at " + std::to_string(m) + " (bits " +
                                            std::to_string(bits(m)) + "): " + std::to_string(ceil) + "/" +
                                            std::to_string(tj) + ", CUTLASS " + std::to_string(want));
    }
  }
  check(n_ceil > 100000, "enough maxima in the normal range: " + std::to_string(n_ceil));
}

int main() {
  check_layouts();
  check_e8m0_decode();
  check_rules();
  std::printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}
