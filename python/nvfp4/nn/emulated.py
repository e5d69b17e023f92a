"""The per-operand path of nvfp4.nn.Linear: any recipe the fused NVFP4 ops do not run
(an MXFP4 operand, double quantization).

Each operand is quantized as its QuantConfig says (nvfp4.quantize or nvfp4.quantize_mxfp4,
linear scale layout) and multiplied with FP32 accumulation:

    decoded = e2m1(code) * block_scale        exact in BF16 and FP32 (NVFP4: an E4M3 scale,
                                              MXFP4: a power of two within BF16's range)
    GEMM    = (A_dec · B_decᵀ) * alpha_A * alpha_B   alpha: NVFP4's 1 / S_enc, MXFP4's 1

A GEMM whose two operands are MXFP4 runs on the library's MXFP4 GEMM runners
(nvfp4_mx_gemm: on Hopper the decode + BF16 tensor-core emulation, on the CPU the float64
reference), and the MXFP4 operands a backward GEMM needs are kept quantized (0.53 bytes per
element) until then. Other pairs (a mixed NVFP4/MXFP4 GEMM, an NVFP4 pair with double
quantization) are decoded here and multiplied with FP32 output: on CUDA on the BF16 tensor
cores (torch.mm with out_dtype=float32), on the CPU in FP32. Every product of two decoded
values is exact, so each result matches a float64 product of the decoded operands to within
FP32 accumulation, as the fused Hopper path does. MXFP4 values of magnitude >= 2^128 decode
to infinity (outside BF16's range).

The weight is quantized from the master weight (not from an autocast copy), as the fused
path does. Orientations: fprop quantizes X and W along K; dgrad quantizes dY along N and W along N
(its columnwise orientation); wgrad quantizes dYᵀ and Xᵀ along the token axis, which is
zero-padded to a multiple of 32 first (nvfp4._ops.TOKEN_ALIGN; zero rows change no scale
and no product). The Hadamard transform on the wgrad operands is applied by the quantizer
and cancels in the product (the decoded operands stay in the transformed domain,
padding included).

Stochastic rounding: Philox keyed per layer and per operand (layer_seed(seed, layer, 2 + i)
for operand i of RECIPE_OPERANDS), with the layer's sr_step as offset. This path reads
sr_step on the host (one synchronization per forward and per backward that use SR), so
it cannot be captured in a CUDA graph; torch.compile runs it eagerly between compiled
regions (emulated_linear is excluded from tracing).
"""
from __future__ import annotations

import dataclasses
from typing import Tuple

import torch
import torch.nn.functional as F

from .. import _ops
from .._ops import TOKEN_ALIGN
from .._format import SCALE_LAYOUTS, global_decode_scale
from .._mx import MXFP4Tensor, decode_stored, mm_fp32, mx_gemm_raw, quantize_mxfp4
from .._options import dequantize_options, percentile_amax, quantize_options
from .._quantize import quantize
from .recipe import QuantConfig, Recipe, layer_seed, rotation_signs

__all__ = ["EmulatedLinearFn", "emulated_linear", "check_shapes"]

_LINEAR = SCALE_LAYOUTS["linear"]
#: Operand order for the per-operand SR streams.
RECIPE_OPERANDS = ("x", "w", "dy", "wgrad_dy", "wgrad_x")


def check_shapes(r: Recipe, in_features: int, out_features: int) -> None:
    """Feature counts the recipe's MXFP4 operands need (32-element blocks along K)."""
    need = {"in_features": [], "out_features": []}
    if r.x.format == "mxfp4" or r.w.format == "mxfp4":
        need["in_features"].append("fprop (x, w)")       # fprop's K
    if r.dy.format == "mxfp4" or (r.dgrad_w or r.w).format == "mxfp4":
        need["out_features"].append("dgrad (dy, w)")     # dgrad's K
    for name, uses in need.items():
        v = in_features if name == "in_features" else out_features
        if uses and v % 32:
            raise ValueError(f"{name}: must be a multiple of 32 for the MXFP4 operands of {', '.join(uses)}, got {v}")


# An operand as a GEMM takes it: (t0, t1, mx). mx: t0 = the MXFP4 codes [rows, width/2] of
# the stored orientation, t1 = its E8M0 scales (linear). Otherwise t0 = the values decoded
# without the per-tensor scale [rows, width] (padding included), t1 = alpha, float32 [1].
Op = Tuple[torch.Tensor, torch.Tensor, bool]


def _decode(q, columnwise: bool, dtype: torch.dtype) -> Op:
    """One stored orientation of q: MXFP4 as it is, NVFP4 decoded with S_enc = 1 (amax 2688)
    and the real 1 / S_enc as alpha."""
    d = q.columnwise if columnwise else q.rowwise
    if isinstance(q, MXFP4Tensor):
        return d.data, d.scales.view(torch.uint8), True
    out = torch.empty((d.data.shape[0], d.data.shape[1] * 2), dtype=dtype, device=d.data.device)
    one = torch.full((1,), 2688.0, dtype=torch.float32, device=d.data.device)
    _ops.dequantize_into(d.data, d.scales.view(torch.uint8), one, _LINEAR, out)
    return out, global_decode_scale(d.amax), False


def _values(op: Op, dtype: torch.dtype) -> Tuple[torch.Tensor, torch.Tensor]:
    """(decoded values, alpha) of an operand (an MXFP4 one is decoded here: alpha 1)."""
    t0, t1, mx = op
    if not mx:
        return t0, t1
    return decode_stored(t0, t1, _LINEAR, dtype), torch.ones((1,), dtype=torch.float32, device=t0.device)


def _quantize(t: torch.Tensor, c: QuantConfig, columnwise: bool, seed: int, offset: int, rht_signs,
              valid_rows: int = -1):
    """t [rows, cols] quantized along cols (columnwise=False) or along rows (True).
    valid_rows: the rows of t before the token-axis padding (a percentile amax is taken over
    the operand's own values; -1: all rows)."""
    row, col = (not columnwise), columnwise
    if c.format == "nvfp4" and c.has_options:
        # the recipe options (docs/design.md §1.6); MS-EDEN rotates along the quantized axis
        rht = ("columnwise" if columnwise else "rowwise") if (c.rht or c.rounding == "eden") else "none"
        amax = c.amax
        if amax == "percentile":
            amax = percentile_amax(t if valid_rows < 0 else t[:valid_rows], c.amax_percentile)
        return quantize_options(t, block=c.block, rounding=c.rounding, rht=rht, seed=seed, offset=offset,
                                rowwise=row, columnwise=col, scale_layout="linear", rht_signs=rht_signs,
                                four_over_six=c.four_over_six, e4m3_bound=c.e4m3_bound, amax=amax)
    if c.format == "mxfp4":
        return quantize_mxfp4(t, rounding=c.rounding, scale_rule=c.mx_rule, seed=seed, offset=offset, rowwise=row,
                              columnwise=col, scale_layout="linear")
    rht = ("columnwise" if columnwise else "rowwise") if c.rht else "none"
    return quantize(t, block=c.block, rounding=c.rounding, rht=rht, seed=seed, offset=offset, rowwise=row,
                    columnwise=col, scale_layout="linear", rht_signs=rht_signs)


def _operand(t, c: QuantConfig, columnwise: bool, seed: int, offset: int, rht_signs, dtype, valid_rows: int = -1):
    """(the operand (Op), the quantized tensor: the source of a double quantization)."""
    q = _quantize(t, c, columnwise, seed, offset, rht_signs, valid_rows)
    return _decode(q, columnwise, dtype), q


def _mm(a: Op, b: Op, dtype: torch.dtype) -> torch.Tensor:
    """(A · Bᵀ) * alpha_A * alpha_B in FP32 [rows of a, rows of b]: two MXFP4 operands through
    nvfp4_mx_gemm, any other pair decoded (exact in BF16) and multiplied here."""
    if a[2] and b[2]:
        out = torch.empty((a[0].shape[0], b[0].shape[0]), dtype=torch.float32, device=a[0].device)
        return mx_gemm_raw(a[0], a[1], b[0], b[1], _LINEAR, out)
    (av, aal), (bv, bal) = _values(a, dtype), _values(b, dtype)
    # one decode scale per tensor, or per row of an operand with one amax per row
    return mm_fp32(av, bv) * (aal.reshape(-1, 1) * bal.reshape(1, -1))


def _dequantized(q, columnwise: bool) -> torch.Tensor:
    """The full FP32 dequantization of one orientation, in the tensor's own shape (the
    source of a double quantization, and of backward_override="dequantized")."""
    d = None if isinstance(q, MXFP4Tensor) else (q.columnwise if columnwise else q.rowwise)
    if d is not None and d.amax.numel() > 1 and not d.rht:  # one amax per row
        return dequantize_options(q, torch.float32, columnwise)
    return q.dequantize(torch.float32, columnwise=columnwise)


class EmulatedLinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, counter, recipe: Recipe, layer_index: int):
        r = recipe
        if x.is_cuda and torch.cuda.is_current_stream_capturing():
            raise RuntimeError(f"recipe: {r.name!r} runs through nvfp4.nn's per-operand path (MXFP4 operands or "
                               "double quantization), which reads the SR counter on the host and cannot be "
                               "captured in a CUDA graph")
        cdt = x.dtype
        ddt = torch.bfloat16 if x.is_cuda else torch.float32
        k = x.shape[-1]
        n = weight.shape[0]
        x2 = x.reshape(-1, k).contiguous()
        m = x2.shape[0]
        weight_c = weight.contiguous()
        need_dx, need_dw = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        # backward_override: both backward GEMMs in the compute dtype
        fp4_dgrad = r.dgrad and need_dx and r.backward_override is None
        fp4_wgrad = r.wgrad and need_dw and r.backward_override is None
        wq = r.dgrad_w or r.w  # dgrad's weight
        uses_sr = any(getattr(r, f).rounding in ("sr", "eden") for f in RECIPE_OPERANDS) or wq.rounding == "sr"
        offset = int(counter) if uses_sr else 0
        seeds = {f: layer_seed(r.seed, layer_index, 2 + i) for i, f in enumerate(RECIPE_OPERANDS)}
        seed_wt = seeds["w"] if r.dgrad_w is None else layer_seed(r.seed, layer_index, 8)
        signs = r.rht_signs
        # MS-EDEN: a fresh rotation per step, shared by the two operands of each GEMM it enters
        eden_signs = rotation_signs(r.seed, layer_index, offset) if uses_sr else signs
        wgrad_signs = eden_signs if r.wgrad_dy.rounding == "eden" else signs
        w = weight.to(cdt)
        b = None if bias is None else bias.to(cdt)

        qx_full = qw_full = None
        qx = qw = None
        if r.fprop:
            ox, qx = _operand(x2, r.x, False, seeds["x"], offset, signs, ddt)
            ow, qw = _operand(weight_c, r.w, False, seeds["w"], offset, signs, ddt)
            y = _mm(ox, ow, ddt)
            if b is not None:
                y = y + b.float()
            y = y.to(cdt)
            if r.wgrad_x.double_quant:
                qx_full = _dequantized(qx, False)
            if wq.double_quant:
                qw_full = _dequantized(qw, False)
        else:
            y = F.linear(x2, w, b)

        wt = (None, None, False)
        if fp4_dgrad:  # W quantized along N: the columnwise orientation of W [n, k]
            src = qw_full if wq.double_quant else weight_c
            if r.dy.rounding == "eden":  # rotated along N with dY: 1x16 blocks and the step's signs
                wt = _operand(src, dataclasses.replace(wq, block="1d", rht=True, four_over_six=None, e4m3_bound=448,
                                                       amax="tensor", amax_percentile=None),
                              True, seed_wt, offset, eden_signs, ddt)[0]
            else:
                wt = _operand(src, wq, True, seed_wt, offset, signs, ddt)[0]
        xt = (None, None, False)
        pad = (-m) % TOKEN_ALIGN if fp4_wgrad else 0
        if fp4_wgrad:
            src = qx_full if r.wgrad_x.double_quant else x2
            xt = _operand(F.pad(src, (0, 0, 0, pad)) if pad else src, r.wgrad_x, True, seeds["wgrad_x"], offset,
                          wgrad_signs, ddt, m)[0]
        saved_x = x2 if (need_dw and not fp4_wgrad) else None
        saved_w = weight if (need_dx and not fp4_dgrad) else None
        if r.backward_override == "dequantized":  # the backward reads the forward's Q(X), Q(W)
            saved_x = _dequantized(qx, False).to(cdt) if need_dw else None
            saved_w = _dequantized(qw, False).to(cdt) if need_dx else None
        # xt / wt: MXFP4 codes and scales, or decoded values and alpha (Op)
        ctx.save_for_backward(saved_x, saved_w, xt[0], xt[1], wt[0], wt[1])
        ctx.op_mx = (xt[2], wt[2])
        ctx.counter = counter
        ctx.recipe = r
        ctx.meta = (tuple(x.shape), m, k, n, pad, fp4_dgrad, fp4_wgrad, need_dx, need_dw,
                    bias is not None and ctx.needs_input_grad[2], weight.dtype, None if bias is None else bias.dtype,
                    seeds, uses_sr, ddt, eden_signs, wgrad_signs)
        return y.reshape(*x.shape[:-1], n)

    @staticmethod
    def backward(ctx, dy):
        r = ctx.recipe
        (x_shape, m, k, n, pad, fp4_dgrad, fp4_wgrad, need_dx, need_dw, need_db, w_dtype, b_dtype, seeds, uses_sr,
         ddt, eden_signs, wgrad_signs) = ctx.meta
        saved_x, saved_w, xt0, xt1, wt0, wt1 = ctx.saved_tensors
        xt, wt = (xt0, xt1, ctx.op_mx[0]), (wt0, wt1, ctx.op_mx[1])
        cdt = dy.dtype
        dy2 = dy.reshape(-1, n).contiguous()
        offset = int(ctx.counter) if uses_sr else 0
        signs = r.rht_signs
        dx = dw = db = None
        dy_full = None
        if fp4_dgrad:
            ody, qdy = _operand(dy2, r.dy, False, seeds["dy"], offset, eden_signs if r.dy.rounding == "eden" else signs,
                                ddt)
            dx = _mm(ody, wt, ddt)[:, :k].to(cdt)
            if r.wgrad_dy.double_quant:
                dy_full = _dequantized(qdy, False)
        if fp4_wgrad:
            if r.wgrad_dy.double_quant and dy_full is None:  # no dX wanted: dY's quantization for dgrad anyway
                dy_full = _dequantized(_quantize(dy2, r.dy, False, seeds["dy"], offset, signs), False)
            src = dy_full if r.wgrad_dy.double_quant else dy2
            if pad:
                src = F.pad(src, (0, 0, 0, pad))
            odyt = _operand(src, r.wgrad_dy, True, seeds["wgrad_dy"], offset, wgrad_signs, ddt, m)[0]
            dw = _mm(odyt, xt, ddt).to(w_dtype)
        if uses_sr:
            ctx.counter.add_(1)
        if need_dx:
            if not fp4_dgrad:
                dx = dy2 @ saved_w.to(cdt)
            dx = dx.reshape(x_shape)
        if need_dw and not fp4_wgrad:
            dw = (dy2.t() @ saved_x.to(cdt)).to(w_dtype)
        if need_db:
            db = dy2.sum(0, dtype=torch.float32).to(b_dtype)
        return dx, dw, db, None, None, None


@torch.compiler.disable
def emulated_linear(x, weight, bias, counter, recipe: Recipe, layer_index: int) -> torch.Tensor:
    """EmulatedLinearFn.apply, kept out of torch.compile's graphs (it reads the SR counter
    on the host): a compiled model runs it eagerly between its compiled regions."""
    return EmulatedLinearFn.apply(x, weight, bias, counter, recipe, layer_index)
