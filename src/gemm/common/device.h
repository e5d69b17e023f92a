// Small CUDA helpers that the GEMM runners and the quantization kernels share, in one
// place: the current device and its multiprocessor count (cached), resident CTAs per SM
// (cached) and persistent-grid sizing, workspace alignment, launch-error checks and, for
// device code, loads and stores of the three floating-point dtypes through fp32.
// Host functions work from plain C++ (cudnn_gemm.cpp) as well as from .cu files.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

#include "internal.h"

namespace nvfp4::detail::gpu {

// Every workspace part starts on this boundary (TMA and cuDNN want >= 16 bytes; 256 keeps
// each part on its own cache lines).
constexpr size_t kWorkspaceAlign = 256;

inline size_t align_up(size_t v, size_t a = kWorkspaceAlign) { return (v + a - 1) / a * a; }
inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }
inline size_t dtype_bytes(nvfp4_dtype_t t) {
  return t == NVFP4_DTYPE_FLOAT16 || t == NVFP4_DTYPE_BFLOAT16 ? 2 : 4;
}

// The current device, or 0 when the query fails (the error is cleared: a later launch
// reports it with its own context).
inline int current_device() {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return dev;
}

constexpr int kMaxDevices = 64;

// Multiprocessor count of `dev`, queried once per device; `fallback` when it cannot be
// read (no driver, bad index). Launch geometry only: a wrong count costs speed, never
// correctness, and the launch that follows reports the underlying CUDA error.
inline int sm_count(int dev, int fallback = 132) {
  static std::atomic<int> cache[kMaxDevices];
  if (dev >= 0 && dev < kMaxDevices) {
    if (int v = cache[dev].load(std::memory_order_relaxed); v > 0) return v;
  }
  int v = 0;
  if (cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || v <= 0) {
    (void)cudaGetLastError();
    return fallback;
  }
  if (dev >= 0 && dev < kMaxDevices) cache[dev].store(v, std::memory_order_relaxed);
  return v;
}

// Resident CTAs per SM of `kernel` with `threads` threads and `smem` bytes of dynamic
// shared memory on the current device, queried once per (device, kernel) (each kernel is
// launched with one block size and one shared-memory size); 1 when the query fails.
inline int resident_ctas(const void* kernel, int threads, size_t smem) {
  static std::mutex mu;
  static std::unordered_map<const void*, int> cache[kMaxDevices];
  int dev = current_device();
  if (dev < 0 || dev >= kMaxDevices) dev = 0;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache[dev].find(kernel);
  if (it != cache[dev].end()) return it->second;
  int n = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, smem) != cudaSuccess || n < 1) {
    (void)cudaGetLastError();
    n = 1;
  }
  cache[dev][kernel] = n;
  return n;
}

// Persistent grid: as many CTAs as are resident on the device at once, never more than
// `work_items` nor `cap` (when > 0), and at least 1.
template <class Kernel>
inline unsigned persistent_grid(Kernel kernel, int threads, size_t smem, int64_t work_items, int64_t cap = 0) {
  int64_t g = static_cast<int64_t>(resident_ctas(reinterpret_cast<const void*>(kernel), threads, smem)) *
              sm_count(current_device());
  if (cap > 0 && cap < g) g = cap;
  if (g > work_items) g = work_items;
  if (g < 1) g = 1;
  return static_cast<unsigned>(g);
}

inline nvfp4_status_t cuda_error(cudaError_t e, const std::string& what) {
  return fail(NVFP4_ERROR_CUDA, what + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

// Lets `kernel` take `bytes` of dynamic shared memory (above 48 KiB a kernel must opt in),
// once per (device, kernel): the attribute belongs to the device's context, and the
// quantization kernels that need it run on every training step.
template <class Kernel>
inline nvfp4_status_t allow_dynamic_smem(Kernel kernel, int bytes) {
  static std::mutex mu;
  static std::unordered_map<const void*, int> done[kMaxDevices];
  int dev = current_device();
  if (dev < 0 || dev >= kMaxDevices) dev = 0;
  const void* key = reinterpret_cast<const void*>(kernel);
  std::lock_guard<std::mutex> lock(mu);
  auto it = done[dev].find(key);
  if (it != done[dev].end() && it->second >= bytes) return NVFP4_SUCCESS;
  const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return cuda_error(e, "cannot give a kernel " + std::to_string(bytes) + " bytes of shared memory");
  }
  done[dev][key] = bytes;
  return NVFP4_SUCCESS;
}


// After a <<<>>> launch: NVFP4_ERROR_CUDA naming `what` if the launch failed.
inline nvfp4_status_t check_launch(const std::string& what) {
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? NVFP4_SUCCESS : cuda_error(e, what);
}

#if defined(__CUDACC__)
// The 32-bit shared-memory address of a pointer into shared memory.
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// cp.async (sm_80+): copies the first src_bytes of a 16- (4-) byte piece from global to
// shared memory and zero-fills the rest (src_bytes = 0: nothing is read, all zeros). The
// "memory" clobbers keep the compiler from moving shared-memory accesses across them.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async4(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's commit groups are pending.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Element i of a float32 / float16 / bfloat16 buffer, widened to fp32 (exact).
__device__ __forceinline__ float load_as_float(const void* p, nvfp4_dtype_t dt, int64_t i) {
  switch (dt) {
    case NVFP4_DTYPE_FLOAT16: return __half2float(static_cast<const __half*>(p)[i]);
    case NVFP4_DTYPE_BFLOAT16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

// Stores v into element i, rounded to nearest-even where the dtype is narrower.
__device__ __forceinline__ void store_from_float(void* p, nvfp4_dtype_t dt, int64_t i, float v) {
  switch (dt) {
    case NVFP4_DTYPE_FLOAT16: static_cast<__half*>(p)[i] = __float2half_rn(v); break;
    case NVFP4_DTYPE_BFLOAT16: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v); break;
    default: static_cast<float*>(p)[i] = v; break;
  }
}
#endif

}  // namespace nvfp4::detail::gpu
