"""nvfp4.gemm: D = alpha * (A^ @ B^T) + beta * out (+ bias)."""
from __future__ import annotations

from typing import Optional

import torch

from . import _ops
from ._format import SCALE_LAYOUTS, check_choice, check_dtype, check_real, overlaps
from ._mx import MXFP4Tensor, gemm_mxfp4
from ._tensor import NVFP4Tensor
from .backends import BACKENDS, check_backend

__all__ = ["gemm"]

_OUT = (torch.bfloat16, torch.float16, torch.float32)

#: Forget the cached GEMM workspace sizes (one cache for every GEMM path: nvfp4._ops).
clear_workspace_cache = _ops.clear_workspace_cache


def gemm(a: NVFP4Tensor, b: NVFP4Tensor, *, backend: str = "auto", out_dtype: torch.dtype = torch.bfloat16,
         bias: Optional[torch.Tensor] = None, out: Optional[torch.Tensor] = None, beta: float = 0.0) -> torch.Tensor:
    """FP4 GEMM of two NVFP4 tensors quantized along K (their rowwise data). Two
    MXFP4Tensor operands go to nvfp4.gemm_mxfp4 (same options).

    a represents [..., K] (leading dims flattened into M), b represents [N, K]; the result
    is [..., N] = alpha * (Â @ B̂ᵀ) + beta * out + bias with alpha = S_dec(a) * S_dec(b),
    read on the device. Use ``x.T`` to multiply by the columnwise (transposed) quantization.
    backend: "auto" (fastest for the device), "cutlass", "cudnn", or "reference" (CPU).
    out_dtype: bfloat16, float16 or float32 (ignored when out= is given: out's dtype is used).
    bias: optional [N] tensor; out: optional contiguous result tensor ([..., N], M*N elements),
    read as C when beta != 0. The operands must carry the same Hadamard transform along K
    (both without, or both with the same signs), or the product would be meaningless.
    """
    if isinstance(a, MXFP4Tensor) and isinstance(b, MXFP4Tensor):
        return gemm_mxfp4(a, b, backend=backend, out_dtype=out_dtype, bias=bias, out=out, beta=beta)
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, NVFP4Tensor):
            raise TypeError(f"{name}: expected an NVFP4Tensor, got {type(t).__name__} (two MXFP4Tensor operands are "
                            "accepted too)")
        if t.rowwise is None:
            raise ValueError(f"{name}: has no rowwise (K-major) data; quantize with rowwise=True or pass .T")
    check_choice("backend", backend, BACKENDS)
    out_dtype = check_dtype("out_dtype", out_dtype, _OUT)
    beta = check_real("beta", beta)
    if bias is not None and not isinstance(bias, torch.Tensor):
        raise TypeError(f"bias: must be a torch.Tensor or None, got {type(bias).__name__}")
    if out is not None and not isinstance(out, torch.Tensor):
        raise TypeError(f"out: must be a torch.Tensor or None, got {type(out).__name__}")
    if a.scale_layout != b.scale_layout:
        raise ValueError(f"b: scale_layout {b.scale_layout!r} differs from a's {a.scale_layout!r}")
    if a.device != b.device:
        raise ValueError(f"b: on {b.device}, but a is on {a.device}")
    # The operands' K-axis transforms must agree, or the product is of two different
    # bases: the Hadamard transform cancels only when both sides carry it with the same
    # signs (H·diag(s) applied to both K-vectors leaves their dot product unchanged).
    ra, rb = a.rowwise.rht, b.rowwise.rht
    if ra != rb:
        raise ValueError(f"b: the Hadamard transform was applied along K to {'a' if ra else 'b'} only; "
                         "quantize both operands with the same rht setting for this direction")
    if ra and a.rht_sign_mask != b.rht_sign_mask:
        raise ValueError(f"b: RHT sign mask {b.rht_sign_mask:#06x} differs from a's {a.rht_sign_mask:#06x}; "
                         "both operands need the same rht_signs")
    check_backend(backend, a.device)
    ka, kb = a.data.shape[1] * 2, b.data.shape[1] * 2
    if ka != kb:
        raise ValueError(f"b: K mismatch: a has K={ka}, b has K={kb}")
    m, n = a.data.shape[0], b.data.shape[0]
    lead = tuple(a.shape[:-1]) if not a.transposed else (m,)
    if out is not None:
        if out.dtype not in _OUT:
            raise TypeError(f"out: dtype must be bfloat16, float16 or float32, got {out.dtype}")
        if out.device != a.device:
            raise ValueError(f"out: on {out.device}, but a is on {a.device}")
        if out.numel() != m * n or out.shape[-1] != n:
            raise ValueError(f"out: expected {m * n} elements shaped [..., {n}], got {tuple(out.shape)}")
        if not out.is_contiguous():
            raise ValueError("out: must be contiguous")
        for name, t in (("a.data", a.data), ("a.scales", a.scales), ("a.amax", a.amax), ("b.data", b.data),
                        ("b.scales", b.scales), ("b.amax", b.amax), ("bias", bias)):
            if t is not None and overlaps(out, t):
                raise ValueError(f"out: shares memory with {name}; the result would overwrite an input")
        d = out
    else:
        if beta != 0.0:
            raise ValueError("beta: nonzero beta needs out= (it is read as C)")
        d = None if a.scale_layout == "swizzled" else torch.empty(lead + (n,), dtype=out_dtype, device=a.device)
    if bias is not None:
        if bias.shape != (n,):
            raise ValueError(f"bias: expected shape ({n},), got {tuple(bias.shape)}")
        if bias.device != a.device:
            raise ValueError(f"bias: on {bias.device}, but a is on {a.device}")
        if bias.dtype not in _OUT:
            raise TypeError(f"bias: dtype must be bfloat16, float16 or float32, got {bias.dtype}")
        bias = bias.contiguous()
    if out is None and a.scale_layout == "swizzled":
        # the common case through the torch op (nvfp4._ops): traceable, one dispatch
        d = _ops.gemm((a.data, a.scales, a.amax), (b.data, b.scales, b.amax), BACKENDS[backend], out_dtype, bias)
        return d.view(lead + (n,))
    d2 = d.view(m, n)
    c2 = d2 if (out is not None and beta != 0.0) else None
    _ops.gemm_into((a.data, a.scales.view(torch.uint8), a.amax), (b.data, b.scales.view(torch.uint8), b.amax),
                   SCALE_LAYOUTS[a.scale_layout], d2, c=c2, bias=bias, beta=beta, backend=BACKENDS[backend])
    return d
