// The harness of the C API tests (test_api_*.cpp, one topic a file, main in
// test_api_main.cpp): checks that count and report, deterministic random inputs, an
// independent NVFP4 decoder written from the format (not from src/), host storage for
// quantized outputs, descriptor builders (including fake CUDA addresses that validation
// must refuse before touching) and the fixture the argument tests share.
//
// No test framework: nothing may be downloaded where these run.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <thread>
#include <vector>

#if defined(NVFP4_TEST_CUDA)
#define NVFP4_HPP_CUDA_RUNTIME 1
#endif
#include "nvfp4/nvfp4.h"
#include "nvfp4/nvfp4.hpp"
#include <initializer_list>

namespace api_test {


inline constexpr int kSkip = 77;  // ctest SKIP_RETURN_CODE
inline int g_checks = 0;
inline int g_failures = 0;
inline bool g_verbose = false;

#define CHECK(cond)                                                            \
  do {                                                                         \
    ++g_checks;                                                                \
    if (!(cond)) {                                                             \
      ++g_failures;                                                            \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                          \
  } while (0)

// A call must return `want`; a failure must leave a message for this thread, and the
// message must contain `needle`, which proves that the intended check fired rather than
// another one tripped by the same malformed descriptor.
#define EXPECT_STATUS(call, want) expect_status((call), (want), "", #call, __LINE__)
#define EXPECT_BAD(call, needle) expect_status((call), NVFP4_ERROR_INVALID_ARGUMENT, (needle), #call, __LINE__)

inline void expect_status(nvfp4_status_t got, nvfp4_status_t want, const char* needle, const char* expr, int line) {
  ++g_checks;
  const std::string msg = nvfp4_last_error();
  if (got != want) {
    ++g_failures;
    std::fprintf(stderr, "line %d: %s\n  returned %d (%s), expected %d (%s); last error: \"%s\"\n", line, expr,
                 static_cast<int>(got), nvfp4_status_string(got), static_cast<int>(want), nvfp4_status_string(want),
                 msg.c_str());
    return;
  }
  if (want != NVFP4_SUCCESS && msg.empty()) {
    ++g_failures;
    std::fprintf(stderr, "line %d: %s\n  failed as expected but nvfp4_last_error() is empty\n", line, expr);
    return;
  }
  if (msg.find(needle) == std::string::npos) {
    ++g_failures;
    std::fprintf(stderr, "line %d: %s\n  message \"%s\" does not mention \"%s\"\n", line, expr, msg.c_str(), needle);
    return;
  }
  if (want == NVFP4_SUCCESS && !msg.empty()) {
    ++g_failures;
    std::fprintf(stderr, "line %d: %s\n  succeeded but left last error \"%s\"\n", line, expr, msg.c_str());
    return;
  }
  if (g_verbose && want != NVFP4_SUCCESS) std::printf("  ok  %-70.70s -> %s\n", expr, msg.c_str());
}

inline int finish(const char* name) {
  std::printf("%s: %d checks, %d failed\n", name, g_checks, g_failures);
  return g_failures ? 1 : 0;
}

// Deterministic inputs (splitmix64 -> Box-Muller), so a failure reproduces exactly.
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed) {}
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return (static_cast<double>(next() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
  float normal() {
    const double u = uniform(), v = uniform();
    return static_cast<float>(std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * v));
  }
};

inline std::vector<float> random_matrix(int64_t rows, int64_t cols, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(rows * cols));
  // Rows of different magnitude exercise block scales far from the tensor amax.
  for (int64_t r = 0; r < rows; ++r) {
    const float row_scale = std::ldexp(1.0f, static_cast<int>(r % 7) - 3);
    for (int64_t c = 0; c < cols; ++c) v[r * cols + c] = rng.normal() * row_scale;
  }
  return v;
}

// ---- an independent NVFP4 decoder (written from the format, not from src/) ----------

inline float e2m1_value(uint8_t code) {
  static const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float m = mag[code & 7];
  return (code & 8) ? -m : m;
}

inline float e4m3_value(uint8_t b) {
  const int exp = (b >> 3) & 0xf, man = b & 7;
  if (exp == 0xf && man == 7) return std::numeric_limits<float>::quiet_NaN();
  const float mag = exp == 0 ? std::ldexp(static_cast<float>(man), -9) : std::ldexp(1.0f + man / 8.0f, exp - 7);
  return (b & 0x80) ? -mag : mag;
}

inline float decode_scale_of(float amax) {
  float s_enc = (448.0f * 6.0f) / amax;
  if (s_enc > std::numeric_limits<float>::max()) s_enc = std::numeric_limits<float>::max();
  if (s_enc == 0.0f) s_enc = 1.0f;
  return 1.0f / s_enc;
}

// x̂ [rows, cols] of one quantized direction held in host memory.
inline std::vector<float> decode(const std::vector<uint8_t>& data, const std::vector<uint8_t>& scales, float amax, int64_t rows,
                          int64_t cols, nvfp4_scale_layout_t layout) {
  const float s_dec = decode_scale_of(amax);
  const int64_t sc = cols / 16;
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const uint8_t byte = data[r * (cols / 2) + c / 2];
      const uint8_t code = (c & 1) ? byte >> 4 : byte & 0xf;
      const int64_t so = layout == NVFP4_SCALES_SWIZZLED ? nvfp4::swizzled_scale_offset(r, c / 16, sc) : r * sc + c / 16;
      out[r * cols + c] = e2m1_value(code) * e4m3_value(scales[so]) * s_dec;
    }
  return out;
}

// Host storage for one quantized direction, and its view.
struct HostQ {
  nvfp4::QuantizedLayout layout;
  std::vector<uint8_t> data, scales;
  float amax = -1.0f;
  nvfp4::QuantizedView view;
  explicit HostQ(const nvfp4::QuantizedLayout& l)
      : layout(l), data(l.data_bytes(), 0xAA), scales(l.scale_bytes(), 0xAA) {
    view = nvfp4::QuantizedView(layout, data.data(), scales.data(), &amax);
  }
  HostQ(const HostQ&) = delete;
};

// ---- descriptors for the argument tests -----------------------------------------------

inline nvfp4_tensor_t desc(void* p, nvfp4_dtype_t dt, std::initializer_list<int64_t> shape,
                    nvfp4_device_type_t dev = NVFP4_DEVICE_CPU) {
  return nvfp4::TensorView(p, dt, shape, nvfp4::Device{dev, 0}).c();
}

// Fake device addresses: validation must reject the call before anything dereferences
// them, so they are never touched.
inline void* fake_cuda(uintptr_t offset = 0) { return reinterpret_cast<void*>(uintptr_t{0x7f0000100000} + offset); }

// A C caller may store any int in an enum field. These put one there as bytes, so the
// test never creates an out-of-range enum value in C++ itself.
template <class E>
inline void set_raw(E& field, int32_t v) {
  static_assert(sizeof(E) == sizeof v, "nvfp4 enums are int-sized");
  std::memcpy(&field, &v, sizeof v);
}


// Descriptor with an arbitrary (possibly absurd) shape, contiguous strides computed
// without overflow; never dereferenced by a call that validation refuses.
inline nvfp4_tensor_t wild(void* p, nvfp4_dtype_t dt, std::initializer_list<int64_t> shape) {
  nvfp4_tensor_t t;
  std::memset(&t, 0, sizeof t);
  t.data = p;
  t.dtype = dt;
  t.ndim = static_cast<int32_t>(shape.size());
  int i = 0;
  for (int64_t d : shape) t.shape[i++] = d;
  for (int k = t.ndim - 1, st = 1; k >= 0; --k) t.strides[k] = st;  // any strides: the check comes first
  t.device_type = NVFP4_DEVICE_CPU;
  return t;
}

// The inputs and outputs every argument test starts from: x [R, C] fp32 on the CPU, the
// default config, and rowwise and columnwise outputs of the right shapes. Each test
// changes one thing and expects the refusal that names it.
struct ArgsFixture {
  static constexpr int64_t R = 32, C = 64;
  std::vector<float> x = random_matrix(R, C, 1);
  nvfp4_tensor_t in = desc(x.data(), NVFP4_DTYPE_FLOAT32, {R, C});
  nvfp4_quant_config_t cfg;
  HostQ row{nvfp4::rowwise_layout(R, C)};
  HostQ col{nvfp4::columnwise_layout(R, C)};
  nvfp4_quantized_t rq = *row.view.get();
  nvfp4_quantized_t cq = *col.view.get();
  ArgsFixture() { nvfp4_quant_config_default(&cfg); }

  // One topic each (test_api_args.cpp, test_api_gemm_args.cpp).
  int quantize();
  int cuda_descriptors();
  int dequantize();
  int swizzle();
  int gemm();
  int cxx_layer();
  int threads();
};

// The other cases, one file each.
int test_hardening();  // test_api_hardening.cpp
int test_caps();       // test_api_caps.cpp
int test_cpu_roundtrip();  // test_api_roundtrip.cpp
int gpu_entry();           // test_api_roundtrip.cpp: test_gpu_roundtrip, or kSkip
int test_fp8();        // test_api_fp8.cpp

}  // namespace api_test

// By-value enum parameters take any int only from C: c_callers.c passes them.
extern "C" {
nvfp4_status_t nvfp4_test_c_dequantize(const nvfp4_quantized_t* q, int scale_layout, nvfp4_tensor_t* out);
const char* nvfp4_test_c_status_string(int status);
int nvfp4_test_c_backend_supported(int backend, int cc);
}
