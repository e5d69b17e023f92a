"""nvfp4.nn.GroupedLinear: the E expert projections of a mixture-of-experts layer in NVFP4.

    y[rows of expert g] = x[rows of g] · W[g]ᵀ (+ bias[g])        x [T, K] token-sorted, W [E, N, K]

``offs`` (int32 [E], cumulative ends of each expert's rows, on x's device: torch._grouped_mm's
convention) says which rows belong to which expert. The three GEMMs follow the dense layer's
recipe per expert (nvfp4.nn.Linear): fprop Q(X_g)·Q(W_g)ᵀ with 2D 16x16 weight tiles, dgrad
Q(dY_g)·Q(W_gᵀ)ᵀ with stochastic rounding on dY, wgrad Q(dY_gᵀ)·Q(X_gᵀ)ᵀ with the Hadamard
transform along the tokens. Each expert's operands are their own tensors (own amax and
per-tensor scale). One op per pass (nvfp4.nn._grouped_passes.grouped_linear_fwd / _bwd): the forward
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
from . import _grouped_passes
from .._format import signs_to_mask
from .._grouped import _raise_offs
from .linear import _FLOATS, RecipeLayer, _Plan, _make_cfg, _uses_sr
from .recipe import RECIPES, Recipe, layer_seed

__all__ = ["GroupedLinear", "GroupedExperts", "grouped_linear", "grouped_mm_reference", "is_fused_experts"]


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
        gathered = getattr(weight, "nvfp4_batched_w", None)  # FSDP2's FP4 all-gather: (Ŵ, Ŵᵀ) given
        if gathered is not None:
            if not r.fprop or (need_dx and not fp4_dgrad):
                raise RuntimeError("GroupedLinear: an FP4-gathered weight holds only its quantization; this recipe "
                                   f"({r.name}) needs the dense weight")
            out = _grouped_passes.grouped_linear_fwd_q(x, gathered[0], offs, counter, plan.cfg, fp4_wgrad)
            y, xt, err = out[0], tuple(out[1:4]), out[4]
            if fp4_dgrad:
                wt = gathered[1]
            if check:
                _raise_offs(err)
        elif r.fprop or fp4_wgrad or fp4_dgrad:
            out = _grouped_passes.grouped_linear_fwd(x, weight, offs, counter, plan.cfg, fp4_wgrad, fp4_dgrad)
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
            dxq, dwq, err = _grouped_passes.grouped_linear_bwd(dy, offs, xt, wt, ctx.counter, plan.cfg, k, fp4_dgrad, fp4_wgrad,
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


class GroupedLinear(RecipeLayer, nn.Module):
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

    def _accept_recipe(self, r: Recipe) -> Recipe:
        if r.quantized and not r.fused:
            raise ValueError(f"recipe: GroupedLinear runs NVFP4 recipes without double quantization (the fused "
                             f"ops); {r.name!r} has an MXFP4 operand or double quantization")
        return r

    @property
    def active_recipe(self) -> Recipe:
        return RECIPES["bf16"] if self.precision == "bf16" else self._recipe

    def extra_repr(self) -> str:
        s = (f"num_experts={self.num_experts}, in_features={self.in_features}, out_features={self.out_features}, "
             f"bias={self.bias is not None}, recipe={self._recipe.name}")
        return s + (f", precision={self.precision}" if self.precision != "nvfp4" else "")

    def _counter(self, name: str = "sr_step") -> torch.Tensor:
        counter = getattr(self, name)
        if not torch.compiler.is_compiling() and counter.is_inference() and not torch.is_inference_mode_enabled():
            counter = counter.clone()  # loaded under inference_mode: a normal tensor the backward may advance
            setattr(self, name, counter)
        return counter

    def forward(self, x: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        if x.shape[-1] != self.in_features:
            raise ValueError(f"x: last dimension {x.shape[-1]} differs from in_features={self.in_features}")
        x2 = x.reshape(-1, self.in_features)
        _ops._check_offs(offs, x2, self.num_experts)
        y = grouped_linear(x2, self.weight, offs, self._counter(), self._plan, self.precision, self.check_offs)
        if self.bias is not None:
            y = y + _bias_rows(self.bias.to(y.dtype), offs, x2.shape[0])
        return y.reshape(*lead, self.out_features)


def grouped_linear(x: torch.Tensor, weight: torch.Tensor, offs: torch.Tensor, counter: torch.Tensor, plan: _Plan,
                   precision: str = "nvfp4", check_offs: bool = False) -> torch.Tensor:
    """y [T, N] of x [T, K] (token-sorted) and weight [E, N, K] under plan's recipe, the
    autocast dtype applied to x; precision "bf16" (or an unquantized recipe) runs
    torch._grouped_mm in x's dtype. offs is int32 [E] on x's device (checked by the caller)."""
    dev = x.device.type
    if dev in ("cpu", "cuda") and torch.is_autocast_enabled(dev):
        x = x.to(torch.get_autocast_dtype(dev))
    if precision == "bf16" or not plan.recipe.quantized or x.shape[0] == 0:
        return grouped_mm_reference(x, weight.to(x.dtype), offs)
    if x.device != weight.device:
        raise ValueError(f"x: on {x.device}, but the layer's weight is on {weight.device}")
    if x.dtype not in _FLOATS or weight.dtype not in _FLOATS:
        raise TypeError(f"x: GroupedLinear takes float32/float16/bfloat16 inputs and weights, got "
                        f"{x.dtype} and {weight.dtype}")
    return _GroupedFn.apply(x, weight, offs, counter, plan, check_offs)


# ------------------------------------------------------------------------------ fused expert modules
def is_fused_experts(m: nn.Module) -> bool:
    """A module holding E experts' MLP weights as 3D parameters, as Hugging Face's MoE models
    (Mixtral, Qwen2/3-MoE, OLMoE, DeepSeek-V3, gpt-oss: transformers >= 5) and torchtitan-style
    code store them: ``gate_up_proj`` [E, 2I, H] (or ``up_proj`` [E, I, H] without a gate) and
    ``down_proj`` [E, H, I] (both transposed when ``is_transposed``), forward(hidden_states,
    top_k_index, top_k_weights)."""
    if isinstance(m, GroupedExperts):
        return True
    down = m._parameters.get("down_proj")
    up = m._parameters.get("gate_up_proj", m._parameters.get("up_proj"))
    return (isinstance(down, torch.Tensor) and isinstance(up, torch.Tensor) and down.dim() == 3 and up.dim() == 3
            and isinstance(getattr(m, "num_experts", None), int) and down.shape[0] == up.shape[0] == m.num_experts)


def experts_shapes(m: nn.Module):
    """[(parameter name, (E, N, K))] of a fused experts module's projections, as [E, out, in]."""
    t = bool(getattr(m, "is_transposed", False))
    up = "gate_up_proj" if "gate_up_proj" in m._parameters else "up_proj"
    out = []
    for name in (up, "down_proj"):
        e, a, b = m._parameters[name].shape
        out.append((name, (e, b, a) if t else (e, a, b)))
    return out


class GroupedExperts(RecipeLayer, nn.Module):
    """What convert() makes of a fused experts module (is_fused_experts), in place: the same
    object and Parameters, its class swapped for a subclass whose forward runs both projections
    through the grouped NVFP4 path (nvfp4.nn.GroupedLinear's ops) with the tokens sorted by
    expert on the device (no host synchronization, CUDA-graph capturable): up (and gate)
    projection, the module's own gate/activation (``_apply_gate`` / ``act_fn``), down projection,
    the routing weights, the sum over the top-k. Expert biases are added after each GEMM. A
    transposed layout (gpt-oss) is read through a transposed view (a copy per forward).
    Buffers ``sr_step_up`` / ``sr_step_down`` count the backward passes (the state_dict keeps
    them; a checkpoint without them loads). ``to_experts()`` undoes the conversion."""

    _classes: dict = {}

    @classmethod
    def convert_module(cls, module: nn.Module, recipe: Union[str, Recipe] = "nvfp4",
                       layer_index: int = 0) -> "GroupedExperts":
        if isinstance(module, GroupedExperts):
            module.recipe = recipe
            module.layer_index = layer_index
            return module
        if not is_fused_experts(module):
            raise TypeError(f"module: {type(module).__name__} is not a fused experts module")
        for name, (e, n, k) in experts_shapes(module):
            if n % 16 or k % 16:
                raise ValueError(f"module: {name} is {n}x{k} per expert; NVFP4 needs multiples of 16")
        orig = type(module)
        sub = cls._classes.get(orig)
        if sub is None:
            sub = type("NVFP4" + orig.__name__, (cls, orig), {"_nvfp4_orig_class": orig})
            cls._classes[orig] = sub
        module.__class__ = sub
        try:
            with torch.inference_mode(False):
                dev = module.down_proj.device
                module.register_buffer("sr_step_up", torch.zeros((), dtype=torch.int64, device=dev))
                module.register_buffer("sr_step_down", torch.zeros((), dtype=torch.int64, device=dev))
            module.precision = "nvfp4"
            module.check_offs = False
            module._layer_index = layer_index
            module.recipe = recipe
        except Exception:
            module.__class__ = orig
            raise
        return module

    def to_experts(self) -> nn.Module:
        """Back to the original class, in place."""
        for name in ("sr_step_up", "sr_step_down"):
            self._buffers.pop(name, None)
        for a in ("precision", "check_offs", "_layer_index", "_recipe", "_plan"):
            self.__dict__.pop(a, None)
        self.__class__ = self._nvfp4_orig_class
        return self

    def _accept_recipe(self, r: Recipe) -> Recipe:
        if r.quantized and not r.fused:
            raise ValueError(f"recipe: grouped experts run NVFP4 recipes without double quantization; {r.name!r} "
                             "has an MXFP4 operand or double quantization")
        return r

    def _make_plan(self, r: Recipe):
        # two projections, two seed streams: layer indices i and i + 1
        i = self._layer_index
        mask = signs_to_mask(r.rht_signs)
        return tuple(_Plan(r, _make_cfg(r, mask, layer_seed(r.seed, j, 0), layer_seed(r.seed, j, 1)))
                     for j in (i, i + 1))

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)
        for key in (prefix + "sr_step_up", prefix + "sr_step_down"):
            if key in missing_keys:  # a checkpoint of the unconverted model
                missing_keys.remove(key)

    def _counter(self, name: str) -> torch.Tensor:
        return GroupedLinear._counter(self, name)

    def _weight(self, name: str) -> torch.Tensor:
        w = getattr(self, name)
        return w.transpose(-2, -1) if getattr(self, "is_transposed", False) else w

    def forward(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor):
        e = self.num_experts
        t, h = hidden_states.shape[0], hidden_states.shape[-1]
        k = top_k_index.shape[-1]
        ids = top_k_index.reshape(-1)
        ids_sorted, perm = torch.sort(ids, stable=True)
        x = hidden_states[perm // k]
        # tokens per expert on the device (integer atomics: deterministic); ids >= E (expert
        # parallelism's sentinels) land in a last bin and sort to the tail, which no group owns
        bins = torch.zeros(e + 1, dtype=torch.int64, device=ids.device)
        bins.scatter_add_(0, ids_sorted.clamp(0, e), torch.ones_like(ids_sorted))
        offs = bins[:e].cumsum(0).to(torch.int32)
        gid = ids_sorted.clamp(0, e - 1)
        has_gate = "gate_up_proj" in self._parameters
        up_name = "gate_up_proj" if has_gate else "up_proj"
        y = grouped_linear(x, self._weight(up_name), offs, self._counter("sr_step_up"), self._plan[0], self.precision,
                           self.check_offs)
        bias = getattr(self, up_name + "_bias", None)
        if isinstance(bias, torch.Tensor):
            y = y + bias[gid].to(y.dtype)
        if has_gate:
            y = self._apply_gate(y) if hasattr(self, "_apply_gate") else _default_gate(self, y)
        else:
            y = self.act_fn(y)
        y = grouped_linear(y, self._weight("down_proj"), offs, self._counter("sr_step_down"), self._plan[1],
                           self.precision, self.check_offs)
        bias = getattr(self, "down_proj_bias", None)
        if isinstance(bias, torch.Tensor):
            y = y + bias[gid].to(y.dtype)
        if getattr(self, "has_post_expert_norm", False):
            y = self.post_expert_norm(y)
        # rows of no expert (sentinels) are 0 out of the grouped GEMM: weight them by 0 too
        y = y * top_k_weights.reshape(-1)[perm].unsqueeze(-1)
        inv = torch.empty_like(perm)
        inv[perm] = torch.arange(perm.shape[0], device=perm.device)
        return y[inv].view(t, k, h).sum(dim=1).to(hidden_states.dtype)


def _default_gate(m: nn.Module, y: torch.Tensor) -> torch.Tensor:
    gate, up = y.chunk(2, dim=-1)
    return m.act_fn(gate) * up
