"""nvfp4's torch operators (namespace ``nvfp4``): the one layer between torch and the library.

Every device op nvfp4 runs from PyTorch goes through here, eagerly or inside a compiled
graph, so the two take the same path and compute the same bits. The ops are declared with
``torch.library.Library`` (a plain dispatcher registration: ~5 us a call, against ~20 us for
``torch.library.custom_op``) and call the compiled module through its raw-pointer entry
points (a torch tensor converted through DLPack costs ~5 us).

Ops:
- ``quantize``: rowwise and/or columnwise quantization, six tensors out (the public
  ``nvfp4.quantize`` and tests use it).
- ``gemm``: alpha * (Â @ B̂ᵀ) (+ bias) of two rowwise triples (data, scales, amax).
- ``linear_fwd`` / ``linear_bwd``: one call per pass of an nvfp4 Linear (see nvfp4.nn.linear):
  the forward quantizes X (and its columnwise copy for wgrad) and W and runs the forward
  GEMM; the backward quantizes dY both ways and runs dgrad and wgrad. Stochastic rounding
  reads the layer's step counter on the device, and the backward advances it there, so a
  captured CUDA graph replays with fresh random bits and a recomputed forward
  (activation checkpointing) sees the same counter as the original one.

A quantized orientation [rows, cols] that the Linear keeps is one uint8 buffer, "packed":
data (rows*cols/2 bytes), then the swizzled scales, then the float32 amax, each section
starting on a 256-byte boundary (`packed_layout`). One allocation instead of three.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import torch

from . import _C
from ._format import swizzled_shape

__all__ = ["DTYPE_CODE", "packed_layout", "packed_nbytes", "unpack", "dequantize", "swizzle", "quantize", "gemm", "linear_fwd", "linear_bwd",
           "LinearConfig", "gemm_workspace_bytes", "gemm_env_key", "TOKEN_ALIGN"]

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


_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # absent from CPU-only builds


def _device(t: torch.Tensor) -> Tuple[int, int, int]:
    """(device type code, index, stream) of a tensor, as the raw entry points take them."""
    d = t.device
    if d.type == "cuda":
        # the raw handle of the current stream, without building a torch.cuda.Stream (~4 us)
        if _raw_stream is not None:
            return 1, d.index, _raw_stream(d.index)
        return 1, d.index, torch.cuda.current_stream(d).cuda_stream
    if d.type == "cpu":
        return 0, 0, 0
    raise ValueError(f"nvfp4 ops run on cpu or cuda tensors, got a tensor on {d}")


def _addresses(base: int, rows: int, cols: int) -> Tuple[int, int, int]:
    so, ao, _ = packed_layout(rows, cols)
    return base, base + so, base + ao


# ------------------------------------------------------------------------------ GEMM workspace sizes
_WS: dict = {}

# The GEMM environment (nvfp4_gemm_env_key: the variables the library reads on each GEMM
# call that can change the kernel, and so the workspace) is part of every workspace-size
# key, so a cached size cannot outlive a change of them.
gemm_env_key = _C.gemm_env_key


def gemm_workspace_bytes(m, n, k, backend: int, out_dtype: torch.dtype, bias_dtype, has_c: bool,
                         device: torch.device, dev: Tuple[int, int, int]) -> int:
    """The workspace the library asks for this problem, asked once per problem and GEMM
    environment (gemm_env_key): shapes, dtypes, backend, device and those variables."""
    key = (m, n, k, backend, out_dtype, bias_dtype, has_c, device, gemm_env_key())
    v = _WS.get(key)
    if v is None:
        dt, di, _ = dev
        # Sizes only: distinct, far-apart, aligned dummy addresses (the checks see no
        # overlap; nothing is read or written).
        a = [(i + 1) << 40 for i in range(9)]
        v = _C.gemm_raw(a[0], a[1], a[2], a[3], a[4], a[5], m, n, k, _LAYOUT_SWIZZLED,
                        a[6] if has_c else 0, DTYPE_CODE[out_dtype], a[7] if bias_dtype is not None else 0,
                        DTYPE_CODE.get(bias_dtype, 0), 0.0, a[8], DTYPE_CODE[out_dtype], backend, 0, -1, dt, di, 0)
        if len(_WS) > 4096:
            _WS.clear()
        _WS[key] = v
    return v


def clear_workspace_cache() -> None:
    """Forget the cached workspace sizes (frees the memory of the cache; never needed for
    correctness)."""
    _WS.clear()


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
            ws = torch.empty((ws_bytes,), dtype=torch.uint8, device=d.device)
            ws_base = ws.data_ptr()
        else:
            ws_base = 0
    dt, di, st = dev
    _C.gemm_raw(a[0], a[1], a[2], b[0], b[1], b[2], m, n, k, _LAYOUT_SWIZZLED, 0, 0,
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


def _fp8_cast_impl(x, format, margin, scale, rowwise, transposed):
    _need_2d("x", x)
    if format not in (0, 1):
        raise ValueError(f"format: 0 (E4M3) or 1 (E5M2), got {format}")
    if x.dtype not in DTYPE_CODE:
        raise ValueError(f"x: dtype must be float32, float16 or bfloat16, got {x.dtype}")
    x = x.contiguous()
    if x.is_cuda and x.data_ptr() % 16:
        x = x.clone()  # the kernels read 16-byte chunks; a fresh allocation is aligned
    q, qt, scale_inv, amax = _fp8_outputs(x, format, rowwise, transposed)
    dt, di, st = _device(x)
    _C.fp8_cast_raw(x.data_ptr(), DTYPE_CODE[x.dtype], x.shape[0], x.shape[1], format, margin,
                    0 if scale is None else scale.data_ptr(), q.data_ptr(), qt.data_ptr(), rowwise, transposed,
                    scale_inv.data_ptr(), amax.data_ptr(), dt, di, st)
    return [q, qt, scale_inv, amax]


def _fp8_cast_fake(x, format, margin, scale, rowwise, transposed):
    return list(_fp8_outputs(x, format, rowwise, transposed))


for _k in ("CPU", "CUDA"):
    lib.impl("fp8_cast", lambda *a: _fp8_cast_impl(*a), _k)
torch.library.register_fake("nvfp4::fp8_cast", _fp8_cast_fake, lib=lib)


# Delayed scaling's update of one role (nvfp4_fp8_delayed_update): history float32 [L] and
# scale float32 [] or [1], both updated in place on their device.
lib.define("fp8_delayed_update(Tensor(a!) history, Tensor(b!) scale, int format, float margin, int algo) -> ()")


def _fp8_delayed_update_impl(history, scale, format, margin, algo):
    if history.dim() != 1 or not history.is_contiguous():
        raise ValueError(f"history: must be a contiguous 1D tensor, got shape {tuple(history.shape)}")
    if scale.numel() != 1:
        raise ValueError(f"scale: must hold one element, got shape {tuple(scale.shape)}")
    if history.dtype != torch.float32 or scale.dtype != torch.float32:
        raise ValueError(f"history/scale: must be float32, got {history.dtype} / {scale.dtype}")
    if scale.device != history.device:
        raise ValueError(f"scale: on {scale.device}, but history is on {history.device}")
    dt, di, st = _device(history)
    _C.fp8_delayed_update_raw(history.data_ptr(), history.shape[0], scale.data_ptr(), format, margin, algo, dt, di,
                              st)


for _k in ("CPU", "CUDA"):
    lib.impl("fp8_delayed_update", lambda *a: _fp8_delayed_update_impl(*a), _k)
torch.library.register_fake("nvfp4::fp8_delayed_update", lambda *a: None, lib=lib)


# ------------------------------------------------------------------------------ quantize
lib.define("quantize(Tensor x, int block, int rounding, int rht, int sign_mask, int seed, int offset, "
           "Tensor? offset_device, bool rowwise, bool columnwise) -> Tensor[]")


def _alloc_orientation(rows, cols, device):
    return (torch.empty((rows, cols // 2), dtype=torch.uint8, device=device),
            torch.empty(swizzled_shape(rows, cols // 16), dtype=torch.float8_e4m3fn, device=device),
            torch.empty((1,), dtype=torch.float32, device=device))


def _empty3(device):
    return (torch.empty((0,), dtype=torch.uint8, device=device),
            torch.empty((0,), dtype=torch.float8_e4m3fn, device=device),
            torch.empty((0,), dtype=torch.float32, device=device))


_U64 = (1 << 64) - 1


def _need_2d(name: str, t: torch.Tensor) -> None:
    # the ops take 2D views; the C API checks the rest (dtype, device, sizes, alignment)
    if t.dim() != 2:
        raise ValueError(f"{name}: the nvfp4 ops take 2D tensors, got shape {tuple(t.shape)}")


def _quantize_impl(x, block, rounding, rht, sign_mask, seed, offset, offset_device, rowwise, columnwise):
    _need_2d("x", x)
    x = x.contiguous()
    seed, offset = seed & _U64, offset & _U64  # the schema's int is int64: the same bits as the uint64
    rows, cols = x.shape
    row = _alloc_orientation(rows, cols, x.device) if rowwise else _empty3(x.device)
    col = _alloc_orientation(cols, _up(rows, 16), x.device) if columnwise else _empty3(x.device)
    dt, di, st = _device(x)
    _C.quantize_raw(x.data_ptr(), DTYPE_CODE[x.dtype], rows, cols,
                    *((t.data_ptr() for t in row) if rowwise else (0, 0, 0)),
                    *((t.data_ptr() for t in col) if columnwise else (0, 0, 0)),
                    block, rounding, _LAYOUT_SWIZZLED, rht, sign_mask, seed, offset,
                    0 if offset_device is None else offset_device.data_ptr(), dt, di, st)
    return [*row, *col]


def _quantize_fake(x, block, rounding, rht, sign_mask, seed, offset, offset_device, rowwise, columnwise):
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


# ------------------------------------------------------------------------------ gemm
lib.define("gemm(Tensor a_data, Tensor a_scales, Tensor a_amax, Tensor b_data, Tensor b_scales, Tensor b_amax, "
           "int backend, ScalarType out_dtype, Tensor? bias) -> Tensor")


def _gemm_impl(a_data, a_scales, a_amax, b_data, b_scales, b_amax, backend, out_dtype, bias):
    _need_2d("a_data", a_data)
    _need_2d("b_data", b_data)
    m, n, k = a_data.shape[0], b_data.shape[0], a_data.shape[1] * 2
    d = torch.empty((m, n), dtype=out_dtype, device=a_data.device)
    if m == 0 or n == 0:
        return d
    dev = _device(d)
    bias = None if bias is None else bias.contiguous()
    _run_gemm((a_data.data_ptr(), a_scales.data_ptr(), a_amax.data_ptr()),
              (b_data.data_ptr(), b_scales.data_ptr(), b_amax.data_ptr()), m, n, k, d, bias, backend, dev)
    return d


def _gemm_fake(a_data, a_scales, a_amax, b_data, b_scales, b_amax, backend, out_dtype, bias):
    return a_data.new_empty((a_data.shape[0], b_data.shape[0]), dtype=out_dtype)


for _k in ("CPU", "CUDA"):
    lib.impl("gemm", lambda *a: _gemm_impl(*a), _k)
torch.library.register_fake("nvfp4::gemm", _gemm_fake, lib=lib)


def gemm(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor], backend: int = 0,
         out_dtype: torch.dtype = torch.bfloat16, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """alpha * (Â @ B̂ᵀ) (+ bias) of two rowwise (data, scales, amax) triples: [rows_a, rows_b].
    backend: the C API code (0 auto, 1 reference, 2 cutlass, 3 cudnn)."""
    return torch.ops.nvfp4.gemm(a[0], a[1], a[2], b[0], b[1], b[2], backend, out_dtype, bias)


# MXFP4 GEMM (nvfp4_mx_gemm) as an op: A^ @ B^ᵀ (+ bias) of two rowwise MXFP4 directions
# (codes [rows, K/2], E8M0 scales in `layout`: 0 linear, 1 swizzled), [rows_a, rows_b].
lib.define("mx_gemm(Tensor a_data, Tensor a_scales, Tensor b_data, Tensor b_scales, int layout, int backend, "
           "ScalarType out_dtype, Tensor? bias) -> Tensor")


def _mx_gemm_impl(a_data, a_scales, b_data, b_scales, layout, backend, out_dtype, bias):
    from ._mx import mx_gemm_raw  # here: _mx imports nothing of this module, but the package order does

    _need_2d("a_data", a_data)
    _need_2d("b_data", b_data)
    d = torch.empty((a_data.shape[0], b_data.shape[0]), dtype=out_dtype, device=a_data.device)
    if d.numel() == 0:
        return d
    bias = None if bias is None else bias.contiguous()
    return mx_gemm_raw(a_data.contiguous(), a_scales.contiguous(), b_data.contiguous(), b_scales.contiguous(), layout,
                       d, bias=bias, backend=backend)


def _mx_gemm_fake(a_data, a_scales, b_data, b_scales, layout, backend, out_dtype, bias):
    return a_data.new_empty((a_data.shape[0], b_data.shape[0]), dtype=out_dtype)


for _k in ("CPU", "CUDA"):
    lib.impl("mx_gemm", lambda *a: _mx_gemm_impl(*a), _k)
torch.library.register_fake("nvfp4::mx_gemm", _mx_gemm_fake, lib=lib)


# ------------------------------------------------------------------------------ dequantize and the scale swizzle
# The library's decode and its 128x4 layout (core::swizzle_offset) as ops, so that layers
# that need them inside a compiled graph (nvfp4.nn.FrozenLinear) call the one definition.
lib.define("dequantize(Tensor data, Tensor scales, Tensor amax, ScalarType dtype) -> Tensor")
lib.define("swizzle(Tensor src, int rows, int cols, bool to_swizzled) -> Tensor")


def _dequantize_impl(data, scales, amax, dtype):
    _need_2d("data", data)
    rows, cols = data.shape[0], data.shape[1] * 2
    out = torch.empty((rows, cols), dtype=dtype, device=data.device)
    _C.dequantize(data.contiguous(), scales.contiguous().view(torch.uint8), amax.reshape(1).view(torch.float32),
                  _LAYOUT_SWIZZLED, out, _device(data)[2])
    return out


def _swizzle_impl(src, rows, cols, to_swizzled):
    _need_2d("src", src)
    shape = swizzled_shape(rows, cols) if to_swizzled else (rows, cols)
    dst = torch.empty(shape, dtype=torch.uint8, device=src.device)
    _C.swizzle(src.contiguous().view(torch.uint8), dst, to_swizzled, _device(src)[2])
    return dst


for _k in ("CPU", "CUDA"):
    lib.impl("dequantize", lambda *a: _dequantize_impl(*a), _k)
    lib.impl("swizzle", lambda *a: _swizzle_impl(*a), _k)
torch.library.register_fake(
    "nvfp4::dequantize", lambda data, scales, amax, dtype: data.new_empty((data.shape[0], data.shape[1] * 2),
                                                                          dtype=dtype), lib=lib)
torch.library.register_fake(
    "nvfp4::swizzle", lambda src, rows, cols, to_swizzled: src.new_empty(
        swizzled_shape(rows, cols) if to_swizzled else (rows, cols), dtype=torch.uint8), lib=lib)


def dequantize(data: torch.Tensor, scales: torch.Tensor, amax: torch.Tensor, dtype=torch.float32) -> torch.Tensor:
    """Decoded values [rows, cols] of one rowwise orientation (data uint8 [rows, cols/2],
    swizzled scales as E4M3 or bytes, amax float32 [1] or its 4 bytes), rounded once to dtype."""
    return torch.ops.nvfp4.dequantize(data, scales, amax, dtype)


def swizzle(src: torch.Tensor, rows: int, cols: int, to_swizzled: bool = True) -> torch.Tensor:
    """Scale bytes between the linear [rows, cols] and the 128x4-swizzled layout."""
    return torch.ops.nvfp4.swizzle(src, rows, cols, to_swizzled)


# ------------------------------------------------------------------------------ the Linear's two passes
class LinearConfig:
    """Indices into the int list that configures linear_fwd / linear_bwd (a list of ints
    is what an op schema can carry; nvfp4.nn.linear builds it once per layer)."""

    FPROP = 11         # run the forward GEMM (else only the operands backward needs)
    BACKEND = 0        # C API backend code
    SIGN_MASK = 1      # RHT signs (bit i set: lane i negated)
    X_ROUND = 2        # fprop X: 0 nearest, 1 stochastic (1D blocks)
    XT_ROUND = 3       # wgrad X^T (columnwise): rounding
    XT_RHT = 4         # wgrad X^T: Hadamard transform (0/1)
    W_BLOCK = 5        # W: 0 1D, 1 2D (always round to nearest)
    DY_ROUND = 6       # dgrad dY: rounding
    DYT_ROUND = 7      # wgrad dY^T: rounding
    DYT_RHT = 8        # wgrad dY^T: Hadamard transform
    SEED_X = 9         # Philox key of the forward operands
    SEED_DY = 10       # Philox key of the backward operands
    SIZE = 12


# W cache modes of linear_fwd.
W_FRESH, W_STORE, W_REUSE = 0, 1, 2

lib.define("linear_fwd(Tensor x, Tensor w, Tensor? bias, Tensor counter, int[] cfg, bool save_xt, bool save_wt, "
           "int w_mode, Tensor(a!)? w_cache) -> (Tensor, Tensor, Tensor)")
lib.define("linear_bwd(Tensor dy, Tensor xt, Tensor wt, Tensor(a!) counter, int[] cfg, int k, bool need_dx, "
           "bool need_dw, ScalarType dw_dtype) -> (Tensor, Tensor)")


def _w_cache_layout(n, k):
    """Offsets of W's two packed orientations inside a weight cache buffer."""
    row = packed_nbytes(n, k)
    return row, row + packed_nbytes(k, _up(n, 16))


def w_cache_nbytes(n: int, k: int) -> int:
    return _w_cache_layout(n, k)[1]


def _fwd_shapes(x, w, cfg, save_xt, save_wt, w_mode):
    m, k = x.shape
    n = w.shape[0]
    y_shape = (m, n) if cfg[LinearConfig.FPROP] else (0,)
    xt_bytes = packed_nbytes(k, _up(m, 16)) if save_xt else 0
    # W^T for dgrad travels with the autograd context unless a weight cache holds it
    wt_bytes = packed_nbytes(k, _up(n, 16)) if (save_wt and w_mode == W_FRESH) else 0
    return m, k, n, y_shape, xt_bytes, wt_bytes


def _linear_fwd_impl(x, w, bias, counter, cfg, save_xt, save_wt, w_mode, w_cache):
    C = LinearConfig
    x = x.contiguous()
    m, k, n, y_shape, xt_bytes, wt_bytes = _fwd_shapes(x, w, cfg, save_xt, save_wt, w_mode)
    fprop = bool(cfg[C.FPROP])
    dev = x.device
    if counter.device != dev:
        raise ValueError(f"counter: the layer's step counter is on {counter.device} but x is on {dev}; "
                         "move the module with .to()")
    dt, di, st = _device(x)
    y = torch.empty(y_shape, dtype=x.dtype, device=dev)
    xt = torch.empty((xt_bytes,), dtype=torch.uint8, device=dev)
    wt = torch.empty((wt_bytes,), dtype=torch.uint8, device=dev)
    backend = cfg[C.BACKEND]
    bias_dt = None if bias is None else bias.dtype
    gemm_ws = gemm_workspace_bytes(m, n, k, backend, x.dtype, bias_dt, False, dev, (dt, di, st)) if fprop else 0
    # one scratch buffer: X rowwise | W rowwise (when not cached) | GEMM workspace
    xrow_bytes = packed_nbytes(m, k) if fprop else 0
    wrow_bytes = packed_nbytes(n, k) if (fprop and w_mode == W_FRESH) else 0
    ws = torch.empty((xrow_bytes + wrow_bytes + gemm_ws,), dtype=torch.uint8, device=dev)
    base = ws.data_ptr()
    xrow = _addresses(base, m, k) if fprop else (0, 0, 0)
    cnt = counter.data_ptr()
    sign_mask = cfg[C.SIGN_MASK]

    # X: rowwise for fprop, columnwise (optionally Hadamard-transformed) for wgrad; one pass
    # when both use the same rounding.
    xt_addr = _addresses(xt.data_ptr(), k, _up(m, 16)) if save_xt else (0, 0, 0)
    rht = 2 if (save_xt and cfg[C.XT_RHT]) else 0
    if fprop and save_xt and cfg[C.XT_ROUND] != cfg[C.X_ROUND]:
        _C.quantize_raw(x.data_ptr(), DTYPE_CODE[x.dtype], m, k, *xrow, 0, 0, 0, 0, cfg[C.X_ROUND],
                        _LAYOUT_SWIZZLED, 0, sign_mask, cfg[C.SEED_X], 0, cnt, dt, di, st)
        _C.quantize_raw(x.data_ptr(), DTYPE_CODE[x.dtype], m, k, 0, 0, 0, *xt_addr, 0, cfg[C.XT_ROUND],
                        _LAYOUT_SWIZZLED, rht, sign_mask, cfg[C.SEED_X], 0, cnt, dt, di, st)
    elif fprop or save_xt:
        _C.quantize_raw(x.data_ptr(), DTYPE_CODE[x.dtype], m, k, *xrow, *xt_addr, 0,
                        cfg[C.X_ROUND] if fprop else cfg[C.XT_ROUND], _LAYOUT_SWIZZLED, rht, sign_mask, cfg[C.SEED_X],
                        0, cnt, dt, di, st)

    # W: both orientations in one pass (round to nearest, no transform), into the scratch
    # buffer and the saved W^T, or into the layer's cache.
    if w_mode == W_FRESH:
        wrow = _addresses(base + xrow_bytes, n, k) if fprop else (0, 0, 0)
        wcol = _addresses(wt.data_ptr(), k, _up(n, 16)) if save_wt else (0, 0, 0)
    else:
        if w_cache is None:
            raise ValueError("w_cache: a weight cache buffer is required with this w_mode")
        cb = w_cache.data_ptr()
        off, _ = _w_cache_layout(n, k)
        wrow = _addresses(cb, n, k)
        wcol = _addresses(cb + off, k, _up(n, 16))
    if w_mode != W_REUSE and (wrow[0] or wcol[0]):
        w = w.contiguous()
        _C.quantize_raw(w.data_ptr(), DTYPE_CODE[w.dtype], n, k, *wrow, *wcol, cfg[C.W_BLOCK], 0, _LAYOUT_SWIZZLED,
                        0, sign_mask, 0, 0, 0, dt, di, st)
    if not fprop:
        return y, xt, wt
    # fprop: Y = alpha * X̂ Ŵᵀ (+ bias)
    _C.gemm_raw(*xrow, *wrow, m, n, k, _LAYOUT_SWIZZLED, 0, 0, 0 if bias is None else bias.data_ptr(),
                DTYPE_CODE.get(bias_dt, 0), 0.0, y.data_ptr(), DTYPE_CODE[x.dtype], backend,
                base + xrow_bytes + wrow_bytes, gemm_ws, dt, di, st)
    return y, xt, wt


def _linear_fwd_fake(x, w, bias, counter, cfg, save_xt, save_wt, w_mode, w_cache):
    m, k, n, y_shape, xt_bytes, wt_bytes = _fwd_shapes(x, w, cfg, save_xt, save_wt, w_mode)
    return (x.new_empty(y_shape), x.new_empty((xt_bytes,), dtype=torch.uint8),
            x.new_empty((wt_bytes,), dtype=torch.uint8))


def _linear_bwd_impl(dy, xt, wt, counter, cfg, k, need_dx, need_dw, dw_dtype):
    """dy [m, n]; xt: packed X^T [k, roundup(m,16)] (need_dw); wt: packed W^T [k, roundup(n,16)]
    (need_dx). Advances counter by one after the quantization of dY has read it."""
    C = LinearConfig
    dy = dy.contiguous()
    m, n = dy.shape
    dev = dy.device
    dt, di, st = _device(dy)
    mp = _up(m, 16)
    backend = cfg[C.BACKEND]
    dx = torch.empty((m, k) if need_dx else (0,), dtype=dy.dtype, device=dev)
    dw = torch.empty((n, k) if need_dw else (0,), dtype=dw_dtype, device=dev)
    ws_dx = gemm_workspace_bytes(m, k, n, backend, dy.dtype, None, False, dev, (dt, di, st)) if need_dx else 0
    ws_dw = gemm_workspace_bytes(n, k, mp, backend, dw_dtype, None, False, dev, (dt, di, st)) if need_dw else 0
    row_bytes = packed_nbytes(m, n) if need_dx else 0
    col_bytes = packed_nbytes(n, mp) if need_dw else 0
    ws = torch.empty((row_bytes + col_bytes + max(ws_dx, ws_dw),), dtype=torch.uint8, device=dev)
    base = ws.data_ptr()
    dyrow = _addresses(base, m, n) if need_dx else (0, 0, 0)
    dycol = _addresses(base + row_bytes, n, mp) if need_dw else (0, 0, 0)
    g = base + row_bytes + col_bytes
    cnt = counter.data_ptr()
    sign_mask = cfg[C.SIGN_MASK]
    rht = 2 if (need_dw and cfg[C.DYT_RHT]) else 0
    if need_dx and need_dw and cfg[C.DY_ROUND] != cfg[C.DYT_ROUND]:
        _C.quantize_raw(dy.data_ptr(), DTYPE_CODE[dy.dtype], m, n, *dyrow, 0, 0, 0, 0, cfg[C.DY_ROUND],
                        _LAYOUT_SWIZZLED, 0, sign_mask, cfg[C.SEED_DY], 0, cnt, dt, di, st)
        _C.quantize_raw(dy.data_ptr(), DTYPE_CODE[dy.dtype], m, n, 0, 0, 0, *dycol, 0, cfg[C.DYT_ROUND],
                        _LAYOUT_SWIZZLED, rht, sign_mask, cfg[C.SEED_DY], 0, cnt, dt, di, st)
    elif need_dx or need_dw:
        rounding = cfg[C.DY_ROUND] if need_dx else cfg[C.DYT_ROUND]
        _C.quantize_raw(dy.data_ptr(), DTYPE_CODE[dy.dtype], m, n, *dyrow, *dycol, 0, rounding, _LAYOUT_SWIZZLED,
                        rht, sign_mask, cfg[C.SEED_DY], 0, cnt, dt, di, st)
    if need_dx:  # dgrad: dX = alpha * dŶ (Ŵᵀ)ᵀ, W^T quantized along N
        _C.gemm_raw(*dyrow, *_addresses(wt.data_ptr(), k, _up(n, 16)), m, k, n, _LAYOUT_SWIZZLED, 0, 0, 0, 0, 0.0,
                    dx.data_ptr(), DTYPE_CODE[dy.dtype], backend, g, ws_dx, dt, di, st)
    if need_dw:  # wgrad: dW = alpha * (dŶᵀ)(X̂ᵀ)ᵀ, both along the token axis
        _C.gemm_raw(*dycol, *_addresses(xt.data_ptr(), k, mp), n, k, mp, _LAYOUT_SWIZZLED, 0, 0, 0, 0, 0.0,
                    dw.data_ptr(), DTYPE_CODE[dw_dtype], backend, g, ws_dw, dt, di, st)
    # The next backward of this layer draws new bits. In stream order after the quantize
    # kernels above, which read the counter when they run.
    counter.add_(1)
    return dx, dw


def _linear_bwd_fake(dy, xt, wt, counter, cfg, k, need_dx, need_dw, dw_dtype):
    m, n = dy.shape
    return (dy.new_empty((m, k) if need_dx else (0,)), dy.new_empty((n, k) if need_dw else (0,), dtype=dw_dtype))


for _k in ("CPU", "CUDA"):
    lib.impl("linear_fwd", lambda *a: _linear_fwd_impl(*a), _k)
    lib.impl("linear_bwd", lambda *a: _linear_bwd_impl(*a), _k)
torch.library.register_fake("nvfp4::linear_fwd", _linear_fwd_fake, lib=lib)
torch.library.register_fake("nvfp4::linear_bwd", _linear_bwd_fake, lib=lib)


def linear_fwd(x, w, bias, counter, cfg, save_xt, save_wt, w_mode=W_FRESH, w_cache=None):
    return torch.ops.nvfp4.linear_fwd(x, w, bias, counter, cfg, save_xt, save_wt, w_mode, w_cache)


def linear_bwd(dy, xt, wt, counter, cfg, k, need_dx, need_dw, dw_dtype):
    return torch.ops.nvfp4.linear_bwd(dy, xt, wt, counter, cfg, k, need_dx, need_dw, dw_dtype)


# ------------------------------------------------------------------------------ a frozen, already quantized weight
# The forward of a layer whose weight exists only in NVFP4 (nvfp4.nn.FrozenLinear): W's rowwise
# (data, swizzled scales, amax) are three tensors the layer owns, read and never written, so
# the op mutates nothing. X is quantized exactly as linear_fwd quantizes it for fprop (same
# rounding, seed and counter), so both layers compute the same bits from the same W.
lib.define("frozen_linear_fwd(Tensor x, Tensor w_data, Tensor w_scales, Tensor w_amax, Tensor? bias, "
           "Tensor counter, int[] cfg) -> Tensor")


def _frozen_fwd_check(x, w_data, w_scales, w_amax):
    m, k = x.shape
    n = w_data.shape[0]
    if w_data.dim() != 2 or w_data.shape[1] * 2 != k:
        raise ValueError(f"w_data: expected [{n}, {k // 2}] packed codes for an input of {k} features, "
                         f"got {list(w_data.shape)}")
    sr, sc = swizzled_shape(n, k // 16)
    if w_scales.numel() < sr * sc or w_amax.numel() * w_amax.element_size() < 4:
        raise ValueError("w_scales/w_amax: too small for the weight")
    return m, k, n


def _frozen_fwd_impl(x, w_data, w_scales, w_amax, bias, counter, cfg):
    C = LinearConfig
    x = x.contiguous()
    m, k, n = _frozen_fwd_check(x, w_data, w_scales, w_amax)
    dev = x.device
    for name, t in (("w_data", w_data), ("w_scales", w_scales), ("w_amax", w_amax), ("counter", counter)):
        if t.device != dev:
            raise ValueError(f"{name}: on {t.device} but x is on {dev}; move the module with .to()")
    y = torch.empty((m, n), dtype=x.dtype, device=dev)
    if m == 0 or n == 0:
        return y
    dt, di, st = _device(x)
    backend = cfg[C.BACKEND]
    bias_dt = None if bias is None else bias.dtype
    bias = None if bias is None else bias.contiguous()
    gemm_ws = gemm_workspace_bytes(m, n, k, backend, x.dtype, bias_dt, False, dev, (dt, di, st))
    xrow_bytes = packed_nbytes(m, k)
    ws = torch.empty((xrow_bytes + gemm_ws,), dtype=torch.uint8, device=dev)
    xrow = _addresses(ws.data_ptr(), m, k)
    _C.quantize_raw(x.data_ptr(), DTYPE_CODE[x.dtype], m, k, *xrow, 0, 0, 0, 0, cfg[C.X_ROUND], _LAYOUT_SWIZZLED,
                    0, cfg[C.SIGN_MASK], cfg[C.SEED_X], 0, counter.data_ptr(), dt, di, st)
    _C.gemm_raw(*xrow, w_data.data_ptr(), w_scales.data_ptr(), w_amax.data_ptr(), m, n, k, _LAYOUT_SWIZZLED, 0, 0,
                0 if bias is None else bias.data_ptr(), DTYPE_CODE.get(bias_dt, 0), 0.0, y.data_ptr(),
                DTYPE_CODE[x.dtype], backend, ws.data_ptr() + xrow_bytes, gemm_ws, dt, di, st)
    return y


def _frozen_fwd_fake(x, w_data, w_scales, w_amax, bias, counter, cfg):
    return x.new_empty((x.shape[0], w_data.shape[0]))


for _k in ("CPU", "CUDA"):
    lib.impl("frozen_linear_fwd", lambda *a: _frozen_fwd_impl(*a), _k)
torch.library.register_fake("nvfp4::frozen_linear_fwd", _frozen_fwd_fake, lib=lib)


def frozen_linear_fwd(x, w_data, w_scales, w_amax, bias, counter, cfg):
    """Y = alpha * Q(X) Ŵᵀ (+ bias) for a weight given as its rowwise NVFP4 triple (data
    uint8 [N, K/2], swizzled scales as bytes, amax float32 [1]); X [M, K] is quantized as the
    cfg says for fprop (LinearConfig.X_ROUND, SEED_X, the counter as SR offset)."""
    return torch.ops.nvfp4.frozen_linear_fwd(x, w_data, w_scales, w_amax, bias, counter, cfg)


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


def _alloc3(shapes, device):
    d, s, a = shapes
    return (torch.empty(d, dtype=torch.uint8, device=device), torch.empty(s, dtype=torch.float8_e4m3fn, device=device),
            torch.empty(a, dtype=torch.float32, device=device))


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
    _C.grouped_quantize_raw(x.data_ptr(), DTYPE_CODE[x.dtype], t, k, offs.data_ptr(), e, err.data_ptr(),
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
    _C.batched_quantize_raw(x.data_ptr(), DTYPE_CODE[x.dtype], e, n, k, *(_addr3(row) if rowwise else (0, 0, 0)),
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
        v = _C.grouped_gemm_raw(kind, a[0], a[1], a[2], a[3], a[4], a[5], a[6], e, t, n, k, 0, a[7],
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
    _C.grouped_gemm_raw(kind, *a, *b, offs.data_ptr(), e, t, n, k, err.data_ptr(), d.data_ptr(), DTYPE_CODE[d.dtype],
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


# ------------------------------------------------------------------------------ GroupedLinear's two passes
# nvfp4.nn.GroupedLinear: one op per pass, as linear_fwd / linear_bwd for the dense layer, with
# the same LinearConfig list. x [T, K] token-sorted, w [E, N, K], offs [E].
#   forward:  X grouped (rowwise for fprop; columnwise, with the RHT, for wgrad), W batched
#             (rowwise for fprop, columnwise for dgrad; 2D tiles per the recipe), Y = ragged-M GEMM;
#   backward: dY grouped both ways, dX = ragged-M GEMM with Wᵀ, dW = ragged-K GEMM of dYᵀ, Xᵀ;
#             then the step counter advances (after the quantization read it).
lib.define("grouped_linear_fwd(Tensor x, Tensor w, Tensor offs, Tensor counter, int[] cfg, bool save_xt, "
           "bool save_wt) -> Tensor[]")
lib.define("grouped_linear_bwd(Tensor dy, Tensor offs, Tensor xt_data, Tensor xt_scales, Tensor xt_amax, "
           "Tensor wt_data, Tensor wt_scales, Tensor wt_amax, Tensor(a!) counter, int[] cfg, int k, bool need_dx, "
           "bool need_dw, ScalarType dw_dtype) -> (Tensor, Tensor, Tensor)")


def _gl_fwd_outputs(x, w, offs, cfg, save_xt, save_wt):
    t, k = x.shape
    e, n, _ = w.shape
    dev = x.device
    y = torch.empty((t, n) if cfg[LinearConfig.FPROP] else (0,), dtype=x.dtype, device=dev)
    xt = _alloc3(grouped_col_shapes(t, k, e), dev) if save_xt else _empty3(dev)
    wt = _alloc3(batched_shapes(e, k, _up(n, 16)), dev) if save_wt else _empty3(dev)
    return y, xt, wt, torch.empty((1,), dtype=torch.int32, device=dev)


def _gl_fwd_impl(x, w, offs, counter, cfg, save_xt, save_wt):
    C = LinearConfig
    _need_2d("x", x)
    if w.dim() != 3 or w.shape[2] != x.shape[1]:
        raise ValueError(f"w: expected [E, N, {x.shape[1]}], got {tuple(w.shape)}")
    _check_offs(offs, x, w.shape[0])
    if counter.device != x.device:
        raise ValueError(f"counter: the layer's step counter is on {counter.device} but x is on {x.device}")
    x = _aligned(x)
    w = _aligned(w)
    t, k = x.shape
    e, n, _ = w.shape
    fprop = bool(cfg[C.FPROP])
    dev = x.device
    dv = _device(x)
    dt, di, st = dv
    y, xt, wt, err = _gl_fwd_outputs(x, w, offs, cfg, save_xt, save_wt)
    xrow = _alloc3(grouped_row_shapes(t, k, e), dev) if fprop else None
    cnt = counter.data_ptr()
    sign_mask = cfg[C.SIGN_MASK]
    xq = lambda row, col, rounding, rht: _C.grouped_quantize_raw(  # noqa: E731
        x.data_ptr(), DTYPE_CODE[x.dtype], t, k, offs.data_ptr(), e, err.data_ptr(), *row, *col, rounding, rht,
        sign_mask, cfg[C.SEED_X], 0, cnt, dt, di, st)
    z = (0, 0, 0)
    rht = 2 if (save_xt and cfg[C.XT_RHT]) else 0
    if fprop and save_xt and cfg[C.XT_ROUND] != cfg[C.X_ROUND]:
        xq(_addr3(xrow), z, cfg[C.X_ROUND], 0)
        xq(z, _addr3(xt), cfg[C.XT_ROUND], rht)
    elif fprop or save_xt:
        xq(_addr3(xrow) if fprop else z, _addr3(xt) if save_xt else z,
           cfg[C.X_ROUND] if fprop else cfg[C.XT_ROUND], rht)
    wrow = _alloc3(batched_shapes(e, n, k), dev) if fprop else None
    if fprop or save_wt:
        _C.batched_quantize_raw(w.data_ptr(), DTYPE_CODE[w.dtype], e, n, k, *(_addr3(wrow) if fprop else z),
                                *(_addr3(wt) if save_wt else z), cfg[C.W_BLOCK], 0, 0, sign_mask, 0, 0, 0, dt, di, st)
    if fprop:
        _grouped_gemm_run(RAGGED_M, _addr3(xrow), _addr3(wrow), offs, t, n, k, cfg[C.BACKEND], y, err, dv)
    return [y, *xt, *wt, err]


def _gl_fwd_fake(x, w, offs, counter, cfg, save_xt, save_wt):
    y, xt, wt, err = _gl_fwd_outputs(x, w, offs, cfg, save_xt, save_wt)
    return [y, *xt, *wt, err]


def _gl_bwd_outputs(dy, offs, k, need_dx, need_dw, dw_dtype):
    t, n = dy.shape
    e = offs.shape[0]
    dev = dy.device
    dx = torch.empty((t, k) if need_dx else (0,), dtype=dy.dtype, device=dev)
    dw = torch.empty((e, n, k) if need_dw else (0,), dtype=dw_dtype, device=dev)
    return dx, dw, torch.empty((1,), dtype=torch.int32, device=dev)


def _gl_bwd_impl(dy, offs, xt_data, xt_scales, xt_amax, wt_data, wt_scales, wt_amax, counter, cfg, k, need_dx,
                 need_dw, dw_dtype):
    C = LinearConfig
    _need_2d("dy", dy)
    _check_offs(offs, dy)
    dy = _aligned(dy)
    t, n = dy.shape
    e = offs.shape[0]
    dev = dy.device
    dv = _device(dy)
    dt, di, st = dv
    dx, dw, err = _gl_bwd_outputs(dy, offs, k, need_dx, need_dw, dw_dtype)
    dyrow = _alloc3(grouped_row_shapes(t, n, e), dev) if need_dx else None
    dycol = _alloc3(grouped_col_shapes(t, n, e), dev) if need_dw else None
    cnt = counter.data_ptr()
    sign_mask = cfg[C.SIGN_MASK]
    z = (0, 0, 0)
    q = lambda row, col, rounding, rht: _C.grouped_quantize_raw(  # noqa: E731
        dy.data_ptr(), DTYPE_CODE[dy.dtype], t, n, offs.data_ptr(), e, err.data_ptr(), *row, *col, rounding, rht,
        sign_mask, cfg[C.SEED_DY], 0, cnt, dt, di, st)
    rht = 2 if (need_dw and cfg[C.DYT_RHT]) else 0
    if need_dx and need_dw and cfg[C.DY_ROUND] != cfg[C.DYT_ROUND]:
        q(_addr3(dyrow), z, cfg[C.DY_ROUND], 0)
        q(z, _addr3(dycol), cfg[C.DYT_ROUND], rht)
    elif need_dx or need_dw:
        q(_addr3(dyrow) if need_dx else z, _addr3(dycol) if need_dw else z,
          cfg[C.DY_ROUND] if need_dx else cfg[C.DYT_ROUND], rht)
    if need_dx:  # dX = alpha_g dŶ_g (Ŵ_gᵀ)ᵀ, Wᵀ quantized along N
        _grouped_gemm_run(RAGGED_M, _addr3(dyrow), _addr3((wt_data, wt_scales, wt_amax)), offs, t, k, n,
                          cfg[C.BACKEND], dx, err, dv)
    if need_dw:  # dW_g = alpha_g (dŶ_gᵀ)(X̂_gᵀ)ᵀ over the group's padded tokens
        _grouped_gemm_run(RAGGED_K, _addr3(dycol), _addr3((xt_data, xt_scales, xt_amax)), offs, t, n, k,
                          cfg[C.BACKEND], dw, err, dv)
    counter.add_(1)
    return dx, dw, err


def _gl_bwd_fake(dy, offs, xt_data, xt_scales, xt_amax, wt_data, wt_scales, wt_amax, counter, cfg, k, need_dx,
                 need_dw, dw_dtype):
    return _gl_bwd_outputs(dy, offs, k, need_dx, need_dw, dw_dtype)


for _k in ("CPU", "CUDA"):
    lib.impl("grouped_linear_fwd", lambda *a: _gl_fwd_impl(*a), _k)
    lib.impl("grouped_linear_bwd", lambda *a: _gl_bwd_impl(*a), _k)
torch.library.register_fake("nvfp4::grouped_linear_fwd", _gl_fwd_fake, lib=lib)
torch.library.register_fake("nvfp4::grouped_linear_bwd", _gl_bwd_fake, lib=lib)


def grouped_linear_fwd(x, w, offs, counter, cfg, save_xt, save_wt):
    """[y, xt (3 tensors), wt (3 tensors), offs_error]; see the section's notes."""
    return torch.ops.nvfp4.grouped_linear_fwd(x, w, offs, counter, cfg, save_xt, save_wt)


def grouped_linear_bwd(dy, offs, xt, wt, counter, cfg, k, need_dx, need_dw, dw_dtype):
    """[dx, dw, offs_error]; advances counter by one."""
    return torch.ops.nvfp4.grouped_linear_bwd(dy, offs, *xt, *wt, counter, cfg, k, need_dx, need_dw, dw_dtype)
