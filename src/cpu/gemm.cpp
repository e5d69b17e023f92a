// CPU reference GEMM: D = alpha * (Â @ B̂ᵀ) + beta * C + bias, float64 accumulation.
//
// Every output element is the float64 sum of its K products taken in order k = 0, 1, ...,
// K-1, starting from 0.0 — the plain triple loop's summation order. The products of two
// decoded values (E2M1 x E4M3 or E2M1 x E8M0: at most 6 significant bits each) are exact
// in float64, so a fused multiply-add rounds exactly as the multiply-then-add of the
// plain loop, and the blocking below changes where the running sums live (registers, a
// per-thread tile buffer) but never the order of the additions: the result is the plain
// loop's, bit for bit, on any number of threads.
//
// What makes it fast: both operands are decoded once (in parallel) into float64 panels,
// K-major inside a panel ([K][MR] for A, [K][NR] for B) so that the inner kernel reads
// both contiguously; the output is cut into MC x NC blocks that threads take from a shared
// counter; inside a block, K runs in KC slices so that a B micro-panel stays in L1 and the
// block's A panels in L2 while an MR x NR register tile of sums is updated. The kernel is
// chosen at run time for the CPU (AVX-512, AVX2+FMA, or portable C++).
#include <algorithm>
#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <sched.h>
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define NVFP4_CPU_X86_KERNELS 1
#endif

#include "core/common.h"
#include "core/e2m1.h"
#include "core/e4m3.h"
#include "core/mx.h"
#include "core/scale.h"
#include "core/swizzle.h"
#include "cpu/io.h"
#include "internal.h"

namespace nvfp4::detail {
namespace {

constexpr int64_t kKc = 192;  // K slice: a 24-wide B micro-panel of 192 doubles is 36 KiB (L1)
constexpr int64_t kMaxWidth = 24;  // the widest register tile side (AVX-512: NR = 24)

using cpu::load;
using cpu::store;

// Threads available to this process (its CPU affinity, not the machine's core count).
int worker_count() {
#if defined(__linux__)
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
#endif
  const unsigned n = std::thread::hardware_concurrency();
  return n > 0 ? static_cast<int>(n) : 1;
}

// Runs body(i, worker) for i in [0, count) on up to `threads` threads, worker in
// [0, threads) naming the thread (the caller is worker 0). Items are taken from a shared
// counter, so the work completes even if fewer threads could be started; body must not throw.
template <typename F>
void parallel_for(int64_t count, int threads, const F& body) {
  std::atomic<int64_t> next{0};
  auto work = [&](int worker) {
    for (int64_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < count;) body(i, worker);
  };
  const int extra = static_cast<int>(std::min<int64_t>(threads, count)) - 1;
  std::vector<std::thread> pool;
  if (extra > 0) {
    pool.reserve(static_cast<size_t>(extra));
    for (int t = 1; t <= extra; ++t) {
      try {
        pool.emplace_back(work, t);
      } catch (...) {
        break;  // no more threads to be had: the ones running (and this one) finish the work
      }
    }
  }
  work(0);
  for (auto& t : pool) t.join();
}

// The register tile and block sizes of one kernel.
struct Shape {
  int64_t mr, nr, mc, nc;
};

// kernel(kc, a, b, c, ldc): c[MR x NR] (row stride ldc) += a-panel [kc][MR] x b-panel [kc][NR],
// each output summed in k order.
using Kernel = void (*)(int64_t, const double*, const double*, double*, int64_t);

template <int MR, int NR>
void kernel_portable(int64_t kc, const double* a, const double* b, double* c, int64_t ldc) {
  double acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = c[i * ldc + j];
  for (int64_t k = 0; k < kc; ++k, a += MR, b += NR)
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j) acc[i][j] += a[i] * b[j];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) c[i * ldc + j] = acc[i][j];
}

#if defined(NVFP4_CPU_X86_KERNELS)
// 8 x 24: 24 accumulators, 3 B vectors and a broadcast in the 32 zmm registers.
__attribute__((target("avx512f"))) void kernel_avx512(int64_t kc, const double* a, const double* b, double* c,
                                                      int64_t ldc) {
  __m512d acc[8][3];
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 3; ++j) acc[i][j] = _mm512_loadu_pd(c + i * ldc + 8 * j);
  for (int64_t k = 0; k < kc; ++k, a += 8, b += 24) {
    const __m512d b0 = _mm512_loadu_pd(b), b1 = _mm512_loadu_pd(b + 8), b2 = _mm512_loadu_pd(b + 16);
    for (int i = 0; i < 8; ++i) {
      const __m512d ai = _mm512_set1_pd(a[i]);
      acc[i][0] = _mm512_fmadd_pd(ai, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_pd(ai, b1, acc[i][1]);
      acc[i][2] = _mm512_fmadd_pd(ai, b2, acc[i][2]);
    }
  }
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 3; ++j) _mm512_storeu_pd(c + i * ldc + 8 * j, acc[i][j]);
}

// 6 x 8: 12 accumulators, 2 B vectors and a broadcast in the 16 ymm registers.
__attribute__((target("avx2,fma"))) void kernel_avx2(int64_t kc, const double* a, const double* b, double* c,
                                                     int64_t ldc) {
  __m256d acc[6][2];
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 2; ++j) acc[i][j] = _mm256_loadu_pd(c + i * ldc + 4 * j);
  for (int64_t k = 0; k < kc; ++k, a += 6, b += 8) {
    const __m256d b0 = _mm256_loadu_pd(b), b1 = _mm256_loadu_pd(b + 4);
    for (int i = 0; i < 6; ++i) {
      const __m256d ai = _mm256_broadcast_sd(a + i);
      acc[i][0] = _mm256_fmadd_pd(ai, b0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_pd(ai, b1, acc[i][1]);
    }
  }
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 2; ++j) _mm256_storeu_pd(c + i * ldc + 4 * j, acc[i][j]);
}
#endif

void pick_kernel(Kernel* kernel, Shape* shape) {
#if defined(NVFP4_CPU_X86_KERNELS)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) {
    *kernel = &kernel_avx512;
    *shape = {8, 24, 96, 240};
    return;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    *kernel = &kernel_avx2;
    *shape = {6, 8, 96, 240};
    return;
  }
#endif
  *kernel = &kernel_portable<4, 8>;
  *shape = {4, 8, 96, 240};
}

// Decoded operand in float64 panels of `width` rows: panel p holds rows [p*width, p*width+width)
// as [K][width] (rows past the operand are zero). Values exclude the per-tensor scale.
struct Panels {
  std::unique_ptr<double[]> v;  // not zero-filled: every element is written by the decode
  int64_t width = 0, k = 0;
  const double* panel(int64_t p) const { return v.get() + p * k * width; }
};

Panels decode_panels(const GemmJob& job, const uint8_t* data, const uint8_t* scales, int64_t rows, int64_t width,
                     int threads) {
  const int64_t K = job.k;
  const bool mx = job.format == Format::kMxfp4;
  const int64_t block = mx ? 32 : 16;
  const int64_t nb = K / block;  // scale columns (K is a multiple of the block: validated)
  const bool swz = job.layout == NVFP4_SCALES_SWIZZLED;
  Panels p;
  p.width = width;
  p.k = K;
  const int64_t count = (rows + width - 1) / width;
  p.v.reset(new double[static_cast<size_t>(count * K * width)]);
  float e2m1[16];
  for (uint32_t c = 0; c < 16; ++c) e2m1[c] = core::e2m1_decode(c);
  parallel_for(count, threads, [&](int64_t q, int) {
    double* out = p.v.get() + q * K * width;
    const int64_t r0 = q * width, nr = std::min(width, rows - r0);
    float sc[kMaxWidth];
    // Block by block, and inside a block column by column over the panel's rows, so that the
    // stores run along the panel ([K][width]) rather than a row's stride apart.
    for (int64_t j = 0; j < nb; ++j) {
      for (int64_t i = 0; i < nr; ++i) {
        const int64_t r = r0 + i;
        const uint8_t sb = scales[swz ? core::swizzle_offset(r, j, nb) : r * nb + j];
        sc[i] = mx ? core::e8m0_decode(sb) : core::e4m3_decode(sb);
      }
      for (int64_t c = j * block; c < (j + 1) * block; ++c) {
        const uint8_t* col = data + r0 * (K / 2) + c / 2;
        const int shift = (c & 1) ? 4 : 0;
        double* dst = out + c * width;
        // the float product, as the other backends see it (MXFP4 magnitudes >= 2^128 become inf)
        for (int64_t i = 0; i < nr; ++i) dst[i] = e2m1[(col[i * (K / 2)] >> shift) & 0xf] * sc[i];
        for (int64_t i = nr; i < width; ++i) dst[i] = 0.0;  // rows past the operand (the last panel)
      }
    }
  });
  return p;
}

}  // namespace

nvfp4_status_t cpu_gemm(const GemmJob& job) {
  const int64_t M = job.m, N = job.n, K = job.k;
  Kernel kernel = nullptr;
  Shape s{};
  pick_kernel(&kernel, &s);
  // Starting threads costs tens of microseconds: a problem this small is done sooner on
  // the calling thread alone (the sums are the same on any number of threads).
  const double macs = static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K);
  const int threads = macs < 4.0 * 1024 * 1024 ? 1 : worker_count();
  const Panels a = decode_panels(job, job.a, job.sfa, M, s.mr, threads);
  const Panels b = decode_panels(job, job.b, job.sfb, N, s.nr, threads);
  // The same fp32 alpha every backend applies (MXFP4 has no per-tensor scale).
  const double alpha = static_cast<double>(core::gemm_alpha(job.amax_a, job.amax_b));

  const int64_t mblocks = (M + s.mc - 1) / s.mc, nblocks = (N + s.nc - 1) / s.nc;
  const int64_t blocks = mblocks * nblocks;
  const int used = static_cast<int>(std::min<int64_t>(threads, blocks));
  // One tile of running sums per worker, allocated here so that workers never allocate.
  std::vector<std::vector<double>> tiles(static_cast<size_t>(std::max(used, 1)),
                                         std::vector<double>(static_cast<size_t>(s.mc * s.nc)));
  parallel_for(blocks, used, [&](int64_t blk, int worker) {
    double* acc = tiles[static_cast<size_t>(worker)].data();
    const int64_t i0 = (blk / nblocks) * s.mc, j0 = (blk % nblocks) * s.nc;
    const int64_t mi = std::min(s.mc, M - i0), nj = std::min(s.nc, N - j0);
    const int64_t mp = (mi + s.mr - 1) / s.mr, np = (nj + s.nr - 1) / s.nr;  // panels, the last maybe partial
    const int64_t ldc = s.nc;
    std::fill_n(acc, s.mc * s.nc, 0.0);
    for (int64_t k0 = 0; k0 < K; k0 += kKc) {
      const int64_t kc = std::min(kKc, K - k0);
      for (int64_t jp = 0; jp < np; ++jp) {
        const double* bp = b.panel(j0 / s.nr + jp) + k0 * s.nr;
        for (int64_t ip = 0; ip < mp; ++ip)
          kernel(kc, a.panel(i0 / s.mr + ip) + k0 * s.mr, bp, acc + ip * s.mr * ldc + jp * s.nr, ldc);
      }
    }
    for (int64_t i = 0; i < mi; ++i)
      for (int64_t j = 0; j < nj; ++j) {
        const int64_t gi = i0 + i, gj = j0 + j;
        double d = alpha * acc[i * ldc + j];
        if (job.c && job.beta != 0.0f) d += static_cast<double>(job.beta) * load(job.c, job.c_dtype, gi * N + gj);
        if (job.bias) d += load(job.bias, job.bias_dtype, gj);
        store(job.d, job.d_dtype, gi * N + gj, static_cast<float>(d));
      }
  });
  return NVFP4_SUCCESS;
}

}  // namespace nvfp4::detail
