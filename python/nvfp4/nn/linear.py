"""nvfp4.nn.Linear: nn.Linear whose three GEMMs run in NVFP4 according to a Recipe.

fprop  Y  = Q(X)·Q(W)ᵀ                 gemm(qx, qw)
dgrad  dX = Q(dY)·Q(W)                 gemm(qdy, qw.T)      W's columnwise = Wᵀ quantized along N
wgrad  dW = Q(dYᵀ)·Q(Xᵀ)               gemm(qdy.T, qx.T)    both quantized along the token axis

Only the columnwise FP4 X (about 0.28x of BF16 X) is kept for the backward pass. The weight
is quantized once per optimizer step (ops.quantize_weight) and quantized straight from the
master weight, never from an autocast copy.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

import torch
import torch.nn.functional as F
from torch import nn

from .._format import RHT_COLUMNWISE, signs_to_mask
from . import ops
from .recipe import RECIPES, Recipe, get_recipe, layer_seed

__all__ = ["Linear"]

_FLOATS = (torch.float32, torch.float16, torch.bfloat16)

# Rows of the token axis are padded to this before a columnwise quantization: the token axis
# is the K of the wgrad GEMM, and native FP4 GEMMs need K % 32 == 0. Zero rows change no
# amax, no block scale and no product.
TOKEN_ALIGN = 32


@dataclass(frozen=True)
class _Plan:
    """Everything a layer's autograd function needs besides tensors; hashable, so that
    torch.compile treats it as a constant."""

    recipe: Recipe
    slot: int
    sign_mask: int
    seed_x: int
    seed_dy: int


def _pad_rows(t: torch.Tensor, pad: int) -> torch.Tensor:
    return F.pad(t, (0, 0, 0, pad)) if pad else t


def _quantize_two_ways(t, row_cfg, col_cfg, plan, seed, offset):
    """Rowwise with row_cfg and/or columnwise with col_cfg (None = not needed), in one pass
    when the two configs agree on block and rounding. Returns (row triple, col triple).

    Both orientations use the same seed: SR counts random words by element index within
    the orientation, so they draw different bits anyway, and a result then does not depend
    on whether the other orientation was needed (dX not wanted) or fused into one pass."""
    row = col = None
    if row_cfg is not None and col_cfg is not None and (row_cfg.block, row_cfg.rounding) == \
            (col_cfg.block, col_cfg.rounding):
        rht = RHT_COLUMNWISE if col_cfg.rht else 0
        q = ops.quantize(t, row_cfg.block, row_cfg.rounding, rht, plan.sign_mask, seed, offset, True, True)
        return q[:3], q[3:]
    if row_cfg is not None:
        row = ops.quantize(t, row_cfg.block, row_cfg.rounding, 0, plan.sign_mask, seed, offset, True, False)[:3]
    if col_cfg is not None:
        rht = RHT_COLUMNWISE if col_cfg.rht else 0
        col = ops.quantize(t, col_cfg.block, col_cfg.rounding, rht, plan.sign_mask, seed, offset, False, True)[3:]
    return row, col


class _LinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, offset, plan: _Plan):
        r = plan.recipe
        cdt = x.dtype
        k = x.shape[-1]
        n = weight.shape[0]
        x2 = x.reshape(-1, k)
        m = x2.shape[0]
        need_dx, need_dw = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        need_db = bias is not None and ctx.needs_input_grad[2]
        fp4_dgrad = r.dgrad and need_dx
        fp4_wgrad = r.wgrad and need_dw
        pad = (-m) % TOKEN_ALIGN if fp4_wgrad else 0

        qx_col = qw_col = None
        if r.fprop or fp4_wgrad:
            xp = _pad_rows(x2, pad).contiguous()
            qx_row, qx_col = _quantize_two_ways(xp, r.x if r.fprop else None, r.wgrad_x if fp4_wgrad else None,
                                                plan, plan.seed_x, offset)
        if r.fprop or fp4_dgrad:
            qw = ops.quantize_weight(weight, plan.slot, r.w.block, plan.sign_mask, r.fprop, fp4_dgrad)
            qw_col = qw[3:] if fp4_dgrad else None
        if r.fprop:
            b = None if bias is None else bias.to(cdt)
            y = ops.gemm(qx_row, qw[:3], r.backend, cdt, b)
            if pad:
                y = y[:m]
        else:
            y = F.linear(x2, weight.to(cdt), None if bias is None else bias.to(cdt))

        saved_x = x2 if (need_dw and not fp4_wgrad) else None
        saved_w = weight if (need_dx and not fp4_dgrad) else None
        qxc = qx_col if fp4_wgrad else (None, None, None)
        qwc = qw_col if fp4_dgrad else (None, None, None)
        ctx.save_for_backward(saved_x, saved_w, *qxc, *qwc, offset)
        ctx.plan = plan
        ctx.meta = (tuple(x.shape), m, n, pad, fp4_dgrad, fp4_wgrad, need_dx, need_dw, need_db, weight.dtype,
                    None if bias is None else bias.dtype)
        return y.reshape(*x.shape[:-1], n)

    @staticmethod
    def backward(ctx, dy):
        plan = ctx.plan
        r = plan.recipe
        x_shape, m, n, pad, fp4_dgrad, fp4_wgrad, need_dx, need_dw, need_db, w_dtype, b_dtype = ctx.meta
        saved_x, saved_w, xd, xs, xa, wd, ws, wa, offset = ctx.saved_tensors
        cdt = dy.dtype
        dy2 = dy.reshape(-1, n)
        dx = dw = db = None

        if fp4_dgrad or fp4_wgrad:
            dyp = _pad_rows(dy2, pad).contiguous()
            qdy_row, qdy_col = _quantize_two_ways(dyp, r.dy if fp4_dgrad else None,
                                                  r.wgrad_dy if fp4_wgrad else None, plan, plan.seed_dy, offset)
        if need_dx:
            if fp4_dgrad:
                dx = ops.gemm(qdy_row, (wd, ws, wa), r.backend, cdt, None)
                if pad:
                    dx = dx[:m]
            else:
                dx = dy2 @ saved_w.to(cdt)
            dx = dx.reshape(x_shape)
        if need_dw:
            if fp4_wgrad:
                dw = ops.gemm(qdy_col, (xd, xs, xa), r.backend, w_dtype, None)
            else:
                dw = (dy2.t() @ saved_x.to(cdt)).to(w_dtype)
        if need_db:
            db = dy2.sum(0, dtype=torch.float32).to(b_dtype)
        return dx, dw, db, None, None


class Linear(nn.Linear):
    """A drop-in ``nn.Linear`` (same parameters and state_dict) whose GEMMs run in NVFP4.

    recipe: a Recipe or a canned recipe name ("nvfp4", "no_rht", "no_sr", "no_2d",
    "fwd_only", "bf16"). layer_index: this layer's place in the model; it selects the
    layer's stochastic-rounding seeds (convert() numbers layers in registration order).

    The output dtype is the input's, or the autocast dtype when autocast is on (the layer
    casts its input). Features must be multiples of 16 (NVFP4 blocks).

    Stochastic rounding uses offset = this layer's count of training forwards (``sr_step``);
    set it when resuming to continue the exact same random streams.
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
        self._sr_step = torch.zeros((), dtype=torch.int64)
        self._slot = ops.new_cache_slot(self)
        self.precision = "nvfp4"
        self.layer_index = int(layer_index)
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
        module._nvfp4_init(recipe, layer_index)
        return module

    def to_linear(self) -> nn.Linear:
        """The reverse of from_linear, in place: back to a plain nn.Linear."""
        for a in ("_sr_step", "_slot", "precision", "layer_index", "_recipe", "_plan"):
            self.__dict__.pop(a, None)
        self.__class__ = nn.Linear
        return self

    def __setstate__(self, state):
        # A copy (deepcopy, pickle) must not share this layer's weight cache slot.
        super().__setstate__(state)
        self._slot = ops.new_cache_slot(self)
        self._plan = self._make_plan()

    # -- configuration
    @property
    def recipe(self) -> Recipe:
        return self._recipe

    @recipe.setter
    def recipe(self, recipe: Union[str, Recipe]) -> None:
        self._recipe = get_recipe(recipe)
        self._plan = self._make_plan()

    @property
    def sr_step(self) -> int:
        return int(self._sr_step.item())

    @sr_step.setter
    def sr_step(self, value: int) -> None:
        # a new tensor: the old one may still be saved by a forward whose backward is pending
        self._sr_step = torch.tensor(int(value), dtype=torch.int64)

    def _make_plan(self) -> _Plan:
        r, i = self._recipe, self.layer_index
        return _Plan(r, self._slot, signs_to_mask(r.rht_signs), layer_seed(r.seed, i, 0), layer_seed(r.seed, i, 1))

    @property
    def active_recipe(self) -> Recipe:
        """The recipe the next forward uses: `recipe`, or bf16 while set_precision(..., "bf16")."""
        return RECIPES["bf16"] if self.precision == "bf16" else self._recipe

    def extra_repr(self) -> str:
        s = super().extra_repr() + f", recipe={self._recipe.name}"
        if self.precision != "nvfp4":
            s += f", precision={self.precision}"
        return s

    # -- compute
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.precision == "bf16" or not self._recipe.quantized or x.numel() == 0:
            return F.linear(x, self.weight, self.bias)
        dev = x.device.type
        if torch.is_autocast_enabled(dev):
            x = x.to(torch.get_autocast_dtype(dev))
        if x.dtype not in _FLOATS or self.weight.dtype not in _FLOATS:
            raise TypeError(f"x: nvfp4 Linear takes float32/float16/bfloat16 inputs and weights, got "
                            f"{x.dtype} and {self.weight.dtype}")
        # The counter tensor is never changed in place, only replaced: the backward pass reads
        # this step's offset from the tensor saved here. An in-place increment after a clone
        # is not safe under torch.compile: inductor's joint-graph pass drops the clone as a
        # no-op, so the backward read the input after the graph's trailing copy_ (offset+1).
        offset = self._sr_step
        if torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad):
            self._sr_step = offset + 1
        return _LinearFn.apply(x, self.weight, self.bias, offset, self._plan)
