// Argument checking of the GEMM entry points (nvfp4_gemm, nvfp4_gemm_workspace_size):
// operands, epilogue (c, bias, d), enums and CUDA descriptors, each refused by name.
#include "api_test.h"

namespace api_test {

int ArgsFixture::gemm() {
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
  // ---- decoded operands: nvfp4_quantize_decoded, nvfp4_gemm_decoded, nvfp4_gemm_takes_decoded
  {
    const int64_t M = R, N = 48, K = C;
    std::vector<uint16_t> av(static_cast<size_t>(M * K), 0xFFC1u), cv(static_cast<size_t>(C * R), 0xFFC1u);
    float aamax = -1.0f, camax = -1.0f;
    nvfp4_decoded_t adec{desc(av.data(), NVFP4_DTYPE_BFLOAT16, {M, K}), desc(&aamax, NVFP4_DTYPE_FLOAT32, {1})};
    nvfp4_decoded_t cdec{desc(cv.data(), NVFP4_DTYPE_BFLOAT16, {C, R}), desc(&camax, NVFP4_DTYPE_FLOAT32, {1})};
    // codes and values of both orientations in one call: the amax of each pair agree, and no
    // value is left unwritten (0xFFC1 is a NaN no decode produces)
    EXPECT_STATUS(nvfp4_quantize_decoded(&in, &cfg, &rq, &cq, &adec, &cdec, nullptr), NVFP4_SUCCESS);
    CHECK(aamax == row.amax && camax == col.amax && aamax > 0.0f);
    for (uint16_t v : av) CHECK(v != 0xFFC1u);
    for (uint16_t v : cv) CHECK(v != 0xFFC1u);
    EXPECT_STATUS(nvfp4_quantize_decoded(&in, &cfg, nullptr, nullptr, &adec, nullptr, nullptr), NVFP4_SUCCESS);
    EXPECT_BAD(nvfp4_quantize_decoded(&in, &cfg, nullptr, nullptr, nullptr, nullptr, nullptr), "at least one output");
    nvfp4_quant_config_t c2 = cfg;
    c2.scale_select = NVFP4_SELECT_4OVER6_MAE;
    EXPECT_BAD(nvfp4_quantize_decoded(&in, &c2, nullptr, nullptr, &adec, nullptr, nullptr), "cfg.scale_select");
    c2 = cfg;
    c2.amax_mode = NVFP4_AMAX_ROWS;
    EXPECT_BAD(nvfp4_quantize_decoded(&in, &c2, nullptr, nullptr, &adec, nullptr, nullptr), "cfg.amax_mode");
    nvfp4_decoded_t bad = adec;
    bad.values.dtype = NVFP4_DTYPE_FLOAT16;
    EXPECT_BAD(nvfp4_quantize_decoded(&in, &cfg, nullptr, nullptr, &bad, nullptr, nullptr),
               "rowwise_decoded.values: dtype must be bfloat16");
    bad = cdec;
    bad.values = desc(cv.data(), NVFP4_DTYPE_BFLOAT16, {R, C});
    EXPECT_BAD(nvfp4_quantize_decoded(&in, &cfg, nullptr, nullptr, nullptr, &bad, nullptr),
               "columnwise_decoded.values: expected shape [64, 32]");
    bad = adec;
    bad.amax = desc(av.data(), NVFP4_DTYPE_FLOAT32, {1});  // inside the values
    EXPECT_BAD(nvfp4_quantize_decoded(&in, &cfg, nullptr, nullptr, &bad, nullptr, nullptr), "overlap");

    HostQ bq(nvfp4::rowwise_layout(N, K));
    std::vector<float> w = random_matrix(N, K, 2);
    nvfp4_tensor_t win = desc(w.data(), NVFP4_DTYPE_FLOAT32, {N, K});
    EXPECT_STATUS(nvfp4_quantize(&win, &cfg, bq.view.get(), nullptr, nullptr), NVFP4_SUCCESS);
    std::vector<float> d(static_cast<size_t>(M * N));
    nvfp4_tensor_t dt = desc(d.data(), NVFP4_DTYPE_FLOAT32, {M, N});
    nvfp4_gemm_args_t g;
    std::memset(&g, 0, sizeof g);
    g.a = nullptr;
    g.b = bq.view.get();
    g.scale_layout = NVFP4_SCALES_SWIZZLED;
    g.d = &dt;
    size_t ws = 0;
    // CPU tensors: the reference reads codes
    EXPECT_STATUS(nvfp4_gemm_decoded(&g, &adec, nullptr, nullptr, 0, nullptr), NVFP4_ERROR_NOT_SUPPORTED);
    EXPECT_STATUS(nvfp4_gemm_decoded_workspace_size(&g, &adec, nullptr, &ws), NVFP4_ERROR_NOT_SUPPORTED);
    EXPECT_BAD(nvfp4_gemm_decoded(&g, nullptr, nullptr, nullptr, 0, nullptr), "a_decoded: null, and args->a");
    g.a = &rq;
    EXPECT_BAD(nvfp4_gemm_decoded(&g, &adec, nullptr, nullptr, 0, nullptr), "a_decoded: give A either");
    g.a = nullptr;
    bad = adec;
    bad.values = desc(av.data(), NVFP4_DTYPE_BFLOAT16, {M, K / 2});
    EXPECT_BAD(nvfp4_gemm_decoded(&g, &bad, nullptr, nullptr, 0, nullptr), "b: K mismatch");
    bad = adec;
    bad.amax = desc(&aamax, NVFP4_DTYPE_FLOAT16, {1});
    EXPECT_BAD(nvfp4_gemm_decoded(&g, &bad, nullptr, nullptr, 0, nullptr), "a_decoded.amax");
    EXPECT_BAD(nvfp4_gemm_decoded_workspace_size(&g, &adec, nullptr, nullptr), "bytes");
    g.a = &rq;
    int takes = -1;
    EXPECT_STATUS(nvfp4_gemm_takes_decoded(&g, &takes), NVFP4_SUCCESS);
    CHECK(takes == 0);  // the CPU reference
    EXPECT_BAD(nvfp4_gemm_takes_decoded(&g, nullptr), "takes");
  }
  return finish("args_gemm");
}

}  // namespace api_test
