// extern "C" quantize and dequantize entry points of the FP4 formats, on one path: the
// checks of validate.h in one order (settings, input, config, outputs, the 2D view, each
// direction's descriptors, overlaps), then the CPU reference or the CUDA kernels. A format
// brings its FormatSpec (format.h) and the small traits struct below: its config, its job
// and backends. nvfp4_quantize / nvfp4_mx_quantize and the two dequantize functions are
// thin wrappers with the messages and statuses the ABI has always had.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/rht.h"
#include "core/swizzle.h"
#include "format.h"
#include "internal.h"
#include "mx_internal.h"
#include "settings.h"
#include "validate.h"

#if defined(NVFP4_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

using namespace nvfp4::detail;

namespace {

std::string hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%x", v);
  return buf;
}

// The caller's config as bytes: its enum fields are not loaded as enums before they are
// checked as integers.
template <class Config>
Config config_bytes(const Config* cfg) {
  if (!cfg) invalid("cfg: null");
  Config c;
  std::memcpy(&c, cfg, sizeof c);
  return c;
}

// The device memory a config points the kernels at (read when the work runs), as byte
// ranges no output may overlap.
template <class Config>
std::vector<ByteRange> config_inputs(const Config& cfg) {
  std::vector<ByteRange> in;
  if (cfg.offset_device) {
    const uintptr_t p = reinterpret_cast<uintptr_t>(cfg.offset_device);
    in.push_back(ByteRange{"cfg.offset_device", p, p + sizeof(uint64_t)});
  }
  return in;
}

// The fields both formats' dequantize jobs have.
template <class Dequant, class Quantized>
Dequant dequant_common(const Quantized& q, int64_t rows, int64_t cols, const nvfp4_tensor_t& out) {
  Dequant d;
  d.data = static_cast<const uint8_t*>(q.data.data);
  d.scales = static_cast<const uint8_t*>(q.scales.data);
  d.rows = rows;
  d.cols = cols;
  d.out = out.data;
  d.out_dtype = out.dtype;
  return d;
}

// ---- what each format does its own way ----
//   checked(cfg)      the config, validated as far as it is before the outputs are looked at
//   check_late(cfg)   what the format checks after the input's dtype and rank
//   config_inputs     the device memory the config points at (no output may overlap it)
//   direction(...)    one requested direction's config and output pointers, into the job
//   empty(...)        what an empty input still writes

struct Nvfp4 {
  static constexpr const FormatSpec& spec = kNvfp4Format;
  using Config = nvfp4_quant_config_t;
  using Quantized = nvfp4_quantized_t;
  using Job = QuantJob;
  using Dequant = DequantJob;

  // Every field: enums checked as integers first.
  static Config checked(const Config* cfg) {
    Config c = config_bytes(cfg);
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
    if (cfg->offset_counter) {
      if (reinterpret_cast<uintptr_t>(cfg->offset_counter) % alignof(uint64_t) != 0)
        invalid("cfg.offset_counter: must be 8-byte aligned");
      if (cfg->offset_device)
        invalid("cfg.offset_counter: set together with cfg.offset_device (the counter is read as the offset's "
                "device part; give one of the two)");
    }
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
  static void check_late(const Config&) {}
  static std::vector<ByteRange> config_inputs(const Config& cfg) {
    std::vector<ByteRange> in = ::config_inputs(cfg);
    if (cfg.amax_in) {
      const uintptr_t p = reinterpret_cast<uintptr_t>(cfg.amax_in);
      in.push_back(ByteRange{"cfg.amax_in", p, p + sizeof(float)});
    }
    return in;
  }
  // The config's memory the call writes: the counter it advances (checked like an output).
  static void config_outputs(const Config& cfg, std::vector<ByteRange>& outs) {
    if (cfg.offset_counter) {
      const uintptr_t p = reinterpret_cast<uintptr_t>(cfg.offset_counter);
      outs.push_back(ByteRange{"cfg.offset_counter", p, p + sizeof(uint64_t)});
    }
  }
  // Amax entries of a direction of `rows` rows: one per row with NVFP4_AMAX_ROWS.
  static int64_t amax_numel(const Config& cfg, int64_t rows) { return cfg.amax_mode == NVFP4_AMAX_ROWS ? rows : 1; }
  // EDEN needs the Hadamard transform on every output it quantizes (its unbiasedness is
  // over the rotation's random signs).
  static void check_directions(const Config& cfg, bool rowwise, bool columnwise) {
    if (cfg.rounding == NVFP4_ROUND_EDEN &&
        ((rowwise && !(cfg.rht & NVFP4_RHT_ROWWISE)) || (columnwise && !(cfg.rht & NVFP4_RHT_COLUMNWISE))))
      invalid("cfg.rht: EDEN rounding needs the Hadamard transform on every output requested");
  }
  // The kernels read the counter to advance through offset_device, as they read any.
  static Job job(const Config& cfg) {
    Job j;
    j.cfg = cfg;
    if (cfg.offset_counter) {
      j.cfg.offset_device = cfg.offset_counter;
      j.cfg.offset_counter = nullptr;
      j.advance = cfg.offset_counter;
    }
    return j;
  }
  static bool swizzled(const Config& cfg) { return cfg.scale_layout == NVFP4_SCALES_SWIZZLED; }
  static void direction(Job& job, bool columnwise, const Config&, const Quantized& q) {
    (columnwise ? job.col : job.row) = {static_cast<uint8_t*>(q.data.data), static_cast<uint8_t*>(q.scales.data),
                                        static_cast<float*>(q.amax.data)};
  }
  // Nothing to quantize, but amax is still defined (0). Backends never see an empty job.
  static nvfp4_status_t empty(const Job& job, const nvfp4_tensor_t& input, nvfp4_stream_t stream) {
    for (const QuantOut* o : {&job.row, &job.col}) {
      if (!o->amax) continue;
      const int64_t n = amax_numel(job.cfg, o == &job.row ? job.rows : job.cols);
      if (n == 0) continue;
      if (on_cuda(input)) {
#if defined(NVFP4_WITH_CUDA)
        DeviceGuard g(input);
        cudaError_t e = cudaMemsetAsync(o->amax, 0, static_cast<size_t>(n) * sizeof(float),
                                        reinterpret_cast<cudaStream_t>(stream));
        if (e != cudaSuccess) raise(NVFP4_ERROR_CUDA, std::string("cudaMemsetAsync: ") + cudaGetErrorString(e));
#endif
      } else {
        std::fill_n(o->amax, n, 0.0f);
      }
    }
    (void)stream;
    return NVFP4_SUCCESS;
  }
  static void workspace(Job& job, void* ws) { job.amax_ws = static_cast<uint32_t*>(ws); }
  static nvfp4_status_t cpu(const Job& j) { return cpu_quantize(j); }
  // cfg.offset_counter where the work that read it is queued (CUDA) or done (CPU): one more.
  // (cuda_quantize advances it itself.)
  static nvfp4_status_t advance(const Job& job, const nvfp4_tensor_t& input, nvfp4_stream_t stream) {
    if (!job.advance) return NVFP4_SUCCESS;
    if (on_cuda(input)) {
#if defined(NVFP4_WITH_CUDA)
      DeviceGuard g(input);
      return cuda_advance_counter(job.advance, stream);
#endif
    }
    (void)stream;
    ++*job.advance;
    return NVFP4_SUCCESS;
  }
  static Dequant dequant_job(const Quantized& q, int64_t rows, int64_t cols, nvfp4_scale_layout_t layout,
                             const nvfp4_tensor_t& out) {
    Dequant d = dequant_common<Dequant>(q, rows, cols, out);
    d.amax = static_cast<const float*>(q.amax.data);
    d.layout = layout;
    return d;
  }
  static nvfp4_status_t cpu_dequant(const Dequant& d) { return cpu_dequantize(d); }
#if defined(NVFP4_WITH_CUDA)
  static nvfp4_status_t cuda(const Job& j, nvfp4_stream_t s) { return cuda_quantize(j, s); }
  static nvfp4_status_t cuda_dequant(const Dequant& d, nvfp4_stream_t s) { return cuda_dequantize(d, s); }
#endif
};

struct Mxfp4 {
  static constexpr const FormatSpec& spec = kMxfp4Format;
  using Config = nvfp4_mx_quant_config_t;
  using Quantized = nvfp4_mx_quantized_t;
  using Job = MxQuantJob;
  using Dequant = MxDequantJob;

  // The per-direction fields are checked with the direction they belong to.
  static Config checked(const Config* cfg) { return config_bytes(cfg); }
  static void check_late(const Config& cfg) {
    checked_layout(cfg.scale_layout, "cfg.scale_layout");
    if (cfg.offset_device && reinterpret_cast<uintptr_t>(cfg.offset_device) % alignof(uint64_t) != 0)
      invalid("cfg.offset_device: must be 8-byte aligned");
  }
  static std::vector<ByteRange> config_inputs(const Config& cfg) { return ::config_inputs(cfg); }
  static void config_outputs(const Config&, std::vector<ByteRange>&) {}
  static int64_t amax_numel(const Config&, int64_t) { return 1; }
  static void check_directions(const Config&, bool, bool) {}
  static Job job(const Config& cfg) {
    Job j;
    j.swizzled = enum_bits(cfg.scale_layout) == NVFP4_SCALES_SWIZZLED;
    j.seed = cfg.seed;
    j.offset = cfg.offset;
    j.offset_device = cfg.offset_device;
    return j;
  }
  static bool swizzled(const Config& cfg) { return enum_bits(cfg.scale_layout) == NVFP4_SCALES_SWIZZLED; }
  static void direction(Job& job, bool columnwise, const Config& cfg, const Quantized& q) {
    const nvfp4_mx_direction_config_t& d = columnwise ? cfg.columnwise : cfg.rowwise;
    const std::string name = columnwise ? "cfg.columnwise" : "cfg.rowwise";
    MxOut& o = columnwise ? job.col : job.row;
    o.rounding = checked_enum(d.rounding, NVFP4_ROUND_STOCHASTIC + 1, name + ".rounding", "NEAREST or STOCHASTIC");
    o.rule = checked_enum(d.scale_rule, NVFP4_MX_SCALE_TETRAJET + 1, name + ".scale_rule", "OCP, CEIL or TETRAJET");
    o.data = static_cast<uint8_t*>(q.data.data);
    o.scales = static_cast<uint8_t*>(q.scales.data);
  }
  // An empty input has empty outputs (every scale buffer is 0 bytes then): nothing to do.
  static nvfp4_status_t empty(const Job&, const nvfp4_tensor_t&, nvfp4_stream_t) { return NVFP4_SUCCESS; }
  static void workspace(Job&, void*) {}  // MXFP4 has no amax pass (no entry point takes one)
  static nvfp4_status_t cpu(const Job& j) { return cpu_mx_quantize(j); }
  static nvfp4_status_t advance(const Job&, const nvfp4_tensor_t&, nvfp4_stream_t) { return NVFP4_SUCCESS; }
  static Dequant dequant_job(const Quantized& q, int64_t rows, int64_t cols, nvfp4_scale_layout_t layout,
                             const nvfp4_tensor_t& out) {
    Dequant d = dequant_common<Dequant>(q, rows, cols, out);
    d.swizzled = layout == NVFP4_SCALES_SWIZZLED;
    return d;
  }
  static nvfp4_status_t cpu_dequant(const Dequant& d) { return cpu_mx_dequantize(d); }
#if defined(NVFP4_WITH_CUDA)
  static nvfp4_status_t cuda(const Job& j, nvfp4_stream_t s) { return cuda_mx_quantize(j, s); }
  static nvfp4_status_t cuda_dequant(const Dequant& d, nvfp4_stream_t s) { return cuda_mx_dequantize(d, s); }
#endif
};

// ---- the one path ----

// The 2D view [rows, cols] of the input: leading dims flattened (their product is checked on
// its own, since an empty input's numel does not bound it), cols a multiple of the block.
template <class Job>
void flat_view(Job& job, const nvfp4_tensor_t& input, const FormatSpec& f) {
  job.x = input.data;
  job.dtype = input.dtype;
  job.cols = input.shape[input.ndim - 1];
  job.rows = 1;
  for (int i = 0; i + 1 < input.ndim; ++i) job.rows = checked_mul(job.rows, input.shape[i], "input");
  if (job.cols % f.block != 0)
    invalid("input: last dimension must be a multiple of " + std::to_string(f.block) + f.block_note + ", got " +
            std::to_string(job.cols));
}

// Every output shares no byte with the input, with the device memory the config points at, or
// with another output.
void check_outputs_disjoint(const std::vector<ByteRange>& outs, const ByteRange& in,
                            const std::vector<ByteRange>& cfg_in) {
  for (size_t i = 0; i < outs.size(); ++i) {
    check_disjoint(outs[i], in);
    for (size_t j = 0; j < i; ++j) check_disjoint(outs[i], outs[j]);
    for (const ByteRange& c : cfg_in) check_disjoint(outs[i], c);
  }
}

// The quantization workspace (nvfp4_quantize_ws): nullptr where none is given, else its range,
// checked (size, alignment); its overlaps are checked with the outputs'.
const ByteRange* quant_workspace(void* workspace, size_t workspace_bytes, ByteRange& r) {
  if (!workspace) {
    if (workspace_bytes != 0) invalid("workspace: null with workspace_bytes = " + std::to_string(workspace_bytes));
    return nullptr;
  }
  if (workspace_bytes < NVFP4_QUANTIZE_WORKSPACE_BYTES)
    invalid("workspace_bytes: " + std::to_string(workspace_bytes) + ", at least NVFP4_QUANTIZE_WORKSPACE_BYTES (" +
            std::to_string(NVFP4_QUANTIZE_WORKSPACE_BYTES) + ") are needed");
  const uintptr_t w = reinterpret_cast<uintptr_t>(workspace);
  if (w % 16 != 0) invalid("workspace: must be 16-byte aligned");
  if (workspace_bytes > static_cast<size_t>(nvfp4::core::kInt64Max) || w + workspace_bytes < w)
    invalid("workspace: workspace_bytes = " + std::to_string(workspace_bytes) + " runs past the address space");
  r = ByteRange{"workspace", w, w + workspace_bytes};
  return &r;
}

template <class F>
nvfp4_status_t quantize(const nvfp4_tensor_t* input, const typename F::Config* cfg_in,
                        const typename F::Quantized* rowwise, const typename F::Quantized* columnwise,
                        nvfp4_stream_t stream, void* workspace = nullptr, size_t workspace_bytes = 0) {
  const FormatSpec& f = F::spec;
  return guarded([&]() -> nvfp4_status_t {
    const SettingsScope settings(check_quant_settings());
    check_descriptor(input, "input");
    const typename F::Config cfg = F::checked(cfg_in);
    if (!rowwise && !columnwise) invalid("rowwise/columnwise: at least one output must be requested");
    if (!is_float_io(input->dtype))
      invalid(std::string("input: dtype must be float32, float16 or bfloat16, got ") + dtype_name(input->dtype));
    if (input->ndim < 1) invalid("input: must have at least 1 dimension");
    F::check_late(cfg);

    typename F::Job job = F::job(cfg);
    flat_view(job, *input, f);
    const bool swizzled = F::swizzled(cfg);
    std::vector<ByteRange> outs;
    auto direction = [&](const typename F::Quantized& q, bool columnwise_dir) {
      static const char* const kNames[2][4] = {{"rowwise", "rowwise.data", "rowwise.scales", "rowwise.amax"},
                                               {"columnwise", "columnwise.data", "columnwise.scales", "columnwise.amax"}};
      const char* const* n = kNames[columnwise_dir ? 1 : 0];
      F::direction(job, columnwise_dir, cfg, q);
      int64_t rows = job.rows, cols = job.cols;
      if (columnwise_dir) {
        // x^T [cols, roundup(rows, block)]: the padded extent and its element count must fit.
        rows = job.cols;
        cols = checked_round_up(job.rows, f.block, "columnwise");
        checked_mul(rows, cols, "columnwise");
      }
      const QuantizedDesc d = quantized_desc(q);
      check_quantized(f, *input, d, n[0], rows, cols, swizzled, F::amax_numel(cfg, rows));
      outs.push_back(byte_range(*d.data, n[1]));
      outs.push_back(byte_range(*d.scales, n[2]));
      if (f.tensor_scale) outs.push_back(byte_range(*d.amax, n[3]));
    };
    if (rowwise) direction(*rowwise, false);
    if (columnwise) direction(*columnwise, true);
    F::check_directions(cfg, rowwise != nullptr, columnwise != nullptr);
    ByteRange wr{};
    if (const ByteRange* w = quant_workspace(workspace, workspace_bytes, wr)) {
      outs.push_back(*w);
      F::workspace(job, workspace);
    }
    F::config_outputs(cfg, outs);
    check_outputs_disjoint(outs, byte_range(*input, "input"), F::config_inputs(cfg));
    require_cuda_build(*input, "input");
    if (job.rows == 0 || job.cols == 0) {
      if (nvfp4_status_t st = F::empty(job, *input, stream); st != NVFP4_SUCCESS) return st;
      return F::advance(job, *input, stream);
    }
    if (on_cuda(*input)) {
#if defined(NVFP4_WITH_CUDA)
      DeviceGuard g(*input);
      return F::cuda(job, stream);  // advances the counter itself
#endif
    }
    if (nvfp4_status_t st = F::cpu(job); st != NVFP4_SUCCESS) return st;
    return F::advance(job, *input, stream);
  });
}

template <class F>
nvfp4_status_t dequantize(const typename F::Quantized* q, nvfp4_scale_layout_t layout_in, nvfp4_tensor_t* out,
                          nvfp4_stream_t stream) {
  const FormatSpec& f = F::spec;
  return guarded([&]() -> nvfp4_status_t {
    const SettingsScope settings(check_quant_settings());
    if (!q) invalid("q: null");
    check_descriptor(out, "out");
    if (!is_float_io(out->dtype))
      invalid(std::string("out: dtype must be float32, float16 or bfloat16, got ") + dtype_name(out->dtype));
    const nvfp4_scale_layout_t layout = checked_layout(layout_in, "scale_layout");
    check_descriptor(&q->data, "q.data");
    if (q->data.ndim != 2) invalid("q.data: must have 2 dimensions [rows, cols/2], got " + shape_str(q->data));
    const int64_t rows = q->data.shape[0], cols = checked_mul(q->data.shape[1], 2, "q.data");
    if (cols % f.block != 0)
      invalid("q.data: 2 * shape[1] must be a multiple of " + std::to_string(f.block) + ", got " + std::to_string(cols));
    const QuantizedDesc d = quantized_desc(*q);
    check_quantized(f, *out, d, "q", rows, cols, layout == NVFP4_SCALES_SWIZZLED);
    check_shape2(out, "out", rows, cols);
    const ByteRange o = byte_range(*out, "out");
    check_disjoint(o, byte_range(*d.data, "q.data"));
    check_disjoint(o, byte_range(*d.scales, "q.scales"));
    if (f.tensor_scale) check_disjoint(o, byte_range(*d.amax, "q.amax"));
    require_cuda_build(*out, "out");
    if (rows == 0 || cols == 0) return NVFP4_SUCCESS;
    const typename F::Dequant job = F::dequant_job(*q, rows, cols, layout, *out);
    if (on_cuda(*out)) {
#if defined(NVFP4_WITH_CUDA)
      DeviceGuard g(*out);
      return F::cuda_dequant(job, stream);
#endif
    }
    (void)stream;
    return F::cpu_dequant(job);
  });
}

// nvfp4_quantize_decoded: nvfp4_quantize's checks and kernels, each orientation with its
// codes, its decoded values (bfloat16, the values the codes stand for without the
// per-tensor scale) or both.
nvfp4_status_t quantize_decoded(const nvfp4_tensor_t* input, const nvfp4_quant_config_t* cfg_in,
                                const nvfp4_quantized_t* rowwise, const nvfp4_quantized_t* columnwise,
                                const nvfp4_decoded_t* rdec, const nvfp4_decoded_t* cdec, nvfp4_stream_t stream,
                                void* workspace, size_t workspace_bytes) {
  const FormatSpec& f = kNvfp4Format;
  return guarded([&]() -> nvfp4_status_t {
    const SettingsScope settings(check_quant_settings());
    check_descriptor(input, "input");
    const nvfp4_quant_config_t cfg = Nvfp4::checked(cfg_in);
    if (!rowwise && !columnwise && !rdec && !cdec)
      invalid("rowwise/columnwise/rowwise_decoded/columnwise_decoded: at least one output must be requested");
    if (!is_float_io(input->dtype))
      invalid(std::string("input: dtype must be float32, float16 or bfloat16, got ") + dtype_name(input->dtype));
    if (input->ndim < 1) invalid("input: must have at least 1 dimension");
    // The decoded values are defined where the codes' value is the block's value: the
    // default recipe options (a 4over6 or MS-EDEN scale and the per-row amax change that).
    if (cfg.scale_select != NVFP4_SELECT_NONE)
      invalid("cfg.scale_select: the decoded outputs are defined for NONE (the default options) only");
    if (cfg.amax_mode != NVFP4_AMAX_TENSOR)
      invalid("cfg.amax_mode: the decoded outputs are defined for TENSOR (the default options) only");
    if (cfg.rounding == NVFP4_ROUND_EDEN)
      invalid("cfg.rounding: the decoded outputs are defined for NEAREST and STOCHASTIC rounding only");

    QuantJob job = Nvfp4::job(cfg);
    flat_view(job, *input, f);
    const bool swizzled = Nvfp4::swizzled(cfg);
    std::vector<ByteRange> outs;
    float* second_amax[2] = {nullptr, nullptr};  // a decoded output's own amax, where codes have theirs
    auto direction = [&](const nvfp4_quantized_t* q, const nvfp4_decoded_t* dec, bool col) {
      if (!q && !dec) return;
      int64_t rows = job.rows, cols = job.cols;
      if (col) {
        rows = job.cols;
        cols = checked_round_up(job.rows, f.block, "columnwise");
        checked_mul(rows, cols, "columnwise");
      }
      QuantOut& o = col ? job.col : job.row;
      if (q) {
        static const char* const kNames[2][4] = {
            {"rowwise", "rowwise.data", "rowwise.scales", "rowwise.amax"},
            {"columnwise", "columnwise.data", "columnwise.scales", "columnwise.amax"}};
        const char* const* n = kNames[col ? 1 : 0];
        const QuantizedDesc d = quantized_desc(*q);
        check_quantized(f, *input, d, n[0], rows, cols, swizzled);
        outs.push_back(byte_range(*d.data, n[1]));
        outs.push_back(byte_range(*d.scales, n[2]));
        outs.push_back(byte_range(*d.amax, n[3]));
        o.data = static_cast<uint8_t*>(q->data.data);
        o.scales = static_cast<uint8_t*>(q->scales.data);
        o.amax = static_cast<float*>(q->amax.data);
      }
      if (dec) {
        if (col)
          check_decoded(*dec, *input, "columnwise_decoded.values", "columnwise_decoded.amax", rows, cols, outs);
        else
          check_decoded(*dec, *input, "rowwise_decoded.values", "rowwise_decoded.amax", rows, cols, outs);
        o.dec = dec->values.data;
        if (o.amax == nullptr)
          o.amax = static_cast<float*>(dec->amax.data);
        else
          second_amax[col ? 1 : 0] = static_cast<float*>(dec->amax.data);
      }
    };
    direction(rowwise, rdec, false);
    direction(columnwise, cdec, true);
    Nvfp4::check_directions(cfg, wanted(job.row), wanted(job.col));
    ByteRange wr{};
    if (const ByteRange* w = quant_workspace(workspace, workspace_bytes, wr)) {
      outs.push_back(*w);
      Nvfp4::workspace(job, workspace);
    }
    Nvfp4::config_outputs(cfg, outs);
    check_outputs_disjoint(outs, byte_range(*input, "input"), Nvfp4::config_inputs(cfg));
    require_cuda_build(*input, "input");
    const bool empty = job.rows == 0 || job.cols == 0;
    if (on_cuda(*input)) {
#if defined(NVFP4_WITH_CUDA)
      DeviceGuard g(*input);
      // (cuda_quantize advances the counter itself)
      nvfp4_status_t st = empty ? Nvfp4::empty(job, *input, stream) : cuda_quantize(job, stream);
      if (st == NVFP4_SUCCESS && empty) st = Nvfp4::advance(job, *input, stream);
      if (st != NVFP4_SUCCESS) return st;
      for (int k = 0; k < 2; ++k) {
        if (!second_amax[k]) continue;
        const cudaError_t e = cudaMemcpyAsync(second_amax[k], (k ? job.col : job.row).amax, sizeof(float),
                                              cudaMemcpyDeviceToDevice, reinterpret_cast<cudaStream_t>(stream));
        if (e != cudaSuccess) raise(NVFP4_ERROR_CUDA, std::string("cudaMemcpyAsync (amax): ") + cudaGetErrorString(e));
      }
      return NVFP4_SUCCESS;
#endif
    }
    (void)stream;
    if (empty) {
      Nvfp4::empty(job, *input, stream);
    } else {
      // The reference: the codes (into scratch where only the decoded values were asked for),
      // then their values.
      std::vector<uint8_t> scratch[2][2];
      for (int k = 0; k < 2; ++k) {
        QuantOut& o = k ? job.col : job.row;
        if (!o.dec || o.data) continue;
        const int64_t rows = k ? job.cols : job.rows, cols = k ? (job.rows + 15) / 16 * 16 : job.cols;
        scratch[k][0].resize(static_cast<size_t>(rows * cols / 2));
        scratch[k][1].resize(static_cast<size_t>(swizzled ? nvfp4::core::swizzled_size(rows, cols / 16) : rows * cols / 16));
        o.data = scratch[k][0].data();
        o.scales = scratch[k][1].data();
      }
      if (nvfp4_status_t st = cpu_quantize(job); st != NVFP4_SUCCESS) return st;
      for (int k = 0; k < 2; ++k) {
        const QuantOut& o = k ? job.col : job.row;
        if (!o.dec) continue;
        const int64_t rows = k ? job.cols : job.rows, cols = k ? (job.rows + 15) / 16 * 16 : job.cols;
        cpu_decode_bf16(o.data, o.scales, rows, cols, cfg.scale_layout, o.dec);
      }
    }
    for (int k = 0; k < 2; ++k)
      if (second_amax[k]) *second_amax[k] = *(k ? job.col : job.row).amax;
    return Nvfp4::advance(job, *input, stream);
  });
}

}  // namespace

extern "C" {

NVFP4_API nvfp4_status_t nvfp4_quantize_decoded(const nvfp4_tensor_t* input, const nvfp4_quant_config_t* cfg,
                                                nvfp4_quantized_t* rowwise, nvfp4_quantized_t* columnwise,
                                                nvfp4_decoded_t* rowwise_decoded,
                                                nvfp4_decoded_t* columnwise_decoded, nvfp4_stream_t stream) {
  return quantize_decoded(input, cfg, rowwise, columnwise, rowwise_decoded, columnwise_decoded, stream, nullptr, 0);
}

NVFP4_API nvfp4_status_t nvfp4_quantize_decoded_ws(const nvfp4_tensor_t* input, const nvfp4_quant_config_t* cfg,
                                                   nvfp4_quantized_t* rowwise, nvfp4_quantized_t* columnwise,
                                                   nvfp4_decoded_t* rowwise_decoded,
                                                   nvfp4_decoded_t* columnwise_decoded, void* workspace,
                                                   size_t workspace_bytes, nvfp4_stream_t stream) {
  return quantize_decoded(input, cfg, rowwise, columnwise, rowwise_decoded, columnwise_decoded, stream, workspace,
                          workspace_bytes);
}

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
  cfg->offset_counter = nullptr;
}

NVFP4_API uint32_t nvfp4_default_rht_sign_mask(void) { return nvfp4::core::kDefaultRhtSignMask; }

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

NVFP4_API nvfp4_status_t nvfp4_quantize(const nvfp4_tensor_t* input, const nvfp4_quant_config_t* cfg,
                                        nvfp4_quantized_t* rowwise, nvfp4_quantized_t* columnwise,
                                        nvfp4_stream_t stream) {
  return quantize<Nvfp4>(input, cfg, rowwise, columnwise, stream);
}

NVFP4_API nvfp4_status_t nvfp4_quantize_ws(const nvfp4_tensor_t* input, const nvfp4_quant_config_t* cfg,
                                           nvfp4_quantized_t* rowwise, nvfp4_quantized_t* columnwise,
                                           void* workspace, size_t workspace_bytes, nvfp4_stream_t stream) {
  return quantize<Nvfp4>(input, cfg, rowwise, columnwise, stream, workspace, workspace_bytes);
}

NVFP4_API nvfp4_status_t nvfp4_mx_quantize(const nvfp4_tensor_t* input, const nvfp4_mx_quant_config_t* cfg,
                                           nvfp4_mx_quantized_t* rowwise, nvfp4_mx_quantized_t* columnwise,
                                           nvfp4_stream_t stream) {
  return quantize<Mxfp4>(input, cfg, rowwise, columnwise, stream);
}

NVFP4_API nvfp4_status_t nvfp4_dequantize(const nvfp4_quantized_t* q, nvfp4_scale_layout_t layout,
                                          nvfp4_tensor_t* out, nvfp4_stream_t stream) {
  return dequantize<Nvfp4>(q, layout, out, stream);
}

NVFP4_API nvfp4_status_t nvfp4_mx_dequantize(const nvfp4_mx_quantized_t* q, nvfp4_scale_layout_t layout,
                                             nvfp4_tensor_t* out, nvfp4_stream_t stream) {
  return dequantize<Mxfp4>(q, layout, out, stream);
}

}  // extern "C"
