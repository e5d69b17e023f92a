// extern "C" entry points of the MXFP4 format: validate every descriptor with the shared
// checks of validate.h, dispatch to the CPU reference or the CUDA kernels, and turn any
// failure into a status plus the thread-local message.
#include <string>

#include "core/mx.h"
#include "core/swizzle.h"
#include "mx_internal.h"
#include "validate.h"

#if defined(NVFP4_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

using namespace nvfp4::detail;

namespace {

void check_direction(const nvfp4_mx_direction_config_t& d, const char* name) {
  if (d.rounding != NVFP4_ROUND_NEAREST && d.rounding != NVFP4_ROUND_STOCHASTIC)
    invalid(std::string(name) + ".rounding: must be NEAREST or STOCHASTIC");
  if (d.scale_rule != NVFP4_MX_SCALE_OCP && d.scale_rule != NVFP4_MX_SCALE_CEIL &&
      d.scale_rule != NVFP4_MX_SCALE_TETRAJET)
    invalid(std::string(name) + ".scale_rule: must be OCP, CEIL or TETRAJET");
}

// Expected shapes of one MXFP4 direction of an orientation [rows, cols] (cols % 32 == 0).
void check_mx_quantized(const nvfp4_tensor_t& ref, const nvfp4_mx_quantized_t* q, const char* name, int64_t rows,
                        int64_t cols, bool swizzled) {
  const std::string n(name);
  check_descriptor(&q->data, (n + ".data").c_str());
  check_descriptor(&q->scales, (n + ".scales").c_str());
  if (q->data.dtype != NVFP4_DTYPE_UINT8) invalid(n + ".data: dtype must be uint8 (packed E2M1 pairs)");
  if (q->scales.dtype != NVFP4_DTYPE_UINT8)
    invalid(n + ".scales: dtype must be uint8 (E8M0 bytes), got " + dtype_name(q->scales.dtype));
  check_shape2(&q->data, (n + ".data").c_str(), rows, cols / 2);
  const int64_t nb = cols / nvfp4::core::kMxBlock;
  if (swizzled)
    check_shape2(&q->scales, (n + ".scales").c_str(), nvfp4::core::swizzled_rows(rows),
                 nvfp4::core::swizzled_cols(nb));
  else
    check_shape2(&q->scales, (n + ".scales").c_str(), rows, nb);
  check_same_device(ref, &q->data, (n + ".data").c_str());
  check_same_device(ref, &q->scales, (n + ".scales").c_str());
}

MxOut out_of(const nvfp4_mx_quantized_t& q, const nvfp4_mx_direction_config_t& d) {
  MxOut o;
  o.data = static_cast<uint8_t*>(q.data.data);
  o.scales = static_cast<uint8_t*>(q.scales.data);
  o.rounding = static_cast<uint32_t>(d.rounding);
  o.rule = static_cast<uint32_t>(d.scale_rule);
  return o;
}

}  // namespace

extern "C" {

NVFP4_API void nvfp4_mx_quant_config_default(nvfp4_mx_quant_config_t* cfg) {
  if (!cfg) return;
  cfg->rowwise.rounding = NVFP4_ROUND_NEAREST;
  cfg->rowwise.scale_rule = NVFP4_MX_SCALE_OCP;
  cfg->columnwise = cfg->rowwise;
  cfg->scale_layout = NVFP4_SCALES_SWIZZLED;
  cfg->seed = 0;
  cfg->offset = 0;
  cfg->offset_device = nullptr;
}

NVFP4_API nvfp4_status_t nvfp4_mx_quantize(const nvfp4_tensor_t* input, const nvfp4_mx_quant_config_t* cfg,
                                           nvfp4_mx_quantized_t* rowwise, nvfp4_mx_quantized_t* columnwise,
                                           nvfp4_stream_t stream) {
  return guarded([&]() -> nvfp4_status_t {
    check_descriptor(input, "input");
    if (!cfg) invalid("cfg: null");
    if (!rowwise && !columnwise) invalid("rowwise/columnwise: at least one output must be requested");
    if (!is_float_io(input->dtype))
      invalid(std::string("input: dtype must be float32, float16 or bfloat16, got ") + dtype_name(input->dtype));
    if (input->ndim < 1) invalid("input: must have at least 1 dimension");
    if (rowwise) check_direction(cfg->rowwise, "cfg.rowwise");
    if (columnwise) check_direction(cfg->columnwise, "cfg.columnwise");
    if (cfg->scale_layout != NVFP4_SCALES_LINEAR && cfg->scale_layout != NVFP4_SCALES_SWIZZLED)
      invalid("cfg.scale_layout: must be LINEAR or SWIZZLED");
    if (cfg->offset_device && reinterpret_cast<uintptr_t>(cfg->offset_device) % alignof(uint64_t) != 0)
      invalid("cfg.offset_device: must be 8-byte aligned");

    MxQuantJob job;
    job.x = input->data;
    job.dtype = input->dtype;
    job.cols = input->shape[input->ndim - 1];
    job.rows = job.cols == 0 ? 0 : numel(*input) / job.cols;
    job.swizzled = cfg->scale_layout == NVFP4_SCALES_SWIZZLED;
    job.seed = cfg->seed;
    job.offset = cfg->offset;
    job.offset_device = cfg->offset_device;
    if (job.cols % nvfp4::core::kMxBlock != 0)
      invalid("input: last dimension must be a multiple of 32 (MXFP4 blocks), got " + std::to_string(job.cols));
    if (rowwise) {
      check_mx_quantized(*input, rowwise, "rowwise", job.rows, job.cols, job.swizzled);
      job.row = out_of(*rowwise, cfg->rowwise);
    }
    if (columnwise) {
      check_mx_quantized(*input, columnwise, "columnwise", job.cols, mx_padded_rows(job.rows), job.swizzled);
      job.col = out_of(*columnwise, cfg->columnwise);
    }
    require_cuda_build(*input, "input");
    // An empty input has empty outputs (every scale buffer is 0 bytes then): nothing to do.
    if (job.rows == 0 || job.cols == 0) return NVFP4_SUCCESS;
    if (on_cuda(*input)) {
#if defined(NVFP4_WITH_CUDA)
      DeviceGuard g(*input);
      return cuda_mx_quantize(job, stream);
#endif
    }
    (void)stream;
    return cpu_mx_quantize(job);
  });
}

NVFP4_API nvfp4_status_t nvfp4_mx_dequantize(const nvfp4_mx_quantized_t* q, nvfp4_scale_layout_t layout,
                                             nvfp4_tensor_t* out, nvfp4_stream_t stream) {
  return guarded([&]() -> nvfp4_status_t {
    if (!q) invalid("q: null");
    check_descriptor(out, "out");
    if (!is_float_io(out->dtype)) invalid("out: dtype must be float32, float16 or bfloat16");
    if (layout != NVFP4_SCALES_LINEAR && layout != NVFP4_SCALES_SWIZZLED) invalid("scale_layout: unknown value");
    check_descriptor(&q->data, "q.data");
    if (q->data.ndim != 2) invalid("q.data: must have 2 dimensions");
    const int64_t rows = q->data.shape[0], cols = q->data.shape[1] * 2;
    if (cols % nvfp4::core::kMxBlock != 0) invalid("q.data: 2 * shape[1] must be a multiple of 32");
    const bool swizzled = layout == NVFP4_SCALES_SWIZZLED;
    check_mx_quantized(*out, q, "q", rows, cols, swizzled);
    check_shape2(out, "out", rows, cols);
    require_cuda_build(*out, "out");
    if (rows == 0 || cols == 0) return NVFP4_SUCCESS;
    MxDequantJob job;
    job.data = static_cast<const uint8_t*>(q->data.data);
    job.scales = static_cast<const uint8_t*>(q->scales.data);
    job.rows = rows;
    job.cols = cols;
    job.swizzled = swizzled;
    job.out = out->data;
    job.out_dtype = out->dtype;
    if (on_cuda(*out)) {
#if defined(NVFP4_WITH_CUDA)
      DeviceGuard g(*out);
      return cuda_mx_dequantize(job, stream);
#endif
    }
    (void)stream;
    return cpu_mx_dequantize(job);
  });
}

}  // extern "C"
