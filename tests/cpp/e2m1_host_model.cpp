// The E2M1 encoders against NVIDIA's host model of the hardware conversion, on the CPU.
//
// On family-specific Blackwell targets the quantization kernels round to E2M1 with
// cvt.rn.satfinite.e2m1x2.f32 (src/quant/codec.cuh); elsewhere with a software form. CUDA's
// cuda_fp4.hpp carries a host implementation of that conversion (__nv_cvt_float_to_fp4 with
// cudaRoundNearest, through double), which is what this file treats as the hardware's rule.
//
//   exhaustive [threads]  every one of the 2^32 float bit patterns: for the 4.28e9 non-NaN
//                         ones, core::e2m1_encode_rn (the CPU reference), the kernels'
//                         software form (quant::encode8_rn, host-compiled) and the host model
//                         give the same code; NaN gives 0x7 in the reference and the model.
//   nan-block             a kernel's RN block encode as it runs on Blackwell (host model of
//                         the instruction on each x * e, then the whole block replaced by
//                         0x7 codes when e is NaN) equals core::encode_block_rn, on blocks
//                         with NaN of either sign and any payload, infinities, zeros of both
//                         signs, huge and tiny values; the replacement is exercised.
//   decode                the decode to BF16 operands (quant::e2m1x8_bf16_words, host-compiled:
//                         byte-permute table lookups) against core::e2m1_decode, for every
//                         16-bit pattern of four codes in either half of the word; and that
//                         its tables' source (the magnitudes' top 16 bits) is exact.
//
// Built by tests/python/test_build_targets.py (any C++17 compiler and the CUDA headers) and
// by ctest. Prints "N passed, N failed"; exit status 0 only if nothing failed.
#include <cuda_fp4.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/block.h"
#include "core/scale.h"
#include "quant/codec.cuh"

namespace {

using nvfp4::core::bits_float;
using nvfp4::core::float_bits;
using nvfp4::core::is_nan;

uint32_t model(float x) {
  return static_cast<uint32_t>(__nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundNearest)) & 0xfu;
}

int g_passed = 0, g_failed = 0;

void check(bool ok, const std::string& what) {
  if (ok) {
    ++g_passed;
  } else {
    ++g_failed;
    std::printf("FAIL: %s\n", what.c_str());
  }
}

// Sweeps bit patterns [lo, hi) in groups of 8; records the first mismatch of each kind.
struct Sweep {
  std::atomic<uint64_t> first_ref{~0ull}, first_sw{~0ull}, first_nan{~0ull};
  std::atomic<uint64_t> non_nan{0};
};

void record(std::atomic<uint64_t>& slot, uint64_t v) {
  uint64_t cur = slot.load();
  while (v < cur && !slot.compare_exchange_weak(cur, v)) {
  }
}

void sweep(Sweep& s, uint64_t lo, uint64_t hi) {
  uint64_t counted = 0;
  for (uint64_t base = lo; base < hi; base += 8) {
    float x[8];
    bool any_nan = false;
    for (int i = 0; i < 8; ++i) {
      x[i] = bits_float(static_cast<uint32_t>(base + i));
      any_nan |= is_nan(x[i]);
    }
    // The software form is exact for non-NaN inputs; NaN blocks are replaced by the caller.
    const uint32_t sw = any_nan ? 0u : nvfp4::detail::quant::encode8_rn(x, 1.0f);
    for (int i = 0; i < 8; ++i) {
      const uint32_t want = nvfp4::core::e2m1_encode_rn(x[i]);
      const uint32_t hw = model(x[i]);
      if (is_nan(x[i])) {
        if (want != 0x7u || hw != 0x7u) record(s.first_nan, base + i);
        continue;
      }
      ++counted;
      if (hw != want) record(s.first_ref, base + i);
      if (!any_nan && ((sw >> (4 * i)) & 0xfu) != want) record(s.first_sw, base + i);
    }
  }
  s.non_nan += counted;
}

std::string describe(uint64_t bits) {
  char buf[160];
  const float x = bits_float(static_cast<uint32_t>(bits));
  std::snprintf(buf, sizeof buf, "x = %a (bits 0x%08x): reference 0x%x, host model 0x%x", static_cast<double>(x),
                static_cast<unsigned>(bits), nvfp4::core::e2m1_encode_rn(x), model(x));
  return buf;
}

void exhaustive(int threads) {
  Sweep s;
  const uint64_t total = 1ull << 32;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    const uint64_t lo = total / threads * t, hi = t + 1 == threads ? total : total / threads * (t + 1);
    pool.emplace_back([&s, lo, hi] { sweep(s, lo & ~7ull, hi & ~7ull); });
  }
  for (auto& th : pool) th.join();
  const uint64_t n = s.non_nan.load();
  check(n == total - 2 * ((1ull << 23) - 1), "non-NaN patterns seen: " + std::to_string(n));
  check(s.first_ref.load() == ~0ull, "reference vs host model, first difference: " + describe(s.first_ref.load()));
  check(s.first_sw.load() == ~0ull, "software encoder vs reference, first difference: " + describe(s.first_sw.load()));
  check(s.first_nan.load() == ~0ull, "NaN must encode as 0x7 in both: " + describe(s.first_nan.load()));
  std::printf("exhaustive: %llu non-NaN floats compared three ways\n", static_cast<unsigned long long>(n));
}

// One block as a Blackwell kernel encodes it with round-to-nearest: the scale from the
// block amax, e from the scale, the instruction on every x * e, and the NaN replacement.
nvfp4::core::Packed16 kernel_block_rn(const float (&v)[16], const nvfp4::core::GlobalScale& g, bool* replaced) {
  const uint8_t sb = nvfp4::core::block_scale_e4m3(nvfp4::core::block_amax16(v), g.enc);
  const float e = nvfp4::core::block_encode_factor(sb, g.dec);
  uint32_t w[2] = {0u, 0u};
  for (int i = 0; i < 16; ++i) w[i >> 3] |= model(v[i] * e) << (4 * (i & 7));
  *replaced = is_nan(e);
  if (*replaced) w[0] = w[1] = 0x77777777u;
  return {w[0], w[1]};
}

void nan_block() {
  std::mt19937 rng(20261123);
  std::uniform_real_distribution<float> uni(-8.0f, 8.0f);
  const float specials[] = {bits_float(0x7fc00000u), bits_float(0xffc00000u), bits_float(0x7f800001u),
                            bits_float(0xff800001u), bits_float(0x7fffffffu), bits_float(0xffffffffu),
                            bits_float(0x7f800000u), bits_float(0xff800000u), 0.0f, -0.0f, 3.0e38f, -3.0e38f,
                            1.0e-40f, -1.0e-40f, 1.0e-30f, 448.0f * 6.0f};
  const float amaxes[] = {1.0f, 6.0f, 2688.0f, 3.0e38f, bits_float(0x7fc00000u), 1.0e-30f};
  int blocks = 0, replaced_blocks = 0, mismatches = 0;
  std::string first;
  for (float amax : amaxes) {
    const nvfp4::core::GlobalScale g = nvfp4::core::make_global_scale(amax);
    for (int trial = 0; trial < 4000; ++trial) {
      float v[16];
      for (float& x : v) x = uni(rng) * (trial % 3 == 0 ? 1.0e-3f : 1.0f);
      const int nspecial = trial % 4;
      for (int k = 0; k < nspecial; ++k) v[rng() % 16] = specials[rng() % (sizeof specials / sizeof specials[0])];
      bool replaced = false;
      const nvfp4::core::Packed16 got = kernel_block_rn(v, g, &replaced);
      const uint8_t sb = nvfp4::core::block_scale_e4m3(nvfp4::core::block_amax16(v), g.enc);
      const nvfp4::core::Packed16 want =
          nvfp4::core::encode_block_rn(v, nvfp4::core::block_encode_factor(sb, g.dec));
      ++blocks;
      replaced_blocks += replaced;
      if (got.lo != want.lo || got.hi != want.hi) {
        if (mismatches++ == 0) {
          char buf[128];
          std::snprintf(buf, sizeof buf, "amax %g trial %d: kernel %08x%08x, reference %08x%08x",
                        static_cast<double>(amax), trial, got.hi, got.lo, want.hi, want.lo);
          first = buf;
        }
      }
    }
  }
  check(mismatches == 0, "Blackwell RN block encode vs reference: " + std::to_string(mismatches) +
                             " blocks differ; first: " + first);
  check(replaced_blocks > blocks / 10, "NaN replacement exercised in " + std::to_string(replaced_blocks) + " of " +
                                           std::to_string(blocks) + " blocks");
  // Without the replacement a NaN block would still need every element to come out as
  // 0x7: record what the host model does with a NaN of each sign.
  check(model(bits_float(0xffc00000u)) == 0x7u && model(bits_float(0x7fc00000u)) == 0x7u,
        "host model encodes -NaN and +NaN as 0x7");
  std::printf("nan-block: %d blocks, %d with the NaN replacement\n", blocks, replaced_blocks);
}

// The bf16 bits of a value that bf16 holds exactly (every E2M1 value): the top half of its float.
uint32_t bf16_bits_exact(float v) { return float_bits(v) >> 16; }

void decode() {
  using nvfp4::detail::quant::e2m1x8_bf16_words;
  // the tables hold each magnitude's bf16 bits (quant::bf16_bits_exact): right only if bf16
  // holds the magnitude exactly, i.e. the low half of its float bits is zero
  bool exact = true;
  for (uint32_t m = 0; m < 8; ++m) exact &= (float_bits(nvfp4::core::e2m1_magnitude(m)) & 0xffffu) == 0u;
  check(exact, "every E2M1 magnitude (core::e2m1_magnitude) is exact in bf16");
  long bad = 0, words = 0;
  std::string first;
  for (uint32_t half = 0; half < 2; ++half) {
    for (uint32_t p = 0; p < 0x10000u; ++p) {
      // the other half holds a fixed mix of codes (0x9e3a or 0x51c7), so that both halves vary
      const uint32_t c = half == 0 ? (p | 0x9e3a0000u) : ((p << 16) | 0x51c7u);
      uint32_t w[4];
      e2m1x8_bf16_words(c, w);
      ++words;
      for (int e = 0; e < 8; ++e) {
        const uint32_t code = (c >> (4 * e)) & 0xfu;
        const uint32_t got = (w[e / 2] >> (16 * (e & 1))) & 0xffffu;
        const uint32_t want = bf16_bits_exact(nvfp4::core::e2m1_decode(code));
        if (got != want && bad++ == 0) {
          char buf[128];
          std::snprintf(buf, sizeof buf, "word %08x element %d: %04x, want %04x", c, e, got, want);
          first = buf;
        }
      }
    }
  }
  check(bad == 0, "e2m1x8_bf16_words vs core::e2m1_decode: " + std::to_string(bad) + " values differ; first: " + first);
  std::printf("decode: %ld words of 8 codes\n", words);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "all";
  if (mode == "exhaustive" || mode == "all") {
    int threads = argc > 2 ? std::atoi(argv[2]) : static_cast<int>(std::thread::hardware_concurrency());
    if (threads < 1) threads = 1;
    exhaustive(threads);
  }
  if (mode == "nan-block" || mode == "all") nan_block();
  if (mode == "decode" || mode == "all") decode();
  std::printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}
