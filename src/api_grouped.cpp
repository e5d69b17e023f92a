// extern "C" entry points of the grouped (mixture-of-experts) section of nvfp4.h: validate every
// descriptor and the group structure, then hand the work to the CPU reference, the CUDA kernels
// or (GEMM) the runner table. offs is checked on the host only for CPU tensors; for CUDA tensors
// only where it lives is checked (a pointer query, no synchronization), and the kernels clamp it.
#include <cstring>
#include <string>
#include <vector>

#include "core/swizzle.h"
#include "gemm/backends.h"
#include "grouped.h"
#include "settings.h"
#include "validate.h"

#if defined(NVFP4_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

using namespace nvfp4::detail;

namespace {

// The checks of nvfp4_quantize's config, plus the grouped layouts' restrictions (swizzled scales
// always; 2D tiles only where groups are uniform).
nvfp4_quant_config_t grouped_config(const nvfp4_quant_config_t* cfg, bool allow_2d) {
  if (!cfg) invalid("cfg: null");
  nvfp4_quant_config_t c;
  std::memcpy(&c, cfg, sizeof c);  // a byte copy: the enum fields are not loaded as enums yet
  const nvfp4_block_t block = checked_enum(cfg->block, NVFP4_BLOCK_2D + 1, "cfg.block", "1D or 2D");
  const nvfp4_rounding_t rounding =
      checked_enum(cfg->rounding, NVFP4_ROUND_STOCHASTIC + 1, "cfg.rounding", "NEAREST or STOCHASTIC");
  const nvfp4_scale_layout_t layout = checked_layout(cfg->scale_layout, "cfg.scale_layout");
  if (cfg->rht & ~(NVFP4_RHT_ROWWISE | NVFP4_RHT_COLUMNWISE))
    invalid("cfg.rht: unknown bits " + std::to_string(cfg->rht) +
            " (expected a mask of NVFP4_RHT_ROWWISE | NVFP4_RHT_COLUMNWISE)");
  if (cfg->rht && block == NVFP4_BLOCK_2D) invalid("cfg.rht: the Hadamard transform applies to 1D blocks only");
  if (cfg->rht_sign_mask > 0xffffu) invalid("cfg.rht_sign_mask: has bits above bit 15 (one bit per lane of 16)");
  if (cfg->offset_device && reinterpret_cast<uintptr_t>(cfg->offset_device) % alignof(uint64_t) != 0)
    invalid("cfg.offset_device: must be 8-byte aligned");
  // The fields nvfp4_quantize alone takes: refused here when set, never ignored.
  if (enum_bits(cfg->scale_select) != NVFP4_SELECT_NONE)
    invalid("cfg.scale_select: the grouped and batched forms quantize with the default block scales (NONE) only");
  if (cfg->e4m3_bound != 448u)
    invalid("cfg.e4m3_bound: the grouped and batched forms take 448 (the default) only, got " +
            std::to_string(cfg->e4m3_bound));
  if (enum_bits(cfg->amax_mode) != NVFP4_AMAX_TENSOR)
    invalid("cfg.amax_mode: the grouped and batched forms compute each group's amax (TENSOR, the default) only");
  if (cfg->amax_in) invalid("cfg.amax_in: set, but the grouped and batched forms take no given amax");
  if (cfg->offset_counter)
    invalid("cfg.offset_counter: not taken by the grouped and batched forms (give the counter as "
            "cfg.offset_device and advance it after the call)");
  if (layout != NVFP4_SCALES_SWIZZLED)
    invalid("cfg.scale_layout: grouped and batched tensors store swizzled scales only (a block per group)");
  if (block == NVFP4_BLOCK_2D && !allow_2d)
    invalid("cfg.block: 16x16 tiles are for the batched (weight) form, nvfp4_batched_quantize; ragged groups "
            "are quantized in 1D blocks");
  c.block = block;
  c.rounding = rounding;
  c.scale_layout = layout;
  return c;
}

// Where a raw pointer of the group structure lives must be where the tensors live: a device
// pointer for CUDA tensors (on their device), host memory for CPU tensors. A pointer query does
// not synchronize. Builds without CUDA can only take CPU tensors and cannot ask.
void check_pointer_space(const void* p, const nvfp4_tensor_t& ref, const char* name) {
#if defined(NVFP4_WITH_CUDA)
  cudaPointerAttributes attr{};
  // A query, legal while a stream captures a CUDA graph; the thread's capture mode is relaxed
  // around it so that a strict (global) capture cannot count it as a potentially unsafe call.
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  const bool exchanged = cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess;
  if (!exchanged) (void)cudaGetLastError();
  const cudaError_t e = cudaPointerGetAttributes(&attr, p);
  if (exchanged) (void)cudaThreadExchangeStreamCaptureMode(&mode);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // no driver or an unknown pointer: host memory as far as CUDA knows
    attr.type = cudaMemoryTypeUnregistered;
  }
  const bool device = attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
  if (ref.device_type == NVFP4_DEVICE_CUDA) {
    if (!device)
      invalid(std::string(name) + ": must be CUDA device memory (the tensors are on CUDA device " +
              std::to_string(ref.device_id) + "), got a host pointer");
    if (attr.device != ref.device_id)
      invalid(std::string(name) + ": on CUDA device " + std::to_string(attr.device) + ", the tensors are on " +
              std::to_string(ref.device_id));
  } else if (attr.type == cudaMemoryTypeDevice) {
    invalid(std::string(name) + ": a CUDA device pointer, but the tensors are on the CPU");
  }
#else
  (void)p;
  (void)ref;
  (void)name;
#endif
}

// The group structure: count, tokens, pointers; where the pointers live and, on the CPU, the
// contents of offs, unless `query` (a workspace-size query touches no memory and may be asked
// with placeholder addresses).
void check_groups(const nvfp4_groups_t* groups, const nvfp4_tensor_t& ref, int64_t tokens, const char* tokens_of,
                  bool query = false) {
  if (!groups) invalid("groups: null");
  if (groups->count < 1) invalid("groups.count: must be >= 1, got " + std::to_string(groups->count));
  if (groups->count > INT32_MAX) invalid("groups.count: must be below 2^31, got " + std::to_string(groups->count));
  if (groups->tokens != tokens)
    invalid("groups.tokens: " + std::to_string(groups->tokens) + " differs from " + tokens_of + " (" +
            std::to_string(tokens) + ")");
  if (tokens > INT32_MAX)
    invalid("groups.tokens: int32 offsets address at most 2^31 - 1 rows, got " + std::to_string(tokens));
  if (!groups->offs) invalid("groups.offs: null");
  if (reinterpret_cast<uintptr_t>(groups->offs) % 4 != 0) invalid("groups.offs: must be 4-byte aligned (int32)");
  if (groups->offs_error && reinterpret_cast<uintptr_t>(groups->offs_error) % 4 != 0)
    invalid("groups.offs_error: must be 4-byte aligned (int32)");
  if (query) return;
  check_pointer_space(groups->offs, ref, "groups.offs");
  if (groups->offs_error) check_pointer_space(groups->offs_error, ref, "groups.offs_error");
  if (ref.device_type == NVFP4_DEVICE_CPU) {
    int64_t prev = 0;
    for (int64_t g = 0; g < groups->count; ++g) {
      const int64_t v = groups->offs[g];
      const std::string at = "groups.offs: offs[" + std::to_string(g) + "] = " + std::to_string(v);
      if (v < 0) invalid(at + " is negative");
      if (v < prev) invalid(at + " is below offs[" + std::to_string(g - 1) + "] = " + std::to_string(prev) +
                            " (offsets are cumulative ends, non-decreasing)");
      if (v > tokens) invalid(at + " is past the end of " + tokens_of + " (" + std::to_string(tokens) + " rows)");
      prev = v;
    }
  }
}

ByteRange raw_range(const void* p, int64_t bytes, const char* name) {
  const uintptr_t b = reinterpret_cast<uintptr_t>(p);
  return {name, b, b + static_cast<uintptr_t>(bytes)};
}

void check_shape1(const nvfp4_tensor_t* t, const char* name, int64_t n) {
  if (t->ndim != 1 || t->shape[0] != n)
    invalid(std::string(name) + ": expected shape [" + std::to_string(n) + "], got " + shape_str(*t));
}

void check_shape3(const nvfp4_tensor_t* t, const char* name, int64_t a, int64_t b, int64_t c) {
  if (t->ndim != 3 || t->shape[0] != a || t->shape[1] != b || t->shape[2] != c)
    invalid(std::string(name) + ": expected shape [" + std::to_string(a) + ", " + std::to_string(b) + ", " +
            std::to_string(c) + "], got " + shape_str(*t));
}

// The descriptors of one grouped direction: dtypes, device, amax [E]. Shapes are the caller's.
void check_direction_common(const nvfp4_tensor_t& ref, const nvfp4_grouped_quantized_t* q, const std::string& n,
                            int64_t e) {
  check_descriptor(&q->data, (n + ".data").c_str());
  check_descriptor(&q->scales, (n + ".scales").c_str());
  check_descriptor(&q->amax, (n + ".amax").c_str(), 4);
  if (q->data.dtype != NVFP4_DTYPE_UINT8)
    invalid(n + ".data: dtype must be uint8 (packed E2M1 pairs), got " + dtype_name(q->data.dtype));
  if (!is_byte(q->scales.dtype))
    invalid(n + ".scales: dtype must be float8_e4m3fn or uint8, got " + dtype_name(q->scales.dtype));
  if (q->amax.dtype != NVFP4_DTYPE_FLOAT32)
    invalid(n + ".amax: dtype must be float32, got " + dtype_name(q->amax.dtype));
  check_shape1(&q->amax, (n + ".amax").c_str(), e);
  check_same_device(ref, &q->data, (n + ".data").c_str());
  check_same_device(ref, &q->scales, (n + ".scales").c_str());
  check_same_device(ref, &q->amax, (n + ".amax").c_str());
}

// Shapes of a grouped rowwise direction of [T, K] in E groups.
void check_grouped_rowwise(const nvfp4_tensor_t& ref, const nvfp4_grouped_quantized_t* q, const char* name,
                           int64_t t, int64_t k, int64_t e) {
  const std::string n(name);
  check_direction_common(ref, q, n, e);
  int64_t sr = 0;  // roundup(T + 127 E, 128)
  if (!nvfp4::core::size_add(t, checked_mul(127, e, n), &sr)) invalid(n + ": size overflows int64");
  sr = checked_round_up(sr, 128, n + ".scales");
  const int64_t cp = checked_round_up(k / 16, 4, n + ".scales");
  checked_mul(sr, cp, n + ".scales");
  check_shape2(&q->data, (n + ".data").c_str(), t, k / 2);
  check_shape2(&q->scales, (n + ".scales").c_str(), sr, cp);
}

// Shapes of a grouped columnwise direction of [T, F] (F features) in E groups.
void check_grouped_columnwise(const nvfp4_tensor_t& ref, const nvfp4_grouped_quantized_t* q, const char* name,
                              int64_t t, int64_t f, int64_t e) {
  const std::string n(name);
  check_direction_common(ref, q, n, e);
  int64_t tp = 0, tq = 0;
  if (!nvfp4::core::size_add(t, checked_mul(kGroupTokenAlign - 1, e, n), &tp) ||
      !nvfp4::core::size_add(t, checked_mul(63, e, n), &tq))
    invalid(n + ": size overflows int64");
  const int64_t data_bytes = checked_mul(f, tp, n + ".data") / 2;
  const int64_t fp = checked_round_up(f, 128, n + ".scales");
  const int64_t scale_bytes = checked_mul(fp, tq / 16, n + ".scales");
  check_shape1(&q->data, (n + ".data").c_str(), data_bytes);
  check_shape1(&q->scales, (n + ".scales").c_str(), scale_bytes);
}

// Shapes of a batched direction: E tensors [rows, cols] (cols % 16 == 0), as nvfp4_quantize
// writes each.
void check_batched(const nvfp4_tensor_t& ref, const nvfp4_grouped_quantized_t* q, const char* name, int64_t e,
                   int64_t rows, int64_t cols) {
  const std::string n(name);
  check_direction_common(ref, q, n, e);
  int64_t rp = 0, cp = 0;
  if (!nvfp4::core::swizzled_shape_checked(rows, cols / 16, &rp, &cp)) invalid(n + ".scales: size overflows int64");
  checked_mul(checked_mul(e, rp, n + ".scales"), cp, n + ".scales");
  checked_mul(checked_mul(e, rows, n + ".data"), cols / 2, n + ".data");
  check_shape3(&q->data, (n + ".data").c_str(), e, rows, cols / 2);
  check_shape3(&q->scales, (n + ".scales").c_str(), e, rp, cp);
}

void push_direction(std::vector<ByteRange>& outs, const nvfp4_grouped_quantized_t* q, const char* data,
                    const char* scales, const char* amax) {
  outs.push_back(byte_range(q->data, data));
  outs.push_back(byte_range(q->scales, scales));
  outs.push_back(byte_range(q->amax, amax));
}

// Outputs pairwise disjoint and disjoint from every input range.
void check_outputs(const std::vector<ByteRange>& outs, const std::vector<ByteRange>& ins) {
  for (size_t i = 0; i < outs.size(); ++i) {
    for (const ByteRange& r : ins) check_disjoint(outs[i], r);
    for (size_t j = 0; j < i; ++j) check_disjoint(outs[i], outs[j]);
  }
}

void input_ranges(const nvfp4_tensor_t& input, const nvfp4_quant_config_t& cfg, std::vector<ByteRange>& ins) {
  ins.push_back(byte_range(input, "input"));
  if (cfg.offset_device) ins.push_back(raw_range(cfg.offset_device, sizeof(uint64_t), "cfg.offset_device"));
}

}  // namespace

extern "C" {

NVFP4_API nvfp4_status_t nvfp4_grouped_quantize(const nvfp4_tensor_t* input, const nvfp4_groups_t* groups,
                                                const nvfp4_quant_config_t* cfg_in,
                                                nvfp4_grouped_quantized_t* rowwise,
                                                nvfp4_grouped_quantized_t* columnwise, nvfp4_stream_t stream) {
  return guarded([&]() -> nvfp4_status_t {
    const SettingsScope settings(check_quant_settings());
    check_descriptor(input, "input");
    const nvfp4_quant_config_t cfg = grouped_config(cfg_in, false);
    if (!rowwise && !columnwise) invalid("rowwise/columnwise: at least one output must be requested");
    if (!is_float_io(input->dtype))
      invalid(std::string("input: dtype must be float32, float16 or bfloat16, got ") + dtype_name(input->dtype));
    if (input->ndim < 1) invalid("input: must have at least 1 dimension");
    GroupedQuantJob job;
    job.x = input->data;
    job.dtype = input->dtype;
    job.k = input->shape[input->ndim - 1];
    job.t = 1;
    for (int i = 0; i + 1 < input->ndim; ++i) job.t = checked_mul(job.t, input->shape[i], "input");
    if (job.k % 16 != 0) invalid("input: last dimension must be a multiple of 16, got " + std::to_string(job.k));
    check_groups(groups, *input, job.t, "the input's rows");
    job.e = groups->count;
    job.offs = groups->offs;
    job.offs_error = groups->offs_error;
    job.cfg = cfg;
    std::vector<ByteRange> outs, ins;
    input_ranges(*input, cfg, ins);
    ins.push_back(raw_range(groups->offs, 4 * job.e, "groups.offs"));
    if (groups->offs_error) outs.push_back(raw_range(groups->offs_error, 4, "groups.offs_error"));
    if (rowwise) {
      check_grouped_rowwise(*input, rowwise, "rowwise", job.t, job.k, job.e);
      job.row = {static_cast<uint8_t*>(rowwise->data.data), static_cast<uint8_t*>(rowwise->scales.data),
                 static_cast<float*>(rowwise->amax.data)};
      job.row_scale_bytes = nbytes(rowwise->scales);
      push_direction(outs, rowwise, "rowwise.data", "rowwise.scales", "rowwise.amax");
    }
    if (columnwise) {
      check_grouped_columnwise(*input, columnwise, "columnwise", job.t, job.k, job.e);
      job.col = {static_cast<uint8_t*>(columnwise->data.data), static_cast<uint8_t*>(columnwise->scales.data),
                 static_cast<float*>(columnwise->amax.data)};
      job.col_data_bytes = nbytes(columnwise->data);
      job.col_scale_bytes = nbytes(columnwise->scales);
      push_direction(outs, columnwise, "columnwise.data", "columnwise.scales", "columnwise.amax");
    }
    check_outputs(outs, ins);
    require_cuda_build(*input, "input");
    if (on_cuda(*input)) {
#if defined(NVFP4_WITH_CUDA)
      DeviceGuard g(*input);
      return cuda_grouped_quantize(job, stream);
#endif
    }
    (void)stream;
    if (job.offs_error) *job.offs_error = 0;  // checked above
    return cpu_grouped_quantize(job);
  });
}

NVFP4_API nvfp4_status_t nvfp4_batched_quantize(const nvfp4_tensor_t* input, const nvfp4_quant_config_t* cfg_in,
                                                nvfp4_grouped_quantized_t* rowwise,
                                                nvfp4_grouped_quantized_t* columnwise, nvfp4_stream_t stream) {
  return guarded([&]() -> nvfp4_status_t {
    const SettingsScope settings(check_quant_settings());
    check_descriptor(input, "input");
    const nvfp4_quant_config_t cfg = grouped_config(cfg_in, true);
    if (!rowwise && !columnwise) invalid("rowwise/columnwise: at least one output must be requested");
    if (!is_float_io(input->dtype))
      invalid(std::string("input: dtype must be float32, float16 or bfloat16, got ") + dtype_name(input->dtype));
    if (input->ndim != 3) invalid("input: must have 3 dimensions [E, N, K], got " + shape_str(*input));
    const int64_t E = input->shape[0], N = input->shape[1], K = input->shape[2];
    if (E < 1) invalid("input: E (dim 0) must be >= 1");
    if (K % 16 != 0) invalid("input: K (dim 2) must be a multiple of 16, got " + std::to_string(K));
    // Each tensor's slices then start 16-byte aligned, as the kernels read and write them.
    if (N % 16 != 0) invalid("input: N (dim 1) must be a multiple of 16, got " + std::to_string(N));
    std::vector<ByteRange> outs, ins;
    input_ranges(*input, cfg, ins);
    const int64_t np = checked_round_up(N, 16, "columnwise");
    if (rowwise) {
      check_batched(*input, rowwise, "rowwise", E, N, K);
      push_direction(outs, rowwise, "rowwise.data", "rowwise.scales", "rowwise.amax");
    }
    if (columnwise) {
      check_batched(*input, columnwise, "columnwise", E, K, np);
      push_direction(outs, columnwise, "columnwise.data", "columnwise.scales", "columnwise.amax");
    }
    check_outputs(outs, ins);
    require_cuda_build(*input, "input");
    if (on_cuda(*input)) {
#if defined(NVFP4_WITH_CUDA)
      BatchedQuantJob job;
      job.x = input->data;
      job.dtype = input->dtype;
      job.e = E;
      job.n = N;
      job.k = K;
      job.cfg = cfg;
      if (rowwise) {
        job.row = {static_cast<uint8_t*>(rowwise->data.data), static_cast<uint8_t*>(rowwise->scales.data),
                   static_cast<float*>(rowwise->amax.data)};
        job.row_scale_bytes = nbytes(rowwise->scales);
      }
      if (columnwise) {
        job.col = {static_cast<uint8_t*>(columnwise->data.data), static_cast<uint8_t*>(columnwise->scales.data),
                   static_cast<float*>(columnwise->amax.data)};
        job.col_scale_bytes = nbytes(columnwise->scales);
      }
      DeviceGuard dg(*input);
      return cuda_batched_quantize(job, stream);
#endif
    }
    // The CPU reference: nvfp4_quantize's, tensor by tensor.
    (void)stream;
    const int64_t in_bytes = dtype_bytes(input->dtype);
    const int64_t cp = nvfp4::core::swizzled_cols(K / 16), kp = nvfp4::core::swizzled_rows(K);
    const int64_t ncp = nvfp4::core::swizzled_cols(np / 16), nrp = nvfp4::core::swizzled_rows(N);
    for (int64_t g = 0; g < E; ++g) {
      QuantJob q;
      q.x = static_cast<const uint8_t*>(input->data) + g * N * K * in_bytes;
      q.dtype = input->dtype;
      q.rows = N;
      q.cols = K;
      q.cfg = cfg;
      q.cfg.offset = cfg.offset + (static_cast<uint64_t>(g) << 32);
      if (rowwise)
        q.row = {static_cast<uint8_t*>(rowwise->data.data) + g * N * K / 2,
                 static_cast<uint8_t*>(rowwise->scales.data) + g * nrp * cp,
                 static_cast<float*>(rowwise->amax.data) + g};
      if (columnwise)
        q.col = {static_cast<uint8_t*>(columnwise->data.data) + g * K * np / 2,
                 static_cast<uint8_t*>(columnwise->scales.data) + g * kp * ncp,
                 static_cast<float*>(columnwise->amax.data) + g};
      if (N == 0 || K == 0) {  // an empty tensor: amax 0, nothing else to write (as nvfp4_quantize)
        if (q.row.amax) *q.row.amax = 0.0f;
        if (q.col.amax) *q.col.amax = 0.0f;
        continue;
      }
      const nvfp4_status_t st = cpu_quantize(q);
      if (st != NVFP4_SUCCESS) return st;
    }
    return NVFP4_SUCCESS;
  });
}

}  // extern "C"

namespace {

// Checks every part of the grouped GEMM's arguments; returns the grouped job and the byte ranges
// it reads (for the workspace overlap check).
GroupedGemmJob make_grouped_job(const nvfp4_grouped_gemm_args_t* args, std::vector<ByteRange>* reads, bool query) {
  if (!args) invalid("args: null");
  const nvfp4_grouped_kind_t kind =
      checked_enum(args->kind, NVFP4_GROUPED_RAGGED_K + 1, "kind", "RAGGED_M or RAGGED_K");
  checked_enum(args->backend, NVFP4_BACKEND_CUDNN + 1, "backend", "AUTO, REFERENCE, CUTLASS or CUDNN");
  if (!args->a) invalid("a: null");
  if (!args->b) invalid("b: null");
  check_descriptor(args->d, "d");
  const nvfp4_tensor_t& ref = *args->d;
  if (!is_float_io(ref.dtype))
    invalid(std::string("d: dtype must be float32, float16 or bfloat16, got ") + dtype_name(ref.dtype));
  const nvfp4_groups_t* groups = &args->groups;
  if (groups->count < 1) invalid("groups.count: must be >= 1, got " + std::to_string(groups->count));
  const int64_t E = groups->count;
  GroupedGemmJob job;
  job.kind = kind;
  job.e = E;
  job.t = groups->tokens;
  if (job.t < 0) invalid("groups.tokens: negative");
  check_descriptor(&args->a->data, "a.data");
  check_descriptor(&args->b->data, "b.data");
  if (kind == NVFP4_GROUPED_RAGGED_M) {
    if (args->a->data.ndim != 2) invalid("a.data: must have 2 dimensions [T, K/2], got " + shape_str(args->a->data));
    if (args->b->data.ndim != 3)
      invalid("b.data: must have 3 dimensions [E, N, K/2] (a batched tensor), got " + shape_str(args->b->data));
    job.k = checked_mul(args->a->data.shape[1], 2, "a.data");
    job.n = args->b->data.shape[1];
    if (args->b->data.shape[0] != E)
      invalid("b.data: " + std::to_string(args->b->data.shape[0]) + " tensors for " + std::to_string(E) + " groups");
    const int64_t kb = checked_mul(args->b->data.shape[2], 2, "b.data");
    if (kb != job.k) invalid("b: K mismatch: a has K=" + std::to_string(job.k) + ", b has K=" + std::to_string(kb));
    if (job.k % 16 != 0 || job.k == 0)
      invalid("a: K must be a positive multiple of 16, got " + std::to_string(job.k));
    check_groups(groups, ref, args->a->data.shape[0], "a's rows", query);
    check_grouped_rowwise(ref, args->a, "a", job.t, job.k, E);
    check_batched(ref, args->b, "b", E, job.n, job.k);
    check_shape2(args->d, "d", job.t, job.n);
  } else {
    if (args->a->data.ndim != 1 || args->b->data.ndim != 1)
      invalid("a.data/b.data: the ragged-K GEMM takes grouped columnwise directions (1 dimension each)");
    if (ref.ndim != 3 || ref.shape[0] != E)
      invalid("d: expected shape [" + std::to_string(E) + ", N, K], got " + shape_str(ref));
    job.n = ref.shape[1];
    job.k = ref.shape[2];
    check_groups(groups, ref, job.t, "groups.tokens", query);
    check_grouped_columnwise(ref, args->a, "a", job.t, job.n, E);
    check_grouped_columnwise(ref, args->b, "b", job.t, job.k, E);
  }
  check_same_device(ref, &args->a->data, "a.data");
  check_same_device(ref, &args->b->data, "b.data");
  job.a = static_cast<const uint8_t*>(args->a->data.data);
  job.sfa = static_cast<const uint8_t*>(args->a->scales.data);
  job.amax_a = static_cast<const float*>(args->a->amax.data);
  job.b = static_cast<const uint8_t*>(args->b->data.data);
  job.sfb = static_cast<const uint8_t*>(args->b->scales.data);
  job.amax_b = static_cast<const float*>(args->b->amax.data);
  job.offs = groups->offs;
  job.offs_error = groups->offs_error;
  job.d = ref.data;
  job.d_dtype = ref.dtype;
  std::vector<ByteRange> in = {byte_range(args->a->data, "a.data"),   byte_range(args->a->scales, "a.scales"),
                               byte_range(args->a->amax, "a.amax"),   byte_range(args->b->data, "b.data"),
                               byte_range(args->b->scales, "b.scales"), byte_range(args->b->amax, "b.amax"),
                               raw_range(groups->offs, 4 * E, "groups.offs")};
  const ByteRange d = byte_range(ref, "d");
  for (const ByteRange& r : in) check_disjoint(d, r);
  if (groups->offs_error) {
    const ByteRange oe = raw_range(groups->offs_error, 4, "groups.offs_error");
    check_disjoint(oe, d);
    for (const ByteRange& r : in) check_disjoint(oe, r);
    in.push_back(oe);
  }
  require_cuda_build(ref, "d");
  if (reads) {
    *reads = std::move(in);
    reads->push_back(d);
  }
  return job;
}

GemmJob wrap(const GroupedGemmJob& g) {
  GemmJob job;
  job.format = Format::kNvfp4Grouped;
  job.m = g.kind == NVFP4_GROUPED_RAGGED_M ? g.t : g.n;
  job.n = g.kind == NVFP4_GROUPED_RAGGED_M ? g.n : g.k;
  job.k = g.kind == NVFP4_GROUPED_RAGGED_M ? g.k : g.t;
  job.d = g.d;
  job.d_dtype = g.d_dtype;
  job.grouped = &g;
  return job;
}

}  // namespace

extern "C" {

NVFP4_API nvfp4_status_t nvfp4_grouped_gemm_workspace_size(const nvfp4_grouped_gemm_args_t* args, size_t* bytes) {
  return guarded([&]() -> nvfp4_status_t {
    if (!bytes) invalid("bytes: null");
    *bytes = 0;
    const SettingsScope settings(check_gemm_settings());
    const GroupedGemmJob g = make_grouped_job(args, nullptr, true);
    const GemmJob job = wrap(g);
    if (on_cuda(*args->d)) {
#if defined(NVFP4_WITH_CUDA)
      DeviceGuard dg(*args->d);
      return gemm_workspace_size(job, args->backend, true, bytes);
#endif
    }
    return gemm_workspace_size(job, args->backend, false, bytes);
  });
}

NVFP4_API nvfp4_status_t nvfp4_grouped_gemm(const nvfp4_grouped_gemm_args_t* args, void* workspace,
                                            size_t workspace_bytes, nvfp4_stream_t stream) {
  return guarded([&]() -> nvfp4_status_t {
    const SettingsScope settings(check_gemm_settings());
    std::vector<ByteRange> buffers;
    const GroupedGemmJob g = make_grouped_job(args, &buffers, false);
    const GemmJob job = wrap(g);
    const bool cuda = on_cuda(*args->d);
    if (workspace_bytes > 0) {
      if (!workspace) invalid("workspace: null with workspace_bytes = " + std::to_string(workspace_bytes));
      const uintptr_t w = reinterpret_cast<uintptr_t>(workspace);
      if (cuda && w % 256 != 0) invalid("workspace: CUDA pointer must be 256-byte aligned");
      if (workspace_bytes > static_cast<size_t>(nvfp4::core::kInt64Max) || w + workspace_bytes < w)
        invalid("workspace: workspace_bytes = " + std::to_string(workspace_bytes) + " runs past the address space");
      const ByteRange ws{"workspace", w, w + workspace_bytes};
      for (const ByteRange& r : buffers) check_disjoint(ws, r);
    }
    if (cuda) {
#if defined(NVFP4_WITH_CUDA)
      DeviceGuard dg(*args->d);
      return gemm_run(job, args->backend, true, workspace, workspace_bytes, stream);
#endif
    }
    if (g.offs_error) *g.offs_error = 0;  // checked on the host
    return gemm_run(job, args->backend, false, workspace, workspace_bytes, stream);
  });
}

}  // extern "C"

namespace nvfp4::detail {
// The reference row of the runner table for grouped jobs.
nvfp4_status_t grouped_reference_run(const GemmJob& job, int, void*, size_t, nvfp4_stream_t) {
  return cpu_grouped_gemm(*job.grouped);
}
}  // namespace nvfp4::detail
