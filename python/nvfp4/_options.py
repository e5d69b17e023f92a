"""nvfp4.quantize_options: quantization with the recipe options of 0.3 (docs/design.md §1.6).

    four_over_six   "mae" | "mse": 4over6 block scale selection (TransformerEngine's nvfp4_4over6)
    e4m3_bound      448 | 256: the E4M3 value the amax maps to (256 with 4over6 only)
    amax            "tensor" | "rows" (one amax per row of each output: [rows] rowwise, [cols]
                    columnwise; TransformerEngine's row-scaled NVFP4) | a float32 [1]
                    tensor on x's device (a given amax, e.g. percentile_amax(x, q))
    rounding        "rtn" | "sr" | "eden" (MS-EDEN: needs the RHT on every output)

The result is an NVFP4Tensor whose amax is what its decode scale derives from
(1 / S_enc(amax), the contract's formula): the given amax, fl(1.75 amax) for the bound 256,
MS-EDEN's scale; with amax="rows" the amax has one entry per row and `dequantize_options`
decodes it (the C API's dequantize and GEMMs take one amax per tensor and refuse it).
"""
from __future__ import annotations

import math
from typing import Optional, Sequence, Union

import torch

from . import _ops
from ._format import (BLOCKS, RHT_COLUMNWISE, RHT_ROWWISE, SCALE_LAYOUTS, check_bool, check_choice, check_int,
                      default_rht_mask, global_decode_scale, signs_to_mask)
from ._quantize import as_torch
from ._tensor import NVFP4Tensor, _Direction

__all__ = ["quantize_options", "dequantize_options", "percentile_amax", "FOUR_OVER_SIX", "OPTION_ROUNDINGS"]

#: rounding names of quantize_options and their C values
OPTION_ROUNDINGS = {"rtn": 0, "sr": 1, "eden": 2}
#: four_over_six names and their C values (nvfp4_scale_select_t)
FOUR_OVER_SIX = {None: 0, "mae": 1, "mse": 2}
_AMAX_MODES = {"tensor": 0, "rows": 1}
_RHT_NAMES = {"none": 0, "rowwise": RHT_ROWWISE, "columnwise": RHT_COLUMNWISE, "both": RHT_ROWWISE | RHT_COLUMNWISE}
_IN_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def percentile_amax(x: torch.Tensor, q: float) -> torch.Tensor:
    """The q-quantile of |x| as a float32 [1] tensor on x's device, for quantize_options(amax=...).

    Exactly: with n the element count and k = min(n, max(1, ceil(q * n))) (q * n a Python
    double product), the k-th smallest |x| (an order statistic: one value, whatever the
    device or the algorithm that finds it). NaN if x holds a NaN (the contract: a NaN is never
    hidden); 0 for an empty x. Elements above it saturate to +-amax when quantized with it.
    """
    if isinstance(q, bool) or not isinstance(q, (int, float)) or not 0.0 < float(q) <= 1.0:
        raise ValueError(f"q: must be a number in (0, 1], got {q!r}")
    if not isinstance(x, torch.Tensor) or x.dtype not in _IN_DTYPES:
        raise TypeError(f"x: must be a float32/float16/bfloat16 torch tensor, got {type(x).__name__}")
    a = x.detach().reshape(-1).float().abs()
    n = a.numel()
    if n == 0:
        return torch.zeros(1, dtype=torch.float32, device=x.device)
    k = min(n, max(1, math.ceil(float(q) * n)))
    v = a.kthvalue(k).values if k < n else a.max()
    v = torch.where(torch.isnan(a).any(), torch.full_like(v, float("nan")), v)
    return v.reshape(1).to(torch.float32)


def _rht_mask(rht) -> int:
    if isinstance(rht, bool):
        return RHT_ROWWISE | RHT_COLUMNWISE if rht else 0
    if isinstance(rht, str) and rht in _RHT_NAMES:
        return _RHT_NAMES[rht]
    raise ValueError(f"rht: must be a bool or one of {sorted(_RHT_NAMES)}, got {rht!r}")


def quantize_options(x, block: str = "1d", rounding: str = "rtn", rht: Union[bool, str] = False,
                     seed: int = 0, offset: int = 0, rowwise: bool = True, columnwise: bool = False,
                     scale_layout: str = "swizzled", rht_signs: Optional[Sequence[int]] = None,
                     four_over_six: Optional[str] = None, e4m3_bound: int = 448,
                     amax: Union[str, torch.Tensor] = "tensor") -> NVFP4Tensor:
    """nvfp4.quantize with the recipe options (see the module docstring); the other arguments
    are nvfp4.quantize's. Errors name the parameter."""
    check_choice("block", block, BLOCKS)
    check_choice("rounding", rounding, OPTION_ROUNDINGS)
    check_choice("scale_layout", scale_layout, SCALE_LAYOUTS)
    if four_over_six not in FOUR_OVER_SIX:
        raise ValueError(f"four_over_six: must be None, 'mae' or 'mse', got {four_over_six!r}")
    if isinstance(e4m3_bound, bool) or e4m3_bound not in (448, 256):
        raise ValueError(f"e4m3_bound: must be 448 or 256, got {e4m3_bound!r}")
    rht_mask = _rht_mask(rht)
    rowwise = check_bool("rowwise", rowwise)
    columnwise = check_bool("columnwise", columnwise)
    if not (rowwise or columnwise):
        raise ValueError("rowwise/columnwise: at least one must be True")
    sign_mask = default_rht_mask() if rht_signs is None else signs_to_mask(rht_signs, "rht_signs")
    seed = check_int("seed", seed, 0, 2**64)
    offset = check_int("offset", offset, 0, 2**64)
    given = None
    if isinstance(amax, torch.Tensor):
        if amax.dtype != torch.float32 or amax.shape != (1,):
            raise ValueError(f"amax: a given amax must be a float32 tensor of shape [1], got {amax.dtype} "
                             f"{tuple(amax.shape)}")
        given, amax_mode = amax.contiguous(), 2
    elif isinstance(amax, str) and amax in _AMAX_MODES:
        amax_mode = _AMAX_MODES[amax]
    else:
        raise ValueError(f"amax: must be 'tensor', 'rows' or a float32 [1] tensor, got {amax!r}")

    x = as_torch(x, "x")
    if x.dtype not in _IN_DTYPES:
        raise TypeError(f"x: dtype must be float32, float16 or bfloat16, got {x.dtype}")
    if x.dim() < 1 or x.shape[-1] % 16:
        raise ValueError(f"x: needs at least one dimension and a last dimension that is a multiple of 16, got "
                         f"{tuple(x.shape)}")
    if not x.is_contiguous():
        raise ValueError("x: must be contiguous (call .contiguous() first)")
    if given is not None and given.device != x.device:
        raise ValueError(f"amax: on {given.device}, x on {x.device}")

    cols = x.shape[-1]
    rows = math.prod(x.shape[:-1])
    dev = x.device

    def alloc(r, c, n_amax):
        data = torch.empty((r, c // 2), dtype=torch.uint8, device=dev)
        if scale_layout == "swizzled":
            scales = torch.empty(((r + 127) // 128 * 128, (c // 16 + 3) // 4 * 4), dtype=torch.uint8, device=dev)
        else:
            scales = torch.empty((r, c // 16), dtype=torch.uint8, device=dev)
        return data, scales, torch.empty((n_amax,), dtype=torch.float32, device=dev)

    row = alloc(rows, cols, rows if amax_mode == 1 else 1) if rowwise else None
    col = alloc(cols, (rows + 15) // 16 * 16, cols if amax_mode == 1 else 1) if columnwise else None
    _ops.quantize_options_into(x.reshape(rows, cols), row, col, BLOCKS[block], OPTION_ROUNDINGS[rounding],
                               SCALE_LAYOUTS[scale_layout], rht_mask, sign_mask, seed, offset,
                               FOUR_OVER_SIX[four_over_six], e4m3_bound, amax_mode, given)

    def direction(t, bit):
        if t is None:
            return None
        return _Direction(t[0], t[1].view(torch.float8_e4m3fn), t[2], bool(rht_mask & bit))

    return NVFP4Tensor(tuple(x.shape), x.dtype, block, "sr" if rounding == "sr" else "rtn", scale_layout,
                       direction(row, RHT_ROWWISE), direction(col, RHT_COLUMNWISE), sign_mask)


def dequantize_options(q: NVFP4Tensor, dtype: torch.dtype = torch.float32, columnwise: bool = False) -> torch.Tensor:
    """Decoded values of one orientation [rows, cols] (in the Hadamard domain where the RHT
    was applied), with one decode scale per row where the amax has one entry per row:
    (e2m1 * s_b) * S_dec(amax[row]), the contract's single FP32 rounding."""
    d = q.columnwise if columnwise else q.rowwise
    if d is None:
        raise ValueError(f"columnwise: this tensor has no {'columnwise' if columnwise else 'rowwise'} data")
    rows, cols = d.data.shape[0], d.data.shape[1] * 2
    if d.amax.numel() not in (1, rows):
        raise ValueError(f"q: amax has {d.amax.numel()} entries for {rows} rows")
    unscaled = torch.empty((rows, cols), dtype=torch.float32, device=d.data.device)
    one = torch.full((1,), 2688.0, dtype=torch.float32, device=d.data.device)  # S_dec = 1
    _ops.dequantize_into(d.data, d.scales.view(torch.uint8), one, SCALE_LAYOUTS[q.scale_layout], unscaled)
    s_dec = global_decode_scale(d.amax).reshape(-1, 1)
    return (unscaled * s_dec).to(dtype)
