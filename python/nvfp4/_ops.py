"""nvfp4's op layer: the one module that calls the compiled library (nvfp4._C).

Everything nvfp4 runs from PyTorch reaches the library through here, eagerly or inside a
compiled graph, so the two take the same path and compute the same bits:

- torch operators (namespace ``nvfp4``), declared with ``torch.library.Library`` (a plain
  dispatcher registration: ~5 us a call, against ~20 us for ``torch.library.custom_op``),
  calling the library through its raw-pointer entry points (a torch tensor converted
  through DLPack costs ~5 us): ``quantize``, ``gemm``, ``mx_gemm``, ``dequantize``,
  ``swizzle``, ``fp8_cast``, ``fp8_delayed_update``. The passes of nvfp4.nn's layers
  (``linear_fwd``, ``linear_bwd``, ``frozen_linear_fwd``) are ops of the same namespace,
  defined in nvfp4.nn._passes on the raw entry points below;
- the raw entry points themselves (``quantize_raw``, ``gemm_raw``, ``fp8_cast_raw``, ...):
  addresses and sizes, no tensors. Whoever calls them has checked the tensors behind the
  addresses (nvfp4._checks); the library still checks dtypes, alignment and overlap;
- the array-path calls for the rest of the public API (linear scale layouts, ``out=`` and
  ``beta``, MXFP4): tensors in, checked again by the C API;
- the library's build and runner information, for nvfp4.backends;
- one cache of GEMM workspace sizes, for every GEMM path (NVFP4 and MXFP4, raw and array).

Every op validates its tensor arguments (nvfp4._checks) before it takes an address: dtype,
shape against the logical shape and scale layout, contiguity, one device. On the meta
device (and for torch.compile's fake tensors) the ops return outputs of the right shape
and dtype and run nothing.

The public nvfp4.quantize and nvfp4.gemm call an op's implementation themselves, without
the dispatcher, when nothing but that implementation would see the call (`eager()`: not
compiling or tracing, no torch-function or dispatch mode, no functorch transform, no
profiler; plain tensors that need no autograd): the dispatcher's round trip for an op
implemented in Python costs more than the rest of the call. Every other call goes through
the op, so compiled graphs, fake tensors, modes and profiles see what they saw before.

A quantized orientation [rows, cols] that the Linear keeps is one uint8 buffer, "packed":
data (rows*cols/2 bytes), then the swizzled scales, then the float32 amax, each section
starting on a 256-byte boundary (`packed_layout`). One allocation instead of three.
"""
from __future__ import annotations

import functools
from typing import List, Optional, Sequence, Tuple

import torch

from . import _C
from . import _checks as check
from ._format import stream_of, swizzled_shape

__all__ = ["DTYPE_CODE", "TOKEN_ALIGN", "packed_layout", "packed_nbytes", "unpack", "addresses", "dequantize",
           "swizzle", "quantize", "gemm", "mx_gemm", "gemm_workspace_bytes", "gemm_env_key", "clear_workspace_cache",
           "quantize_raw", "gemm_raw", "fp8_cast_raw", "fp8_delayed_update_raw", "quantize_into", "dequantize_into",
           "swizzle_into", "gemm_into", "mx_quantize_into", "mx_dequantize_into", "mx_gemm_into", "eager",
           "quantize_checked", "gemm_addresses", "DEFAULT_RHT_SIGN_MASK", "quantize_dec_raw", "gemm_dec_raw",
           "gemm_takes_decoded", "gemm_dec_workspace_bytes", "QUANTIZE_WORKSPACE_BYTES"]

# Rows of the token axis are padded to this before a columnwise quantization: the token axis
# is the K of the wgrad GEMM, and native FP4 GEMMs need K % 32 == 0 (so does an MXFP4 block).
# Zero rows change no amax, no block scale and no product. Padding to the same multiple on
# every backend keeps the stochastic-rounding bits (counted by element index in the padded
# transpose) the same on every GPU. Token counts that are multiples of 32 (the usual case)
# are not copied. (nvfp4.nn.Linear and nvfp4.nn.emulated.)
TOKEN_ALIGN = 32

#: nvfp4_dtype_t codes of the C API.
DTYPE_CODE = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
_LAYOUT_SWIZZLED = 1
_ALIGN = 256

# ------------------------------------------------------------------------------ the library
# Build and runner information (nvfp4.backends reads the runner table through these).
version = _C.version
build_cuda_archs = _C.build_cuda_archs
default_rht_sign_mask = _C.default_rht_sign_mask
#: The library's default RHT signs as a mask: a constant of the build, read once (a plain int
#: is also what torch.compile can trace; a call into the extension is not).
DEFAULT_RHT_SIGN_MASK = _C.default_rht_sign_mask()
cuda_device_count = _C.cuda_device_count
cuda_device_cc = _C.cuda_device_cc
backend_supported = _C.backend_supported
runner_count = _C.runner_count
runner_info = _C.runner_info
runner_compiled_for = _C.runner_compiled_for
runner_supported = _C.runner_supported

# The raw-pointer entry points. Looked up as module attributes at every call (not bound
# into callers), so that a test can watch every address handed to the library by
# replacing them here.
quantize_raw = _C.quantize_raw
QUANTIZE_WORKSPACE_BYTES = _C.quantize_workspace_bytes
gemm_raw = _C.gemm_raw
fp8_cast_raw = _C.fp8_cast_raw
fp8_delayed_update_raw = _C.fp8_delayed_update_raw
grouped_quantize_raw = _C.grouped_quantize_raw
batched_quantize_raw = _C.batched_quantize_raw
grouped_gemm_raw = _C.grouped_gemm_raw
# Decoded operands (the form the Hopper emulation multiplies; nvfp4_quantize_decoded,
# nvfp4_gemm_decoded): the Linear passes' road where the GEMM runner takes them.
quantize_dec_raw = _C.quantize_dec_raw
gemm_dec_raw = _C.gemm_dec_raw
gemm_takes_decoded_raw = _C.gemm_takes_decoded_raw

# The GEMM environment (nvfp4_gemm_env_key: the variables the library reads on each GEMM
# call that can change the kernel, and so the workspace) is part of every workspace-size
# key, so a cached size cannot outlive a change of them.
gemm_env_key = _C.gemm_env_key


def _up(v, m):
    # integer arithmetic only, so that it also works on torch.SymInt under torch.compile
    return (v + m - 1) // m * m


def packed_layout(rows, cols) -> Tuple[int, int, int]:
    """(scales offset, amax offset, total bytes) of a packed orientation [rows, cols]
    (cols a multiple of 16; swizzled scales). The total is a multiple of 256 too, so that
    packed buffers and GEMM workspaces can follow each other in one allocation (the GEMM
    workspace must start on a 256-byte boundary)."""
    data = rows * cols // 2
    sr, sc = swizzled_shape(rows, cols // 16)
    scales = sr * sc
    so = _up(data, _ALIGN)
    ao = so + _up(scales, _ALIGN)
    return so, ao, ao + _ALIGN


def packed_nbytes(rows, cols) -> int:
    return packed_layout(rows, cols)[2]


def unpack(buf: torch.Tensor, rows: int, cols: int) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Views (data uint8 [rows, cols/2], scales float8_e4m3fn swizzled, amax float32 [1]) of
    a packed orientation. The bytes between sections are alignment gaps, never written."""
    so, ao, total = packed_layout(rows, cols)
    if buf.dtype != torch.uint8 or buf.dim() != 1 or buf.numel() < total:
        raise ValueError(f"buf: expected a uint8 buffer of at least {total} bytes for [{rows}, {cols}]")
    data = buf[: rows * cols // 2].view(rows, cols // 2)
    sr, sc = swizzled_shape(rows, cols // 16)
    scales = buf[so: so + sr * sc].view(sr, sc)
    amax = buf[ao: ao + 4].view(torch.float32)
    return data, scales.view(torch.float8_e4m3fn), amax


def addresses(base: int, rows: int, cols: int) -> Tuple[int, int, int]:
    """(data, scales, amax) addresses of a packed orientation [rows, cols] starting at base."""
    so, ao, _ = packed_layout(rows, cols)
    return base, base + so, base + ao


_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # absent from CPU-only builds


def _device(t: torch.Tensor) -> Tuple[int, int, int]:
    """(device type code, index, stream) of a tensor, as the raw entry points take them."""
    # is_cuda / get_device / is_cpu: plain reads (t.device.type builds two objects, ~0.2 us)
    if t.is_cuda:
        i = t.get_device()
        # the raw handle of the current stream, without building a torch.cuda.Stream (~4 us)
        if _raw_stream is not None:
            return 1, i, _raw_stream(i)
        return 1, i, torch.cuda.current_stream(t.device).cuda_stream
    if t.is_cpu:
        return 0, 0, 0
    raise ValueError(f"nvfp4 ops run on cpu or cuda tensors, got a tensor on {t.device}")


# What could see or redirect an op call besides its implementation (each ~0.03 us).
_compiling = torch.compiler.is_compiling
_tf_mode = torch._C._is_torch_function_mode_enabled
_dispatch_modes = torch._C._len_torch_dispatch_stack
_profiling = torch.autograd._profiler_enabled
_jit_tracing = torch._C._get_tracing_state
_functorch = torch._C._functorch.peek_interpreter_stack
grad_enabled = torch.is_grad_enabled


def _only_device_modes() -> bool:
    # torch.set_default_device's mode only fills in the device of factory calls; the
    # implementations name every device they allocate on
    from torch.overrides import _get_current_function_mode_stack
    from torch.utils._device import DeviceContext
    return all(type(mode) is DeviceContext for mode in _get_current_function_mode_stack())


def eager() -> bool:
    """Whether an op called now would reach its implementation and nothing else: not under
    torch.compile/export (dynamo reads this False and traces the op), not jit-tracing, no
    dispatch mode (fake tensors, make_fx, FlopCounterMode, selective checkpointing, user
    modes), no torch-function mode but torch.set_default_device's, no functorch transform
    (vmap, grad), no profiler recording ops. The caller also makes sure that its tensors are
    plain tensors on cpu/cuda (`direct`) and, where the op has no autograd formula of its
    own, that none needs grad (the op would attach autograd's fallback to its outputs)."""
    if (_compiling() or _dispatch_modes() or _profiling() or _functorch() is not None
            or _jit_tracing() is not None):
        return False
    return not _tf_mode() or _only_device_modes()


_PLAIN = (torch.Tensor, torch.nn.Parameter)


def direct(*ts) -> bool:
    """eager(), and every tensor given (None skipped) a plain tensor or Parameter on cpu/cuda:
    not a tensor subclass (the FP4-gathered weight of nvfp4.distributed handles the op itself)
    and not on meta. Where this holds, calling an op's implementation is calling the op."""
    if not eager():
        return False
    for t in ts:
        if t is not None and (type(t) not in _PLAIN or not (t.is_cuda or t.is_cpu)):
            return False
    return True


def _need_2d(name: str, t: torch.Tensor) -> None:
    # the ops take 2D views
    if t.dim() != 2:
        raise ValueError(f"{name}: the nvfp4 ops take 2D tensors, got shape {tuple(t.shape)}")


def _bias(bias, n: int, device, device_of: str):
    """bias: None or float [n] on `device`; returned contiguous."""
    if bias is None:
        return None
    check.tensor("bias", bias, check.FLOATS, (n,), device, device_of, contiguous=False)
    return bias.contiguous()


# ------------------------------------------------------------------------------ GEMM workspace sizes
# One cache for every GEMM path: the key starts with the path's name, then everything the
# size depends on (shapes, dtypes, layout, backend, device) and the GEMM environment.
_WS: dict = {}


def _workspace(key: tuple, ask) -> int:
    v = _WS.get(key)
    if v is None:
        v = ask()
        if len(_WS) > 4096:
            _WS.clear()
        _WS[key] = v
    return v


def clear_workspace_cache() -> None:
    """Forget the cached workspace sizes (frees the memory of the cache; never needed for
    correctness: every key holds the GEMM environment)."""
    _WS.clear()


def gemm_workspace_bytes(m, n, k, backend: int, out_dtype: torch.dtype, bias_dtype, has_c: bool,
                         device: torch.device, dev: Tuple[int, int, int]) -> int:
    """The workspace the library asks for this swizzled-layout problem, asked once per
    problem and GEMM environment (gemm_env_key): shapes, dtypes, backend, device and those
    variables."""
    def ask():
        dt, di, _ = dev
        # Sizes only: distinct, far-apart, aligned dummy addresses (the checks see no
        # overlap; nothing is read or written).
        a = [(i + 1) << 40 for i in range(9)]
        return gemm_raw(a[0], a[1], a[2], a[3], a[4], a[5], m, n, k, _LAYOUT_SWIZZLED,
                        a[6] if has_c else 0, DTYPE_CODE[out_dtype], a[7] if bias_dtype is not None else 0,
                        DTYPE_CODE.get(bias_dtype, 0), 0.0, a[8], DTYPE_CODE[out_dtype], backend, 0, -1, dt, di, 0)

    return _workspace(("raw", m, n, k, backend, out_dtype, bias_dtype, has_c, device, gemm_env_key()), ask)


def gemm_takes_decoded(m, n, k, backend: int, out_dtype: torch.dtype, bias_dtype, device: torch.device,
                       dev: Tuple[int, int, int]) -> bool:
    """Whether the GEMM runner the library chooses for this swizzled-layout problem reads
    decoded operands (nvfp4_gemm_takes_decoded: the Hopper two-step path, unless
    NVFP4_SM90_DECODED=0), asked once per problem and GEMM environment. CPU: False."""
    def ask():
        dt, di, _ = dev
        if dt != 1 or m == 0 or n == 0:
            return False
        a = [(i + 1) << 40 for i in range(9)]
        return bool(gemm_takes_decoded_raw(a[0], a[1], a[2], a[3], a[4], a[5], m, n, k, _LAYOUT_SWIZZLED, 0,
                                           DTYPE_CODE[out_dtype], a[7] if bias_dtype is not None else 0,
                                           DTYPE_CODE.get(bias_dtype, 0), 0.0, a[8], DTYPE_CODE[out_dtype], backend,
                                           dt, di))

    return _workspace(("takes_decoded", m, n, k, backend, out_dtype, bias_dtype, device, gemm_env_key()), ask)


def gemm_dec_workspace_bytes(m, n, k, backend: int, out_dtype: torch.dtype, bias_dtype, a_dec: bool, b_dec: bool,
                             device: torch.device, dev: Tuple[int, int, int]) -> int:
    """The workspace of nvfp4_gemm_decoded for this problem, with A and/or B decoded (a
    decoded operand needs no room for its decode), asked once per problem and environment."""
    def ask():
        dt, di, _ = dev
        a = [(i + 1) << 40 for i in range(13)]
        return gemm_dec_raw(a[0], a[1], a[2], a[9], a[10] if a_dec else 0, a[3], a[4], a[5], a[11],
                            a[12] if b_dec else 0, m, n, k, _LAYOUT_SWIZZLED, 0, DTYPE_CODE[out_dtype],
                            a[7] if bias_dtype is not None else 0, DTYPE_CODE.get(bias_dtype, 0), 0.0, a[8],
                            DTYPE_CODE[out_dtype], backend, 0, -1, dt, di, 0)

    return _workspace(("dec", m, n, k, backend, out_dtype, bias_dtype, a_dec, b_dec, device, gemm_env_key()), ask)


def _run_gemm(a: Tuple[int, int, int], b: Tuple[int, int, int], m, n, k, d: torch.Tensor, bias, backend: int,
              dev, ws_base: Optional[int] = None, ws_bytes: int = 0) -> Optional[torch.Tensor]:
    """d = alpha * (Â @ B̂ᵀ) (+ bias). a, b: (data, scales, amax) addresses. Allocates the
    workspace unless the caller passes one; returns the allocated workspace (keep it alive
    until the stream has used it: the caching allocator makes that automatic)."""
    ws = None
    if ws_base is None:
        ws_bytes = gemm_workspace_bytes(m, n, k, backend, d.dtype, None if bias is None else bias.dtype, False,
                                        d.device, dev)
        if ws_bytes:
            ws = torch.empty(ws_bytes, dtype=torch.uint8, device=d.device)
            ws_base = ws.data_ptr()
        else:
            ws_base = 0
    dt, di, st = dev
    gemm_raw(a[0], a[1], a[2], b[0], b[1], b[2], m, n, k, _LAYOUT_SWIZZLED, 0, 0,
             0 if bias is None else bias.data_ptr(), DTYPE_CODE[bias.dtype] if bias is not None else 0, 0.0,
             d.data_ptr(), DTYPE_CODE[d.dtype], backend, ws_base, ws_bytes, dt, di, st)
    return ws


lib = torch.library.Library("nvfp4", "DEF")


# ------------------------------------------------------------------------------ FP8 cast
# The per-tensor-scaled FP8 cast of the FP8 baseline recipes (nvfp4.nn.fp8): q and/or its
# transpose from one read of x, 1/s and max |x|, with current (scale absent) or delayed
# (scale given) scaling. See nvfp4_fp8_cast.
lib.define("fp8_cast(Tensor x, int format, float margin, Tensor? scale, bool rowwise, bool transposed) -> Tensor[]")

FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)  # format codes 0 and 1


def _fp8_outputs(x, format, rowwise, transposed):
    rows, cols = x.shape
    dt = FP8_DTYPES[format]
    q = torch.empty((rows, cols) if rowwise else (0,), dtype=dt, device=x.device)
    qt = torch.empty((cols, rows) if transposed else (0,), dtype=dt, device=x.device)
    scale_inv = torch.empty((), dtype=torch.float32, device=x.device)
    amax = torch.empty((), dtype=torch.float32, device=x.device)
    return q, qt, scale_inv, amax


def _fp8_cast_check(x, format, scale):
    _need_2d("x", x)
    if format not in (0, 1):
        raise ValueError(f"format: 0 (E4M3) or 1 (E5M2), got {format}")
    if x.dtype not in DTYPE_CODE:
        raise ValueError(f"x: dtype must be float32, float16 or bfloat16, got {x.dtype}")
    if scale is not None:
        check.tensor("scale", scale, (torch.float32,), None, x.device, "x", contiguous=False)
        if scale.numel() != 1:
            raise ValueError(f"scale: expected one float32 element, got {check.describe(scale)}")


def _fp8_cast_impl(x, format, margin, scale, rowwise, transposed):
    _fp8_cast_check(x, format, scale)
    x = x.contiguous()
    if x.is_cuda and x.data_ptr() % 16:
        x = x.clone()  # the kernels read 16-byte chunks; a fresh allocation is aligned
    q, qt, scale_inv, amax = _fp8_outputs(x, format, rowwise, transposed)
    dt, di, st = _device(x)
    fp8_cast_raw(x.data_ptr(), DTYPE_CODE[x.dtype], x.shape[0], x.shape[1], format, margin,
                    0 if scale is None else scale.data_ptr(), q.data_ptr(), qt.data_ptr(), rowwise, transposed,
                    scale_inv.data_ptr(), amax.data_ptr(), dt, di, st)
    return [q, qt, scale_inv, amax]


def _fp8_cast_fake(x, format, margin, scale, rowwise, transposed):
    _fp8_cast_check(x, format, scale)
    return list(_fp8_outputs(x, format, rowwise, transposed))


for _k in ("CPU", "CUDA"):
    lib.impl("fp8_cast", lambda *a: _fp8_cast_impl(*a), _k)
torch.library.register_fake("nvfp4::fp8_cast", _fp8_cast_fake, lib=lib)


# Delayed scaling's update of one role (nvfp4_fp8_delayed_update): history float32 [L] and
# scale float32 [] or [1], both updated in place on their device.
lib.define("fp8_delayed_update(Tensor(a!) history, Tensor(b!) scale, int format, float margin, int algo) -> ()")


def _fp8_delayed_update_check(history, scale):
    if history.dim() != 1 or not history.is_contiguous():
        raise ValueError(f"history: must be a contiguous 1D tensor, got shape {tuple(history.shape)}")
    if scale.numel() != 1:
        raise ValueError(f"scale: must hold one element, got shape {tuple(scale.shape)}")
    if history.dtype != torch.float32 or scale.dtype != torch.float32:
        raise ValueError(f"history/scale: must be float32, got {history.dtype} / {scale.dtype}")
    if scale.device != history.device:
        raise ValueError(f"scale: on {scale.device}, but history is on {history.device}")


def _fp8_delayed_update_impl(history, scale, format, margin, algo):
    _fp8_delayed_update_check(history, scale)
    dt, di, st = _device(history)
    fp8_delayed_update_raw(history.data_ptr(), history.shape[0], scale.data_ptr(), format, margin, algo, dt, di, st)


for _k in ("CPU", "CUDA"):
    lib.impl("fp8_delayed_update", lambda *a: _fp8_delayed_update_impl(*a), _k)
torch.library.register_fake("nvfp4::fp8_delayed_update",
                            lambda history, scale, *a: _fp8_delayed_update_check(history, scale), lib=lib)


# ------------------------------------------------------------------------------ quantize
lib.define("quantize(Tensor x, int block, int rounding, int rht, int sign_mask, int seed, int offset, "
           "Tensor? offset_device, bool rowwise, bool columnwise) -> Tensor[]")


def _alloc_orientation(rows, cols, device):
    # sizes as separate arguments: torch.empty parses them ~0.3 us faster than a tuple
    return (torch.empty(rows, cols // 2, dtype=torch.uint8, device=device),
            torch.empty(*swizzled_shape(rows, cols // 16), dtype=torch.float8_e4m3fn, device=device),
            torch.empty(1, dtype=torch.float32, device=device))


def _empty3(device):
    return (torch.empty((0,), dtype=torch.uint8, device=device),
            torch.empty((0,), dtype=torch.float8_e4m3fn, device=device),
            torch.empty((0,), dtype=torch.float32, device=device))


_U64 = (1 << 64) - 1
_COUNTER_DTYPES = (torch.int64, torch.uint64) if hasattr(torch, "uint64") else (torch.int64,)


def check_counter(name: str, t, device, device_of: str) -> None:
    """A step counter read by the kernels as a uint64 (offset_device): 8 bytes, one element."""
    if t is not None:
        check.tensor(name, t, _COUNTER_DTYPES, None, device, device_of, contiguous=False)
        if t.numel() != 1:
            raise ValueError(f"{name}: expected one int64 element, got {check.describe(t)}")


def _quantize_run(x, block, rounding, rht, sign_mask, seed, offset, offset_device, rowwise, columnwise):
    """(row, col) of a checked, contiguous 2D x: the orientations asked for, None for the others."""
    seed, offset = seed & _U64, offset & _U64  # the schema's int is int64: the same bits as the uint64
    rows, cols = x.shape
    dev = x.device
    row = _alloc_orientation(rows, cols, dev) if rowwise else None
    col = _alloc_orientation(cols, _up(rows, 16), dev) if columnwise else None
    dt, di, st = _device(x)
    # on CUDA a workspace for the amax pass's partials: no memsets to zero the amax outputs
    ws = torch.empty(QUANTIZE_WORKSPACE_BYTES, dtype=torch.uint8, device=dev) if dt == 1 else None
    quantize_raw(x.data_ptr(), DTYPE_CODE[x.dtype], rows, cols,
                 *((row[0].data_ptr(), row[1].data_ptr(), row[2].data_ptr()) if rowwise else (0, 0, 0)),
                 *((col[0].data_ptr(), col[1].data_ptr(), col[2].data_ptr()) if columnwise else (0, 0, 0)),
                 block, rounding, _LAYOUT_SWIZZLED, rht, sign_mask, seed, offset,
                 0 if offset_device is None else offset_device.data_ptr(), dt, di, st,
                 0 if ws is None else ws.data_ptr())
    return row, col


def _quantize_impl(x, block, rounding, rht, sign_mask, seed, offset, offset_device, rowwise, columnwise):
    _need_2d("x", x)
    check.tensor("x", x, check.FLOATS, contiguous=False)
    check_counter("offset_device", offset_device, x.device, "x")
    row, col = _quantize_run(x.contiguous(), block, rounding, rht, sign_mask, seed, offset, offset_device, rowwise,
                             columnwise)
    return [*(row or _empty3(x.device)), *(col or _empty3(x.device))]


def _quantize_fake(x, block, rounding, rht, sign_mask, seed, offset, offset_device, rowwise, columnwise):
    # the same checks as the kernels' road: a meta tensor among CPU ones dispatches here
    _need_2d("x", x)
    check.tensor("x", x, check.FLOATS, contiguous=False)
    check_counter("offset_device", offset_device, x.device, "x")
    rows, cols = x.shape
    row = _alloc_orientation(rows, cols, x.device) if rowwise else _empty3(x.device)
    col = _alloc_orientation(cols, _up(rows, 16), x.device) if columnwise else _empty3(x.device)
    return [*row, *col]


# Registered through trampolines so that tests can watch an implementation by replacing
# the module attribute (the dispatcher keeps the function object it was given).
for _k in ("CPU", "CUDA"):
    lib.impl("quantize", lambda *a: _quantize_impl(*a), _k)
torch.library.register_fake("nvfp4::quantize", _quantize_fake, lib=lib)


def quantize(x: torch.Tensor, block: int = 0, rounding: int = 0, rht: int = 0, sign_mask: int = 0, seed: int = 0,
             offset: int = 0, offset_device: Optional[torch.Tensor] = None, rowwise: bool = True,
             columnwise: bool = False) -> List[torch.Tensor]:
    """Quantize a 2D tensor (swizzled scales): [data, scales, amax, data_t, scales_t, amax_t],
    the orientations not asked for as empty tensors. Codes as in the C API (block 0=1D 1=2D,
    rounding 0=nearest 1=stochastic, rht bit mask 1=rowwise 2=columnwise)."""
    return torch.ops.nvfp4.quantize(x, block, rounding, rht, sign_mask, seed, offset, offset_device, rowwise,
                                    columnwise)


@functools.lru_cache(maxsize=256)
def _one_buffer_plan(rows: int, cols: int, rowwise: bool, columnwise: bool, cuda: bool) -> tuple:
    """(total bytes, rowwise section, columnwise section, workspace offset) of a quantize
    call's outputs in one allocation: each orientation asked for as a packed section
    (`packed_layout`; a section is (offset, rows, cols, scales offset, amax offset), or None),
    the rowwise first, then on CUDA the amax pass's workspace. Every section starts on a
    256-byte boundary. Sizes only: cached by its arguments, which are all it depends on."""
    off = 0
    sections = []
    for want, r, c in ((rowwise, rows, cols), (columnwise, cols, _up(rows, 16))):
        if not want:
            sections.append(None)
            continue
        so, ao, total = packed_layout(r, c)
        sections.append((off, r, c, off + so, off + ao))
        off += total
    ws = off if cuda else -1
    return off + (QUANTIZE_WORKSPACE_BYTES if cuda else 0), sections[0], sections[1], ws


def _quantize_one_buffer(x, block, rounding, rht, sign_mask, seed, offset, rowwise, columnwise) -> tuple:
    """nvfp4.quantize's eager road: one allocation for every output of the call and, on CUDA,
    the amax pass's workspace (`_one_buffer_plan`), instead of three tensors an orientation
    and a workspace. Returns (buf, rowwise section, columnwise section)."""
    seed, offset = seed & _U64, offset & _U64
    rows, cols = x.shape
    dt, di, st = _device(x)
    total, rs, cs, wo = _one_buffer_plan(rows, cols, rowwise, columnwise, dt == 1)
    buf = torch.empty(total, dtype=torch.uint8, device=x.device)
    base = buf.data_ptr()
    quantize_raw(x.data_ptr(), DTYPE_CODE[x.dtype], rows, cols,
                 *((base + rs[0], base + rs[3], base + rs[4]) if rs is not None else (0, 0, 0)),
                 *((base + cs[0], base + cs[3], base + cs[4]) if cs is not None else (0, 0, 0)),
                 block, rounding, _LAYOUT_SWIZZLED, rht, sign_mask, seed, offset, 0, dt, di, st,
                 base + wo if wo >= 0 else 0)
    return buf, rs, cs


def quantize_checked(x: torch.Tensor, block: int, rounding: int, rht: int, sign_mask: int, seed: int, offset: int,
                     rowwise: bool, columnwise: bool) -> tuple:
    """nvfp4.quantize's road to the op: (row, col, buf). x is a contiguous 2D float tensor on
    cpu or cuda and the options are valid ints/bools (the caller checked them, seed and
    offset as int64). Eager calls (`eager()`, x a plain tensor that needs no grad) run the
    implementation directly into one allocation (`_quantize_one_buffer`): buf is that
    uint8 buffer and row/col its sections (offset, rows, cols, scales offset, amax offset)
    or None. The rest go through the op: buf is None and row/col are (data, scales, amax)
    triples or None."""
    if x.__class__ is torch.Tensor and not (x.requires_grad and grad_enabled()) and eager():
        buf, row, col = _quantize_one_buffer(x, block, rounding, rht, sign_mask, seed, offset, rowwise, columnwise)
        return row, col, buf
    q = torch.ops.nvfp4.quantize(x, block, rounding, rht, sign_mask, seed, offset, None, rowwise, columnwise)
    return (tuple(q[:3]) if rowwise else None), (tuple(q[3:]) if columnwise else None), None


# ------------------------------------------------------------------------------ gemm
lib.define("gemm(Tensor a_data, Tensor a_scales, Tensor a_amax, Tensor b_data, Tensor b_scales, Tensor b_amax, "
           "int backend, ScalarType out_dtype, Tensor? bias) -> Tensor")


_U8, _F32, _E4M3 = torch.uint8, torch.float32, torch.float8_e4m3fn
_ONE = (1,)


def _gemm_check(a_data, a_scales, a_amax, b_data, b_scales, b_amax, out_dtype, bias):
    """(m, n, k, bias) of two swizzled NVFP4 triples; every tensor checked against the
    shapes that the codes' [rows, K/2] imply, and against a_data's device."""
    # The common case in one expression, in as few tensor-attribute reads as it takes (this
    # runs on every GEMM); anything else falls through to the checks that name the field.
    ash, bsh = a_data.shape, b_data.shape
    if len(ash) == 2 and len(bsh) == 2 and bias is None:
        m, kh = ash
        n = bsh[0]
        sc = (kh // 8 + 3) // 4 * 4  # roundup(K/16, 4)
        dev = a_data.device
        if (kh % 8 == 0 and bsh[1] == kh and a_data.dtype is _U8 and b_data.dtype is _U8 and a_amax.dtype is _F32
                and b_amax.dtype is _F32 and (a_scales.dtype is _E4M3 or a_scales.dtype is _U8)
                and (b_scales.dtype is _E4M3 or b_scales.dtype is _U8)
                and a_scales.shape == ((m + 127) // 128 * 128, sc) and b_scales.shape == ((n + 127) // 128 * 128, sc)
                and a_amax.shape == _ONE and b_amax.shape == _ONE and a_data.is_contiguous() and b_data.is_contiguous()
                and a_scales.is_contiguous() and b_scales.is_contiguous() and a_scales.device == dev
                and a_amax.device == dev and b_data.device == dev and b_scales.device == dev and b_amax.device == dev
                and out_dtype in DTYPE_CODE):
            return m, n, kh * 2, None
    _need_2d("a_data", a_data)
    _need_2d("b_data", b_data)
    m, kh = a_data.shape
    n = b_data.shape[0]
    k = kh * 2
    if k % 16:
        raise ValueError(f"a_data: K = 2 * shape[1] must be a multiple of 16, got {k}")
    dev = a_data.device
    check.nvfp4_orientation("a", a_data, a_scales, a_amax, m, k, _LAYOUT_SWIZZLED, sep="_")
    check.nvfp4_orientation("b", b_data, b_scales, b_amax, n, k, _LAYOUT_SWIZZLED, dev, "a_data", sep="_")
    if out_dtype not in DTYPE_CODE:
        raise TypeError(f"out_dtype: must be float32, float16 or bfloat16, got {out_dtype}")
    return m, n, k, _bias(bias, n, dev, "a_data")


def _gemm_impl(a_data, a_scales, a_amax, b_data, b_scales, b_amax, backend, out_dtype, bias):
    m, n, k, bias = _gemm_check(a_data, a_scales, a_amax, b_data, b_scales, b_amax, out_dtype, bias)
    d = torch.empty((m, n), dtype=out_dtype, device=a_data.device)
    if m == 0 or n == 0:
        return d
    _run_gemm((a_data.data_ptr(), a_scales.data_ptr(), a_amax.data_ptr()),
              (b_data.data_ptr(), b_scales.data_ptr(), b_amax.data_ptr()), m, n, k, d, bias, backend, _device(d))
    return d


def gemm_addresses(a: Tuple[int, int, int], b: Tuple[int, int, int], m: int, n: int, k: int, device: torch.device,
                   backend: int, out_dtype: torch.dtype, bias: Optional[torch.Tensor]) -> torch.Tensor:
    """The gemm op's implementation after its checks: alpha * (Â @ B̂ᵀ) (+ bias), [m, n], of two
    swizzled operands given as (data, scales, amax) addresses on `device`. For callers that
    proved those addresses (nvfp4.gemm on NVFP4Tensors whose buffers it checked, in eager
    code: nvfp4._tensor); bias is None or a checked contiguous [n] tensor on `device`."""
    d = torch.empty(m, n, dtype=out_dtype, device=device)
    if m and n:
        _run_gemm(a, b, m, n, k, d, bias, backend, _device(d))
    return d


def _gemm_fake(a_data, a_scales, a_amax, b_data, b_scales, b_amax, backend, out_dtype, bias):
    m, n, _, _ = _gemm_check(a_data, a_scales, a_amax, b_data, b_scales, b_amax, out_dtype, bias)
    return a_data.new_empty((m, n), dtype=out_dtype)


for _k in ("CPU", "CUDA"):
    lib.impl("gemm", lambda *a: _gemm_impl(*a), _k)
torch.library.register_fake("nvfp4::gemm", _gemm_fake, lib=lib)


def gemm(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor], backend: int = 0,
         out_dtype: torch.dtype = torch.bfloat16, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """alpha * (Â @ B̂ᵀ) (+ bias) of two rowwise (data, scales, amax) triples: [rows_a, rows_b].
    backend: the C API code (0 auto, 1 reference, 2 cutlass, 3 cudnn)."""
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, (tuple, list)) or len(t) != 3:
            raise TypeError(f"{name}: expected a (data, scales, amax) triple, got {type(t).__name__}")
    return torch.ops.nvfp4.gemm(a[0], a[1], a[2], b[0], b[1], b[2], backend, out_dtype, bias)


# MXFP4 GEMM (nvfp4_mx_gemm) as an op: A^ @ B^ᵀ (+ bias) of two rowwise MXFP4 orientations
# (codes [rows, K/2], E8M0 scales in `layout`: 0 linear, 1 swizzled), [rows_a, rows_b].
lib.define("mx_gemm(Tensor a_data, Tensor a_scales, Tensor b_data, Tensor b_scales, int layout, int backend, "
           "ScalarType out_dtype, Tensor? bias) -> Tensor")


def _mx_gemm_check(a_data, a_scales, b_data, b_scales, layout, out_dtype, bias):
    _need_2d("a_data", a_data)
    _need_2d("b_data", b_data)
    if layout not in (0, 1):
        raise ValueError(f"layout: 0 (linear) or 1 (swizzled), got {layout}")
    m, kh = a_data.shape
    n, k = b_data.shape[0], kh * 2
    if k % 32:
        raise ValueError(f"a_data: K = 2 * shape[1] must be a multiple of 32 (MXFP4 blocks), got {k}")
    dev = a_data.device
    check.mx_orientation("a", a_data, a_scales, m, k, layout, sep="_")
    check.mx_orientation("b", b_data, b_scales, n, k, layout, dev, "a_data", sep="_")
    if out_dtype not in DTYPE_CODE:
        raise TypeError(f"out_dtype: must be float32, float16 or bfloat16, got {out_dtype}")
    return m, n, _bias(bias, n, dev, "a_data")


def _mx_gemm_impl(a_data, a_scales, b_data, b_scales, layout, backend, out_dtype, bias):
    m, n, bias = _mx_gemm_check(a_data, a_scales, b_data, b_scales, layout, out_dtype, bias)
    d = torch.empty((m, n), dtype=out_dtype, device=a_data.device)
    if d.numel() == 0:
        return d
    return mx_gemm_into(a_data, a_scales, b_data, b_scales, layout, d, bias=bias, backend=backend)


def _mx_gemm_fake(a_data, a_scales, b_data, b_scales, layout, backend, out_dtype, bias):
    m, n, _ = _mx_gemm_check(a_data, a_scales, b_data, b_scales, layout, out_dtype, bias)
    return a_data.new_empty((m, n), dtype=out_dtype)


for _k in ("CPU", "CUDA"):
    lib.impl("mx_gemm", lambda *a: _mx_gemm_impl(*a), _k)
torch.library.register_fake("nvfp4::mx_gemm", _mx_gemm_fake, lib=lib)


def mx_gemm(a_data, a_scales, b_data, b_scales, layout: int, backend: int = 0,
            out_dtype: torch.dtype = torch.bfloat16, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Â @ B̂ᵀ (+ bias) of two rowwise MXFP4 orientations, as the op (traceable)."""
    return torch.ops.nvfp4.mx_gemm(a_data, a_scales, b_data, b_scales, layout, backend, out_dtype, bias)


# ------------------------------------------------------------------------------ dequantize and the scale swizzle
# The library's decode and its 128x4 layout (core::swizzle_offset) as ops, so that layers
# that need them inside a compiled graph (nvfp4.nn.FrozenLinear) call the one definition.
lib.define("dequantize(Tensor data, Tensor scales, Tensor amax, ScalarType dtype) -> Tensor")
lib.define("swizzle(Tensor src, int rows, int cols, bool to_swizzled) -> Tensor")


def _dequantize_check(data, scales, amax, dtype):
    _need_2d("data", data)
    rows, cols = data.shape[0], data.shape[1] * 2
    if cols % 16:
        raise ValueError(f"data: 2 * shape[1] must be a multiple of 16, got {cols}")
    # amax: float32 [1], or its 4 bytes (a packed buffer's section)
    if amax.dtype == torch.uint8 and tuple(amax.shape) == (4,):
        amax = amax.view(torch.float32)
    check.nvfp4_orientation("", data, scales, amax, rows, cols, _LAYOUT_SWIZZLED, sep="")
    if dtype not in DTYPE_CODE:
        raise TypeError(f"dtype: must be float32, float16 or bfloat16, got {dtype}")
    return rows, cols, amax


def _dequantize_impl(data, scales, amax, dtype):
    rows, cols, amax = _dequantize_check(data, scales, amax, dtype)
    out = torch.empty((rows, cols), dtype=dtype, device=data.device)
    dequantize_into(data, scales.view(torch.uint8), amax, _LAYOUT_SWIZZLED, out)
    return out


def _dequantize_fake(data, scales, amax, dtype):
    rows, cols, _ = _dequantize_check(data, scales, amax, dtype)
    return data.new_empty((rows, cols), dtype=dtype)


_BYTE_DTYPES = tuple(dict.fromkeys((torch.uint8, torch.float8_e4m3fn) + check.MX_SCALE_DTYPES))


def _swizzle_check(src, rows, cols, to_swizzled):
    _need_2d("src", src)
    if rows < 0 or cols < 0:
        raise ValueError(f"rows/cols: must be >= 0, got {rows}, {cols}")
    want = (rows, cols) if to_swizzled else swizzled_shape(rows, cols)
    check.tensor("src", src, _BYTE_DTYPES, want, contiguous=False)
    return swizzled_shape(rows, cols) if to_swizzled else (rows, cols)


def _swizzle_impl(src, rows, cols, to_swizzled):
    shape = _swizzle_check(src, rows, cols, to_swizzled)
    dst = torch.empty(shape, dtype=torch.uint8, device=src.device)
    swizzle_into(src.contiguous().view(torch.uint8), dst, to_swizzled)
    return dst


def _swizzle_fake(src, rows, cols, to_swizzled):
    return src.new_empty(_swizzle_check(src, rows, cols, to_swizzled), dtype=torch.uint8)


for _k in ("CPU", "CUDA"):
    lib.impl("dequantize", lambda *a: _dequantize_impl(*a), _k)
    lib.impl("swizzle", lambda *a: _swizzle_impl(*a), _k)
torch.library.register_fake("nvfp4::dequantize", _dequantize_fake, lib=lib)
torch.library.register_fake("nvfp4::swizzle", _swizzle_fake, lib=lib)


def dequantize(data: torch.Tensor, scales: torch.Tensor, amax: torch.Tensor, dtype=torch.float32) -> torch.Tensor:
    """Decoded values [rows, cols] of one rowwise orientation (data uint8 [rows, cols/2],
    swizzled scales as E4M3 or bytes, amax float32 [1] or its 4 bytes), rounded once to dtype."""
    return torch.ops.nvfp4.dequantize(data, scales, amax, dtype)


def swizzle(src: torch.Tensor, rows: int, cols: int, to_swizzled: bool = True) -> torch.Tensor:
    """Scale bytes between the linear [rows, cols] and the 128x4-swizzled layout."""
    return torch.ops.nvfp4.swizzle(src, rows, cols, to_swizzled)


# ------------------------------------------------------------------------------ the array path
# The public functions' other layouts and options (linear scales, out= and beta, MXFP4)
# hand tensors to the C API through DLPack; the C API checks them again (shape, dtype,
# contiguity) from their descriptors. The callers have checked them already (nvfp4._checks),
# so that errors name the caller's fields.

def quantize_into(x2: torch.Tensor, row, col, block: int, rounding: int, layout: int, rht: int, sign_mask: int,
                  seed: int, offset: int) -> None:
    """NVFP4 quantization of x2 [rows, cols] into row / col: (data, scale bytes, amax) or None."""
    _C.quantize(x2, *(row or (None, None, None)), *(col or (None, None, None)), block, rounding, layout, rht,
                sign_mask, seed, offset, stream_of(x2.device))


def quantize_options_into(x2: torch.Tensor, row, col, block: int, rounding: int, layout: int, rht: int,
                          sign_mask: int, seed: int, offset: int, scale_select: int, e4m3_bound: int, amax_mode: int,
                          amax_in: Optional[torch.Tensor]) -> None:
    """NVFP4 quantization with the recipe options (nvfp4.quantize_options) of x2 [rows, cols]
    into row / col: (data, scale bytes, amax) or None."""
    _C.quantize_options(x2, *(row or (None, None, None)), *(col or (None, None, None)), block, rounding, layout, rht,
                        sign_mask, seed, offset, scale_select, e4m3_bound, amax_mode, amax_in, stream_of(x2.device))


def dequantize_into(data, scale_bytes, amax, layout: int, out: torch.Tensor) -> torch.Tensor:
    _C.dequantize(data, scale_bytes, amax, layout, out, stream_of(out.device))
    return out


def swizzle_into(src_bytes: torch.Tensor, dst: torch.Tensor, to_swizzled: bool) -> torch.Tensor:
    _C.swizzle(src_bytes, dst, to_swizzled, stream_of(src_bytes.device))
    return dst


def gemm_into(a: Tuple[torch.Tensor, torch.Tensor, torch.Tensor], b: Tuple[torch.Tensor, torch.Tensor, torch.Tensor],
              layout: int, d: torch.Tensor, *, c: Optional[torch.Tensor] = None, bias: Optional[torch.Tensor] = None,
              beta: float = 0.0, backend: int = 0) -> torch.Tensor:
    """d [M, N] = alpha * Â @ B̂ᵀ (+ beta * c) (+ bias) of two NVFP4 triples (data, scale
    bytes, amax) in `layout`, through nvfp4_gemm; returns d."""
    m, n, k = a[0].shape[0], b[0].shape[0], a[0].shape[1] * 2
    args = (*a, *b, layout, c, bias, float(beta), d, backend)
    ws_bytes = _workspace(("array", m, n, k, layout, backend, d.dtype, c is not None,
                           None if bias is None else bias.dtype, d.device, gemm_env_key()),
                          lambda: _C.gemm_workspace_size(*args))
    ws = torch.empty((ws_bytes,), dtype=torch.uint8, device=d.device) if ws_bytes else None
    _C.gemm(*args, ws, stream_of(d.device))
    return d


def mx_quantize_into(x2: torch.Tensor, row, col, row_rounding: int, row_rule: int, col_rounding: int, col_rule: int,
                     layout: int, seed: int, offset: int) -> None:
    """MXFP4 quantization of x2 [rows, cols] into row / col: (data, scale bytes) or None."""
    _C.mx_quantize(x2, *(row or (None, None)), *(col or (None, None)), row_rounding, row_rule, col_rounding, col_rule,
                   layout, seed, offset, stream_of(x2.device))


def mx_dequantize_into(data: torch.Tensor, scale_bytes: torch.Tensor, layout: int, out: torch.Tensor) -> torch.Tensor:
    _C.mx_dequantize(data, scale_bytes, layout, out, stream_of(out.device))
    return out


def mx_gemm_into(a_data: torch.Tensor, a_scales: torch.Tensor, b_data: torch.Tensor, b_scales: torch.Tensor,
                 layout: int, d: torch.Tensor, *, c: Optional[torch.Tensor] = None, bias: Optional[torch.Tensor] = None,
                 beta: float = 0.0, backend: int = 0) -> torch.Tensor:
    """d [M, N] = Â @ B̂ᵀ (+ beta * c) (+ bias) on two MXFP4 orientations (data [M, K/2], E8M0
    scales in `layout`), through nvfp4_mx_gemm; returns d."""
    m, n, k = a_data.shape[0], b_data.shape[0], a_data.shape[1] * 2
    args = (a_data, a_scales.view(torch.uint8), b_data, b_scales.view(torch.uint8), layout, c, bias, float(beta), d,
            backend)
    ws_bytes = _workspace(("mx", m, n, k, layout, backend, d.dtype, c is not None,
                           None if bias is None else bias.dtype, d.device, gemm_env_key()),
                          lambda: _C.mx_gemm(*args, None, 0, True))
    ws = torch.empty((ws_bytes,), dtype=torch.uint8, device=d.device) if ws_bytes else None
    _C.mx_gemm(*args, ws, stream_of(d.device), False)
    return d


# ------------------------------------------------------------------------------ grouped (MoE) tensors
# Token-sorted activations [T, K] split into E groups (experts) by offs, int32 [E] cumulative
# ends on the tensors' device (torch._grouped_mm's convention), and expert weights [E, N, K].
# Layouts: nvfp4.h's grouped section. Sizes come from T, E and the features only: offs is never
# read on the host for CUDA tensors. Every grouped op also returns `offs_error`, int32 [1]: 0, or
# the NVFP4_OFFS_* bits of what was wrong with offs (CUDA writes it in stream order; on the CPU a
# bad offs raises instead), for callers that check lazily (nvfp4.grouped_check_offs).

GROUP_TOKEN_ALIGN = 32  # a group's tokens are padded to this in its columnwise direction
RAGGED_M, RAGGED_K = 0, 1


def grouped_row_shapes(t, k, e):
    """Shapes of a grouped rowwise direction of [t, k] in e groups: data, scales, amax."""
    return (t, k // 2), (_up(t + 127 * e, 128), _up(k // 16, 4)), (e,)


def grouped_col_shapes(t, f, e):
    """Shapes of a grouped columnwise direction of [t, f] in e groups (1-D buffers, group-major
    blocks [f, roundup(m_g, 32)/2])."""
    return (f * (t + 31 * e) // 2,), (_up(f, 128) * ((t + 63 * e) // 16),), (e,)


def batched_shapes(e, rows, cols):
    """Shapes of a batched direction: e tensors [rows, cols], stacked."""
    return (e, rows, cols // 2), (e, _up(rows, 128), _up(cols // 16, 4)), (e,)


# The dtypes of a packed direction's three tensors: E2M1 codes (two per byte), E4M3 block
# scales, the FP32 amax (one per tensor, or per expert).
TRIPLE_DTYPES = (torch.uint8, torch.float8_e4m3fn, torch.float32)


def _alloc3(shapes, device):
    return tuple(torch.empty(shape, dtype=dt, device=device) for shape, dt in zip(shapes, TRIPLE_DTYPES))


def _addr3(ts) -> Tuple[int, int, int]:
    return tuple(t.data_ptr() for t in ts)


def _aligned(t: torch.Tensor) -> torch.Tensor:
    """t contiguous and, on CUDA, 16-byte aligned (the C API's rule for device tensors; a view
    at an odd offset is copied)."""
    t = t.contiguous()
    return t.clone() if (t.is_cuda and t.data_ptr() % 16) else t


def _check_offs(offs: torch.Tensor, x: torch.Tensor, groups: Optional[int] = None) -> None:
    """offs must be int32 [E], contiguous, on x's device (its contents are checked by the
    library: on the host for CPU tensors, on the device for CUDA ones)."""
    if not isinstance(offs, torch.Tensor):
        raise TypeError(f"offs: must be a torch.Tensor, got {type(offs).__name__}")
    if offs.dtype != torch.int32:
        raise ValueError(f"offs: dtype must be torch.int32 (cumulative group ends), got {offs.dtype}")
    if offs.dim() != 1 or offs.numel() < 1:
        raise ValueError(f"offs: must be a 1-D tensor of at least one group end, got shape {tuple(offs.shape)}")
    if offs.device != x.device:
        raise ValueError(f"offs: on {offs.device}, but the tensors are on {x.device} (offs stays on the device)")
    if not offs.is_contiguous():
        raise ValueError("offs: must be contiguous")
    if groups is not None and offs.numel() != groups:
        raise ValueError(f"offs: {offs.numel()} group ends for {groups} groups")


lib.define("grouped_quantize(Tensor x, Tensor offs, int rounding, int rht, int sign_mask, int seed, int offset, "
           "Tensor? offset_device, bool rowwise, bool columnwise) -> Tensor[]")
lib.define("batched_quantize(Tensor x, int block, int rounding, int rht, int sign_mask, int seed, int offset, "
           "Tensor? offset_device, bool rowwise, bool columnwise) -> Tensor[]")
lib.define("grouped_gemm(int kind, Tensor a_data, Tensor a_scales, Tensor a_amax, Tensor b_data, Tensor b_scales, "
           "Tensor b_amax, Tensor offs, int tokens, int n, int k, int backend, ScalarType out_dtype) -> Tensor[]")


def _grouped_outputs(t, k, e, rowwise, columnwise, device):
    row = _alloc3(grouped_row_shapes(t, k, e), device) if rowwise else _empty3(device)
    col = _alloc3(grouped_col_shapes(t, k, e), device) if columnwise else _empty3(device)
    return row, col, torch.empty((1,), dtype=torch.int32, device=device)


def _grouped_quantize_impl(x, offs, rounding, rht, sign_mask, seed, offset, offset_device, rowwise, columnwise):
    _need_2d("x", x)
    _check_offs(offs, x)
    x = _aligned(x)
    seed, offset = seed & _U64, offset & _U64
    t, k = x.shape
    e = offs.shape[0]
    row, col, err = _grouped_outputs(t, k, e, rowwise, columnwise, x.device)
    dt, di, st = _device(x)
    grouped_quantize_raw(x.data_ptr(), DTYPE_CODE[x.dtype], t, k, offs.data_ptr(), e, err.data_ptr(),
                            *(_addr3(row) if rowwise else (0, 0, 0)), *(_addr3(col) if columnwise else (0, 0, 0)),
                            rounding, rht, sign_mask, seed, offset,
                            0 if offset_device is None else offset_device.data_ptr(), dt, di, st)
    return [*row, *col, err]


def _grouped_quantize_fake(x, offs, rounding, rht, sign_mask, seed, offset, offset_device, rowwise, columnwise):
    t, k = x.shape
    row, col, err = _grouped_outputs(t, k, offs.shape[0], rowwise, columnwise, x.device)
    return [*row, *col, err]


def _batched_outputs(e, n, k, rowwise, columnwise, device):
    row = _alloc3(batched_shapes(e, n, k), device) if rowwise else _empty3(device)
    col = _alloc3(batched_shapes(e, k, _up(n, 16)), device) if columnwise else _empty3(device)
    return row, col


def _batched_quantize_impl(x, block, rounding, rht, sign_mask, seed, offset, offset_device, rowwise, columnwise):
    if x.dim() != 3:
        raise ValueError(f"x: batched quantization takes [E, N, K], got shape {tuple(x.shape)}")
    x = _aligned(x)
    seed, offset = seed & _U64, offset & _U64
    e, n, k = x.shape
    row, col = _batched_outputs(e, n, k, rowwise, columnwise, x.device)
    dt, di, st = _device(x)
    batched_quantize_raw(x.data_ptr(), DTYPE_CODE[x.dtype], e, n, k, *(_addr3(row) if rowwise else (0, 0, 0)),
                            *(_addr3(col) if columnwise else (0, 0, 0)), block, rounding, rht, sign_mask, seed,
                            offset, 0 if offset_device is None else offset_device.data_ptr(), dt, di, st)
    return [*row, *col]


def _batched_quantize_fake(x, block, rounding, rht, sign_mask, seed, offset, offset_device, rowwise, columnwise):
    e, n, k = x.shape
    row, col = _batched_outputs(e, n, k, rowwise, columnwise, x.device)
    return [*row, *col]


_GWS: dict = {}


def grouped_gemm_workspace_bytes(kind, e, t, n, k, backend, out_dtype, dev) -> int:
    """The workspace nvfp4_grouped_gemm asks for (a function of the shapes, the backend, the
    device and the GEMM environment, never of offs), asked once per key."""
    key = (kind, e, t, n, k, backend, out_dtype, dev[0], dev[1], gemm_env_key())
    v = _GWS.get(key)
    if v is None:
        dt, di, _ = dev
        a = [(i + 1) << 40 for i in range(9)]  # distinct aligned dummies: sizes only, nothing is touched
        v = grouped_gemm_raw(kind, a[0], a[1], a[2], a[3], a[4], a[5], a[6], e, t, n, k, 0, a[7],
                                DTYPE_CODE[out_dtype], backend, 0, -1, dt, di, 0)
        if len(_GWS) > 4096:
            _GWS.clear()
        _GWS[key] = v
    return v


def _grouped_gemm_run(kind, a, b, offs, t, n, k, backend, d, err, dev, ws_base=None, ws_bytes=0):
    """d = the grouped product of (data, scales, amax) address triples a and b; allocates the
    workspace unless given one (returned, to keep alive until the stream used it)."""
    e = offs.shape[0]
    ws = None
    if ws_base is None:
        ws_bytes = grouped_gemm_workspace_bytes(kind, e, t, n, k, backend, d.dtype, dev)
        ws = torch.empty((ws_bytes,), dtype=torch.uint8, device=d.device) if ws_bytes else None
        ws_base = ws.data_ptr() if ws_bytes else 0
    dt, di, st = dev
    grouped_gemm_raw(kind, *a, *b, offs.data_ptr(), e, t, n, k, err.data_ptr(), d.data_ptr(), DTYPE_CODE[d.dtype],
                        backend, ws_base, ws_bytes, dt, di, st)
    return ws


def _grouped_gemm_out_shape(kind, e, tokens, n, k):
    return (tokens, n) if kind == RAGGED_M else (e, n, k)


def _grouped_gemm_impl(kind, a_data, a_scales, a_amax, b_data, b_scales, b_amax, offs, tokens, n, k, backend,
                       out_dtype):
    if kind not in (RAGGED_M, RAGGED_K):
        raise ValueError(f"kind: 0 (ragged M) or 1 (ragged K), got {kind}")
    _check_offs(offs, a_data)
    e = offs.shape[0]
    d = torch.empty(_grouped_gemm_out_shape(kind, e, tokens, n, k), dtype=out_dtype, device=a_data.device)
    err = torch.empty((1,), dtype=torch.int32, device=a_data.device)
    ts = (a_data, a_scales, a_amax, b_data, b_scales, b_amax)
    for name, ten in zip(("a_data", "a_scales", "a_amax", "b_data", "b_scales", "b_amax"), ts):
        if ten.device != a_data.device:
            raise ValueError(f"{name}: on {ten.device}, but a_data is on {a_data.device}")
        if not ten.is_contiguous():
            raise ValueError(f"{name}: must be contiguous")
    _grouped_gemm_run(kind, _addr3(ts[:3]), _addr3(ts[3:]), offs, tokens, n, k, backend, d, err, _device(a_data))
    return [d, err]


def _grouped_gemm_fake(kind, a_data, a_scales, a_amax, b_data, b_scales, b_amax, offs, tokens, n, k, backend,
                       out_dtype):
    d = a_data.new_empty(_grouped_gemm_out_shape(kind, offs.shape[0], tokens, n, k), dtype=out_dtype)
    return [d, a_data.new_empty((1,), dtype=torch.int32)]


for _k in ("CPU", "CUDA"):
    lib.impl("grouped_quantize", lambda *a: _grouped_quantize_impl(*a), _k)
    lib.impl("batched_quantize", lambda *a: _batched_quantize_impl(*a), _k)
    lib.impl("grouped_gemm", lambda *a: _grouped_gemm_impl(*a), _k)
torch.library.register_fake("nvfp4::grouped_quantize", _grouped_quantize_fake, lib=lib)
torch.library.register_fake("nvfp4::batched_quantize", _batched_quantize_fake, lib=lib)
torch.library.register_fake("nvfp4::grouped_gemm", _grouped_gemm_fake, lib=lib)


def grouped_quantize(x, offs, rounding=0, rht=0, sign_mask=0, seed=0, offset=0, offset_device=None, rowwise=True,
                     columnwise=False) -> List[torch.Tensor]:
    """[row data, scales, amax, col data, scales, amax, offs_error] of x [T, K] in groups."""
    return torch.ops.nvfp4.grouped_quantize(x, offs, rounding, rht, sign_mask, seed, offset, offset_device, rowwise,
                                            columnwise)


def batched_quantize(x, block=0, rounding=0, rht=0, sign_mask=0, seed=0, offset=0, offset_device=None, rowwise=True,
                     columnwise=False) -> List[torch.Tensor]:
    """[row data, scales, amax, col data, scales, amax] of x [E, N, K] as E tensors."""
    return torch.ops.nvfp4.batched_quantize(x, block, rounding, rht, sign_mask, seed, offset, offset_device, rowwise,
                                            columnwise)


def grouped_gemm(kind, a, b, offs, tokens, n, k, backend, out_dtype) -> List[torch.Tensor]:
    """[d, offs_error] of a grouped GEMM of (data, scales, amax) triples a and b."""
    return torch.ops.nvfp4.grouped_gemm(kind, *a, *b, offs, tokens, n, k, backend, out_dtype)


# ------------------------------------------------------------------------------ gather rows (the FSDP weight all-gather)
# nvfp4.h's gather section: a weight quantized in 16x16 tiles travels as rows of K/2 code bytes
# then K/16 linear scale bytes (nvfp4.distributed). One kernel each way.
gather_rows_quantize_raw = _C.gather_rows_quantize_raw
gather_rows_assemble_raw = _C.gather_rows_assemble_raw

lib.define("gather_rows_quantize(Tensor x, Tensor amax, Tensor(a!) out) -> ()")
lib.define("gather_rows_assemble(Tensor rows, Tensor amax, int n, int k, bool transpose, Tensor(a!) buf) -> ()")


def _gather_rows(name: str, t, rows: int, k: int, device, device_of: str) -> None:
    """uint8 [>= rows, >= k/2 + k/16], contiguous, on `device`."""
    check.tensor(name, t, (torch.uint8,), None, device, device_of)
    if t.dim() != 2 or t.shape[0] < rows or t.shape[1] < k // 2 + k // 16:
        raise ValueError(f"{name}: expected uint8 rows [>= {rows}, >= {k // 2 + k // 16}] (K/2 code bytes and K/16 "
                         f"scale bytes a row for K = {k}), got {check.describe(t)}")


def _gather_rows_quantize_check(x, amax, out):
    _need_2d("x", x)
    check.tensor("x", x, check.FLOATS, contiguous=False)
    check.tensor("amax", amax, (_F32,), _ONE, x.device, "x")
    _gather_rows("out", out, x.shape[0], x.shape[1], x.device, "x")


def _gather_rows_quantize_impl(x, amax, out):
    _gather_rows_quantize_check(x, amax, out)
    x = x.contiguous()
    dt, di, st = _device(x)
    gather_rows_quantize_raw(x.data_ptr(), DTYPE_CODE[x.dtype], x.shape[0], x.shape[1], amax.data_ptr(),
                             out.data_ptr(), out.shape[0], out.shape[1], dt, di, st)


def _gather_rows_assemble_check(rows, amax, n, k, transpose, buf):
    _gather_rows("rows", rows, n, k, None, "")
    check.tensor("amax", amax, (_F32,), _ONE, rows.device, "rows")
    need = packed_nbytes(n, k) + (packed_nbytes(k, n) if transpose else 0)
    check.tensor("buf", buf, (torch.uint8,), None, rows.device, "rows")
    if buf.dim() != 1 or buf.numel() < need:
        raise ValueError(f"buf: expected a packed uint8 buffer of at least {need} bytes (W [{n}, {k}]"
                         f"{' and its transpose' if transpose else ''}), got {check.describe(buf)}")


def _gather_rows_assemble_impl(rows, amax, n, k, transpose, buf):
    _gather_rows_assemble_check(rows, amax, n, k, transpose, buf)
    dt, di, st = _device(rows)
    base = buf.data_ptr()
    col = addresses(base + packed_nbytes(n, k), k, n) if transpose else (0, 0, 0)
    gather_rows_assemble_raw(rows.data_ptr(), rows.shape[0], rows.shape[1], amax.data_ptr(), n, k,
                             *addresses(base, n, k), *col, dt, di, st)


for _k in ("CPU", "CUDA"):
    lib.impl("gather_rows_quantize", lambda *a: _gather_rows_quantize_impl(*a), _k)
    lib.impl("gather_rows_assemble", lambda *a: _gather_rows_assemble_impl(*a), _k)
torch.library.register_fake("nvfp4::gather_rows_quantize", _gather_rows_quantize_check, lib=lib)
torch.library.register_fake("nvfp4::gather_rows_assemble", _gather_rows_assemble_check, lib=lib)


def gather_rows_quantize(x: torch.Tensor, amax: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Quantizes x [R, K] (R % 16 == 0) in 16x16 tiles with the per-tensor amax `amax`
    (float32 [1]: the whole weight's) into out, uint8 [R_out >= R, row_bytes]: per row K/2
    code bytes, K/16 linear scale bytes, zeros; rows past R zero. Returns out."""
    torch.ops.nvfp4.gather_rows_quantize(x, amax, out)
    return out


def gather_rows_assemble(rows: torch.Tensor, amax: torch.Tensor, n: int, k: int, buf: torch.Tensor,
                         transpose: bool = True) -> torch.Tensor:
    """From the gather rows of W [n, k] (rows uint8 [>= n, row_bytes]) and its amax, writes W's
    packed orientation (swizzled scales) at the start of buf and, with `transpose`, Wᵀ's
    (the quantization of Wᵀ in 16x16 tiles) right after it, at packed_nbytes(n, k). Returns buf."""
    torch.ops.nvfp4.gather_rows_assemble(rows, amax, n, k, transpose, buf)
    return buf
