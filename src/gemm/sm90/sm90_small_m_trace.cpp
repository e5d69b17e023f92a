// What the small-M path prints for people tuning it: each plan that runs
// (NVFP4_SM90_TRACE=1), and the streaming kernel's per-CTA phase timestamps
// (NVFP4_SM90_STREAM_TRACE=1, which synchronizes after every launch). Both go to stderr.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "gemm/sm90/sm90_small_m.h"

namespace nvfp4::detail::small_m {

void print_plan(const GemmJob& job, const Plan& p, const char* note) {
  const char* kernel = p.kernel == Kernel::kStream ? "stream" : p.kernel == Kernel::kRing ? "ring" : "none";
  std::fprintf(stderr,
               "nvfp4 sm90 small-M: M=%lld N=%lld K=%lld -> %s kernel (%s%s%s): config %d (%d tokens, %d rows "
               "per CTA, %d threads), grid %dx%lld (K splits x N tiles), cluster %d, %d K per split, smem %zu, "
               "resident %d%s, one wave %d",
               static_cast<long long>(job.m), static_cast<long long>(job.n), static_cast<long long>(job.k), kernel,
               p.why, *note ? "; " : "", note, p.config, p.tokens, p.rows, p.threads, p.splits,
               static_cast<long long>(p.tiles), p.splits, p.k_split, p.smem, p.resident,
               p.kernel == Kernel::kStream ? " clusters" : " CTAs per SM", p.one_wave ? 1 : 0);
  if (p.kernel == Kernel::kStream) std::fprintf(stderr, ", prefetch %d, A first %d", p.prefetch ? 1 : 0, p.a_first ? 1 : 0);
  std::fprintf(stderr, "\n");
}

void print_phase_trace(const unsigned long long* dev_trace, size_t ctas, nvfp4_stream_t stream) {
  std::vector<unsigned long long> t(ctas * kTraceWords);
  if (cudaStreamSynchronize(stream) != cudaSuccess ||
      cudaMemcpy(t.data(), dev_trace, t.size() * 8, cudaMemcpyDeviceToHost) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  unsigned long long g0 = ~0ull, g0max = 0, g1min = ~0ull, g1 = 0;
  for (size_t c = 0; c < ctas; ++c) {
    g0 = std::min(g0, t[c * kTraceWords]);
    g0max = std::max(g0max, t[c * kTraceWords]);
    g1 = std::max(g1, t[c * kTraceWords + 9]);
    g1min = std::min(g1min, t[c * kTraceWords + 9]);
  }
  std::fprintf(stderr, "trace: %zu CTAs, span %.2f us, starts spread %.2f us, ends %.2f..%.2f us\n", ctas,
               (g1 - g0) * 1e-3, (g0max - g0) * 1e-3, (g1min - g0) * 1e-3, (g1 - g0) * 1e-3);
  const char* names[] = {"", "", "loads issued", "A decoded", "barrier", "chunk 0", "main loop", "cluster bar", "end"};
  for (int i = 2; i <= 8; ++i) {
    std::vector<long long> d(ctas);
    for (size_t c = 0; c < ctas; ++c) d[c] = static_cast<long long>(t[c * kTraceWords + i] - t[c * kTraceWords + 1]);
    std::sort(d.begin(), d.end());
    std::fprintf(stderr, "  %-12s cycles since entry: median %7lld  p90 %7lld  max %7lld\n", names[i], d[ctas / 2],
                 d[ctas * 9 / 10], d[ctas - 1]);
  }
}

}  // namespace nvfp4::detail::small_m
