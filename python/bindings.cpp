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
  throw nb::type_error((std::string(name) + ": unsupported dtype").c_str());
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

struct Quantized {
  nvfp4_quantized_t q{};
  Quantized(const Array& data, const Array& scales, const Array& amax, const char* name) {
    std::string n(name);
    q.data = desc(data, (n + ".data").c_str());
    q.scales = desc(scales, (n + ".scales").c_str());
    q.amax = desc(amax, (n + ".amax").c_str());
  }
};

}  // namespace

NB_MODULE(_C, m) {
  m.doc() = "nvfp4 low-level bindings over the C API (use the nvfp4 package instead)";

  m.def("quantize",
        [](const Array& x, OptArray rd, OptArray rs, OptArray ra, OptArray cd, OptArray cs, OptArray ca, int block,
           int rounding, int layout, uint32_t rht, uint32_t sign_mask, uint64_t seed, uint64_t offset,
           uintptr_t stream) {
          nvfp4_tensor_t in = desc(x, "x");
          nvfp4_quant_config_t cfg;
          nvfp4_quant_config_default(&cfg);
          cfg.block = static_cast<nvfp4_block_t>(block);
          cfg.rounding = static_cast<nvfp4_rounding_t>(rounding);
          cfg.scale_layout = static_cast<nvfp4_scale_layout_t>(layout);
          cfg.rht = rht;
          cfg.rht_sign_mask = sign_mask;
          cfg.seed = seed;
          cfg.offset = offset;
          std::optional<Quantized> row, col;
          if (rd) row.emplace(*rd, *rs, *ra, "rowwise");
          if (cd) col.emplace(*cd, *cs, *ca, "columnwise");
          nb::gil_scoped_release nogil;
          check(nvfp4_quantize(&in, &cfg, row ? &row->q : nullptr, col ? &col->q : nullptr, stream_of(stream)));
        },
        nb::arg("x").noconvert(), nb::arg("row_data").none(), nb::arg("row_scales").none(),
        nb::arg("row_amax").none(), nb::arg("col_data").none(), nb::arg("col_scales").none(),
        nb::arg("col_amax").none(), nb::arg("block"), nb::arg("rounding"), nb::arg("scale_layout"),
        nb::arg("rht"), nb::arg("rht_sign_mask"), nb::arg("seed"), nb::arg("offset"), nb::arg("stream"));

  m.def("dequantize",
        [](const Array& data, const Array& scales, const Array& amax, int layout, const Array& out,
           uintptr_t stream) {
          Quantized q(data, scales, amax, "q");
          nvfp4_tensor_t o = desc(out, "out");
          nb::gil_scoped_release nogil;
          check(nvfp4_dequantize(&q.q, static_cast<nvfp4_scale_layout_t>(layout), &o, stream_of(stream)));
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
    args.scale_layout = static_cast<nvfp4_scale_layout_t>(layout);
    args.c = c ? &*c : nullptr;
    args.bias = bias ? &*bias : nullptr;
    args.beta = beta;
    args.d = d;
    args.backend = static_cast<nvfp4_backend_t>(backend);
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
        nb::arg("scale_layout"), nb::arg("c").none(), nb::arg("bias").none(), nb::arg("beta"),
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
        nb::arg("scale_layout"), nb::arg("c").none(), nb::arg("bias").none(), nb::arg("beta"),
        nb::arg("out").noconvert(), nb::arg("backend"), nb::arg("workspace").none(), nb::arg("stream"));

  m.def("backend_supported", [](int backend, int cc) { return nvfp4_backend_supported(static_cast<nvfp4_backend_t>(backend), cc) != 0; });
  m.def("cuda_device_count", []() { return nvfp4_cuda_device_count(); });
  m.def("cuda_device_cc", [](int device) { return nvfp4_cuda_device_cc(device); });
  m.def("build_cuda_archs", []() { return std::string(nvfp4_build_cuda_archs()); });
  m.def("version", []() { return std::string(nvfp4_version_string()); });
  m.def("default_rht_sign_mask", []() { return nvfp4_default_rht_sign_mask(); });

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
}
