// The cuDNN runner's graphs (cudnn_graph.cpp: definition, build, cache; cudnn_autotune.cpp:
// the plan choice) as the runner (cudnn_gemm.cpp) uses them. Includes cudnn_frontend.h:
// only these three files compile it (it is large and slow to compile).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <cudnn_frontend.h>

#include "internal.h"

namespace nvfp4::detail::cudnn {

namespace fe = cudnn_frontend;

// A failure with the status it maps to; thrown inside the cuDNN runner only, and turned
// into fail(status, message) at each entry point (guarded).
struct Failure {
  nvfp4_status_t status;
  std::string message;
};

[[noreturn]] inline void raise(nvfp4_status_t s, const std::string& m) { throw Failure{s, m}; }

inline void check_fe(fe::error_t e, const char* step, nvfp4_status_t status) {
  if (e.is_bad()) raise(status, std::string("cudnn: ") + step + ": " + e.get_message());
}

inline void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) raise(NVFP4_ERROR_CUDA, std::string("cudnn: ") + what + ": " + cudaGetErrorString(e));
}

inline std::string cc_str(int cc) { return std::to_string(cc / 10) + "." + std::to_string(cc % 10); }

// Entry points catch every failure here and return it as a status with the message.
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

// The graph of one problem, defined but not built (no handle, no GPU needed).
std::shared_ptr<Entry> define_graph(const Key& key);

// The graph of `key`, built on first use and kept in a bounded LRU shared by all threads.
// A fused graph that cuDNN refuses (NOT_SUPPORTED) gives null, and is remembered as
// refused; other failures throw. NVFP4_CUDNN_DEBUG=1 logs each build and refusal.
std::shared_ptr<Entry> cached_graph(const Key& key, cudnnHandle_t handle);

// NVFP4_CUDNN_DEBUG=1: the plan chosen for a graph and the timings behind it.
void log_choice(const Key& key, const Entry& e);

// cudnn_autotune.cpp: the plans a graph's first call times (NVFP4_CUDNN_AUTOTUNE), and
// the timing itself.
int autotune_candidates();
void choose_plan(Entry& e, cudnnHandle_t handle, std::unordered_map<TensorPtr, void*>& pack, void* ws,
                 cudaStream_t stream);

}  // namespace nvfp4::detail::cudnn
