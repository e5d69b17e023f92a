// Descriptor validation shared by the C API entry points (api.cpp and the entry points of
// other formats): every check raises an Error that `guarded` turns into a status and a
// thread-local message, so no exception crosses the extern "C" boundary.
#pragma once

#include <cstdint>
#include <exception>
#include <string>

#include "core/swizzle.h"
#include "internal.h"

#if defined(NVFP4_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace nvfp4::detail {

inline const char* dtype_name(nvfp4_dtype_t dt) {
  switch (dt) {
    case NVFP4_DTYPE_FLOAT32: return "float32";
    case NVFP4_DTYPE_FLOAT16: return "float16";
    case NVFP4_DTYPE_BFLOAT16: return "bfloat16";
    case NVFP4_DTYPE_UINT8: return "uint8";
    case NVFP4_DTYPE_E4M3: return "float8_e4m3fn";
    case NVFP4_DTYPE_FLOAT64: return "float64";
  }
  return "unknown";
}

inline bool is_float_io(nvfp4_dtype_t dt) {
  return dt == NVFP4_DTYPE_FLOAT32 || dt == NVFP4_DTYPE_FLOAT16 || dt == NVFP4_DTYPE_BFLOAT16;
}
inline bool is_byte(nvfp4_dtype_t dt) { return dt == NVFP4_DTYPE_UINT8 || dt == NVFP4_DTYPE_E4M3; }

inline std::string shape_str(const nvfp4_tensor_t& t) {
  std::string s = "[";
  for (int i = 0; i < t.ndim; ++i) s += (i ? ", " : "") + std::to_string(t.shape[i]);
  return s + "]";
}

inline int64_t numel(const nvfp4_tensor_t& t) {
  int64_t n = 1;
  for (int i = 0; i < t.ndim; ++i) n *= t.shape[i];
  return n;
}

// Validation failures throw this; the entry points catch it and return the status.
struct Error {
  nvfp4_status_t status;
  std::string message;
};
[[noreturn]] inline void raise(nvfp4_status_t s, std::string m) { throw Error{s, std::move(m)}; }
[[noreturn]] inline void invalid(std::string m) { raise(NVFP4_ERROR_INVALID_ARGUMENT, std::move(m)); }

inline void check_descriptor(const nvfp4_tensor_t* t, const char* name) {
  if (!t) invalid(std::string(name) + ": null descriptor");
  if (t->ndim < 0 || t->ndim > NVFP4_MAX_DIMS)
    invalid(std::string(name) + ": ndim " + std::to_string(t->ndim) + " out of range [0, 8]");
  for (int i = 0; i < t->ndim; ++i)
    if (t->shape[i] < 0) invalid(std::string(name) + ": negative dimension in shape " + shape_str(*t));
  if (t->device_type != NVFP4_DEVICE_CPU && t->device_type != NVFP4_DEVICE_CUDA)
    invalid(std::string(name) + ": unknown device type " + std::to_string(t->device_type));
  if (static_cast<unsigned>(t->dtype) > NVFP4_DTYPE_FLOAT64)
    invalid(std::string(name) + ": unknown dtype " + std::to_string(t->dtype));
  if (!t->data && numel(*t) > 0) invalid(std::string(name) + ": null data pointer");
  // Row-major contiguous (strides of size-1 dims, and of empty tensors, do not matter).
  int64_t expect = 1;
  for (int i = t->ndim - 1; i >= 0 && numel(*t) > 0; --i) {
    if (t->shape[i] != 1 && t->strides[i] != expect)
      invalid(std::string(name) + ": must be contiguous (row-major); got strides that are not");
    expect *= t->shape[i];
  }
  if (t->device_type == NVFP4_DEVICE_CUDA && t->data && (reinterpret_cast<uintptr_t>(t->data) % 16) != 0)
    invalid(std::string(name) + ": CUDA pointer must be 16-byte aligned");
}

inline void check_shape2(const nvfp4_tensor_t* t, const char* name, int64_t r, int64_t c) {
  if (t->ndim != 2 || t->shape[0] != r || t->shape[1] != c)
    invalid(std::string(name) + ": expected shape [" + std::to_string(r) + ", " + std::to_string(c) +
            "], got " + shape_str(*t));
}

inline void check_same_device(const nvfp4_tensor_t& ref, const nvfp4_tensor_t* t, const char* name) {
  if (t->device_type != ref.device_type || (t->device_type == NVFP4_DEVICE_CUDA && t->device_id != ref.device_id))
    invalid(std::string(name) + ": must be on the same device as the input");
}

// Expected shapes of one quantized direction of an orientation [rows, cols].
inline void check_quantized(const nvfp4_tensor_t& ref, const nvfp4_quantized_t* q, const char* name, int64_t rows,
                     int64_t cols, nvfp4_scale_layout_t layout) {
  const std::string n(name);
  check_descriptor(&q->data, (n + ".data").c_str());
  check_descriptor(&q->scales, (n + ".scales").c_str());
  check_descriptor(&q->amax, (n + ".amax").c_str());
  if (q->data.dtype != NVFP4_DTYPE_UINT8) invalid(n + ".data: dtype must be uint8 (packed E2M1 pairs)");
  if (!is_byte(q->scales.dtype)) invalid(n + ".scales: dtype must be float8_e4m3fn or uint8");
  if (q->amax.dtype != NVFP4_DTYPE_FLOAT32 || numel(q->amax) != 1) invalid(n + ".amax: must be float32 with 1 element");
  check_shape2(&q->data, (n + ".data").c_str(), rows, cols / 2);
  const int64_t sc = cols / 16;
  if (layout == NVFP4_SCALES_SWIZZLED)
    check_shape2(&q->scales, (n + ".scales").c_str(), core::swizzled_rows(rows), core::swizzled_cols(sc));
  else
    check_shape2(&q->scales, (n + ".scales").c_str(), rows, sc);
  check_same_device(ref, &q->data, (n + ".data").c_str());
  check_same_device(ref, &q->scales, (n + ".scales").c_str());
  check_same_device(ref, &q->amax, (n + ".amax").c_str());
}

#if defined(NVFP4_WITH_CUDA)
// Runs the CUDA work on the tensors' device and puts the caller's device back.
class DeviceGuard {
 public:
  explicit DeviceGuard(const nvfp4_tensor_t& t) {
    if (t.device_type != NVFP4_DEVICE_CUDA) return;
    cudaError_t e = cudaGetDevice(&prev_);
    if (e != cudaSuccess) raise(NVFP4_ERROR_CUDA, std::string("cudaGetDevice: ") + cudaGetErrorString(e));
    if (prev_ != t.device_id) {
      e = cudaSetDevice(t.device_id);
      if (e != cudaSuccess) raise(NVFP4_ERROR_CUDA, std::string("cudaSetDevice: ") + cudaGetErrorString(e));
      restore_ = true;
    }
  }
  ~DeviceGuard() {
    if (restore_) cudaSetDevice(prev_);
  }

 private:
  int prev_ = 0;
  bool restore_ = false;
};
#endif

template <class F>
inline nvfp4_status_t guarded(F&& f) {
  clear_error();
  try {
    return f();
  } catch (const Error& e) {
    return fail(e.status, e.message);
  } catch (const std::exception& e) {
    return fail(NVFP4_ERROR_INTERNAL, std::string("internal error: ") + e.what());
  } catch (...) {
    return fail(NVFP4_ERROR_INTERNAL, "internal error");
  }
}

inline bool on_cuda(const nvfp4_tensor_t& t) { return t.device_type == NVFP4_DEVICE_CUDA; }

inline void require_cuda_build(const nvfp4_tensor_t& t, const char* name) {
#if !defined(NVFP4_WITH_CUDA)
  if (on_cuda(t))
    raise(NVFP4_ERROR_NOT_SUPPORTED, std::string(name) + ": this nvfp4 build has no CUDA support (built without nvcc)");
#else
  (void)t;
  (void)name;
#endif
}

}  // namespace nvfp4::detail
