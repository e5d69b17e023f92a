"""The Linear layer's device work as torch custom ops (namespace ``nvfp4``).

torch.compile cannot trace into the compiled extension, and custom ops cannot return an
NVFP4Tensor, so each op takes and returns plain tensors: one quantized orientation is the
triple (data uint8 [rows, width/2], scales float8_e4m3fn in the 128x4 swizzled layout,
amax float32 [1]). Every op allocates its outputs (no mutation), and each has a fake kernel
that only computes shapes, so a converted model compiles with fullgraph=True.

- ``nvfp4::quantize``: rowwise and/or columnwise quantization of a 2D tensor. The SR offset
  is a CPU int64 tensor so that a step counter changing every step does not recompile.
- ``nvfp4::quantize_weight``: the same for a weight, memoized per layer until the weight
  changes (its version counter or storage) or any optimizer steps.
- ``nvfp4::gemm``: alpha * (Â @ B̂ᵀ) (+ bias) of two rowwise triples.
"""
from __future__ import annotations

import itertools
import threading
import weakref
from typing import List, Optional, Tuple

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from .. import _gemm, _quantize
from .._format import BLOCKS, RHT_COLUMNWISE, RHT_ROWWISE, ROUNDINGS, mask_to_signs
from .._tensor import NVFP4Tensor, _Direction

__all__ = ["quantize", "quantize_weight", "gemm", "unpack", "pack", "new_cache_slot", "invalidate_weight_caches",
           "weight_generation", "BLOCK", "ROUNDING"]

BLOCK = BLOCKS
ROUNDING = ROUNDINGS
_BLOCK_NAME = {v: k for k, v in BLOCK.items()}
_ROUNDING_NAME = {v: k for k, v in ROUNDING.items()}
_RHT_ARG = {0: False, RHT_ROWWISE: "rowwise", RHT_COLUMNWISE: "columnwise", RHT_ROWWISE | RHT_COLUMNWISE: True}

Six = Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


def _empty_dir(like: torch.Tensor):
    return (like.new_empty((0,), dtype=torch.uint8), like.new_empty((0,), dtype=torch.float8_e4m3fn),
            like.new_empty((0,), dtype=torch.float32))


def _run_quantize(x, block, rounding, rht, sign_mask, seed, offset, rowwise, columnwise) -> Six:
    q = _quantize.quantize(x, block=_BLOCK_NAME[block], rounding=_ROUNDING_NAME[rounding], rht=_RHT_ARG[rht],
                           seed=seed, offset=offset, rowwise=rowwise, columnwise=columnwise,
                           scale_layout="swizzled", rht_signs=mask_to_signs(sign_mask))
    row = (q.data, q.scales, q.amax) if rowwise else _empty_dir(x)
    col = (q.data_t, q.scales_t, q.amax_t) if columnwise else _empty_dir(x)
    return (*row, *col)


def _fake_quantize(x, rowwise, columnwise) -> Six:
    # The same allocation as nvfp4.quantize (one definition of the output shapes); under
    # fake tensor mode it makes fake tensors.
    rows, cols = x.shape

    def alloc(r, c):
        data, scales, amax = _quantize._alloc_direction(r, c, "swizzled", x.device)
        return data, scales.view(torch.float8_e4m3fn), amax

    row = alloc(rows, cols) if rowwise else _empty_dir(x)
    col = alloc(cols, (rows + 15) // 16 * 16) if columnwise else _empty_dir(x)
    return (*row, *col)


# ------------------------------------------------------------------------------ quantize
@torch.library.custom_op("nvfp4::quantize", mutates_args=())
def _quantize_op(x: torch.Tensor, block: int, rounding: int, rht: int, sign_mask: int, seed: int,
                 offset: torch.Tensor, rowwise: bool, columnwise: bool) -> List[torch.Tensor]:
    return list(_run_quantize(x.contiguous(), block, rounding, rht, sign_mask, seed, int(offset.item()),
                              rowwise, columnwise))


@_quantize_op.register_fake
def _(x, block, rounding, rht, sign_mask, seed, offset, rowwise, columnwise):
    return list(_fake_quantize(x, rowwise, columnwise))


def quantize(x: torch.Tensor, block: str = "1d", rounding: str = "rtn", rht: int = 0, sign_mask: int = 0,
             seed: int = 0, offset: Optional[torch.Tensor] = None, rowwise: bool = True,
             columnwise: bool = False) -> Six:
    """Quantize a 2D tensor; returns (data, scales, amax, data_t, scales_t, amax_t), the
    absent orientation as empty tensors. rht is a bit mask (1 rowwise, 2 columnwise)."""
    if offset is None:
        offset = torch.zeros((), dtype=torch.int64)
    return tuple(torch.ops.nvfp4.quantize(x, BLOCK[block], ROUNDING[rounding], int(rht), int(sign_mask), int(seed),
                                          offset, bool(rowwise), bool(columnwise)))


# ------------------------------------------------------------------------------ cached weight quantization
class _Slot:
    __slots__ = ("key", "value")

    def __init__(self):
        self.key = None
        self.value = None


_slots: dict = {}
_slot_ids = itertools.count(1)
_lock = threading.Lock()
_generation = [0]


def new_cache_slot(owner) -> int:
    """A cache slot for one layer's quantized weight, dropped when `owner` is collected."""
    sid = next(_slot_ids)
    with _lock:
        _slots[sid] = _Slot()
    weakref.finalize(owner, _slots.pop, sid, None)
    return sid


def invalidate_weight_caches() -> None:
    """Forget every cached weight quantization. Optimizer steps do this by themselves (a
    global step hook); call it after changing weights outside an optimizer through .data,
    which bypasses the version counter."""
    _generation[0] += 1


def weight_generation() -> int:
    return _generation[0]


def _on_optimizer_step(optimizer, args, kwargs):
    # FSDP2 refills unsharded weights in place while preserving their version counters, so
    # the version alone cannot tell that a weight changed; every real update goes through
    # an optimizer step, which this hook observes.
    _generation[0] += 1


register_optimizer_step_post_hook(_on_optimizer_step)


@torch.library.custom_op("nvfp4::quantize_weight", mutates_args=())
def _quantize_weight_op(w: torch.Tensor, slot: int, block: int, sign_mask: int, rowwise: bool, columnwise: bool,
                        fresh: bool) -> List[torch.Tensor]:
    key = (w.data_ptr(), w._version, _generation[0], tuple(w.shape), w.dtype, w.device, block, sign_mask)
    with _lock:
        s = _slots.get(slot)
        if s is None:  # a slot id copied from a collected layer: still correct, just uncached
            s = _slots[slot] = _Slot()
    hit = s.key == key and s.value is not None and (not rowwise or s.value[0].numel() > 0) and \
        (not columnwise or s.value[3].numel() > 0)
    if not hit:
        # Produce both orientations whenever one is needed in training: the backward pass of
        # the same step then finds the columnwise one already there.
        want_row = rowwise or (s.key == key and s.value is not None and s.value[0].numel() > 0)
        want_col = columnwise or (s.key == key and s.value is not None and s.value[3].numel() > 0)
        value = _run_quantize(w.contiguous(), block, 0, 0, sign_mask, 0, 0, want_row, want_col)
        s.key, s.value = key, value
    value = s.value
    out = list(value[:3]) if rowwise else list(_empty_dir(w))
    out += list(value[3:]) if columnwise else list(_empty_dir(w))
    # Outputs of a compiled graph may have their memory reused by the compiler once dead,
    # so a compiled caller gets copies, never the cache's own tensors.
    return [t.clone() for t in out] if fresh else out


@_quantize_weight_op.register_fake
def _(w, slot, block, sign_mask, rowwise, columnwise, fresh):
    return list(_fake_quantize(w, rowwise, columnwise))


def quantize_weight(w: torch.Tensor, slot: int, block: str = "2d", sign_mask: int = 0, rowwise: bool = True,
                    columnwise: bool = False) -> Six:
    """Round-to-nearest quantization of a 2D weight, memoized in `slot` (new_cache_slot)."""
    fresh = bool(torch.compiler.is_compiling())
    return tuple(torch.ops.nvfp4.quantize_weight(w.detach(), int(slot), BLOCK[block], int(sign_mask), bool(rowwise),
                                                 bool(columnwise), fresh))


# ------------------------------------------------------------------------------ gemm
def pack(data: torch.Tensor, scales: torch.Tensor, amax: torch.Tensor, rht: bool = False,
         sign_mask: int = 0) -> NVFP4Tensor:
    """An NVFP4Tensor (rowwise only) around one quantized orientation."""
    rows, width = data.shape[0], data.shape[1] * 2
    return NVFP4Tensor((rows, width), torch.float32, "1d", "rtn", "swizzled",
                       _Direction(data, scales, amax, rht), None, sign_mask)


def unpack(q: NVFP4Tensor) -> Six:
    """The raw tensors of an NVFP4Tensor with swizzled scales (absent sides empty)."""
    if q.scale_layout != "swizzled":
        raise ValueError("q: needs the swizzled scale layout")
    like = (q.rowwise or q.columnwise).data
    row = (q.data, q.scales, q.amax) if q.rowwise is not None else _empty_dir(like)
    col = (q.data_t, q.scales_t, q.amax_t) if q.columnwise is not None else _empty_dir(like)
    return (*row, *col)


@torch.library.custom_op("nvfp4::gemm", mutates_args=())
def _gemm_op(a_data: torch.Tensor, a_scales: torch.Tensor, a_amax: torch.Tensor, b_data: torch.Tensor,
             b_scales: torch.Tensor, b_amax: torch.Tensor, backend: str, out_dtype: torch.dtype,
             bias: Optional[torch.Tensor]) -> torch.Tensor:
    return _gemm.gemm(pack(a_data, a_scales, a_amax), pack(b_data, b_scales, b_amax), backend=backend,
                      out_dtype=out_dtype, bias=bias)


@_gemm_op.register_fake
def _(a_data, a_scales, a_amax, b_data, b_scales, b_amax, backend, out_dtype, bias):
    return a_data.new_empty((a_data.shape[0], b_data.shape[0]), dtype=out_dtype)


def gemm(a, b, backend: str = "auto", out_dtype: torch.dtype = torch.bfloat16,
         bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """alpha * (Â @ B̂ᵀ) (+ bias) for two rowwise triples (data, scales, amax): [rows_a, rows_b]."""
    return torch.ops.nvfp4.gemm(a[0], a[1], a[2], b[0], b[1], b[2], backend, out_dtype, bias)
