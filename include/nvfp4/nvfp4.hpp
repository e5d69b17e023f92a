/**
 * @file nvfp4.hpp
 * @brief Header-only C++17 layer over the nvfp4 C API (nvfp4.h).
 *
 * What it adds to the C API, and what it does not:
 *  - Descriptor builders (TensorView, QuantizedView, QuantConfig, Gemm) that fill the C
 *    structs from a pointer, a shape, a dtype and a device, with row-major strides.
 *  - Size helpers (rowwise_layout, columnwise_layout, Gemm::workspace_bytes) so that the
 *    caller can allocate every buffer itself. Nothing in this header or in libnvfp4
 *    allocates memory on the caller's behalf; every view is non-owning.
 *  - check(): a failed status becomes an nvfp4::Error carrying the status and the
 *    thread-local message of nvfp4_last_error().
 *  - Opt-in CUDA runtime helpers (nvfp4::cuda::Buffer, an RAII cudaMalloc'd buffer) when
 *    NVFP4_HPP_CUDA_RUNTIME is defined before this header is included. They belong to the
 *    caller's translation unit (the caller links the CUDA runtime), never to libnvfp4.
 *
 * Conventions (those of nvfp4.h): a quantized operand of logical shape [R, C] is stored
 * rowwise as packed E2M1 codes uint8 [R, C/2] (element 2i in the low nibble) with E4M3
 * scales [R, C/16] (linear) or [roundup(R,128), roundup(C/16,4)] (the 128x4 swizzle the
 * GEMMs read), plus an fp32 amax [1]; columnwise stores the quantization of x^T.
 * CUDA pointers must be 16-byte aligned, CPU pointers aligned to their element size (see
 * nvfp4.h). The stream comes last and is ignored on the CPU. Every size helper here
 * throws nvfp4::Error instead of overflowing int64.
 */
#ifndef NVFP4_NVFP4_HPP
#define NVFP4_NVFP4_HPP

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "nvfp4/nvfp4.h"

#if defined(NVFP4_HPP_CUDA_RUNTIME)
#include <cuda_runtime_api.h>
#endif

namespace nvfp4 {

// =====================================================================================
// Errors
// =====================================================================================

/// A failed nvfp4 call: the status and the library's message for it.
class Error : public std::runtime_error {
 public:
  Error(nvfp4_status_t status, const std::string& message) : std::runtime_error(message), status_(status) {}
  nvfp4_status_t status() const noexcept { return status_; }

 private:
  nvfp4_status_t status_;
};

/// Throws nvfp4::Error unless `status` is NVFP4_SUCCESS. The message is
/// "<context>: <status string>: <nvfp4_last_error()>", so it must be called on the thread
/// that made the failing call, before that thread makes another nvfp4 call.
inline void check(nvfp4_status_t status, const char* context = nullptr) {
  if (status == NVFP4_SUCCESS) return;
  std::string msg;
  if (context && *context) msg = std::string(context) + ": ";
  msg += nvfp4_status_string(status);
  const char* detail = nvfp4_last_error();
  if (detail && *detail) msg += std::string(": ") + detail;
  throw Error(status, msg);
}

namespace detail {
[[noreturn]] inline void invalid(const std::string& message) { throw Error(NVFP4_ERROR_INVALID_ARGUMENT, message); }

/// a * b for non-negative sizes; throws (naming `what`) instead of overflowing int64.
inline std::int64_t checked_mul(std::int64_t a, std::int64_t b, const char* what) {
  if (a < 0 || b < 0 || (a != 0 && b > INT64_MAX / a))
    invalid(std::string(what) + ": size overflows int64 (" + std::to_string(a) + " * " + std::to_string(b) + ")");
  return a * b;
}
/// round_up for a non-negative size; throws instead of overflowing int64.
inline std::int64_t checked_round_up(std::int64_t v, std::int64_t m, const char* what) {
  if (v < 0 || v > INT64_MAX - (m - 1))
    invalid(std::string(what) + ": size overflows int64 (" + std::to_string(v) + " rounded up to " + std::to_string(m) + ")");
  return (v + m - 1) / m * m;
}
}  // namespace detail

// =====================================================================================
// Span: a pointer and a length (std::span is C++20; this is the part we need)
// =====================================================================================

template <class T>
class Span {
 public:
  using element_type = T;
  using value_type = std::remove_cv_t<T>;
  using size_type = std::size_t;
  using iterator = T*;

  constexpr Span() noexcept = default;
  constexpr Span(T* data, size_type size) noexcept : data_(data), size_(size) {}
  template <std::size_t N>
  constexpr Span(T (&array)[N]) noexcept : data_(array), size_(N) {}
  /// Any contiguous container with data() and size() (std::vector, std::array, ...).
  template <class C, class P = decltype(std::declval<C&>().data()),
            class = std::enable_if_t<std::is_convertible<P, T*>::value>,
            class = decltype(std::declval<C&>().size())>
  constexpr Span(C& container) noexcept : data_(container.data()), size_(container.size()) {}
  /// Span<U> -> Span<const U>.
  template <class U, class = std::enable_if_t<std::is_convertible<U (*)[], T (*)[]>::value>>
  constexpr Span(const Span<U>& other) noexcept : data_(other.data()), size_(other.size()) {}

  constexpr T* data() const noexcept { return data_; }
  constexpr size_type size() const noexcept { return size_; }
  constexpr size_type size_bytes() const noexcept { return size_ * sizeof(T); }
  constexpr bool empty() const noexcept { return size_ == 0; }
  constexpr T& operator[](size_type i) const noexcept { return data_[i]; }
  constexpr iterator begin() const noexcept { return data_; }
  constexpr iterator end() const noexcept { return data_ + size_; }
  /// Elements [offset, offset + count); count defaults to the rest. Out of range throws.
  Span subspan(size_type offset, size_type count = static_cast<size_type>(-1)) const {
    if (offset > size_) detail::invalid("Span::subspan: offset past the end");
    const size_type rest = size_ - offset;
    if (count == static_cast<size_type>(-1)) count = rest;
    if (count > rest) detail::invalid("Span::subspan: count past the end");
    return Span(data_ + offset, count);
  }
  Span first(size_type count) const { return subspan(0, count); }

 private:
  T* data_ = nullptr;
  size_type size_ = 0;
};

// =====================================================================================
// Dtypes, devices, small format facts
// =====================================================================================

/// Bytes per element of `dtype` (0 for an unknown value). Packed E2M1 data counts as
/// uint8: one byte holds two values.
constexpr std::size_t dtype_size(nvfp4_dtype_t dtype) noexcept {
  switch (dtype) {
    case NVFP4_DTYPE_FLOAT32: return 4;
    case NVFP4_DTYPE_FLOAT16: return 2;
    case NVFP4_DTYPE_BFLOAT16: return 2;
    case NVFP4_DTYPE_UINT8: return 1;
    case NVFP4_DTYPE_E4M3: return 1;
    case NVFP4_DTYPE_FLOAT64: return 8;
  }
  return 0;
}

constexpr const char* dtype_name(nvfp4_dtype_t dtype) noexcept {
  switch (dtype) {
    case NVFP4_DTYPE_FLOAT32: return "float32";
    case NVFP4_DTYPE_FLOAT16: return "float16";
    case NVFP4_DTYPE_BFLOAT16: return "bfloat16";
    case NVFP4_DTYPE_UINT8: return "uint8";
    case NVFP4_DTYPE_E4M3: return "float8_e4m3fn";
    case NVFP4_DTYPE_FLOAT64: return "float64";
  }
  return "unknown";
}

constexpr const char* backend_name(nvfp4_backend_t backend) noexcept {
  switch (backend) {
    case NVFP4_BACKEND_AUTO: return "auto";
    case NVFP4_BACKEND_REFERENCE: return "reference";
    case NVFP4_BACKEND_CUTLASS: return "cutlass";
    case NVFP4_BACKEND_CUDNN: return "cudnn";
  }
  return "unknown";
}

/// The dtype of a C++ element type, for the types whose meaning is unambiguous. 16-bit
/// floats have no standard C++17 type: pass NVFP4_DTYPE_BFLOAT16 / FLOAT16 explicitly
/// for uint16_t storage.
template <class T>
struct dtype_of;
template <>
struct dtype_of<float> : std::integral_constant<nvfp4_dtype_t, NVFP4_DTYPE_FLOAT32> {};
template <>
struct dtype_of<double> : std::integral_constant<nvfp4_dtype_t, NVFP4_DTYPE_FLOAT64> {};
template <>
struct dtype_of<std::uint8_t> : std::integral_constant<nvfp4_dtype_t, NVFP4_DTYPE_UINT8> {};

/// bfloat16 bits <-> float, round-to-nearest-even, NaN kept quiet with its sign. Host
/// helpers for callers that stage bf16 data without a bf16 type of their own.
inline float bf16_to_float(std::uint16_t bits) noexcept {
  const std::uint32_t u = static_cast<std::uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline std::uint16_t float_to_bf16(float value) noexcept {
  std::uint32_t u;
  std::memcpy(&u, &value, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

/// Where a tensor lives: the CPU, or CUDA device `id`.
struct Device {
  nvfp4_device_type_t type = NVFP4_DEVICE_CPU;
  std::int32_t id = 0;

  static constexpr Device cpu() noexcept { return Device{NVFP4_DEVICE_CPU, 0}; }
  static constexpr Device cuda(std::int32_t id = 0) noexcept { return Device{NVFP4_DEVICE_CUDA, id}; }
  constexpr bool is_cuda() const noexcept { return type == NVFP4_DEVICE_CUDA; }
  constexpr bool operator==(const Device& o) const noexcept { return type == o.type && (type == NVFP4_DEVICE_CPU || id == o.id); }
  constexpr bool operator!=(const Device& o) const noexcept { return !(*this == o); }
};

constexpr std::int64_t round_up(std::int64_t value, std::int64_t multiple) noexcept {
  return (value + multiple - 1) / multiple * multiple;
}

/// Elements per block scale (1D blocks are 1x16, 2D tiles 16x16).
constexpr std::int64_t kBlockSize = 16;

/// Byte offset of scale (r, c) in the 128x4 swizzled layout of an R x `scale_cols` scale
/// matrix (docs/design.md, "Layouts"; the layout of cuDNN F8_128x4, CUTLASS
/// Sm1xxBlkScaledConfig and cuBLASLt VEC16_UE4M3). Lets a caller read one scale of a
/// swizzled tensor without unswizzling all of it.
constexpr std::int64_t swizzled_scale_offset(std::int64_t r, std::int64_t c, std::int64_t scale_cols) noexcept {
  return (r / 128) * (round_up(scale_cols, 4) / 4) * 512 + (c / 4) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4 +
         (c % 4);
}

// =====================================================================================
// TensorView: a filled nvfp4_tensor_t
// =====================================================================================

/// A non-owning, row-major contiguous view of caller memory, as the C API describes it.
/// Strides are computed from the shape (in elements); use with_strides() only to describe
/// a strided view (the quantize/GEMM entry points reject those).
class TensorView {
 public:
  TensorView() noexcept { std::memset(&t_, 0, sizeof t_); }

  /// `data` may point to host memory or to CUDA device memory of `device`; it is never
  /// dereferenced here. The C descriptor's pointer is non-const because one struct
  /// describes inputs and outputs alike; the library does not write through inputs.
  TensorView(const void* data, nvfp4_dtype_t dtype, Span<const std::int64_t> shape, Device device = Device::cpu())
      : TensorView() {
    if (shape.size() > static_cast<std::size_t>(NVFP4_MAX_DIMS))
      detail::invalid("TensorView: " + std::to_string(shape.size()) + " dimensions, at most " +
                      std::to_string(NVFP4_MAX_DIMS) + " are supported");
    t_.data = const_cast<void*>(data);
    t_.dtype = dtype;
    t_.ndim = static_cast<std::int32_t>(shape.size());
    for (std::size_t i = 0; i < shape.size(); ++i) {
      if (shape[i] < 0) detail::invalid("TensorView: negative dimension");
      t_.shape[i] = shape[i];
    }
    std::int64_t stride = 1;
    for (int i = t_.ndim - 1; i >= 0; --i) {
      t_.strides[i] = stride;
      stride = detail::checked_mul(stride, t_.shape[i] == 0 ? 1 : t_.shape[i], "TensorView");
    }
    t_.device_type = device.type;
    t_.device_id = device.id;
  }
  TensorView(const void* data, nvfp4_dtype_t dtype, std::initializer_list<std::int64_t> shape,
             Device device = Device::cpu())
      : TensorView(data, dtype, Span<const std::int64_t>(shape.begin(), shape.size()), device) {}

  /// Typed convenience: dtype deduced from T (float, double, uint8_t).
  template <class T>
  static TensorView of(const T* data, std::initializer_list<std::int64_t> shape, Device device = Device::cpu()) {
    return TensorView(data, dtype_of<std::remove_cv_t<T>>::value, shape, device);
  }

  /// Replaces the strides (elements). Must have ndim entries.
  TensorView& with_strides(Span<const std::int64_t> strides) {
    if (strides.size() != static_cast<std::size_t>(t_.ndim)) detail::invalid("TensorView: strides/ndim mismatch");
    for (std::size_t i = 0; i < strides.size(); ++i) t_.strides[i] = strides[i];
    return *this;
  }

  void* data() const noexcept { return t_.data; }
  nvfp4_dtype_t dtype() const noexcept { return t_.dtype; }
  int ndim() const noexcept { return t_.ndim; }
  std::int64_t dim(int i) const noexcept { return t_.shape[i]; }
  Device device() const noexcept { return Device{t_.device_type, t_.device_id}; }
  std::int64_t numel() const noexcept {
    std::int64_t n = 1;
    for (int i = 0; i < t_.ndim; ++i) n *= t_.shape[i];
    return n;
  }
  /// Bytes spanned by the contiguous view.
  std::size_t nbytes() const noexcept { return static_cast<std::size_t>(numel()) * dtype_size(t_.dtype); }

  const nvfp4_tensor_t& c() const noexcept { return t_; }
  nvfp4_tensor_t& c() noexcept { return t_; }
  const nvfp4_tensor_t* get() const noexcept { return &t_; }
  nvfp4_tensor_t* get() noexcept { return &t_; }

 private:
  nvfp4_tensor_t t_;
};

// =====================================================================================
// Quantized layouts: what to allocate for quantize()
// =====================================================================================

/// Shapes and byte counts of one quantized direction. Fill it with rowwise_layout() or
/// columnwise_layout(); allocate data_bytes(), scale_bytes() and amax_bytes (or one
/// buffer of packed_bytes()) and wrap them in a QuantizedView.
struct QuantizedLayout {
  std::int64_t rows = 0;        ///< rows of the quantized orientation (R rowwise, C columnwise)
  std::int64_t cols = 0;        ///< values per row, a multiple of 16 (padded when columnwise)
  std::int64_t data_rows = 0;   ///< data: uint8 [data_rows, data_cols], 2 E2M1 codes a byte
  std::int64_t data_cols = 0;   ///<   = cols / 2
  std::int64_t scale_rows = 0;  ///< scales: E4M3 [scale_rows, scale_cols]; linear: [rows, cols/16],
  std::int64_t scale_cols = 0;  ///<   swizzled: [roundup(rows,128), roundup(cols/16,4)], padding zero
  nvfp4_scale_layout_t scale_layout = NVFP4_SCALES_SWIZZLED;

  /// amax: float32 [1].
  static constexpr std::size_t amax_bytes = sizeof(float);
  /// Alignment of each part inside a packed buffer: CUDA pointers must be 16-byte aligned,
  /// 256 matches cudaMalloc and keeps the parts on separate cache lines.
  static constexpr std::size_t kPackAlign = 256;

  std::size_t data_bytes() const noexcept { return static_cast<std::size_t>(data_rows * data_cols); }
  std::size_t scale_bytes() const noexcept { return static_cast<std::size_t>(scale_rows * scale_cols); }
  /// One buffer holding data | scales | amax, each part kPackAlign-aligned (see
  /// QuantizedView::carve).
  std::size_t packed_bytes() const noexcept {
    const auto up = [](std::size_t v) { return (v + kPackAlign - 1) / kPackAlign * kPackAlign; };
    return up(data_bytes()) + up(scale_bytes()) + amax_bytes;
  }
};

namespace detail {
inline QuantizedLayout make_layout(std::int64_t rows, std::int64_t cols, nvfp4_scale_layout_t layout) {
  QuantizedLayout q;
  q.rows = rows;
  q.cols = cols;
  q.data_rows = rows;
  q.data_cols = cols / 2;
  q.scale_layout = layout;
  const std::int64_t sc = cols / kBlockSize;
  if (layout == NVFP4_SCALES_SWIZZLED) {
    q.scale_rows = checked_round_up(rows, 128, "quantized layout");
    q.scale_cols = checked_round_up(sc, 4, "quantized layout");
  } else {
    q.scale_rows = rows;
    q.scale_cols = sc;
  }
  // Every byte count (and packed_bytes()) must be representable.
  checked_mul(q.data_rows, q.data_cols, "quantized layout");
  checked_mul(q.scale_rows, q.scale_cols, "quantized layout");
  if (q.data_rows * q.data_cols > INT64_MAX / 2 || q.scale_rows * q.scale_cols > INT64_MAX / 2)
    invalid("quantized layout: too large to pack into one buffer");
  return q;
}
}  // namespace detail

/// The [R, C] view that quantize() sees of an input shape: leading dims flattened into R.
inline std::pair<std::int64_t, std::int64_t> flatten_2d(Span<const std::int64_t> shape) {
  if (shape.empty()) detail::invalid("flatten_2d: the input needs at least one dimension");
  const std::int64_t cols = shape[shape.size() - 1];
  std::int64_t rows = 1;
  for (std::size_t i = 0; i + 1 < shape.size(); ++i) rows = detail::checked_mul(rows, shape[i], "flatten_2d");
  return {rows, cols};
}

/// Rowwise outputs of quantizing x [rows, cols] (blocks of 16 along cols; cols % 16 == 0).
inline QuantizedLayout rowwise_layout(std::int64_t rows, std::int64_t cols,
                                      nvfp4_scale_layout_t layout = NVFP4_SCALES_SWIZZLED) {
  if (rows < 0 || cols < 0) detail::invalid("rowwise_layout: negative size");
  if (cols % kBlockSize != 0) detail::invalid("rowwise_layout: cols must be a multiple of 16, got " + std::to_string(cols));
  return detail::make_layout(rows, cols, layout);
}

/// Columnwise outputs of quantizing x [rows, cols]: x^T [cols, roundup(rows,16)], blocks of
/// 16 along the original rows (the token axis), codes past `rows` zero.
inline QuantizedLayout columnwise_layout(std::int64_t rows, std::int64_t cols,
                                         nvfp4_scale_layout_t layout = NVFP4_SCALES_SWIZZLED) {
  if (rows < 0 || cols < 0) detail::invalid("columnwise_layout: negative size");
  // The C API requires cols % 16 == 0 for every quantization, columnwise-only included.
  if (cols % kBlockSize != 0)
    detail::invalid("columnwise_layout: cols must be a multiple of 16, got " + std::to_string(cols));
  return detail::make_layout(cols, detail::checked_round_up(rows, kBlockSize, "columnwise_layout"), layout);
}

/// A filled nvfp4_quantized_t over three caller buffers, with the layout it was built for.
class QuantizedView {
 public:
  QuantizedView() noexcept { std::memset(&q_, 0, sizeof q_); }

  /// data: uint8 [layout.data_rows, layout.data_cols]; scales: E4M3 [layout.scale_rows,
  /// layout.scale_cols]; amax: float32 [1]; all on `device` (16-byte aligned on CUDA).
  QuantizedView(const QuantizedLayout& layout, void* data, void* scales, float* amax, Device device = Device::cpu())
      : layout_(layout) {
    q_.data = TensorView(data, NVFP4_DTYPE_UINT8, {layout.data_rows, layout.data_cols}, device).c();
    q_.scales = TensorView(scales, NVFP4_DTYPE_E4M3, {layout.scale_rows, layout.scale_cols}, device).c();
    q_.amax = TensorView(amax, NVFP4_DTYPE_FLOAT32, {1}, device).c();
  }

  /// Splits one caller buffer of at least layout.packed_bytes() bytes (aligned to
  /// QuantizedLayout::kPackAlign, as cudaMalloc and aligned host allocations are) into
  /// data | scales | amax. The buffer is not touched.
  static QuantizedView carve(const QuantizedLayout& layout, void* buffer, std::size_t bytes,
                             Device device = Device::cpu()) {
    if (!buffer) detail::invalid("QuantizedView::carve: null buffer");
    if (bytes < layout.packed_bytes())
      detail::invalid("QuantizedView::carve: buffer of " + std::to_string(bytes) + " bytes, " +
                      std::to_string(layout.packed_bytes()) + " needed");
    if (reinterpret_cast<std::uintptr_t>(buffer) % 16 != 0) detail::invalid("QuantizedView::carve: buffer must be 16-byte aligned");
    const auto up = [](std::size_t v) {
      return (v + QuantizedLayout::kPackAlign - 1) / QuantizedLayout::kPackAlign * QuantizedLayout::kPackAlign;
    };
    auto* base = static_cast<unsigned char*>(buffer);
    unsigned char* scales = base + up(layout.data_bytes());
    unsigned char* amax = scales + up(layout.scale_bytes());
    return QuantizedView(layout, base, scales, reinterpret_cast<float*>(amax), device);
  }

  const QuantizedLayout& layout() const noexcept { return layout_; }
  std::uint8_t* data() const noexcept { return static_cast<std::uint8_t*>(q_.data.data); }
  std::uint8_t* scales() const noexcept { return static_cast<std::uint8_t*>(q_.scales.data); }
  float* amax() const noexcept { return static_cast<float*>(q_.amax.data); }
  Device device() const noexcept { return Device{q_.data.device_type, q_.data.device_id}; }

  const nvfp4_quantized_t* get() const noexcept { return &q_; }
  nvfp4_quantized_t* get() noexcept { return &q_; }

 private:
  nvfp4_quantized_t q_;
  QuantizedLayout layout_;
};

// =====================================================================================
// Calls
// =====================================================================================

/// nvfp4_quant_config_t with a fluent setter for each field; starts from the library's
/// defaults (1D, round-to-nearest, swizzled scales, no RHT, default signs, seed 0).
class QuantConfig {
 public:
  QuantConfig() noexcept { nvfp4_quant_config_default(&c_); }

  QuantConfig& block(nvfp4_block_t b) noexcept { c_.block = b; return *this; }
  QuantConfig& block_2d() noexcept { return block(NVFP4_BLOCK_2D); }
  QuantConfig& rounding(nvfp4_rounding_t r) noexcept { c_.rounding = r; return *this; }
  /// Stochastic rounding; results depend only on data, seed and offset.
  QuantConfig& stochastic(std::uint64_t seed, std::uint64_t offset = 0) noexcept {
    c_.rounding = NVFP4_ROUND_STOCHASTIC;
    c_.seed = seed;
    c_.offset = offset;
    return *this;
  }
  QuantConfig& scale_layout(nvfp4_scale_layout_t l) noexcept { c_.scale_layout = l; return *this; }
  QuantConfig& linear_scales() noexcept { return scale_layout(NVFP4_SCALES_LINEAR); }
  /// NVFP4_RHT_* mask: which outputs get the 16-point Random Hadamard Transform.
  QuantConfig& rht(std::uint32_t mask) noexcept { c_.rht = mask; return *this; }
  QuantConfig& rht_sign_mask(std::uint32_t mask) noexcept { c_.rht_sign_mask = mask; return *this; }
  /// A counter (in the input's memory space) added to the offset when the work runs.
  QuantConfig& offset_device(const std::uint64_t* counter) noexcept { c_.offset_device = counter; return *this; }
  /// A counter read like offset_device that the call then advances by one (in stream order).
  QuantConfig& offset_counter(std::uint64_t* counter) noexcept { c_.offset_counter = counter; return *this; }
  /// The recipe options of 0.3 (docs/design.md §1.6): 4over6 block scale selection, the E4M3
  /// bound (256 only with 4over6), one amax per row, a given amax, MS-EDEN rounding.
  QuantConfig& scale_select(nvfp4_scale_select_t s) noexcept { c_.scale_select = s; return *this; }
  QuantConfig& e4m3_bound(std::uint32_t bound) noexcept { c_.e4m3_bound = bound; return *this; }
  QuantConfig& amax_per_row() noexcept { c_.amax_mode = NVFP4_AMAX_ROWS; return *this; }
  QuantConfig& amax_given(const float* amax) noexcept {
    c_.amax_mode = NVFP4_AMAX_GIVEN;
    c_.amax_in = amax;
    return *this;
  }
  QuantConfig& eden(std::uint64_t seed, std::uint64_t offset = 0) noexcept {
    c_.rounding = NVFP4_ROUND_EDEN;
    c_.seed = seed;
    c_.offset = offset;
    return *this;
  }

  nvfp4_scale_layout_t scale_layout() const noexcept { return c_.scale_layout; }
  const nvfp4_quant_config_t& c() const noexcept { return c_; }
  const nvfp4_quant_config_t* get() const noexcept { return &c_; }

 private:
  nvfp4_quant_config_t c_;
};

/// Quantizes `input` (float32/float16/bfloat16, contiguous, last dim % 16 == 0) into the
/// requested directions (either may be null, not both). Both views must have been built
/// from rowwise_layout / columnwise_layout of the input's flatten_2d() shape with
/// cfg.scale_layout(). On CUDA, asynchronous on `stream`; amax stays on the device.
inline void quantize(const TensorView& input, const QuantConfig& cfg, QuantizedView* rowwise,
                     QuantizedView* columnwise, nvfp4_stream_t stream = nullptr) {
  check(nvfp4_quantize(input.get(), cfg.get(), rowwise ? rowwise->get() : nullptr,
                       columnwise ? columnwise->get() : nullptr, stream),
        "nvfp4_quantize");
}

/// quantize() with a workspace of NVFP4_QUANTIZE_WORKSPACE_BYTES or more on the input's
/// device (nvfp4_quantize_ws): on CUDA no memsets to zero the amax outputs first.
inline void quantize(const TensorView& input, const QuantConfig& cfg, QuantizedView* rowwise,
                     QuantizedView* columnwise, void* workspace, std::size_t workspace_bytes,
                     nvfp4_stream_t stream = nullptr) {
  check(nvfp4_quantize_ws(input.get(), cfg.get(), rowwise ? rowwise->get() : nullptr,
                          columnwise ? columnwise->get() : nullptr, workspace, workspace_bytes, stream),
        "nvfp4_quantize_ws");
}

/// out [q.rows, q.cols] (float32/float16/bfloat16) = the decoded values of q.
inline void dequantize(const QuantizedView& q, TensorView& out, nvfp4_stream_t stream = nullptr) {
  check(nvfp4_dequantize(q.get(), q.layout().scale_layout, out.get(), stream), "nvfp4_dequantize");
}

/// linear E4M3 [R, C] -> swizzled [roundup(R,128), roundup(C,4)] (padding zeroed).
inline void swizzle_scales(const TensorView& linear, TensorView& swizzled, nvfp4_stream_t stream = nullptr) {
  check(nvfp4_swizzle_scales(linear.get(), swizzled.get(), stream), "nvfp4_swizzle_scales");
}
inline void unswizzle_scales(const TensorView& swizzled, TensorView& linear, nvfp4_stream_t stream = nullptr) {
  check(nvfp4_unswizzle_scales(swizzled.get(), linear.get(), stream), "nvfp4_unswizzle_scales");
}

namespace detail {
/// The options and calls both GEMM builders share (nvfp4::Gemm, nvfp4::mx::Gemm): Derived
/// names the builder, Q the C struct of a quantized operand, Args the C argument struct,
/// Traits its two C entry points and their names.
template <class Derived, class Q, class Args, class Traits>
class GemmBuilder {
 public:
  Derived& backend(nvfp4_backend_t b) noexcept {
    backend_ = b;
    return static_cast<Derived&>(*this);
  }
  /// C [M, N] (float32/float16/bfloat16) read with beta; may alias d.
  Derived& accumulate(const TensorView& c, float beta) noexcept {
    c_ = c.c();
    has_c_ = true;
    beta_ = beta;
    return static_cast<Derived&>(*this);
  }
  /// bias [N] (float32/float16/bfloat16).
  Derived& bias(const TensorView& bias) noexcept {
    bias_ = bias.c();
    has_bias_ = true;
    return static_cast<Derived&>(*this);
  }

  /// The C struct, pointing into this object: valid while *this lives and is unchanged.
  Args args() const noexcept {
    Args g;
    std::memset(&g, 0, sizeof g);
    g.a = &a_;
    g.b = &b_;
    g.scale_layout = layout_;
    g.c = has_c_ ? &c_ : nullptr;
    g.bias = has_bias_ ? &bias_ : nullptr;
    g.beta = beta_;
    g.d = const_cast<nvfp4_tensor_t*>(&d_);
    g.backend = backend_;
    return g;
  }

  /// Scratch bytes run() needs on d's device (0 is common). Validates the whole call.
  std::size_t workspace_bytes() const {
    const Args g = args();
    std::size_t bytes = 0;
    check(Traits::workspace_size(&g, &bytes), Traits::kWorkspaceName);
    return bytes;
  }

  /// workspace: at least workspace_bytes() on d's device (may be null when that is 0).
  void run(void* workspace = nullptr, std::size_t workspace_bytes = 0, nvfp4_stream_t stream = nullptr) const {
    const Args g = args();
    check(Traits::run(&g, workspace, workspace_bytes, stream), Traits::kRunName);
  }

 protected:
  GemmBuilder(const Q& a, const Q& b, const nvfp4_tensor_t& d, nvfp4_scale_layout_t layout)
      : a_(a), b_(b), d_(d), layout_(layout) {}

 private:
  Q a_, b_;
  nvfp4_tensor_t d_;
  nvfp4_tensor_t c_{};
  nvfp4_tensor_t bias_{};
  bool has_c_ = false, has_bias_ = false;
  float beta_ = 0.0f;
  nvfp4_scale_layout_t layout_;
  nvfp4_backend_t backend_ = NVFP4_BACKEND_AUTO;
};

struct Nvfp4GemmCalls {
  static nvfp4_status_t workspace_size(const nvfp4_gemm_args_t* g, std::size_t* b) {
    return nvfp4_gemm_workspace_size(g, b);
  }
  static nvfp4_status_t run(const nvfp4_gemm_args_t* g, void* w, std::size_t n, nvfp4_stream_t s) {
    return nvfp4_gemm(g, w, n, s);
  }
  static constexpr const char* kWorkspaceName = "nvfp4_gemm_workspace_size";
  static constexpr const char* kRunName = "nvfp4_gemm";
};
}  // namespace detail

/// D [M, N] = alpha * (A^ @ B^T) + beta * C (+ bias), alpha = S_dec(A) * S_dec(B) read on
/// the device. A: rowwise QuantizedView of [M, K]; B: of [N, K] (K-major, "TN"); both
/// with the same scale layout. Holds copies of the descriptors (the views' memory must
/// outlive the calls), so a Gemm may be copied, stored and run repeatedly. Options:
/// backend(), accumulate(c, beta), bias(); then workspace_bytes() and run().
class Gemm : public detail::GemmBuilder<Gemm, nvfp4_quantized_t, nvfp4_gemm_args_t, detail::Nvfp4GemmCalls> {
 public:
  Gemm(const QuantizedView& a, const QuantizedView& b, const TensorView& d)
      : GemmBuilder(*a.get(), *b.get(), d.c(), a.layout().scale_layout) {
    if (b.layout().scale_layout != a.layout().scale_layout)
      detail::invalid("Gemm: a and b have different scale layouts");
  }
};

// =====================================================================================
// Capabilities and version
// =====================================================================================

inline int cuda_device_count() noexcept { return nvfp4_cuda_device_count(); }
/// Compute capability as major*10+minor (90 for H100), 0 if the device does not exist.
inline int cuda_device_cc(int device) noexcept { return nvfp4_cuda_device_cc(device); }
/// cc 0 means the CPU.
inline bool backend_supported(nvfp4_backend_t backend, int cc) noexcept { return nvfp4_backend_supported(backend, cc) != 0; }

/// The CUDA targets compiled into the loaded library ("90a", "100a", ...); empty for a
/// CPU-only build.
inline std::vector<std::string> build_cuda_archs() {
  std::vector<std::string> out;
  const char* s = nvfp4_build_cuda_archs();
  std::string cur;
  for (; s && *s; ++s) {
    if (*s == ';') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += *s;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

/// The version of the library actually loaded (may differ from this header's).
inline std::string version() { return nvfp4_version_string(); }
/// The version this header was written for.
inline std::string header_version() {
  return std::to_string(NVFP4_VERSION_MAJOR) + "." + std::to_string(NVFP4_VERSION_MINOR) + "." +
         std::to_string(NVFP4_VERSION_PATCH);
}
/// True when the loaded library's major.minor matches this header's: the structs' layout
/// is only promised within one minor version (0.x).
inline bool runtime_matches_header() {
  const std::string v = version();
  const std::string want = std::to_string(NVFP4_VERSION_MAJOR) + "." + std::to_string(NVFP4_VERSION_MINOR) + ".";
  return v.compare(0, want.size(), want) == 0;
}

// =====================================================================================
// Optional CUDA runtime helpers (caller side; define NVFP4_HPP_CUDA_RUNTIME to get them)
// =====================================================================================

#if defined(NVFP4_HPP_CUDA_RUNTIME)
namespace cuda {

inline void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  throw Error(NVFP4_ERROR_CUDA, std::string(what) + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
}

/// An owned cudaMalloc'd buffer on the current device (move-only). Allocated by the
/// caller's CUDA runtime, not by libnvfp4.
class Buffer {
 public:
  Buffer() noexcept = default;
  explicit Buffer(std::size_t bytes) : bytes_(bytes) {
    if (bytes) check(cudaMalloc(&ptr_, bytes), "cudaMalloc");
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) {
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      reset();
      std::swap(ptr_, o.ptr_);
      std::swap(bytes_, o.bytes_);
    }
    return *this;
  }
  ~Buffer() { reset(); }

  void reset() noexcept {
    if (ptr_) cudaFree(ptr_);  // an error here cannot be reported from a destructor
    ptr_ = nullptr;
    bytes_ = 0;
  }
  void* get() const noexcept { return ptr_; }
  template <class T>
  T* as() const noexcept { return static_cast<T*>(ptr_); }
  std::size_t size() const noexcept { return bytes_; }

  void upload(const void* host, std::size_t bytes, cudaStream_t stream = nullptr) const {
    if (bytes > bytes_) throw Error(NVFP4_ERROR_INVALID_ARGUMENT, "Buffer::upload: more bytes than the buffer holds");
    check(cudaMemcpyAsync(ptr_, host, bytes, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync(H2D)");
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  }
  void download(void* host, std::size_t bytes, cudaStream_t stream = nullptr) const {
    if (bytes > bytes_) throw Error(NVFP4_ERROR_INVALID_ARGUMENT, "Buffer::download: more bytes than the buffer holds");
    check(cudaMemcpyAsync(host, ptr_, bytes, cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync(D2H)");
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

/// The CUDA device currently selected, as an nvfp4::Device.
inline Device current_device() {
  int id = 0;
  check(cudaGetDevice(&id), "cudaGetDevice");
  return Device::cuda(id);
}

}  // namespace cuda
#endif  // NVFP4_HPP_CUDA_RUNTIME

}  // namespace nvfp4

#endif  // NVFP4_NVFP4_HPP

// =====================================================================================
// MXFP4 (nvfp4_mx_* in nvfp4.h): E2M1 values, one E8M0 scale per 32 values, no amax.
// =====================================================================================
#ifndef NVFP4_NVFP4_HPP_MX_SECTION
#define NVFP4_NVFP4_HPP_MX_SECTION

namespace nvfp4 {
namespace mx {

/// Elements per E8M0 scale.
constexpr std::int64_t kBlockSize = 32;

/// Shapes and byte counts of one MXFP4 direction (no amax: MX has no per-tensor scale).
struct Layout {
  std::int64_t rows = 0;        ///< rows of the quantized orientation (R rowwise, C columnwise)
  std::int64_t cols = 0;        ///< values per row, a multiple of 32 (padded when columnwise)
  std::int64_t data_rows = 0;   ///< data: uint8 [data_rows, data_cols], 2 E2M1 codes a byte
  std::int64_t data_cols = 0;   ///<   = cols / 2
  std::int64_t scale_rows = 0;  ///< scales: E8M0 bytes [scale_rows, scale_cols]; linear [rows, cols/32],
  std::int64_t scale_cols = 0;  ///<   swizzled [roundup(rows,128), roundup(cols/32,4)], padding zero
  nvfp4_scale_layout_t scale_layout = NVFP4_SCALES_SWIZZLED;

  std::size_t data_bytes() const noexcept { return static_cast<std::size_t>(data_rows * data_cols); }
  std::size_t scale_bytes() const noexcept { return static_cast<std::size_t>(scale_rows * scale_cols); }
};

namespace detail {
inline Layout make_layout(std::int64_t rows, std::int64_t cols, nvfp4_scale_layout_t layout) {
  Layout q;
  q.rows = rows;
  q.cols = cols;
  q.data_rows = rows;
  q.data_cols = cols / 2;
  q.scale_layout = layout;
  const std::int64_t sc = cols / kBlockSize;
  const bool swz = layout == NVFP4_SCALES_SWIZZLED;
  q.scale_rows = swz ? nvfp4::detail::checked_round_up(rows, 128, "mx layout") : rows;
  q.scale_cols = swz ? nvfp4::detail::checked_round_up(sc, 4, "mx layout") : sc;
  nvfp4::detail::checked_mul(q.data_rows, q.data_cols, "mx layout");
  nvfp4::detail::checked_mul(q.scale_rows, q.scale_cols, "mx layout");
  return q;
}
}  // namespace detail

/// Rowwise outputs of quantizing x [rows, cols] (blocks of 32 along cols; cols % 32 == 0).
inline Layout rowwise_layout(std::int64_t rows, std::int64_t cols, nvfp4_scale_layout_t layout = NVFP4_SCALES_SWIZZLED) {
  if (rows < 0 || cols < 0) nvfp4::detail::invalid("mx::rowwise_layout: negative size");
  if (cols % kBlockSize != 0)
    nvfp4::detail::invalid("mx::rowwise_layout: cols must be a multiple of 32, got " + std::to_string(cols));
  return detail::make_layout(rows, cols, layout);
}

/// Columnwise outputs of quantizing x [rows, cols]: x^T [cols, roundup(rows,32)], blocks of
/// 32 along the original rows, codes past `rows` zero.
inline Layout columnwise_layout(std::int64_t rows, std::int64_t cols,
                                nvfp4_scale_layout_t layout = NVFP4_SCALES_SWIZZLED) {
  if (rows < 0 || cols < 0) nvfp4::detail::invalid("mx::columnwise_layout: negative size");
  if (cols % kBlockSize != 0)
    nvfp4::detail::invalid("mx::columnwise_layout: cols must be a multiple of 32, got " + std::to_string(cols));
  return detail::make_layout(cols, nvfp4::detail::checked_round_up(rows, kBlockSize, "mx::columnwise_layout"), layout);
}

/// A filled nvfp4_mx_quantized_t over two caller buffers, with the layout it was built for.
class QuantizedView {
 public:
  QuantizedView() noexcept { std::memset(&q_, 0, sizeof q_); }
  /// data: uint8 [layout.data_rows, layout.data_cols]; scales: uint8 (E8M0) [layout.scale_rows,
  /// layout.scale_cols]; both on `device` (16-byte aligned on CUDA).
  QuantizedView(const Layout& layout, void* data, void* scales, Device device = Device::cpu()) : layout_(layout) {
    q_.data = TensorView(data, NVFP4_DTYPE_UINT8, {layout.data_rows, layout.data_cols}, device).c();
    q_.scales = TensorView(scales, NVFP4_DTYPE_UINT8, {layout.scale_rows, layout.scale_cols}, device).c();
  }
  const Layout& layout() const noexcept { return layout_; }
  std::uint8_t* data() const noexcept { return static_cast<std::uint8_t*>(q_.data.data); }
  std::uint8_t* scales() const noexcept { return static_cast<std::uint8_t*>(q_.scales.data); }
  const nvfp4_mx_quantized_t* get() const noexcept { return &q_; }
  nvfp4_mx_quantized_t* get() noexcept { return &q_; }

 private:
  nvfp4_mx_quantized_t q_;
  Layout layout_;
};

/// nvfp4_mx_quant_config_t with fluent setters; starts from the library's defaults
/// (round-to-nearest and the OCP rule in both directions, swizzled scales, seed 0).
class QuantConfig {
 public:
  QuantConfig() noexcept { nvfp4_mx_quant_config_default(&c_); }
  /// Rounding and scale rule of both directions.
  QuantConfig& both(nvfp4_rounding_t r, nvfp4_mx_scale_rule_t rule) noexcept {
    return rowwise(r, rule).columnwise(r, rule);
  }
  QuantConfig& rowwise(nvfp4_rounding_t r, nvfp4_mx_scale_rule_t rule) noexcept {
    c_.rowwise.rounding = r;
    c_.rowwise.scale_rule = rule;
    return *this;
  }
  QuantConfig& columnwise(nvfp4_rounding_t r, nvfp4_mx_scale_rule_t rule) noexcept {
    c_.columnwise.rounding = r;
    c_.columnwise.scale_rule = rule;
    return *this;
  }
  /// Stochastic rounding's key and counter offset (the rounding itself is set per direction).
  QuantConfig& seed(std::uint64_t seed, std::uint64_t offset = 0) noexcept {
    c_.seed = seed;
    c_.offset = offset;
    return *this;
  }
  QuantConfig& scale_layout(nvfp4_scale_layout_t l) noexcept { c_.scale_layout = l; return *this; }
  QuantConfig& linear_scales() noexcept { return scale_layout(NVFP4_SCALES_LINEAR); }
  /// A counter (in the input's memory space) added to the offset when the work runs.
  QuantConfig& offset_device(const std::uint64_t* counter) noexcept { c_.offset_device = counter; return *this; }

  nvfp4_scale_layout_t scale_layout() const noexcept { return c_.scale_layout; }
  const nvfp4_mx_quant_config_t& c() const noexcept { return c_; }
  const nvfp4_mx_quant_config_t* get() const noexcept { return &c_; }

 private:
  nvfp4_mx_quant_config_t c_;
};

/// Quantizes `input` (float32/float16/bfloat16, contiguous, last dim % 32 == 0) to MXFP4 into
/// the requested directions (either may be null, not both), built from rowwise_layout /
/// columnwise_layout of the input's flatten_2d() shape with cfg.scale_layout().
inline void quantize(const TensorView& input, const QuantConfig& cfg, QuantizedView* rowwise,
                     QuantizedView* columnwise, nvfp4_stream_t stream = nullptr) {
  check(nvfp4_mx_quantize(input.get(), cfg.get(), rowwise ? rowwise->get() : nullptr,
                          columnwise ? columnwise->get() : nullptr, stream),
        "nvfp4_mx_quantize");
}

/// out [q.rows, q.cols] (float32/float16/bfloat16) = the decoded values of q.
inline void dequantize(const QuantizedView& q, TensorView& out, nvfp4_stream_t stream = nullptr) {
  check(nvfp4_mx_dequantize(q.get(), q.layout().scale_layout, out.get(), stream), "nvfp4_mx_dequantize");
}

namespace detail {
struct MxGemmCalls {
  static nvfp4_status_t workspace_size(const nvfp4_mx_gemm_args_t* g, std::size_t* b) {
    return nvfp4_mx_gemm_workspace_size(g, b);
  }
  static nvfp4_status_t run(const nvfp4_mx_gemm_args_t* g, void* w, std::size_t n, nvfp4_stream_t s) {
    return nvfp4_mx_gemm(g, w, n, s);
  }
  static constexpr const char* kWorkspaceName = "nvfp4_mx_gemm_workspace_size";
  static constexpr const char* kRunName = "nvfp4_mx_gemm";
};
}  // namespace detail

/// D [M, N] = A^ @ B^T (+ beta * C) (+ bias) of two rowwise MXFP4 operands (nvfp4_mx_gemm):
/// a [M, K] and b [N, K] quantized along K with the same scale layout. The options and
/// calls of nvfp4::Gemm.
class Gemm : public nvfp4::detail::GemmBuilder<Gemm, nvfp4_mx_quantized_t, nvfp4_mx_gemm_args_t,
                                                detail::MxGemmCalls> {
 public:
  Gemm(const QuantizedView& a, const QuantizedView& b, const TensorView& d)
      : GemmBuilder(*a.get(), *b.get(), d.c(), a.layout().scale_layout) {
    if (b.layout().scale_layout != a.layout().scale_layout)
      nvfp4::detail::invalid("mx::Gemm: a and b have different scale layouts");
  }
};

}  // namespace mx
}  // namespace nvfp4

#endif  // NVFP4_NVFP4_HPP_MX_SECTION

// =====================================================================================
// Grouped (mixture-of-experts) tensors: nvfp4.h's grouped section
// =====================================================================================
#ifndef NVFP4_NVFP4_HPP_GROUPED_SECTION
#define NVFP4_NVFP4_HPP_GROUPED_SECTION

namespace nvfp4 {
namespace grouped {

/// Shapes of one grouped or batched direction (what to allocate): data uint8, scales E4M3
/// (swizzled, a block per group), amax float32 [groups]. A dimension of 0 in *_shape[1..2]
/// means the tensor has fewer dimensions (1-D buffers of the columnwise direction).
struct Layout {
  std::int64_t groups = 0;
  std::int64_t data_shape[3] = {0, 0, 0};
  int data_dims = 0;
  std::int64_t scale_shape[3] = {0, 0, 0};
  int scale_dims = 0;

  std::size_t data_bytes() const noexcept { return bytes(data_shape, data_dims); }
  std::size_t scale_bytes() const noexcept { return bytes(scale_shape, scale_dims); }
  std::size_t amax_bytes() const noexcept { return static_cast<std::size_t>(groups) * sizeof(float); }

 private:
  static std::size_t bytes(const std::int64_t* s, int n) noexcept {
    std::int64_t b = 1;
    for (int i = 0; i < n; ++i) b *= s[i];
    return static_cast<std::size_t>(b);
  }
};

namespace detail {
inline void check_sizes(std::int64_t t, std::int64_t f, std::int64_t e, const char* what) {
  if (t < 0 || f < 0 || e < 1) nvfp4::detail::invalid(std::string(what) + ": negative size or no group");
  if (f % kBlockSize) nvfp4::detail::invalid(std::string(what) + ": features must be a multiple of 16");
}
}  // namespace detail

/// Rowwise direction of x [tokens, features] in `groups` groups: data [T, F/2], scales
/// [roundup(T + 127 E, 128), roundup(F/16, 4)].
inline Layout rowwise_layout(std::int64_t tokens, std::int64_t features, std::int64_t groups) {
  detail::check_sizes(tokens, features, groups, "grouped::rowwise_layout");
  Layout l;
  l.groups = groups;
  l.data_dims = l.scale_dims = 2;
  l.data_shape[0] = tokens;
  l.data_shape[1] = features / 2;
  l.scale_shape[0] = nvfp4::detail::checked_round_up(
      tokens + nvfp4::detail::checked_mul(127, groups, "grouped::rowwise_layout"), 128, "grouped::rowwise_layout");
  l.scale_shape[1] = nvfp4::detail::checked_round_up(features / kBlockSize, 4, "grouped::rowwise_layout");
  nvfp4::detail::checked_mul(l.scale_shape[0], l.scale_shape[1], "grouped::rowwise_layout");
  return l;
}

/// Columnwise direction of x [tokens, features] (each group's tokens padded to 32): data
/// [F (T + 31 E) / 2], scales [roundup(F, 128) ((T + 63 E) / 16)], both 1-D.
inline Layout columnwise_layout(std::int64_t tokens, std::int64_t features, std::int64_t groups) {
  detail::check_sizes(tokens, features, groups, "grouped::columnwise_layout");
  const char* w = "grouped::columnwise_layout";
  Layout l;
  l.groups = groups;
  l.data_dims = l.scale_dims = 1;
  l.data_shape[0] = nvfp4::detail::checked_mul(features, tokens + nvfp4::detail::checked_mul(31, groups, w), w) / 2;
  l.scale_shape[0] = nvfp4::detail::checked_mul(nvfp4::detail::checked_round_up(features, 128, w),
                                                (tokens + nvfp4::detail::checked_mul(63, groups, w)) / 16, w);
  return l;
}

/// One direction of E tensors [rows, cols] stacked (batched_quantize of weights [E, N, K]:
/// rowwise is batched_layout(E, N, K), columnwise batched_layout(E, K, roundup(N, 16))).
inline Layout batched_layout(std::int64_t experts, std::int64_t rows, std::int64_t cols) {
  detail::check_sizes(rows, cols, experts, "grouped::batched_layout");
  const char* w = "grouped::batched_layout";
  Layout l;
  l.groups = experts;
  l.data_dims = l.scale_dims = 3;
  l.data_shape[0] = l.scale_shape[0] = experts;
  l.data_shape[1] = rows;
  l.data_shape[2] = cols / 2;
  l.scale_shape[1] = nvfp4::detail::checked_round_up(rows, 128, w);
  l.scale_shape[2] = nvfp4::detail::checked_round_up(cols / kBlockSize, 4, w);
  nvfp4::detail::checked_mul(nvfp4::detail::checked_mul(experts, l.scale_shape[1], w), l.scale_shape[2], w);
  return l;
}

/// nvfp4_grouped_quantized_t over three caller buffers laid out as `layout` says.
class View {
 public:
  View() noexcept { std::memset(&q_, 0, sizeof q_); }
  View(const Layout& l, void* data, void* scales, float* amax, Device device = Device::cpu()) : View() {
    q_.data = TensorView(data, NVFP4_DTYPE_UINT8, Span<const std::int64_t>(l.data_shape, l.data_dims), device).c();
    q_.scales =
        TensorView(scales, NVFP4_DTYPE_E4M3, Span<const std::int64_t>(l.scale_shape, l.scale_dims), device).c();
    q_.amax = TensorView(amax, NVFP4_DTYPE_FLOAT32, {l.groups}, device).c();
  }
  const nvfp4_grouped_quantized_t* get() const noexcept { return &q_; }
  nvfp4_grouped_quantized_t* get() noexcept { return &q_; }

 private:
  nvfp4_grouped_quantized_t q_;
};

/// The group structure: offs int32 [groups] cumulative ends (in the tensors' memory space),
/// the ragged extent T, and an optional int32 [1] error word (0 or NVFP4_OFFS_* bits).
inline nvfp4_groups_t groups(const std::int32_t* offs, std::int64_t count, std::int64_t tokens,
                             std::int32_t* offs_error = nullptr) noexcept {
  return nvfp4_groups_t{offs, count, tokens, offs_error};
}

/// nvfp4_grouped_quantize: input [T, K] (views from rowwise_layout / columnwise_layout of
/// (T, K, groups.count)); either direction may be null, not both.
inline void quantize(const TensorView& input, const nvfp4_groups_t& g, const QuantConfig& cfg, View* rowwise,
                     View* columnwise, nvfp4_stream_t stream = nullptr) {
  check(nvfp4_grouped_quantize(input.get(), &g, cfg.get(), rowwise ? rowwise->get() : nullptr,
                               columnwise ? columnwise->get() : nullptr, stream),
        "nvfp4_grouped_quantize");
}

/// nvfp4_batched_quantize: input [E, N, K] (views from batched_layout).
inline void batched_quantize(const TensorView& input, const QuantConfig& cfg, View* rowwise, View* columnwise,
                             nvfp4_stream_t stream = nullptr) {
  check(nvfp4_batched_quantize(input.get(), cfg.get(), rowwise ? rowwise->get() : nullptr,
                               columnwise ? columnwise->get() : nullptr, stream),
        "nvfp4_batched_quantize");
}

/// The grouped GEMM (nvfp4_grouped_gemm): ragged M, d [T, N] = per group a_g @ b_g^T with a
/// grouped rowwise [T, K] and b batched [E, N, K]; ragged K, d [E, N, K] with a and b the
/// grouped columnwise directions of dY [T, N] and X [T, K].
class Gemm {
 public:
  Gemm(nvfp4_grouped_kind_t kind, const View& a, const View& b, const nvfp4_groups_t& g, TensorView& d,
       nvfp4_backend_t backend = NVFP4_BACKEND_AUTO) {
    std::memset(&args_, 0, sizeof args_);
    args_.kind = kind;
    args_.a = a.get();
    args_.b = b.get();
    args_.groups = g;
    args_.d = d.get();
    args_.backend = backend;
  }
  std::size_t workspace_bytes() const {
    std::size_t n = 0;
    check(nvfp4_grouped_gemm_workspace_size(&args_, &n), "nvfp4_grouped_gemm_workspace_size");
    return n;
  }
  void run(void* workspace, std::size_t workspace_bytes, nvfp4_stream_t stream = nullptr) const {
    check(nvfp4_grouped_gemm(&args_, workspace, workspace_bytes, stream), "nvfp4_grouped_gemm");
  }

 private:
  nvfp4_grouped_gemm_args_t args_;
};

}  // namespace grouped
}  // namespace nvfp4

#endif  // NVFP4_NVFP4_HPP_GROUPED_SECTION
