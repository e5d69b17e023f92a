// The FP8 cast and its delayed-scaling update on the CPU.
#include "api_test.h"

namespace api_test {

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
  // amax_accumulate (delayed scaling): max |x| = 2 combined with what the slot holds
  {
    nvfp4_fp8_config_t acfg{NVFP4_FP8_E5M2, 0.0f, &tscale, 1};
    amax = 5.0f;
    EXPECT_STATUS(nvfp4_fp8_cast(&in, &acfg, &tq, nullptr, &ts, &ta, nullptr), NVFP4_SUCCESS);
    CHECK(amax == 5.0f && q[0] == 0x68);
    amax = 0.0f;
    EXPECT_STATUS(nvfp4_fp8_cast(&in, &acfg, &tq, nullptr, &ts, &ta, nullptr), NVFP4_SUCCESS);
    CHECK(amax == 2.0f);
    amax = NAN;
    EXPECT_STATUS(nvfp4_fp8_cast(&in, &acfg, &tq, nullptr, &ts, &ta, nullptr), NVFP4_SUCCESS);
    CHECK(std::isnan(amax));
    EXPECT_BAD(nvfp4_fp8_cast(&in, &acfg, &tq, nullptr, &ts, nullptr, nullptr), "amax: required with");
    nvfp4_fp8_config_t bad{NVFP4_FP8_E4M3, 0.0f, nullptr, 1};
    EXPECT_BAD(nvfp4_fp8_cast(&in, &bad, &tq, nullptr, &ts, &ta, nullptr), "cfg.amax_accumulate: only with delayed");
    bad.scale = &tscale;
    bad.amax_accumulate = 2;
    EXPECT_BAD(nvfp4_fp8_cast(&in, &bad, &tq, nullptr, &ts, &ta, nullptr), "cfg.amax_accumulate: must be 0 or 1");
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

}  // namespace api_test
