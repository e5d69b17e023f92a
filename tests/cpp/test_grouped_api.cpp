// ctest for the grouped (MoE) entry points of the C API and their C++ layer (nvfp4::grouped).
//
//   test_grouped_api args   every malformed call returns INVALID_ARGUMENT naming the parameter
//                           (bad offs contents on the CPU included); nothing crashes
//   test_grouped_api cpu    grouped quantization == nvfp4_quantize per group, batched == per
//                           expert, the grouped GEMM (both forms) == nvfp4_gemm per group, bit
//                           for bit, through nvfp4.hpp; every output byte written
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "api_test.h"  // the harness: CHECK, EXPECT_BAD, finish
#include "nvfp4/nvfp4.h"
#include "nvfp4/nvfp4.hpp"

namespace {

using api_test::expect_status;
using api_test::finish;
using api_test::g_checks;
using api_test::g_failures;

namespace g = nvfp4::grouped;

const std::vector<int64_t> kSizes = {0, 1, 15, 16, 17, 70, 0};
constexpr int64_t K = 48, N = 32, kTail = 5;

int64_t total() {
  int64_t t = kTail;
  for (int64_t s : kSizes) t += s;
  return t;
}

std::vector<int32_t> offs_of(const std::vector<int64_t>& sizes) {
  std::vector<int32_t> o;
  int64_t run = 0;
  for (int64_t s : sizes) o.push_back(static_cast<int32_t>(run += s));
  return o;
}

std::vector<float> randn(int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

int64_t up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// Buffers of a layout, poisoned.
struct Buf {
  std::vector<uint8_t> data, scales;
  std::vector<float> amax;
  explicit Buf(const g::Layout& l)
      : data(l.data_bytes(), 0xA5), scales(l.scale_bytes(), 0xA5), amax(static_cast<size_t>(l.groups), -1.0f) {}
  g::View view(const g::Layout& l) { return g::View(l, data.data(), scales.data(), amax.data()); }
};

// Dense quantization of rows [r0, r0 + m) of x [*, k], padded with zero rows to `rows`.
struct Dense {
  std::vector<uint8_t> data, scales;
  float amax = -1.0f;
};
Dense dense(const std::vector<float>& x, int64_t r0, int64_t m, int64_t rows, int64_t k, bool col, uint64_t offset,
            nvfp4_rounding_t rounding, uint32_t rht) {
  std::vector<float> xs(static_cast<size_t>(rows * k), 0.0f);
  std::memcpy(xs.data(), x.data() + r0 * k, static_cast<size_t>(m * k) * sizeof(float));
  const nvfp4::QuantizedLayout l = col ? nvfp4::columnwise_layout(rows, k) : nvfp4::rowwise_layout(rows, k);
  Dense d;
  d.data.resize(l.data_bytes());
  d.scales.resize(l.scale_bytes());
  nvfp4::QuantizedView v(l, d.data.data(), d.scales.data(), &d.amax);
  nvfp4::QuantConfig cfg;
  cfg.rounding(rounding).rht(rht);
  nvfp4_quant_config_t c = cfg.c();
  c.seed = 9;
  c.offset = offset;
  const nvfp4::TensorView in = nvfp4::TensorView::of(xs.data(), {rows, k});
  nvfp4::check(nvfp4_quantize(in.get(), &c, col ? nullptr : v.get(), col ? v.get() : nullptr, nullptr), "dense");
  return d;
}

bool same(const uint8_t* a, const uint8_t* b, size_t n) { return std::memcmp(a, b, n) == 0; }
bool zeros(const uint8_t* a, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (a[i]) return false;
  return true;
}

int run_cpu() {
  const int64_t T = total(), E = static_cast<int64_t>(kSizes.size());
  const std::vector<float> x = randn(T * K, 1), dy = randn(T * N, 2), w = randn(E * N * K, 3);
  const std::vector<int32_t> offs = offs_of(kSizes);
  int32_t err = -7;
  const nvfp4_groups_t grp = g::groups(offs.data(), E, T, &err);
  const g::Layout rl = g::rowwise_layout(T, K, E), cl = g::columnwise_layout(T, K, E);
  Buf row(rl), col(cl);
  g::View rv = row.view(rl), cv = col.view(cl);
  nvfp4::QuantConfig cfg;
  cfg.stochastic(9, 4).rht(NVFP4_RHT_COLUMNWISE);
  g::quantize(nvfp4::TensorView::of(x.data(), {T, K}), grp, cfg, &rv, &cv);
  CHECK(err == 0);
  // every group against nvfp4_quantize of its rows with offset + g * 2^32; all else zero
  int64_t s = 0, srow = 0, p = 0, q = 0;
  const int64_t cp = up(K / 16, 4), kp = up(K, 128);
  size_t row_scales_used = 0;
  for (int64_t gi = 0; gi < E; ++gi) {
    const int64_t m = kSizes[static_cast<size_t>(gi)], mp = up(m, 32);
    const uint64_t off = 4 + (static_cast<uint64_t>(gi) << 32);
    if (m) {
      Dense r = dense(x, s, m, m, K, false, off, NVFP4_ROUND_STOCHASTIC, 0);
      CHECK(same(row.data.data() + s * K / 2, r.data.data(), r.data.size()));
      CHECK(same(row.scales.data() + srow * cp, r.scales.data(), r.scales.size()));
      CHECK(row.amax[static_cast<size_t>(gi)] == r.amax);
      Dense c = dense(x, s, m, mp, K, true, off, NVFP4_ROUND_STOCHASTIC, NVFP4_RHT_COLUMNWISE);
      CHECK(same(col.data.data() + K * p / 2, c.data.data(), c.data.size()));
      CHECK(same(col.scales.data() + kp * q, c.scales.data(), c.scales.size()));
      CHECK(col.amax[static_cast<size_t>(gi)] == c.amax);
      row_scales_used = static_cast<size_t>((srow + up(m, 128)) * cp);
    } else {
      CHECK(row.amax[static_cast<size_t>(gi)] == 0.0f && col.amax[static_cast<size_t>(gi)] == 0.0f);
    }
    s += m;
    srow += up(m, 128);
    p += mp;
    q += up(mp / 16, 4);
  }
  CHECK(zeros(row.data.data() + s * K / 2, static_cast<size_t>((T - s) * K / 2)));  // rows of no group
  CHECK(zeros(row.scales.data() + row_scales_used, row.scales.size() - row_scales_used));
  CHECK(zeros(col.data.data() + K * p / 2, col.data.size() - static_cast<size_t>(K * p / 2)));
  CHECK(zeros(col.scales.data() + kp * q, col.scales.size() - static_cast<size_t>(kp * q)));

  // batched weights, 2D tiles, against nvfp4_quantize per expert
  const g::Layout bl = g::batched_layout(E, N, K), btl = g::batched_layout(E, K, up(N, 16));
  Buf wb(bl), wtb(btl);
  g::View wv = wb.view(bl), wtv = wtb.view(btl);
  g::batched_quantize(nvfp4::TensorView::of(w.data(), {E, N, K}), nvfp4::QuantConfig().block_2d(), &wv, &wtv);
  for (int64_t gi = 0; gi < E; ++gi) {
    std::vector<float> wg(w.begin() + gi * N * K, w.begin() + (gi + 1) * N * K);
    const nvfp4::QuantizedLayout l = nvfp4::rowwise_layout(N, K);
    std::vector<uint8_t> d(l.data_bytes()), sc(l.scale_bytes());
    float a = 0.0f;
    nvfp4::QuantizedView v(l, d.data(), sc.data(), &a);
    nvfp4::quantize(nvfp4::TensorView::of(wg.data(), {N, K}), nvfp4::QuantConfig().block_2d(), &v, nullptr);
    CHECK(same(wb.data.data() + gi * N * K / 2, d.data(), d.size()));
    CHECK(same(wb.scales.data() + gi * up(N, 128) * cp, sc.data(), sc.size()));
    CHECK(wb.amax[static_cast<size_t>(gi)] == a);
  }

  // ragged M: d [T, N] against nvfp4_gemm of each group's slices; rows of no group 0
  std::vector<float> d(static_cast<size_t>(T * N), -9.0f);
  nvfp4::TensorView dv = nvfp4::TensorView::of(d.data(), {T, N});
  g::Gemm gm(NVFP4_GROUPED_RAGGED_M, rv, wv, grp, dv, NVFP4_BACKEND_REFERENCE);
  CHECK(gm.workspace_bytes() == 0);
  gm.run(nullptr, 0);
  s = 0;
  srow = 0;
  for (int64_t gi = 0; gi < E; ++gi) {
    const int64_t m = kSizes[static_cast<size_t>(gi)];
    if (m) {
      const nvfp4::QuantizedLayout la = nvfp4::rowwise_layout(m, K), lb = nvfp4::rowwise_layout(N, K);
      nvfp4::QuantizedView a(la, row.data.data() + s * K / 2, row.scales.data() + srow * cp, &row.amax[gi]);
      nvfp4::QuantizedView b(lb, wb.data.data() + gi * N * K / 2, wb.scales.data() + gi * up(N, 128) * cp,
                             &wb.amax[gi]);
      std::vector<float> want(static_cast<size_t>(m * N));
      nvfp4::TensorView wv2 = nvfp4::TensorView::of(want.data(), {m, N});
      nvfp4::Gemm(a, b, wv2).backend(NVFP4_BACKEND_REFERENCE).run();
      CHECK(std::memcmp(d.data() + s * N, want.data(), want.size() * sizeof(float)) == 0);
    }
    s += m;
    srow += up(m, 128);
  }
  bool tail_zero = true;
  for (int64_t i = s * N; i < T * N; ++i) tail_zero &= d[static_cast<size_t>(i)] == 0.0f;
  CHECK(tail_zero);

  // ragged K: dW [E, N, K] from the columnwise directions; an empty group's block is 0
  const g::Layout dcl = g::columnwise_layout(T, N, E);
  Buf dcol(dcl);
  g::View dcv = dcol.view(dcl);
  g::quantize(nvfp4::TensorView::of(dy.data(), {T, N}), grp, cfg, nullptr, &dcv);
  std::vector<float> dw(static_cast<size_t>(E * N * K), -9.0f);
  nvfp4::TensorView dwv = nvfp4::TensorView::of(dw.data(), {E, N, K});
  g::Gemm(NVFP4_GROUPED_RAGGED_K, dcv, cv, grp, dwv, NVFP4_BACKEND_REFERENCE).run(nullptr, 0);
  p = q = 0;
  const int64_t np = up(N, 128);
  for (int64_t gi = 0; gi < E; ++gi) {
    const int64_t mp = up(kSizes[static_cast<size_t>(gi)], 32);
    float* blk = dw.data() + gi * N * K;
    if (mp) {
      const nvfp4::QuantizedLayout la = nvfp4::rowwise_layout(N, mp), lb = nvfp4::rowwise_layout(K, mp);
      nvfp4::QuantizedView a(la, dcol.data.data() + N * p / 2, dcol.scales.data() + np * q, &dcol.amax[gi]);
      nvfp4::QuantizedView b(lb, col.data.data() + K * p / 2, col.scales.data() + kp * q, &col.amax[gi]);
      std::vector<float> want(static_cast<size_t>(N * K));
      nvfp4::TensorView wv2 = nvfp4::TensorView::of(want.data(), {N, K});
      nvfp4::Gemm(a, b, wv2).backend(NVFP4_BACKEND_REFERENCE).run();
      CHECK(std::memcmp(blk, want.data(), want.size() * sizeof(float)) == 0);
    } else {
      bool z = true;
      for (int64_t i = 0; i < N * K; ++i) z &= blk[i] == 0.0f;
      CHECK(z);
    }
    p += mp;
    q += up(mp / 16, 4);
  }
  return finish("test_grouped_api cpu");
}

int run_args() {
  const int64_t T = 40, E = 3;
  const std::vector<float> x = randn(T * K, 5);
  std::vector<int32_t> offs = {10, 20, 40};
  const g::Layout rl = g::rowwise_layout(T, K, E);
  Buf row(rl);
  g::View rv = row.view(rl);
  const nvfp4::TensorView in = nvfp4::TensorView::of(x.data(), {T, K});
  nvfp4_quant_config_t cfg;
  nvfp4_quant_config_default(&cfg);
  nvfp4_groups_t grp = g::groups(offs.data(), E, T);
  CHECK(nvfp4_grouped_quantize(in.get(), &grp, &cfg, rv.get(), nullptr, nullptr) == NVFP4_SUCCESS);
  for (const auto& bad : std::vector<std::pair<std::vector<int32_t>, const char*>>{
           {{10, 5, 40}, "below"}, {{10, 20, 41}, "past the"}, {{-1, 20, 40}, "negative"}}) {
    offs = bad.first;
    EXPECT_BAD(nvfp4_grouped_quantize(in.get(), &grp, &cfg, rv.get(), nullptr, nullptr), bad.second);
    CHECK(std::string(nvfp4_last_error()).find("groups.offs") == 0);
  }
  offs = {10, 20, 40};
  nvfp4_groups_t bad = grp;
  bad.offs = nullptr;
  EXPECT_BAD(nvfp4_grouped_quantize(in.get(), &bad, &cfg, rv.get(), nullptr, nullptr), "groups.offs");
  bad = grp;
  bad.count = 0;
  EXPECT_BAD(nvfp4_grouped_quantize(in.get(), &bad, &cfg, rv.get(), nullptr, nullptr), "groups.count");
  bad = grp;
  bad.tokens = T + 1;
  EXPECT_BAD(nvfp4_grouped_quantize(in.get(), &bad, &cfg, rv.get(), nullptr, nullptr), "groups.tokens");
  bad = grp;
  bad.offs = reinterpret_cast<const int32_t*>(reinterpret_cast<const char*>(offs.data()) + 1);
  EXPECT_BAD(nvfp4_grouped_quantize(in.get(), &bad, &cfg, rv.get(), nullptr, nullptr), "groups.offs");
  EXPECT_BAD(nvfp4_grouped_quantize(in.get(), nullptr, &cfg, rv.get(), nullptr, nullptr), "groups");
  EXPECT_BAD(nvfp4_grouped_quantize(in.get(), &grp, &cfg, nullptr, nullptr, nullptr), "rowwise/columnwise");
  nvfp4_quant_config_t c2 = cfg;
  c2.block = NVFP4_BLOCK_2D;
  EXPECT_BAD(nvfp4_grouped_quantize(in.get(), &grp, &c2, rv.get(), nullptr, nullptr), "cfg.block");
  c2 = cfg;
  c2.scale_layout = NVFP4_SCALES_LINEAR;
  EXPECT_BAD(nvfp4_grouped_quantize(in.get(), &grp, &c2, rv.get(), nullptr, nullptr), "cfg.scale_layout");
  // the fields only nvfp4_quantize takes: refused by name, in both forms, never ignored
  {
    const float given = 1.0f;
    uint64_t counter = 0;
    std::vector<float> w16(static_cast<size_t>(E * 16 * K));
    const g::Layout wl = g::batched_layout(E, 16, K);
    Buf wrow(wl);
    g::View wview = wrow.view(wl);
    const nvfp4::TensorView win = nvfp4::TensorView::of(w16.data(), {E, 16, K});
    CHECK(nvfp4_batched_quantize(win.get(), &cfg, wview.get(), nullptr, nullptr) == NVFP4_SUCCESS);
    for (int k = 0; k < 5; ++k) {
      c2 = cfg;
      const char* field = nullptr;
      switch (k) {
        case 0: c2.scale_select = NVFP4_SELECT_4OVER6_MAE; field = "cfg.scale_select"; break;
        case 1: c2.e4m3_bound = 256; field = "cfg.e4m3_bound"; break;
        case 2: c2.amax_mode = NVFP4_AMAX_ROWS; field = "cfg.amax_mode"; break;
        case 3: c2.amax_in = &given; field = "cfg.amax_in"; break;
        default: c2.offset_counter = &counter; field = "cfg.offset_counter"; break;
      }
      EXPECT_BAD(nvfp4_grouped_quantize(in.get(), &grp, &c2, rv.get(), nullptr, nullptr), field);
      EXPECT_BAD(nvfp4_batched_quantize(win.get(), &c2, wview.get(), nullptr, nullptr), field);
    }
    CHECK(counter == 0);
  }
  // a scale buffer sized for fewer groups
  const g::Layout small = g::rowwise_layout(T, K, 1);
  Buf srow(small);
  g::View sv(rl, row.data.data(), srow.scales.data(), row.amax.data());
  sv.get()->scales.shape[0] = small.scale_shape[0];
  EXPECT_BAD(nvfp4_grouped_quantize(in.get(), &grp, &cfg, sv.get(), nullptr, nullptr), "rowwise.scales");
  // amax not [E]
  g::View av = row.view(rl);
  av.get()->amax.shape[0] = E - 1;
  EXPECT_BAD(nvfp4_grouped_quantize(in.get(), &grp, &cfg, av.get(), nullptr, nullptr), "rowwise.amax");
  // the output overlapping the input
  g::View ov(rl, const_cast<float*>(x.data()), row.scales.data(), row.amax.data());
  EXPECT_BAD(nvfp4_grouped_quantize(in.get(), &grp, &cfg, ov.get(), nullptr, nullptr), "overlaps");
  // batched: N not a multiple of 16, 2D allowed
  std::vector<float> w(static_cast<size_t>(E * 24 * K));
  EXPECT_BAD(nvfp4_batched_quantize(nvfp4::TensorView::of(w.data(), {E, 24, K}).get(), &cfg, rv.get(), nullptr,
                                    nullptr),
             "input");
  // GEMM: kind out of range, b with the wrong count of tensors, bad offs at run time
  const g::Layout bl = g::batched_layout(E, 16, K);
  Buf wb(bl);
  g::View wv = wb.view(bl);
  std::vector<float> d(static_cast<size_t>(T * 16));
  nvfp4::TensorView dv = nvfp4::TensorView::of(d.data(), {T, 16});
  nvfp4_grouped_gemm_args_t args{};
  args.kind = NVFP4_GROUPED_RAGGED_M;
  args.a = rv.get();
  args.b = wv.get();
  args.groups = grp;
  args.d = dv.get();
  args.backend = NVFP4_BACKEND_AUTO;
  CHECK(nvfp4_grouped_gemm(&args, nullptr, 0, nullptr) == NVFP4_SUCCESS);
  int32_t raw_kind = 7;
  std::memcpy(&args.kind, &raw_kind, sizeof raw_kind);
  EXPECT_BAD(nvfp4_grouped_gemm(&args, nullptr, 0, nullptr), "kind");
  args.kind = NVFP4_GROUPED_RAGGED_M;
  offs = {10, 5, 40};
  EXPECT_BAD(nvfp4_grouped_gemm(&args, nullptr, 0, nullptr), "groups.offs");
  size_t bytes = 1;
  CHECK(nvfp4_grouped_gemm_workspace_size(&args, &bytes) == NVFP4_SUCCESS && bytes == 0);  // sizes only
  offs = {10, 20, 40};
  args.groups.count = 2;
  EXPECT_BAD(nvfp4_grouped_gemm(&args, nullptr, 0, nullptr), "b.data");
  EXPECT_BAD(nvfp4_grouped_gemm(nullptr, nullptr, 0, nullptr), "args");
  return finish("test_grouped_api args");
}

}  // namespace

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "";
  try {
    if (what == "args") return run_args();
    if (what == "cpu") return run_cpu();
  } catch (const nvfp4::Error& e) {
    std::fprintf(stderr, "unexpected nvfp4::Error: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: test_grouped_api args|cpu\n");
  return 2;
}
