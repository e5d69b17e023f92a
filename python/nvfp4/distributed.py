"""Sharded training that moves NVFP4 weights: FSDP2 (``fully_shard``) all-gathers each
converted Linear's weight as E2M1 codes and E4M3 scales instead of BF16/FP32 values.

    import nvfp4.distributed as nd
    nvfp4.convert(model, recipe)
    nd.enable_fp4_all_gather(model)          # before fully_shard and before building the optimizer
    for block in model.blocks: fully_shard(block)
    fully_shard(model)

How one weight W [N, K] travels (docs/design.md, "FSDP2: the FP4 weight all-gather"):

1. The per-tensor amax: every rank takes max |W_shard| of each converted weight of the FSDP
   unit being gathered (one foreach reduction for the unit); one all-reduce (MAX, on the
   amaxes' float bits: a NaN wins, as in one process) per unit and forward gather gives the
   global amaxes (on one rank there is nothing to reduce).
2. Each rank quantizes its shard with the global amax, in 16x16 tiles (the recipe's 2D
   weight blocks), straight into the all-gather input (one kernel, nvfp4.h's gather rows).
   FSDP2 shards rows in chunks of ceil(N / world); when the chunk is a multiple of 16 rows
   every tile lies inside one shard, so the tiles and their scales are the ones a single
   process computes. A chunk that cuts a tile is refused by name.
3. The all-gather moves, per shard row, K/2 code bytes and K/16 scale bytes (scales in the
   linear layout: the 128x4 swizzle does not split on 16-row boundaries); 0.5625 bytes per
   weight element against 2 for BF16 (0.28x) or 4 for FP32.
4. After the gather one kernel writes, into one buffer laid out as nvfp4.nn.Linear's weight
   cache, W's codes and swizzled scales and, when the backward needs it, Wᵀ for dgrad (with
   16x16 tiles the columnwise quantization is the transpose of the rowwise one): one read of
   the gathered rows. The Linear's forward reads the buffer (no quantization of W) and saves
   Wᵀ for backward.

A unit that FSDP2 reshards after forward is gathered again for its backward. That gather
moves the rows its forward gather quantized (kept per layer, 0.5625 / world bytes an
element): the backward uses the weight the forward used, as nvfp4.nn.Linear without FSDP
keeps the forward's Wᵀ, with no second amax all-reduce or quantization. Every forward
gather quantizes the master weight afresh, so a change to it (an optimizer step, `.data`
edits, load_state_dict) is seen by the next forward.

Gradients are reduce-scattered by FSDP2 as for any parameter (BF16/FP32). The weight is
quantized from the sharded master weight (FP32 under a BF16 MixedPrecisionPolicy), so the
gathered weight is bit for bit the one a single process quantizes from the same master
weight.

Not covered: on Linear layers the 1x16 weight recipes (``no_2d``, ``fp4_all_the_way``:
their Wᵀ is not a transpose of W's codes), the MXFP4 and double-quantization recipes,
layers whose forward needs the dense weight (``fwd_only``'s BF16 dgrad, ``set_precision(.., "bf16")``): they are
refused by name; leave them out with ``exclude``. DDP needs nothing of this: every rank
holds the whole weight and quantizes it locally.

GroupedLinear (MoE experts, one weight [E, N, K]) gathers in NVFP4 too, more simply: FSDP2
shards dim 0, so with E a multiple of the world size each rank holds whole experts, and each
expert is quantized with its own amax (as GroupedLinear's forward does), so no all-reduce.
Each rank quantizes its experts both ways (W, and Wᵀ for dgrad: 2 x 0.5625 bytes an element,
0.56x of BF16) with the forward's own kernel; the gathered slices, in rank order, are the
batched quantization of all experts, which the layer's forward then reads. Ranks check once
that they share the layer's configuration (one host read at the first gather). Fused experts
(GroupedExperts, Hugging Face's MoE layout) gather both projections the same way; their
transposed layout (gpt-oss) is refused by name.
"""
from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import hashlib
import math
import threading
import weakref
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
import torch.utils._pytree as pytree
from torch import nn

from . import _ops
from .nn import _passes
from .nn import _grouped_passes
from .nn.grouped import GroupedExperts, GroupedLinear
from .nn.linear import Linear
from .nn.recipe import Recipe

__all__ = ["enable_fp4_all_gather", "disable_fp4_all_gather", "fp4_all_gather_layers", "gather_layout",
           "quantize_shard", "assemble_gathered", "nibble_transpose", "gathered_weight_cache", "CommCounter",
           "count_collectives", "fp4_gather_refusal"]

TILE = 16  # rows (and columns) of a 2D weight tile


# ------------------------------------------------------------------------------ layout (pure functions)
@dataclass(frozen=True)
class GatherLayout:
    """How a weight [n, k] is sharded by FSDP2 over `world` ranks (torch.chunk on dim 0) and
    what each rank all-gathers."""

    n: int
    k: int
    world: int
    chunk: int      # rows per rank (the last ranks may hold fewer, or none)
    in_cols: int    # bytes per row of the all-gather input
    uneven: bool    # n != chunk * world: FSDP2 then wants every all-gather input [chunk, k]

    @property
    def code_bytes(self) -> int:
        return self.k // 2

    @property
    def scale_bytes(self) -> int:
        return self.k // 16

    def rows_of(self, rank: int) -> Tuple[int, int]:
        start = min(self.n, rank * self.chunk)
        return start, min(self.n, start + self.chunk) - start

    @property
    def bytes_per_rank(self) -> int:
        return self.chunk * self.in_cols


def gather_layout(n: int, k: int, world: int, name: str = "weight") -> GatherLayout:
    """The layout of an FP4 all-gather of a weight [n, k] over `world` ranks; ValueError
    (naming the layer) if a shard boundary cuts a 16x16 tile."""
    if n % TILE or k % TILE:
        raise ValueError(f"{name}: a weight of shape [{n}, {k}] is not made of 16x16 tiles")
    if world < 1:
        raise ValueError(f"world: must be >= 1, got {world}")
    chunk = -(-n // world)
    if chunk % TILE:
        raise ValueError(
            f"{name}: FP4 all-gather of a [{n}, {k}] weight over {world} ranks: FSDP2 shards it in chunks of "
            f"{chunk} rows, which cut the 16x16 weight tiles (an exact FP4 gather needs chunks of a multiple of "
            f"16 rows, ceil({n} / world) % 16 == 0); leave this layer out "
            f"(enable_fp4_all_gather(model, exclude=[...])) or use another world size")
    uneven = n != chunk * world
    row = k // 2 + k // 16
    # FSDP2 requires all-gather inputs of the padded shard's size [chunk, k] when it pads;
    # the FP4 row then travels in k bytes instead of 0.5625 k.
    return GatherLayout(n, k, world, chunk, k if uneven else row, uneven)


def nibble_transpose(codes: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Packed E2M1 codes [n, k/2] of W (rows may be strided) -> packed codes [k, n/2] of Wᵀ
    (n even), into `out` if given. Element 2i of a row is the low nibble of byte i. Torch ops
    only: the reference that tests hold the library's transpose (assemble_gathered) to."""
    n, kh = codes.shape
    if out is None:
        out = torch.empty((2 * kh, n // 2), dtype=torch.uint8, device=codes.device)
    d = codes.view(n // 2, 2, kh)
    lo, hi = d[:, 0, :], d[:, 1, :]   # rows 2p and 2p+1
    o = out.view(kh, 2, n // 2)       # Wᵀ rows 2q and 2q+1
    even = (lo & 0x0F) | (hi << 4)    # a uint8 shift drops the high nibble
    odd = (lo >> 4) | (hi & 0xF0)
    # Wᵀ[2q, p] = W[2p, 2q] | W[2p+1, 2q] << 4;  Wᵀ[2q+1, p] = W[2p, 2q+1] | W[2p+1, 2q+1] << 4
    o[:, 0, :].copy_(even.t())
    o[:, 1, :].copy_(odd.t())
    return out


def quantize_shard(local: torch.Tensor, amax: torch.Tensor, layout: GatherLayout,
                   out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The all-gather input of one rank: its rows of W (`local` [rows, k], rows <= chunk, a
    multiple of 16) quantized in 16x16 tiles with the weight's global `amax` (float32 [1]),
    as uint8 [chunk, in_cols] (into `out` if given): per row K/2 code bytes then K/16 linear
    scale bytes; rows past `rows` and bytes past the scales are zero. One kernel
    (nvfp4_gather_rows_quantize)."""
    rows, k = local.shape
    if rows % TILE or rows > layout.chunk or k != layout.k:
        raise ValueError(f"local: a shard of shape [{rows}, {k}] does not fit the layout {layout}")
    if out is None:
        out = torch.empty((layout.chunk, layout.in_cols), dtype=torch.uint8, device=local.device)
    return _ops.gather_rows_quantize(local, amax, out)


def assemble_gathered(gathered: torch.Tensor, amax: torch.Tensor, layout: GatherLayout, buf: torch.Tensor,
                      transpose: bool = True) -> torch.Tensor:
    """Writes the gathered rows (uint8 [>= n, in_cols]) into `buf` in the layout of
    nvfp4.nn.Linear's weight cache: W rowwise (codes, swizzled scales, amax) and, with
    `transpose`, Wᵀ quantized along N (the transposed codes and scales, the same amax). One
    kernel, one read of the rows (nvfp4_gather_rows_assemble)."""
    return _ops.gather_rows_assemble(gathered, amax, layout.n, layout.k, buf, transpose)


# ------------------------------------------------------------------------------ which layers
def fp4_gather_refusal(module: nn.Module) -> Optional[str]:
    """Why this layer's weight cannot travel in FP4 (None: it can)."""
    experts = isinstance(module, (GroupedLinear, GroupedExperts))
    if not experts and not isinstance(module, Linear):
        return f"a {type(module).__name__}, not an nvfp4.nn.Linear, GroupedLinear or GroupedExperts"
    if getattr(module, "is_transposed", False):
        return ("its experts' weights are stored transposed ([E, in, out], read through a transposed copy each "
                "forward); the FP4 gather quantizes [E, out, in] weights")
    r: Recipe = module.recipe
    if not r.quantized:
        return f"recipe {r.name!r} runs in the compute dtype"
    if not r.fused:
        return f"recipe {r.name!r} has MXFP4 or double-quantized operands (per-operand path)"
    if not experts and r.w.block != "2d":  # expert layers gather W and Wᵀ both, any block
        return (f"recipe {r.name!r} quantizes W in 1x16 blocks: Wᵀ (dgrad) is not the transpose of W's codes, "
                f"it would need a second gather")
    if not r.fprop or not r.dgrad:
        return f"recipe {r.name!r} runs fprop or dgrad in the compute dtype, which needs the dense weight"
    if getattr(module, "precision", "nvfp4") != "nvfp4":
        return f"the layer runs at precision {module.precision!r} (set_precision), which needs the dense weight"
    if getattr(module, "weight_reuse", None) is not None:
        return "weight_reuse is set: the gathered weight is already quantized once per gather"
    return None


def _gather_params(module: nn.Module) -> Tuple[str, ...]:
    """The parameters an FP4 gather replaces, for the layer types that support it (the
    extension point for other layers): a Linear's or GroupedLinear's weight, the two
    projections of fused experts."""
    if isinstance(module, (Linear, GroupedLinear)):
        return ("weight",)
    if isinstance(module, GroupedExperts):
        return ("gate_up_proj" if "gate_up_proj" in module._parameters else "up_proj", "down_proj")
    return ()


def _shapes(m: nn.Module) -> tuple:
    return tuple(tuple(getattr(m, p).shape) for p in _gather_params(m))


def _experts_cfg(module: nn.Module):
    """The LinearConfig list the layer's forward quantizes its expert weights with (fused
    experts have one plan per projection; they differ in their seeds only, which W's
    round-to-nearest quantization does not read)."""
    plan = module._plan
    return (plan[0] if isinstance(plan, tuple) else plan).cfg


def _fingerprint(layers: Sequence[nn.Module]) -> int:
    """The configuration of a unit's layers that every rank must share (their recipes
    without the seed: ranks draw their own stochastic-rounding bits; precision and shape),
    as a 48-bit integer."""
    key = repr([(dataclasses.replace(m.recipe, seed=0), m.precision, _shapes(m)) for m in layers])
    return int.from_bytes(hashlib.sha1(key.encode()).digest()[:6], "little")


# ------------------------------------------------------------------------------ the amax all-reduce, batched per unit
class _Registry:
    """The converted layers of one model (enable_fp4_all_gather) and, once FSDP2 has
    wrapped it, the FSDP unit each of them is gathered with."""

    def __init__(self, root: nn.Module, layers: Dict[nn.Module, str]):
        self.root = weakref.ref(root)
        self.layers = weakref.WeakKeyDictionary(layers)
        self.unit_of: Optional[weakref.WeakKeyDictionary] = None
        self.unit_module: Dict[int, Optional[nn.Module]] = {}  # id(group) -> the FSDP module gathering it
        self.rounds: Dict[int, int] = {}  # unit id -> gathers so far (checked on the first)
        self._heads: Dict[int, Tuple[tuple, torch.Tensor]] = {}
        self._fingerprints: Dict[int, tuple] = {}
        # per layer: the all-gather input its last forward gather quantized (_Shard)
        self.shards = weakref.WeakKeyDictionary()
        # GroupedLinear layers gathering in FP4 (not in `layers`: no amax all-reduce, no units)
        self.experts = weakref.WeakKeyDictionary()
        self.experts_checked = weakref.WeakKeyDictionary()  # layer -> True once ranks agreed
        self._expert_fp: Dict[int, Tuple[tuple, torch.Tensor]] = {}

    def expert_fingerprint(self, module: nn.Module, dev: torch.device) -> torch.Tensor:
        """int64 [1] on the device: _fingerprint([module]), kept per layer and remade only
        when its recipe object, precision or shape changed."""
        key = (id(module.recipe), module.precision, _shapes(module), dev)
        got = self._expert_fp.get(id(module))
        if got is None or got[0] != key:
            t = torch.empty((1,), dtype=torch.int64, device=dev)
            t.fill_(_fingerprint([module]))
            got = self._expert_fp[id(module)] = (key, t, module.recipe)
        return got[1]

    def head(self, unit: int, refused: int, fp: int, dev: torch.device) -> torch.Tensor:
        """int64 [refused, fingerprint, -fingerprint] on the device, kept per unit: a tensor
        built from host values would be a synchronizing copy on every gather."""
        key = (refused, fp, dev)
        got = self._heads.get(unit)
        if got is None or got[0] != key:
            t = torch.empty((3,), dtype=torch.int64, device=dev)
            for i, v in enumerate((refused, fp, -fp)):
                t[i].fill_(v)
            got = self._heads[unit] = (key, t)
        return got[1]

    def fingerprint(self, unit: int, group: Sequence[nn.Module]) -> int:
        """_fingerprint(group), recomputed only when a layer's recipe object, precision or
        shape changed (the recipes are kept referenced, so their ids stay theirs)."""
        key = tuple((id(m.recipe), m.precision, tuple(m.weight.shape)) for m in group)
        got = self._fingerprints.get(unit)
        if got is None or got[0] != key:
            got = self._fingerprints[unit] = (key, _fingerprint(group), [m.recipe for m in group])
        return got[1]

    def units(self) -> weakref.WeakKeyDictionary:
        if self.unit_of is None:
            from torch.distributed.fsdp import FSDPModule

            root = self.root()
            if root is None:
                raise RuntimeError("enable_fp4_all_gather: the model it was called on no longer exists")
            unit_of: Dict[nn.Module, List[nn.Module]] = {}
            groups: Dict[int, List[nn.Module]] = {}

            # FSDP2 gathers a parameter with the innermost fully_shard'ed module above it
            # (fully_shard is applied bottom-up; the root takes what is left).
            def visit(m, unit):
                if isinstance(m, FSDPModule):
                    unit = m
                if m in self.layers and m not in unit_of:
                    g = groups.setdefault(id(unit), [])
                    g.append(m)
                    unit_of[m] = g
                    self.unit_module[id(g)] = unit
                for c in m.children():
                    visit(c, unit)

            visit(root, None)
            self.unit_of = weakref.WeakKeyDictionary(unit_of)
        return self.unit_of


@dataclass
class _Shard:
    """A layer's all-gather input as its last forward gather quantized it, with the global
    amax it was quantized with."""

    q: torch.Tensor        # uint8 [chunk, in_cols]
    amax: torch.Tensor     # float32 [1]
    layout: GatherLayout


class _Round(threading.local):
    """The unit being gathered: its amaxes (or, for a backward gather, the forward's shards)
    settled when FSDP2 asks for the first weight of the unit, handed to the others of the
    same unit in the same all-gather. FSDP2 builds a unit's all-gather inputs one parameter
    after the other, so any other order means the units were guessed wrong: refused, never
    a stale amax."""

    def __init__(self):
        self.group: Optional[List[nn.Module]] = None
        self.pending: Dict[int, Optional[torch.Tensor]] = {}  # id(layer) -> amax, or None: reuse its shard


_ROUND = _Round()

# float32 bits of a quiet NaN: the amax of a unit whose ranks disagree
_NAN_BITS = 0x7FC00000


def _local_shard(module: nn.Module, device: torch.device) -> torch.Tensor:
    w = module.weight
    local = getattr(w, "_local_tensor", w)
    if isinstance(local, _ShardWeight):
        local = local._inner
    return local.to(device, non_blocking=True) if local.device != device else local


def _global_amaxes(registry: _Registry, group: List[nn.Module], caller: nn.Module, caller_local: torch.Tensor,
                   mesh) -> Dict[int, torch.Tensor]:
    """One all-reduce (MAX) over the shard group of int64 values: per layer the float32 bits
    of max |W_shard| (for magnitudes the order of the bits is the order of the values, and a
    NaN lies above +inf: a NaN anywhere wins, as in one process), and per unit a refusal
    flag and the configuration fingerprint and its negation (max and min in one
    reduction)."""
    dev = caller_local.device
    L = len(group)
    locals_, refused = [], []
    for m in group:
        locals_.append((caller_local if m is caller else _local_shard(m, dev)).detach())
        refused.append(fp4_gather_refusal(m))
    key = id(group)
    first = registry.rounds.get(key, 0) == 0
    names = [registry.layers.get(m, "?") for m in group]
    mine = [f"{n}: {w}" for n, w in zip(names, refused) if w]
    if mine and not first:
        # a layer changed after the first gather (a recipe or precision switch): named here;
        # ranks that changed alike stop alike
        raise ValueError("fp4_all_gather: a layer can no longer take its weight in FP4: " + "; ".join(mine))
    head = registry.head(key, 1 if any(refused) else 0, registry.fingerprint(key, group), dev)
    if all(t.numel() for t in locals_):
        norms = torch._foreach_norm(locals_, float("inf"), dtype=torch.float32)
    else:  # a rank without rows of some weight (uneven shards): its amax is 0
        norms = [t.abs().amax().float() if t.numel() else torch.zeros((), device=dev) for t in locals_]
    bits = torch.stack(norms).view(torch.int32).to(torch.int64) & 0x7FFFFFFF
    vec = torch.cat([bits, head])
    if mesh.size() > 1:  # one rank: its amaxes are the global ones
        dist.all_reduce(vec, op=dist.ReduceOp.MAX, group=mesh.get_group())
    registry.rounds[key] = registry.rounds.get(key, 0) + 1
    if first:
        # Read once per unit, on every rank alike (the same gather on every rank), so that a
        # misconfiguration is a named error on all ranks and never a hang.
        v = vec[L:].tolist()
        if v[0] > 0:
            raise ValueError("fp4_all_gather: a layer cannot take its weight in FP4 on "
                             + ("this rank: " + "; ".join(mine) if mine else "another rank")
                             + " (leave it out with enable_fp4_all_gather(model, exclude=[...]))")
        if v[1] != -v[2]:
            raise ValueError(f"fp4_all_gather: the ranks disagree on the recipes of layers {names} (a recipe may "
                             "differ across ranks in its seed only)")
    # Later gathers are not read on the host (no synchronization): a refusal or a
    # disagreement between ranks that appears later (max refused > 0, or max fingerprint >
    # min fingerprint: the three sum to more than 0) makes the amaxes NaN, so the weights
    # decode to NaN, never to numbers quantized with another rank's scale.
    bad = vec[L:].sum() > 0
    out = torch.where(bad, _NAN_BITS, vec[:L]).to(torch.int32).view(torch.float32)
    return {id(m): out[i:i + 1] for i, m in enumerate(group)}


def _fsdp_phase(registry: _Registry, module: nn.Module) -> str:
    """Which gather of the layer's unit this is, from FSDP2's own state of the unit:
    "forward_resharded" (a forward gather of a unit that FSDP2 reshards after forward: its
    backward gathers the weight again, into the same storage, before any backward op of the
    unit runs, so the forward needs W only), "backward" (that second gather), or "other".
    Anything unexpected (another torch, another setup) is "other": Wᵀ is built and the shard
    quantized afresh."""
    try:
        from torch.distributed.fsdp._fully_shard._fsdp_common import TrainingState

        unit = registry.unit_module.get(id(registry.units().get(module)))
        state = unit._get_fsdp_state()
        groups = getattr(state, "_fsdp_param_groups", None)
        if groups is None:
            groups = [g for g in [state._fsdp_param_group] if g is not None]
        mine = [g for g in groups if any(p._module_info.module is module for p in g.fsdp_params)]
        if len(mine) != 1:
            return "other"
        g = mine[0]
        resharded = g.post_forward_mesh_info is not None and g.post_forward_mesh_info == g.mesh_info
        if g._training_state == TrainingState.FORWARD and resharded:
            return "forward_resharded"
        if g._training_state == TrainingState.PRE_BACKWARD and resharded:
            return "backward"
        return "other"
    except Exception:
        return "other"


def _gather_input(registry: _Registry, module: nn.Module, local: torch.Tensor, mesh, layout: GatherLayout,
                  backward: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    """(all-gather input, global amax) of one layer. A forward gather (anything but a
    backward one) quantizes the shard with the amaxes of its unit's all-reduce; a backward
    gather of a unit whose layers all kept their forward shard for this layout moves those
    again (no collective: every rank decides alike, from the same history)."""
    group = registry.units().get(module)
    if group is None:
        raise RuntimeError(f"fp4_all_gather: layer {registry.layers.get(module, '?')} is gathered by FSDP2 but was "
                           "not found under the model enable_fp4_all_gather was called on (a deep copy of such a model? "
                           "copy the model before enabling the FP4 gather, then enable it on each copy)")
    st = _ROUND
    if st.group is not None:
        if st.group is not group or id(module) not in st.pending:
            st.group, st.pending = None, {}
            raise RuntimeError(f"fp4_all_gather: FSDP2 gathered layer {registry.layers.get(module, '?')} in another "
                               "order than its units suggest (fully_shard applied top-down?); apply fully_shard to "
                               "the blocks first, then to the root")
    else:
        try:
            # every layer of the unit checked before any collective: a refusal is raised on
            # every rank alike, before anyone waits for the others
            layouts = {id(m): gather_layout(*m.weight.shape, mesh.size(), registry.layers.get(m, "?")) for m in group}
            kept = [registry.shards.get(m) for m in group] if backward else []
            if backward and all(s is not None and s.layout == layouts[id(m)] and s.q.device == local.device
                                for s, m in zip(kept, group)):
                st.pending = {id(m): None for m in group}
            else:
                st.pending = _global_amaxes(registry, group, module, local, mesh)
        except BaseException:
            st.group, st.pending = None, {}
            raise
        st.group = group
    amax = st.pending.pop(id(module))
    if not st.pending:
        st.group = None
    if amax is None:
        s = registry.shards[module]
        return s.q, s.amax
    s = registry.shards.get(module)
    # the buffer of the last forward gather is rewritten in place: every read of it (the
    # all-gather copy-in of the previous backward) precedes this step's work in stream order
    q = s.q if s is not None and s.layout == layout and s.q.device == local.device else None
    q = quantize_shard(local.detach(), amax, layout, out=q)
    registry.shards[module] = _Shard(q, amax, layout)
    return q, amax


# ------------------------------------------------------------------------------ the tensor subclasses
_PRESERVE = {
    # what FSDP2 does to the sharded weight (chunk, pad, narrow, view, move, pin) keeps it a
    # _ShardWeight, so that FSDP2 finds the all-gather hooks on its local shard
    torch.ops.aten.new_zeros.default, torch.ops.aten.slice.Tensor, torch.ops.aten.view.default,
    torch.ops.aten.as_strided.default, torch.ops.aten._to_copy.default, torch.ops.aten._pin_memory.default,
    torch.ops.aten.split.Tensor, torch.ops.aten.clone.default, torch.ops.aten.alias.default,
    torch.ops.aten.detach.default, torch.ops.aten.narrow.default, torch.ops.aten._unsafe_view.default,
    torch.ops.aten.empty_like.default,  # Module.to_empty (FSDP2's meta-device initialization)
}


class _ShardWeight(torch.Tensor):
    """An nvfp4.nn.Linear's master weight (or FSDP2's shard of it) that FSDP2 all-gathers in
    NVFP4. It behaves as its inner tensor for every op (optimizers, state_dict, .to());
    only FSDP2's all-gather hooks differ."""

    @staticmethod
    def __new__(cls, inner: torch.Tensor, registry: _Registry):
        return torch.Tensor._make_wrapper_subclass(
            cls, inner.size(), strides=inner.stride(), storage_offset=inner.storage_offset(), dtype=inner.dtype,
            layout=inner.layout, device=inner.device, requires_grad=inner.requires_grad)

    def __init__(self, inner: torch.Tensor, registry: _Registry):
        self._inner = inner
        self._registry = registry

    def __repr__(self):
        return f"_ShardWeight({self._inner!r})"

    def __reduce_ex__(self, protocol):
        # pickled (torch.save) as the plain tensor it wraps
        return self._inner.__reduce_ex__(protocol)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        registry = None
        wrappers = {}

        def unwrap(t):
            nonlocal registry
            registry = registry or t._registry
            wrappers[id(t._inner)] = t
            return t._inner

        args, kwargs = pytree.tree_map_only(_ShardWeight, unwrap, (args, kwargs or {}))
        out = func(*args, **kwargs)

        def rewrap(t):
            if id(t) in wrappers:  # an in-place op returns its (wrapped) input
                return wrappers[id(t)]
            return cls(t, registry) if func in _PRESERVE else t

        return pytree.tree_map_only(torch.Tensor, rewrap, out)

    def __tensor_flatten__(self):
        return ["_inner"], self._registry

    @staticmethod
    def __tensor_unflatten__(inner_tensors, registry, outer_size, outer_stride):
        return _ShardWeight(inner_tensors["_inner"], registry)

    # -- FSDP2's all-gather extension
    def fsdp_pre_all_gather(self, mesh, outer_size, outer_stride, module, mp_policy):
        name = self._registry.layers.get(module, type(module).__name__)
        if len(outer_size) != 2:
            raise ValueError(f"{name}: FP4 all-gather takes 2D weights, got shape {list(outer_size)}")
        n, k = outer_size
        try:
            layout = gather_layout(n, k, mesh.size(), name)
            phase = _fsdp_phase(self._registry, module)
            q, amax = _gather_input(self._registry, module, self._inner, mesh, layout, phase == "backward")
            transpose = module.recipe.dgrad and phase != "forward_resharded"
            return (q,), (amax, layout, transpose)
        except BaseException:
            _ROUND.group, _ROUND.pending = None, {}  # the next gather starts afresh
            raise

    def fsdp_post_all_gather(self, all_gather_outputs, metadata, param_dtype, *, out=None):
        (gathered,) = all_gather_outputs
        amax, layout, transpose = metadata
        if amax.is_cuda:
            # made on FSDP2's copy-in stream, read here on the current one: its memory must
            # not return to the copy-in stream's pool before this stream has read it
            amax.record_stream(torch.cuda.current_stream(amax.device))
        if out is not None:
            if not isinstance(out, _GatheredWeight):
                raise RuntimeError(f"out: expected the gathered NVFP4 weight, got {type(out).__name__}")
            # FSDP2 re-fills the same buffer on each gather; autograd may hold a view of it
            # (Wᵀ saved for backward), which is why its version counter must not move.
            with torch.autograd._unsafe_preserve_version_counter(out._buf):
                assemble_gathered(gathered, amax, layout, out._buf, transpose)
            return None
        buf = torch.empty((_passes.w_cache_nbytes(layout.n, layout.k),), dtype=torch.uint8, device=gathered.device)
        assemble_gathered(gathered, amax, layout, buf, transpose)
        return _GatheredWeight(buf, layout.n, layout.k, param_dtype), (buf,)


class _CodesOnly(torch.Tensor):
    """Base of the unsharded weights FSDP2 hands to a layer under the FP4 all-gather: the
    weight's shape and dtype, content only its NVFP4 quantization. Detach, alias and views of
    the whole keep it (FSDP2 and nn.Parameter make them); factories that take only the
    shape, dtype and device (zeros_like for a missing gradient) give a plain tensor; a
    subclass may take ops of its own (`_op`); anything else needs the dense values and is
    refused by name."""

    _what = "weight"

    def _same(self) -> "_CodesOnly":
        raise NotImplementedError

    def _op(self, func, args, kwargs):
        return NotImplemented

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        me = next(a for a in pytree.tree_leaves((args, kwargs)) if isinstance(a, _CodesOnly))
        shape, strides = tuple(me.shape), tuple(me.stride())
        if func in (torch.ops.aten.detach.default, torch.ops.aten.alias.default):
            return me._same()
        if func in (torch.ops.aten.as_strided.default, torch.ops.aten.view.default,
                    torch.ops.aten._unsafe_view.default):
            if tuple(args[1]) == shape and (func is not torch.ops.aten.as_strided.default
                                            or (tuple(args[2]) == strides and not (args[3:] and args[3]))):
                return me._same()
        out = me._op(func, args, kwargs)
        if out is not NotImplemented:
            return out
        name = str(func)
        if name.startswith("aten.") and ("_like" in name or ".new_" in name or name.startswith("aten.new_")):
            proto = torch.empty(shape, dtype=me.dtype, device=me.device)
            args, kwargs = pytree.tree_map_only(_CodesOnly, lambda t: proto, (args, kwargs))
            return func(*args, **kwargs)
        raise RuntimeError(
            f"{func}: this {me._what} arrived through FSDP2's FP4 all-gather (nvfp4.distributed) and holds only its "
            "NVFP4 quantization; the op needs the dense weight. Layers whose forward uses the dense weight "
            "(set_precision(.., 'bf16'), recipes without FP4 fprop/dgrad) cannot use the FP4 gather: leave them out "
            "with enable_fp4_all_gather(model, exclude=[...]) or call it without them")


class _GatheredWeight(_CodesOnly):
    """The unsharded weight FSDP2 hands to an nvfp4.nn.Linear under the FP4 all-gather: shape
    and dtype of the weight, content only its NVFP4 quantization (the Linear's weight-cache
    layout, `_buf`). Its gradient is a plain tensor, reduce-scattered by FSDP2."""

    @staticmethod
    def __new__(cls, buf: torch.Tensor, n: int, k: int, dtype: torch.dtype):
        return torch.Tensor._make_wrapper_subclass(cls, (n, k), strides=(k, 1), dtype=dtype, device=buf.device,
                                                   requires_grad=False)

    def __init__(self, buf, n, k, dtype):
        self._buf = buf
        self._nk = (n, k)

    def __repr__(self):
        return f"_GatheredWeight(shape={list(self._nk)}, dtype={self.dtype}, nvfp4 codes only)"

    @property
    def nvfp4_w_cache(self) -> torch.Tensor:
        return self._buf

    def _same(self):
        return _GatheredWeight(self._buf, *self._nk, self.dtype)

    def _op(self, func, args, kwargs):
        if func is not getattr(torch.ops.nvfp4, "linear_fwd").default:
            return NotImplemented
        # nvfp4.nn.Linear's forward with the gathered weight as its weight cache: the op reads
        # W from the cache and only needs the weight's shape from its argument.
        a = list(args)
        if a[7] != _passes.W_REUSE or a[8] is not self._buf:
            raise RuntimeError("linear_fwd: an FP4-gathered weight must be passed with its own buffer as the "
                               "weight cache (w_mode W_REUSE)")
        a[1] = torch.empty((1, 1), dtype=self.dtype, device=self.device).expand(*self._nk)
        return func(*a, **kwargs)


def _packed_experts_parts(e: int, n: int, k: int):
    """[(offset, shape, dtype)] of W's and Wᵀ's batched triples (codes, scales, amaxes) in
    one byte buffer, each part 16-byte aligned."""
    parts, off = [], 0
    rs, cs = _grouped_passes.experts_shapes(e, n, k)
    for shape, dt in zip(rs + cs, _ops.TRIPLE_DTYPES * 2):
        parts.append((off, shape, dt))
        off += -(-math.prod(shape) * dt.itemsize // 16) * 16
    return parts, off


def _packed_experts_nbytes(e: int, n: int, k: int) -> int:
    return _packed_experts_parts(e, n, k)[1]


def _packed_experts(buf: torch.Tensor, e: int, n: int, k: int):
    """(row, col) triples viewed in a byte buffer of _packed_experts_nbytes bytes."""
    parts, total = _packed_experts_parts(e, n, k)
    if buf.dtype != torch.uint8 or buf.numel() != total:
        raise RuntimeError(f"expert weight buffer: expected {total} bytes, got {buf.dtype} [{buf.numel()}]")
    v = [buf[o:o + math.prod(s) * dt.itemsize].view(dt).view(s) for o, s, dt in parts]
    return tuple(v[:3]), tuple(v[3:])


class _ExpertShardWeight(_ShardWeight):
    """An expert weight [E, N, K] (GroupedLinear's, or a projection of GroupedExperts; or
    FSDP2's shard of it: whole experts) that FSDP2 all-gathers in NVFP4: each rank quantizes
    its experts as the layer's forward does (one amax per expert), W and Wᵀ, and the
    gathered slices, in rank order, are the batched quantization of all the experts. No
    all-reduce; one fingerprint of the layer's configuration travels along (checked on the
    host at the first gather, on the device after: a disagreement turns the amaxes to NaN)."""

    def __repr__(self):
        return f"_ExpertShardWeight({self._inner!r})"

    def fsdp_pre_all_gather(self, mesh, outer_size, outer_stride, module, mp_policy):
        name = self._registry.experts.get(module, type(module).__name__)
        if len(outer_size) != 3:
            raise ValueError(f"{name}: the experts' FP4 all-gather takes weights [E, N, K], got shape {list(outer_size)}")
        e, n, k = outer_size
        world = mesh.size()
        if e % world:
            raise ValueError(f"{name}: {e} experts do not divide among {world} ranks; the FP4 all-gather moves whole "
                             "experts (leave the layer out with enable_fp4_all_gather(model, exclude=[...]) or use "
                             "another world size)")
        why = fp4_gather_refusal(module)
        if why:
            raise ValueError(f"fp4_all_gather: {name} can no longer take its weight in FP4: {why}")
        local = self._inner
        if tuple(local.shape) != (e // world, n, k):
            raise RuntimeError(f"{name}: FSDP2's shard has shape {list(local.shape)}, expected "
                               f"[{e // world}, {n}, {k}] (whole experts on dim 0)")
        cfg = _experts_cfg(module)
        if world == 1:
            # One rank: one byte buffer that holds both orientations (FSDP2 copies a single
            # rank's all-gather input to its output, and only its first input), viewed back
            # after the "gather"; nothing to check across ranks.
            buf = torch.empty((_packed_experts_nbytes(e, n, k),), dtype=torch.uint8, device=local.device)
            _grouped_passes.quantize_experts(local.detach(), cfg, transposed=True, out=_packed_experts(buf, e, n, k))
            return (buf,), (e, n, k, name, module)
        row, col = _grouped_passes.quantize_experts(local.detach(), cfg, transposed=True)
        fp = self._registry.expert_fingerprint(module, local.device)
        return (*row, *col, fp), (e, n, k, name, module)

    def _check_ranks_agree(self, module, name, fp, amaxes):
        """The gathered fingerprints (int64 [world]) of one layer: read on the host at the
        layer's first gather (the same read on every rank: a named error everywhere, not a
        hang), compared on the device after (a disagreement turns the amaxes to NaN)."""
        reg = self._registry
        if module not in reg.experts_checked:
            if len(set(fp.tolist())) != 1:
                raise ValueError(f"fp4_all_gather: the ranks disagree on the recipe, precision or shape of {name} "
                                 "(a recipe may differ across ranks in its seed only)")
            reg.experts_checked[module] = True
            return
        lo, hi = torch.aminmax(fp)
        bad = lo != hi
        for t in amaxes:
            with torch.autograd._unsafe_preserve_version_counter(t):
                t.masked_fill_(bad, float("nan"))

    def fsdp_post_all_gather(self, all_gather_outputs, metadata, param_dtype, *, out=None):
        e, n, k, name, module = metadata
        if len(all_gather_outputs) == 1:  # one rank: the packed buffer of fsdp_pre_all_gather
            row, col = _packed_experts(all_gather_outputs[0], e, n, k)
        else:
            d, sc, a, td, ts, ta, fp = all_gather_outputs
            rs, cs = _grouped_passes.experts_shapes(e, n, k)
            row = (d.view(rs[0]), sc.view(rs[1]), a.view(rs[2]))
            col = (td.view(cs[0]), ts.view(cs[1]), ta.view(cs[2]))
            self._check_ranks_agree(module, name, fp, (a, ta))
        if out is not None:
            if not isinstance(out, _GatheredExperts):
                raise RuntimeError(f"out: expected the gathered NVFP4 experts, got {type(out).__name__}")
            # FSDP2 refills its all-gather outputs in place, which the gathered weight views; a
            # copy only if it ever hands over other storage
            for dst, src in zip(out._row + out._col, row + col):
                if dst.data_ptr() != src.data_ptr():
                    with torch.autograd._unsafe_preserve_version_counter(dst):
                        dst.copy_(src)
            return None
        # FSDP2 frees and reallocates the storages of these between gathers: for one rank the
        # packed buffer (whose storage the six views share), else the six outputs
        inner = tuple(all_gather_outputs) if len(all_gather_outputs) == 1 else (*row, *col)
        return _GatheredExperts(row, col, e, n, k, param_dtype), inner


class _GatheredExperts(_CodesOnly):
    """The unsharded expert weight FSDP2 hands to a GroupedLinear under the FP4 all-gather:
    shape [E, N, K] and dtype of the weight, content only its batched NVFP4 quantization
    (``nvfp4_batched_w``: W rowwise and Wᵀ, each (codes, scales, amax)). Its gradient is a
    plain tensor, reduce-scattered by FSDP2."""

    _what = "expert weight"

    @staticmethod
    def __new__(cls, row, col, e: int, n: int, k: int, dtype: torch.dtype):
        return torch.Tensor._make_wrapper_subclass(cls, (e, n, k), strides=(n * k, k, 1), dtype=dtype,
                                                   device=row[0].device, requires_grad=False)

    def __init__(self, row, col, e, n, k, dtype):
        self._row, self._col, self._enk = tuple(row), tuple(col), (e, n, k)

    def __repr__(self):
        return f"_GatheredExperts(shape={list(self._enk)}, dtype={self.dtype}, nvfp4 codes only)"

    @property
    def nvfp4_batched_w(self):
        return self._row, self._col

    def _same(self):
        return _GatheredExperts(self._row, self._col, *self._enk, self.dtype)


def gathered_weight_cache(weight: torch.Tensor) -> Optional[torch.Tensor]:
    """The buffer of an FP4-gathered weight (nvfp4.nn.Linear's weight-cache layout), or None
    for an ordinary weight."""
    return weight._buf if isinstance(weight, _GatheredWeight) else None


# ------------------------------------------------------------------------------ the switch
def _unwrap_sd_weight(module, state_dict, prefix, *args):
    """state_dict hook: checkpoints hold the plain master weight (a DTensor of plain shards
    under FSDP2), so they load anywhere, with or without the FP4 gather, on any world size."""
    for p in _gather_params(module):
        key = prefix + p
        v = state_dict.get(key)
        if v is None:
            continue
        local = getattr(v, "_local_tensor", None)
        if isinstance(local, _ShardWeight):
            from torch.distributed.tensor import DTensor

            state_dict[key] = DTensor.from_local(local._inner, v.device_mesh, v.placements, run_check=False,
                                                 shape=v.shape, stride=v.stride())
        elif isinstance(v, _ShardWeight):
            state_dict[key] = v._inner


def _matches(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def enable_fp4_all_gather(model: nn.Module, exclude: Sequence[str] = ()) -> List[str]:
    """Make FSDP2 all-gather the weights of `model`'s nvfp4.nn.Linear, GroupedLinear and
    GroupedExperts layers in NVFP4.

    Call it after nvfp4.convert and before fully_shard and before building the optimizer
    (the weights become new Parameters). `exclude`: fnmatch patterns of layer names to leave
    on the ordinary gather. Returns the names of the layers that gather in FP4. A layer whose
    recipe or state cannot use it (fp4_gather_refusal) is a ValueError naming it, unless
    excluded. Fused experts (GroupedExperts) gather both projections.
    Without FSDP2 the wrapped weights behave as before."""
    if isinstance(exclude, str):
        exclude = [exclude]
    chosen: Dict[nn.Module, str] = {}
    refused = []
    uses: Dict[int, List[str]] = {}
    for pname, p in model.named_parameters(remove_duplicate=False):
        uses.setdefault(id(p), []).append(pname)
    for name, m in model.named_modules():
        if _matches(name, exclude):
            continue
        pnames = _gather_params(m)
        if not pnames:
            continue
        ws = [getattr(m, p) for p in pnames]
        for w in ws:
            if isinstance(getattr(w, "_local_tensor", None), torch.Tensor) or type(w).__name__ == "DTensor":
                raise ValueError(f"model: layer {name} is already sharded; call enable_fp4_all_gather before "
                                 "fully_shard")
            if isinstance(w, _ShardWeight):
                raise ValueError(f"model: layer {name} already gathers in FP4 (enable_fp4_all_gather was called)")
        why = fp4_gather_refusal(m)
        if why:
            refused.append(f"{name}: {why}")
            continue
        shared = [(p, w) for p, w in zip(pnames, ws) if len(uses.get(id(w), [])) > 1]
        if shared:
            p, w = shared[0]
            what = "its weight" if p == "weight" else f"its {p}"
            refused.append(f"{name}: {what} is shared ({', '.join(uses[id(w)])}); a tied weight must stay one "
                           "Parameter")
            continue
        dims = 2 if isinstance(m, Linear) else 3
        bad = [(p, w) for p, w in zip(pnames, ws) if w.dim() != dims]
        if bad:
            refused.append(f"{name}: {bad[0][0]} of shape {list(bad[0][1].shape)}")
            continue
        chosen[m] = name
    if refused:
        raise ValueError("enable_fp4_all_gather: these layers cannot take their weights in FP4 (leave them out with "
                         "exclude=[...]): " + "; ".join(refused))
    dense = {m: name for m, name in chosen.items() if isinstance(m, Linear)}
    registry = _Registry(model, dense)
    for m, name in chosen.items():
        kind = _ShardWeight
        if m not in dense:
            registry.experts[m] = name
            kind = _ExpertShardWeight
        for p in _gather_params(m):
            w = getattr(m, p)
            setattr(m, p, nn.Parameter(kind(w.detach(), registry), requires_grad=w.requires_grad))
        hook = getattr(m, "register_state_dict_post_hook", None) or m._register_state_dict_hook
        m._nvfp4_fp4_gather_hook = hook(_unwrap_sd_weight)
    return list(chosen.values())


def disable_fp4_all_gather(model: nn.Module) -> List[str]:
    """Undo enable_fp4_all_gather (before fully_shard; FSDP2 keeps the gather it was built
    with). Returns the layers changed."""
    done = []
    for name, m in model.named_modules():
        changed = False
        for p in _gather_params(m):
            w = getattr(m, p, None)
            local = getattr(w, "_local_tensor", None)
            if isinstance(local, _ShardWeight):
                raise ValueError(f"model: layer {name} is sharded by FSDP2 already; the FP4 gather it was built "
                                 "with stays (build the model again without enable_fp4_all_gather)")
            if isinstance(w, _ShardWeight):
                setattr(m, p, nn.Parameter(w._inner, requires_grad=w.requires_grad))
                changed = True
        if changed:
            h = m.__dict__.pop("_nvfp4_fp4_gather_hook", None)
            if h is not None:
                h.remove()
            done.append(name)
    return done


def fp4_all_gather_layers(model: nn.Module) -> List[str]:
    """The layers of `model` whose weights gather in FP4."""
    out = []
    for name, m in model.named_modules():
        for p in _gather_params(m):
            w = getattr(m, p, None)
            if isinstance(w, (_ShardWeight, _GatheredWeight, _GatheredExperts)) \
                    or isinstance(getattr(w, "_local_tensor", None), _ShardWeight):
                out.append(name)
                break
    return out


# ------------------------------------------------------------------------------ counting what moves
@dataclass
class CommCounter:
    """Collectives issued through torch.distributed while counting (count_collectives):
    all-gathers (bytes = the output, i.e. what each rank receives, its own shard included)
    and all-reduces."""

    all_gather_calls: int = 0
    all_gather_bytes: int = 0
    all_reduce_calls: int = 0
    all_reduce_bytes: int = 0
    reduce_scatter_calls: int = 0
    reduce_scatter_bytes: int = 0
    log: List[Tuple[str, int]] = field(default_factory=list)


@contextlib.contextmanager
def count_collectives():
    """Counts the all-gathers, all-reduces and reduce-scatters issued through the
    torch.distributed functions FSDP2 calls (looked up on the module at call time), on this
    rank, while the context is open."""
    c = CommCounter()
    patched = []

    def wrap(fname, kind, out_arg):
        orig = getattr(dist, fname, None)
        if orig is None:
            return

        def f(*args, **kwargs):
            t = kwargs.get(out_arg) if out_arg in kwargs else args[0]
            nbytes = 0
            for x in (t if isinstance(t, (list, tuple)) else [t]):
                if isinstance(x, torch.Tensor):
                    nbytes += x.numel() * x.element_size()
            setattr(c, kind + "_calls", getattr(c, kind + "_calls") + 1)
            setattr(c, kind + "_bytes", getattr(c, kind + "_bytes") + nbytes)
            c.log.append((fname, nbytes))
            return orig(*args, **kwargs)

        setattr(dist, fname, f)
        patched.append((fname, orig))

    wrap("all_gather_into_tensor", "all_gather", "output_tensor")
    wrap("all_gather_single", "all_gather", "output_tensor")
    wrap("all_reduce", "all_reduce", "tensor")
    wrap("reduce_scatter_tensor", "reduce_scatter", "input")
    wrap("reduce_scatter_single", "reduce_scatter", "input")
    try:
        yield c
    finally:
        for fname, orig in patched:
            setattr(dist, fname, orig)
