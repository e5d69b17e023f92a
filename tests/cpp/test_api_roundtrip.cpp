// Round trips: CPU quantize -> dequantize -> GEMM against the independent decoder and
// float64 sums; on a GPU, cudaMalloc'd quantize + GEMM per backend against the CPU results
// (kSkip, reported as skipped, where there is no usable GPU).
#include "api_test.h"

namespace api_test {

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

}  // namespace api_test
