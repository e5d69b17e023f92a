// Argument checking of quantize, dequantize and swizzle, and of the C++ layer over them:
// every malformed call returns INVALID_ARGUMENT with a message naming what is wrong, and
// nothing crashes (test_api_main.cpp runs each as a case of its own).
#include "api_test.h"

namespace api_test {

int ArgsFixture::quantize() {
  nvfp4_quant_config_default(nullptr);  // documented as a no-op, must not crash
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
  // ---- quantize with a workspace (nvfp4_quantize_ws, nvfp4_quantize_decoded_ws): the same
  // results (on the CPU it is unused); its size, alignment and overlaps refused by name.
  {
    alignas(16) static unsigned char ws[NVFP4_QUANTIZE_WORKSPACE_BYTES + 32];
    std::memset(ws, 0xff, sizeof ws);
    HostQ r2(nvfp4::rowwise_layout(R, C)), c2(nvfp4::columnwise_layout(R, C));
    EXPECT_STATUS(nvfp4_quantize(&in, &cfg, &rq, &cq, nullptr), NVFP4_SUCCESS);
    EXPECT_STATUS(nvfp4_quantize_ws(&in, &cfg, r2.view.get(), c2.view.get(), ws, NVFP4_QUANTIZE_WORKSPACE_BYTES,
                                    nullptr),
                  NVFP4_SUCCESS);
    CHECK(r2.data == row.data && r2.scales == row.scales && r2.amax == row.amax);
    CHECK(c2.data == col.data && c2.scales == col.scales && c2.amax == col.amax);
    EXPECT_STATUS(nvfp4_quantize_ws(&in, &cfg, &rq, &cq, nullptr, 0, nullptr), NVFP4_SUCCESS);
    EXPECT_BAD(nvfp4_quantize_ws(&in, &cfg, &rq, &cq, nullptr, 16, nullptr), "workspace: null with workspace_bytes = 16");
    EXPECT_BAD(nvfp4_quantize_ws(&in, &cfg, &rq, &cq, ws, NVFP4_QUANTIZE_WORKSPACE_BYTES - 1, nullptr),
               "workspace_bytes: 8191, at least NVFP4_QUANTIZE_WORKSPACE_BYTES (8192)");
    EXPECT_BAD(nvfp4_quantize_ws(&in, &cfg, &rq, &cq, ws + 4, NVFP4_QUANTIZE_WORKSPACE_BYTES, nullptr),
               "workspace: must be 16-byte aligned");
    EXPECT_BAD(nvfp4_quantize_ws(&in, &cfg, &rq, &cq, x.data(), NVFP4_QUANTIZE_WORKSPACE_BYTES, nullptr),
               "workspace: overlaps input");
    EXPECT_BAD(nvfp4_quantize_ws(&in, &cfg, &rq, &cq, row.data.data(), NVFP4_QUANTIZE_WORKSPACE_BYTES, nullptr),
               "overlaps rowwise.data");
    EXPECT_BAD(nvfp4_quantize_decoded_ws(&in, &cfg, &rq, nullptr, nullptr, nullptr, ws, 1, nullptr),
               "workspace_bytes: 1, at least");
    EXPECT_STATUS(
        nvfp4_quantize_decoded_ws(&in, &cfg, &rq, nullptr, nullptr, nullptr, ws, NVFP4_QUANTIZE_WORKSPACE_BYTES, nullptr),
        NVFP4_SUCCESS);
  }
  // Empty input: valid, amax defined as 0.
  {
    nvfp4_tensor_t t = desc(x.data(), NVFP4_DTYPE_FLOAT32, {0, C});
    HostQ e(nvfp4::rowwise_layout(0, C));
    EXPECT_STATUS(nvfp4_quantize(&t, &cfg, e.view.get(), nullptr, nullptr), NVFP4_SUCCESS);
    CHECK(e.amax == 0.0f);
  }
  return finish("args_quantize");
}

int ArgsFixture::cuda_descriptors() {
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
  return finish("args_cuda_descriptors");
}

int ArgsFixture::dequantize() {
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
  return finish("args_dequantize");
}

int ArgsFixture::swizzle() {
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
  return finish("args_swizzle");
}

int ArgsFixture::cxx_layer() {
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
    // the workspace overload: a short workspace is refused by name through nvfp4_quantize_ws
    threw = false;
    alignas(16) static unsigned char ws[NVFP4_QUANTIZE_WORKSPACE_BYTES];
    try {
      nvfp4::quantize(nvfp4::TensorView(x.data(), NVFP4_DTYPE_FLOAT32, {R, C}), nvfp4::QuantConfig(), &row.view,
                      nullptr, ws, 64);
    } catch (const nvfp4::Error& e) {
      threw = e.status() == NVFP4_ERROR_INVALID_ARGUMENT &&
              std::string(e.what()).find("nvfp4_quantize_ws") != std::string::npos &&
              std::string(e.what()).find("workspace_bytes: 64") != std::string::npos;
    }
    CHECK(threw);
    nvfp4::quantize(nvfp4::TensorView(x.data(), NVFP4_DTYPE_FLOAT32, {R, C}), nvfp4::QuantConfig(), &row.view, nullptr,
                    ws, sizeof ws);
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
  return finish("args_cxx");
}

int ArgsFixture::threads() {
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
  return finish("args_threads");
}

}  // namespace api_test
