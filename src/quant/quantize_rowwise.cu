// 1D rowwise quantization (the forward activation path): blocks of 16 along the rows of
// x [rows, cols], codes and E4M3 scales written straight into their final layout.
//
// Work unit: a tile of 128 rows x 4 blocks (64 columns), i.e. one 512-byte tile of the
// 128x4 swizzled scale layout. 256 threads, two blocks each: a warp covers rows
// {r, r+1} + {0, 32, 64, 96} of 4 consecutive blocks, so
//  - each row's 4 blocks are 64 (bf16/fp16) or 128 (fp32) contiguous bytes of x, read
//    with 16-byte loads (2 or 4 per block per thread),
//  - each row's 4 x 8 bytes of codes form one full 32-byte sector,
//  - the warp's 32 scale bytes are one contiguous 32-byte run of the swizzled layout.
// Persistent grid, tiles in descending order (the amax pass read x ascending, so the
// first tiles here are still in L2), and the next tile's loads are issued before the
// current tile is encoded. The amax comes from device memory; each CTA turns it into
// the global scale and a 256-entry table of encode factors once. The decoded output of
// the RTN variants leaves through a per-warp staging area (whole sectors per store).
#include "quant/common.cuh"
#include "quant/launch.cuh"

namespace nvfp4::detail::quant {
namespace {

struct RowwiseArgs {
  const void* x;        // [rows, cols]
  int rows;             // < 2^31 (checked by the launcher)
  int64_t cols;         // % 16 == 0
  uint8_t* data;        // [rows, cols/2]
  uint8_t* scales;      // linear [rows, cols/16] or swizzled [roundup(rows,128), roundup(cols/16,4)]
  float* amax;          // [1]: filled by the amax pass, or (parts) stored by CTA 0 here
  const uint32_t* parts;  // the amax pass's partials (nullptr: it reduced into amax)
  int nparts;
  void* dec;            // optional: bfloat16 [rows, cols], the decoded values (data and scales
                        // may then be null: not written)
  int swizzled;
  uint32_t sign_mask;
  core::PhiloxKeys keys;  // round keys of the seed (in the constant bank, like every argument)
  uint64_t offset;
  const uint64_t* offset_device;  // optional: added to offset, read when the kernel runs
  int tiles_r, tiles_c;  // ceil(rows/128), ceil(cols/64)
};

// Where a CTA is: tile (tr, tc) and the element offset of the tile's origin in x.
struct Cursor {
  int tr, tc;
  int64_t base;   // tr * 128 * cols + tc * 64
  int64_t tile;   // tr * tiles_c + tc
};

template <class T, bool kSR, bool kRht>
__global__ void __launch_bounds__(kThreads) rowwise_kernel(const RowwiseArgs a) {
  __shared__ EncodeTable tab;
  // RTN: decoded values through each warp's staging area (store_decoded_row_staged); SR keeps
  // direct stores, as in the tile kernel
  constexpr bool kStage = !kSR;
  __shared__ uint4 stage_all[kThreads / 32][kStage ? kRowStageChunks : 1];
  const uint64_t sr_offset = kSR ? a.offset + (a.offset_device ? *a.offset_device : 0) : 0;
  TensorScale ts{};  // set once the first tile's loads are out (below)

  const int64_t total = static_cast<int64_t>(a.tiles_r) * a.tiles_c;
  const bool has_work = static_cast<int64_t>(blockIdx.x) < total;

  // This thread's two blocks in every tile: rows rt[k] of the tile, block bq of its 4.
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int bq = lane & 3, ri = lane >> 2;
  uint4* const stage = stage_all[warp];
  int rt[2];
  rt[0] = 2 * warp + (ri & 1) + 32 * (ri >> 1);
  rt[1] = rt[0] + 16;
  uint64_t off[2];  // element offset inside the tile
  int soff[2];     // byte offset inside the tile's 512 swizzled scale bytes
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    off[k] = static_cast<uint64_t>(rt[k]) * a.cols + bq * kBlock;
    soff[k] = (rt[k] & 31) * 16 + (rt[k] >> 5) * 4 + bq;
  }
  const int nb = static_cast<int>(a.cols / kBlock);
  const char* x = static_cast<const char*>(a.x);
  float rht_sign[kBlock];  // core::rht16's signs as +-1 factors (core::rht16_fma)
#pragma unroll
  for (int i = 0; i < kBlock; ++i) rht_sign[i] = ((a.sign_mask >> i) & 1u) ? -1.0f : 1.0f;

  // Tiles in descending order, G = gridDim.x apart; all steps are additions.
  const int step_r = static_cast<int>(gridDim.x / a.tiles_c), step_c = static_cast<int>(gridDim.x % a.tiles_c);
  const int64_t row_elems = 128 * a.cols;
  const int64_t d_base = step_r * row_elems + static_cast<int64_t>(step_c) * 64;
  const int64_t wrap_base = static_cast<int64_t>(a.tiles_c) * 64 - row_elems;
  Cursor cur;
  cur.tile = total - 1 - blockIdx.x;
  cur.tr = static_cast<int>(cur.tile / a.tiles_c);
  cur.tc = static_cast<int>(cur.tile % a.tiles_c);
  cur.base = cur.tr * row_elems + static_cast<int64_t>(cur.tc) * 64;
  auto next = [&](const Cursor& c) {
    Cursor n;
    n.tile = c.tile - gridDim.x;
    n.tr = c.tr - step_r;
    n.tc = c.tc - step_c;
    n.base = c.base - d_base;
    if (n.tc < 0) {
      n.tc += a.tiles_c;
      n.tr -= 1;
      n.base += wrap_base;
    }
    return n;
  };
  // rows_left / blocks_left are uniform per tile, so each test is one compare.
  auto valid = [&](const Cursor& c, int k) { return rt[k] < a.rows - c.tr * 128 && bq < nb - c.tc * 4; };

  // A block outside x keeps whatever its registers held: nothing computed from it is
  // stored (its codes are skipped and its swizzled scale byte is written as 0).
  auto load = [&](RawBlock<T> (&b)[2], const Cursor& c) {
#pragma unroll
    for (int k = 0; k < 2; ++k)
      if (valid(c, k)) load_block<T>(b[k], x + (static_cast<uint64_t>(c.base) + off[k]) * T::kBytes);
  };

  auto process = [&](const RawBlock<T> (&b)[2], const Cursor& c) {
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const bool ok = valid(c, k);
      const uint64_t e0 = static_cast<uint64_t>(c.base) + off[k];  // element offset of the block in x
      float v[kBlock];
      to_float<T>(b[k], v);
      uint32_t bamax;
      if constexpr (kRht) {
        core::rht16_fma(v, rht_sign);
        bamax = absmax_bits(v);
      } else {
        bamax = raw_absmax_bits<T>(b[k]);
      }
      const Encoded o = encode_block<kSR>(v, bamax, ts, tab, a.keys, sr_offset, e0);
      if (kStage && a.dec)  // the same for every lane: the whole warp stages
        store_decoded_row_staged(stage, ri, bq, o, static_cast<__nv_bfloat16*>(a.dec) + e0 - bq * kBlock,
                                 rt[k] < a.rows - c.tr * 128, nb - c.tc * 4);
      else if (ok && a.dec)
        store_decoded(static_cast<__nv_bfloat16*>(a.dec) + e0, o);
      if (a.data == nullptr) continue;  // decoded values only
      if (ok) *reinterpret_cast<uint2*>(a.data + e0 / 2) = make_uint2(o.lo, o.hi);
      if (a.swizzled)  // every byte of the tile's 512, padding included (as 0)
        a.scales[c.tile * 512 + soff[k]] = ok ? static_cast<uint8_t>(o.scale) : uint8_t{0};
      else if (ok)
        a.scales[e0 / kBlock] = static_cast<uint8_t>(o.scale);
    }
  };

  // Two register sets, alternating: the next tile's loads are in flight while the
  // current one is encoded, with no copies between the sets.
  RawBlock<T> ping[2], pong[2];
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    zero_block<T>(ping[k]);
    zero_block<T>(pong[k]);
  }
  // The first tile's loads go out before the tensor amax is known: the reduction of the
  // amax pass's partials, the encode table and the CTA barrier run while they are in flight.
  if (has_work) load(ping, cur);
  {
    const core::GlobalScale gs = core::make_global_scale(tensor_amax(a.amax, a.parts, a.nparts));
    ts = make_tensor_scale(gs);
    fill_encode_table(tab, gs.dec);
  }
  __syncthreads();
  if (!has_work) return;
  while (true) {
    Cursor n = next(cur);
    bool more = n.tr >= 0;
    if (more) load(pong, n);
    process(ping, cur);
    if (!more) break;
    cur = n;
    n = next(cur);
    more = n.tr >= 0;
    if (more) load(ping, n);
    process(pong, cur);
    if (!more) break;
    cur = n;
  }
}

template <class T, bool kSR, bool kRht>
nvfp4_status_t run(const QuantJob& job, cudaStream_t stream, const AmaxParts& parts) {
  RowwiseArgs a;
  a.x = job.x;
  a.rows = static_cast<int>(job.rows);
  a.cols = job.cols;
  a.data = job.row.data;
  a.scales = job.row.scales;
  a.amax = job.row.amax;
  a.parts = parts.row;
  a.nparts = parts.nrow;
  a.dec = job.row.dec;
  a.swizzled = job.cfg.scale_layout == NVFP4_SCALES_SWIZZLED;
  a.sign_mask = job.cfg.rht_sign_mask;
  a.keys = core::philox_keys(job.cfg.seed);
  a.offset = job.cfg.offset;
  a.offset_device = job.cfg.offset_device;
  const int64_t tiles_r = (job.rows + 127) / 128, tiles_c = (job.cols / kBlock + 3) / 4;
  if (job.rows > INT32_MAX - 128 || tiles_r * tiles_c > INT32_MAX || job.cols / kBlock > INT32_MAX)
    return fail(NVFP4_ERROR_NOT_SUPPORTED, "nvfp4 quantize: tensor too large for the CUDA kernels");
  a.tiles_r = static_cast<int>(tiles_r);
  a.tiles_c = static_cast<int>(tiles_c);
  auto kernel = rowwise_kernel<T, kSR, kRht>;
  const unsigned grid = persistent_grid(kernel, kThreads, 0, tiles_r * tiles_c);
  kernel<<<grid, kThreads, 0, stream>>>(a);
  return check_launch("nvfp4 rowwise quantize kernel");
}

template <class T>
nvfp4_status_t dispatch(const QuantJob& job, cudaStream_t stream, const AmaxParts& parts) {
  const bool sr = job.cfg.rounding == NVFP4_ROUND_STOCHASTIC;
  const bool rht = (job.cfg.rht & NVFP4_RHT_ROWWISE) != 0;
  if (sr) return rht ? run<T, true, true>(job, stream, parts) : run<T, true, false>(job, stream, parts);
  return rht ? run<T, false, true>(job, stream, parts) : run<T, false, false>(job, stream, parts);
}

}  // namespace

nvfp4_status_t launch_rowwise(const QuantJob& job, cudaStream_t stream, const AmaxParts& parts) {
  switch (job.dtype) {
    case NVFP4_DTYPE_FLOAT32: return dispatch<F32>(job, stream, parts);
    case NVFP4_DTYPE_FLOAT16: return dispatch<F16>(job, stream, parts);
    case NVFP4_DTYPE_BFLOAT16: return dispatch<BF16>(job, stream, parts);
    default: return fail(NVFP4_ERROR_INVALID_ARGUMENT, "nvfp4 quantize: unsupported input dtype");
  }
}

}  // namespace nvfp4::detail::quant
