// The small-M planner: which fused kernel runs a job, with which configuration, K split and
// grid (see sm90_small_m.h), and the two runner rows' entry points, which run the plan.
#include <cuda_runtime.h>

#include <string>

#include "cuda/device.h"
#include "gemm/backends.h"
#include "gemm/sm90/sm90_small_m.h"

namespace nvfp4::detail::small_m {
namespace {

using gpu::ceil_div;

// The streaming kernel's split of K for `tiles` CTAs along N: S splits of k_split
// elements (k_split a multiple of kChunk, the last split possibly shorter). Splits == 0:
// K is too long for the kernel's shared memory at any split.
void stream_split(const Shape& sh, int dev, int64_t k, int64_t tiles, int forced, Plan& p) {
  const int sms = gpu::sm_count(dev);
  auto make = [&](int64_t s, Plan& q) {
    q.k_split = static_cast<int>(ceil_div(ceil_div(k, s), kChunk) * kChunk);
    q.splits = static_cast<int>(ceil_div(k, q.k_split));
    q.smem = stream_smem(sh, q.k_split);
  };
  // The driver's answer, or, unknown: two CTAs per SM where they fit, whole clusters only.
  auto resident = [&](const Plan& q) {
    const int fallback = (q.smem <= kStreamSmemTwoPerSm ? 2 : 1) * sms / q.splits;
    return stream_resident_clusters(sh, dev, q.splits, q.smem, fallback);
  };
  if (forced >= 1 && forced <= kMaxSplit) {
    make(forced, p);
    if (p.smem <= kStreamSmemMax) {
      p.one_wave = true;  // as asked
      p.resident = resident(p);
      p.why = "split forced by NVFP4_SM90_STREAM_SPLIT";
      return;
    }
  }
  // The most splits whose clusters are all resident at once: one wave, the most bytes in
  // flight per SM (a second wave would double the time of these one-pass kernels).
  for (int64_t s = kMaxSplit; s >= 1; --s) {
    make(s, p);
    if (p.smem > kStreamSmemMax) continue;
    p.resident = resident(p);
    p.one_wave = tiles <= p.resident;
    if (p.one_wave) {
      p.why = "the most K splits whose clusters are all resident at once";
      return;
    }
  }
  // More than a wave anyway: the fewest splits that keep two CTAs per SM, else that fit.
  p.one_wave = false;
  p.resident = 0;
  for (size_t limit : {kStreamSmemTwoPerSm, kStreamSmemMax}) {
    for (int64_t s = 1; s <= kMaxSplit; ++s) {
      make(s, p);
      if (p.smem <= limit) {
        p.why = limit == kStreamSmemTwoPerSm ? "more than one wave: the fewest K splits that keep two CTAs per SM"
                                             : "more than one wave: the fewest K splits that fit";
        return;
      }
    }
  }
  p.splits = 0;
}

// The streaming kernel's plan, or false (p.why says why not).
bool plan_stream(const GemmJob& job, const Knobs& knobs, int dev, Plan& p, nvfp4_status_t& status) {
  const Shape sh = stream_shape(job.m);
  p = Plan{};
  p.kernel = Kernel::kStream;
  p.config = sh.config;
  p.tokens = sh.tokens;
  p.rows = sh.rows;
  p.threads = sh.threads;
  p.tiles = ceil_div(job.n, sh.rows);
  if (p.tiles > 65535) {
    p.why = "N too large for the streaming kernel's grid";
    return false;
  }
  // The limit, not the size of one launch: the occupancy queries below follow each
  // launch's own size.
  if ((status = stream_prepare(sh)) != NVFP4_SUCCESS) return false;
  stream_split(sh, dev, job.k, p.tiles, knobs.stream_split, p);
  if (p.splits == 0) {
    p.why = "K too long for the streaming kernel's shared memory";
    return false;
  }
  // With 32 tokens the decoded A (64 bytes per K element) crowds shared memory: when no
  // split fits in one wave, the ring kernel was faster on the H200 (32x14336x4096: 30.7
  // against 40.4 us; 32x4096x14336: 35.5 against 38.6 us).
  if (!p.one_wave && sh.tokens >= 32) {
    p.why = "32 tokens and no split fits one wave: the ring kernel is faster there";
    return false;
  }
  // Prefetch only what L2 can keep until it is read: B's codes and scales.
  const int64_t b_bytes = job.n * job.k / 2 + job.n * job.k / 16;
  p.prefetch = knobs.prefetch && b_bytes <= gpu::l2_bytes(dev, int64_t{50} << 20) * 3 / 4;
  p.a_first = knobs.a_first;
  p.phase_trace = knobs.phase_trace;
  return true;
}

nvfp4_status_t plan_ring(const GemmJob& job, int dev, const char* why, Plan& p) {
  const Shape sh = ring_shape(job.m);
  p = Plan{};
  p.kernel = Kernel::kRing;
  p.why = why;
  p.config = sh.config;
  p.tokens = sh.tokens;
  p.rows = sh.rows;
  p.threads = sh.threads;
  p.smem = ring_smem(sh);
  if (nvfp4_status_t s = ring_prepare(sh, &p.resident); s != NVFP4_SUCCESS) return s;
  // Split K over a cluster while the grid still fits in one wave and every split keeps at
  // least two chunks: small N x K problems need the extra CTAs to reach memory bandwidth.
  const int64_t nchunks = ceil_div(job.k, kChunk);
  p.tiles = ceil_div(job.n, sh.rows);
  const int64_t wave = static_cast<int64_t>(gpu::sm_count(dev)) * p.resident;
  int nsplit = 1;
  while (nsplit < kMaxSplit && p.tiles * nsplit * 2 <= wave && nchunks >= 4 * nsplit) nsplit *= 2;
  p.splits = nsplit;
  p.k_split = static_cast<int>(ceil_div(nchunks, nsplit) * kChunk);
  p.one_wave = p.tiles * nsplit <= wave;
  if (p.tiles > 65535) return fail(NVFP4_ERROR_NOT_SUPPORTED, "gemm (sm90 small-M): N too large");
  return NVFP4_SUCCESS;
}

// The plan on device `dev`, for a job applicable() takes.
nvfp4_status_t plan_on(const GemmJob& job, const Knobs& knobs, int dev, Plan& out);

}  // namespace

bool applicable(const GemmJob& job) {
  auto aligned = [](const void* ptr, uintptr_t a) { return reinterpret_cast<uintptr_t>(ptr) % a == 0; };
  // 16-byte pieces of a row need K % 32; 4-byte pieces of a linear scale row need K % 64
  // (swizzled scales come in aligned groups of 4 whatever K is).
  const bool k_ok = job.k % 32 == 0 && (job.layout == NVFP4_SCALES_SWIZZLED || job.k % 64 == 0);
  return job.format == Format::kNvfp4 && job.m >= 1 && job.m <= kMaxM && job.n >= 1 && k_ok &&
         job.n <= int64_t{65535} * 64 && job.k <= (int64_t{1} << 30) && aligned(job.a, 16) && aligned(job.b, 16) &&
         aligned(job.sfa, 4) && aligned(job.sfb, 4);
}

nvfp4_status_t plan(const GemmJob& job, const Knobs& knobs, Plan* out) {
  *out = Plan{};
  if (!knobs.enabled) {
    out->why = "NVFP4_SM90_SMALL_M=0";
    return NVFP4_SUCCESS;
  }
  if (!applicable(job)) {
    out->why = "outside the fused kernels' shapes";
    return NVFP4_SUCCESS;
  }
  int dev = 0;
  if (cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess) return gpu::cuda_error(e, "gemm (sm90 small-M): cudaGetDevice");
  struct Memo {
    bool valid = false;
    int dev = 0;
    int64_t m = 0, n = 0, k = 0;
    Knobs knobs;
    Plan plan;
  };
  thread_local Memo memo;
  if (memo.valid && memo.dev == dev && memo.m == job.m && memo.n == job.n && memo.k == job.k && memo.knobs == knobs) {
    *out = memo.plan;
    return NVFP4_SUCCESS;
  }
  memo.valid = false;
  if (nvfp4_status_t s = plan_on(job, knobs, dev, *out); s != NVFP4_SUCCESS) return s;
  memo = Memo{true, dev, job.m, job.n, job.k, knobs, *out};
  return NVFP4_SUCCESS;
}

namespace {

nvfp4_status_t plan_on(const GemmJob& job, const Knobs& knobs, int dev, Plan& out) {
  const char* why = "M > 32";
  if (job.m <= kStreamMaxM) {
    why = "NVFP4_SM90_SMALL_M_KERNEL=ring";
    if (knobs.stream) {
      nvfp4_status_t status = NVFP4_SUCCESS;
      if (plan_stream(job, knobs, dev, out, status)) return NVFP4_SUCCESS;
      if (status != NVFP4_SUCCESS) return status;
      why = out.why;
    }
  }
  return plan_ring(job, dev, why, out);
}

}  // namespace

}  // namespace nvfp4::detail::small_m

namespace nvfp4::detail {
namespace {

// Whether the plan names `kernel`. A plan that fails (the device cannot be prepared) is
// accepted by the first row that asks, whose run reports the failure.
bool plan_names(const GemmJob& job, small_m::Kernel kernel) {
  small_m::Plan p;
  if (small_m::plan(job, small_m::read_knobs(), &p) != NVFP4_SUCCESS) {
    clear_error();
    return true;
  }
  return p.kernel == kernel;
}

// Both rows: plan (as the row's accepts did) and launch what the plan names.
nvfp4_status_t run(const GemmJob& job, nvfp4_stream_t stream) {
  const small_m::Knobs knobs = small_m::read_knobs();
  small_m::Plan p;
  if (nvfp4_status_t s = small_m::plan(job, knobs, &p); s != NVFP4_SUCCESS) return s;
  if (p.kernel == small_m::Kernel::kStream) {
    if (knobs.trace) small_m::print_plan(job, p, "");
    bool launched = false;
    if (nvfp4_status_t s = small_m::stream_launch(job, p, stream, &launched); s != NVFP4_SUCCESS || launched) return s;
    // A cluster that cannot be placed (a partitioned GPU, a shared-memory carve-out) is no
    // reason to fail: the ring kernel needs none (it drops its own split-K cluster too
    // when that cannot be placed) and gives the same result.
    int dev = 0;
    if (cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess)
      return gpu::cuda_error(e, "gemm (sm90 small-M): cudaGetDevice");
    if (nvfp4_status_t s = small_m::plan_ring(job, dev, "the streaming kernel's cluster could not be placed", p);
        s != NVFP4_SUCCESS)
      return s;
  }
  if (p.kernel != small_m::Kernel::kRing)
    return fail(NVFP4_ERROR_NOT_SUPPORTED, std::string("gemm (sm90 small-M): no fused kernel takes this job (") +
                                               p.why + ")");
  if (knobs.trace) small_m::print_plan(job, p, "");
  return small_m::ring_launch(job, p, stream);
}

}  // namespace

bool sm90_small_m_stream_accepts(const GemmJob& job) {
  return job.m <= small_m::kStreamMaxM && small_m::applicable(job) && plan_names(job, small_m::Kernel::kStream);
}
nvfp4_status_t sm90_small_m_stream_run(const GemmJob& job, nvfp4_stream_t stream) { return run(job, stream); }

bool sm90_small_m_ring_accepts(const GemmJob& job) {
  return small_m::applicable(job) && plan_names(job, small_m::Kernel::kRing);
}
nvfp4_status_t sm90_small_m_ring_run(const GemmJob& job, nvfp4_stream_t stream) { return run(job, stream); }

}  // namespace nvfp4::detail
