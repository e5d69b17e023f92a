// The fused small-M NVFP4 GEMMs for Hopper: FP4 bytes and E4M3 scales go from global memory
// to the SM and are decoded in registers right before the tensor-core instruction, so no
// BF16/FP16 copy of either operand is ever written. Two kernels, two runner rows:
//
//   sm90-small-m-stream  (sm90_small_m_stream.cu) M <= 32: B streamed through registers,
//                        split-K over a cluster sized so that the grid is one wave
//   sm90-small-m-ring    (sm90_small_m_ring.cu)   M <= 128: B through a 4-stage cp.async
//                        ring in shared memory, split-K over a cluster while it fits a wave
//
// Which of them runs, with which configuration, split and grid, is one Plan, made by
// plan() (sm90_small_m_plan.cpp) from the job, the device and the environment knobs
// (sm90_small_m_knobs.cpp); each row accepts a job exactly when the plan names its kernel,
// and runs the plan (the rows' entry points are in gemm/backends.h). NVFP4_SM90_TRACE=1
// prints every plan that runs (sm90_small_m_trace.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "internal.h"

namespace nvfp4::detail::small_m {

constexpr int64_t kMaxM = 128;       // the ring kernel's limit; above it the two-step path wins
constexpr int64_t kStreamMaxM = 32;  // the streaming kernel's limit
constexpr int kMaxSplit = 8;         // portable cluster size: K splits at most
constexpr int kChunk = 128;          // K elements per pipeline step of either kernel

// ---- environment knobs (benchmarks), read once per call: sm90_small_m_knobs.cpp ----
struct Knobs {
  bool enabled = true;     // NVFP4_SM90_SMALL_M=0: neither kernel (the two-step path runs)
  bool stream = true;      // NVFP4_SM90_SMALL_M_KERNEL=ring: never the streaming kernel
  int stream_split = 0;    // NVFP4_SM90_STREAM_SPLIT=n (1..8): n splits; 0: planned
  bool prefetch = false;   // NVFP4_SM90_STREAM_PREFETCH=1: L2 bulk prefetch of B (if it fits L2)
  bool a_first = true;     // NVFP4_SM90_STREAM_AFIRST=0: B's loads issued along with A's
  bool trace = false;      // NVFP4_SM90_TRACE=1: print each plan to stderr
  bool phase_trace = false;  // NVFP4_SM90_STREAM_TRACE=1: per-CTA phase timestamps (synchronizes)
  bool operator==(const Knobs& o) const {
    return enabled == o.enabled && stream == o.stream && stream_split == o.stream_split && prefetch == o.prefetch &&
           a_first == o.a_first && trace == o.trace && phase_trace == o.phase_trace;
  }
};
Knobs read_knobs();

// ---- the plan ----
enum class Kernel : uint8_t { kNone, kStream, kRing };

struct Plan {
  Kernel kernel = Kernel::kNone;
  const char* why = "";      // the rule that chose the kernel and split, for the trace
  int config = 0;            // the kernel's template configuration (by M), see its .cu file
  int tokens = 0;            // M padded to the configuration's n8 token tiles
  int rows = 0;              // B rows (of N) per CTA
  int threads = 0;
  int64_t tiles = 0;         // CTAs along N: grid.y
  int splits = 1;            // CTAs along K, one cluster: grid.x
  int k_split = 0;           // K elements per split (a multiple of kChunk)
  size_t smem = 0;           // dynamic shared memory per CTA
  int resident = 0;          // stream: clusters of `splits` CTAs resident at once; ring: CTAs per SM
  bool one_wave = false;     // every CTA of the grid resident at once
  bool prefetch = false;     // stream only
  bool a_first = true;       // stream only
  bool phase_trace = false;  // stream only
};

// The static conditions of the fused kernels: 1 <= M <= kMaxM, K % 32 == 0 (K % 64 with
// linear scales), data pointers 16-byte aligned, scale pointers 4-byte aligned.
bool applicable(const GemmJob& job);

// The kernel, configuration, split and grid for `job` on the current device. A job the
// fused kernels cannot take gets Kernel::kNone. Fails only where the device cannot be
// prepared (the shared-memory opt-in). Dispatch asks for the plan of one call up to three
// times (each row's accepts, then run), so the last plan of each thread is kept, keyed by
// everything it depends on: device, M, N, K and the knobs.
nvfp4_status_t plan(const GemmJob& job, const Knobs& knobs, Plan* out);

// ---- the two kernels (their .cu files) ----
// What the planner needs of a configuration: the one for M, its token and row tiles, its
// threads and, for a K split of k_split elements, its shared memory.
struct Shape {
  int config, tokens, rows, threads;
};
Shape stream_shape(int64_t m);
size_t stream_smem(const Shape& s, int64_t k_split);
constexpr size_t kStreamSmemMax = 200 * 1024;      // a CTA may take this much
constexpr size_t kStreamSmemTwoPerSm = 112 * 1024;  // at most this, two CTAs fit on one SM
// Lets the configuration's kernel take kStreamSmemMax bytes (once per device).
nvfp4_status_t stream_prepare(const Shape& s);
// Clusters of `splits` CTAs with `smem` bytes each that the current device holds at once;
// `fallback` when the driver cannot say.
int stream_resident_clusters(const Shape& s, int dev, int splits, size_t smem, int fallback);
// Launches the plan. A cluster that cannot be placed (a partitioned GPU, a shared-memory
// carve-out) leaves *launched false with no error: the caller then runs the ring kernel.
nvfp4_status_t stream_launch(const GemmJob& job, const Plan& p, nvfp4_stream_t stream, bool* launched);

Shape ring_shape(int64_t m);
size_t ring_smem(const Shape& s);
// Lets the configuration's kernel take its shared memory and returns the CTAs that fit on
// one SM (1 when the driver cannot say).
nvfp4_status_t ring_prepare(const Shape& s, int* resident);
nvfp4_status_t ring_launch(const GemmJob& job, const Plan& p, nvfp4_stream_t stream);

// ---- the trace: sm90_small_m_trace.cpp ----
void print_plan(const GemmJob& job, const Plan& p, const char* note);
// Debug only (synchronizes): per-phase cycles of the streaming kernel's CTAs, from the
// kTraceWords timestamps each CTA wrote into `dev_trace`.
constexpr int kTraceWords = 11;
void print_phase_trace(const unsigned long long* dev_trace, size_t ctas, nvfp4_stream_t stream);

}  // namespace nvfp4::detail::small_m
