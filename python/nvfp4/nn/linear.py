"""nvfp4.nn.Linear: nn.Linear whose three GEMMs run in NVFP4 according to a Recipe.

fprop  Y  = Q(X)·Q(W)ᵀ          dgrad  dX = Q(dY)·Q(Wᵀ)ᵀ          wgrad  dW = Q(dYᵀ)·Q(Xᵀ)ᵀ

Wᵀ is W quantized along N (with 2D tiles: the forward codes, transposed); dYᵀ and Xᵀ are
quantized along the token axis. Each pass is one op (nvfp4.nn.ops.linear_fwd / linear_bwd):
the forward quantizes X (rowwise for fprop, columnwise for wgrad, one read of X) and W
(straight from the master weight, never from an autocast copy; both orientations in one
pass) and runs the forward GEMM; the backward quantizes dY both ways and runs both GEMMs.
Only the columnwise FP4 X (0.28x of BF16 X) and the FP4 Wᵀ are kept for the backward pass.

The weight is quantized on every forward by default, so any change to it (an optimizer
step, `.data` edits, `load_state_dict`, a LoRA merge) is seen by the next forward. Across the
micro-batches of one optimizer step the quantization can be reused explicitly:
`set_weight_reuse(model, "store")` before the first micro-batch and `"reuse"` for the others.

Stochastic rounding: Philox keyed by the layer's seeds, with the layer's `sr_step` counter
as offset. The counter lives on the device in a buffer (part of the state_dict); the
backward pass reads it and then advances it. The forward never changes it, so a recomputed
forward (activation checkpointing) sees the value the original forward saw, and a CUDA graph
that captured the step advances it on each replay.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import nn

from . import _passes
from .._format import signs_to_mask
from ..backends import BACKENDS
from .emulated import check_shapes, emulated_linear
from .recipe import RECIPES, Recipe, get_recipe, layer_seed

__all__ = ["Linear", "TOKEN_ALIGN", "WEIGHT_REUSE_MODES", "SAVED_OPERANDS"]

_FLOATS = (torch.float32, torch.float16, torch.bfloat16)


def check_input(layer: nn.Module, x, weight_device: torch.device) -> None:
    """x: a tensor [..., in_features] on the weight's device (what F.linear would accept,
    with errors that name x)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x: expected a torch.Tensor, got {type(x).__name__}")
    if x.dim() < 1:
        raise ValueError(f"x: expected a tensor [..., {layer.in_features}], got a 0-d tensor")
    if x.shape[-1] != layer.in_features:
        raise ValueError(f"x: expected {layer.in_features} input features (the layer's in_features) in its last "
                         f"dimension, got shape {tuple(x.shape)}")
    if x.device != weight_device:
        raise ValueError(f"x: on {x.device}, but the layer's weight is on {weight_device}")


def check_counter_state(prefix: str, state_dict: dict) -> None:
    """A loaded sr_step is one integer (copy_ would silently truncate a float one)."""
    t = state_dict.get(prefix + "sr_step")
    if t is not None and (not isinstance(t, torch.Tensor) or t.numel() != 1 or t.is_floating_point()
                          or t.is_complex() or t.dtype == torch.bool):
        raise ValueError(f"{prefix}sr_step: expected one int64 element (the stochastic-rounding counter), got "
                         f"{t.dtype if isinstance(t, torch.Tensor) else type(t).__name__} "
                         f"{list(t.shape) if isinstance(t, torch.Tensor) else ''}")

TOKEN_ALIGN = _passes.TOKEN_ALIGN  # the token-axis padding before a columnwise quantization

#: Values of Linear.weight_reuse: None (quantize W on every forward), "store" (quantize and
#: keep it), "reuse" (use the kept quantization: later micro-batches of one optimizer step).
WEIGHT_REUSE_MODES = (None, "store", "reuse")
SAVED_OPERANDS = ("fp4", "decoded")
_W_MODE = {None: _passes.W_FRESH, "store": _passes.W_STORE, "reuse": _passes.W_REUSE}


@dataclass(frozen=True)
class _Plan:
    """Everything a layer's autograd function needs besides tensors; hashable, so that
    torch.compile treats it as a constant. The recipe's GEMM switches are copied out of it
    once here: the autograd function reads them on every call."""

    recipe: Recipe
    cfg: Tuple[int, ...]  # the LinearConfig ints of the linear ops
    fprop: bool = field(init=False, compare=False)
    dgrad: bool = field(init=False, compare=False)
    wgrad: bool = field(init=False, compare=False)
    uses_sr: bool = field(init=False, compare=False)

    def __post_init__(self):
        r = self.recipe
        for name, v in (("fprop", r.fprop), ("dgrad", r.dgrad), ("wgrad", r.wgrad), ("uses_sr", _uses_sr(r))):
            object.__setattr__(self, name, v)


def _make_cfg(r: Recipe, sign_mask: int, seed_x: int, seed_dy: int, save_decoded: bool = False) -> Tuple[int, ...]:
    C = _passes.LinearConfig
    # "eden" (MS-EDEN) never reaches the fused ops (Recipe.fused is False); the plan of such a
    # recipe is built but unused
    sr = {"rtn": 0, "sr": 1, "eden": 1}
    cfg = [0] * C.SIZE
    cfg[C.BACKEND] = BACKENDS[r.backend]
    cfg[C.SIGN_MASK] = sign_mask
    cfg[C.X_ROUND] = sr[r.x.rounding]
    cfg[C.XT_ROUND] = sr[r.wgrad_x.rounding]
    cfg[C.XT_RHT] = int(r.wgrad_x.rht)
    cfg[C.W_BLOCK] = 1 if r.w.block == "2d" else 0
    cfg[C.DY_ROUND] = sr[r.dy.rounding]
    cfg[C.DYT_ROUND] = sr[r.wgrad_dy.rounding]
    cfg[C.DYT_RHT] = int(r.wgrad_dy.rht)
    cfg[C.SEED_X] = seed_x
    cfg[C.SEED_DY] = seed_dy
    cfg[C.FPROP] = int(r.fprop)
    cfg[C.SAVE_DECODED] = int(save_decoded)
    return tuple(cfg)


def _pad_rows(t: torch.Tensor, pad: int) -> torch.Tensor:
    return F.pad(t, (0, 0, 0, pad)) if pad else t


def _uses_sr(r: Recipe) -> bool:
    return "sr" in (r.x.rounding, r.wgrad_x.rounding, r.dy.rounding, r.wgrad_dy.rounding)


class _LinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, counter, w_cache, plan: _Plan, w_mode: int):
        cdt = x.dtype
        xs = x.shape
        k = xs[-1]
        n = weight.shape[0]
        m = x.numel() // k  # k > 0: empty inputs never get here
        need_dx, need_dw, need_b = ctx.needs_input_grad[:3]
        fp4_dgrad = plan.dgrad and need_dx
        fp4_wgrad = plan.wgrad and need_dw
        pad = (-m) % TOKEN_ALIGN if fp4_wgrad else 0
        b = None if bias is None else bias.to(cdt)

        # The ops take [..., k] as it is; a 1D input, or rows to pad, as 2D
        xin = x if (not pad and len(xs) > 1) else _pad_rows(x.reshape(-1, k), pad)
        xt = wt = None
        if plan.fprop or fp4_wgrad or fp4_dgrad:
            y, xt, wt = _passes.linear_fwd(xin, weight, b if plan.fprop else None, counter, plan.cfg, fp4_wgrad,
                                           fp4_dgrad, w_mode, w_cache)
            if w_mode != _passes.W_FRESH and fp4_dgrad:
                # Wᵀ lives in the layer's cache, after W's rowwise quantization
                wt = w_cache[_passes.packed_nbytes(n, k):]
        if plan.fprop:
            if xin is not x:
                y = (y[:m] if pad else y).reshape(*xs[:-1], n)
        else:
            y = F.linear(x, weight.to(cdt), b)

        if fp4_dgrad or not need_dx:
            if fp4_wgrad or not need_dw:
                ctx.save_for_backward(xt, wt)  # the common case: only FP4 buffers
            else:
                ctx.save_for_backward(xt, wt, x)
        else:
            ctx.save_for_backward(xt, wt, x if (need_dw and not fp4_wgrad) else None, weight)
        # The counter is mutated by the backward op; kept out of save_for_backward so that a
        # layer called twice in one forward (shared weights) does not trip the saved-tensor
        # version check when the first backward advances it.
        ctx.counter = counter
        ctx.plan = plan
        ctx.meta = (xs, m, k, n, pad, fp4_dgrad, fp4_wgrad, need_dx, need_dw, bias is not None and need_b,
                    weight.dtype, None if bias is None else bias.dtype)
        return y

    @staticmethod
    def backward(ctx, dy):
        plan = ctx.plan
        x_shape, m, k, n, pad, fp4_dgrad, fp4_wgrad, need_dx, need_dw, need_db, w_dtype, b_dtype = ctx.meta
        saved = ctx.saved_tensors
        cdt = dy.dtype
        dx = dw = db = None

        if fp4_dgrad or fp4_wgrad:
            dyin = dy if (not pad and dy.dim() > 1) else _pad_rows(dy.reshape(-1, n), pad)
            dx, dw = _passes.linear_bwd(dyin, saved[0], saved[1], ctx.counter, plan.cfg, k, fp4_dgrad, fp4_wgrad,
                                        w_dtype)
            if not fp4_dgrad:
                dx = None
            elif dyin is not dy:
                dx = (dx[:m] if pad else dx).reshape(x_shape)
            if not fp4_wgrad:
                dw = None
        elif plan.uses_sr:
            ctx.counter.add_(1)  # no quantized backward GEMM advanced it, but the forward used it
        if (need_dx and not fp4_dgrad) or (need_dw and not fp4_wgrad) or need_db:
            dy2 = dy.reshape(-1, n)
            if need_dx and not fp4_dgrad:
                dx = (dy2 @ saved[3].to(cdt)).reshape(x_shape)
            if need_dw and not fp4_wgrad:
                dw = (dy2.t() @ saved[2].reshape(-1, k).to(cdt)).to(w_dtype)
            if need_db:
                db = dy2.sum(0, dtype=torch.float32).to(b_dtype)
        return dx, dw, db, None, None, None, None


class RecipeLayer:
    """The recipe and layer index of an NVFP4 layer (Linear, FrozenLinear, GroupedLinear):
    setting either rebuilds the layer's plan, the recipe's switches with this layer's seeds.
    A layer refuses the recipes it cannot run in _accept_recipe."""

    def _accept_recipe(self, r: Recipe) -> Recipe:
        return r

    @property
    def recipe(self) -> Recipe:
        return self._recipe

    @recipe.setter
    def recipe(self, recipe: Union[str, Recipe]) -> None:
        r = self._accept_recipe(get_recipe(recipe))
        self._recipe = r
        self._plan = self._make_plan(r)

    @property
    def layer_index(self) -> int:
        return self._layer_index

    @layer_index.setter
    def layer_index(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"layer_index: must be a non-negative int, got {value!r}")
        self._layer_index = value
        if "_recipe" in self.__dict__:  # set before the recipe in __init__
            self._plan = self._make_plan(self._recipe)

    def _make_plan(self, r: Recipe) -> _Plan:
        i = self._layer_index
        return _Plan(r, _make_cfg(r, signs_to_mask(r.rht_signs), layer_seed(r.seed, i, 0), layer_seed(r.seed, i, 1),
                                  self.__dict__.get("saved_operands") == "decoded"))


class Linear(RecipeLayer, nn.Linear):
    """A drop-in ``nn.Linear`` (same parameters, plus an ``sr_step`` buffer) whose GEMMs run
    in NVFP4.

    recipe: a Recipe or a canned recipe name (nvfp4.nn.RECIPES: "nvfp4" and its ablations
    "no_rht", "no_sr", "no_2d", "fwd_only", "bf16"; "fp4_all_the_way"; the MXFP4 recipes
    "mx_baseline", "nvidia_round_to_infinity", "tetrajet"). Recipes with an MXFP4 operand or
    double quantization run through nvfp4.nn.emulated (exact decode + FP32-accumulated
    GEMMs; one host read of the SR counter per pass, no CUDA-graph capture). layer_index:
    this layer's place in the model; it selects the layer's stochastic-rounding seeds
    (convert() numbers layers in registration order).

    The output dtype is the input's, or the autocast dtype when autocast is on (the layer
    casts its input). Features must be multiples of 16 (NVFP4 blocks).

    ``sr_step`` (a buffer in the state_dict, on the module's device) counts the backward
    passes that used stochastic rounding; it is the Philox offset, so restoring it with the
    state_dict resumes the exact random streams. A state_dict without it (a checkpoint of
    the unconverted model) loads and leaves the counter as it is.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None,
                 recipe: Union[str, Recipe] = "nvfp4", layer_index: int = 0):
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self._nvfp4_init(recipe, layer_index)

    # -- construction helpers shared by __init__, convert() and unpickling
    def _nvfp4_init(self, recipe, layer_index: int) -> None:
        if self.in_features % 16 or self.out_features % 16:
            raise ValueError(f"in_features/out_features: must be multiples of 16 for NVFP4 blocks, got "
                             f"{self.in_features}x{self.out_features}")
        dev = self.weight.device
        with torch.inference_mode(False):
            # a normal tensor even when the model is built under inference_mode: the backward advances it
            step = torch.zeros((), dtype=torch.int64, device=dev)
        self.register_buffer("sr_step", step, persistent=True)
        self.register_buffer("_w_cache", None, persistent=False)
        self.precision = "nvfp4"
        self.weight_reuse = None
        self._w_cache_stored = False
        self.saved_operands = "fp4"
        self.layer_index = layer_index
        self.recipe = recipe

    @classmethod
    def from_linear(cls, module: nn.Linear, recipe: Union[str, Recipe] = "nvfp4", layer_index: int = 0) -> "Linear":
        """Turn an nn.Linear into an nvfp4 Linear in place (same object, same Parameters,
        hooks and attributes; optimizers built on it stay valid). Returns the module."""
        if type(module) is not nn.Linear:
            raise TypeError(f"module: expected a torch.nn.Linear, got {type(module).__name__}")
        if module.in_features % 16 or module.out_features % 16:
            raise ValueError(f"module: in_features/out_features must be multiples of 16, got "
                             f"{module.in_features}x{module.out_features}")
        module.__class__ = cls
        try:
            module._nvfp4_init(recipe, layer_index)
        except Exception:
            module.__class__ = nn.Linear
            raise
        return module

    def to_linear(self) -> nn.Linear:
        """The reverse of from_linear, in place: back to a plain nn.Linear."""
        for name in ("sr_step", "_w_cache"):
            self._buffers.pop(name, None)
        for a in ("precision", "_layer_index", "_recipe", "_plan", "weight_reuse", "_w_cache_stored",
                  "_nvfp4_full_recipe", "saved_operands"):
            self.__dict__.pop(a, None)
        self.__class__ = nn.Linear
        return self

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        check_counter_state(prefix, state_dict)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)
        # a checkpoint of the model before conversion has no counter: keep ours
        key = prefix + "sr_step"
        if key in missing_keys:
            missing_keys.remove(key)

    # -- configuration
    def _accept_recipe(self, r: Recipe) -> Recipe:
        if r.quantized:
            check_shapes(r, self.in_features, self.out_features)
        return r

    @property
    def active_recipe(self) -> Recipe:
        """The recipe the next forward uses: `recipe`, or bf16 while set_precision(..., "bf16")."""
        return RECIPES["bf16"] if self.precision == "bf16" else self._recipe

    def set_weight_reuse(self, mode: Optional[str]) -> None:
        """None: quantize the weight on every forward (the default; never stale). "store":
        quantize it and keep the result in a buffer of this layer; "reuse": use the kept
        result without looking at the weight — for the later micro-batches of one optimizer
        step. The caller promises the weight has not changed since the last "store"."""
        if mode not in WEIGHT_REUSE_MODES:
            raise ValueError(f"mode: must be one of {WEIGHT_REUSE_MODES}, got {mode!r}")
        if mode is not None and self._w_cache is None:
            # allocated here, outside any CUDA-graph capture, sized for both orientations
            nbytes = _passes.w_cache_nbytes(self.out_features, self.in_features)
            self._w_cache = torch.zeros((nbytes,), dtype=torch.uint8, device=self.weight.device)
            self._w_cache_stored = False
        if mode == "reuse" and not self._w_cache_stored:
            raise RuntimeError("mode: 'reuse' needs a forward with 'store' first (nothing is kept yet)")
        self.weight_reuse = mode

    def set_saved_operands(self, mode: str) -> None:
        """What the forward keeps for the backward's FP4 GEMMs: "fp4" (the default: Xᵀ and Wᵀ
        as FP4 codes with their scales, ~0.56 bytes an element, decoded again by a pass before
        each backward GEMM) or "decoded" (their decoded values, 2 bytes an element as BF16
        training keeps X, and no decode pass). The same values reach the same GEMMs either way,
        so the results are the same bits; "decoded" trades activation memory for that pass. It
        applies where the backward GEMM's runner reads decoded operands (the Hopper emulation;
        nvfp4.gemm_takes_decoded); elsewhere (the CPU reference, Blackwell's FP4 GEMMs) and for
        a weight held in a weight cache (set_weight_reuse, the FP4 gather of
        nvfp4.distributed), the codes are kept. The saved tensors' dtype says which form was
        kept (uint8 codes, bfloat16 values). "decoded" is refused for a recipe the fused
        passes do not run (bf16, MXFP4, double quantization); a later switch to such a
        recipe (set_precision) leaves it without effect until a fused recipe is back."""
        if mode not in SAVED_OPERANDS:
            raise ValueError(f"mode: must be one of {SAVED_OPERANDS}, got {mode!r}")
        r = self._recipe
        if mode != "fp4" and not (r.quantized and r.fused):
            raise ValueError(f"mode: {mode!r} applies to the fused NVFP4 recipes' passes; recipe {r.name!r} runs "
                             "unquantized or through the per-operand path, which keeps what it keeps")
        self.saved_operands = mode
        self._plan = self._make_plan(self._recipe)

    def extra_repr(self) -> str:
        s = super().extra_repr() + f", recipe={self._recipe.name}"
        if self.saved_operands != "fp4":
            s += f", saved_operands={self.saved_operands}"
        if self.precision != "nvfp4":
            s += f", precision={self.precision}"
        return s

    # -- initialization
    def reset_parameters(self) -> None:
        """nn.Linear's initialization, and the stochastic-rounding counter back to 0 (after
        to_empty(), as FSDP's meta-device initialization does, its memory is uninitialized)."""
        super().reset_parameters()
        step = self._buffers.get("sr_step")
        if step is not None:
            with torch.no_grad():
                step.zero_()
        if "_w_cache_stored" in self.__dict__:
            self._w_cache_stored = False

    # -- compute
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Run on every call of every layer. Parameters and buffers are read from their dicts
        # (nn.Module.__getattr__ costs ~0.4 us a read); a parametrized weight or bias
        # (torch.nn.utils.parametrize) is not in the dict and is read as an attribute.
        params = self._parameters
        weight = params.get("weight")
        if weight is None:
            weight = self.weight
        bias = params["bias"] if "bias" in params else self.bias
        check_input(self, x, weight.device)
        r = self._recipe
        if self.precision == "bf16" or not r.quantized:
            return F.linear(x, weight, bias)
        if x.is_cuda:
            if torch.is_autocast_enabled("cuda"):
                x = x.to(torch.get_autocast_dtype("cuda"))
        elif x.is_cpu:
            if torch.is_autocast_enabled("cpu"):
                x = x.to(torch.get_autocast_dtype("cpu"))
        elif not x.is_meta:
            dev = x.device.type
            if torch.is_autocast_enabled(dev):
                x = x.to(torch.get_autocast_dtype(dev))
        if x.dtype not in _FLOATS or weight.dtype not in _FLOATS:
            raise TypeError(f"x: nvfp4 Linear takes float32/float16/bfloat16 inputs and weights, got "
                            f"{x.dtype} and {weight.dtype}")
        if x.numel() == 0 or weight.shape[0] == 0:
            # nothing to quantize (no input, or no output features: a GEMM of K = 0 backward);
            # the output in the input's dtype, as for any input
            b = None if bias is None else bias.to(x.dtype)
            return F.linear(x, weight.to(x.dtype), b)
        mode = _W_MODE[self.weight_reuse]
        buffers = self._buffers
        counter = buffers["sr_step"]
        w_cache = buffers["_w_cache"]
        if x.is_meta:
            # shapes and dtypes only (model builders, FSDP's meta-device init): the ops'
            # fake implementations, no kernel; the per-operand path reads the counter on the
            # host, so it gets the same shapes from F.linear
            if not r.fused:
                b = None if bias is None else bias.to(x.dtype)
                return F.linear(x, weight.to(x.dtype), b)
            return _LinearFn.apply(x, weight, bias, counter, w_cache, self._plan, _passes.W_FRESH)
        gathered = getattr(weight, "nvfp4_w_cache", None)
        if gathered is not None:
            # FSDP2 gathered this weight in NVFP4 (nvfp4.distributed): W and Wᵀ are in the
            # gathered buffer, laid out as the weight cache
            if mode != _passes.W_FRESH or not r.fused:
                raise RuntimeError(f"weight: gathered in FP4 (nvfp4.distributed), which needs a fused NVFP4 recipe "
                                   f"and weight_reuse=None; got recipe {r.name!r}, "
                                   f"weight_reuse={self.weight_reuse!r}")
            mode, w_cache = _passes.W_REUSE, gathered
        if not r.fused:
            if mode != _passes.W_FRESH:
                raise RuntimeError(f"weight_reuse: {self.weight_reuse!r} is implemented for the fused NVFP4 recipes; "
                                   f"recipe {r.name!r} quantizes the weight on every forward")
            if counter.is_inference() and not torch.is_inference_mode_enabled():
                counter = self.sr_step = counter.clone()
            return emulated_linear(x, weight, bias, counter, r, self._layer_index)
        if not torch.compiler.is_compiling():
            if mode == _passes.W_STORE:
                self._w_cache_stored = True
            if counter.is_inference() and not torch.is_inference_mode_enabled():
                # loaded or moved under inference_mode: a normal counter the backward may advance
                counter = self.sr_step = counter.clone()
        return _LinearFn.apply(x, weight, bias, counter, w_cache, self._plan, mode)
