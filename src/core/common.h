// Shared by host and device code. Nothing here may depend on CUDA headers when
// compiled by a plain C++ compiler: the CPU reference and the kernels include the
// same files so that each format rule has exactly one definition.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define NVFP4_HD __host__ __device__ __forceinline__
#else
#define NVFP4_HD inline
#endif

namespace nvfp4::core {

constexpr float kFltMax = 3.402823466e+38f;
constexpr float kE2M1Max = 6.0f;
constexpr float kE4M3Max = 448.0f;
constexpr int kBlock = 16;  // elements per block scale

NVFP4_HD uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

NVFP4_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// NaN test that survives -ffast-math style flags on either compiler.
NVFP4_HD bool is_nan(float f) { return (float_bits(f) & 0x7fffffffu) > 0x7f800000u; }

NVFP4_HD float abs_f(float f) { return bits_float(float_bits(f) & 0x7fffffffu); }

// Max that lets NaN win, so a NaN anywhere in a block or tensor reaches its scale
// (the amax of torch.amax(abs(x)) propagates NaN the same way).
NVFP4_HD float nan_max(float a, float b) { return (is_nan(a) || a > b) ? a : b; }

// min(v, FLT_MAX) that keeps NaN (std::min/fminf would drop it).
NVFP4_HD float min_flt_max(float v) { return v > kFltMax ? kFltMax : v; }

// clamp(v, -hi, hi) that keeps NaN.
NVFP4_HD float clamp_sym(float v, float hi) { return v > hi ? hi : (v < -hi ? -hi : v); }

// Round to nearest integer, ties to even, for |v| < 2^22 (exact in fp32).
NVFP4_HD float rint_even(float v) {
#if defined(__CUDA_ARCH__)
  return rintf(v);
#else
  // Adding and removing 2^23 rounds with the FPU's default mode (nearest-even).
  volatile float big = 8388608.0f;
  float t = v + big;
  return t - big;
#endif
}

// ---- size arithmetic on caller-provided shapes ----
// Shapes reach the library from C callers as plain int64 values, so every size derived
// from them (element counts, byte counts, padded extents) is computed with these first:
// they report an overflow instead of wrapping (signed overflow is undefined behaviour,
// and a wrapped size once let a [2^62, 4] descriptor pass as empty). Operands must be
// non-negative; a negative operand also reports failure. Kernels and the CPU reference
// then use plain arithmetic on sizes that validation has proven to fit.
constexpr int64_t kInt64Max = 0x7fffffffffffffffll;

NVFP4_HD bool size_mul(int64_t a, int64_t b, int64_t* out) {
  if (a < 0 || b < 0) return false;
  if (a != 0 && b > kInt64Max / a) return false;
  *out = a * b;
  return true;
}

NVFP4_HD bool size_add(int64_t a, int64_t b, int64_t* out) {
  if (a < 0 || b < 0 || a > kInt64Max - b) return false;
  *out = a + b;
  return true;
}

// ---- 16-bit float <-> float32 (bit-level, so host and device agree) ----

NVFP4_HD float bf16_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

NVFP4_HD uint16_t float_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if (is_nan(f)) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN, sign kept
  u += 0x7fffu + ((u >> 16) & 1u);                                 // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

NVFP4_HD float fp16_to_float(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (man << 13));
  if (exp == 0) {
    // subnormal: man * 2^-24, exact in fp32
    float v = static_cast<float>(man) * 5.9604644775390625e-08f;
    return bits_float(float_bits(v) | sign);
  }
  return bits_float(sign | ((exp + 112u) << 23) | (man << 13));
}

NVFP4_HD uint16_t float_to_fp16(float f) {
  uint32_t u = float_bits(f);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u); // rounds to >= 65520 -> inf
  if (a < 0x38800000u) {
    // result is fp16 subnormal (or zero): round a * 2^24 to an integer
    float v = rint_even(bits_float(a) * 16777216.0f);
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(v));
  }
  a += 0xfffu + ((a >> 13) & 1u);  // round mantissa 23 -> 10 bits, nearest even
  return static_cast<uint16_t>(sign | ((a - 0x38000000u) >> 13));
}

}  // namespace nvfp4::core
