"""MXFP4 (OCP Microscaling v1.0): quantize_mxfp4 and MXFP4Tensor.

E2M1 values with one E8M0 scale (a power of two) per 32 values and no per-tensor scale.
The numerics live in C++ (src/core/mx.h); this module allocates, validates and wraps.
"""
from __future__ import annotations

from dataclasses import InitVar, dataclass, replace
from typing import Optional, Tuple, Union

import torch

from . import _checks as check
from . import _ops
from ._format import (ROUNDINGS, SCALE_LAYOUTS, check_bool, check_choice, check_dtype, check_gemm_extras, check_int,
                      swizzled_shape)
from ._quantize import checked_input
from ._tensor import _TwoOrientations, check_gemm_operands
from .backends import BACKENDS

__all__ = ["MXFP4Tensor", "quantize_mxfp4", "gemm_mxfp4", "MX_SCALE_RULES", "MX_BLOCK", "E8M0_DTYPE"]

#: Elements per E8M0 scale.
MX_BLOCK = 32
#: Scale rules (see quantize_mxfp4), by name -> nvfp4_mx_scale_rule_t.
MX_SCALE_RULES = {"ocp": 0, "ceil": 1, "tetrajet": 2}
#: dtype of the scale tensors: torch.float8_e8m0fnu where this torch has it, else uint8.
E8M0_DTYPE = getattr(torch, "float8_e8m0fnu", torch.uint8)

_OUT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@dataclass(frozen=True)
class _MXDirection:
    """One quantized orientation [rows, cols]: blocks of 32 along cols."""

    data: torch.Tensor    # uint8 [rows, cols/2], element 2i in the low nibble
    scales: torch.Tensor  # E8M0, linear [rows, cols/32] or swizzled [roundup(rows,128), roundup(cols/32,4)]
    rounding: str
    scale_rule: str


@dataclass(frozen=True)
class MXFP4Tensor(_TwoOrientations):
    """A tensor quantized to MXFP4.

    ``rowwise`` holds the quantization of the 2D view x[R, C] (leading dims flattened) along
    C; ``columnwise`` the quantization of xᵀ along R (R padded to a multiple of 32 with
    zeros), stored as xᵀ. Either may be None. ``shape`` and ``dtype`` are those of the
    original tensor. ``.T`` swaps the two, which is how a GEMM consumes xᵀ.
    """

    shape: tuple
    dtype: torch.dtype
    scale_layout: str
    rowwise: Optional[_MXDirection]
    columnwise: Optional[_MXDirection]
    transposed: bool = False
    _checked: InitVar[bool] = False  # built by nvfp4 from buffers it allocated: nothing to check

    block_size = MX_BLOCK

    def __post_init__(self, _checked: bool) -> None:
        # checked once, here (constructor and dataclasses.replace); the dataclass is frozen
        if _checked:
            return
        r, c = self._check_common(MX_BLOCK, _MXDirection)
        layout = SCALE_LAYOUTS[self.scale_layout]
        first = None
        for name, d, rows, cols in self._orientations(r, c, MX_BLOCK):
            first = self._check_device(name, d.data, first)
            check.mx_orientation(name, d.data, d.scales, rows, cols, layout)
            check_choice(f"{name}.rounding", d.rounding, ROUNDINGS)
            check_choice(f"{name}.scale_rule", d.scale_rule, MX_SCALE_RULES)

    def to(self, device) -> "MXFP4Tensor":
        device = self._device_arg(device)

        def mv(d):
            return None if d is None else replace(d, data=d.data.to(device), scales=d.scales.to(device))

        return replace(self, rowwise=mv(self.rowwise), columnwise=mv(self.columnwise), _checked=True)

    def dequantize(self, dtype: Optional[torch.dtype] = None, columnwise: bool = False) -> torch.Tensor:
        """Decoded values e2m1 * 2^scale, exact in float32 and bfloat16 (magnitudes >= 2^128
        become inf), rounded to nearest even in float16. Rowwise: a tensor shaped like the
        represented tensor (the 2D view [rows, cols] after .T). columnwise=True decodes the
        other direction and returns it transposed back, so both approximate the same tensor."""
        dtype = self.dtype if dtype is None else check_dtype("dtype", dtype, _OUT_DTYPES)
        columnwise = check_bool("columnwise", columnwise)
        d = self.columnwise if columnwise else self.rowwise
        if d is None:
            which = "columnwise" if columnwise else "rowwise"
            raise ValueError(f"columnwise: this tensor has no {which} data")
        rows, width = d.data.shape[0], d.data.shape[1] * 2
        out = torch.empty((rows, width), dtype=dtype, device=d.data.device)
        _ops.mx_dequantize_into(d.data, d.scales.view(torch.uint8), SCALE_LAYOUTS[self.scale_layout], out)
        shape = self.shape if not self.transposed else (self.rows, self.cols)
        if not columnwise:
            return out[:, : self.cols].reshape(shape)
        return out[:, : self.rows].t().reshape(shape)

    def __repr__(self) -> str:
        parts = [f"shape={tuple(self.shape)}", f"dtype={self.dtype}", f"device={self.device}",
                 f"scales={self.scale_layout}"]
        if self.transposed:
            parts.append("transposed=True")
        for name, d in (("rowwise", self.rowwise), ("columnwise", self.columnwise)):
            if d is not None:
                parts.append(f"{name}(data={tuple(d.data.shape)}, rounding={d.rounding}, scale_rule={d.scale_rule})")
        return "MXFP4Tensor(" + ", ".join(parts) + ")"


def _pair(name: str, value, choices) -> Tuple[str, str]:
    """A name for both directions, or a (rowwise, columnwise) pair of names."""
    if isinstance(value, str):
        check_choice(name, value, choices)
        return value, value
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        options = ", ".join(repr(c) for c in choices)
        raise TypeError(f"{name}: must be one of {options} or a (rowwise, columnwise) pair of them, got "
                        f"{type(value).__name__} {value!r}")
    return check_choice(f"{name}[0]", value[0], choices), check_choice(f"{name}[1]", value[1], choices)


def _alloc(rows: int, cols: int, layout: str, device) -> Tuple[torch.Tensor, torch.Tensor]:
    nb = cols // MX_BLOCK
    data = torch.empty((rows, cols // 2), dtype=torch.uint8, device=device)
    if layout == "swizzled":
        scales = torch.empty(swizzled_shape(rows, nb), dtype=torch.uint8, device=device)
    else:
        scales = torch.empty((rows, nb), dtype=torch.uint8, device=device)
    return data, scales


def quantize_mxfp4(x, rounding: Union[str, Tuple[str, str]] = "rtn", scale_rule: Union[str, Tuple[str, str]] = "ocp",
                   seed: Optional[int] = None, offset: int = 0, rowwise: bool = True, columnwise: bool = False,
                   scale_layout: str = "swizzled") -> MXFP4Tensor:
    """Quantize x (float32/float16/bfloat16, last dim a multiple of 32) to MXFP4.

    rounding: "rtn" (nearest-even) or "sr" (stochastic; Philox keyed by seed/offset, the
        same contract as nvfp4.quantize), or a (rowwise, columnwise) pair.
    scale_rule: the E8M0 exponent s of a block with M = max|x| (or a (rowwise, columnwise) pair):
        "ocp"       floor(log2 M) - 2, the OCP specification's (values above 6 * 2^s saturate);
        "ceil"      ceil(log2(M / 6)): the smallest scale with no saturation ("round to infinity");
        "tetrajet"  TetraJet's truncation-free scaling, ceil(log2(M' / 6)) with M' = M, or 1e-8
                    for an all-zero block.
        Exponents below -127 are clamped to -127; a block holding a NaN or an infinity gets the
        NaN scale (it decodes to NaN).
    rowwise / columnwise: which orientations to produce (both from one read of x); columnwise
        quantizes xᵀ along the first axis, zero-padded to a multiple of 32.
    scale_layout: "swizzled" (128x4 tiles, the layout of CUTLASS's MX GEMMs) or "linear".
    Runs on x's device; on CUDA, on the current stream with no host synchronization.
    """
    # Types and values of the options first: they cost nothing and do not depend on x.
    rnd = _pair("rounding", rounding, ROUNDINGS)
    rule = _pair("scale_rule", scale_rule, MX_SCALE_RULES)
    check_choice("scale_layout", scale_layout, SCALE_LAYOUTS)
    rowwise = check_bool("rowwise", rowwise)
    columnwise = check_bool("columnwise", columnwise)
    if not (rowwise or columnwise):
        raise ValueError("rowwise/columnwise: at least one must be True")
    if seed is not None:
        seed = check_int("seed", seed, 0, 2**64)
    offset = check_int("offset", offset, 0, 2**64)

    x, rows, cols = checked_input(x, MX_BLOCK, " (MXFP4 blocks)")
    if seed is None:
        seed = int(torch.randint(0, 2**62, (1,)).item()) if "sr" in rnd else 0
    x2 = x.reshape(rows, cols)
    row = _alloc(rows, cols, scale_layout, x.device) if rowwise else None
    col = _alloc(cols, (rows + MX_BLOCK - 1) // MX_BLOCK * MX_BLOCK, scale_layout, x.device) if columnwise else None
    _ops.mx_quantize_into(x2, row, col, ROUNDINGS[rnd[0]], MX_SCALE_RULES[rule[0]], ROUNDINGS[rnd[1]],
                          MX_SCALE_RULES[rule[1]], SCALE_LAYOUTS[scale_layout], seed, offset)

    def direction(t, i):
        return None if t is None else _MXDirection(t[0], t[1].view(E8M0_DTYPE), rnd[i], rule[i])

    return MXFP4Tensor(tuple(x.shape), x.dtype, scale_layout, direction(row, 0), direction(col, 1), _checked=True)


# ------------------------------------------------------------------------------ GEMM
_mm_out_dtype_ok: Optional[bool] = None


def decode_stored(data: torch.Tensor, scales: torch.Tensor, layout: int, dtype: torch.dtype) -> torch.Tensor:
    """One MXFP4 orientation (codes [rows, width/2], E8M0 scales in `layout`) decoded as
    stored: [rows, width] of e2m1 * 2^scale, padding included."""
    out = torch.empty((data.shape[0], data.shape[1] * 2), dtype=dtype, device=data.device)
    return _ops.mx_dequantize_into(data, scales.view(torch.uint8), layout, out)


def mm_fp32(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a · bᵀ with FP32 output, for operands of decoded FP4 values (exact in BF16, at most 6
    significant bits): on CUDA, BF16 tensor cores with FP32 output (torch.mm(...,
    out_dtype=float32)) where this torch has it; else FP32 (TF32 too is exact on them)."""
    global _mm_out_dtype_ok
    if a.is_cuda and a.dtype == torch.bfloat16 and b.dtype == torch.bfloat16 and _mm_out_dtype_ok is not False:
        try:
            out = torch.mm(a, b.t(), out_dtype=torch.float32)
            _mm_out_dtype_ok = True
            return out
        except (TypeError, RuntimeError, NotImplementedError):
            _mm_out_dtype_ok = False
    return a.float() @ b.float().t()


def gemm_mxfp4(a: MXFP4Tensor, b: MXFP4Tensor, *, backend: str = "auto", out_dtype: torch.dtype = torch.bfloat16,
               bias: Optional[torch.Tensor] = None, out: Optional[torch.Tensor] = None,
               beta: float = 0.0) -> torch.Tensor:
    """GEMM of two MXFP4 tensors quantized along K (their rowwise data): [..., N] =
    Â @ B̂ᵀ + beta * out + bias, with FP32 accumulation (MXFP4 has no per-tensor scale, so
    there is no alpha).

    Every product of two MXFP4 values is exact (E2M1 x a power of two), so the result equals
    the float64 product of the decoded operands within FP32 accumulation; decoded magnitudes
    >= 2^128 are inf, a NaN scale gives NaN (see nvfp4_mx_gemm in nvfp4.h). backend: "auto",
    "cutlass", "cudnn" (CUDA tensors: on Hopper an exact emulation, the operands decoded to
    BF16 and multiplied on the BF16 tensor cores; on Blackwell the native block-scaled GEMMs,
    built but not run on hardware) or "reference" (CPU tensors: float64 accumulation).
    Both operands need the same scale layout. out_dtype / bias / out / beta as in nvfp4.gemm.
    """
    out_dtype, beta, m, n, _, lead = check_gemm_operands(a, b, MXFP4Tensor, backend, out_dtype, beta)
    bias = check_gemm_extras(a.device, m, n, out, bias, beta,
                             (("a.data", a.rowwise.data), ("a.scales", a.rowwise.scales), ("b.data", b.rowwise.data),
                              ("b.scales", b.rowwise.scales)))
    if out is None:
        # one op (torch.ops.nvfp4.mx_gemm): traceable by torch.compile
        d = _ops.mx_gemm(a.rowwise.data, a.rowwise.scales.view(torch.uint8), b.rowwise.data,
                         b.rowwise.scales.view(torch.uint8), SCALE_LAYOUTS[a.scale_layout], BACKENDS[backend],
                         out_dtype, bias)
        return d.view(lead + (n,))
    d = out.view(m, n)
    mx_gemm_raw(a.rowwise.data, a.rowwise.scales, b.rowwise.data, b.rowwise.scales, SCALE_LAYOUTS[a.scale_layout],
                d, c=d if beta != 0.0 else None, bias=bias, beta=beta, backend=BACKENDS[backend])
    return out


def mx_gemm_raw(a_data: torch.Tensor, a_scales: torch.Tensor, b_data: torch.Tensor, b_scales: torch.Tensor,
                layout: int, d: torch.Tensor, *, c: Optional[torch.Tensor] = None, bias: Optional[torch.Tensor] = None,
                beta: float = 0.0, backend: int = 0) -> torch.Tensor:
    """d [M, N] = A^ @ B^ᵀ (+ beta * c) (+ bias) on raw MXFP4 directions (data [M, K/2], E8M0
    scales in `layout`), through nvfp4_mx_gemm, which checks every argument. For callers that
    hold the tensors already (nvfp4.nn's per-operand path); returns d."""
    return _ops.mx_gemm_into(a_data, a_scales, b_data, b_scales, layout, d, c=c, bias=bias, beta=beta,
                             backend=backend)
