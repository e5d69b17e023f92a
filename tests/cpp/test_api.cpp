// ctest for the public C API (nvfp4.h) and its C++ layer (nvfp4.hpp).
//
//   test_api args            argument checking: every malformed call returns the right
//                            status with a message, and nothing crashes
//   test_api caps            version, status strings, capability queries
//   test_api cpu_roundtrip   CPU quantize -> dequantize -> GEMM against an independent
//                            decoder and float64 sums
//   test_api gpu_roundtrip   cudaMalloc'd quantize + GEMM per backend against the CPU
//                            results (exit 77 = skipped when there is no usable GPU)
//
// No test framework: nothing may be downloaded where these run.
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

namespace {

constexpr int kSkip = 77;  // ctest SKIP_RETURN_CODE
int g_checks = 0;
int g_failures = 0;
bool g_verbose = false;

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

void expect_status(nvfp4_status_t got, nvfp4_status_t want, const char* needle, const char* expr, int line) {
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

int finish(const char* name) {
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

std::vector<float> random_matrix(int64_t rows, int64_t cols, uint64_t seed) {
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

float e2m1_value(uint8_t code) {
  static const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float m = mag[code & 7];
  return (code & 8) ? -m : m;
}

float e4m3_value(uint8_t b) {
  const int exp = (b >> 3) & 0xf, man = b & 7;
  if (exp == 0xf && man == 7) return std::numeric_limits<float>::quiet_NaN();
  const float mag = exp == 0 ? std::ldexp(static_cast<float>(man), -9) : std::ldexp(1.0f + man / 8.0f, exp - 7);
  return (b & 0x80) ? -mag : mag;
}

float decode_scale_of(float amax) {
  float s_enc = (448.0f * 6.0f) / amax;
  if (s_enc > std::numeric_limits<float>::max()) s_enc = std::numeric_limits<float>::max();
  if (s_enc == 0.0f) s_enc = 1.0f;
  return 1.0f / s_enc;
}

// x̂ [rows, cols] of one quantized direction held in host memory.
std::vector<float> decode(const std::vector<uint8_t>& data, const std::vector<uint8_t>& scales, float amax, int64_t rows,
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

nvfp4_tensor_t desc(void* p, nvfp4_dtype_t dt, std::initializer_list<int64_t> shape,
                    nvfp4_device_type_t dev = NVFP4_DEVICE_CPU) {
  return nvfp4::TensorView(p, dt, shape, nvfp4::Device{dev, 0}).c();
}

// Fake device addresses: validation must reject the call before anything dereferences
// them, so they are never touched.
void* fake_cuda(uintptr_t offset = 0) { return reinterpret_cast<void*>(uintptr_t{0x7f0000100000} + offset); }

// A C caller may store any int in an enum field. These put one there as bytes, so the
// test never creates an out-of-range enum value in C++ itself.
template <class E>
void set_raw(E& field, int32_t v) {
  static_assert(sizeof(E) == sizeof v, "nvfp4 enums are int-sized");
  std::memcpy(&field, &v, sizeof v);
}
}  // namespace

// By-value enum parameters take any int only from C: c_callers.c passes them.
extern "C" {
nvfp4_status_t nvfp4_test_c_dequantize(const nvfp4_quantized_t* q, int scale_layout, nvfp4_tensor_t* out);
const char* nvfp4_test_c_status_string(int status);
int nvfp4_test_c_backend_supported(int backend, int cc);
}

namespace {

// Descriptor with an arbitrary (possibly absurd) shape, contiguous strides computed
// without overflow; never dereferenced by a call that validation refuses.
nvfp4_tensor_t wild(void* p, nvfp4_dtype_t dt, std::initializer_list<int64_t> shape) {
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

// =====================================================================================
// args
// =====================================================================================

int test_args() {
  const int64_t R = 32, C = 64;
  std::vector<float> x = random_matrix(R, C, 1);
  const nvfp4_tensor_t in = desc(x.data(), NVFP4_DTYPE_FLOAT32, {R, C});
  nvfp4_quant_config_t cfg;
  nvfp4_quant_config_default(&cfg);
  nvfp4_quant_config_default(nullptr);  // documented as a no-op, must not crash
  HostQ row(nvfp4::rowwise_layout(R, C));
  HostQ col(nvfp4::columnwise_layout(R, C));
  nvfp4_quantized_t rq = *row.view.get(), cq = *col.view.get();

  // The well-formed calls first, so every failure below is due to the one thing changed.
  EXPECT_STATUS(nvfp4_quantize(&in, &cfg, &rq, &cq, nullptr), NVFP4_SUCCESS);
  EXPECT_STATUS(nvfp4_quantize(&in, &cfg, &rq, nullptr, nullptr), NVFP4_SUCCESS);
  EXPECT_STATUS(nvfp4_quantize(&in, &cfg, nullptr, &cq, nullptr), NVFP4_SUCCESS);

  // ---- quantize: the recipe options of 0.3 (defaults, values, combinations)
  {
    CHECK(cfg.scale_select == NVFP4_SELECT_NONE && cfg.e4m3_bound == 448u && cfg.amax_mode == NVFP4_AMAX_TENSOR &&
          cfg.amax_in == nullptr);
    nvfp4_quant_config_t c = cfg;
    c.scale_select = NVFP4_SELECT_4OVER6_MSE;
    c.e4m3_bound = 256;
    EXPECT_STATUS(nvfp4_quantize(&in, &c, &rq, &cq, nullptr), NVFP4_SUCCESS);
    c.e4m3_bound = 300;
    EXPECT_BAD(nvfp4_quantize(&in, &c, &rq, &cq, nullptr), "cfg.e4m3_bound");
    c = cfg;
    c.e4m3_bound = 256;  // 256 without 4over6
    EXPECT_BAD(nvfp4_quantize(&in, &c, &rq, &cq, nullptr), "cfg.e4m3_bound");
    c = cfg;
    const int32_t bad_select = 3;
    std::memcpy(&c.scale_select, &bad_select, sizeof bad_select);
    EXPECT_BAD(nvfp4_quantize(&in, &c, &rq, &cq, nullptr), "cfg.scale_select");
    c = cfg;
    c.scale_select = NVFP4_SELECT_4OVER6_MAE;
    c.rounding = NVFP4_ROUND_STOCHASTIC;
    EXPECT_BAD(nvfp4_quantize(&in, &c, &rq, &cq, nullptr), "cfg.scale_select");
    c = cfg;
    c.amax_mode = NVFP4_AMAX_GIVEN;
    EXPECT_BAD(nvfp4_quantize(&in, &c, &rq, &cq, nullptr), "cfg.amax_in");
    float given = 2.5f;
    c.amax_in = &given;
    EXPECT_STATUS(nvfp4_quantize(&in, &c, &rq, &cq, nullptr), NVFP4_SUCCESS);
    CHECK(*static_cast<float*>(rq.amax.data) == 2.5f && *static_cast<float*>(cq.amax.data) == 2.5f);
    c = cfg;
    c.amax_in = &given;  // set but not used: refused rather than ignored
    EXPECT_BAD(nvfp4_quantize(&in, &c, &rq, &cq, nullptr), "cfg.amax_in");
    c = cfg;
    c.amax_mode = NVFP4_AMAX_ROWS;  // needs one amax per row
    EXPECT_BAD(nvfp4_quantize(&in, &c, &rq, nullptr, nullptr), "rowwise.amax");
    std::vector<float> row_amax(R), col_amax(C);
    nvfp4_quantized_t rr = rq, cr = cq;
    rr.amax = desc(row_amax.data(), NVFP4_DTYPE_FLOAT32, {R});
    cr.amax = desc(col_amax.data(), NVFP4_DTYPE_FLOAT32, {C});
    EXPECT_STATUS(nvfp4_quantize(&in, &c, &rr, &cr, nullptr), NVFP4_SUCCESS);
    float m0 = 0.0f, c0 = 0.0f;
    for (int64_t j = 0; j < C; ++j) m0 = std::max(m0, std::fabs(x[j]));
    for (int64_t i = 0; i < R; ++i) c0 = std::max(c0, std::fabs(x[i * C]));
    CHECK(row_amax[0] == m0 && col_amax[0] == c0);
    c.rht = NVFP4_RHT_COLUMNWISE;
    EXPECT_BAD(nvfp4_quantize(&in, &c, &rr, &cr, nullptr), "cfg.amax_mode");
    c = cfg;
    c.rounding = NVFP4_ROUND_EDEN;  // needs the RHT on every output
    EXPECT_BAD(nvfp4_quantize(&in, &c, &rq, &cq, nullptr), "cfg.rht");
    c.rht = NVFP4_RHT_ROWWISE | NVFP4_RHT_COLUMNWISE;
    EXPECT_STATUS(nvfp4_quantize(&in, &c, &rq, &cq, nullptr), NVFP4_SUCCESS);
    c.block = NVFP4_BLOCK_2D;
    c.rht = 0;
    EXPECT_BAD(nvfp4_quantize(&in, &c, &rq, &cq, nullptr), "cfg.rounding");
  }

  // ---- quantize: null pointers
  EXPECT_BAD(nvfp4_quantize(nullptr, &cfg, &rq, &cq, nullptr), "input");
  EXPECT_BAD(nvfp4_quantize(&in, nullptr, &rq, &cq, nullptr), "cfg");
  EXPECT_BAD(nvfp4_quantize(&in, &cfg, nullptr, nullptr, nullptr), "at least one output");
  {
    nvfp4_tensor_t t = in;
    t.data = nullptr;
    EXPECT_BAD(nvfp4_quantize(&t, &cfg, &rq, nullptr, nullptr), "input: null data");
    nvfp4_quantized_t q = rq;
    q.data.data = nullptr;
    EXPECT_BAD(nvfp4_quantize(&in, &cfg, &q, nullptr, nullptr), "rowwise.data: null data");
    q = rq;
    q.amax.data = nullptr;
    EXPECT_BAD(nvfp4_quantize(&in, &cfg, &q, nullptr, nullptr), "rowwise.amax: null data");
    q = cq;
    q.scales.data = nullptr;
    EXPECT_BAD(nvfp4_quantize(&in, &cfg, nullptr, &q, nullptr), "columnwise.scales: null data");
  }
  // ---- quantize: dtypes
  for (nvfp4_dtype_t dt : {NVFP4_DTYPE_UINT8, NVFP4_DTYPE_E4M3, NVFP4_DTYPE_FLOAT64}) {
    nvfp4_tensor_t t = in;
    t.dtype = dt;
    EXPECT_BAD(nvfp4_quantize(&t, &cfg, &rq, nullptr, nullptr), "input: dtype");
  }
  for (int dt : {42, -1}) {
    nvfp4_tensor_t t = in;
    set_raw(t.dtype, dt);
    EXPECT_BAD(nvfp4_quantize(&t, &cfg, &rq, nullptr, nullptr), "unknown dtype");
  }
  {
    nvfp4_quantized_t q = rq;
    q.data.dtype = NVFP4_DTYPE_FLOAT32;
    EXPECT_BAD(nvfp4_quantize(&in, &cfg, &q, nullptr, nullptr), "rowwise.data: dtype");
    q = rq;
    q.scales.dtype = NVFP4_DTYPE_FLOAT16;
    EXPECT_BAD(nvfp4_quantize(&in, &cfg, &q, nullptr, nullptr), "rowwise.scales: dtype");
    q = rq;
    q.amax.dtype = NVFP4_DTYPE_FLOAT16;
    EXPECT_BAD(nvfp4_quantize(&in, &cfg, &q, nullptr, nullptr), "rowwise.amax");
  }
  // ---- quantize: ndim and shapes
  for (int nd : {-1, 9, 1000}) {
    nvfp4_tensor_t t = in;
    t.ndim = nd;
    EXPECT_BAD(nvfp4_quantize(&t, &cfg, &rq, nullptr, nullptr), "ndim");
  }
  {
    nvfp4_tensor_t t = desc(x.data(), NVFP4_DTYPE_FLOAT32, {});
    EXPECT_BAD(nvfp4_quantize(&t, &cfg, &rq, nullptr, nullptr), "at least 1 dimension");
    t = in;
    t.shape[0] = -32;
    EXPECT_BAD(nvfp4_quantize(&t, &cfg, &rq, nullptr, nullptr), "negative dimension");
    // Last dim not a multiple of 16 (the outputs are never reached).
    t = desc(x.data(), NVFP4_DTYPE_FLOAT32, {R, 24});
    HostQ r32(nvfp4::rowwise_layout(R, 32));
    EXPECT_BAD(nvfp4_quantize(&t, &cfg, r32.view.get(), nullptr, nullptr), "multiple of 16");
    EXPECT_BAD(nvfp4_quantize(&t, &cfg, nullptr, &cq, nullptr), "multiple of 16");
    // Outputs sized for another input.
    HostQ wide(nvfp4::rowwise_layout(R, 2 * C)), tall(nvfp4::rowwise_layout(R + 1, C));
    nvfp4_quantized_t q = rq;
    q.data = wide.view.get()->data;
    EXPECT_BAD(nvfp4_quantize(&in, &cfg, &q, nullptr, nullptr), "rowwise.data: expected shape [32, 32]");
    q = rq;
    q.data = tall.view.get()->data;
    EXPECT_BAD(nvfp4_quantize(&in, &cfg, &q, nullptr, nullptr), "rowwise.data: expected shape [32, 32]");
    q = rq;
    q.data = desc(row.data.data(), NVFP4_DTYPE_UINT8, {R, C / 2, 1});
    EXPECT_BAD(nvfp4_quantize(&in, &cfg, &q, nullptr, nullptr), "rowwise.data: expected shape");
    // Linear-shaped scales for a swizzled config, and the converse.
    HostQ lin(nvfp4::rowwise_layout(R, C, NVFP4_SCALES_LINEAR));
    EXPECT_BAD(nvfp4_quantize(&in, &cfg, lin.view.get(), nullptr, nullptr), "rowwise.scales: expected shape [128, 4]");
    nvfp4_quant_config_t lcfg = cfg;
    lcfg.scale_layout = NVFP4_SCALES_LINEAR;
    EXPECT_BAD(nvfp4_quantize(&in, &lcfg, &rq, nullptr, nullptr), "rowwise.scales: expected shape [32, 4]");
    EXPECT_STATUS(nvfp4_quantize(&in, &lcfg, lin.view.get(), nullptr, nullptr), NVFP4_SUCCESS);
    // Columnwise outputs hold x^T padded to roundup(R,16) = 48 columns for R = 37.
    const nvfp4_tensor_t in37 = desc(x.data(), NVFP4_DTYPE_FLOAT32, {37, 16});
    HostQ c37(nvfp4::columnwise_layout(37, 16)), c37wrong(nvfp4::rowwise_layout(16, 32));
    EXPECT_STATUS(nvfp4_quantize(&in37, &cfg, nullptr, c37.view.get(), nullptr), NVFP4_SUCCESS);
    EXPECT_BAD(nvfp4_quantize(&in37, &cfg, nullptr, c37wrong.view.get(), nullptr), "columnwise.data: expected shape [16, 24]");
    q = rq;
    q.amax = desc(&row.amax, NVFP4_DTYPE_FLOAT32, {2});
    EXPECT_BAD(nvfp4_quantize(&in, &cfg, &q, nullptr, nullptr), "rowwise.amax");
  }
  // ---- quantize: non-contiguous strides (a transposed view, a padded row pitch)
  {
    nvfp4_tensor_t t = desc(x.data(), NVFP4_DTYPE_FLOAT32, {C, R});
    t.strides[0] = 1;
    t.strides[1] = C;
    HostQ tq(nvfp4::rowwise_layout(C, R));
    EXPECT_BAD(nvfp4_quantize(&t, &cfg, tq.view.get(), nullptr, nullptr), "input: must be contiguous");
    t = desc(x.data(), NVFP4_DTYPE_FLOAT32, {R / 2, C});
    t.strides[0] = 2 * C;
    HostQ hq(nvfp4::rowwise_layout(R / 2, C));
    EXPECT_BAD(nvfp4_quantize(&t, &cfg, hq.view.get(), nullptr, nullptr), "input: must be contiguous");
    nvfp4_quantized_t q = rq;
    q.scales.strides[1] = 2;
    EXPECT_BAD(nvfp4_quantize(&in, &cfg, &q, nullptr, nullptr), "rowwise.scales: must be contiguous");
    // Size-1 dims may carry any stride: a [1, R, C] view with a junk outer stride is fine.
    t = desc(x.data(), NVFP4_DTYPE_FLOAT32, {1, R, C});
    t.strides[0] = 12345;
    EXPECT_STATUS(nvfp4_quantize(&t, &cfg, &rq, nullptr, nullptr), NVFP4_SUCCESS);
  }
  // ---- quantize: bad enums and combinations
  {
    nvfp4_quant_config_t c = cfg;
    set_raw(c.block, 5);
    EXPECT_BAD(nvfp4_quantize(&in, &c, &rq, nullptr, nullptr), "cfg.block");
    c = cfg;
    set_raw(c.rounding, 3);
    EXPECT_BAD(nvfp4_quantize(&in, &c, &rq, nullptr, nullptr), "cfg.rounding");
    c = cfg;
    set_raw(c.scale_layout, 2);
    EXPECT_BAD(nvfp4_quantize(&in, &c, &rq, nullptr, nullptr), "cfg.scale_layout");
    c = cfg;
    c.rht = 4u;
    EXPECT_BAD(nvfp4_quantize(&in, &c, &rq, nullptr, nullptr), "cfg.rht");
    c = cfg;
    c.block = NVFP4_BLOCK_2D;
    c.rht = NVFP4_RHT_COLUMNWISE;
    EXPECT_BAD(nvfp4_quantize(&in, &c, &rq, &cq, nullptr), "1D blocks only");
    nvfp4_tensor_t t = in;
    set_raw(t.device_type, 7);
    EXPECT_BAD(nvfp4_quantize(&t, &cfg, &rq, nullptr, nullptr), "device type");
  }
  // Empty input: valid, amax defined as 0.
  {
    nvfp4_tensor_t t = desc(x.data(), NVFP4_DTYPE_FLOAT32, {0, C});
    HostQ e(nvfp4::rowwise_layout(0, C));
    EXPECT_STATUS(nvfp4_quantize(&t, &cfg, e.view.get(), nullptr, nullptr), NVFP4_SUCCESS);
    CHECK(e.amax == 0.0f);
  }

  // ---- CUDA descriptors: validation must reject these before any device access (the
  // addresses are fake; touching them would crash).
  const bool cuda_build = !nvfp4::build_cuda_archs().empty();
  {
    const nvfp4::Device gpu = nvfp4::Device::cuda(0);
    const nvfp4::QuantizedLayout rl = nvfp4::rowwise_layout(R, C), cl = nvfp4::columnwise_layout(R, C);
    nvfp4_tensor_t gin = desc(fake_cuda(0), NVFP4_DTYPE_BFLOAT16, {R, C}, NVFP4_DEVICE_CUDA);
    nvfp4::QuantizedView gr(rl, fake_cuda(0x10000), fake_cuda(0x20000), static_cast<float*>(fake_cuda(0x30000)), gpu);
    nvfp4::QuantizedView gc(cl, fake_cuda(0x40000), fake_cuda(0x50000), static_cast<float*>(fake_cuda(0x60000)), gpu);
    for (uintptr_t odd : {uintptr_t{1}, uintptr_t{2}, uintptr_t{8}}) {
      nvfp4_tensor_t t = gin;
      t.data = fake_cuda(odd);
      EXPECT_BAD(nvfp4_quantize(&t, &cfg, gr.get(), gc.get(), nullptr), "input: CUDA pointer must be 16-byte aligned");
    }
    nvfp4_quantized_t q = *gr.get();
    q.data.data = fake_cuda(0x10001);
    EXPECT_BAD(nvfp4_quantize(&gin, &cfg, &q, gc.get(), nullptr), "rowwise.data: CUDA pointer must be 16-byte aligned");
    q = *gr.get();
    q.scales.data = fake_cuda(0x20004);
    EXPECT_BAD(nvfp4_quantize(&gin, &cfg, &q, gc.get(), nullptr), "rowwise.scales: CUDA pointer");
    q = *gr.get();
    q.amax.data = fake_cuda(0x30004);
    EXPECT_BAD(nvfp4_quantize(&gin, &cfg, &q, gc.get(), nullptr), "rowwise.amax: CUDA pointer");
    q = *gc.get();
    q.data.data = fake_cuda(0x40003);
    EXPECT_BAD(nvfp4_quantize(&gin, &cfg, gr.get(), &q, nullptr), "columnwise.data: CUDA pointer");
    // Mixed devices: CPU input with CUDA outputs, and the converse; two CUDA devices.
    EXPECT_BAD(nvfp4_quantize(&in, &cfg, gr.get(), nullptr, nullptr), "same device");
    EXPECT_BAD(nvfp4_quantize(&gin, &cfg, &rq, nullptr, nullptr), "same device");
    q = *gr.get();
    q.scales.device_id = 1;
    EXPECT_BAD(nvfp4_quantize(&gin, &cfg, &q, nullptr, nullptr), "same device");
    // Without CUDA in the build, a well-formed CUDA call is "not supported", not invalid.
    if (!cuda_build) EXPECT_STATUS(nvfp4_quantize(&gin, &cfg, gr.get(), gc.get(), nullptr), NVFP4_ERROR_NOT_SUPPORTED);
    // Dequantize into a misaligned CUDA output.
    nvfp4_tensor_t out = desc(fake_cuda(0x70008), NVFP4_DTYPE_FLOAT32, {R, C}, NVFP4_DEVICE_CUDA);
    EXPECT_BAD(nvfp4_dequantize(gr.get(), NVFP4_SCALES_SWIZZLED, &out, nullptr), "out: CUDA pointer");
  }

  // ---- dequantize
  {
    std::vector<float> out(static_cast<size_t>(R * C));
    nvfp4_tensor_t o = desc(out.data(), NVFP4_DTYPE_FLOAT32, {R, C});
    EXPECT_STATUS(nvfp4_dequantize(&rq, NVFP4_SCALES_SWIZZLED, &o, nullptr), NVFP4_SUCCESS);
    EXPECT_BAD(nvfp4_dequantize(nullptr, NVFP4_SCALES_SWIZZLED, &o, nullptr), "q");
    EXPECT_BAD(nvfp4_dequantize(&rq, NVFP4_SCALES_SWIZZLED, nullptr, nullptr), "out");
    EXPECT_BAD(nvfp4_test_c_dequantize(&rq, 9, &o), "scale_layout");
    EXPECT_BAD(nvfp4_dequantize(&rq, NVFP4_SCALES_LINEAR, &o, nullptr), "q.scales: expected shape");
    nvfp4_tensor_t bad = o;
    bad.dtype = NVFP4_DTYPE_UINT8;
    EXPECT_BAD(nvfp4_dequantize(&rq, NVFP4_SCALES_SWIZZLED, &bad, nullptr), "out: dtype");
    bad = desc(out.data(), NVFP4_DTYPE_FLOAT32, {R, C - 16});
    EXPECT_BAD(nvfp4_dequantize(&rq, NVFP4_SCALES_SWIZZLED, &bad, nullptr), "out: expected shape");
    nvfp4_quantized_t q = rq;
    q.data = desc(row.data.data(), NVFP4_DTYPE_UINT8, {R, 3});  // 6 values a row: not whole blocks
    EXPECT_BAD(nvfp4_dequantize(&q, NVFP4_SCALES_SWIZZLED, &o, nullptr), "multiple of 16");
    q.data = desc(row.data.data(), NVFP4_DTYPE_UINT8, {R * C / 2});
    EXPECT_BAD(nvfp4_dequantize(&q, NVFP4_SCALES_SWIZZLED, &o, nullptr), "2 dimensions");
  }

  // ---- swizzle
  {
    std::vector<uint8_t> lin(static_cast<size_t>(R * (C / 16)), 1);
    std::vector<uint8_t> swz(static_cast<size_t>(nvfp4::round_up(R, 128) * nvfp4::round_up(C / 16, 4)));
    nvfp4_tensor_t l = desc(lin.data(), NVFP4_DTYPE_E4M3, {R, C / 16});
    nvfp4_tensor_t s = desc(swz.data(), NVFP4_DTYPE_UINT8, {nvfp4::round_up(R, 128), nvfp4::round_up(C / 16, 4)});
    EXPECT_STATUS(nvfp4_swizzle_scales(&l, &s, nullptr), NVFP4_SUCCESS);
    EXPECT_STATUS(nvfp4_unswizzle_scales(&s, &l, nullptr), NVFP4_SUCCESS);
    EXPECT_BAD(nvfp4_swizzle_scales(nullptr, &s, nullptr), "linear");
    EXPECT_BAD(nvfp4_swizzle_scales(&l, nullptr, nullptr), "swizzled");
    EXPECT_BAD(nvfp4_unswizzle_scales(nullptr, &l, nullptr), "swizzled");
    nvfp4_tensor_t b = l;
    b.dtype = NVFP4_DTYPE_FLOAT32;
    EXPECT_BAD(nvfp4_swizzle_scales(&b, &s, nullptr), "dtype");
    b = desc(swz.data(), NVFP4_DTYPE_UINT8, {R, C / 16});  // linear-shaped "swizzled" output
    EXPECT_BAD(nvfp4_swizzle_scales(&l, &b, nullptr), "swizzled: expected shape [128, 4]");
    b = desc(lin.data(), NVFP4_DTYPE_E4M3, {R * (C / 16)});
    EXPECT_BAD(nvfp4_swizzle_scales(&b, &s, nullptr), "2 dimensions");
    EXPECT_BAD(nvfp4_unswizzle_scales(&s, &b, nullptr), "2 dimensions");
  }

  // ---- GEMM
  {
    const int64_t M = R, N = 48, K = C;
    HostQ bq(nvfp4::rowwise_layout(N, K));
    std::vector<float> w = random_matrix(N, K, 2);
    nvfp4_tensor_t win = desc(w.data(), NVFP4_DTYPE_FLOAT32, {N, K});
    EXPECT_STATUS(nvfp4_quantize(&win, &cfg, bq.view.get(), nullptr, nullptr), NVFP4_SUCCESS);
    std::vector<float> d(static_cast<size_t>(M * N)), c(static_cast<size_t>(M * N), 1.0f), bias(N + 1, 0.5f);
    nvfp4_tensor_t dt = desc(d.data(), NVFP4_DTYPE_FLOAT32, {M, N});
    nvfp4_tensor_t ct = desc(c.data(), NVFP4_DTYPE_FLOAT32, {M, N});
    nvfp4_tensor_t bt = desc(bias.data(), NVFP4_DTYPE_FLOAT32, {N});
    nvfp4_gemm_args_t good;
    std::memset(&good, 0, sizeof good);
    good.a = &rq;
    good.b = bq.view.get();
    good.scale_layout = NVFP4_SCALES_SWIZZLED;
    good.d = &dt;
    good.backend = NVFP4_BACKEND_AUTO;
    size_t ws = 123;
    EXPECT_STATUS(nvfp4_gemm_workspace_size(&good, &ws), NVFP4_SUCCESS);
    CHECK(ws == 0);  // the CPU reference needs none
    EXPECT_STATUS(nvfp4_gemm(&good, nullptr, 0, nullptr), NVFP4_SUCCESS);
    nvfp4_gemm_args_t g = good;
    g.backend = NVFP4_BACKEND_REFERENCE;
    g.c = &ct;
    g.beta = 0.5f;
    g.bias = &bt;
    EXPECT_STATUS(nvfp4_gemm(&g, nullptr, 0, nullptr), NVFP4_SUCCESS);

    EXPECT_BAD(nvfp4_gemm(nullptr, nullptr, 0, nullptr), "args");
    EXPECT_BAD(nvfp4_gemm_workspace_size(nullptr, &ws), "args");
    EXPECT_BAD(nvfp4_gemm_workspace_size(&good, nullptr), "bytes");
    g = good;
    g.a = nullptr;
    EXPECT_BAD(nvfp4_gemm(&g, nullptr, 0, nullptr), "a: null");
    EXPECT_BAD(nvfp4_gemm_workspace_size(&g, &ws), "a: null");
    g = good;
    g.b = nullptr;
    EXPECT_BAD(nvfp4_gemm(&g, nullptr, 0, nullptr), "b: null");
    g = good;
    g.d = nullptr;
    EXPECT_BAD(nvfp4_gemm(&g, nullptr, 0, nullptr), "d: null");
    g = good;
    set_raw(g.backend, 9);
    EXPECT_BAD(nvfp4_gemm(&g, nullptr, 0, nullptr), "backend");
    g = good;
    set_raw(g.scale_layout, 7);
    EXPECT_BAD(nvfp4_gemm(&g, nullptr, 0, nullptr), "scale_layout");
    g = good;
    g.scale_layout = NVFP4_SCALES_LINEAR;  // the operands' scales are swizzled-shaped
    EXPECT_BAD(nvfp4_gemm(&g, nullptr, 0, nullptr), "a.scales: expected shape");
    g = good;
    g.beta = 1.0f;  // beta without c
    EXPECT_BAD(nvfp4_gemm(&g, nullptr, 0, nullptr), "beta");
    g = good;
    nvfp4_tensor_t bad = desc(bias.data(), NVFP4_DTYPE_FLOAT32, {N + 1});
    g.bias = &bad;
    EXPECT_BAD(nvfp4_gemm(&g, nullptr, 0, nullptr), "bias: expected shape [48]");
    bad = desc(bias.data(), NVFP4_DTYPE_UINT8, {N});
    EXPECT_BAD(nvfp4_gemm(&g, nullptr, 0, nullptr), "bias: dtype");
    g = good;
    bad = desc(c.data(), NVFP4_DTYPE_FLOAT32, {N, M});
    g.c = &bad;
    g.beta = 1.0f;
    EXPECT_BAD(nvfp4_gemm(&g, nullptr, 0, nullptr), "c: expected shape");
    g = good;
    bad = desc(d.data(), NVFP4_DTYPE_FLOAT32, {M, N - 1});
    g.d = &bad;
    EXPECT_BAD(nvfp4_gemm(&g, nullptr, 0, nullptr), "d: expected shape");
    bad = desc(d.data(), NVFP4_DTYPE_UINT8, {M, N});
    EXPECT_BAD(nvfp4_gemm(&g, nullptr, 0, nullptr), "d: dtype");
    bad = desc(d.data(), NVFP4_DTYPE_FLOAT64, {M, N});
    EXPECT_BAD(nvfp4_gemm(&g, nullptr, 0, nullptr), "d: dtype");
    // K mismatch between A and B; K not a multiple of 16.
    HostQ b32(nvfp4::rowwise_layout(N, 32));
    g = good;
    g.b = b32.view.get();
    EXPECT_BAD(nvfp4_gemm(&g, nullptr, 0, nullptr), "K mismatch");
    nvfp4_quantized_t a8 = rq, b8 = *bq.view.get();
    a8.data = desc(row.data.data(), NVFP4_DTYPE_UINT8, {M, 4});
    b8.data = desc(bq.data.data(), NVFP4_DTYPE_UINT8, {N, 4});
    g = good;
    g.a = &a8;
    g.b = &b8;
    EXPECT_BAD(nvfp4_gemm(&g, nullptr, 0, nullptr), "multiple of 16");
    nvfp4_quantized_t a1 = rq;
    a1.data = desc(row.data.data(), NVFP4_DTYPE_UINT8, {M * K / 2});
    g = good;
    g.a = &a1;
    EXPECT_BAD(nvfp4_gemm(&g, nullptr, 0, nullptr), "2 dimensions");
    // A GPU backend for CPU tensors: a valid request that this call cannot serve.
    g = good;
    g.backend = NVFP4_BACKEND_CUTLASS;
    EXPECT_STATUS(nvfp4_gemm(&g, nullptr, 0, nullptr), NVFP4_ERROR_NOT_SUPPORTED);
    g.backend = NVFP4_BACKEND_CUDNN;
    EXPECT_STATUS(nvfp4_gemm(&g, nullptr, 0, nullptr), NVFP4_ERROR_NOT_SUPPORTED);
    // Misaligned CUDA pointers, everything else CUDA and aligned.
    const nvfp4::Device gpu = nvfp4::Device::cuda(0);
    nvfp4::QuantizedView ga(nvfp4::rowwise_layout(M, K), fake_cuda(0x10000), fake_cuda(0x20000),
                            static_cast<float*>(fake_cuda(0x30000)), gpu);
    nvfp4::QuantizedView gb(nvfp4::rowwise_layout(N, K), fake_cuda(0x40000), fake_cuda(0x50000),
                            static_cast<float*>(fake_cuda(0x60000)), gpu);
    nvfp4_tensor_t gd = desc(fake_cuda(0x70002), NVFP4_DTYPE_BFLOAT16, {M, N}, NVFP4_DEVICE_CUDA);
    g = good;
    g.a = ga.get();
    g.b = gb.get();
    g.d = &gd;
    g.backend = NVFP4_BACKEND_CUTLASS;
    EXPECT_BAD(nvfp4_gemm_workspace_size(&g, &ws), "d: CUDA pointer");
    EXPECT_BAD(nvfp4_gemm(&g, nullptr, 0, nullptr), "d: CUDA pointer");
    nvfp4_quantized_t gbad = *gb.get();
    gbad.scales.data = fake_cuda(0x50001);
    gd.data = fake_cuda(0x70000);
    g.b = &gbad;
    EXPECT_BAD(nvfp4_gemm(&g, nullptr, 0, nullptr), "b.scales: CUDA pointer");
    gbad = *gb.get();
    gbad.amax.data = fake_cuda(0x60008);
    EXPECT_BAD(nvfp4_gemm(&g, nullptr, 0, nullptr), "b.amax: CUDA pointer");
    // CPU A with CUDA B and D.
    g = good;
    g.b = gb.get();
    g.d = &gd;
    EXPECT_BAD(nvfp4_gemm(&g, nullptr, 0, nullptr), "same device");
  }

  // ---- the C++ layer throws nvfp4::Error with the status and the library's message.
  {
    bool threw = false;
    try {
      nvfp4::quantize(nvfp4::TensorView(x.data(), NVFP4_DTYPE_UINT8, {R, C}), nvfp4::QuantConfig(), &row.view, nullptr);
    } catch (const nvfp4::Error& e) {
      threw = true;
      CHECK(e.status() == NVFP4_ERROR_INVALID_ARGUMENT);
      CHECK(std::string(e.what()).find("input: dtype") != std::string::npos);
      if (g_verbose) std::printf("  ok  nvfp4::Error: %s\n", e.what());
    }
    CHECK(threw);
    threw = false;
    try {
      (void)nvfp4::rowwise_layout(4, 24);
    } catch (const nvfp4::Error& e) {
      threw = e.status() == NVFP4_ERROR_INVALID_ARGUMENT;
    }
    CHECK(threw);
    threw = false;
    try {
      nvfp4::TensorView(x.data(), NVFP4_DTYPE_FLOAT32, {1, 1, 1, 1, 1, 1, 1, 1, 1});
    } catch (const nvfp4::Error&) {
      threw = true;
    }
    CHECK(threw);
    threw = false;
    try {
      std::vector<unsigned char> small(16);
      (void)nvfp4::QuantizedView::carve(nvfp4::rowwise_layout(R, C), small.data(), small.size());
    } catch (const nvfp4::Error&) {
      threw = true;
    }
    CHECK(threw);
  }

  // ---- the message is per thread, and a successful call clears it.
  {
    EXPECT_BAD(nvfp4_quantize(nullptr, &cfg, &rq, nullptr, nullptr), "input");
    const std::string mine = nvfp4_last_error();
    std::string theirs_before = "unset", theirs_after;
    std::thread t([&] {
      theirs_before = nvfp4_last_error();
      nvfp4_quant_config_t c = cfg;
      set_raw(c.rounding, 9);
      (void)nvfp4_quantize(&in, &c, &rq, nullptr, nullptr);
      theirs_after = nvfp4_last_error();
    });
    t.join();
    CHECK(theirs_before.empty());
    CHECK(!theirs_after.empty() && theirs_after != mine);
    CHECK(mine == nvfp4_last_error());
    EXPECT_STATUS(nvfp4_quantize(&in, &cfg, &rq, nullptr, nullptr), NVFP4_SUCCESS);
    CHECK(std::string(nvfp4_last_error()).empty());
  }
  return finish("args");
}


// Sizes past int64, raw enum values, CPU alignment, overlapping buffers, the workspace
// and cfg.offset_device: the checks added so that no descriptor can pass as something
// it is not.
int test_hardening() {
  const int64_t R = 32, C = 64;
  const int64_t big = int64_t{1} << 62, max = INT64_MAX;
  std::vector<float> x = random_matrix(R, C, 3);
  const nvfp4_tensor_t in = desc(x.data(), NVFP4_DTYPE_FLOAT32, {R, C});
  nvfp4_quant_config_t cfg;
  nvfp4_quant_config_default(&cfg);
  HostQ row(nvfp4::rowwise_layout(R, C));
  HostQ col(nvfp4::columnwise_layout(R, C));
  nvfp4_quantized_t rq = *row.view.get(), cq = *col.view.get();
  EXPECT_STATUS(nvfp4_quantize(&in, &cfg, &rq, &cq, nullptr), NVFP4_SUCCESS);

  // ---- int64 overflow in shapes: refused, never "empty", never a wrapped size.
  {
    // [2^62, 4] with a null pointer: numel wraps to 0 without the check.
    nvfp4_tensor_t lin = wild(nullptr, NVFP4_DTYPE_UINT8, {big, 4});
    std::vector<uint8_t> s(512);
    nvfp4_tensor_t swz = desc(s.data(), NVFP4_DTYPE_UINT8, {128, 4});
    EXPECT_BAD(nvfp4_swizzle_scales(&lin, &swz, nullptr), "linear: shape [4611686018427387904, 4] has more elements");
    EXPECT_BAD(nvfp4_unswizzle_scales(&swz, &lin, nullptr), "linear: shape");
    // [INT64_MAX, 0] is empty, but its swizzled extent roundup(INT64_MAX, 128) is not countable.
    lin = wild(nullptr, NVFP4_DTYPE_UINT8, {max, 0});
    EXPECT_BAD(nvfp4_swizzle_scales(&lin, &swz, nullptr), "linear: shape [9223372036854775807, 0] is too large");
    // quantize [2^60 + 1, 16] on a real 16-element buffer: numel wraps to 16 without the check.
    nvfp4_tensor_t t = wild(x.data(), NVFP4_DTYPE_FLOAT32, {(int64_t{1} << 60) + 1, 16});
    EXPECT_BAD(nvfp4_quantize(&t, &cfg, &rq, nullptr, nullptr), "input: shape [1152921504606846977, 16] has more elements");
    // 2^58 x 16 float32 elements fit in int64, their bytes do not.
    t = wild(x.data(), NVFP4_DTYPE_FLOAT32, {int64_t{1} << 58, 16});
    EXPECT_BAD(nvfp4_quantize(&t, &cfg, &rq, nullptr, nullptr), "input: shape [288230376151711744, 16] of float32 spans more bytes");
    // Leading dims whose product overflows although a zero last dim makes numel 0.
    t = wild(x.data(), NVFP4_DTYPE_FLOAT32, {big, big, 0});
    EXPECT_BAD(nvfp4_quantize(&t, &cfg, &rq, nullptr, nullptr), "input: size overflows int64");
    // Columnwise of [INT64_MAX, 0]: roundup(rows, 16) overflows.
    t = wild(nullptr, NVFP4_DTYPE_FLOAT32, {max, 0});
    EXPECT_BAD(nvfp4_quantize(&t, &cfg, nullptr, &cq, nullptr), "columnwise: size overflows int64");
    // Rowwise of [2^62, 0]: empty and countable, so valid; amax is 0.
    t = wild(nullptr, NVFP4_DTYPE_FLOAT32, {big, 0});
    float amax = -1.0f;
    nvfp4_quantized_t e;
    e.data = wild(nullptr, NVFP4_DTYPE_UINT8, {big, 0});
    e.scales = wild(nullptr, NVFP4_DTYPE_E4M3, {big, 0});
    e.amax = desc(&amax, NVFP4_DTYPE_FLOAT32, {1});
    EXPECT_STATUS(nvfp4_quantize(&t, &cfg, &e, nullptr, nullptr), NVFP4_SUCCESS);
    CHECK(amax == 0.0f);
    // dequantize: cols = 2 * data.shape[1] overflows.
    nvfp4_quantized_t q = rq;
    q.data = wild(nullptr, NVFP4_DTYPE_UINT8, {0, big});
    std::vector<float> out(static_cast<size_t>(R * C));
    nvfp4_tensor_t o = desc(out.data(), NVFP4_DTYPE_FLOAT32, {R, C});
    EXPECT_BAD(nvfp4_dequantize(&q, NVFP4_SCALES_SWIZZLED, &o, nullptr), "q.data: size overflows int64");
    // GEMM: K = 2 * shape[1] overflows; an operand of 2^62 rows with a null pointer.
    nvfp4_tensor_t d = desc(out.data(), NVFP4_DTYPE_FLOAT32, {R, R});
    nvfp4_gemm_args_t g;
    std::memset(&g, 0, sizeof g);
    g.a = &q;
    g.b = &rq;
    g.scale_layout = NVFP4_SCALES_SWIZZLED;
    g.d = &d;
    EXPECT_BAD(nvfp4_gemm(&g, nullptr, 0, nullptr), "a.data: size overflows int64");
    q = rq;
    q.data = wild(nullptr, NVFP4_DTYPE_UINT8, {big, 4});
    EXPECT_BAD(nvfp4_gemm(&g, nullptr, 0, nullptr), "a.data: shape [4611686018427387904, 4] has more elements");
    size_t ws = 0;
    EXPECT_BAD(nvfp4_gemm_workspace_size(&g, &ws), "a.data: shape");
  }

  // ---- enum fields hold raw ints (what a C caller can store); each is named.
  {
    nvfp4_quant_config_t c = cfg;
    set_raw(c.block, 2);
    EXPECT_BAD(nvfp4_quantize(&in, &c, &rq, nullptr, nullptr), "cfg.block: unknown value 2");
    c = cfg;
    set_raw(c.rounding, -1);
    EXPECT_BAD(nvfp4_quantize(&in, &c, &rq, nullptr, nullptr), "cfg.rounding: unknown value -1");
    c = cfg;
    set_raw(c.scale_layout, 1 << 30);
    EXPECT_BAD(nvfp4_quantize(&in, &c, &rq, nullptr, nullptr), "cfg.scale_layout: unknown value 1073741824");
    nvfp4_tensor_t t = in;
    set_raw(t.dtype, INT32_MIN);
    EXPECT_BAD(nvfp4_quantize(&t, &cfg, &rq, nullptr, nullptr), "input: unknown dtype -2147483648");
    t = in;
    set_raw(t.device_type, 2);
    EXPECT_BAD(nvfp4_quantize(&t, &cfg, &rq, nullptr, nullptr), "input: unknown device type 2");
    nvfp4_quantized_t q = rq;
    set_raw(q.scales.dtype, 6);
    EXPECT_BAD(nvfp4_quantize(&in, &cfg, &q, nullptr, nullptr), "rowwise.scales: unknown dtype 6");
    std::vector<float> out(static_cast<size_t>(R * C));
    nvfp4_tensor_t o = desc(out.data(), NVFP4_DTYPE_FLOAT32, {R, C});
    EXPECT_BAD(nvfp4_test_c_dequantize(&rq, -1, &o), "scale_layout: unknown value -1");
    nvfp4_tensor_t d = desc(out.data(), NVFP4_DTYPE_FLOAT32, {R, R});
    nvfp4_gemm_args_t g;
    std::memset(&g, 0, sizeof g);
    g.a = &rq;
    g.b = &rq;
    g.scale_layout = NVFP4_SCALES_SWIZZLED;
    g.d = &d;
    EXPECT_STATUS(nvfp4_gemm(&g, nullptr, 0, nullptr), NVFP4_SUCCESS);
    set_raw(g.backend, -1);
    EXPECT_BAD(nvfp4_gemm(&g, nullptr, 0, nullptr), "backend: unknown value -1");
    set_raw(g.backend, 0);
    set_raw(g.scale_layout, 3);
    EXPECT_BAD(nvfp4_gemm(&g, nullptr, 0, nullptr), "scale_layout: unknown value 3");
    CHECK(nvfp4_test_c_backend_supported(INT32_MIN, 0) == 0);
    CHECK(std::string(nvfp4_test_c_status_string(INT32_MAX)) == "unknown status");
    // Bits of the RHT sign mask past lane 15.
    nvfp4_quant_config_t c2 = cfg;
    c2.rht_sign_mask = 0x1d7e8u;
    EXPECT_BAD(nvfp4_quantize(&in, &c2, &rq, nullptr, nullptr), "cfg.rht_sign_mask: 0x1d7e8 has bits above bit 15");
    // A CUDA descriptor with a negative device id.
    t = in;
    t.device_type = NVFP4_DEVICE_CUDA;
    t.device_id = -1;
    t.data = fake_cuda();
    EXPECT_BAD(nvfp4_quantize(&t, &cfg, &rq, nullptr, nullptr), "input: negative CUDA device id -1");
  }

  // ---- CPU alignment: a pointer must be aligned to its element size (none for bytes).
  {
    std::vector<float> xs(static_cast<size_t>(R * C) + 4);
    std::memcpy(xs.data() + 1, x.data(), x.size() * sizeof(float));
    char* base = reinterpret_cast<char*>(xs.data());
    nvfp4_tensor_t t = desc(base + 2, NVFP4_DTYPE_FLOAT32, {R, C});
    EXPECT_BAD(nvfp4_quantize(&t, &cfg, &rq, nullptr, nullptr),
               "input: CPU pointer must be aligned to its element size (4 bytes for float32)");
    t = desc(base + 1, NVFP4_DTYPE_BFLOAT16, {R, C});
    EXPECT_BAD(nvfp4_quantize(&t, &cfg, &rq, nullptr, nullptr), "input: CPU pointer must be aligned to its element size (2");
    t = desc(base + 2, NVFP4_DTYPE_BFLOAT16, {R, C});
    EXPECT_STATUS(nvfp4_quantize(&t, &cfg, &rq, nullptr, nullptr), NVFP4_SUCCESS);
    // The same values one float further on: aligned, and the result is that of x.
    t = desc(xs.data() + 1, NVFP4_DTYPE_FLOAT32, {R, C});
    HostQ moved(nvfp4::rowwise_layout(R, C));
    EXPECT_STATUS(nvfp4_quantize(&t, &cfg, moved.view.get(), nullptr, nullptr), NVFP4_SUCCESS);
    EXPECT_STATUS(nvfp4_quantize(&in, &cfg, &rq, nullptr, nullptr), NVFP4_SUCCESS);
    CHECK(moved.data == row.data && moved.scales == row.scales && moved.amax == row.amax);
    float amax2[2];
    nvfp4_quantized_t q = rq;
    q.amax = desc(reinterpret_cast<char*>(amax2) + 1, NVFP4_DTYPE_FLOAT32, {1});
    EXPECT_BAD(nvfp4_quantize(&in, &cfg, &q, nullptr, nullptr), "rowwise.amax: CPU pointer must be aligned");
    // Packed codes and E4M3 scales are bytes: any address will do.
    std::vector<uint8_t> data(row.data.size() + 1), scales(row.scales.size() + 1);
    q = rq;
    q.data.data = data.data() + 1;
    q.scales.data = scales.data() + 1;
    EXPECT_STATUS(nvfp4_quantize(&in, &cfg, &q, nullptr, nullptr), NVFP4_SUCCESS);
    CHECK(std::memcmp(data.data() + 1, row.data.data(), row.data.size()) == 0);
    nvfp4_quant_config_t c = cfg;
    uint64_t counter[2] = {0, 0};
    c.offset_device = reinterpret_cast<const uint64_t*>(reinterpret_cast<char*>(counter) + 4);
    EXPECT_BAD(nvfp4_quantize(&in, &c, &rq, nullptr, nullptr), "cfg.offset_device: must be 8-byte aligned");
  }

  // ---- cfg.offset_device: its value is added to cfg.offset when the work runs.
  {
    nvfp4_quant_config_t c = cfg;
    c.rounding = NVFP4_ROUND_STOCHASTIC;
    c.seed = 1234;
    c.offset = 1000;
    HostQ want(nvfp4::rowwise_layout(R, C)), got(nvfp4::rowwise_layout(R, C)), other(nvfp4::rowwise_layout(R, C));
    EXPECT_STATUS(nvfp4_quantize(&in, &c, want.view.get(), nullptr, nullptr), NVFP4_SUCCESS);
    const uint64_t counter = 600;
    c.offset = 400;
    c.offset_device = &counter;
    EXPECT_STATUS(nvfp4_quantize(&in, &c, got.view.get(), nullptr, nullptr), NVFP4_SUCCESS);
    CHECK(got.data == want.data && got.scales == want.scales);
    c.offset_device = nullptr;
    EXPECT_STATUS(nvfp4_quantize(&in, &c, other.view.get(), nullptr, nullptr), NVFP4_SUCCESS);
    CHECK(other.data != want.data);  // offset 400 alone draws other bits
    // The sum wraps modulo 2^64: UINT64_MAX + 1001 is offset 1000.
    const uint64_t wrap = 1001;
    c.offset = UINT64_MAX;
    c.offset_device = &wrap;
    EXPECT_STATUS(nvfp4_quantize(&in, &c, got.view.get(), nullptr, nullptr), NVFP4_SUCCESS);
    CHECK(got.data == want.data);
    // The counter may not live inside an output.
    c.offset_device = reinterpret_cast<const uint64_t*>(row.scales.data());
    EXPECT_BAD(nvfp4_quantize(&in, &c, &rq, nullptr, nullptr), "rowwise.scales: overlaps cfg.offset_device");
  }

  // ---- overlapping buffers: refused, naming the output.
  {
    nvfp4_quantized_t q = rq;
    q.data.data = x.data();  // codes written over the input
    EXPECT_BAD(nvfp4_quantize(&in, &cfg, &q, nullptr, nullptr), "rowwise.data: overlaps input");
    q = cq;
    q.scales.data = row.scales.data();  // two outputs in one buffer
    EXPECT_BAD(nvfp4_quantize(&in, &cfg, &rq, &q, nullptr), "columnwise.scales: overlaps rowwise.scales");
    q = rq;
    q.amax.data = row.scales.data() + 4;
    EXPECT_BAD(nvfp4_quantize(&in, &cfg, &q, nullptr, nullptr), "rowwise.amax: overlaps rowwise.scales");
    // dequantize into its own codes
    std::vector<float> out(static_cast<size_t>(R * C));
    nvfp4_tensor_t o = desc(row.data.data(), NVFP4_DTYPE_UINT8, {R, C});
    o = desc(out.data(), NVFP4_DTYPE_FLOAT32, {R, C});
    nvfp4_quantized_t qq = rq;
    std::vector<float> big_data(static_cast<size_t>(R * C));
    qq.data = desc(big_data.data(), NVFP4_DTYPE_UINT8, {R, C / 2});
    o = desc(big_data.data(), NVFP4_DTYPE_FLOAT32, {R, C});
    EXPECT_BAD(nvfp4_dequantize(&qq, NVFP4_SCALES_SWIZZLED, &o, nullptr), "out: overlaps q.data");
    // swizzle in place
    std::vector<uint8_t> s(512);
    nvfp4_tensor_t lin = desc(s.data(), NVFP4_DTYPE_UINT8, {R, 4}), swz = desc(s.data(), NVFP4_DTYPE_UINT8, {128, 4});
    EXPECT_BAD(nvfp4_swizzle_scales(&lin, &swz, nullptr), "swizzled: overlaps linear");
    EXPECT_BAD(nvfp4_unswizzle_scales(&swz, &lin, nullptr), "linear: overlaps swizzled");
    // GEMM: d over an operand, bias inside d, c partly over d; c == d is allowed.
    std::vector<float> dbuf(static_cast<size_t>(R * R) + 8), bias(static_cast<size_t>(R), 0.25f);
    nvfp4_tensor_t d = desc(dbuf.data(), NVFP4_DTYPE_FLOAT32, {R, R});
    nvfp4_gemm_args_t g;
    std::memset(&g, 0, sizeof g);
    g.a = &rq;
    g.b = &rq;
    g.scale_layout = NVFP4_SCALES_SWIZZLED;
    g.d = &d;
    nvfp4_tensor_t bt = desc(dbuf.data() + 3, NVFP4_DTYPE_FLOAT32, {R});
    g.bias = &bt;
    EXPECT_BAD(nvfp4_gemm(&g, nullptr, 0, nullptr), "d: overlaps bias");
    bt = desc(bias.data(), NVFP4_DTYPE_FLOAT32, {R});
    nvfp4_tensor_t ct = desc(dbuf.data() + 1, NVFP4_DTYPE_FLOAT32, {R, R});
    g.c = &ct;
    g.beta = 1.0f;
    EXPECT_BAD(nvfp4_gemm(&g, nullptr, 0, nullptr), "d: overlaps c");
    ct = d;
    EXPECT_STATUS(nvfp4_gemm(&g, nullptr, 0, nullptr), NVFP4_SUCCESS);
    ct = desc(dbuf.data(), NVFP4_DTYPE_FLOAT16, {R, R});  // same address, other dtype: not the same tensor
    EXPECT_BAD(nvfp4_gemm(&g, nullptr, 0, nullptr), "d: overlaps c");
    g.c = nullptr;
    g.beta = 0.0f;
    q = rq;
    std::vector<float> dq(static_cast<size_t>(R * C));
    nvfp4_tensor_t dd = desc(row.data.data(), NVFP4_DTYPE_FLOAT32, {R, R});
    g.d = &dd;
    EXPECT_BAD(nvfp4_gemm(&g, nullptr, 0, nullptr), "d: overlaps a.data");
    // Workspace: null with a size, over an operand, past the address space.
    g.d = &d;
    g.bias = nullptr;
    std::vector<uint8_t> wsb(64);
    EXPECT_STATUS(nvfp4_gemm(&g, wsb.data(), wsb.size(), nullptr), NVFP4_SUCCESS);
    EXPECT_BAD(nvfp4_gemm(&g, nullptr, 64, nullptr), "workspace: null with workspace_bytes = 64");
    EXPECT_BAD(nvfp4_gemm(&g, row.scales.data(), 16, nullptr), "workspace: overlaps a.scales");
    EXPECT_BAD(nvfp4_gemm(&g, wsb.data(), SIZE_MAX, nullptr), "workspace: workspace_bytes");
  }
  // ---- the C++ size helpers throw instead of overflowing.
  {
    int thrown = 0;
    const auto expect_throw = [&](auto&& f) {
      try {
        f();
      } catch (const nvfp4::Error& e) {
        thrown += e.status() == NVFP4_ERROR_INVALID_ARGUMENT && std::string(e.what()).find("overflows") != std::string::npos;
      }
    };
    expect_throw([&] { (void)nvfp4::rowwise_layout(max, 16); });
    expect_throw([&] { (void)nvfp4::columnwise_layout(max, 16); });
    expect_throw([&] { (void)nvfp4::rowwise_layout(big, big / 16 * 16); });
    expect_throw([&] { (void)nvfp4::TensorView(nullptr, NVFP4_DTYPE_FLOAT32, {big, 8}); });
    const int64_t dims[] = {big, big, 16};
    expect_throw([&] { (void)nvfp4::flatten_2d(dims); });
    CHECK(thrown == 5);
  }
  EXPECT_STATUS(nvfp4_quantize(&in, &cfg, &rq, nullptr, nullptr), NVFP4_SUCCESS);  // leaves no message behind
  return finish("hardening");
}

// =====================================================================================
// caps
// =====================================================================================

int test_caps() {
  // Version: the loaded library is the one this header describes.
  const std::string v = nvfp4_version_string();
  std::printf("nvfp4 %s (header %s), CUDA archs \"%s\", %d CUDA device(s)\n", v.c_str(),
              nvfp4::header_version().c_str(), nvfp4_build_cuda_archs(), nvfp4_cuda_device_count());
  CHECK(v == nvfp4::header_version());
  CHECK(nvfp4::runtime_matches_header());
  CHECK(nvfp4_build_cuda_archs() != nullptr);
  for (const std::string& a : nvfp4::build_cuda_archs()) CHECK(!a.empty() && a.back() == 'a');

  // Status strings: defined for every status, distinct, and safe for unknown values.
  std::set<std::string> seen;
  for (int s = NVFP4_SUCCESS; s <= NVFP4_ERROR_INTERNAL; ++s) {
    const char* str = nvfp4_status_string(static_cast<nvfp4_status_t>(s));
    CHECK(str != nullptr && *str != '\0');
    if (str) seen.insert(str);
  }
  CHECK(seen.size() == 7);
  for (int s : {-1, 7, 1000}) {
    const char* str = nvfp4_test_c_status_string(s);
    CHECK(str != nullptr && *str != '\0');
  }
  CHECK(std::string(nvfp4_last_error()).empty());

  // Capabilities never fail, whatever they are asked.
  const int n = nvfp4_cuda_device_count();
  CHECK(n >= 0);
  if (n == 0) CHECK(nvfp4_cuda_device_cc(0) == 0);
  for (int i = 0; i < n; ++i) CHECK(nvfp4_cuda_device_cc(i) >= 10);
  CHECK(nvfp4_cuda_device_cc(-1) == 0);
  CHECK(nvfp4_cuda_device_cc(1 << 20) == 0);
  CHECK(nvfp4_backend_supported(NVFP4_BACKEND_REFERENCE, 0) == 1);
  CHECK(nvfp4_backend_supported(NVFP4_BACKEND_CUTLASS, 0) == 0);
  CHECK(nvfp4_backend_supported(NVFP4_BACKEND_CUDNN, 0) == 0);
  CHECK(nvfp4_test_c_backend_supported(77, 0) == 0);
  CHECK(nvfp4_test_c_backend_supported(-3, 90) == 0);
  for (int cc : {-5, 75, 80, 89, 90, 100, 103, 120, 121, 999}) {
    for (int b = NVFP4_BACKEND_AUTO; b <= NVFP4_BACKEND_CUDNN; ++b) {
      const int r = nvfp4_backend_supported(static_cast<nvfp4_backend_t>(b), cc);
      CHECK(r == 0 || r == 1);
    }
  }
  // Without CUDA in the build no GPU backend can be supported anywhere.
  if (nvfp4::build_cuda_archs().empty())
    for (int cc : {90, 100, 120}) CHECK(!nvfp4::backend_supported(NVFP4_BACKEND_CUTLASS, cc));
  for (int i = 0; i < n; ++i) {
    const int cc = nvfp4_cuda_device_cc(i);
    std::printf("device %d: cc %d, cutlass %d, cudnn %d, auto %d\n", i, cc,
                nvfp4_backend_supported(NVFP4_BACKEND_CUTLASS, cc), nvfp4_backend_supported(NVFP4_BACKEND_CUDNN, cc),
                nvfp4_backend_supported(NVFP4_BACKEND_AUTO, cc));
  }

  // Defaults promised by the header.
  nvfp4_quant_config_t cfg;
  std::memset(&cfg, 0x5a, sizeof cfg);
  nvfp4_quant_config_default(&cfg);
  CHECK(cfg.block == NVFP4_BLOCK_1D && cfg.rounding == NVFP4_ROUND_NEAREST);
  CHECK(cfg.scale_layout == NVFP4_SCALES_SWIZZLED && cfg.rht == NVFP4_RHT_NONE);
  CHECK(cfg.rht_sign_mask == nvfp4_default_rht_sign_mask() && cfg.seed == 0 && cfg.offset == 0);
  // TransformerEngine's wgrad signs [1,1,1,-1,1,-1,-1,-1,-1,-1,-1,1,-1,1,-1,-1], bit i = lane i negative.
  const int signs[16] = {1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1};
  uint32_t mask = 0;
  for (int i = 0; i < 16; ++i) mask |= (signs[i] < 0 ? 1u : 0u) << i;
  CHECK(nvfp4_default_rht_sign_mask() == mask);

  // Size helpers against the layouts written in nvfp4.h.
  const auto r = nvfp4::rowwise_layout(200, 96);
  CHECK(r.data_rows == 200 && r.data_cols == 48 && r.scale_rows == 256 && r.scale_cols == 8);
  const auto rl = nvfp4::rowwise_layout(200, 96, NVFP4_SCALES_LINEAR);
  CHECK(rl.scale_rows == 200 && rl.scale_cols == 6 && rl.scale_bytes() == 1200);
  const auto c = nvfp4::columnwise_layout(37, 64);
  CHECK(c.rows == 64 && c.cols == 48 && c.data_rows == 64 && c.data_cols == 24 && c.scale_rows == 128 &&
        c.scale_cols == 4);
  const auto cl = nvfp4::columnwise_layout(37, 64, NVFP4_SCALES_LINEAR);
  CHECK(cl.scale_rows == 64 && cl.scale_cols == 3);
  const int64_t shp[3] = {2, 3, 32};
  CHECK(nvfp4::flatten_2d(shp) == std::make_pair(int64_t{6}, int64_t{32}));
  CHECK(r.packed_bytes() >= r.data_bytes() + r.scale_bytes() + 4);
  return finish("caps");
}

// =====================================================================================
// cpu_roundtrip
// =====================================================================================

// Largest |x - x̂| allowed in a block of amax `bamax`: half the widest E2M1 gap (1, between
// 4 and 6) times the decoded step, which the E4M3 rounding of the block scale may
// enlarge by at most 1/16; saturation at ±6 costs less than that.
double block_bound(double bamax) { return bamax / 6.0 * (17.0 / 16.0) * (1.0 + 1e-6) + 1e-30; }

// Checks x̂ against x block by block (blocks of 16 along the rows of x [rows, cols]).
void check_quantization_error(const std::vector<float>& x, const std::vector<float>& xh, int64_t rows, int64_t cols,
                              const char* what) {
  int bad = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < cols / 16; ++b) {
      double bamax = 0;
      for (int i = 0; i < 16; ++i) bamax = std::max(bamax, std::fabs(static_cast<double>(x[r * cols + b * 16 + i])));
      for (int i = 0; i < 16; ++i) {
        const int64_t k = r * cols + b * 16 + i;
        if (std::fabs(static_cast<double>(x[k]) - xh[k]) > block_bound(bamax) && bad++ < 3)
          std::fprintf(stderr, "%s: (%lld, %lld): x = %g, x^ = %g, block amax %g\n", what, static_cast<long long>(r),
                       static_cast<long long>(b * 16 + i), x[k], xh[k], bamax);
      }
    }
  CHECK(bad == 0);
}

int test_cpu_roundtrip() {
  using nvfp4::TensorView;
  // An anchor computed by hand: one block on the E2M1 grid with amax 6 gives
  // S_enc = 448, block scale 448 (E4M3 0x7e) and codes 0..15 in order.
  {
    const float grid[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
    HostQ q(nvfp4::rowwise_layout(1, 16, NVFP4_SCALES_LINEAR));
    nvfp4::quantize(TensorView::of(grid, {1, 16}), nvfp4::QuantConfig().linear_scales(), &q.view, nullptr);
    const uint8_t want[8] = {0x10, 0x32, 0x54, 0x76, 0x98, 0xba, 0xdc, 0xfe};
    CHECK(std::memcmp(q.data.data(), want, 8) == 0);
    CHECK(q.scales[0] == 0x7e);
    CHECK(q.amax == 6.0f);
  }

  const int64_t M = 37, N = 29, K = 128;
  const std::vector<float> a = random_matrix(M, K, 11), b = random_matrix(N, K, 12);
  // BF16 inputs: quantize what a trainer would pass, and keep the values it represents.
  std::vector<uint16_t> a16(a.size());
  std::vector<float> a_in(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    a16[i] = nvfp4::float_to_bf16(a[i]);
    a_in[i] = nvfp4::bf16_to_float(a16[i]);
  }

  for (nvfp4_scale_layout_t layout : {NVFP4_SCALES_SWIZZLED, NVFP4_SCALES_LINEAR}) {
    const char* lname = layout == NVFP4_SCALES_SWIZZLED ? "swizzled" : "linear";
    const nvfp4::QuantConfig cfg = nvfp4::QuantConfig().scale_layout(layout);
    HostQ qa(nvfp4::rowwise_layout(M, K, layout)), qb(nvfp4::rowwise_layout(N, K, layout));
    nvfp4::quantize(TensorView(a16.data(), NVFP4_DTYPE_BFLOAT16, {M, K}), cfg, &qa.view, nullptr);
    nvfp4::quantize(TensorView::of(b.data(), {N, K}), cfg, &qb.view, nullptr);

    // amax is max|x| exactly.
    float amax_a = 0, amax_b = 0;
    for (float v : a_in) amax_a = std::max(amax_a, std::fabs(v));
    for (float v : b) amax_b = std::max(amax_b, std::fabs(v));
    CHECK(qa.amax == amax_a && qb.amax == amax_b);
    // Swizzle padding is zero.
    if (layout == NVFP4_SCALES_SWIZZLED) {
      std::vector<bool> used(qa.scales.size(), false);
      for (int64_t r = 0; r < M; ++r)
        for (int64_t c = 0; c < K / 16; ++c) used[nvfp4::swizzled_scale_offset(r, c, K / 16)] = true;
      int nonzero_pad = 0;
      for (size_t i = 0; i < used.size(); ++i) nonzero_pad += (!used[i] && qa.scales[i] != 0);
      CHECK(nonzero_pad == 0);
      // The library's unswizzle agrees with the public offset formula.
      std::vector<uint8_t> lin(static_cast<size_t>(M * (K / 16)));
      TensorView lv(lin.data(), NVFP4_DTYPE_E4M3, {M, K / 16});
      nvfp4::unswizzle_scales(TensorView(qa.scales.data(), NVFP4_DTYPE_E4M3, {qa.layout.scale_rows, qa.layout.scale_cols}),
                              lv);
      int moved = 0;
      for (int64_t r = 0; r < M; ++r)
        for (int64_t c = 0; c < K / 16; ++c) moved += lin[r * (K / 16) + c] != qa.scales[nvfp4::swizzled_scale_offset(r, c, K / 16)];
      CHECK(moved == 0);
    }

    // dequantize == the independent decoder, bit for bit.
    std::vector<float> ah(static_cast<size_t>(M * K)), bh(static_cast<size_t>(N * K));
    TensorView av = TensorView::of(ah.data(), {M, K}), bv = TensorView::of(bh.data(), {N, K});
    nvfp4::dequantize(qa.view, av);
    nvfp4::dequantize(qb.view, bv);
    const std::vector<float> ah_ref = decode(qa.data, qa.scales, qa.amax, M, K, layout);
    const std::vector<float> bh_ref = decode(qb.data, qb.scales, qb.amax, N, K, layout);
    CHECK(std::memcmp(ah.data(), ah_ref.data(), ah.size() * 4) == 0);
    CHECK(std::memcmp(bh.data(), bh_ref.data(), bh.size() * 4) == 0);
    check_quantization_error(a_in, ah, M, K, "A");
    check_quantization_error(b, bh, N, K, "B");

    // GEMM (float32 out) against float64 sums of the decoded operands: every product and
    // every partial sum is near-exact in double, so the only rounding is the final one.
    std::vector<float> d(static_cast<size_t>(M * N)), d_auto(d.size());
    TensorView dv = TensorView::of(d.data(), {M, N}), dav = TensorView::of(d_auto.data(), {M, N});
    nvfp4::Gemm(qa.view, qb.view, dv).backend(NVFP4_BACKEND_REFERENCE).run();
    nvfp4::Gemm(qa.view, qb.view, dav).run();
    CHECK(std::memcmp(d.data(), d_auto.data(), d.size() * 4) == 0);
    double err2 = 0, ref2 = 0;
    int bad = 0;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double acc = 0, mag = 0, exact = 0;
        for (int64_t k = 0; k < K; ++k) {
          acc += static_cast<double>(ah[i * K + k]) * bh[j * K + k];
          mag += std::fabs(static_cast<double>(ah[i * K + k]) * bh[j * K + k]);
          exact += static_cast<double>(a_in[i * K + k]) * b[j * K + k];
        }
        const double got = d[i * N + j];
        if (std::fabs(got - acc) > 1e-6 * mag + 1e-30 && bad++ < 3)
          std::fprintf(stderr, "gemm %s (%lld,%lld): %.9g vs float64 %.9g\n", lname, static_cast<long long>(i),
                       static_cast<long long>(j), got, acc);
        err2 += (got - exact) * (got - exact);
        ref2 += exact * exact;
      }
    CHECK(bad == 0);
    // Against the unquantized product: the FP4 error itself, loosely bounded (typically ~0.1).
    const double rel = std::sqrt(err2 / ref2);
    std::printf("cpu gemm %dx%dx%d (%s scales): relative Frobenius error vs float64 of the inputs %.4f\n",
                static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), lname, rel);
    CHECK(rel < 0.25);

    // bf16 output is the rounding of the float32 one; beta*C + bias are added in float64.
    std::vector<uint16_t> d16(d.size());
    TensorView d16v(d16.data(), NVFP4_DTYPE_BFLOAT16, {M, N});
    nvfp4::Gemm(qa.view, qb.view, d16v).run();
    int mism = 0;
    for (size_t i = 0; i < d.size(); ++i) mism += d16[i] != nvfp4::float_to_bf16(d[i]);
    CHECK(mism == 0);
    std::vector<float> cmat(d.size()), bias(N), d2(d.size());
    Rng rng(5);
    for (float& v : cmat) v = rng.normal();
    for (float& v : bias) v = rng.normal();
    TensorView d2v = TensorView::of(d2.data(), {M, N});
    nvfp4::Gemm(qa.view, qb.view, d2v).accumulate(TensorView::of(cmat.data(), {M, N}), 0.25f)
        .bias(TensorView::of(bias.data(), {N})).run();
    bad = 0;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        const double want = static_cast<double>(d[i * N + j]) + 0.25 * cmat[i * N + j] + bias[j];
        bad += std::fabs(d2[i * N + j] - want) > 1e-5 * (std::fabs(want) + std::fabs(d[i * N + j])) + 1e-6;
      }
    CHECK(bad == 0);
    // c may alias d.
    std::vector<float> d3 = d;
    TensorView d3v = TensorView::of(d3.data(), {M, N});
    nvfp4::Gemm(qa.view, qb.view, d3v).accumulate(d3v, 1.0f).run();
    bad = 0;
    for (size_t i = 0; i < d.size(); ++i) bad += std::fabs(d3[i] - 2.0 * d[i]) > 1e-6 * std::fabs(d[i]) + 1e-30;
    CHECK(bad == 0);
  }

  // Columnwise: x^T quantized along the token axis, rows padded 37 -> 48 with zeros.
  {
    HostQ qc(nvfp4::columnwise_layout(M, K));
    nvfp4::quantize(TensorView::of(a.data(), {M, K}), nvfp4::QuantConfig(), nullptr, &qc.view);
    const int64_t Mp = qc.layout.cols;
    CHECK(Mp == 48);
    std::vector<float> ch(static_cast<size_t>(K * Mp));
    TensorView cv = TensorView::of(ch.data(), {K, Mp});
    nvfp4::dequantize(qc.view, cv);
    std::vector<float> at(static_cast<size_t>(K * Mp), 0.0f);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t k = 0; k < K; ++k) at[k * Mp + i] = a[i * K + k];
    check_quantization_error(at, ch, K, Mp, "A columnwise");
    int pad = 0;
    for (int64_t k = 0; k < K; ++k)
      for (int64_t i = M; i < Mp; ++i) pad += ch[k * Mp + i] != 0.0f;
    CHECK(pad == 0);
  }

  // Stochastic rounding: a pure function of (data, seed, offset).
  {
    auto sr = [&](uint64_t seed, uint64_t offset) {
      HostQ q(nvfp4::rowwise_layout(M, K));
      nvfp4::quantize(TensorView::of(a.data(), {M, K}), nvfp4::QuantConfig().stochastic(seed, offset), &q.view, nullptr);
      return q.data;
    };
    CHECK(sr(7, 0) == sr(7, 0));
    CHECK(sr(7, 0) != sr(8, 0));
    CHECK(sr(7, 0) != sr(7, 1024));
  }

  // One caller buffer carved into data | scales | amax.
  {
    const nvfp4::QuantizedLayout l = nvfp4::rowwise_layout(M, K);
    std::vector<double> storage((l.packed_bytes() + 7) / 8 + 32);  // 8-byte aligned; align to 256 below
    auto* base = reinterpret_cast<unsigned char*>(storage.data());
    const size_t skew = (256 - reinterpret_cast<uintptr_t>(base) % 256) % 256;
    nvfp4::QuantizedView v = nvfp4::QuantizedView::carve(l, base + skew, l.packed_bytes());
    nvfp4::quantize(TensorView::of(a.data(), {M, K}), nvfp4::QuantConfig(), &v, nullptr);
    HostQ ref(l);
    nvfp4::quantize(TensorView::of(a.data(), {M, K}), nvfp4::QuantConfig(), &ref.view, nullptr);
    CHECK(std::memcmp(v.data(), ref.data.data(), l.data_bytes()) == 0);
    CHECK(std::memcmp(v.scales(), ref.scales.data(), l.scale_bytes()) == 0);
    CHECK(*v.amax() == ref.amax);
  }
  return finish("cpu_roundtrip");
}

// =====================================================================================
// gpu_roundtrip
// =====================================================================================

#if defined(NVFP4_TEST_CUDA)

// One quantized direction in device memory, one cudaMalloc for the three parts.
struct DevQ {
  nvfp4::cuda::Buffer buf;
  nvfp4::QuantizedView view;
  explicit DevQ(const nvfp4::QuantizedLayout& l) : buf(l.packed_bytes()) {
    view = nvfp4::QuantizedView::carve(l, buf.get(), buf.size(), nvfp4::cuda::current_device());
  }
  // Bytes back to the host for a bit-exact comparison with a HostQ.
  bool same_as(const HostQ& h, const char* what) const {
    const nvfp4::QuantizedLayout& l = view.layout();
    std::vector<uint8_t> data(l.data_bytes()), scales(l.scale_bytes());
    float amax = 0;
    nvfp4::cuda::check(cudaMemcpy(data.data(), view.data(), data.size(), cudaMemcpyDeviceToHost), "cudaMemcpy");
    nvfp4::cuda::check(cudaMemcpy(scales.data(), view.scales(), scales.size(), cudaMemcpyDeviceToHost), "cudaMemcpy");
    nvfp4::cuda::check(cudaMemcpy(&amax, view.amax(), 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
    bool ok = true;
    if (std::memcmp(&amax, &h.amax, 4) != 0) {
      std::fprintf(stderr, "%s: amax %.9g on the GPU, %.9g on the CPU\n", what, amax, h.amax);
      ok = false;
    }
    for (size_t i = 0; i < data.size(); ++i)
      if (data[i] != h.data[i]) {
        std::fprintf(stderr, "%s: first data mismatch at byte %zu (row %lld, byte %lld): GPU 0x%02x, CPU 0x%02x\n", what, i,
                     static_cast<long long>(i / l.data_cols), static_cast<long long>(i % l.data_cols), data[i], h.data[i]);
        ok = false;
        break;
      }
    for (size_t i = 0; i < scales.size(); ++i)
      if (scales[i] != h.scales[i]) {
        std::fprintf(stderr, "%s: first scale mismatch at byte %zu: GPU 0x%02x, CPU 0x%02x\n", what, i, scales[i],
                     h.scales[i]);
        ok = false;
        break;
      }
    return ok;
  }
};

int test_gpu_roundtrip() {
  using nvfp4::TensorView;
  const int cc = nvfp4_cuda_device_cc(0);
  const std::string arch = std::to_string(cc) + "a";
  bool built = false;
  for (const std::string& a : nvfp4::build_cuda_archs()) built |= a == arch;
  if (!built) {
    std::printf("SKIP: device 0 is sm_%d, this build has CUDA code for \"%s\" only\n", cc, nvfp4_build_cuda_archs());
    return kSkip;
  }
  nvfp4::cuda::check(cudaSetDevice(0), "cudaSetDevice");
  const nvfp4::Device gpu = nvfp4::Device::cuda(0);
  cudaStream_t stream = nullptr;
  nvfp4::cuda::check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");

  struct Shape {
    int64_t m, n, k;
  };
  for (const Shape s : {Shape{200, 136, 256}, Shape{1, 64, 64}, Shape{512, 384, 1024}}) {
    const int64_t M = s.m, N = s.n, K = s.k;
    std::printf("shape M=%lld N=%lld K=%lld\n", static_cast<long long>(M), static_cast<long long>(N),
                static_cast<long long>(K));
    std::vector<float> a = random_matrix(M, K, 100 + M), b = random_matrix(N, K, 200 + N);
    std::vector<uint16_t> a16(a.size()), b16(b.size());
    for (size_t i = 0; i < a.size(); ++i) a16[i] = nvfp4::float_to_bf16(a[i]);
    for (size_t i = 0; i < b.size(); ++i) b16[i] = nvfp4::float_to_bf16(b[i]);
    nvfp4::cuda::Buffer da(a16.size() * 2), db(b16.size() * 2);
    da.upload(a16.data(), a16.size() * 2, stream);
    db.upload(b16.data(), b16.size() * 2, stream);
    const TensorView ha(a16.data(), NVFP4_DTYPE_BFLOAT16, {M, K}), hb(b16.data(), NVFP4_DTYPE_BFLOAT16, {N, K});
    const TensorView ga(da.get(), NVFP4_DTYPE_BFLOAT16, {M, K}, gpu), gb(db.get(), NVFP4_DTYPE_BFLOAT16, {N, K}, gpu);

    // Quantization: the kernels equal the CPU reference bit for bit, in every mode.
    struct Mode {
      const char* name;
      nvfp4::QuantConfig cfg;
    };
    const Mode modes[] = {
        {"1d rtn", nvfp4::QuantConfig()},
        {"1d rtn linear", nvfp4::QuantConfig().linear_scales()},
        {"1d sr + rht(columnwise)", nvfp4::QuantConfig().stochastic(1234, 99).rht(NVFP4_RHT_COLUMNWISE)},
        {"1d rtn + rht(both)", nvfp4::QuantConfig().rht(NVFP4_RHT_ROWWISE | NVFP4_RHT_COLUMNWISE)},
        {"2d rtn", nvfp4::QuantConfig().block_2d()},
    };
    for (const Mode& mode : modes) {
      const nvfp4_scale_layout_t l = mode.cfg.scale_layout();
      HostQ hr(nvfp4::rowwise_layout(M, K, l)), hc(nvfp4::columnwise_layout(M, K, l));
      DevQ dr(nvfp4::rowwise_layout(M, K, l)), dc(nvfp4::columnwise_layout(M, K, l));
      const std::string what = std::string("quantize ") + mode.name;
      nvfp4::quantize(ha, mode.cfg, &hr.view, &hc.view);
      try {
        nvfp4::quantize(ga, mode.cfg, &dr.view, &dc.view, stream);
        nvfp4::cuda::check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      } catch (const nvfp4::Error& e) {  // report, and go on with the other modes
        std::fprintf(stderr, "%s on the GPU failed: %s\n", what.c_str(), e.what());
        CHECK(false && "GPU quantize failed");
        continue;
      }
      CHECK(dr.same_as(hr, (what + " rowwise").c_str()));
      CHECK(dc.same_as(hc, (what + " columnwise").c_str()));
    }

    // Operands for the GEMMs, quantized on both sides.
    HostQ hqa(nvfp4::rowwise_layout(M, K)), hqb(nvfp4::rowwise_layout(N, K));
    DevQ dqa(nvfp4::rowwise_layout(M, K)), dqb(nvfp4::rowwise_layout(N, K));
    nvfp4::quantize(ha, nvfp4::QuantConfig(), &hqa.view, nullptr);
    nvfp4::quantize(hb, nvfp4::QuantConfig().block_2d(), &hqb.view, nullptr);
    nvfp4::quantize(ga, nvfp4::QuantConfig(), &dqa.view, nullptr, stream);
    nvfp4::quantize(gb, nvfp4::QuantConfig().block_2d(), &dqb.view, nullptr, stream);

    // Dequantize on the GPU == on the CPU.
    {
      std::vector<float> hh(static_cast<size_t>(M * K)), gh(hh.size());
      TensorView hv = TensorView::of(hh.data(), {M, K});
      nvfp4::dequantize(hqa.view, hv);
      nvfp4::cuda::Buffer dout(hh.size() * 4);
      TensorView gv(dout.get(), NVFP4_DTYPE_FLOAT32, {M, K}, gpu);
      nvfp4::dequantize(dqa.view, gv, stream);
      nvfp4::cuda::check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      dout.download(gh.data(), gh.size() * 4);
      CHECK(std::memcmp(hh.data(), gh.data(), hh.size() * 4) == 0);
    }

    // CPU reference product, float32 out, and the scale of each entry's sum.
    std::vector<float> ref(static_cast<size_t>(M * N));
    TensorView rv = TensorView::of(ref.data(), {M, N});
    nvfp4::Gemm(hqa.view, hqb.view, rv).backend(NVFP4_BACKEND_REFERENCE).run();
    std::vector<float> ah(static_cast<size_t>(M * K)), bh(static_cast<size_t>(N * K));
    TensorView av = TensorView::of(ah.data(), {M, K}), bv = TensorView::of(bh.data(), {N, K});
    nvfp4::dequantize(hqa.view, av);
    nvfp4::dequantize(hqb.view, bv);
    std::vector<double> mag(ref.size());
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double m = 0;
        for (int64_t k = 0; k < K; ++k) m += std::fabs(static_cast<double>(ah[i * K + k]) * bh[j * K + k]);
        mag[i * N + j] = m;
      }

    int ran = 0;
    for (nvfp4_backend_t backend : {NVFP4_BACKEND_CUTLASS, NVFP4_BACKEND_CUDNN, NVFP4_BACKEND_AUTO}) {
      const char* bname = nvfp4::backend_name(backend);
      if (!nvfp4::backend_supported(backend, cc)) {
        std::printf("  %-8s not supported on sm_%d in this build: skipped\n", bname, cc);
        continue;
      }
      for (nvfp4_dtype_t out_dt : {NVFP4_DTYPE_FLOAT32, NVFP4_DTYPE_BFLOAT16}) {
        try {
          const size_t esz = nvfp4::dtype_size(out_dt);
          nvfp4::cuda::Buffer dd(static_cast<size_t>(M * N) * esz);
          TensorView dv(dd.get(), out_dt, {M, N}, gpu);
          nvfp4::Gemm gemm = nvfp4::Gemm(dqa.view, dqb.view, dv).backend(backend);
          nvfp4::cuda::Buffer ws(gemm.workspace_bytes());
          // NaN-poison the output so a kernel that skips a tile cannot pass.
          nvfp4::cuda::check(cudaMemsetAsync(dd.get(), 0xff, dd.size(), stream), "cudaMemsetAsync");
          gemm.run(ws.get(), ws.size(), stream);
          nvfp4::cuda::check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
          std::vector<unsigned char> first(dd.size()), second(dd.size());
          dd.download(first.data(), first.size());
          gemm.run(ws.get(), ws.size(), stream);
          nvfp4::cuda::check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
          dd.download(second.data(), second.size());
          CHECK(first == second);  // run to run deterministic

          // FP32 accumulation of exact products: at most ~K rounding steps of the sum of
          // magnitudes (mag is built from decoded values, per-tensor scales included); bf16
          // output adds half an ulp of bf16.
          int bad = 0;
          double worst = 0;
          for (int64_t i = 0; i < M * N; ++i) {
            float got;
            if (out_dt == NVFP4_DTYPE_FLOAT32) {
              std::memcpy(&got, &first[i * 4], 4);
            } else {
              uint16_t h;
              std::memcpy(&h, &first[i * 2], 2);
              got = nvfp4::bf16_to_float(h);
            }
            const double tol = static_cast<double>(K) * std::ldexp(1.0, -23) * mag[i] +
                               (out_dt == NVFP4_DTYPE_BFLOAT16 ? std::ldexp(std::fabs(ref[i]), -8) : 0.0) + 1e-30;
            const double err = std::fabs(static_cast<double>(got) - ref[i]);
            worst = std::max(worst, err / tol);
            if (!(err <= tol) && bad++ < 3)
              std::fprintf(stderr, "  %s %s (%lld, %lld): GPU %.9g, CPU %.9g, tol %.3g\n", bname,
                           nvfp4::dtype_name(out_dt), static_cast<long long>(i / N), static_cast<long long>(i % N), got,
                           ref[i], tol);
          }
          CHECK(bad == 0);
          std::printf("  %-8s out %-8s workspace %zu B: max error / bound = %.3f%s\n", bname, nvfp4::dtype_name(out_dt),
                      ws.size(), worst, bad ? "  FAIL" : "");
          ++ran;
        } catch (const nvfp4::Error& e) {  // a backend that claims support must run
          std::fprintf(stderr, "  %s %s: %s\n", bname, nvfp4::dtype_name(out_dt), e.what());
          CHECK(false && "GPU GEMM failed");
        }
      }
    }
    if (!ran) std::printf("  no GEMM backend for sm_%d in this build: quantization checked only\n", cc);
  }
  cudaStreamDestroy(stream);
  return finish("gpu_roundtrip");
}

#endif  // NVFP4_TEST_CUDA

int gpu_entry() {
  const int n = nvfp4_cuda_device_count();
  if (n == 0) {
    std::printf("SKIP: no CUDA device visible (nvfp4_cuda_device_count() == 0; build archs \"%s\")\n",
                nvfp4_build_cuda_archs());
    return kSkip;
  }
#if defined(NVFP4_TEST_CUDA)
  return test_gpu_roundtrip();
#else
  std::printf("SKIP: %d CUDA device(s) visible, but this test was built without the CUDA runtime\n", n);
  return kSkip;
#endif
}

}  // namespace

// nvfp4_fp8_cast on the CPU: values worked out by hand from the format definitions, the
// transposed output, both scaling modes and the refusals by name.
int test_fp8() {
  const int64_t R = 2, C = 16;
  std::vector<float> x(R * C, 0.0f);
  x[0] = 2.0f;                 // amax: s = 448 / 2 = 224
  x[1] = -1.0f;                // -224 -> E4M3 -224 = 0xf6 (1.75 * 2^7)
  x[2] = 0.00390625f;          // 2^-8 * 224 = 0.875 -> 0x36 (1.75 * 2^-1)
  x[3] = 1e-6f;                // 2.24e-4 < 2^-10 (half the smallest subnormal) -> 0
  x[C + 0] = -0.5f;            // -112 -> 0xee (1.75 * 2^6, negative)
  std::vector<uint8_t> q(R * C, 0xAB), qt(R * C, 0xAB);
  float sinv = -1.0f, amax = -1.0f;
  const nvfp4_tensor_t in = desc(x.data(), NVFP4_DTYPE_FLOAT32, {R, C});
  nvfp4_tensor_t tq = desc(q.data(), NVFP4_DTYPE_UINT8, {R, C});
  nvfp4_tensor_t tqt = desc(qt.data(), NVFP4_DTYPE_UINT8, {C, R});
  nvfp4_tensor_t ts = desc(&sinv, NVFP4_DTYPE_FLOAT32, {1});
  nvfp4_tensor_t ta = desc(&amax, NVFP4_DTYPE_FLOAT32, {1});
  nvfp4_fp8_config_t cfg{NVFP4_FP8_E4M3, 0.0f, nullptr};
  EXPECT_STATUS(nvfp4_fp8_cast(&in, &cfg, &tq, &tqt, &ts, &ta, nullptr), NVFP4_SUCCESS);
  CHECK(amax == 2.0f);
  CHECK(sinv == 1.0f / 224.0f);
  CHECK(q[0] == 0x7e);  // 2 * 224 = 448 = 1.75 * 2^8: exponent field 15, mantissa 6
  CHECK(q[1] == 0xf6 && q[2] == 0x36 && q[3] == 0x00 && q[C] == 0xee);
  bool transposed = true;
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) transposed &= qt[c * R + r] == q[r * C + c];
  CHECK(transposed);
  // delayed scaling: s from the buffer, amax still reported; E5M2: 2 * 1000 = 2000, between
  // 1792 and 2048 (two mantissa bits), nearer 2048 = 2^11: code (11 + 15) << 2 = 0x68
  float scale = 1000.0f;
  nvfp4_tensor_t tscale = desc(&scale, NVFP4_DTYPE_FLOAT32, {1});
  nvfp4_fp8_config_t dcfg{NVFP4_FP8_E5M2, 0.0f, &tscale};
  EXPECT_STATUS(nvfp4_fp8_cast(&in, &dcfg, &tq, nullptr, &ts, &ta, nullptr), NVFP4_SUCCESS);
  CHECK(q[0] == 0x68 && sinv == 1.0f / 1000.0f && amax == 2.0f);
  // refusals
  EXPECT_BAD(nvfp4_fp8_cast(nullptr, &cfg, &tq, nullptr, &ts, &ta, nullptr), "x");
  EXPECT_BAD(nvfp4_fp8_cast(&in, nullptr, &tq, nullptr, &ts, &ta, nullptr), "cfg");
  EXPECT_BAD(nvfp4_fp8_cast(&in, &cfg, nullptr, nullptr, &ts, &ta, nullptr), "q/qt");
  EXPECT_BAD(nvfp4_fp8_cast(&in, &cfg, &tq, nullptr, &ts, nullptr, nullptr), "amax: required");
  EXPECT_BAD(nvfp4_fp8_cast(&in, &cfg, &tqt, nullptr, &ts, &ta, nullptr), "q: expected shape [2, 16]");
  {
    nvfp4_fp8_config_t bad = cfg;
    std::memset(&bad.format, 0x7f, sizeof bad.format);
    EXPECT_BAD(nvfp4_fp8_cast(&in, &bad, &tq, nullptr, &ts, &ta, nullptr), "cfg.format");
    bad = cfg;
    bad.margin = INFINITY;
    EXPECT_BAD(nvfp4_fp8_cast(&in, &bad, &tq, nullptr, &ts, &ta, nullptr), "cfg.margin");
  }
  {
    const nvfp4_tensor_t in24 = desc(x.data(), NVFP4_DTYPE_FLOAT32, {2, 8});
    nvfp4_tensor_t q24 = desc(q.data(), NVFP4_DTYPE_UINT8, {2, 8});
    EXPECT_BAD(nvfp4_fp8_cast(&in24, &cfg, &q24, nullptr, &ts, &ta, nullptr), "multiple of 16");
    nvfp4_tensor_t t2 = desc(&sinv, NVFP4_DTYPE_FLOAT32, {2});
    EXPECT_BAD(nvfp4_fp8_cast(&in, &cfg, &tq, nullptr, &t2, &ta, nullptr), "scale_inv: must hold exactly one");
    nvfp4_tensor_t overlap = desc(x.data(), NVFP4_DTYPE_FLOAT32, {1});
    EXPECT_BAD(nvfp4_fp8_cast(&in, &cfg, &tq, nullptr, &overlap, &ta, nullptr), "overlaps");
  }
  // Delayed scaling's update, hand-worked: history [3, 5, NaN, 1] (NaN counts as 0).
  {
    float h[4] = {3.0f, 5.0f, NAN, 1.0f}, sc = 7.0f;
    nvfp4_tensor_t th = desc(h, NVFP4_DTYPE_FLOAT32, {4}), tsc = desc(&sc, NVFP4_DTYPE_FLOAT32, {1});
    CHECK(nvfp4_fp8_delayed_update(&th, &tsc, NVFP4_FP8_E4M3, 0.0f, NVFP4_FP8_AMAX_MAX, nullptr) == NVFP4_SUCCESS);
    CHECK(sc == 448.0f / 5.0f);  // the max of the history
    // rolled left by one (the old entry 0 last), slot 0 cleared
    CHECK(h[0] == 0.0f && std::isnan(h[1]) && h[2] == 1.0f && h[3] == 3.0f);
    float h2[4] = {3.0f, 5.0f, 0.0f, 1.0f};
    nvfp4_tensor_t th2 = desc(h2, NVFP4_DTYPE_FLOAT32, {4});
    CHECK(nvfp4_fp8_delayed_update(&th2, &tsc, NVFP4_FP8_E5M2, 1.0f, NVFP4_FP8_AMAX_MOST_RECENT, nullptr) ==
          NVFP4_SUCCESS);
    CHECK(sc == 28672.0f / 3.0f);  // 57344 * 2^-1 / history[0]
    float zero[2] = {0.0f, 0.0f}, inf1[1] = {INFINITY};
    nvfp4_tensor_t tz = desc(zero, NVFP4_DTYPE_FLOAT32, {2}), ti = desc(inf1, NVFP4_DTYPE_FLOAT32, {1});
    const float before = sc;
    CHECK(nvfp4_fp8_delayed_update(&tz, &tsc, NVFP4_FP8_E4M3, 0.0f, NVFP4_FP8_AMAX_MAX, nullptr) == NVFP4_SUCCESS);
    CHECK(sc == before);  // amax 0: unchanged
    CHECK(nvfp4_fp8_delayed_update(&ti, &tsc, NVFP4_FP8_E4M3, 0.0f, NVFP4_FP8_AMAX_MAX, nullptr) == NVFP4_SUCCESS);
    CHECK(sc == before && inf1[0] == 0.0f);  // amax inf: unchanged; a length-1 history just clears
    float tiny[1] = {1e-45f};
    nvfp4_tensor_t tt = desc(tiny, NVFP4_DTYPE_FLOAT32, {1});
    CHECK(nvfp4_fp8_delayed_update(&tt, &tsc, NVFP4_FP8_E4M3, 0.0f, NVFP4_FP8_AMAX_MAX, nullptr) == NVFP4_SUCCESS);
    CHECK(sc == 3.40282346638528859812e+38f);  // the quotient overflows: FLT_MAX
    // refusals
    EXPECT_BAD(nvfp4_fp8_delayed_update(nullptr, &tsc, NVFP4_FP8_E4M3, 0.0f, NVFP4_FP8_AMAX_MAX, nullptr), "history");
    EXPECT_BAD(nvfp4_fp8_delayed_update(&th, nullptr, NVFP4_FP8_E4M3, 0.0f, NVFP4_FP8_AMAX_MAX, nullptr), "scale");
    EXPECT_BAD(nvfp4_fp8_delayed_update(&th, &tsc, static_cast<nvfp4_fp8_format_t>(2), 0.0f, NVFP4_FP8_AMAX_MAX,
                                        nullptr), "format");
    EXPECT_BAD(nvfp4_fp8_delayed_update(&th, &tsc, NVFP4_FP8_E4M3, 0.0f, static_cast<nvfp4_fp8_amax_algo_t>(-1),
                                        nullptr), "algo");
    EXPECT_BAD(nvfp4_fp8_delayed_update(&th, &tsc, NVFP4_FP8_E4M3, NAN, NVFP4_FP8_AMAX_MAX, nullptr), "margin");
    nvfp4_tensor_t empty = desc(h, NVFP4_DTYPE_FLOAT32, {0});
    EXPECT_BAD(nvfp4_fp8_delayed_update(&empty, &tsc, NVFP4_FP8_E4M3, 0.0f, NVFP4_FP8_AMAX_MAX, nullptr), "history");
    nvfp4_tensor_t h2d = desc(h, NVFP4_DTYPE_FLOAT32, {2, 2});
    EXPECT_BAD(nvfp4_fp8_delayed_update(&h2d, &tsc, NVFP4_FP8_E4M3, 0.0f, NVFP4_FP8_AMAX_MAX, nullptr), "history");
    nvfp4_tensor_t in_h = desc(h + 2, NVFP4_DTYPE_FLOAT32, {1});
    EXPECT_BAD(nvfp4_fp8_delayed_update(&th, &in_h, NVFP4_FP8_E4M3, 0.0f, NVFP4_FP8_AMAX_MAX, nullptr), "overlaps");
  }
  return finish("fp8");
}

int main(int argc, char** argv) {
  std::string which = argc > 1 ? argv[1] : "all";
  for (int i = 2; i < argc; ++i) g_verbose |= std::string(argv[i]) == "-v";
  try {
    if (which == "args") return test_args();
    if (which == "hardening") return test_hardening();
    if (which == "caps") return test_caps();
    if (which == "cpu_roundtrip") return test_cpu_roundtrip();
    if (which == "fp8") return test_fp8();
    if (which == "gpu_roundtrip") return gpu_entry();
    if (which == "all") {
      int rc = test_args() | test_hardening() | test_caps() | test_cpu_roundtrip() | test_fp8();
      const int g = gpu_entry();
      return rc ? rc : (g == kSkip ? 0 : g);
    }
  } catch (const nvfp4::Error& e) {
    std::fprintf(stderr, "unexpected nvfp4::Error (status %d): %s\n", static_cast<int>(e.status()), e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "unexpected exception: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: %s args|hardening|caps|cpu_roundtrip|fp8|gpu_roundtrip|all [-v]\n", argv[0]);
  return 2;
}
