// The GEMM runners and the one table that chooses between them (dispatch.cpp).
//
// A runner is one way to compute D = alpha * (A^ @ B^T) + beta * C + bias for one
// operand format on one architecture family. Every runner is a row of kRunners
// (dispatch.cpp): the backend it serves, the format of its operands, the compute
// capabilities it is written for, the kernel objects it launches, a shape rule, its
// workspace query and its run function, and a description for people. dispatch.cpp
// walks the rows in order and takes the first that is compiled for the device, usable at
// run time and accepts the shape; nvfp4.device_info() reads the same rows through the C
// API (nvfp4_runner_info). A new format (MXFP4) or architecture is new rows, not new
// switch statements.
//
// Entry points get a GemmJob that api.cpp has validated; all pointers are on the current
// CUDA device; for NVFP4, alpha = S_dec(A) * S_dec(B) is computed on the device from
// amax_a / amax_b (no host synchronization); MXFP4 has no per-tensor scale (alpha = 1).
// A row serves one operand format (Runner::format); dispatch never hands it another. Each runner is compiled only where its architecture is
// built (the NVFP4_HAS_* macros are set by cmake/nvfp4_gemm.cmake on the host objects).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "internal.h"

namespace nvfp4::detail {

// ---- runner entry points ----

#if defined(NVFP4_HAS_SM90_GEMM)
// Hopper, exact emulation (FP4 -> BF16 decode, BF16 tensor cores, FP32 accumulation).
// The fused small-M kernels (sm90_small_m*.{h,cpp,cu}), no workspace: each row accepts a
// job when the small-M plan names its kernel (streaming, M <= 32; ring, M <= 128), and
// runs that plan.
bool sm90_small_m_stream_accepts(const GemmJob& job);
nvfp4_status_t sm90_small_m_stream_run(const GemmJob& job, nvfp4_stream_t stream);
bool sm90_small_m_ring_accepts(const GemmJob& job);
nvfp4_status_t sm90_small_m_ring_run(const GemmJob& job, nvfp4_stream_t stream);
// FP4-reading warp-specialized wgmma GEMM (sm90_direct.cu): no workspace; opt-in
// (NVFP4_SM90_DIRECT=1) while it is measured against the two-step path.
bool sm90_direct_applicable(const GemmJob& job);
nvfp4_status_t sm90_direct_gemm(const GemmJob& job, nvfp4_stream_t stream);
// A read as FP4 and decoded in registers (sm90_rs.cu), B decoded (or as codes, decoded into
// the workspace first): chosen where it beats the two-step path on the same operands (N <=
// 768 and 90% of a wave of tiles), everywhere it runs with NVFP4_SM90_RS=1, nowhere with
// NVFP4_SM90_RS=0.
bool sm90_rs_applicable(const GemmJob& job);
size_t sm90_rs_workspace_size(const GemmJob& job);
nvfp4_status_t sm90_rs_gemm(const GemmJob& job, void* workspace, size_t workspace_bytes, nvfp4_stream_t stream);
// Decode to BF16 + CUTLASS wgmma GEMM (sm90_gemm.cu), any shape.
size_t sm90_gemm_workspace_size(const GemmJob& job);
nvfp4_status_t sm90_gemm(const GemmJob& job, void* workspace, size_t workspace_bytes, nvfp4_stream_t stream);
#endif

#if defined(NVFP4_WITH_CUDA)
// gemm/common/decode.cu (every CUDA build): decode an FP4 operand [rows, k] to BF16
// (value * block scale, without the per-tensor scale, exact), row-major; mx: MXFP4 (E8M0
// scales over 32 values) rather than NVFP4.
nvfp4_status_t sm90_decode_bf16(const uint8_t* data, const uint8_t* scales, bool mx, int64_t rows, int64_t k,
                                nvfp4_scale_layout_t layout, void* out_bf16, nvfp4_stream_t stream);
#endif

#if defined(NVFP4_HAS_SM100_GEMM) || defined(NVFP4_HAS_SM120_GEMM)
// Blackwell, native: one architecture's CUTLASS block-scaled GEMMs (three NVFP4 kernels, one
// per output dtype, and one MXFP4 kernel with BF16 output), all from one template
// (gemm/common/sm1xx_blockscaled.cuh) instantiated by gemm/sm100/sm100_gemm.cu and
// gemm/sm120/sm120_gemm.cu, each compiled for its own targets only. No CUTLASS type here.
struct BlockscaledGemms {
  const char* arch;  // "sm100", "sm120": names the kernels in messages
  size_t (*workspace_size)(const GemmJob& job);
  // Host-only check (no launch): what CUTLASS's can_implement says of this problem.
  nvfp4_status_t (*can_implement)(const GemmJob& job);
  nvfp4_status_t (*run)(const GemmJob& job, void* workspace, size_t workspace_bytes, nvfp4_stream_t stream);
  // The MXFP4 rows take BF16 outputs only (the one MXFP4 kernel instantiated).
  bool (*mx_applicable)(const GemmJob& job);
  // Host-only hooks for the build checks (gemm/checks.cpp, tests/cpp/test_blackwell_host.cpp):
  // "" when the scale-factor layout CUTLASS computes for an operand of `rows` rows and inner
  // size k equals core::swizzle_offset everywhere in the padded range (SFA and SFB role,
  // every output dtype's kernel), else the first difference; the dynamic shared memory of
  // the output dtype's kernel and, in *limit, the per-block maximum of the target it was
  // checked against at compile time (0 bytes for a dtype without a kernel). mx_*: the same
  // for the MXFP4 kernel.
  std::string (*compare_scale_layout)(int64_t rows, int64_t k);
  int (*smem_bytes)(nvfp4_dtype_t d, int* limit);
  std::string (*mx_compare_scale_layout)(int64_t rows, int64_t k);
  int (*mx_smem_bytes)(nvfp4_dtype_t d, int* limit);
};
#endif
#if defined(NVFP4_HAS_SM100_GEMM)
const BlockscaledGemms& sm100_gemms();  // sm_100 family and sm_110: tcgen05, 2-SM MMA
#endif
#if defined(NVFP4_HAS_SM120_GEMM)
const BlockscaledGemms& sm120_gemms();  // sm_120 family: warp-level block-scaled MMA
#endif

#if defined(NVFP4_HAS_CUDNN)
// cc: compute capability of the current device (major*10+minor).
nvfp4_status_t cudnn_gemm_workspace_size(const GemmJob& job, int cc, size_t* bytes);
nvfp4_status_t cudnn_gemm(const GemmJob& job, int cc, void* workspace, size_t workspace_bytes,
                          nvfp4_stream_t stream);
// 1 if libcudnn.so.9 can be loaded and is recent enough for the graphs used on a device
// of compute capability cc (cuDNN 9 on Hopper, >= 9.7 on Blackwell); never throws.
int cudnn_available(int cc);
// Host only, no GPU: defines the fused and the separate-epilogue graph of the path used on
// cc (for NVFP4 or, mx, MXFP4 operands) for a set of problems (shapes, output dtypes, with and without bias and C) and runs
// the frontend's validate() on each. Needs a loadable libcudnn.so.9 (its version decides
// what validate() accepts); *checked = graphs validated.
nvfp4_status_t cudnn_check_graphs(int cc, bool mx, int* checked);
#endif


// Grouped (MoE) GEMMs: the CPU reference (api_grouped.cpp) and the Hopper runner
// (sm90/sm90_grouped.cu); the job's `grouped` holds the grouped problem (grouped.h).
nvfp4_status_t grouped_reference_run(const GemmJob& job, int cc, void* workspace, size_t workspace_bytes,
                                     nvfp4_stream_t stream);
#if defined(NVFP4_HAS_SM100_GEMM)
// Native Blackwell grouped runners (sm100/sm100_grouped.cu, sm120/sm120_grouped.cu): the
// block-scaled ptr-array grouped GEMM on the FP4 operands; *_self_check: host-only checks.
bool sm100_grouped_applicable(const GroupedGemmJob& job);
nvfp4_status_t sm100_grouped_workspace(const GemmJob& job, int cc, size_t* bytes);
nvfp4_status_t sm100_grouped_run(const GemmJob& job, int cc, void* workspace, size_t workspace_bytes,
                                 nvfp4_stream_t stream);
nvfp4_status_t sm100_grouped_self_check(int* checked);
#endif
#if defined(NVFP4_HAS_SM120_GEMM)
bool sm120_grouped_applicable(const GroupedGemmJob& job);
nvfp4_status_t sm120_grouped_workspace(const GemmJob& job, int cc, size_t* bytes);
nvfp4_status_t sm120_grouped_run(const GemmJob& job, int cc, void* workspace, size_t workspace_bytes,
                                 nvfp4_stream_t stream);
nvfp4_status_t sm120_grouped_self_check(int* checked);
#endif
#if defined(NVFP4_HAS_SM90_GEMM)
bool sm90_grouped_applicable(const GroupedGemmJob& job);
nvfp4_status_t sm90_grouped_workspace(const GemmJob& job, int cc, size_t* bytes);
nvfp4_status_t sm90_grouped_run(const GemmJob& job, int cc, void* workspace, size_t workspace_bytes,
                                nvfp4_stream_t stream);
#endif

// ---- the runner table ----

// Kernel objects, one per CMake OBJECT library, each compiled for its own list of CUDA
// targets (cmake/nvfp4_gemm.cmake writes the lists into nvfp4_build_config.h). A runner
// names every object whose kernels it may launch; it is usable on a device only if each
// of them holds an image that runs there.
enum KernelObject : uint32_t {
  kObjCommon = 1u << 0,  // quant/*.cu, gemm/common/*.cu: quantization, FP4 decode, epilogues
  kObjSm90 = 1u << 1,    // gemm/sm90/*.cu
  kObjSm100 = 1u << 2,   // gemm/sm100/*.cu
  kObjSm120 = 1u << 3,   // gemm/sm120/*.cu
  kObjCudnn = 1u << 4,   // gemm/cudnn/*.cu (the cuDNN runner's own small kernels)
};

struct Runner {
  const char* name;         // unique, e.g. "cutlass-sm100"
  nvfp4_backend_t backend;
  Format format;
  const char* family;       // "cpu", "sm_90", "sm_100", "sm_110", "sm_120"
  int cc_min, cc_max;       // compute capabilities it is written for (0, 0: the CPU)
  uint32_t objects;         // KernelObject bits
  // Regular expressions, ';'-separated, each matching the name of a device function the
  // runner launches, demangled where the demangler copes (CUTLASS's kernel names are often
  // left mangled, so their patterns hold only plain identifiers): the build checks look
  // each one up in the library.
  const char* kernels;
  const char* shapes;       // the shape rule, in words
  const char* description;
  bool built;               // its code is compiled into this library
  // Shape rule: does this row take the job (null: every job)? cc is the device's.
  bool (*accepts)(const GemmJob& job, int cc);
  // Run-time condition beyond the compiled images (a loadable cuDNN); null: none.
  bool (*available)(int cc);
  nvfp4_status_t (*workspace)(const GemmJob& job, int cc, size_t* bytes);
  nvfp4_status_t (*run)(const GemmJob& job, int cc, void* workspace, size_t workspace_bytes,
                        nvfp4_stream_t stream);
};

int runner_count();
const Runner* runner_at(int index);  // null when out of range
// ';'-separated CUDA targets one kernel object was compiled for ("" when not built).
const char* object_targets(uint32_t object);
// True if a cubin for `target` ("90a", "100f", "120", ...) runs on compute capability cc:
// an arch-specific target ("a") on exactly its cc, a family target ("f") on every cc of
// its family from its own on, a plain target on every cc of its major version from its own
// (10.1, Thor before CUDA 13, being a family of its own).
bool target_runs_on(const char* target, int cc);
// Every kernel object of the row has an image for cc, and cc is one the row is written for.
bool runner_compiled_for(const Runner& r, int cc);
// runner_compiled_for, and its run-time condition holds.
bool runner_usable(const Runner& r, int cc);
// Host-only checks of one runner that need no GPU (scale layout, can_implement, shared
// memory, cuDNN graph validation), in gemm/checks.cpp; *checked = checks run (0: the
// runner has none, or is not built).
nvfp4_status_t runner_self_check(const Runner& r, int* checked);

// ---- dispatch (api.cpp) ----
int backend_supported(nvfp4_backend_t backend, int cc);
nvfp4_status_t gemm_workspace_size(const GemmJob& job, nvfp4_backend_t backend, bool on_cuda, size_t* bytes);
// *takes = 1 if the runner chosen for job reads decoded operands (GemmJob::a_dec / b_dec).
nvfp4_status_t gemm_takes_decoded(const GemmJob& job, nvfp4_backend_t backend, bool on_cuda, int* takes);
nvfp4_status_t gemm_run(const GemmJob& job, nvfp4_backend_t backend, bool on_cuda, void* workspace,
                        size_t workspace_bytes, nvfp4_stream_t stream);

}  // namespace nvfp4::detail
