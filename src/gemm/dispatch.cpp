// backend x architecture -> runner (DESIGN.md section 3). CPU tensors go to the reference;
// CUDA tensors to the runner compiled for the current device's architecture:
//
//   cc 9.0        cutlass: sm90 exact emulation        cudnn: decode + cuDNN BF16 matmul
//   cc 10.0       cutlass: sm100 block-scaled native   cudnn: native graph
//   cc 12.0       cutlass: sm120 block-scaled native   cudnn: native where cuDNN accepts
//
// Architecture-specific cubins (sm_90a, sm_100a, sm_120a) run only on exactly that
// compute capability, so 10.3 and 12.1 need their own targets in NVFP4_CUDA_ARCHS.
#include <atomic>
#include <cstring>
#include <string>

#include "gemm/backends.h"

#if defined(NVFP4_WITH_CUDA)
#include <cuda_runtime.h>
#endif

#ifndef NVFP4_CUDA_ARCHS_STRING
#define NVFP4_CUDA_ARCHS_STRING ""
#endif

namespace nvfp4::detail {
namespace {

// True if `arch` (e.g. "103a") is one of the semicolon-separated targets of this build.
[[maybe_unused]] bool arch_built(const char* arch) {
  const std::string list = std::string(";") + NVFP4_CUDA_ARCHS_STRING + ";";
  return list.find(std::string(";") + arch + ";") != std::string::npos;
}

bool cutlass_on(int cc) {
  switch (cc) {
#if defined(NVFP4_HAS_SM90_GEMM)
    case 90: return true;
#endif
#if defined(NVFP4_HAS_SM100_GEMM)
    case 100: return true;
    case 103: return arch_built("103a");
#endif
#if defined(NVFP4_HAS_SM120_GEMM)
    case 120: return true;
    case 121: return arch_built("121a");
#endif
    default: return false;
  }
}

bool cudnn_on(int cc) {
#if defined(NVFP4_HAS_CUDNN)
  if (cc != 90 && cc / 10 != 10 && cc / 10 != 12) return false;
  return cudnn_available() != 0;
#else
  (void)cc;
  return false;
#endif
}

const char* backend_name(nvfp4_backend_t b) {
  switch (b) {
    case NVFP4_BACKEND_AUTO: return "auto";
    case NVFP4_BACKEND_REFERENCE: return "reference";
    case NVFP4_BACKEND_CUTLASS: return "cutlass";
    case NVFP4_BACKEND_CUDNN: return "cudnn";
  }
  return "?";
}

std::string cc_str(int cc) { return std::to_string(cc / 10) + "." + std::to_string(cc % 10); }

nvfp4_status_t not_supported(nvfp4_backend_t b, int cc) {
  std::string msg = std::string("backend: '") + backend_name(b) + "' cannot run on this GPU (compute capability " +
                    cc_str(cc) + "); ";
  switch (b) {
    case NVFP4_BACKEND_CUTLASS:
      msg += "it needs a GPU of compute capability 9.0 (H100/H200, exact emulation), 10.0 (B200/GB200) or "
             "12.0 (RTX 50) whose architecture is compiled into this build (NVFP4_CUDA_ARCHS: " +
             std::string(NVFP4_CUDA_ARCHS_STRING) + ")";
      break;
    case NVFP4_BACKEND_CUDNN:
#if defined(NVFP4_HAS_CUDNN)
      msg += "it needs a GPU of compute capability 9.0, 10.x or 12.x and cuDNN 9 (libcudnn.so.9) at run time";
#else
      msg += "this build has no cuDNN backend (the cudnn-frontend headers were not found at build time)";
#endif
      break;
    case NVFP4_BACKEND_REFERENCE:
      msg = "backend: 'reference' runs on CPU tensors only; CUDA tensors use 'cutlass', 'cudnn' or 'auto'";
      break;
    default:
      msg += "no GEMM backend of this build supports it";
      break;
  }
  return fail(NVFP4_ERROR_NOT_SUPPORTED, msg);
}

#if defined(NVFP4_WITH_CUDA)
// Compute capability of the current device (major*10+minor), cached per device; 0 on error.
int current_cc() {
  static std::atomic<int> cache[64];
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  if (dev >= 0 && dev < 64) {
    if (int v = cache[dev].load(std::memory_order_relaxed); v > 0) return v;
  }
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  const int cc = major * 10 + minor;
  if (dev >= 0 && dev < 64) cache[dev].store(cc, std::memory_order_relaxed);
  return cc;
}
#endif

// The backend a CUDA job runs on, or a NOT_SUPPORTED failure.
nvfp4_status_t cuda_backend(nvfp4_backend_t requested, int& cc, nvfp4_backend_t& out) {
#if defined(NVFP4_WITH_CUDA)
  cc = current_cc();
  if (cc == 0) return fail(NVFP4_ERROR_CUDA, "gemm: cannot query the current CUDA device");
  out = resolve_backend(requested, cc);
  if (!backend_supported(out, cc)) return not_supported(out, cc);
  return NVFP4_SUCCESS;
#else
  (void)requested;
  (void)out;
  cc = 0;
  return fail(NVFP4_ERROR_NOT_SUPPORTED, "gemm: this nvfp4 build has no CUDA support (built without nvcc)");
#endif
}

}  // namespace

int backend_supported(nvfp4_backend_t backend, int cc) {
  if (cc == 0) return backend == NVFP4_BACKEND_REFERENCE || backend == NVFP4_BACKEND_AUTO;
  switch (backend) {
    case NVFP4_BACKEND_AUTO: return cutlass_on(cc) || cudnn_on(cc);
    case NVFP4_BACKEND_CUTLASS: return cutlass_on(cc);
    case NVFP4_BACKEND_CUDNN: return cudnn_on(cc);
    default: return 0;
  }
}

// auto -> the fastest supported: CUTLASS everywhere it runs (native on Blackwell; on Hopper
// its fused small-M kernel and wgmma GEMM beat the cuDNN emulation), else cuDNN.
nvfp4_backend_t resolve_backend(nvfp4_backend_t backend, int cc) {
  if (backend != NVFP4_BACKEND_AUTO) return backend;
  if (cc == 0) return NVFP4_BACKEND_REFERENCE;
  if (cutlass_on(cc)) return NVFP4_BACKEND_CUTLASS;
  if (cudnn_on(cc)) return NVFP4_BACKEND_CUDNN;
  return NVFP4_BACKEND_CUTLASS;  // unsupported: the caller reports what CUTLASS needs
}

nvfp4_status_t gemm_workspace_size(const GemmJob& job, nvfp4_backend_t backend, bool on_cuda, size_t* bytes) {
  (void)job;
  *bytes = 0;
  if (!on_cuda) return NVFP4_SUCCESS;  // the reference needs none; gemm_run reports a bad backend
  int cc = 0;
  nvfp4_backend_t be = backend;
  if (nvfp4_status_t s = cuda_backend(backend, cc, be); s != NVFP4_SUCCESS) return s;
  switch (be) {
    case NVFP4_BACKEND_CUTLASS:
#if defined(NVFP4_HAS_SM90_GEMM)
      if (cc == 90) {
        *bytes = sm90_gemm_workspace_size(job);
        return NVFP4_SUCCESS;
      }
#endif
#if defined(NVFP4_HAS_SM100_GEMM)
      if (cc / 10 == 10) {
        *bytes = sm100_gemm_workspace_size(job);
        return NVFP4_SUCCESS;
      }
#endif
#if defined(NVFP4_HAS_SM120_GEMM)
      if (cc / 10 == 12) {
        *bytes = sm120_gemm_workspace_size(job);
        return NVFP4_SUCCESS;
      }
#endif
      break;
    case NVFP4_BACKEND_CUDNN:
#if defined(NVFP4_HAS_CUDNN)
      return cudnn_gemm_workspace_size(job, cc, bytes);
#endif
      break;
    default: break;
  }
  return not_supported(be, cc);
}

nvfp4_status_t gemm_run(const GemmJob& job, nvfp4_backend_t backend, bool on_cuda, void* workspace,
                        size_t workspace_bytes, nvfp4_stream_t stream) {
  if (!on_cuda) {
    if (backend != NVFP4_BACKEND_AUTO && backend != NVFP4_BACKEND_REFERENCE)
      return fail(NVFP4_ERROR_NOT_SUPPORTED, std::string("backend: '") + backend_name(backend) +
                                                 "' needs CUDA tensors; CPU tensors use the reference backend");
    return cpu_gemm(job);
  }
  int cc = 0;
  nvfp4_backend_t be = backend;
  if (nvfp4_status_t s = cuda_backend(backend, cc, be); s != NVFP4_SUCCESS) return s;
  switch (be) {
    case NVFP4_BACKEND_CUTLASS:
#if defined(NVFP4_HAS_SM90_GEMM)
      if (cc == 90) return sm90_gemm(job, workspace, workspace_bytes, stream);
#endif
#if defined(NVFP4_HAS_SM100_GEMM)
      if (cc / 10 == 10) return sm100_gemm(job, workspace, workspace_bytes, stream);
#endif
#if defined(NVFP4_HAS_SM120_GEMM)
      if (cc / 10 == 12) return sm120_gemm(job, workspace, workspace_bytes, stream);
#endif
      break;
    case NVFP4_BACKEND_CUDNN:
#if defined(NVFP4_HAS_CUDNN)
      return cudnn_gemm(job, cc, workspace, workspace_bytes, stream);
#endif
      break;
    default: break;
  }
  (void)workspace;
  (void)workspace_bytes;
  (void)stream;
  return not_supported(be, cc);
}

}  // namespace nvfp4::detail
