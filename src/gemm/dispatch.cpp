// The runner table (see gemm/backends.h) and the dispatch that walks it. CPU tensors go to
// the reference; CUDA tensors to the first row, in table order, that serves the requested
// backend, is compiled for the current device, is usable there and accepts the shape.
// backend = "auto" takes the first CUDA row of any backend: CUTLASS rows come first (native
// on Blackwell; on Hopper its fused small-M kernel and wgmma GEMM beat the cuDNN
// emulation), cuDNN after them.
//
// Whether a row is compiled for a device is answered from the CUDA targets each kernel
// object was actually built for (nvfp4_build_config.h, written by CMake from the same
// lists that set the compiler flags), never from the global target list: an sm_100a cubin
// does not run on a B300 (cc 10.3), an sm_100f one does.
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "gemm/backends.h"
#include "grouped.h"

#if defined(NVFP4_WITH_CUDA)
#include "cuda/device.h"
#include "settings.h"
#endif

#ifndef NVFP4_CUDA_ARCHS_STRING
#define NVFP4_CUDA_ARCHS_STRING ""
#endif
#ifndef NVFP4_TARGETS_COMMON
#define NVFP4_TARGETS_COMMON ""
#endif
#ifndef NVFP4_TARGETS_SM90
#define NVFP4_TARGETS_SM90 ""
#endif
#ifndef NVFP4_TARGETS_SM100
#define NVFP4_TARGETS_SM100 ""
#endif
#ifndef NVFP4_TARGETS_SM120
#define NVFP4_TARGETS_SM120 ""
#endif
#ifndef NVFP4_TARGETS_CUDNN
#define NVFP4_TARGETS_CUDNN ""
#endif

namespace nvfp4::detail {
namespace {

// ---- adapters from the table's uniform signatures to each runner's entry points ----

nvfp4_status_t reference_workspace(const GemmJob&, int, size_t* bytes) {
  *bytes = 0;
  return NVFP4_SUCCESS;
}
nvfp4_status_t reference_run(const GemmJob& job, int, void*, size_t, nvfp4_stream_t) { return cpu_gemm(job); }

#if defined(NVFP4_HAS_SM90_GEMM)
nvfp4_status_t no_workspace(const GemmJob&, int, size_t* bytes) {
  *bytes = 0;
  return NVFP4_SUCCESS;
}
bool sm90_stream_accepts(const GemmJob& job, int) { return sm90_small_m_stream_accepts(job); }
nvfp4_status_t sm90_stream_run(const GemmJob& job, int, void*, size_t, nvfp4_stream_t stream) {
  return sm90_small_m_stream_run(job, stream);
}
bool sm90_ring_accepts(const GemmJob& job, int) { return sm90_small_m_ring_accepts(job); }
nvfp4_status_t sm90_ring_run(const GemmJob& job, int, void*, size_t, nvfp4_stream_t stream) {
  return sm90_small_m_ring_run(job, stream);
}
nvfp4_status_t sm90_two_step_workspace(const GemmJob& job, int, size_t* bytes) {
  *bytes = sm90_gemm_workspace_size(job);
  return NVFP4_SUCCESS;
}
nvfp4_status_t sm90_two_step_run(const GemmJob& job, int, void* ws, size_t ws_bytes, nvfp4_stream_t stream) {
  return sm90_gemm(job, ws, ws_bytes, stream);
}
bool sm90_direct_accepts(const GemmJob& job, int) { return sm90_direct_applicable(job); }
nvfp4_status_t sm90_direct_run(const GemmJob& job, int, void*, size_t, nvfp4_stream_t stream) {
  return sm90_direct_gemm(job, stream);
}
bool sm90_rs_accepts(const GemmJob& job, int) { return sm90_rs_applicable(job); }
nvfp4_status_t sm90_rs_workspace(const GemmJob& job, int, size_t* bytes) {
  *bytes = sm90_rs_workspace_size(job);
  return NVFP4_SUCCESS;
}
nvfp4_status_t sm90_rs_run(const GemmJob& job, int, void* ws, size_t ws_bytes, nvfp4_stream_t stream) {
  return sm90_rs_gemm(job, ws, ws_bytes, stream);
}
bool sm90_grouped_accepts(const GemmJob& job, int) { return sm90_grouped_applicable(*job.grouped); }
#define NVFP4_SM90_GROUPED true, &sm90_grouped_accepts, nullptr, &sm90_grouped_workspace, &sm90_grouped_run
#define NVFP4_SM90_STREAM true, &sm90_stream_accepts, nullptr, &no_workspace, &sm90_stream_run
#define NVFP4_SM90_RING true, &sm90_ring_accepts, nullptr, &no_workspace, &sm90_ring_run
#define NVFP4_SM90_DIRECT true, &sm90_direct_accepts, nullptr, &no_workspace, &sm90_direct_run
#define NVFP4_SM90_RS true, &sm90_rs_accepts, nullptr, &sm90_rs_workspace, &sm90_rs_run
#define NVFP4_SM90_TWO_STEP true, nullptr, nullptr, &sm90_two_step_workspace, &sm90_two_step_run
#else
#define NVFP4_SM90_GROUPED false, nullptr, nullptr, nullptr, nullptr
#define NVFP4_SM90_STREAM false, nullptr, nullptr, nullptr, nullptr
#define NVFP4_SM90_RING false, nullptr, nullptr, nullptr, nullptr
#define NVFP4_SM90_DIRECT false, nullptr, nullptr, nullptr, nullptr
#define NVFP4_SM90_RS false, nullptr, nullptr, nullptr, nullptr
#define NVFP4_SM90_TWO_STEP false, nullptr, nullptr, nullptr, nullptr
#endif

#if defined(NVFP4_HAS_SM100_GEMM) || defined(NVFP4_HAS_SM120_GEMM)
// One adapter per entry point, for either architecture's table (sm100_gemms, sm120_gemms).
template <const BlockscaledGemms& (*G)()>
nvfp4_status_t blockscaled_workspace(const GemmJob& job, int, size_t* bytes) {
  *bytes = G().workspace_size(job);
  return NVFP4_SUCCESS;
}
template <const BlockscaledGemms& (*G)()>
nvfp4_status_t blockscaled_run(const GemmJob& job, int, void* ws, size_t ws_bytes, nvfp4_stream_t stream) {
  return G().run(job, ws, ws_bytes, stream);
}
template <const BlockscaledGemms& (*G)()>
bool blockscaled_mx_accepts(const GemmJob& job, int) {
  return G().mx_applicable(job);
}
#define NVFP4_BLOCKSCALED(G) true, nullptr, nullptr, &blockscaled_workspace<G>, &blockscaled_run<G>
#define NVFP4_BLOCKSCALED_MX(G) true, &blockscaled_mx_accepts<G>, nullptr, &blockscaled_workspace<G>, &blockscaled_run<G>
#endif
#if defined(NVFP4_HAS_SM100_GEMM)
#define NVFP4_SM100 NVFP4_BLOCKSCALED(sm100_gemms)
#define NVFP4_SM100_MX NVFP4_BLOCKSCALED_MX(sm100_gemms)
#else
#define NVFP4_SM100 false, nullptr, nullptr, nullptr, nullptr
#define NVFP4_SM100_MX false, nullptr, nullptr, nullptr, nullptr
#endif
#if defined(NVFP4_HAS_SM120_GEMM)
#define NVFP4_SM120 NVFP4_BLOCKSCALED(sm120_gemms)
#define NVFP4_SM120_MX NVFP4_BLOCKSCALED_MX(sm120_gemms)
#else
#define NVFP4_SM120 false, nullptr, nullptr, nullptr, nullptr
#define NVFP4_SM120_MX false, nullptr, nullptr, nullptr, nullptr
#endif

#if defined(NVFP4_HAS_CUDNN)
bool cudnn_usable(int cc) { return cudnn_available(cc) != 0; }
#define NVFP4_CUDNN true, nullptr, &cudnn_usable, &cudnn_gemm_workspace_size, &cudnn_gemm
#else
#define NVFP4_CUDNN false, nullptr, nullptr, nullptr, nullptr
#endif

// The grouped (MoE) rows after the reference one (format kNvfp4Grouped), built or not.
#if defined(NVFP4_HAS_SM100_GEMM)
bool sm100_grouped_accepts(const GemmJob& job, int) { return sm100_grouped_applicable(*job.grouped); }
#define NVFP4_SM100_GROUPED true, &sm100_grouped_accepts, nullptr, &sm100_grouped_workspace, &sm100_grouped_run
#else
#define NVFP4_SM100_GROUPED false, nullptr, nullptr, nullptr, nullptr
#endif
#if defined(NVFP4_HAS_SM120_GEMM)
bool sm120_grouped_accepts(const GemmJob& job, int) { return sm120_grouped_applicable(*job.grouped); }
#define NVFP4_SM120_GROUPED true, &sm120_grouped_accepts, nullptr, &sm120_grouped_workspace, &sm120_grouped_run
#else
#define NVFP4_SM120_GROUPED false, nullptr, nullptr, nullptr, nullptr
#endif
constexpr const char kGroupedNativeShapes[] =
    "up to 1024 groups, K % 32 == 0 (ragged M), output rows 16-byte aligned";
#define NVFP4_GROUPED_ROWS                                                                                        \
  {"cutlass-sm90-grouped", NVFP4_BACKEND_CUTLASS, Format::kNvfp4Grouped, "sm_90", 90, 90, kCuda | kObjSm90,       \
   "sm90_grouped_setup_kernel;sm90_grouped_decode_kernel;sm90_grouped_zero_kernel;"                              \
   "device_kernel.*GemmUniversal.*Sm90",                                                                          \
   "up to 1024 groups; output rows 16-byte aligned (N, or K for ragged K, times the output size)",              \
   "exact emulation: FP4 -> BF16 decode of every group in one pass + CUTLASS sm90 ptr-array grouped BF16 GEMM "   \
   "(TMA, wgmma), per-group problem shapes and alpha on the device",                                             \
   NVFP4_SM90_GROUPED},                                                                                           \
  {"cutlass-sm100-grouped", NVFP4_BACKEND_CUTLASS, Format::kNvfp4Grouped, "sm_100", 100, 109, kCuda | kObjSm100,  \
   "grouped_blockscaled_setup_kernel.*Sm100;grouped_blockscaled_zero_kernel<cutlass::arch::Sm100>;"              \
   "device_kernel.*GemmUniversal.*Sm100",                                                                         \
   kGroupedNativeShapes,                                                                                          \
   "native: CUTLASS sm100 block-scaled ptr-array grouped GEMM on the FP4 operands, per-group problems, scales "   \
   "and alpha on the device (built, not run on hardware)",                                                        \
   NVFP4_SM100_GROUPED},                                                                                          \
  {"cutlass-sm110-grouped", NVFP4_BACKEND_CUTLASS, Format::kNvfp4Grouped, "sm_110", 110, 119, kCuda | kObjSm100,  \
   "grouped_blockscaled_setup_kernel.*Sm100;grouped_blockscaled_zero_kernel<cutlass::arch::Sm100>;"              \
   "device_kernel.*GemmUniversal.*Sm100",                                                                         \
   kGroupedNativeShapes, "native: the sm100 grouped GEMM compiled for sm_110 (built, not run on hardware)",        \
   NVFP4_SM100_GROUPED},                                                                                          \
  {"cutlass-sm120-grouped", NVFP4_BACKEND_CUTLASS, Format::kNvfp4Grouped, "sm_120", 120, 129, kCuda | kObjSm120,  \
   "grouped_blockscaled_setup_kernel.*Sm120;grouped_blockscaled_zero_kernel<cutlass::arch::Sm120>;"              \
   "device_kernel.*GemmUniversal.*Sm120",                                                                         \
   kGroupedNativeShapes,                                                                                          \
   "native: CUTLASS sm120 block-scaled ptr-array grouped GEMM (warp-level block-scaled MMA) on the FP4 operands "  \
   "(built, not run on hardware)",                                                                                \
   NVFP4_SM120_GROUPED},

constexpr uint32_t kCuda = kObjCommon;  // every CUDA row: its operands come from these kernels

// What rows of the two operand formats share: the kernels one runner launches and its
// shape rule, in the table's terms.
constexpr const char kSm90TwoStepKernels[] =
    "gemm_prep_kernel;gemm_finalize_kernel;device_kernel.*GemmUniversal.*Sm90;lt_scalars_kernel";
constexpr const char kSm100Kernels[] =
    "blockscaled::alpha_kernel<cutlass::arch::Sm100>;blockscaled::widen_kernel<cutlass::arch::Sm100>;"
    "device_kernel.*GemmUniversal.*Sm100";
constexpr const char kSm120Kernels[] =
    "blockscaled::alpha_kernel<cutlass::arch::Sm120>;blockscaled::widen_kernel<cutlass::arch::Sm120>;"
    "device_kernel.*GemmUniversal.*Sm120";
constexpr const char kBlockscaledShapes[] =
    "K % 32 == 0, N * sizeof(out) % 16 == 0, swizzled scales, 16-byte aligned operands";
constexpr const char kBlockscaledMxShapes[] =
    "K % 32 == 0, bfloat16 output, N % 8 == 0, swizzled scales, 16-byte aligned operands";
constexpr const char kCudnnEmulationKernels[] = "scalars_kernel;gemm_prep_kernel";
constexpr const char kCudnnNativeKernels[] = "scalars_kernel;gemm_epilogue_kernel";
constexpr const char kCudnnNativeShapes[] = "K % 32 == 0, N * sizeof(out) % 16 == 0, swizzled scales";

// Table order is preference order (see the top of the file).
const Runner kRunners[] = {
    {"reference", NVFP4_BACKEND_REFERENCE, Format::kNvfp4, "cpu", 0, 0, 0, "", "any shape",
     "CPU reference: decoded values, float64 accumulation", true, nullptr, nullptr, &reference_workspace,
     &reference_run},

    // The fused small-M kernels (no CUTLASS), served under the cutlass backend as the
    // Hopper GEMM of its choice for few tokens; the small-M plan picks one of the two rows.
    {"sm90-small-m-stream", NVFP4_BACKEND_CUTLASS, Format::kNvfp4, "sm_90", 90, 90, kCuda | kObjSm90,
     "small_m::.*stream_kernel;small_m::.*ring_kernel",
     "1 <= M <= 32, K % 32 == 0 (K % 64 with linear scales), 16-byte aligned data, where a K split fits one "
     "wave (with 32 tokens) and K fits its shared memory",
     "exact emulation, fused: B streamed through registers, FP4 decoded there, mma.sync FP16, FP32 accumulation, "
     "split-K over a cluster (the ring kernel where the cluster cannot be placed)",
     NVFP4_SM90_STREAM},
    {"sm90-small-m-ring", NVFP4_BACKEND_CUTLASS, Format::kNvfp4, "sm_90", 90, 90, kCuda | kObjSm90,
     "small_m::.*ring_kernel", "1 <= M <= 128, K % 32 == 0 (K % 64 with linear scales), 16-byte aligned data",
     "exact emulation, fused: B through a cp.async ring in shared memory, FP4 decoded in registers, mma.sync "
     "FP16, FP32 accumulation, split-K over a cluster",
     NVFP4_SM90_RING},
    {"cutlass-sm90-direct", NVFP4_BACKEND_CUTLASS, Format::kNvfp4, "sm_90", 90, 90, kCuda | kObjSm90, "direct_kernel",
     "K % 32 == 0, swizzled scales, 16-byte aligned operands; only with NVFP4_SM90_DIRECT=1 (experimental)",
     "exact emulation, fused: FP4 codes and scales decoded into shared memory inside a warp-specialized wgmma "
     "GEMM (128x256 tiles, BF16, FP32 accumulation); no BF16 copy of an operand in global memory",
     NVFP4_SM90_DIRECT},
    {"sm90-fp4-rs", NVFP4_BACKEND_CUTLASS, Format::kNvfp4, "sm_90", 90, 90, kCuda | kObjSm90, "rs_kernel",
     "A as codes, B decoded or as codes (decoded first), K % 32 == 0, swizzled scales, 16-byte aligned operands; "
     "N <= 768 with 90% of a wave of 128x256 tiles (every such job with NVFP4_SM90_RS=1, none with 0)",
     "exact emulation, fused: A's FP4 codes and scales decoded in registers right before a register-sourced wgmma, "
     "B read as decoded BF16 (128x256 tiles, FP32 accumulation); no BF16 copy of A",
     NVFP4_SM90_RS},
    {"cutlass-sm90", NVFP4_BACKEND_CUTLASS, Format::kNvfp4, "sm_90", 90, 90, kCuda | kObjSm90,
     kSm90TwoStepKernels, "any shape",
     "exact emulation: FP4 -> BF16 decode + CUTLASS sm90 BF16 GEMM (TMA, wgmma), alpha/bias/beta*C in its epilogue; "
     "both operands decoded with no bias or C at K 2048, N >= 2048 (BF16 output): cuBLASLt's GEMM, alpha formed on "
     "the device (NVFP4_SM90_CUBLASLT)",
     NVFP4_SM90_TWO_STEP},

    {"cutlass-sm100", NVFP4_BACKEND_CUTLASS, Format::kNvfp4, "sm_100", 100, 109, kCuda | kObjSm100,
     kSm100Kernels,
     kBlockscaledShapes,
     "native: CUTLASS sm100 block-scaled GEMM, tcgen05 2-SM MMA (built, not run on hardware)", NVFP4_SM100},
    {"cutlass-sm110", NVFP4_BACKEND_CUTLASS, Format::kNvfp4, "sm_110", 110, 119, kCuda | kObjSm100,
     kSm100Kernels,
     kBlockscaledShapes,
     "native: the sm100 block-scaled GEMM compiled for sm_110 (built, not run on hardware)", NVFP4_SM100},
    {"cutlass-sm120", NVFP4_BACKEND_CUTLASS, Format::kNvfp4, "sm_120", 120, 129, kCuda | kObjSm120,
     kSm120Kernels,
     kBlockscaledShapes,
     "native: CUTLASS sm120 block-scaled GEMM, warp-level block-scaled MMA (built, not run on hardware)",
     NVFP4_SM120},

    {"cudnn-sm90", NVFP4_BACKEND_CUDNN, Format::kNvfp4, "sm_90", 90, 90, kCuda | kObjCudnn,
     kCudnnEmulationKernels, "any shape",
     "exact emulation: FP4 -> BF16 decode + cuDNN BF16 matmul graph (cuDNN 9)", NVFP4_CUDNN},
    {"cudnn-sm100", NVFP4_BACKEND_CUDNN, Format::kNvfp4, "sm_100", 100, 109, kCuda | kObjCudnn,
     kCudnnNativeKernels,
     kCudnnNativeShapes,
     "native: cuDNN block_scale_dequantize + matmul graph, epilogue fused or, where cuDNN refuses that, "
     "applied by nvfp4's own kernel (cuDNN >= 9.7; built, not run on hardware)",
     NVFP4_CUDNN},
    {"cudnn-sm110", NVFP4_BACKEND_CUDNN, Format::kNvfp4, "sm_110", 110, 119, kCuda | kObjCudnn,
     kCudnnNativeKernels,
     kCudnnNativeShapes,
     "native where cuDNN's block-scale graph supports the device (cuDNN >= 9.7; built, not run on hardware)",
     NVFP4_CUDNN},
    {"cudnn-sm120", NVFP4_BACKEND_CUDNN, Format::kNvfp4, "sm_120", 120, 129, kCuda | kObjCudnn,
     kCudnnNativeKernels,
     kCudnnNativeShapes,
     "native where cuDNN's block-scale graph supports the device (cuDNN >= 9.7; built, not run on hardware)",
     NVFP4_CUDNN},

    // MXFP4 x MXFP4 (E8M0 scales over 32 values, alpha = 1). Hopper: the same two-step
    // emulation as NVFP4's (the fused small-M kernel is NVFP4-only).
    {"reference-mxfp4", NVFP4_BACKEND_REFERENCE, Format::kMxfp4, "cpu", 0, 0, 0, "", "K % 32 == 0",
     "MXFP4 CPU reference: decoded values, float64 accumulation", true, nullptr, nullptr, &reference_workspace,
     &reference_run},
    {"cutlass-sm90-mxfp4", NVFP4_BACKEND_CUTLASS, Format::kMxfp4, "sm_90", 90, 90, kCuda | kObjSm90,
     kSm90TwoStepKernels, "K % 32 == 0",
     "MXFP4 exact emulation: MXFP4 -> BF16 decode + CUTLASS sm90 BF16 GEMM (TMA, wgmma), bias/beta*C in its "
     "epilogue",
     NVFP4_SM90_TWO_STEP},
    {"cutlass-sm100-mxfp4", NVFP4_BACKEND_CUTLASS, Format::kMxfp4, "sm_100", 100, 109, kCuda | kObjSm100,
     kSm100Kernels,
     kBlockscaledMxShapes,
     "MXFP4 native: CUTLASS sm100 block-scaled GEMM on mx_float4 (built, not run on hardware)", NVFP4_SM100_MX},
    {"cutlass-sm110-mxfp4", NVFP4_BACKEND_CUTLASS, Format::kMxfp4, "sm_110", 110, 119, kCuda | kObjSm100,
     kSm100Kernels,
     kBlockscaledMxShapes,
     "MXFP4 native: the sm100 mx_float4 GEMM compiled for sm_110 (built, not run on hardware)", NVFP4_SM100_MX},
    {"cutlass-sm120-mxfp4", NVFP4_BACKEND_CUTLASS, Format::kMxfp4, "sm_120", 120, 129, kCuda | kObjSm120,
     kSm120Kernels,
     kBlockscaledMxShapes,
     "MXFP4 native: CUTLASS sm120 block-scaled GEMM on mx_float4 (built, not run on hardware)", NVFP4_SM120_MX},
    {"cudnn-sm90-mxfp4", NVFP4_BACKEND_CUDNN, Format::kMxfp4, "sm_90", 90, 90, kCuda | kObjCudnn,
     kCudnnEmulationKernels, "K % 32 == 0",
     "MXFP4 exact emulation: MXFP4 -> BF16 decode + cuDNN BF16 matmul graph (cuDNN 9)", NVFP4_CUDNN},
    {"cudnn-sm100-mxfp4", NVFP4_BACKEND_CUDNN, Format::kMxfp4, "sm_100", 100, 109, kCuda | kObjCudnn,
     kCudnnNativeKernels, kCudnnNativeShapes,
     "MXFP4 native: cuDNN block_scale_dequantize (E8M0, 32-value blocks) + matmul graph (cuDNN >= 9.7; built, "
     "not run on hardware)",
     NVFP4_CUDNN},
    {"cudnn-sm110-mxfp4", NVFP4_BACKEND_CUDNN, Format::kMxfp4, "sm_110", 110, 119, kCuda | kObjCudnn,
     kCudnnNativeKernels, kCudnnNativeShapes,
     "MXFP4 native where cuDNN's block-scale graph supports the device (cuDNN >= 9.7; built, not run on hardware)",
     NVFP4_CUDNN},
    {"cudnn-sm120-mxfp4", NVFP4_BACKEND_CUDNN, Format::kMxfp4, "sm_120", 120, 129, kCuda | kObjCudnn,
     kCudnnNativeKernels, kCudnnNativeShapes,
     "MXFP4 native where cuDNN's block-scale graph supports the device (cuDNN >= 9.7; built, not run on hardware)",
     NVFP4_CUDNN},

    // Grouped (MoE) GEMMs of nvfp4_grouped_gemm (the job's `grouped`, grouped.h): every group as
    // nvfp4_gemm computes it on that group's operands.
    {"reference-grouped", NVFP4_BACKEND_REFERENCE, Format::kNvfp4Grouped, "cpu", 0, 0, 0, "", "any shape",
     "grouped CPU reference: the dense reference on each group's slices", true, nullptr, nullptr,
     &reference_workspace, &grouped_reference_run},
    NVFP4_GROUPED_ROWS
};
constexpr int kRunnerCount = static_cast<int>(sizeof(kRunners) / sizeof(kRunners[0]));
constexpr int kMaxCc = 255;  // compute capabilities cached by runner_compiled_for

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

bool serves(const Runner& r, nvfp4_backend_t backend) {
  if (backend == NVFP4_BACKEND_AUTO) return r.backend != NVFP4_BACKEND_REFERENCE;
  return r.backend == backend;
}

const char* format_name(Format f) {
  return f == Format::kMxfp4 ? "mxfp4" : f == Format::kNvfp4Grouped ? "nvfp4-grouped" : "nvfp4";
}

// The shape rules of the rows that could have taken the job, for a refusal message.
std::string runner_hints(const GemmJob& job, nvfp4_backend_t backend, int cc) {
  std::string s;
  for (const Runner& r : kRunners) {
    if (r.format != job.format || !serves(r, backend) || !runner_usable(r, cc)) continue;
    s += (s.empty() ? " (" : "; ") + std::string(r.name) + " takes " + r.shapes;
  }
  return s.empty() ? s : s + ")";
}

// What each runner of `backend` for operands of format `fmt` would need, for the refusal
// message.
nvfp4_status_t not_supported(nvfp4_backend_t b, int cc, Format fmt) {
  if (b == NVFP4_BACKEND_REFERENCE)
    return fail(NVFP4_ERROR_NOT_SUPPORTED,
                "backend: 'reference' runs on CPU tensors only; CUDA tensors use 'cutlass', 'cudnn' or 'auto'");
  std::string msg = std::string("backend: '") + backend_name(b) + "' cannot run " + format_name(fmt) +
                    " GEMMs on this GPU (compute capability " + cc_str(cc) + ")";
  std::string seen;
  bool any = false;
  for (const Runner& r : kRunners) {
    if (r.backend == NVFP4_BACKEND_REFERENCE || r.format != fmt || !serves(r, b)) continue;
    const std::string fam = std::string(backend_name(r.backend)) + " " + r.family;
    if (seen.find("|" + fam + "|") != std::string::npos) continue;
    seen += "|" + fam + "|";
    msg += any ? "; " : ". ";
    any = true;
    msg += fam + " (compute capability " + cc_str(r.cc_min) + (r.cc_max > r.cc_min ? "-" + cc_str(r.cc_max) : "") +
           "): ";
    if (!r.built) {
      msg += r.backend == NVFP4_BACKEND_CUDNN ? "not in this build (no cuDNN frontend headers at build time)"
                                              : "not in this build";
      continue;
    }
    msg += "kernels built for ";
    uint32_t own = r.objects & ~kObjCommon;
    const char* t = object_targets(own != 0 ? own : kObjCommon);
    msg += *t ? std::string(t) : std::string("no target");
    if (r.backend == NVFP4_BACKEND_CUDNN) msg += ", needs cuDNN 9 (>= 9.7 on Blackwell) at run time";
  }
  msg += std::string(". Build with NVFP4_CUDA_ARCHS=native on this machine, or list a target for it (")
         + "90a, 100f, 110f, 120f); this build has: " + (*NVFP4_CUDA_ARCHS_STRING ? NVFP4_CUDA_ARCHS_STRING : "none");
  if (b == NVFP4_BACKEND_CUDNN)
    msg += ". NVFP4_CUDNN_PATH points nvfp4 at a libcudnn.so.9";
  return fail(NVFP4_ERROR_NOT_SUPPORTED, msg);
}

// The row that runs a CUDA job, or a failure (no CUDA, or nothing usable).
// Whether a row reads an operand's decoded values where the job gives them (GemmJob::a_dec):
// the Hopper two-step path, which otherwise decodes the codes to BF16 itself.
// NVFP4_SM90_DECODED=0 (a benchmark knob) makes it decline them: nvfp4_gemm_takes_decoded
// then says 0, and callers that ask it take the codes road.
bool takes_decoded(const Runner& r) {
#if defined(NVFP4_HAS_SM90_GEMM)
  const char* off = setting("NVFP4_SM90_DECODED");
  if (off != nullptr && std::strcmp(off, "0") == 0) return false;
  return r.format == Format::kNvfp4 && (r.run == &sm90_two_step_run || r.run == &sm90_rs_run);
#else
  (void)r;
  return false;
#endif
}

nvfp4_status_t select(const GemmJob& job, nvfp4_backend_t backend, int& cc, const Runner*& out) {
  out = nullptr;
#if defined(NVFP4_WITH_CUDA)
  cc = gpu::current_compute_capability();
  if (cc == 0) return fail(NVFP4_ERROR_CUDA, "gemm: cannot query the current CUDA device");
  // A job with a decoded operand (no codes) goes only to a row that takes decoded operands.
  const bool decoded = job.a_dec != nullptr || job.b_dec != nullptr;
  bool usable_row = false;
  for (const Runner& r : kRunners) {
    if (r.format != job.format || !serves(r, backend) || !runner_usable(r, cc)) continue;
    if (decoded && !takes_decoded(r)) continue;
    usable_row = true;
    if (r.accepts == nullptr || r.accepts(job, cc)) {
      out = &r;
      return NVFP4_SUCCESS;
    }
  }
  if (usable_row)
    return fail(NVFP4_ERROR_NOT_SUPPORTED, std::string("backend: no '") + backend_name(backend) + "' " +
                                               format_name(job.format) + " runner on compute capability " +
                                               cc_str(cc) + " takes M=" + std::to_string(job.m) +
                                               " N=" + std::to_string(job.n) + " K=" + std::to_string(job.k) +
                                               runner_hints(job, backend, cc));
  if (decoded)
    return fail(NVFP4_ERROR_NOT_SUPPORTED,
                std::string("a_decoded/b_decoded: no '") + backend_name(backend) + "' runner on compute capability " +
                    cc_str(cc) + " takes decoded operands (the Hopper two-step path does; pass the codes)");
  return not_supported(backend == NVFP4_BACKEND_AUTO ? NVFP4_BACKEND_CUTLASS : backend, cc, job.format);
#else
  (void)job;
  (void)backend;
  cc = 0;
  return fail(NVFP4_ERROR_NOT_SUPPORTED, "gemm: this nvfp4 build has no CUDA support (built without nvcc)");
#endif
}

// Parses "100f" into (100, 'f'); false on anything else.
bool parse_target(const std::string& t, int& cc, char& kind) {
  size_t i = 0;
  cc = 0;
  while (i < t.size() && t[i] >= '0' && t[i] <= '9') cc = cc * 10 + (t[i++] - '0');
  if (i == 0 || cc < 10) return false;
  kind = i < t.size() ? t[i++] : ' ';
  return i == t.size() && (kind == ' ' || kind == 'a' || kind == 'f');
}

bool any_target_runs_on(const char* list, int cc) {
  std::string s = list;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(';', start);
    if (end == std::string::npos) end = s.size();
    if (end > start && target_runs_on(s.substr(start, end - start).c_str(), cc)) return true;
    start = end + 1;
  }
  return false;
}

}  // namespace

int runner_count() { return kRunnerCount; }

const Runner* runner_at(int index) { return index >= 0 && index < kRunnerCount ? &kRunners[index] : nullptr; }

const char* object_targets(uint32_t object) {
  switch (object) {
    case kObjCommon: return NVFP4_TARGETS_COMMON;
    case kObjSm90: return NVFP4_TARGETS_SM90;
    case kObjSm100: return NVFP4_TARGETS_SM100;
    case kObjSm120: return NVFP4_TARGETS_SM120;
    case kObjCudnn: return NVFP4_TARGETS_CUDNN;
    default: return "";
  }
}

bool target_runs_on(const char* target, int cc) {
  int t = 0;
  char kind = ' ';
  if (target == nullptr || !parse_target(target, t, kind)) return false;
  if (kind == 'a') return cc == t;
  // 10.1 (Thor, as CUDA 12 named it; CUDA 13 calls it 11.0) is a family of its own: the
  // sm_100 family (10.0, 10.3) does not include it.
  if (cc == 101 || t == 101) return cc == t;
  // Family ("f") and plain cubins run on later minor versions of the same major one
  // (sm_100f on 10.0 and 10.3, sm_120f on 12.0 and 12.1), never across majors.
  return cc / 10 == t / 10 && cc >= t;
}

bool runner_compiled_for(const Runner& r, int cc) {
  if (!r.built) return false;
  if (r.backend == NVFP4_BACKEND_REFERENCE) return cc == 0;
  if (cc < r.cc_min || cc > r.cc_max) return false;
  // Answered once per (row, cc): dispatch asks on every GEMM call, and the answer is fixed
  // at build time. 0 = not yet known, 1 = yes, 2 = no.
  static std::atomic<uint8_t> known[kRunnerCount][kMaxCc + 1];
  const auto row = static_cast<size_t>(&r - kRunners);
  const bool cacheable = row < static_cast<size_t>(kRunnerCount) && cc >= 0 && cc <= kMaxCc;
  if (cacheable) {
    if (const uint8_t v = known[row][cc].load(std::memory_order_relaxed); v != 0) return v == 1;
  }
  bool ok = true;
  for (uint32_t bit = 1; ok && bit != 0 && bit <= r.objects; bit <<= 1)
    if ((r.objects & bit) != 0 && !any_target_runs_on(object_targets(bit), cc)) ok = false;
  if (cacheable) known[row][cc].store(ok ? 1 : 2, std::memory_order_relaxed);
  return ok;
}

bool runner_usable(const Runner& r, int cc) {
  return runner_compiled_for(r, cc) && (r.available == nullptr || r.available(cc));
}

int backend_supported(nvfp4_backend_t backend, int cc) {
  if (cc == 0) return backend == NVFP4_BACKEND_REFERENCE || backend == NVFP4_BACKEND_AUTO;
  for (const Runner& r : kRunners)
    if (serves(r, backend) && runner_usable(r, cc)) return 1;
  return 0;
}

nvfp4_status_t gemm_workspace_size(const GemmJob& job, nvfp4_backend_t backend, bool on_cuda, size_t* bytes) {
  *bytes = 0;
  if (!on_cuda) return NVFP4_SUCCESS;  // the reference needs none; gemm_run reports a bad backend
  int cc = 0;
  const Runner* r = nullptr;
  if (nvfp4_status_t s = select(job, backend, cc, r); s != NVFP4_SUCCESS) return s;
  return r->workspace(job, cc, bytes);
}

nvfp4_status_t gemm_takes_decoded(const GemmJob& job, nvfp4_backend_t backend, bool on_cuda, int* takes) {
  *takes = 0;
  if (!on_cuda) return NVFP4_SUCCESS;
  int cc = 0;
  const Runner* r = nullptr;
  if (nvfp4_status_t s = select(job, backend, cc, r); s != NVFP4_SUCCESS) return s;
  *takes = takes_decoded(*r) ? 1 : 0;
  return NVFP4_SUCCESS;
}

nvfp4_status_t gemm_run(const GemmJob& job, nvfp4_backend_t backend, bool on_cuda, void* workspace,
                        size_t workspace_bytes, nvfp4_stream_t stream) {
  if (!on_cuda) {
    if (backend != NVFP4_BACKEND_AUTO && backend != NVFP4_BACKEND_REFERENCE)
      return fail(NVFP4_ERROR_NOT_SUPPORTED, std::string("backend: '") + backend_name(backend) +
                                                 "' needs CUDA tensors; CPU tensors use the reference backend");
    for (const Runner& r : kRunners)
      if (r.backend == NVFP4_BACKEND_REFERENCE && r.format == job.format)
        return r.run(job, 0, workspace, workspace_bytes, stream);
    return fail(NVFP4_ERROR_INTERNAL, "gemm: no reference runner for this operand format");
  }
  int cc = 0;
  const Runner* r = nullptr;
  if (nvfp4_status_t s = select(job, backend, cc, r); s != NVFP4_SUCCESS) return s;
  return r->run(job, cc, workspace, workspace_bytes, stream);
}

}  // namespace nvfp4::detail
