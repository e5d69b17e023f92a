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
  return finish("args_gemm");
}

}  // namespace api_test
