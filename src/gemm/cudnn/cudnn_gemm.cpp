// cuDNN runner for the FP4 GEMM: handles, the workspace layout, and one call from operands
// to output. Its neighbours: cudnn_library.cpp (loading libcudnn.so.9), cudnn_graph.cpp
// (graphs and their cache), cudnn_autotune.cpp (the plan choice).
//
// Blackwell (cc >= 100), native (cuDNN >= 9.7, K % 32 == 0, 16-byte aligned rows):
//   a  = block_scale_dequantize(A [M,K] FP4_E2M1, SFA FP8_E4M3 F8_128x4, block 1x16)
//   b  = block_scale_dequantize(B [K,N] FP4_E2M1, SFB FP8_E4M3 F8_128x4, block 16x1)
//   D  = beta * C + (alpha * matmul(a, b) + bias[n]), fp32 throughout, stored in D's dtype
//   (MXFP4 operands: SFA / SFB FP8_E8M0, blocks 1x32 / 32x1, alpha = 1)
// Hopper (cc 90), exact emulation: our FP4 -> BF16 decode (sm90_decode_bf16, value times
// block scale, exact in BF16) of A and B into the workspace, then a cuDNN BF16 matmul
// graph with the same epilogue. The per-tensor scales stay out of the operands (that
// would break exactness) and arrive as alpha, a device scalar: no host synchronization.
//
// Two graphs per problem. The fused one carries the epilogue (alpha, bias, beta*C) as
// pointwise nodes after the matmul. No public FP4 sample fuses pointwise nodes after a
// block-scaled matmul before cuDNN 9.15, so where check_support (or the plan build)
// refuses it, the separate one runs instead: the matmul alone into an fp32 buffer in the
// workspace, then nvfp4's epilogue kernel (gemm/common/decode.cu) in the same association.
// The refusal is remembered per problem, so the fused graph is tried once.
// NVFP4_CUDNN_EPILOGUE=separate forces the separate graph (tests; also on Hopper).
//
// libcudnn.so.9 is opened with dlopen the first time this backend is used
// (cudnn_library.cpp), so nvfp4 loads and runs everywhere else without cuDNN.
//
// Which engine runs: by default the first NVFP4_CUDNN_AUTOTUNE (default 8) plans that
// build are timed on the first call of each graph and the fastest is kept with it
// (cudnn_autotune.cpp). Every candidate is deterministic and accumulates in FP32, so any
// choice meets the same error bound, but two processes may choose differently and then
// differ in the last bits. NVFP4_CUDNN_AUTOTUNE=0 runs the heuristic's first choice (the
// same engine in every process). A first call made while the stream is being captured
// into a CUDA graph cannot time anything: it takes the first candidate, and that choice
// stays with the graph.
//
// Graphs are built once per (shape, dtypes, epilogue, path, cc, device, handle) and kept
// in a bounded LRU cache shared by all threads (cudnn_graph.cpp); each thread has its own
// cuDNN handle per device (a handle must not be used by two threads at once), so a cached
// graph is only ever executed by the thread that built it. NVFP4_CUDNN_DEBUG=1 logs each graph build
// to stderr; NVFP4_CUDNN_CACHE_SIZE bounds the cache (default 256 graphs).
#include <cuda_runtime.h>

#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>

#include "cuda/device.h"
#include "gemm/backends.h"
#include "gemm/common/decode.h"
#include "gemm/cudnn/cudnn_graph.h"
#include "gemm/cudnn/cudnn_library.h"
#include "gemm/cudnn/cudnn_scalars.h"
#include "settings.h"

namespace nvfp4::detail {
namespace cudnn {
namespace {

constexpr size_t kAlign = gpu::kWorkspaceAlign;
using gpu::align_up;

// ---- handles ----

cudnnHandle_t thread_handle(int device) {
  // One handle per thread and device. Never destroyed: at thread or process exit the CUDA
  // context may already be torn down, and cudnnDestroy would then fail or crash.
  thread_local std::unordered_map<int, cudnnHandle_t> handles;
  auto it = handles.find(device);
  if (it != handles.end()) return it->second;
  cudnnHandle_t h = nullptr;
  cudnnStatus_t s = fe::detail::create_handle(&h);
  if (s != CUDNN_STATUS_SUCCESS)
    raise(NVFP4_ERROR_CUDNN, std::string("cudnn: cudnnCreate failed: ") + fe::detail::get_error_string(s));
  handles.emplace(device, h);
  return h;
}

// ---- one call ----

struct Workspace {
  size_t scalars = 0;  // alpha at +0, beta at +16 (fp32, on the device)
  size_t a16 = 0, b16 = 0;  // BF16 copies of the decoded operands (emulation only)
  size_t c_copy = 0;        // C when it overlaps D, fused epilogue only (0: not needed)
  size_t acc = 0;           // fp32 [M, N] matmul result, separate epilogue only
  size_t graph = 0;
  size_t total = 0;
};

struct Prepared {
  Path path;
  cudnnHandle_t handle;
  std::shared_ptr<Entry> entry;
  bool fused = true;
  Workspace ws;
};

bool separate_epilogue_forced() {
  const char* v = setting("NVFP4_CUDNN_EPILOGUE");
  return v != nullptr && std::strcmp(v, "separate") == 0;
}

// What the native FP4 graph needs of the operands, checked before cuDNN sees them so that
// a refusal says what to change.
void check_native(const GemmJob& job) {
  if (job.layout != NVFP4_SCALES_SWIZZLED)
    raise(NVFP4_ERROR_NOT_SUPPORTED,
          "cudnn: native FP4 operands need swizzled (128x4) scales; swizzle linear scales first");
  if (job.k % 32 != 0)
    raise(NVFP4_ERROR_NOT_SUPPORTED, "cudnn: native FP4 GEMM needs K % 32 == 0 (16-byte rows of packed FP4), got K=" +
                                         std::to_string(job.k) + "; pad K with zeros");
  if ((job.n * int64_t(gpu::dtype_bytes(job.d_dtype))) % 16 != 0)
    raise(NVFP4_ERROR_NOT_SUPPORTED, "cudnn: native FP4 GEMM needs N * sizeof(output) % 16 == 0 (16-byte rows of D), "
                                     "got N=" + std::to_string(job.n) + " with a " +
                                         std::to_string(gpu::dtype_bytes(job.d_dtype)) + "-byte output");
  const bool has_c = job.c != nullptr && job.beta != 0.0f;
  if (has_c && (job.n * int64_t(gpu::dtype_bytes(job.c_dtype))) % 16 != 0)
    raise(NVFP4_ERROR_NOT_SUPPORTED, "cudnn: native FP4 GEMM needs N * sizeof(c) % 16 == 0 (16-byte rows of C), got N=" +
                                         std::to_string(job.n));
  const void* ptrs[] = {job.a, job.b, job.sfa, job.sfb, job.d, has_c ? job.c : nullptr, job.bias};
  const char* names[] = {"a", "b", "a.scales", "b.scales", "d", "c", "bias"};
  for (int i = 0; i < 7; ++i)
    if (ptrs[i] != nullptr && !gpu::aligned16(ptrs[i]))
      raise(NVFP4_ERROR_NOT_SUPPORTED, std::string("cudnn: native FP4 GEMM needs 16-byte aligned tensors; ") +
                                           names[i] + " is not");
}

Key make_key(const GemmJob& job, Path path, bool fused, int candidates, int cc, int device, cudnnHandle_t handle) {
  const bool has_c = job.c != nullptr && job.beta != 0.0f;
  return Key{job.m, job.n, job.k, int(job.d_dtype), has_c ? int(job.c_dtype) : 0,
             job.bias ? int(job.bias_dtype) : 0, has_c, job.bias != nullptr, job.format == Format::kMxfp4, path, fused,
             candidates, cc, device, handle};
}

Path path_for(const GemmJob& job, int cc) {
  if (cc >= 100) {
    check_native(job);
    return Path::kNative;
  }
  if (cc == 90) return Path::kBf16Emulation;
  raise(NVFP4_ERROR_NOT_SUPPORTED, "cudnn: needs compute capability 9.0 (emulated) or 10.x-12.x (native), got " +
                                       cc_str(cc));
}

Prepared prepare(const GemmJob& job, int cc) {
  const Library& lib = library();
  if (!lib.handle) raise(NVFP4_ERROR_CUDNN, lib.error);
  if (cc >= 100 && lib.version < kNativeMinVersion)
    raise(NVFP4_ERROR_NOT_SUPPORTED, "cudnn: the native FP4 GEMM (compute capability " + cc_str(cc) +
                                         ") needs cuDNN >= 9.7.0, found " + std::to_string(lib.version));
  Prepared p;
  p.path = path_for(job, cc);
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  p.handle = thread_handle(device);
  p.fused = !separate_epilogue_forced();
  const int candidates = autotune_candidates();
  if (p.fused) p.entry = cached_graph(make_key(job, p.path, true, candidates, cc, device, p.handle), p.handle);
  if (!p.entry) {
    p.fused = false;
    p.entry = cached_graph(make_key(job, p.path, false, candidates, cc, device, p.handle), p.handle);
  }

  const bool has_c = job.c != nullptr && job.beta != 0.0f;
  size_t off = kAlign;  // scalars at 0
  if (p.path == Path::kBf16Emulation) {
    p.ws.a16 = off;
    off = align_up(off + size_t(job.m) * size_t(job.k) * 2, kAlign);
    p.ws.b16 = off;
    off = align_up(off + size_t(job.n) * size_t(job.k) * 2, kAlign);
  }
  if (p.fused) {
    // C may alias D (out= with beta). cuDNN documents no in-place guarantee for a fused
    // epilogue, so such a C is read from a copy taken just before the matmul. (The
    // separate epilogue reads each element of C before it writes the same one of D.)
    const size_t c_bytes = size_t(job.m) * size_t(job.n) * gpu::dtype_bytes(job.c_dtype);
    const size_t d_bytes = size_t(job.m) * size_t(job.n) * gpu::dtype_bytes(job.d_dtype);
    const auto c0 = reinterpret_cast<uintptr_t>(job.c), d0 = reinterpret_cast<uintptr_t>(job.d);
    if (has_c && c0 < d0 + d_bytes && d0 < c0 + c_bytes) {
      p.ws.c_copy = off;
      off = align_up(off + c_bytes, kAlign);
    }
  } else {
    p.ws.acc = off;
    off = align_up(off + size_t(job.m) * size_t(job.n) * sizeof(float), kAlign);
  }
  p.ws.graph = off;
  p.ws.total = align_up(off + size_t(p.entry->workspace), kAlign);
  return p;
}

}  // namespace
}  // namespace cudnn

using namespace cudnn;

nvfp4_status_t cudnn_gemm_workspace_size(const GemmJob& job, int cc, size_t* bytes) {
  return guarded([&] {
    *bytes = 0;
    *bytes = prepare(job, cc).ws.total;
    return NVFP4_SUCCESS;
  });
}

nvfp4_status_t cudnn_gemm(const GemmJob& job, int cc, void* workspace, size_t workspace_bytes,
                          nvfp4_stream_t stream) {
  return guarded([&] {
    Prepared p = prepare(job, cc);
    if (workspace_bytes < p.ws.total || !workspace)
      raise(NVFP4_ERROR_WORKSPACE, "cudnn: workspace of " + std::to_string(workspace_bytes) + " bytes, need " +
                                       std::to_string(p.ws.total));
    if (reinterpret_cast<uintptr_t>(workspace) % kAlign != 0)
      raise(NVFP4_ERROR_INVALID_ARGUMENT, "cudnn: workspace must be 256-byte aligned");
    auto* ws = static_cast<uint8_t*>(workspace);
    auto* scalars = reinterpret_cast<float*>(ws + p.ws.scalars);

    // MXFP4 has no per-tensor scale: null amax pointers give alpha = 1.
    nvfp4_status_t st = cudnn_gemm_scalars(job.amax_a, job.amax_b, job.beta, scalars, stream);
    if (st != NVFP4_SUCCESS) return st;

    const Entry& e = *p.entry;
    std::unordered_map<TensorPtr, void*> pack;
    if (p.path == Path::kBf16Emulation) {
      const bool mx = job.format == Format::kMxfp4;
      st = sm90_decode_bf16(job.a, job.sfa, mx, job.m, job.k, job.layout, ws + p.ws.a16, stream);
      if (st != NVFP4_SUCCESS) return st;
      st = sm90_decode_bf16(job.b, job.sfb, mx, job.n, job.k, job.layout, ws + p.ws.b16, stream);
      if (st != NVFP4_SUCCESS) return st;
      pack[e.a] = ws + p.ws.a16;
      pack[e.b] = ws + p.ws.b16;
    } else {
      pack[e.a] = const_cast<uint8_t*>(job.a);
      pack[e.b] = const_cast<uint8_t*>(job.b);
      pack[e.sfa] = const_cast<uint8_t*>(job.sfa);
      pack[e.sfb] = const_cast<uint8_t*>(job.sfb);
    }
    if (p.fused) {
      pack[e.alpha] = scalars;
      if (e.beta) pack[e.beta] = scalars + 4;  // its own 16 bytes: cuDNN's tensor alignment
      if (e.c && p.ws.c_copy) {
        const size_t c_bytes = size_t(job.m) * size_t(job.n) * gpu::dtype_bytes(job.c_dtype);
        check_cuda(cudaMemcpyAsync(ws + p.ws.c_copy, job.c, c_bytes, cudaMemcpyDeviceToDevice,
                                   reinterpret_cast<cudaStream_t>(stream)),
                   "copying C");
        pack[e.c] = ws + p.ws.c_copy;
      } else if (e.c) {
        pack[e.c] = const_cast<void*>(job.c);
      }
      if (e.bias) pack[e.bias] = const_cast<void*>(job.bias);
      pack[e.d] = job.d;
    } else {
      pack[e.d] = ws + p.ws.acc;
    }

    cudnnStatus_t s = fe::detail::set_stream(p.handle, reinterpret_cast<cudaStream_t>(stream));
    if (s != CUDNN_STATUS_SUCCESS)
      raise(NVFP4_ERROR_CUDNN, std::string("cudnn: cudnnSetStream failed: ") + fe::detail::get_error_string(s));
    Entry& entry = *p.entry;
    if (entry.candidates.empty()) {
      check_fe(e.graph.execute(p.handle, pack, ws + p.ws.graph), "execute", NVFP4_ERROR_CUDNN);
    } else {
      if (entry.chosen < 0) {
        choose_plan(entry, p.handle, pack, ws + p.ws.graph, reinterpret_cast<cudaStream_t>(stream));
        log_choice(make_key(job, p.path, p.fused, static_cast<int>(entry.candidates.size()), cc, 0, p.handle),
                           entry);
      }
      check_fe(e.graph.execute_plan_at_index(p.handle, pack, ws + p.ws.graph, entry.chosen), "execute",
               NVFP4_ERROR_CUDNN);
    }
    if (p.fused) return NVFP4_SUCCESS;
    GemmEpilogue epi;
    epi.acc = reinterpret_cast<const float*>(ws + p.ws.acc);
    epi.acc_ld = job.n;
    epi.alpha = scalars;
    epi.bias = job.bias;
    epi.bias_dtype = job.bias_dtype;
    epi.c = job.c != nullptr && job.beta != 0.0f ? job.c : nullptr;
    epi.c_dtype = job.c_dtype;
    epi.beta = job.beta;
    epi.d = job.d;
    epi.d_dtype = job.d_dtype;
    epi.rows = job.m;
    epi.cols = job.n;
    return gemm_epilogue(epi, stream);
  });
}

}  // namespace nvfp4::detail