"""nvfp4.nn.GroupedLinear: the E expert projections of a mixture-of-experts layer in NVFP4.

    y[rows of expert g] = x[rows of g] · W[g]ᵀ (+ bias[g])        x [T, K] token-sorted, W [E, N, K]

``offs`` (int32 [E], cumulative ends of each expert's rows, on x's device: torch._grouped_mm's
convention) says which rows belong to which expert. The three GEMMs follow the dense layer's
recipe per expert (nvfp4.nn.Linear): fprop Q(X_g)·Q(W_g)ᵀ with 2D 16x16 weight tiles, dgrad
Q(dY_g)·Q(W_gᵀ)ᵀ with stochastic rounding on dY, wgrad Q(dY_gᵀ)·Q(X_gᵀ)ᵀ with the Hadamard
transform along the tokens. Each expert's operands are their own tensors (own amax and
per-tensor scale). One op per pass (nvfp4._ops.grouped_linear_fwd / _bwd): the forward
quantizes X (both directions, one call) and W (both directions) and runs the grouped GEMM; the
backward quantizes dY both ways and runs the two grouped GEMMs. Only the FP4 Xᵀ and Wᵀ are kept
for the backward pass. offs is never read on the host, so the layer runs inside CUDA graphs and
fullgraph torch.compile; the pass results carry an offs_error word (``check_offs=True`` makes
the layer synchronize and raise on a bad offs).

Stochastic rounding: Philox keyed by the layer's seeds with the ``sr_step`` buffer as offset
(plus expert g * 2**32), read on the device and advanced by the backward pass, as in the dense
layer: recomputed forwards see the same counter, a resumed run continues the same streams.
"""
from __future__ import annotations

from typing import Union

import torch
import torch.nn.functional as F
from torch import nn

from .. import _ops
from .._format import signs_to_mask
from .._grouped import _raise_offs
from .linear import _FLOATS, _Plan, _make_cfg, _uses_sr
from .recipe import RECIPES, Recipe, get_recipe, layer_seed

__all__ = ["GroupedLinear", "grouped_mm_reference"]


def grouped_mm_reference(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """x [T, K] @ W[g]ᵀ per group in the input's precision: torch._grouped_mm where it exists,
    else a loop over experts (reads offs on the host)."""
    if hasattr(torch, "_grouped_mm"):
        y = torch._grouped_mm(x, w.transpose(-2, -1), offs=offs)
        # torch._grouped_mm leaves the rows of no group unwritten; they are 0 here
        rows = torch.arange(x.shape[0], device=offs.device, dtype=offs.dtype)
        return torch.where((rows < offs[-1]).unsqueeze(1), y, y.new_zeros(()))
    ends = offs.tolist()
    out = x.new_zeros((x.shape[0], w.shape[1]))
    s = 0
    for g, e in enumerate(ends):
        out[s:e] = x[s:e] @ w[g].t()
        s = e
    return out


def _grouped_wgrad_reference(dy: torch.Tensor, x: torch.Tensor, offs: torch.Tensor, n: int, k: int) -> torch.Tensor:
    """dW[g] = dy_gᵀ x_g in the inputs' precision (zeros for an empty group)."""
    if hasattr(torch, "_grouped_mm"):
        dw = torch._grouped_mm(dy.t(), x, offs=offs)
        counts = torch.diff(offs, prepend=offs.new_zeros(1))
        return torch.where((counts > 0).view(-1, 1, 1), dw, dw.new_zeros(()))
    out = dy.new_zeros((offs.shape[0], n, k))
    s = 0
    for g, e in enumerate(offs.tolist()):
        out[g] = dy[s:e].t() @ x[s:e]
        s = e
    return out


def _bias_rows(bias: torch.Tensor, offs: torch.Tensor, t: int) -> torch.Tensor:
    """bias[g] for each row of group g, 0 for rows of no group; computed on the device."""
    rows = torch.arange(t, device=offs.device, dtype=offs.dtype)
    g = torch.bucketize(rows, offs, right=True)  # rows >= offs[E-1] -> E: the zero row
    return F.pad(bias, (0, 0, 0, 1))[g]


class _GroupedFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, offs, counter, plan: _Plan, check: bool):
        r = plan.recipe
        k = x.shape[-1]
        e, n, _ = weight.shape
        need_dx, need_dw = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        fp4_dgrad = r.dgrad and need_dx
        fp4_wgrad = r.wgrad and need_dw
        xt = wt = (None, None, None)
        if r.fprop or fp4_wgrad or fp4_dgrad:
            out = _ops.grouped_linear_fwd(x, weight, offs, counter, plan.cfg, fp4_wgrad, fp4_dgrad)
            y, xt, wt, err = out[0], tuple(out[1:4]), tuple(out[4:7]), out[7]
            if check:
                _raise_offs(err)
        if not r.fprop:
            y = grouped_mm_reference(x, weight.to(x.dtype), offs)
        ctx.save_for_backward(x if (need_dw and not fp4_wgrad) else None,
                              weight if (need_dx and not fp4_dgrad) else None, offs, *xt, *wt)
        ctx.counter = counter  # advanced by the backward op; see nvfp4.nn.linear for why not saved
        ctx.plan = plan
        ctx.meta = (k, n, fp4_dgrad, fp4_wgrad, need_dx, need_dw, weight.dtype, check)
        return y

    @staticmethod
    def backward(ctx, dy):
        plan = ctx.plan
        r = plan.recipe
        k, n, fp4_dgrad, fp4_wgrad, need_dx, need_dw, w_dtype, check = ctx.meta
        saved_x, saved_w, offs, *rest = ctx.saved_tensors
        xt, wt = tuple(rest[0:3]), tuple(rest[3:6])
        dx = dw = None
        if fp4_dgrad or fp4_wgrad:
            dxq, dwq, err = _ops.grouped_linear_bwd(dy, offs, xt, wt, ctx.counter, plan.cfg, k, fp4_dgrad, fp4_wgrad,
                                                    w_dtype)
            if check:
                _raise_offs(err)
            dx = dxq if fp4_dgrad else None
            dw = dwq if fp4_wgrad else None
        elif _uses_sr(r):
            ctx.counter.add_(1)
        if need_dx and not fp4_dgrad:
            dx = grouped_mm_reference(dy, saved_w.to(dy.dtype).transpose(-2, -1), offs)
        if need_dw and not fp4_wgrad:
            dw = _grouped_wgrad_reference(dy, saved_x.to(dy.dtype), offs, n, k).to(w_dtype)
        return dx, dw, None, None, None, None


class GroupedLinear(nn.Module):
    """E expert projections [K -> N] with weights ``weight`` [E, N, K] (and ``bias`` [E, N] if
    bias=True), run on token-sorted rows: ``forward(x, offs)`` with x [T, K] (or [..., K]) and
    offs int32 [E] cumulative ends of each expert's rows, on x's device. Rows at or past
    offs[-1] belong to no expert and get 0 (plus no bias).

    recipe: a fused NVFP4 recipe of nvfp4.nn.RECIPES ("nvfp4" and its ablations, "bf16");
    layer_index selects the stochastic-rounding seeds (convert() numbers layers). in/out
    features must be multiples of 16. ``set_precision(model, "bf16")`` runs the layer with
    torch._grouped_mm in the input's dtype. The expert bias is added in the compute dtype
    after the FP4 GEMM (the grouped GEMM has no bias). check_offs: synchronize after each pass
    and raise ValueError if offs was invalid (debugging; CPU tensors are always checked).
    """

    def __init__(self, num_experts: int, in_features: int, out_features: int, bias: bool = False, device=None,
                 dtype=None, recipe: Union[str, Recipe] = "nvfp4", layer_index: int = 0, check_offs: bool = False):
        super().__init__()
        for name, v in (("num_experts", num_experts), ("in_features", in_features), ("out_features", out_features)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name}: must be a positive int, got {v!r}")
        if in_features % 16 or out_features % 16:
            raise ValueError(f"in_features/out_features: must be multiples of 16 for NVFP4 blocks, got "
                             f"{in_features}x{out_features}")
        self.num_experts, self.in_features, self.out_features = num_experts, in_features, out_features
        self.weight = nn.Parameter(torch.empty((num_experts, out_features, in_features), device=device, dtype=dtype))
        self.bias = nn.Parameter(torch.empty((num_experts, out_features), device=device, dtype=dtype)) if bias else None
        self.reset_parameters()
        self._nvfp4_init(recipe, layer_index, check_offs)

    def reset_parameters(self) -> None:
        # nn.Linear's initialization, per expert
        bound = 1.0 / self.in_features ** 0.5
        nn.init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            nn.init.uniform_(self.bias, -bound, bound)

    def _nvfp4_init(self, recipe, layer_index: int, check_offs: bool = False) -> None:
        with torch.inference_mode(False):
            step = torch.zeros((), dtype=torch.int64, device=self.weight.device)
        self.register_buffer("sr_step", step, persistent=True)
        self.precision = "nvfp4"
        self.check_offs = bool(check_offs)
        self._layer_index = layer_index
        self.recipe = recipe

    @classmethod
    def from_weights(cls, weight: torch.Tensor, bias=None, recipe: Union[str, Recipe] = "nvfp4",
                     layer_index: int = 0) -> "GroupedLinear":
        """A GroupedLinear holding these tensors as its parameters ([E, N, K] and [E, N] or None;
        Parameters are kept as they are, so optimizers built on them stay valid)."""
        if weight.dim() != 3:
            raise ValueError(f"weight: expected [E, N, K], got {tuple(weight.shape)}")
        e, n, k = weight.shape
        m = cls.__new__(cls)
        nn.Module.__init__(m)
        if n % 16 or k % 16:
            raise ValueError(f"weight: N and K must be multiples of 16, got {n}x{k}")
        m.num_experts, m.in_features, m.out_features = e, k, n
        m.weight = weight if isinstance(weight, nn.Parameter) else nn.Parameter(weight)
        if bias is not None and tuple(bias.shape) != (e, n):
            raise ValueError(f"bias: expected [{e}, {n}], got {tuple(bias.shape)}")
        m.bias = None if bias is None else (bias if isinstance(bias, nn.Parameter) else nn.Parameter(bias))
        m._nvfp4_init(recipe, layer_index)
        return m

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)
        key = prefix + "sr_step"  # a checkpoint of the model before conversion has no counter
        if key in missing_keys:
            missing_keys.remove(key)

    @property
    def recipe(self) -> Recipe:
        return self._recipe

    @recipe.setter
    def recipe(self, recipe: Union[str, Recipe]) -> None:
        r = get_recipe(recipe)
        if r.quantized and not r.fused:
            raise ValueError(f"recipe: GroupedLinear runs NVFP4 recipes without double quantization (the fused "
                             f"ops); {r.name!r} has an MXFP4 operand or double quantization")
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
        self._plan = self._make_plan(self._recipe)

    def _make_plan(self, r: Recipe) -> _Plan:
        i = self._layer_index
        return _Plan(r, _make_cfg(r, signs_to_mask(r.rht_signs), layer_seed(r.seed, i, 0), layer_seed(r.seed, i, 1)))

    @property
    def active_recipe(self) -> Recipe:
        return RECIPES["bf16"] if self.precision == "bf16" else self._recipe

    def extra_repr(self) -> str:
        s = (f"num_experts={self.num_experts}, in_features={self.in_features}, out_features={self.out_features}, "
             f"bias={self.bias is not None}, recipe={self._recipe.name}")
        return s + (f", precision={self.precision}" if self.precision != "nvfp4" else "")

    def forward(self, x: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        if x.shape[-1] != self.in_features:
            raise ValueError(f"x: last dimension {x.shape[-1]} differs from in_features={self.in_features}")
        x2 = x.reshape(-1, self.in_features)
        _ops._check_offs(offs, x2, self.num_experts)
        dev = x.device.type
        if torch.is_autocast_enabled(dev) if dev in ("cpu", "cuda") else False:
            x2 = x2.to(torch.get_autocast_dtype(dev))
        if self.precision == "bf16" or not self._recipe.quantized or x2.shape[0] == 0:
            y = grouped_mm_reference(x2, self.weight.to(x2.dtype), offs)
        else:
            if x.device != self.weight.device:
                raise ValueError(f"x: on {x.device}, but the layer's weight is on {self.weight.device}")
            if x2.dtype not in _FLOATS or self.weight.dtype not in _FLOATS:
                raise TypeError(f"x: GroupedLinear takes float32/float16/bfloat16 inputs and weights, got "
                                f"{x2.dtype} and {self.weight.dtype}")
            counter = self.sr_step
            if not torch.compiler.is_compiling() and counter.is_inference() and not torch.is_inference_mode_enabled():
                counter = self.sr_step = counter.clone()
            y = _GroupedFn.apply(x2, self.weight, offs, counter, self._plan, self.check_offs)
        if self.bias is not None:
            y = y + _bias_rows(self.bias.to(y.dtype), offs, x2.shape[0])
        return y.reshape(*lead, self.out_features)
