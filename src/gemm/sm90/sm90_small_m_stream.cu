// Fused NVFP4 GEMM for M <= 32 on Hopper, streaming B through registers (runner
// sm90-small-m-stream): D[M,N] = alpha * (Â @ B̂ᵀ) + beta*C + bias.
//
// At M <= 32 the GEMM reads B (the weights, N x K) once and does 2*M flops per element, so
// the floor is the time to read B's FP4 bytes and scales (0.5625 B/element; 16x4096x4096:
// 9.4 MB, ~2.4 us at 4 TB/s). The tensor cores are nearly idle; what keeps a kernel off
// that floor is instruction issue and the number of bytes in flight. So:
//   - each thread loads exactly the 16-byte pieces of B it decodes (ld.global.nc, 16 B),
//     DEPTH chunks ahead, straight into registers: no shared-memory round trip and no
//     barrier in the main loop;
//   - A (the tokens) is decoded once per CTA, for the CTA's whole K range, into shared
//     memory before the main loop. Its loads go out first and B's only once A is here:
//     issued together, A's requests queue behind B's flood and the main loop, which needs
//     A, starts ~1 us later;
//   - 8 warps per CTA and 2 CTAs per SM; when N alone gives too few CTAs, K is split over a
//     thread-block cluster of up to 8 CTAs. Each CTA pushes its partial sums straight into
//     the shared memory of the CTA that owns those columns (DSMEM stores, no round trip),
//     one cluster barrier, then each owner adds the ranks in order: deterministic, no
//     workspace, one launch. The split count is chosen so that all clusters are resident
//     at once (a second wave would double the time of these one-pass kernels): the
//     planner's job (sm90_small_m_plan.cpp); this file holds the kernel, its
//     configurations and the launch of a plan.
//
// Mapping: warp w owns B rows n0 + 16*WM*w .. +16*WM-1 (WM m16 tiles); the mma's 16-row
// operand is B (N is large), its 8-column operand the tokens (NT n8 tiles, M <= 8*NT).
// K runs in chunks of 128: thread (g = lane/4, q = lane%4) holds, for rows g and g+8 of
// each m16 tile, elements [32q, 32q+32) of the chunk: one 16-byte load and the two block
// scales of that piece (one 2-byte load; contiguous in both scale layouts). Decoded words
// and the token fragments use the K order of sm90_small_m_common.cuh.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <string>

#include "core/scale.h"
#include "cuda/device.h"
#include "gemm/sm90/sm90_small_m.h"
#include "gemm/sm90/sm90_small_m_common.cuh"

namespace nvfp4::detail::small_m {
namespace {

namespace cg = cooperative_groups;

constexpr int kThreads = 256;  // 8 warps
constexpr int kWarps = kThreads / 32;
// K elements per chunk: kChunk (sm90_small_m.h), 4 threads x 32. K splits: at most kMaxSplit.
constexpr int kAPieces = 4;    // A's 16-byte pieces a thread has in flight in the prologue
// Shared memory a CTA may take (decoded tokens, MP x kc FP16, plus the receive buffer):
// kStreamSmemMax; two CTAs fit on one SM up to kStreamSmemTwoPerSm (sm90_small_m.h).

template <int NT_, int WM_, int DEPTH_>
struct Cfg {
  static constexpr int NT = NT_;                // n8 token tiles: M <= 8 * NT
  static constexpr int WM = WM_;                // m16 tiles of B rows per warp
  static constexpr int DEPTH = DEPTH_;          // chunks of B loaded ahead per thread (register slots)
  static constexpr int MP = 8 * NT;             // tokens, padded
  static constexpr int BN = kWarps * 16 * WM;   // B rows per CTA
  // Partial sums received from the cluster: [rank][MP][cols] fp32 with cols = ceil(BN / S),
  // at most MP * (BN + kMaxSplit) floats.
  static constexpr int kRecv = MP * (BN + kMaxSplit) * 4;
  static_assert(WM * NT * 4 + DEPTH * WM * 2 * 5 <= 96, "accumulators and loads within the register cap");
};

struct Params {
  const uint8_t* a;    // [m, k/2]
  const uint8_t* sfa;
  const uint8_t* b;    // [n, k/2]
  const uint8_t* sfb;
  int m, n, k;
  bool swizzled;
  int kc;              // K elements per split (a multiple of kChunk); split s covers [s*kc, min(k, (s+1)*kc))
  int xrow;            // bytes per decoded token row in shared memory: 2 * kc + 64
  int recv_off;        // byte offset of the receive buffer in shared memory
  bool prefetch;       // bulk-prefetch this CTA's B slice into L2 first
  bool a_first;        // decode A before issuing any B load (the default, see launch())
  Epilogue ep;
  unsigned long long* trace;  // null, or kTraceWords per CTA (NVFP4_SM90_STREAM_TRACE=1)
};

// Phase timestamps of each CTA (thread 0), for NVFP4_SM90_STREAM_TRACE=1, kTraceWords
// (sm90_small_m.h) of them: globaltimer at entry, clock64 at entry, A issued+B issued, A
// decoded, barrier passed, chunk 0 done, main loop done, cluster barrier passed, end;
// globaltimer at end; SM id. sm90_small_m_trace.cpp prints them.
__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ void trace_at(const Params& p, int i) {
  if (p.trace != nullptr && threadIdx.x == 0) {
    const int cta = blockIdx.y * gridDim.x + blockIdx.x;
    p.trace[cta * kTraceWords + i] = static_cast<unsigned long long>(clock64());
  }
}

// Streamed once: keep it out of L1.
__device__ __forceinline__ uint4 ldg_stream16(const uint8_t* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
// Scale bytes: the neighbouring bytes of a sector belong to other warps of the CTA.
__device__ __forceinline__ uint32_t ldg_u16(const uint8_t* p) {
  return __ldg(reinterpret_cast<const unsigned short*>(p));
}
__device__ __forceinline__ void prefetch_l2_bulk(const void* p, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(p), "r"(bytes) : "memory");
}
__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p));
}

__device__ __forceinline__ void sts128(uint8_t* p, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  asm volatile("st.shared.v4.u32 [%0], {%1,%2,%3,%4};\n" ::"r"(smem_u32(p)), "r"(a), "r"(b), "r"(c), "r"(d));
}
__device__ __forceinline__ uint4 lds128(const uint8_t* p) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(smem_u32(p)));
  return v;
}

__device__ __forceinline__ uint32_t word_of(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

template <class C>
__global__ void __launch_bounds__(kThreads, 2) stream_kernel(const __grid_constant__ Params p) {
  extern __shared__ __align__(128) uint8_t smem[];
  const int tid = threadIdx.x;
  const int warp = tid >> 5;
  const int lane = tid & 31;
  const int g = lane >> 2;
  const int q = lane & 3;
  const int split = blockIdx.x;
  const int nsplit = gridDim.x;
  const int n0 = blockIdx.y * C::BN;
  const int k0 = split * p.kc;
  const int klen = min(p.kc, p.k - k0);  // > 0 and a multiple of 32
  const int nck = (klen + kChunk - 1) / kChunk;
  const int64_t kbytes = p.k / 2;
  const int64_t kscales = p.k / 16;

  // The global scales are needed only at the very end, after the cluster barrier: load
  // them now so that their latency is not paid there.
  const float amax_a = __ldg(p.ep.amax_a);
  const float amax_b = __ldg(p.ep.amax_b);

  if (p.trace != nullptr && tid == 0) {
    const int cta = blockIdx.y * gridDim.x + blockIdx.x;
    p.trace[cta * kTraceWords + 0] = global_ns();
    unsigned smid;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    p.trace[cta * kTraceWords + 10] = smid;
  }
  trace_at(p, 1);
  // DSMEM may only be written once every CTA of the cluster runs: arrive now, wait (long
  // after everyone has arrived) just before the first push.
  if (nsplit > 1) asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");

  if (p.prefetch) {
    // One bulk request per row (its klen/2 bytes are contiguous) and, for swizzled scales,
    // one for the CTA's 128-row groups (their 4-column groups of 512 bytes are contiguous).
    for (int i = tid; i < C::BN; i += kThreads) {
      const int r = n0 + i;
      if (r < p.n) {
        prefetch_l2_bulk(p.b + static_cast<int64_t>(r) * kbytes + k0 / 2, static_cast<uint32_t>(klen / 2));
        if (!p.swizzled) prefetch_l2(p.sfb + static_cast<int64_t>(r) * kscales + k0 / 16);
      }
    }
    if (p.swizzled && tid < C::BN / 128) {
      const int64_t cp4 = (kscales + 3) / 4;
      const int64_t off = static_cast<int64_t>(n0 / 128 + tid) * cp4 * 512 + (k0 / 64) * 512;
      if (n0 + tid * 128 < p.n) prefetch_l2_bulk(p.sfb + off, static_cast<uint32_t>((klen + 63) / 64 * 512));
    }
  }

  // ---- B: this thread's rows, and its piece of chunk 0 of this split ----
  const uint8_t* bp[C::WM][2];
  const uint8_t* sp[C::WM][2];
  bool rok[C::WM][2];
  // Chunk ci of a row adds ci * 64 data bytes and ci * (8 scale columns) to the offsets:
  // 8 bytes in the linear layout, two 4-column groups of 512 bytes in the swizzled one.
  const int s_step = p.swizzled ? 1024 : 8;
#pragma unroll
  for (int mt = 0; mt < C::WM; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = n0 + warp * 16 * C::WM + mt * 16 + h * 8 + g;
      rok[mt][h] = r < p.n;
      const int64_t rr = rok[mt][h] ? r : 0;
      bp[mt][h] = p.b + rr * kbytes + k0 / 2 + q * 16;
      sp[mt][h] = p.sfb + scale_offset(p.swizzled, rr, k0 / 16 + 2 * q, kscales);
    }

  // Loads chunk ci of this thread's B pieces. Past K or N only the scales are zeroed:
  // the codes left in the registers are finite (every E2M1 code is), so with a zero scale
  // they decode to zeros and add nothing.
  auto load = [&](uint4 (&w)[C::WM][2], uint32_t (&s)[C::WM][2], int ci) {
    const bool kin = ci * kChunk + q * 32 < klen;
#pragma unroll
    for (int mt = 0; mt < C::WM; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        s[mt][h] = 0u;
        if (kin && rok[mt][h]) {
          w[mt][h] = ldg_stream16(bp[mt][h] + ci * 64);
          s[mt][h] = ldg_u16(sp[mt][h] + static_cast<int64_t>(ci) * s_step);
        }
      }
  };

  // ---- A: the tokens of this split, decoded into shared memory ----
  // Token row `row`, chunk ci, piece qq (elements [32qq, 32qq+32) of the chunk), word wm
  // lands at row * xrow + ci * 256 + (wm * 4 + qq) * 16: the 16 bytes thread (g, q = qq)
  // reads as the token fragments of k-steps 2wm and 2wm+1. The row pitch (2 kc + 64 bytes)
  // puts the two token rows of one 8-lane phase of a 16-byte read on disjoint banks.
  // A's loads come first in program order: they are few, and the main loop cannot start
  // before A is decoded (the scheduler may still interleave them with B's).
  // Piece i is token row i % MP, piece i / MP of the row (chunk (i / MP) / 4, quarter
  // (i / MP) % 4): MP is a power of two, so no division. Token rows are < 128, where the
  // swizzled scale offset reduces to its in-tile terms.
  static_assert((C::MP & (C::MP - 1)) == 0 && C::MP <= 128, "token rows: a power of two, one scale row tile");
  uint8_t* xdec = smem;
  const int pieces = C::MP * nck * 4;
  uint4 aw[kAPieces];
  uint32_t as[kAPieces];
  auto a_load = [&](int base) {
#pragma unroll
    for (int u = 0; u < kAPieces; ++u) {
      const int i = base + u * kThreads + tid;
      const int row = i & (C::MP - 1);
      const int kel = (i / C::MP) * 32;  // = ci * 128 + qq * 32
      aw[u] = make_uint4(0u, 0u, 0u, 0u);
      as[u] = 0u;
      if (i < pieces && row < p.m && kel < klen) {
        const int c = (k0 + kel) / 16;  // its first scale column (even)
        const int so = p.swizzled ? (c >> 2) * 512 + (row & 31) * 16 + (row >> 5) * 4 + (c & 3)
                                  : row * static_cast<int>(kscales) + c;
        aw[u] = *reinterpret_cast<const uint4*>(p.a + row * kbytes + (k0 + kel) / 2);
        as[u] = ldg_u16(p.sfa + so);
      }
    }
  };
  auto a_store = [&](int base) {
#pragma unroll
    for (int u = 0; u < kAPieces; ++u) {
      const int i = base + u * kThreads + tid;
      if (i < pieces) {
        const int row = i & (C::MP - 1);
        const int rem = i / C::MP;
        uint8_t* dst = xdec + row * p.xrow + (rem >> 2) * 256 + (rem & 3) * 16;
        uint32_t s0, s1;
        scale_pairs2(as[u], s0, s1);
#pragma unroll
        for (int wm = 0; wm < 4; ++wm) {
          uint32_t d[4];
          decode8(word_of(aw[u], wm), wm < 2 ? s0 : s1, d);
          sts128(dst + wm * 64, d[0], d[1], d[2], d[3]);
        }
      }
    }
  };
  auto a_rest = [&]() {
    for (int base = kThreads * kAPieces; base < pieces; base += kThreads * kAPieces) {
      a_load(base);
      a_store(base);
    }
  };
  uint4 bw[C::DEPTH][C::WM][2];
  uint32_t bs[C::DEPTH][C::WM][2];
  auto b_prologue = [&]() {
#pragma unroll
    for (int s = 0; s < C::DEPTH; ++s) {
#pragma unroll
      for (int mt = 0; mt < C::WM; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) bw[s][mt][h] = make_uint4(0u, 0u, 0u, 0u);
      load(bw[s], bs[s], s);
    }
  };

  if (p.a_first) {
    // A's round trip on a quiet memory system, then B: the barrier keeps the scheduler
    // from hoisting B's loads above A's decode.
    a_load(0);
    a_store(0);
    a_rest();
    trace_at(p, 2);
    trace_at(p, 3);
    __syncthreads();
    b_prologue();
    trace_at(p, 4);
  } else {
    a_load(0);
    b_prologue();
    trace_at(p, 2);
    a_store(0);
    a_rest();
    trace_at(p, 3);
    __syncthreads();
    trace_at(p, 4);
  }

  // ---- main loop: B from registers, tokens from shared memory ----
  float acc[C::WM][C::NT][4];
#pragma unroll
  for (int mt = 0; mt < C::WM; ++mt)
#pragma unroll
    for (int t = 0; t < C::NT; ++t)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[mt][t][i] = 0.0f;

  const uint8_t* xthr = xdec + g * p.xrow + q * 16;
  for (int c0 = 0; c0 < nck; c0 += C::DEPTH) {
#pragma unroll
    for (int s = 0; s < C::DEPTH; ++s) {
      const int ci = c0 + s;
      if (ci >= nck) break;
      // Slot s is refilled after its chunk is used (at the end of this step): loading into
      // the registers it came from needs no copies, and DEPTH - 1 chunks stay in flight.
      const uint4 (&w)[C::WM][2] = bw[s];
      const uint32_t (&sc2)[C::WM][2] = bs[s];
      uint32_t scl[C::WM][2][2];
#pragma unroll
      for (int mt = 0; mt < C::WM; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) scale_pairs2(sc2[mt][h], scl[mt][h][0], scl[mt][h][1]);
      const uint8_t* xc = xthr + ci * 256;
#pragma unroll
      for (int wm = 0; wm < 4; ++wm) {
        uint32_t af[C::WM][2][4];
#pragma unroll
        for (int mt = 0; mt < C::WM; ++mt) {
          uint32_t d0[4], d1[4];
          decode8(word_of(w[mt][0], wm), scl[mt][0][wm >> 1], d0);  // row g
          decode8(word_of(w[mt][1], wm), scl[mt][1][wm >> 1], d1);  // row g + 8
          af[mt][0][0] = d0[0];
          af[mt][0][1] = d1[0];
          af[mt][0][2] = d0[1];
          af[mt][0][3] = d1[1];
          af[mt][1][0] = d0[2];
          af[mt][1][1] = d1[2];
          af[mt][1][2] = d0[3];
          af[mt][1][3] = d1[3];
        }
#pragma unroll
        for (int t = 0; t < C::NT; ++t) {
          const uint4 xf = lds128(xc + t * 8 * p.xrow + wm * 64);
#pragma unroll
          for (int mt = 0; mt < C::WM; ++mt) {
            mma16816(acc[mt][t], af[mt][0][0], af[mt][0][1], af[mt][0][2], af[mt][0][3], xf.x, xf.y);
            mma16816(acc[mt][t], af[mt][1][0], af[mt][1][1], af[mt][1][2], af[mt][1][3], xf.z, xf.w);
          }
        }
      }
      load(bw[s], bs[s], ci + C::DEPTH);
      if (ci == 0) trace_at(p, 5);
    }
  }
  trace_at(p, 6);

  // ---- epilogue: push partial sums to their owners, one barrier, sum in rank order ----
  // Columns [o * cols, (o + 1) * cols) of the tile belong to rank o of the cluster; rank r's
  // partials for them land in o's buffer at [r][tok][column - o * cols]. The buffer lies
  // past xdec, so a rank that is still computing is not disturbed by early pushes.
  cg::cluster_group cluster = cg::this_cluster();
  if (nsplit > 1) asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
  const int cols = (C::BN + nsplit - 1) / nsplit;
  float* recv = reinterpret_cast<float*>(smem + p.recv_off);
#pragma unroll
  for (int mt = 0; mt < C::WM; ++mt) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int rl = warp * 16 * C::WM + mt * 16 + hh * 8 + g;
      const int owner = rl / cols;
      float* dst = (nsplit > 1 ? cluster.map_shared_rank(recv, owner) : recv) +
                   static_cast<int64_t>(split) * C::MP * cols + (rl - owner * cols);
#pragma unroll
      for (int t = 0; t < C::NT; ++t) {
        const int tok = 8 * t + 2 * q;
        dst[tok * cols] = acc[mt][t][2 * hh];
        dst[(tok + 1) * cols] = acc[mt][t][2 * hh + 1];
      }
    }
  }
  if (nsplit > 1) {
    cluster.sync();  // release the pushes, acquire everyone else's
  } else {
    __syncthreads();
  }
  trace_at(p, 7);

  const float alpha = core::gemm_alpha_of(amax_a, amax_b);
  const int c_lo = split * cols;
  const int ncol = min(C::BN, c_lo + cols) - c_lo;
  const int mrows = min(p.m, C::MP);
  for (int i = tid; i < mrows * ncol; i += kThreads) {
    const int tok = i / ncol;
    const int lc = i - tok * ncol;
    const float* src = recv + tok * cols + lc;
    float s = src[0];
    for (int r = 1; r < nsplit; ++r) s += src[r * C::MP * cols];  // rank order: deterministic
    const int n = n0 + c_lo + lc;
    if (n < p.n) store_output(p.ep, alpha, s, tok, n, p.n);
  }
  trace_at(p, 8);
  if (p.trace != nullptr && tid == 0) p.trace[(blockIdx.y * gridDim.x + blockIdx.x) * kTraceWords + 9] = global_ns();
}

// The configurations, by M: n8 token tiles, m16 B-row tiles per warp, chunks in flight.
using Cfg8 = Cfg<1, 1, 4>;
using Cfg16 = Cfg<2, 1, 4>;
using Cfg32 = Cfg<4, 1, 3>;

template <class F>
auto by_config(int config, F&& f) {
  switch (config) {
    case 0: return f(Cfg8{});
    case 1: return f(Cfg16{});
    default: return f(Cfg32{});
  }
}

template <class C>
int64_t xdec_bytes(int64_t kc) {
  return C::MP * (2 * kc + 64);
}

// One buffer for the phase timestamps, grown as needed; debug only.
unsigned long long* trace_buffer(size_t words) {
  static unsigned long long* buf = nullptr;
  static size_t have = 0;
  if (have < words) {
    if (buf != nullptr) (void)cudaFree(buf);
    buf = nullptr;
    have = 0;
    if (cudaMalloc(&buf, words * 8) == cudaSuccess) have = words;
  }
  return buf;
}

template <class C>
nvfp4_status_t launch(const GemmJob& job, const Plan& pl, nvfp4_stream_t stream, bool* launched) {
  Params p{};
  p.a = job.a;
  p.sfa = job.sfa;
  p.b = job.b;
  p.sfb = job.sfb;
  p.m = static_cast<int>(job.m);
  p.n = static_cast<int>(job.n);
  p.k = static_cast<int>(job.k);
  p.swizzled = job.layout == NVFP4_SCALES_SWIZZLED;
  p.kc = pl.k_split;
  p.xrow = 2 * pl.k_split + 64;
  p.recv_off = static_cast<int>(xdec_bytes<C>(pl.k_split));
  p.prefetch = pl.prefetch;
  p.a_first = pl.a_first;
  p.ep.amax_a = job.amax_a;
  p.ep.amax_b = job.amax_b;
  p.ep.c = job.beta != 0.0f ? job.c : nullptr;  // beta == 0: C is not read (as in CUTLASS)
  p.ep.c_dtype = job.c_dtype;
  p.ep.beta = job.beta;
  p.ep.bias = job.bias;
  p.ep.bias_dtype = job.bias_dtype;
  p.ep.d = job.d;
  p.ep.d_dtype = job.d_dtype;

  gpu::ClusterLaunch l(dim3(static_cast<unsigned>(pl.splits), static_cast<unsigned>(pl.tiles), 1), kThreads, pl.smem,
                       reinterpret_cast<cudaStream_t>(stream), static_cast<unsigned>(pl.splits));
  const size_t ctas = static_cast<size_t>(pl.splits) * static_cast<size_t>(pl.tiles);
  if (pl.phase_trace) p.trace = trace_buffer(ctas * kTraceWords);
  if (cudaLaunchKernelEx(&l.cfg, stream_kernel<C>, p) != cudaSuccess) {
    (void)cudaGetLastError();  // the caller runs the ring kernel
    return NVFP4_SUCCESS;
  }
  *launched = true;
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess)
    return gpu::cuda_error(e, "gemm (sm90 small-M stream): launch");
  if (p.trace != nullptr) print_phase_trace(p.trace, ctas, l.cfg.stream);
  return NVFP4_SUCCESS;
}

}  // namespace

Shape stream_shape(int64_t m) {
  const int config = m <= 8 ? 0 : m <= 16 ? 1 : 2;
  return by_config(config, [&](auto c) {
    using C = decltype(c);
    return Shape{config, C::MP, C::BN, kThreads};
  });
}

size_t stream_smem(const Shape& s, int64_t k_split) {
  return by_config(s.config, [&](auto c) {
    using C = decltype(c);
    return static_cast<size_t>(xdec_bytes<C>(k_split) + C::kRecv);
  });
}

nvfp4_status_t stream_prepare(const Shape& s) {
  return by_config(s.config, [](auto c) {
    return gpu::allow_dynamic_smem(stream_kernel<decltype(c)>, static_cast<int>(kStreamSmemMax));
  });
}

int stream_resident_clusters(const Shape& s, int dev, int splits, size_t smem, int fallback) {
  return by_config(s.config, [&](auto c) {
    return gpu::resident_clusters(stream_kernel<decltype(c)>, dev, kThreads, splits, smem, fallback);
  });
}

nvfp4_status_t stream_launch(const GemmJob& job, const Plan& p, nvfp4_stream_t stream, bool* launched) {
  *launched = false;
  return by_config(p.config, [&](auto c) { return launch<decltype(c)>(job, p, stream, launched); });
}

}  // namespace nvfp4::detail::small_m
