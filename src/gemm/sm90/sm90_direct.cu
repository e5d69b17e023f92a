// The FP4-reading Hopper GEMM: D[M,N] = beta*C + (alpha * (Â @ B̂ᵀ) + bias), Â and B̂ the
// decoded NVFP4 operands (E2M1 value x E4M3 block scale), alpha = S_dec(A) * S_dec(B)
// applied to the FP32 accumulator.
//
// The operands are decoded to FP16 (wgmma's FP16 rate equals its BF16 rate): a product
// E2M1 x E4M3 has at most 6 significant bits and lies in [2^-10, 2688] (or is 0 / NaN), so
// it is exact in FP16 and never subnormal there. The decode (one hardware conversion and
// one FP16x2 multiply per pair of values), the K order inside each 8-value word (the same
// for A and B, so every product is still formed once) and the epilogue are the fused
// small-M kernels' (sm90_fp4_decode.cuh).
//
// CTA tile 128 (M) x 256 (N), K in tiles of 64, 384 threads in three warpgroups:
//  - WG0, the producer: copies each K tile's codes (A 128 x 32 bytes, B 256 x 32 bytes) and
//    scales (one 512-byte swizzled scale tile for A, two for B) into a stage of shared
//    memory by cp.async, two K tiles ahead, and signals the stage's copies landed.
//  - Decoding is spread over all 384 threads, one row of the K tile each (its four 16-value
//    blocks): the producer's threads B rows 0..127, consumer w's threads A rows 64w..64w+63
//    and B rows 128+64w..128+64w+63. A row goes to FP16 in the layout wgmma reads (K-major
//    rows of 128 bytes, 16-byte chunks XOR-swizzled by row % 8: the 128-byte swizzle); the
//    stage's "decoded" barrier completes when all 384 rows are written.
//  - WG1, WG2, the consumers: each issues four wgmma m64n256k16 (both operands from shared
//    memory) per K tile into 128 FP32 accumulators per thread; one K tile's batch stays in
//    flight while the next tile's rows are decoded, and a stage is released once its batch
//    has completed.
// Stages: 3 (codes, scales, decoded A and B of one K tile: 62 KiB each). Past M, N or K the
// copies fill zeros and the decode writes zeros (a padded scale byte may hold anything).
// Shared-memory budget per K tile, see docs/design.md ("What the Hopper emulation costs").
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <utility>

#include <cute/arch/mma_sm90_gmma.hpp>

#include "core/scale.h"
#include "cuda/device.h"
#include "gemm/sm90/sm90_direct.h"
#include "gemm/sm90/sm90_fp4_decode.cuh"
#include "gemm/sm90/sm90_wgmma.cuh"
#include "settings.h"

namespace nvfp4::detail {
namespace {

constexpr int kBM = 128, kBN = 256, kBK = 64;
constexpr int kStages = 3;
constexpr int kThreads = 384;
constexpr int kRowBytes = kBK * 2;  // one decoded row of a K tile: 64 FP16

// One stage. The decoded tiles come first: the 128-byte swizzle wants 1024-byte alignment.
constexpr int kOffDecA = 0;
constexpr int kOffDecB = kOffDecA + kBM * kRowBytes;  // 16 KiB
constexpr int kOffRawA = kOffDecB + kBN * kRowBytes;  // + 32 KiB
constexpr int kOffRawB = kOffRawA + kBM * kBK / 2;    // + 4 KiB of A codes
constexpr int kOffSfA = kOffRawB + kBN * kBK / 2;     // + 8 KiB of B codes
constexpr int kOffSfB = kOffSfA + 512;                // one scale tile for A
constexpr int kStageUsed = kOffSfB + 1024;            // two for B
constexpr int kStageBytes = (kStageUsed + 1023) / 1024 * 1024;
constexpr int kSmemBytes = kStages * kStageBytes + 1024;  // + slack to align the base
static_assert(kSmemBytes <= 227 * 1024, "shared memory per CTA");
static_assert(2 * 64 * (kBN + 8) * 4 <= kStages * kStageBytes, "the epilogue's staged accumulators fit the stages");

struct Params {
  const uint8_t* a;    // [m, k/2]
  const uint8_t* sfa;  // swizzled [roundup(m,128), roundup(k/16,4)]
  const uint8_t* b;    // [n, k/2]
  const uint8_t* sfb;
  int m, n, k;
  int ktiles;          // ceil(k / 64)
  int scols4;          // swizzled scale tiles per 128-row band: roundup(k/16, 4) / 4
  int b_bands;         // 128-row bands of B's padded scales: roundup(n, 128) / 128
  sm90::Epilogue epi;  // amaxes (alpha), bias, beta * C (C null when beta == 0), D
};

using gpu::cp_async16;
using gpu::cp_async_commit;
using gpu::cp_async_wait;
using gpu::smem_u32;

using sm90::fence_acc;
using sm90::fence_async_smem;
using sm90::mbar_arrive;
using sm90::mbar_init;
using sm90::mbar_wait;
using sm90::sw128_desc;
using sm90::wg_barrier;

using Wgmma = cute::SM90::GMMA::MMA_64x256x16_F32F16F16_SS<cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::K>;

template <size_t... I>
__device__ __forceinline__ void wgmma_call(uint64_t da, uint64_t db, float (&acc)[128], bool accumulate,
                                           std::index_sequence<I...>) {
  Wgmma::fma(da, db, acc[I]..., accumulate ? cute::SM90::GMMA::ScaleOut::One : cute::SM90::GMMA::ScaleOut::Zero);
}

// Row r of a tile (all four 16-value blocks of the K tile): codes from `raw` (32 bytes per
// row, two 16-byte loads), the four scale bytes of the row (adjacent in the swizzled scale
// tile: one 4-byte load), eight 16-byte stores into the 128-byte-swizzled decoded row.
// `row_ok`: the row lies inside the matrix; `kblocks`: blocks of this K tile inside K (4,
// or 2 for the half tile at the end when K % 64 == 32). Outside, the codes arrived as zeros
// (the copies zero-fill) and the scale bytes, which may hold anything in the padding (NaN
// included), are replaced by 0: every value there decodes to 0, with no branch.
__device__ __forceinline__ void decode_row(const uint8_t* raw, const uint8_t* sf, uint8_t* dec, int r, bool row_ok,
                                           int kblocks) {
  uint8_t* row = dec + r * kRowBytes;
  const uint4 c0 = *reinterpret_cast<const uint4*>(raw + r * 32);
  const uint4 c1 = *reinterpret_cast<const uint4*>(raw + r * 32 + 16);
  const int rb = r & 127;
  uint32_t sb = *reinterpret_cast<const uint32_t*>(sf + (r >> 7) * 512 + (rb & 31) * 16 + (rb >> 5) * 4);
  sb = row_ok ? (kblocks == 4 ? sb : sb & 0xffffu) : 0u;
  const uint32_t words[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint32_t s2 = sm90::scale_pair((sb >> (8 * j)) & 0xffu);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      uint32_t d[4];
      sm90::decode8(words[2 * j + h], s2, d);
      *reinterpret_cast<uint4*>(row + (((2 * j + h) ^ (r & 7)) << 4)) = make_uint4(d[0], d[1], d[2], d[3]);
    }
  }
}

__global__ void __launch_bounds__(kThreads, 1) direct_kernel(const Params p) {
  extern __shared__ uint8_t smem_raw[];
  __shared__ uint64_t full[kStages], empty[kStages], decoded[kStages];

  // 1024-byte aligned for the 128-byte swizzle; offset from the shared array itself, so that
  // the compiler keeps every access a shared-memory one (LDS/STS, not generic loads).
  uint8_t* smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
  const int tid = threadIdx.x, wg = tid / 128, t128 = tid % 128;
  const int m0 = blockIdx.x * kBM, n0 = blockIdx.y * kBN;

  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&full[s], 128);     // the producer's threads: the copies landed
      mbar_init(&empty[s], 256);    // the consumers' threads: the stage's wgmmas completed
      mbar_init(&decoded[s], 384);  // every thread: its row is decoded
    }
  }
  __syncthreads();

  if (wg == 0) {
    // ---------------------------------------------------------------- producer
    asm volatile("setmaxnreg.dec.sync.aligned.u32 56;\n");
    const int64_t row_bytes = p.k / 2;
    // Copies of K tile kt into stage s: 864 16-byte pieces over 128 threads.
    auto load = [&](int kt) {
      const int s = kt % kStages;
      if (kt >= kStages) mbar_wait(&empty[s], ((kt / kStages) & 1) ^ 1);
      uint8_t* base = smem + s * kStageBytes;
      const int kbyte = kt * 32;
      for (int c = t128; c < 864; c += 128) {
        if (c < 256) {  // A codes: row c/2, half c%2
          const int r = c >> 1, h = c & 1;
          const bool ok = m0 + r < p.m && kbyte + 16 * h < row_bytes;
          const uint8_t* src = ok ? p.a + static_cast<int64_t>(m0 + r) * row_bytes + kbyte + 16 * h : p.a;
          cp_async16(base + kOffRawA + r * 32 + 16 * h, src, ok ? 16 : 0);
        } else if (c < 768) {  // B codes
          const int cc = c - 256, r = cc >> 1, h = cc & 1;
          const bool ok = n0 + r < p.n && kbyte + 16 * h < row_bytes;
          const uint8_t* src = ok ? p.b + static_cast<int64_t>(n0 + r) * row_bytes + kbyte + 16 * h : p.b;
          cp_async16(base + kOffRawB + r * 32 + 16 * h, src, ok ? 16 : 0);
        } else if (c < 800) {  // A's scale tile (band m0/128 always exists)
          const int cc = c - 768;
          const uint8_t* src = p.sfa + (static_cast<int64_t>(m0 / 128) * p.scols4 + kt) * 512 + 16 * cc;
          cp_async16(base + kOffSfA + 16 * cc, src, 16);
        } else {  // B's two scale tiles (the second band may lie past the padded scales)
          const int cc = c - 800, band = n0 / 128 + (cc >> 5);
          const bool ok = band < p.b_bands;
          const uint8_t* src = ok ? p.sfb + (static_cast<int64_t>(band) * p.scols4 + kt) * 512 + 16 * (cc & 31) : p.sfb;
          cp_async16(base + kOffSfB + 16 * cc, src, ok ? 16 : 0);
        }
      }
    };
    load(0);
    cp_async_commit();
    if (p.ktiles > 1) load(1);
    cp_async_commit();
    for (int kt = 0; kt < p.ktiles; ++kt) {
      cp_async_wait<1>();  // K tile kt has landed (this thread's copies)
      wg_barrier(1);       // ... and every producer thread's
      const int s = kt % kStages;
      uint8_t* st = smem + s * kStageBytes;
      mbar_arrive(&full[s]);
      const int kblocks = min(4, (p.k - kt * kBK) / 16);
      decode_row(st + kOffRawB, st + kOffSfB, st + kOffDecB, t128, n0 + t128 < p.n, kblocks);
      fence_async_smem();
      mbar_arrive(&decoded[s]);
      if (kt + 2 < p.ktiles) load(kt + 2);
      cp_async_commit();
    }
    cp_async_wait<0>();
    return;
  }

  // ------------------------------------------------------------------ consumers
  asm volatile("setmaxnreg.inc.sync.aligned.u32 224;\n");
  const int w = wg - 1;  // rows 64w .. 64w + 63 of the tile
  // The first wgmma of the first K tile ignores the accumulators' contents (scale-d 0), so
  // they need no zeroing (instructions defining them would serialize the wgmma pipeline).
  float acc[128];

  for (int kt = 0; kt < p.ktiles; ++kt) {
    const int s = kt % kStages;
    mbar_wait(&full[s], (kt / kStages) & 1);
    uint8_t* st = smem + s * kStageBytes;
    const int kblocks = min(4, (p.k - kt * kBK) / 16);
    if (t128 < 64) {
      const int r = 64 * w + t128;
      decode_row(st + kOffRawA, st + kOffSfA, st + kOffDecA, r, m0 + r < p.m, kblocks);
    } else {
      const int r = 128 + 64 * w + (t128 - 64);
      decode_row(st + kOffRawB, st + kOffSfB, st + kOffDecB, r, n0 + r < p.n, kblocks);
    }
    fence_async_smem();
    mbar_arrive(&decoded[s]);
    mbar_wait(&decoded[s], (kt / kStages) & 1);  // all of B and this warpgroup's A rows
    const uint32_t a_base = smem_u32(st + kOffDecA + 64 * w * kRowBytes);
    const uint32_t b_base = smem_u32(st + kOffDecB);
    fence_acc(acc);
    cute::warpgroup_arrive();
#pragma unroll
    for (int j = 0; j < kBK / 16; ++j)
      wgmma_call(sw128_desc(a_base + 32 * j), sw128_desc(b_base + 32 * j), acc, kt > 0 || j > 0,
                 std::make_index_sequence<128>{});
    cute::warpgroup_commit_batch();
    // One batch stays in flight: this K tile's wgmmas run while the next tile's A is
    // decoded; the previous tile's batch is complete here, so its stage is released.
    cute::warpgroup_wait<1>();
    fence_acc(acc);
    if (kt > 0) mbar_arrive(&empty[(kt - 1) % kStages]);
  }
  cute::warpgroup_wait<0>();
  fence_acc(acc);

  // ---- epilogue: beta * C + (alpha * acc + bias), the association of every runner ----
  // The accumulators go through shared memory (the stages are free once both consumer
  // warpgroups are past their last wgmma), so that the stores to D are row-contiguous across
  // a warp and the dtype switches are not unrolled 128 times.
  asm volatile("bar.sync 4, 256;\n" ::: "memory");
  constexpr int kLd = kBN + 8;  // floats per staged row
  float* tile = reinterpret_cast<float*>(smem) + w * 64 * kLd;
  sm90::stage_acc(acc, tile, kLd, t128 / 32, t128 % 32);
  wg_barrier(2 + w);
  const float alpha = core::gemm_alpha(p.epi.amax_a, p.epi.amax_b);
  sm90::store_tile_per_element(p.epi, alpha, tile, kLd, m0 + 64 * w, n0, p.m, p.n, t128);
}

bool direct_enabled() {
  const char* v = setting("NVFP4_SM90_DIRECT");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

}  // namespace

bool sm90_direct_applicable(const GemmJob& job) {
  using gpu::aligned16;
  return direct_enabled() && job.format == Format::kNvfp4 && job.layout == NVFP4_SCALES_SWIZZLED &&
         job.m >= 1 && job.n >= 1 && job.k >= 32 && job.k % 32 == 0 && job.m < (int64_t{1} << 31) &&
         job.n < (int64_t{1} << 31) && job.k < (int64_t{1} << 31) && (job.m + kBM - 1) / kBM <= INT32_MAX &&
         (job.n + kBN - 1) / kBN <= 65535 && aligned16(job.a) && aligned16(job.b) && aligned16(job.sfa) &&
         aligned16(job.sfb);
}

nvfp4_status_t sm90_direct_gemm(const GemmJob& job, nvfp4_stream_t stream) {
  if (!sm90_direct_applicable(job))
    return fail(NVFP4_ERROR_NOT_SUPPORTED, "gemm: the FP4-reading sm90 kernel does not take this job");
  Params p{};
  p.a = job.a;
  p.sfa = job.sfa;
  p.b = job.b;
  p.sfb = job.sfb;
  p.m = static_cast<int>(job.m);
  p.n = static_cast<int>(job.n);
  p.k = static_cast<int>(job.k);
  p.ktiles = static_cast<int>((job.k + kBK - 1) / kBK);
  p.scols4 = static_cast<int>((job.k / 16 + 3) / 4);
  p.b_bands = static_cast<int>((job.n + 127) / 128);
  p.epi = {job.amax_a, job.amax_b, job.beta != 0.0f ? job.c : nullptr,  // beta == 0: C is not read
           job.c_dtype, job.beta, job.bias, job.bias_dtype, job.d, job.d_dtype};
  if (nvfp4_status_t s = gpu::allow_dynamic_smem(direct_kernel, kSmemBytes); s != NVFP4_SUCCESS) return s;
  const dim3 grid(static_cast<unsigned>((job.m + kBM - 1) / kBM), static_cast<unsigned>((job.n + kBN - 1) / kBN));
  direct_kernel<<<grid, kThreads, kSmemBytes, reinterpret_cast<cudaStream_t>(stream)>>>(p);
  return gpu::check_launch("gemm: FP4-reading sm90 kernel launch");
}

}  // namespace nvfp4::detail
