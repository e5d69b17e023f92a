/*
 * nvfp4 — NVFP4 (E2M1 values, E4M3 scale per 16 values, FP32 scale per tensor).
 * Public C API.
 *
 * Conventions
 *  - Every function returns an nvfp4_status_t; on failure nvfp4_last_error() gives a
 *    message for the calling thread. No C++ exception crosses this boundary.
 *  - Tensors are passed as non-owning descriptors (nvfp4_tensor_t). The library never
 *    allocates device memory: a call that needs scratch space takes a workspace whose
 *    size is given by the matching *_workspace_size query.
 *  - The CUDA stream comes last. It is ignored for CPU tensors. nvfp4_stream_t is
 *    binary-compatible with cudaStream_t.
 *  - All tensors of one call live on the same device (all CPU, or all on one CUDA device).
 *  - Every argument is validated before any memory is touched; a malformed call returns
 *    NVFP4_ERROR_INVALID_ARGUMENT and a message that starts with the parameter's name
 *    (e.g. "rowwise.scales: expected shape [128, 4], got [32, 4]"). What is checked:
 *      . enum fields and parameters hold one of their named values (they are read as
 *        integers, so any int a C caller stores is caught);
 *      . 0 <= ndim <= NVFP4_MAX_DIMS, no negative dimension, and the element count, the
 *        byte count and every size derived from a shape (K = 2 * data.shape[1], padded
 *        and swizzled extents) fit in int64_t;
 *      . a non-null data pointer for every tensor with elements; row-major contiguous
 *        strides (strides of size-1 dimensions are ignored);
 *      . alignment: CUDA pointers (tensors and the GEMM workspace) 16 bytes; CPU pointers
 *        the size of one element (4 bytes for float32, 2 for float16/bfloat16, 8 for
 *        float64, none for uint8/E4M3); cfg.offset_device and cfg.offset_counter 8 bytes;
 *        the float32 scalars of nvfp4_fp8_cast (cfg.scale, scale_inv, amax) 4 bytes on
 *        either device;
 *      . outputs share no byte with the inputs or with each other (nvfp4_gemm's c may be
 *        d itself), and the GEMM workspace overlaps none of the operands.
 *    What cannot be checked is the caller's promise: that each pointer addresses memory
 *    of the size its descriptor states, on the device it names.
 *
 * Quantized tensor layout (a "2D" view [R, C] of the input, leading dims flattened; C % 16 == 0
 * for either output: the kernels read x in tiles of 16 columns, and a 2D block is 16x16):
 *  - rowwise:    quantization of x [R, C] in blocks of 16 along C.
 *      data   uint8 [R, C/2], two E2M1 codes a byte, element 2i in the low nibble.
 *      scales E4M3  [R, C/16] (linear) or [roundup(R,128), roundup(C/16,4)] (swizzled).
 *  - columnwise: quantization of x^T [C, R] in blocks of 16 along R, stored as x^T.
 *      With Rp = roundup(R, 16): data uint8 [C, Rp/2] (codes past R are 0);
 *      scales E4M3 [C, Rp/16] (linear) or [roundup(C,128), roundup(Rp/16,4)] (swizzled).
 *  - amax: float32 [1], max |x| of the values quantized (after the RHT where it applies);
 *    the recipe options of 0.3 change what it holds (float32 [rows] with NVFP4_AMAX_ROWS,
 *    the given amax, fl(1.75 amax) with e4m3_bound 256, MS-EDEN's scale; see
 *    nvfp4_quant_config_t), always so that 1 / S_enc(amax) is the decode scale.
 *    The per-tensor decode scale is 1 / S_enc with S_enc = min(448 * 6 / amax, FLT_MAX)
 *    (see docs/design.md, "Numerics").
 */
#ifndef NVFP4_NVFP4_H
#define NVFP4_NVFP4_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define NVFP4_API __declspec(dllexport)
#else
#define NVFP4_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The version of nvfp4: the one place it is written. CMakeLists.txt, pyproject.toml and
 * nvfp4_version_string() read it from here. */
#define NVFP4_VERSION_MAJOR 0
#define NVFP4_VERSION_MINOR 3
#define NVFP4_VERSION_PATCH 0

typedef struct CUstream_st* nvfp4_stream_t; /* same type as cudaStream_t */

typedef enum {
  NVFP4_SUCCESS = 0,
  NVFP4_ERROR_INVALID_ARGUMENT = 1, /* null pointer, bad enum, shape, dtype, alignment */
  NVFP4_ERROR_NOT_SUPPORTED = 2,    /* valid request this build or device cannot run */
  NVFP4_ERROR_CUDA = 3,             /* a CUDA runtime call failed (message has the code) */
  NVFP4_ERROR_CUDNN = 4,            /* cuDNN missing or failed */
  NVFP4_ERROR_WORKSPACE = 5,        /* workspace smaller than the size query returned */
  NVFP4_ERROR_INTERNAL = 6
} nvfp4_status_t;

typedef enum {
  NVFP4_DTYPE_FLOAT32 = 0,
  NVFP4_DTYPE_FLOAT16 = 1,
  NVFP4_DTYPE_BFLOAT16 = 2,
  NVFP4_DTYPE_UINT8 = 3,    /* packed E2M1 pairs, or raw bytes */
  NVFP4_DTYPE_E4M3 = 4,     /* float8_e4m3fn */
  NVFP4_DTYPE_FLOAT64 = 5
} nvfp4_dtype_t;

typedef enum { NVFP4_DEVICE_CPU = 0, NVFP4_DEVICE_CUDA = 1 } nvfp4_device_type_t;

#define NVFP4_MAX_DIMS 8

/* A strided view. Strides are in elements (a uint8 tensor of packed codes counts bytes).
 * The quantization and GEMM entry points require row-major contiguous tensors. */
typedef struct {
  void* data;
  nvfp4_dtype_t dtype;
  int32_t ndim;
  int64_t shape[NVFP4_MAX_DIMS];
  int64_t strides[NVFP4_MAX_DIMS];
  nvfp4_device_type_t device_type;
  int32_t device_id;
} nvfp4_tensor_t;

typedef enum { NVFP4_BLOCK_1D = 0, NVFP4_BLOCK_2D = 1 } nvfp4_block_t;
/* NVFP4_ROUND_EDEN (0.3): MS-EDEN (Quartet II), an unbiased alternative to stochastic rounding
 * for gradients: codes rounded to nearest, the block scale corrected and rounded
 * stochastically (docs/design.md §1.6). Needs the RHT on every output it quantizes. */
typedef enum { NVFP4_ROUND_NEAREST = 0, NVFP4_ROUND_STOCHASTIC = 1, NVFP4_ROUND_EDEN = 2 } nvfp4_rounding_t;
typedef enum { NVFP4_SCALES_LINEAR = 0, NVFP4_SCALES_SWIZZLED = 1 } nvfp4_scale_layout_t;

/* 0.3: block scale selection and the source of the per-tensor amax (nvfp4_quant_config_t). */
typedef enum {
  NVFP4_SELECT_NONE = 0,
  NVFP4_SELECT_4OVER6_MAE = 1, /* keep the candidate with the smaller sum of |error| */
  NVFP4_SELECT_4OVER6_MSE = 2  /* ... of squared error */
} nvfp4_scale_select_t;
typedef enum { NVFP4_AMAX_TENSOR = 0, NVFP4_AMAX_ROWS = 1, NVFP4_AMAX_GIVEN = 2 } nvfp4_amax_mode_t;

/* Which outputs get the Random Hadamard Transform (a bitmask). */
#define NVFP4_RHT_NONE 0u
#define NVFP4_RHT_ROWWISE 1u
#define NVFP4_RHT_COLUMNWISE 2u

typedef struct {
  nvfp4_block_t block;             /* 1D: 1x16 blocks; 2D: 16x16 tiles (weights) */
  nvfp4_rounding_t rounding;
  nvfp4_scale_layout_t scale_layout;
  uint32_t rht;                    /* NVFP4_RHT_* mask; 1D blocks only */
  uint32_t rht_sign_mask;          /* bit i (0..15) set: sign -1 for lane i; bits 16..31 must be 0;
                                      see nvfp4_default_rht_sign_mask */
  uint64_t seed;                   /* stochastic rounding: Philox4x32-10 key */
  uint64_t offset;                 /* stochastic rounding: counter offset */
  /* Optional (NULL: unused): address of a 64-bit counter in the input's memory space (device
   * memory for CUDA inputs, host memory for CPU inputs, 8-byte aligned) whose value is added
   * to `offset` when the work runs, not when the call is made. A CUDA graph that captured the
   * call then draws fresh random bits on each replay as long as something advances the
   * counter on the device. The sum wraps modulo 2^64. */
  const uint64_t* offset_device;
  /* ---- 0.3: recipe options (docs/design.md §1.6). The defaults are the contract. ---- */
  /* 4over6 block scale selection (TransformerEngine's nvfp4_4over6): each block keeps the
   * map-to-4 or map-to-6 candidate with the smaller error. Round-to-nearest only, no RHT. */
  nvfp4_scale_select_t scale_select;
  /* The E4M3 value the per-tensor scale maps the amax to: 448 (the contract) or 256 (only with
   * a 4over6 selection). With 256 the stored amax is fl(amax * 1.75), so that decoders and
   * GEMMs read the tensor with the contract's formula. */
  uint32_t e4m3_bound;
  /* Where the per-tensor amax comes from: the tensor (default); one per row of each output
   * (NVFP4_AMAX_ROWS: rowwise amax float32 [rows], columnwise float32 [cols], i.e. one per
   * row of x^T; 1D, no RHT; TransformerEngine's row-scaled NVFP4); or
   * amax_in (NVFP4_AMAX_GIVEN: float32 [1] in the input's memory space, read when the work
   * runs; e.g. a percentile of |x|: values above it saturate to +-amax). */
  nvfp4_amax_mode_t amax_mode;
  const float* amax_in;
  /* Optional (NULL: unused): a counter read like offset_device (its value added to `offset`
   * when the work runs; the input's memory space, 8-byte aligned) that the call then advances
   * by one (mod 2^64), in stream order after every read of it by this call's work, on the CPU
   * before the call returns; once per call, an empty input included. A training step's
   * gradient quantization draws new bits on each call, and on each replay of a CUDA graph that
   * captured it, without a separate increment. With the workspace form (nvfp4_quantize_ws,
   * nvfp4_quantize_decoded_ws) and the default recipe options (no scale selection, bound 448,
   * the tensor's own amax, no EDEN), the amax pass advances it and keeps the value read in the
   * workspace for the quantize pass: no launch of its own; otherwise one small kernel after
   * the quantize pass does. Not together with offset_device. nvfp4_quantize(_ws) and
   * nvfp4_quantize_decoded(_ws) only: the grouped and batched forms refuse it. */
  uint64_t* offset_counter;
} nvfp4_quant_config_t;

/* Fills *cfg with: 1D, round-to-nearest, swizzled scales, no RHT, default signs, seed 0,
 * offset 0, no offset_device; no scale selection, bound 448, the tensor's own amax; no
 * offset_counter. */
NVFP4_API void nvfp4_quant_config_default(nvfp4_quant_config_t* cfg);
NVFP4_API uint32_t nvfp4_default_rht_sign_mask(void);

/* One direction of a quantized tensor (see the layout notes at the top). */
typedef struct {
  nvfp4_tensor_t data;   /* uint8, 2 dims */
  nvfp4_tensor_t scales; /* E4M3 (or uint8), 2 dims, linear or swizzled per the config */
  nvfp4_tensor_t amax;   /* float32 [1]; written by nvfp4_quantize */
} nvfp4_quantized_t;

/* Quantizes input (float32/float16/bfloat16, contiguous, last dim % 16 == 0 whichever
 * outputs are requested, a columnwise-only call included; leading dims are flattened into
 * R, which may be any count). rowwise and columnwise may each be NULL, not both. On CUDA
 * nothing is synchronized: amax stays on the device. */
NVFP4_API nvfp4_status_t nvfp4_quantize(const nvfp4_tensor_t* input, const nvfp4_quant_config_t* cfg,
                                        nvfp4_quantized_t* rowwise, nvfp4_quantized_t* columnwise,
                                        nvfp4_stream_t stream);

/* nvfp4_quantize with a workspace: on CUDA the amax pass then writes one partial maximum per
 * CTA into it and the quantize pass reduces them as it starts, instead of the amax outputs
 * being zeroed by two memsets before the amax pass (two launches fewer per call; the same
 * bits). workspace: NVFP4_QUANTIZE_WORKSPACE_BYTES or more, on the input's device, 16-byte
 * aligned, sharing no byte with the input, the outputs or the config's device memory; any
 * contents, nothing kept: like a GEMM workspace it may be reused by work queued after this
 * call on the same stream. NULL with workspace_bytes 0: nvfp4_quantize. Unused on the CPU and
 * where the recipe options (a scale selection, the E4M3 bound 256, one amax per row, a given
 * amax, EDEN) take their own kernels, which zero their amax outputs themselves. */
#define NVFP4_QUANTIZE_WORKSPACE_BYTES 8192
NVFP4_API nvfp4_status_t nvfp4_quantize_ws(const nvfp4_tensor_t* input, const nvfp4_quant_config_t* cfg,
                                           nvfp4_quantized_t* rowwise, nvfp4_quantized_t* columnwise,
                                           void* workspace, size_t workspace_bytes, nvfp4_stream_t stream);

/* out[R, C] = decoded values. The layout of q.scales is given by scale_layout;
 * q.data's shape gives R and C (C = 2 * data.shape[1]). out may be float32/16/bf16. */
NVFP4_API nvfp4_status_t nvfp4_dequantize(const nvfp4_quantized_t* q, nvfp4_scale_layout_t scale_layout,
                                          nvfp4_tensor_t* out, nvfp4_stream_t stream);

/* linear [R, C] <-> swizzled [roundup(R,128), roundup(C,4)] scale bytes; padding zeroed. */
NVFP4_API nvfp4_status_t nvfp4_swizzle_scales(const nvfp4_tensor_t* linear, nvfp4_tensor_t* swizzled,
                                              nvfp4_stream_t stream);
NVFP4_API nvfp4_status_t nvfp4_unswizzle_scales(const nvfp4_tensor_t* swizzled, nvfp4_tensor_t* linear,
                                                nvfp4_stream_t stream);

/* ---- GEMM: D = alpha * (A^ @ B^T) + beta * C (+ bias), alpha = S_dec(A) * S_dec(B) ---- */

typedef enum {
  NVFP4_BACKEND_AUTO = 0,
  NVFP4_BACKEND_REFERENCE = 1, /* CPU, float64 accumulation */
  NVFP4_BACKEND_CUTLASS = 2,
  NVFP4_BACKEND_CUDNN = 3
} nvfp4_backend_t;

typedef struct {
  const nvfp4_quantized_t* a;  /* rowwise-quantized A: data [M, K/2], K-major */
  const nvfp4_quantized_t* b;  /* rowwise-quantized B: data [N, K/2], K-major */
  nvfp4_scale_layout_t scale_layout; /* layout of a->scales and b->scales */
  const nvfp4_tensor_t* c;     /* optional [M, N], read with beta; may alias d */
  const nvfp4_tensor_t* bias;  /* optional [N], same dtype as d (float32 allowed) */
  float beta;
  nvfp4_tensor_t* d;           /* [M, N] float32 / float16 / bfloat16 */
  nvfp4_backend_t backend;
} nvfp4_gemm_args_t;

NVFP4_API nvfp4_status_t nvfp4_gemm_workspace_size(const nvfp4_gemm_args_t* args, size_t* bytes);
NVFP4_API nvfp4_status_t nvfp4_gemm(const nvfp4_gemm_args_t* args, void* workspace, size_t workspace_bytes,
                                    nvfp4_stream_t stream);

/* ---- Decoded operands: the form the Hopper emulation multiplies ----
 * A GEMM that emulates NVFP4 on 16-bit tensor cores first turns every operand into its
 * decoded values: E2M1 value x E4M3 block scale, exact in bfloat16 (the per-tensor scale is
 * applied to the accumulator). A quantization whose output feeds such a GEMM right away can
 * write those values itself, so that the GEMM reads them instead of decoding the codes.
 *   values: bfloat16, [rows, cols] of the orientation (rowwise [R, C]; columnwise
 *           [C, roundup(R,16)], zero past R), contiguous;
 *   amax:   float32 [1], the per-tensor amax of the quantization (alpha is formed from it). */
typedef struct {
  nvfp4_tensor_t values;
  nvfp4_tensor_t amax;
} nvfp4_decoded_t;

/* nvfp4_quantize, with the decoded values of an orientation written where its *_decoded is
 * given. An orientation may have its codes (rowwise / columnwise), its decoded values, or
 * both (then both amax receive the same value); at least one output in all. The values are
 * bit for bit those of the codes it would write (E2M1 x E4M3, rounded to bfloat16: exact).
 * Defined for the default recipe options: scale_select NONE, amax_mode TENSOR, e4m3_bound 448,
 * rounding NEAREST or STOCHASTIC (other configs are refused by name). CPU and CUDA. */
NVFP4_API nvfp4_status_t nvfp4_quantize_decoded(const nvfp4_tensor_t* input, const nvfp4_quant_config_t* cfg,
                                                nvfp4_quantized_t* rowwise, nvfp4_quantized_t* columnwise,
                                                nvfp4_decoded_t* rowwise_decoded,
                                                nvfp4_decoded_t* columnwise_decoded, nvfp4_stream_t stream);
/* nvfp4_quantize_decoded with a workspace, as nvfp4_quantize_ws. */
NVFP4_API nvfp4_status_t nvfp4_quantize_decoded_ws(const nvfp4_tensor_t* input, const nvfp4_quant_config_t* cfg,
                                                   nvfp4_quantized_t* rowwise, nvfp4_quantized_t* columnwise,
                                                   nvfp4_decoded_t* rowwise_decoded,
                                                   nvfp4_decoded_t* columnwise_decoded, void* workspace,
                                                   size_t workspace_bytes, nvfp4_stream_t stream);

/* nvfp4_gemm with either operand given by its decoded values: args->a NULL and a_decoded set
 * (values [M, K]), or args->a set and a_decoded NULL; the same for b ([N, K]). The result is
 * that of nvfp4_gemm on the codes the values came from. Only runners that decode to 16 bits
 * take decoded operands (the Hopper two-step path); nvfp4_gemm_takes_decoded says whether the
 * runner nvfp4_gemm would choose for a problem is one. CUDA only; NVFP4_ERROR_NOT_SUPPORTED
 * where no such runner serves the backend on the device. */
NVFP4_API nvfp4_status_t nvfp4_gemm_decoded_workspace_size(const nvfp4_gemm_args_t* args,
                                                           const nvfp4_decoded_t* a_decoded,
                                                           const nvfp4_decoded_t* b_decoded, size_t* bytes);
NVFP4_API nvfp4_status_t nvfp4_gemm_decoded(const nvfp4_gemm_args_t* args, const nvfp4_decoded_t* a_decoded,
                                            const nvfp4_decoded_t* b_decoded, void* workspace,
                                            size_t workspace_bytes, nvfp4_stream_t stream);
/* *takes = 1 if the runner nvfp4_gemm chooses for args (a full, valid call's arguments) reads
 * decoded operands when given them, else 0 (CPU tensors: 0). */
NVFP4_API nvfp4_status_t nvfp4_gemm_takes_decoded(const nvfp4_gemm_args_t* args, int* takes);

/* ---- capabilities ---- */

/* 1 if `backend` can run on a device of compute capability major*10+minor in this build
 * (cc = 0 means the CPU). Never fails. */
NVFP4_API int nvfp4_backend_supported(nvfp4_backend_t backend, int cc);
/* Number of CUDA devices visible (0 without a driver or GPU). Never fails. */
NVFP4_API int nvfp4_cuda_device_count(void);
/* Compute capability of device `device` as major*10+minor, or 0. Never fails. */
NVFP4_API int nvfp4_cuda_device_cc(int device);
/* The values of the environment variables that steer GEMM dispatch on each call (kernel,
 * tile or cuDNN graph choices: NVFP4_CUDNN_PATH, NVFP4_CUDNN_EPILOGUE, NVFP4_CUDNN_AUTOTUNE,
 * NVFP4_SM90_*), as
 * one string "NAME=value;..." of those that are set. nvfp4_gemm_workspace_size's answer
 * depends on the problem and on this string only: a cache of workspace sizes keyed by the
 * problem must include it. Valid until the next call on this thread. Never fails. */
NVFP4_API const char* nvfp4_gemm_env_key(void);
/* Semicolon-separated list of CUDA architectures compiled in, e.g. "90a;100a;120a". */
NVFP4_API const char* nvfp4_build_cuda_archs(void);
NVFP4_API const char* nvfp4_version_string(void);

NVFP4_API const char* nvfp4_status_string(nvfp4_status_t status);
/* The message of the last failed call on this thread ("" if none). */
NVFP4_API const char* nvfp4_last_error(void);

/* ---- FP8 cast: the per-tensor-scaled FP8 operands of the FP8 baseline recipes ----
 * q = fp8(clamp(float(x) * s, -max, max)): the product rounded once to fp32, the clamp
 * keeping NaN, the conversion rounding to nearest even (max = 448 for E4M3, 57344 for
 * E5M2); a NaN stays NaN with its sign unspecified.
 * Scaling: cfg->scale null: current scaling, s = fl(fl(max * 2^-margin) / amax) with amax =
 *   max |x| (written to *amax first, which is then required); s = FLT_MAX where that
 *   quotient is inf, s = 1 where amax is 0, inf or NaN.
 *   cfg->scale set: delayed scaling, s = scale[0], read when the cast runs; *amax (if
 *   given) still receives max |x| (for an amax history), computed by the cast itself (one
 *   pass over x). With cfg->amax_accumulate = 1 it is combined with what *amax holds
 *   instead: *amax = max(*amax, max |x|), NaN winning, *amax holding a value whose sign
 *   bit is clear (e.g. the zeroed newest slot of an amax history, written in place with no
 *   clearing launch).
 * x: [rows, cols] row-major float32/float16/bfloat16, cols % 16 == 0 (CUDA: 16-byte
 * aligned). Outputs on x's device, each optional but q or qt required: q [rows, cols] and
 * qt [cols, rows] (x transposed), uint8 holding the FP8 bytes; scale_inv float32 [1] = 1/s;
 * amax float32 [1] (NaN if x holds a NaN). No host synchronization. */
typedef enum { NVFP4_FP8_E4M3 = 0, NVFP4_FP8_E5M2 = 1 } nvfp4_fp8_format_t;

typedef struct {
  nvfp4_fp8_format_t format;
  float margin;                /* current scaling only: s = max * 2^-margin / amax */
  const nvfp4_tensor_t* scale; /* optional float32 [1]: delayed scaling */
  int amax_accumulate;         /* 0 or 1; 1: delayed scaling only, amax required (see above) */
} nvfp4_fp8_config_t;

NVFP4_API nvfp4_status_t nvfp4_fp8_cast(const nvfp4_tensor_t* x, const nvfp4_fp8_config_t* cfg, nvfp4_tensor_t* q,
                                        nvfp4_tensor_t* qt, nvfp4_tensor_t* scale_inv, nvfp4_tensor_t* amax,
                                        nvfp4_stream_t stream);

/* Delayed scaling (TransformerEngine's DelayedScaling), the update before a cast, in place:
 *   a = max over history of the entries, a NaN entry counting as 0 (AMAX_MAX), or history[0]
 *       (AMAX_MOST_RECENT);
 *   scale[0] = fl(fl(max * 2^-margin) / a) (FLT_MAX where that is inf) if a is finite and
 *       > 0, else unchanged (max: 448 for E4M3, 57344 for E5M2);
 *   history rolls left by one (entry i takes entry i+1, the last takes the old entry 0), then
 *       history[0] = 0, the slot the next cast's amax goes to.
 * history: float32 [L], L >= 1, contiguous; scale: float32 [1]. Both on one device, 4-byte
 * alignment suffices (a row and a slot of larger buffers); they must not overlap. On CUDA one
 * kernel on `stream`, no host synchronization. */
typedef enum { NVFP4_FP8_AMAX_MAX = 0, NVFP4_FP8_AMAX_MOST_RECENT = 1 } nvfp4_fp8_amax_algo_t;

NVFP4_API nvfp4_status_t nvfp4_fp8_delayed_update(nvfp4_tensor_t* history, nvfp4_tensor_t* scale,
                                                  nvfp4_fp8_format_t format, float margin,
                                                  nvfp4_fp8_amax_algo_t algo, nvfp4_stream_t stream);

/* ---- GEMM runners: what this build can run where ----
 * Every way this library computes a GEMM is one runner: a backend, an operand format, an
 * architecture family, the CUDA targets its kernels were compiled for, a shape rule and a
 * description. nvfp4_backend_supported() and the dispatch inside nvfp4_gemm() answer from
 * the same table. Strings are static; the struct may grow at its end in later versions. */
typedef struct {
  const char* name;          /* unique, e.g. "cutlass-sm100" */
  nvfp4_backend_t backend;
  const char* format;        /* operand format: "nvfp4" or "mxfp4" */
  const char* family;        /* "cpu", "sm_90", "sm_100", "sm_110", "sm_120" */
  int cc_min, cc_max;        /* compute capabilities (major*10+minor) it is written for; 0, 0: CPU */
  const char* targets;       /* CUDA targets its own kernels were compiled for, ";"-separated ("" if none) */
  const char* kernels;       /* ";"-separated regular expressions, one per device function it launches */
  const char* shapes;        /* the problems it takes, in words */
  const char* description;
  int built;                 /* 1 if its code is in this build */
} nvfp4_runner_info_t;

/* Number of runners (built or not). Never fails. */
NVFP4_API int nvfp4_runner_count(void);
/* Fills *info for runner `index` in [0, nvfp4_runner_count()); INVALID_ARGUMENT otherwise. */
NVFP4_API nvfp4_status_t nvfp4_runner_info(int index, nvfp4_runner_info_t* info);
/* 1 if runner `index` is built and every kernel it launches has an image that runs on compute
 * capability cc (cc = 0: the CPU). Never fails. */
NVFP4_API int nvfp4_runner_compiled_for(int index, int cc);
/* nvfp4_runner_compiled_for, and what it needs at run time is there (cuDNN: a libcudnn.so.9
 * recent enough for cc). Never fails. */
NVFP4_API int nvfp4_runner_supported(int index, int cc);
/* Host-only self-checks of runner `index` that need no GPU: for the native Blackwell runners,
 * that the kernels' scale-factor layout equals the one nvfp4_quantize writes, that their shape
 * rules accept the documented shapes and that their shared memory fits the target; for cuDNN,
 * that its graphs validate in the frontend (this needs a loadable libcudnn.so.9). *checked
 * (optional) receives the number of checks run, 0 for a runner that has none or is not built.
 * SUCCESS, or the first failure with its message in nvfp4_last_error(). */
NVFP4_API nvfp4_status_t nvfp4_runner_check(int index, int* checked);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* NVFP4_NVFP4_H */

/* ==========================================================================================
 * MXFP4 (OCP Microscaling Formats v1.0): E2M1 values, one E8M0 scale (a power of two, byte b
 * meaning 2^(b-127), 0xFF NaN) per 32 consecutive values, no per-tensor scale.
 *
 * Quantized tensor layout (a "2D" view [R, C] of the input, leading dims flattened, C % 32 == 0):
 *  - rowwise:    quantization of x [R, C] in blocks of 32 along C.
 *      data   uint8 [R, C/2], two E2M1 codes a byte, element 2i in the low nibble.
 *      scales uint8 (E8M0 bytes) [R, C/32] (linear) or [roundup(R,128), roundup(C/32,4)]
 *             (swizzled: the 128x4 layout of the NVFP4 scales over 32-element blocks, the layout
 *             CUTLASS's mx_float4_t GEMMs read, Sm1xxBlockScaledConfig<32>; padding bytes are 0).
 *  - columnwise: quantization of x^T [C, R] in blocks of 32 along R, R padded with zero rows to
 *      Rp = roundup(R, 32), stored as x^T: data uint8 [C, Rp/2];
 *      scales [C, Rp/32] (linear) or [roundup(C,128), roundup(Rp/32,4)] (swizzled).
 *
 * Scale rules, for a block with M = max |x_i| (exact, from the bits of M):
 *  - OCP:      s = floor(log2 M) - 2 (the specification's; values above 6 * 2^s saturate to +-6).
 *  - CEIL:     s = ceil(log2(M / 6)): the smallest power of two with M <= 6 * 2^s (no value
 *              saturates; "round to infinity").
 *  - TETRAJET: s = ceil(log2(2M' / (6 - (-6)))), M' = M or 1e-8 when M = 0 (Chen et al. 2025,
 *              truncation-free scaling): the CEIL rule except that a zero block gets 2^-29.
 *  s below -127 is clamped to -127 (nothing saturates then). A NaN or an infinity in a block
 *  makes its scale 0xFF (NaN) and each of its codes 0x7: the block decodes to NaN.
 * Codes: e2m1(clamp(x_i * 2^-s, -6, 6)), round to nearest even or stochastic (the NVFP4
 * stochastic-rounding contract: Philox4x32-10 keyed by seed, counter offset (+ *offset_device),
 * element index i * W + j in the orientation being quantized, W its padded width).
 * ======================================================================================== */
#ifndef NVFP4_NVFP4_MX_SECTION
#define NVFP4_NVFP4_MX_SECTION

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  NVFP4_MX_SCALE_OCP = 0,
  NVFP4_MX_SCALE_CEIL = 1,
  NVFP4_MX_SCALE_TETRAJET = 2
} nvfp4_mx_scale_rule_t;

/* How one direction (rowwise or columnwise) is quantized. */
typedef struct {
  nvfp4_rounding_t rounding;
  nvfp4_mx_scale_rule_t scale_rule;
} nvfp4_mx_direction_config_t;

typedef struct {
  nvfp4_mx_direction_config_t rowwise;    /* used when the rowwise output is requested */
  nvfp4_mx_direction_config_t columnwise; /* used when the columnwise output is requested */
  nvfp4_scale_layout_t scale_layout;      /* both directions */
  uint64_t seed;                          /* stochastic rounding: Philox4x32-10 key */
  uint64_t offset;                        /* stochastic rounding: counter offset */
  /* Optional (NULL: unused): a 64-bit counter in the input's memory space, 8-byte aligned,
   * added to `offset` when the work runs (as in nvfp4_quant_config_t). */
  const uint64_t* offset_device;
} nvfp4_mx_quant_config_t;

/* Fills *cfg with: round-to-nearest and the OCP rule in both directions, swizzled scales,
 * seed 0, offset 0, no offset_device. */
NVFP4_API void nvfp4_mx_quant_config_default(nvfp4_mx_quant_config_t* cfg);

/* One direction of an MXFP4 tensor (see the layout above). */
typedef struct {
  nvfp4_tensor_t data;   /* uint8, 2 dims */
  nvfp4_tensor_t scales; /* uint8 (E8M0 bytes), 2 dims, linear or swizzled per the config */
} nvfp4_mx_quantized_t;

/* Quantizes input (float32/float16/bfloat16, contiguous, last dim % 32 == 0; leading dims are
 * flattened into R) to MXFP4. rowwise and columnwise may each be NULL, not both; both come from
 * one read of the input. On CUDA nothing is synchronized. */
NVFP4_API nvfp4_status_t nvfp4_mx_quantize(const nvfp4_tensor_t* input, const nvfp4_mx_quant_config_t* cfg,
                                           nvfp4_mx_quantized_t* rowwise, nvfp4_mx_quantized_t* columnwise,
                                           nvfp4_stream_t stream);

/* out[R, C] = e2m1(code) * 2^(scale - 127), computed in fp32 (exact, except that magnitudes
 * >= 2^128 become +-inf; the NaN scale gives NaN) and stored as float32, float16 or bfloat16,
 * rounded to nearest even: exact in bfloat16 too (same exceptions); in float16, magnitudes
 * above 65504 become inf and those below 2^-14 round to float16's subnormal grid.
 * q.data's shape gives R and C (C = 2 * data.shape[1], C % 32 == 0). */
NVFP4_API nvfp4_status_t nvfp4_mx_dequantize(const nvfp4_mx_quantized_t* q, nvfp4_scale_layout_t scale_layout,
                                             nvfp4_tensor_t* out, nvfp4_stream_t stream);

/* ---- MXFP4 GEMM: D = A^ @ B^T + beta * C (+ bias) ----
 * A^ and B^ are the decoded operands (e2m1 * 2^(scale-127)); MXFP4 has no per-tensor scale,
 * so there is no alpha. Every product of two decoded values is exact; the result is their
 * float64 product within FP32 accumulation, with these limits of the fp32/BF16 range every
 * runner computes in: a decoded magnitude >= 2^128 is inf (as in nvfp4_mx_dequantize), a
 * NaN scale gives NaN, and products or partial sums beyond fp32's range overflow or
 * underflow (below 2^-126 the GPU tensor cores may flush them to zero).
 * Runners (nvfp4_runner_info, format "mxfp4"): the CPU reference; Hopper: an exact
 * emulation (operands decoded to BF16, BF16 tensor cores, FP32 accumulation), CUTLASS and
 * cuDNN; Blackwell: CUTLASS's mx_float4 block-scaled GEMM (BF16 output) and cuDNN's
 * block-scale graph, built and host-checked, not run on hardware.
 * The arguments follow nvfp4_gemm_args_t; K % 32 == 0. */
typedef struct {
  const nvfp4_mx_quantized_t* a;     /* rowwise-quantized A: data [M, K/2], K-major */
  const nvfp4_mx_quantized_t* b;     /* rowwise-quantized B: data [N, K/2], K-major */
  nvfp4_scale_layout_t scale_layout; /* layout of a->scales and b->scales */
  const nvfp4_tensor_t* c;           /* optional [M, N], read with beta; may alias d */
  const nvfp4_tensor_t* bias;        /* optional [N] */
  float beta;
  nvfp4_tensor_t* d;                 /* [M, N] float32 / float16 / bfloat16 */
  nvfp4_backend_t backend;
} nvfp4_mx_gemm_args_t;

NVFP4_API nvfp4_status_t nvfp4_mx_gemm_workspace_size(const nvfp4_mx_gemm_args_t* args, size_t* bytes);
NVFP4_API nvfp4_status_t nvfp4_mx_gemm(const nvfp4_mx_gemm_args_t* args, void* workspace, size_t workspace_bytes,
                                       nvfp4_stream_t stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* NVFP4_NVFP4_MX_SECTION */

/* ==========================================================================================
 * Grouped (mixture-of-experts) tensors and GEMMs. See docs/design.md, "Grouped (MoE) tensors".
 *
 * A grouped tensor is a token-sorted x [T, K] split into E groups (experts) by cumulative end
 * offsets offs int32 [E] (torch._grouped_mm's convention): group g is rows [offs[g-1], offs[g])
 * (offs[-1] = 0), offs non-decreasing, offs[E-1] <= T; rows at or past offs[E-1] belong to no
 * group. offs lives in the input's memory space and is never read on the host for CUDA tensors:
 * every size is an upper bound from T, E and the features. Each group is its own tensor for the
 * recipe: its own amax (float32 [E]) and per-tensor scale, its own block scales.
 * With m_g = offs[g] - offs[g-1] and Kp = roundup(K, 128), Cp = roundup(K/16, 4):
 *  - rowwise (blocks of 16 along K):
 *      data   uint8 [T, K/2]: row r of x in row r (rows of no group: code 0);
 *      scales E4M3 [roundup(T + 127 E, 128), Cp]: group g's swizzled block [roundup(m_g, 128), Cp]
 *             starts at scale row sum_{h<g} roundup(m_h, 128); every other byte 0.
 *  - columnwise (blocks of 16 along the tokens, the operand of the weight gradient): group g's
 *    x_g^T [K, Mp_g] with Mp_g = roundup(m_g, 32) (zero tokens appended before any Hadamard
 *    transform), quantized along the tokens and stored group after group:
 *      data   uint8 [K * (T + 31 E) / 2]: group g's [K, Mp_g/2] at byte K * P_g / 2,
 *             P_g = sum_{h<g} Mp_h; bytes past the last group 0;
 *      scales E4M3 [Kp * ((T + 63 E) / 16)]: group g's swizzled block [Kp, roundup(Mp_g/16, 4)]
 *             at byte Kp * Q_g, Q_g = sum_{h<g} roundup(Mp_h/16, 4); every other byte 0.
 *  - amax float32 [E] per direction; an empty group's is 0.
 * Stochastic rounding: group g is quantized as nvfp4_quantize quantizes x_g with counter offset
 * offset + g * 2^32 (mod 2^64; plus *offset_device when given), element indices counted within
 * the group's own orientation: groups never share random bits unless the offset advances 2^32
 * times. Scales are always swizzled (cfg.scale_layout must be NVFP4_SCALES_SWIZZLED); blocks 1D.
 *
 * A batched tensor (expert weights, not ragged) is x [E, N, K]: E independent tensors, each
 * quantized exactly as nvfp4_quantize quantizes x[g] (1D or 2D tiles) with counter offset
 * offset + g * 2^32, the outputs stacked: rowwise data [E, N, K/2], scales [E, roundup(N,128), Cp];
 * columnwise (x[g]^T, N padded to Np = roundup(N, 16)) data [E, K, Np/2], scales
 * [E, Kp, roundup(Np/16, 4)]; amax [E].
 *
 * Bad offs. On the CPU, offs is checked on the host: decreasing, negative or past T is
 * NVFP4_ERROR_INVALID_ARGUMENT naming "offs". On CUDA nothing is checked on the host (that would
 * need a synchronization); instead every kernel reads offs through the same clamp, end_g =
 * min(max(offs[g], end_{g-1}, 0), T), so no byte outside the buffers is read or written and the
 * result is that of the clamped offs, and, when groups.offs_error is given, the call writes there
 * (in stream order) 0 if offs was valid, else the NVFP4_OFFS_* bits of what was wrong.
 * ======================================================================================== */
#ifndef NVFP4_NVFP4_GROUPED_SECTION
#define NVFP4_NVFP4_GROUPED_SECTION

#ifdef __cplusplus
extern "C" {
#endif

#define NVFP4_OFFS_DECREASING 1 /* some offs[g] < offs[g-1] */
#define NVFP4_OFFS_PAST_END 2   /* some offs[g] > T */
#define NVFP4_OFFS_NEGATIVE 4   /* some offs[g] < 0 */

/* The group structure of a ragged dimension of T rows. */
typedef struct {
  const int32_t* offs;  /* [count] cumulative ends, in the tensors' memory space, 4-byte aligned */
  int64_t count;        /* E >= 1 */
  int64_t tokens;       /* T, the ragged extent */
  int32_t* offs_error;  /* optional int32 [1] in the same memory space: 0 or NVFP4_OFFS_* bits */
} nvfp4_groups_t;

/* One direction of a grouped or batched tensor (shapes above). */
typedef struct {
  nvfp4_tensor_t data;   /* uint8 */
  nvfp4_tensor_t scales; /* E4M3 or uint8, swizzled */
  nvfp4_tensor_t amax;   /* float32 [E] */
} nvfp4_grouped_quantized_t;

/* Quantizes input [T, K] (float32/float16/bfloat16, contiguous, K % 16 == 0, leading dims
 * flattened into T) group by group; groups->tokens must equal T. rowwise and columnwise may each
 * be NULL, not both. cfg: 1D blocks, swizzled scales; rounding and the Hadamard transform as in
 * nvfp4_quantize; the recipe options of 0.3 (scale_select, e4m3_bound, amax_mode, amax_in) at
 * their defaults and no offset_counter, or the call is refused naming the field. On CUDA: no
 * host synchronization, offs read on the device only. */
NVFP4_API nvfp4_status_t nvfp4_grouped_quantize(const nvfp4_tensor_t* input, const nvfp4_groups_t* groups,
                                                const nvfp4_quant_config_t* cfg,
                                                nvfp4_grouped_quantized_t* rowwise,
                                                nvfp4_grouped_quantized_t* columnwise, nvfp4_stream_t stream);

/* Quantizes input [E, N, K] (3 dims, K % 16 == 0) as E tensors (layout above); swizzled scales;
 * 1D or 2D blocks; cfg as for nvfp4_grouped_quantize otherwise. */
NVFP4_API nvfp4_status_t nvfp4_batched_quantize(const nvfp4_tensor_t* input, const nvfp4_quant_config_t* cfg,
                                                nvfp4_grouped_quantized_t* rowwise,
                                                nvfp4_grouped_quantized_t* columnwise, nvfp4_stream_t stream);

typedef enum {
  /* Ragged M: D [T, N], rows of group g = alpha_g * A_g @ B_g^T; rows of no group are 0.
   * a: a grouped rowwise tensor [T, K]; b: a batched direction [E, N, K] (a weight's rowwise
   * quantization for the forward GEMM, its columnwise one, [E, K', N'], for the input gradient). */
  NVFP4_GROUPED_RAGGED_M = 0,
  /* Ragged K (the weight gradient): D [E, N, K], D[g] = alpha_g * A_g @ B_g^T over group g's
   * Mp_g padded tokens; a: the grouped columnwise direction of a [T, N] tensor (dY), b: that of a
   * [T, K] tensor (X); an empty group's D[g] is 0. */
  NVFP4_GROUPED_RAGGED_K = 1
} nvfp4_grouped_kind_t;

/* alpha_g = S_dec(a.amax[g]) * S_dec(b.amax[g]), read on the device. No bias, no beta: an
 * expert bias is added by the caller. Every runner computes each group's result exactly as
 * nvfp4_gemm computes it for that group's operands (the CPU reference bit for bit). */
typedef struct {
  nvfp4_grouped_kind_t kind;
  const nvfp4_grouped_quantized_t* a;
  const nvfp4_grouped_quantized_t* b;
  nvfp4_groups_t groups;       /* offs of the ragged dimension (its tokens: T) */
  nvfp4_tensor_t* d;           /* RAGGED_M: [T, N]; RAGGED_K: [E, N, K]; float32 / float16 / bfloat16 */
  nvfp4_backend_t backend;
} nvfp4_grouped_gemm_args_t;

NVFP4_API nvfp4_status_t nvfp4_grouped_gemm_workspace_size(const nvfp4_grouped_gemm_args_t* args, size_t* bytes);
NVFP4_API nvfp4_status_t nvfp4_grouped_gemm(const nvfp4_grouped_gemm_args_t* args, void* workspace,
                                            size_t workspace_bytes, nvfp4_stream_t stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* NVFP4_NVFP4_GROUPED_SECTION */

/* ==========================================================================================
 * Gather rows: a weight quantized in 16x16 tiles, moved between ranks (the FSDP all-gather of
 * nvfp4.distributed). See docs/design.md, "FSDP2: the FP4 weight all-gather".
 *
 * A weight W [N, K] (N % 16 == 0, K % 16 == 0) quantized in 2D 16x16 tiles, round to nearest,
 * travels as one row of bytes per row of W, `row_bytes` >= K/2 + K/16 long:
 *   bytes [0, K/2)            the row's codes (element 2i in the low nibble of byte i),
 *   bytes [K/2, K/2 + K/16)   its block scales (E4M3, linear: each tile's scale once for each
 *                             of the tile's 16 rows),
 *   bytes past that           0.
 * A shard of whole tiles (a multiple of 16 rows) quantized with the whole weight's amax is the
 * same rows a process quantizing all of W writes for them, so the rows of all shards, put
 * together in row order, are W's quantization.
 * ======================================================================================== */
#ifndef NVFP4_NVFP4_GATHER_SECTION
#define NVFP4_NVFP4_GATHER_SECTION

#ifdef __cplusplus
extern "C" {
#endif

/* Quantizes x [R, K] (float32/float16/bfloat16, contiguous, R % 16 == 0, K % 16 == 0) in 16x16
 * tiles with the per-tensor amax `amax` (float32 [1] on x's device, read when the work runs:
 * the whole weight's max |W|, so that values above it cannot occur; if they do they saturate, as
 * with NVFP4_AMAX_GIVEN) into out uint8 [R_out, row_bytes] (R_out >= R): rows [0, R) as above,
 * bit for bit the rowwise output of nvfp4_quantize (2D, nearest, NVFP4_AMAX_GIVEN, linear
 * scales); rows [R, R_out) all 0. Every byte of out is written. */
NVFP4_API nvfp4_status_t nvfp4_gather_rows_quantize(const nvfp4_tensor_t* x, const nvfp4_tensor_t* amax,
                                                    nvfp4_tensor_t* out, nvfp4_stream_t stream);

/* From gather rows in [R_in, row_bytes] (uint8, R_in >= N; rows past N are not read) of
 * W [N, K] and its amax (float32 [1]), writes W's two quantized orientations with swizzled
 * scales, each optional (NULL; not both):
 *   rowwise     data [N, K/2], scales [roundup(N, 128), roundup(K/16, 4)]: the rows' codes and
 *               scales; amax [1] = amax;
 *   columnwise  the quantization of W^T in 16x16 tiles: data [K, N/2] (W^T's row c, element r =
 *               W's element (r, c)), scales [roundup(K, 128), roundup(N/16, 4)] (block (c, b) =
 *               tile (b, c/16)'s scale, read from row 16b); amax [1] = amax.
 * What nvfp4_quantize (2D) writes for W's two orientations, when the rows are W's (2D tiles make
 * the columnwise quantization the transpose of the rowwise one). One pass over the rows; every
 * byte of both outputs is written (the swizzled padding 0). N and K are the rowwise data's
 * shape [N, K/2], or the columnwise one's [K, N/2] when rowwise is NULL. */
NVFP4_API nvfp4_status_t nvfp4_gather_rows_assemble(const nvfp4_tensor_t* in, const nvfp4_tensor_t* amax,
                                                    nvfp4_quantized_t* rowwise, nvfp4_quantized_t* columnwise,
                                                    nvfp4_stream_t stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* NVFP4_NVFP4_GATHER_SECTION */
