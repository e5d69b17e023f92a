"""The validation layer for quantized operands: every buffer checked before its address is
taken.

A quantized orientation is a triple (NVFP4: codes, E4M3 block scales, float32 amax) or a
pair (MXFP4: codes, E8M0 scales) whose sizes follow from the orientation's [rows, cols]
and its scale layout. The raw-pointer entry points of the library cannot see a tensor's
size, so whatever reaches them must be right here: dtype, shape against the logical shape
and layout, contiguity, and one device for all (a meta or CPU buffer beside a CUDA one
would hand the kernels an address they cannot read). Errors name the field and say what
was expected and what came:

    b_amax: expected float32 [1], got float64 [1]

Two levels use it. The op layer (nvfp4._ops: every road to the kernels) checks the
tensors it is given on every call, in the fewest tensor-attribute reads that settle it
(about 0.1 us each). The quantized-tensor classes (NVFP4Tensor, MXFP4Tensor) are checked
once, when they are built (constructor and dataclasses.replace), where the amax's sign can
also be read without stalling a GPU stream: on the CPU.

Values are not checked on the hot path: any byte is a valid code or scale, and an amax on
a CUDA device cannot be read without a host synchronization. A negative amax (which would
flip the sign of every product) is refused wherever it can be read for free: CPU tensors
at construction, state_dict entries at load. NaN and +inf are what quantization itself
writes for inputs holding NaN or inf (design.md section 1.3) and pass.
"""
from __future__ import annotations

import torch

from ._format import swizzled_shape

__all__ = ["describe", "tensor", "nvfp4_orientation", "mx_orientation", "amax_not_negative", "FLOATS",
           "SCALE_DTYPES", "MX_SCALE_DTYPES"]

_U8 = torch.uint8
_F32 = torch.float32
FLOATS = (torch.float32, torch.float16, torch.bfloat16)
#: NVFP4 block scales: E4M3, or the same bytes as uint8.
SCALE_DTYPES = (torch.float8_e4m3fn, torch.uint8)
_E8M0 = getattr(torch, "float8_e8m0fnu", None)
#: MXFP4 block scales: E8M0 where torch has it, or the same bytes as uint8.
MX_SCALE_DTYPES = (_U8,) if _E8M0 is None else (_E8M0, _U8)


def _dt(d) -> str:
    return str(d).replace("torch.", "")


def _shape(s) -> str:
    return "[" + ", ".join(str(int(v)) for v in s) + "]"


def describe(t) -> str:
    """'float64 [1]': a tensor's dtype and shape, for errors (or the type of a non-tensor)."""
    if not isinstance(t, torch.Tensor):
        return type(t).__name__
    return f"{_dt(t.dtype)} {_shape(t.shape)}"


def _expected(dtypes, shape) -> str:
    names = " or ".join(_dt(d) for d in dtypes)
    return names if shape is None else f"{names} {_shape(shape)}"


def tensor(name: str, t, dtypes, shape=None, device=None, device_of: str = "", contiguous: bool = True):
    """t is a tensor of one of `dtypes`, of `shape` (None: any), contiguous, on `device`
    (None: any; device_of names the tensor that fixed it). Returns t."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor ({_expected(dtypes, shape)}), got {type(t).__name__}")
    if t.dtype not in dtypes or (shape is not None and tuple(t.shape) != tuple(shape)):
        raise ValueError(f"{name}: expected {_expected(dtypes, shape)}, got {describe(t)}")
    if contiguous and not t.is_contiguous():
        raise ValueError(f"{name}: expected a contiguous tensor, got {describe(t)} with strides {tuple(t.stride())}")
    if device is not None and t.device != device:
        raise ValueError(f"{name}: on {t.device}, but {device_of or 'the other operands'} "
                         f"{'is' if device_of else 'are'} on {device}")
    return t


_ONE = (1,)


def nvfp4_orientation(prefix: str, data, scales, amax, rows: int, cols: int, layout: int, device=None,
                      device_of: str = "", sep: str = ".", amax_rows: bool = False) -> None:
    """One NVFP4 orientation [rows, cols] (cols % 16 == 0): codes uint8 [rows, cols/2],
    scales E4M3 (or uint8) in `layout`, amax float32 [1], all contiguous on one device.
    amax_rows: an amax of one entry per row ([rows], the row-scaled option of
    nvfp4.quantize_options) is accepted too; the contract's ops (GEMM, dequantize) take [1].
    Field names are prefix + sep + data/scales/amax."""
    sshape = swizzled_shape(rows, cols // 16) if layout == 1 else (rows, cols // 16)
    try:
        # the common case in the fewest attribute reads (the op layer runs this on every call)
        dev = data.device
        if (data.dtype is _U8 and amax.dtype is _F32 and scales.dtype in SCALE_DTYPES
                and data.shape == (rows, cols // 2) and scales.shape == sshape and amax.shape == _ONE
                and data.is_contiguous() and scales.is_contiguous()
                and scales.device == dev and amax.device == dev and (device is None or dev == device)):
            return
    except AttributeError:
        pass  # not tensors: the checks below say which
    dname = prefix + sep + "data"
    tensor(dname, data, (_U8,), (rows, cols // 2), device, device_of)
    tensor(prefix + sep + "scales", scales, SCALE_DTYPES, sshape, data.device, dname)
    if amax_rows and isinstance(amax, torch.Tensor) and amax.shape == (rows,) and rows != 1:
        tensor(prefix + sep + "amax", amax, (_F32,), (rows,), data.device, dname)
    else:
        tensor(prefix + sep + "amax", amax, (_F32,), _ONE, data.device, dname)


def mx_orientation(prefix: str, data, scales, rows: int, cols: int, layout: int, device=None,
                   device_of: str = "", sep: str = ".") -> None:
    """One MXFP4 orientation [rows, cols] (cols % 32 == 0): codes uint8 [rows, cols/2],
    E8M0 scales (or uint8) in `layout`, contiguous on one device."""
    sshape = swizzled_shape(rows, cols // 32) if layout == 1 else (rows, cols // 32)
    try:
        dev = data.device
        if (data.dtype is _U8 and scales.dtype in MX_SCALE_DTYPES and data.shape == (rows, cols // 2)
                and scales.shape == sshape and data.is_contiguous() and scales.is_contiguous()
                and scales.device == dev and (device is None or dev == device)):
            return
    except AttributeError:
        pass
    dname = prefix + sep + "data"
    tensor(dname, data, (_U8,), (rows, cols // 2), device, device_of)
    tensor(prefix + sep + "scales", scales, MX_SCALE_DTYPES, sshape, data.device, dname)


def _readable(t: torch.Tensor) -> bool:
    # a real CPU tensor: not meta, not a fake tensor of a compiled graph, not being traced
    if t.device.type != "cpu" or type(t) is not torch.Tensor:
        return False
    return not torch.compiler.is_compiling()


def amax_not_negative(name: str, amax: torch.Tensor) -> None:
    """A readable (CPU) amax is >= 0, NaN or +inf; a negative one is refused. A CUDA amax is
    not read (that would synchronize the host with the stream)."""
    if _readable(amax) and amax.numel() >= 1:
        v = float(amax.min())
        if v < 0:
            raise ValueError(f"{name}: expected max |x| (>= 0), got {v}; a negative amax flips the sign of every "
                             "decoded value")
