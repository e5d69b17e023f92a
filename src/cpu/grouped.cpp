// CPU reference of the grouped entry points: each group goes through the dense reference
// (cpu_quantize, cpu_gemm) on its own slice, so "grouped == a loop of dense calls" holds here by
// construction, and the kernels are tested against this. offs was checked on the host.
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/swizzle.h"
#include "grouped.h"

namespace nvfp4::detail {
namespace {

int64_t elt_bytes(nvfp4_dtype_t dt) {
  return dt == NVFP4_DTYPE_FLOAT32 ? 4 : dt == NVFP4_DTYPE_FLOAT64 ? 8 : dt == NVFP4_DTYPE_UINT8 ? 1 : 2;
}

// Group boundaries from a valid offs.
std::vector<int64_t> group_starts(const int32_t* offs, int64_t e) {
  std::vector<int64_t> s(static_cast<size_t>(e + 1), 0);
  for (int64_t g = 0; g < e; ++g) s[g + 1] = offs[g];
  return s;
}

}  // namespace

nvfp4_status_t cpu_grouped_quantize(const GroupedQuantJob& job) {
  const int64_t T = job.t, K = job.k, E = job.e;
  const std::vector<int64_t> start = group_starts(job.offs, E);
  const int64_t cp = core::swizzled_cols(K / 16);
  const int64_t kp = core::swizzled_rows(K);
  const int64_t in_bytes = elt_bytes(job.dtype);
  const auto* x = static_cast<const uint8_t*>(job.x);
  // Every byte outside the groups' blocks is zero (rows of no group, padding, the unused tail).
  if (job.row.amax) {
    std::fill_n(job.row.data, T * K / 2, uint8_t{0});
    std::fill_n(job.row.scales, job.row_scale_bytes, uint8_t{0});
  }
  if (job.col.amax) {
    std::fill_n(job.col.data, job.col_data_bytes, uint8_t{0});
    std::fill_n(job.col.scales, job.col_scale_bytes, uint8_t{0});
  }
  int64_t srow = 0, ptok = 0, qcol = 0;  // running scale-row, padded-token and scale-column offsets
  std::vector<uint8_t> padded;
  for (int64_t g = 0; g < E; ++g) {
    const int64_t s = start[g], m = start[g + 1] - start[g];
    const int64_t mp = core::round_up(m, kGroupTokenAlign);
    QuantJob q;
    q.dtype = job.dtype;
    q.cols = K;
    q.cfg = job.cfg;
    q.cfg.offset = job.cfg.offset + (static_cast<uint64_t>(g) << 32);
    if (job.row.amax) job.row.amax[g] = 0.0f;
    if (job.col.amax) job.col.amax[g] = 0.0f;
    if (m > 0 && K > 0 && job.row.amax) {
      q.x = x + s * K * in_bytes;
      q.rows = m;
      q.row = {job.row.data + s * K / 2, job.row.scales + srow * cp, job.row.amax + g};
      q.col = {};
      if (nvfp4_status_t st = cpu_quantize(q); st != NVFP4_SUCCESS) return st;
    }
    if (m > 0 && K > 0 && job.col.amax) {
      // x_g with zero tokens appended up to Mp_g, so the dense columnwise quantization (which
      // pads to 16 only) sees the grouped layout's padding, before its Hadamard transform.
      padded.assign(static_cast<size_t>(mp * K * in_bytes), uint8_t{0});
      std::memcpy(padded.data(), x + s * K * in_bytes, static_cast<size_t>(m * K * in_bytes));
      q.x = padded.data();
      q.rows = mp;
      q.row = {};
      q.col = {job.col.data + K * ptok / 2, job.col.scales + kp * qcol, job.col.amax + g};
      if (nvfp4_status_t st = cpu_quantize(q); st != NVFP4_SUCCESS) return st;
    }
    srow += core::round_up(m, 128);
    ptok += mp;
    qcol += core::swizzled_cols(mp / 16);
  }
  return NVFP4_SUCCESS;
}

nvfp4_status_t cpu_grouped_gemm(const GroupedGemmJob& job) {
  const int64_t E = job.e, N = job.n, K = job.k;
  const std::vector<int64_t> start = group_starts(job.offs, E);
  const int64_t ob = elt_bytes(job.d_dtype);
  auto* d = static_cast<uint8_t*>(job.d);
  GemmJob g1;
  g1.format = Format::kNvfp4;
  g1.layout = NVFP4_SCALES_SWIZZLED;
  g1.d_dtype = job.d_dtype;
  if (job.kind == NVFP4_GROUPED_RAGGED_M) {
    // D rows of no group are 0 (every element of D is written).
    std::fill_n(d, job.t * N * ob, uint8_t{0});
    const int64_t cpa = core::swizzled_cols(K / 16);
    int64_t srow = 0;
    for (int64_t g = 0; g < E; ++g) {
      const int64_t s = start[g], m = start[g + 1] - start[g];
      if (m > 0 && N > 0) {
        g1.a = job.a + s * K / 2;
        g1.sfa = job.sfa + srow * cpa;
        g1.amax_a = job.amax_a + g;
        g1.b = job.b + g * N * K / 2;
        g1.sfb = job.sfb + g * core::swizzled_rows(N) * cpa;
        g1.amax_b = job.amax_b + g;
        g1.m = m;
        g1.n = N;
        g1.k = K;
        g1.d = d + s * N * ob;
        if (nvfp4_status_t st = cpu_gemm(g1); st != NVFP4_SUCCESS) return st;
      }
      srow += core::round_up(m, 128);
    }
    return NVFP4_SUCCESS;
  }
  // RAGGED_K: D[g] [N, K] over group g's padded tokens; an empty group gives zeros.
  std::fill_n(d, E * N * K * ob, uint8_t{0});
  const int64_t np = core::swizzled_rows(N), kp = core::swizzled_rows(K);
  int64_t ptok = 0, qcol = 0;
  for (int64_t g = 0; g < E; ++g) {
    const int64_t m = start[g + 1] - start[g];
    const int64_t mp = core::round_up(m, kGroupTokenAlign);
    if (mp > 0 && N > 0 && K > 0) {
      g1.a = job.a + N * ptok / 2;
      g1.sfa = job.sfa + np * qcol;
      g1.amax_a = job.amax_a + g;
      g1.b = job.b + K * ptok / 2;
      g1.sfb = job.sfb + kp * qcol;
      g1.amax_b = job.amax_b + g;
      g1.m = N;
      g1.n = K;
      g1.k = mp;
      g1.d = d + g * N * K * ob;
      if (nvfp4_status_t st = cpu_gemm(g1); st != NVFP4_SUCCESS) return st;
    }
    ptok += mp;
    qcol += core::swizzled_cols(mp / 16);
  }
  return NVFP4_SUCCESS;
}

}  // namespace nvfp4::detail
