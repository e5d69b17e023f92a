// extern "C" entry points of the gather-row section of nvfp4.h (the FSDP weight all-gather):
// validate every descriptor, then hand the work to the CPU reference or the CUDA kernels.
#include <string>
#include <vector>

#include "gather.h"
#include "settings.h"
#include "validate.h"

using namespace nvfp4::detail;

namespace {

void check_amax(const nvfp4_tensor_t* amax, const nvfp4_tensor_t& ref) {
  // a 4-byte slot of a larger buffer is fine on either device
  check_descriptor(amax, "amax", 4);
  if (amax->dtype != NVFP4_DTYPE_FLOAT32 || numel(*amax) != 1)
    invalid("amax: must be float32 with 1 element, got " + std::string(dtype_name(amax->dtype)) + " " +
            shape_str(*amax));
  check_same_device(ref, amax, "amax");
}

// A 2D uint8 [rows, row_bytes] of gather rows for a weight of k columns.
void check_rows(const nvfp4_tensor_t* t, const char* name, int64_t k) {
  if (t->dtype != NVFP4_DTYPE_UINT8) invalid(std::string(name) + ": dtype must be uint8, got " + dtype_name(t->dtype));
  if (t->ndim != 2) invalid(std::string(name) + ": must have 2 dimensions [rows, row_bytes], got " + shape_str(*t));
  if (t->shape[1] < k / 2 + k / 16)
    invalid(std::string(name) + ": rows of " + std::to_string(t->shape[1]) + " bytes cannot hold a row of " +
            std::to_string(k) + " columns (" + std::to_string(k / 2 + k / 16) + " bytes: K/2 codes, K/16 scales)");
}

void check_all_disjoint(const std::vector<ByteRange>& outs, const std::vector<ByteRange>& ins) {
  for (size_t i = 0; i < outs.size(); ++i) {
    for (const ByteRange& r : ins) check_disjoint(outs[i], r);
    for (size_t j = 0; j < i; ++j) check_disjoint(outs[i], outs[j]);
  }
}

}  // namespace

extern "C" {

NVFP4_API nvfp4_status_t nvfp4_gather_rows_quantize(const nvfp4_tensor_t* x, const nvfp4_tensor_t* amax,
                                                    nvfp4_tensor_t* out, nvfp4_stream_t stream) {
  return guarded([&]() -> nvfp4_status_t {
    const SettingsScope settings(check_quant_settings());
    check_descriptor(x, "x");
    check_descriptor(out, "out");
    if (!is_float_io(x->dtype))
      invalid(std::string("x: dtype must be float32, float16 or bfloat16, got ") + dtype_name(x->dtype));
    if (x->ndim != 2) invalid("x: must have 2 dimensions [rows, K], got " + shape_str(*x));
    const int64_t R = x->shape[0], K = x->shape[1];
    if (R % 16 != 0) invalid("x: rows must be a multiple of 16 (whole 16x16 tiles), got " + std::to_string(R));
    if (K % 16 != 0) invalid("x: K must be a multiple of 16, got " + std::to_string(K));
    check_rows(out, "out", K);
    if (out->shape[0] < R)
      invalid("out: " + std::to_string(out->shape[0]) + " rows, fewer than x's " + std::to_string(R));
    check_same_device(*x, out, "out");
    check_amax(amax, *x);
    check_all_disjoint({byte_range(*out, "out")}, {byte_range(*x, "x"), byte_range(*amax, "amax")});
    require_cuda_build(*x, "x");
    GatherQuantJob job;
    job.x = x->data;
    job.dtype = x->dtype;
    job.rows = R;
    job.cols = K;
    job.amax = static_cast<const float*>(amax->data);
    job.out = static_cast<uint8_t*>(out->data);
    job.rows_out = out->shape[0];
    job.row_bytes = out->shape[1];
    if (on_cuda(*x)) {
#if defined(NVFP4_WITH_CUDA)
      DeviceGuard g(*x);
      return cuda_gather_quantize(job, stream);
#endif
    }
    (void)stream;
    return cpu_gather_quantize(job);
  });
}

NVFP4_API nvfp4_status_t nvfp4_gather_rows_assemble(const nvfp4_tensor_t* in, const nvfp4_tensor_t* amax,
                                                    nvfp4_quantized_t* rowwise, nvfp4_quantized_t* columnwise,
                                                    nvfp4_stream_t stream) {
  return guarded([&]() -> nvfp4_status_t {
    check_descriptor(in, "in");
    if (!rowwise && !columnwise) invalid("rowwise/columnwise: at least one output must be requested");
    int64_t N = 0, K = 0;
    // the sizes from the first output given; the checks below hold both to them
    const nvfp4_tensor_t& d0 = rowwise ? rowwise->data : columnwise->data;
    const char* d0n = rowwise ? "rowwise.data" : "columnwise.data";
    check_descriptor(&d0, d0n);
    if (d0.ndim != 2) invalid(std::string(d0n) + ": must have 2 dimensions, got " + shape_str(d0));
    N = rowwise ? d0.shape[0] : checked_mul(d0.shape[1], 2, d0n);
    K = rowwise ? checked_mul(d0.shape[1], 2, d0n) : d0.shape[0];
    if (N % 16 != 0) invalid("N (the weight's rows): must be a multiple of 16 (whole 16x16 tiles), got " + std::to_string(N));
    if (K % 16 != 0) invalid("K (the weight's columns): must be a multiple of 16, got " + std::to_string(K));
    check_rows(in, "in", K);
    if (in->shape[0] < N)
      invalid("in: " + std::to_string(in->shape[0]) + " rows, fewer than the weight's " + std::to_string(N));
    check_amax(amax, *in);
    std::vector<ByteRange> outs;
    GatherAssembleJob job;
    if (rowwise) {
      check_quantized(kNvfp4Format, *in, quantized_desc(*rowwise), "rowwise", N, K, true);
      job.row = {static_cast<uint8_t*>(rowwise->data.data), static_cast<uint8_t*>(rowwise->scales.data),
                 static_cast<float*>(rowwise->amax.data)};
      outs.push_back(byte_range(rowwise->data, "rowwise.data"));
      outs.push_back(byte_range(rowwise->scales, "rowwise.scales"));
      outs.push_back(byte_range(rowwise->amax, "rowwise.amax"));
    }
    if (columnwise) {
      check_quantized(kNvfp4Format, *in, quantized_desc(*columnwise), "columnwise", K, N, true);
      job.col = {static_cast<uint8_t*>(columnwise->data.data), static_cast<uint8_t*>(columnwise->scales.data),
                 static_cast<float*>(columnwise->amax.data)};
      outs.push_back(byte_range(columnwise->data, "columnwise.data"));
      outs.push_back(byte_range(columnwise->scales, "columnwise.scales"));
      outs.push_back(byte_range(columnwise->amax, "columnwise.amax"));
    }
    check_all_disjoint(outs, {byte_range(*in, "in"), byte_range(*amax, "amax")});
    require_cuda_build(*in, "in");
    job.in = static_cast<const uint8_t*>(in->data);
    job.row_bytes = in->shape[1];
    job.n = N;
    job.k = K;
    job.amax = static_cast<const float*>(amax->data);
    if (on_cuda(*in)) {
#if defined(NVFP4_WITH_CUDA)
      DeviceGuard g(*in);
      return cuda_gather_assemble(job, stream);
#endif
    }
    (void)stream;
    return cpu_gather_assemble(job);
  });
}

}  // extern "C"
