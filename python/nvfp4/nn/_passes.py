"""The passes of nvfp4.nn's layers as torch operators (namespace ``nvfp4``), on the op
layer's raw entry points (nvfp4._ops: the one module that calls the library).

- ``linear_fwd`` / ``linear_bwd``: one call per pass of an nvfp4 Linear (see nvfp4.nn.linear):
  the forward quantizes X (and its columnwise copy for wgrad) and W and runs the forward
  GEMM; the backward quantizes dY both ways and runs dgrad and wgrad. The saved Xᵀ and Wᵀ
  are FP4 codes, or their decoded values where LinearConfig.SAVE_DECODED asks for them and
  the backward GEMM reads decoded operands (the tensor's dtype says which). Stochastic rounding
  reads the layer's step counter on the device, and the backward advances it there, so a
  captured CUDA graph replays with fresh random bits and a recomputed forward
  (activation checkpointing) sees the same counter as the original one.
- ``frozen_linear_fwd``: the forward of a layer whose weight exists only in NVFP4
  (nvfp4.nn.FrozenLinear).

The linear passes take activations and gradients [..., features], as F.linear does. Each
op checks the tensors it is given (nvfp4._checks) before it takes an address: the weight
against the input's features, the saved packed buffers against the sizes the shapes
imply, one device for all. On the meta device (and for torch.compile's fake tensors) they
return outputs of the right shape and dtype and run nothing. Eager calls through the
functions below run the implementations without the dispatcher where nothing else could
act on the call (`_direct`); sizes and offsets come from per-shape plans (docs/design.md,
"The host path of a Linear").

``nvfp4.nn.ops`` is this module: the passes, and the op layer's basic ops re-exported.
"""
from __future__ import annotations

import math

import torch

from .. import _checks as check
from .. import _ops
from .._ops import (DTYPE_CODE, TOKEN_ALIGN, _LAYOUT_SWIZZLED, _device, _need_2d, _up, addresses, dequantize,  # noqa: F401
                    gemm, gemm_env_key, gemm_workspace_bytes, lib, mx_gemm, packed_layout, packed_nbytes, quantize,
                    swizzle, unpack)

__all__ = ["LinearConfig", "W_FRESH", "W_STORE", "W_REUSE", "linear_fwd", "linear_bwd", "frozen_linear_fwd",
           "w_cache_nbytes", "quantize", "gemm", "mx_gemm", "dequantize", "swizzle", "unpack", "packed_layout",
           "packed_nbytes", "TOKEN_ALIGN"]


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
    SAVE_DECODED = 12  # save X^T and W^T decoded where the backward GEMM reads decoded operands (0/1)
    SIZE = 13


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


def _cfg(cfg) -> None:
    if len(cfg) != LinearConfig.SIZE:
        raise ValueError(f"cfg: expected {LinearConfig.SIZE} ints (LinearConfig), got {len(cfg)}")


def _packed(name: str, t, nbytes: int, device, device_of: str) -> None:
    """A packed buffer (uint8, 1D) of at least nbytes on `device`."""
    try:  # the common case (a layer's own saved buffers) in one expression
        if (t.dtype is _U8 and t.dim() == 1 and t.numel() >= nbytes and t.device == device
                and t.is_contiguous()):
            return
    except AttributeError:
        pass  # not a tensor: the checks below say so
    check.tensor(name, t, (torch.uint8,), None, device, device_of)
    if t.dim() != 1 or t.numel() < nbytes:
        raise ValueError(f"{name}: expected a packed uint8 buffer of at least {nbytes} bytes, got "
                         f"{check.describe(t)}")


_FLOATS = frozenset(check.FLOATS)
_I64, _U8, _F32, _E4M3, _BF16 = torch.int64, torch.uint8, torch.float32, torch.float8_e4m3fn, torch.bfloat16
_increment_version = torch.autograd.graph.increment_version
_ONE = (1,)


# ------------------------------------------------------------------------------ per-shape plans
# What a pass derives from its shapes, dtypes, device, W mode and GEMM backend: the bytes of each
# buffer, the offsets of the packed orientations inside them, the GEMM workspaces. A pass of a
# training step repeats the same shapes on every call, so this is computed once per key and kept in
# the op layer's one workspace cache: the key holds everything the values depend on, the GEMM
# environment (gemm_env_key) included, so a kept plan cannot disagree with what it would compute
# now, and clear_workspace_cache forgets plans with the sizes.
def _offsets(base: int, rows: int, cols: int):
    """(data, scales, amax) offsets of a packed orientation [rows, cols] that starts at base."""
    so, ao, _ = packed_layout(rows, cols)
    return base, base + so, base + ao


def _at(base: int, off):
    return base + off[0], base + off[1], base + off[2]


_NONE3 = (0, 0, 0)
_QWS = _ops.QUANTIZE_WORKSPACE_BYTES  # one quantization workspace per pass, reused by its quantizations in stream order


def _new_plan(key, make, *args):
    return _ops._workspace(key, lambda: make(*args))


# Decoded operands. Where the GEMM runner the library chooses reads decoded operands (the
# Hopper two-step path: nvfp4_gemm_takes_decoded), an operand the GEMM consumes right away
# and nothing keeps (X rowwise and W rowwise for fprop, dY both ways for dgrad and wgrad) is
# quantized straight into its decoded values (BF16, E2M1 x E4M3: what the GEMM's decode pass
# would write) with no codes at all; the saved X^T and W^T stay FP4 codes. The same values
# reach the same GEMM, so the same bits come out; the decode pass and the codes' round trip
# through memory are gone. A decoded operand in a scratch buffer: its values (256-byte
# aligned) then its float32 amax in a 256-byte slot.
def _dec_layout(base: int, rows, cols):
    """(values, amax) offsets of a decoded operand [rows, cols] at base, and its bytes."""
    v = _up(rows * cols * 2, 256)
    return (base, base + v), v + 256


_NONE2 = (0, 0)


def _quantize_1d(xp, xcode, rows, cols, row_q, row_v, col_q, col_v, want_row, want_col, round_row, round_col,
                 col_rht, sign_mask, seed, cnt, dt, di, st, qws, advance=False):
    """x [rows, cols] (1D blocks) rowwise into codes row_q and/or decoded values row_v, and
    columnwise into col_q / col_v (col_rht: the columnwise Hadamard transform), each with its
    rounding: one pass when both orientations are wanted with the same rounding, else one
    each. An absent output's addresses are zeros. The codes road's entry point where no
    decoded values are asked for, the decoded road's otherwise. cnt: the counter's address,
    read when the work runs; advance: the (last) call also adds one to it, once the work has
    read it (the library's offset_counter: no launch of its own where the amax pass runs)."""
    if want_row and want_col and round_row != round_col:
        _quantize_call(xp, xcode, rows, cols, row_q, row_v, _NONE3, _NONE2, round_row, 0, sign_mask, seed, cnt,
                       dt, di, st, qws)
        _quantize_call(xp, xcode, rows, cols, _NONE3, _NONE2, col_q, col_v, round_col, col_rht, sign_mask, seed, cnt,
                       dt, di, st, qws, advance=advance)
    elif want_row or want_col:
        _quantize_call(xp, xcode, rows, cols, row_q, row_v, col_q, col_v, round_row if want_row else round_col,
                       col_rht if want_col else 0, sign_mask, seed, cnt, dt, di, st, qws, advance=advance)


def _quantize_call(xp, xcode, rows, cols, row_q, row_v, col_q, col_v, rounding, rht, sign_mask, seed, cnt, dt, di,
                   st, qws, block=0, advance=False):
    # qws: the quantization workspace (_QWS bytes in the pass's scratch): the amax pass leaves
    # partials there instead of the amax outputs being zeroed by two memsets first.
    # advance: cnt is given as the counter the call advances, not as the read-only offset.
    od, oc = (0, cnt) if advance else (cnt, 0)
    if row_v[1] or col_v[1]:
        _ops.quantize_dec_raw(xp, xcode, rows, cols, *row_q, *row_v, *col_q, *col_v, block, rounding,
                              _LAYOUT_SWIZZLED, rht, sign_mask, seed, 0, od, dt, di, st, qws, oc)
    else:
        _ops.quantize_raw(xp, xcode, rows, cols, *row_q, *col_q, block, rounding, _LAYOUT_SWIZZLED, rht, sign_mask,
                          seed, 0, od, dt, di, st, qws, oc)


def _gemm_call(a_q, a_v, b_q, b_v, m, n, k, bias, bias_code, d, d_code, backend, ws, ws_bytes, dt, di, st):
    """D = alpha * (Â B̂ᵀ) (+ bias): nvfp4_gemm on the codes a_q / b_q, or nvfp4_gemm_decoded where
    an operand comes as decoded values (a_v / b_v; zeros where it does not)."""
    if a_v[1] or b_v[1]:
        _ops.gemm_dec_raw(*a_q, *a_v, *b_q, *b_v, m, n, k, _LAYOUT_SWIZZLED, 0, 0, bias, bias_code, 0.0, d, d_code,
                          backend, ws, ws_bytes, dt, di, st)
    else:
        _ops.gemm_raw(*a_q, *b_q, m, n, k, _LAYOUT_SWIZZLED, 0, 0, bias, bias_code, 0.0, d, d_code, backend, ws,
                      ws_bytes, dt, di, st)


_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # absent from CPU-only builds


def _device3(t, d):
    """_ops._device(t) (device code, index, current stream) for t on device d, without
    building d.type (a new string on each read)."""
    if t.is_cuda and _raw_stream is not None:
        return 1, d.index, _raw_stream(d.index)
    if t.is_cpu:
        return _CPU3
    return _device(t)


_CPU3 = (0, 0, 0)


def saved_decoded(m, k, n, x_dtype, w_dtype, backend, save_xt, save_wt, w_mode, save_decoded, device, dev):
    """(X^T decoded, W^T decoded): which saved operands linear_fwd writes as their decoded
    values (LinearConfig.SAVE_DECODED) — each where the backward GEMM that reads it (wgrad
    for X^T, dgrad for W^T) runs on a runner that takes decoded operands; W^T only when it is
    quantized here (W_FRESH: a weight cache holds codes). A function of the shapes, dtypes,
    backend, device and GEMM environment, as the plans are: the fake implementation asks it
    too, and the backward reads the answer off the saved tensors' dtypes."""
    if not save_decoded or m == 0:
        return False, False
    mp = _up(m, 16)
    xt = bool(save_xt and _ops.gemm_takes_decoded(n, k, mp, backend, w_dtype, None, device, dev))
    wt = bool(save_wt and w_mode == W_FRESH and _ops.gemm_takes_decoded(m, k, n, backend, x_dtype, None, device, dev))
    return xt, wt


def _dec_bytes(rows, cols):
    return _dec_layout(0, rows, cols)[1]


def _fwd_plan(m, k, n, x_dtype, w_dtype, bias_dt, fprop, backend, save_xt, save_wt, w_mode, save_decoded, device,
              dev):
    # decoded: X rowwise (and W rowwise when quantized here) go to the GEMM as decoded values
    dec = bool(fprop and m > 0 and _ops.gemm_takes_decoded(m, n, k, backend, x_dtype, bias_dt, device, dev))
    # the saved X^T / W^T as decoded values (LinearConfig.SAVE_DECODED), where their GEMMs take them
    xt_dec, wt_dec = saved_decoded(m, k, n, x_dtype, w_dtype, backend, save_xt, save_wt, w_mode, save_decoded,
                                   device, dev)
    wdec = dec and w_mode == W_FRESH
    if dec:
        xdec, xrow_bytes = _dec_layout(0, m, k)
        wdec_off, wrow_bytes = _dec_layout(xrow_bytes, n, k) if wdec else (None, 0)
        gemm_ws = _ops.gemm_dec_workspace_bytes(m, n, k, backend, x_dtype, bias_dt, True, wdec, device, dev)
    else:
        xdec = wdec_off = None
        xrow_bytes = packed_nbytes(m, k) if fprop else 0
        wrow_bytes = packed_nbytes(n, k) if (fprop and w_mode == W_FRESH) else 0
        gemm_ws = gemm_workspace_bytes(m, n, k, backend, x_dtype, bias_dt, False, device, dev) if fprop else 0
    mp, np_ = _up(m, 16), _up(n, 16)
    # the saved X^T / W^T: (codes addresses, decoded addresses) offsets, one of the two None
    xt = xt_v = None
    if save_xt:
        if xt_dec:
            xt_v = _dec_layout(0, k, mp)[0]
        else:
            xt = _offsets(0, k, mp)
    wcol_v = None
    if w_mode == W_FRESH:
        wrow = _offsets(xrow_bytes, n, k) if (fprop and not wdec) else None  # in the scratch buffer, after X
        wcol = _offsets(0, k, np_) if (save_wt and not wt_dec) else None  # at the start of the saved W^T
        if wt_dec:
            wcol_v = _dec_layout(0, k, np_)[0]
    else:  # the weight cache: W rowwise, then W^T
        wrow = _offsets(0, n, k)
        wcol = _offsets(_w_cache_layout(n, k)[0], k, np_)
    qws = _up(xrow_bytes + wrow_bytes + gemm_ws, 256)  # the quantization workspace, last
    return ((m, n) if fprop else (0,),                                       # 0: y shape
            _saved_numel(k, mp, save_xt, xt_dec),                           # 1: saved X^T elements
            _saved_numel(k, np_, save_wt and w_mode == W_FRESH, wt_dec),    # 2: saved W^T elements
            qws + _QWS,                                                     # 3: scratch bytes
            _offsets(0, m, k) if fprop else None, wrow, xt, wcol,           # 4-7: offsets
            xrow_bytes + wrow_bytes, gemm_ws,                               # 8, 9: GEMM workspace offset, bytes
            w_cache_nbytes(n, k),                                           # 10: a weight cache's bytes
            dec, xdec, wdec_off,                                            # 11-13: decoded X (and W) in the scratch
            qws,                                                            # 14: quantization workspace offset
            xt_v, wcol_v,                                                   # 15, 16: decoded X^T / W^T offsets
            _BF16 if xt_dec else _U8, _BF16 if wt_dec else _U8)             # 17, 18: their dtypes


def _saved_addresses(t, dec_off, codes_off):
    """(codes addresses, decoded addresses) of a saved X^T / W^T buffer: its decoded values
    (values, amax) where dec_off (their offsets) is given, else its packed codes (data,
    scales, amax) at codes_off; zeros for the form it does not hold."""
    a = t.data_ptr()
    if dec_off is not None:
        return _NONE3, (a + dec_off[0], a + dec_off[1])
    return (a + codes_off[0], a + codes_off[1], a + codes_off[2]), _NONE2


def _saved_numel(rows, cols, saved, dec):
    """Elements of a saved operand [rows, cols]: packed codes (uint8 bytes) or decoded values
    (bfloat16: the values, then the amax in a 256-byte slot); 0 when not saved."""
    if not saved:
        return 0
    return _dec_bytes(rows, cols) // 2 if dec else packed_nbytes(rows, cols)


def _bwd_plan(m, n, k, dy_dtype, dw_dtype, need_dx, need_dw, backend, xt_dec, wt_dec, device, dev):
    # xt_dec / wt_dec: the saved X^T / W^T come as decoded values (bfloat16 buffers), B of their GEMMs
    mp = _up(m, 16)
    # decoded: dY rowwise (dgrad's A) and dY^T (wgrad's A), each where its GEMM's runner takes it
    dx_dec = bool(need_dx and m > 0 and _ops.gemm_takes_decoded(m, k, n, backend, dy_dtype, None, device, dev))
    dw_dec = bool(need_dw and m > 0 and _ops.gemm_takes_decoded(n, k, mp, backend, dw_dtype, None, device, dev))
    if need_dx:
        ws_dx = (_ops.gemm_dec_workspace_bytes(m, k, n, backend, dy_dtype, None, dx_dec, wt_dec, device, dev)
                 if (dx_dec or wt_dec) else gemm_workspace_bytes(m, k, n, backend, dy_dtype, None, False, device, dev))
    else:
        ws_dx = 0
    if need_dw:
        ws_dw = (_ops.gemm_dec_workspace_bytes(n, k, mp, backend, dw_dtype, None, dw_dec, xt_dec, device, dev)
                 if (dw_dec or xt_dec) else gemm_workspace_bytes(n, k, mp, backend, dw_dtype, None, False, device, dev))
    else:
        ws_dw = 0
    if dx_dec:
        row, row_bytes = _dec_layout(0, m, n)
    else:
        row_bytes = packed_nbytes(m, n) if need_dx else 0
        row = _offsets(0, m, n) if need_dx else None
    if dw_dec:
        col, col_bytes = _dec_layout(row_bytes, n, mp)
    else:
        col_bytes = packed_nbytes(n, mp) if need_dw else 0
        col = _offsets(row_bytes, n, mp) if need_dw else None
    qws = _up(row_bytes + col_bytes + max(ws_dx, ws_dw), 256)  # the quantization workspace, last
    return ((m, k) if need_dx else (0,), (n, k) if need_dw else (0,),       # 0, 1: dx, dw shapes
            qws + _QWS,                                                     # 2: scratch bytes
            row,                                                            # 3: dY rowwise in the scratch
            col,                                                            # 4: dY^T in the scratch
            row_bytes + col_bytes, ws_dx, ws_dw,                            # 5-7: GEMM workspace offset, bytes
            _offsets(0, k, mp), _offsets(0, k, _up(n, 16)),                 # 8, 9: saved X^T, W^T offsets (codes)
            _saved_numel(k, mp, need_dw, xt_dec),                           # 10: X^T elements needed
            _saved_numel(k, _up(n, 16), need_dx, wt_dec),                   # 11: W^T elements needed
            dx_dec, dw_dec,                                                 # 12, 13: dY / dY^T decoded
            qws,                                                            # 14: quantization workspace offset
            _dec_layout(0, k, mp)[0], _dec_layout(0, k, _up(n, 16))[0])     # 15, 16: decoded X^T, W^T offsets


# ------------------------------------------------------------------------------ linear_fwd
def _fwd_check(x, w, bias, counter, cfg, save_xt, save_wt, w_mode, w_cache):
    """(m, k, n) for x [..., k] (m: the product of the leading dimensions); every tensor checked
    against x (a weight cache's size: by the callers, which know it from the plan or compute it)."""
    xs, ws = x.shape, w.shape
    # the common case (a layer's own call) in one expression; the rest names what is wrong
    if not (len(xs) >= 2 and len(ws) == 2 and xs[-1] == ws[1] and x.dtype in _FLOATS and w.dtype in _FLOATS
            and counter.dtype is _I64 and counter.numel() == 1 and len(cfg) == LinearConfig.SIZE
            and (w_mode == W_FRESH or ((w_mode == W_STORE or w_mode == W_REUSE) and w_cache is not None
                                       and w_cache.dtype is _U8 and w_cache.dim() == 1 and w_cache.is_contiguous()
                                       and w_cache.device == x.device))
            and w.device == x.device and counter.device == x.device
            and (bias is None or (bias.dtype in _FLOATS and bias.shape == (ws[0],) and bias.device == x.device))):
        _fwd_check_slow(x, w, bias, counter, cfg, save_xt, save_wt, w_mode, w_cache)
    return (xs[0] if len(xs) == 2 else math.prod(xs[:-1])), xs[-1], ws[0]


def _need_rows(name: str, t) -> None:
    # the linear passes take [..., features], like F.linear, with at least one leading dimension
    if t.dim() < 2:
        raise ValueError(f"{name}: the linear ops take tensors [..., features] of 2 or more dimensions, got shape "
                         f"{tuple(t.shape)}")


def _fwd_check_slow(x, w, bias, counter, cfg, save_xt, save_wt, w_mode, w_cache):
    _need_rows("x", x)
    check.tensor("x", x, check.FLOATS, contiguous=False)
    k = x.shape[-1]
    dev = x.device
    if w.dim() != 2 or w.shape[1] != k:
        raise ValueError(f"w: expected a weight [out_features, {k}] for an input of {k} features, got "
                         f"{check.describe(w)}")
    check.tensor("w", w, check.FLOATS, None, dev, "x", contiguous=False)
    n = w.shape[0]
    _ops.check_counter("counter", counter, dev, "x")
    if bias is not None:
        check.tensor("bias", bias, check.FLOATS, (n,), dev, "x", contiguous=False)
    _cfg(cfg)
    if w_mode not in (W_FRESH, W_STORE, W_REUSE):
        raise ValueError(f"w_mode: W_FRESH, W_STORE or W_REUSE (0, 1, 2), got {w_mode}")
    if w_mode != W_FRESH:
        if w_cache is None:
            raise ValueError("w_cache: a weight cache buffer is required with this w_mode")
        _packed("w_cache", w_cache, w_cache_nbytes(n, k), dev, "x")


def _linear_fwd_impl(x, w, bias, counter, cfg, save_xt, save_wt, w_mode, w_cache):
    C = LinearConfig
    m, k, n = _fwd_check(x, w, bias, counter, cfg, save_xt, save_wt, w_mode, w_cache)
    fprop = cfg[C.FPROP]
    backend = cfg[C.BACKEND]
    dev = x.device
    dt, di, st = _device3(x, dev)
    x_dt = x.dtype
    bias_dt = None if bias is None else bias.dtype
    save_dec = cfg[C.SAVE_DECODED]
    key = ("linear_fwd", m, k, n, x_dt, w.dtype, bias_dt, dt, di, fprop, backend, save_xt, save_wt, w_mode, save_dec,
           gemm_env_key())
    p = _ops._WS.get(key) or _new_plan(key, _fwd_plan, m, k, n, x_dt, w.dtype, bias_dt, fprop, backend, save_xt,
                                       save_wt, w_mode, save_dec, dev, (dt, di, st))
    if w_mode != W_FRESH and w_cache.numel() < p[10]:
        _packed("w_cache", w_cache, p[10], dev, "x")  # raises, naming the buffer
    x = x.contiguous()
    # y [..., n] like x (the plan's shape is the 2D one)
    y = torch.empty(*p[0], dtype=x_dt, device=dev) if (x.dim() == 2 or not fprop) else \
        torch.empty(*x.shape[:-1], n, dtype=x_dt, device=dev)
    # the saved X^T and W^T: packed codes (uint8), or decoded values (bfloat16) where the plan says
    xt = torch.empty(p[1], dtype=p[17], device=dev)
    wt = torch.empty(p[2], dtype=p[18], device=dev)
    # one scratch buffer: X rowwise | W rowwise (when not cached) | GEMM workspace
    ws = torch.empty(p[3], dtype=_U8, device=dev)
    base = ws.data_ptr()
    xp, xcode = x.data_ptr(), DTYPE_CODE[x_dt]
    cnt = counter.data_ptr()
    sign_mask = cfg[C.SIGN_MASK]
    seed = cfg[C.SEED_X]

    # X: rowwise for fprop (codes, or its decoded values on the decoded road: the plan's p[11]),
    # columnwise (optionally Hadamard-transformed) for wgrad; one pass when both use the same
    # rounding.
    dec = p[11]
    if dec:
        o = p[12]
        xrow_q, xrow_v = _NONE3, (base + o[0], base + o[1])
    else:
        o = p[4]
        xrow_q, xrow_v = ((base, base + o[1], base + o[2]) if fprop else _NONE3), _NONE2
    xt_q, xt_v = _saved_addresses(xt, p[15], p[6]) if save_xt else (_NONE3, _NONE2)
    _quantize_1d(xp, xcode, m, k, xrow_q, xrow_v, xt_q, xt_v, fprop, save_xt, cfg[C.X_ROUND], cfg[C.XT_ROUND],
                 2 if cfg[C.XT_RHT] else 0, sign_mask, seed, cnt, dt, di, st, base + p[14])

    # W: both orientations in one pass (round to nearest, no transform), into the scratch
    # buffer (rowwise: codes, or decoded values on the decoded road) and the saved W^T, or
    # into the layer's cache (codes).
    wrow_v = wcol_v = _NONE2
    wcol = _NONE3
    if w_mode == W_FRESH:
        if dec:
            o = p[13]
            wrow_q, wrow_v = _NONE3, (base + o[0], base + o[1])
        else:
            o = p[5]
            wrow_q = (base + o[0], base + o[1], base + o[2]) if fprop else _NONE3
        if save_wt:
            wcol, wcol_v = _saved_addresses(wt, p[16], p[7])
    else:
        a = w_cache.data_ptr()
        wrow_q, wcol = _at(a, p[5]), _at(a, p[7])
    if w_mode != W_REUSE and (wrow_q[0] or wrow_v[1] or wcol[0] or wcol_v[1]):
        w = w.contiguous()
        _quantize_call(w.data_ptr(), DTYPE_CODE[w.dtype], n, k, wrow_q, wrow_v, wcol, wcol_v, 0, 0, sign_mask, 0, 0,
                       dt, di, st, base + p[14], block=cfg[C.W_BLOCK])
    if fprop:  # Y = alpha * X̂ Ŵᵀ (+ bias)
        _gemm_call(xrow_q, xrow_v, wrow_q, wrow_v, m, n, k, 0 if bias is None else bias.data_ptr(),
                   DTYPE_CODE.get(bias_dt, 0), y.data_ptr(), xcode, backend, base + p[8], p[9], dt, di, st)
    return y, xt, wt


def _linear_fwd_fake(x, w, bias, counter, cfg, save_xt, save_wt, w_mode, w_cache):
    m, k, n = _fwd_check(x, w, bias, counter, cfg, save_xt, save_wt, w_mode, w_cache)
    if w_mode != W_FRESH:
        _packed("w_cache", w_cache, w_cache_nbytes(n, k), x.device, "x")
    y_shape = (*x.shape[:-1], n) if cfg[LinearConfig.FPROP] else (0,)
    xt_dec = wt_dec = False
    if cfg[LinearConfig.SAVE_DECODED] and x.device.type == "cuda":
        # which saved operands are decoded depends on the GEMM runner chosen for the shape
        # (the same question the implementation's plan asks): asked with concrete sizes
        mi, ki, ni = int(m), int(k), int(n)
        dev = x.device
        xt_dec, wt_dec = saved_decoded(mi, ki, ni, x.dtype, w.dtype, cfg[LinearConfig.BACKEND], save_xt, save_wt,
                                       w_mode, True, dev, (1, dev.index if dev.index is not None else 0, 0))
    # W^T for dgrad travels with the autograd context unless a weight cache holds it
    return (x.new_empty(y_shape),
            x.new_empty((_saved_numel(k, _up(m, 16), save_xt, xt_dec),), dtype=_BF16 if xt_dec else _U8),
            x.new_empty((_saved_numel(k, _up(n, 16), save_wt and w_mode == W_FRESH, wt_dec),),
                        dtype=_BF16 if wt_dec else _U8))


# ------------------------------------------------------------------------------ linear_bwd
def _bwd_check(dy, xt, wt, counter, cfg, k, need_dx, need_dw, dw_dtype):
    """(m, n) for dy [..., n]."""
    _need_rows("dy", dy)
    check.tensor("dy", dy, check.FLOATS, contiguous=False)
    n = dy.shape[-1]
    m = math.prod(dy.shape[:-1])
    dev = dy.device
    if k < 0 or k % 16:
        raise ValueError(f"k: the layer's in_features, a multiple of 16, got {k}")
    _ops.check_counter("counter", counter, dev, "dy")
    _cfg(cfg)
    if need_dw:
        _saved("xt", xt, k, _up(m, 16), dev)
        if dw_dtype not in DTYPE_CODE:
            raise TypeError(f"dw_dtype: must be float32, float16 or bfloat16, got {dw_dtype}")
    if need_dx:
        _saved("wt", wt, k, _up(n, 16), dev)
    return m, n


def _saved(name: str, t, rows: int, cols: int, device) -> None:
    """A saved operand [rows, cols] as linear_fwd writes it: packed codes (uint8) or decoded
    values (bfloat16, LinearConfig.SAVE_DECODED), 1D, with at least the elements it needs."""
    if getattr(t, "dtype", None) is _BF16:
        check.tensor(name, t, (torch.bfloat16,), None, device, "dy")
        need = _dec_bytes(rows, cols) // 2
        if t.dim() != 1 or t.numel() < need:
            raise ValueError(f"{name}: expected decoded values [{rows}, {cols}] with their amax, a 1D bfloat16 buffer "
                             f"of at least {need} elements, got {check.describe(t)}")
        return
    if isinstance(t, torch.Tensor) and t.dtype is not _U8:
        raise ValueError(f"{name}: expected uint8 (packed FP4 codes) or bfloat16 (decoded values), got "
                         f"{check.describe(t)}")
    _packed(name, t, packed_nbytes(rows, cols), device, "dy")


def _linear_bwd_impl(dy, xt, wt, counter, cfg, k, need_dx, need_dw, dw_dtype):
    """dy [..., n] (m rows in all); xt: X^T [k, roundup(m,16)] (need_dw); wt: W^T [k, roundup(n,16)]
    (need_dx); each packed codes (uint8) or decoded values (bfloat16), as linear_fwd saved
    them. dx [..., k] like dy. Advances counter by one after the
    quantization of dY has read it."""
    C = LinearConfig
    ds = dy.shape
    dev = dy.device
    dy_dt = dy.dtype
    # the arguments the plan's key is made of, checked in one expression first (the plan then
    # gives the sizes the saved buffers must have); anything else: the checks that name it
    if not (len(ds) >= 2 and dy_dt in _FLOATS and dw_dtype in DTYPE_CODE and k >= 0 and k % 16 == 0
            and len(cfg) == C.SIZE and counter.dtype is _I64 and counter.numel() == 1 and counter.device == dev):
        _bwd_check(dy, xt, wt, counter, cfg, k, need_dx, need_dw, dw_dtype)
    m, n = (ds[0] if len(ds) == 2 else math.prod(ds[:-1])), ds[-1]
    backend = cfg[C.BACKEND]
    dt, di, st = _device3(dy, dev)
    # the saved operands' form: decoded values (bfloat16) or packed codes (uint8, or anything
    # else, which the checks below refuse by name)
    xt_dec = bool(need_dw) and getattr(xt, "dtype", None) is _BF16
    wt_dec = bool(need_dx) and getattr(wt, "dtype", None) is _BF16
    key = ("linear_bwd", m, n, k, dy_dt, dw_dtype, dt, di, need_dx, need_dw, backend, xt_dec, wt_dec, gemm_env_key())
    p = _ops._WS.get(key)
    if p is None:
        if xt_dec or wt_dec:
            # the decoded buffers' sizes before the plan is made: it asks the library about
            # decoded operands, which it refuses where no runner reads them (e.g. the CPU)
            _bwd_check(dy, xt, wt, counter, cfg, k, need_dx, need_dw, dw_dtype)
        p = _new_plan(key, _bwd_plan, m, n, k, dy_dt, dw_dtype, need_dx, need_dw, backend, xt_dec, wt_dec, dev,
                      (dt, di, st))
    if not ((not need_dw or ((xt_dec or xt.dtype is _U8) and xt.dim() == 1 and xt.numel() >= p[10]
                             and xt.device == dev and xt.is_contiguous()))
            and (not need_dx or ((wt_dec or wt.dtype is _U8) and wt.dim() == 1 and wt.numel() >= p[11]
                                 and wt.device == dev and wt.is_contiguous()))):
        _bwd_check(dy, xt, wt, counter, cfg, k, need_dx, need_dw, dw_dtype)
    dy = dy.contiguous()
    dx = torch.empty(*p[0], dtype=dy_dt, device=dev) if (len(ds) == 2 or not need_dx) else \
        torch.empty(*ds[:-1], k, dtype=dy_dt, device=dev)
    dw = torch.empty(*p[1], dtype=dw_dtype, device=dev)
    ws = torch.empty(p[2], dtype=_U8, device=dev)
    base = ws.data_ptr()
    # dY rowwise for dgrad, dY^T for wgrad: each into codes, or into its decoded values where
    # its GEMM's runner takes them (the plan's p[12] / p[13]); one pass when both use the same
    # rounding.
    row_q, row_v, col_q, col_v = _NONE3, _NONE2, _NONE3, _NONE2
    if need_dx:
        o = p[3]
        if p[12]:
            row_v = (base + o[0], base + o[1])
        else:
            row_q = (base + o[0], base + o[1], base + o[2])
    if need_dw:
        o = p[4]
        if p[13]:
            col_v = (base + o[0], base + o[1])
        else:
            col_q = (base + o[0], base + o[1], base + o[2])
    g = base + p[5]
    dyp, dycode = dy.data_ptr(), DTYPE_CODE[dy_dt]
    # the (last) quantization of dY advances the counter once its work has read it: the next
    # backward of this layer draws new bits
    _quantize_1d(dyp, dycode, m, n, row_q, row_v, col_q, col_v, need_dx, need_dw, cfg[C.DY_ROUND], cfg[C.DYT_ROUND],
                 2 if cfg[C.DYT_RHT] else 0, cfg[C.SIGN_MASK], cfg[C.SEED_DY], counter.data_ptr(), dt, di, st,
                 base + p[14], advance=True)
    if need_dx:  # dgrad: dX = alpha * dŶ (Ŵᵀ)ᵀ, W^T quantized along N
        b_q, b_v = _saved_addresses(wt, p[16] if wt_dec else None, p[9])
        _gemm_call(row_q, row_v, b_q, b_v, m, k, n, 0, 0, dx.data_ptr(), dycode, backend, g, p[6], dt, di, st)
    if need_dw:  # wgrad: dW = alpha * (dŶᵀ)(X̂ᵀ)ᵀ, both along the token axis
        b_q, b_v = _saved_addresses(xt, p[15] if xt_dec else None, p[8])
        _gemm_call(col_q, col_v, b_q, b_v, n, k, _up(m, 16), 0, 0, dw.data_ptr(), DTYPE_CODE[dw_dtype], backend, g,
                   p[7], dt, di, st)
    if need_dx or need_dw:
        _increment_version(counter)  # written by the library: as an in-place op would have
    else:
        counter.add_(1)  # nothing quantized: the step still advances it
    return dx, dw


def _linear_bwd_fake(dy, xt, wt, counter, cfg, k, need_dx, need_dw, dw_dtype):
    m, n = _bwd_check(dy, xt, wt, counter, cfg, k, need_dx, need_dw, dw_dtype)
    return (dy.new_empty((*dy.shape[:-1], k) if need_dx else (0,)),
            dy.new_empty((n, k) if need_dw else (0,), dtype=dw_dtype))


for _k in ("CPU", "CUDA"):
    lib.impl("linear_fwd", lambda *a: _linear_fwd_impl(*a), _k)
    lib.impl("linear_bwd", lambda *a: _linear_bwd_impl(*a), _k)
torch.library.register_fake("nvfp4::linear_fwd", _linear_fwd_fake, lib=lib)
torch.library.register_fake("nvfp4::linear_bwd", _linear_bwd_fake, lib=lib)


# ------------------------------------------------------------------------------ eager calls
# An eager call of an op whose CPU/CUDA kernel is Python goes through the dispatcher only to
# come back to that same Python function (~4 us a call on a fast host, twice per Linear
# forward + backward). Where nothing else could act on the call, the layer's passes call the
# implementation directly: the same function with the same arguments, so the same bits. The
# op is kept wherever something else could act on it: under torch.compile (the graph must
# hold the op) and TorchScript tracing, under a TorchDispatchMode (fake tensors,
# FlopCounterMode, selective checkpointing), a TorchFunctionMode other than
# torch.set_default_device's, with the profiler on (its record of the op), and for tensors
# that are not plain tensors or parameters on cpu/cuda (tensor subclasses such as the
# FP4-gathered weight of nvfp4.distributed, which handles the op itself; meta tensors).
_direct = _ops.direct


def linear_fwd(x, w, bias, counter, cfg, save_xt, save_wt, w_mode=W_FRESH, w_cache=None):
    if _direct(x, w, bias, counter, w_cache):
        return _linear_fwd_impl(x, w, bias, counter, cfg, save_xt, save_wt, w_mode, w_cache)
    return torch.ops.nvfp4.linear_fwd(x, w, bias, counter, cfg, save_xt, save_wt, w_mode, w_cache)


def linear_bwd(dy, xt, wt, counter, cfg, k, need_dx, need_dw, dw_dtype):
    if _direct(dy, xt, wt, counter):
        return _linear_bwd_impl(dy, xt, wt, counter, cfg, k, need_dx, need_dw, dw_dtype)
    return torch.ops.nvfp4.linear_bwd(dy, xt, wt, counter, cfg, k, need_dx, need_dw, dw_dtype)

# ------------------------------------------------------------------------------ a frozen, already quantized weight
# The forward of a layer whose weight exists only in NVFP4 (nvfp4.nn.FrozenLinear): W's rowwise
# (data, swizzled scales, amax) are three tensors the layer owns, read and never written, so
# the op mutates nothing. X is quantized exactly as linear_fwd quantizes it for fprop (same
# rounding, seed and counter), so both layers compute the same bits from the same W.
lib.define("frozen_linear_fwd(Tensor x, Tensor w_data, Tensor w_scales, Tensor w_amax, Tensor? bias, "
           "Tensor counter, int[] cfg) -> Tensor")


def _frozen_fwd_check(x, w_data, w_scales, w_amax, bias, counter, cfg):
    xs, ds = x.shape, w_data.shape
    # the common case (the layer's own buffers) in one expression; the rest names what is wrong
    if len(xs) == 2 and len(ds) == 2 and bias is None:
        m, k = xs
        n = ds[0]
        dev = x.device
        if (ds[1] * 2 == k and k % 16 == 0 and x.dtype in _FLOATS and w_data.dtype is _U8 and w_amax.dtype is _F32
                and (w_scales.dtype is _U8 or w_scales.dtype is _E4M3)
                and w_scales.shape == ((n + 127) // 128 * 128, (k // 16 + 3) // 4 * 4) and w_amax.shape == _ONE
                and w_data.is_contiguous() and w_scales.is_contiguous() and counter.dtype is _I64
                and counter.numel() == 1 and len(cfg) == LinearConfig.SIZE and w_data.device == dev
                and w_scales.device == dev and w_amax.device == dev and counter.device == dev):
            return m, k, n
    _need_2d("x", x)
    check.tensor("x", x, check.FLOATS, contiguous=False)
    m, k = x.shape
    dev = x.device
    if w_data.dim() != 2 or w_data.shape[1] * 2 != k:
        raise ValueError(f"w_data: expected [out_features, {k // 2}] packed codes for an input of {k} features, "
                         f"got {check.describe(w_data)}")
    n = w_data.shape[0]
    check.nvfp4_orientation("w", w_data, w_scales, w_amax, n, k, _LAYOUT_SWIZZLED, dev, "x", sep="_")
    if bias is not None:
        check.tensor("bias", bias, check.FLOATS, (n,), dev, "x", contiguous=False)
    _ops.check_counter("counter", counter, dev, "x")
    _cfg(cfg)
    return m, k, n


def _frozen_fwd_impl(x, w_data, w_scales, w_amax, bias, counter, cfg):
    C = LinearConfig
    m, k, n = _frozen_fwd_check(x, w_data, w_scales, w_amax, bias, counter, cfg)
    x = x.contiguous()
    dev = x.device
    y = torch.empty((m, n), dtype=x.dtype, device=dev)
    if m == 0 or n == 0:
        return y
    dt, di, st = _device(x)
    backend = cfg[C.BACKEND]
    bias_dt = None if bias is None else bias.dtype
    bias = None if bias is None else bias.contiguous()
    xcode = DTYPE_CODE[x.dtype]
    # X into codes, or straight into its decoded values where the GEMM's runner takes them
    # (see _dec_layout): then no codes and no decode pass
    dec = _ops.gemm_takes_decoded(m, n, k, backend, x.dtype, bias_dt, dev, (dt, di, st))
    if dec:
        (vo, ao), x_bytes = _dec_layout(0, m, k)
        gemm_ws = _ops.gemm_dec_workspace_bytes(m, n, k, backend, x.dtype, bias_dt, True, False, dev, (dt, di, st))
    else:
        x_bytes = packed_nbytes(m, k)
        gemm_ws = gemm_workspace_bytes(m, n, k, backend, x.dtype, bias_dt, False, dev, (dt, di, st))
    qws = _up(x_bytes + gemm_ws, 256)  # the quantization workspace, last
    ws = torch.empty((qws + _QWS,), dtype=torch.uint8, device=dev)
    base = ws.data_ptr()
    xrow_q, xrow_v = (_NONE3, (base + vo, base + ao)) if dec else (addresses(base, m, k), _NONE2)
    _quantize_call(x.data_ptr(), xcode, m, k, xrow_q, xrow_v, _NONE3, _NONE2, cfg[C.X_ROUND], 0, cfg[C.SIGN_MASK],
                   cfg[C.SEED_X], counter.data_ptr(), dt, di, st, base + qws)
    _gemm_call(xrow_q, xrow_v, (w_data.data_ptr(), w_scales.data_ptr(), w_amax.data_ptr()), _NONE2, m, n, k,
               0 if bias is None else bias.data_ptr(), DTYPE_CODE.get(bias_dt, 0), y.data_ptr(), xcode, backend,
               base + x_bytes, gemm_ws, dt, di, st)
    return y


def _frozen_fwd_fake(x, w_data, w_scales, w_amax, bias, counter, cfg):
    m, k, n = _frozen_fwd_check(x, w_data, w_scales, w_amax, bias, counter, cfg)
    return x.new_empty((m, n))


for _k in ("CPU", "CUDA"):
    lib.impl("frozen_linear_fwd", lambda *a: _frozen_fwd_impl(*a), _k)
torch.library.register_fake("nvfp4::frozen_linear_fwd", _frozen_fwd_fake, lib=lib)


def frozen_linear_fwd(x, w_data, w_scales, w_amax, bias, counter, cfg):
    """Y = alpha * Q(X) Ŵᵀ (+ bias) for a weight given as its rowwise NVFP4 triple (data
    uint8 [N, K/2], swizzled scales as bytes, amax float32 [1]); X [M, K] is quantized as the
    cfg says for fprop (LinearConfig.X_ROUND, SEED_X, the counter as SR offset)."""
    if _direct(x, w_data, w_scales, w_amax, bias, counter):
        return _frozen_fwd_impl(x, w_data, w_scales, w_amax, bias, counter, cfg)
    return torch.ops.nvfp4.frozen_linear_fwd(x, w_data, w_scales, w_amax, bias, counter, cfg)
