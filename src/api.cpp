// extern "C" entry points: validate every descriptor, dispatch to the CPU reference or
// the CUDA kernels, turn any failure into a status plus a thread-local message.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "core/rht.h"
#include "core/scale.h"
#include "core/swizzle.h"
#include "gemm/backends.h"
#include "internal.h"
#include "settings.h"
#include "validate.h"

#if defined(NVFP4_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

#ifndef NVFP4_CUDA_ARCHS_STRING
#define NVFP4_CUDA_ARCHS_STRING ""
#endif

namespace nvfp4::detail {
namespace {
thread_local std::string g_last_error;
}  // namespace

nvfp4_status_t fail(nvfp4_status_t status, const std::string& message) {
  g_last_error = message;
  return status;
}
void clear_error() { g_last_error.clear(); }

}  // namespace nvfp4::detail

namespace {
std::string hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%x", v);
  return buf;
}
}  // namespace

using namespace nvfp4::detail;

extern "C" {

NVFP4_API void nvfp4_quant_config_default(nvfp4_quant_config_t* cfg) {
  if (!cfg) return;
  cfg->block = NVFP4_BLOCK_1D;
  cfg->rounding = NVFP4_ROUND_NEAREST;
  cfg->scale_layout = NVFP4_SCALES_SWIZZLED;
  cfg->rht = NVFP4_RHT_NONE;
  cfg->rht_sign_mask = nvfp4::core::kDefaultRhtSignMask;
  cfg->seed = 0;
  cfg->offset = 0;
  cfg->offset_device = nullptr;
  cfg->scale_select = NVFP4_SELECT_NONE;
  cfg->e4m3_bound = 448;
  cfg->amax_mode = NVFP4_AMAX_TENSOR;
  cfg->amax_in = nullptr;
}

NVFP4_API uint32_t nvfp4_default_rht_sign_mask(void) { return nvfp4::core::kDefaultRhtSignMask; }

namespace {

// The validated parts of a quantization config: enums checked as integers first.
nvfp4_quant_config_t checked_config(const nvfp4_quant_config_t* cfg) {
  if (!cfg) invalid("cfg: null");
  nvfp4_quant_config_t c;
  std::memcpy(&c, cfg, sizeof c);  // a byte copy: the enum fields are not loaded as enums yet
  const nvfp4_block_t block = checked_enum(cfg->block, NVFP4_BLOCK_2D + 1, "cfg.block", "1D or 2D");
  const nvfp4_rounding_t rounding =
      checked_enum(cfg->rounding, NVFP4_ROUND_EDEN + 1, "cfg.rounding", "NEAREST, STOCHASTIC or EDEN");
  const nvfp4_scale_layout_t layout = checked_layout(cfg->scale_layout, "cfg.scale_layout");
  if (cfg->rht & ~(NVFP4_RHT_ROWWISE | NVFP4_RHT_COLUMNWISE))
    invalid("cfg.rht: unknown bits 0x" + hex(cfg->rht) + " (expected a mask of NVFP4_RHT_ROWWISE | NVFP4_RHT_COLUMNWISE)");
  if (cfg->rht && block == NVFP4_BLOCK_2D) invalid("cfg.rht: the Hadamard transform applies to 1D blocks only");
  if (cfg->rht_sign_mask > 0xffffu)
    invalid("cfg.rht_sign_mask: 0x" + hex(cfg->rht_sign_mask) + " has bits above bit 15 (one bit per lane of 16)");
  if (cfg->offset_device && reinterpret_cast<uintptr_t>(cfg->offset_device) % alignof(uint64_t) != 0)
    invalid("cfg.offset_device: must be 8-byte aligned");
  // The recipe options of 0.3, and the combinations they are defined for.
  const nvfp4_scale_select_t select =
      checked_enum(cfg->scale_select, NVFP4_SELECT_4OVER6_MSE + 1, "cfg.scale_select", "NONE, 4OVER6_MAE or 4OVER6_MSE");
  const nvfp4_amax_mode_t amax_mode =
      checked_enum(cfg->amax_mode, NVFP4_AMAX_GIVEN + 1, "cfg.amax_mode", "TENSOR, ROWS or GIVEN");
  if (cfg->e4m3_bound != 448u && cfg->e4m3_bound != 256u)
    invalid("cfg.e4m3_bound: must be 448 or 256, got " + std::to_string(cfg->e4m3_bound));
  if (cfg->e4m3_bound == 256u && select == NVFP4_SELECT_NONE)
    invalid("cfg.e4m3_bound: 256 applies to a 4over6 scale selection only (cfg.scale_select is NONE)");
  if (select != NVFP4_SELECT_NONE && rounding != NVFP4_ROUND_NEAREST)
    invalid("cfg.scale_select: 4over6 compares round-to-nearest candidates; cfg.rounding must be NEAREST");
  if (select != NVFP4_SELECT_NONE && cfg->rht)
    invalid("cfg.scale_select: 4over6 is not defined with the Hadamard transform (cfg.rht must be 0)");
  if (amax_mode == NVFP4_AMAX_ROWS && block == NVFP4_BLOCK_2D)
    invalid("cfg.amax_mode: one amax per row applies to 1D blocks only");
  if (amax_mode == NVFP4_AMAX_ROWS && cfg->rht)
    invalid("cfg.amax_mode: one amax per row is not defined with the Hadamard transform (cfg.rht must be 0)");
  if (amax_mode == NVFP4_AMAX_GIVEN) {
    if (!cfg->amax_in) invalid("cfg.amax_in: null, but cfg.amax_mode is GIVEN");
    if (reinterpret_cast<uintptr_t>(cfg->amax_in) % alignof(float) != 0) invalid("cfg.amax_in: must be 4-byte aligned");
  } else if (cfg->amax_in) {
    invalid("cfg.amax_in: set, but cfg.amax_mode is not GIVEN (it would be ignored)");
  }
  if (rounding == NVFP4_ROUND_EDEN) {
    if (block != NVFP4_BLOCK_1D) invalid("cfg.rounding: EDEN applies to 1D blocks only");
    if (amax_mode != NVFP4_AMAX_TENSOR || select != NVFP4_SELECT_NONE)
      invalid("cfg.rounding: EDEN derives its own per-tensor scale; cfg.amax_mode must be TENSOR and "
              "cfg.scale_select NONE");
  }
  c.block = block;
  c.rounding = rounding;
  c.scale_layout = layout;
  c.scale_select = select;
  c.amax_mode = amax_mode;
  return c;
}

}  // namespace

NVFP4_API nvfp4_status_t nvfp4_quantize(const nvfp4_tensor_t* input, const nvfp4_quant_config_t* cfg_in,
                                        nvfp4_quantized_t* rowwise, nvfp4_quantized_t* columnwise,
                                        nvfp4_stream_t stream) {
  return guarded([&]() -> nvfp4_status_t {
    check_quant_settings();
    check_descriptor(input, "input");
    const nvfp4_quant_config_t cfg = checked_config(cfg_in);
    if (!rowwise && !columnwise) invalid("rowwise/columnwise: at least one output must be requested");
    if (!is_float_io(input->dtype))
      invalid(std::string("input: dtype must be float32, float16 or bfloat16, got ") + dtype_name(input->dtype));
    if (input->ndim < 1) invalid("input: must have at least 1 dimension");

    QuantJob job;
    job.x = input->data;
    job.dtype = input->dtype;
    // The 2D view [rows, cols]: leading dims flattened (their product is checked on its
    // own, since an empty input's numel does not bound it).
    job.cols = input->shape[input->ndim - 1];
    job.rows = 1;
    for (int i = 0; i + 1 < input->ndim; ++i) job.rows = checked_mul(job.rows, input->shape[i], "input");
    job.cfg = cfg;
    if (job.cols % 16 != 0)
      invalid("input: last dimension must be a multiple of 16, got " + std::to_string(job.cols));
    std::vector<ByteRange> outs;
    if (rowwise) {
      check_quantized(*input, rowwise, "rowwise", job.rows, job.cols, cfg.scale_layout,
                      cfg.amax_mode == NVFP4_AMAX_ROWS ? job.rows : 1);
      job.row = {static_cast<uint8_t*>(rowwise->data.data), static_cast<uint8_t*>(rowwise->scales.data),
                 static_cast<float*>(rowwise->amax.data)};
      outs.push_back(byte_range(rowwise->data, "rowwise.data"));
      outs.push_back(byte_range(rowwise->scales, "rowwise.scales"));
      outs.push_back(byte_range(rowwise->amax, "rowwise.amax"));
    }
    if (columnwise) {
      // x^T [cols, roundup(rows, 16)]: the padded extent and its element count must fit.
      const int64_t rp = checked_round_up(job.rows, 16, "columnwise");
      checked_mul(job.cols, rp, "columnwise");
      check_quantized(*input, columnwise, "columnwise", job.cols, rp, cfg.scale_layout,
                      cfg.amax_mode == NVFP4_AMAX_ROWS ? job.cols : 1);
      job.col = {static_cast<uint8_t*>(columnwise->data.data), static_cast<uint8_t*>(columnwise->scales.data),
                 static_cast<float*>(columnwise->amax.data)};
      outs.push_back(byte_range(columnwise->data, "columnwise.data"));
      outs.push_back(byte_range(columnwise->scales, "columnwise.scales"));
      outs.push_back(byte_range(columnwise->amax, "columnwise.amax"));
    }
    // EDEN needs the Hadamard transform on every output it quantizes (its unbiasedness is
    // over the rotation's random signs).
    if (cfg.rounding == NVFP4_ROUND_EDEN && ((rowwise && !(cfg.rht & NVFP4_RHT_ROWWISE)) ||
                                             (columnwise && !(cfg.rht & NVFP4_RHT_COLUMNWISE))))
      invalid("cfg.rht: EDEN rounding needs the Hadamard transform on every output requested");
    const ByteRange in = byte_range(*input, "input");
    for (size_t i = 0; i < outs.size(); ++i) {
      check_disjoint(outs[i], in);
      for (size_t j = 0; j < i; ++j) check_disjoint(outs[i], outs[j]);
      if (cfg.offset_device) {
        const uintptr_t p = reinterpret_cast<uintptr_t>(cfg.offset_device);
        check_disjoint(outs[i], ByteRange{"cfg.offset_device", p, p + sizeof(uint64_t)});
      }
      if (cfg.amax_in) {
        const uintptr_t p = reinterpret_cast<uintptr_t>(cfg.amax_in);
        check_disjoint(outs[i], ByteRange{"cfg.amax_in", p, p + sizeof(float)});
      }
    }
    require_cuda_build(*input, "input");
    // Empty input: nothing to quantize, but amax is still defined (0). Backends never
    // see an empty job.
    if (job.rows == 0 || job.cols == 0) {
      for (const QuantOut* o : {&job.row, &job.col}) {
        if (!o->amax) continue;
        const size_t n = cfg.amax_mode != NVFP4_AMAX_ROWS ? 1 : static_cast<size_t>(o == &job.row ? job.rows : job.cols);
        if (n == 0) continue;
        if (on_cuda(*input)) {
#if defined(NVFP4_WITH_CUDA)
          DeviceGuard g(*input);
          cudaError_t e = cudaMemsetAsync(o->amax, 0, n * sizeof(float), reinterpret_cast<cudaStream_t>(stream));
          if (e != cudaSuccess) raise(NVFP4_ERROR_CUDA, std::string("cudaMemsetAsync: ") + cudaGetErrorString(e));
#endif
        } else {
          std::fill_n(o->amax, n, 0.0f);
        }
      }
      return NVFP4_SUCCESS;
    }
    if (on_cuda(*input)) {
#if defined(NVFP4_WITH_CUDA)
      DeviceGuard g(*input);
      return cuda_quantize(job, stream);
#endif
    }
    (void)stream;
    return cpu_quantize(job);
  });
}

NVFP4_API nvfp4_status_t nvfp4_dequantize(const nvfp4_quantized_t* q, nvfp4_scale_layout_t layout_in,
                                          nvfp4_tensor_t* out, nvfp4_stream_t stream) {
  return guarded([&]() -> nvfp4_status_t {
    check_quant_settings();
    if (!q) invalid("q: null");
    check_descriptor(out, "out");
    if (!is_float_io(out->dtype))
      invalid(std::string("out: dtype must be float32, float16 or bfloat16, got ") + dtype_name(out->dtype));
    const nvfp4_scale_layout_t layout = checked_layout(layout_in, "scale_layout");
    check_descriptor(&q->data, "q.data");
    if (q->data.ndim != 2) invalid("q.data: must have 2 dimensions [rows, cols/2], got " + shape_str(q->data));
    const int64_t rows = q->data.shape[0], cols = checked_mul(q->data.shape[1], 2, "q.data");
    if (cols % 16 != 0) invalid("q.data: 2 * shape[1] must be a multiple of 16, got " + std::to_string(cols));
    check_quantized(*out, q, "q", rows, cols, layout);
    check_shape2(out, "out", rows, cols);
    const ByteRange o = byte_range(*out, "out");
    check_disjoint(o, byte_range(q->data, "q.data"));
    check_disjoint(o, byte_range(q->scales, "q.scales"));
    check_disjoint(o, byte_range(q->amax, "q.amax"));
    require_cuda_build(*out, "out");
    DequantJob job;
    job.data = static_cast<const uint8_t*>(q->data.data);
    job.scales = static_cast<const uint8_t*>(q->scales.data);
    job.amax = static_cast<const float*>(q->amax.data);
    job.rows = rows;
    job.cols = cols;
    job.layout = layout;
    job.out = out->data;
    job.out_dtype = out->dtype;
    if (rows == 0 || cols == 0) return NVFP4_SUCCESS;
    if (on_cuda(*out)) {
#if defined(NVFP4_WITH_CUDA)
      DeviceGuard g(*out);
      return cuda_dequantize(job, stream);
#endif
    }
    (void)stream;
    return cpu_dequantize(job);
  });
}

static nvfp4_status_t swizzle_impl(const nvfp4_tensor_t* src, nvfp4_tensor_t* dst, bool to_swizzled,
                                   nvfp4_stream_t stream) {
  return guarded([&]() -> nvfp4_status_t {
    const char* sn = to_swizzled ? "linear" : "swizzled";
    const char* dn = to_swizzled ? "swizzled" : "linear";
    check_descriptor(src, sn);
    check_descriptor(dst, dn);
    if (!is_byte(src->dtype))
      invalid(std::string(sn) + ": dtype must be float8_e4m3fn or uint8, got " + dtype_name(src->dtype));
    if (!is_byte(dst->dtype))
      invalid(std::string(dn) + ": dtype must be float8_e4m3fn or uint8, got " + dtype_name(dst->dtype));
    const nvfp4_tensor_t* lin = to_swizzled ? src : dst;
    const nvfp4_tensor_t* swz = to_swizzled ? dst : src;
    if (lin->ndim != 2) invalid("linear: must have 2 dimensions [rows, cols], got " + shape_str(*lin));
    const int64_t R = lin->shape[0], C = lin->shape[1];
    int64_t rp = 0, cp = 0;
    if (!nvfp4::core::swizzled_shape_checked(R, C, &rp, &cp))
      invalid("linear: shape " + shape_str(*lin) + " is too large: its swizzled layout overflows int64");
    check_shape2(swz, "swizzled", rp, cp);
    check_same_device(*src, dst, dn);
    check_disjoint(byte_range(*dst, dn), byte_range(*src, sn));
    require_cuda_build(*src, sn);
    SwizzleJob job{static_cast<const uint8_t*>(src->data), static_cast<uint8_t*>(dst->data), R, C, to_swizzled};
    if (rp == 0 || cp == 0) return NVFP4_SUCCESS;  // nothing to write
    if (on_cuda(*src)) {
#if defined(NVFP4_WITH_CUDA)
      DeviceGuard g(*src);
      return cuda_swizzle(job, stream);
#endif
    }
    (void)stream;
    return cpu_swizzle(job);
  });
}

NVFP4_API nvfp4_status_t nvfp4_swizzle_scales(const nvfp4_tensor_t* linear, nvfp4_tensor_t* swizzled,
                                              nvfp4_stream_t stream) {
  return swizzle_impl(linear, swizzled, true, stream);
}

NVFP4_API nvfp4_status_t nvfp4_unswizzle_scales(const nvfp4_tensor_t* swizzled, nvfp4_tensor_t* linear,
                                                nvfp4_stream_t stream) {
  return swizzle_impl(swizzled, linear, false, stream);
}

// The parts of a GEMM's arguments every operand format shares: the output d [M, N], the
// optional c (read with beta) and bias [N]. `in` holds the byte ranges the GEMM reads
// (the operands'); on return it also holds c's and bias's, and d is checked against all of
// them. reads (optional) receives them plus d's range, for the workspace overlap check.
static void check_gemm_epilogue(const nvfp4_tensor_t* c, const nvfp4_tensor_t* bias, float beta,
                                const nvfp4_tensor_t* dt, int64_t M, int64_t N, GemmJob& job,
                                std::vector<ByteRange> in, std::vector<ByteRange>* reads) {
  const nvfp4_tensor_t& ref = *dt;
  if (!is_float_io(ref.dtype))
    invalid(std::string("d: dtype must be float32, float16 or bfloat16, got ") + dtype_name(ref.dtype));
  check_shape2(dt, "d", M, N);
  job.d = ref.data;
  job.d_dtype = ref.dtype;
  job.beta = beta;
  if (c) {
    check_descriptor(c, "c");
    if (!is_float_io(c->dtype))
      invalid(std::string("c: dtype must be float32, float16 or bfloat16, got ") + dtype_name(c->dtype));
    check_shape2(c, "c", M, N);
    check_same_device(ref, c, "c");
    // c may be d itself (same memory, same dtype: read before written, element by
    // element); any other overlap would read values already overwritten.
    const bool same = c->data == ref.data && c->dtype == ref.dtype;
    if (!same) in.push_back(byte_range(*c, "c"));
    job.c = c->data;
    job.c_dtype = c->dtype;
  } else if (beta != 0.0f) {
    invalid("beta: nonzero beta needs c");
  }
  if (bias) {
    check_descriptor(bias, "bias");
    if (!is_float_io(bias->dtype))
      invalid(std::string("bias: dtype must be float32, float16 or bfloat16, got ") + dtype_name(bias->dtype));
    if (bias->ndim != 1 || numel(*bias) != N)
      invalid("bias: expected shape [" + std::to_string(N) + "], got " + shape_str(*bias));
    check_same_device(ref, bias, "bias");
    in.push_back(byte_range(*bias, "bias"));
    job.bias = bias->data;
    job.bias_dtype = bias->dtype;
  }
  const ByteRange d = byte_range(ref, "d");
  for (const ByteRange& r : in) check_disjoint(d, r);
  require_cuda_build(ref, "d");
  if (reads) {
    *reads = std::move(in);
    reads->push_back(d);
  }
}

// The checks both GEMM entry points make of their operands' codes before the scales: the
// enums, d, two 2-D code tensors [M, K/2] and [N, K/2] with the same K, K a positive
// multiple of `block` (16 for NVFP4, 32 for MXFP4), M x K and N x K countable.
struct GemmDims {
  nvfp4_scale_layout_t layout;
  int64_t m, n, k;
};

extern "C++" {
template <class Args>
GemmDims check_gemm_operands(const Args* args, int64_t block) {
  if (!args) invalid("args: null");
  if (!args->a) invalid("a: null");
  if (!args->b) invalid("b: null");
  const nvfp4_scale_layout_t layout = checked_layout(args->scale_layout, "scale_layout");
  checked_enum(args->backend, NVFP4_BACKEND_CUDNN + 1, "backend", "AUTO, REFERENCE, CUTLASS or CUDNN");
  check_descriptor(args->d, "d");
  check_descriptor(&args->a->data, "a.data");
  check_descriptor(&args->b->data, "b.data");
  if (args->a->data.ndim != 2) invalid("a.data: must have 2 dimensions [M, K/2], got " + shape_str(args->a->data));
  if (args->b->data.ndim != 2) invalid("b.data: must have 2 dimensions [N, K/2], got " + shape_str(args->b->data));
  const int64_t M = args->a->data.shape[0], N = args->b->data.shape[0];
  const int64_t K = checked_mul(args->a->data.shape[1], 2, "a.data");
  const int64_t Kb = checked_mul(args->b->data.shape[1], 2, "b.data");
  if (Kb != K) invalid("b: K mismatch: a has K=" + std::to_string(K) + ", b has K=" + std::to_string(Kb));
  if (K % block != 0 || K == 0)
    invalid("a: K must be a positive multiple of " + std::to_string(block) + ", got " + std::to_string(K));
  // The decoded operands (M x K and N x K values) must be countable.
  checked_mul(M, K, "a");
  checked_mul(N, K, "b");
  return {layout, M, N, K};
}
}  // extern "C++"

// Checks every part of the NVFP4 GEMM arguments and returns the job, plus the byte ranges
// of the buffers it reads (for the workspace overlap check).
static GemmJob make_gemm_job(const nvfp4_gemm_args_t* args, std::vector<ByteRange>* reads = nullptr) {
  const auto [layout, M, N, K] = check_gemm_operands(args, 16);
  const nvfp4_tensor_t& ref = *args->d;
  check_quantized(ref, args->a, "a", M, K, layout);
  check_quantized(ref, args->b, "b", N, K, layout);
  GemmJob job;
  job.format = Format::kNvfp4;
  job.a = static_cast<const uint8_t*>(args->a->data.data);
  job.sfa = static_cast<const uint8_t*>(args->a->scales.data);
  job.amax_a = static_cast<const float*>(args->a->amax.data);
  job.b = static_cast<const uint8_t*>(args->b->data.data);
  job.sfb = static_cast<const uint8_t*>(args->b->scales.data);
  job.amax_b = static_cast<const float*>(args->b->amax.data);
  job.m = M;
  job.n = N;
  job.k = K;
  job.layout = layout;
  std::vector<ByteRange> in = {byte_range(args->a->data, "a.data"),   byte_range(args->a->scales, "a.scales"),
                               byte_range(args->a->amax, "a.amax"),   byte_range(args->b->data, "b.data"),
                               byte_range(args->b->scales, "b.scales"), byte_range(args->b->amax, "b.amax")};
  check_gemm_epilogue(args->c, args->bias, args->beta, args->d, M, N, job, std::move(in), reads);
  return job;
}

// The same for MXFP4 operands (E8M0 scales over 32 values, no per-tensor scale).
static GemmJob make_mx_gemm_job(const nvfp4_mx_gemm_args_t* args, std::vector<ByteRange>* reads = nullptr) {
  const auto [layout, M, N, K] = check_gemm_operands(args, 32);
  const nvfp4_tensor_t& ref = *args->d;
  const bool swizzled = layout == NVFP4_SCALES_SWIZZLED;
  check_mx_quantized(ref, args->a, "a", M, K, swizzled);
  check_mx_quantized(ref, args->b, "b", N, K, swizzled);
  GemmJob job;
  job.format = Format::kMxfp4;
  job.a = static_cast<const uint8_t*>(args->a->data.data);
  job.sfa = static_cast<const uint8_t*>(args->a->scales.data);
  job.b = static_cast<const uint8_t*>(args->b->data.data);
  job.sfb = static_cast<const uint8_t*>(args->b->scales.data);
  job.m = M;
  job.n = N;
  job.k = K;
  job.layout = layout;
  std::vector<ByteRange> in = {byte_range(args->a->data, "a.data"), byte_range(args->a->scales, "a.scales"),
                               byte_range(args->b->data, "b.data"), byte_range(args->b->scales, "b.scales")};
  check_gemm_epilogue(args->c, args->bias, args->beta, args->d, M, N, job, std::move(in), reads);
  return job;
}

static nvfp4_status_t gemm_query(const GemmJob& job, const nvfp4_tensor_t& d, nvfp4_backend_t backend,
                                 size_t* bytes) {
  if (on_cuda(d)) {
#if defined(NVFP4_WITH_CUDA)
    DeviceGuard g(d);
    return gemm_workspace_size(job, backend, true, bytes);
#endif
  }
  return gemm_workspace_size(job, backend, false, bytes);
}

static nvfp4_status_t gemm_execute(const GemmJob& job, const nvfp4_tensor_t& d, nvfp4_backend_t backend,
                                   const std::vector<ByteRange>& buffers, void* workspace, size_t workspace_bytes,
                                   nvfp4_stream_t stream) {
  if (workspace_bytes > 0) {
    if (!workspace) invalid("workspace: null with workspace_bytes = " + std::to_string(workspace_bytes));
    const uintptr_t w = reinterpret_cast<uintptr_t>(workspace);
    if (on_cuda(d) && w % 16 != 0) invalid("workspace: CUDA pointer must be 16-byte aligned");
    if (workspace_bytes > static_cast<size_t>(nvfp4::core::kInt64Max) || w + workspace_bytes < w)
      invalid("workspace: workspace_bytes = " + std::to_string(workspace_bytes) + " runs past the address space");
    const ByteRange ws{"workspace", w, w + workspace_bytes};
    for (const ByteRange& r : buffers) check_disjoint(ws, r);
  }
  if (job.m == 0 || job.n == 0) return NVFP4_SUCCESS;
  if (on_cuda(d)) {
#if defined(NVFP4_WITH_CUDA)
    DeviceGuard g(d);
    return gemm_run(job, backend, true, workspace, workspace_bytes, stream);
#endif
  }
  return gemm_run(job, backend, false, workspace, workspace_bytes, stream);
}

NVFP4_API nvfp4_status_t nvfp4_gemm_workspace_size(const nvfp4_gemm_args_t* args, size_t* bytes) {
  return guarded([&]() -> nvfp4_status_t {
    if (!bytes) invalid("bytes: null");
    *bytes = 0;
    check_gemm_settings();
    GemmJob job = make_gemm_job(args);
    return gemm_query(job, *args->d, args->backend, bytes);
  });
}

NVFP4_API nvfp4_status_t nvfp4_gemm(const nvfp4_gemm_args_t* args, void* workspace, size_t workspace_bytes,
                                    nvfp4_stream_t stream) {
  return guarded([&]() -> nvfp4_status_t {
    std::vector<ByteRange> buffers;
    check_gemm_settings();
    GemmJob job = make_gemm_job(args, &buffers);
    return gemm_execute(job, *args->d, args->backend, buffers, workspace, workspace_bytes, stream);
  });
}

NVFP4_API nvfp4_status_t nvfp4_mx_gemm_workspace_size(const nvfp4_mx_gemm_args_t* args, size_t* bytes) {
  return guarded([&]() -> nvfp4_status_t {
    if (!bytes) invalid("bytes: null");
    *bytes = 0;
    check_gemm_settings();
    GemmJob job = make_mx_gemm_job(args);
    return gemm_query(job, *args->d, args->backend, bytes);
  });
}

NVFP4_API nvfp4_status_t nvfp4_mx_gemm(const nvfp4_mx_gemm_args_t* args, void* workspace, size_t workspace_bytes,
                                       nvfp4_stream_t stream) {
  return guarded([&]() -> nvfp4_status_t {
    std::vector<ByteRange> buffers;
    check_gemm_settings();
    GemmJob job = make_mx_gemm_job(args, &buffers);
    return gemm_execute(job, *args->d, args->backend, buffers, workspace, workspace_bytes, stream);
  });
}

NVFP4_API int nvfp4_backend_supported(nvfp4_backend_t backend, int cc) {
  try {
    const int64_t b = enum_bits(backend);
    if (b < NVFP4_BACKEND_AUTO || b > NVFP4_BACKEND_CUDNN) return 0;
    return backend_supported(static_cast<nvfp4_backend_t>(b), cc);
  } catch (...) {
    return 0;
  }
}

NVFP4_API int nvfp4_cuda_device_count(void) {
#if defined(NVFP4_WITH_CUDA)
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
#else
  return 0;
#endif
}

NVFP4_API int nvfp4_cuda_device_cc(int device) {
#if defined(NVFP4_WITH_CUDA)
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return major * 10 + minor;
#else
  (void)device;
  return 0;
#endif
}

NVFP4_API const char* nvfp4_build_cuda_archs(void) { return NVFP4_CUDA_ARCHS_STRING; }

// Every environment variable src/gemm reads on a call that can change the kernel, and so
// the workspace (tests/python/test_design_claims.py checks this list against the getenv
// calls there; debug, trace and cache-size knobs are left out).
NVFP4_API const char* nvfp4_gemm_env_key(void) {
  static const char* const kNames[] = {
      "NVFP4_CUDNN_PATH",          "NVFP4_CUDNN_EPILOGUE",      "NVFP4_CUDNN_AUTOTUNE",      "NVFP4_SM90_SMALL_M",
      "NVFP4_SM90_SMALL_M_KERNEL", "NVFP4_SM90_SWIZZLE",        "NVFP4_SM90_RASTER",
      "NVFP4_SM90_TILE",           "NVFP4_SM90_STREAM_SPLIT",   "NVFP4_SM90_STREAM_PREFETCH",
      "NVFP4_SM90_STREAM_AFIRST",  "NVFP4_SM90_DIRECT",         "NVFP4_SM90_SPLITS"};
  thread_local std::string key;
  key.clear();
  for (const char* name : kNames) {
    if (const char* v = std::getenv(name)) {
      key += name;
      key += '=';
      key += v;
      key += ';';
    }
  }
  return key.c_str();
}

#define NVFP4_STR2(x) #x
#define NVFP4_STR(x) NVFP4_STR2(x)
NVFP4_API const char* nvfp4_version_string(void) {
  return NVFP4_STR(NVFP4_VERSION_MAJOR) "." NVFP4_STR(NVFP4_VERSION_MINOR) "." NVFP4_STR(NVFP4_VERSION_PATCH);
}

NVFP4_API const char* nvfp4_status_string(nvfp4_status_t status_in) {
  const int64_t s = enum_bits(status_in);
  if (s < NVFP4_SUCCESS || s > NVFP4_ERROR_INTERNAL) return "unknown status";
  switch (static_cast<nvfp4_status_t>(s)) {
    case NVFP4_SUCCESS: return "success";
    case NVFP4_ERROR_INVALID_ARGUMENT: return "invalid argument";
    case NVFP4_ERROR_NOT_SUPPORTED: return "not supported";
    case NVFP4_ERROR_CUDA: return "CUDA error";
    case NVFP4_ERROR_CUDNN: return "cuDNN error";
    case NVFP4_ERROR_WORKSPACE: return "workspace too small";
    case NVFP4_ERROR_INTERNAL: return "internal error";
  }
  return "unknown status";
}

NVFP4_API const char* nvfp4_last_error(void) { return g_last_error.c_str(); }

}  // extern "C"
