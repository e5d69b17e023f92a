// ctest for the MXFP4 entry points of the C API (nvfp4_mx_*) and their C++ layer (nvfp4::mx).
//
//   test_mx_api args            every malformed call returns INVALID_ARGUMENT with a message
//                               naming the parameter; nothing crashes
//   test_mx_api cpu_roundtrip   quantize -> dequantize on the CPU against an independent
//                               decoder; offset_device is read as a host counter
//   test_mx_api cpu_gemm        nvfp4_mx_gemm (reference runner) against an independent
//                               float64 product; its refusals
//   test_mx_api gpu_roundtrip   the same on a CUDA device, bit-exact with the CPU results,
//                               offset_device in device memory (exit 77 = skipped: no GPU)
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#if defined(NVFP4_TEST_CUDA)
#define NVFP4_HPP_CUDA_RUNTIME 1
#endif
#include "nvfp4/nvfp4.h"
#include "nvfp4/nvfp4.hpp"

namespace {

constexpr int kSkip = 77;
int g_checks = 0, g_failures = 0;

#define CHECK(cond)                                                                  \
  do {                                                                               \
    ++g_checks;                                                                      \
    if (!(cond)) {                                                                   \
      ++g_failures;                                                                  \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                                \
  } while (0)

// A malformed call: INVALID_ARGUMENT, and a message that contains `needle` (so the intended
// check fired, not another one).
#define EXPECT_BAD(call, needle) expect_bad((call), (needle), #call, __LINE__)
void expect_bad(nvfp4_status_t got, const char* needle, const char* expr, int line) {
  ++g_checks;
  const std::string msg = nvfp4_last_error();
  if (got != NVFP4_ERROR_INVALID_ARGUMENT || msg.find(needle) == std::string::npos) {
    ++g_failures;
    std::fprintf(stderr, "line %d: %s\n  returned %d, message \"%s\", expected INVALID_ARGUMENT mentioning \"%s\"\n",
                 line, expr, static_cast<int>(got), msg.c_str(), needle);
  }
}

int finish(const char* name) {
  std::printf("%s: %d checks, %d failed\n", name, g_checks, g_failures);
  return g_failures == 0 ? 0 : 1;
}

constexpr int64_t R = 45, C = 96;  // odd rows: the columnwise output pads to 64

std::vector<float> input() {
  std::mt19937 rng(7);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> x(R * C);
  for (int64_t i = 0; i < R * C; ++i) x[i] = n(rng) * std::ldexp(1.0f, static_cast<int>(i / C) % 11 - 5);
  return x;
}

// An independent decoder: code -> E2M1 value, byte -> 2^(b-127).
float decode(uint8_t code, uint8_t scale) {
  static const float kMag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  if (scale == 0xFF) return NAN;
  const float v = kMag[code & 7] * std::ldexp(1.0f, int(scale) - 127);
  return (code & 8) ? -v : v;
}

struct Host {
  std::vector<uint8_t> rd, rs, cd, cs;
  nvfp4::mx::Layout rl, cl;
  explicit Host(nvfp4_scale_layout_t layout)
      : rl(nvfp4::mx::rowwise_layout(R, C, layout)), cl(nvfp4::mx::columnwise_layout(R, C, layout)) {
    rd.assign(rl.data_bytes(), 0xA5);
    rs.assign(rl.scale_bytes(), 0xA5);
    cd.assign(cl.data_bytes(), 0xA5);
    cs.assign(cl.scale_bytes(), 0xA5);
  }
};

int test_args() {
  const std::vector<float> x = input();
  nvfp4::TensorView in(x.data(), NVFP4_DTYPE_FLOAT32, {R, C});
  Host h(NVFP4_SCALES_LINEAR);
  nvfp4::mx::QuantizedView row(h.rl, h.rd.data(), h.rs.data());
  nvfp4::mx::QuantizedView col(h.cl, h.cd.data(), h.cs.data());
  nvfp4_mx_quant_config_t cfg;
  nvfp4_mx_quant_config_default(&cfg);
  CHECK(cfg.rowwise.rounding == NVFP4_ROUND_NEAREST && cfg.rowwise.scale_rule == NVFP4_MX_SCALE_OCP);
  CHECK(cfg.columnwise.rounding == NVFP4_ROUND_NEAREST && cfg.scale_layout == NVFP4_SCALES_SWIZZLED);
  CHECK(cfg.seed == 0 && cfg.offset == 0 && cfg.offset_device == nullptr);
  cfg.scale_layout = NVFP4_SCALES_LINEAR;
  CHECK(nvfp4_mx_quantize(in.get(), &cfg, row.get(), col.get(), nullptr) == NVFP4_SUCCESS);

  EXPECT_BAD(nvfp4_mx_quantize(nullptr, &cfg, row.get(), nullptr, nullptr), "input");
  EXPECT_BAD(nvfp4_mx_quantize(in.get(), nullptr, row.get(), nullptr, nullptr), "cfg");
  EXPECT_BAD(nvfp4_mx_quantize(in.get(), &cfg, nullptr, nullptr, nullptr), "at least one output");
  nvfp4_mx_quant_config_t bad = cfg;
  bad.rowwise.rounding = static_cast<nvfp4_rounding_t>(9);
  EXPECT_BAD(nvfp4_mx_quantize(in.get(), &bad, row.get(), nullptr, nullptr), "cfg.rowwise.rounding");
  bad = cfg;
  bad.columnwise.scale_rule = static_cast<nvfp4_mx_scale_rule_t>(3);
  EXPECT_BAD(nvfp4_mx_quantize(in.get(), &bad, nullptr, col.get(), nullptr), "cfg.columnwise.scale_rule");
  bad = cfg;
  bad.scale_layout = NVFP4_SCALES_SWIZZLED;  // the views are linear
  EXPECT_BAD(nvfp4_mx_quantize(in.get(), &bad, row.get(), nullptr, nullptr), "rowwise.scales: expected shape");
  bad = cfg;
  bad.offset_device = reinterpret_cast<const uint64_t*>(reinterpret_cast<uintptr_t>(&cfg) | 1u);
  EXPECT_BAD(nvfp4_mx_quantize(in.get(), &bad, row.get(), nullptr, nullptr), "offset_device");
  nvfp4::TensorView in48(x.data(), NVFP4_DTYPE_FLOAT32, {R, 48});
  EXPECT_BAD(nvfp4_mx_quantize(in48.get(), &cfg, row.get(), nullptr, nullptr), "multiple of 32");
  nvfp4::TensorView in_u8(x.data(), NVFP4_DTYPE_UINT8, {R, C});
  EXPECT_BAD(nvfp4_mx_quantize(in_u8.get(), &cfg, row.get(), nullptr, nullptr), "input: dtype");
  nvfp4::mx::QuantizedView e4m3 = row;
  e4m3.get()->scales.dtype = NVFP4_DTYPE_E4M3;
  EXPECT_BAD(nvfp4_mx_quantize(in.get(), &cfg, e4m3.get(), nullptr, nullptr), "rowwise.scales: dtype");
  EXPECT_BAD(nvfp4_mx_quantize(in.get(), &cfg, col.get(), nullptr, nullptr), "rowwise.data: expected shape");

  std::vector<float> out(R * C);
  nvfp4::TensorView o(out.data(), NVFP4_DTYPE_FLOAT32, {R, C});
  CHECK(nvfp4_mx_dequantize(row.get(), NVFP4_SCALES_LINEAR, o.get(), nullptr) == NVFP4_SUCCESS);
  EXPECT_BAD(nvfp4_mx_dequantize(nullptr, NVFP4_SCALES_LINEAR, o.get(), nullptr), "q");
  EXPECT_BAD(nvfp4_mx_dequantize(row.get(), NVFP4_SCALES_SWIZZLED, o.get(), nullptr), "q.scales: expected shape");
  EXPECT_BAD(nvfp4_mx_dequantize(row.get(), static_cast<nvfp4_scale_layout_t>(5), o.get(), nullptr), "scale_layout");
  nvfp4::TensorView o_small(out.data(), NVFP4_DTYPE_FLOAT32, {R, 64});
  EXPECT_BAD(nvfp4_mx_dequantize(row.get(), NVFP4_SCALES_LINEAR, o_small.get(), nullptr), "out: expected shape");
  nvfp4::TensorView o_u8(out.data(), NVFP4_DTYPE_UINT8, {R, C});
  EXPECT_BAD(nvfp4_mx_dequantize(row.get(), NVFP4_SCALES_LINEAR, o_u8.get(), nullptr), "out: dtype");
  // The C++ layer turns a failure into nvfp4::Error with the message.
  bool threw = false;
  try {
    nvfp4::mx::rowwise_layout(R, 48);
  } catch (const nvfp4::Error& e) {
    threw = std::string(e.what()).find("multiple of 32") != std::string::npos;
  }
  CHECK(threw);
  return finish("args");
}

// Quantizes x on `dev` into h's buffers (the caller moves them), checks against the decoder.
void check_decoded(const Host& h, const std::vector<float>& x, nvfp4_scale_layout_t layout) {
  const bool swz = layout == NVFP4_SCALES_SWIZZLED;
  auto scale_at = [&](const std::vector<uint8_t>& s, int64_t r, int64_t c, int64_t nb) {
    return s[swz ? nvfp4::swizzled_scale_offset(r, c, nb) : r * nb + c];
  };
  double max_rel = 0.0;
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) {
      const uint8_t byte = h.rd[r * (C / 2) + c / 2];
      const float v = decode((c & 1) ? byte >> 4 : byte & 15, scale_at(h.rs, r, c / 32, C / 32));
      const uint8_t byte_t = h.cd[c * (h.cl.cols / 2) + r / 2];
      const float vt = decode((r & 1) ? byte_t >> 4 : byte_t & 15, scale_at(h.cs, c, r / 32, h.cl.cols / 32));
      // Rowwise (ceil rule, |x| <= 6 * 2^s): within half the largest E2M1 step, |v - x| <= 2^s.
      // Columnwise (ocp rule, |x| < 8 * 2^s): values above 6 * 2^s saturate, |v - x| < 2 * 2^s.
      const float s = std::ldexp(1.0f, int(scale_at(h.rs, r, c / 32, C / 32)) - 127);
      CHECK(std::fabs(v - x[r * C + c]) <= s);
      const float st = std::ldexp(1.0f, int(scale_at(h.cs, c, r / 32, h.cl.cols / 32)) - 127);
      CHECK(std::fabs(vt - x[r * C + c]) < 2.0f * st);
      max_rel = std::fmax(max_rel, std::fabs(v - x[r * C + c]) / s);
    }
  CHECK(max_rel > 0.0);  // not trivially exact
  // x^T's padding rows (R .. roundup(R,32)) are zero codes
  for (int64_t c = 0; c < C; ++c)
    for (int64_t r = R; r < h.cl.cols; ++r) CHECK(((h.cd[c * (h.cl.cols / 2) + r / 2] >> (4 * (r & 1))) & 15) == 0);
}

int test_cpu() {
  const std::vector<float> x = input();
  nvfp4::TensorView in(x.data(), NVFP4_DTYPE_FLOAT32, {R, C});
  for (nvfp4_scale_layout_t layout : {NVFP4_SCALES_LINEAR, NVFP4_SCALES_SWIZZLED}) {
    Host h(layout);
    nvfp4::mx::QuantizedView row(h.rl, h.rd.data(), h.rs.data()), col(h.cl, h.cd.data(), h.cs.data());
    nvfp4::mx::QuantConfig cfg;
    cfg.scale_layout(layout).rowwise(NVFP4_ROUND_NEAREST, NVFP4_MX_SCALE_CEIL);
    nvfp4::mx::quantize(in, cfg, &row, &col);
    check_decoded(h, x, layout);
    // dequantize = the decoder
    std::vector<float> out(R * C);
    nvfp4::TensorView o(out.data(), NVFP4_DTYPE_FLOAT32, {R, C});
    nvfp4::mx::dequantize(row, o);
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < C; ++c) {
        const uint8_t byte = h.rd[r * (C / 2) + c / 2];
        const int64_t so = layout == NVFP4_SCALES_SWIZZLED ? nvfp4::swizzled_scale_offset(r, c / 32, C / 32)
                                                             : r * (C / 32) + c / 32;
        CHECK(out[r * C + c] == decode((c & 1) ? byte >> 4 : byte & 15, h.rs[so]));
      }
    // Stochastic rounding: offset_device is added to offset when the work runs.
    Host a(layout), b(layout);
    nvfp4::mx::QuantizedView ra(a.rl, a.rd.data(), a.rs.data()), rb(b.rl, b.rd.data(), b.rs.data());
    const uint64_t counter = 41;
    nvfp4::mx::QuantConfig sr;
    sr.scale_layout(layout).both(NVFP4_ROUND_STOCHASTIC, NVFP4_MX_SCALE_OCP).seed(99, 1).offset_device(&counter);
    nvfp4::mx::quantize(in, sr, &ra, nullptr);
    nvfp4::mx::QuantConfig sr2;
    sr2.scale_layout(layout).both(NVFP4_ROUND_STOCHASTIC, NVFP4_MX_SCALE_OCP).seed(99, 42);
    nvfp4::mx::quantize(in, sr2, &rb, nullptr);
    CHECK(a.rd == b.rd && a.rs == b.rs);
    nvfp4::mx::QuantConfig sr3;
    sr3.scale_layout(layout).both(NVFP4_ROUND_STOCHASTIC, NVFP4_MX_SCALE_OCP).seed(99, 43);
    nvfp4::mx::quantize(in, sr3, &rb, nullptr);
    CHECK(a.rd != b.rd);
  }
  return finish("cpu_roundtrip");
}

// nvfp4_mx_gemm on the CPU (the reference runner) against an independent float64 product
// of the decoded operands, with bias and beta * C (C aliasing D), both scale layouts; and
// its refusals.
int test_cpu_gemm() {
  constexpr int64_t N = 40;
  const std::vector<float> x = input();
  std::vector<float> w(N * C);
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (float& v : w) v = nd(rng);
  std::vector<float> bias(N), c0(R * N);
  for (float& v : bias) v = nd(rng);
  for (float& v : c0) v = nd(rng);
  nvfp4::TensorView in_x(x.data(), NVFP4_DTYPE_FLOAT32, {R, C}), in_w(w.data(), NVFP4_DTYPE_FLOAT32, {N, C});
  for (nvfp4_scale_layout_t layout : {NVFP4_SCALES_LINEAR, NVFP4_SCALES_SWIZZLED}) {
    const nvfp4::mx::Layout la = nvfp4::mx::rowwise_layout(R, C, layout), lb = nvfp4::mx::rowwise_layout(N, C, layout);
    std::vector<uint8_t> ad(la.data_bytes()), as(la.scale_bytes()), bd(lb.data_bytes()), bs(lb.scale_bytes());
    nvfp4::mx::QuantizedView a(la, ad.data(), as.data()), b(lb, bd.data(), bs.data());
    nvfp4::mx::QuantConfig cfg;
    cfg.scale_layout(layout);
    nvfp4::mx::quantize(in_x, cfg, &a, nullptr);
    cfg.both(NVFP4_ROUND_STOCHASTIC, NVFP4_MX_SCALE_CEIL).seed(5);
    nvfp4::mx::quantize(in_w, cfg, &b, nullptr);
    const bool swz = layout == NVFP4_SCALES_SWIZZLED;
    auto value = [&](const std::vector<uint8_t>& d, const std::vector<uint8_t>& sc, int64_t r, int64_t k) {
      const uint8_t byte = d[r * (C / 2) + k / 2];
      const int64_t so = swz ? nvfp4::swizzled_scale_offset(r, k / 32, C / 32) : r * (C / 32) + k / 32;
      return static_cast<double>(decode((k & 1) ? byte >> 4 : byte & 15, sc[so]));
    };
    std::vector<float> d = c0;  // C aliases D
    nvfp4::TensorView dv(d.data(), NVFP4_DTYPE_FLOAT32, {R, N}), bv(bias.data(), NVFP4_DTYPE_FLOAT32, {N});
    nvfp4::mx::Gemm g(a, b, dv);
    g.accumulate(dv, -0.5f).bias(bv).backend(NVFP4_BACKEND_REFERENCE);
    CHECK(g.workspace_bytes() == 0);
    g.run();
    for (int64_t i = 0; i < R; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double ref = 0.0, mag = 0.0;
        for (int64_t k = 0; k < C; ++k) {
          const double p = value(ad, as, i, k) * value(bd, bs, j, k);
          ref += p;
          mag += std::fabs(p);
        }
        ref += bias[j] - 0.5 * c0[i * N + j];
        mag += std::fabs(bias[j]) + 0.5 * std::fabs(c0[i * N + j]);
        CHECK(std::fabs(d[i * N + j] - ref) <= 1e-12 * mag + std::ldexp(std::fabs(ref), -24));
      }
  }
  // Refusals, each naming its parameter.
  const nvfp4::mx::Layout la = nvfp4::mx::rowwise_layout(R, C, NVFP4_SCALES_LINEAR);
  std::vector<uint8_t> ad(la.data_bytes()), as(la.scale_bytes());
  nvfp4::mx::QuantizedView a(la, ad.data(), as.data());
  std::vector<float> d(R * R);
  nvfp4::TensorView dv(d.data(), NVFP4_DTYPE_FLOAT32, {R, R});
  nvfp4::mx::Gemm ok(a, a, dv);
  nvfp4_mx_gemm_args_t args = ok.args();
  CHECK(nvfp4_mx_gemm(&args, nullptr, 0, nullptr) == NVFP4_SUCCESS);
  EXPECT_BAD(nvfp4_mx_gemm(nullptr, nullptr, 0, nullptr), "args");
  nvfp4_mx_gemm_args_t bad = args;
  bad.b = nullptr;
  EXPECT_BAD(nvfp4_mx_gemm(&bad, nullptr, 0, nullptr), "b: null");
  bad = args;
  bad.scale_layout = NVFP4_SCALES_SWIZZLED;  // the views are linear
  EXPECT_BAD(nvfp4_mx_gemm(&bad, nullptr, 0, nullptr), "a.scales: expected shape");
  bad = args;
  bad.backend = static_cast<nvfp4_backend_t>(7);
  EXPECT_BAD(nvfp4_mx_gemm(&bad, nullptr, 0, nullptr), "backend");
  bad = args;
  bad.beta = 1.0f;
  EXPECT_BAD(nvfp4_mx_gemm(&bad, nullptr, 0, nullptr), "beta");
  std::vector<float> d_small(R * 8);
  nvfp4::TensorView ds(d_small.data(), NVFP4_DTYPE_FLOAT32, {R, 8});
  bad = args;
  bad.d = ds.get();
  EXPECT_BAD(nvfp4_mx_gemm(&bad, nullptr, 0, nullptr), "d: expected shape");
  // K = 48: a whole number of bytes but not of 32-value blocks.
  nvfp4_mx_quantized_t k48{};
  k48.data = nvfp4::TensorView(ad.data(), NVFP4_DTYPE_UINT8, {R, 24}).c();
  k48.scales = nvfp4::TensorView(as.data(), NVFP4_DTYPE_UINT8, {R, 1}).c();
  bad = args;
  bad.a = &k48;
  bad.b = &k48;
  EXPECT_BAD(nvfp4_mx_gemm(&bad, nullptr, 0, nullptr), "multiple of 32");
  bad.b = a.get();
  EXPECT_BAD(nvfp4_mx_gemm(&bad, nullptr, 0, nullptr), "K mismatch");
  // d overlapping an operand
  nvfp4::TensorView d_on_a(ad.data(), NVFP4_DTYPE_FLOAT32, {R, 4});
  nvfp4_mx_gemm_args_t overlap = args;
  nvfp4::mx::Layout l4 = nvfp4::mx::rowwise_layout(4, C, NVFP4_SCALES_LINEAR);
  nvfp4::mx::QuantizedView b4(l4, ad.data() + 8 * la.data_cols, as.data());
  overlap.b = b4.get();
  overlap.d = d_on_a.get();
  EXPECT_BAD(nvfp4_mx_gemm(&overlap, nullptr, 0, nullptr), "overlap");
  // The C++ builder refuses operands of different scale layouts by name.
  {
    const nvfp4::mx::Layout ls = nvfp4::mx::rowwise_layout(R, C, NVFP4_SCALES_SWIZZLED);
    std::vector<uint8_t> sd(ls.data_bytes()), ss(ls.scale_bytes());
    nvfp4::mx::QuantizedView swz(ls, sd.data(), ss.data());
    bool threw = false;
    try {
      nvfp4::mx::Gemm mixed(a, swz, dv);
    } catch (const nvfp4::Error& e) {
      threw = std::string(e.what()).find("mx::Gemm: a and b have different scale layouts") != std::string::npos;
    }
    CHECK(threw);
  }
  // CPU tensors run on the reference only.
  bad = args;
  bad.backend = NVFP4_BACKEND_CUTLASS;
  CHECK(nvfp4_mx_gemm(&bad, nullptr, 0, nullptr) == NVFP4_ERROR_NOT_SUPPORTED);
  CHECK(std::string(nvfp4_last_error()).find("backend") != std::string::npos);
  return finish("cpu_gemm");
}

int test_gpu() {
#if defined(NVFP4_TEST_CUDA)
  if (nvfp4_cuda_device_count() == 0) {
    std::printf("gpu_roundtrip: no CUDA device, skipped\n");
    return kSkip;
  }
  const std::vector<float> x = input();
  const nvfp4::Device dev = nvfp4::Device::cuda(0);
  nvfp4::cuda::Buffer dx(x.size() * sizeof(float));
  dx.upload(x.data(), x.size() * sizeof(float));
  nvfp4::TensorView in_h(x.data(), NVFP4_DTYPE_FLOAT32, {R, C});
  nvfp4::TensorView in_d(dx.get(), NVFP4_DTYPE_FLOAT32, {R, C}, dev);
  const uint64_t counter = 5;
  nvfp4::cuda::Buffer dcounter(sizeof counter);
  dcounter.upload(&counter, sizeof counter);
  for (nvfp4_scale_layout_t layout : {NVFP4_SCALES_LINEAR, NVFP4_SCALES_SWIZZLED}) {
    Host want(layout), got(layout);
    nvfp4::mx::QuantizedView wr(want.rl, want.rd.data(), want.rs.data()), wc(want.cl, want.cd.data(), want.cs.data());
    nvfp4::mx::QuantConfig cfg;
    cfg.scale_layout(layout).rowwise(NVFP4_ROUND_STOCHASTIC, NVFP4_MX_SCALE_TETRAJET)
        .columnwise(NVFP4_ROUND_NEAREST, NVFP4_MX_SCALE_CEIL).seed(3, 10);
    nvfp4::mx::quantize(in_h, cfg.offset_device(&counter), &wr, &wc);
    nvfp4::cuda::Buffer rd(got.rd.size()), rs(got.rs.size()), cd(got.cd.size()), cs(got.cs.size());
    rd.upload(got.rd.data(), got.rd.size());  // poison (0xA5) on the device too
    rs.upload(got.rs.data(), got.rs.size());
    cd.upload(got.cd.data(), got.cd.size());
    cs.upload(got.cs.data(), got.cs.size());
    nvfp4::mx::QuantizedView gr(got.rl, rd.get(), rs.get(), dev), gc(got.cl, cd.get(), cs.get(), dev);
    nvfp4::mx::quantize(in_d, cfg.offset_device(static_cast<const uint64_t*>(dcounter.get())), &gr, &gc);
    rd.download(got.rd.data(), got.rd.size());
    rs.download(got.rs.data(), got.rs.size());
    cd.download(got.cd.data(), got.cd.size());
    cs.download(got.cs.data(), got.cs.size());
    CHECK(got.rd == want.rd);
    CHECK(got.rs == want.rs);
    CHECK(got.cd == want.cd);
    CHECK(got.cs == want.cs);
    std::vector<float> out_h(R * C), out_g(R * C);
    nvfp4::TensorView oh(out_h.data(), NVFP4_DTYPE_FLOAT32, {R, C});
    nvfp4::mx::dequantize(wr, oh);
    nvfp4::cuda::Buffer dout(out_g.size() * sizeof(float));
    nvfp4::TensorView od(dout.get(), NVFP4_DTYPE_FLOAT32, {R, C}, dev);
    nvfp4::mx::dequantize(gr, od);
    dout.download(out_g.data(), out_g.size() * sizeof(float));
    CHECK(std::memcmp(out_g.data(), out_h.data(), out_h.size() * sizeof(float)) == 0);
  }
  return finish("gpu_roundtrip");
#else
  std::printf("gpu_roundtrip: built without the CUDA runtime, skipped\n");
  return kSkip;
#endif
}

}  // namespace

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "";
  try {
    if (what == "args") return test_args();
    if (what == "cpu_roundtrip") return test_cpu();
    if (what == "cpu_gemm") return test_cpu_gemm();
    if (what == "gpu_roundtrip") return test_gpu();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "unexpected exception: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: test_mx_api args|cpu_roundtrip|cpu_gemm|gpu_roundtrip\n");
  return 2;
}
