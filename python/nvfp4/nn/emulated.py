"""The per-operand path of nvfp4.nn.Linear: any recipe the fused NVFP4 ops do not run
(an MXFP4 operand, double quantization).

Each operand is quantized as its QuantConfig says (nvfp4.quantize or nvfp4.quantize_mxfp4,
linear scale layout), decoded exactly and multiplied with FP32 accumulation:

    decoded = e2m1(code) * block_scale        exact in BF16 and FP32 (NVFP4: an E4M3 scale,
                                              MXFP4: a power of two within BF16's range)
    GEMM    = (A_dec · B_decᵀ) * alpha_A * alpha_B   alpha: NVFP4's 1 / S_enc, MXFP4's 1

On CUDA the product runs on the BF16 tensor cores with FP32 output (torch.mm with
out_dtype=float32); on the CPU in FP32 (the products are exact there too). Every product of
two decoded values is exact, so the result matches a float64 product of the decoded operands
to within FP32 accumulation, as the fused Hopper path does. MXFP4 values of magnitude
>= 2^128 decode to infinity (outside BF16's range).

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

from typing import Tuple

import torch
import torch.nn.functional as F

from .. import _C
from .._format import SCALE_LAYOUTS, global_decode_scale
from .._mx import MXFP4Tensor, decode_stored, mm_fp32, quantize_mxfp4
from .._ops import TOKEN_ALIGN
from .._quantize import quantize
from .._tensor import _stream
from .recipe import QuantConfig, Recipe, layer_seed

__all__ = ["EmulatedLinearFn", "emulated_linear", "check_shapes"]

_LINEAR = SCALE_LAYOUTS["linear"]
#: Operand order for the per-operand SR streams.
RECIPE_OPERANDS = ("x", "w", "dy", "wgrad_dy", "wgrad_x")


def check_shapes(r: Recipe, in_features: int, out_features: int) -> None:
    """Feature counts the recipe's MXFP4 operands need (32-element blocks along K)."""
    need = {"in_features": [], "out_features": []}
    if r.x.format == "mxfp4" or r.w.format == "mxfp4":
        need["in_features"].append("fprop (x, w)")       # fprop's K
    if r.dy.format == "mxfp4" or r.w.format == "mxfp4":
        need["out_features"].append("dgrad (dy, w)")     # dgrad's K
    for name, uses in need.items():
        v = in_features if name == "in_features" else out_features
        if uses and v % 32:
            raise ValueError(f"{name}: must be a multiple of 32 for the MXFP4 operands of {', '.join(uses)}, got {v}")


def _decode(q, columnwise: bool, dtype: torch.dtype) -> Tuple[torch.Tensor, torch.Tensor]:
    """One stored orientation of q, decoded without its per-tensor scale: (values [rows,
    width] as stored, padding included; alpha, a float32 [1] tensor)."""
    d = q.columnwise if columnwise else q.rowwise
    if isinstance(q, MXFP4Tensor):  # no per-tensor scale
        return decode_stored(d, _LINEAR, dtype), torch.ones((1,), dtype=torch.float32, device=d.data.device)
    # NVFP4: decoded with S_enc = 1 (amax 2688), the real 1 / S_enc as alpha
    out = torch.empty((d.data.shape[0], d.data.shape[1] * 2), dtype=dtype, device=d.data.device)
    one = torch.full((1,), 2688.0, dtype=torch.float32, device=d.data.device)
    _C.dequantize(d.data, d.scales.view(torch.uint8), one, _LINEAR, out, _stream(out.device))
    return out, global_decode_scale(d.amax)


def _quantize(t: torch.Tensor, c: QuantConfig, columnwise: bool, seed: int, offset: int, rht_signs):
    """t [rows, cols] quantized along cols (columnwise=False) or along rows (True)."""
    row, col = (not columnwise), columnwise
    if c.format == "mxfp4":
        return quantize_mxfp4(t, rounding=c.rounding, scale_rule=c.mx_rule, seed=seed, offset=offset, rowwise=row,
                              columnwise=col, scale_layout="linear")
    rht = ("columnwise" if columnwise else "rowwise") if c.rht else "none"
    return quantize(t, block=c.block, rounding=c.rounding, rht=rht, seed=seed, offset=offset, rowwise=row,
                    columnwise=col, scale_layout="linear", rht_signs=rht_signs)


def _operand(t, c: QuantConfig, columnwise: bool, seed: int, offset: int, rht_signs, dtype):
    """(decoded values as stored, alpha, the full dequantized tensor for double quantization)."""
    q = _quantize(t, c, columnwise, seed, offset, rht_signs)
    return (*_decode(q, columnwise, dtype), q)


def _mm(a: torch.Tensor, b: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """(a · bᵀ) * alpha in FP32; a, b hold decoded values (exact in BF16)."""
    return mm_fp32(a, b) * alpha


def _dequantized(q, columnwise: bool) -> torch.Tensor:
    """The full FP32 dequantization of one orientation, in the tensor's own shape (the
    source of a double quantization)."""
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
        fp4_dgrad = r.dgrad and need_dx
        fp4_wgrad = r.wgrad and need_dw
        uses_sr = any(getattr(r, f).rounding == "sr" for f in RECIPE_OPERANDS)
        offset = int(counter) if uses_sr else 0
        seeds = {f: layer_seed(r.seed, layer_index, 2 + i) for i, f in enumerate(RECIPE_OPERANDS)}
        signs = r.rht_signs
        w = weight.to(cdt)
        b = None if bias is None else bias.to(cdt)

        qx_full = qw_full = None
        if r.fprop:
            ax, alx, qx = _operand(x2, r.x, False, seeds["x"], offset, signs, ddt)
            aw, alw, qw = _operand(weight_c, r.w, False, seeds["w"], offset, signs, ddt)
            y = _mm(ax, aw, alx * alw)
            if b is not None:
                y = y + b.float()
            y = y.to(cdt)
            if r.wgrad_x.double_quant:
                qx_full = _dequantized(qx, False)
            if r.w.double_quant:
                qw_full = _dequantized(qw, False)
        else:
            y = F.linear(x2, w, b)

        wt = alwt = None
        if fp4_dgrad:  # W quantized along N: the columnwise orientation of W [n, k]
            src = qw_full if r.w.double_quant else weight_c
            wt, alwt, _ = _operand(src, r.w, True, seeds["w"], offset, signs, ddt)
        xt = alxt = None
        pad = (-m) % TOKEN_ALIGN if fp4_wgrad else 0
        if fp4_wgrad:
            src = qx_full if r.wgrad_x.double_quant else x2
            xt, alxt, _ = _operand(F.pad(src, (0, 0, 0, pad)) if pad else src, r.wgrad_x, True, seeds["wgrad_x"],
                                   offset, signs, ddt)
        saved_x = x2 if (need_dw and not fp4_wgrad) else None
        saved_w = weight if (need_dx and not fp4_dgrad) else None
        ctx.save_for_backward(saved_x, saved_w, xt, alxt, wt, alwt)
        ctx.counter = counter
        ctx.recipe = r
        ctx.meta = (tuple(x.shape), m, k, n, pad, fp4_dgrad, fp4_wgrad, need_dx, need_dw,
                    bias is not None and ctx.needs_input_grad[2], weight.dtype, None if bias is None else bias.dtype,
                    seeds, uses_sr, ddt)
        return y.reshape(*x.shape[:-1], n)

    @staticmethod
    def backward(ctx, dy):
        r = ctx.recipe
        (x_shape, m, k, n, pad, fp4_dgrad, fp4_wgrad, need_dx, need_dw, need_db, w_dtype, b_dtype, seeds, uses_sr,
         ddt) = ctx.meta
        saved_x, saved_w, xt, alxt, wt, alwt = ctx.saved_tensors
        cdt = dy.dtype
        dy2 = dy.reshape(-1, n).contiguous()
        offset = int(ctx.counter) if uses_sr else 0
        signs = r.rht_signs
        dx = dw = db = None
        dy_full = None
        if fp4_dgrad:
            ady, aldy, qdy = _operand(dy2, r.dy, False, seeds["dy"], offset, signs, ddt)
            dx = _mm(ady, wt, aldy * alwt)[:, :k].to(cdt)
            if r.wgrad_dy.double_quant:
                dy_full = _dequantized(qdy, False)
        if fp4_wgrad:
            if r.wgrad_dy.double_quant and dy_full is None:  # no dX wanted: dY's quantization for dgrad anyway
                dy_full = _dequantized(_quantize(dy2, r.dy, False, seeds["dy"], offset, signs), False)
            src = dy_full if r.wgrad_dy.double_quant else dy2
            if pad:
                src = F.pad(src, (0, 0, 0, pad))
            adyt, aldyt, _ = _operand(src, r.wgrad_dy, True, seeds["wgrad_dy"], offset, signs, ddt)
            dw = _mm(adyt, xt, aldyt * alxt).to(w_dtype)
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
