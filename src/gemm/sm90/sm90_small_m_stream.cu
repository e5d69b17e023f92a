// Fused NVFP4 GEMM for M <= 32 on Hopper, streaming B through registers:
// D[M,N] = alpha * (Â @ B̂ᵀ) + beta*C + bias.
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
//     at once (a second wave would double the time of these one-pass kernels).
//
// Mapping: warp w owns B rows n0 + 16*WM*w .. +16*WM-1 (WM m16 tiles); the mma's 16-row
// operand is B (N is large), its 8-column operand the tokens (NT n8 tiles, M <= 8*NT).
// K runs in chunks of 128: thread (g = lane/4, q = lane%4) holds, for rows g and g+8 of
// each m16 tile, elements [32q, 32q+32) of the chunk: one 16-byte load and the two block
// scales of that piece (one 2-byte load; contiguous in both scale layouts). Decoded words
// and the token fragments use the K order of sm90_small_m_common.cuh.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "core/scale.h"
#include "gemm/sm90/sm90_small_m.h"
#include "gemm/sm90/sm90_small_m_common.cuh"

namespace nvfp4::detail {
namespace {

namespace cg = cooperative_groups;
using namespace small_m;

constexpr int kThreads = 256;  // 8 warps
constexpr int kWarps = kThreads / 32;
constexpr int kChunk = 128;    // K elements per chunk: 4 threads x 32
constexpr int kMaxSplit = 8;   // portable cluster size
constexpr int kAPieces = 4;    // A's 16-byte pieces a thread has in flight in the prologue
// Shared memory a CTA may take: decoded tokens (MP x kc FP16) plus the receive buffer.
constexpr int kSmemMax = 200 * 1024;
constexpr int kSmemTwoPerSm = 112 * 1024;  // at most this, two CTAs fit on one SM

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

// Phase timestamps of each CTA (thread 0), for NVFP4_SM90_STREAM_TRACE=1:
// globaltimer at entry, clock64 at entry, A issued+B issued, A decoded, barrier passed,
// chunk 0 done, main loop done, cluster barrier passed, end; globaltimer at end; SM id.
constexpr int kTraceWords = 11;
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

  const float alpha = core::global_decode_scale(amax_a) * core::global_decode_scale(amax_b);
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

nvfp4_status_t cuda_fail(cudaError_t e, const std::string& what) {
  return gpu::cuda_error(e, "gemm (sm90 small-M stream): " + what);
}

constexpr int kMaxDevices = gpu::kMaxDevices;
using gpu::sm_count;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Split plan: S splits of kc elements, tiles x S CTAs in a (S, tiles) grid.
struct Split {
  int s = 1;
  int kc = 0;
  size_t smem = 0;
  bool one_wave = false;  // every cluster of the grid resident at once
};

template <class C>
int64_t xdec_bytes(int64_t kc) {
  return C::MP * (2 * kc + 64);
}
template <class C>
size_t smem_for(int64_t kc) {
  return static_cast<size_t>(xdec_bytes<C>(kc) + C::kRecv);
}

// Clusters of `s` CTAs with `smem` bytes each that the device holds at once, cached: the
// query goes through the driver, and a handful of (s, smem) pairs cover all shapes.
template <class C>
int max_clusters(int dev, int s, size_t smem, int sms) {
  struct Entry {
    int dev, s;
    size_t smem;
    int value;
  };
  static std::mutex mu;
  static std::vector<Entry> cache;
  {
    std::lock_guard<std::mutex> lock(mu);
    for (const Entry& e : cache)
      if (e.dev == dev && e.s == s && e.smem == smem) return e.value;
  }
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(s), static_cast<unsigned>(sms), 1);
  cfg.blockDim = dim3(kThreads, 1, 1);
  cfg.dynamicSmemBytes = smem;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(s);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  int n = 0;
  if (cudaOccupancyMaxActiveClusters(&n, stream_kernel<C>, &cfg) != cudaSuccess || n <= 0) {
    (void)cudaGetLastError();
    // Unknown: assume two CTAs per SM and whole clusters only.
    n = (smem <= static_cast<size_t>(kSmemTwoPerSm) ? 2 : 1) * sms / s;
  }
  std::lock_guard<std::mutex> lock(mu);
  cache.push_back({dev, s, smem, n});
  return n;
}

// Benchmark knobs, read on each call: NVFP4_SM90_STREAM_SPLIT=n forces n splits,
// NVFP4_SM90_STREAM_PREFETCH=0|1 forces the L2 prefetch off or on, NVFP4_SM90_STREAM_DEBUG=1
// prints each plan to stderr.
int env_int(const char* name, int dflt) {
  const char* v = std::getenv(name);
  return v != nullptr && v[0] != '\0' ? std::atoi(v) : dflt;
}

template <class C>
Split plan_split(int dev, int64_t k, int64_t tiles, int sms) {
  auto make = [&](int64_t s) {
    Split sp;
    sp.kc = static_cast<int>(ceil_div(ceil_div(k, s), kChunk) * kChunk);
    sp.s = static_cast<int>(ceil_div(k, sp.kc));
    sp.smem = smem_for<C>(sp.kc);
    return sp;
  };
  if (const int forced = env_int("NVFP4_SM90_STREAM_SPLIT", 0); forced >= 1 && forced <= kMaxSplit) {
    Split sp = make(forced);
    sp.one_wave = true;  // as asked
    if (sp.smem <= static_cast<size_t>(kSmemMax)) return sp;
  }
  // The most splits whose clusters are all resident at once: one wave, the most bytes in
  // flight per SM.
  for (int64_t s = kMaxSplit; s >= 1; --s) {
    Split sp = make(s);
    if (sp.smem > static_cast<size_t>(kSmemMax)) continue;
    sp.one_wave = tiles <= max_clusters<C>(dev, sp.s, sp.smem, sms);
    if (sp.one_wave) return sp;
  }
  // More than a wave anyway: the fewest splits that keep two CTAs per SM, else that fit.
  for (int64_t s = 1; s <= kMaxSplit; ++s) {
    const Split sp = make(s);
    if (sp.smem <= static_cast<size_t>(kSmemTwoPerSm)) return sp;
  }
  for (int64_t s = 1; s <= kMaxSplit; ++s) {
    const Split sp = make(s);
    if (sp.smem <= static_cast<size_t>(kSmemMax)) return sp;
  }
  return Split{0, 0, 0};  // K too long for this kernel
}

int64_t l2_bytes(int dev) {
  static std::atomic<int64_t> cache[kMaxDevices];
  if (dev >= 0 && dev < kMaxDevices) {
    if (int64_t v = cache[dev].load(std::memory_order_relaxed); v > 0) return v;
  }
  int v = 0;
  if (cudaDeviceGetAttribute(&v, cudaDevAttrL2CacheSize, dev) != cudaSuccess || v <= 0) {
    (void)cudaGetLastError();
    v = 50 << 20;
  }
  if (dev >= 0 && dev < kMaxDevices) cache[dev].store(v, std::memory_order_relaxed);
  return v;
}

// Debug only (synchronizes): per-phase cycles since each CTA's entry, median / max over
// CTAs, and the spread of start and end times across the GPU.
void print_trace(const unsigned long long* dev_trace, size_t ctas, cudaStream_t stream) {
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

template <class C>
nvfp4_status_t launch(const GemmJob& job, nvfp4_stream_t stream, bool* launched) {
  static std::atomic<bool> prepared[kMaxDevices];
  *launched = false;
  int dev = 0;
  if (cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess) return cuda_fail(e, "cudaGetDevice");
  const int sms = sm_count(dev);
  const int64_t tiles = ceil_div(job.n, C::BN);
  if (tiles > 65535) return NVFP4_SUCCESS;
  if (dev >= kMaxDevices || !prepared[dev].load(std::memory_order_acquire)) {
    // The limit, not the size of one launch: occupancy follows each launch's own size.
    if (cudaError_t e = cudaFuncSetAttribute(stream_kernel<C>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemMax);
        e != cudaSuccess)
      return cuda_fail(e, "cudaFuncSetAttribute(" + std::to_string(kSmemMax) + " bytes of shared memory)");
    if (dev < kMaxDevices) prepared[dev].store(true, std::memory_order_release);
  }
  const Split sp = plan_split<C>(dev, job.k, tiles, sms);
  if (sp.s == 0) return NVFP4_SUCCESS;
  // With 32 tokens the decoded A (64 bytes per K element) crowds shared memory: when no
  // split fits in one wave, the ring kernel was faster on the H200 (32x14336x4096: 30.7
  // against 40.4 us; 32x4096x14336: 35.5 against 38.6 us).
  if (!sp.one_wave && C::NT >= 4) return NVFP4_SUCCESS;
  // B (codes and scales) small enough to stay in L2 until it is read.
  const int64_t b_bytes = job.n * job.k / 2 + job.n * job.k / 16;
  // Off unless asked: on the H200 it gained nothing at 16x4096x4096 and cost 17% at
  // 16x14336x4096 (the loads it races against are already all in flight).
  const bool prefetch = env_int("NVFP4_SM90_STREAM_PREFETCH", 0) != 0 && b_bytes <= l2_bytes(dev) * 3 / 4;
  if (env_int("NVFP4_SM90_STREAM_DEBUG", 0) != 0)
    std::fprintf(stderr, "nvfp4 sm90 stream: M=%lld N=%lld K=%lld MP=%d BN=%d tiles=%lld splits=%d kc=%d smem=%zu "
                 "prefetch=%d max_clusters=%d\n", static_cast<long long>(job.m), static_cast<long long>(job.n),
                 static_cast<long long>(job.k), C::MP, C::BN, static_cast<long long>(tiles), sp.s, sp.kc, sp.smem,
                 prefetch ? 1 : 0, max_clusters<C>(dev, sp.s, sp.smem, sms));

  Params p{};
  p.a = job.a;
  p.sfa = job.sfa;
  p.b = job.b;
  p.sfb = job.sfb;
  p.m = static_cast<int>(job.m);
  p.n = static_cast<int>(job.n);
  p.k = static_cast<int>(job.k);
  p.swizzled = job.layout == NVFP4_SCALES_SWIZZLED;
  p.kc = sp.kc;
  p.xrow = 2 * sp.kc + 64;
  p.recv_off = static_cast<int>(xdec_bytes<C>(sp.kc));
  p.prefetch = prefetch;
  // A first, then B: on the H200 16x4096x4096 went from 11.0 to 10.0 us (A decoded at 1.8
  // instead of 2.1-3.2 us after entry), 32x4096x4096 from 14.5 to 13.6, the N or K = 14336
  // shapes by 2-4%; only the many-wave vocabulary shape lost 1%.
  p.a_first = env_int("NVFP4_SM90_STREAM_AFIRST", 1) != 0;
  p.ep.amax_a = job.amax_a;
  p.ep.amax_b = job.amax_b;
  p.ep.c = job.beta != 0.0f ? job.c : nullptr;  // beta == 0: C is not read (as in CUTLASS)
  p.ep.c_dtype = job.c_dtype;
  p.ep.beta = job.beta;
  p.ep.bias = job.bias;
  p.ep.bias_dtype = job.bias_dtype;
  p.ep.d = job.d;
  p.ep.d_dtype = job.d_dtype;

  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(sp.s), static_cast<unsigned>(tiles), 1);
  cfg.blockDim = dim3(kThreads, 1, 1);
  cfg.dynamicSmemBytes = sp.smem;
  cfg.stream = reinterpret_cast<cudaStream_t>(stream);
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(sp.s);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  const bool trace = env_int("NVFP4_SM90_STREAM_TRACE", 0) != 0;
  static unsigned long long* trace_buf = nullptr;
  static size_t trace_words = 0;
  const size_t ctas = static_cast<size_t>(sp.s) * static_cast<size_t>(tiles);
  if (trace) {
    if (trace_words < ctas * kTraceWords) {
      if (trace_buf != nullptr) (void)cudaFree(trace_buf);
      trace_buf = nullptr;
      trace_words = 0;
      if (cudaMalloc(&trace_buf, ctas * kTraceWords * 8) == cudaSuccess) trace_words = ctas * kTraceWords;
    }
    p.trace = trace_buf;
  }
  if (cudaLaunchKernelEx(&cfg, stream_kernel<C>, p) != cudaSuccess) {
    // A cluster that cannot be placed (a partitioned GPU, a shared-memory carve-out) is no
    // reason to fail: the caller runs the ring kernel, which needs no cluster.
    (void)cudaGetLastError();
    return NVFP4_SUCCESS;
  }
  *launched = true;
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return cuda_fail(e, "launch");
  if (trace && p.trace != nullptr) print_trace(p.trace, ctas, cfg.stream);
  return NVFP4_SUCCESS;
}

}  // namespace

nvfp4_status_t sm90_small_m_stream_gemm(const GemmJob& job, nvfp4_stream_t stream, bool* launched) {
  *launched = false;
  if (job.m > kSm90StreamMMax || job.m < 1 || job.k % 32 != 0) return NVFP4_SUCCESS;
  if (job.m <= 8) return launch<Cfg<1, 1, 4>>(job, stream, launched);
  if (job.m <= 16) return launch<Cfg<2, 1, 4>>(job, stream, launched);
  return launch<Cfg<4, 1, 3>>(job, stream, launched);
}

}  // namespace nvfp4::detail
