// CUDA helpers that the quantization kernels, the GEMM runners and the dispatcher share,
// each defined once: the current device and its cached attributes (multiprocessor count,
// compute capability, L2 size), resident CTAs and clusters per kernel (cached) and
// persistent-grid sizing, the dynamic shared-memory opt-in, workspace alignment,
// launch-error checks and, for device code, cp.async and loads and stores of the three
// floating-point dtypes through fp32. Host functions work from plain C++ (dispatch.cpp,
// cudnn_gemm.cpp) as well as from .cu files.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#define NVFP4_GPU_HD __host__ __device__
#else
#define NVFP4_GPU_HD
#endif

#include "core/e2m1.h"
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

// Blocks of b covering a (a >= 0, b > 0).
NVFP4_GPU_HD constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The device attributes the library asks for on every call, each read from the driver once
// per device (they never change while a process runs).
enum class Attr { kSmCount, kComputeCapability, kL2Bytes, kCount };

// Attribute `a` of device `dev` (the compute capability as major * 10 + minor), cached; 0
// when it cannot be read (no driver, bad index: the error is cleared, and nothing is
// cached, so a later call asks again).
inline int attribute(int dev, Attr a) {
  static std::atomic<int> cache[static_cast<int>(Attr::kCount)][kMaxDevices];
  std::atomic<int>* slot = dev >= 0 && dev < kMaxDevices ? &cache[static_cast<int>(a)][dev] : nullptr;
  if (slot != nullptr) {
    if (int v = slot->load(std::memory_order_relaxed); v > 0) return v;
  }
  auto read = [dev](cudaDeviceAttr which) {
    int v = -1;
    if (cudaDeviceGetAttribute(&v, which, dev) != cudaSuccess) {
      (void)cudaGetLastError();
      v = -1;
    }
    return v;
  };
  int v = 0;
  switch (a) {
    case Attr::kSmCount: v = read(cudaDevAttrMultiProcessorCount); break;
    case Attr::kL2Bytes: v = read(cudaDevAttrL2CacheSize); break;
    case Attr::kComputeCapability: {
      const int major = read(cudaDevAttrComputeCapabilityMajor), minor = read(cudaDevAttrComputeCapabilityMinor);
      v = major > 0 && minor >= 0 ? major * 10 + minor : 0;
      break;
    }
    case Attr::kCount: break;
  }
  if (v <= 0) return 0;
  if (slot != nullptr) slot->store(v, std::memory_order_relaxed);
  return v;
}

// Multiprocessor count of `dev`; `fallback` when it cannot be read. Launch geometry only: a
// wrong count costs speed, never correctness, and the launch that follows reports the
// underlying CUDA error.
inline int sm_count(int dev, int fallback = 132) {
  const int v = attribute(dev, Attr::kSmCount);
  return v > 0 ? v : fallback;
}

// Compute capability of `dev` as major * 10 + minor; 0 when it cannot be read.
inline int compute_capability(int dev) { return attribute(dev, Attr::kComputeCapability); }

// Compute capability of the current device; 0 when there is none or it cannot be read.
inline int current_compute_capability() {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return compute_capability(dev);
}

// L2 size of `dev` in bytes; `fallback` when it cannot be read.
inline int64_t l2_bytes(int dev, int64_t fallback) {
  const int v = attribute(dev, Attr::kL2Bytes);
  return v > 0 ? v : fallback;
}

// Resident CTAs per SM of `kernel` with `threads` threads and `smem` bytes of dynamic
// shared memory on the current device, queried once per (device, kernel, threads, smem):
// the answer depends on all four, so a kernel launched with another block or shared-memory
// size asks again instead of reading a stale count. 1 when the query fails.
struct ResidentKey {
  const void* kernel;
  int threads;
  size_t smem;
  bool operator==(const ResidentKey& o) const { return kernel == o.kernel && threads == o.threads && smem == o.smem; }
};
struct ResidentKeyHash {
  size_t operator()(const ResidentKey& k) const {
    return std::hash<const void*>()(k.kernel) ^ (std::hash<size_t>()(k.smem) * 31u + static_cast<size_t>(k.threads));
  }
};
inline int resident_ctas(const void* kernel, int threads, size_t smem) {
  static std::mutex mu;
  static std::unordered_map<ResidentKey, int, ResidentKeyHash> cache[kMaxDevices];
  int dev = current_device();
  if (dev < 0 || dev >= kMaxDevices) dev = 0;
  const ResidentKey key{kernel, threads, smem};
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache[dev].find(key);
  if (it != cache[dev].end()) return it->second;
  int n = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, smem) != cudaSuccess || n < 1) {
    (void)cudaGetLastError();
    n = 1;
  }
  cache[dev][key] = n;
  return n;
}

// A launch configuration for cudaLaunchKernelEx with a thread-block cluster of `cluster`
// CTAs along x (1: an ordinary launch, still through the same call). Not copyable: the
// configuration points at its own attribute.
struct ClusterLaunch {
  cudaLaunchConfig_t cfg{};
  cudaLaunchAttribute attr[1];
  ClusterLaunch(dim3 grid, unsigned threads, size_t smem, cudaStream_t stream, unsigned cluster) {
    cfg.gridDim = grid;
    cfg.blockDim = dim3(threads, 1, 1);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = cluster;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
  }
  ClusterLaunch(const ClusterLaunch&) = delete;
  ClusterLaunch& operator=(const ClusterLaunch&) = delete;
  // Grid and cluster both `cluster` CTAs along x.
  void set_cluster(unsigned cluster) {
    cfg.gridDim.x = cluster;
    attr[0].val.clusterDim.x = cluster;
  }
};

// Clusters of `cluster` CTAs of `kernel` (`threads` threads and `smem` bytes of dynamic
// shared memory each) that device `dev` holds at once, asked of the driver once per
// (device, kernel, cluster, threads, smem): a handful of pairs cover all shapes of one
// kernel. `fallback` when the driver cannot say (not cached). The kernel must already be
// allowed `smem` bytes (allow_dynamic_smem).
template <class Kernel>
inline int resident_clusters(Kernel kernel, int dev, int threads, int cluster, size_t smem, int fallback) {
  struct Entry {
    int dev;
    const void* kernel;
    int threads, cluster;
    size_t smem;
    int value;
  };
  static std::mutex mu;
  static std::vector<Entry> cache;
  const void* key = reinterpret_cast<const void*>(kernel);
  {
    std::lock_guard<std::mutex> lock(mu);
    for (const Entry& e : cache)
      if (e.dev == dev && e.kernel == key && e.threads == threads && e.cluster == cluster && e.smem == smem)
        return e.value;
  }
  ClusterLaunch l(dim3(static_cast<unsigned>(cluster), static_cast<unsigned>(sm_count(dev)), 1),
                  static_cast<unsigned>(threads), smem, nullptr, static_cast<unsigned>(cluster));
  int n = 0;
  if (cudaOccupancyMaxActiveClusters(&n, kernel, &l.cfg) != cudaSuccess || n <= 0) {
    (void)cudaGetLastError();
    return fallback;
  }
  std::lock_guard<std::mutex> lock(mu);
  cache.push_back({dev, key, threads, cluster, smem, n});
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

// The 16 E2M1 values (core::e2m1_decode) as a table, written by threads 0..15 (synchronize
// before reading). In shared memory it is one word per bank: a warp's lookups never conflict.
__device__ __forceinline__ void fill_e2m1_table(float* lut) {
  if (threadIdx.x < 16) lut[threadIdx.x] = core::e2m1_decode(threadIdx.x);
}

// The decode of an MXFP4 half block (16 values) to the BF16 operand of the Hopper emulation
// (the GEMM's decode pass; NVFP4 blocks take quant::decode16_e4m3_bf16): 16 packed E2M1
// codes (lo, hi; element 0 in the low nibble of lo) times the scale, each product rounded
// to bfloat16 (exact up to 2^128), as 8 bf16x2 words in element order. lut: fill_e2m1_table's
// table.
__device__ __forceinline__ void decode16_bf16(uint32_t lo, uint32_t hi, float scale, const float* lut,
                                              uint32_t (&out)[8]) {
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint32_t byte = ((i < 4 ? lo : hi) >> (8 * (i & 3))) & 0xffu;
    const __nv_bfloat162 v = __floats2bfloat162_rn(lut[byte & 15u] * scale, lut[byte >> 4] * scale);
    out[i] = *reinterpret_cast<const uint32_t*>(&v);
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
