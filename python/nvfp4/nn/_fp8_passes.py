"""The passes of the FP8 baseline Linear (nvfp4.nn.fp8.FP8Linear) as torch operators
(namespace ``nvfp4``), on the op layer's raw entry points: one call per pass, as the
NVFP4 Linear's passes (nvfp4.nn._passes).

- ``fp8_linear_fwd``: casts X (and, for wgrad, Xᵀ) and W (and, for dgrad, Wᵀ) with
  nvfp4_fp8_cast, delayed scaling's history update of each role first, and runs the forward
  GEMM on torch._scaled_mm. Returns Y, the saved transposes and one float32 buffer of
  scalars (1/s of X and of W, then scratch), each in a 16-byte slot: cuBLASLt refuses scale
  pointers that are not 16-byte aligned (CUBLAS_STATUS_NOT_SUPPORTED).
- ``fp8_linear_bwd``: casts dY both ways and runs dgrad and wgrad on torch._scaled_mm.

What a call costs on the host is what the step at small sizes waits on, so a call makes
no torch op it can do without: no Python-side scale arithmetic (the cast derives s on the
device and writes 1/s), one allocation per output, the delayed-scaling history addressed by
role inside the op (no views), and the newest history slot filled by the cast itself (its
max |x| added into the slot the update has just cleared: no amax pass, no copy).

Delayed scaling's state is the layer's buffers, mutated in place on the device, one row
per role, [scale, amax history (L entries, the newest at index 0)]: the forward's float32
[2, 1 + L] (rows x, w), given to ``fp8_linear_fwd``, and the gradient's [1, 1 + L] (dy), given to
``fp8_linear_bwd``; an op that does not update it reads the scale only. Neither op writes
the other's state, so that a compiled backward mutates the gradient state the layer holds,
not a copy taken at its forward.

Each op checks the tensors it is given before it takes an address. On the meta device (and
for torch.compile's fake tensors) they return outputs of the right shape and dtype and run
nothing.
"""
from __future__ import annotations

import torch

from .. import _checks as check
from .. import _ops
from .._ops import DTYPE_CODE, _device, _need_2d, lib

__all__ = ["Fp8Config", "fp8_linear_fwd", "fp8_linear_bwd", "ROLE_X", "ROLE_W", "ROLE_DY"]

# rows of the state each op is given: x and w of the forward's, dy of the gradient's
ROLE_X, ROLE_W, ROLE_DY = 0, 1, 0
_FWD_ROWS, _BWD_ROWS = 2, 1
_FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)  # format codes 0 and 1
_F32 = torch.float32
_FLOATS = frozenset(check.FLOATS)


class Fp8Config:
    """Indices into the int list that configures fp8_linear_fwd / fp8_linear_bwd
    (nvfp4.nn.fp8 builds it once per recipe and mode)."""

    FWD_FORMAT = 0   # X and W: 0 E4M3, 1 E5M2
    BWD_FORMAT = 1   # dY
    DELAYED = 2      # 0 current scaling, 1 delayed scaling (the state given)
    UPDATE = 3       # delayed: update the history and scale of each role cast (training)
    ALGO = 4         # delayed: the history's amax, 0 max, 1 most recent
    FAST_ACCUM = 5   # the forward GEMM's use_fast_accum
    SIZE = 6


lib.define("fp8_linear_fwd(Tensor x, Tensor w, Tensor? bias, Tensor(a!)? state, int[] cfg, "
           "float margin, bool save_xt, bool save_wt) -> (Tensor, Tensor, Tensor, Tensor)")
lib.define("fp8_linear_bwd(Tensor dy, Tensor xt, Tensor wt, Tensor scalars, Tensor(a!)? state, "
           "int[] cfg, float margin, bool need_dx, bool need_dw, ScalarType dw_dtype) -> (Tensor, Tensor)")


# floats per scalar slot: torch._scaled_mm hands scale pointers to cuBLASLt, which needs them
# 16-byte aligned
_SLOT = 4

def _cfg(cfg) -> None:
    # every entry is a 0/1 flag or a format code 0/1
    if len(cfg) != Fp8Config.SIZE:
        raise ValueError(f"cfg: expected {Fp8Config.SIZE} ints (Fp8Config), got {len(cfg)}")
    if min(cfg) < 0 or max(cfg) > 1:
        raise ValueError(f"cfg: every entry must be 0 or 1 (Fp8Config), got {list(cfg)}")


def _state_ok(state, dev, rows: int) -> bool:
    ss = state.shape
    return (state.dtype is _F32 and len(ss) == 2 and ss[0] == rows and ss[1] >= 2 and state.is_contiguous()
            and state.device == dev)


def _state_check(state, cfg, dev, device_of: str, rows: int) -> None:
    """Delayed scaling needs a state float32 [rows, 1 + L] on the device of the data (the
    forward's: rows x, w; the gradient's: dy); current scaling takes none."""
    if not cfg[Fp8Config.DELAYED]:
        if state is not None:
            raise ValueError("state: given with current scaling (cfg: delayed = 0)")
        return
    if state is None:
        raise ValueError("state: delayed scaling (cfg: delayed = 1) needs the layer's state")
    if _state_ok(state, dev, rows):
        return
    what = "the forward's state: rows x, w" if rows == _FWD_ROWS else "the gradient's state: row dy"
    check.tensor("state", state, (_F32,), None, dev, device_of)
    if state.dim() != 2 or state.shape[0] != rows or state.shape[1] < 2:
        raise ValueError(f"state: expected float32 [{rows}, 1 + L] ({what}; per row the scale, then L >= 1 "
                         f"history entries), got {check.describe(state)}")


def _aligned(t: torch.Tensor) -> torch.Tensor:
    """t contiguous and, on CUDA, 16-byte aligned (the cast reads 16-byte chunks)."""
    if not t.is_contiguous():
        t = t.contiguous()
    if t.is_cuda and t.data_ptr() % 16:
        t = t.clone()  # a fresh allocation is aligned
    return t


def _cast(t, fmt, state, role, cfg, margin, q, qt, want_qt, sinv_addr, amax_scratch, dt, di, st) -> None:
    """nvfp4_fp8_cast of one role. Current scaling: amax (a scratch float) and s from t.
    Delayed scaling: the role's history update first (training), then the cast with s read
    on the device, max |t| added into the newest history slot that the update cleared."""
    if cfg[Fp8Config.DELAYED]:
        hlen = state.shape[1] - 1
        s_addr = state.data_ptr() + 4 * (hlen + 1) * role  # the row: [scale, history...]
        update = cfg[Fp8Config.UPDATE]
        h_addr = s_addr + 4
        if update:
            _ops.fp8_delayed_update_raw(h_addr, hlen, s_addr, fmt, margin, cfg[Fp8Config.ALGO], dt, di, st)
        _ops.fp8_cast_raw(t.data_ptr(), DTYPE_CODE[t.dtype], t.shape[0], t.shape[1], fmt, 0.0, s_addr,
                          q.data_ptr(), qt.data_ptr(), True, want_qt,
                          sinv_addr, h_addr if update else 0, dt, di, st, bool(update))
    else:
        _ops.fp8_cast_raw(t.data_ptr(), DTYPE_CODE[t.dtype], t.shape[0], t.shape[1], fmt, 0.0, 0,
                          q.data_ptr(), qt.data_ptr(), True, want_qt,
                          sinv_addr, amax_scratch, dt, di, st)


def _smm(a, b, sa, sb, out_dtype, fast_accum: bool):
    """torch._scaled_mm of a [M, K] row-major and b [N, K] row-major (bᵀ column-major).
    Autocast does not touch it on CUDA (cuBLASLt directly); torch's CPU version multiplies
    through aten ops that CPU autocast would run in its low-precision dtype."""
    if a.is_cuda or not torch.is_autocast_enabled("cpu"):
        return torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=out_dtype, use_fast_accum=fast_accum)
    with torch.autocast("cpu", enabled=False):
        return torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=out_dtype, use_fast_accum=fast_accum)


# ------------------------------------------------------------------------------ forward
def _fwd_check(x, w, bias, state, cfg, save_xt, save_wt):
    xs, ws = x.shape, w.shape
    dev = x.device
    # the common case (a layer's own call) in one expression; the rest names what is wrong
    if not (len(xs) == 2 and len(ws) == 2 and xs[1] == ws[1] and xs[1] % 16 == 0 and ws[0] % 16 == 0
            and x.dtype in _FLOATS and w.dtype in _FLOATS and w.device == dev and len(cfg) == Fp8Config.SIZE
            and (bias is None or (bias.dtype in _FLOATS and bias.dim() == 1 and bias.shape[0] == ws[0]
                                  and bias.device == dev))
            and ((state is None and not cfg[Fp8Config.DELAYED])
                 or (state is not None and cfg[Fp8Config.DELAYED] and _state_ok(state, dev, _FWD_ROWS)))
            and (not save_xt or xs[0] % 16 == 0)):
        _fwd_check_slow(x, w, bias, state, cfg, save_xt, save_wt)
    _cfg(cfg)


def _fwd_check_slow(x, w, bias, state, cfg, save_xt, save_wt):
    _need_2d("x", x)
    check.tensor("x", x, check.FLOATS, contiguous=False)
    m, k = x.shape
    dev = x.device
    if k % 16:
        raise ValueError(f"x: in_features must be a multiple of 16 for FP8 GEMMs, got {k}")
    if save_xt and m % 16:
        raise ValueError(f"x: with save_xt the rows (the wgrad GEMM's inner dimension) must be a multiple of 16, "
                         f"got {m}; pad the token axis with zero rows")
    if w.dim() != 2 or w.shape[1] != k:
        raise ValueError(f"w: expected a weight [out_features, {k}] for an input of {k} features, got "
                         f"{check.describe(w)}")
    check.tensor("w", w, check.FLOATS, None, dev, "x", contiguous=False)
    n = w.shape[0]
    if n % 16:
        raise ValueError(f"w: out_features must be a multiple of 16 for FP8 GEMMs, got {n}")
    if bias is not None:
        check.tensor("bias", bias, check.FLOATS, (n,), dev, "x", contiguous=False)
    _cfg(cfg)
    _state_check(state, cfg, dev, "x", _FWD_ROWS)


def _fwd_impl(x, w, bias, state, cfg, margin, save_xt, save_wt):
    """x [m, k], w [n, k] -> y [m, n] in x's dtype, X's and W's transposes ([k, m] and
    [k, n], FP8; (0,) when not saved) and scalars float32 [16]: 1/s_x at 0, 1/s_w at 4, scratch
    at 8 and 12 (16-byte slots: _scaled_mm's scale pointers must be 16-byte aligned)."""
    _fwd_check(x, w, bias, state, cfg, save_xt, save_wt)
    x, w = _aligned(x), _aligned(w)
    m, k = x.shape
    n = w.shape[0]
    dev = x.device
    fmt = cfg[Fp8Config.FWD_FORMAT]
    f8 = _FP8[fmt]
    dt, di, st = _device(x)
    sc = torch.empty((4 * _SLOT,), dtype=_F32, device=dev)
    qx = torch.empty((m, k), dtype=f8, device=dev)
    qxt = torch.empty((k, m) if save_xt else (0,), dtype=f8, device=dev)
    qw = torch.empty((n, k), dtype=f8, device=dev)
    qwt = torch.empty((k, n) if save_wt else (0,), dtype=f8, device=dev)
    a = sc.data_ptr()
    _cast(x, fmt, state, ROLE_X, cfg, margin, qx, qxt, save_xt, a, a + 32, dt, di, st)
    _cast(w, fmt, state, ROLE_W, cfg, margin, qw, qwt, save_wt, a + 16, a + 48, dt, di, st)
    fast = bool(cfg[Fp8Config.FAST_ACCUM])
    if bias is None:
        y = _smm(qx, qw, sc[0], sc[_SLOT], x.dtype, fast)
    else:
        # the FP32 product takes the bias in FP32 and is rounded once
        y = (_smm(qx, qw, sc[0], sc[_SLOT], _F32, fast) + bias.float()).to(x.dtype)
    return y, qxt, qwt, sc


def _fwd_fake(x, w, bias, state, cfg, margin, save_xt, save_wt):
    _fwd_check(x, w, bias, state, cfg, save_xt, save_wt)
    m, k = x.shape
    n = w.shape[0]
    f8 = _FP8[cfg[Fp8Config.FWD_FORMAT]]
    return (x.new_empty((m, n)), x.new_empty((k, m) if save_xt else (0,), dtype=f8),
            x.new_empty((k, n) if save_wt else (0,), dtype=f8), x.new_empty((4 * _SLOT,), dtype=_F32))


# ------------------------------------------------------------------------------ backward
def _bwd_check(dy, xt, wt, scalars, state, cfg, need_dx, need_dw, dw_dtype):
    """(m, n, k) of dy [m, n] and the saved operands, every tensor checked against dy."""
    ds = dy.shape
    dev = dy.device
    # the common case (a layer's own call) in one expression; the rest names what is wrong
    if len(ds) == 2 and ds[1] % 16 == 0 and dy.dtype in _FLOATS and len(cfg) == Fp8Config.SIZE \
            and scalars.dtype is _F32 and scalars.dim() == 1 and scalars.shape[0] == 4 * _SLOT \
            and scalars.device == dev \
            and ((state is None and not cfg[Fp8Config.DELAYED])
                 or (state is not None and cfg[Fp8Config.DELAYED] and _state_ok(state, dev, _BWD_ROWS))):
        f8 = _FP8[cfg[Fp8Config.FWD_FORMAT]] if 0 <= cfg[Fp8Config.FWD_FORMAT] <= 1 else None
        xs, wts = xt.shape, wt.shape
        ok_x = not need_dw or (ds[0] % 16 == 0 and xt.dtype is f8 and len(xs) == 2 and xs[1] == ds[0]
                               and xt.device == dev and xt.is_contiguous() and dw_dtype in DTYPE_CODE)
        ok_w = not need_dx or (wt.dtype is f8 and len(wts) == 2 and wts[1] == ds[1] and wt.device == dev
                               and wt.is_contiguous() and (not need_dw or wts[0] == xs[0]))
        if ok_x and ok_w:
            _cfg(cfg)
            return ds[0], ds[1], (xs[0] if need_dw else wts[0] if need_dx else 0)
    return _bwd_check_slow(dy, xt, wt, scalars, state, cfg, need_dx, need_dw, dw_dtype)


def _bwd_check_slow(dy, xt, wt, scalars, state, cfg, need_dx, need_dw, dw_dtype):
    _need_2d("dy", dy)
    check.tensor("dy", dy, check.FLOATS, contiguous=False)
    m, n = dy.shape
    dev = dy.device
    _cfg(cfg)
    if n % 16:
        raise ValueError(f"dy: out_features must be a multiple of 16 for FP8 GEMMs, got {n}")
    check.tensor("scalars", scalars, (_F32,), (4 * _SLOT,), dev, "dy")
    f8 = _FP8[cfg[Fp8Config.FWD_FORMAT]]
    k = -1
    if need_dw:
        if m % 16:
            raise ValueError(f"dy: with need_dw the rows (the wgrad GEMM's inner dimension) must be a multiple of "
                             f"16, got {m}")
        check.tensor("xt", xt, (f8,), None, dev, "dy")
        if xt.dim() != 2 or xt.shape[1] != m:
            raise ValueError(f"xt: expected X^T [in_features, {m}], got {check.describe(xt)}")
        k = xt.shape[0]
        if dw_dtype not in DTYPE_CODE:
            raise TypeError(f"dw_dtype: must be float32, float16 or bfloat16, got {dw_dtype}")
    if need_dx:
        check.tensor("wt", wt, (f8,), None, dev, "dy")
        if wt.dim() != 2 or wt.shape[1] != n or (k >= 0 and wt.shape[0] != k):
            raise ValueError(f"wt: expected W^T [in_features, {n}]" + (f" with in_features {k}" if k >= 0 else "")
                             + f", got {check.describe(wt)}")
        k = wt.shape[0]
    _state_check(state, cfg, dev, "dy", _BWD_ROWS)
    return m, n, k


def _bwd_impl(dy, xt, wt, scalars, state, cfg, margin, need_dx, need_dw, dw_dtype):
    """dy [m, n]; xt = X^T [k, m] (need_dw), wt = W^T [k, n] (need_dx) and the forward's
    scalars -> dx [m, k] in dy's dtype and dw [n, k] in dw_dtype ((0,) when not needed)."""
    m, n, k = _bwd_check(dy, xt, wt, scalars, state, cfg, need_dx, need_dw, dw_dtype)
    dev = dy.device
    if not (need_dx or need_dw):
        return dy.new_empty((0,)), dy.new_empty((0,), dtype=dw_dtype)
    dy = _aligned(dy)
    fmt = cfg[Fp8Config.BWD_FORMAT]
    f8 = _FP8[fmt]
    dt, di, st = _device(dy)
    sc = torch.empty((2 * _SLOT,), dtype=_F32, device=dev)  # 1/s of dY, scratch (16-byte slots)
    qdy = torch.empty((m, n) if need_dx else (0,), dtype=f8, device=dev)
    qdyt = torch.empty((n, m) if need_dw else (0,), dtype=f8, device=dev)
    a = sc.data_ptr()
    t = dy
    if cfg[Fp8Config.DELAYED]:
        hlen = state.shape[1] - 1
        s_addr = state.data_ptr() + 4 * (hlen + 1) * ROLE_DY  # the row: [scale, history...]
        h_addr = s_addr + 4
        update = cfg[Fp8Config.UPDATE]
        if update:
            _ops.fp8_delayed_update_raw(h_addr, hlen, s_addr, fmt, margin, cfg[Fp8Config.ALGO], dt, di, st)
        _ops.fp8_cast_raw(t.data_ptr(), DTYPE_CODE[t.dtype], m, n, fmt, 0.0, s_addr, qdy.data_ptr(), qdyt.data_ptr(),
                          need_dx, need_dw, a, h_addr if update else 0, dt, di, st, bool(update))
    else:
        _ops.fp8_cast_raw(t.data_ptr(), DTYPE_CODE[t.dtype], m, n, fmt, 0.0, 0, qdy.data_ptr(), qdyt.data_ptr(),
                          need_dx, need_dw, a, a + 16, dt, di, st)
    sdy = sc[0]
    dx = dw = None
    if need_dx:  # dX = dY·W = dY (Wᵀ)ᵀ
        dx = _smm(qdy, wt, sdy, scalars[_SLOT], dy.dtype, False)
    if need_dw:  # dW = dYᵀ·X = dYᵀ (Xᵀ)ᵀ, the inner dimension the token axis
        dw = _smm(qdyt, xt, sdy, scalars[0], _F32, False)
        if dw_dtype is not _F32:
            dw = dw.to(dw_dtype)
    return (dx if need_dx else dy.new_empty((0,)),
            dw if need_dw else dy.new_empty((0,), dtype=dw_dtype))


def _bwd_fake(dy, xt, wt, scalars, state, cfg, margin, need_dx, need_dw, dw_dtype):
    m, n, k = _bwd_check(dy, xt, wt, scalars, state, cfg, need_dx, need_dw, dw_dtype)
    return (dy.new_empty((m, k) if need_dx else (0,)),
            dy.new_empty((n, k) if need_dw else (0,), dtype=dw_dtype))


for _k in ("CPU", "CUDA"):
    lib.impl("fp8_linear_fwd", _fwd_impl, _k)
    lib.impl("fp8_linear_bwd", _bwd_impl, _k)
torch.library.register_fake("nvfp4::fp8_linear_fwd", _fwd_fake, lib=lib)
torch.library.register_fake("nvfp4::fp8_linear_bwd", _bwd_fake, lib=lib)

# Plain eager calls run the implementations without the dispatcher where nothing else could
# act on the call (nvfp4._ops.direct: not compiling or tracing, no dispatch or profiler mode,
# plain cpu/cuda tensors), as the NVFP4 Linear's passes do; the same function, the same bits.
# The dispatcher's share of a call is host time the FP8 step at small sizes waits on.
_direct = _ops.direct


def fp8_linear_fwd(x, w, bias, state, cfg, margin, save_xt, save_wt):
    if _direct(x, w, bias, state):
        return _fwd_impl(x, w, bias, state, cfg, margin, save_xt, save_wt)
    return torch.ops.nvfp4.fp8_linear_fwd(x, w, bias, state, cfg, margin, save_xt, save_wt)


def fp8_linear_bwd(dy, xt, wt, scalars, state, cfg, margin, need_dx, need_dw, dw_dtype):
    if _direct(dy, xt, wt, scalars, state):
        return _bwd_impl(dy, xt, wt, scalars, state, cfg, margin, need_dx, need_dw, dw_dtype)
    return torch.ops.nvfp4.fp8_linear_bwd(dy, xt, wt, scalars, state, cfg, margin, need_dx, need_dw, dw_dtype)
