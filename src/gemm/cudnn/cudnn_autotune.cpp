// Which cuDNN plan runs a graph. cuDNN's heuristics rank the plans of a graph, and their
// first choice is not always the fastest (H100, cuDNN 9.19, the Hopper BF16 graph with the
// fused epilogue at 8192^3: the first choice ran at 0.69 of cuBLAS, the second at 0.97;
// bench/bench_cudnn_plans.py times every plan). So by default the first
// NVFP4_CUDNN_AUTOTUNE (default 8) plans that build are timed on the first call of each
// graph, on the caller's operands and stream, and the fastest is kept with the graph
// (cudnn_gemm.cpp says why that is safe).
#include <cstdlib>
#include <string>

#include "gemm/cudnn/cudnn_graph.h"
#include "settings.h"

namespace nvfp4::detail::cudnn {

// NVFP4_CUDNN_AUTOTUNE: plans timed on the first call of each graph (0: none, the
// heuristic's first choice). Read on every call; it is part of the graph key.
int autotune_candidates() {
  const char* v = setting("NVFP4_CUDNN_AUTOTUNE");
  if (v == nullptr || *v == 0) return 8;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (end == v || *end != 0 || n < 0 || n > 64)
    raise(NVFP4_ERROR_INVALID_ARGUMENT,
          std::string("NVFP4_CUDNN_AUTOTUNE: must be an integer from 0 (the heuristic's first choice) to 64 "
                      "(plans timed on the first call), got '") + v + "'");
  return static_cast<int>(n);
}

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

}  // namespace nvfp4::detail::cudnn
