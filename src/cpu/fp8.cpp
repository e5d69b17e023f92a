// CPU reference of nvfp4_fp8_cast: the arithmetic the CUDA kernels must match bit for bit
// (fp32 product, clamp that keeps NaN, round to nearest even into E4M3 / E5M2).
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/common.h"
#include "cpu/io.h"
#include "fp8_internal.h"

namespace nvfp4::detail {
namespace {

using cpu::load;

// |a| rounded to nearest even into a format with `man` mantissa bits and exponent bias
// `bias`; a is finite, >= 0 and at most the format's largest value.
uint8_t encode_magnitude(double a, int man, int bias) {
  if (a == 0.0) return 0;
  const double min_normal = std::ldexp(1.0, 1 - bias);
  if (a < min_normal) {  // subnormal quantum 2^(1 - bias - man); k may reach 2^man (= min normal)
    return static_cast<uint8_t>(std::nearbyint(a / std::ldexp(1.0, 1 - bias - man)));
  }
  int e = 0;
  std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1)
  e -= 1;             // a in [2^e, 2^(e+1))
  double k = std::nearbyint(a / std::ldexp(1.0, e - man));  // in [2^man, 2^(man+1)]
  if (k >= std::ldexp(1.0, man + 1)) {
    k /= 2;
    e += 1;
  }
  return static_cast<uint8_t>(((e + bias) << man) | (static_cast<int>(k) - (1 << man)));
}

uint8_t fp8_encode(float v, bool e5m2) {
  if (std::isnan(v)) return 0x7f;  // a NaN of either format (the sign of a NaN is unspecified)
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const double a = std::fabs(static_cast<double>(v));
  return sign | (e5m2 ? encode_magnitude(a, 2, 15) : encode_magnitude(a, 3, 7));
}

}  // namespace

nvfp4_status_t cpu_fp8_cast(const Fp8Job& job) {
  const int64_t n = job.rows * job.cols;
  float s = 1.0f;
  if (job.scale == nullptr || job.amax != nullptr) {
    float m = 0.0f;
    bool nan = false;
    for (int64_t i = 0; i < n; ++i) {
      const float v = std::fabs(load(job.x, job.dtype, i));
      if (std::isnan(v)) nan = true;
      else if (v > m) m = v;
    }
    const float amax = nan ? std::nanf("") : m;
    if (job.amax && job.amax_accumulate) {
      // the CUDA kernels' atomicMax on the bit patterns, so that both agree on any prior content
      uint32_t have, add;
      std::memcpy(&have, job.amax, 4);
      std::memcpy(&add, &amax, 4);
      if (add > have) *job.amax = amax;
    } else if (job.amax) {
      *job.amax = amax;
    }
    if (job.scale == nullptr) s = fp8_scale(job.scaled_max, amax, 1.0f);
  }
  if (job.scale != nullptr) s = *job.scale;
  if (job.scale_inv) *job.scale_inv = 1.0f / s;
  const float fmax = job.fmax;
  if (n == 0) return NVFP4_SUCCESS;  // (rows may still be huge when cols is 0)
  for (int64_t r = 0; r < job.rows; ++r)
    for (int64_t c = 0; c < job.cols; ++c) {
      float v = load(job.x, job.dtype, r * job.cols + c) * s;
      if (!std::isnan(v)) v = v < -fmax ? -fmax : (v > fmax ? fmax : v);
      const uint8_t b = fp8_encode(v, job.e5m2);
      if (job.q) job.q[r * job.cols + c] = b;
      if (job.qt) job.qt[c * job.rows + r] = b;
    }
  return NVFP4_SUCCESS;
}

nvfp4_status_t cpu_fp8_delayed_update(const Fp8DelayedJob& job) {
  float* h = job.history;
  float a = 0.0f;
  if (job.most_recent) {
    a = h[0];
  } else {
    for (int64_t i = 0; i < job.len; ++i)
      if (!std::isnan(h[i]) && h[i] > a) a = h[i];  // NaN entries count as 0; entries are >= 0
  }
  *job.scale = fp8_scale(job.scaled_max, a, *job.scale);
  const float first = h[0];
  for (int64_t i = 0; i + 1 < job.len; ++i) h[i] = h[i + 1];
  h[job.len - 1] = first;
  h[0] = 0.0f;
  return NVFP4_SUCCESS;
}

}  // namespace nvfp4::detail
