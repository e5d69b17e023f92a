// Descriptor validation shared by the C API entry points (api.cpp and the entry points of
// other formats): every check raises an Error that `guarded` turns into a status and a
// thread-local message, so no exception crosses the extern "C" boundary.
//
// What a descriptor must satisfy (the promises of nvfp4.h):
//  - enum fields hold one of their named values. They are read as the raw integers the
//    caller stored (a C caller can store anything; loading an out-of-range value as a C++
//    enum is undefined behaviour, and -fstrict-enums lets the compiler fold a range check
//    on the enum away), and are only used as enums once checked;
//  - 0 <= ndim <= NVFP4_MAX_DIMS, no negative dimension, and the element and byte counts
//    fit in int64 (every size derived from a shape is computed with checked arithmetic);
//  - a non-null data pointer when the tensor has elements, row-major contiguous;
//  - alignment: CUDA pointers 16 bytes, CPU pointers the size of one element;
//  - outputs do not overlap inputs or each other (c may alias d exactly).
#pragma once

#include <cstdint>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

#include "core/swizzle.h"
#include "format.h"
#include "internal.h"

#if defined(NVFP4_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace nvfp4::detail {

// Validation failures throw this; the entry points catch it and return the status.
struct Error {
  nvfp4_status_t status;
  std::string message;
};
[[noreturn]] inline void raise(nvfp4_status_t s, std::string m) { throw Error{s, std::move(m)}; }
[[noreturn]] inline void invalid(std::string m) { raise(NVFP4_ERROR_INVALID_ARGUMENT, std::move(m)); }

// ---- enums, read as integers ---------------------------------------------------------

// The integer stored in a C enum field (or parameter), read without loading it as the
// enum type. nvfp4.h's enums are int-sized in C and in C++ (no fixed underlying type,
// every enumerator fits in int).
template <class E>
inline int64_t enum_bits(const E& field) {
  static_assert(std::is_enum<E>::value && sizeof(E) == sizeof(int32_t), "nvfp4 C enums are int-sized");
  int32_t raw = 0;
  std::memcpy(&raw, &field, sizeof raw);
  return raw;
}

// The field's value as E once it is known to be one of 0 .. count-1 (the enums of
// nvfp4.h are numbered from 0 without gaps). `expected` lists the names for the message.
template <class E>
inline E checked_enum(const E& field, int64_t count, const std::string& name, const char* expected) {
  const int64_t v = enum_bits(field);
  if (v < 0 || v >= count) invalid(name + ": unknown value " + std::to_string(v) + " (expected " + expected + ")");
  return static_cast<E>(v);
}

inline nvfp4_dtype_t checked_dtype(const nvfp4_dtype_t& field, const std::string& name) {
  const int64_t v = enum_bits(field);
  if (v < 0 || v > NVFP4_DTYPE_FLOAT64)
    invalid(name + ": unknown dtype " + std::to_string(v) + " (expected an nvfp4_dtype_t value, 0 to 5)");
  return static_cast<nvfp4_dtype_t>(v);
}
inline nvfp4_scale_layout_t checked_layout(const nvfp4_scale_layout_t& field, const std::string& name) {
  return checked_enum(field, NVFP4_SCALES_SWIZZLED + 1, name, "LINEAR or SWIZZLED");
}

// ---- dtypes and shapes -----------------------------------------------------------------

// Only called on dtypes that passed checked_dtype (check_descriptor does that first).
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

inline int64_t dtype_bytes(nvfp4_dtype_t dt) {
  switch (dt) {
    case NVFP4_DTYPE_FLOAT32: return 4;
    case NVFP4_DTYPE_FLOAT16: return 2;
    case NVFP4_DTYPE_BFLOAT16: return 2;
    case NVFP4_DTYPE_UINT8: return 1;
    case NVFP4_DTYPE_E4M3: return 1;
    case NVFP4_DTYPE_FLOAT64: return 8;
  }
  return 1;
}

inline bool is_float_io(nvfp4_dtype_t dt) {
  return dt == NVFP4_DTYPE_FLOAT32 || dt == NVFP4_DTYPE_FLOAT16 || dt == NVFP4_DTYPE_BFLOAT16;
}
inline bool is_byte(nvfp4_dtype_t dt) { return dt == NVFP4_DTYPE_UINT8 || dt == NVFP4_DTYPE_E4M3; }

// Only called on descriptors whose ndim passed check_descriptor.
inline std::string shape_str(const nvfp4_tensor_t& t) {
  std::string s = "[";
  for (int i = 0; i < t.ndim; ++i) s += (i ? ", " : "") + std::to_string(t.shape[i]);
  return s + "]";
}

// ---- checked size arithmetic (operands are non-negative sizes) -----------------------

inline int64_t checked_mul(int64_t a, int64_t b, const std::string& what) {
  int64_t r = 0;
  if (!core::size_mul(a, b, &r))
    invalid(what + ": size overflows int64 (" + std::to_string(a) + " * " + std::to_string(b) + ")");
  return r;
}

inline int64_t checked_round_up(int64_t v, int64_t m, const std::string& what) {
  int64_t r = 0;
  if (!core::round_up_checked(v, m, &r))
    invalid(what + ": size overflows int64 (" + std::to_string(v) + " rounded up to a multiple of " +
            std::to_string(m) + ")");
  return r;
}

// A tensor with a zero dimension is empty, however large its other dimensions: the element
// counts below look for the zero before they multiply anything (the others may multiply past
// int64).
inline bool has_zero_dim(const nvfp4_tensor_t& t) {
  for (int i = 0; i < t.ndim; ++i)
    if (t.shape[i] == 0) return true;
  return false;
}

// Element count of a descriptor that passed check_descriptor (which proved it fits).
inline int64_t numel(const nvfp4_tensor_t& t) {
  if (has_zero_dim(t)) return 0;
  int64_t n = 1;
  for (int i = 0; i < t.ndim; ++i) n *= t.shape[i];
  return n;
}

inline int64_t checked_numel(const nvfp4_tensor_t& t, const std::string& name) {
  if (has_zero_dim(t)) return 0;
  int64_t n = 1;
  for (int i = 0; i < t.ndim; ++i)
    if (!core::size_mul(n, t.shape[i], &n))
      invalid(name + ": shape " + shape_str(t) + " has more elements than int64 can count");
  return n;
}

// ---- one descriptor ------------------------------------------------------------------

// cuda_align: the alignment a CUDA pointer needs (16 for every tensor a kernel reads in
// 16-byte chunks; the FP8 scaling state takes 4, a row or slot of a larger buffer).
inline void check_descriptor(const nvfp4_tensor_t* t, const char* name_c, uintptr_t cuda_align = 16) {
  const std::string name(name_c);
  if (!t) invalid(name + ": null descriptor");
  if (t->ndim < 0 || t->ndim > NVFP4_MAX_DIMS)
    invalid(name + ": ndim " + std::to_string(t->ndim) + " out of range [0, " + std::to_string(NVFP4_MAX_DIMS) + "]");
  const int64_t dev = enum_bits(t->device_type);
  if (dev != NVFP4_DEVICE_CPU && dev != NVFP4_DEVICE_CUDA)
    invalid(name + ": unknown device type " + std::to_string(dev) + " (expected CPU or CUDA)");
  if (t->device_type == NVFP4_DEVICE_CUDA && t->device_id < 0)
    invalid(name + ": negative CUDA device id " + std::to_string(t->device_id));
  const nvfp4_dtype_t dt = checked_dtype(t->dtype, name);
  for (int i = 0; i < t->ndim; ++i)
    if (t->shape[i] < 0) invalid(name + ": negative dimension in shape " + shape_str(*t));
  const int64_t n = checked_numel(*t, name);
  int64_t bytes = 0;
  if (!core::size_mul(n, dtype_bytes(dt), &bytes))
    invalid(name + ": shape " + shape_str(*t) + " of " + dtype_name(dt) + " spans more bytes than int64 can count");
  if (!t->data && n > 0) invalid(name + ": null data pointer");
  // Row-major contiguous (strides of size-1 dims, and of empty tensors, do not matter).
  // The running product stays <= n, so it cannot overflow.
  int64_t expect = 1;
  for (int i = t->ndim - 1; i >= 0 && n > 0; --i) {
    if (t->shape[i] != 1 && t->strides[i] != expect)
      invalid(name + ": must be contiguous (row-major); got strides that are not");
    expect *= t->shape[i];
  }
  const uintptr_t addr = reinterpret_cast<uintptr_t>(t->data);
  if (t->device_type == NVFP4_DEVICE_CUDA) {
    if (addr % cuda_align != 0) invalid(name + ": CUDA pointer must be " + std::to_string(cuda_align) + "-byte aligned");
  } else if (addr % static_cast<uintptr_t>(dtype_bytes(dt)) != 0) {
    invalid(name + ": CPU pointer must be aligned to its element size (" + std::to_string(dtype_bytes(dt)) +
            " bytes for " + dtype_name(dt) + ")");
  }
}

// Bytes spanned by a descriptor that passed check_descriptor.
inline int64_t nbytes(const nvfp4_tensor_t& t) { return numel(t) * dtype_bytes(t.dtype); }

inline void check_shape2(const nvfp4_tensor_t* t, const char* name, int64_t r, int64_t c) {
  if (t->ndim != 2 || t->shape[0] != r || t->shape[1] != c)
    invalid(std::string(name) + ": expected shape [" + std::to_string(r) + ", " + std::to_string(c) + "], got " +
            shape_str(*t));
}

inline void check_same_device(const nvfp4_tensor_t& ref, const nvfp4_tensor_t* t, const char* name) {
  if (t->device_type != ref.device_type || (t->device_type == NVFP4_DEVICE_CUDA && t->device_id != ref.device_id))
    invalid(std::string(name) + ": must be on the same device as the input");
}

// ---- overlap between the buffers of one call -----------------------------------------

// A byte range of one validated descriptor, for the overlap checks.
struct ByteRange {
  const char* name;
  uintptr_t begin;
  uintptr_t end;
};

inline ByteRange byte_range(const nvfp4_tensor_t& t, const char* name) {
  const uintptr_t b = reinterpret_cast<uintptr_t>(t.data);
  return {name, b, b + static_cast<uintptr_t>(nbytes(t))};
}

// Refuses an output that overlaps another buffer of the same call: the result would
// depend on the order in which the backend reads and writes. Both descriptors are on
// the same device (checked before); empty ranges never overlap.
inline void check_disjoint(const ByteRange& out, const ByteRange& other) {
  if (out.begin < out.end && other.begin < other.end && out.begin < other.end && other.begin < out.end)
    invalid(std::string(out.name) + ": overlaps " + other.name + " (outputs may not share memory with other buffers)");
}

// The scales of `rows` rows of `blocks` blocks each: linear [rows, blocks] or swizzled
// [roundup(rows, 128), roundup(blocks, 4)] (both formats use the one 128x4 layout).
inline void check_scale_shape(const nvfp4_tensor_t* scales, const std::string& name, int64_t rows, int64_t blocks,
                              bool swizzled) {
  if (swizzled) {
    const int64_t sr = checked_round_up(rows, 128, name);
    const int64_t scp = checked_round_up(blocks, 4, name);
    checked_mul(sr, scp, name);
    check_shape2(scales, name.c_str(), sr, scp);
  } else {
    check_shape2(scales, name.c_str(), rows, blocks);
  }
}

// The descriptors of one quantized direction, whatever the format: codes, scales and, for
// a format with a per-tensor scale, amax (null otherwise).
struct QuantizedDesc {
  const nvfp4_tensor_t* data;
  const nvfp4_tensor_t* scales;
  const nvfp4_tensor_t* amax;
};
inline QuantizedDesc quantized_desc(const nvfp4_quantized_t& q) { return {&q.data, &q.scales, &q.amax}; }
inline QuantizedDesc quantized_desc(const nvfp4_mx_quantized_t& q) { return {&q.data, &q.scales, nullptr}; }

// One quantized direction of an orientation [rows, cols] (cols a multiple of the format's
// block): codes [rows, cols/2] uint8, scales [rows, cols/block] in the layout, the amax a
// float32 scalar where the format has one; all on ref's device.
// amax_numel: 1, or `rows` for an NVFP4 direction with one amax per row (NVFP4_AMAX_ROWS).
inline void check_quantized(const FormatSpec& f, const nvfp4_tensor_t& ref, const QuantizedDesc& q, const char* name,
                            int64_t rows, int64_t cols, bool swizzled, int64_t amax_numel = 1) {
  const std::string n(name);
  check_descriptor(q.data, (n + ".data").c_str());
  check_descriptor(q.scales, (n + ".scales").c_str());
  if (f.tensor_scale) check_descriptor(q.amax, (n + ".amax").c_str());
  if (q.data->dtype != NVFP4_DTYPE_UINT8)
    invalid(n + ".data: dtype must be uint8 (packed E2M1 pairs), got " + dtype_name(q.data->dtype));
  if (f.e4m3_scale_dtype ? !is_byte(q.scales->dtype) : q.scales->dtype != NVFP4_DTYPE_UINT8)
    invalid(n + ".scales: dtype must be " + f.scale_dtypes + ", got " + dtype_name(q.scales->dtype));
  if (f.tensor_scale && (q.amax->dtype != NVFP4_DTYPE_FLOAT32 || numel(*q.amax) != amax_numel))
    invalid(n + ".amax: must be float32 with " + std::to_string(amax_numel) + (amax_numel == 1 ? " element" : " elements") +
            ", got " + dtype_name(q.amax->dtype) + " " + shape_str(*q.amax));
  check_shape2(q.data, (n + ".data").c_str(), rows, cols / 2);
  check_scale_shape(q.scales, n + ".scales", rows, cols / f.block, swizzled);
  check_same_device(ref, q.data, (n + ".data").c_str());
  check_same_device(ref, q.scales, (n + ".scales").c_str());
  if (f.tensor_scale) check_same_device(ref, q.amax, (n + ".amax").c_str());
}

// A decoded operand (nvfp4_decoded_t) of an orientation [rows, cols]: values bfloat16
// [rows, cols], amax float32 [1], both on ref's device. values_name / amax_name: the
// parameters' names as string literals ("a_decoded.values", ...), which the two byte ranges
// appended to `ranges` keep.
inline void check_decoded(const nvfp4_decoded_t& dec, const nvfp4_tensor_t& ref, const char* values_name,
                          const char* amax_name, int64_t rows, int64_t cols, std::vector<ByteRange>& ranges) {
  check_descriptor(&dec.values, values_name);
  check_descriptor(&dec.amax, amax_name);
  if (dec.values.dtype != NVFP4_DTYPE_BFLOAT16)
    invalid(std::string(values_name) + ": dtype must be bfloat16 (the decoded values), got " +
            dtype_name(dec.values.dtype));
  check_shape2(&dec.values, values_name, rows, cols);
  if (dec.amax.dtype != NVFP4_DTYPE_FLOAT32 || numel(dec.amax) != 1)
    invalid(std::string(amax_name) + ": must be float32 with 1 element, got " + dtype_name(dec.amax.dtype) + " " +
            shape_str(dec.amax));
  check_same_device(ref, &dec.values, values_name);
  check_same_device(ref, &dec.amax, amax_name);
  ranges.push_back(byte_range(dec.values, values_name));
  ranges.push_back(byte_range(dec.amax, amax_name));
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
  } catch (const std::bad_alloc&) {
    return fail(NVFP4_ERROR_INTERNAL, "out of host memory (the CPU backend could not allocate its scratch space)");
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
