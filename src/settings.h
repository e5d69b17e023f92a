// The environment variables the library reads on a call (benchmark and test settings that
// choose a kernel, a tile configuration or a launch geometry). Their values are checked
// here, at the C API entry points, against what each one accepts: a value the library
// does not know is refused with the variable named (NVFP4_ERROR_INVALID_ARGUMENT), never
// read as "unset". An empty value is the same as unset.
#pragma once

namespace nvfp4::detail {

// Whether any NVFP4_* variable is set: one pass over the environment, where the checks and
// the GEMM environment key would otherwise look each of their ~17 names up (a linear scan of
// the environment each) on every call. With none set, every variable is unset.
bool any_nvfp4_setting();

// The GEMM settings (NVFP4_SM90_*, NVFP4_CUDNN_EPILOGUE, NVFP4_CUDNN_AUTOTUNE; the removed
// NVFP4_SM90_STREAM_DEBUG is refused). Throws validate.h's Error on a bad value. Returns
// whether any NVFP4_* variable is set (for SettingsScope).
bool check_gemm_settings();

// The quantization settings (NVFP4_QUANT_GRID_CAP, NVFP4_QUANT_WORKSPACE; NVFP4_QUANT_LEGACY and
// NVFP4_QUANT_COOP, removed, are refused). Returns as check_gemm_settings.
bool check_quant_settings();

// One setting's value, as std::getenv(name) gives it, read where it is used. Inside an API
// call that has checked its settings (a SettingsScope open on this thread), a call answers
// nullptr without searching the environment when that check found no NVFP4_* variable: a
// GEMM reads ~10 settings and a quantization ~3 on the way to their launches, each a linear
// scan of the environment, and in a training run none is normally set.
const char* setting(const char* name);

// Opened by an API entry point with what its settings check returned, for the rest of the
// call (on this thread; nested scopes restore the outer one). Outside any scope setting() is
// std::getenv.
class SettingsScope {
 public:
  explicit SettingsScope(bool any_set);
  ~SettingsScope();
  SettingsScope(const SettingsScope&) = delete;
  SettingsScope& operator=(const SettingsScope&) = delete;

 private:
  int prev_;
};

}  // namespace nvfp4::detail
