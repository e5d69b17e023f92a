// Hardening of the C API: sizes past int64, raw enum values, CPU alignment,
// cfg.offset_device, overlapping buffers and the C++ size helpers.
#include "api_test.h"

namespace api_test {

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

  // ---- cfg.offset_counter: read like offset_device, then advanced by one per call.
  {
    nvfp4_quant_config_t c = cfg;
    c.rounding = NVFP4_ROUND_STOCHASTIC;
    c.seed = 1234;
    c.offset = 1000;
    HostQ want(nvfp4::rowwise_layout(R, C)), got(nvfp4::rowwise_layout(R, C));
    EXPECT_STATUS(nvfp4_quantize(&in, &c, want.view.get(), nullptr, nullptr), NVFP4_SUCCESS);
    uint64_t counter = 600;
    c.offset = 400;
    c.offset_counter = &counter;
    EXPECT_STATUS(nvfp4_quantize(&in, &c, got.view.get(), nullptr, nullptr), NVFP4_SUCCESS);
    CHECK(got.data == want.data && got.scales == want.scales);
    CHECK(counter == 601);
    // the next call reads 601: offset 1001
    c.offset = 1001;
    c.offset_counter = nullptr;
    EXPECT_STATUS(nvfp4_quantize(&in, &c, want.view.get(), nullptr, nullptr), NVFP4_SUCCESS);
    c.offset = 400;
    c.offset_counter = &counter;
    EXPECT_STATUS(nvfp4_quantize(&in, &c, got.view.get(), nullptr, nullptr), NVFP4_SUCCESS);
    CHECK(got.data == want.data && counter == 602);
    // the recipe options' routes (a given amax, 4over6, EDEN) read it and advance it the same way
    {
      const float given = 2.5f;
      for (int k = 0; k < 3; ++k) {
        nvfp4_quant_config_t o = cfg;
        o.seed = 77;
        o.offset = 5;
        if (k == 0) {
          o.rounding = NVFP4_ROUND_STOCHASTIC;
          o.amax_mode = NVFP4_AMAX_GIVEN;
          o.amax_in = &given;
        } else if (k == 1) {
          o.scale_select = NVFP4_SELECT_4OVER6_MAE;
        } else {
          o.rounding = NVFP4_ROUND_EDEN;
          o.rht = NVFP4_RHT_ROWWISE;
        }
        HostQ by_device(nvfp4::rowwise_layout(R, C)), by_counter(nvfp4::rowwise_layout(R, C));
        const uint64_t fixed = 300;
        o.offset_device = &fixed;
        EXPECT_STATUS(nvfp4_quantize(&in, &o, by_device.view.get(), nullptr, nullptr), NVFP4_SUCCESS);
        uint64_t adv = 300;
        o.offset_device = nullptr;
        o.offset_counter = &adv;
        EXPECT_STATUS(nvfp4_quantize(&in, &o, by_counter.view.get(), nullptr, nullptr), NVFP4_SUCCESS);
        CHECK(by_counter.data == by_device.data && by_counter.scales == by_device.scales &&
              by_counter.amax == by_device.amax);
        CHECK(adv == 301);
      }
    }
    // wraps modulo 2^64
    counter = UINT64_MAX;
    EXPECT_STATUS(nvfp4_quantize(&in, &c, got.view.get(), nullptr, nullptr), NVFP4_SUCCESS);
    CHECK(counter == 0);
    // an empty input: nothing quantized, the counter still advances (once per call)
    const nvfp4_tensor_t empty_in = desc(x.data(), NVFP4_DTYPE_FLOAT32, {0, C});
    HostQ e(nvfp4::rowwise_layout(0, C));
    EXPECT_STATUS(nvfp4_quantize(&empty_in, &c, e.view.get(), nullptr, nullptr), NVFP4_SUCCESS);
    CHECK(counter == 1);
    // refused: with offset_device, misaligned, inside an output or the input; a refused call
    // leaves the counter alone
    const uint64_t other = 0;
    c.offset_device = &other;
    EXPECT_BAD(nvfp4_quantize(&in, &c, &rq, nullptr, nullptr), "cfg.offset_counter: set together with cfg.offset_device");
    c.offset_device = nullptr;
    uint64_t pair[2] = {0, 0};
    c.offset_counter = reinterpret_cast<uint64_t*>(reinterpret_cast<char*>(pair) + 4);
    EXPECT_BAD(nvfp4_quantize(&in, &c, &rq, nullptr, nullptr), "cfg.offset_counter: must be 8-byte aligned");
    c.offset_counter = reinterpret_cast<uint64_t*>(row.scales.data());
    EXPECT_BAD(nvfp4_quantize(&in, &c, &rq, nullptr, nullptr), "cfg.offset_counter: overlaps rowwise.scales");
    c.offset_counter = reinterpret_cast<uint64_t*>(x.data());
    EXPECT_BAD(nvfp4_quantize(&in, &c, &rq, nullptr, nullptr), "cfg.offset_counter: overlaps input");
    CHECK(counter == 1 && pair[0] == 0 && pair[1] == 0);
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

}  // namespace api_test
