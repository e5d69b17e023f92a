// The Hopper (sm_90a) two-step runner of the CUTLASS backend: an exact emulation of the
// NVFP4 GEMM on BF16 tensor cores, for every shape the fused small-M kernels
// (sm90_small_m*, rows before this one in the runner table) do not take, and of
// the MXFP4 GEMM (E8M0 scales over 32 values decoded the same way, alpha = 1):
//
//   one launch decodes A and B to BF16 in the workspace (and forms an fp32 bias), then a
//   CUTLASS TMA + wgmma GEMM computes D = beta*C + (alpha*acc + bias) in its epilogue
//   (sm90_cutlass_*.cu), alpha formed there from the two amax. Operands the caller gives
//   decoded (nvfp4_gemm_decoded) are not decoded again; with both given and no bias the
//   first launch does not run at all. Jobs with no bias and no C at the shapes where NVIDIA's
//   kernels are measured faster have their decoded operands multiplied by cuBLASLt instead
//   (sm90_cublaslt.cu: alpha formed by a one-thread kernel, then cublasLtMatmul), whether
//   they came as codes or as values: both roads still meet the same engine. When D or C
//   cannot be addressed by TMA (a row of D not a multiple of 16 bytes, an unaligned pointer)
//   or C has another dtype than D, CUTLASS writes alpha*acc + bias in fp32 to the workspace
//   and a small kernel applies beta*C and the output rounding (the same operations in the
//   same order).
//
// Workspace, each part 256-byte aligned:
//   bias fp32[n_pad] | A bf16[M, K] | B bf16[n_b, K] | T fp32[M, n_pad] | CUTLASS's
// with n_pad = N rounded up to 8 and n_b = n_pad on the fallback path (so that CUTLASS can
// run on the padded width; the extra rows of B are never initialized and only reach the
// discarded columns of T), N otherwise.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "gemm/backends.h"
#include "gemm/common/decode.h"
#include "cuda/device.h"
#include "gemm/sm90/sm90_cublaslt.h"
#include "gemm/sm90/sm90_cutlass.h"
#include "settings.h"

namespace nvfp4::detail {
namespace {

using gpu::aligned16;
using gpu::kWorkspaceAlign;
size_t align_up(size_t v) { return gpu::align_up(v); }
size_t dtype_size(nvfp4_dtype_t dt) { return gpu::dtype_bytes(dt); }

// Tuning knobs for benchmarks, read on each call (cheap next to a GEMM):
//   NVFP4_SM90_TILE=large|medium|medium2x1|streamk  force the CUTLASS configuration: for BF16
//     and FP32 output large, medium or streamk (FP32's medium is its 128x128 data-parallel
//     kernel), medium2x1 (the 128x128 ping-pong kernel on a 2x1 cluster) for BF16 output
//     only; FP16 output has one configuration. Any other value is refused by name.
//   NVFP4_SM90_SWIZZLE=1|2|4|8, NVFP4_SM90_RASTER=m|n  the persistent scheduler's tile order
//   NVFP4_SM90_SPLITS=n  the stream-K configurations run split-K with n splits
//   NVFP4_SM90_F32_LARGE=0  FP32 output keeps the 128x128 data-parallel kernel where the
//     128x256 one would be chosen (the choice before that kernel existed: before/after runs)
//   NVFP4_SM90_PINGPONG=0  BF16 output over a short K keeps the 128x256 cooperative kernel
//     where the 128x128 ping-pong ones would be chosen (the choice before: before/after runs)
// (NVFP4_SM90_SMALL_M=0, which skips the fused small-M kernel, is read by dispatch.cpp.)
// (On the H200 at M=2048, N=4096/14336, K=4096, 128x256 with a 1x2 cluster, 256x128 with
// 2x1, swizzles 2/4/8 and either raster order all timed within 3% of the default.)
void scheduler_knobs(Sm90CutlassArgs& a) {
  if (const char* v = setting("NVFP4_SM90_SWIZZLE")) a.swizzle = std::atoi(v);
  if (const char* v = setting("NVFP4_SM90_RASTER")) a.raster = v[0] == 'm' ? 1 : v[0] == 'n' ? 2 : 0;
  if (const char* v = setting("NVFP4_SM90_SPLITS")) a.splits = std::atoi(v);
}

// Stream-K pays where data-parallel 128x128 tiles leave much of the machine idle in their
// last wave (fewer than 80% of the SM slots of the waves busy: 36 tiles on 132 SMs, or
// 144) and K is long enough to split (>= 2048). Elsewhere the data-parallel kernels are
// as fast or faster (bench/bench_gemm.py, H200, 2026-11-26).
bool wants_stream_k(const GemmJob& job, int sm_count) {
  const int64_t tiles = ((job.m + 127) / 128) * ((job.n + 127) / 128);
  const int64_t slots = (tiles + sm_count - 1) / sm_count * sm_count;
  return job.k >= 2048 && tiles * 5 < slots * 4;
}

// A before/after knob set to "0" (NVFP4_SM90_F32_LARGE, NVFP4_SM90_PINGPONG: its value was
// checked by settings.cpp).
bool knob_off(const char* name) {
  const char* v = setting(name);
  return v != nullptr && std::strcmp(v, "0") == 0;
}

nvfp4_status_t pick_kernel(const GemmJob& job, nvfp4_dtype_t out, int sm_count, const Sm90CutlassKernel*& kernel,
                           const char*& why) {
  const char* force = setting("NVFP4_SM90_TILE");
  if (force != nullptr && *force != '\0' && std::strcmp(force, "large") != 0 && std::strcmp(force, "medium") != 0 &&
      std::strcmp(force, "medium2x1") != 0 && std::strcmp(force, "streamk") != 0)
    return fail(NVFP4_ERROR_INVALID_ARGUMENT,
                std::string("NVFP4_SM90_TILE: expected large, medium, medium2x1 or streamk, got '") + force + "'");
  if (force != nullptr && std::strcmp(force, "medium2x1") == 0 && out != NVFP4_DTYPE_BFLOAT16)
    return fail(NVFP4_ERROR_INVALID_ARGUMENT,
                std::string("NVFP4_SM90_TILE=medium2x1: a BF16-output configuration, and this GEMM writes ") +
                    (out == NVFP4_DTYPE_FLOAT32 ? "float32" : "float16") + " (its CUTLASS output)");
  const bool force_sk = force != nullptr && std::strcmp(force, "streamk") == 0;
  const bool forced = force != nullptr && *force != '\0';
  // 128x256 tiles as long as they fill the machine; smaller tiles spread fewer rows wider,
  // and stream-K splits K where even those leave SMs idle.
  const int64_t large_tiles = ((job.m + 127) / 128) * ((job.n + 255) / 256);
  if (out == NVFP4_DTYPE_FLOAT32) {
    // (An empty NVFP4_SM90_TILE is unset, as everywhere: the heuristic decides.)
    if (forced) {
      kernel = force_sk ? &kSm90F32StreamK : std::strcmp(force, "large") == 0 ? &kSm90F32Large : &kSm90F32;
      why = "forced by NVFP4_SM90_TILE";
      return NVFP4_SUCCESS;
    }
    // NVFP4_SM90_F32_LARGE=0: the rule before the 128x256 kernel (stream-K or 128x128).
    // (128x256 tiles filling 90% of one wave leave the SMs as busy as 128x128 ones in two
    // waves, and run faster: 2048x2048x16384, 128 tiles on 132 SMs, 0.89x the 128x128 kernel.)
    const bool large = large_tiles * 10 >= sm_count * 9 && !knob_off("NVFP4_SM90_F32_LARGE");
    const bool sk = !large && wants_stream_k(job, sm_count);
    kernel = large ? &kSm90F32Large : sk ? &kSm90F32StreamK : &kSm90F32;
    why = large ? "fp32 output, 128x256 tiles fill 90% of the machine"
          : sk  ? "few tiles over a long K: stream-K"
                : "fp32 output, 128x128 tiles";
    return NVFP4_SUCCESS;
  }
  if (out == NVFP4_DTYPE_FLOAT16) {
    kernel = &kSm90F16;
    why = "fp16 output: one configuration";
    return NVFP4_SUCCESS;
  }
  if (forced) {
    kernel = force_sk                               ? &kSm90Bf16StreamK
             : std::strcmp(force, "large") == 0     ? &kSm90Bf16Large
             : std::strcmp(force, "medium2x1") == 0 ? &kSm90Bf16Medium2x1
                                                    : &kSm90Bf16Medium;
    why = "forced by NVFP4_SM90_TILE";
    return NVFP4_SUCCESS;
  }
  if (large_tiles >= sm_count) {
    // Over a short K a tile's epilogue is a large part of its time: the ping-pong kernels
    // overlap it with the other warpgroup's mainloop (H200, M = 16384, K = 768: 0.90-0.91x the
    // 128x256 kernel's time). At K = 2048 they gained 3% of kernel time on the H200 and
    // nothing in the 400M step, where an H100 step lost 1.5%; at K >= 3072 the 128x256 kernel
    // is ahead. The 2x1 cluster (B multicast) pays from N >= 2048; below it the 1x1 kernel
    // is faster.
    if (job.k <= 1024 && !knob_off("NVFP4_SM90_PINGPONG")) {
      kernel = job.n >= 2048 ? &kSm90Bf16Medium2x1 : &kSm90Bf16Medium;
      why = "128x256 tiles fill the machine, short K: 128x128 ping-pong";
      return NVFP4_SUCCESS;
    }
    kernel = &kSm90Bf16Large;
    why = "128x256 tiles fill the machine";
    return NVFP4_SUCCESS;
  }
  const bool sk = wants_stream_k(job, sm_count);
  kernel = sk ? &kSm90Bf16StreamK : &kSm90Bf16Medium;
  why = sk ? "few tiles over a long K: stream-K" : "128x256 tiles would leave SMs idle";
  return NVFP4_SUCCESS;
}

struct Plan {
  bool lt = false;        // cuBLASLt multiplies the decoded operands (sm90_cublaslt.cu)
  bool fallback = false;  // CUTLASS -> fp32 T, then gemm_finalize
  bool b_copy = false;    // the caller's decoded B copied into the workspace (fallback, N % 8 != 0)
  const Sm90CutlassKernel* kernel = nullptr;
  const char* why = "";   // the rule that chose the kernel, for NVFP4_SM90_TRACE
  int64_t n_pad = 0, n_b = 0, n_gemm = 0;
  size_t off_bias = 0, off_a = 0, off_b = 0, off_t = 0, off_cutlass = 0, total = 0;  // off_cutlass: or cuBLASLt's
  Sm90CutlassArgs args;  // pointers filled in at run time
};

nvfp4_status_t make_plan(const GemmJob& job, Plan& pl) {
  pl = Plan{};
  if (job.m == 0 || job.n == 0) return NVFP4_SUCCESS;
  if (job.m > INT32_MAX || job.n > INT32_MAX - 8 || job.k > INT32_MAX)
    return fail(NVFP4_ERROR_NOT_SUPPORTED, "gemm (cutlass sm90): M, N and K must each be below 2^31");
  if (job.k % 16 != 0) return fail(NVFP4_ERROR_INVALID_ARGUMENT, "gemm: K must be a multiple of 16");
  if (job.format == Format::kMxfp4 && job.k % 32 != 0)
    return fail(NVFP4_ERROR_INVALID_ARGUMENT, "gemm: MXFP4 operands need K % 32 == 0");

  const size_t out_bytes = dtype_size(job.d_dtype);
  const bool d_ok = (job.n * static_cast<int64_t>(out_bytes)) % 16 == 0 && aligned16(job.d);
  const bool c_ok = job.c == nullptr || job.beta == 0.0f || (job.c_dtype == job.d_dtype && aligned16(job.c));
  pl.fallback = !(d_ok && c_ok);
  pl.n_pad = (job.n + 7) / 8 * 8;
  pl.n_b = pl.fallback ? pl.n_pad : job.n;
  pl.n_gemm = pl.n_b;

  const int dev = gpu::current_device();
  const int sms = gpu::sm_count(dev);
  if (nvfp4_status_t s = sm90_cublaslt_choose(job, sms, &pl.lt, &pl.why); s != NVFP4_SUCCESS) return s;
  if (!pl.lt) {
    if (nvfp4_status_t s = pick_kernel(job, pl.fallback ? NVFP4_DTYPE_FLOAT32 : job.d_dtype, sms, pl.kernel, pl.why);
        s != NVFP4_SUCCESS)
      return s;
  }

  size_t off = 0;
  pl.off_bias = off;
  if (job.bias != nullptr) off += align_up(static_cast<size_t>(pl.n_pad) * sizeof(float));
  // A decoded operand given by the caller (nvfp4_gemm_decoded) is read where it is, except
  // B on the fallback path when CUTLASS runs on the padded width: it is copied into the
  // workspace's n_pad rows then.
  pl.b_copy = job.b_dec != nullptr && pl.n_b != job.n;
  pl.off_a = off;
  if (job.a_dec == nullptr) off += align_up(static_cast<size_t>(job.m) * job.k * 2);
  pl.off_b = off;
  if (job.b_dec == nullptr || pl.b_copy) off += align_up(static_cast<size_t>(pl.n_b) * job.k * 2);
  pl.off_t = off;
  if (pl.fallback) off += align_up(static_cast<size_t>(job.m) * pl.n_pad * sizeof(float));
  pl.off_cutlass = off;

  if (pl.lt) {  // cuBLASLt on the decoded operands (no bias, no C: sm90_cublaslt_choose)
    pl.total = off + sm90_cublaslt_workspace_size();
    return NVFP4_SUCCESS;
  }
  Sm90CutlassArgs& a = pl.args;
  a.m = static_cast<int>(job.m);
  a.n = static_cast<int>(pl.n_gemm);
  a.k = static_cast<int>(job.k);
  a.beta = job.beta;
  a.device = dev;
  a.sm_count = sms;
  scheduler_knobs(a);
  off += align_up(pl.kernel->workspace_size(a));
  pl.total = off;
  return NVFP4_SUCCESS;
}

// NVFP4_SM90_TRACE=1: each plan that runs, to stderr (as the small-M path prints its own).
bool trace_enabled() {
  const char* v = setting("NVFP4_SM90_TRACE");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

void print_plan(const GemmJob& job, const Plan& pl) {
  if (pl.lt) {
    std::fprintf(stderr, "nvfp4 sm90 two-step: M=%lld N=%lld K=%lld -> %scuBLASLt (%s), workspace %zu\n",
                 static_cast<long long>(job.m), static_cast<long long>(job.n), static_cast<long long>(job.k),
                 job.a_dec != nullptr && job.b_dec != nullptr ? "" : "decode + ", pl.why, pl.total);
    return;
  }
  std::fprintf(stderr,
               "nvfp4 sm90 two-step: M=%lld N=%lld K=%lld -> decode + CUTLASS %s (%s)%s, swizzle %d, raster %d, "
               "splits %d, workspace %zu\n",
               static_cast<long long>(job.m), static_cast<long long>(job.n), static_cast<long long>(job.k),
               pl.kernel->name, pl.why, pl.fallback ? ", fp32 staging + finalize kernel" : "", pl.args.swizzle,
               pl.args.raster, pl.args.splits, pl.total);
}

}  // namespace

size_t sm90_gemm_workspace_size(const GemmJob& job) {
  Plan pl;
  if (make_plan(job, pl) != NVFP4_SUCCESS) {
    clear_error();  // the run reports it
    return 0;
  }
  return pl.total;
}

nvfp4_status_t sm90_gemm(const GemmJob& job, void* workspace, size_t workspace_bytes, nvfp4_stream_t stream) {
  Plan pl;
  if (nvfp4_status_t s = make_plan(job, pl); s != NVFP4_SUCCESS) return s;
  if (job.m == 0 || job.n == 0) return NVFP4_SUCCESS;

  if (workspace_bytes < pl.total || (pl.total > 0 && workspace == nullptr))
    return fail(NVFP4_ERROR_WORKSPACE, "gemm (cutlass sm90): workspace of " + std::to_string(workspace_bytes) +
                                           " bytes, this problem needs " + std::to_string(pl.total) +
                                           " (query nvfp4_gemm_workspace_size with the same arguments)");
  if (reinterpret_cast<uintptr_t>(workspace) % kWorkspaceAlign != 0)
    return fail(NVFP4_ERROR_INVALID_ARGUMENT, "workspace: must be 256-byte aligned");

  if (trace_enabled()) print_plan(job, pl);

  uint8_t* ws = static_cast<uint8_t*>(workspace);
  float* bias = job.bias != nullptr ? reinterpret_cast<float*>(ws + pl.off_bias) : nullptr;
  const void* a_bf16 = job.a_dec != nullptr ? job.a_dec : ws + pl.off_a;
  const void* b_bf16 = job.b_dec != nullptr && !pl.b_copy ? job.b_dec : ws + pl.off_b;
  if (pl.b_copy) {
    const cudaError_t e = cudaMemcpyAsync(ws + pl.off_b, job.b_dec, static_cast<size_t>(job.n) * job.k * 2,
                                          cudaMemcpyDeviceToDevice, reinterpret_cast<cudaStream_t>(stream));
    if (e != cudaSuccess) return fail(NVFP4_ERROR_CUDA, std::string("gemm: copy of decoded B: ") + cudaGetErrorString(e));
  }
  float* t = pl.fallback ? reinterpret_cast<float*>(ws + pl.off_t) : nullptr;

  const bool mx = job.format == Format::kMxfp4;  // E8M0 scales over 32 values, alpha = 1
  // An operand already decoded is not decoded again (rows 0: skipped by the decode kernel);
  // with nothing to decode and no bias to convert, the prep launch is left out.
  if (job.a_dec == nullptr || job.b_dec == nullptr || bias != nullptr) {
    GemmPrep prep;
    prep.a = {job.a, job.sfa, mx, job.a_dec != nullptr ? 0 : job.m, job.k, job.layout, ws + pl.off_a, job.k};
    prep.b = {job.b, job.sfb, mx, job.b_dec != nullptr ? 0 : job.n, job.k, job.layout, ws + pl.off_b, job.k};
    prep.bias = job.bias;
    prep.bias_dtype = job.bias_dtype;
    prep.bias_f32 = bias;
    prep.n = job.n;
    prep.n_pad = pl.n_pad;
    if (nvfp4_status_t s = gemm_prep(prep, stream); s != NVFP4_SUCCESS) return s;
  }

  if (pl.lt)
    return sm90_cublaslt_gemm(job, a_bf16, b_bf16, ws + pl.off_cutlass, workspace_bytes - pl.off_cutlass, stream);

  Sm90CutlassArgs a = pl.args;
  a.a = a_bf16;
  a.b = b_bf16;
  // alpha is formed in the epilogue from the two amax (null for MXFP4: alpha = 1)
  a.amax_a = mx ? nullptr : job.amax_a;
  a.amax_b = mx ? nullptr : job.amax_b;
  a.bias = bias;
  if (pl.fallback) {
    a.c = nullptr;
    a.beta = 0.0f;
    a.d = t;
  } else {
    a.c = job.beta != 0.0f ? job.c : nullptr;
    a.d = job.d;
  }
  if (nvfp4_status_t s = pl.kernel->run(a, ws + pl.off_cutlass, stream); s != NVFP4_SUCCESS) return s;

  if (pl.fallback) {
    GemmFinalize f;
    f.t = t;
    f.t_ld = pl.n_pad;
    f.c = job.beta != 0.0f ? job.c : nullptr;  // beta == 0: C is not read
    f.c_dtype = job.c_dtype;
    f.beta = job.beta;
    f.d = job.d;
    f.d_dtype = job.d_dtype;
    f.rows = job.m;
    f.cols = job.n;
    if (nvfp4_status_t s = gemm_finalize(f, stream); s != NVFP4_SUCCESS) return s;
  }
  return NVFP4_SUCCESS;
}

}  // namespace nvfp4::detail
