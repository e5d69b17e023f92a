// extern "C" GEMM entry points of the FP4 formats, on one path: the operands' checks for
// the format (format.h, validate.h), the epilogue's (c, bias, d) and the workspace's, then
// the runner table (gemm/dispatch.cpp), which serves every format. nvfp4_gemm and
// nvfp4_mx_gemm (and their workspace queries) are thin wrappers with the messages and
// statuses the ABI has always had.
#include <cstdlib>
#include <string>
#include <vector>

#include "format.h"
#include "gemm/backends.h"
#include "internal.h"
#include "settings.h"
#include "validate.h"

using namespace nvfp4::detail;

namespace {

// The parts of a GEMM's arguments every operand format shares: the output d [M, N], the
// optional c (read with beta) and bias [N]. `in` holds the byte ranges the GEMM reads
// (the operands'); on return it also holds c's and bias's, and d is checked against all of
// them. reads (optional) receives them plus d's range, for the workspace overlap check.
void check_gemm_epilogue(const nvfp4_tensor_t* c, const nvfp4_tensor_t* bias, float beta,
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

nvfp4_status_t gemm_query(const GemmJob& job, const nvfp4_tensor_t& d, nvfp4_backend_t backend,
                                 size_t* bytes) {
  if (on_cuda(d)) {
#if defined(NVFP4_WITH_CUDA)
    DeviceGuard g(d);
    return gemm_workspace_size(job, backend, true, bytes);
#endif
  }
  return gemm_workspace_size(job, backend, false, bytes);
}

nvfp4_status_t gemm_execute(const GemmJob& job, const nvfp4_tensor_t& d, nvfp4_backend_t backend,
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

// Checks every part of a GEMM's arguments for operands of format f and returns the job,
// plus the byte ranges of the buffers it reads (for the workspace overlap check).
template <class Args>
GemmJob make_gemm_job(const FormatSpec& f, const Args* args, std::vector<ByteRange>* reads = nullptr) {
  const auto [layout, M, N, K] = check_gemm_operands(args, f.block);
  const nvfp4_tensor_t& ref = *args->d;
  const bool swizzled = layout == NVFP4_SCALES_SWIZZLED;
  const QuantizedDesc a = quantized_desc(*args->a), b = quantized_desc(*args->b);
  check_quantized(f, ref, a, "a", M, K, swizzled);
  check_quantized(f, ref, b, "b", N, K, swizzled);
  GemmJob job;
  job.format = f.id;
  job.a = static_cast<const uint8_t*>(a.data->data);
  job.sfa = static_cast<const uint8_t*>(a.scales->data);
  job.amax_a = f.tensor_scale ? static_cast<const float*>(a.amax->data) : nullptr;
  job.b = static_cast<const uint8_t*>(b.data->data);
  job.sfb = static_cast<const uint8_t*>(b.scales->data);
  job.amax_b = f.tensor_scale ? static_cast<const float*>(b.amax->data) : nullptr;
  job.m = M;
  job.n = N;
  job.k = K;
  job.layout = layout;
  std::vector<ByteRange> in = {byte_range(*a.data, "a.data"), byte_range(*a.scales, "a.scales")};
  if (f.tensor_scale) in.push_back(byte_range(*a.amax, "a.amax"));
  in.push_back(byte_range(*b.data, "b.data"));
  in.push_back(byte_range(*b.scales, "b.scales"));
  if (f.tensor_scale) in.push_back(byte_range(*b.amax, "b.amax"));
  check_gemm_epilogue(args->c, args->bias, args->beta, args->d, M, N, job, std::move(in), reads);
  return job;
}

// nvfp4_gemm_decoded's arguments: each operand either its codes (args->a) or its decoded
// values (a_dec), never both, never neither; the rest as nvfp4_gemm's. CUDA only.
GemmJob make_decoded_job(const nvfp4_gemm_args_t* args, const nvfp4_decoded_t* a_dec, const nvfp4_decoded_t* b_dec,
                         std::vector<ByteRange>* reads = nullptr) {
  const FormatSpec& f = kNvfp4Format;
  if (!args) invalid("args: null");
  if ((args->a != nullptr) == (a_dec != nullptr))
    invalid(args->a ? "a_decoded: give A either as codes (args->a) or decoded, not both"
                    : "a_decoded: null, and args->a is null too (A is needed in one form)");
  if ((args->b != nullptr) == (b_dec != nullptr))
    invalid(args->b ? "b_decoded: give B either as codes (args->b) or decoded, not both"
                    : "b_decoded: null, and args->b is null too (B is needed in one form)");
  const nvfp4_scale_layout_t layout = checked_layout(args->scale_layout, "scale_layout");
  checked_enum(args->backend, NVFP4_BACKEND_CUDNN + 1, "backend", "AUTO, REFERENCE, CUTLASS or CUDNN");
  check_descriptor(args->d, "d");
  const nvfp4_tensor_t& ref = *args->d;
  // M, N, K from whichever form each operand has.
  auto dims = [](const nvfp4_quantized_t* q, const nvfp4_decoded_t* dec, const char* cn, const char* dn,
                 int64_t& rows, int64_t& k) {
    if (q) {
      check_descriptor(&q->data, cn);
      if (q->data.ndim != 2) invalid(std::string(cn) + ": must have 2 dimensions [rows, K/2], got " + shape_str(q->data));
      rows = q->data.shape[0];
      k = checked_mul(q->data.shape[1], 2, cn);
    } else {
      check_descriptor(&dec->values, dn);
      if (dec->values.ndim != 2)
        invalid(std::string(dn) + ": must have 2 dimensions [rows, K], got " + shape_str(dec->values));
      rows = dec->values.shape[0];
      k = dec->values.shape[1];
    }
  };
  int64_t M = 0, N = 0, K = 0, Kb = 0;
  dims(args->a, a_dec, "a.data", "a_decoded.values", M, K);
  dims(args->b, b_dec, "b.data", "b_decoded.values", N, Kb);
  if (Kb != K) invalid("b: K mismatch: a has K=" + std::to_string(K) + ", b has K=" + std::to_string(Kb));
  if (K % f.block != 0 || K == 0)
    invalid("a: K must be a positive multiple of " + std::to_string(f.block) + ", got " + std::to_string(K));
  checked_mul(M, K, "a");
  checked_mul(N, K, "b");
  const bool swizzled = layout == NVFP4_SCALES_SWIZZLED;
  GemmJob job;
  job.format = f.id;
  job.m = M;
  job.n = N;
  job.k = K;
  job.layout = layout;
  std::vector<ByteRange> in;
  // One operand in the form it was given: its codes (the ranges read as nvfp4_gemm's), or its
  // decoded values and amax. (Names are string literals: the byte ranges keep them.)
  auto operand = [&](const nvfp4_quantized_t* q, const nvfp4_decoded_t* dec, bool is_a, int64_t rows,
                     const uint8_t*& data, const uint8_t*& scales, const float*& amax, const void*& values) {
    if (q) {
      const QuantizedDesc d = quantized_desc(*q);
      check_quantized(f, ref, d, is_a ? "a" : "b", rows, K, swizzled);
      data = static_cast<const uint8_t*>(d.data->data);
      scales = static_cast<const uint8_t*>(d.scales->data);
      amax = static_cast<const float*>(d.amax->data);
      in.push_back(byte_range(*d.data, is_a ? "a.data" : "b.data"));
      in.push_back(byte_range(*d.scales, is_a ? "a.scales" : "b.scales"));
      in.push_back(byte_range(*d.amax, is_a ? "a.amax" : "b.amax"));
    } else {
      check_decoded(*dec, ref, is_a ? "a_decoded.values" : "b_decoded.values",
                    is_a ? "a_decoded.amax" : "b_decoded.amax", rows, K, in);
      values = dec->values.data;
      amax = static_cast<const float*>(dec->amax.data);
    }
  };
  operand(args->a, a_dec, true, M, job.a, job.sfa, job.amax_a, job.a_dec);
  operand(args->b, b_dec, false, N, job.b, job.sfb, job.amax_b, job.b_dec);
  check_gemm_epilogue(args->c, args->bias, args->beta, args->d, M, N, job, std::move(in), reads);
  if (!on_cuda(ref))
    raise(NVFP4_ERROR_NOT_SUPPORTED, "a_decoded/b_decoded: decoded operands are read by CUDA runners only; CPU "
                                     "tensors take nvfp4_gemm with the codes");
  return job;
}

// The two entry points of every format: the workspace query and the run.
template <class Args>
nvfp4_status_t workspace_size(const FormatSpec& f, const Args* args, size_t* bytes) {
  return guarded([&]() -> nvfp4_status_t {
    if (!bytes) invalid("bytes: null");
    *bytes = 0;
    const SettingsScope settings(check_gemm_settings());
    GemmJob job = make_gemm_job(f, args);
    return gemm_query(job, *args->d, args->backend, bytes);
  });
}

template <class Args>
nvfp4_status_t run(const FormatSpec& f, const Args* args, void* workspace, size_t workspace_bytes,
                   nvfp4_stream_t stream) {
  return guarded([&]() -> nvfp4_status_t {
    std::vector<ByteRange> buffers;
    const SettingsScope settings(check_gemm_settings());
    GemmJob job = make_gemm_job(f, args, &buffers);
    return gemm_execute(job, *args->d, args->backend, buffers, workspace, workspace_bytes, stream);
  });
}

}  // namespace

extern "C" {

NVFP4_API nvfp4_status_t nvfp4_gemm_workspace_size(const nvfp4_gemm_args_t* args, size_t* bytes) {
  return workspace_size(kNvfp4Format, args, bytes);
}

NVFP4_API nvfp4_status_t nvfp4_gemm(const nvfp4_gemm_args_t* args, void* workspace, size_t workspace_bytes,
                                    nvfp4_stream_t stream) {
  return run(kNvfp4Format, args, workspace, workspace_bytes, stream);
}

NVFP4_API nvfp4_status_t nvfp4_gemm_decoded_workspace_size(const nvfp4_gemm_args_t* args,
                                                           const nvfp4_decoded_t* a_decoded,
                                                           const nvfp4_decoded_t* b_decoded, size_t* bytes) {
  return guarded([&]() -> nvfp4_status_t {
    if (!bytes) invalid("bytes: null");
    *bytes = 0;
    const SettingsScope settings(check_gemm_settings());
    GemmJob job = make_decoded_job(args, a_decoded, b_decoded);
    return gemm_query(job, *args->d, args->backend, bytes);
  });
}

NVFP4_API nvfp4_status_t nvfp4_gemm_decoded(const nvfp4_gemm_args_t* args, const nvfp4_decoded_t* a_decoded,
                                            const nvfp4_decoded_t* b_decoded, void* workspace,
                                            size_t workspace_bytes, nvfp4_stream_t stream) {
  return guarded([&]() -> nvfp4_status_t {
    std::vector<ByteRange> buffers;
    const SettingsScope settings(check_gemm_settings());
    GemmJob job = make_decoded_job(args, a_decoded, b_decoded, &buffers);
    return gemm_execute(job, *args->d, args->backend, buffers, workspace, workspace_bytes, stream);
  });
}

NVFP4_API nvfp4_status_t nvfp4_gemm_takes_decoded(const nvfp4_gemm_args_t* args, int* takes) {
  return guarded([&]() -> nvfp4_status_t {
    if (!takes) invalid("takes: null");
    *takes = 0;
    const SettingsScope settings(check_gemm_settings());
    GemmJob job = make_gemm_job(kNvfp4Format, args);
    if (!on_cuda(*args->d)) return NVFP4_SUCCESS;
#if defined(NVFP4_WITH_CUDA)
    DeviceGuard g(*args->d);
    return gemm_takes_decoded(job, args->backend, true, takes);
#else
    return NVFP4_SUCCESS;
#endif
  });
}

NVFP4_API nvfp4_status_t nvfp4_mx_gemm_workspace_size(const nvfp4_mx_gemm_args_t* args, size_t* bytes) {
  return workspace_size(kMxfp4Format, args, bytes);
}

NVFP4_API nvfp4_status_t nvfp4_mx_gemm(const nvfp4_mx_gemm_args_t* args, void* workspace, size_t workspace_bytes,
                                       nvfp4_stream_t stream) {
  return run(kMxfp4Format, args, workspace, workspace_bytes, stream);
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

// Every environment variable src/gemm reads on a call that can change the kernel, and so
// the workspace (tests/python/test_design_claims.py checks this list against the getenv
// calls there; debug, trace and cache-size knobs are left out).
NVFP4_API const char* nvfp4_gemm_env_key(void) {
  static const char* const kNames[] = {
      "NVFP4_CUDNN_PATH",          "NVFP4_CUDNN_EPILOGUE",      "NVFP4_CUDNN_AUTOTUNE",      "NVFP4_SM90_SMALL_M",
      "NVFP4_SM90_SMALL_M_KERNEL", "NVFP4_SM90_SWIZZLE",        "NVFP4_SM90_RASTER",
      "NVFP4_SM90_TILE",           "NVFP4_SM90_STREAM_SPLIT",   "NVFP4_SM90_STREAM_PREFETCH",
      "NVFP4_SM90_STREAM_AFIRST",  "NVFP4_SM90_DIRECT",         "NVFP4_SM90_SPLITS",
      "NVFP4_SM90_DECODED",        "NVFP4_SM90_RS",             "NVFP4_SM90_F32_LARGE",
      "NVFP4_SM90_PINGPONG",       "NVFP4_SM90_CUBLASLT"};
  thread_local std::string key;
  key.clear();
  if (!any_nvfp4_setting()) return key.c_str();  // none set: the empty key, without ~15 lookups
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

}  // extern "C"
