// Fused NVFP4 GEMM for small M on Hopper, the ring kernel (runner sm90-small-m-ring):
// D[M,N] = alpha * (Â @ B̂ᵀ) + beta*C + bias.
//
// For M <= 128 the GEMM is bound by reading B (the weights, N x K): the FP4 bytes plus
// scales are 0.5625 B/element against 2 B/element for BF16, so the kernel streams B's FP4
// bytes and scales straight into shared memory (cp.async, 4 stages), decodes them in
// registers into tensor-core fragments and multiplies with mma.sync m16n8k16 (FP32
// accumulation). Â (the M tokens) is decoded once per CTA and stage into shared memory.
// K runs in chunks of 128; when K % 128 != 0 the last chunk is zero-filled past K.
//
// Roles: B supplies the 16-row "A" operand of the mma (N is large), the tokens of A the
// 8-column "B" operand, so one CTA covers BN = 64*WM rows of N and all M tokens.
// Split-K across a thread-block cluster (up to 8 CTAs): each CTA reduces its K slice,
// then the partial tiles are summed through distributed shared memory in rank order, so
// the result is deterministic and no workspace or second launch is needed.
//
// Exactness and the K order of the decoded fragments: sm90_small_m_common.cuh.
//
// For M <= 32 the register-streaming kernel of sm90_small_m_stream.cu usually runs instead
// (fewer instructions per byte, more warps); this one covers M <= 128. Which one runs, and
// the split and grid, is the planner's choice (sm90_small_m_plan.cpp); this file holds the
// kernel, its configurations and the launch of a plan.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>

#include "core/scale.h"
#include "core/swizzle.h"
#include "cuda/device.h"
#include "gemm/sm90/sm90_small_m.h"
#include "gemm/sm90/sm90_small_m_common.cuh"

namespace nvfp4::detail::small_m {
namespace {

namespace cg = cooperative_groups;

constexpr int kThreads = 128;      // 4 warps
constexpr int kWarps = kThreads / 32;
// K elements per pipeline stage: kChunk (sm90_small_m.h).
constexpr int kChunkBytes = kChunk / 2;
constexpr int kChunkScales = kChunk / 16;
constexpr int kStages = 4;
// A decoded token row of one chunk: 128 FP16 = 256 B, padded by 64 B so that the two
// token rows of one 8-lane phase of a 16-byte load land on disjoint banks.
constexpr int kXRowBytes = 2 * kChunk + 64;

template <int NT_, int WM_>
struct Cfg {
  static constexpr int NT = NT_;                 // n8 tiles of tokens: M <= 8 * NT
  static constexpr int WM = WM_;                 // m16 tiles of B rows per warp
  static constexpr int MP = 8 * NT;              // tokens, padded
  static constexpr int BN = kWarps * 16 * WM;    // B rows per CTA
  // One pipeline stage: B bytes, B scales, A bytes, A scales of one K chunk.
  static constexpr int kOffWs = BN * kChunkBytes;
  static constexpr int kOffX = kOffWs + BN * kChunkScales;
  static constexpr int kOffXs = kOffX + MP * kChunkBytes;
  static constexpr int kStage = kOffXs + MP * kChunkScales;
  static constexpr int kXdec = MP * kXRowBytes;
  static constexpr int kPartLd = BN + 4;         // fp32 partials [MP][BN + 4]: +4 spreads banks
  static constexpr int kPart = MP * kPartLd * 4;
  static constexpr int kPipe = kStages * kStage + kXdec;
  static constexpr int kSmem = kPipe > kPart ? kPipe : kPart;
  static_assert(kStage % 16 == 0 && kOffX % 16 == 0 && kOffXs % 16 == 0, "16-byte aligned stage parts");
  static_assert(WM * NT * 4 <= 64, "accumulators must stay within 64 registers");
  static_assert(kSmem <= 200 * 1024, "shared memory budget");
};

struct Params {
  const uint8_t* a;    // [m, k/2]
  const uint8_t* sfa;
  const uint8_t* b;    // [n, k/2]
  const uint8_t* sfb;
  const float* amax_a;
  const float* amax_b;
  int m, n, k;
  bool swizzled;
  const void* c;
  nvfp4_dtype_t c_dtype;
  float beta;
  const void* bias;
  nvfp4_dtype_t bias_dtype;
  void* d;
  nvfp4_dtype_t d_dtype;
  int nchunks;           // ceil(k / kChunk); the last chunk may hold 32, 64 or 96 elements
  int chunks_per_split;
};

// cp.async wrappers: gpu::cp_async16 / cp_async4 / cp_async_commit / cp_async_wait
// (cuda/device.h).
using gpu::cp_async16;
using gpu::cp_async4;
using gpu::cp_async_commit;
using gpu::cp_async_wait;

template <class C>
__global__ void __launch_bounds__(kThreads) ring_kernel(const __grid_constant__ Params p) {
  extern __shared__ __align__(128) uint8_t smem[];
  const int tid = threadIdx.x;
  const int warp = tid >> 5;
  const int lane = tid & 31;
  const int g = lane >> 2;  // mma group: row within an 8-row half, token within an n8 tile
  const int q = lane & 3;   // thread in group: which 32-element quarter of the chunk
  const int split = blockIdx.x;
  const int nsplit = gridDim.x;
  const int n0 = blockIdx.y * C::BN;
  const int c_begin = split * p.chunks_per_split;
  const int c_end = min(p.nchunks, c_begin + p.chunks_per_split);
  const int nloc = max(0, c_end - c_begin);
  const int64_t kbytes = p.k / 2;
  const int64_t kscales = p.k / 16;
  // Needed only after the cluster barrier: load now, off the critical path.
  const float amax_a = __ldg(p.amax_a);
  const float amax_b = __ldg(p.amax_b);

  // Source offsets of this thread's copies at chunk 0 (-1: a row past N or M). The 8
  // scale bytes of a row and chunk are two 4-byte pieces, contiguous in either layout,
  // and chunk ci adds ci * (2 groups of 4 columns) to the offset of both layouts.
  const int64_t s_chunk = p.swizzled ? 2 * 512 : kChunkScales;
  const int64_t s_half = p.swizzled ? 512 : 4;
  auto scale_base = [&](int row, int rows, int hf) -> int64_t {
    return row < rows ? scale_offset(p.swizzled, row, 0, kscales) + hf * s_half : -1;
  };
  constexpr int kWsCopies = (C::BN * 2 + kThreads - 1) / kThreads;
  constexpr int kXCopies = (C::MP * 4 + kThreads - 1) / kThreads;
  constexpr int kXsCopies = (C::MP * 2 + kThreads - 1) / kThreads;
  int64_t w_off[C::WM][2], ws_off[kWsCopies], x_off[kXCopies], xs_off[kXsCopies];
#pragma unroll
  for (int mt = 0; mt < C::WM; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = n0 + warp * 16 * C::WM + mt * 16 + h * 8 + g;
      w_off[mt][h] = r < p.n ? r * kbytes + q * 16 : -1;
    }
#pragma unroll
  for (int j = 0; j < kWsCopies; ++j) {
    const int i = tid + j * kThreads;
    ws_off[j] = i < C::BN * 2 ? scale_base(n0 + (i >> 1), p.n, i & 1) : -1;
  }
#pragma unroll
  for (int j = 0; j < kXCopies; ++j) {
    const int i = tid + j * kThreads;
    x_off[j] = (i < C::MP * 4 && (i >> 2) < p.m) ? (i >> 2) * kbytes + (i & 3) * 16 : -1;
  }
#pragma unroll
  for (int j = 0; j < kXsCopies; ++j) {
    const int i = tid + j * kThreads;
    xs_off[j] = i < C::MP * 2 ? scale_base(i >> 1, p.m, i & 1) : -1;
  }

  // Issues the copies of K chunk `ci` into stage `s`. What lies past N, M or K is
  // zero-filled (cp.async copies src_bytes and fills the rest with zeros; an empty copy
  // reads nothing and gets the operand's base address): zero codes with zero scales
  // decode to zeros, so a partial last chunk and padded rows add nothing.
  auto issue = [&](int ci, int s) {
    uint8_t* st = smem + s * C::kStage;
    const int64_t kb = static_cast<int64_t>(ci) * kChunkBytes;
    const int64_t ks = static_cast<int64_t>(ci) * s_chunk;
    const int kval = min(kChunk, p.k - ci * kChunk);  // valid elements: a multiple of 32
    // Bytes of scale piece hf (4 blocks) that exist (selects, not an indexed array: that
    // would live in local memory).
    const int sbytes0 = min(4, kval / 16), sbytes1 = min(4, max(0, kval / 16 - 4));
    // B bytes: each thread copies exactly the 16-byte pieces it will decode itself.
#pragma unroll
    for (int mt = 0; mt < C::WM; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int rl = warp * 16 * C::WM + mt * 16 + h * 8 + g;
        const bool ok = w_off[mt][h] >= 0 && q * 32 < kval;
        cp_async16(st + rl * kChunkBytes + q * 16, p.b + (ok ? w_off[mt][h] + kb : 0), ok ? 16 : 0);
      }
    }
#pragma unroll
    for (int j = 0; j < kWsCopies; ++j) {
      const int i = tid + j * kThreads;
      if (i < C::BN * 2) {
        const int n_bytes = ws_off[j] >= 0 ? ((i & 1) ? sbytes1 : sbytes0) : 0;
        cp_async4(st + C::kOffWs + i * 4, p.sfb + (n_bytes > 0 ? ws_off[j] + ks : 0), n_bytes);
      }
    }
    // A bytes and scales of the MP (padded) tokens.
#pragma unroll
    for (int j = 0; j < kXCopies; ++j) {
      const int i = tid + j * kThreads;
      if (i < C::MP * 4) {
        const bool ok = x_off[j] >= 0 && (i & 3) * 32 < kval;
        cp_async16(st + C::kOffX + i * 16, p.a + (ok ? x_off[j] + kb : 0), ok ? 16 : 0);
      }
    }
#pragma unroll
    for (int j = 0; j < kXsCopies; ++j) {
      const int i = tid + j * kThreads;
      if (i < C::MP * 2) {
        const int n_bytes = xs_off[j] >= 0 ? ((i & 1) ? sbytes1 : sbytes0) : 0;
        cp_async4(st + C::kOffXs + i * 4, p.sfa + (n_bytes > 0 ? xs_off[j] + ks : 0), n_bytes);
      }
    }
  };

  float acc[C::WM][C::NT][4];
#pragma unroll
  for (int mt = 0; mt < C::WM; ++mt)
#pragma unroll
    for (int t = 0; t < C::NT; ++t)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[mt][t][i] = 0.0f;

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < nloc) issue(c_begin + s, s);
    cp_async_commit();  // empty groups keep the group count uniform
  }

  uint8_t* xdec = smem + kStages * C::kStage;

  for (int it = 0; it < nloc; ++it) {
    cp_async_wait<kStages - 2>();
    // Chunk `it` is visible to all, and every warp is done with chunk it-1's stage and
    // with xdec, so both may be overwritten.
    __syncthreads();
    {
      const int nx = it + kStages - 1;
      if (nx < nloc) issue(c_begin + nx, nx % kStages);
      cp_async_commit();
    }
    const uint8_t* st = smem + (it % kStages) * C::kStage;

    // Decode the tokens of this chunk into xdec: thread -> (token row, word slot), where
    // slot = word * 4 + quarter, the order in which the mma lanes read them back.
    for (int i = tid; i < C::MP * 16; i += kThreads) {
      const int row = i >> 4, slot = i & 15;
      const int wq = slot & 3, wm = slot >> 2;
      const uint32_t w = *reinterpret_cast<const uint32_t*>(st + C::kOffX + row * kChunkBytes + wq * 16 + wm * 4);
      const uint32_t sb = st[C::kOffXs + row * kChunkScales + 2 * wq + (wm >> 1)];
      uint32_t d[4];
      decode8(w, scale_pair(sb), d);
      *reinterpret_cast<uint4*>(xdec + row * kXRowBytes + slot * 16) = make_uint4(d[0], d[1], d[2], d[3]);
    }
    __syncthreads();

    // This thread's B bytes (16 per row: words 0..3) and scale pairs, for rows g and g+8
    // of each m16 tile.
    uint4 wb[C::WM][2];
    uint32_t sc[C::WM][2][2];
#pragma unroll
    for (int mt = 0; mt < C::WM; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int rl = warp * 16 * C::WM + mt * 16 + h * 8 + g;
        wb[mt][h] = *reinterpret_cast<const uint4*>(st + rl * kChunkBytes + q * 16);
        const uint32_t s2 = *reinterpret_cast<const uint16_t*>(st + C::kOffWs + rl * kChunkScales + 2 * q);
        sc[mt][h][0] = scale_pair(s2 & 0xffu);
        sc[mt][h][1] = scale_pair(s2 >> 8);
      }
    }

#pragma unroll
    for (int wm = 0; wm < 4; ++wm) {
      // A fragments (B's rows) for k-steps 2*wm (h=0) and 2*wm+1 (h=1).
      uint32_t af[C::WM][2][4];
#pragma unroll
      for (int mt = 0; mt < C::WM; ++mt) {
        const uint32_t w0 = wm == 0 ? wb[mt][0].x : wm == 1 ? wb[mt][0].y : wm == 2 ? wb[mt][0].z : wb[mt][0].w;
        const uint32_t w1 = wm == 0 ? wb[mt][1].x : wm == 1 ? wb[mt][1].y : wm == 2 ? wb[mt][1].z : wb[mt][1].w;
        uint32_t d0[4], d1[4];
        decode8(w0, sc[mt][0][wm >> 1], d0);  // row g
        decode8(w1, sc[mt][1][wm >> 1], d1);  // row g + 8
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
        const uint4 xf = *reinterpret_cast<const uint4*>(xdec + (8 * t + g) * kXRowBytes + (wm * 4 + q) * 16);
#pragma unroll
        for (int mt = 0; mt < C::WM; ++mt) {
          mma16816(acc[mt][t], af[mt][0][0], af[mt][0][1], af[mt][0][2], af[mt][0][3], xf.x, xf.y);
          mma16816(acc[mt][t], af[mt][1][0], af[mt][1][1], af[mt][1][2], af[mt][1][3], xf.z, xf.w);
        }
      }
    }
  }

  // ---- epilogue: partial tile -> shared memory -> cluster reduction -> D ----
  cp_async_wait<0>();
  __syncthreads();  // the pipeline buffers become the partial tile
  float* part = reinterpret_cast<float*>(smem);
#pragma unroll
  for (int mt = 0; mt < C::WM; ++mt) {
    const int rl = warp * 16 * C::WM + mt * 16 + g;
#pragma unroll
    for (int t = 0; t < C::NT; ++t) {
      const int tok = 8 * t + 2 * q;
      part[tok * C::kPartLd + rl] = acc[mt][t][0];
      part[(tok + 1) * C::kPartLd + rl] = acc[mt][t][1];
      part[tok * C::kPartLd + rl + 8] = acc[mt][t][2];
      part[(tok + 1) * C::kPartLd + rl + 8] = acc[mt][t][3];
    }
  }
  cg::cluster_group cluster = cg::this_cluster();
  if (nsplit > 1) {
    cluster.sync();
  } else {
    __syncthreads();
  }

  const float alpha = core::gemm_alpha_of(amax_a, amax_b);
  // This CTA finishes columns [split * cols, (split + 1) * cols) of the tile.
  const int cols = C::BN / nsplit;
  const int mrows = min(p.m, C::MP);
  for (int i = tid; i < mrows * cols; i += kThreads) {
    const int tok = i / cols;
    const int cl = split * cols + (i - tok * cols);
    const int n = n0 + cl;
    float s = 0.0f;
    for (int r = 0; r < nsplit; ++r) {  // rank order: deterministic
      const float* src = nsplit > 1 ? cluster.map_shared_rank(part, r) : part;
      s += src[tok * C::kPartLd + cl];
    }
    if (n < p.n) {
      // Same order as the CUTLASS epilogue: beta * C + (alpha * acc + bias).
      float v = alpha * s;
      if (p.bias != nullptr) v = v + load_as_float(p.bias, p.bias_dtype, n);
      const int64_t o = static_cast<int64_t>(tok) * p.n + n;
      if (p.c != nullptr) v = p.beta * load_as_float(p.c, p.c_dtype, o) + v;
      store_from_float(p.d, p.d_dtype, o, v);
    }
  }
  if (nsplit > 1) cluster.sync();  // keep this CTA's partials alive until all ranks read them
}

// The configurations, by M: n8 token tiles x m16 B-row tiles per warp.
using Cfg8 = Cfg<1, 2>;
using Cfg16 = Cfg<2, 2>;
using Cfg32 = Cfg<4, 2>;
using Cfg64 = Cfg<8, 2>;
using Cfg128 = Cfg<16, 1>;

template <class F>
auto by_config(int config, F&& f) {
  switch (config) {
    case 0: return f(Cfg8{});
    case 1: return f(Cfg16{});
    case 2: return f(Cfg32{});
    case 3: return f(Cfg64{});
    default: return f(Cfg128{});
  }
}

template <class C>
nvfp4_status_t launch(const GemmJob& job, const Plan& pl, nvfp4_stream_t stream) {
  Params p{};
  p.a = job.a;
  p.sfa = job.sfa;
  p.b = job.b;
  p.sfb = job.sfb;
  p.amax_a = job.amax_a;
  p.amax_b = job.amax_b;
  p.m = static_cast<int>(job.m);
  p.n = static_cast<int>(job.n);
  p.k = static_cast<int>(job.k);
  p.swizzled = job.layout == NVFP4_SCALES_SWIZZLED;
  p.c = job.beta != 0.0f ? job.c : nullptr;  // beta == 0: C is not read (as in CUTLASS)
  p.c_dtype = job.c_dtype;
  p.beta = job.beta;
  p.bias = job.bias;
  p.bias_dtype = job.bias_dtype;
  p.d = job.d;
  p.d_dtype = job.d_dtype;
  p.nchunks = static_cast<int>(gpu::ceil_div(job.k, kChunk));
  p.chunks_per_split = pl.k_split / kChunk;

  const std::string who = "gemm (sm90 small-M ring): ";
  const int nsplit = pl.splits;
  gpu::ClusterLaunch l(dim3(static_cast<unsigned>(nsplit), static_cast<unsigned>(pl.tiles), 1), kThreads, C::kSmem,
                       reinterpret_cast<cudaStream_t>(stream), static_cast<unsigned>(nsplit));
  cudaError_t e = cudaLaunchKernelEx(&l.cfg, ring_kernel<C>, p);
  if (e != cudaSuccess && nsplit > 1) {
    // A cluster that cannot be placed (a partitioned GPU, shared-memory carve-out) is no
    // reason to fail: the same kernel without split-K gives the same result.
    (void)cudaGetLastError();
    p.chunks_per_split = p.nchunks;
    l.set_cluster(1);
    e = cudaLaunchKernelEx(&l.cfg, ring_kernel<C>, p);
  }
  if (e != cudaSuccess)
    return gpu::cuda_error(e, who + "launch (grid " + std::to_string(nsplit) + "x" + std::to_string(pl.tiles) +
                                  ", cluster " + std::to_string(nsplit) + ")");
  if (cudaError_t e2 = cudaGetLastError(); e2 != cudaSuccess) return gpu::cuda_error(e2, who + "launch");
  return NVFP4_SUCCESS;
}

}  // namespace

Shape ring_shape(int64_t m) {
  const int config = m <= 8 ? 0 : m <= 16 ? 1 : m <= 32 ? 2 : m <= 64 ? 3 : 4;
  return by_config(config, [&](auto c) {
    using C = decltype(c);
    return Shape{config, C::MP, C::BN, kThreads};
  });
}

size_t ring_smem(const Shape& s) {
  return by_config(s.config, [](auto c) { return static_cast<size_t>(decltype(c)::kSmem); });
}

nvfp4_status_t ring_prepare(const Shape& s, int* resident) {
  return by_config(s.config, [&](auto c) {
    using C = decltype(c);
    if (nvfp4_status_t st = gpu::allow_dynamic_smem(ring_kernel<C>, C::kSmem); st != NVFP4_SUCCESS) return st;
    *resident = gpu::resident_ctas(reinterpret_cast<const void*>(ring_kernel<C>), kThreads, C::kSmem);
    return NVFP4_SUCCESS;
  });
}

nvfp4_status_t ring_launch(const GemmJob& job, const Plan& p, nvfp4_stream_t stream) {
  return by_config(p.config, [&](auto c) { return launch<decltype(c)>(job, p, stream); });
}

}  // namespace nvfp4::detail::small_m
