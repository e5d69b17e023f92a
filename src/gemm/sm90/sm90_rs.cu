// The Hopper GEMM that reads A as FP4: D[M,N] = beta*C + (alpha * (Â @ B̂ᵀ) + bias), with A
// given by its E2M1 codes and 128x4-swizzled E4M3 scales and B by its decoded values (BF16,
// [N, K], what nvfp4_quantize_decoded or the decode pass writes; B given as codes is decoded
// into the workspace first by that pass). A is decoded in the
// registers of the warps that multiply it, right before the tensor-core instruction
// (register-sourced wgmma), so no BF16 copy of A exists anywhere; B goes to shared memory
// as it is. alpha = S_dec(A) * S_dec(B) is applied to the FP32 accumulator.
//
// Why the values are the two-step path's: an E2M1 value times an E4M3 scale has at most 6
// significant bits and lies in [2^-10, 2688] (or is 0 / NaN), so it is exact in BF16; the
// decode below forms the E2M1 value in BF16 and multiplies it by the scale in BF16 (one
// exact multiply), i.e. the same numbers the decode kernel writes. The tensor cores see
// the same operands in the same K order (K tiles of 64, four k16 steps each), accumulating
// in FP32 per output element in that order.
//
// CTA tile 128 (M) x 256 (N), K in tiles of 64, 384 threads in three warpgroups:
//  - WG0, the producer: one thread issues, per K tile, a TMA copy of B (a 64 x 256 box of
//    the BF16 [N, K] tensor, into the 128-byte swizzled K-major layout wgmma reads), a TMA
//    copy of A's codes (a 32-byte x 128-row box) and a bulk copy of A's scale tile (512
//    bytes) into a stage; their bytes complete the stage's "full" barrier. The copies fill
//    zeros past M, N and K. The other producer threads exit: a warp spinning on a barrier
//    takes issue slots from the decoding warps on its scheduler.
//  - WG1, WG2, the consumers: rows 64w..64w+63 of the tile each. Per K tile a thread
//    decodes its 32 values of A (two rows x four k16 steps x two pairs) into the wgmma A
//    fragment, then issues four wgmma m64n256k16 (A from registers, B from shared
//    memory). The fragments are double-buffered: the next tile is decoded while this
//    tile's wgmmas run; a stage is released once its wgmmas have completed.
// Stages: 5 of 37 KiB. Past M, N or K the copies fill zeros, and A's scales of blocks past K
// are replaced by 0 (padded scale bytes may hold anything, NaN included).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include <cute/arch/mma_sm90_gmma.hpp>

#include "core/scale.h"
#include "cuda/device.h"
#include "gemm/sm90/sm90_fp4_decode.cuh"
#include "gemm/backends.h"
#include "gemm/common/decode.h"
#include "gemm/common/driver_api.h"
#include "gemm/sm90/sm90_wgmma.cuh"
#include "settings.h"

namespace nvfp4::detail {
namespace {

constexpr int kBM = 128, kBN = 256, kBK = 64;
constexpr int kStages = 5;
constexpr int kThreads = 384;

// One stage; B first (the 128-byte swizzle wants 1024-byte alignment).
constexpr int kOffB = 0;
constexpr int kOffA = kOffB + kBN * kBK * 2;  // 32 KiB of B
constexpr int kOffSf = kOffA + kBM * kBK / 2;  // + 4 KiB of A codes
constexpr int kStageBytes = (kOffSf + 512 + 1023) / 1024 * 1024;
constexpr int kSmemBytes = kStages * kStageBytes + 1024;  // + slack to align the base
static_assert(kSmemBytes <= 227 * 1024, "shared memory per CTA");
constexpr int kLd = kBN + 8;  // floats per staged accumulator row in the epilogue
static_assert(2 * 64 * kLd * 4 <= kStages * kStageBytes, "the epilogue's staged accumulators fit the stages");

struct Params {
  const uint8_t* a;        // [m, k/2]
  const uint8_t* sfa;      // swizzled [roundup(m,128), roundup(k/16,4)]
  int m, n, k;
  int ktiles;              // ceil(k / 64)
  int scols4;              // swizzled scale tiles per 128-row band: roundup(k/16, 4) / 4
  int vec_out;             // 1: no C, n % 8 == 0, D 16-byte aligned: 8 outputs per store
  sm90::Epilogue epi;      // amaxes (alpha), bias, beta * C (C null when beta == 0), D
};

using gpu::smem_u32;
using sm90::bulk_load;
using sm90::fence_acc;
using sm90::mbar_arrive;
using sm90::mbar_arrive_expect_tx;
using sm90::mbar_init;
using sm90::mbar_wait;
using sm90::sw128_desc;
using sm90::tma_load_2d;
using sm90::wg_barrier;

using Wgmma = cute::SM90::GMMA::MMA_64x256x16_F32BF16BF16_RS<cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::K>;

template <size_t... I>
__device__ __forceinline__ void wgmma_call(const uint32_t* a, uint64_t db, float (&acc)[128], bool accumulate,
                                           std::index_sequence<I...>) {
  Wgmma::fma(a[0], a[1], a[2], a[3], db, acc[I]...,
             accumulate ? cute::SM90::GMMA::ScaleOut::One : cute::SM90::GMMA::ScaleOut::Zero);
}

// Keeps the registers of an A fragment allocated (and unmodified) up to this point: wgmma
// reads them asynchronously, which the compiler cannot see.
__device__ __forceinline__ void fence_frag(uint32_t (&f)[16]) {
#pragma unroll
  for (int i = 0; i < 16; ++i) asm volatile("" : "+r"(f[i])::"memory");
}

__device__ __forceinline__ uint32_t prmt(uint32_t x, uint32_t y, uint32_t s) {
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(x), "r"(y), "r"(s));
  return r;
}

__device__ __forceinline__ uint32_t bmul2(uint32_t a, uint32_t b) {
  __nv_bfloat162 r = __hmul2(*reinterpret_cast<__nv_bfloat162*>(&a), *reinterpret_cast<__nv_bfloat162*>(&b));
  return *reinterpret_cast<uint32_t*>(&r);
}

// E4M3 scale byte -> the BF16 pair (s, s). E4M3 -> FP16 is exact (one hardware conversion for
// two bytes), FP16 -> FP32 -> BF16 is exact for every E4M3 value; NaN stays NaN.
__device__ __forceinline__ void scale_pairs(uint32_t four, uint32_t (&s2)[4]) {
  const uint32_t h01 = sm90::e4m3x2_to_f16x2(four & 0xffffu);
  const uint32_t h23 = sm90::e4m3x2_to_f16x2(four >> 16);
  const uint32_t h[2] = {h01, h23};
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const __half2 hv = *reinterpret_cast<const __half2*>(&h[i]);
    const float lo = __low2float(hv), hi = __high2float(hv);
    const __nv_bfloat162 bl = __floats2bfloat162_rn(lo, lo), bh = __floats2bfloat162_rn(hi, hi);
    s2[2 * i] = *reinterpret_cast<const uint32_t*>(&bl);
    s2[2 * i + 1] = *reinterpret_cast<const uint32_t*>(&bh);
  }
}

// Eight E2M1 codes (code i in nibble i; byte j holds the pair of elements 2j, 2j+1) ->
// four BF16 pairs p[j] = (value(code 2j), value(code 2j+1)) times the scale pair of that
// byte: sa for bytes 0, 1, sb for bytes 2, 3. The magnitudes {0, .5, 1, 1.5, 2, 3, 4, 6}
// (core::e2m1_magnitude) come from byte tables by byte permutes (low and high bytes of their
// BF16 patterns), the sign bit is moved into place by one more permute, the scale multiply is
// exact. test_rs_decodes_every_code_with_every_scale checks every code with every scale byte
// against the reference decode.
__device__ __forceinline__ void decode_word(uint32_t x, uint32_t sa, uint32_t sb, uint32_t* p) {
  constexpr uint32_t kLo0 = 0xC0800000u, kLo1 = 0xC0804000u;  // low bytes of 0, .5, 1, 1.5 | 2, 3, 4, 6
  constexpr uint32_t kHi0 = 0x3F3F3F00u, kHi1 = 0x40404040u;  // high bytes
  const uint32_t mag = x & 0x77777777u;
  const uint32_t mag_hi = mag >> 16;
  const uint32_t lo_a = prmt(kLo0, kLo1, mag), hi_a = prmt(kHi0, kHi1, mag);        // codes 0..3
  const uint32_t lo_b = prmt(kLo0, kLo1, mag_hi), hi_b = prmt(kHi0, kHi1, mag_hi);  // codes 4..7
  const uint32_t sg = x & 0x88888888u;
  const uint32_t sg4 = sg << 4;  // the sign of code 2j at the top of byte j
  uint32_t v[4];
  v[0] = prmt(lo_a, hi_a, 0x5140u);
  v[1] = prmt(lo_a, hi_a, 0x7362u);
  v[2] = prmt(lo_b, hi_b, 0x5140u);
  v[3] = prmt(lo_b, hi_b, 0x7362u);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    // bit 15 <- sign of code 2j (top of byte j of sg4), bit 31 <- sign of code 2j+1 (top of byte j of sg)
    const uint32_t s = prmt(sg4, sg, (static_cast<uint32_t>(4 + j) << 12) | (static_cast<uint32_t>(j) << 4));
    p[j] = bmul2(v[j] | (s & 0x80008000u), j < 2 ? sa : sb);
  }
}

// The A fragment of one K tile for the thread's rows r0 (a0, a2 of each k16 step) and r0 + 8
// (a1, a3): f[4 * step + i] is register a_i of that step. Row r's codes are 32 bytes
// (eight words, word q = k 8q..8q+7); the thread's pair in every word is byte t = lane % 4.
__device__ __forceinline__ void decode_a(const uint8_t* st, int r0, int t, int kblocks, uint32_t (&f)[16]) {
  const uint32_t sel = static_cast<uint32_t>(t) | (static_cast<uint32_t>(4 + t) << 4);
#pragma unroll
  for (int h = 0; h < 2; ++h) {  // row r0 + 8h
    const int r = r0 + 8 * h;
    const uint4 c0 = *reinterpret_cast<const uint4*>(st + kOffA + r * 32);
    const uint4 c1 = *reinterpret_cast<const uint4*>(st + kOffA + r * 32 + 16);
    uint32_t sb = *reinterpret_cast<const uint32_t*>(st + kOffSf + (r & 31) * 16 + (r >> 5) * 4);
    if (kblocks < 4) sb &= 0xffffu;  // K % 64 == 32: blocks 2, 3 lie past K
    uint32_t s2[4];
    scale_pairs(sb, s2);
    // byte t of words 0..3 and of words 4..7
    const uint32_t x0 = prmt(prmt(c0.x, c0.y, sel), prmt(c0.z, c0.w, sel), 0x5410u);
    const uint32_t x1 = prmt(prmt(c1.x, c1.y, sel), prmt(c1.z, c1.w, sel), 0x5410u);
    uint32_t p0[4], p1[4];
    decode_word(x0, s2[0], s2[1], p0);  // words 0, 1: block 0; words 2, 3: block 1
    decode_word(x1, s2[2], s2[3], p1);  // blocks 2, 3
    // step j: a0/a1 = word 2j, a2/a3 = word 2j + 1
    f[0 + h] = p0[0];
    f[2 + h] = p0[1];
    f[4 + h] = p0[2];
    f[6 + h] = p0[3];
    f[8 + h] = p1[0];
    f[10 + h] = p1[1];
    f[12 + h] = p1[2];
    f[14 + h] = p1[3];
  }
}

__global__ void __launch_bounds__(kThreads, 1) rs_kernel(const Params p, const __grid_constant__ CUtensorMap amap,
                                                         const __grid_constant__ CUtensorMap bmap) {
  extern __shared__ uint8_t smem_raw[];
  __shared__ uint64_t full[kStages], empty[kStages];

  uint8_t* smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
  const int tid = threadIdx.x, wg = tid / 128, t128 = tid % 128;
  const int m0 = blockIdx.x * kBM, n0 = blockIdx.y * kBN;

  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&full[s], 1);     // the producer's arrival, with the bytes of the stage's three copies
      mbar_init(&empty[s], 256);  // each consumer thread, once the stage's wgmmas completed
    }
  }
  __syncthreads();

  if (wg == 0) {
    // ---------------------------------------------------------------- producer
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    if (t128 != 0) return;  // one thread issues every copy
    const uint8_t* ssrc = p.sfa + static_cast<int64_t>(m0 / 128) * p.scols4 * 512;
    constexpr uint32_t kStageTx = kBN * kBK * 2 + kBM * kBK / 2 + 512;
    for (int kt = 0; kt < p.ktiles; ++kt) {
      const int s = kt % kStages;
      if (kt >= kStages) mbar_wait(&empty[s], ((kt / kStages) & 1) ^ 1);
      uint8_t* base = smem + s * kStageBytes;
      mbar_arrive_expect_tx(&full[s], kStageTx);
      tma_load_2d(base + kOffB, &bmap, kt * kBK, n0, &full[s]);       // B: 64 K x 256 rows, 128-byte swizzle
      tma_load_2d(base + kOffA, &amap, kt * (kBK / 2), m0, &full[s]);  // A's codes: 32 bytes x 128 rows
      bulk_load(base + kOffSf, ssrc + static_cast<int64_t>(kt) * 512, 512, &full[s]);  // A's scale tile
    }
    return;
  }

  // ------------------------------------------------------------------ consumers
  asm volatile("setmaxnreg.inc.sync.aligned.u32 224;\n");
  const int w = wg - 1;  // rows 64w .. 64w + 63 of the tile
  const int warp = t128 / 32, lane = t128 % 32;
  const int r0 = 64 * w + 16 * warp + lane / 4, t = lane % 4;
  float acc[128];
  uint32_t fa[16], fb[16];

  // One K tile: wait for its stage, decode A into `f`, issue its four wgmmas, then wait for
  // the previous tile's batch (whose fragment `prev` may be rewritten from here on) and
  // release that tile's stage.
  auto step = [&](int kt, uint32_t(&f)[16], uint32_t(&prev)[16]) {
    const int s = kt % kStages;
    mbar_wait(&full[s], (kt / kStages) & 1);  // the stage's TMA/bulk bytes landed (async proxy, as wgmma reads)
    const uint8_t* st = smem + s * kStageBytes;
    decode_a(st, r0, t, min(4, (p.k - kt * kBK) / 16), f);
    const uint32_t b_base = smem_u32(st + kOffB);
    fence_frag(f);
    fence_acc(acc);
    cute::warpgroup_arrive();
#pragma unroll
    for (int j = 0; j < kBK / 16; ++j)
      wgmma_call(f + 4 * j, sw128_desc(b_base + 32 * j), acc, kt > 0 || j > 0, std::make_index_sequence<128>{});
    cute::warpgroup_commit_batch();
    cute::warpgroup_wait<1>();
    fence_acc(acc);
    fence_frag(prev);
    if (kt > 0) mbar_arrive(&empty[(kt - 1) % kStages]);
  };
  // Pairs of tiles, then an odd last one: no path loops back to rewrite a fragment whose
  // batch may still run (ptxas would serialize every wgmma otherwise, C7513).
  int kt = 0;
  for (; kt + 1 < p.ktiles; kt += 2) {
    step(kt, fa, fb);
    step(kt + 1, fb, fa);
  }
  if (kt < p.ktiles) step(kt, fa, fb);
  cute::warpgroup_wait<0>();
  fence_acc(acc);
  fence_frag(fa);
  fence_frag(fb);

  // ---- epilogue: beta * C + (alpha * acc + bias), the association of every runner ----
  // Through shared memory (the stages are free once both consumer warpgroups are past
  // their last wgmma), so that the stores to D are row-contiguous.
  asm volatile("bar.sync 4, 256;\n" ::: "memory");
  float* tile = reinterpret_cast<float*>(smem) + w * 64 * kLd;
  sm90::stage_acc(acc, tile, kLd, warp, lane);
  wg_barrier(2 + w);
  const float alpha = core::gemm_alpha(p.epi.amax_a, p.epi.amax_b);
  if (p.vec_out) {
    // eight consecutive outputs per thread and store (n % 8 == 0: a chunk is in or out)
#pragma unroll 1
    for (int e = t128; e < 64 * (kBN / 8); e += 128) {
      const int r = e / (kBN / 8), c8 = (e % (kBN / 8)) * 8;
      const int row = m0 + 64 * w + r, col = n0 + c8;
      if (row >= p.m || col >= p.n) continue;
      const float4 u0 = *reinterpret_cast<const float4*>(tile + r * kLd + c8);
      const float4 u1 = *reinterpret_cast<const float4*>(tile + r * kLd + c8 + 4);
      float v[8] = {u0.x, u0.y, u0.z, u0.w, u1.x, u1.y, u1.z, u1.w};
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        v[i] = alpha * v[i];
        if (p.epi.bias != nullptr) v[i] = v[i] + gpu::load_as_float(p.epi.bias, p.epi.bias_dtype, col + i);
      }
      const int64_t o = static_cast<int64_t>(row) * p.n + col;
      if (p.epi.d_dtype == NVFP4_DTYPE_FLOAT32) {
        float4* d = reinterpret_cast<float4*>(static_cast<float*>(p.epi.d) + o);
        d[0] = make_float4(v[0], v[1], v[2], v[3]);
        d[1] = make_float4(v[4], v[5], v[6], v[7]);
      } else if (p.epi.d_dtype == NVFP4_DTYPE_BFLOAT16) {
        uint32_t q[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const __nv_bfloat162 b2 = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
          q[i] = *reinterpret_cast<const uint32_t*>(&b2);
        }
        *reinterpret_cast<uint4*>(static_cast<uint16_t*>(p.epi.d) + o) = make_uint4(q[0], q[1], q[2], q[3]);
      } else {
        uint32_t q[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const __half2 h2 = __floats2half2_rn(v[2 * i], v[2 * i + 1]);
          q[i] = *reinterpret_cast<const uint32_t*>(&h2);
        }
        *reinterpret_cast<uint4*>(static_cast<uint16_t*>(p.epi.d) + o) = make_uint4(q[0], q[1], q[2], q[3]);
      }
    }
  } else {
    sm90::store_tile_per_element(p.epi, alpha, tile, kLd, m0 + 64 * w, n0, p.m, p.n, t128);
  }
}

// NVFP4_SM90_RS: "1" takes every job the kernel can run, "0" none; unset, the jobs where it
// is the faster road (rs_pays). Checked by settings.cpp.
int rs_setting() {
  const char* v = setting("NVFP4_SM90_RS");
  if (v == nullptr || *v == '\0') return -1;
  return std::strcmp(v, "1") == 0 ? 1 : 0;
}

// Where the kernel is chosen without the setting. Against the two-step path on the same
// operands (A decoded by a pass, then CUTLASS) it was faster at every N <= 768 measured
// (H200, CUDA graphs, A as codes and B decoded: 1.10-1.23x at N = 768, K = 768..8192, 2.0x at
// N = 256; both as codes: 1.0x at K = 768, 1.11-1.25x at K = 2048..8192, 1.2-2.0x at N = 256
// and 512) and slower at N >= 2304 with a short K (bench/NOTES.md, 2026-11-27 and
// 2026-11-28); its grid is one CTA per 128 x 256 tile with no split of K, so it also needs
// 90% of a wave of tiles (the fewest measured: 128 tiles on 132 SMs, 2.0x faster).
bool rs_pays(const GemmJob& job) {
  if (job.n > 768) return false;
  const int64_t ctas = ((job.m + kBM - 1) / kBM) * ((job.n + kBN - 1) / kBN);
  return ctas * 10 >= static_cast<int64_t>(gpu::sm_count(gpu::current_device())) * 9;
}

// What the kernel can run: A as codes with swizzled scales; B decoded, or as codes (then
// decoded into the workspace first, by the decode pass the two-step path runs).
bool rs_can_run(const GemmJob& job) {
  using gpu::aligned16;
  const bool b_ok = job.b_dec != nullptr ? aligned16(job.b_dec)
                                         : job.b != nullptr && job.sfb != nullptr && aligned16(job.b) &&
                                               aligned16(job.sfb);
  return job.format == Format::kNvfp4 && job.layout == NVFP4_SCALES_SWIZZLED && job.a != nullptr &&
         job.a_dec == nullptr && b_ok && job.amax_a != nullptr && job.amax_b != nullptr && job.m >= 1 &&
         job.n >= 1 && job.k >= 32 && job.k % 32 == 0 && job.m < (int64_t{1} << 31) &&
         job.n < (int64_t{1} << 31) && job.k < (int64_t{1} << 31) && (job.n + kBN - 1) / kBN <= 65535 &&
         aligned16(job.a) && aligned16(job.sfa);
}

}  // namespace

bool sm90_rs_applicable(const GemmJob& job) {
  const int setting = rs_setting();
  if (setting == 0 || !rs_can_run(job)) return false;
  return setting == 1 || rs_pays(job);
}

size_t sm90_rs_workspace_size(const GemmJob& job) {
  return job.b_dec != nullptr ? 0 : gpu::align_up(static_cast<size_t>(job.n) * static_cast<size_t>(job.k) * 2);
}

nvfp4_status_t sm90_rs_gemm(const GemmJob& job, void* workspace, size_t workspace_bytes, nvfp4_stream_t stream) {
  if (!sm90_rs_applicable(job))
    return fail(NVFP4_ERROR_NOT_SUPPORTED, "gemm: the register-decoding sm90 kernel does not take this job");
  const size_t need = sm90_rs_workspace_size(job);
  if (workspace_bytes < need || (need > 0 && workspace == nullptr))
    return fail(NVFP4_ERROR_WORKSPACE, "gemm (sm90 register-decoding): workspace of " +
                                           std::to_string(workspace_bytes) + " bytes, this problem needs " +
                                           std::to_string(need) +
                                           " (query nvfp4_gemm_workspace_size with the same arguments)");
  if (need > 0 && reinterpret_cast<uintptr_t>(workspace) % gpu::kWorkspaceAlign != 0)
    return fail(NVFP4_ERROR_INVALID_ARGUMENT, "workspace: must be 256-byte aligned");
  // B as codes: decoded into the workspace first (the two-step path's decode pass, B only).
  const void* b_dec = job.b_dec;
  if (b_dec == nullptr) {
    GemmPrep prep;
    prep.b = {job.b, job.sfb, false, job.n, job.k, job.layout, workspace, job.k};
    if (nvfp4_status_t s = gemm_prep(prep, stream); s != NVFP4_SUCCESS) return s;
    b_dec = workspace;
  }
  Params p{};
  p.a = job.a;
  p.sfa = job.sfa;
  p.m = static_cast<int>(job.m);
  p.n = static_cast<int>(job.n);
  p.k = static_cast<int>(job.k);
  p.ktiles = static_cast<int>((job.k + kBK - 1) / kBK);
  p.scols4 = static_cast<int>((job.k / 16 + 3) / 4);
  const void* c = job.beta != 0.0f ? job.c : nullptr;  // beta == 0: C is not read
  p.epi = {job.amax_a, job.amax_b, c, job.c_dtype, job.beta, job.bias, job.bias_dtype, job.d, job.d_dtype};
  p.vec_out = c == nullptr && job.n % 8 == 0 && gpu::aligned16(job.d) ? 1 : 0;
  // B's tensor map: [n, k] BF16, boxes of 64 x 256 in the 128-byte swizzle wgmma reads;
  // A's codes: [m, k/2] bytes, boxes of 32 x 128. Out of bounds the copies fill zeros.
  CUtensorMap amap{}, bmap{};
  {
    const cuuint64_t dims[2] = {static_cast<cuuint64_t>(job.k), static_cast<cuuint64_t>(job.n)};
    const cuuint64_t strides[1] = {static_cast<cuuint64_t>(job.k) * 2};
    const cuuint32_t box[2] = {kBK, kBN};
    const cuuint32_t estr[2] = {1, 1};
    const CUresult r = nvfp4internal_cuTensorMapEncodeTiled(
        &bmap, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(b_dec), dims, strides, box, estr,
        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) return fail(NVFP4_ERROR_CUDA, "gemm: cuTensorMapEncodeTiled (B) failed (" + std::to_string(r) + ")");
    const cuuint64_t adims[2] = {static_cast<cuuint64_t>(job.k / 2), static_cast<cuuint64_t>(job.m)};
    const cuuint64_t astrides[1] = {static_cast<cuuint64_t>(job.k / 2)};
    const cuuint32_t abox[2] = {kBK / 2, kBM};
    const CUresult ra = nvfp4internal_cuTensorMapEncodeTiled(
        &amap, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<uint8_t*>(job.a), adims, astrides, abox, estr,
        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (ra != CUDA_SUCCESS) return fail(NVFP4_ERROR_CUDA, "gemm: cuTensorMapEncodeTiled (A) failed (" + std::to_string(ra) + ")");
  }
  if (nvfp4_status_t s = gpu::allow_dynamic_smem(rs_kernel, kSmemBytes); s != NVFP4_SUCCESS) return s;
  const dim3 grid(static_cast<unsigned>((job.m + kBM - 1) / kBM), static_cast<unsigned>((job.n + kBN - 1) / kBN));
  rs_kernel<<<grid, kThreads, kSmemBytes, reinterpret_cast<cudaStream_t>(stream)>>>(p, amap, bmap);
  return gpu::check_launch("gemm: register-decoding sm90 kernel launch");
}

}  // namespace nvfp4::detail
