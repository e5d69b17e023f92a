"""nvfp4.gemm: D = alpha * (A^ @ B^T) + beta * out (+ bias)."""
from __future__ import annotations

from typing import Optional

import torch

from . import _C
from ._format import SCALE_LAYOUTS, stream_of
from ._tensor import NVFP4Tensor
from .backends import BACKENDS, check_backend

__all__ = ["gemm"]

_OUT = (torch.bfloat16, torch.float16, torch.float32)
_WS_CACHE: dict = {}


def clear_workspace_cache() -> None:
    """Forget the cached workspace sizes. Only needed after changing the NVFP4_SM90_*
    tuning environment variables inside a running process (benchmarks do), since they
    can change which kernel, and so which workspace, a problem gets."""
    _WS_CACHE.clear()


def gemm(a: NVFP4Tensor, b: NVFP4Tensor, *, backend: str = "auto", out_dtype: torch.dtype = torch.bfloat16,
         bias: Optional[torch.Tensor] = None, out: Optional[torch.Tensor] = None, beta: float = 0.0) -> torch.Tensor:
    """FP4 GEMM of two NVFP4 tensors quantized along K (their rowwise data).

    a represents [..., K] (leading dims flattened into M), b represents [N, K]; the result
    is [..., N] = alpha * (Â @ B̂ᵀ) + beta * out + bias with alpha = S_dec(a) * S_dec(b),
    read on the device. Use ``x.T`` to multiply by the columnwise (transposed) quantization.
    backend: "auto" (fastest for the device), "cutlass", "cudnn", or "reference" (CPU).
    """
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, NVFP4Tensor):
            raise TypeError(f"{name}: expected an NVFP4Tensor, got {type(t).__name__}")
        if t.rowwise is None:
            raise ValueError(f"{name}: has no rowwise (K-major) data; quantize with rowwise=True or pass .T")
    if a.scale_layout != b.scale_layout:
        raise ValueError(f"b: scale_layout {b.scale_layout!r} differs from a's {a.scale_layout!r}")
    if a.device != b.device:
        raise ValueError(f"b: on {b.device}, but a is on {a.device}")
    check_backend(backend, a.device)
    if out_dtype not in _OUT:
        raise TypeError(f"out_dtype: must be bfloat16, float16 or float32, got {out_dtype}")
    ka, kb = a.data.shape[1] * 2, b.data.shape[1] * 2
    if ka != kb:
        raise ValueError(f"b: K mismatch: a has K={ka}, b has K={kb}")
    m, n = a.data.shape[0], b.data.shape[0]
    lead = tuple(a.shape[:-1]) if not a.transposed else (m,)
    if out is not None:
        if not isinstance(out, torch.Tensor):
            raise TypeError("out: must be a torch.Tensor")
        if out.dtype not in _OUT:
            raise TypeError(f"out: dtype must be bfloat16, float16 or float32, got {out.dtype}")
        if out.device != a.device:
            raise ValueError(f"out: on {out.device}, but a is on {a.device}")
        if out.numel() != m * n or out.shape[-1] != n:
            raise ValueError(f"out: expected {m * n} elements shaped [..., {n}], got {tuple(out.shape)}")
        if not out.is_contiguous():
            raise ValueError("out: must be contiguous")
        d = out
    else:
        if beta != 0.0:
            raise ValueError("beta: nonzero beta needs out= (it is read as C)")
        d = torch.empty(lead + (n,), dtype=out_dtype, device=a.device)
    if bias is not None:
        if not isinstance(bias, torch.Tensor):
            raise TypeError("bias: must be a torch.Tensor")
        if bias.shape != (n,):
            raise ValueError(f"bias: expected shape ({n},), got {tuple(bias.shape)}")
        if bias.device != a.device:
            raise ValueError(f"bias: on {bias.device}, but a is on {a.device}")
        if bias.dtype not in _OUT:
            raise TypeError(f"bias: dtype must be bfloat16, float16 or float32, got {bias.dtype}")
        bias = bias.contiguous()
    d2 = d.view(m, n)
    c2 = d2 if (out is not None and beta != 0.0) else None
    args = (a.data, a.scales.view(torch.uint8), a.amax, b.data, b.scales.view(torch.uint8), b.amax,
            SCALE_LAYOUTS[a.scale_layout], c2, bias, float(beta), d2, BACKENDS[backend])
    # The workspace size depends only on the problem's shape, dtypes, layout, backend and
    # device; asking the library once per problem halves the per-call binding overhead
    # that dominates small GEMMs.
    key = (m, n, ka, a.scale_layout, backend, d.dtype, c2 is not None, None if bias is None else bias.dtype,
           a.device)
    ws_bytes = _WS_CACHE.get(key)
    if ws_bytes is None:
        ws_bytes = _C.gemm_workspace_size(*args)
        if len(_WS_CACHE) > 4096:
            _WS_CACHE.clear()
        _WS_CACHE[key] = ws_bytes
    ws = torch.empty((ws_bytes,), dtype=torch.uint8, device=a.device) if ws_bytes else None
    _C.gemm(*args, ws, stream_of(a.device))
    return d
