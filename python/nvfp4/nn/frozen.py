"""nvfp4.nn.FrozenLinear: a linear layer whose weight exists only in NVFP4.

A frozen layer keeps its weight as the quantization the trainable Linear makes of it on every
forward (16x16 tiles, round to nearest) and nothing else: the E2M1 codes, the E4M3 tile
scales and the per-tensor amax, 0.28x the bytes of a BF16 weight. The master weight is gone,
so there is no weight gradient; the layer computes

    fprop  Y  = Q(X)·Ŵᵀ            dgrad  dX = Q(dY)·(Ŵᵀ)ᵀ

with X and dY quantized exactly as nvfp4.nn.Linear quantizes them (the recipe's rounding,
stochastic rounding keyed by the layer's seeds and its `sr_step` counter). Given the same
weight, recipe, layer index and counter, a frozen layer's output and input gradient are the
same bits as the trainable layer's. With 2D tiles Ŵᵀ is Ŵ transposed (codes and tile scales
alike), so only one orientation is stored; dgrad builds Ŵᵀ when it runs and drops it after.

What a frozen layer is for: the base of a LoRA fine-tune (nvfp4.nn.LoRALinear, or peft's
LoRA, which wraps it like any nn.Linear), and W4A4 inference.

The state_dict holds plain tensors (no pickled classes; torch.load(weights_only=True) and
safetensors both take it):

    weight_data    uint8   [out, in/2]   E2M1 codes, element 2i in the low nibble of byte i
    weight_scales  uint8   [roundup(out,128), roundup(in/16,4)]  E4M3 tile scales as bytes,
                   in the 128x4 swizzled layout the GEMMs read: the scale of row r and block
                   column c (one per 16 inputs; the 16 rows of a tile repeat the tile's scale)
                   sits at (r/128)*(C/4)*512 + (c/4)*512 + (r%32)*16 + ((r%128)/32)*4 + c%4,
                   C the padded column count; padding bytes are zero
    weight_amax    float32 [1]           max |W| of the weight that was quantized
    bias           (if any) in its own dtype, frozen
    sr_step        int64   []            the stochastic-rounding counter

A value decodes as e2m1(code) * e4m3(scale) / S_enc, S_enc = min(2688 / amax, FLT_MAX) (1
where that is 0, i.e. amax = inf). A state_dict with a float `weight` [out, in] instead (a checkpoint of the
unfrozen model) is accepted and quantized when it loads.

`layer.weight` is a stand-in for the missing master weight: reading it gives the decoded
values (in the layer's dtype). Writing it (`weight.data += delta`, what peft's merge does,
`weight.data = w`, peft's safe merge, `weight.copy_(w)`, `layer.weight = w`) keeps what was
written: the layer becomes, in place, a plain nn.Linear holding the new weight in the
layer's dtype (frozen, requires_grad=False). So a LoRA merge into a frozen base (peft's
merge_and_unload, nvfp4.nn.merge_and_unload) exports Ŵ + ΔW in high precision and keeps
the fine-tune. Storing the merged weight in NVFP4 again is a re-quantization whose error
can swallow most of a small update; it happens only on request, inside
`with nvfp4.nn.requantize_writes():` (or merge_and_unload(model, fp4=True)), and then a
FP4MergeWarning reports the measured error: ‖Q(W') − W'‖ / ‖W' − Ŵ‖, the stored weight's
distance from the written one relative to the change that was written.
"""
from __future__ import annotations

import contextlib
import threading
import warnings
from typing import List, Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._pytree import tree_map

from . import _passes
from .._format import swizzled_shape
from .. import _checks as check
from .linear import _FLOATS, Linear, RecipeLayer, _Plan, _uses_sr, check_counter_state, check_input
from .recipe import QuantConfig, Recipe, get_recipe

__all__ = ["FrozenLinear", "FP4Weight", "dequantize_weight", "transpose_weight", "swizzle_bytes",
           "unswizzle_bytes", "recipe_from_dict", "requantize_writes", "FP4MergeWarning"]

aten = torch.ops.aten

# ------------------------------------------------------------------------------ layout helpers: the library's
# decode and swizzle (one definition, in src/core), through ops that run on any device and
# inside compiled graphs
def swizzle_bytes(lin: torch.Tensor) -> torch.Tensor:
    """Linear scale bytes [R, C] -> the 128x4 swizzled layout [roundup(R,128), roundup(C,4)],
    padding zero (nvfp4.swizzle_scales, as an op)."""
    r, c = lin.shape
    return _passes.swizzle(lin, r, c, True)


def unswizzle_bytes(swz: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """The inverse of swizzle_bytes: [rows, cols] of a swizzled [roundup(rows,128), roundup(cols,4)]."""
    return _passes.swizzle(swz, rows, cols, False)


def dequantize_weight(data: torch.Tensor, scales: torch.Tensor, amax: torch.Tensor, dtype=torch.float32):
    """Decoded values [N, K] of a rowwise NVFP4 weight (data uint8 [N, K/2], swizzled scale
    bytes, amax float32 [1]): nvfp4.dequantize, as an op."""
    return _passes.dequantize(data, scales, amax.view(torch.float32), dtype)


def transpose_weight(data: torch.Tensor, scales: torch.Tensor, amax: torch.Tensor) -> torch.Tensor:
    """Ŵᵀ [K, N] as one packed buffer (nvfp4.nn.ops.packed_layout) from Ŵ's rowwise 2D-tile
    quantization [N, K]: codes transposed, the tile scales transposed. Bit-identical to
    the columnwise output of quantizing W with 2D tiles (N a multiple of 16)."""
    n, k = data.shape[0], data.shape[1] * 2
    codes = torch.stack((data & 15, data >> 4), dim=-1).reshape(n, k)
    ct = codes.t().reshape(k, n // 2, 2)
    data_t = (ct[..., 0] | (ct[..., 1] << 4)).reshape(-1)
    tiles = unswizzle_bytes(scales.view(torch.uint8), n, k // 16)[::16]  # [N/16, K/16]: one scale per tile
    scales_t = swizzle_bytes(tiles.t().repeat_interleave(16, dim=0)).reshape(-1)  # [K, N/16] -> swizzled
    so, ao, total = _passes.packed_layout(k, n)
    dev = data.device
    gap = lambda nbytes: torch.zeros((nbytes,), dtype=torch.uint8, device=dev)  # noqa: E731
    return torch.cat((data_t, gap(so - data_t.numel()), scales_t, gap(ao - so - scales_t.numel()),
                      amax.reshape(-1).view(torch.uint8), gap(total - ao - 4)))


def _quantize_weight(w: torch.Tensor):
    """(data, scale bytes, amax) of W [N, K] with 16x16 tiles, round to nearest: what
    nvfp4.nn.Linear's forward computes from its master weight."""
    w = w.detach()
    if w.dtype not in _FLOATS:
        w = w.float()
    q = _passes.quantize(w.contiguous(), 1, 0, 0, 0, 0, 0, None, True, False)
    return q[0], q[1].view(torch.uint8), q[2]


def recipe_from_dict(d: dict) -> Recipe:
    """A Recipe from Recipe.to_dict() (e.g. read back from a checkpoint's metadata)."""
    d = dict(d)
    for f in ("x", "w", "dy", "wgrad_dy", "wgrad_x", "dgrad_w"):
        if isinstance(d.get(f), dict):
            d[f] = QuantConfig(**d[f])
    return Recipe(**d)


def _check_frozen_recipe(r: Recipe) -> Recipe:
    if not r.fused:
        raise ValueError(f"recipe: frozen layers run nvfp4's fused NVFP4 ops; recipe {r.name!r} has MXFP4 operands, "
                         "double quantization or a per-operand-path option (docs/design.md §1.6)")
    if not r.fprop:
        raise ValueError(f"recipe: a frozen NVFP4 layer runs its forward GEMM in NVFP4; recipe {r.name!r} has "
                         "fprop=False")
    if r.w.block != "2d":
        raise ValueError(f"recipe: a frozen layer keeps one orientation of W and needs 2D tiles (w.block='2d') for "
                         f"dgrad to use its transpose; recipe {r.name!r} has w.block={r.w.block!r}")
    return r


# ------------------------------------------------------------------------------ writes into a frozen weight
class FP4MergeWarning(UserWarning):
    """A weight written into a frozen layer was stored in NVFP4 again (requantize_writes), and
    the re-quantization moved it by the reported fraction of the change that was written."""


_writes = threading.local()  # .errors: a list while requantize_writes() is active, else absent


@contextlib.contextmanager
def requantize_writes(warn: bool = True):
    """Inside this block, a weight written into a FrozenLinear (`weight.data += d`, what peft's
    merge does, `weight.data = w`, `weight.copy_(w)`, `layer.weight = w`) is quantized into
    the layer's NVFP4 storage instead of turning the layer into a high-precision nn.Linear.
    On leaving, if warn, one FP4MergeWarning reports the measured error over the layers
    written: ‖Q(W') − W'‖ / ‖W' − Ŵ‖ (1.0: the re-quantization error is as large as the update
    itself). Yields the list of (layer, ratio) it collects."""
    outer = getattr(_writes, "errors", None)
    errors: List[Tuple[str, float]] = []
    _writes.errors = errors
    try:
        yield errors
    finally:
        if outer is None:
            del _writes.errors
        else:
            outer.extend(errors)
            _writes.errors = outer
    if warn and outer is None and errors:
        warnings.warn(_merge_error_message(errors), FP4MergeWarning, stacklevel=3)


def _merge_error_message(errors: List[Tuple[str, float]]) -> str:
    finite = [r for _, r in errors if r == r]
    worst = max(errors, key=lambda e: e[1] if e[1] == e[1] else float("inf"))
    mean = sum(finite) / len(finite) if finite else float("nan")
    return (f"nvfp4: {len(errors)} frozen layer(s) stored a written weight in NVFP4 again: the stored weight is off "
            f"by {mean:.3g} of the written change on average (‖Q(W') − W'‖ / ‖W' − Ŵ‖), {worst[1]:.3g} at worst "
            f"({worst[0]}); at 1 the re-quantization error is as large as the update. A merged fine-tune "
            "keeps its update exported in high precision: merge outside requantize_writes() (peft's "
            "merge_and_unload, or nvfp4.nn.merge_and_unload(model) without fp4=True)")


def _write_ratio(before: torch.Tensor, written: torch.Tensor, stored: torch.Tensor) -> float:
    change = (written - before).norm().item()
    err = (stored - written).norm().item()
    return err / change if change > 0 else (0.0 if err == 0 else float("inf"))


# ------------------------------------------------------------------------------ autograd
class _FrozenFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, bias, counter, w_data, w_scales, w_amax, plan: _Plan):
        cdt = x.dtype
        k = x.shape[-1]
        n = w_data.shape[0]
        x2 = x.reshape(-1, k)
        b = None if bias is None else bias.to(cdt)
        y = _passes.frozen_linear_fwd(x2, w_data, w_scales, w_amax, b, counter, plan.cfg)
        # The weight and the counter are module state, not activations: kept as attributes
        # (inference tensors may not be saved for backward; the counter is mutated there).
        ctx.w = (w_data, w_scales, w_amax)
        ctx.counter = counter
        ctx.plan = plan
        ctx.meta = (tuple(x.shape), k, n, ctx.needs_input_grad[0], bias is not None and ctx.needs_input_grad[1],
                    None if bias is None else bias.dtype)
        return y.reshape(*x.shape[:-1], n)

    @staticmethod
    def backward(ctx, dy):
        x_shape, k, n, need_dx, need_db, b_dtype = ctx.meta
        r = ctx.plan.recipe
        dy2 = dy.reshape(-1, n)
        dx = db = None
        if need_dx and r.dgrad:
            wt = transpose_weight(*ctx.w)
            # dgrad only: no X^T (no wgrad), W^T from the frozen codes; advances the counter
            dx, _ = _passes.linear_bwd(dy2, dy2.new_empty((0,), dtype=torch.uint8), wt, ctx.counter, ctx.plan.cfg, k,
                                    True, False, dy2.dtype)
            dx = dx.reshape(x_shape)
        else:
            if need_dx:
                dx = (dy2 @ dequantize_weight(*ctx.w, dtype=dy2.dtype)).reshape(x_shape)
            if _uses_sr(r):
                ctx.counter.add_(1)
        if need_db:
            db = dy2.sum(0, dtype=torch.float32).to(b_dtype)
        return dx, db, None, None, None, None, None


# ------------------------------------------------------------------------------ the weight stand-in
class FP4Weight(torch.Tensor):
    """`FrozenLinear.weight`: shaped [out, in] in the layer's dtype, holding no values of its
    own. Operations read the decoded NVFP4 weight; in-place operations on it (and on its
    `.data`) decode, apply the operation and re-quantize the layer. Views of it (slices,
    transposes) are copies: write through the whole tensor."""

    __torch_function__ = torch._C._disabled_torch_function_impl

    @staticmethod
    def __new__(cls, owner: "FrozenLinear"):
        return torch.Tensor._make_wrapper_subclass(cls, (owner.out_features, owner.in_features),
                                                   dtype=owner.weight_dtype, device=owner.weight_data.device,
                                                   requires_grad=False)

    def __init__(self, owner: "FrozenLinear"):
        self._owner = owner

    def __repr__(self):
        return (f"FP4Weight(shape={tuple(self.shape)}, dtype={self.dtype}, device={self.device}, "
                f"of {type(self._owner).__name__})")

    # `.data` of a stand-in is a stand-in of the same layer; assigning it re-quantizes
    @property
    def data(self):
        return FP4Weight(self._owner)

    @data.setter
    def data(self, value):
        owner = self._owner
        if isinstance(value, FP4Weight) and value._owner is owner:
            return  # `weight.data += d` assigns the stand-in back after the in-place op
        if not isinstance(owner, FrozenLinear):  # an earlier write made it an nn.Linear
            owner.weight.data = value
            return
        owner._assign_weight(value, write=True)

    def dequantize(self, dtype=None) -> torch.Tensor:
        return self._owner.dequantize(dtype or self.dtype)

    @property
    def _is_hf_initialized(self) -> bool:
        # transformers' weight initialization skips tensors with this flag; a stand-in is made
        # on each access, so it reports its layer's (set on frozen layers loaded from a checkpoint)
        return getattr(self._owner, "_is_hf_initialized", False)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (aten.detach.default, aten.alias.default):
            return FP4Weight(args[0]._owner)
        written = [a.name for a in func._schema.arguments if a.alias_info is not None and a.alias_info.is_write]
        target = args[0] if args and isinstance(args[0], FP4Weight) else None

        def unwrap(t):
            return t._owner.dequantize(t.dtype) if isinstance(t, FP4Weight) else t

        if written:
            if target is None or func._schema.arguments[0].name not in written or len(written) != 1:
                raise NotImplementedError(f"{func}: writes into a frozen NVFP4 weight this way are not supported; "
                                          "update the whole tensor in place (weight.data += d, weight.copy_(w))")
            with torch.no_grad():
                owner = target._owner
                w = owner.dequantize(torch.float32)
                func(w, *tree_map(unwrap, tuple(args[1:])), **tree_map(unwrap, kwargs))
                owner._write_weight(w)
            return target
        return func(*tree_map(unwrap, tuple(args)), **tree_map(unwrap, kwargs))


# ------------------------------------------------------------------------------ the layer
class FrozenLinear(RecipeLayer, nn.Linear):
    """A linear layer whose weight is stored only as NVFP4 (see the module docstring).

    A subclass of nn.Linear, so that code looking for linear layers (peft's LoRA, which wraps
    it and calls its forward, HF's "all-linear" target lists) finds it; it has no weight
    Parameter. Build one with FrozenLinear.from_linear (in place, drops the master weight),
    FrozenLinear.from_weight, nvfp4.nn.freeze_fp4 for a whole model, or the constructor (a
    zero weight, to load a checkpoint into).

    recipe: how X and dY are quantized (its forward and dgrad configs; w.block must be "2d").
    layer_index: selects the stochastic-rounding seeds, as for nvfp4.nn.Linear.
    The output dtype is the input's (or autocast's); `weight_dtype` is the dtype the weight
    had, that `weight` reports and dequantize() returns by default, and follows .to(dtype).
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None,
                 recipe: Union[str, Recipe] = "nvfp4", layer_index: int = 0):
        nn.Module.__init__(self)
        self.in_features, self.out_features = in_features, out_features
        if in_features % 16 or out_features % 16 or in_features <= 0 or out_features <= 0:
            raise ValueError(f"in_features/out_features: must be positive multiples of 16 for NVFP4 blocks, got "
                             f"{in_features}x{out_features}")
        dtype = dtype or torch.get_default_dtype()
        self.register_buffer("weight_data", torch.zeros((out_features, in_features // 2), dtype=torch.uint8,
                                                        device=device))
        self.register_buffer("weight_scales", torch.zeros(swizzled_shape(out_features, in_features // 16),
                                                          dtype=torch.uint8, device=device))
        self.register_buffer("weight_amax", torch.zeros((1,), dtype=torch.float32, device=device))
        if bias:
            self.bias = nn.Parameter(torch.zeros((out_features,), dtype=dtype, device=device), requires_grad=False)
        else:
            self.register_parameter("bias", None)
        self._frozen_init(recipe, layer_index, dtype, torch.device(device) if device is not None else None)

    def _frozen_init(self, recipe, layer_index, dtype, device, sr_step: Optional[torch.Tensor] = None) -> None:
        dev = self.weight_data.device if device is None else device
        with torch.inference_mode(False):
            # a normal tensor even when the model is built under inference_mode: the backward updates it
            step = torch.zeros((), dtype=torch.int64, device=dev) if sr_step is None else sr_step.detach().clone()
            # tracks the module's floating dtype through .to()/.half()/...; holds nothing
            dref = torch.empty((0,), dtype=dtype, device=dev)
        self.register_buffer("sr_step", step.to(dev), persistent=True)
        self.register_buffer("_dtype_ref", dref, persistent=False)
        self.precision = "nvfp4"
        self._layer_index = 0
        self.layer_index = layer_index
        self.recipe = recipe

    # -- construction
    @classmethod
    def from_linear(cls, module: nn.Linear, recipe: Union[str, Recipe, None] = None,
                    layer_index: Optional[int] = None, device=None) -> "FrozenLinear":
        """Freeze an nn.Linear or nvfp4.nn.Linear in place (same object: hooks and attributes
        are kept): its weight is quantized (on `device` if given, else where it is) and the
        Parameter is dropped from the module, so its memory is freed unless something else
        (an optimizer) still holds it. An nvfp4 Linear keeps its recipe, layer index and
        counter unless recipe/layer_index are given. Returns the module."""
        if isinstance(module, FrozenLinear):
            raise TypeError("module: already a FrozenLinear")
        if not isinstance(module, Linear) and type(module) is not nn.Linear:
            raise TypeError(f"module: expected a torch.nn.Linear or nvfp4.nn.Linear, got {type(module).__name__}")
        if isinstance(module, Linear):
            recipe = module.recipe if recipe is None else recipe
            layer_index = module.layer_index if layer_index is None else layer_index
            sr_step = module.sr_step
        else:
            sr_step = None
        return cls._freeze(module, module.weight, recipe, layer_index, device, sr_step)

    @classmethod
    def from_weight(cls, weight: torch.Tensor, bias: Optional[torch.Tensor] = None,
                    recipe: Union[str, Recipe, None] = None, layer_index: int = 0, device=None) -> "FrozenLinear":
        """A new frozen layer computing x @ weight.T + bias (weight [out, in])."""
        if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
            raise ValueError("weight: expected a 2D tensor [out_features, in_features]")
        n, k = weight.shape
        m = nn.Linear(k, n, bias=bias is not None, device="meta")
        m.weight = nn.Parameter(weight.detach(), requires_grad=False)
        if bias is not None:
            m.bias = nn.Parameter(bias.detach().clone(), requires_grad=False)
        return cls._freeze(m, weight, recipe, layer_index, device, None)

    @classmethod
    def _freeze(cls, module: nn.Module, weight: torch.Tensor, recipe, layer_index, device, sr_step):
        n, k = weight.shape
        if n % 16 or k % 16:
            raise ValueError(f"module: in_features/out_features must be multiples of 16, got {k}x{n}")
        recipe = _check_frozen_recipe(get_recipe(recipe))
        dev = torch.device(device) if device is not None else weight.device
        if dev.type == "meta":
            raise ValueError("module: its weight is on the meta device; materialize it first")
        data, scales, amax = _quantize_weight(weight.to(dev))
        wdtype = weight.dtype if weight.dtype in _FLOATS else torch.float32
        bias = getattr(module, "bias", None)
        module._parameters.pop("weight", None)
        for name in ("sr_step", "_w_cache"):
            module._buffers.pop(name, None)
        for a in ("precision", "_layer_index", "_recipe", "_plan", "weight_reuse", "_w_cache_stored",
                  "saved_operands"):
            module.__dict__.pop(a, None)
        module.__class__ = cls
        module.in_features, module.out_features = k, n
        module.register_buffer("weight_data", data)
        module.register_buffer("weight_scales", scales)
        module.register_buffer("weight_amax", amax)
        if bias is not None:
            bias.requires_grad_(False)
            if bias.device != dev:
                module.bias = nn.Parameter(bias.detach().to(dev), requires_grad=False)
        module._frozen_init(recipe, 0 if layer_index is None else layer_index, wdtype, dev, sr_step)
        return module

    def to_linear(self, dtype: Optional[torch.dtype] = None) -> nn.Linear:
        """A new nn.Linear holding the decoded weight (in `dtype`, default weight_dtype)."""
        dtype = dtype or self.weight_dtype
        lin = nn.Linear(self.in_features, self.out_features, bias=self.bias is not None, device="meta")
        lin.weight = nn.Parameter(self.dequantize(dtype))
        if self.bias is not None:
            lin.bias = nn.Parameter(self.bias.detach().clone())
        return lin

    # -- configuration
    def _accept_recipe(self, r: Recipe) -> Recipe:
        return _check_frozen_recipe(r)

    @property
    def weight_dtype(self) -> torch.dtype:
        return self._dtype_ref.dtype

    def extra_repr(self) -> str:
        s = (f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
             f"recipe={self._recipe.name}, frozen nvfp4")
        if self.precision != "nvfp4":
            s += f", precision={self.precision}"
        return s

    # -- the weight
    @property
    def weight(self) -> FP4Weight:
        return FP4Weight(self)

    @weight.setter
    def weight(self, value) -> None:
        self._assign_weight(value, write=True)

    def __setattr__(self, name, value):
        if name == "weight":  # nn.Module would try to register a Parameter named weight
            self._assign_weight(value, write=True)
            return
        if name in ("weight_data", "weight_scales", "weight_amax") and "_dtype_ref" in self.__dict__.get("_buffers", {}):
            # a buffer replaced by assignment is checked like a loaded one
            self._check_state("", {name: value})
        super().__setattr__(name, value)

    def _assign_weight(self, value, write: bool = False) -> None:
        """Take a new weight: another frozen layer's NVFP4 bytes as they are; a float tensor
        quantized (write=False: a checkpoint of the unfrozen model being loaded) or as a
        write (write=True: see _write_weight)."""
        if isinstance(value, FP4Weight):
            if value._owner is not self:
                o = value._owner
                self._store(o.weight_data, o.weight_scales, o.weight_amax)
            return
        if not isinstance(value, torch.Tensor) or tuple(value.shape) != (self.out_features, self.in_features):
            raise ValueError(f"weight: expected a tensor of shape [{self.out_features}, {self.in_features}], got "
                             f"{getattr(value, 'shape', type(value).__name__)}")
        with torch.no_grad():
            if write:
                self._write_weight(value.detach().to(self.weight_data.device, torch.float32))
            else:
                self._store(*_quantize_weight(value.to(self.weight_data.device)))

    def _write_weight(self, w: torch.Tensor) -> None:
        """A float32 weight written through `weight`: kept in high precision (the layer turns
        into an nn.Linear), or under requantize_writes() stored in NVFP4 with its error recorded."""
        errors = getattr(_writes, "errors", None)
        if errors is None:
            self._promote(w)
            return
        before = self.dequantize(torch.float32)
        self._store(*_quantize_weight(w))
        name = getattr(self, "_nvfp4_name", None) or f"a {self.out_features}x{self.in_features} layer"
        errors.append((name, _write_ratio(before, w, self.dequantize(torch.float32))))

    def _promote(self, w: torch.Tensor) -> None:
        """Become, in place, a frozen nn.Linear holding `w` in the layer's dtype (hooks and the
        bias Parameter kept; the NVFP4 buffers and the counter dropped)."""
        dtype, dev = self.weight_dtype, self.weight_data.device
        for name in ("weight_data", "weight_scales", "weight_amax", "sr_step", "_dtype_ref"):
            self._buffers.pop(name, None)
        for a in ("precision", "_layer_index", "_recipe", "_plan"):
            self.__dict__.pop(a, None)
        self.__class__ = nn.Linear
        self.weight = nn.Parameter(w.to(dev, dtype), requires_grad=False)

    def _store(self, data, scales, amax) -> None:
        """Replace the quantized weight (in place when possible, so compiled graphs and
        references to the buffers stay valid)."""
        with torch.no_grad():
            for name, v in (("weight_data", data), ("weight_scales", scales), ("weight_amax", amax)):
                cur = self._buffers[name]
                v = v.to(cur.device).view(cur.dtype)
                if cur.is_inference() and not torch.is_inference_mode_enabled():
                    self._buffers[name] = v.clone()
                else:
                    cur.copy_(v)

    def dequantize(self, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
        """The decoded weight [out, in] (a new tensor, in `dtype`, default weight_dtype)."""
        return dequantize_weight(self.weight_data, self.weight_scales, self.weight_amax, dtype or self.weight_dtype)

    @property
    def weight_nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.weight_data, self.weight_scales, self.weight_amax))

    # -- state
    def _apply(self, fn, recurse=True):
        # amax is float32 bits that a dtype change (.to(torch.bfloat16), .half()) must not
        # convert: it passes through as int32 and comes back as float32
        amax = self._buffers.get("weight_amax")
        if amax is not None:
            self._buffers["weight_amax"] = amax.view(torch.int32)
        try:
            return super()._apply(fn, recurse)
        finally:
            a = self._buffers.get("weight_amax")
            if a is not None and a.dtype == torch.int32:
                self._buffers["weight_amax"] = a.view(torch.float32)

    def _check_state(self, prefix: str, state_dict: dict) -> None:
        """The quantized weight of a state_dict, before anything is copied: dtypes and shapes
        (copy_ would convert a float weight_data to bytes and a float64 amax without a word)
        and the sign of the amax (a negative one flips every output)."""
        n, k = self.out_features, self.in_features
        want = {"weight_data": ((torch.uint8,), (n, k // 2)),
                "weight_scales": (check.SCALE_DTYPES, swizzled_shape(n, k // 16)),
                "weight_amax": ((torch.float32,), (1,))}
        for name, (dtypes, shape) in want.items():
            t = state_dict.get(prefix + name)
            if t is not None:
                check.tensor(prefix + name, t, dtypes, shape, contiguous=False)
        amax = state_dict.get(prefix + "weight_amax")
        if amax is not None and amax.device.type != "meta":
            # read once at load time (a CUDA amax costs one synchronization here, never in forward)
            v = float(amax.detach().reshape(()).cpu())
            if v < 0:
                raise ValueError(f"{prefix}weight_amax: expected max |W| (>= 0), got {v}; a negative amax flips the "
                                 "sign of every output")
        check_counter_state(prefix, state_dict)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        self._check_state(prefix, state_dict)
        wkey = prefix + "weight"
        quantize_from = None
        if wkey in state_dict and prefix + "weight_data" not in state_dict:
            quantize_from = state_dict[wkey]  # a checkpoint of the unfrozen model
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)
        if quantize_from is not None:
            if tuple(quantize_from.shape) != (self.out_features, self.in_features):
                error_msgs.append(f"size mismatch for {wkey}: copying a param with shape {tuple(quantize_from.shape)}"
                                  f", the frozen layer is [{self.out_features}, {self.in_features}]")
            else:
                self._assign_weight(quantize_from)
            for k in ("weight_data", "weight_scales", "weight_amax"):
                if prefix + k in missing_keys:
                    missing_keys.remove(prefix + k)
            if wkey in unexpected_keys:
                unexpected_keys.remove(wkey)
        if prefix + "sr_step" in missing_keys:  # a checkpoint without counters: keep ours
            missing_keys.remove(prefix + "sr_step")

    # -- compute
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_input(self, x, self.weight_data.device)
        dev = x.device.type
        if dev != "meta" and torch.is_autocast_enabled(dev):
            x = x.to(torch.get_autocast_dtype(dev))
        if x.dtype not in _FLOATS:
            raise TypeError(f"x: nvfp4 FrozenLinear takes float32/float16/bfloat16 inputs, got {x.dtype}")
        if x.numel() == 0 or self.out_features == 0 or self.precision == "bf16":
            b = None if self.bias is None else self.bias.to(x.dtype)
            return F.linear(x, self.dequantize(x.dtype), b)
        counter = self.sr_step
        if not torch.compiler.is_compiling() and counter.is_inference() and not torch.is_inference_mode_enabled():
            # built or moved under inference_mode: swap in a normal counter the backward may advance
            counter = self.sr_step = counter.clone()
        return _FrozenFn.apply(x, self.bias, counter, self.weight_data, self.weight_scales, self.weight_amax,
                               self._plan)
