// Randomized test of the C API's argument checking, meant to run under ASan + UBSan.
//
// Each case builds a well-formed call (quantize — plain, with a workspace, with decoded
// outputs, with the recipe options of 0.3 —, dequantize, swizzle, unswizzle, GEMM, FP8 cast),
// then changes a few of its parts at random: shapes (huge, negative, overflowing int64),
// ndim, raw enum values out of range, strides, misaligned or null pointers, buffers that
// overlap, the quantization config, the GEMM's c/bias/beta/workspace. Buffers are always
// honest: a pointer addresses exactly the bytes its descriptor claims (a heap block of
// that size, so ASan sees any access past it), or is null when the claim is too large to
// allocate. What must hold:
//   - nothing crashes, no sanitizer report (the build uses -fno-sanitize-recover);
//   - an unchanged call succeeds; so does any call that only changed what is allowed;
//   - a call with a part that can never be valid (overflowing sizes, an unknown enum
//     value, a misaligned or null pointer, overlapping outputs, ndim out of range...)
//     returns NVFP4_ERROR_INVALID_ARGUMENT, and when that is the only change, the message
//     names the parameter changed;
//   - every failure leaves a message that starts with a parameter name ("name: ...").
//
//   nvfp4_fuzz_api [--seconds S] [--iters N] [--seed X] [-v]
// runs cases until S seconds (default 20) or N cases have passed, then prints what it ran.
// Built with -DNVFP4_LIBFUZZER (clang -fsanitize=fuzzer), the same case generator reads
// its choices from libFuzzer's input instead.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "nvfp4/nvfp4.h"

// By-value enum parameters take any int only from C: c_callers.c passes them.
extern "C" {
nvfp4_status_t nvfp4_test_c_dequantize(const nvfp4_quantized_t* q, int scale_layout, nvfp4_tensor_t* out);
const char* nvfp4_test_c_status_string(int status);
int nvfp4_test_c_backend_supported(int backend, int cc);
}

namespace {

// ---- choices: a splitmix64 stream, or libFuzzer's bytes -------------------------------

struct Source {
  const uint8_t* data = nullptr;
  size_t size = 0, pos = 0;
  uint64_t state = 0;
  bool from_data = false;

  uint64_t u64() {
    if (from_data) {
      uint64_t v = 0;
      for (int i = 0; i < 8 && pos < size; ++i) v |= static_cast<uint64_t>(data[pos++]) << (8 * i);
      return v;
    }
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint64_t below(uint64_t n) { return n ? u64() % n : 0; }
  bool pct(int p) { return static_cast<int>(below(100)) < p; }
  template <class T>
  T pick(std::initializer_list<T> xs) {
    return xs.begin()[below(xs.size())];
  }
};

constexpr int64_t kMax = INT64_MAX;

// A dimension worth trying: mostly small, sometimes at or past the edges of int64.
int64_t wild_dim(Source& s) {
  switch (s.below(12)) {
    case 0: return -static_cast<int64_t>(s.below(40)) - 1;
    case 1: return s.pick<int64_t>({int64_t{1} << 31, (int64_t{1} << 31) + 16, int64_t{1} << 32});
    case 2: return s.pick<int64_t>({int64_t{1} << 60, (int64_t{1} << 60) + 1, int64_t{1} << 62, kMax, kMax - 15, kMax / 2});
    case 3: return s.pick<int64_t>({(int64_t{1} << 62) + 16, (int64_t{1} << 61), (int64_t{1} << 59) + 16});
    case 4: return 0;
    default: return static_cast<int64_t>(s.below(300));
  }
}

// ---- honest buffers -------------------------------------------------------------------

// Claimed size of a descriptor, computed in 128 bits so that the test itself never
// overflows; `over` when it does not fit in int64 (no such buffer can exist).
struct Claim {
  __int128 numel = 1;
  __int128 bytes = 0;
  bool negative = false;
  bool over = false;
};

int elem_bytes(int32_t dtype_raw) {
  switch (dtype_raw) {
    case NVFP4_DTYPE_FLOAT32: return 4;
    case NVFP4_DTYPE_FLOAT16: case NVFP4_DTYPE_BFLOAT16: return 2;
    case NVFP4_DTYPE_FLOAT64: return 8;
    default: return 1;
  }
}

constexpr size_t kCap = size_t{1} << 21;  // largest buffer allocated for a claim (2 MiB)

// One descriptor and the heap block behind it.
struct Tensor {
  std::string name;
  int32_t ndim = 0;
  int64_t shape[NVFP4_MAX_DIMS] = {};
  int64_t strides[NVFP4_MAX_DIMS] = {};
  int32_t dtype = NVFP4_DTYPE_FLOAT32;  // raw: may be out of range
  int32_t device = NVFP4_DEVICE_CPU;    // raw
  int32_t device_id = 0;
  size_t misalign = 0;                  // bytes added to an aligned block
  bool force_null = false;
  bool unhonoured = false;              // has elements, but too large to allocate: left null
  void* block = nullptr;
  void* ptr = nullptr;
  Claim claim;

  void set_shape(std::initializer_list<int64_t> dims) {
    ndim = static_cast<int32_t>(dims.size());
    int i = 0;
    for (int64_t d : dims) shape[i++] = d;
    contiguous();
  }
  void contiguous() {
    __int128 st = 1;
    for (int i = std::min<int32_t>(ndim, NVFP4_MAX_DIMS) - 1; i >= 0; --i) {
      strides[i] = static_cast<int64_t>(st);
      st *= shape[i] > 0 ? shape[i] : 1;
      if (st > kMax) st = 1;  // only the claimed shape matters for such a tensor
    }
  }
  void compute_claim() {
    claim = Claim{};
    const int n = ndim < 0 ? 0 : std::min<int32_t>(ndim, NVFP4_MAX_DIMS);
    for (int i = 0; i < n; ++i) {
      if (shape[i] < 0) claim.negative = true;
      else if (!claim.over) {
        claim.numel *= shape[i];
        if (claim.numel > kMax) claim.over = true;
      }
    }
    if (claim.negative) claim.numel = 0;
    claim.bytes = claim.over ? 0 : claim.numel * elem_bytes(dtype);
    if (claim.bytes > kMax) claim.over = true;
    // An overflowing shape that contains a zero dimension has zero elements.
    for (int i = 0; i < n; ++i)
      if (shape[i] == 0) claim.over = false, claim.numel = 0, claim.bytes = 0;
  }
  // Allocates the claimed bytes (or makes the pointer null / a stand-in when the claim
  // cannot be honoured); the layout never lies about an allocation it made.
  void allocate(Source& s) {
    compute_claim();
    release();
    unhonoured = false;
    if (force_null) return;
    if (device != NVFP4_DEVICE_CPU) {
      // Never dereferenced: CUDA descriptors only appear where the build has no CUDA.
      ptr = reinterpret_cast<void*>(uintptr_t{0x7f0000100000} + misalign);
      return;
    }
    size_t bytes = 0;
    if (claim.over) {
      bytes = 16 * s.below(3);  // any pointer: the call must be refused before using it
    } else if (claim.bytes > static_cast<__int128>(kCap)) {
      unhonoured = !claim.negative && claim.numel > 0;
      return;  // cannot honour: null (the call must be refused when it has elements)
    } else {
      bytes = static_cast<size_t>(claim.bytes);
    }
    if (posix_memalign(&block, 64, bytes + misalign + (bytes + misalign == 0 ? 1 : 0)) != 0) block = nullptr;
    if (!block) std::abort();
    std::memset(block, 0x5a, bytes + misalign);
    ptr = static_cast<unsigned char*>(block) + misalign;
  }
  void release() {
    std::free(block);
    block = nullptr;
    ptr = nullptr;
  }
  ~Tensor() { release(); }
  Tensor() = default;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  size_t bytes() const { return claim.over || !ptr ? 0 : static_cast<size_t>(claim.bytes); }
  nvfp4_tensor_t desc() const {
    nvfp4_tensor_t t;
    std::memset(&t, 0, sizeof t);
    t.data = ptr;
    // Raw enum values go in as bytes, as a C caller's would.
    std::memcpy(&t.dtype, &dtype, sizeof dtype);
    std::memcpy(&t.device_type, &device, sizeof device);
    t.ndim = ndim;
    for (int i = 0; i < NVFP4_MAX_DIMS; ++i) t.shape[i] = shape[i], t.strides[i] = strides[i];
    t.device_id = device_id;
    return t;
  }
};

// ---- the expectations of one case ----------------------------------------------------

struct Expect {
  int changes = 0;               // how many parts were changed
  bool must_fail = false;        // a change that no valid call has
  bool gpu_backend = false;      // a GPU backend asked for CPU tensors: NOT_SUPPORTED is the answer
  std::set<std::string> names;   // parameters a single must-fail change may be reported under
  std::string what;              // description, for the failure report

  void change(const std::string& desc) {
    ++changes;
    what += (what.empty() ? "" : "; ") + desc;
  }
  void bad(const std::string& name, const std::string& desc) {
    change(desc);
    must_fail = true;
    names.insert(name);
  }
};

bool g_cuda_build = false;
bool g_verbose = false;
uint64_t g_cases = 0, g_failures = 0;
std::map<std::string, uint64_t> g_status_count;

// Applies the random changes that fit any descriptor. `elem_dtype` is the valid dtype.
void mutate_tensor(Source& s, Tensor& t, Expect& e, int pct) {
  if (!s.pct(pct)) return;
  switch (s.below(9)) {
    case 0: {  // shape: one dimension replaced by a wild value
      if (t.ndim <= 0) break;
      const int i = static_cast<int>(s.below(t.ndim));
      const int64_t d = wild_dim(s);
      t.shape[i] = d;
      t.contiguous();
      e.change(t.name + ".shape[" + std::to_string(i) + "]=" + std::to_string(d));
      t.compute_claim();
      if (t.claim.negative) e.bad(t.name, t.name + ": negative dim");
      else if (t.claim.over) e.bad(t.name, t.name + ": overflow");
      break;
    }
    case 1: {  // ndim
      const int32_t nd = s.pick<int32_t>({-1, 0, 3, 9, 1000, INT32_MIN});
      const bool in_range = nd >= 0 && nd <= NVFP4_MAX_DIMS;
      for (int i = t.ndim < 0 ? 0 : t.ndim; i < NVFP4_MAX_DIMS; ++i) t.shape[i] = 1, t.strides[i] = 1;
      t.ndim = nd;
      if (in_range) t.contiguous(), e.change(t.name + ".ndim=" + std::to_string(nd));
      else e.bad(t.name, t.name + ".ndim=" + std::to_string(nd));
      break;
    }
    case 2: {  // dtype, raw
      const int32_t dt = s.pick<int32_t>({-1, 6, 7, 42, INT32_MAX, INT32_MIN, 0, 1, 2, 3, 4, 5});
      if (dt == t.dtype) break;
      t.dtype = dt;
      if (dt < 0 || dt > NVFP4_DTYPE_FLOAT64) e.bad(t.name, t.name + ".dtype=" + std::to_string(dt));
      else e.change(t.name + ".dtype=" + std::to_string(dt));
      break;
    }
    case 3: {  // device type, raw
      const int32_t dv = s.pick<int32_t>({-1, 2, 7, INT32_MAX, NVFP4_DEVICE_CUDA});
      if (dv == NVFP4_DEVICE_CUDA && g_cuda_build) break;  // fake device pointers must never reach a kernel
      t.device = dv;
      if (dv != NVFP4_DEVICE_CUDA) e.bad(t.name, t.name + ".device_type=" + std::to_string(dv));
      else e.change(t.name + ".device_type=CUDA");  // mixed devices or NOT_SUPPORTED
      break;
    }
    case 4: {  // one stride
      if (t.ndim <= 0 || t.ndim > NVFP4_MAX_DIMS) break;
      const int i = static_cast<int>(s.below(t.ndim));
      t.strides[i] = s.pick<int64_t>({0, -1, 2, kMax, t.strides[i] == kMax ? 0 : t.strides[i] + 1});
      e.change(t.name + ".strides[" + std::to_string(i) + "]");
      break;
    }
    case 5:  // misaligned pointer (honest: the block is that much larger)
      t.misalign = 1 + s.below(15);
      if (elem_bytes(t.dtype) > 1 && t.misalign % elem_bytes(t.dtype) != 0) {
        t.compute_claim();
        if (t.claim.numel > 0 || t.claim.over) e.bad(t.name, t.name + ": misaligned by " + std::to_string(t.misalign));
        else e.change(t.name + ": misaligned empty");
      } else {
        e.change(t.name + ": misaligned by " + std::to_string(t.misalign));
      }
      break;
    case 6:  // null data pointer
      t.force_null = true;
      t.compute_claim();
      if (t.claim.numel > 0) e.bad(t.name, t.name + ": null data");
      else e.change(t.name + ": null data (empty)");
      break;
    case 7:  // device id
      t.device_id = s.pick<int32_t>({1, -1, 7});
      e.change(t.name + ".device_id");
      break;
    default: break;
  }
}

// Allocates the buffers of one call; a tensor the call uses that has elements but could
// not be allocated stays null, and the call must then be refused.
void allocate_all(Source& s, Expect& e, std::initializer_list<Tensor*> used, std::initializer_list<Tensor*> unused = {}) {
  for (Tensor* t : used) {
    t->allocate(s);
    if (t->unhonoured) e.bad(t->name, t->name + ": too large to allocate (null)");
  }
  for (Tensor* t : unused) t->allocate(s);
}

// The message of a failed call must start with "<parameter>: ".
bool names_a_parameter(const std::string& msg, const std::set<std::string>& known, std::string* prefix) {
  const size_t colon = msg.find(": ");
  if (colon == std::string::npos || colon == 0) return false;
  *prefix = msg.substr(0, colon);
  return known.count(*prefix) != 0;
}

void report(const char* entry, const Expect& e, nvfp4_status_t st, const std::string& msg, const char* why,
            uint64_t case_seed) {
  ++g_failures;
  std::fprintf(stderr, "FAIL %s (case seed %" PRIu64 "): %s\n  changes: %s\n  status %d (%s), message \"%s\"\n",
               entry, case_seed, why, e.what.empty() ? "(none)" : e.what.c_str(), static_cast<int>(st),
               nvfp4_status_string(st), msg.c_str());
}

void judge(const char* entry, const Expect& e, nvfp4_status_t st, const std::set<std::string>& known,
           uint64_t case_seed) {
  ++g_cases;
  const std::string msg = nvfp4_last_error();
  g_status_count[std::string(entry) + ":" + nvfp4_status_string(st)]++;
  if (g_verbose && st != NVFP4_SUCCESS) std::printf("  %-12s %-60.60s -> %s\n", entry, e.what.c_str(), msg.c_str());
  if (st == NVFP4_SUCCESS) {
    if (e.must_fail) report(entry, e, st, msg, "accepted a call that can never be valid", case_seed);
    else if (!msg.empty()) report(entry, e, st, msg, "succeeded but left a message", case_seed);
    return;
  }
  std::string prefix;
  if (msg.empty()) return report(entry, e, st, msg, "failed without a message", case_seed);
  if (!names_a_parameter(msg, known, &prefix))
    return report(entry, e, st, msg, "message does not start with a parameter name", case_seed);
  if (e.changes == 0) return report(entry, e, st, msg, "a well-formed call failed", case_seed);
  if (e.must_fail && st != NVFP4_ERROR_INVALID_ARGUMENT)
    return report(entry, e, st, msg, "expected NVFP4_ERROR_INVALID_ARGUMENT", case_seed);
  if (st != NVFP4_ERROR_INVALID_ARGUMENT && st != NVFP4_ERROR_NOT_SUPPORTED)
    return report(entry, e, st, msg, "unexpected status", case_seed);
  if (st == NVFP4_ERROR_NOT_SUPPORTED && g_cuda_build && !e.gpu_backend)
    return report(entry, e, st, msg, "NOT_SUPPORTED from a CPU call", case_seed);
  if (e.changes == 1 && e.must_fail && !e.names.empty()) {
    bool named = false;
    for (const std::string& n : e.names) named |= prefix.compare(0, n.size(), n) == 0;
    if (!named) report(entry, e, st, msg, "the message does not name the parameter changed", case_seed);
  }
}

// A call that succeeded with only allowed changes is made again into outputs poisoned with
// 0xa5; it must succeed and write the same bytes (so every byte was written). `between` runs
// after the poisoning, before the second call (e.g. to put back a counter the first advanced).
template <class Call, class Between>
void check_repeatable(const char* entry, const Expect& e, const std::vector<Tensor*>& outs, Call call,
                      Between between, uint64_t case_seed) {
  auto snapshot = [&outs]() {
    std::vector<unsigned char> v;
    for (const Tensor* t : outs)
      if (t->ptr && t->bytes())
        v.insert(v.end(), static_cast<unsigned char*>(t->ptr), static_cast<unsigned char*>(t->ptr) + t->bytes());
    return v;
  };
  const std::vector<unsigned char> first = snapshot();
  for (Tensor* t : outs)
    if (t->ptr && t->bytes()) std::memset(t->ptr, 0xa5, t->bytes());
  between();
  const nvfp4_status_t st2 = call();
  if (st2 != NVFP4_SUCCESS || snapshot() != first)
    report(entry, e, st2, nvfp4_last_error(), "a repeated call wrote different bytes (an output not fully written?)",
           case_seed);
}

// ---- quantize -------------------------------------------------------------------------

// The descriptors of one quantized direction of a rows x cols orientation. Returns true
// when its expected shapes do not fit in int64 (no valid call can have them).
// mx: an MXFP4 direction (uint8 E8M0 scales over 32 values; amax unused).
bool set_quantized(Tensor& data, Tensor& scales, Tensor& amax, const std::string& n, int64_t rows, int64_t cols,
                   bool swizzled, bool mx = false) {
  data.name = n + ".data";
  scales.name = n + ".scales";
  amax.name = n + ".amax";
  data.dtype = NVFP4_DTYPE_UINT8;
  scales.dtype = mx ? NVFP4_DTYPE_UINT8 : NVFP4_DTYPE_E4M3;
  amax.dtype = NVFP4_DTYPE_FLOAT32;
  data.set_shape({rows, cols / 2});
  amax.set_shape({1});
  const int64_t sc = cols / (mx ? 32 : 16);
  if (!swizzled) {
    scales.set_shape({rows, sc});
    return false;
  }
  const __int128 rp = (static_cast<__int128>(rows) + 127) / 128 * 128, cp = (static_cast<__int128>(sc) + 3) / 4 * 4;
  scales.set_shape({rp > kMax ? kMax : static_cast<int64_t>(rp), static_cast<int64_t>(cp)});
  return rp > kMax || rp * cp > kMax;
}

const std::set<std::string> kQuantNames = {
    "input", "cfg", "cfg.block", "cfg.rounding", "cfg.scale_layout", "cfg.rht", "cfg.rht_sign_mask",
    "cfg.offset_device", "rowwise/columnwise", "rowwise", "rowwise.data", "rowwise.scales", "rowwise.amax",
    "columnwise", "columnwise.data", "columnwise.scales", "columnwise.amax",
    // the recipe options, the workspace form and the decoded outputs
    "cfg.scale_select", "cfg.e4m3_bound", "cfg.amax_mode", "cfg.amax_in", "cfg.offset_counter", "workspace",
    "workspace_bytes", "rowwise/columnwise/rowwise_decoded/columnwise_decoded", "rowwise_decoded.values",
    "rowwise_decoded.amax", "columnwise_decoded.values", "columnwise_decoded.amax"};

// The recipe options of a quantize case (cfg.scale_select, e4m3_bound, amax_mode / amax_in,
// offset_counter, EDEN rounding): at most one of them changed, chosen before the buffers
// (one amax per row changes the amax outputs' shapes) and judged against the final block,
// rounding and transform. amax_in and the counter live in `mem` (honest, 8-byte aligned).
struct QuantOptions {
  int32_t select = NVFP4_SELECT_NONE, amax_mode = NVFP4_AMAX_TENSOR;
  uint32_t bound = 448;
  int amax_in = 0;   // 0 none, 1 valid, 2 misaligned
  int counter = 0;   // 0 none, 1 valid, 2 misaligned
  bool eden = false;
  alignas(8) unsigned char mem[32] = {};

  void choose(Source& s, Expect& e) {
    if (!s.pct(30)) return;
    switch (s.below(11)) {
      case 0: select = s.pick<int32_t>({NVFP4_SELECT_4OVER6_MAE, NVFP4_SELECT_4OVER6_MSE}); e.change("4over6"); break;
      case 1:
        select = NVFP4_SELECT_4OVER6_MSE, bound = 256;
        e.change("4over6, bound 256");
        break;
      case 2: select = s.pick<int32_t>({3, -1, 1 << 30}); e.bad("cfg.scale_select", "cfg.scale_select unknown"); break;
      case 3: bound = s.pick<uint32_t>({0u, 255u, 449u, 0xffffffffu}); e.bad("cfg.e4m3_bound", "cfg.e4m3_bound"); break;
      case 4: bound = 256; e.bad("cfg.e4m3_bound", "cfg.e4m3_bound 256 without 4over6"); break;
      case 5: amax_mode = NVFP4_AMAX_ROWS; e.change("one amax per row"); break;
      case 6: amax_mode = s.pick<int32_t>({3, -1, INT32_MAX}); e.bad("cfg.amax_mode", "cfg.amax_mode unknown"); break;
      case 7:
        amax_mode = NVFP4_AMAX_GIVEN;
        amax_in = static_cast<int>(s.below(3));  // 0: null
        if (amax_in == 1) e.change("a given amax");
        else e.bad("cfg.amax_in", amax_in ? "cfg.amax_in misaligned" : "cfg.amax_in null");
        {
          const float v = s.pick<float>({1.0f, 0.0f, -3.0f, 1e30f, NAN, INFINITY});
          std::memcpy(mem, &v, sizeof v);
        }
        break;
      case 8: amax_in = 1; e.bad("cfg.amax_in", "cfg.amax_in without GIVEN"); break;
      case 9:
        counter = s.pct(80) ? 1 : 2;
        if (counter == 1) e.change("cfg.offset_counter");
        else e.bad("cfg.offset_counter", "cfg.offset_counter misaligned");
        break;
      default: eden = true; e.change("EDEN rounding"); break;
    }
  }
  // The rules between the options and the rest of the config (block, rounding, rht as the
  // call will have them; block_ok / rounding_ok: those are values the library knows).
  void judge(Expect& e, int32_t block, int32_t rounding, uint32_t rht, bool want_row, bool want_col,
             bool offset_device, bool block_ok, bool rounding_ok) {
    if (!block_ok || !rounding_ok) return;  // already a change that must fail
    const bool sel = select == NVFP4_SELECT_4OVER6_MAE || select == NVFP4_SELECT_4OVER6_MSE;
    if (sel && rounding != NVFP4_ROUND_NEAREST) e.bad("cfg.scale_select", "4over6 with SR or EDEN");
    if (sel && rht) e.bad("cfg.scale_select", "4over6 with the transform");
    if (amax_mode == NVFP4_AMAX_ROWS && block == NVFP4_BLOCK_2D) e.bad("cfg.amax_mode", "one amax per row, 2D");
    if (amax_mode == NVFP4_AMAX_ROWS && rht) e.bad("cfg.amax_mode", "one amax per row with the transform");
    if (counter && offset_device) e.bad("cfg.offset_counter", "cfg.offset_counter with cfg.offset_device");
    if (rounding == NVFP4_ROUND_EDEN) {
      if (block == NVFP4_BLOCK_2D) e.bad("cfg.rounding", "EDEN, 2D");
      else if ((want_row && !(rht & NVFP4_RHT_ROWWISE)) || (want_col && !(rht & NVFP4_RHT_COLUMNWISE)))
        e.bad("cfg.rht", "EDEN without the transform on an output");
    }
  }
  void apply(nvfp4_quant_config_t& cfg) {
    std::memcpy(&cfg.scale_select, &select, sizeof select);
    std::memcpy(&cfg.amax_mode, &amax_mode, sizeof amax_mode);
    cfg.e4m3_bound = bound;
    cfg.amax_in = amax_in == 0 ? nullptr : reinterpret_cast<const float*>(mem + (amax_in == 2 ? 2 : 0));
    cfg.offset_counter = counter == 0 ? nullptr : reinterpret_cast<uint64_t*>(mem + (counter == 2 ? 20 : 16));
  }
};

void fuzz_quantize(Source& s, uint64_t case_seed) {
  Expect e;
  // A well-formed call: R x C (C % 16 == 0), sometimes with huge consistent shapes.
  int64_t R = static_cast<int64_t>(s.below(70)), C = 16 * static_cast<int64_t>(s.below(9));
  if (s.pct(8)) {
    R = s.pick<int64_t>({(int64_t{1} << 60) + 1, int64_t{1} << 62, kMax, int64_t{1} << 40, 0});
    C = s.pick<int64_t>({16, 0, int64_t{1} << 62, 32});
  }
  const bool swz = s.pct(70);
  bool want_row = s.pct(80), want_col = !want_row || s.pct(50);
  // The form of the call: nvfp4_quantize, its workspace form, or with decoded outputs
  // (nvfp4_quantize_decoded, with or without a workspace).
  const int form = static_cast<int>(s.below(10));
  const bool decoded = form >= 8, use_ws = form >= 6 && (!decoded || s.pct(50));
  bool want_rdec = false, want_cdec = false;
  if (decoded) {
    want_rdec = s.pct(60);
    want_cdec = !want_rdec || s.pct(50);
    if (s.pct(30)) {  // only the decoded values of a direction, not its codes
      if (want_rdec) want_row = false;
      if (want_cdec) want_col = false;
    }
  }
  Tensor in;
  in.name = "input";
  in.dtype = s.pick<int32_t>({NVFP4_DTYPE_FLOAT32, NVFP4_DTYPE_FLOAT16, NVFP4_DTYPE_BFLOAT16});
  if (s.pct(20) && R % 2 == 0 && R > 0 && R < (int64_t{1} << 40)) in.set_shape({2, R / 2, C});
  else in.set_shape({R, C});
  in.compute_claim();
  if (in.claim.over) e.bad("input", "input: overflow (base)");
  // Expected output shapes, computed by the test in 128 bits.
  const __int128 rp128 = (static_cast<__int128>(R) + 15) / 16 * 16;
  const int64_t rp = rp128 > kMax ? kMax : static_cast<int64_t>(rp128);
  if (rp128 > kMax && (want_col || want_cdec)) e.bad("columnwise", "columnwise: padded rows overflow");
  Tensor rd, rs, ra, cd, cs, ca;
  if (set_quantized(rd, rs, ra, "rowwise", R, C, swz) && want_row) e.bad("rowwise.scales", "rowwise: swizzled overflow");
  if (set_quantized(cd, cs, ca, "columnwise", C, rp, swz) && want_col)
    e.bad("columnwise.scales", "columnwise: swizzled overflow");
  for (Tensor* t : {&rd, &rs, &ra, &cd, &cs, &ca}) {
    t->compute_claim();
    if (t->claim.over && ((want_row && t->name.rfind("rowwise", 0) == 0) || (want_col && t->name.rfind("col", 0) == 0)))
      e.bad(t->name, t->name + ": overflow (base)");
  }

  nvfp4_quant_config_t cfg;
  nvfp4_quant_config_default(&cfg);
  int32_t block = s.pct(25) ? NVFP4_BLOCK_2D : NVFP4_BLOCK_1D, rounding = s.pct(30), layout = swz;
  cfg.rht = block == NVFP4_BLOCK_1D && s.pct(30) ? static_cast<uint32_t>(s.below(4)) : 0u;
  cfg.seed = s.u64();
  cfg.offset = s.pct(10) ? UINT64_MAX - s.below(4) : s.below(1000);
  bool cfg_null = false;
  uint64_t counter = s.u64();
  int offset_device_mode = 0;  // 0 none, 1 valid, 2 misaligned, 3 inside an output

  // The recipe options.
  QuantOptions opt;
  opt.choose(s, e);
  if (opt.eden) rounding = NVFP4_ROUND_EDEN;
  if (opt.amax_mode == NVFP4_AMAX_ROWS) {  // one amax per row of each output
    ra.set_shape({R});
    ca.set_shape({C});
  }
  Tensor rv, rva, cv, cva, ws;
  rv.name = "rowwise_decoded.values", rva.name = "rowwise_decoded.amax";
  cv.name = "columnwise_decoded.values", cva.name = "columnwise_decoded.amax";
  rv.dtype = cv.dtype = NVFP4_DTYPE_BFLOAT16;
  rva.dtype = cva.dtype = NVFP4_DTYPE_FLOAT32;
  rv.set_shape({R, C});
  cv.set_shape({C, rp});
  rva.set_shape({1});
  cva.set_shape({1});
  for (Tensor* t : {&rv, &cv}) {
    t->compute_claim();
    if (t->claim.over && (t == &rv ? want_rdec : want_cdec)) {
      e.bad(t->name, t->name + ": overflow (base)");
      e.names.insert(t == &rv ? "input" : "columnwise");  // the orientation's size is checked first
    }
  }
  ws.name = "workspace";
  ws.dtype = NVFP4_DTYPE_UINT8;
  ws.set_shape({NVFP4_QUANTIZE_WORKSPACE_BYTES});
  size_t ws_bytes = use_ws ? NVFP4_QUANTIZE_WORKSPACE_BYTES : 0;
  int ws_change = 0;  // 1 null with bytes, 2 short, 3 misaligned, 4 inside an output
  if (use_ws && s.pct(20)) {
    ws_change = static_cast<int>(1 + s.below(4));
    if (ws_change == 1) ws.force_null = true, e.bad("workspace", "workspace null with bytes");
    if (ws_change == 2) {
      ws_bytes = s.pick<size_t>({1, 16, NVFP4_QUANTIZE_WORKSPACE_BYTES - 1});
      e.bad("workspace_bytes", "workspace_bytes short");
    }
    if (ws_change == 3) ws.misalign = s.pick<size_t>({4, 8}), e.bad("workspace", "workspace misaligned");
  }

  // The changes.
  mutate_tensor(s, in, e, 25);
  for (Tensor* t : {&rd, &rs, &ra, &cd, &cs, &ca})
    if ((t->name[0] == 'r') ? want_row : want_col) mutate_tensor(s, *t, e, 6);
  if (want_rdec) mutate_tensor(s, rv, e, 6), mutate_tensor(s, rva, e, 4);
  if (want_cdec) mutate_tensor(s, cv, e, 6), mutate_tensor(s, cva, e, 4);
  if (s.pct(5)) {
    block = s.pick<int32_t>({2, -1, 255, INT32_MIN});
    e.bad("cfg.block", "cfg.block=" + std::to_string(block));
  }
  if (s.pct(5)) {
    rounding = s.pick<int32_t>({3, -3, 1 << 20});
    e.bad("cfg.rounding", "cfg.rounding=" + std::to_string(rounding));
  }
  if (s.pct(5)) {
    layout = s.pick<int32_t>({2, -1, 77});
    e.bad("cfg.scale_layout", "cfg.scale_layout=" + std::to_string(layout));
  }
  if (s.pct(4)) {
    cfg.rht = s.pick<uint32_t>({4u, 0x80000000u, 7u});
    e.bad("cfg.rht", "cfg.rht unknown bits");
  }
  if (s.pct(4) && block == NVFP4_BLOCK_1D) {
    block = NVFP4_BLOCK_2D;
    cfg.rht = NVFP4_RHT_COLUMNWISE;
    e.bad("cfg.rht", "cfg.rht with 2D blocks");
  }
  if (s.pct(4)) {
    cfg.rht_sign_mask = 0x10000u | static_cast<uint32_t>(s.u64());
    e.bad("cfg.rht_sign_mask", "cfg.rht_sign_mask above bit 15");
  } else if (s.pct(10)) {
    cfg.rht_sign_mask = static_cast<uint32_t>(s.below(0x10000));
    e.change("cfg.rht_sign_mask");
  }
  if (s.pct(3)) {
    cfg_null = true;
    e.bad("cfg", "cfg null");
  }
  if (s.pct(15)) {
    offset_device_mode = static_cast<int>(1 + s.below(3));
    if (offset_device_mode == 1) e.change("cfg.offset_device");
    if (offset_device_mode == 2) e.bad("cfg.offset_device", "cfg.offset_device misaligned");
  }
  bool overlap = false;
  if (s.pct(6)) overlap = true;

  // Honest buffers for the final claims.
  allocate_all(s, e, {&in});
  if (want_row) allocate_all(s, e, {&rd, &rs, &ra});
  else allocate_all(s, e, {}, {&rd, &rs, &ra});
  if (want_col) allocate_all(s, e, {&cd, &cs, &ca});
  else allocate_all(s, e, {}, {&cd, &cs, &ca});
  if (want_rdec) allocate_all(s, e, {&rv, &rva});
  if (want_cdec) allocate_all(s, e, {&cv, &cva});
  if (use_ws) allocate_all(s, e, {&ws});
  if (ws_change == 4) {  // the workspace inside an output's bytes: refused as overlapping
    Tensor* o = want_row ? &rd : want_col ? &cd : want_rdec ? &rv : &cv;
    if (o->ptr && o->bytes() >= NVFP4_QUANTIZE_WORKSPACE_BYTES && reinterpret_cast<uintptr_t>(o->ptr) % 16 == 0 &&
        o->device == NVFP4_DEVICE_CPU) {
      ws.release();
      ws.ptr = o->ptr;
      e.bad("workspace", "workspace overlaps " + o->name);
      e.names.insert(o->name);
    }
  }
  Tensor* first_out = want_row ? &rd : want_col ? &cd : want_rdec ? &rv : &cv;
  if (overlap && first_out->ptr && first_out->bytes() > 0 && in.bytes() >= first_out->bytes() && in.ptr &&
      first_out->device == NVFP4_DEVICE_CPU && in.device == NVFP4_DEVICE_CPU) {
    // An output that is the input's memory: the overlap check must refuse it.
    first_out->release();
    first_out->ptr = in.ptr;
    e.bad(first_out->name, first_out->name + ": overlaps input");
    e.names.insert("input");
  }
  std::vector<unsigned char> od(16);
  const uint64_t* offset_device = nullptr;
  if (offset_device_mode == 1) {
    std::memcpy(od.data(), &counter, 8);
    offset_device = reinterpret_cast<const uint64_t*>(od.data());
  } else if (offset_device_mode == 2) {
    offset_device = reinterpret_cast<const uint64_t*>(od.data() + 4);
  } else if (offset_device_mode == 3) {
    const Tensor* o = want_row ? &rs : want_col ? &cs : nullptr;  // scales of a direction the call writes
    if (o && o->ptr && o->bytes() >= 8 && reinterpret_cast<uintptr_t>(o->ptr) % 8 == 0 && o->device == NVFP4_DEVICE_CPU) {
      offset_device = static_cast<const uint64_t*>(o->ptr);
      e.bad(o->name, o->name + ": overlaps cfg.offset_device");
    }
  }
  cfg.offset_device = offset_device;
  std::memcpy(&cfg.block, &block, sizeof block);
  std::memcpy(&cfg.rounding, &rounding, sizeof rounding);
  std::memcpy(&cfg.scale_layout, &layout, sizeof layout);
  opt.judge(e, block, rounding, cfg.rht, want_row || want_rdec, want_col || want_cdec, offset_device != nullptr,
            block == NVFP4_BLOCK_1D || block == NVFP4_BLOCK_2D,
            rounding >= NVFP4_ROUND_NEAREST && rounding <= NVFP4_ROUND_EDEN);
  if (decoded) {  // the decoded outputs are defined for the default options only
    if (opt.select != NVFP4_SELECT_NONE) e.bad("cfg.scale_select", "decoded outputs with 4over6");
    if (opt.amax_mode != NVFP4_AMAX_TENSOR) e.bad("cfg.amax_mode", "decoded outputs with another amax");
    if (rounding == NVFP4_ROUND_EDEN) e.bad("cfg.rounding", "decoded outputs with EDEN");
  }
  opt.apply(cfg);
  uint64_t counter_start = 0;
  if (cfg.offset_counter && opt.counter == 1) std::memcpy(&counter_start, cfg.offset_counter, 8);

  const nvfp4_tensor_t x = in.desc();
  nvfp4_quantized_t rq{rd.desc(), rs.desc(), ra.desc()}, cq{cd.desc(), cs.desc(), ca.desc()};
  nvfp4_decoded_t rdq{rv.desc(), rva.desc()}, cdq{cv.desc(), cva.desc()};
  void* const ws_ptr = use_ws ? ws.ptr : nullptr;
  const char* entry = decoded ? (use_ws ? "quantize_decoded_ws" : "quantize_decoded") : use_ws ? "quantize_ws" : "quantize";
  auto call = [&]() {
    const nvfp4_quant_config_t* c = cfg_null ? nullptr : &cfg;
    nvfp4_quantized_t* r = want_row ? &rq : nullptr;
    nvfp4_quantized_t* cc = want_col ? &cq : nullptr;
    if (decoded && use_ws)
      return nvfp4_quantize_decoded_ws(&x, c, r, cc, want_rdec ? &rdq : nullptr, want_cdec ? &cdq : nullptr, ws_ptr,
                                       ws_bytes, nullptr);
    if (decoded)
      return nvfp4_quantize_decoded(&x, c, r, cc, want_rdec ? &rdq : nullptr, want_cdec ? &cdq : nullptr, nullptr);
    if (use_ws) return nvfp4_quantize_ws(&x, c, r, cc, ws_ptr, ws_bytes, nullptr);
    return nvfp4_quantize(&x, c, r, cc, nullptr);
  };
  const nvfp4_status_t st = call();
  judge(entry, e, st, kQuantNames, case_seed);
  // A successful call with only allowed changes writes every byte of its outputs the same way
  // twice (the counter it advanced put back first).
  if (st == NVFP4_SUCCESS && !e.must_fail && in.claim.numel > 0) {
    std::vector<Tensor*> outs;
    if (want_row) outs.insert(outs.end(), {&rd, &rs, &ra});
    if (want_col) outs.insert(outs.end(), {&cd, &cs, &ca});
    if (want_rdec) outs.insert(outs.end(), {&rv, &rva});
    if (want_cdec) outs.insert(outs.end(), {&cv, &cva});
    check_repeatable(entry, e, outs, call, [&]() {
      if (cfg.offset_counter && opt.counter == 1) {
        uint64_t after = 0;
        std::memcpy(&after, cfg.offset_counter, 8);
        if (after != counter_start + 1)
          report(entry, e, st, nvfp4_last_error(), "cfg.offset_counter not advanced by one", case_seed);
        std::memcpy(cfg.offset_counter, &counter_start, 8);
      }
    }, case_seed);
  }
}

// ---- dequantize -----------------------------------------------------------------------

const std::set<std::string> kDequantNames = {"q", "q.data", "q.scales", "q.amax", "out", "scale_layout"};

void fuzz_dequantize(Source& s, uint64_t case_seed) {
  Expect e;
  int64_t R = static_cast<int64_t>(s.below(80)), C = 16 * static_cast<int64_t>(s.below(8));
  if (s.pct(6)) {
    R = s.pick<int64_t>({kMax, int64_t{1} << 62, 0});
    C = s.pick<int64_t>({16, int64_t{1} << 62, 0});
  }
  const bool swz = s.pct(60);
  int32_t layout = swz;
  Tensor d, sc, am, out;
  if (set_quantized(d, sc, am, "q", R, C, swz)) e.bad("q.scales", "q: swizzled overflow");
  out.name = "out";
  out.dtype = s.pick<int32_t>({NVFP4_DTYPE_FLOAT32, NVFP4_DTYPE_FLOAT16, NVFP4_DTYPE_BFLOAT16});
  out.set_shape({R, C});
  for (Tensor* t : {&d, &sc, &am, &out}) {
    t->compute_claim();
    if (t->claim.over) e.bad(t->name, t->name + ": overflow (base)");
  }
  for (Tensor* t : {&d, &sc, &am}) mutate_tensor(s, *t, e, 8);
  mutate_tensor(s, out, e, 15);
  if (s.pct(6)) {
    layout = s.pick<int32_t>({2, -1, 1 << 30});
    e.bad("scale_layout", "scale_layout=" + std::to_string(layout));
  }
  const bool q_null = s.pct(2);
  if (q_null) e.bad("q", "q null");
  allocate_all(s, e, {&d, &sc, &am, &out});
  if (s.pct(5) && out.ptr && d.ptr && out.bytes() > 0 && d.bytes() >= out.bytes() && out.device == d.device) {
    out.release();
    out.ptr = d.ptr;
    e.bad("out", "out overlaps q.data");
  }
  nvfp4_quantized_t q{d.desc(), sc.desc(), am.desc()};
  nvfp4_tensor_t o = out.desc();
  const nvfp4_status_t st = nvfp4_test_c_dequantize(q_null ? nullptr : &q, layout, &o);
  judge("dequantize", e, st, kDequantNames, case_seed);
}

// ---- swizzle / unswizzle ----------------------------------------------------------------

const std::set<std::string> kSwizzleNames = {"linear", "swizzled"};

void fuzz_swizzle(Source& s, uint64_t case_seed, bool to_swizzled) {
  Expect e;
  int64_t R = static_cast<int64_t>(s.below(300)), C = static_cast<int64_t>(s.below(20));
  if (s.pct(8)) {
    R = s.pick<int64_t>({int64_t{1} << 62, kMax, kMax - 100, 0});
    C = s.pick<int64_t>({4, kMax, 0, 1});
  }
  Tensor lin, swz;
  lin.name = "linear";
  swz.name = "swizzled";
  lin.dtype = s.pick<int32_t>({NVFP4_DTYPE_UINT8, NVFP4_DTYPE_E4M3});
  swz.dtype = s.pick<int32_t>({NVFP4_DTYPE_UINT8, NVFP4_DTYPE_E4M3});
  lin.set_shape({R, C});
  const __int128 rp = (static_cast<__int128>(R) + 127) / 128 * 128, cp = (static_cast<__int128>(C) + 3) / 4 * 4;
  if (rp > kMax || cp > kMax || (rp * cp > kMax && rp > 0 && cp > 0)) {
    e.bad("linear", "swizzled shape overflows");
    e.names.insert("swizzled");
  }
  swz.set_shape({rp > kMax ? kMax : static_cast<int64_t>(rp), cp > kMax ? kMax : static_cast<int64_t>(cp)});
  lin.compute_claim();
  swz.compute_claim();
  if (lin.claim.over) e.bad("linear", "linear: overflow (base)");
  mutate_tensor(s, lin, e, 15);
  mutate_tensor(s, swz, e, 15);
  const bool null_desc = s.pct(2);
  if (null_desc) e.bad(to_swizzled ? "swizzled" : "linear", "destination descriptor null");
  allocate_all(s, e, {&lin, &swz});
  Tensor& src = to_swizzled ? lin : swz;
  Tensor& dst = to_swizzled ? swz : lin;
  if (s.pct(5) && src.ptr && dst.ptr && dst.bytes() > 0 && src.bytes() >= dst.bytes() && src.device == dst.device) {
    dst.release();
    dst.ptr = src.ptr;
    e.bad(dst.name, dst.name + " overlaps " + src.name);
  }
  nvfp4_tensor_t a = src.desc(), b = dst.desc();
  const nvfp4_status_t st = to_swizzled ? nvfp4_swizzle_scales(&a, null_desc ? nullptr : &b, nullptr)
                                        : nvfp4_unswizzle_scales(&a, null_desc ? nullptr : &b, nullptr);
  judge(to_swizzled ? "swizzle" : "unswizzle", e, st, kSwizzleNames, case_seed);
}

// ---- GEMM -----------------------------------------------------------------------------

const std::set<std::string> kGemmNames = {"args", "a", "b", "a.data", "a.scales", "a.amax", "b.data",
                                          "b.scales", "b.amax", "c", "d", "bias", "beta", "backend",
                                          "scale_layout", "workspace", "bytes"};

// nvfp4_gemm, or (mx) nvfp4_mx_gemm: the same arguments without the amax tensors, K % 32.
void fuzz_gemm(Source& s, uint64_t case_seed, bool mx) {
  Expect e;
  const int64_t kb = mx ? 32 : 16;
  int64_t M = static_cast<int64_t>(s.below(40)), N = static_cast<int64_t>(s.below(40)),
          K = kb * (1 + static_cast<int64_t>(s.below(6)));
  if (s.pct(6)) {
    M = s.pick<int64_t>({int64_t{1} << 62, kMax, 0, 3});
    K = s.pick<int64_t>({int64_t{1} << 62, kb, (int64_t{1} << 62) + kb});
  }
  if (mx && s.pct(4)) {
    K = 16 * (2 * static_cast<int64_t>(s.below(4)) + 1);  // whole bytes, not whole 32-value blocks
    e.bad("a", "K not a multiple of 32");
  }
  const bool swz = s.pct(60);
  int32_t layout = swz, backend = s.pick<int32_t>({NVFP4_BACKEND_AUTO, NVFP4_BACKEND_REFERENCE});
  Tensor ad, as, aa, bd, bs, ba, d, c, bias;
  if (set_quantized(ad, as, aa, "a", M, K, swz, mx)) e.bad("a.scales", "a: swizzled overflow");
  if (set_quantized(bd, bs, ba, "b", N, K, swz, mx)) e.bad("b.scales", "b: swizzled overflow");
  // MXFP4 has no amax: the operand tensors are data and scales only.
  std::vector<Tensor*> operands = {&ad, &as, &bd, &bs};
  if (!mx) operands = {&ad, &as, &aa, &bd, &bs, &ba};
  d.name = "d";
  c.name = "c";
  bias.name = "bias";
  d.dtype = s.pick<int32_t>({NVFP4_DTYPE_FLOAT32, NVFP4_DTYPE_FLOAT16, NVFP4_DTYPE_BFLOAT16});
  c.dtype = s.pick<int32_t>({NVFP4_DTYPE_FLOAT32, NVFP4_DTYPE_FLOAT16, NVFP4_DTYPE_BFLOAT16});
  bias.dtype = s.pick<int32_t>({NVFP4_DTYPE_FLOAT32, NVFP4_DTYPE_FLOAT16, NVFP4_DTYPE_BFLOAT16});
  d.set_shape({M, N});
  c.set_shape({M, N});
  bias.set_shape({N});
  const bool use_c = s.pct(40), use_bias = s.pct(40), c_is_d = use_c && s.pct(30);
  float beta = use_c ? s.pick<float>({0.0f, 1.0f, -0.5f, __builtin_nanf("")}) : 0.0f;
  std::vector<Tensor*> with_d = operands;
  with_d.push_back(&d);
  for (Tensor* t : with_d) {
    t->compute_claim();
    if (t->claim.over) e.bad(t->name, t->name + ": overflow (base)");
  }
  if (static_cast<__int128>(M) * K > kMax) e.bad("a", "M*K overflows");
  for (Tensor* t : operands) mutate_tensor(s, *t, e, 5);
  mutate_tensor(s, d, e, 10);
  if (use_c && !c_is_d) mutate_tensor(s, c, e, 10);
  if (use_bias) mutate_tensor(s, bias, e, 10);
  if (s.pct(4)) {
    layout = s.pick<int32_t>({2, -7});
    e.bad("scale_layout", "scale_layout=" + std::to_string(layout));
  }
  if (s.pct(4)) {
    backend = s.pick<int32_t>({4, -1, 99});
    e.bad("backend", "backend=" + std::to_string(backend));
  } else if (s.pct(4)) {
    backend = s.pick<int32_t>({NVFP4_BACKEND_CUTLASS, NVFP4_BACKEND_CUDNN});
    e.change("backend=GPU");  // NOT_SUPPORTED for CPU tensors
    e.gpu_backend = true;
  }
  if (!use_c && s.pct(5)) {
    beta = 1.0f;
    e.bad("beta", "beta without c");
  }
  const int null_part = s.pct(3) ? static_cast<int>(1 + s.below(4)) : 0;  // args, a, b, d
  if (null_part) e.bad(null_part == 1 ? "args" : null_part == 2 ? "a" : null_part == 3 ? "b" : "d", "null part");
  if (mx) allocate_all(s, e, {&ad, &as, &bd, &bs, &d}, {&aa, &ba});
  else allocate_all(s, e, {&ad, &as, &aa, &bd, &bs, &ba, &d});
  if (use_c && !c_is_d) allocate_all(s, e, {&c});
  else allocate_all(s, e, {}, {&c});
  if (use_bias) allocate_all(s, e, {&bias});
  else allocate_all(s, e, {}, {&bias});
  // Overlaps: d on top of an input; bias inside d.
  if (s.pct(5) && d.ptr && ad.ptr && d.bytes() > 0 && ad.bytes() >= d.bytes() && d.device == ad.device) {
    d.release();
    d.ptr = ad.ptr;
    e.bad("d", "d overlaps a.data");
  } else if (use_bias && s.pct(5) && d.ptr && bias.ptr && bias.bytes() > 0 && d.bytes() >= bias.bytes() &&
             d.device == bias.device && bias.dtype == d.dtype) {
    bias.release();
    bias.ptr = d.ptr;
    e.bad("d", "bias inside d");
  }
  // The size query first: it takes no workspace, so its expectations are those so far.
  nvfp4_quantized_t qa{ad.desc(), as.desc(), aa.desc()}, qb{bd.desc(), bs.desc(), ba.desc()};
  nvfp4_mx_quantized_t mqa{ad.desc(), as.desc()}, mqb{bd.desc(), bs.desc()};
  nvfp4_tensor_t dt = d.desc(), ct = c_is_d ? d.desc() : c.desc(), bt = bias.desc();
  nvfp4_gemm_args_t args;
  std::memset(&args, 0, sizeof args);
  args.a = null_part == 2 ? nullptr : &qa;
  args.b = null_part == 3 ? nullptr : &qb;
  std::memcpy(&args.scale_layout, &layout, sizeof layout);
  std::memcpy(&args.backend, &backend, sizeof backend);
  args.c = use_c ? &ct : nullptr;
  args.bias = use_bias ? &bt : nullptr;
  args.beta = beta;
  args.d = null_part == 4 ? nullptr : &dt;
  nvfp4_mx_gemm_args_t margs;
  std::memset(&margs, 0, sizeof margs);
  margs.a = null_part == 2 ? nullptr : &mqa;
  margs.b = null_part == 3 ? nullptr : &mqb;
  std::memcpy(&margs.scale_layout, &layout, sizeof layout);
  std::memcpy(&margs.backend, &backend, sizeof backend);
  margs.c = args.c;
  margs.bias = args.bias;
  margs.beta = beta;
  margs.d = args.d;
  const nvfp4_gemm_args_t* ap = null_part == 1 ? nullptr : &args;
  const nvfp4_mx_gemm_args_t* map = null_part == 1 ? nullptr : &margs;
  const char* entry = mx ? "mx_gemm" : "gemm";
  if (s.pct(50)) {
    size_t bytes = 0;
    Expect eq = e;
    const bool bytes_null = s.pct(4);
    if (bytes_null) eq.bad("bytes", "bytes null");
    size_t* bp = bytes_null ? nullptr : &bytes;
    judge(mx ? "mx_gemm_ws" : "gemm_ws", eq,
          mx ? nvfp4_mx_gemm_workspace_size(map, bp) : nvfp4_gemm_workspace_size(ap, bp), kGemmNames, case_seed);
  }
  // Workspace: none, a valid one, or a bad one.
  std::vector<unsigned char> ws(64);
  void* wsp = nullptr;
  size_t ws_bytes = 0;
  switch (s.below(12)) {
    case 0: wsp = ws.data(); ws_bytes = ws.size(); e.change("workspace"); break;
    case 1: wsp = nullptr; ws_bytes = 32; e.bad("workspace", "workspace null with bytes"); break;
    case 2:
      if (ad.ptr && ad.bytes() > 0 && ad.device == NVFP4_DEVICE_CPU) {
        wsp = ad.ptr; ws_bytes = ad.bytes(); e.bad("workspace", "workspace overlaps a.data");
      }
      break;
    case 3: wsp = ws.data(); ws_bytes = SIZE_MAX; e.bad("workspace", "workspace past the address space"); break;
    default: break;
  }
  const nvfp4_status_t st = mx ? nvfp4_mx_gemm(map, wsp, ws_bytes, nullptr) : nvfp4_gemm(ap, wsp, ws_bytes, nullptr);
  judge(entry, e, st, kGemmNames, case_seed);
}

// ---- small entry points ---------------------------------------------------------------

void fuzz_misc(Source& s) {
  int32_t raw = s.pick<int32_t>({-1, 0, 3, 4, 7, 1000, INT32_MIN, INT32_MAX});
  const int ok = nvfp4_test_c_backend_supported(raw, static_cast<int>(s.below(130)));
  if (ok != 0 && ok != 1) ++g_failures, std::fprintf(stderr, "FAIL backend_supported returned %d\n", ok);
  if (!nvfp4_test_c_status_string(raw)) ++g_failures, std::fprintf(stderr, "FAIL status_string returned null\n");
  nvfp4_quant_config_default(nullptr);
  (void)nvfp4_cuda_device_cc(static_cast<int>(raw));
  g_cases += 1;
}

// ---- FP8 cast ---------------------------------------------------------------------------

const std::set<std::string> kFp8Names = {"x",         "cfg",  "cfg.format", "cfg.margin", "cfg.scale",
                                         "q/qt",      "q",    "qt",         "scale_inv",  "amax",
                                         "cfg.amax_accumulate"};

void fuzz_fp8(Source& s, uint64_t case_seed) {
  Expect e;
  int64_t R = static_cast<int64_t>(s.below(70)), C = 16 * static_cast<int64_t>(s.below(6));
  if (s.pct(6)) {
    R = s.pick<int64_t>({kMax, int64_t{1} << 62, 0});
    C = s.pick<int64_t>({16, int64_t{1} << 62, 0});
  }
  if (s.pct(5)) {
    C += 1 + static_cast<int64_t>(s.below(15));
    e.bad("x", "x: cols not a multiple of 16");
  }
  Tensor x, q, qt, sinv, amax, scale;
  x.name = "x";
  x.dtype = s.pick<int32_t>({NVFP4_DTYPE_FLOAT32, NVFP4_DTYPE_FLOAT16, NVFP4_DTYPE_BFLOAT16});
  x.set_shape({R, C});
  q.name = "q";
  q.dtype = NVFP4_DTYPE_UINT8;
  q.set_shape({R, C});
  qt.name = "qt";
  qt.dtype = NVFP4_DTYPE_UINT8;
  qt.set_shape({C, R});
  sinv.name = "scale_inv";
  amax.name = "amax";
  scale.name = "cfg.scale";
  for (Tensor* t : {&sinv, &amax, &scale}) t->dtype = NVFP4_DTYPE_FLOAT32, t->set_shape({1});
  for (Tensor* t : {&x, &q, &qt}) {
    t->compute_claim();
    if (t->claim.over) e.bad(t->name, t->name + ": overflow (base)");
  }
  const bool use_q = s.pct(80), use_qt = s.pct(60), use_sinv = s.pct(80), delayed = s.pct(40);
  bool use_amax = delayed ? s.pct(50) : !s.pct(5);
  if (!use_q && !use_qt) e.bad("q/qt", "no output requested");
  if (!delayed && !use_amax) e.bad("amax", "current scaling without amax");
  mutate_tensor(s, x, e, 10);
  // only what the call passes (a descriptor left out cannot be wrong)
  const std::pair<Tensor*, bool> outs[] = {{&q, use_q}, {&qt, use_qt}, {&sinv, use_sinv}, {&amax, use_amax},
                                           {&scale, delayed}};
  for (const auto& [t, used] : outs)
    if (used) mutate_tensor(s, *t, e, 6);
  nvfp4_fp8_config_t cfg;
  std::memset(&cfg, 0, sizeof cfg);
  int32_t format = static_cast<int32_t>(s.below(2));
  if (s.pct(5)) {
    format = s.pick<int32_t>({2, -1, 1 << 30});
    e.bad("cfg.format", "cfg.format=" + std::to_string(format));
  }
  std::memcpy(&cfg.format, &format, sizeof format);  // raw, as a C caller could pass it
  cfg.margin = static_cast<float>(s.below(4));
  if (s.pct(4)) {
    cfg.margin = s.pct(50) ? NAN : INFINITY;
    e.bad("cfg.margin", "cfg.margin not finite");
  }
  if (s.pct(15)) {  // accumulating the amax: delayed scaling with an amax only
    cfg.amax_accumulate = s.pct(85) ? 1 : s.pick<int>({2, -1, 1 << 30});
    if (cfg.amax_accumulate != 1) e.bad("cfg.amax_accumulate", "cfg.amax_accumulate not 0 or 1");
    else if (!delayed) e.bad("cfg.amax_accumulate", "cfg.amax_accumulate with current scaling");
    else if (!use_amax) e.bad("amax", "cfg.amax_accumulate without amax");
  }
  const bool cfg_null = s.pct(2);
  if (cfg_null) e.bad("cfg", "cfg null");
  for (const auto& [t, used] : outs) {
    t->allocate(s);
    if (used && t->unhonoured) e.bad(t->name, t->name + ": too large to allocate (null)");
  }
  x.allocate(s);
  if (x.unhonoured) e.bad("x", "x: too large to allocate (null)");
  if (s.pct(4) && use_q && q.ptr && x.ptr && q.bytes() > 0 && x.bytes() >= q.bytes() && q.device == x.device) {
    q.release();
    q.ptr = x.ptr;
    e.bad("q", "q overlaps x");
  }
  nvfp4_tensor_t tx = x.desc(), tq = q.desc(), tqt = qt.desc(), ts = sinv.desc(), ta = amax.desc(),
                 tsc = scale.desc();
  if (delayed) cfg.scale = &tsc;
  const nvfp4_status_t st = nvfp4_fp8_cast(&tx, cfg_null ? nullptr : &cfg, use_q ? &tq : nullptr,
                                           use_qt ? &tqt : nullptr, use_sinv ? &ts : nullptr,
                                           use_amax ? &ta : nullptr, nullptr);
  judge("fp8_cast", e, st, kFp8Names, case_seed);
}

// ---- the grouped and batched forms -------------------------------------------------------

// At most one change of the config that the grouped and batched forms refuse by the field's
// name (the library's grouped_config): unknown block or rounding, EDEN, linear scales, the
// recipe options of 0.3, offset_counter, the transform with 2D tiles, a null config; and, for
// the ragged form (allow_2d false), 16x16 tiles. `mem`: 16 bytes, 8-byte aligned. The raw
// enum values end up in cfg as a C caller's would.
void mutate_grouped_config(Source& s, Expect& e, nvfp4_quant_config_t& cfg, unsigned char* mem, int32_t& block,
                           int32_t& rounding, int32_t& layout, bool& cfg_null, bool allow_2d) {
  switch (s.pct(30) ? s.below(11) : 99) {
    case 0: block = s.pick<int32_t>({2, -1}); e.bad("cfg.block", "cfg.block unknown"); break;
    case 1: rounding = s.pick<int32_t>({NVFP4_ROUND_EDEN, 3, -1}); e.bad("cfg.rounding", "cfg.rounding"); break;
    case 2: layout = NVFP4_SCALES_LINEAR; e.bad("cfg.scale_layout", "linear scales"); break;
    case 3:
      cfg.scale_select = s.pick<nvfp4_scale_select_t>({NVFP4_SELECT_4OVER6_MAE, NVFP4_SELECT_4OVER6_MSE});
      e.bad("cfg.scale_select", "4over6");
      break;
    case 4: cfg.e4m3_bound = s.pick<uint32_t>({256u, 0u}); e.bad("cfg.e4m3_bound", "cfg.e4m3_bound"); break;
    case 5:
      cfg.amax_mode = s.pick<nvfp4_amax_mode_t>({NVFP4_AMAX_ROWS, NVFP4_AMAX_GIVEN});
      e.bad("cfg.amax_mode", "cfg.amax_mode");
      break;
    case 6: cfg.amax_in = reinterpret_cast<const float*>(mem); e.bad("cfg.amax_in", "cfg.amax_in"); break;
    case 7: cfg.offset_counter = reinterpret_cast<uint64_t*>(mem + 8); e.bad("cfg.offset_counter", "offset_counter"); break;
    case 8:
      if (block == NVFP4_BLOCK_2D) cfg.rht = NVFP4_RHT_COLUMNWISE, e.bad("cfg.rht", "cfg.rht with 2D tiles");
      break;
    case 9: cfg_null = true; e.bad("cfg", "cfg null"); break;
    case 10:
      if (!allow_2d) block = NVFP4_BLOCK_2D, cfg.rht = 0, e.bad("cfg.block", "2D tiles on ragged groups");
      break;
    default: break;
  }
  std::memcpy(&cfg.block, &block, sizeof block);
  std::memcpy(&cfg.rounding, &rounding, sizeof rounding);
  std::memcpy(&cfg.scale_layout, &layout, sizeof layout);
}

// ---- batched (expert-weight) quantize ---------------------------------------------------

const std::set<std::string> kBatchedNames = {
    "input", "cfg", "cfg.block", "cfg.rounding", "cfg.scale_layout", "cfg.rht", "cfg.rht_sign_mask",
    "cfg.offset_device", "cfg.scale_select", "cfg.e4m3_bound", "cfg.amax_mode", "cfg.amax_in", "cfg.offset_counter",
    "rowwise/columnwise", "rowwise", "rowwise.data", "rowwise.scales", "rowwise.amax", "columnwise",
    "columnwise.data", "columnwise.scales", "columnwise.amax"};

// One direction of a batched tensor: E tensors [rows, cols], swizzled scales. Returns true when
// its shapes do not fit in int64.
bool set_batched(Tensor& data, Tensor& scales, Tensor& amax, const std::string& n, int64_t E, int64_t rows,
                 int64_t cols) {
  data.name = n + ".data";
  scales.name = n + ".scales";
  amax.name = n + ".amax";
  data.dtype = NVFP4_DTYPE_UINT8;
  scales.dtype = NVFP4_DTYPE_E4M3;
  amax.dtype = NVFP4_DTYPE_FLOAT32;
  const __int128 rp = (static_cast<__int128>(rows) + 127) / 128 * 128, cp = (static_cast<__int128>(cols / 16) + 3) / 4 * 4;
  // a * b * c > INT64_MAX, each factor in [0, INT64_MAX] (two at a time: no 128-bit overflow)
  auto over3 = [](__int128 a, __int128 b, __int128 c) { return a * b > kMax || a * b * c > kMax; };
  const bool over = rp > kMax || over3(E, rp, cp) || over3(E, rows, cols / 2);
  data.set_shape({E, rows, cols / 2});
  scales.set_shape({E, rp > kMax ? kMax : static_cast<int64_t>(rp), static_cast<int64_t>(cp)});
  amax.set_shape({E});
  return over;
}

// nvfp4_batched_quantize: x [E, N, K] (N % 16 == 0, K % 16 == 0, E >= 1), outputs as above; the
// config's recipe options and offset_counter are refused by name, scales must be swizzled.
void fuzz_batched(Source& s, uint64_t case_seed) {
  Expect e;
  int64_t E = 1 + static_cast<int64_t>(s.below(4)), N = 16 * static_cast<int64_t>(s.below(4)),
          K = 16 * static_cast<int64_t>(s.below(5));
  if (s.pct(6)) {
    E = s.pick<int64_t>({int64_t{1} << 40, kMax / 16});
    N = s.pick<int64_t>({16, int64_t{1} << 40});
    K = s.pick<int64_t>({16, int64_t{1} << 40});
  }
  const bool want_row = s.pct(75), want_col = !want_row || s.pct(50);
  Tensor in;
  in.name = "input";
  in.dtype = s.pick<int32_t>({NVFP4_DTYPE_FLOAT32, NVFP4_DTYPE_FLOAT16, NVFP4_DTYPE_BFLOAT16});
  in.set_shape({E, N, K});
  in.compute_claim();
  if (in.claim.over) e.bad("input", "input: overflow (base)");
  Tensor rd, rs, ra, cd, cs, ca;
  if (set_batched(rd, rs, ra, "rowwise", E, N, K) && want_row) e.bad("rowwise.scales", "rowwise overflow (base)");
  if (set_batched(cd, cs, ca, "columnwise", E, K, N) && want_col) e.bad("columnwise.scales", "columnwise overflow (base)");
  for (Tensor* t : {&rd, &rs, &cd, &cs}) {
    t->compute_claim();
    if (t->claim.over && (t->name[0] == 'r' ? want_row : want_col)) {
      e.bad(t->name, t->name + ": overflow (base)");
      e.names.insert(t->name[0] == 'r' ? "rowwise.data" : "columnwise.data");
    }
  }
  nvfp4_quant_config_t cfg;
  nvfp4_quant_config_default(&cfg);
  int32_t block = s.pct(40) ? NVFP4_BLOCK_2D : NVFP4_BLOCK_1D, rounding = s.pct(30), layout = NVFP4_SCALES_SWIZZLED;
  cfg.rht = block == NVFP4_BLOCK_1D && s.pct(30) ? static_cast<uint32_t>(s.below(4)) : 0u;
  cfg.seed = s.u64();
  cfg.offset = s.below(1000);
  alignas(8) unsigned char mem[16] = {};
  bool cfg_null = false;

  mutate_tensor(s, in, e, 20);
  for (Tensor* t : {&rd, &rs, &ra, &cd, &cs, &ca})
    if ((t->name[0] == 'r') ? want_row : want_col) mutate_tensor(s, *t, e, 6);
  mutate_grouped_config(s, e, cfg, mem, block, rounding, layout, cfg_null, true);

  allocate_all(s, e, {&in});
  if (want_row) allocate_all(s, e, {&rd, &rs, &ra});
  if (want_col) allocate_all(s, e, {&cd, &cs, &ca});
  if (s.pct(5) && want_row && want_col && rd.ptr && cd.ptr && rd.bytes() > 0 && cd.bytes() >= rd.bytes() &&
      rd.device == NVFP4_DEVICE_CPU && cd.device == NVFP4_DEVICE_CPU) {  // two outputs in one place
    rd.release();
    rd.ptr = cd.ptr;
    e.bad("rowwise.data", "rowwise.data overlaps columnwise.data");
    e.names.insert("columnwise.data");
  }
  const nvfp4_tensor_t x = in.desc();
  nvfp4_grouped_quantized_t rq{rd.desc(), rs.desc(), ra.desc()}, cq{cd.desc(), cs.desc(), ca.desc()};
  auto call = [&]() {
    return nvfp4_batched_quantize(&x, cfg_null ? nullptr : &cfg, want_row ? &rq : nullptr, want_col ? &cq : nullptr,
                                  nullptr);
  };
  const nvfp4_status_t st = call();
  judge("batched_quantize", e, st, kBatchedNames, case_seed);
  // A successful call with only allowed changes writes every byte of its outputs the same way twice.
  if (st == NVFP4_SUCCESS && !e.must_fail && in.claim.numel > 0) {
    std::vector<Tensor*> outs;
    if (want_row) outs.insert(outs.end(), {&rd, &rs, &ra});
    if (want_col) outs.insert(outs.end(), {&cd, &cs, &ca});
    check_repeatable("batched_quantize", e, outs, call, []() {}, case_seed);
  }
}

// ---- grouped (ragged, MoE activation) quantize -------------------------------------------

const std::set<std::string> kGroupedNames = {
    "input", "groups", "groups.count", "groups.tokens", "groups.offs", "groups.offs_error", "cfg", "cfg.block",
    "cfg.rounding", "cfg.scale_layout", "cfg.rht", "cfg.rht_sign_mask", "cfg.offset_device", "cfg.scale_select",
    "cfg.e4m3_bound", "cfg.amax_mode", "cfg.amax_in", "cfg.offset_counter", "rowwise/columnwise", "rowwise",
    "rowwise.data", "rowwise.scales", "rowwise.amax", "columnwise", "columnwise.data", "columnwise.scales",
    "columnwise.amax"};

// nvfp4_grouped_quantize: x [T, K] in E groups given by offs (cumulative ends, checked on the
// host for CPU tensors), 1D blocks, swizzled scales; outputs in the grouped layouts. offs is an
// honest heap block of exactly `count` int32 (so reading past it is an ASan report).
void fuzz_grouped(Source& s, uint64_t case_seed) {
  Expect e;
  const int64_t T = static_cast<int64_t>(s.below(70)), K = 16 * static_cast<int64_t>(s.below(5));
  int64_t E = 1 + static_cast<int64_t>(s.below(4));
  const bool want_row = s.pct(75), want_col = !want_row || s.pct(50);
  Tensor in;
  in.name = "input";
  in.dtype = s.pick<int32_t>({NVFP4_DTYPE_FLOAT32, NVFP4_DTYPE_FLOAT16, NVFP4_DTYPE_BFLOAT16});
  in.set_shape({T, K});
  // valid offs: non-decreasing ends in [0, T] (rows past the last group belong to none)
  std::vector<int32_t> ends(static_cast<size_t>(E));
  for (auto& v : ends) v = static_cast<int32_t>(s.below(static_cast<uint64_t>(T) + 1));
  std::sort(ends.begin(), ends.end());
  int64_t count = E, tokens = T;
  int offs_mode = 0;        // 0 valid, 1 null, 2 misaligned
  bool groups_null = false, offs_error = s.pct(30), offs_error_misaligned = false;
  switch (s.pct(30) ? s.below(9) : 99) {
    case 0:
      if (E > 1) {
        std::swap(ends[0], ends[static_cast<size_t>(E - 1)]);
        if (ends[0] > ends[static_cast<size_t>(E - 1)]) e.bad("groups.offs", "offs decreasing");
        else e.change("offs swapped (equal)");
      }
      break;
    case 1: ends[0] = -1 - static_cast<int32_t>(s.below(5)); e.bad("groups.offs", "offs negative"); break;
    case 2: ends.back() = static_cast<int32_t>(T + 1 + s.below(5)); e.bad("groups.offs", "offs past T"); break;
    case 3: count = s.pick<int64_t>({0, -1, int64_t{1} << 31, kMax}); e.bad("groups.count", "groups.count"); break;
    case 4: tokens = T + 1 + static_cast<int64_t>(s.below(3)); e.bad("groups.tokens", "groups.tokens"); break;
    case 5: offs_mode = 1 + static_cast<int>(s.below(2)); e.bad("groups.offs", "offs null or misaligned"); break;
    case 6: groups_null = true; e.bad("groups", "groups null"); break;
    case 7: offs_error = true, offs_error_misaligned = true; e.bad("groups.offs_error", "offs_error misaligned"); break;
    default: break;
  }
  auto sr = [](__int128 v, __int128 m) { return (v + m - 1) / m * m; };
  Tensor rd, rs, ra, cd, cs, ca;
  for (Tensor* t : {&rd, &rs, &ra}) t->name = std::string("rowwise.") + (t == &rd ? "data" : t == &rs ? "scales" : "amax");
  for (Tensor* t : {&cd, &cs, &ca}) t->name = std::string("columnwise.") + (t == &cd ? "data" : t == &cs ? "scales" : "amax");
  rd.dtype = cd.dtype = NVFP4_DTYPE_UINT8;
  rs.dtype = cs.dtype = NVFP4_DTYPE_E4M3;
  ra.dtype = ca.dtype = NVFP4_DTYPE_FLOAT32;
  rd.set_shape({T, K / 2});
  rs.set_shape({static_cast<int64_t>(sr(T + 127 * E, 128)), static_cast<int64_t>(sr(K / 16, 4))});
  ra.set_shape({E});
  cd.set_shape({static_cast<int64_t>(K * (T + 31 * E) / 2)});
  cs.set_shape({static_cast<int64_t>(sr(K, 128) * ((T + 63 * E) / 16))});
  ca.set_shape({E});
  nvfp4_quant_config_t cfg;
  nvfp4_quant_config_default(&cfg);
  int32_t rounding = s.pct(30), block = NVFP4_BLOCK_1D, layout = NVFP4_SCALES_SWIZZLED;
  cfg.rht = s.pct(30) ? static_cast<uint32_t>(s.below(4)) : 0u;
  cfg.seed = s.u64();
  cfg.offset = s.below(1000);
  alignas(8) unsigned char mem[16] = {};
  bool cfg_null = false;
  mutate_tensor(s, in, e, 15);
  for (Tensor* t : {&rd, &rs, &ra, &cd, &cs, &ca})
    if ((t->name[0] == 'r') ? want_row : want_col) mutate_tensor(s, *t, e, 5);
  mutate_grouped_config(s, e, cfg, mem, block, rounding, layout, cfg_null, false);
  allocate_all(s, e, {&in});
  if (want_row) allocate_all(s, e, {&rd, &rs, &ra});
  if (want_col) allocate_all(s, e, {&cd, &cs, &ca});
  // offs: exactly `count` int32 when count is one a caller could have made; offs_error 4 bytes
  const size_t n_offs = count >= 1 && count <= 64 ? static_cast<size_t>(count) : 0;
  void* offs_block = nullptr;
  if (posix_memalign(&offs_block, 16, 4 * n_offs + (offs_mode == 2 ? 2 : 0) + (n_offs == 0 ? 1 : 0)) != 0)
    std::abort();
  unsigned char* offs_base = static_cast<unsigned char*>(offs_block) + (offs_mode == 2 ? 2 : 0);
  for (size_t g = 0; g < n_offs; ++g) {
    const int32_t v = g < ends.size() ? ends[g] : ends.back();
    std::memcpy(offs_base + 4 * g, &v, 4);
  }
  alignas(8) unsigned char err_mem[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  nvfp4_groups_t groups{offs_mode == 1 ? nullptr : reinterpret_cast<const int32_t*>(offs_base), count, tokens,
                        offs_error ? reinterpret_cast<int32_t*>(err_mem + (offs_error_misaligned ? 2 : 0)) : nullptr};
  const nvfp4_tensor_t x = in.desc();
  nvfp4_grouped_quantized_t rq{rd.desc(), rs.desc(), ra.desc()}, cq{cd.desc(), cs.desc(), ca.desc()};
  auto call = [&]() {
    return nvfp4_grouped_quantize(&x, groups_null ? nullptr : &groups, cfg_null ? nullptr : &cfg,
                                  want_row ? &rq : nullptr, want_col ? &cq : nullptr, nullptr);
  };
  const nvfp4_status_t st = call();
  judge("grouped_quantize", e, st, kGroupedNames, case_seed);
  if (st == NVFP4_SUCCESS && offs_error) {
    int32_t got = -1;
    std::memcpy(&got, err_mem, 4);
    if (got != 0) report("grouped_quantize", e, st, "", "a valid call left offs_error nonzero", case_seed);
  }
  if (st == NVFP4_SUCCESS && !e.must_fail && in.claim.numel > 0) {
    std::vector<Tensor*> outs;
    if (want_row) outs.insert(outs.end(), {&rd, &rs, &ra});
    if (want_col) outs.insert(outs.end(), {&cd, &cs, &ca});
    check_repeatable("grouped_quantize", e, outs, call, []() {}, case_seed);
  }
  std::free(offs_block);
}

// ---- MXFP4 quantize --------------------------------------------------------------------

const std::set<std::string> kMxQuantNames = {
    "input", "cfg", "cfg.scale_layout", "cfg.offset_device", "cfg.rowwise.rounding", "cfg.rowwise.scale_rule",
    "cfg.columnwise.rounding", "cfg.columnwise.scale_rule", "rowwise/columnwise", "rowwise", "rowwise.data",
    "rowwise.scales", "columnwise", "columnwise.data", "columnwise.scales"};

// nvfp4_mx_quantize: x [R, C] (C % 32 == 0) in blocks of 32, each direction with its own
// rounding and scale rule (checked only for a direction that is requested).
void fuzz_mx_quantize(Source& s, uint64_t case_seed) {
  Expect e;
  int64_t R = static_cast<int64_t>(s.below(70)), C = 32 * static_cast<int64_t>(s.below(5));
  if (s.pct(6)) {
    R = s.pick<int64_t>({kMax, int64_t{1} << 62, 0});
    C = s.pick<int64_t>({32, int64_t{1} << 61});
  }
  const bool swz = s.pct(60), want_row = s.pct(75), want_col = !want_row || s.pct(50);
  Tensor in;
  in.name = "input";
  in.dtype = s.pick<int32_t>({NVFP4_DTYPE_FLOAT32, NVFP4_DTYPE_FLOAT16, NVFP4_DTYPE_BFLOAT16});
  in.set_shape({R, C});
  in.compute_claim();
  if (in.claim.over) e.bad("input", "input: overflow (base)");
  const __int128 rp128 = (static_cast<__int128>(R) + 31) / 32 * 32;
  const int64_t rp = rp128 > kMax ? kMax : static_cast<int64_t>(rp128);
  if (rp128 > kMax && want_col) e.bad("columnwise", "columnwise: padded rows overflow");
  Tensor rd, rs, ra, cd, cs, ca;  // ra / ca unused: MXFP4 has no per-tensor amax
  if (set_quantized(rd, rs, ra, "rowwise", R, C, swz, true) && want_row) e.bad("rowwise.scales", "rowwise overflow");
  if (set_quantized(cd, cs, ca, "columnwise", C, rp, swz, true) && want_col)
    e.bad("columnwise.scales", "columnwise overflow");
  for (Tensor* t : {&rd, &rs, &cd, &cs}) {
    t->compute_claim();
    if (t->claim.over && (t->name[0] == 'r' ? want_row : want_col)) e.bad(t->name, t->name + ": overflow (base)");
  }
  nvfp4_mx_quant_config_t cfg;
  nvfp4_mx_quant_config_default(&cfg);
  int32_t rr = s.pct(30), rrule = static_cast<int32_t>(s.below(3)), cr = s.pct(30), crule = static_cast<int32_t>(s.below(3));
  int32_t layout = swz;
  cfg.seed = s.u64();
  cfg.offset = s.below(1000);
  alignas(8) unsigned char mem[16] = {};
  bool cfg_null = false;
  mutate_tensor(s, in, e, 20);
  for (Tensor* t : {&rd, &rs, &cd, &cs})
    if ((t->name[0] == 'r') ? want_row : want_col) mutate_tensor(s, *t, e, 6);
  switch (s.pct(30) ? s.below(7) : 99) {
    case 0:  // a bad field of a direction that is requested must fail; of one that is not, is ignored
      rr = s.pick<int32_t>({2, -1});
      if (want_row) e.bad("cfg.rowwise.rounding", "cfg.rowwise.rounding");
      else e.change("cfg.rowwise.rounding, unused");
      break;
    case 1:
      crule = s.pick<int32_t>({3, -1, INT32_MAX});
      if (want_col) e.bad("cfg.columnwise.scale_rule", "cfg.columnwise.scale_rule");
      else e.change("cfg.columnwise.scale_rule, unused");
      break;
    case 2: layout = s.pick<int32_t>({2, -1}); e.bad("cfg.scale_layout", "cfg.scale_layout"); break;
    case 3: cfg.offset_device = reinterpret_cast<const uint64_t*>(mem); e.change("cfg.offset_device"); break;
    case 4: cfg.offset_device = reinterpret_cast<const uint64_t*>(mem + 4); e.bad("cfg.offset_device", "misaligned"); break;
    case 5: cfg_null = true; e.bad("cfg", "cfg null"); break;
    default: break;
  }
  std::memcpy(&cfg.rowwise.rounding, &rr, sizeof rr);
  std::memcpy(&cfg.rowwise.scale_rule, &rrule, sizeof rrule);
  std::memcpy(&cfg.columnwise.rounding, &cr, sizeof cr);
  std::memcpy(&cfg.columnwise.scale_rule, &crule, sizeof crule);
  std::memcpy(&cfg.scale_layout, &layout, sizeof layout);
  allocate_all(s, e, {&in});
  if (want_row) allocate_all(s, e, {&rd, &rs});
  if (want_col) allocate_all(s, e, {&cd, &cs});
  const nvfp4_tensor_t x = in.desc();
  nvfp4_mx_quantized_t rq{rd.desc(), rs.desc()}, cq{cd.desc(), cs.desc()};
  auto call = [&]() {
    return nvfp4_mx_quantize(&x, cfg_null ? nullptr : &cfg, want_row ? &rq : nullptr, want_col ? &cq : nullptr,
                             nullptr);
  };
  const nvfp4_status_t st = call();
  judge("mx_quantize", e, st, kMxQuantNames, case_seed);
  if (st == NVFP4_SUCCESS && !e.must_fail && in.claim.numel > 0) {
    std::vector<Tensor*> outs;
    if (want_row) outs.insert(outs.end(), {&rd, &rs});
    if (want_col) outs.insert(outs.end(), {&cd, &cs});
    check_repeatable("mx_quantize", e, outs, call, []() {}, case_seed);
  }
}

// ---- fixed cases -----------------------------------------------------------------------

// Empty tensors whose other dimensions multiply past int64 ([2^59 + 16, 32, 0], ...): their
// element count is 0 whatever the order the dimensions are multiplied in, and no entry point
// may compute the product on the way (signed overflow: UBSan stops the run). Every call fails
// with a message that names a parameter, or succeeds with nothing to write.
void fixed_empty_with_huge_dims() {
  const int64_t shapes[][3] = {{(int64_t{1} << 59) + 16, 32, 0}, {kMax, 2, 0}, {2, kMax, 0}, {kMax, kMax, 0}};
  for (const auto& sh : shapes) {
    nvfp4_tensor_t x;
    std::memset(&x, 0, sizeof x);
    x.dtype = NVFP4_DTYPE_FLOAT32;
    x.device_type = NVFP4_DEVICE_CPU;
    x.ndim = 3;
    for (int i = 0; i < 3; ++i) x.shape[i] = sh[i];
    x.strides[2] = 1, x.strides[1] = 1, x.strides[0] = 1;
    nvfp4_tensor_t none;
    std::memset(&none, 0, sizeof none);
    none.dtype = NVFP4_DTYPE_UINT8;
    none.ndim = 2;
    nvfp4_quantized_t q{none, none, none};
    q.amax.dtype = NVFP4_DTYPE_FLOAT32;
    q.amax.ndim = 1;
    q.amax.shape[0] = 1;
    nvfp4_grouped_quantized_t gq{none, none, none};
    nvfp4_quant_config_t cfg;
    nvfp4_quant_config_default(&cfg);
    nvfp4_tensor_t out = x;
    Expect e;
    e.change("an empty tensor with huge dimensions");
    judge("quantize (fixed)", e, nvfp4_quantize(&x, &cfg, &q, nullptr, nullptr), kQuantNames, 0);
    judge("batched_quantize (fixed)", e, nvfp4_batched_quantize(&x, &cfg, &gq, nullptr, nullptr), kBatchedNames, 0);
    nvfp4_quantized_t dq = q;
    dq.data = x;
    dq.data.dtype = NVFP4_DTYPE_UINT8;
    judge("dequantize (fixed)", e, nvfp4_dequantize(&dq, NVFP4_SCALES_SWIZZLED, &out, nullptr), kDequantNames, 0);
  }
}

void run_case(Source& s, uint64_t case_seed) {
  switch (s.below(8)) {
    case 0: case 1: fuzz_quantize(s, case_seed); break;
    case 2: fuzz_dequantize(s, case_seed); break;
    case 3: fuzz_swizzle(s, case_seed, true); break;
    case 4: fuzz_swizzle(s, case_seed, false); break;
    case 5: fuzz_gemm(s, case_seed, s.pct(35)); break;
    case 6: fuzz_fp8(s, case_seed); break;
    case 7: {
      const uint64_t k = s.below(4);
      if (k == 0) fuzz_batched(s, case_seed);
      else if (k == 1) fuzz_mx_quantize(s, case_seed);
      else if (k == 2) fuzz_grouped(s, case_seed);
      else fuzz_misc(s);
      break;
    }
    default: fuzz_misc(s); break;
  }
}

}  // namespace

#if defined(NVFP4_LIBFUZZER)
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  g_cuda_build = nvfp4_build_cuda_archs()[0] != '\0';
  Source s;
  s.from_data = true;
  s.data = data;
  s.size = size;
  run_case(s, 0);
  if (g_failures) std::abort();
  return 0;
}
#else
int main(int argc, char** argv) {
  double seconds = 20.0;
  uint64_t one_case = 0;
  bool has_case = false;
  uint64_t iters = 0, seed = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--seconds" && i + 1 < argc) seconds = std::atof(argv[++i]);
    else if (a == "--iters" && i + 1 < argc) iters = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--seed" && i + 1 < argc) seed = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--case" && i + 1 < argc) one_case = std::strtoull(argv[++i], nullptr, 10), has_case = true;
    else if (a == "-v") g_verbose = true;
    else {
      std::fprintf(stderr, "usage: %s [--seconds S] [--iters N] [--seed X] [--case SEED] [-v]\n", argv[0]);
      return 2;
    }
  }
  g_cuda_build = nvfp4_build_cuda_archs()[0] != '\0';
  if (has_case) {  // replays one case by the seed a failure printed
    g_verbose = true;
    Source s;
    s.state = one_case;
    run_case(s, one_case);
    return g_failures ? 1 : 0;
  }
  std::printf("nvfp4_fuzz_api: seed %" PRIu64 ", budget %.0f s%s, %s build\n", seed, seconds,
              iters ? (" or " + std::to_string(iters) + " cases").c_str() : "", g_cuda_build ? "CUDA" : "CPU-only");
  std::fflush(stdout);
  fixed_empty_with_huge_dims();
  const auto t0 = std::chrono::steady_clock::now();
  Source master;
  master.state = seed;
  uint64_t n = 0;
  for (;; ++n) {
    if (iters && n >= iters) break;
    if ((n & 63) == 0 && std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > seconds) break;
    const uint64_t case_seed = master.u64();
    Source s;
    s.state = case_seed;
    run_case(s, case_seed);
    if (g_failures > 20) break;
  }
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%" PRIu64 " cases (%" PRIu64 " calls judged) in %.1f s, %" PRIu64 " failures\n", n, g_cases, took,
              g_failures);
  for (const auto& kv : g_status_count) std::printf("  %-34s %" PRIu64 "\n", kv.first.c_str(), kv.second);
  if (g_failures) std::printf("replay a failure with: %s --case <its case seed>\n", argv[0]);
  return g_failures ? 1 : 0;
}
#endif
