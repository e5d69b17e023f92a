"""nvfp4.quantize and the scale (un)swizzle helpers."""
from __future__ import annotations

import math
import warnings
from typing import Optional, Sequence, Union

import numpy as np
import torch

from . import _ops
from ._format import (BLOCKS, RHT_COLUMNWISE, RHT_ROWWISE, ROUNDINGS, SCALE_LAYOUTS, check_bool, check_choice,
                      check_int, signs_to_mask, swizzled_shape)
from ._tensor import NVFP4Tensor, _Direction, _one_buffer_direction

__all__ = ["quantize", "swizzle_scales", "unswizzle_scales", "as_torch"]

_IN_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_E4M3 = torch.float8_e4m3fn
_RHT_NAMES = {"none": 0, "rowwise": RHT_ROWWISE, "columnwise": RHT_COLUMNWISE, "both": RHT_ROWWISE | RHT_COLUMNWISE}


def _from_numpy(x: np.ndarray, name: str) -> torch.Tensor:
    # torch.from_numpy shares memory; it cannot represent negative or non-element strides,
    # another byte order or a misaligned buffer, so those arrays are copied first
    # (torch.from_dlpack would abort the process on a negative stride).
    if x.dtype.hasobject or x.dtype.kind not in "biufc":
        raise TypeError(f"{name}: unsupported NumPy dtype {x.dtype}")
    if not (x.flags.c_contiguous and x.flags.aligned and x.dtype.isnative):
        x = np.ascontiguousarray(x, dtype=x.dtype.newbyteorder("="))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # read-only arrays: we only read them
        try:
            return torch.from_numpy(x)
        except (TypeError, ValueError) as e:
            raise TypeError(f"{name}: cannot convert this NumPy array ({x.dtype}, shape {x.shape}): {e}") from None


def as_torch(x, name: str = "x") -> torch.Tensor:
    """A torch tensor for x: a torch tensor as is; a NumPy array (or anything with
    __array_interface__) through torch.from_numpy, copied to a C-contiguous array first
    when its strides, byte order or alignment need it; other DLPack producers (CuPy,
    JAX...) through torch.from_dlpack."""
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, np.ndarray):
        return _from_numpy(x, name)
    if hasattr(x, "__array_interface__"):
        return _from_numpy(np.asarray(x), name)
    if hasattr(x, "__dlpack__"):
        cai = getattr(x, "__cuda_array_interface__", None)
        if isinstance(cai, dict) and cai.get("strides"):
            itemsize = np.dtype(cai["typestr"]).itemsize
            if any(s < 0 or s % itemsize for s in cai["strides"]):
                if not hasattr(x, "copy"):
                    raise ValueError(f"{name}: negative or non-element strides; pass a contiguous array")
                x = x.copy()
        try:
            return torch.from_dlpack(x)
        except Exception as e:  # pragma: no cover - depends on the producer
            raise TypeError(f"{name}: could not import through DLPack: {e}") from e
    raise TypeError(f"{name}: expected a torch tensor, a NumPy array or a DLPack-capable array, "
                    f"got {type(x).__name__}")


def checked_input(x, block: int, what: str = ""):
    """(x as a torch tensor, rows, cols) for a quantizer with blocks of `block` along the last
    dim: float32/float16/bfloat16, on cpu or cuda, at least 1D, contiguous; a misaligned view
    is copied. `what` follows the block rule in its error (e.g. " (MXFP4 blocks)")."""
    x = as_torch(x, "x")
    if x.dtype not in _IN_DTYPES:
        raise TypeError(f"x: dtype must be float32, float16 or bfloat16, got {x.dtype}")
    if not (x.is_cuda or x.is_cpu):
        raise ValueError(f"x: device must be cpu or cuda, got {x.device}")
    shape = x.shape
    if not shape:
        raise ValueError("x: must have at least one dimension")
    if shape[-1] % block != 0:
        raise ValueError(f"x: last dimension must be a multiple of {block}{what}, got {shape[-1]}")
    if not x.is_contiguous():
        raise ValueError("x: must be contiguous (call .contiguous() first)")
    if x.data_ptr() % x.element_size() and x.numel():
        x = x.clone()  # a misaligned view (possible through as_strided on a byte buffer)
    return x, math.prod(shape[:-1]), shape[-1]


def _rht_mask(rht) -> int:
    if isinstance(rht, (bool, np.bool_)):
        return (RHT_ROWWISE | RHT_COLUMNWISE) if rht else 0
    if rht is None:
        return 0
    if not isinstance(rht, str):
        raise TypeError(f"rht: must be a bool or one of 'none', 'rowwise', 'columnwise', 'both'; "
                        f"got {type(rht).__name__} {rht!r}")
    if rht not in _RHT_NAMES:
        raise ValueError(f"rht: must be False, True, 'none', 'rowwise', 'columnwise' or 'both', got {rht!r}")
    return _RHT_NAMES[rht]


def _alloc_direction(rows: int, cols: int, layout: str, device) -> tuple:
    sc = cols // 16
    data = torch.empty((rows, cols // 2), dtype=torch.uint8, device=device)
    if layout == "swizzled":
        scales = torch.empty(swizzled_shape(rows, sc), dtype=torch.uint8, device=device)
    else:
        scales = torch.empty((rows, sc), dtype=torch.uint8, device=device)
    amax = torch.empty((1,), dtype=torch.float32, device=device)
    return data, scales, amax


def _signed64(v: int) -> int:
    """A uint64 as the int64 with the same bits (torch op schemas carry int64)."""
    return v - (1 << 64) if v >= (1 << 63) else v


def quantize(x, block: str = "1d", rounding: str = "rtn", rht: Union[bool, str] = False,
             seed: Optional[int] = None, offset: int = 0, rowwise: bool = True, columnwise: bool = False,
             scale_layout: str = "swizzled", rht_signs: Optional[Sequence[int]] = None) -> NVFP4Tensor:
    """Quantize x (float32/float16/bfloat16, last dim a multiple of 16) to NVFP4.

    x: a torch tensor (contiguous, on the CPU or a CUDA device) or a NumPy array (copied
        when it is not C-contiguous) or another DLPack-capable array.
    block: "1d" (1x16 blocks along the last dim) or "2d" (16x16 tiles, for weights).
    rounding: "rtn" (nearest-even) or "sr" (stochastic; Philox keyed by seed/offset).
    rht: Hadamard transform before quantizing: False, True (every output), "rowwise" or
        "columnwise" (the wgrad recipe), "both" or "none". 1D only.
    seed, offset: ints in [0, 2**64); seed=None draws a random seed for rounding="sr".
    rowwise / columnwise: bools, which orientations to produce (both in one call).
    scale_layout: "swizzled" (128x4, what the GEMMs read) or "linear" ([rows, cols/16]).
    rht_signs: 16 ints, each +1 or -1 (default: TransformerEngine's wgrad signs).
    Runs on x's device; on CUDA, on the current stream with no host synchronization.
    Every argument is checked (type first, then value); errors name the parameter.
    From eager code the swizzled outputs share one allocation (with, on CUDA, 8 KiB of
    workspace); `.data`, `.scales` and `.amax` are views into it, made when first read
    (torch.save of one view alone writes the whole buffer: save the NVFP4Tensor, or a
    .clone()). Copies, pickles and torch.save of the NVFP4Tensor hold compact tensors.
    """
    # Types and values of the options first: they cost nothing and do not depend on x.
    check_choice("block", block, BLOCKS)
    check_choice("rounding", rounding, ROUNDINGS)
    check_choice("scale_layout", scale_layout, SCALE_LAYOUTS)
    rht_mask = _rht_mask(rht)
    if rht_mask and block == "2d":
        raise ValueError("rht: the Hadamard transform applies to 1d blocks only")
    rowwise = check_bool("rowwise", rowwise)
    columnwise = check_bool("columnwise", columnwise)
    if not (rowwise or columnwise):
        raise ValueError("rowwise/columnwise: at least one must be True")
    sign_mask = _ops.DEFAULT_RHT_SIGN_MASK if rht_signs is None else signs_to_mask(rht_signs, "rht_signs")
    if seed is not None:
        seed = check_int("seed", seed, 0, 2**64)
    offset = check_int("offset", offset, 0, 2**64)

    x, rows, cols = checked_input(x, 16)
    if seed is None:
        seed = int(torch.randint(0, 2**62, (1,)).item()) if rounding == "sr" else 0
    x2 = x if len(x.shape) == 2 else x.reshape(rows, cols)
    row = col = None
    if scale_layout == "swizzled":
        # The layout the GEMMs read goes through the torch op (nvfp4._ops), so that
        # torch.compile can trace a call of this function; eager calls run its
        # implementation without the dispatcher's round trip (nvfp4._ops.eager), into one
        # allocation for every output (their views made when first read).
        row, col, buf = _ops.quantize_checked(x2, BLOCKS[block], ROUNDINGS[rounding], rht_mask, sign_mask,
                                              _signed64(seed), _signed64(offset), rowwise, columnwise)
        if buf is not None:
            return NVFP4Tensor(tuple(x.shape), x.dtype, block, rounding, scale_layout,
                               None if row is None else _one_buffer_direction(buf, row, bool(rht_mask & RHT_ROWWISE)),
                               None if col is None else _one_buffer_direction(buf, col,
                                                                              bool(rht_mask & RHT_COLUMNWISE)),
                               sign_mask, _checked=True)
    else:
        if rowwise:
            row = _alloc_direction(rows, cols, scale_layout, x.device)
        if columnwise:
            col = _alloc_direction(cols, (rows + 15) // 16 * 16, scale_layout, x.device)
        _ops.quantize_into(x2, row, col, BLOCKS[block], ROUNDINGS[rounding], SCALE_LAYOUTS[scale_layout], rht_mask,
                           sign_mask, seed, offset)

    def direction(t, bit):
        if t is None:
            return None
        scales = t[1] if t[1].dtype is _E4M3 else t[1].view(_E4M3)  # the op's are E4M3 already
        return _Direction(t[0], scales, t[2], bool(rht_mask & bit))

    return NVFP4Tensor(tuple(x.shape), x.dtype, block, rounding, scale_layout,
                       direction(row, RHT_ROWWISE), direction(col, RHT_COLUMNWISE), sign_mask, _checked=True)


def _bytes(t, name: str) -> torch.Tensor:
    t = as_torch(t, name)
    if t.dtype not in (torch.uint8, torch.float8_e4m3fn):
        raise TypeError(f"{name}: dtype must be float8_e4m3fn or uint8, got {t.dtype}")
    if t.device.type not in ("cpu", "cuda"):
        raise ValueError(f"{name}: device must be cpu or cuda, got {t.device}")
    if t.dim() != 2:
        raise ValueError(f"{name}: must be 2D, got {t.dim()} dims")
    if not t.is_contiguous():
        raise ValueError(f"{name}: must be contiguous")
    return t.view(torch.uint8)


def swizzle_scales(scales) -> torch.Tensor:
    """Linear [R, C] E4M3 scales -> the 128x4 swizzled layout, shape [roundup(R,128), roundup(C,4)]."""
    src = _bytes(scales, "scales")
    r, c = src.shape
    dst = torch.empty(swizzled_shape(r, c), dtype=torch.uint8, device=src.device)
    _ops.swizzle_into(src, dst, True)
    return dst.view(torch.float8_e4m3fn) if as_torch(scales).dtype == torch.float8_e4m3fn else dst


def unswizzle_scales(scales, rows: int, cols: int) -> torch.Tensor:
    """Swizzled scales -> linear [rows, cols] (rows/cols: the unpadded scale matrix)."""
    rows = check_int("rows", rows, 0, 2**62)
    cols = check_int("cols", cols, 0, 2**62)
    src = _bytes(scales, "scales")
    want = swizzled_shape(rows, cols)
    if tuple(src.shape) != want:
        raise ValueError(f"scales: a swizzled [{rows}, {cols}] scale matrix has shape {list(want)}, "
                         f"got {list(src.shape)}")
    dst = torch.empty((rows, cols), dtype=torch.uint8, device=src.device)
    _ops.swizzle_into(src, dst, False)
    return dst.view(torch.float8_e4m3fn) if as_torch(scales).dtype == torch.float8_e4m3fn else dst
