// See settings.h. The kernels read these variables where they use them; this file only
// says which values exist, so that the readers can stay one line each.
#include "settings.h"

#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>

#if defined(_WIN32)
#include <stdlib.h>
#define NVFP4_ENVIRON _environ
#else
#include <unistd.h>
extern char** environ;
#define NVFP4_ENVIRON environ
#endif

#include "validate.h"

namespace nvfp4::detail {

bool any_nvfp4_setting() {
  char** env = NVFP4_ENVIRON;
  if (env == nullptr) return false;
  for (; *env != nullptr; ++env)
    if (std::strncmp(*env, "NVFP4_", 6) == 0) return true;
  return false;
}

namespace {

const char* value_of(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

void one_of(const char* name, std::initializer_list<const char*> allowed, const char* meaning) {
  const char* v = value_of(name);
  if (v == nullptr) return;
  std::string list;
  for (const char* a : allowed) {
    if (std::strcmp(v, a) == 0) return;
    list += list.empty() ? "" : ", ";
    list += a;
  }
  invalid(std::string(name) + ": expected one of " + list + " (" + meaning + "), got '" + v + "'");
}

void integer(const char* name, long lo, long hi, const char* meaning) {
  const char* v = value_of(name);
  if (v == nullptr) return;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (end == v || *end != '\0' || n < lo || n > hi)
    invalid(std::string(name) + ": expected an integer from " + std::to_string(lo) + " to " + std::to_string(hi) +
            " (" + meaning + "), got '" + v + "'");
}

// A variable of an earlier version whose code is gone: a value is refused rather than
// ignored, so that a run that asks for the old behaviour does not silently get the new one.
void removed(const char* name, const char* why) {
  const char* v = value_of(name);
  if (v == nullptr) return;
  invalid(std::string(name) + ": no longer read (" + why + "); unset it (got '" + v + "')");
}

}  // namespace

namespace {
// 0: no scope open (setting() is getenv); 1: the open scope's check found no NVFP4_*
// variable; 2: it found some.
thread_local int scope_state = 0;
}  // namespace

SettingsScope::SettingsScope(bool any_set) : prev_(scope_state) { scope_state = any_set ? 2 : 1; }
SettingsScope::~SettingsScope() { scope_state = prev_; }

const char* setting(const char* name) { return scope_state == 1 ? nullptr : std::getenv(name); }

bool check_gemm_settings() {
  if (!any_nvfp4_setting()) return false;  // nothing set: every variable below is unset
  one_of("NVFP4_SM90_DIRECT", {"0", "1"}, "1: the FP4-reading Hopper GEMM");
  one_of("NVFP4_SM90_RS", {"0", "1"},
         "the Hopper GEMM that decodes FP4 A in registers: 1 for every job it can run, 0 for none (unset: where it "
         "pays)");
  one_of("NVFP4_SM90_DECODED", {"0", "1"}, "0: the Hopper two-step GEMM declines decoded operands");
  one_of("NVFP4_SM90_SMALL_M", {"0", "1"}, "0: never the fused small-M Hopper kernel");
  one_of("NVFP4_SM90_SMALL_M_KERNEL", {"stream", "ring"}, "the small-M kernel's form");
  one_of("NVFP4_SM90_TILE", {"large", "medium", "medium2x1", "streamk"}, "the Hopper CUTLASS configuration");
  one_of("NVFP4_SM90_F32_LARGE", {"0", "1"},
         "0: FP32-output Hopper GEMMs keep 128x128 tiles where 128x256 ones fill the machine (before/after runs)");
  one_of("NVFP4_SM90_CUBLASLT", {"0", "1"},
         "the Hopper two-step GEMM's cuBLASLt engine: 1 for every job it can take, 0 for none (unset: where it "
         "pays)");
  one_of("NVFP4_SM90_PINGPONG", {"0", "1"},
         "0: BF16-output Hopper GEMMs over a short K keep 128x256 tiles (before/after runs)");
  one_of("NVFP4_SM90_SWIZZLE", {"1", "2", "4", "8"}, "the persistent scheduler's largest swizzle");
  one_of("NVFP4_SM90_RASTER", {"m", "n"}, "the persistent scheduler's tile order");
  integer("NVFP4_SM90_SPLITS", 1, 16, "split-K splits of the stream-K configurations");
  integer("NVFP4_SM90_STREAM_SPLIT", 1, 8, "splits of the small-M streaming kernel, at most its cluster size");
  one_of("NVFP4_SM90_STREAM_PREFETCH", {"0", "1"}, "the small-M streaming kernel's L2 prefetch");
  one_of("NVFP4_SM90_STREAM_AFIRST", {"0", "1"}, "the small-M streaming kernel's load order");
  one_of("NVFP4_SM90_TRACE", {"0", "1"}, "1: print each Hopper GEMM plan to stderr");
  one_of("NVFP4_SM90_STREAM_TRACE", {"0", "1"}, "1: print the small-M streaming kernel's phase timings");
  removed("NVFP4_SM90_STREAM_DEBUG", "NVFP4_SM90_TRACE=1 prints the small-M plan");
  one_of("NVFP4_CUDNN_EPILOGUE", {"separate"}, "the cuDNN runner's own epilogue kernel");
  integer("NVFP4_CUDNN_AUTOTUNE", 0, 64, "cuDNN plans timed on a graph's first call");
  return true;
}

bool check_quant_settings() {
  if (!any_nvfp4_setting()) return false;
  removed("NVFP4_QUANT_LEGACY",
          "the previous quantization kernels were deleted after 0.2; time them from a build of an earlier commit");
  integer("NVFP4_QUANT_GRID_CAP", 0, 1 << 20, "largest persistent grid of the quantization kernels, 0: none");
  removed("NVFP4_QUANT_COOP",
          "the amax outputs are no longer zeroed inside a cooperative amax kernel; a quantization given a workspace "
          "(nvfp4_quantize_ws) needs no zeroing");
  one_of("NVFP4_QUANT_WORKSPACE", {"0", "1"},
         "0: a quantization given a workspace zeroes its amax outputs by memsets instead (before/after measurements)");
  return true;
}

}  // namespace nvfp4::detail
