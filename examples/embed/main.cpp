// nvfp4 from C++, without Python: what a C++ trainer or engine does with it.
//
// 1. On the CPU: quantize two matrices and multiply them with the reference backend (this
//    is also the reference for step 2, so it always runs).
// 2. On the GPU, when there is one: copy the same BF16 matrices into cudaMalloc'd buffers,
//    quantize them there (activations in 1x16 blocks, the weight in 16x16 tiles, as in
//    NVIDIA's recipe), check the codes against the CPU's bit for bit, then run the FP4 GEMM
//    with every backend this device supports and compare with the CPU product.
//
// The library allocates nothing: every buffer below is ours, sized with the layout helpers
// of nvfp4.hpp. The GEMM is written against the plain C API to show what nvfp4.hpp wraps.
// Exit status: 0 when everything that could run agreed (or there is no GPU), 1 otherwise.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#if defined(NVFP4_EMBED_CUDA)
#define NVFP4_HPP_CUDA_RUNTIME 1  // nvfp4::cuda::Buffer, an RAII cudaMalloc
#endif
#include <nvfp4/nvfp4.hpp>

namespace {

// Problem size: y[M, N] = x[M, K] @ w[N, K]^T, a small linear layer.
constexpr int64_t M = 256, N = 512, K = 1024;

std::vector<uint16_t> random_bf16(int64_t count, uint64_t seed) {
  std::vector<uint16_t> v(static_cast<size_t>(count));
  uint64_t s = seed;
  auto uniform = [&s] {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return (static_cast<double>(s >> 11) + 0.5) / 9007199254740992.0;
  };
  for (uint16_t& x : v) {
    const double g = std::sqrt(-2.0 * std::log(uniform())) * std::cos(6.283185307179586 * uniform());
    x = nvfp4::float_to_bf16(static_cast<float>(g));
  }
  return v;
}

// One quantized operand in host memory.
struct HostOperand {
  nvfp4::QuantizedLayout layout;
  std::vector<uint8_t> data, scales;
  float amax = 0;
  nvfp4::QuantizedView view;
  explicit HostOperand(const nvfp4::QuantizedLayout& l) : layout(l), data(l.data_bytes()), scales(l.scale_bytes()) {
    view = nvfp4::QuantizedView(layout, data.data(), scales.data(), &amax);
  }
  HostOperand(const HostOperand&) = delete;
};

// D = alpha * (A^ @ B^T) through the C API: descriptors in, status out.
nvfp4_status_t gemm_c_api(const nvfp4_quantized_t* a, const nvfp4_quantized_t* b, nvfp4_tensor_t* d,
                          nvfp4_backend_t backend, void* workspace, size_t workspace_bytes, nvfp4_stream_t stream) {
  nvfp4_gemm_args_t args;
  std::memset(&args, 0, sizeof args);
  args.a = a;
  args.b = b;
  args.scale_layout = NVFP4_SCALES_SWIZZLED;  // what both operands were quantized with
  args.d = d;
  args.backend = backend;
  return nvfp4_gemm(&args, workspace, workspace_bytes, stream);
}

}  // namespace

#if defined(NVFP4_EMBED_CUDA)
namespace {

using nvfp4::cuda::Buffer;

bool same_bytes(const Buffer& dev, const void* host, size_t bytes, const char* what) {
  std::vector<uint8_t> back(bytes);
  dev.download(back.data(), bytes);
  size_t diff = 0, first = bytes;
  for (size_t i = 0; i < bytes; ++i)
    if (back[i] != static_cast<const uint8_t*>(host)[i]) {
      if (!diff) first = i;
      ++diff;
    }
  if (diff)
    std::printf("  %-28s %zu of %zu bytes differ from the CPU (first at byte %zu)\n", what, diff, bytes, first);
  else
    std::printf("  %-28s bit-exact with the CPU (%zu bytes)\n", what, bytes);
  return diff == 0;
}

int run_gpu(const std::vector<uint16_t>& x16, const std::vector<uint16_t>& w16, const HostOperand& hx,
            const HostOperand& hw, const std::vector<float>& ref) {
  nvfp4::cuda::check(cudaSetDevice(0), "cudaSetDevice");
  cudaDeviceProp prop;
  nvfp4::cuda::check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  const int cc = nvfp4::cuda_device_cc(0);
  std::printf("\nGPU 0: %s (sm_%d)\n", prop.name, cc);
  const std::string arch = std::to_string(cc) + "a";
  const std::vector<std::string> archs = nvfp4::build_cuda_archs();
  if (std::find(archs.begin(), archs.end(), arch) == archs.end()) {
    std::printf("  this libnvfp4 has no kernels for sm_%d (built for \"%s\"): rebuild it with NVFP4_CUDA_ARCHS=%s.\n"
                "  GPU part skipped.\n",
                cc, nvfp4_build_cuda_archs(), arch.c_str());
    return 0;
  }
  const nvfp4::Device gpu = nvfp4::Device::cuda(0);
  cudaStream_t stream = nullptr;
  nvfp4::cuda::check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");

  // Inputs, and one buffer per quantized operand holding data | scales | amax.
  Buffer dx(x16.size() * 2), dw(w16.size() * 2);
  dx.upload(x16.data(), x16.size() * 2, stream);
  dw.upload(w16.data(), w16.size() * 2, stream);
  const nvfp4::QuantizedLayout lx = nvfp4::rowwise_layout(M, K), lw = nvfp4::rowwise_layout(N, K);
  Buffer qx_buf(lx.packed_bytes()), qw_buf(lw.packed_bytes());
  nvfp4::QuantizedView qx = nvfp4::QuantizedView::carve(lx, qx_buf.get(), qx_buf.size(), gpu);
  nvfp4::QuantizedView qw = nvfp4::QuantizedView::carve(lw, qw_buf.get(), qw_buf.size(), gpu);

  nvfp4::quantize(nvfp4::TensorView(dx.get(), NVFP4_DTYPE_BFLOAT16, {M, K}, gpu), nvfp4::QuantConfig(), &qx, nullptr,
                  stream);
  nvfp4::quantize(nvfp4::TensorView(dw.get(), NVFP4_DTYPE_BFLOAT16, {N, K}, gpu), nvfp4::QuantConfig().block_2d(), &qw,
                  nullptr, stream);
  nvfp4::cuda::check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");

  // The packed buffer starts with the data, so comparing its prefix compares the codes.
  bool ok = same_bytes(qx_buf, hx.data.data(), hx.data.size(), "x codes (1D blocks)");
  ok &= same_bytes(qw_buf, hw.data.data(), hw.data.size(), "w codes (2D tiles)");
  float amax[2];
  nvfp4::cuda::check(cudaMemcpy(&amax[0], qx.amax(), 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
  nvfp4::cuda::check(cudaMemcpy(&amax[1], qw.amax(), 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
  if (amax[0] != hx.amax || amax[1] != hw.amax) {
    std::printf("  amax differs: GPU %g / %g, CPU %g / %g\n", amax[0], amax[1], hx.amax, hw.amax);
    ok = false;
  }

  // The bound on |GPU - CPU| per entry: FP32 accumulation of exact FP4 products (at most
  // ~K roundings of the sum of magnitudes) plus half an ulp of the BF16 output.
  std::vector<float> xh(static_cast<size_t>(M * K)), wh(static_cast<size_t>(N * K));
  nvfp4::TensorView xv = nvfp4::TensorView::of(xh.data(), {M, K}), wv = nvfp4::TensorView::of(wh.data(), {N, K});
  nvfp4::dequantize(hx.view, xv);
  nvfp4::dequantize(hw.view, wv);
  std::vector<double> bound(ref.size());
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double mag = 0;
      for (int64_t k = 0; k < K; ++k) mag += std::fabs(static_cast<double>(xh[i * K + k]) * wh[j * K + k]);
      bound[i * N + j] = static_cast<double>(K) * std::ldexp(1.0, -23) * mag + std::ldexp(std::fabs(ref[i * N + j]), -8);
    }

  Buffer dd(static_cast<size_t>(M * N) * 2);
  nvfp4_tensor_t d = nvfp4::TensorView(dd.get(), NVFP4_DTYPE_BFLOAT16, {M, N}, gpu).c();
  int ran = 0;
  for (nvfp4_backend_t backend : {NVFP4_BACKEND_CUTLASS, NVFP4_BACKEND_CUDNN}) {
    const char* name = nvfp4::backend_name(backend);
    if (!nvfp4::backend_supported(backend, cc)) {
      std::printf("  gemm %-8s not available on sm_%d in this build\n", name, cc);
      continue;
    }
    // Size the workspace for exactly this call, then run it; the C API reports failures
    // as a status plus a message for this thread.
    nvfp4_gemm_args_t q;
    std::memset(&q, 0, sizeof q);
    q.a = qx.get();
    q.b = qw.get();
    q.scale_layout = NVFP4_SCALES_SWIZZLED;
    q.d = &d;
    q.backend = backend;
    size_t ws_bytes = 0;
    nvfp4::check(nvfp4_gemm_workspace_size(&q, &ws_bytes), "nvfp4_gemm_workspace_size");
    Buffer ws(ws_bytes);
    const nvfp4_status_t st = gemm_c_api(qx.get(), qw.get(), &d, backend, ws.get(), ws.size(), stream);
    if (st != NVFP4_SUCCESS) {
      std::printf("  gemm %-8s failed: %s: %s\n", name, nvfp4_status_string(st), nvfp4_last_error());
      ok = false;
      continue;
    }
    nvfp4::cuda::check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    std::vector<uint16_t> out(static_cast<size_t>(M * N));
    dd.download(out.data(), out.size() * 2);
    size_t bad = 0;
    double worst = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      const double err = std::fabs(static_cast<double>(nvfp4::bf16_to_float(out[i])) - ref[i]);
      worst = std::max(worst, err / bound[i]);
      bad += !(err <= bound[i]);
    }
    // A rough speed (no L2 rotation: nvfp4-bench measures properly).
    cudaEvent_t e0, e1;
    nvfp4::cuda::check(cudaEventCreate(&e0), "cudaEventCreate");
    nvfp4::cuda::check(cudaEventCreate(&e1), "cudaEventCreate");
    const int iters = 20;
    nvfp4::cuda::check(cudaEventRecord(e0, stream), "cudaEventRecord");
    for (int i = 0; i < iters; ++i) nvfp4::check(gemm_c_api(qx.get(), qw.get(), &d, backend, ws.get(), ws.size(), stream));
    nvfp4::cuda::check(cudaEventRecord(e1, stream), "cudaEventRecord");
    nvfp4::cuda::check(cudaEventSynchronize(e1), "cudaEventSynchronize");
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    const double us = 1e3 * ms / iters;
    std::printf("  gemm %-8s %s: %zu of %lld entries outside the bound (worst error/bound %.3f), %.1f us/call, "
                "workspace %zu B\n",
                name, bad ? "MISMATCH" : "matches the CPU", bad, static_cast<long long>(M * N), worst, us, ws_bytes);
    ok &= bad == 0;
    ++ran;
  }
  if (!ran) std::printf("  no GEMM backend for sm_%d in this build: quantization checked only\n", cc);
  cudaStreamDestroy(stream);
  return ok ? 0 : 1;
}

}  // namespace
#endif  // NVFP4_EMBED_CUDA

int main() {
  try {
    std::printf("nvfp4 %s (header %s); CUDA code in this build: \"%s\"; CUDA devices visible: %d\n",
                nvfp4::version().c_str(), nvfp4::header_version().c_str(), nvfp4_build_cuda_archs(),
                nvfp4::cuda_device_count());
    if (!nvfp4::runtime_matches_header()) {
      std::printf("the loaded libnvfp4 does not match the header this program was compiled with\n");
      return 1;
    }

    // ---- CPU: quantize and multiply with the reference backend.
    const std::vector<uint16_t> x16 = random_bf16(M * K, 1), w16 = random_bf16(N * K, 2);
    HostOperand hx(nvfp4::rowwise_layout(M, K)), hw(nvfp4::rowwise_layout(N, K));
    nvfp4::quantize(nvfp4::TensorView(x16.data(), NVFP4_DTYPE_BFLOAT16, {M, K}), nvfp4::QuantConfig(), &hx.view, nullptr);
    nvfp4::quantize(nvfp4::TensorView(w16.data(), NVFP4_DTYPE_BFLOAT16, {N, K}), nvfp4::QuantConfig().block_2d(),
                    &hw.view, nullptr);
    std::vector<float> ref(static_cast<size_t>(M * N));
    nvfp4_tensor_t d = nvfp4::TensorView::of(ref.data(), {M, N}).c();
    const auto t0 = std::chrono::steady_clock::now();
    nvfp4::check(gemm_c_api(hx.view.get(), hw.view.get(), &d, NVFP4_BACKEND_REFERENCE, nullptr, 0, nullptr),
                 "reference gemm");
    const double cpu_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

    // How far FP4 is from the unquantized product (float64 of the BF16 inputs).
    double err2 = 0, ref2 = 0;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double exact = 0;
        for (int64_t k = 0; k < K; ++k)
          exact += static_cast<double>(nvfp4::bf16_to_float(x16[i * K + k])) * nvfp4::bf16_to_float(w16[j * K + k]);
        err2 += (ref[i * N + j] - exact) * (ref[i * N + j] - exact);
        ref2 += exact * exact;
      }
    std::printf("CPU: quantized x[%lld, %lld] (1D) and w[%lld, %lld] (2D), reference GEMM in %.0f ms; "
                "relative error of the FP4 product vs float64: %.4f\n",
                static_cast<long long>(M), static_cast<long long>(K), static_cast<long long>(N),
                static_cast<long long>(K), cpu_ms, std::sqrt(err2 / ref2));

#if defined(NVFP4_EMBED_CUDA)
    if (nvfp4::cuda_device_count() == 0) {
      std::printf("No CUDA device visible: built, linked and ran the CPU part; nothing to run on a GPU.\n");
      return 0;
    }
    const int rc = run_gpu(x16, w16, hx, hw, ref);
    std::printf(rc == 0 ? "OK\n" : "FAILED\n");
    return rc;
#else
    std::printf("Built without the CUDA runtime (NVFP4_EMBED_WITH_CUDA=OFF): CPU part only.\n");
    return 0;
#endif
  } catch (const nvfp4::Error& e) {
    std::fprintf(stderr, "nvfp4 error (status %d): %s\n", static_cast<int>(e.status()), e.what());
    return 1;
  }
}
