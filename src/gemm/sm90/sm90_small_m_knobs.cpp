// The environment knobs of the fused small-M kernels (benchmarks and debugging), read on
// each call: cheap next to a launch, and a changed value takes effect at once. Their
// values are checked at the C API entry points (settings.cpp); here an unset or empty
// variable means the default.
#include <cstdlib>
#include <cstring>

#include "gemm/sm90/sm90_small_m.h"
#include "settings.h"

namespace nvfp4::detail::small_m {
namespace {

int env_int(const char* name, int dflt) {
  const char* v = setting(name);
  return v != nullptr && v[0] != '\0' ? std::atoi(v) : dflt;
}

}  // namespace

Knobs read_knobs() {
  Knobs k;
  const char* off = setting("NVFP4_SM90_SMALL_M");
  k.enabled = off == nullptr || std::strcmp(off, "0") != 0;
  const char* kernel = setting("NVFP4_SM90_SMALL_M_KERNEL");
  k.stream = kernel == nullptr || std::strcmp(kernel, "ring") != 0;
  k.stream_split = env_int("NVFP4_SM90_STREAM_SPLIT", 0);
  // Off unless asked: on the H200 it gained nothing at 16x4096x4096 and cost 17% at
  // 16x14336x4096 (the loads it races against are already all in flight).
  k.prefetch = env_int("NVFP4_SM90_STREAM_PREFETCH", 0) != 0;
  // A first, then B: on the H200 16x4096x4096 went from 11.0 to 10.0 us (A decoded at 1.8
  // instead of 2.1-3.2 us after entry), 32x4096x4096 from 14.5 to 13.6, the N or K = 14336
  // shapes by 2-4%; only the many-wave vocabulary shape lost 1%.
  k.a_first = env_int("NVFP4_SM90_STREAM_AFIRST", 1) != 0;
  k.trace = env_int("NVFP4_SM90_TRACE", 0) != 0;
  k.phase_trace = env_int("NVFP4_SM90_STREAM_TRACE", 0) != 0;
  return k;
}

}  // namespace nvfp4::detail::small_m
