"""Grouped (mixture-of-experts) NVFP4 tensors: nvfp4.grouped_quantize, nvfp4.batched_quantize and
nvfp4.grouped_gemm, whose arguments follow torch._grouped_mm.

A grouped tensor is a token-sorted activation x [T, K] split into E groups (experts) by
``offs``, int32 [E] cumulative ends on x's device: group g is rows [offs[g-1], offs[g]). Each
group is quantized as its own tensor (its own amax and per-tensor scale). A batched tensor is an
expert weight [E, N, K]: E tensors, each quantized as ``nvfp4.quantize`` would (1D or 2D tiles).
Layouts: docs/design.md, "Grouped (MoE) tensors". ``offs`` is never read on the host for CUDA
tensors; a bad one is clamped on the device and reported in ``offs_error`` (``check_offs()``
synchronizes and raises); CPU tensors are checked on the host and refused at once.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional, Sequence, Tuple, Union

import torch

from . import _ops
from ._format import (BLOCKS, RHT_COLUMNWISE, RHT_ROWWISE, ROUNDINGS, check_bool, check_choice, check_dtype,
                      check_int, default_rht_mask, signs_to_mask, swizzled_shape)
from ._quantize import _rht_mask, _signed64
from ._tensor import NVFP4Tensor, _Direction
from .backends import BACKENDS, check_backend

__all__ = ["GroupedNVFP4Tensor", "BatchedNVFP4Tensor", "grouped_quantize", "batched_quantize", "grouped_gemm",
           "OFFS_ERRORS", "offs_error_message"]

_IN = (torch.float32, torch.float16, torch.bfloat16)
_OUT = (torch.bfloat16, torch.float16, torch.float32)

#: The bits of an offs_error word (nvfp4.h NVFP4_OFFS_*).
OFFS_ERRORS = {1: "decreasing (some offs[g] < offs[g-1])", 2: "past the end (some offs[g] > T)",
               4: "negative (some offs[g] < 0)"}


def offs_error_message(bits: int) -> str:
    return "offs: " + ", ".join(v for k, v in OFFS_ERRORS.items() if bits & k) + \
        "; the device computed the result of the clamped offs (end_g = min(max(0, offs[0..g]), T))"


def _raise_offs(err: torch.Tensor) -> None:
    bits = int(err.reshape(-1)[0].item())  # a host synchronization: the caller asked for it
    if bits:
        raise ValueError(offs_error_message(bits))


def _up(v, m):
    return (v + m - 1) // m * m


def _amax(d, g):
    """Group g's amax as a tensor of its own: the dense API wants 16-byte-aligned CUDA pointers,
    and a slice of the [E] amax is aligned only for every fourth group."""
    return d.amax[g:g + 1].clone()


@dataclass(frozen=True)
class GroupedNVFP4Tensor:
    """x [T, K] in E groups, quantized group by group. ``rowwise`` / ``columnwise``: (data,
    scales, amax) triples in the grouped layouts (or None); ``offs`` the group ends the layout
    was made with; ``offs_error`` int32 [1] (0 when offs was valid). ``.T`` swaps the
    directions, as NVFP4Tensor.T does: ``grouped_gemm(dy.T, x.T)`` is the weight gradient."""

    shape: Tuple[int, int]
    dtype: torch.dtype
    rounding: str
    rowwise: Optional[_Direction]
    columnwise: Optional[_Direction]
    offs: torch.Tensor
    offs_error: torch.Tensor
    rht_sign_mask: int = 0
    transposed: bool = False

    @property
    def groups(self) -> int:
        return self.offs.shape[0]

    @property
    def device(self) -> torch.device:
        return self.offs.device

    @property
    def T(self) -> "GroupedNVFP4Tensor":
        return replace(self, rowwise=self.columnwise, columnwise=self.rowwise, transposed=not self.transposed)

    def check_offs(self) -> None:
        """Raise ValueError (naming offs) if the offs this tensor was quantized with was invalid.
        Synchronizes with the device."""
        _raise_offs(self.offs_error)

    def group(self, g: int, columnwise: bool = False) -> NVFP4Tensor:
        """Group g as a dense NVFP4Tensor (views of the codes and scales, a copy of the amax): its
        rowwise direction, shape [m_g, K];
        or (columnwise=True) its columnwise one, shape [roundup(m_g, 32), K] (the zero tokens
        the layout appends). Reads offs on the host: for inspection and tests."""
        t, k = self.shape
        e = self.groups
        g = check_int("g", g, 0, e)
        columnwise = check_bool("columnwise", columnwise)
        base_row = self.columnwise if self.transposed else self.rowwise
        base_col = self.rowwise if self.transposed else self.columnwise
        d = base_col if columnwise else base_row
        if d is None:
            raise ValueError(f"columnwise: this tensor has no {'columnwise' if columnwise else 'rowwise'} direction")
        ends = [int(v) for v in self.offs.cpu().tolist()]
        starts = [0] + ends[:-1]
        cp = _up(k // 16, 4)
        m = ends[g] - starts[g]
        if not columnwise:
            srow = sum(_up(ends[h] - starts[h], 128) for h in range(g))
            sr = _up(m, 128)
            scales = d.scales.reshape(-1)[srow * cp:(srow + sr) * cp].view(sr, cp)
            data = d.data[starts[g]:ends[g]]
            if data.data_ptr() % 16:  # rows start 16-byte aligned only when K % 32 == 0
                data = data.clone()
            row = _Direction(data, scales, _amax(d, g), d.rht)
            return NVFP4Tensor((m, k), self.dtype, "1d", self.rounding, "swizzled", row, None, self.rht_sign_mask)
        mp = [_up(ends[h] - starts[h], _ops.GROUP_TOKEN_ALIGN) for h in range(e)]
        p = sum(mp[:g])
        q = sum(_up(v // 16, 4) for v in mp[:g])
        kp = _up(k, 128)
        data = d.data[k * p // 2: k * (p + mp[g]) // 2].view(k, mp[g] // 2)
        cq = _up(mp[g] // 16, 4)
        scales = d.scales[kp * q: kp * (q + cq)].view(kp, cq)
        col = _Direction(data, scales, _amax(d, g), d.rht)
        return NVFP4Tensor((mp[g], k), self.dtype, "1d", self.rounding, "swizzled", None, col, self.rht_sign_mask)


@dataclass(frozen=True)
class BatchedNVFP4Tensor:
    """E tensors [N, K] (expert weights) quantized one by one and stacked: ``rowwise`` data
    [E, N, K/2], scales [E, roundup(N,128), roundup(K/16,4)], amax [E]; ``columnwise`` the same
    for each xᵀ [K, roundup(N,16)]. ``.T`` swaps them (the input-gradient GEMM reads Wᵀ)."""

    shape: Tuple[int, int, int]
    dtype: torch.dtype
    block: str
    rounding: str
    rowwise: Optional[_Direction]
    columnwise: Optional[_Direction]
    rht_sign_mask: int = 0
    transposed: bool = False

    @property
    def device(self) -> torch.device:
        d = self.rowwise or self.columnwise
        return d.data.device

    @property
    def T(self) -> "BatchedNVFP4Tensor":
        return replace(self, rowwise=self.columnwise, columnwise=self.rowwise, transposed=not self.transposed)

    def expert(self, g: int) -> NVFP4Tensor:
        """Tensor g as a dense NVFP4Tensor (views of the codes and scales, a copy of the amax)."""
        e, n, k = self.shape
        g = check_int("g", g, 0, e)

        def one(d):
            return None if d is None else _Direction(d.data[g], d.scales[g], _amax(d, g), d.rht)

        t = NVFP4Tensor((n, k), self.dtype, self.block, self.rounding, "swizzled",
                        one(self.columnwise if self.transposed else self.rowwise),
                        one(self.rowwise if self.transposed else self.columnwise), self.rht_sign_mask)
        return t.T if self.transposed else t


def _common_options(rounding, rht, rht_signs, seed, offset, rowwise, columnwise):
    check_choice("rounding", rounding, ROUNDINGS)
    rht_mask = _rht_mask(rht)
    rowwise = check_bool("rowwise", rowwise)
    columnwise = check_bool("columnwise", columnwise)
    if not (rowwise or columnwise):
        raise ValueError("rowwise/columnwise: at least one must be True")
    sign_mask = default_rht_mask() if rht_signs is None else signs_to_mask(rht_signs, "rht_signs")
    if seed is not None:
        seed = check_int("seed", seed, 0, 2**64)
    offset = check_int("offset", offset, 0, 2**64)
    if seed is None:
        seed = int(torch.randint(0, 2**62, (1,)).item()) if rounding == "sr" else 0
    return rht_mask, rowwise, columnwise, sign_mask, seed, offset


def _check_x(x, name, dims):
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in _IN:
        raise TypeError(f"{name}: dtype must be float32, float16 or bfloat16, got {x.dtype}")
    if x.device.type not in ("cpu", "cuda"):
        raise ValueError(f"{name}: device must be cpu or cuda, got {x.device}")
    if x.dim() != dims:
        raise ValueError(f"{name}: must have {dims} dimensions, got shape {tuple(x.shape)}")
    if x.shape[-1] % 16:
        raise ValueError(f"{name}: last dimension must be a multiple of 16, got {x.shape[-1]}")


def _triple(d: _Direction):
    return d.data, d.scales, d.amax


def _dir(t, rht):
    return _Direction(t[0], t[1], t[2], rht)


def grouped_quantize(x: torch.Tensor, offs: torch.Tensor, *, rounding: str = "rtn", rht: Union[bool, str] = False,
                     seed: Optional[int] = None, offset: int = 0, rowwise: bool = True, columnwise: bool = False,
                     rht_signs: Optional[Sequence[int]] = None, check_offs: bool = False) -> GroupedNVFP4Tensor:
    """Quantize the token-sorted x [T, K] (float32/float16/bfloat16, K % 16 == 0) group by group.

    offs: int32 [E] cumulative group ends on x's device (torch._grouped_mm's offs).
    rounding, rht, seed, offset, rowwise, columnwise, rht_signs: as nvfp4.quantize (1D blocks;
    group g draws its stochastic-rounding bits with counter offset ``offset + g * 2**32``).
    check_offs: synchronize and raise ValueError if offs was invalid (always checked on the CPU).
    One set of launches for all groups, no host synchronization unless check_offs.
    """
    rht_mask, rowwise, columnwise, sign_mask, seed, offset = _common_options(rounding, rht, rht_signs, seed, offset,
                                                                             rowwise, columnwise)
    check_offs = check_bool("check_offs", check_offs)
    _check_x(x, "x", 2)
    _ops._check_offs(offs, x)
    q = _ops.grouped_quantize(x, offs, ROUNDINGS[rounding], rht_mask, sign_mask, _signed64(seed), _signed64(offset),
                              None, rowwise, columnwise)
    row = _dir(q[0:3], bool(rht_mask & RHT_ROWWISE)) if rowwise else None
    col = _dir(q[3:6], bool(rht_mask & RHT_COLUMNWISE)) if columnwise else None
    out = GroupedNVFP4Tensor(tuple(x.shape), x.dtype, rounding, row, col, offs, q[6], sign_mask)
    if check_offs:
        out.check_offs()
    return out


def batched_quantize(w: torch.Tensor, *, block: str = "2d", rounding: str = "rtn", rht: Union[bool, str] = False,
                     seed: Optional[int] = None, offset: int = 0, rowwise: bool = True, columnwise: bool = False,
                     rht_signs: Optional[Sequence[int]] = None) -> BatchedNVFP4Tensor:
    """Quantize expert weights w [E, N, K] (N, K multiples of 16) as E tensors: w[g] exactly as
    ``nvfp4.quantize(w[g], ..., offset=offset + g * 2**32)`` (block "2d": 16x16 tiles, the recipe's
    weights; or "1d")."""
    check_choice("block", block, BLOCKS)
    rht_mask, rowwise, columnwise, sign_mask, seed, offset = _common_options(rounding, rht, rht_signs, seed, offset,
                                                                             rowwise, columnwise)
    if rht_mask and block == "2d":
        raise ValueError("rht: the Hadamard transform applies to 1d blocks only")
    _check_x(w, "w", 3)
    if w.shape[1] % 16:
        raise ValueError(f"w: N (dim 1) must be a multiple of 16, got {w.shape[1]}")
    q = _ops.batched_quantize(w, BLOCKS[block], ROUNDINGS[rounding], rht_mask, sign_mask, _signed64(seed),
                              _signed64(offset), None, rowwise, columnwise)
    row = _dir(q[0:3], bool(rht_mask & RHT_ROWWISE)) if rowwise else None
    col = _dir(q[3:6], bool(rht_mask & RHT_COLUMNWISE)) if columnwise else None
    return BatchedNVFP4Tensor(tuple(w.shape), w.dtype, block, rounding, row, col, sign_mask)


def grouped_gemm(a: GroupedNVFP4Tensor, b: Union[BatchedNVFP4Tensor, GroupedNVFP4Tensor],
                 offs: Optional[torch.Tensor] = None, *, out_dtype: torch.dtype = torch.bfloat16,
                 backend: str = "auto", check_offs: bool = False) -> torch.Tensor:
    """The grouped FP4 GEMM, in torch._grouped_mm's two forms:

    - ``grouped_gemm(x, w)``: x a GroupedNVFP4Tensor [T, K] (rowwise), w a BatchedNVFP4Tensor
      [E, N, K] -> [T, N], rows of group g = alpha_g * x̂_g @ ŵ_gᵀ (``torch._grouped_mm(x,
      w.transpose(-2, -1), offs=offs)``); rows of no group are 0. ``w.T`` (the columnwise
      direction, Wᵀ) gives the input gradient dy @ w.
    - ``grouped_gemm(dy.T, x.T)``: both GroupedNVFP4Tensors quantized columnwise with the same
      offs -> [E, N, K], D[g] = alpha_g * dŷ_gᵀ x̂_g over the group's tokens (``torch._grouped_mm(
      dy.t(), x, offs=offs)``); an empty group gives zeros.

    alpha_g = S_dec(a, g) * S_dec(b, g), read on the device. offs defaults to a's (given, it must
    be that tensor). Each group's result equals ``nvfp4.gemm`` of that group's operands (the
    reference backend bit for bit). check_offs: synchronize and raise if offs was invalid.
    """
    if not isinstance(a, GroupedNVFP4Tensor):
        raise TypeError(f"a: expected a GroupedNVFP4Tensor, got {type(a).__name__}")
    if not isinstance(b, (BatchedNVFP4Tensor, GroupedNVFP4Tensor)):
        raise TypeError(f"b: expected a BatchedNVFP4Tensor or GroupedNVFP4Tensor, got {type(b).__name__}")
    check_choice("backend", backend, BACKENDS)
    out_dtype = check_dtype("out_dtype", out_dtype, _OUT)
    check_offs = check_bool("check_offs", check_offs)
    if offs is not None and offs is not a.offs:
        _ops._check_offs(offs, a.offs)
        if offs.data_ptr() != a.offs.data_ptr():
            raise ValueError("offs: must be the offs a was quantized with (the grouped layout depends on it)")
    if b.device != a.device:
        raise ValueError(f"b: on {b.device}, but a is on {a.device}")
    check_backend(backend, a.device)
    t, k_a = a.shape
    e = a.groups
    if isinstance(b, BatchedNVFP4Tensor):
        if a.transposed or a.rowwise is None:
            raise ValueError("a: the ragged-M form needs a's rowwise direction (quantize with rowwise=True, "
                             "do not pass .T)")
        if b.rowwise is None:
            raise ValueError("b: has no direction along K here (quantize w with rowwise=True, or columnwise=True "
                             "for w.T)")
        if b.shape[0] != e:
            raise ValueError(f"b: {b.shape[0]} tensors for {e} groups")
        kb = b.rowwise.data.shape[2] * 2
        n = b.rowwise.data.shape[1]
        if kb != k_a:
            raise ValueError(f"b: K mismatch: a has K={k_a}, b has K={kb}")
        if a.rowwise.rht or b.rowwise.rht:
            raise ValueError("b: the Hadamard transform along K must be on both operands or neither; grouped "
                             "rowwise operands are quantized without it")
        d, err = _ops.grouped_gemm(_ops.RAGGED_M, _triple(a.rowwise), _triple(b.rowwise), a.offs, t, n, k_a,
                                   BACKENDS[backend], out_dtype)
    else:
        if not (a.transposed and b.transposed) or a.rowwise is None or b.rowwise is None:
            raise ValueError("a/b: the ragged-K (weight-gradient) form takes dy.T and x.T, both quantized with "
                             "columnwise=True")
        if b.offs is not a.offs and b.offs.data_ptr() != a.offs.data_ptr():
            raise ValueError("b: quantized with another offs than a")
        if b.shape[0] != t:
            raise ValueError(f"b: {b.shape[0]} tokens, a has {t}")
        if a.rowwise.rht != b.rowwise.rht or (a.rowwise.rht and a.rht_sign_mask != b.rht_sign_mask):
            raise ValueError("b: the Hadamard transform along the tokens must be on both operands with the same "
                             "signs, or on neither")
        n, k = a.shape[1], b.shape[1]
        d, err = _ops.grouped_gemm(_ops.RAGGED_K, _triple(a.rowwise), _triple(b.rowwise), a.offs, t, n, k,
                                   BACKENDS[backend], out_dtype)
    if check_offs:
        _raise_offs(err)
    return d
