// ctest for the gather-row entry points of the C API (nvfp4.h's gather section: the FSDP
// weight all-gather).
//
//   test_gather_api args   every malformed call returns INVALID_ARGUMENT naming the parameter;
//                          nothing is written by a refused call
//   test_gather_api cpu    a weight quantized shard by shard (nvfp4_gather_rows_quantize with the
//                          whole weight's amax) and assembled (nvfp4_gather_rows_assemble) is
//                          nvfp4_quantize's 2D quantization of the whole weight, both
//                          orientations, bit for bit; every output byte written (poisoned
//                          before), padding bytes and rows 0; float32 and bfloat16 inputs, NaN,
//                          infinity, zeros, huge and tiny values
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "api_test.h"  // the harness: CHECK, EXPECT_BAD, EXPECT_STATUS, finish
#include "nvfp4/nvfp4.h"

namespace {

using api_test::expect_status;
using api_test::finish;
using api_test::g_checks;
using api_test::g_failures;

#define EXPECT_OK(call) EXPECT_STATUS((call), NVFP4_SUCCESS)

nvfp4_tensor_t desc(const void* p, nvfp4_dtype_t dt, std::vector<int64_t> shape) {
  nvfp4_tensor_t t;
  std::memset(&t, 0, sizeof t);
  t.data = const_cast<void*>(p);
  t.dtype = dt;
  t.ndim = static_cast<int32_t>(shape.size());
  int64_t st = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    t.shape[i] = shape[i];
    t.strides[i] = st;
    st *= shape[i];
  }
  t.device_type = NVFP4_DEVICE_CPU;
  return t;
}

int64_t up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// Host storage of one quantized orientation [rows, cols] with swizzled scales, poisoned.
struct Orientation {
  int64_t rows, cols;
  std::vector<uint8_t> data, scales;
  float amax = -1.0f;
  nvfp4_quantized_t q;
  Orientation(int64_t r, int64_t c, uint8_t poison)
      : rows(r), cols(c), data(static_cast<size_t>(r * c / 2), poison),
        scales(static_cast<size_t>(up(r, 128) * up(c / 16, 4)), poison) {
    q.data = desc(data.data(), NVFP4_DTYPE_UINT8, {r, c / 2});
    q.scales = desc(scales.data(), NVFP4_DTYPE_E4M3, {up(r, 128), up(c / 16, 4)});
    q.amax = desc(&amax, NVFP4_DTYPE_FLOAT32, {1});
  }
};

uint16_t to_bf16(float f) {  // round to nearest even (inputs here are finite or inf/NaN)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float bf16_value(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// ---- args -------------------------------------------------------------------------------
int test_args() {
  const int64_t R = 32, K = 64, RB = K / 2 + K / 16;
  std::vector<float> x(R * K, 1.0f);
  float amax = 1.0f;
  std::vector<uint8_t> out(R * RB, 0xAB);
  nvfp4_tensor_t xd = desc(x.data(), NVFP4_DTYPE_FLOAT32, {R, K});
  nvfp4_tensor_t ad = desc(&amax, NVFP4_DTYPE_FLOAT32, {1});
  nvfp4_tensor_t od = desc(out.data(), NVFP4_DTYPE_UINT8, {R, RB});

  EXPECT_BAD(nvfp4_gather_rows_quantize(nullptr, &ad, &od, nullptr), "x: null descriptor");
  EXPECT_BAD(nvfp4_gather_rows_quantize(&xd, nullptr, &od, nullptr), "amax: null descriptor");
  EXPECT_BAD(nvfp4_gather_rows_quantize(&xd, &ad, nullptr, nullptr), "out: null descriptor");
  nvfp4_tensor_t t = desc(x.data(), NVFP4_DTYPE_UINT8, {R, K});
  EXPECT_BAD(nvfp4_gather_rows_quantize(&t, &ad, &od, nullptr), "x: dtype must be float32");
  t = desc(x.data(), NVFP4_DTYPE_FLOAT32, {R * K});
  EXPECT_BAD(nvfp4_gather_rows_quantize(&t, &ad, &od, nullptr), "x: must have 2 dimensions");
  t = desc(x.data(), NVFP4_DTYPE_FLOAT32, {24, K});
  EXPECT_BAD(nvfp4_gather_rows_quantize(&t, &ad, &od, nullptr), "x: rows must be a multiple of 16");
  t = desc(x.data(), NVFP4_DTYPE_FLOAT32, {16, 40});
  EXPECT_BAD(nvfp4_gather_rows_quantize(&t, &ad, &od, nullptr), "x: K must be a multiple of 16");
  t = desc(out.data(), NVFP4_DTYPE_UINT8, {R, RB - 1});
  EXPECT_BAD(nvfp4_gather_rows_quantize(&xd, &ad, &t, nullptr), "out: rows of 35 bytes cannot hold");
  t = desc(out.data(), NVFP4_DTYPE_UINT8, {16, RB});
  EXPECT_BAD(nvfp4_gather_rows_quantize(&xd, &ad, &t, nullptr), "out: 16 rows, fewer than x's 32");
  t = desc(out.data(), NVFP4_DTYPE_FLOAT32, {R, RB / 4});
  EXPECT_BAD(nvfp4_gather_rows_quantize(&xd, &ad, &t, nullptr), "out: dtype must be uint8");
  t = desc(&amax, NVFP4_DTYPE_FLOAT16, {1});
  EXPECT_BAD(nvfp4_gather_rows_quantize(&xd, &t, &od, nullptr), "amax: must be float32 with 1 element");
  t = desc(x.data(), NVFP4_DTYPE_FLOAT32, {2});
  EXPECT_BAD(nvfp4_gather_rows_quantize(&xd, &t, &od, nullptr), "amax: must be float32 with 1 element");
  t = desc(x.data(), NVFP4_DTYPE_UINT8, {R, RB});  // out over x's bytes
  EXPECT_BAD(nvfp4_gather_rows_quantize(&xd, &ad, &t, nullptr), "out: overlaps x");
  t = desc(x.data(), NVFP4_DTYPE_FLOAT32, {1});  // the amax inside x is an input: fine
  EXPECT_OK(nvfp4_gather_rows_quantize(&xd, &t, &od, nullptr));

  // assemble
  Orientation w(R, K, 0xAB), wt(K, R, 0xAB);
  std::vector<uint8_t> w_before = w.data;
  nvfp4_tensor_t in = desc(out.data(), NVFP4_DTYPE_UINT8, {R, RB});
  EXPECT_BAD(nvfp4_gather_rows_assemble(nullptr, &ad, &w.q, &wt.q, nullptr), "in: null descriptor");
  EXPECT_BAD(nvfp4_gather_rows_assemble(&in, &ad, nullptr, nullptr, nullptr), "at least one output");
  EXPECT_BAD(nvfp4_gather_rows_assemble(&in, nullptr, &w.q, &wt.q, nullptr), "amax: null descriptor");
  t = desc(out.data(), NVFP4_DTYPE_UINT8, {16, RB});
  EXPECT_BAD(nvfp4_gather_rows_assemble(&t, &ad, &w.q, &wt.q, nullptr), "in: 16 rows, fewer than the weight's 32");
  t = desc(out.data(), NVFP4_DTYPE_UINT8, {R, K / 2});
  EXPECT_BAD(nvfp4_gather_rows_assemble(&t, &ad, &w.q, &wt.q, nullptr), "in: rows of 32 bytes cannot hold");
  t = desc(out.data(), NVFP4_DTYPE_FLOAT16, {R, RB / 2});
  EXPECT_BAD(nvfp4_gather_rows_assemble(&t, &ad, &w.q, &wt.q, nullptr), "in: dtype must be uint8");
  {
    Orientation bad(24, K, 0);  // N = 24: not whole tiles
    EXPECT_BAD(nvfp4_gather_rows_assemble(&in, &ad, &bad.q, nullptr, nullptr), "N (the weight's rows): must be a multiple of 16");
    Orientation badk(R, 40, 0);
    EXPECT_BAD(nvfp4_gather_rows_assemble(&in, &ad, &badk.q, nullptr, nullptr), "K (the weight's columns)");
    Orientation wrong_t(K, 2 * R, 0);  // W^T of another N
    EXPECT_BAD(nvfp4_gather_rows_assemble(&in, &ad, &w.q, &wrong_t.q, nullptr), "columnwise.data: expected shape [64, 16]");
  }
  nvfp4_quantized_t q = w.q;
  q.scales = desc(w.scales.data(), NVFP4_DTYPE_E4M3, {R, K / 16});  // linear scales: refused
  EXPECT_BAD(nvfp4_gather_rows_assemble(&in, &ad, &q, nullptr, nullptr), "rowwise.scales: expected shape [128, 4]");
  q = wt.q;
  q.data = desc(w.data.data(), NVFP4_DTYPE_UINT8, {K, R / 2});  // W^T's data over W's: overlapping outputs
  EXPECT_BAD(nvfp4_gather_rows_assemble(&in, &ad, &w.q, &q, nullptr), "overlaps rowwise.data");
  q = w.q;
  q.data = desc(out.data(), NVFP4_DTYPE_UINT8, {R, K / 2});  // an output over the input rows
  EXPECT_BAD(nvfp4_gather_rows_assemble(&in, &ad, &q, nullptr, nullptr), "rowwise.data: overlaps in");
  CHECK(w.data == w_before);  // nothing written by the refused calls
  EXPECT_OK(nvfp4_gather_rows_assemble(&in, &ad, &w.q, &wt.q, nullptr));
  return finish("test_gather_api args");
}

// ---- cpu --------------------------------------------------------------------------------
enum class Special { kNone, kNan, kInf, kZeros, kHuge, kTiny };

// W [N, K] quantized in `world` shards of `chunk` rows (the last ones may be short or empty),
// each into rows of `row_bytes` (>= K/2 + K/16), put together and assembled; compared with
// nvfp4_quantize (2D) of the whole weight.
void check_weight(int64_t N, int64_t K, int64_t chunk, int64_t row_bytes, nvfp4_dtype_t dt, Special sp, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> w(static_cast<size_t>(N * K));
  for (int64_t r = 0; r < N; ++r)
    for (int64_t c = 0; c < K; ++c) w[r * K + c] = nd(rng) * std::ldexp(1.0f, static_cast<int>(r % 5) - 2);
  const int64_t last = N * K - 1;
  switch (sp) {
    case Special::kNan: w[(N - 1) * K + 3] = std::numeric_limits<float>::quiet_NaN(); break;  // the last shard only
    case Special::kInf: w[5] = -std::numeric_limits<float>::infinity(); break;
    case Special::kZeros: std::fill(w.begin(), w.end(), 0.0f); w[last] = -0.0f; break;
    case Special::kHuge: for (float& f : w) f *= 1e37f; break;
    case Special::kTiny: for (float& f : w) f *= 1e-38f; break;
    case Special::kNone: w[(rng() % N) * K + rng() % K] = 300.0f; break;  // one tile's scale stands out
  }
  std::vector<uint16_t> wb;
  const void* src = w.data();
  if (dt == NVFP4_DTYPE_BFLOAT16) {
    wb.resize(w.size());
    for (size_t i = 0; i < w.size(); ++i) {
      wb[i] = to_bf16(w[i]);
      w[i] = bf16_value(wb[i]);
    }
    src = wb.data();
  }
  const int64_t esz = dt == NVFP4_DTYPE_BFLOAT16 ? 2 : 4;
  float amax = 0.0f;
  for (float f : w) amax = std::isnan(f) || std::isnan(amax) ? std::numeric_limits<float>::quiet_NaN() : std::max(amax, std::fabs(f));

  // the whole weight, one process
  nvfp4_tensor_t wd = desc(src, dt, {N, K});
  nvfp4_quant_config_t cfg;
  nvfp4_quant_config_default(&cfg);
  cfg.block = NVFP4_BLOCK_2D;
  Orientation ref(N, K, 0), ref_t(K, N, 0);
  EXPECT_OK(nvfp4_quantize(&wd, &cfg, &ref.q, &ref_t.q, nullptr));

  // the shards, each rank's rows in a buffer of `chunk` rows, then put together
  const int64_t world = (N + chunk - 1) / chunk + 1;  // one empty rank at the end
  std::vector<uint8_t> all(static_cast<size_t>(world * chunk * row_bytes), 0xCD);
  for (int64_t rank = 0; rank < world; ++rank) {
    const int64_t r0 = std::min(N, rank * chunk), rows = std::min(N, r0 + chunk) - r0;
    uint8_t* dst = all.data() + rank * chunk * row_bytes;
    nvfp4_tensor_t xs = desc(static_cast<const char*>(src) + r0 * K * esz, dt, {rows, K});
    nvfp4_tensor_t ad = desc(&amax, NVFP4_DTYPE_FLOAT32, {1});
    nvfp4_tensor_t od = desc(dst, NVFP4_DTYPE_UINT8, {chunk, row_bytes});
    EXPECT_OK(nvfp4_gather_rows_quantize(&xs, &ad, &od, nullptr));
    for (int64_t r = 0; r < chunk; ++r)
      for (int64_t b = 0; b < row_bytes; ++b) {
        const uint8_t v = dst[r * row_bytes + b];
        if (r >= rows || b >= K / 2 + K / 16) CHECK(v == 0);  // padding rows and bytes
        if (r < rows && b < K / 2) CHECK(v == ref.data[(r0 + r) * (K / 2) + b]);  // the codes, already here
      }
  }
  for (uint8_t poison : {uint8_t{0x00}, uint8_t{0xFF}}) {
    Orientation got(N, K, poison), got_t(K, N, poison);
    nvfp4_tensor_t in = desc(all.data(), NVFP4_DTYPE_UINT8, {world * chunk, row_bytes});
    nvfp4_tensor_t ad = desc(&amax, NVFP4_DTYPE_FLOAT32, {1});
    EXPECT_OK(nvfp4_gather_rows_assemble(&in, &ad, &got.q, &got_t.q, nullptr));
    CHECK(got.data == ref.data);
    CHECK(got.scales == ref.scales);
    CHECK(got_t.data == ref_t.data);
    CHECK(got_t.scales == ref_t.scales);
    CHECK(std::memcmp(&got.amax, &ref.amax, 4) == 0);
    CHECK(std::memcmp(&got_t.amax, &ref_t.amax, 4) == 0);
    // one direction alone writes the same bytes
    Orientation only_t(K, N, static_cast<uint8_t>(~poison));
    EXPECT_OK(nvfp4_gather_rows_assemble(&in, &ad, nullptr, &only_t.q, nullptr));
    CHECK(only_t.data == ref_t.data && only_t.scales == ref_t.scales);
    if (g_failures) {
      std::fprintf(stderr, "  weight [%lld, %lld] in chunks of %lld rows, row_bytes %lld, dtype %d, case %d\n",
                   static_cast<long long>(N), static_cast<long long>(K), static_cast<long long>(chunk),
                   static_cast<long long>(row_bytes), static_cast<int>(dt), static_cast<int>(sp));
      return;
    }
  }
}

int test_cpu() {
  struct Case { int64_t n, k, chunk, extra; };
  const Case cases[] = {{16, 16, 16, 0}, {64, 32, 32, 0}, {96, 48, 32, 0}, {48, 16, 16, 0}, {144, 80, 64, 3},
                        {272, 160, 128, 0}, {32, 1040, 16, 7}, {256, 64, 256, 0}};
  uint64_t seed = 1;
  for (const Case& c : cases)
    for (nvfp4_dtype_t dt : {NVFP4_DTYPE_FLOAT32, NVFP4_DTYPE_BFLOAT16})
      check_weight(c.n, c.k, c.chunk, c.k / 2 + c.k / 16 + c.extra, dt, Special::kNone, seed++);
  for (Special sp : {Special::kNan, Special::kInf, Special::kZeros, Special::kHuge, Special::kTiny})
    check_weight(64, 48, 32, 48 / 2 + 3, NVFP4_DTYPE_FLOAT32, sp, seed++);
  return finish("test_gather_api cpu");
}

}  // namespace

int main(int argc, char** argv) {
  const std::string which = argc > 1 ? argv[1] : "";
  if (which == "args") return test_args();
  if (which == "cpu") return test_cpu();
  std::fprintf(stderr, "usage: %s args|cpu\n", argv[0]);
  return 2;
}
