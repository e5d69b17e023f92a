// cuDNN runner for the FP4 GEMM: the only file that includes cudnn_frontend.h.
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
// (NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING), so nvfp4 loads and runs everywhere else
// without cuDNN. Where it looks, in order:
//   NVFP4_CUDNN_PATH (the library file or its directory; nothing else is tried if set),
//   a libcudnn.so.9 already in the process (torch loads the one from its nvidia wheel),
//   the dynamic loader's search path, then the nvidia-cudnn wheels in the site-packages
//   this library was installed into (nvidia/cudnn/lib, nvidia/cu13/lib, nvidia/cu12/lib,
//   nvidia/cudnn_jit/lib).
//
// Which engine runs: cuDNN's heuristics rank the plans of a graph, and their first choice
// is not always the fastest (H100, cuDNN 9.19, the Hopper BF16 graph with the fused
// epilogue at 8192^3: the first choice ran at 0.69 of cuBLAS, the second at 0.97;
// bench/bench_cudnn_plans.py times every plan). So by default the first
// NVFP4_CUDNN_AUTOTUNE (default 8) plans that build are timed on the first call of each
// graph, on the caller's operands and stream (one warm-up and three timed runs each, one
// host synchronization per plan, once), and the fastest is kept with the graph. Every
// candidate is deterministic and accumulates in FP32, so any choice meets the same error
// bound, but two processes may choose differently and then differ in the last bits.
// NVFP4_CUDNN_AUTOTUNE=0 runs the heuristic's first choice (the same engine in every
// process). A first call made while the stream is being captured into a CUDA graph cannot
// time anything: it takes the first candidate, and that choice stays with the graph.
//
// Graphs are built once per (shape, dtypes, epilogue, path, cc, device, handle) and kept
// in a bounded LRU cache shared by all threads; each thread has its own cuDNN handle per
// device (a handle must not be used by two threads at once), so a cached graph is only
// ever executed by the thread that built it. NVFP4_CUDNN_DEBUG=1 logs each graph build
// to stderr; NVFP4_CUDNN_CACHE_SIZE bounds the cache (default 256 graphs).
#include <dlfcn.h>
#include <sys/stat.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <cudnn_frontend.h>

#include "gemm/backends.h"
#include "gemm/common/decode.h"
#include "cuda/device.h"
#include "gemm/cudnn/cudnn_scalars.h"

namespace cudnn_frontend {
// With dynamic loading the frontend resolves every cuDNN entry point through this
// handle; it is set once, before the first frontend call (see library() below).
void* cudnn_dlhandle = nullptr;
}  // namespace cudnn_frontend

namespace nvfp4::detail {
namespace {

namespace fe = cudnn_frontend;

constexpr int64_t kMinVersion = 90000;        // any cuDNN 9: the BF16 matmul graph
constexpr int64_t kNativeMinVersion = 90700;  // FP4 block_scale_dequantize + matmul
constexpr size_t kAlign = gpu::kWorkspaceAlign;
using gpu::align_up;

// ---- libcudnn.so.9 ----

struct Library {
  void* handle = nullptr;
  int64_t version = 0;
  std::string error;  // why it is unusable, when handle is null
};

std::string directory_of_this_library() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&directory_of_this_library), &info) == 0 || !info.dli_fname) return "";
  std::string path = info.dli_fname;
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

bool is_directory(const std::string& p) {
  struct stat st{};
  return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

Library open_library() {
  Library lib;
  std::string tried;
  auto attempt = [&](const std::string& name, int flags) {
    dlerror();
    lib.handle = dlopen(name.c_str(), flags);
    if (!lib.handle && !(flags & RTLD_NOLOAD)) {
      const char* e = dlerror();  // already names the file
      tried += "\n  " + (e ? std::string(e) : name + ": not found");
    }
    return lib.handle != nullptr;
  };
  const char* forced = std::getenv("NVFP4_CUDNN_PATH");
  if (forced && *forced) {
    std::string p = forced;
    if (is_directory(p)) p += "/libcudnn.so.9";
    attempt(p, RTLD_NOW | RTLD_LOCAL);
  } else if (!attempt("libcudnn.so.9", RTLD_NOW | RTLD_NOLOAD) && !attempt("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL)) {
    const std::string here = directory_of_this_library();
    const char* wheels[] = {"/../nvidia/cudnn/lib", "/../nvidia/cu13/lib", "/../nvidia/cu12/lib",
                            "/../nvidia/cudnn_jit/lib"};
    for (const char* w : wheels)
      if (!here.empty() && attempt(here + w + "/libcudnn.so.9", RTLD_NOW | RTLD_LOCAL)) break;
  }
  if (!lib.handle) {
    lib.error = "cudnn: libcudnn.so.9 could not be loaded; tried:" + tried +
                "\nInstall cuDNN 9 (pip install nvidia-cudnn-cu13, or cu12 to match the CUDA driver), import torch "
                "first, or set NVFP4_CUDNN_PATH to libcudnn.so.9 or its directory";
    return lib;
  }
  using GetVersion = size_t (*)();
  auto get_version = reinterpret_cast<GetVersion>(dlsym(lib.handle, "cudnnGetVersion"));
  if (!get_version) {
    lib.error = "cudnn: the libcudnn.so.9 loaded has no cudnnGetVersion";
    lib.handle = nullptr;
    return lib;
  }
  lib.version = static_cast<int64_t>(get_version());
  if (lib.version < kMinVersion) {
    lib.error = "cudnn: libcudnn version " + std::to_string(lib.version) + " is too old; nvfp4 needs cuDNN 9";
    lib.handle = nullptr;
    return lib;
  }
  fe::cudnn_dlhandle = lib.handle;
  return lib;
}

const Library& library() {
  static const Library lib = open_library();  // once per process, thread-safe
  return lib;
}

// ---- errors ----

// A failure with the status it maps to; thrown inside this file only, and turned into
// fail(status, message) at each entry point.
struct Failure {
  nvfp4_status_t status;
  std::string message;
};

[[noreturn]] void raise(nvfp4_status_t s, const std::string& m) { throw Failure{s, m}; }

void check_fe(fe::error_t e, const char* step, nvfp4_status_t status) {
  if (e.is_bad()) raise(status, std::string("cudnn: ") + step + ": " + e.get_message());
}

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) raise(NVFP4_ERROR_CUDA, std::string("cudnn: ") + what + ": " + cudaGetErrorString(e));
}

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

// ---- graphs ----

enum class Path { kNative, kBf16Emulation };

struct Key {
  int64_t m, n, k;
  int d_dtype, c_dtype, bias_dtype;
  bool has_c, has_bias;
  bool mx;  // MXFP4 operands (E8M0 scales over 32 values) rather than NVFP4
  Path path;
  bool fused;  // epilogue inside the graph (else: matmul to fp32, then gemm_epilogue)
  int candidates;  // plans built for timing (0: the heuristic's first choice only)
  int cc, device;
  cudnnHandle_t handle;
  bool operator==(const Key& o) const {
    return m == o.m && n == o.n && k == o.k && d_dtype == o.d_dtype && c_dtype == o.c_dtype &&
           bias_dtype == o.bias_dtype && has_c == o.has_c && has_bias == o.has_bias && mx == o.mx && path == o.path &&
           fused == o.fused && candidates == o.candidates && cc == o.cc && device == o.device && handle == o.handle;
  }
};

struct KeyHash {
  size_t operator()(const Key& k) const {
    size_t h = 1469598103934665603ull;
    auto mix = [&](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
    mix(uint64_t(k.m));
    mix(uint64_t(k.n));
    mix(uint64_t(k.k));
    mix(uint64_t(k.d_dtype) | uint64_t(k.c_dtype) << 8 | uint64_t(k.bias_dtype) << 16 | uint64_t(k.has_c) << 24 |
        uint64_t(k.has_bias) << 25 | uint64_t(k.path) << 26 | uint64_t(k.fused) << 28 |
        uint64_t(k.mx) << 30 | uint64_t(uint32_t(k.candidates)) << 32);
    mix(uint64_t(k.cc) << 32 | uint32_t(k.device));
    mix(reinterpret_cast<uintptr_t>(k.handle));
    return h;
  }
};

using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;

struct Entry {
  fe::graph::Graph graph;
  TensorPtr a, b, sfa, sfb, alpha, beta, c, bias, d;
  int64_t workspace = 0;  // the largest of the candidates' workspaces
  bool deterministic = true;
  std::vector<int64_t> candidates;  // built plan indices, in the heuristics' order (empty: not tuned)
  // The plan that runs: -1 until the first call has timed the candidates. Written and read
  // only by the thread that owns the graph's handle (see the top of the file).
  int64_t chosen = -1;
  std::string timings;  // for NVFP4_CUDNN_DEBUG
};

fe::DataType_t fe_dtype(nvfp4_dtype_t t) {
  switch (t) {
    case NVFP4_DTYPE_FLOAT32: return fe::DataType_t::FLOAT;
    case NVFP4_DTYPE_FLOAT16: return fe::DataType_t::HALF;
    case NVFP4_DTYPE_BFLOAT16: return fe::DataType_t::BFLOAT16;
    default: raise(NVFP4_ERROR_INVALID_ARGUMENT, "cudnn: unsupported dtype");
  }
}

const char* dtype_name(int t) {
  return t == NVFP4_DTYPE_FLOAT32 ? "f32" : t == NVFP4_DTYPE_FLOAT16 ? "f16" : "bf16";
}

// The graph of one problem, defined but not built (no handle, no GPU needed).
std::shared_ptr<Entry> define_graph(const Key& key) {
  namespace g = fe::graph;
  auto e = std::make_shared<Entry>();
  g::Graph& graph = e->graph;
  const int64_t M = key.m, N = key.n, K = key.k;
  graph.set_intermediate_data_type(fe::DataType_t::FLOAT).set_compute_data_type(fe::DataType_t::FLOAT);
  // Known, so the frontend does not ask the CUDA runtime for it (it would dlopen its own
  // libcudart, which a statically linked application may not ship).
  graph.set_sm_version(key.cc);

  // B is [N, K] row-major in memory, which is the [K, N] operand of the matmul with
  // strides (1, K): "K-major", the TN layout every backend here uses.
  TensorPtr a_in, b_in;
  if (key.path == Path::kNative) {
    const int64_t mp = (M + 127) / 128 * 128, np = (N + 127) / 128 * 128;
    // NVFP4: E4M3 scales over 16 values; MXFP4: E8M0 scales over 32.
    const int32_t blk = key.mx ? 32 : 16;
    const fe::DataType_t sdt = key.mx ? fe::DataType_t::FP8_E8M0 : fe::DataType_t::FP8_E4M3;
    const int64_t cp = (K / blk + 3) / 4 * 4;
    e->a = graph.tensor(g::Tensor_attributes().set_name("a").set_data_type(fe::DataType_t::FP4_E2M1)
                            .set_dim({1, M, K}).set_stride({M * K, K, 1}));
    e->b = graph.tensor(g::Tensor_attributes().set_name("b").set_data_type(fe::DataType_t::FP4_E2M1)
                            .set_dim({1, K, N}).set_stride({N * K, 1, K}));
    // The 128x4 swizzle is cuDNN's F8_128x4 reordering of the padded scale matrix.
    e->sfa = graph.tensor(g::Tensor_attributes().set_name("sfa").set_data_type(sdt)
                              .set_dim({1, mp, cp}).set_stride({mp * cp, cp, 1})
                              .set_reordering_type(fe::TensorReordering_t::F8_128x4));
    e->sfb = graph.tensor(g::Tensor_attributes().set_name("sfb").set_data_type(sdt)
                              .set_dim({1, cp, np}).set_stride({np * cp, 1, cp})
                              .set_reordering_type(fe::TensorReordering_t::F8_128x4));
    a_in = graph.block_scale_dequantize(e->a, e->sfa,
                                        g::Block_scale_dequantize_attributes().set_name("dequant_a")
                                            .set_block_size(std::vector<int32_t>{1, blk}));
    b_in = graph.block_scale_dequantize(e->b, e->sfb,
                                        g::Block_scale_dequantize_attributes().set_name("dequant_b")
                                            .set_block_size(std::vector<int32_t>{blk, 1}));
  } else {
    e->a = graph.tensor(g::Tensor_attributes().set_name("a_bf16").set_data_type(fe::DataType_t::BFLOAT16)
                            .set_dim({1, M, K}).set_stride({M * K, K, 1}));
    e->b = graph.tensor(g::Tensor_attributes().set_name("b_bf16").set_data_type(fe::DataType_t::BFLOAT16)
                            .set_dim({1, K, N}).set_stride({N * K, 1, K}));
    a_in = e->a;
    b_in = e->b;
  }
  TensorPtr t = graph.matmul(a_in, b_in,
                             g::Matmul_attributes().set_name("matmul").set_compute_data_type(fe::DataType_t::FLOAT));
  t->set_data_type(fe::DataType_t::FLOAT);
  if (!key.fused) {
    // The matmul alone; gemm_epilogue applies alpha, bias and beta*C afterwards.
    t->set_output(true).set_dim({1, M, N}).set_stride({M * N, N, 1});
    e->d = t;
    return e;
  }

  // Epilogue in the association the CUTLASS runners use, beta*C + (alpha*acc + bias),
  // so the two backends differ only in accumulation order and rounding of fused steps.
  auto pw = [&](const char* name, fe::PointwiseMode_t mode) {
    return g::Pointwise_attributes().set_name(name).set_mode(mode).set_compute_data_type(fe::DataType_t::FLOAT);
  };
  auto scalar = [&](const char* name) {
    return graph.tensor(g::Tensor_attributes().set_name(name).set_data_type(fe::DataType_t::FLOAT)
                            .set_dim({1, 1, 1}).set_stride({1, 1, 1}));
  };
  e->alpha = scalar("alpha");
  t = graph.pointwise(t, e->alpha, pw("scale_alpha", fe::PointwiseMode_t::MUL));
  if (key.has_bias) {
    e->bias = graph.tensor(g::Tensor_attributes().set_name("bias")
                               .set_data_type(fe_dtype(static_cast<nvfp4_dtype_t>(key.bias_dtype)))
                               .set_dim({1, 1, N}).set_stride({N, N, 1}));
    t = graph.pointwise(t, e->bias, pw("add_bias", fe::PointwiseMode_t::ADD));
  }
  if (key.has_c) {
    e->beta = scalar("beta");
    e->c = graph.tensor(g::Tensor_attributes().set_name("c")
                            .set_data_type(fe_dtype(static_cast<nvfp4_dtype_t>(key.c_dtype)))
                            .set_dim({1, M, N}).set_stride({M * N, N, 1}));
    TensorPtr bc = graph.pointwise(e->c, e->beta, pw("scale_c", fe::PointwiseMode_t::MUL));
    t = graph.pointwise(t, bc, pw("add_c", fe::PointwiseMode_t::ADD));
  }
  t->set_output(true).set_data_type(fe_dtype(static_cast<nvfp4_dtype_t>(key.d_dtype)))
      .set_dim({1, M, N}).set_stride({M * N, N, 1});
  e->d = t;
  return e;
}

// deterministic: leave out engines cuDNN marks NONDETERMINISTIC (split-K with atomics),
// so that two runs give the same bits; build() retries without that filter only if no
// deterministic engine supports the graph.
std::shared_ptr<Entry> build_graph(const Key& key, cudnnHandle_t handle, bool deterministic) {
  std::shared_ptr<Entry> e = define_graph(key);
  fe::graph::Graph& graph = e->graph;
  check_fe(graph.validate(), "graph validation", NVFP4_ERROR_INTERNAL);
  check_fe(graph.build_operation_graph(handle), "building the operation graph", NVFP4_ERROR_NOT_SUPPORTED);
  check_fe(graph.create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}), "heuristics",
           NVFP4_ERROR_NOT_SUPPORTED);
  if (deterministic) graph.deselect_numeric_notes({fe::NumericalNote_t::NONDETERMINISTIC});
  check_fe(graph.check_support(), "no engine supports this graph", NVFP4_ERROR_NOT_SUPPORTED);
  e->deterministic = deterministic;
  if (key.candidates > 0) {
    // The first `candidates` plans that build (a plan that declines, or that the filter
    // above bars, is skipped), each kept with its own workspace size.
    const int64_t count = graph.get_execution_plan_count();
    for (int64_t i = 0; i < count && int64_t(e->candidates.size()) < key.candidates; ++i) {
      if (graph.build_plan_at_index(i).is_bad()) continue;
      int64_t ws = 0;
      if (graph.get_workspace_size_plan_at_index(i, ws).is_bad()) continue;
      e->candidates.push_back(i);
      e->workspace = std::max(e->workspace, ws);
    }
    if (e->candidates.size() > 1) return e;
    // One plan or none built: nothing to choose between, the heuristic path below decides.
    e->candidates.clear();
    e->workspace = 0;
  }
  check_fe(graph.build_plans(fe::BuildPlanPolicy_t::HEURISTICS_CHOICE), "building the plan",
           NVFP4_ERROR_NOT_SUPPORTED);
  check_fe(graph.get_workspace_size(e->workspace), "workspace query", NVFP4_ERROR_CUDNN);
  return e;
}

// NVFP4_CUDNN_AUTOTUNE: plans timed on the first call of each graph (0: none, the
// heuristic's first choice). Read on every call; it is part of the graph key.
int autotune_candidates() {
  const char* v = std::getenv("NVFP4_CUDNN_AUTOTUNE");
  if (v == nullptr || *v == 0) return 8;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (end == v || *end != 0 || n < 0 || n > 64)
    raise(NVFP4_ERROR_INVALID_ARGUMENT,
          std::string("NVFP4_CUDNN_AUTOTUNE: must be an integer from 0 (the heuristic's first choice) to 64 "
                      "(plans timed on the first call), got '") + v + "'");
  return static_cast<int>(n);
}

std::shared_ptr<Entry> build(const Key& key, cudnnHandle_t handle) {
  try {
    return build_graph(key, handle, true);
  } catch (const Failure& f) {
    if (f.status != NVFP4_ERROR_NOT_SUPPORTED) throw;
    return build_graph(key, handle, false);
  }
}

// A bounded LRU of built graphs: a model that sees many distinct M (varying batch or
// sequence lengths) must not grow it without limit.
class GraphCache {
 public:
  // The entry for key, built on first use. A fused graph that cuDNN refuses
  // (NOT_SUPPORTED) gives null, and is remembered as refused; other failures throw.
  std::shared_ptr<Entry> get(const Key& key, cudnnHandle_t handle) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = map_.find(key);
      if (it != map_.end()) {
        lru_.splice(lru_.begin(), lru_, it->second.second);
        return it->second.first;
      }
      if (key.fused && refused_.count(key) != 0) return nullptr;
    }
    // Built outside the lock: a build takes milliseconds to seconds, and the key holds
    // the calling thread's handle, so no other thread builds the same entry.
    std::shared_ptr<Entry> e;
    try {
      e = build(key, handle);
    } catch (const Failure& f) {
      if (!key.fused || f.status != NVFP4_ERROR_NOT_SUPPORTED) throw;
      log(key, nullptr, f.message);
      std::lock_guard<std::mutex> lock(mu_);
      if (refused_.size() > 4 * capacity()) refused_.clear();
      refused_.insert(key);
      return nullptr;
    }
    log(key, e.get(), "");
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(key);
    if (it != map_.end()) return it->second.first;
    lru_.push_front(key);
    map_.emplace(key, std::make_pair(e, lru_.begin()));
    while (map_.size() > capacity()) {
      map_.erase(lru_.back());
      lru_.pop_back();
    }
    return e;
  }

 void log_choice(const Key& key, const Entry& e) {
    const char* dbg = std::getenv("NVFP4_CUDNN_DEBUG");
    if (!dbg || !*dbg || *dbg == '0') return;
    std::fprintf(stderr, "nvfp4 cudnn: M=%lld N=%lld K=%lld (%s epilogue): %s\n", static_cast<long long>(key.m),
                 static_cast<long long>(key.n), static_cast<long long>(key.k), key.fused ? "fused" : "separate",
                 e.timings.c_str());
  }

 private:
  void log(const Key& key, const Entry* e, const std::string& refusal) {
    const char* dbg = std::getenv("NVFP4_CUDNN_DEBUG");
    if (!dbg || !*dbg || *dbg == '0') return;
    const char* what = key.path == Path::kNative ? "native fp4" : "bf16 emulation";
    const char* epi = key.fused ? "fused epilogue" : "separate epilogue";
    if (e == nullptr) {
      std::fprintf(stderr, "nvfp4 cudnn: refused graph (%s, %s, M=%lld N=%lld K=%lld, cc=%d): %s\n", what, epi,
                   static_cast<long long>(key.m), static_cast<long long>(key.n), static_cast<long long>(key.k),
                   key.cc, refusal.c_str());
      return;
    }
    const int64_t n = ++builds_;
    std::fprintf(stderr,
                 "nvfp4 cudnn: built graph #%lld (%s, %s, M=%lld N=%lld K=%lld, d=%s%s%s, cc=%d, device=%d), "
                 "workspace %lld bytes%s\n",
                 static_cast<long long>(n), what, epi, static_cast<long long>(key.m), static_cast<long long>(key.n),
                 static_cast<long long>(key.k), dtype_name(key.d_dtype), key.has_c ? ", +beta*C" : "",
                 key.has_bias ? ", +bias" : "", key.cc, key.device, static_cast<long long>(e->workspace),
                 e->deterministic ? "" : ", nondeterministic engine (no deterministic one supports it)");
  }
  static size_t capacity() {
    static const size_t cap = [] {
      const char* s = std::getenv("NVFP4_CUDNN_CACHE_SIZE");
      long v = s ? std::atol(s) : 0;
      return v > 0 ? static_cast<size_t>(v) : size_t(256);
    }();
    return cap;
  }
  std::mutex mu_;
  std::list<Key> lru_;
  std::unordered_map<Key, std::pair<std::shared_ptr<Entry>, std::list<Key>::iterator>, KeyHash> map_;
  std::unordered_set<Key, KeyHash> refused_;
  std::atomic<int64_t> builds_{0};
};

GraphCache& cache() {
  static GraphCache* c = new GraphCache;  // leaked on purpose: no teardown-order hazards at exit
  return *c;
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

// Times e's candidate plans on this call's operands (warm-up, then three runs between two
// events on the caller's stream) and keeps the fastest in e.chosen; ties go to the
// heuristics' order. While the stream is being captured nothing can be timed: the first
// candidate is kept. Plans that fail to execute are skipped; if all fail, the error of
// the first is raised.
void choose_plan(Entry& e, cudnnHandle_t handle, std::unordered_map<TensorPtr, void*>& pack, void* ws,
                 cudaStream_t stream) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  check_cuda(cudaStreamIsCapturing(stream, &capture), "cudaStreamIsCapturing");
  if (capture != cudaStreamCaptureStatusNone) {
    e.chosen = e.candidates.front();
    e.timings = "chosen without timing (first call inside CUDA graph capture)";
    return;
  }
  cudaEvent_t start = nullptr, stop = nullptr;
  check_cuda(cudaEventCreate(&start), "cudaEventCreate");
  if (cudaError_t err = cudaEventCreate(&stop); err != cudaSuccess) {
    cudaEventDestroy(start);
    check_cuda(err, "cudaEventCreate");
  }
  float best = 0.0f;
  int64_t best_plan = -1;
  std::string first_error, timings;
  for (int64_t plan : e.candidates) {
    fe::error_t r = e.graph.execute_plan_at_index(handle, pack, ws, plan);
    float ms = 0.0f;
    for (int it = 0; it < 3 && r.is_good(); ++it) {
      if (it == 0 && cudaEventRecord(start, stream) != cudaSuccess) break;
      r = e.graph.execute_plan_at_index(handle, pack, ws, plan);
    }
    const bool timed = r.is_good() && cudaEventRecord(stop, stream) == cudaSuccess &&
                       cudaEventSynchronize(stop) == cudaSuccess && cudaEventElapsedTime(&ms, start, stop) == cudaSuccess;
    if (!timed) {
      if (first_error.empty())
        first_error = r.is_bad() ? r.get_message() : std::string(cudaGetErrorString(cudaGetLastError()));
      (void)cudaGetLastError();
      timings += " #" + std::to_string(plan) + " failed;";
      continue;
    }
    timings += " #" + std::to_string(plan) + " " + std::to_string(ms / 3.0f * 1000.0f) + " us;";
    if (best_plan < 0 || ms < best) {
      best = ms;
      best_plan = plan;
    }
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (best_plan < 0) raise(NVFP4_ERROR_CUDNN, "cudnn: no candidate plan executed: " + first_error);
  e.chosen = best_plan;
  e.timings = "plans timed:" + timings + " chose #" + std::to_string(best_plan);
}

bool separate_epilogue_forced() {
  const char* v = std::getenv("NVFP4_CUDNN_EPILOGUE");
  return v != nullptr && std::strcmp(v, "separate") == 0;
}

std::string cc_str(int cc) { return std::to_string(cc / 10) + "." + std::to_string(cc % 10); }

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
  if (p.fused) p.entry = cache().get(make_key(job, p.path, true, candidates, cc, device, p.handle), p.handle);
  if (!p.entry) {
    p.fused = false;
    p.entry = cache().get(make_key(job, p.path, false, candidates, cc, device, p.handle), p.handle);
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

template <class F>
nvfp4_status_t guarded(F&& f) {
  try {
    return f();
  } catch (const Failure& e) {
    return fail(e.status, e.message);
  } catch (const std::exception& e) {
    return fail(NVFP4_ERROR_CUDNN, std::string("cudnn: ") + e.what());
  } catch (...) {
    return fail(NVFP4_ERROR_CUDNN, "cudnn: unknown error");
  }
}

}  // namespace

int cudnn_available(int cc) {
  try {
    const Library& lib = library();
    if (!lib.handle) return 0;
    // The FP4 block-scale graph of the Blackwell path needs cuDNN >= 9.7.
    return cc >= 100 && lib.version < kNativeMinVersion ? 0 : 1;
  } catch (...) {
    return 0;
  }
}

nvfp4_status_t cudnn_check_graphs(int cc, bool mx, int* checked) {
  return guarded([&] {
    if (checked != nullptr) *checked = 0;
    const Library& lib = library();
    if (!lib.handle) raise(NVFP4_ERROR_CUDNN, lib.error);
    const Path path = cc >= 100 ? Path::kNative : Path::kBf16Emulation;
    struct Problem {
      int64_t m, n, k;
    };
    const Problem problems[] = {{1, 8, 32}, {7, 40, 96}, {129, 264, 4096}, {4096, 14336, 4096}};  // K % 32 == 0
    const nvfp4_dtype_t dtypes[] = {NVFP4_DTYPE_FLOAT32, NVFP4_DTYPE_FLOAT16, NVFP4_DTYPE_BFLOAT16};
    int n = 0;
    for (const Problem& pr : problems)
      for (nvfp4_dtype_t d : dtypes)
        for (int epi = 0; epi < 4; ++epi)
          for (int fused = 0; fused < 2; ++fused) {
            const bool has_c = (epi & 1) != 0, has_bias = (epi & 2) != 0;
            Key key{pr.m, pr.n, pr.k, int(d), has_c ? int(d) : 0, has_bias ? int(NVFP4_DTYPE_FLOAT32) : 0,
                    has_c, has_bias, mx, path, fused != 0, 0, cc, 0, nullptr};
            std::shared_ptr<Entry> e = define_graph(key);
            fe::error_t err = e->graph.validate();
            if (err.is_bad())
              raise(NVFP4_ERROR_NOT_SUPPORTED,
                    "cudnn: graph validation failed (" +
                        std::string(path == Path::kNative ? (mx ? "native mxfp4" : "native nvfp4") : "bf16") +
                        (fused ? ", fused epilogue" : ", separate epilogue") + ", M=" + std::to_string(pr.m) +
                        " N=" + std::to_string(pr.n) + " K=" + std::to_string(pr.k) + " d=" + dtype_name(int(d)) +
                        (has_c ? " +C" : "") + (has_bias ? " +bias" : "") + ", cc=" + cc_str(cc) +
                        "): " + err.get_message());
            ++n;
          }
    if (checked != nullptr) *checked = n;
    return NVFP4_SUCCESS;
  });
}

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
        cache().log_choice(make_key(job, p.path, p.fused, static_cast<int>(entry.candidates.size()), cc, 0, p.handle),
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
