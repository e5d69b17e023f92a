// extern "C" entry points of the MXFP4 format: validate every descriptor with the shared
// checks of validate.h (enums read as integers, checked size arithmetic, no overlapping
// outputs), dispatch to the CPU reference or the CUDA kernels, and turn any failure into a
// status plus the thread-local message.
#include <cstring>
#include <string>
#include <vector>

#include "core/mx.h"
#include "core/swizzle.h"
#include "mx_internal.h"
#include "settings.h"
#include "validate.h"

#if defined(NVFP4_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

using namespace nvfp4::detail;

namespace {

MxOut checked_direction(const nvfp4_mx_direction_config_t& d, const std::string& name) {
  MxOut o;
  o.rounding = checked_enum(d.rounding, NVFP4_ROUND_STOCHASTIC + 1, name + ".rounding", "NEAREST or STOCHASTIC");
  o.rule = checked_enum(d.scale_rule, NVFP4_MX_SCALE_TETRAJET + 1, name + ".scale_rule", "OCP, CEIL or TETRAJET");
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

NVFP4_API nvfp4_status_t nvfp4_mx_quantize(const nvfp4_tensor_t* input, const nvfp4_mx_quant_config_t* cfg_in,
                                           nvfp4_mx_quantized_t* rowwise, nvfp4_mx_quantized_t* columnwise,
                                           nvfp4_stream_t stream) {
  return guarded([&]() -> nvfp4_status_t {
    check_quant_settings();
    check_descriptor(input, "input");
    if (!cfg_in) invalid("cfg: null");
    nvfp4_mx_quant_config_t cfg;
    std::memcpy(&cfg, cfg_in, sizeof cfg);  // a byte copy: the enum fields are not loaded as enums yet
    if (!rowwise && !columnwise) invalid("rowwise/columnwise: at least one output must be requested");
    if (!is_float_io(input->dtype))
      invalid(std::string("input: dtype must be float32, float16 or bfloat16, got ") + dtype_name(input->dtype));
    if (input->ndim < 1) invalid("input: must have at least 1 dimension");
    const nvfp4_scale_layout_t layout = checked_layout(cfg_in->scale_layout, "cfg.scale_layout");
    if (cfg.offset_device && reinterpret_cast<uintptr_t>(cfg.offset_device) % alignof(uint64_t) != 0)
      invalid("cfg.offset_device: must be 8-byte aligned");

    MxQuantJob job;
    job.x = input->data;
    job.dtype = input->dtype;
    // The 2D view [rows, cols]: leading dims flattened (their product checked on its own,
    // since an empty input's numel does not bound it).
    job.cols = input->shape[input->ndim - 1];
    job.rows = 1;
    for (int i = 0; i + 1 < input->ndim; ++i) job.rows = checked_mul(job.rows, input->shape[i], "input");
    job.swizzled = layout == NVFP4_SCALES_SWIZZLED;
    job.seed = cfg.seed;
    job.offset = cfg.offset;
    job.offset_device = cfg.offset_device;
    if (job.cols % nvfp4::core::kMxBlock != 0)
      invalid("input: last dimension must be a multiple of 32 (MXFP4 blocks), got " + std::to_string(job.cols));
    std::vector<ByteRange> outs;
    if (rowwise) {
      const MxOut d = checked_direction(cfg_in->rowwise, "cfg.rowwise");
      check_mx_quantized(*input, rowwise, "rowwise", job.rows, job.cols, job.swizzled);
      job.row = d;
      job.row.data = static_cast<uint8_t*>(rowwise->data.data);
      job.row.scales = static_cast<uint8_t*>(rowwise->scales.data);
      outs.push_back(byte_range(rowwise->data, "rowwise.data"));
      outs.push_back(byte_range(rowwise->scales, "rowwise.scales"));
    }
    if (columnwise) {
      const MxOut d = checked_direction(cfg_in->columnwise, "cfg.columnwise");
      // x^T [cols, roundup(rows, 32)]: the padded extent and its element count must fit.
      const int64_t rp = checked_round_up(job.rows, nvfp4::core::kMxBlock, "columnwise");
      checked_mul(job.cols, rp, "columnwise");
      check_mx_quantized(*input, columnwise, "columnwise", job.cols, rp, job.swizzled);
      job.col = d;
      job.col.data = static_cast<uint8_t*>(columnwise->data.data);
      job.col.scales = static_cast<uint8_t*>(columnwise->scales.data);
      outs.push_back(byte_range(columnwise->data, "columnwise.data"));
      outs.push_back(byte_range(columnwise->scales, "columnwise.scales"));
    }
    const ByteRange in = byte_range(*input, "input");
    for (size_t i = 0; i < outs.size(); ++i) {
      check_disjoint(outs[i], in);
      for (size_t j = 0; j < i; ++j) check_disjoint(outs[i], outs[j]);
      if (cfg.offset_device) {
        const uintptr_t p = reinterpret_cast<uintptr_t>(cfg.offset_device);
        check_disjoint(outs[i], ByteRange{"cfg.offset_device", p, p + sizeof(uint64_t)});
      }
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

NVFP4_API nvfp4_status_t nvfp4_mx_dequantize(const nvfp4_mx_quantized_t* q, nvfp4_scale_layout_t layout_in,
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
    if (cols % nvfp4::core::kMxBlock != 0)
      invalid("q.data: 2 * shape[1] must be a multiple of 32, got " + std::to_string(cols));
    const bool swizzled = layout == NVFP4_SCALES_SWIZZLED;
    check_mx_quantized(*out, q, "q", rows, cols, swizzled);
    check_shape2(out, "out", rows, cols);
    const ByteRange o = byte_range(*out, "out");
    check_disjoint(o, byte_range(q->data, "q.data"));
    check_disjoint(o, byte_range(q->scales, "q.scales"));
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
