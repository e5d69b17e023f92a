"""NVFP4Tensor: packed E2M1 codes, E4M3 block scales and the per-tensor amax."""
from __future__ import annotations

import weakref
from dataclasses import InitVar, dataclass, fields, replace
from typing import Optional

import torch

from . import _checks as check
from . import _ops
from ._format import (BLOCKS, GEMM_OUT_DTYPES, ROUNDINGS, SCALE_LAYOUTS, check_bool, check_choice, check_dtype,
                      check_real, global_decode_scale, inverse_rht_blocks)
from .backends import BACKENDS, check_backend

__all__ = ["NVFP4Tensor", "dequantize"]

_OUT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_compiling = torch.compiler.is_compiling
_Tensor = torch.Tensor


@dataclass(frozen=True)
class _Direction:
    """One quantized orientation [rows, cols]: blocks of 16 along cols."""

    data: torch.Tensor    # uint8 [rows, cols/2], element 2i in the low nibble
    scales: torch.Tensor  # float8_e4m3fn, linear [rows, cols/16] or swizzled [roundup(rows,128), roundup(cols/16,4)]
    amax: torch.Tensor    # float32 [1], on the same device
    rht: bool             # values are in the Hadamard domain


_VIEWS = {"data": 0, "scales": 1, "amax": 2}
_jit_state, _jit_set_state = torch._C._get_tracing_state, torch._C._set_tracing_state


class _OneBufferDirection(_Direction):
    """An orientation that nvfp4.quantize wrote into a section of one allocation (its eager
    road: one buffer for every output of the call, nvfp4._ops._quantize_one_buffer). The
    three views are made when one of them is first read (`data`, `scales`, `amax`), so a
    quantize followed by a GEMM makes none. Until then the buffer is reachable only through
    this object's private fields, so nothing can have changed it: an eager GEMM takes its
    addresses as they were written (`_rec`) with no proof. Once the views exist, the
    orientation is an ordinary one (the proof of NVFP4Tensor._gemm_operand applies), and
    pickling or copying gives a plain _Direction with compact copies of the three."""

    _lazy = False  # the instance's own value while the views do not exist (dataclasses.replace builds a plain one)

    def __getattr__(self, name):
        # reached only for names the instance does not hold: the three views before they exist
        i = _VIEWS.get(name)
        if i is not None and "_buf" in self.__dict__:
            if _compiling():
                return self._views()[i]  # traced as views of the buffer; nothing kept
            # made outside a jit trace, as buffers that existed before it are: constants
            tracing = _jit_state()
            if tracing is not None:
                _jit_set_state(None)
            try:
                views = self._views()
            finally:
                if tracing is not None:
                    _jit_set_state(tracing)
            s = object.__setattr__
            s(self, "data", views[0])
            s(self, "scales", views[1])
            s(self, "amax", views[2])
            s(self, "_lazy", False)
            return views[i]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _views(self) -> tuple:
        off, rows, cols = self._section[:3]
        return _ops.unpack(self._buf[off:], rows, cols)  # the packed layout's one definition

    def __reduce__(self):
        views = self._views() if self._lazy else (self.data, self.scales, self.amax)
        return (_Direction, (*(v.clone() for v in views), self.rht))


def _one_buffer_direction(buf: torch.Tensor, section: tuple, rht: bool) -> _OneBufferDirection:
    """The orientation in `section` (offset, rows, cols, scales offset, amax offset) of buf."""
    d = object.__new__(_OneBufferDirection)
    s = object.__setattr__
    s(d, "rht", rht)
    s(d, "_buf", buf)
    s(d, "_section", section)
    s(d, "_lazy", True)
    off, rows, cols, so, ao = section
    base = buf.data_ptr()
    # what NVFP4Tensor._gemm_operand returns for it: addresses, rows, K/2, device
    s(d, "_rec", (base + off, base + so, base + ao, None, None, None, rows, cols // 2, buf.device, None, None))
    return d


def check_gemm_operands(a, b, cls, backend, out_dtype, beta, also: str = "") -> tuple:
    """What a GEMM of two quantized tensors of one format checks before anything else: both
    are `cls` with rowwise (K-major) data, the options are valid, the two share a scale
    layout, a device (where `backend` runs) and K. Returns (out_dtype, beta, m, n, k, the
    result's leading dims)."""
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, cls):
            raise TypeError(f"{name}: expected an {cls.__name__}, got {type(t).__name__}{also}")
        if t.rowwise is None:
            raise ValueError(f"{name}: has no rowwise (K-major) data; quantize with rowwise=True or pass .T")
    check_choice("backend", backend, BACKENDS)
    out_dtype = check_dtype("out_dtype", out_dtype, GEMM_OUT_DTYPES)
    beta = check_real("beta", beta)
    if a.scale_layout != b.scale_layout:
        raise ValueError(f"b: scale_layout {b.scale_layout!r} differs from a's {a.scale_layout!r}")
    if a.device != b.device:
        raise ValueError(f"b: on {b.device}, but a is on {a.device}")
    check_backend(backend, a.device)
    for name, t in (("a", a), ("b", b)):
        # the codes against the shape the tensor was built with: a buffer changed in place
        # since (resize_, t_, ...) would otherwise pass for another matrix
        rows, cols = t._orientations(*t._view_2d(), getattr(t, "block_size", 16))[0][2:]
        check.tensor(f"{name}.rowwise.data", t.data, (torch.uint8,), (rows, cols // 2), contiguous=False)
    ka, kb = a.data.shape[1] * 2, b.data.shape[1] * 2
    if ka != kb:
        raise ValueError(f"b: K mismatch: a has K={ka}, b has K={kb}")
    m, n = a.data.shape[0], b.data.shape[0]
    return out_dtype, beta, m, n, ka, (tuple(a.shape[:-1]) if not a.transposed else (m,))


class _TwoOrientations:
    """Views shared by the quantized-tensor classes (NVFP4Tensor, MXFP4Tensor): a rowwise
    orientation (blocks along the last dim of the 2D view), a columnwise one (the
    transpose's), the original shape, and `.T` that swaps them."""

    @property
    def data(self):
        return None if self.rowwise is None else self.rowwise.data

    @property
    def scales(self):
        return None if self.rowwise is None else self.rowwise.scales

    @property
    def data_t(self):
        return None if self.columnwise is None else self.columnwise.data

    @property
    def scales_t(self):
        return None if self.columnwise is None else self.columnwise.scales

    @property
    def device(self) -> torch.device:
        d = self.rowwise or self.columnwise
        if d.__class__ is _OneBufferDirection and d._lazy:
            return d._buf.device
        return d.data.device

    def _view_2d(self) -> tuple:
        r = 1
        for s in self.shape[:-1]:
            r *= s
        return r, (self.shape[-1] if self.shape else 1)

    @property
    def rows(self) -> int:
        """Rows of the 2D view this tensor represents (after .T, the original columns)."""
        r, c = self._view_2d()
        return c if self.transposed else r

    @property
    def cols(self) -> int:
        r, c = self._view_2d()
        return r if self.transposed else c

    @staticmethod
    def _device_arg(device) -> torch.device:
        """The `device` argument of .to(): a device a quantized tensor can live on."""
        try:
            device = torch.device(device)
        except (TypeError, ValueError, RuntimeError) as e:
            raise TypeError(f"device: not a device: {device!r} ({e})") from None
        if device.type not in ("cpu", "cuda"):
            raise ValueError(f"device: must be cpu or cuda, got {device}")
        return device

    @property
    def T(self):
        # The same (already checked) orientations, swapped: nothing to check again. Built
        # once per tensor in eager code and kept (both are immutable, so the pair cannot
        # disagree): `x.T` in a loop costs an attribute read, and the transposed view keeps
        # what its GEMMs proved about its buffers (NVFP4Tensor._gemm_operand). The view
        # refers back weakly, so the pair is no reference cycle.
        if _compiling():
            return self._transposed()
        t = self.__dict__.get("_t")
        if t.__class__ is weakref.ref:
            t = t()
        if t is None:
            t = self._transposed()
            object.__setattr__(self, "_t", t)
            object.__setattr__(t, "_t", weakref.ref(self))
        return t

    def _transposed(self):
        return replace(self, rowwise=self.columnwise, columnwise=self.rowwise, transposed=not self.transposed,
                       _checked=True)

    def __getstate__(self) -> dict:
        # the fields only: the transposed view and what GEMMs proved belong to this object
        return {f.name: getattr(self, f.name) for f in fields(self)}

    # -- the checks a quantized tensor passes when it is built (constructor, dataclasses.replace)
    def _check_common(self, block: int, direction_type) -> tuple:
        """Shape, dtype, layout and the two orientations' types; returns the 2D view (R, C)."""
        shape = self.shape
        if not isinstance(shape, tuple) or not shape or any(
                isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in shape):
            raise TypeError(f"shape: expected a non-empty tuple of ints >= 0, got {shape!r}")
        if shape[-1] % block:
            raise ValueError(f"shape: the last dimension must be a multiple of {block}, got {shape}")
        check_dtype("dtype", self.dtype, _OUT_DTYPES)
        check_choice("scale_layout", self.scale_layout, SCALE_LAYOUTS)
        check_bool("transposed", self.transposed)
        for name in ("rowwise", "columnwise"):
            d = getattr(self, name)
            if d is not None and not isinstance(d, direction_type):
                raise TypeError(f"{name}: expected a {direction_type.__name__} or None, got {type(d).__name__}")
        if self.rowwise is None and self.columnwise is None:
            raise ValueError("rowwise/columnwise: at least one orientation is needed")
        r = 1
        for s in shape[:-1]:
            r *= s
        return r, shape[-1]

    def _orientations(self, r: int, c: int, block: int):
        """(name, orientation, rows, cols) of each stored orientation: the rowwise slot holds
        [R, C] (the columnwise one [C, roundup(R, block)]) unless transposed swapped them."""
        row, col = (r, c), (c, (r + block - 1) // block * block)
        if self.transposed:
            row, col = col, row
        return [(n, d, *rc) for n, d, rc in (("rowwise", self.rowwise, row), ("columnwise", self.columnwise, col))
                if d is not None]

    @staticmethod
    def _check_device(name: str, data, first: Optional[tuple]) -> tuple:
        """(name, device) of the first orientation, after checking this one's codes against it."""
        if not isinstance(data, torch.Tensor):
            raise TypeError(f"{name}.data: expected a torch.Tensor, got {type(data).__name__}")
        if data.device.type not in ("cpu", "cuda"):
            raise ValueError(f"{name}.data: on {data.device}; a quantized tensor lives on cpu or cuda")
        if first is not None and data.device != first[1]:
            raise ValueError(f"{name}.data: on {data.device}, but {first[0]}.data is on {first[1]}")
        return first or (name, data.device)


@dataclass(frozen=True)
class NVFP4Tensor(_TwoOrientations):
    """A tensor quantized to NVFP4.

    ``rowwise`` holds the quantization of the 2D view x[R, C] (leading dims flattened)
    along C; ``columnwise`` the quantization of x^T along R (R padded to a multiple of 16
    with zeros), stored as x^T. Either may be None. ``shape`` and ``dtype`` are those of
    the original tensor. ``.T`` swaps the two, which is how a GEMM consumes x^T.
    """

    shape: tuple
    dtype: torch.dtype
    block: str
    rounding: str
    scale_layout: str
    rowwise: Optional[_Direction]
    columnwise: Optional[_Direction]
    rht_sign_mask: int = 0
    transposed: bool = False
    _checked: InitVar[bool] = False  # built by nvfp4 from buffers it allocated: nothing to check

    def __post_init__(self, _checked: bool) -> None:
        # Every field is checked once, here; the dataclass is frozen and dataclasses.replace
        # comes through here again, so what a GEMM reads later is what was checked.
        if _checked:
            return
        r, c = self._check_common(16, _Direction)
        check_choice("block", self.block, BLOCKS)
        check_choice("rounding", self.rounding, ROUNDINGS)
        if isinstance(self.rht_sign_mask, bool) or not isinstance(self.rht_sign_mask, int) or \
                not 0 <= self.rht_sign_mask < 1 << 16:
            raise ValueError(f"rht_sign_mask: expected an int in [0, 0xffff], got {self.rht_sign_mask!r}")
        layout = SCALE_LAYOUTS[self.scale_layout]
        first = None
        for name, d, rows, cols in self._orientations(r, c, 16):
            first = self._check_device(name, d.data, first)
            check.nvfp4_orientation(name, d.data, d.scales, d.amax, rows, cols, layout, amax_rows=True)
            check_bool(f"{name}.rht", d.rht)
            check.amax_not_negative(f"{name}.amax", d.amax)

    # -- the rowwise buffers as an eager GEMM reads them, checked once and then proven
    # nvfp4.quantize records the buffers it has just allocated and filled (eager road); for
    # any other tensor the first eager GEMM checks its rowwise buffers against the shape the
    # tensor was built with (every field, as the op layer does) and records what it saw:
    # their addresses and version counters, and their storages, held so that no other
    # allocation can take those addresses while the record lives. A later GEMM proves the
    # buffers unchanged by reading the addresses it needs anyway and the version counters
    # (which every in-place change of a tensor's data or metadata advances: resize_,
    # set_, as_strided_, t_, copy_, ...), their shapes and contiguity (an assignment to
    # `.data` swaps a tensor's view without advancing its counter: a shorter view of the
    # same storage keeps the address), and uses the recorded sizes; on any difference it
    # checks again. So the record cannot go stale: it holds while the memory it describes
    # is the memory the tensor refers to. (Like the op layer's checks, it cannot see the
    # storage itself being resized: `x.untyped_storage().resize_()` is outside torch's
    # own guarantees.)
    _seen = None  # (data, scales, amax addresses, their versions, rows, K/2, device, geometry, storages)

    def _gemm_operand(self) -> Optional[tuple]:
        """The record above, proven for this call, or None when the rowwise buffers are not
        plain, checked, swizzled cpu/cuda tensors (the caller then takes the op's road, whose
        checks name what is wrong)."""
        d = self.rowwise
        if d.__class__ is _OneBufferDirection and d._lazy:
            return d._rec if self.scale_layout == "swizzled" else None
        seen = self._seen
        if seen is not None:
            data, scales, amax = d.data, d.scales, d.amax
            if (data.data_ptr() == seen[0] and scales.data_ptr() == seen[1] and amax.data_ptr() == seen[2]
                    and data._version == seen[3] and scales._version == seen[4] and amax._version == seen[5]
                    and data.shape == seen[9][0] and scales.shape == seen[9][1] and amax.shape == seen[9][2]
                    and data.is_contiguous() and scales.is_contiguous()):
                return seen
        return self._check_gemm_operand()

    def _check_gemm_operand(self) -> Optional[tuple]:
        d = self.rowwise
        if d is None or self.scale_layout != "swizzled":
            return None
        data, scales, amax = d.data, d.scales, d.amax
        if data.__class__ is not _Tensor or scales.__class__ is not _Tensor or amax.__class__ is not _Tensor:
            return None
        rows, cols = self._orientations(*self._view_2d(), 16)[0][2:]  # the rowwise slot's [rows, cols]
        try:
            check.nvfp4_orientation("rowwise", data, scales, amax, rows, cols, 1)
        except (TypeError, ValueError):
            return None
        if not (data.is_cuda or data.is_cpu):
            return None
        return self._record(rows, cols // 2, data.device)

    def _record(self, rows: int, kh: int, device: torch.device) -> tuple:
        """Record the rowwise buffers as [rows, kh] codes on `device`: after the check above,
        or where nvfp4.quantize has just allocated and filled them on the eager road.
        Returns the record; inference tensors (torch.inference_mode) keep no version counter,
        so theirs serves this call only and is not kept."""
        d = self.rowwise
        data, scales, amax = d.data, d.scales, d.amax
        ptrs = (data.data_ptr(), scales.data_ptr(), amax.data_ptr())
        if data.is_inference() or scales.is_inference() or amax.is_inference():
            return (*ptrs, None, None, None, rows, kh, device, None, None)
        held = (data.untyped_storage(), scales.untyped_storage(), amax.untyped_storage())
        geometry = (data.shape, scales.shape, amax.shape)  # contiguous: checked above, or just allocated
        seen = (*ptrs, data._version, scales._version, amax._version, rows, kh, device, geometry, held)
        object.__setattr__(self, "_seen", seen)
        return seen

    @property
    def amax(self):
        return None if self.rowwise is None else self.rowwise.amax

    @property
    def amax_t(self):
        return None if self.columnwise is None else self.columnwise.amax

    def global_decode_scale(self, columnwise: bool = False) -> torch.Tensor:
        columnwise = check_bool("columnwise", columnwise)
        d = self.columnwise if columnwise else self.rowwise
        if d is None:
            raise ValueError("columnwise: this tensor has no %s data" % ("columnwise" if columnwise else "rowwise"))
        return global_decode_scale(d.amax)

    def to(self, device) -> "NVFP4Tensor":
        device = self._device_arg(device)

        def mv(d):
            if d is None:
                return None
            return _Direction(d.data.to(device), d.scales.to(device), d.amax.to(device), d.rht)

        return replace(self, rowwise=mv(self.rowwise), columnwise=mv(self.columnwise), _checked=True)

    def dequantize(self, dtype: Optional[torch.dtype] = None, columnwise: bool = False,
                   undo_rht: bool = True) -> torch.Tensor:
        """Decoded values. Rowwise: a tensor shaped like the represented tensor (2D view
        [rows, cols] after .T). columnwise=True decodes the other direction and returns it
        transposed back, so both directions approximate the same tensor. A direction that
        went through the Hadamard transform is transformed back unless undo_rht=False."""
        dtype = self.dtype if dtype is None else check_dtype("dtype", dtype, _OUT_DTYPES)
        columnwise = check_bool("columnwise", columnwise)
        undo_rht = check_bool("undo_rht", undo_rht)
        d = self.columnwise if columnwise else self.rowwise
        if d is None:
            raise ValueError("columnwise: this tensor has no %s data" % ("columnwise" if columnwise else "rowwise"))
        rows, width = d.data.shape[0], d.data.shape[1] * 2
        out = torch.empty((rows, width), dtype=torch.float32, device=d.data.device)
        _ops.dequantize_into(d.data, d.scales.view(torch.uint8), d.amax, SCALE_LAYOUTS[self.scale_layout], out)
        if d.rht and undo_rht:
            out = inverse_rht_blocks(out, self.rht_sign_mask)
        # Orientation of d: rows x width; the represented 2D view is rows x cols (or its
        # transpose for the columnwise direction), width may include padding.
        if not columnwise:
            out = out[:, : self.cols]
            shape = self.shape if not self.transposed else (self.rows, self.cols)
            return out.reshape(shape).to(dtype)
        out = out[:, : self.rows].t()
        shape = self.shape if not self.transposed else (self.rows, self.cols)
        return out.reshape(shape).to(dtype)

    def __repr__(self) -> str:
        parts = [f"shape={tuple(self.shape)}", f"dtype={self.dtype}", f"device={self.device}",
                 f"block={self.block}", f"rounding={self.rounding}", f"scales={self.scale_layout}"]
        if self.transposed:
            parts.append("transposed=True")
        for name, d in (("rowwise", self.rowwise), ("columnwise", self.columnwise)):
            if d is not None:
                amax = d.amax.item() if d.amax.device.type == "cpu" else "<on device>"
                parts.append(f"{name}(data={tuple(d.data.shape)}, rht={d.rht}, amax={amax})")
        return "NVFP4Tensor(" + ", ".join(parts) + ")"


def dequantize(t: NVFP4Tensor, dtype: Optional[torch.dtype] = None, columnwise: bool = False) -> torch.Tensor:
    """Decode an NVFP4Tensor (see NVFP4Tensor.dequantize)."""
    if not isinstance(t, NVFP4Tensor):
        raise TypeError(f"t: expected an NVFP4Tensor, got {type(t).__name__}")
    return t.dequantize(dtype, columnwise=columnwise)
