"""Small format helpers shared by the Python modules (the numerics live in C++), and the
argument checks of the public functions: each names its parameter, checks the type
before the value, and never coerces (no int() of 1.5, no truthiness of 'no')."""
from __future__ import annotations

import operator

import numpy as np
import torch

BLOCKS = {"1d": 0, "2d": 1}
ROUNDINGS = {"rtn": 0, "sr": 1}
SCALE_LAYOUTS = {"linear": 0, "swizzled": 1}
RHT_ROWWISE, RHT_COLUMNWISE = 1, 2

#: TransformerEngine's default wgrad sign vector.
DEFAULT_RHT_SIGNS = (1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1)


def _what(value) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def check_bool(name: str, value) -> bool:
    """A bool (Python or NumPy); anything else is a TypeError, even when truthy."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(f"{name}: must be a bool, got {_what(value)}")


def check_int(name: str, value, lo=None, hi=None) -> int:
    """An integer (anything with __index__ except bool), optionally in [lo, hi)."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name}: must be an int, got {_what(value)}")
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{name}: must be an int, got {_what(value)}") from None
    if (lo is not None and v < lo) or (hi is not None and v >= hi):
        raise ValueError(f"{name}: must be in [{_num(lo, '-inf')}, {_num(hi, 'inf')}), got {v}")
    return v


def _num(v, none: str) -> str:
    if v is None:
        return none
    return f"2**{v.bit_length() - 1}" if v > 1 << 32 and v & (v - 1) == 0 else str(v)


def check_choice(name: str, value, choices) -> str:
    """One of the string options in `choices`."""
    if value.__class__ is str and value in choices:
        return value  # the common case, before any message is built (this runs on every call)
    options = ", ".join(repr(c) for c in choices)
    if not isinstance(value, str):
        raise TypeError(f"{name}: must be a str, one of {options}; got {_what(value)}")
    if value not in choices:
        raise ValueError(f"{name}: must be one of {options}, got {value!r}")
    return value


def check_dtype(name: str, value, allowed) -> torch.dtype:
    """A torch.dtype among `allowed` (an unsupported dtype is a TypeError too)."""
    if value.__class__ is torch.dtype and value in allowed:
        return value
    names = ", ".join(str(d).replace("torch.", "") for d in allowed)
    if not isinstance(value, torch.dtype):
        raise TypeError(f"{name}: must be a torch.dtype ({names}), got {_what(value)}")
    if value not in allowed:
        raise TypeError(f"{name}: must be one of {names}, got {value}")
    return value


def check_real(name: str, value) -> float:
    """A real number (int or float, not bool), returned as a Python float."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name}: must be a real number, got {_what(value)}")
    return float(value)


def signs_to_mask(signs, name: str = "rht_signs") -> int:
    """16 signs (+1/-1, lane i negative sets bit i) as a bit mask."""
    if isinstance(signs, (str, bytes)) or not hasattr(signs, "__iter__"):
        raise TypeError(f"{name}: must be a sequence of 16 ints (+1 or -1), got {_what(signs)}")
    values = [check_int(f"{name}[{i}]", s) for i, s in enumerate(signs)]
    if len(values) != 16:
        raise ValueError(f"{name}: must have 16 values, got {len(values)}")
    for i, s in enumerate(values):
        if s not in (1, -1):
            raise ValueError(f"{name}[{i}]: must be +1 or -1, got {s}")
    return sum(1 << i for i, s in enumerate(values) if s < 0)


def mask_to_signs(mask: int) -> tuple:
    return tuple(-1 if (mask >> i) & 1 else 1 for i in range(16))


def hadamard16(dtype=torch.float32, device="cpu") -> torch.Tensor:
    h = torch.ones(1, 1, dtype=dtype, device=device)
    while h.shape[0] < 16:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h


def rht_matrix(mask: int, dtype=torch.float32, device="cpu") -> torch.Tensor:
    """The 16x16 matrix M with RHT(v) = v @ M = v . diag(signs) . H16 / 4."""
    s = torch.tensor(mask_to_signs(mask), dtype=dtype, device=device)
    return s[:, None] * hadamard16(dtype, device) / 4


def inverse_rht_blocks(y: torch.Tensor, mask: int) -> torch.Tensor:
    """Undo the RHT on every 16-block of the last dim (M is orthonormal: M^-1 = M^T)."""
    m = rht_matrix(mask, torch.float32, y.device)
    shp = y.shape
    return (y.float().reshape(-1, 16) @ m.t()).reshape(shp)


def swizzled_shape(rows, scale_cols) -> tuple:
    """Shape of a scale matrix of `rows` rows and `scale_cols` scales per row in the 128x4
    swizzled layout: [roundup(rows, 128), roundup(scale_cols, 4)] (design.md §3;
    core::swizzled_rows/cols on the C++ side). NVFP4 has cols/16 scales per row, MXFP4
    cols/32. Integer arithmetic only, so it also works on torch.SymInt."""
    return (rows + 127) // 128 * 128, (scale_cols + 3) // 4 * 4


def global_decode_scale(amax: torch.Tensor) -> torch.Tensor:
    """1 / S_enc, in the contract's fp32 order (works on any device, no sync)."""
    amax = amax.float()
    # full_like, not `2688.0 / amax`: torch evaluates scalar / tensor as a reciprocal
    # times the scalar, which rounds twice and misses the contract by an ulp.
    s_enc = torch.clamp(torch.full_like(amax, 448.0 * 6.0) / amax, max=torch.finfo(torch.float32).max)
    s_enc = torch.where(s_enc == 0, torch.ones_like(s_enc), s_enc)
    return 1.0 / s_enc


def stream_of(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.current_stream(device).cuda_stream
    return 0


def default_rht_mask() -> int:
    """The mask of DEFAULT_RHT_SIGNS (the library's nvfp4_default_rht_sign_mask; a test keeps
    the two equal)."""
    return signs_to_mask(DEFAULT_RHT_SIGNS)


GEMM_OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def check_gemm_extras(device: torch.device, m: int, n: int, out, bias, beta: float, inputs) -> "torch.Tensor | None":
    """The arguments a GEMM of either format takes besides its operands (a on `device`,
    the result [m, n]): bias None or [n] (returned contiguous), out None or a contiguous
    tensor of m*n elements shaped [..., n] sharing no memory with `inputs` ((name, tensor)
    pairs) or bias, beta nonzero only with out (it is read as C)."""
    if bias is not None and not isinstance(bias, torch.Tensor):
        raise TypeError(f"bias: must be a torch.Tensor or None, got {type(bias).__name__}")
    if out is not None and not isinstance(out, torch.Tensor):
        raise TypeError(f"out: must be a torch.Tensor or None, got {type(out).__name__}")
    if bias is not None:
        if bias.shape != (n,):
            raise ValueError(f"bias: expected shape ({n},), got {tuple(bias.shape)}")
        if bias.device != device:
            raise ValueError(f"bias: on {bias.device}, but a is on {device}")
        if bias.dtype not in GEMM_OUT_DTYPES:
            raise TypeError(f"bias: dtype must be bfloat16, float16 or float32, got {bias.dtype}")
        bias = bias.contiguous()
    if out is None:
        if beta != 0.0:
            raise ValueError("beta: nonzero beta needs out= (it is read as C)")
        return bias
    if out.dtype not in GEMM_OUT_DTYPES:
        raise TypeError(f"out: dtype must be bfloat16, float16 or float32, got {out.dtype}")
    if out.device != device:
        raise ValueError(f"out: on {out.device}, but a is on {device}")
    if out.numel() != m * n or out.shape[-1] != n:
        raise ValueError(f"out: expected {m * n} elements shaped [..., {n}], got {tuple(out.shape)}")
    if not out.is_contiguous():
        raise ValueError("out: must be contiguous")
    for name, t in tuple(inputs) + (("bias", bias),):
        if t is not None and overlaps(out, t):
            raise ValueError(f"out: shares memory with {name}; the result would overwrite an input")
    return bias


def overlaps(x: torch.Tensor, y: torch.Tensor) -> bool:
    """Whether two contiguous tensors on one device share a byte."""
    if x.device != y.device or x.numel() == 0 or y.numel() == 0:
        return False
    x0, y0 = x.data_ptr(), y.data_ptr()
    return x0 < y0 + y.numel() * y.element_size() and y0 < x0 + x.numel() * x.element_size()
