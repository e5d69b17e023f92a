"""GroupedLinear's two passes (nvfp4.nn.GroupedLinear): torch ops in the namespace ``nvfp4``,
one per pass like nvfp4.nn.Linear's (nn._passes), on the grouped entry points of the op
layer (nvfp4._ops: grouped / batched quantization and the grouped GEMM)."""
from __future__ import annotations

import torch

from .. import _ops
from .._ops import (DTYPE_CODE, RAGGED_K, RAGGED_M, TRIPLE_DTYPES, _addr3, _aligned, _alloc3, _check_offs, _device,
                    _empty3, _grouped_gemm_run, _need_2d, _up, batched_shapes, grouped_col_shapes, grouped_row_shapes,
                    lib)
from ._passes import LinearConfig, _direct

__all__ = ["grouped_linear_fwd", "grouped_linear_fwd_q", "grouped_linear_bwd", "quantize_experts", "experts_shapes"]


def experts_shapes(e: int, n: int, k: int):
    """(W's, Wᵀ's) batched shapes for expert weights W [E, N, K]: W quantized along K, Wᵀ
    [E, K, N] along N (N padded to 16)."""
    return batched_shapes(e, n, k), batched_shapes(e, k, _up(n, 16))

# ------------------------------------------------------------------------------ GroupedLinear's two passes
# nvfp4.nn.GroupedLinear: one op per pass, as linear_fwd / linear_bwd for the dense layer, with
# the same LinearConfig list. x [T, K] token-sorted, w [E, N, K], offs [E].
#   forward:  X grouped (rowwise for fprop; columnwise, with the RHT, for wgrad), W batched
#             (rowwise for fprop, columnwise for dgrad; 2D tiles per the recipe), Y = ragged-M GEMM;
#   backward: dY grouped both ways, dX = ragged-M GEMM with Wᵀ, dW = ragged-K GEMM of dYᵀ, Xᵀ;
#             then the step counter advances (after the quantization read it).
lib.define("grouped_linear_fwd(Tensor x, Tensor w, Tensor offs, Tensor counter, int[] cfg, bool save_xt, "
           "bool save_wt) -> Tensor[]")
lib.define("grouped_linear_fwd_q(Tensor x, Tensor w_data, Tensor w_scales, Tensor w_amax, Tensor offs, Tensor counter, "
           "int[] cfg, bool save_xt) -> Tensor[]")
lib.define("grouped_linear_bwd(Tensor dy, Tensor offs, Tensor xt_data, Tensor xt_scales, Tensor xt_amax, "
           "Tensor wt_data, Tensor wt_scales, Tensor wt_amax, Tensor(a!) counter, int[] cfg, int k, bool need_dx, "
           "bool need_dw, ScalarType dw_dtype) -> (Tensor, Tensor, Tensor)")


def _gl_fwd_outputs(x, w, offs, cfg, save_xt, save_wt):
    t, k = x.shape
    e, n, _ = w.shape
    dev = x.device
    y = torch.empty((t, n) if cfg[LinearConfig.FPROP] else (0,), dtype=x.dtype, device=dev)
    xt = _alloc3(grouped_col_shapes(t, k, e), dev) if save_xt else _empty3(dev)
    wt = _alloc3(experts_shapes(e, n, k)[1], dev) if save_wt else _empty3(dev)
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
    e, n, _ = w.shape
    fprop = bool(cfg[C.FPROP])
    dev = x.device
    dv = _device(x)
    y, xt, wt, err = _gl_fwd_outputs(x, w, offs, cfg, save_xt, save_wt)
    wrow = _alloc3(experts_shapes(e, n, w.shape[2])[0], dev) if fprop else None
    if fprop or save_wt:
        _batched_w(w, cfg, _addr3(wrow) if fprop else (0, 0, 0), _addr3(wt) if save_wt else (0, 0, 0), dv)
    _gl_x_and_fprop(x, offs, counter, cfg, save_xt, e, n, wrow, y, xt, err, dv)
    return [y, *xt, *wt, err]


def _batched_w(w, cfg, row, col, dv) -> None:
    """W [E, N, K] quantized per expert (its own amax; 2D tiles or 1x16 blocks per the
    recipe): rowwise into the `row` addresses, columnwise (Wᵀ) into `col` (0: not wanted)."""
    e, n, k = w.shape
    dt, di, st = dv
    _ops.batched_quantize_raw(w.data_ptr(), DTYPE_CODE[w.dtype], e, n, k, *row, *col, cfg[LinearConfig.W_BLOCK], 0, 0,
                              cfg[LinearConfig.SIGN_MASK], 0, 0, 0, dt, di, st)


def _gl_x_and_fprop(x, offs, counter, cfg, save_xt, e, n, wrow, y, xt, err, dv) -> None:
    """X quantized (rowwise for fprop, columnwise with the RHT for wgrad) and Y = X̂ Ŵᵀ per
    group, W given quantized (wrow)."""
    C = LinearConfig
    t, k = x.shape
    fprop = bool(cfg[C.FPROP])
    dt, di, st = dv
    xrow = _alloc3(grouped_row_shapes(t, k, e), x.device) if fprop else None
    cnt = counter.data_ptr()
    sign_mask = cfg[C.SIGN_MASK]
    xq = lambda row, col, rounding, rht: _ops.grouped_quantize_raw(  # noqa: E731
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
    if fprop:
        _grouped_gemm_run(RAGGED_M, _addr3(xrow), _addr3(wrow), offs, t, n, k, cfg[C.BACKEND], y, err, dv)


def _gl_fwd_fake(x, w, offs, counter, cfg, save_xt, save_wt):
    y, xt, wt, err = _gl_fwd_outputs(x, w, offs, cfg, save_xt, save_wt)
    return [y, *xt, *wt, err]


# ------------------------------------------------------------------------------ forward on a quantized W
# grouped_linear_fwd_q: the forward pass with W already quantized rowwise (the batched layout,
# batched_shapes(E, N, K)): what FSDP2's FP4 all-gather of the experts hands the layer
# (nvfp4.distributed). Returns [y, xt (3 tensors), offs_error]; Wᵀ comes with the gathered
# weight too, so the pass has nothing else to make.
def _gl_fwd_q_check(x, w_data, w_scales, w_amax, offs, counter):
    _need_2d("x", x)
    k = x.shape[1]
    if w_data.dim() != 3 or w_data.dtype != torch.uint8 or w_data.shape[2] * 2 != k:
        raise ValueError(f"w_data: expected uint8 [E, N, {k // 2}] (the codes of W [E, N, {k}]), got "
                         f"{w_data.dtype} {tuple(w_data.shape)}")
    e, n, _ = w_data.shape
    _, sc, a = experts_shapes(e, n, k)[0]
    for name, t, dtype, shape in (("w_scales", w_scales, TRIPLE_DTYPES[1], sc), ("w_amax", w_amax, TRIPLE_DTYPES[2], a)):
        if t.dtype != dtype or tuple(t.shape) != shape:
            raise ValueError(f"{name}: expected {dtype} {shape} for W [{e}, {n}, {k}], got {t.dtype} {tuple(t.shape)}")
    for name, t in (("w_data", w_data), ("w_scales", w_scales), ("w_amax", w_amax)):
        if t.device != x.device:
            raise ValueError(f"{name}: on {t.device}, but x is on {x.device}")
        if not t.is_contiguous():
            raise ValueError(f"{name}: must be contiguous")
    _check_offs(offs, x, e)
    if counter.device != x.device:
        raise ValueError(f"counter: the layer's step counter is on {counter.device} but x is on {x.device}")
    return e, n


def _gl_fwd_q_outputs(x, e, n, cfg, save_xt):
    t, k = x.shape
    dev = x.device
    y = torch.empty((t, n) if cfg[LinearConfig.FPROP] else (0,), dtype=x.dtype, device=dev)
    xt = _alloc3(grouped_col_shapes(t, k, e), dev) if save_xt else _empty3(dev)
    return y, xt, torch.empty((1,), dtype=torch.int32, device=dev)


def _gl_fwd_q_impl(x, w_data, w_scales, w_amax, offs, counter, cfg, save_xt):
    e, n = _gl_fwd_q_check(x, w_data, w_scales, w_amax, offs, counter)
    x = _aligned(x)
    w = tuple(_aligned(t) for t in (w_data, w_scales, w_amax))
    y, xt, err = _gl_fwd_q_outputs(x, e, n, cfg, save_xt)
    _gl_x_and_fprop(x, offs, counter, cfg, save_xt, e, n, w, y, xt, err, _device(x))
    return [y, *xt, err]


def _gl_fwd_q_fake(x, w_data, w_scales, w_amax, offs, counter, cfg, save_xt):
    e, n = _gl_fwd_q_check(x, w_data, w_scales, w_amax, offs, counter)
    y, xt, err = _gl_fwd_q_outputs(x, e, n, cfg, save_xt)
    return [y, *xt, err]


def quantize_experts(w: torch.Tensor, cfg, transposed: bool, out=None):
    """W [E, N, K] quantized as GroupedLinear's forward pass quantizes it (the same kernel
    and settings, each expert with its own amax): (rowwise triple, columnwise triple — Wᵀ,
    quantized along N — or empty tensors). Experts are independent, so quantizing a rank's
    experts gives that rank's slice of quantizing them all. `out`: the two triples to write
    (contiguous, of experts_shapes' shapes and TRIPLE_DTYPES; the caller's)."""
    w = _aligned(w)
    e, n, k = w.shape
    dev = w.device
    if out is not None:
        row, col = out
        if not transposed:
            raise ValueError("out: given for both orientations, but transposed is False")
        rs, cs = experts_shapes(e, n, k)
        for t, shape, dt in zip(row + col, rs + cs, TRIPLE_DTYPES * 2):
            if tuple(t.shape) != tuple(shape) or t.dtype != dt or not t.is_contiguous() or t.device != dev:
                raise ValueError(f"out: expected a contiguous {dt} tensor of shape {list(shape)} on {dev}, got "
                                 f"{t.dtype} {list(t.shape)} on {t.device}")
    else:
        rs, cs = experts_shapes(e, n, k)
        row = _alloc3(rs, dev)
        col = _alloc3(cs, dev) if transposed else _empty3(dev)
    if e:
        _batched_w(w, cfg, _addr3(row), _addr3(col) if transposed else (0, 0, 0), _device(w))
    return row, col


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
    q = lambda row, col, rounding, rht: _ops.grouped_quantize_raw(  # noqa: E731
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
    lib.impl("grouped_linear_fwd_q", lambda *a: _gl_fwd_q_impl(*a), _k)
    lib.impl("grouped_linear_bwd", lambda *a: _gl_bwd_impl(*a), _k)
torch.library.register_fake("nvfp4::grouped_linear_fwd", _gl_fwd_fake, lib=lib)
torch.library.register_fake("nvfp4::grouped_linear_fwd_q", _gl_fwd_q_fake, lib=lib)
torch.library.register_fake("nvfp4::grouped_linear_bwd", _gl_bwd_fake, lib=lib)


def grouped_linear_fwd(x, w, offs, counter, cfg, save_xt, save_wt):
    """[y, xt (3 tensors), wt (3 tensors), offs_error]; see the section's notes. Eager calls
    run the implementation without the dispatcher where nothing else could act on the call
    (nvfp4.nn._passes._direct)."""
    if _direct(x, w, offs, counter):
        return _gl_fwd_impl(x, w, offs, counter, cfg, save_xt, save_wt)
    return torch.ops.nvfp4.grouped_linear_fwd(x, w, offs, counter, cfg, save_xt, save_wt)


def grouped_linear_fwd_q(x, w, offs, counter, cfg, save_xt):
    """[y, xt (3 tensors), offs_error] with w = (data, scales, amax) of W already quantized."""
    if _direct(x, *w, offs, counter):
        return _gl_fwd_q_impl(x, *w, offs, counter, cfg, save_xt)
    return torch.ops.nvfp4.grouped_linear_fwd_q(x, *w, offs, counter, cfg, save_xt)


def grouped_linear_bwd(dy, offs, xt, wt, counter, cfg, k, need_dx, need_dw, dw_dtype):
    """[dx, dw, offs_error]; advances counter by one."""
    if _direct(dy, offs, *xt, *wt, counter):
        return _gl_bwd_impl(dy, offs, *xt, *wt, counter, cfg, k, need_dx, need_dw, dw_dtype)
    return torch.ops.nvfp4.grouped_linear_bwd(dy, offs, *xt, *wt, counter, cfg, k, need_dx, need_dw, dw_dtype)
