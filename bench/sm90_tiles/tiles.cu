// One configuration of the library's CUTLASS sm90 GEMM template (src/gemm/sm90/
// sm90_cutlass_impl.cuh: BF16 operands, K-major, FP32 accumulation, alpha/bias/beta*C epilogue)
// per compilation, for sweep.py: D = alpha * A B^T in BF16, or FP32 with -DOUT_F32, alpha formed
// by the epilogue from two amax (S_dec(amax_a) * S_dec(amax_b)), as in the library. The tile
// (TM x TN x TK), cluster (CM x CN), schedule (-DPINGPONG=1: ping-pong, else cooperative) and
// scheduler (-DSTREAMK=1: stream-K) come from -D flags; the configuration is exported as
// <NAME>_ws / <NAME>_run (C symbols, for ctypes), launched exactly as the library launches its
// own configurations.
#include "gemm/sm90/sm90_cutlass_impl.cuh"

namespace sm90 = nvfp4::detail::sm90;

#ifndef OUT_F32
using ElementD = cutlass::bfloat16_t;
#else
using ElementD = float;
#endif
#if PINGPONG
using Schedule = sm90::Pingpong;
#else
using Schedule = sm90::Cooperative;
#endif
#if STREAMK
using Scheduler = cutlass::gemm::StreamKScheduler;
#else
using Scheduler = void;
#endif
using Cfg = sm90::Bf16Gemm<ElementD, TM, TN, TK, CM, CN, Schedule, Scheduler>;

static nvfp4::detail::Sm90CutlassArgs args_of(int m, int n, int k, const void* a, const void* b, void* d,
                                              const float* amax, int sms) {
  nvfp4::detail::Sm90CutlassArgs p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.a = a;
  p.b = b;
  p.d = d;
  p.amax_a = amax;  // amax [2]: A's, then B's
  p.amax_b = amax != nullptr ? amax + 1 : nullptr;
  p.sm_count = sms;
  return p;
}

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#define STR2(a) #a
#define STR(a) STR2(a)
extern "C" size_t CAT(NAME, _ws)(int m, int n, int k, int sms) {
  return Cfg::workspace_size(args_of(m, n, k, nullptr, nullptr, nullptr, nullptr, sms));
}
// 0 on success, else the library's status code (the message is in the harness's fail()).
extern "C" int CAT(NAME, _run)(int m, int n, int k, const void* a, const void* b, void* d, const float* amax,
                               void* ws, int sms, void* stream) {
  return static_cast<int>(
      Cfg::run(args_of(m, n, k, a, b, d, amax, sms), ws, static_cast<nvfp4_stream_t>(stream), STR(NAME)));
}
