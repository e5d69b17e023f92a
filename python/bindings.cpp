// nanobind layer: ndarray (DLPack) -> nvfp4_tensor_t, call the C API, status -> exception.
// No logic lives here; the Python package allocates every output.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <optional>
#include <string>

#include "nvfp4/nvfp4.h"

namespace nb = nanobind;
using Array = nb::ndarray<nb::c_contig>;
using OptArray = std::optional<Array>;

namespace {

nvfp4_dtype_t to_dtype(const Array& a, const char* name) {
  const nb::dlpack::dtype dt = a.dtype();
  using C = nb::dlpack::dtype_code;
  if (dt.lanes == 1) {
    if (dt.code == static_cast<uint8_t>(C::Float) && dt.bits == 32) return NVFP4_DTYPE_FLOAT32;
    if (dt.code == static_cast<uint8_t>(C::Float) && dt.bits == 16) return NVFP4_DTYPE_FLOAT16;
    if (dt.code == static_cast<uint8_t>(C::Float) && dt.bits == 64) return NVFP4_DTYPE_FLOAT64;
    if (dt.code == static_cast<uint8_t>(C::Bfloat) && dt.bits == 16) return NVFP4_DTYPE_BFLOAT16;
    if (dt.code == static_cast<uint8_t>(C::UInt) && dt.bits == 8) return NVFP4_DTYPE_UINT8;
  }
  throw nb::type_error((std::string(name) + ": unsupported dtype (DLPack code " + std::to_string(dt.code) + ", " +
                        std::to_string(dt.bits) + " bits, " + std::to_string(dt.lanes) +
                        " lanes); expected float32, float16, bfloat16, float64 or uint8")
                           .c_str());
}

nvfp4_tensor_t desc(const Array& a, const char* name) {
  nvfp4_tensor_t t{};
  if (a.ndim() > NVFP4_MAX_DIMS) throw nb::value_error((std::string(name) + ": too many dimensions").c_str());
  t.data = a.data();
  t.dtype = to_dtype(a, name);
  t.ndim = static_cast<int32_t>(a.ndim());
  for (size_t i = 0; i < a.ndim(); ++i) {
    t.shape[i] = static_cast<int64_t>(a.shape(i));
    t.strides[i] = static_cast<int64_t>(a.stride(i));
  }
  if (a.device_type() == nb::device::cpu::value) {
    t.device_type = NVFP4_DEVICE_CPU;
  } else if (a.device_type() == nb::device::cuda::value) {
    t.device_type = NVFP4_DEVICE_CUDA;
  } else {
    throw nb::value_error((std::string(name) + ": only CPU and CUDA tensors are supported").c_str());
  }
  t.device_id = a.device_id();
  return t;
}

void check(nvfp4_status_t s) {
  if (s == NVFP4_SUCCESS) return;
  std::string msg = nvfp4_last_error();
  if (msg.empty()) msg = nvfp4_status_string(s);
  switch (s) {
    case NVFP4_ERROR_INVALID_ARGUMENT: throw nb::value_error(msg.c_str());
    case NVFP4_ERROR_NOT_SUPPORTED: throw nb::builtin_exception(nb::exception_type::runtime_error, ("not supported: " + msg).c_str());
    default: throw std::runtime_error(std::string(nvfp4_status_string(s)) + ": " + msg);
  }
}

nvfp4_stream_t stream_of(uintptr_t s) { return reinterpret_cast<nvfp4_stream_t>(s); }

// An int argument that becomes a C enum: checked first (an out-of-range value is
// undefined behaviour once cast), refused with the argument's name.
template <class E>
E enum_arg(int v, int count, const char* name, const char* expected) {
  if (v < 0 || v >= count)
    throw nb::value_error((std::string(name) + ": unknown value " + std::to_string(v) + " (expected " + expected + ")").c_str());
  return static_cast<E>(v);
}
nvfp4_scale_layout_t layout_arg(int v) {
  return enum_arg<nvfp4_scale_layout_t>(v, 2, "scale_layout", "0 = linear, 1 = swizzled");
}
nvfp4_backend_t backend_arg(int v) {
  return enum_arg<nvfp4_backend_t>(v, 4, "backend", "0 = auto, 1 = reference, 2 = cutlass, 3 = cudnn");
}

struct Quantized {
  nvfp4_quantized_t q{};
  Quantized(const Array& data, const Array& scales, const Array& amax, const char* name) {
    std::string n(name);
    q.data = desc(data, (n + ".data").c_str());
    q.scales = desc(scales, (n + ".scales").c_str());
    q.amax = desc(amax, (n + ".amax").c_str());
  }
};

// ---- raw-pointer fast path (nvfp4's own torch ops) ---------------------------------
// The package's op layer allocates every buffer itself and knows its size, so it passes
// addresses and shapes as integers: converting a torch tensor through DLPack costs ~5 us a
// tensor, which would dominate a small GEMM. The C API still validates shapes, dtypes,
// devices and alignment; only the buffer sizes behind the addresses are the caller's word.
nvfp4_tensor_t raw2(uintptr_t ptr, nvfp4_dtype_t dt, int64_t r, int64_t c, int dev_type, int dev_id) {
  nvfp4_tensor_t t{};
  t.data = reinterpret_cast<void*>(ptr);
  t.dtype = dt;
  t.ndim = 2;
  t.shape[0] = r;
  t.shape[1] = c;
  t.strides[0] = c;
  t.strides[1] = 1;
  t.device_type = dev_type == 1 ? NVFP4_DEVICE_CUDA : NVFP4_DEVICE_CPU;
  t.device_id = dev_id;
  return t;
}

nvfp4_tensor_t raw1(uintptr_t ptr, nvfp4_dtype_t dt, int64_t n, int dev_type, int dev_id) {
  nvfp4_tensor_t t = raw2(ptr, dt, n, 1, dev_type, dev_id);
  t.ndim = 1;
  t.strides[0] = 1;
  return t;
}

// One quantized orientation [rows, cols] at (data, scales, amax) addresses.
nvfp4_quantized_t raw_q(uintptr_t data, uintptr_t scales, uintptr_t amax, int64_t rows, int64_t cols, int layout,
                        int dev_type, int dev_id) {
  nvfp4_quantized_t q{};
  q.data = raw2(data, NVFP4_DTYPE_UINT8, rows, cols / 2, dev_type, dev_id);
  const int64_t sc = cols / 16;
  const int64_t sr = layout == NVFP4_SCALES_SWIZZLED ? (rows + 127) / 128 * 128 : rows;
  const int64_t scc = layout == NVFP4_SCALES_SWIZZLED ? (sc + 3) / 4 * 4 : sc;
  q.scales = raw2(scales, NVFP4_DTYPE_E4M3, sr, scc, dev_type, dev_id);
  q.amax = raw1(amax, NVFP4_DTYPE_FLOAT32, 1, dev_type, dev_id);
  return q;
}

// The config of the raw quantize entry points: the defaults, then the fields they pass (the C
// API checks the enums as integers).
nvfp4_quant_config_t raw_config(int block, int rounding, int layout, uint32_t rht, uint32_t sign_mask, uint64_t seed,
                                uint64_t offset, uintptr_t offset_device, uintptr_t offset_counter = 0) {
  nvfp4_quant_config_t cfg;
  nvfp4_quant_config_default(&cfg);
  cfg.block = static_cast<nvfp4_block_t>(block);
  cfg.rounding = static_cast<nvfp4_rounding_t>(rounding);
  cfg.scale_layout = static_cast<nvfp4_scale_layout_t>(layout);
  cfg.rht = rht;
  cfg.rht_sign_mask = sign_mask;
  cfg.seed = seed;
  cfg.offset = offset;
  cfg.offset_device = reinterpret_cast<const uint64_t*>(offset_device);
  cfg.offset_counter = reinterpret_cast<uint64_t*>(offset_counter);
  return cfg;
}

nvfp4_dtype_t dtype_arg(int v, const char* name) {
  if (v < NVFP4_DTYPE_FLOAT32 || v > NVFP4_DTYPE_FLOAT64)
    throw nb::value_error((std::string(name) + ": unknown dtype code " + std::to_string(v)).c_str());
  return static_cast<nvfp4_dtype_t>(v);
}

nvfp4_gemm_args_t raw_gemm_args(const nvfp4_quantized_t& a, const nvfp4_quantized_t& b, int layout,
                                const nvfp4_tensor_t* c, const nvfp4_tensor_t* bias, float beta, nvfp4_tensor_t* d,
                                int backend) {
  nvfp4_gemm_args_t args{};
  args.a = &a;
  args.b = &b;
  args.scale_layout = static_cast<nvfp4_scale_layout_t>(layout);
  args.c = c;
  args.bias = bias;
  args.beta = beta;
  args.d = d;
  args.backend = static_cast<nvfp4_backend_t>(backend);
  return args;
}

// The descriptors of a raw GEMM call (gemm_raw, gemm_dec_raw, gemm_takes_decoded_raw): the
// operands' codes, d, the optional c and bias, and the args that point at them (hence not
// copyable).
struct RawGemm {
  nvfp4_quantized_t a, b;
  nvfp4_tensor_t d, c{}, bias{};
  nvfp4_gemm_args_t args;
  RawGemm(uintptr_t ad, uintptr_t as, uintptr_t aa, uintptr_t bd, uintptr_t bs, uintptr_t ba, int64_t M, int64_t N,
          int64_t K, int layout, uintptr_t c_ptr, int c_dtype, uintptr_t bias_ptr, int bias_dtype, float beta,
          uintptr_t d_ptr, int d_dtype, int backend, int dev_type, int dev_id)
      : a(raw_q(ad, as, aa, M, K, layout, dev_type, dev_id)),
        b(raw_q(bd, bs, ba, N, K, layout, dev_type, dev_id)),
        d(raw2(d_ptr, dtype_arg(d_dtype, "out"), M, N, dev_type, dev_id)) {
    if (c_ptr) c = raw2(c_ptr, dtype_arg(c_dtype, "c"), M, N, dev_type, dev_id);
    if (bias_ptr) bias = raw1(bias_ptr, dtype_arg(bias_dtype, "bias"), N, dev_type, dev_id);
    args = raw_gemm_args(a, b, layout, c_ptr ? &c : nullptr, bias_ptr ? &bias : nullptr, beta, &d, backend);
  }
  RawGemm(const RawGemm&) = delete;
  RawGemm& operator=(const RawGemm&) = delete;
};

}  // namespace

void bind_grouped(nb::module_& m);  // the grouped section, at the end of this file

NB_MODULE(_C, m) {
  m.doc() = "nvfp4 low-level bindings over the C API (use the nvfp4 package instead)";

  m.def("quantize",
        [](const Array& x, OptArray rd, OptArray rs, OptArray ra, OptArray cd, OptArray cs, OptArray ca, int block,
           int rounding, int layout, uint32_t rht, uint32_t sign_mask, uint64_t seed, uint64_t offset,
           uintptr_t stream, OptArray workspace) {
          nvfp4_tensor_t in = desc(x, "x");
          nvfp4_quant_config_t cfg;
          nvfp4_quant_config_default(&cfg);
          cfg.block = enum_arg<nvfp4_block_t>(block, 2, "block", "0 = 1d, 1 = 2d");
          cfg.rounding = enum_arg<nvfp4_rounding_t>(rounding, 2, "rounding", "0 = rtn, 1 = sr");
          cfg.scale_layout = layout_arg(layout);
          cfg.rht = rht;
          cfg.rht_sign_mask = sign_mask;
          cfg.seed = seed;
          cfg.offset = offset;
          std::optional<Quantized> row, col;
          if (rd) row.emplace(*rd, *rs, *ra, "rowwise");
          if (cd) col.emplace(*cd, *cs, *ca, "columnwise");
          // workspace (optional): any array on x's device; its bytes go to nvfp4_quantize_ws
          void* ws = nullptr;
          size_t ws_bytes = 0;
          if (workspace) {
            const nvfp4_tensor_t w = desc(*workspace, "workspace");
            if (w.device_type != in.device_type || w.device_id != in.device_id)
              throw nb::value_error("workspace: must be on x's device");
            ws = w.data;
            ws_bytes = workspace->nbytes();
          }
          nb::gil_scoped_release nogil;
          check(nvfp4_quantize_ws(&in, &cfg, row ? &row->q : nullptr, col ? &col->q : nullptr, ws, ws_bytes,
                                  stream_of(stream)));
        },
        nb::arg("x").noconvert(), nb::arg("row_data").noconvert().none(), nb::arg("row_scales").noconvert().none(),
        nb::arg("row_amax").noconvert().none(), nb::arg("col_data").noconvert().none(),
        nb::arg("col_scales").noconvert().none(), nb::arg("col_amax").noconvert().none(), nb::arg("block"), nb::arg("rounding"), nb::arg("scale_layout"),
        nb::arg("rht"), nb::arg("rht_sign_mask"), nb::arg("seed"), nb::arg("offset"), nb::arg("stream"),
        nb::arg("workspace").noconvert().none() = nb::none());

  // quantize with the recipe options of 0.3 (nvfp4_quant_config_t's scale_select, e4m3_bound,
  // amax_mode, amax_in); rounding 2 is MS-EDEN. offset_counter: 0 or cfg.offset_counter's address.
  m.def("quantize_options",
        [](const Array& x, OptArray rd, OptArray rs, OptArray ra, OptArray cd, OptArray cs, OptArray ca, int block,
           int rounding, int layout, uint32_t rht, uint32_t sign_mask, uint64_t seed, uint64_t offset,
           int scale_select, uint32_t e4m3_bound, int amax_mode, OptArray amax_in, uintptr_t stream,
           uintptr_t offset_counter) {
          nvfp4_tensor_t in = desc(x, "x");
          nvfp4_quant_config_t cfg;
          nvfp4_quant_config_default(&cfg);
          cfg.block = enum_arg<nvfp4_block_t>(block, 2, "block", "0 = 1d, 1 = 2d");
          cfg.rounding = enum_arg<nvfp4_rounding_t>(rounding, 3, "rounding", "0 = rtn, 1 = sr, 2 = eden");
          cfg.scale_layout = layout_arg(layout);
          cfg.rht = rht;
          cfg.rht_sign_mask = sign_mask;
          cfg.seed = seed;
          cfg.offset = offset;
          cfg.scale_select = enum_arg<nvfp4_scale_select_t>(scale_select, 3, "scale_select",
                                                             "0 = none, 1 = 4over6 MAE, 2 = 4over6 MSE");
          cfg.e4m3_bound = e4m3_bound;
          cfg.amax_mode = enum_arg<nvfp4_amax_mode_t>(amax_mode, 3, "amax_mode", "0 = tensor, 1 = rows, 2 = given");
          cfg.offset_counter = reinterpret_cast<uint64_t*>(offset_counter);
          std::optional<nvfp4_tensor_t> given;
          if (amax_in) {
            given = desc(*amax_in, "amax_in");
            if (given->dtype != NVFP4_DTYPE_FLOAT32 || given->ndim != 1 || given->shape[0] != 1)
              throw nb::value_error("amax_in: must be a float32 tensor of shape [1]");
            if (given->device_type != in.device_type || given->device_id != in.device_id)
              throw nb::value_error("amax_in: must be on x's device");
            cfg.amax_in = static_cast<const float*>(given->data);
          }
          std::optional<Quantized> row, col;
          if (rd) row.emplace(*rd, *rs, *ra, "rowwise");
          if (cd) col.emplace(*cd, *cs, *ca, "columnwise");
          nb::gil_scoped_release nogil;
          check(nvfp4_quantize(&in, &cfg, row ? &row->q : nullptr, col ? &col->q : nullptr, stream_of(stream)));
        },
        nb::arg("x").noconvert(), nb::arg("row_data").noconvert().none(), nb::arg("row_scales").noconvert().none(),
        nb::arg("row_amax").noconvert().none(), nb::arg("col_data").noconvert().none(),
        nb::arg("col_scales").noconvert().none(), nb::arg("col_amax").noconvert().none(), nb::arg("block"),
        nb::arg("rounding"), nb::arg("scale_layout"), nb::arg("rht"), nb::arg("rht_sign_mask"), nb::arg("seed"),
        nb::arg("offset"), nb::arg("scale_select"), nb::arg("e4m3_bound"), nb::arg("amax_mode"),
        nb::arg("amax_in").noconvert().none(), nb::arg("stream"), nb::arg("offset_counter") = 0);

  m.def("dequantize",
        [](const Array& data, const Array& scales, const Array& amax, int layout, const Array& out,
           uintptr_t stream) {
          const nvfp4_scale_layout_t lay = layout_arg(layout);
          Quantized q(data, scales, amax, "q");
          nvfp4_tensor_t o = desc(out, "out");
          nb::gil_scoped_release nogil;
          check(nvfp4_dequantize(&q.q, lay, &o, stream_of(stream)));
        },
        nb::arg("data").noconvert(), nb::arg("scales").noconvert(), nb::arg("amax").noconvert(), nb::arg("scale_layout"),
        nb::arg("out").noconvert(), nb::arg("stream"));

  m.def("swizzle",
        [](const Array& src, const Array& dst, bool to_swizzled, uintptr_t stream) {
          nvfp4_tensor_t s = desc(src, to_swizzled ? "linear" : "swizzled");
          nvfp4_tensor_t d = desc(dst, to_swizzled ? "swizzled" : "linear");
          nb::gil_scoped_release nogil;
          check(to_swizzled ? nvfp4_swizzle_scales(&s, &d, stream_of(stream))
                            : nvfp4_unswizzle_scales(&s, &d, stream_of(stream)));
        },
        nb::arg("src").noconvert(), nb::arg("dst").noconvert(), nb::arg("to_swizzled"), nb::arg("stream"));

  // GEMM: the operands come as (data, scales, amax) triples.
  auto gemm_args = [](const Quantized& a, const Quantized& b, int layout, const std::optional<nvfp4_tensor_t>& c,
                      const std::optional<nvfp4_tensor_t>& bias, float beta, nvfp4_tensor_t* d, int backend) {
    nvfp4_gemm_args_t args{};
    args.a = &a.q;
    args.b = &b.q;
    args.scale_layout = layout_arg(layout);
    args.c = c ? &*c : nullptr;
    args.bias = bias ? &*bias : nullptr;
    args.beta = beta;
    args.d = d;
    args.backend = backend_arg(backend);
    return args;
  };

  m.def("gemm_workspace_size",
        [gemm_args](const Array& ad, const Array& as, const Array& aa, const Array& bd, const Array& bs,
                    const Array& ba, int layout, OptArray c, OptArray bias, float beta, const Array& d, int backend) {
          Quantized a(ad, as, aa, "a"), b(bd, bs, ba, "b");
          std::optional<nvfp4_tensor_t> ct, bt;
          if (c) ct = desc(*c, "c");
          if (bias) bt = desc(*bias, "bias");
          nvfp4_tensor_t dt = desc(d, "out");
          nvfp4_gemm_args_t args = gemm_args(a, b, layout, ct, bt, beta, &dt, backend);
          size_t bytes = 0;
          check(nvfp4_gemm_workspace_size(&args, &bytes));
          return bytes;
        },
        nb::arg("a_data").noconvert(), nb::arg("a_scales").noconvert(), nb::arg("a_amax").noconvert(),
        nb::arg("b_data").noconvert(), nb::arg("b_scales").noconvert(), nb::arg("b_amax").noconvert(),
        nb::arg("scale_layout"), nb::arg("c").noconvert().none(), nb::arg("bias").noconvert().none(), nb::arg("beta"),
        nb::arg("out").noconvert(), nb::arg("backend"));

  m.def("gemm",
        [gemm_args](const Array& ad, const Array& as, const Array& aa, const Array& bd, const Array& bs,
                    const Array& ba, int layout, OptArray c, OptArray bias, float beta, const Array& d, int backend,
                    OptArray workspace, uintptr_t stream) {
          Quantized a(ad, as, aa, "a"), b(bd, bs, ba, "b");
          std::optional<nvfp4_tensor_t> ct, bt;
          if (c) ct = desc(*c, "c");
          if (bias) bt = desc(*bias, "bias");
          nvfp4_tensor_t dt = desc(d, "out");
          nvfp4_gemm_args_t args = gemm_args(a, b, layout, ct, bt, beta, &dt, backend);
          void* ws = workspace ? workspace->data() : nullptr;
          size_t ws_bytes = workspace ? workspace->nbytes() : 0;
          nb::gil_scoped_release nogil;
          check(nvfp4_gemm(&args, ws, ws_bytes, stream_of(stream)));
        },
        nb::arg("a_data").noconvert(), nb::arg("a_scales").noconvert(), nb::arg("a_amax").noconvert(),
        nb::arg("b_data").noconvert(), nb::arg("b_scales").noconvert(), nb::arg("b_amax").noconvert(),
        nb::arg("scale_layout"), nb::arg("c").noconvert().none(), nb::arg("bias").noconvert().none(), nb::arg("beta"),
        nb::arg("out").noconvert(), nb::arg("backend"), nb::arg("workspace").noconvert().none(), nb::arg("stream"));

  m.def("backend_supported", [](int backend, int cc) {
    // Never raises: an unknown backend is simply not supported.
    return backend >= NVFP4_BACKEND_AUTO && backend <= NVFP4_BACKEND_CUDNN &&
           nvfp4_backend_supported(static_cast<nvfp4_backend_t>(backend), cc) != 0;
  });
  m.def("cuda_device_count", []() { return nvfp4_cuda_device_count(); });
  m.def("cuda_device_cc", [](int device) { return nvfp4_cuda_device_cc(device); });
  m.def("build_cuda_archs", []() { return std::string(nvfp4_build_cuda_archs()); });
  m.def("gemm_env_key", []() { return std::string(nvfp4_gemm_env_key()); });
  m.def("version", []() { return std::string(nvfp4_version_string()); });
  m.def("default_rht_sign_mask", []() { return nvfp4_default_rht_sign_mask(); });

  // ---- raw-pointer fast path: see raw2() above -------------------------------------
  // quantize_raw(x, dtype, rows, cols, (row data, scales, amax) or 0s, (col ...) or 0s,
  //              block, rounding, layout, rht, sign_mask, seed, offset, offset_device,
  //              device_type, device_id, stream, workspace, offset_counter=0). Columnwise outputs
  //              are [cols, roundup(rows,16)]. An orientation is requested iff its amax address
  //              is not 0. workspace: 0, or quantize_workspace_bytes at that address
  //              (nvfp4_quantize_ws). offset_counter: 0 or cfg.offset_counter's address.
  m.attr("quantize_workspace_bytes") = NVFP4_QUANTIZE_WORKSPACE_BYTES;
  m.def("quantize_raw",
        [](uintptr_t x, int dtype, int64_t rows, int64_t cols, uintptr_t rd, uintptr_t rs, uintptr_t ra, uintptr_t cd,
           uintptr_t cs, uintptr_t ca, int block, int rounding, int layout, uint32_t rht, uint32_t sign_mask,
           uint64_t seed, uint64_t offset, uintptr_t offset_device, int dev_type, int dev_id, uintptr_t stream,
           uintptr_t ws, uintptr_t offset_counter) {
          nvfp4_tensor_t in = raw2(x, dtype_arg(dtype, "x"), rows, cols, dev_type, dev_id);
          nvfp4_quant_config_t cfg =
              raw_config(block, rounding, layout, rht, sign_mask, seed, offset, offset_device, offset_counter);
          const int64_t rp = (rows + 15) / 16 * 16;
          nvfp4_quantized_t row = raw_q(rd, rs, ra, rows, cols, layout, dev_type, dev_id);
          nvfp4_quantized_t col = raw_q(cd, cs, ca, cols, rp, layout, dev_type, dev_id);
          nb::gil_scoped_release nogil;
          // an orientation is requested by its amax address (never 0 when requested, while the
          // data of an empty tensor may sit at address 0)
          check(nvfp4_quantize_ws(&in, &cfg, ra ? &row : nullptr, ca ? &col : nullptr, reinterpret_cast<void*>(ws),
                                  ws ? NVFP4_QUANTIZE_WORKSPACE_BYTES : 0, stream_of(stream)));
        },
        nb::arg("x"), nb::arg("dtype"), nb::arg("rows"), nb::arg("cols"), nb::arg("rd"), nb::arg("rs"), nb::arg("ra"),
        nb::arg("cd"), nb::arg("cs"), nb::arg("ca"), nb::arg("block"), nb::arg("rounding"), nb::arg("layout"),
        nb::arg("rht"), nb::arg("sign_mask"), nb::arg("seed"), nb::arg("offset"), nb::arg("offset_device"),
        nb::arg("device_type"), nb::arg("device_id"), nb::arg("stream"), nb::arg("workspace"),
        nb::arg("offset_counter") = 0);

  // fp8_cast_raw(x, dtype, rows, cols, format, margin, scale, q, qt, want_q, want_qt, scale_inv, amax,
  //              device_type, device_id, stream, amax_accumulate=False): nvfp4_fp8_cast on raw
  //              addresses (scale, scale_inv, amax: 0 when absent, else float32 [1]). The outputs
  //              are requested by the flags, not by their addresses: an empty tensor's data may
  //              sit at address 0.
  m.def("fp8_cast_raw",
        [](uintptr_t x, int dtype, int64_t rows, int64_t cols, int format, float margin, uintptr_t scale, uintptr_t q,
           uintptr_t qt, bool want_q, bool want_qt, uintptr_t scale_inv, uintptr_t amax, int dev_type, int dev_id,
           uintptr_t stream, bool amax_accumulate) {
          nvfp4_tensor_t in = raw2(x, dtype_arg(dtype, "x"), rows, cols, dev_type, dev_id);
          nvfp4_tensor_t tq = raw2(q, NVFP4_DTYPE_UINT8, rows, cols, dev_type, dev_id);
          nvfp4_tensor_t tqt = raw2(qt, NVFP4_DTYPE_UINT8, cols, rows, dev_type, dev_id);
          nvfp4_tensor_t ts = raw1(scale, NVFP4_DTYPE_FLOAT32, 1, dev_type, dev_id);
          nvfp4_tensor_t tsi = raw1(scale_inv, NVFP4_DTYPE_FLOAT32, 1, dev_type, dev_id);
          nvfp4_tensor_t ta = raw1(amax, NVFP4_DTYPE_FLOAT32, 1, dev_type, dev_id);
          nvfp4_fp8_config_t cfg{static_cast<nvfp4_fp8_format_t>(format), margin, scale ? &ts : nullptr,
                                 amax_accumulate ? 1 : 0};
          nb::gil_scoped_release nogil;
          check(nvfp4_fp8_cast(&in, &cfg, want_q ? &tq : nullptr, want_qt ? &tqt : nullptr, scale_inv ? &tsi : nullptr,
                               amax ? &ta : nullptr, stream_of(stream)));
        },
        nb::arg("x"), nb::arg("dtype"), nb::arg("rows"), nb::arg("cols"), nb::arg("format"), nb::arg("margin"),
        nb::arg("scale"), nb::arg("q"), nb::arg("qt"), nb::arg("want_q"), nb::arg("want_qt"), nb::arg("scale_inv"),
        nb::arg("amax"), nb::arg("device_type"), nb::arg("device_id"), nb::arg("stream"),
        nb::arg("amax_accumulate") = false);

  // fp8_delayed_update_raw(history, len, scale, format, margin, algo, device_type, device_id,
  //                        stream): nvfp4_fp8_delayed_update on raw addresses (float32 [len], [1]).
  m.def("fp8_delayed_update_raw",
        [](uintptr_t history, int64_t len, uintptr_t scale, int format, float margin, int algo, int dev_type,
           int dev_id, uintptr_t stream) {
          nvfp4_tensor_t th = raw1(history, NVFP4_DTYPE_FLOAT32, len, dev_type, dev_id);
          nvfp4_tensor_t ts = raw1(scale, NVFP4_DTYPE_FLOAT32, 1, dev_type, dev_id);
          nb::gil_scoped_release nogil;
          check(nvfp4_fp8_delayed_update(&th, &ts, static_cast<nvfp4_fp8_format_t>(format), margin,
                                         static_cast<nvfp4_fp8_amax_algo_t>(algo), stream_of(stream)));
        });

  // gemm_raw(a (data, scales, amax), b (...), m, n, k, layout, c, c_dtype, bias, bias_dtype, beta,
  //          d, d_dtype, backend, workspace, workspace_bytes, device_type, device_id, stream);
  // with workspace_bytes == -1 it only returns the workspace size the call needs.
  m.def("gemm_raw",
        [](uintptr_t ad, uintptr_t as, uintptr_t aa, uintptr_t bd, uintptr_t bs, uintptr_t ba, int64_t M, int64_t N,
           int64_t K, int layout, uintptr_t c, int c_dtype, uintptr_t bias, int bias_dtype, float beta, uintptr_t d,
           int d_dtype, int backend, uintptr_t ws, int64_t ws_bytes, int dev_type, int dev_id, uintptr_t stream) {
          RawGemm g(ad, as, aa, bd, bs, ba, M, N, K, layout, c, c_dtype, bias, bias_dtype, beta, d, d_dtype, backend,
                    dev_type, dev_id);
          const nvfp4_gemm_args_t& args = g.args;
          if (ws_bytes < 0) {
            size_t bytes = 0;
            check(nvfp4_gemm_workspace_size(&args, &bytes));
            return static_cast<int64_t>(bytes);
          }
          nb::gil_scoped_release nogil;
          check(nvfp4_gemm(&args, reinterpret_cast<void*>(ws), static_cast<size_t>(ws_bytes), stream_of(stream)));
          return int64_t{0};
        });

  // ---- decoded operands (nvfp4_quantize_decoded, nvfp4_gemm_decoded) on raw addresses ----
  // quantize_dec_raw(x, dtype, rows, cols, (row data, scales, amax), (row values, amax),
  //                  (col data, scales, amax), (col values, amax), block, rounding, layout, rht,
  //                  sign_mask, seed, offset, offset_device, device_type, device_id, stream,
  //                  workspace, offset_counter=0): each of the four outputs is requested iff its
  //   amax address is not 0; workspace and offset_counter as quantize_raw's.
  m.def("quantize_dec_raw",
        [](uintptr_t x, int dtype, int64_t rows, int64_t cols, uintptr_t rd, uintptr_t rs, uintptr_t ra, uintptr_t rv,
           uintptr_t rva, uintptr_t cd, uintptr_t cs, uintptr_t ca, uintptr_t cv, uintptr_t cva, int block,
           int rounding, int layout, uint32_t rht, uint32_t sign_mask, uint64_t seed, uint64_t offset,
           uintptr_t offset_device, int dev_type, int dev_id, uintptr_t stream, uintptr_t ws, uintptr_t offset_counter) {
          nvfp4_tensor_t in = raw2(x, dtype_arg(dtype, "x"), rows, cols, dev_type, dev_id);
          nvfp4_quant_config_t cfg =
              raw_config(block, rounding, layout, rht, sign_mask, seed, offset, offset_device, offset_counter);
          const int64_t rp = (rows + 15) / 16 * 16;
          nvfp4_quantized_t row = raw_q(rd, rs, ra, rows, cols, layout, dev_type, dev_id);
          nvfp4_quantized_t col = raw_q(cd, cs, ca, cols, rp, layout, dev_type, dev_id);
          nvfp4_decoded_t rdec{raw2(rv, NVFP4_DTYPE_BFLOAT16, rows, cols, dev_type, dev_id),
                               raw1(rva, NVFP4_DTYPE_FLOAT32, 1, dev_type, dev_id)};
          nvfp4_decoded_t cdec{raw2(cv, NVFP4_DTYPE_BFLOAT16, cols, rp, dev_type, dev_id),
                               raw1(cva, NVFP4_DTYPE_FLOAT32, 1, dev_type, dev_id)};
          nb::gil_scoped_release nogil;
          check(nvfp4_quantize_decoded_ws(&in, &cfg, ra ? &row : nullptr, ca ? &col : nullptr, rva ? &rdec : nullptr,
                                          cva ? &cdec : nullptr, reinterpret_cast<void*>(ws),
                                          ws ? NVFP4_QUANTIZE_WORKSPACE_BYTES : 0, stream_of(stream)));
        },
        nb::arg("x"), nb::arg("dtype"), nb::arg("rows"), nb::arg("cols"), nb::arg("rd"), nb::arg("rs"), nb::arg("ra"),
        nb::arg("rv"), nb::arg("rva"), nb::arg("cd"), nb::arg("cs"), nb::arg("ca"), nb::arg("cv"), nb::arg("cva"),
        nb::arg("block"), nb::arg("rounding"), nb::arg("layout"), nb::arg("rht"), nb::arg("sign_mask"),
        nb::arg("seed"), nb::arg("offset"), nb::arg("offset_device"), nb::arg("device_type"), nb::arg("device_id"),
        nb::arg("stream"), nb::arg("workspace"), nb::arg("offset_counter") = 0);

  // gemm_dec_raw(a (data, scales, amax), a decoded (values, amax), b (...), b decoded (...), m, n, k,
  //              layout, c, c_dtype, bias, bias_dtype, beta, d, d_dtype, backend, workspace,
  //              workspace_bytes, device_type, device_id, stream): an operand is decoded iff its
  //              decoded amax address is not 0 (its codes are then not passed). workspace_bytes
  //              == -1: returns the workspace size the call needs.
  m.def("gemm_dec_raw",
        [](uintptr_t ad, uintptr_t as, uintptr_t aa, uintptr_t av, uintptr_t ava, uintptr_t bd, uintptr_t bs,
           uintptr_t ba, uintptr_t bv, uintptr_t bva, int64_t M, int64_t N, int64_t K, int layout, uintptr_t c,
           int c_dtype, uintptr_t bias, int bias_dtype, float beta, uintptr_t d, int d_dtype, int backend,
           uintptr_t ws, int64_t ws_bytes, int dev_type, int dev_id, uintptr_t stream) {
          RawGemm g(ad, as, aa, bd, bs, ba, M, N, K, layout, c, c_dtype, bias, bias_dtype, beta, d, d_dtype, backend,
                    dev_type, dev_id);
          nvfp4_decoded_t adec{raw2(av, NVFP4_DTYPE_BFLOAT16, M, K, dev_type, dev_id),
                               raw1(ava, NVFP4_DTYPE_FLOAT32, 1, dev_type, dev_id)};
          nvfp4_decoded_t bdec{raw2(bv, NVFP4_DTYPE_BFLOAT16, N, K, dev_type, dev_id),
                               raw1(bva, NVFP4_DTYPE_FLOAT32, 1, dev_type, dev_id)};
          nvfp4_gemm_args_t args = g.args;  // a copy: the operands given decoded are dropped from it
          if (ava) args.a = nullptr;
          if (bva) args.b = nullptr;
          const nvfp4_decoded_t* pa = ava ? &adec : nullptr;
          const nvfp4_decoded_t* pb = bva ? &bdec : nullptr;
          if (ws_bytes < 0) {
            size_t bytes = 0;
            check(nvfp4_gemm_decoded_workspace_size(&args, pa, pb, &bytes));
            return static_cast<int64_t>(bytes);
          }
          nb::gil_scoped_release nogil;
          check(nvfp4_gemm_decoded(&args, pa, pb, reinterpret_cast<void*>(ws), static_cast<size_t>(ws_bytes),
                                   stream_of(stream)));
          return int64_t{0};
        });

  // gemm_takes_decoded_raw(the arguments of gemm_raw but the workspace): 1 if the runner
  // nvfp4_gemm would choose reads decoded operands (nvfp4_gemm_takes_decoded).
  m.def("gemm_takes_decoded_raw",
        [](uintptr_t ad, uintptr_t as, uintptr_t aa, uintptr_t bd, uintptr_t bs, uintptr_t ba, int64_t M, int64_t N,
           int64_t K, int layout, uintptr_t c, int c_dtype, uintptr_t bias, int bias_dtype, float beta, uintptr_t d,
           int d_dtype, int backend, int dev_type, int dev_id) {
          RawGemm g(ad, as, aa, bd, bs, ba, M, N, K, layout, c, c_dtype, bias, bias_dtype, beta, d, d_dtype, backend,
                    dev_type, dev_id);
          int takes = 0;
          check(nvfp4_gemm_takes_decoded(&g.args, &takes));
          return takes != 0;
        });

  // The GEMM runner table (nvfp4_runner_*), for nvfp4.device_info() and the build checks.
  m.def("runner_count", []() { return nvfp4_runner_count(); });
  m.def("runner_info", [](int index) {
    nvfp4_runner_info_t r{};
    check(nvfp4_runner_info(index, &r));
    nb::dict d;
    d["name"] = r.name;
    d["backend"] = static_cast<int>(r.backend);
    d["format"] = r.format;
    d["family"] = r.family;
    d["cc_min"] = r.cc_min;
    d["cc_max"] = r.cc_max;
    d["targets"] = r.targets;
    d["kernels"] = r.kernels;
    d["shapes"] = r.shapes;
    d["description"] = r.description;
    d["built"] = r.built != 0;
    return d;
  }, nb::arg("index"));
  m.def("runner_compiled_for", [](int index, int cc) { return nvfp4_runner_compiled_for(index, cc) != 0; },
        nb::arg("index"), nb::arg("cc"));
  m.def("runner_supported", [](int index, int cc) { return nvfp4_runner_supported(index, cc) != 0; },
        nb::arg("index"), nb::arg("cc"));
  // (status, checks run, message): the host-only self-checks, for tests.
  m.def("runner_check", [](int index) {
    int checked = 0;
    nvfp4_status_t s;
    {
      nb::gil_scoped_release nogil;
      s = nvfp4_runner_check(index, &checked);
    }
    return nb::make_tuple(static_cast<int>(s), checked, std::string(s == NVFP4_SUCCESS ? "" : nvfp4_last_error()));
  }, nb::arg("index"));

  // ---- MXFP4 (nvfp4_mx_* entry points); the outputs come as (data, scales) pairs of uint8 ----
  m.def("mx_quantize",
        [](const Array& x, OptArray rd, OptArray rs, OptArray cd, OptArray cs, int row_rounding, int row_rule,
           int col_rounding, int col_rule, int layout, uint64_t seed, uint64_t offset, uintptr_t stream) {
          nvfp4_tensor_t in = desc(x, "x");
          nvfp4_mx_quant_config_t cfg;
          nvfp4_mx_quant_config_default(&cfg);
          cfg.rowwise.rounding = enum_arg<nvfp4_rounding_t>(row_rounding, 2, "row_rounding", "0 = rtn, 1 = sr");
          cfg.rowwise.scale_rule =
              enum_arg<nvfp4_mx_scale_rule_t>(row_rule, 3, "row_rule", "0 = ocp, 1 = ceil, 2 = tetrajet");
          cfg.columnwise.rounding = enum_arg<nvfp4_rounding_t>(col_rounding, 2, "col_rounding", "0 = rtn, 1 = sr");
          cfg.columnwise.scale_rule =
              enum_arg<nvfp4_mx_scale_rule_t>(col_rule, 3, "col_rule", "0 = ocp, 1 = ceil, 2 = tetrajet");
          cfg.scale_layout = layout_arg(layout);
          cfg.seed = seed;
          cfg.offset = offset;
          nvfp4_mx_quantized_t row{}, col{};
          if (rd) {
            if (!rs) throw nb::value_error("row_scales: required with row_data");
            row.data = desc(*rd, "rowwise.data");
            row.scales = desc(*rs, "rowwise.scales");
          }
          if (cd) {
            if (!cs) throw nb::value_error("col_scales: required with col_data");
            col.data = desc(*cd, "columnwise.data");
            col.scales = desc(*cs, "columnwise.scales");
          }
          nb::gil_scoped_release nogil;
          check(nvfp4_mx_quantize(&in, &cfg, rd ? &row : nullptr, cd ? &col : nullptr, stream_of(stream)));
        },
        nb::arg("x").noconvert(), nb::arg("row_data").noconvert().none(), nb::arg("row_scales").noconvert().none(),
        nb::arg("col_data").noconvert().none(), nb::arg("col_scales").noconvert().none(), nb::arg("row_rounding"),
        nb::arg("row_rule"),
        nb::arg("col_rounding"), nb::arg("col_rule"), nb::arg("scale_layout"), nb::arg("seed"), nb::arg("offset"),
        nb::arg("stream"));

  m.def("mx_dequantize",
        [](const Array& data, const Array& scales, int layout, const Array& out, uintptr_t stream) {
          nvfp4_mx_quantized_t q{};
          q.data = desc(data, "q.data");
          q.scales = desc(scales, "q.scales");
          nvfp4_tensor_t o = desc(out, "out");
          nb::gil_scoped_release nogil;
          check(nvfp4_mx_dequantize(&q, layout_arg(layout), &o, stream_of(stream)));
        },
        nb::arg("data").noconvert(), nb::arg("scales").noconvert(), nb::arg("scale_layout"),
        nb::arg("out").noconvert(), nb::arg("stream"));

  // MXFP4 GEMM: the operands come as (data, scales) pairs. want_ws: return the workspace
  // size and run nothing (one binding for both calls).
  m.def("mx_gemm",
        [](const Array& ad, const Array& as, const Array& bd, const Array& bs, int layout, OptArray c, OptArray bias,
           float beta, const Array& d, int backend, OptArray workspace, uintptr_t stream, bool want_ws) -> size_t {
          nvfp4_mx_quantized_t a{}, b{};
          a.data = desc(ad, "a.data");
          a.scales = desc(as, "a.scales");
          b.data = desc(bd, "b.data");
          b.scales = desc(bs, "b.scales");
          std::optional<nvfp4_tensor_t> ct, bt;
          if (c) ct = desc(*c, "c");
          if (bias) bt = desc(*bias, "bias");
          nvfp4_tensor_t dt = desc(d, "out");
          nvfp4_mx_gemm_args_t args{};
          args.a = &a;
          args.b = &b;
          args.scale_layout = layout_arg(layout);
          args.c = ct ? &*ct : nullptr;
          args.bias = bt ? &*bt : nullptr;
          args.beta = beta;
          args.d = &dt;
          args.backend = backend_arg(backend);
          if (want_ws) {
            size_t bytes = 0;
            check(nvfp4_mx_gemm_workspace_size(&args, &bytes));
            return bytes;
          }
          void* ws = workspace ? workspace->data() : nullptr;
          size_t ws_bytes = workspace ? workspace->nbytes() : 0;
          nb::gil_scoped_release nogil;
          check(nvfp4_mx_gemm(&args, ws, ws_bytes, stream_of(stream)));
          return 0;
        },
        nb::arg("a_data").noconvert(), nb::arg("a_scales").noconvert(), nb::arg("b_data").noconvert(),
        nb::arg("b_scales").noconvert(), nb::arg("scale_layout"), nb::arg("c").noconvert().none(),
        nb::arg("bias").noconvert().none(), nb::arg("beta"), nb::arg("out").noconvert(), nb::arg("backend"),
        nb::arg("workspace").noconvert().none(), nb::arg("stream"), nb::arg("want_ws"));

  bind_grouped(m);
}

// ---- grouped (MoE) tensors, raw-pointer entry points of the op layer ------------------------
// Shapes are those of nvfp4.h's grouped section, built here from T, E and the features; the
// C API validates them and the op layer's allocations stand behind the addresses.
namespace {

nvfp4_tensor_t raw3(uintptr_t ptr, nvfp4_dtype_t dt, int64_t a, int64_t b, int64_t c, int dev_type, int dev_id) {
  nvfp4_tensor_t t = raw2(ptr, dt, a, b, dev_type, dev_id);
  t.ndim = 3;
  t.shape[2] = c;
  t.strides[0] = b * c;
  t.strides[1] = c;
  t.strides[2] = 1;
  return t;
}

int64_t up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// A grouped rowwise direction of [T, K] in E groups.
nvfp4_grouped_quantized_t grouped_row(uintptr_t d, uintptr_t s, uintptr_t a, int64_t t, int64_t k, int64_t e, int dt,
                                      int di) {
  nvfp4_grouped_quantized_t q{};
  q.data = raw2(d, NVFP4_DTYPE_UINT8, t, k / 2, dt, di);
  q.scales = raw2(s, NVFP4_DTYPE_E4M3, up(t + 127 * e, 128), up(k / 16, 4), dt, di);
  q.amax = raw1(a, NVFP4_DTYPE_FLOAT32, e, dt, di);
  return q;
}

// A grouped columnwise direction of [T, F] in E groups.
nvfp4_grouped_quantized_t grouped_col(uintptr_t d, uintptr_t s, uintptr_t a, int64_t t, int64_t f, int64_t e, int dt,
                                      int di) {
  nvfp4_grouped_quantized_t q{};
  q.data = raw1(d, NVFP4_DTYPE_UINT8, f * (t + 31 * e) / 2, dt, di);
  q.scales = raw1(s, NVFP4_DTYPE_E4M3, up(f, 128) * ((t + 63 * e) / 16), dt, di);
  q.amax = raw1(a, NVFP4_DTYPE_FLOAT32, e, dt, di);
  return q;
}

// A batched direction: E tensors [rows, cols].
nvfp4_grouped_quantized_t batched(uintptr_t d, uintptr_t s, uintptr_t a, int64_t e, int64_t rows, int64_t cols,
                                  int dt, int di) {
  nvfp4_grouped_quantized_t q{};
  q.data = raw3(d, NVFP4_DTYPE_UINT8, e, rows, cols / 2, dt, di);
  q.scales = raw3(s, NVFP4_DTYPE_E4M3, e, up(rows, 128), up(cols / 16, 4), dt, di);
  q.amax = raw1(a, NVFP4_DTYPE_FLOAT32, e, dt, di);
  return q;
}

}  // namespace

void bind_grouped(nb::module_& m) {
  // grouped_quantize_raw(x, dtype, T, K, offs, E, offs_error, (row data, scales, amax) or 0s,
  //                      (col ...) or 0s, rounding, rht, sign_mask, seed, offset, offset_device,
  //                      device_type, device_id, stream). A direction is requested iff its
  //                      amax address is not 0; offs_error 0: not wanted.
  m.def("grouped_quantize_raw",
        [](uintptr_t x, int dtype, int64_t T, int64_t K, uintptr_t offs, int64_t E, uintptr_t offs_error,
           uintptr_t rd, uintptr_t rs, uintptr_t ra, uintptr_t cd, uintptr_t cs, uintptr_t ca, int rounding,
           uint32_t rht, uint32_t sign_mask, uint64_t seed, uint64_t offset, uintptr_t offset_device, int dev_type,
           int dev_id, uintptr_t stream) {
          nvfp4_tensor_t in = raw2(x, dtype_arg(dtype, "x"), T, K, dev_type, dev_id);
          nvfp4_quant_config_t cfg =
              raw_config(0, rounding, NVFP4_SCALES_SWIZZLED, rht, sign_mask, seed, offset, offset_device);
          nvfp4_groups_t g{reinterpret_cast<const int32_t*>(offs), E, T, reinterpret_cast<int32_t*>(offs_error)};
          nvfp4_grouped_quantized_t row = grouped_row(rd, rs, ra, T, K, E, dev_type, dev_id);
          nvfp4_grouped_quantized_t col = grouped_col(cd, cs, ca, T, K, E, dev_type, dev_id);
          nb::gil_scoped_release nogil;
          check(nvfp4_grouped_quantize(&in, &g, &cfg, ra ? &row : nullptr, ca ? &col : nullptr, stream_of(stream)));
        });

  // batched_quantize_raw(x, dtype, E, N, K, (row ...) or 0s, (col ...) or 0s, block, rounding, rht,
  //                      sign_mask, seed, offset, offset_device, device_type, device_id, stream).
  m.def("batched_quantize_raw",
        [](uintptr_t x, int dtype, int64_t E, int64_t N, int64_t K, uintptr_t rd, uintptr_t rs, uintptr_t ra,
           uintptr_t cd, uintptr_t cs, uintptr_t ca, int block, int rounding, uint32_t rht, uint32_t sign_mask,
           uint64_t seed, uint64_t offset, uintptr_t offset_device, int dev_type, int dev_id, uintptr_t stream) {
          nvfp4_tensor_t in = raw3(x, dtype_arg(dtype, "x"), E, N, K, dev_type, dev_id);
          nvfp4_quant_config_t cfg =
              raw_config(block, rounding, NVFP4_SCALES_SWIZZLED, rht, sign_mask, seed, offset, offset_device);
          nvfp4_grouped_quantized_t row = batched(rd, rs, ra, E, N, K, dev_type, dev_id);
          nvfp4_grouped_quantized_t col = batched(cd, cs, ca, E, K, up(N, 16), dev_type, dev_id);
          nb::gil_scoped_release nogil;
          check(nvfp4_batched_quantize(&in, &cfg, ra ? &row : nullptr, ca ? &col : nullptr, stream_of(stream)));
        });

  // grouped_gemm_raw(kind, a (data, scales, amax), b (...), offs, E, T, N, K, offs_error, d, d_dtype,
  //                  backend, workspace, workspace_bytes, device_type, device_id, stream).
  //   kind 0 (ragged M): a grouped rowwise [T, K], b batched [E, N, K], d [T, N];
  //   kind 1 (ragged K): a grouped columnwise of [T, N], b of [T, K], d [E, N, K].
  // With workspace_bytes == -1 it only returns the workspace size.
  m.def("grouped_gemm_raw",
        [](int kind, uintptr_t ad, uintptr_t as, uintptr_t aa, uintptr_t bd, uintptr_t bs, uintptr_t ba,
           uintptr_t offs, int64_t E, int64_t T, int64_t N, int64_t K, uintptr_t offs_error, uintptr_t d, int d_dtype,
           int backend, uintptr_t ws, int64_t ws_bytes, int dev_type, int dev_id, uintptr_t stream) {
          nvfp4_grouped_quantized_t a{}, b{};
          nvfp4_tensor_t dt{};
          if (kind == NVFP4_GROUPED_RAGGED_M) {
            a = grouped_row(ad, as, aa, T, K, E, dev_type, dev_id);
            b = batched(bd, bs, ba, E, N, K, dev_type, dev_id);
            dt = raw2(d, dtype_arg(d_dtype, "out"), T, N, dev_type, dev_id);
          } else {
            a = grouped_col(ad, as, aa, T, N, E, dev_type, dev_id);
            b = grouped_col(bd, bs, ba, T, K, E, dev_type, dev_id);
            dt = raw3(d, dtype_arg(d_dtype, "out"), E, N, K, dev_type, dev_id);
          }
          nvfp4_grouped_gemm_args_t args{};
          args.kind = enum_arg<nvfp4_grouped_kind_t>(kind, 2, "kind", "0 = ragged M, 1 = ragged K");
          args.a = &a;
          args.b = &b;
          args.groups = {reinterpret_cast<const int32_t*>(offs), E, T, reinterpret_cast<int32_t*>(offs_error)};
          args.d = &dt;
          args.backend = backend_arg(backend);
          if (ws_bytes < 0) {
            size_t bytes = 0;
            check(nvfp4_grouped_gemm_workspace_size(&args, &bytes));
            return static_cast<int64_t>(bytes);
          }
          nb::gil_scoped_release nogil;
          check(nvfp4_grouped_gemm(&args, reinterpret_cast<void*>(ws), static_cast<size_t>(ws_bytes),
                                   stream_of(stream)));
          return int64_t{0};
        });

  // ---- gather rows (the FSDP weight all-gather, nvfp4.h's gather section), raw addresses ----
  // gather_rows_quantize_raw(x, dtype, rows, k, amax, out, rows_out, row_bytes, device_type,
  //                          device_id, stream)
  m.def("gather_rows_quantize_raw",
        [](uintptr_t x, int dtype, int64_t rows, int64_t k, uintptr_t amax, uintptr_t out, int64_t rows_out,
           int64_t row_bytes, int dev_type, int dev_id, uintptr_t stream) {
          nvfp4_tensor_t in = raw2(x, dtype_arg(dtype, "x"), rows, k, dev_type, dev_id);
          nvfp4_tensor_t a = raw1(amax, NVFP4_DTYPE_FLOAT32, 1, dev_type, dev_id);
          nvfp4_tensor_t o = raw2(out, NVFP4_DTYPE_UINT8, rows_out, row_bytes, dev_type, dev_id);
          nb::gil_scoped_release nogil;
          check(nvfp4_gather_rows_quantize(&in, &a, &o, stream_of(stream)));
        });
  // gather_rows_assemble_raw(in, rows_in, row_bytes, amax, n, k, (row data, scales, amax) or 0s,
  //                          (col data, scales, amax) or 0s, device_type, device_id, stream):
  //   swizzled scales; a direction is requested iff its amax address is not 0
  m.def("gather_rows_assemble_raw",
        [](uintptr_t in, int64_t rows_in, int64_t row_bytes, uintptr_t amax, int64_t n, int64_t k, uintptr_t rd,
           uintptr_t rs, uintptr_t ra, uintptr_t cd, uintptr_t cs, uintptr_t ca, int dev_type, int dev_id,
           uintptr_t stream) {
          nvfp4_tensor_t i = raw2(in, NVFP4_DTYPE_UINT8, rows_in, row_bytes, dev_type, dev_id);
          nvfp4_tensor_t a = raw1(amax, NVFP4_DTYPE_FLOAT32, 1, dev_type, dev_id);
          nvfp4_quantized_t row = raw_q(rd, rs, ra, n, k, NVFP4_SCALES_SWIZZLED, dev_type, dev_id);
          nvfp4_quantized_t col = raw_q(cd, cs, ca, k, n, NVFP4_SCALES_SWIZZLED, dev_type, dev_id);
          nb::gil_scoped_release nogil;
          check(nvfp4_gather_rows_assemble(&i, &a, ra ? &row : nullptr, ca ? &col : nullptr, stream_of(stream)));
        });
}
