"""nvfp4.gemm: D = alpha * (A^ @ B^T) + beta * out (+ bias)."""
from __future__ import annotations

from typing import Optional

import torch

from . import _ops
from ._format import GEMM_OUT_DTYPES, SCALE_LAYOUTS, check_gemm_extras
from ._mx import MXFP4Tensor, gemm_mxfp4
from ._tensor import NVFP4Tensor, _OneBufferDirection, check_gemm_operands
from .backends import BACKENDS, check_backend

__all__ = ["gemm"]

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
    if (out is None and a.__class__ is NVFP4Tensor and b.__class__ is NVFP4Tensor and beta.__class__ is float
            and beta == 0.0 and out_dtype.__class__ is torch.dtype and out_dtype in GEMM_OUT_DTYPES
            and backend.__class__ is str and _ops.eager()):
        d = _eager(a, b, backend, out_dtype, bias)
        if d is not None:
            return d
    if isinstance(a, MXFP4Tensor) and isinstance(b, MXFP4Tensor):
        return gemm_mxfp4(a, b, backend=backend, out_dtype=out_dtype, bias=bias, out=out, beta=beta)
    out_dtype, beta, m, n, _, lead = check_gemm_operands(a, b, NVFP4Tensor, backend, out_dtype, beta,
                                                         " (two MXFP4Tensor operands are accepted too)")
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
    bias = check_gemm_extras(a.device, m, n, out, bias, beta,
                             (("a.data", a.data), ("a.scales", a.scales), ("a.amax", a.amax), ("b.data", b.data),
                              ("b.scales", b.scales), ("b.amax", b.amax)))
    if out is not None:
        d = out
    else:
        d = None if a.scale_layout == "swizzled" else torch.empty(lead + (n,), dtype=out_dtype, device=a.device)
    if out is None and a.scale_layout == "swizzled":
        # the common case through the torch op (nvfp4._ops): traceable, one dispatch
        d = _ops.gemm((a.data, a.scales, a.amax), (b.data, b.scales, b.amax), BACKENDS[backend], out_dtype, bias)
        return d.view(lead + (n,))
    d2 = d.view(m, n)
    c2 = d2 if (out is not None and beta != 0.0) else None
    _ops.gemm_into((a.data, a.scales.view(torch.uint8), a.amax), (b.data, b.scales.view(torch.uint8), b.amax),
                   SCALE_LAYOUTS[a.scale_layout], d2, c=c2, bias=bias, beta=beta, backend=BACKENDS[backend])
    return d


def _needs_grad(d) -> bool:
    # an orientation still in nvfp4.quantize's one buffer has no views anyone could mark
    if d.__class__ is _OneBufferDirection and d._lazy:
        return False
    return d.amax.requires_grad or d.scales.requires_grad


_BACKEND_OK: set = set()  # (backend, device) pairs check_backend accepted: support, once there, stays


def _eager(a: NVFP4Tensor, b: NVFP4Tensor, backend: str, out_dtype: torch.dtype, bias) -> Optional[torch.Tensor]:
    """The common call from eager code, or None for gemm's general road (which then raises
    whatever is wrong, in its order). Every check of that road holds here: the operands'
    rowwise buffers are the ones checked against their shapes (NVFP4Tensor._gemm_operand,
    proven by address and version counter), the options are valid, the operands agree on
    device, K and transform, and no tensor needs autograd (the op would attach its fallback)."""
    sa, sb = a._gemm_operand(), b._gemm_operand()
    if sa is None or sb is None:
        return None
    device = sa[8]
    if sb[8] != device or sa[7] != sb[7]:
        return None
    ra, rb = a.rowwise, b.rowwise
    if ra.rht != rb.rht or (ra.rht and a.rht_sign_mask != b.rht_sign_mask):
        return None
    if backend != "auto" and (backend, device) not in _BACKEND_OK:
        if backend not in BACKENDS:
            return None
        try:
            check_backend(backend, device)
        except (ValueError, RuntimeError):
            return None
        _BACKEND_OK.add((backend, device))
    m, n = sa[6], sb[6]
    if bias is not None:
        if bias.__class__ is not torch.Tensor:
            return None
        bias = check_gemm_extras(device, m, n, None, bias, 0.0, ())
    if _ops.grad_enabled() and (_needs_grad(ra) or _needs_grad(rb) or (bias is not None and bias.requires_grad)):
        return None
    d = _ops.gemm_addresses(sa[:3], sb[:3], m, n, sa[7] * 2, device, BACKENDS[backend], out_dtype, bias)
    shape = a.shape
    return d if a.transposed or len(shape) == 2 else d.view(shape[:-1] + (n,))
