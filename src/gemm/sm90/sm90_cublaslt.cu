// The Hopper two-step runner's second BF16 engine: cuBLASLt.
//
// Why: on the same decoded operands (bench_gemm.py's dec-AB and bf16-dec rows, H200,
// 2026-11-29) NVIDIA's kernels beat the CUTLASS configurations this library instantiates
// where K is 2048 and N is 2048 or more: 16384 x 6144 x 2048 and 16384 x 8192 x 2048 run
// 7% faster (cuBLAS's 192 x 192 tiles on a 2 x 1 cluster, which CUTLASS's cooperative
// schedule cannot form: it splits the tile's rows between its two consumer warpgroups),
// 16384 x 2048 x 2048 3%; at K = 6144 and 8192 the two are within 1.3% either way and on the
// FP32-output weight gradients (K = 16384) CUTLASS is level or ahead (K = 768, the ping-pong
// kernels' range, was not compared). So the runner hands those jobs to cuBLASLt
// (sm90_cublaslt_choose).
//
// The arithmetic is the emulation's: the decoded operands are exact BF16 values, the product
// accumulates in FP32 (CUBLAS_COMPUTE_32F, no reduced-precision mode), alpha multiplies the
// FP32 sum and D takes one rounding — the operations of the CUTLASS epilogue; only the order
// of the FP32 additions differs, which the GEMM's error bound (docs/design.md §4) allows. The
// algorithm is the heuristic's first answer with no split-K reduction, chosen once per shape
// and kept, so a process computes the same bits on every call, and so does every process
// with the same GPU and cuBLASLt. alpha = core::gemm_alpha_of(amax_a, amax_b), the function
// of every runner, is formed on the device by a one-thread kernel into the workspace
// (cuBLASLt's alpha and beta are then device pointers: no host synchronization, CUDA-graph
// capturable).
//
// The library is loaded at run time (libcublasLt.so.13: the CUDA 13 toolkit's and the one in
// torch's CUDA 13 wheels, usually already in the process) and its entry points looked up by
// name; the declarations below are the few types, values and signatures this file uses, as
// the cuBLASLt API documents them (the build needs no cuBLAS headers). Where it does not
// load, the runner keeps CUTLASS, and NVFP4_SM90_CUBLASLT=1 fails naming the library.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <library_types.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "core/scale.h"
#include "cuda/device.h"
#include "gemm/sm90/sm90_cublaslt.h"
#include "settings.h"

namespace nvfp4::detail {
namespace {

// ---- the cuBLASLt API, as far as used ---------------------------------------------------
namespace lt {
using Status = int;  // cublasStatus_t; 0 = CUBLAS_STATUS_SUCCESS
using Handle = void*;
using Desc = void*;
using Layout = void*;
using Pref = void*;
struct Algo {
  uint64_t data[8];
};
struct Heuristic {
  Algo algo;
  size_t workspace_size;
  Status state;
  float waves;
  int reserved[4];
};
constexpr int kComputeF32 = 68;          // CUBLAS_COMPUTE_32F
constexpr int kOpN = 0, kOpT = 1;         // CUBLAS_OP_N, CUBLAS_OP_T
constexpr int kDescPointerMode = 2;       // CUBLASLT_MATMUL_DESC_POINTER_MODE
constexpr int kDescTransA = 3;            // CUBLASLT_MATMUL_DESC_TRANSA
constexpr int kDescTransB = 4;            // CUBLASLT_MATMUL_DESC_TRANSB
constexpr int kPointerDevice = 1;         // CUBLASLT_POINTER_MODE_DEVICE
constexpr int kPrefMaxWorkspace = 1;      // CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES (uint64)
constexpr int kPrefReductionMask = 3;     // CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK (uint32)
constexpr uint32_t kReductionNone = 0;    // CUBLASLT_REDUCTION_SCHEME_NONE: no split-K

struct Api {
  void* handle = nullptr;
  std::string error;
  Status (*create)(Handle*) = nullptr;
  Status (*desc_create)(Desc*, int, cudaDataType_t) = nullptr;
  Status (*desc_set)(Desc, int, const void*, size_t) = nullptr;
  Status (*layout_create)(Layout*, cudaDataType_t, uint64_t, uint64_t, int64_t) = nullptr;
  Status (*pref_create)(Pref*) = nullptr;
  Status (*pref_set)(Pref, int, const void*, size_t) = nullptr;
  Status (*pref_destroy)(Pref) = nullptr;
  Status (*heuristic)(Handle, Desc, Layout, Layout, Layout, Layout, Pref, int, Heuristic*, int*) = nullptr;
  Status (*matmul)(Handle, Desc, const void*, const void*, Layout, const void*, Layout, const void*, const void*,
                   Layout, void*, Layout, const Algo*, void*, size_t, cudaStream_t) = nullptr;
};

template <class F>
bool sym(void* h, const char* name, F& f, std::string& missing) {
  f = reinterpret_cast<F>(dlsym(h, name));
  if (f == nullptr) missing += std::string(missing.empty() ? "" : ", ") + name;
  return f != nullptr;
}

Api load() {
  Api a;
  const char* names[] = {"libcublasLt.so.13"};
  std::string tried;
  for (const char* n : names) {
    a.handle = dlopen(n, RTLD_NOW | RTLD_NOLOAD);
    if (a.handle == nullptr) a.handle = dlopen(n, RTLD_NOW | RTLD_LOCAL);
    if (a.handle != nullptr) break;
    const char* e = dlerror();
    tried += std::string("\n  ") + (e ? e : n);
  }
  if (a.handle == nullptr) {
    a.error = "cuBLASLt: libcublasLt.so.13 could not be loaded; tried:" + tried;
    return a;
  }
  std::string missing;
  bool ok = sym(a.handle, "cublasLtCreate", a.create, missing);
  ok &= sym(a.handle, "cublasLtMatmulDescCreate", a.desc_create, missing);
  ok &= sym(a.handle, "cublasLtMatmulDescSetAttribute", a.desc_set, missing);
  ok &= sym(a.handle, "cublasLtMatrixLayoutCreate", a.layout_create, missing);
  ok &= sym(a.handle, "cublasLtMatmulPreferenceCreate", a.pref_create, missing);
  ok &= sym(a.handle, "cublasLtMatmulPreferenceSetAttribute", a.pref_set, missing);
  ok &= sym(a.handle, "cublasLtMatmulPreferenceDestroy", a.pref_destroy, missing);
  ok &= sym(a.handle, "cublasLtMatmulAlgoGetHeuristic", a.heuristic, missing);
  ok &= sym(a.handle, "cublasLtMatmul", a.matmul, missing);
  if (!ok) {
    a.error = "cuBLASLt: libcublasLt.so.13 lacks " + missing;
    a.handle = nullptr;
  }
  return a;
}

const Api& api() {
  static const Api a = load();
  return a;
}
}  // namespace lt

// cuBLASLt's own workspace: what its heuristic may plan for (NVIDIA's large-tile kernels
// need none at these shapes).
constexpr size_t kLtWorkspace = size_t{4} << 20;
constexpr size_t kScalars = gpu::kWorkspaceAlign;  // alpha, beta (floats), aligned

// One shape's descriptors and algorithm, made once per (device, M, N, K, D dtype) and kept
// for the process (the descriptors hold no pointers: nothing in them can go stale).
struct LtPlan {
  lt::Desc desc = nullptr;
  lt::Layout a = nullptr, b = nullptr, d = nullptr;
  lt::Algo algo{};
  bool ok = false;
  std::string error;
};

cudaDataType_t lt_type(nvfp4_dtype_t dt) { return dt == NVFP4_DTYPE_BFLOAT16 ? CUDA_R_16BF : CUDA_R_32F; }

lt::Handle handle_of(int dev, std::string& error) {
  static std::mutex mu;
  static std::map<int, lt::Handle> handles;
  std::lock_guard<std::mutex> lock(mu);
  auto it = handles.find(dev);
  if (it != handles.end()) return it->second;
  lt::Handle h = nullptr;
  if (const lt::Status s = lt::api().create(&h); s != 0) {
    error = "cuBLASLt: cublasLtCreate failed (status " + std::to_string(s) + ")";
    return nullptr;
  }
  handles[dev] = h;
  return h;
}

// The plan of a job the caller has checked (sm90_cublaslt_choose). In cuBLASLt's column-major
// terms D[M,N] row-major is D^T [N,M] = B [N,K] (a [K,N] column-major matrix, transposed)
// times A^T (A [M,K] row-major is a [K,M] column-major matrix).
const LtPlan& plan_of(const GemmJob& job, int dev) {
  static std::mutex mu;
  static std::map<std::tuple<int, int64_t, int64_t, int64_t, int>, LtPlan> plans;
  std::lock_guard<std::mutex> lock(mu);
  auto key = std::make_tuple(dev, job.m, job.n, job.k, static_cast<int>(job.d_dtype));
  auto it = plans.find(key);
  if (it != plans.end()) return it->second;
  LtPlan& p = plans[key];
  const lt::Api& L = lt::api();
  lt::Handle h = handle_of(dev, p.error);
  if (h == nullptr) return p;
  auto bad = [&](const char* what, lt::Status s) {
    p.error = std::string("cuBLASLt: ") + what + " failed (status " + std::to_string(s) + ")";
    return false;
  };
  const int op_t = lt::kOpT, op_n = lt::kOpN, ptr_dev = lt::kPointerDevice;
  const uint64_t ws = kLtWorkspace;
  const uint32_t red = lt::kReductionNone;
  lt::Pref pref = nullptr;
  lt::Heuristic r{};
  int found = 0;
  [&] {
    if (lt::Status s = L.desc_create(&p.desc, lt::kComputeF32, CUDA_R_32F); s != 0) return bad("matmul desc", s);
    if (lt::Status s = L.desc_set(p.desc, lt::kDescTransA, &op_t, sizeof(op_t)); s != 0) return bad("transa", s);
    if (lt::Status s = L.desc_set(p.desc, lt::kDescTransB, &op_n, sizeof(op_n)); s != 0) return bad("transb", s);
    if (lt::Status s = L.desc_set(p.desc, lt::kDescPointerMode, &ptr_dev, sizeof(ptr_dev)); s != 0)
      return bad("pointer mode", s);
    if (lt::Status s = L.layout_create(&p.a, CUDA_R_16BF, job.k, job.n, job.k); s != 0) return bad("layout B", s);
    if (lt::Status s = L.layout_create(&p.b, CUDA_R_16BF, job.k, job.m, job.k); s != 0) return bad("layout A", s);
    if (lt::Status s = L.layout_create(&p.d, lt_type(job.d_dtype), job.n, job.m, job.n); s != 0)
      return bad("layout D", s);
    if (lt::Status s = L.pref_create(&pref); s != 0) return bad("preference", s);
    if (lt::Status s = L.pref_set(pref, lt::kPrefMaxWorkspace, &ws, sizeof(ws)); s != 0) return bad("workspace", s);
    if (lt::Status s = L.pref_set(pref, lt::kPrefReductionMask, &red, sizeof(red)); s != 0)
      return bad("reduction scheme", s);
    if (lt::Status s = L.heuristic(h, p.desc, p.a, p.b, p.d, p.d, pref, 1, &r, &found); s != 0 || found < 1 ||
                                   r.state != 0)
      return bad("heuristic (no algorithm)", s != 0 ? s : r.state);
    p.algo = r.algo;
    p.ok = true;
    return true;
  }();
  if (pref != nullptr) L.pref_destroy(pref);
  return p;
}

__global__ void lt_scalars_kernel(const float* amax_a, const float* amax_b, float* out) {
  out[0] = core::gemm_alpha_of(*amax_a, *amax_b);
  out[1] = 0.0f;
}

// NVFP4_SM90_CUBLASLT: "1" every job it can take, "0" none, unset the measured shapes.
int setting_value() {
  const char* v = setting("NVFP4_SM90_CUBLASLT");
  if (v == nullptr || *v == '\0') return -1;
  return std::strcmp(v, "1") == 0 ? 1 : 0;
}

}  // namespace

nvfp4_status_t sm90_cublaslt_choose(const GemmJob& job, int sm_count, bool* use, const char** why) {
  *use = false;
  const int forced = setting_value();
  if (forced == 0) return NVFP4_SUCCESS;
  const size_t out_bytes = gpu::dtype_bytes(job.d_dtype);
  // Operands given as codes are decoded into the runner's workspace first (256-byte aligned),
  // so that both roads of a job (codes, or values from nvfp4_gemm_decoded) meet the same engine
  // and give the same bits. cuBLASLt's heuristic assumes 256-byte aligned matrices unless told
  // otherwise, and a smaller promise can change its algorithm: the engine takes 256-byte
  // aligned operands and D only (torch's allocations and the library's workspaces are), so
  // that one shape has one algorithm; others stay on CUTLASS.
  const auto aligned256 = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 255u) == 0; };
  const bool can = job.format == Format::kNvfp4 && job.amax_a != nullptr && job.amax_b != nullptr &&
                   (job.a_dec == nullptr || aligned256(job.a_dec)) &&
                   (job.b_dec == nullptr || aligned256(job.b_dec)) && job.bias == nullptr &&
                   (job.c == nullptr || job.beta == 0.0f) && job.m > 0 && job.n > 0 &&
                   // BF16 x BF16 -> FP16 is not a cuBLASLt combination (its heuristic answers
                   // NOT_SUPPORTED): BF16 and FP32 outputs only
                   (job.d_dtype == NVFP4_DTYPE_BFLOAT16 || job.d_dtype == NVFP4_DTYPE_FLOAT32) &&
                   (job.n * static_cast<int64_t>(out_bytes)) % 16 == 0 && aligned256(job.d) && job.k % 8 == 0;
  // A setting that steers CUTLASS (a forced configuration, the persistent scheduler's tile
  // order, split-K splits) keeps every job on CUTLASS, so that it is never silently without
  // effect; with NVFP4_SM90_CUBLASLT=1 as well the call is refused, naming both.
  for (const char* name : {"NVFP4_SM90_TILE", "NVFP4_SM90_SWIZZLE", "NVFP4_SM90_RASTER", "NVFP4_SM90_SPLITS"}) {
    const char* v = setting(name);
    if (v == nullptr || *v == '\0') continue;
    if (forced == 1)
      return fail(NVFP4_ERROR_INVALID_ARGUMENT, std::string("NVFP4_SM90_CUBLASLT=1 and ") + name + "=" + v +
                                                    " steer two engines of the Hopper GEMM; unset one of them");
    return NVFP4_SUCCESS;
  }
  if (forced == 1) {
    if (!can) return NVFP4_SUCCESS;  // every job it can take (as NVFP4_SM90_RS=1): this one stays on CUTLASS
    if (!lt::api().error.empty())
      return fail(NVFP4_ERROR_NOT_SUPPORTED, "NVFP4_SM90_CUBLASLT=1: " + lt::api().error);
    if (const LtPlan& p = plan_of(job, gpu::current_device()); !p.ok)
      return fail(NVFP4_ERROR_NOT_SUPPORTED, "NVFP4_SM90_CUBLASLT=1: " + p.error);
    *use = true;
    *why = "forced by NVFP4_SM90_CUBLASLT";
    return NVFP4_SUCCESS;
  }
  // The measured shapes (the top of this file): BF16 output, K in (1024, 2048], N >= 2048,
  // with 128 x 256 tiles filling the machine (the sizes of those measurements).
  const int64_t large_tiles = ((job.m + 127) / 128) * ((job.n + 255) / 256);
  if (!can || job.d_dtype != NVFP4_DTYPE_BFLOAT16 || job.k <= 1024 || job.k > 2048 || job.n < 2048 ||
      large_tiles < sm_count)
    return NVFP4_SUCCESS;
  // not loadable, or no algorithm for the shape: CUTLASS, as before
  if (!lt::api().error.empty() || !plan_of(job, gpu::current_device()).ok) return NVFP4_SUCCESS;
  *use = true;
  *why = "K 2048, N >= 2048: NVIDIA's 192x192 / 256x128 kernels (cuBLASLt)";
  return NVFP4_SUCCESS;
}

size_t sm90_cublaslt_workspace_size() { return kScalars + kLtWorkspace; }

nvfp4_status_t sm90_cublaslt_gemm(const GemmJob& job, const void* a_bf16, const void* b_bf16, void* workspace,
                                  size_t workspace_bytes, nvfp4_stream_t stream) {
  const size_t need = sm90_cublaslt_workspace_size();
  if (workspace == nullptr || workspace_bytes < need)
    return fail(NVFP4_ERROR_WORKSPACE, "gemm (sm90 cuBLASLt): workspace of " + std::to_string(workspace_bytes) +
                                           " bytes, this problem needs " + std::to_string(need) +
                                           " (query nvfp4_gemm_workspace_size with the same arguments)");
  const int dev = gpu::current_device();
  const LtPlan& p = plan_of(job, dev);
  if (!p.ok) return fail(NVFP4_ERROR_CUDA, "gemm (sm90 cuBLASLt): " + p.error);
  auto s = reinterpret_cast<cudaStream_t>(stream);
  float* scalars = static_cast<float*>(workspace);
  lt_scalars_kernel<<<1, 1, 0, s>>>(job.amax_a, job.amax_b, scalars);
  if (nvfp4_status_t st = gpu::check_launch("gemm (sm90 cuBLASLt): alpha kernel launch"); st != NVFP4_SUCCESS)
    return st;
  uint8_t* lt_ws = static_cast<uint8_t*>(workspace) + kScalars;
  std::string error;
  const lt::Handle h = handle_of(dev, error);  // made with the plan
  if (h == nullptr) return fail(NVFP4_ERROR_CUDA, "gemm (sm90 cuBLASLt): " + error);
  const lt::Status r = lt::api().matmul(h, p.desc, scalars, b_bf16, p.a, a_bf16, p.b, scalars + 1, job.d, p.d, job.d,
                                        p.d, &p.algo, lt_ws, kLtWorkspace, s);
  if (r != 0) return fail(NVFP4_ERROR_CUDA, "gemm (sm90 cuBLASLt): cublasLtMatmul failed (status " +
                                                std::to_string(r) + ")");
  return NVFP4_SUCCESS;
}

}  // namespace nvfp4::detail
