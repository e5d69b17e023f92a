// The cuDNN runner's graphs: one per problem (shape, dtypes, epilogue, path, cc, device,
// handle), defined here, built with the deterministic engines where any supports it, and
// kept in a bounded LRU cache shared by all threads; plus the host-only validation of the
// graphs the build checks run (cudnn_check_graphs).
#include "gemm/cudnn/cudnn_graph.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <list>
#include <mutex>
#include <unordered_set>

#include "gemm/backends.h"
#include "gemm/cudnn/cudnn_library.h"

namespace nvfp4::detail {
namespace cudnn {
namespace {

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

}  // namespace

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

namespace {

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

}  // namespace

namespace {

GraphCache& cache() {
  static GraphCache* c = new GraphCache;  // leaked on purpose: no teardown-order hazards at exit
  return *c;
}

}  // namespace

std::shared_ptr<Entry> cached_graph(const Key& key, cudnnHandle_t handle) { return cache().get(key, handle); }

void log_choice(const Key& key, const Entry& e) { cache().log_choice(key, e); }

}  // namespace cudnn

nvfp4_status_t cudnn_check_graphs(int cc, bool mx, int* checked) {
  using namespace cudnn;
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

}  // namespace nvfp4::detail
