// The amax pass: max |x| of the tensor, and of its Hadamard transform along rows or
// columns where an output asks for it. The global scale of a quantization depends on
// the amax of the whole tensor, so this runs before the quantize pass, which reads the
// result from device memory (no host synchronization).
//
// Two kernels, both grid-stride over a persistent grid, walking x the other way from the
// quantize pass that follows (tile_walks_ascending, launch.cuh), which so starts on what
// this pass left in L2: descending before the quantize passes that walk up (the recipe's
// X and dY quantizations: this pass then also starts on the end of x, which the kernel that
// wrote x left in L2), ascending before the others (bench/bench_quant_in_step.py):
//  - amax_flat: one 16-element row block per unit (16-byte loads), two units per thread
//    per iteration; max |x| and, optionally, max |RHT(block)| along rows.
//  - amax_colrht: a unit is a 16-row x 8-byte column strip (16 loads in flight per
//    thread); the RHT runs down each of its columns, rows past the end
//    being the zero padding the columnwise output quantizes. Also gives max |x| when wanted.
// Each CTA reduces in registers and shared memory, then one result per output (below).
//
// Where the result goes: with a workspace (QuantJob::amax_ws) each CTA stores its maximum
// as a partial there, one slot per CTA and direction (the grid is capped to the slots),
// and the quantize kernel that follows reduces them (tensor_amax, common.cuh): nothing has
// to be zeroed first. Without one, each CTA's atomicMax into the amax output itself, which
// two memsets (one per direction) zero before the pass: two more launches per call, host
// time and a gap on the GPU for each. Same bits either way: a max in any order.
#include <algorithm>

#include "quant/common.cuh"
#include "quant/launch.cuh"
#include "settings.h"

namespace nvfp4::detail::quant {
namespace {

struct AmaxArgs {
  const void* x;
  int64_t rows, cols;
  float* plain0;  // max |x| goes to these (nullptr: not wanted), by atomics
  float* plain1;
  float* rht;     // max |RHT(x)| along rows (amax_flat) or columns (amax_colrht)
  uint32_t* part_plain0;  // or as partials, one per CTA (the workspace)
  uint32_t* part_plain1;
  uint32_t* part_rht;
  uint32_t sign_mask;
  uint64_t* counter;        // optional (QuantJob::advance): its value goes to counter_value,
  uint64_t* counter_value;  // then it is advanced by one
  int desc;                 // 1: units in descending address order, 0: ascending
};

// The job's counter, taken by one thread of the pass: the quantize pass, queued after this
// one, reads the value from the workspace instead of the counter itself.
__device__ __forceinline__ void take_counter(const AmaxArgs& a) {
  if (a.counter != nullptr && blockIdx.x == 0 && threadIdx.x == 0) {
    const uint64_t v = *a.counter;
    *a.counter_value = v;
    *a.counter = v + 1u;
  }
}

template <class T, bool kRowRht>
__global__ void __launch_bounds__(kThreads) amax_flat_kernel(const AmaxArgs a) {
  take_counter(a);
  const int64_t n = a.rows * a.cols / kBlock;
  const char* x = static_cast<const char*>(a.x);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  constexpr int64_t kUnitBytes = kBlock * T::kBytes;
  uint32_t m_plain = 0u, m_rht = 0u;
  float rht_sign[kBlock];  // core::rht16's signs as +-1 factors (core::rht16_fma)
#pragma unroll
  for (int i = 0; i < kBlock; ++i) rht_sign[i] = ((a.sign_mask >> i) & 1u) ? -1.0f : 1.0f;
  for (int64_t u = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; u < n; u += 2 * stride) {
    RawBlock<T> b[2];
    load_block<T>(b[0], x + (a.desc ? n - 1 - u : u) * kUnitBytes);
    if (u + stride < n)
      load_block<T>(b[1], x + (a.desc ? n - 1 - u - stride : u + stride) * kUnitBytes);
    else
      zero_block<T>(b[1]);
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      m_plain = max(m_plain, raw_absmax_bits<T>(b[k]));
      if constexpr (kRowRht) {
        float v[kBlock];
        to_float<T>(b[k], v);
        core::rht16_fma(v, rht_sign);
        m_rht = max(m_rht, absmax_bits(v));
      }
    }
  }
  block_reduce_amax(m_plain, a.plain0, a.plain1, a.part_plain0, a.part_plain1);
  if constexpr (kRowRht) block_reduce_amax(m_rht, a.rht, nullptr, a.part_rht);
}

// Units of amax_colrht: 16 rows x 8 bytes (half a 16-byte chunk). With 16-byte units an X of
// 16384 x 768 BF16 is 1.45 units per thread of the resident grid (2 CTAs of 256 per SM on
// 132 SMs), so the slowest threads ran two while most ran one; 8-byte units make it 2.9,
// three for the slowest, each half the bytes. (Three CTAs per SM at 80 registers spill and
// ran slower: bench/NOTES.md.)
constexpr int kColUnitBytes = 8;

__device__ __forceinline__ uint32_t half_word(const uint2& q, int i) { return i == 0 ? q.x : q.y; }

// max |y| over y = H16 v (core::fwht16_scaled's butterfly without its 0.25), as the bits of a
// non-negative float or NaN; NaN exactly when some y is. The last stage's pair
// (a + b, a - b) contributes max(|a + b|, |a - b|) = |a| + |b|, rounded alike (one of the two
// is +-(|a| + |b|), the other's magnitude is at most that, and rounding is monotonic and odd),
// so each pair costs one add of magnitudes instead of two adds and two maxima; the one
// exception, a and b both infinite (then a + b or a - b is inf - inf = NaN), is taken on a
// branch when the sums' maximum is infinite: there both of each pair's sums are formed.
__device__ __forceinline__ uint32_t fwht16_absmax_unscaled(float (&v)[kBlock]) {
  core::fwht16_stages<1, 8>(v);  // strides 1, 2, 4; the last (8) is folded into the maximum
  float m = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) m = fmax_nan(m, fabsf(v[i]) + fabsf(v[i + 8]));
  if (__float_as_uint(m) == 0x7f800000u) {  // the reference's own pair: NaN where it meets inf - inf
#pragma unroll
    for (int i = 0; i < 8; ++i) m = fmax_nan(m, fmax_nan(fabsf(v[i] + v[i + 8]), fabsf(v[i] - v[i + 8])));
  }
  return __float_as_uint(m) & 0x7fffffffu;
}

// kSigns: the RHT sign mask compiled in (the recipe's, core::kDefaultRhtSignMask), or
// kRuntimeSigns: the launch's a.sign_mask.
constexpr uint32_t kRuntimeSigns = 0xffffffffu;

template <class T, uint32_t kSigns>
__global__ void __launch_bounds__(kThreads) amax_colrht_kernel(const AmaxArgs a) {
  take_counter(a);
  constexpr int E = kColUnitBytes / T::kBytes;  // columns per strip
  const int64_t nq = a.cols / E;                // strips per row group
  const int64_t ng = (a.rows + 15) / 16;        // row groups
  const int64_t n = nq * ng;
  const char* x = static_cast<const char*>(a.x);
  const int64_t row_bytes = a.cols * T::kBytes;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  int64_t u = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  // Walk (group, strip) incrementally: one division per thread, not per unit.
  int64_t g = u / nq, q = u % nq;
  const int64_t dg = stride / nq, dq = stride % nq;
  uint32_t m_plain = 0u, m_rht = 0u;
  // core::rht16: row i of a 16-row group is negated where bit i of the mask is set, then the
  // scaled Walsh-Hadamard transform. kSigns: the mask, known at compile time (the recipe's,
  // core::kDefaultRhtSignMask): the negations fold into the first butterfly stage's adds as
  // operand signs (no instruction of their own); kRuntimeSigns: a.sign_mask, flipped on the
  // loaded words (sign bits of every element in them). Neither touches the plain amax (taken
  // without signs).
  constexpr bool kConstSigns = kSigns != kRuntimeSigns;
  constexpr uint32_t kFlip = T::kBytes == 4 ? 0x80000000u : 0x80008000u;
  for (; u < n; u += stride) {
    uint2 c[16];
    // descending: unit n - 1 - u, i.e. group ng - 1 - g, strip nq - 1 - q
    const int64_t gu = a.desc ? ng - 1 - g : g, qu = a.desc ? nq - 1 - q : q;
    const char* p = x + (gu * 16) * row_bytes + qu * kColUnitBytes;
    if (gu * 16 + 16 <= a.rows) {  // a whole group: one row address after the other
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        c[i] = __ldg(reinterpret_cast<const uint2*>(p));
        p += row_bytes;
      }
    } else {  // the last group: its rows past the end are zeros
      const int left = static_cast<int>(a.rows - gu * 16);
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        c[i] = i < left ? __ldg(reinterpret_cast<const uint2*>(p)) : make_uint2(0u, 0u);
        p += row_bytes;
      }
    }
    if constexpr (!kConstSigns) {
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        const uint32_t f = ((a.sign_mask >> i) & 1u) ? kFlip : 0u;
        c[i].x ^= f;
        c[i].y ^= f;
      }
    }
#pragma unroll
    for (int k = 0; k < E; ++k) {
      float v[kBlock];
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        const uint32_t w = half_word(c[i], T::kBytes == 4 ? k : k / 2);
        if constexpr (T::kBytes == 4)
          v[i] = __uint_as_float(w);
        else
          v[i] = (k & 1) ? hi_f<T>(w) : lo_f<T>(w);
        if constexpr (kConstSigns)
          if ((kSigns >> i) & 1u) v[i] = -v[i];
      }
      m_rht = max(m_rht, fwht16_absmax_unscaled(v));
    }
    if (a.plain0 || a.part_plain0) {
      // the 16 loads as raw 16-element blocks (two 8-byte loads a 16-byte chunk)
      constexpr int kRows = 2 * Layout<T>::kChunks;  // rows per block
#pragma unroll
      for (int i = 0; i < 16; i += kRows) {
        RawBlock<T> b;
#pragma unroll
        for (int j = 0; j < Layout<T>::kChunks; ++j)
          b.c[j] = make_uint4(c[i + 2 * j].x, c[i + 2 * j].y, c[i + 2 * j + 1].x, c[i + 2 * j + 1].y);
        m_plain = max(m_plain, raw_absmax_bits<T>(b));
      }
    }
    q += dq;
    g += dg;
    if (q >= nq) {
      q -= nq;
      ++g;
    }
  }
  block_reduce_amax(m_plain, a.plain0, a.plain1, a.part_plain0, a.part_plain1);
  // the transform's 0.25, once: max |0.25 y| = 0.25 max |y| (a multiply by 0.25 rounds
  // monotonically, so the max of the rounded products is the rounded product of the max)
  block_reduce_amax(__float_as_uint(__uint_as_float(m_rht) * 0.25f) & 0x7fffffffu, a.rht, nullptr, a.part_rht);
}

// NVFP4_QUANT_WORKSPACE=0: a job's workspace is not used (memsets and atomics), for
// before/after measurements in one process. Read at each call.
bool workspace_from_env() {
  const char* v = setting("NVFP4_QUANT_WORKSPACE");
  return !(v && v[0] == '0');
}

nvfp4_status_t memset_amax(float* p, cudaStream_t stream) {
  return p ? memset_async(p, sizeof(float), stream, "nvfp4 quantize (amax)") : NVFP4_SUCCESS;
}

// One amax kernel over `grid` CTAs. zero: the atomics' outputs hold anything and are zeroed
// by memsets first (partials need nothing).
template <class Kernel>
nvfp4_status_t launch(Kernel kernel, unsigned grid, const AmaxArgs& a, bool zero, cudaStream_t stream,
                      const char* what) {
  if (zero) {
    for (float* p : {a.plain0, a.plain1, a.rht})
      if (nvfp4_status_t s = memset_amax(p, stream); s != NVFP4_SUCCESS) return s;
  }
  kernel<<<grid, kThreads, 0, stream>>>(a);
  return check_launch(what);
}

// An amax destination: the output (atomics) or the direction's partials (workspace).
struct Dest {
  float* amax = nullptr;
  uint32_t* part = nullptr;
};

template <class T>
nvfp4_status_t run(const QuantJob& job, cudaStream_t stream, bool zero, AmaxParts* parts) {
  const bool is1d = job.cfg.block == NVFP4_BLOCK_1D;
  const bool row_rht = wanted(job.row) && is1d && (job.cfg.rht & NVFP4_RHT_ROWWISE);
  const bool col_rht = wanted(job.col) && is1d && (job.cfg.rht & NVFP4_RHT_COLUMNWISE);
  const bool use_parts = parts != nullptr && job.amax_ws != nullptr && workspace_from_env();
  Dest row_dst{job.row.amax}, col_dst{job.col.amax};
  if (use_parts) {
    row_dst = {nullptr, job.amax_ws};
    col_dst = {nullptr, job.amax_ws + kAmaxParts};
  }
  Dest plain[2];
  int np = 0;
  if (wanted(job.row) && !row_rht) plain[np++] = row_dst;
  if (wanted(job.col) && !col_rht) plain[np++] = col_dst;
  // the grid a direction's partials come from
  auto record = [&](const Dest& d, unsigned grid) {
    if (!use_parts || d.part == nullptr) return;
    if (d.part == job.amax_ws) {
      parts->row = d.part;
      parts->nrow = static_cast<int>(grid);
    } else {
      parts->col = d.part;
      parts->ncol = static_cast<int>(grid);
    }
  };
  auto capped = [&](unsigned grid) { return use_parts ? std::min<unsigned>(grid, kAmaxParts) : grid; };

  AmaxArgs a{job.x, job.rows, job.cols, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
             job.cfg.rht_sign_mask, nullptr, nullptr, tile_walks_ascending(job) ? 1 : 0};
  if (use_parts && job.advance != nullptr) {
    // the first of the (one or two) launches below takes the counter
    a.counter = job.advance;
    a.counter_value = reinterpret_cast<uint64_t*>(reinterpret_cast<char*>(job.amax_ws) + kCounterSlotOffset);
    parts->counter_value = a.counter_value;
  }
  auto set_plain = [&]() {
    a.plain0 = plain[0].amax;
    a.plain1 = plain[1].amax;
    a.part_plain0 = plain[0].part;
    a.part_plain1 = plain[1].part;
  };
  const int64_t units = job.rows * job.cols / kBlock;
  if (row_rht || !col_rht) {
    // Rows (plain and/or RHT along rows) in one flat pass.
    set_plain();
    const int64_t work = (units + 2 * kThreads - 1) / (2 * kThreads);
    nvfp4_status_t s;
    unsigned grid;
    if (row_rht) {
      a.rht = row_dst.amax;
      a.part_rht = row_dst.part;
      grid = capped(persistent_grid(amax_flat_kernel<T, true>, kThreads, 0, work));
      s = launch(amax_flat_kernel<T, true>, grid, a, zero && !use_parts, stream, "nvfp4 amax kernel");
      record(row_dst, grid);
    } else {
      grid = capped(persistent_grid(amax_flat_kernel<T, false>, kThreads, 0, work));
      s = launch(amax_flat_kernel<T, false>, grid, a, zero && !use_parts, stream, "nvfp4 amax kernel");
    }
    if (s != NVFP4_SUCCESS) return s;
    a.counter = a.counter_value = nullptr;  // taken by this launch
    for (int i = 0; i < np; ++i) record(plain[i], grid);
    np = 0;  // taken care of
    plain[0] = plain[1] = Dest{};
  }
  if (col_rht) {
    set_plain();
    a.rht = col_dst.amax;
    a.part_rht = col_dst.part;
    const int64_t strips = (job.cols / (kColUnitBytes / T::kBytes)) * ((job.rows + 15) / 16);
    // the recipe's signs compiled in (BF16, the training dtype), any others read at run time
    const auto kernel = std::is_same_v<T, BF16> && job.cfg.rht_sign_mask == core::kDefaultRhtSignMask
                            ? amax_colrht_kernel<T, core::kDefaultRhtSignMask>
                            : amax_colrht_kernel<T, kRuntimeSigns>;
    const unsigned grid = capped(persistent_grid(kernel, kThreads, 0, (strips + kThreads - 1) / kThreads));
    if (nvfp4_status_t s = launch(kernel, grid, a, zero && !use_parts, stream, "nvfp4 amax (columnwise RHT) kernel");
        s != NVFP4_SUCCESS)
      return s;
    for (int i = 0; i < np; ++i) record(plain[i], grid);
    record(col_dst, grid);
  }
  return NVFP4_SUCCESS;
}

}  // namespace

nvfp4_status_t zero_amax(const QuantJob& job, cudaStream_t stream) {
  for (const QuantOut* o : {&job.row, &job.col})
    if (wanted(*o))
      if (nvfp4_status_t s = memset_amax(o->amax, stream); s != NVFP4_SUCCESS) return s;
  return NVFP4_SUCCESS;
}

nvfp4_status_t launch_amax(const QuantJob& job, cudaStream_t stream, bool zero, AmaxParts* parts) {
  if (parts) *parts = AmaxParts{};
  switch (job.dtype) {
    case NVFP4_DTYPE_FLOAT32: return run<F32>(job, stream, zero, parts);
    case NVFP4_DTYPE_FLOAT16: return run<F16>(job, stream, zero, parts);
    case NVFP4_DTYPE_BFLOAT16: return run<BF16>(job, stream, zero, parts);
    default: return fail(NVFP4_ERROR_INVALID_ARGUMENT, "nvfp4 quantize: unsupported input dtype");
  }
}

}  // namespace nvfp4::detail::quant
