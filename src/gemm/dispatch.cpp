// backend x architecture -> runner. The CPU reference serves CPU tensors; CUDA tensors
// go to the runner compiled for the current device's architecture.
#include "gemm/backends.h"

namespace nvfp4::detail {

int backend_supported(nvfp4_backend_t backend, int cc) {
  if (cc == 0) return backend == NVFP4_BACKEND_REFERENCE || backend == NVFP4_BACKEND_AUTO;
  return 0;  // no CUDA GEMM runner in this build yet
}

nvfp4_backend_t resolve_backend(nvfp4_backend_t backend, int cc) {
  if (backend != NVFP4_BACKEND_AUTO) return backend;
  return cc == 0 ? NVFP4_BACKEND_REFERENCE : NVFP4_BACKEND_CUTLASS;
}

nvfp4_status_t gemm_workspace_size(const GemmJob&, nvfp4_backend_t, bool, size_t* bytes) {
  *bytes = 0;
  return NVFP4_SUCCESS;
}

nvfp4_status_t gemm_run(const GemmJob& job, nvfp4_backend_t backend, bool on_cuda, void*, size_t,
                        nvfp4_stream_t) {
  if (!on_cuda) {
    if (backend != NVFP4_BACKEND_AUTO && backend != NVFP4_BACKEND_REFERENCE)
      return fail(NVFP4_ERROR_NOT_SUPPORTED,
                  "backend: cutlass and cudnn need CUDA tensors; CPU tensors use the reference backend");
    return cpu_gemm(job);
  }
  return fail(NVFP4_ERROR_NOT_SUPPORTED, "gemm: no CUDA GEMM backend is built yet");
}

}  // namespace nvfp4::detail
