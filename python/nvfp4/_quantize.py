"""nvfp4.quantize and the scale (un)swizzle helpers."""
from __future__ import annotations

from typing import Optional, Sequence, Union

import torch

from . import _C
from ._format import (BLOCKS, RHT_COLUMNWISE, RHT_ROWWISE, ROUNDINGS, SCALE_LAYOUTS, signs_to_mask,
                      default_rht_mask, stream_of)
from ._tensor import NVFP4Tensor, _Direction

__all__ = ["quantize", "swizzle_scales", "unswizzle_scales", "as_torch"]

_IN_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_RHT = {False: 0, None: 0, True: RHT_ROWWISE | RHT_COLUMNWISE, "none": 0, "rowwise": RHT_ROWWISE,
        "columnwise": RHT_COLUMNWISE, "both": RHT_ROWWISE | RHT_COLUMNWISE}


def as_torch(x, name: str = "x") -> torch.Tensor:
    """Accept a torch tensor or anything that speaks DLPack (NumPy, CuPy, JAX...)."""
    if isinstance(x, torch.Tensor):
        return x
    if hasattr(x, "__dlpack__"):
        try:
            return torch.from_dlpack(x)
        except Exception as e:  # pragma: no cover - depends on the producer
            raise TypeError(f"{name}: could not import through DLPack: {e}") from e
    raise TypeError(f"{name}: expected a torch tensor or a DLPack-capable array, got {type(x).__name__}")


def _check_choice(name, value, choices):
    if value not in choices:
        raise ValueError(f"{name}: must be one of {sorted(map(str, choices))}, got {value!r}")


def _alloc_direction(rows: int, cols: int, layout: str, device) -> tuple:
    sc = cols // 16
    data = torch.empty((rows, cols // 2), dtype=torch.uint8, device=device)
    if layout == "swizzled":
        scales = torch.empty(((rows + 127) // 128 * 128, (sc + 3) // 4 * 4), dtype=torch.uint8, device=device)
    else:
        scales = torch.empty((rows, sc), dtype=torch.uint8, device=device)
    amax = torch.empty((1,), dtype=torch.float32, device=device)
    return data, scales, amax


def quantize(x, block: str = "1d", rounding: str = "rtn", rht: Union[bool, str] = False,
             seed: Optional[int] = None, offset: int = 0, rowwise: bool = True, columnwise: bool = False,
             scale_layout: str = "swizzled", rht_signs: Optional[Sequence[int]] = None) -> NVFP4Tensor:
    """Quantize x (float32/float16/bfloat16, last dim a multiple of 16) to NVFP4.

    block: "1d" (1x16 blocks along the last dim) or "2d" (16x16 tiles, for weights).
    rounding: "rtn" (nearest-even) or "sr" (stochastic; Philox keyed by seed/offset).
    rht: Hadamard transform before quantizing: False, True (every output), "rowwise" or
        "columnwise" (the wgrad recipe). 1D only.
    rowwise / columnwise: which orientations to produce (both in one call).
    scale_layout: "swizzled" (128x4, what the GEMMs read) or "linear" ([rows, cols/16]).
    Runs on x's device; on CUDA, on the current stream with no host synchronization.
    """
    x = as_torch(x, "x")
    if x.dtype not in _IN_DTYPES:
        raise TypeError(f"x: dtype must be float32, float16 or bfloat16, got {x.dtype}")
    if x.dim() < 1:
        raise ValueError("x: must have at least one dimension")
    if x.shape[-1] % 16 != 0:
        raise ValueError(f"x: last dimension must be a multiple of 16, got {x.shape[-1]}")
    if not x.is_contiguous():
        raise ValueError("x: must be contiguous (call .contiguous() first)")
    if x.device.type not in ("cpu", "cuda"):
        raise ValueError(f"x: device must be cpu or cuda, got {x.device}")
    _check_choice("block", block, BLOCKS)
    _check_choice("rounding", rounding, ROUNDINGS)
    _check_choice("scale_layout", scale_layout, SCALE_LAYOUTS)
    if not isinstance(rht, (bool, str)) or rht not in _RHT:
        raise ValueError(f"rht: must be False, True, 'rowwise', 'columnwise' or 'both', got {rht!r}")
    rht_mask = _RHT[rht]
    if rht_mask and block == "2d":
        raise ValueError("rht: the Hadamard transform applies to 1d blocks only")
    if not (rowwise or columnwise):
        raise ValueError("rowwise/columnwise: at least one must be True")
    sign_mask = default_rht_mask() if rht_signs is None else signs_to_mask(rht_signs)
    if seed is None:
        seed = int(torch.randint(0, 2**62, (1,)).item()) if rounding == "sr" else 0
    if not (0 <= int(seed) < 2**64):
        raise ValueError("seed: must be in [0, 2**64)")
    if not (0 <= int(offset) < 2**64):
        raise ValueError("offset: must be in [0, 2**64)")

    cols = x.shape[-1]
    rows = x.numel() // cols if cols else 0
    x2 = x.reshape(rows, cols)
    row = col = None
    if rowwise:
        row = _alloc_direction(rows, cols, scale_layout, x.device)
    if columnwise:
        col = _alloc_direction(cols, (rows + 15) // 16 * 16, scale_layout, x.device)
    _C.quantize(x2, *(row or (None, None, None)), *(col or (None, None, None)), BLOCKS[block],
                ROUNDINGS[rounding], SCALE_LAYOUTS[scale_layout], rht_mask, sign_mask, int(seed), int(offset),
                stream_of(x.device))

    def direction(t, bit):
        if t is None:
            return None
        return _Direction(t[0], t[1].view(torch.float8_e4m3fn), t[2], bool(rht_mask & bit))

    return NVFP4Tensor(tuple(x.shape), x.dtype, block, rounding, scale_layout,
                       direction(row, RHT_ROWWISE), direction(col, RHT_COLUMNWISE), sign_mask)


def _bytes(t: torch.Tensor, name: str) -> torch.Tensor:
    t = as_torch(t, name)
    if t.dtype not in (torch.uint8, torch.float8_e4m3fn):
        raise TypeError(f"{name}: dtype must be float8_e4m3fn or uint8, got {t.dtype}")
    if t.dim() != 2:
        raise ValueError(f"{name}: must be 2D, got {t.dim()} dims")
    if not t.is_contiguous():
        raise ValueError(f"{name}: must be contiguous")
    return t.view(torch.uint8)


def swizzle_scales(scales) -> torch.Tensor:
    """Linear [R, C] E4M3 scales -> the 128x4 swizzled layout, shape [roundup(R,128), roundup(C,4)]."""
    src = _bytes(scales, "scales")
    r, c = src.shape
    dst = torch.empty(((r + 127) // 128 * 128, (c + 3) // 4 * 4), dtype=torch.uint8, device=src.device)
    _C.swizzle(src, dst, True, stream_of(src.device))
    return dst.view(torch.float8_e4m3fn) if as_torch(scales).dtype == torch.float8_e4m3fn else dst


def unswizzle_scales(scales, rows: int, cols: int) -> torch.Tensor:
    """Swizzled scales -> linear [rows, cols] (rows/cols: the unpadded scale matrix)."""
    src = _bytes(scales, "scales")
    if rows < 0 or cols < 0:
        raise ValueError("rows/cols: must be non-negative")
    dst = torch.empty((rows, cols), dtype=torch.uint8, device=src.device)
    _C.swizzle(src, dst, False, stream_of(src.device))
    return dst.view(torch.float8_e4m3fn) if as_torch(scales).dtype == torch.float8_e4m3fn else dst
