"""Model conversion: nn.Linear <-> nvfp4.nn.Linear in place, frozen NVFP4 bases
(freeze_fp4), and the precision schedule.

Which layers a conversion takes (plan_conversion says it, with the reason for each skip):
- linear layers: nn.Linear, nvfp4 Linear, and the Conv1D of GPT-2-style Hugging Face models
  (a linear layer whose weight is stored [in, out]; converted by value, see Conv1DLinear);
- transformer blocks: the nn.ModuleList(s) of identical blocks that hold the linear layers
  (`model.layers` of Llama, `transformer.h` of GPT-2, both stacks of an encoder-decoder),
  found by structure (find_blocks) or named with `blocks=`. skip_first_blocks /
  skip_last_blocks keep whole blocks of each stack in high precision;
- heads stay in high precision by default: names in DEFAULT_EXCLUDE (lm_head, score,
  classifier, ...) and, when blocks are found, any linear layer registered after the last
  block and outside the blocks (an output or classification head of any size); embeddings
  are never converted; both are reported.
"""
from __future__ import annotations

import fnmatch
import re
import sys
from collections import OrderedDict
from typing import Callable, List, Optional, Sequence, Tuple, Union

import torch
from torch import nn

from .frozen import FrozenLinear
from .linear import Linear
from .grouped import GroupedExperts, GroupedLinear, experts_shapes, is_fused_experts
from .fp8 import FP8Linear
from .recipe import Recipe, get_recipe

__all__ = ["convert", "unconvert", "freeze_fp4", "plan_conversion", "ConversionPlan", "find_blocks",
           "converted_layers", "frozen_layers", "set_precision", "set_saved_operands", "set_sr_step",
           "set_weight_reuse", "Cooldown", "Conv1DLinear", "DEFAULT_EXCLUDE", "is_conv1d", "GROUPED", "ROUTER_NAMES"]

#: Names left alone unless `exclude` is given explicitly: output and classification heads,
#: whose outputs feed the loss directly (the recipe keeps them in high precision).
DEFAULT_EXCLUDE = ("lm_head", "*.lm_head", "output", "*.output", "head", "*.head", "classifier", "*.classifier",
                   "score", "*.score", "qa_outputs", "*.qa_outputs")

Pattern = Union[str, "re.Pattern", Callable[[str, nn.Module], bool]]


def _as_list(p, name: str = "include/exclude") -> list:
    """The patterns of an include/exclude argument, each checked (a bad regex is refused here,
    by name, not when the first module name is matched)."""
    if p is None:
        return []
    if isinstance(p, (str, re.Pattern)) or callable(p):
        p = [p]
    elif hasattr(p, "__iter__") and not isinstance(p, (bytes, dict)):
        p = list(p)
    else:
        raise TypeError(f"{name}: expected a pattern (str, re.Pattern or callable) or a list of them, got "
                        f"{type(p).__name__} {p!r}")
    for i, q in enumerate(p):
        if isinstance(q, str):
            if q.startswith("re:"):
                try:
                    re.compile(q[3:])
                except re.error as e:
                    raise ValueError(f"{name}: {q!r} is not a valid regular expression ({e})") from None
        elif not isinstance(q, re.Pattern) and not callable(q):
            raise TypeError(f"{name}[{i}]: patterns must be str, re.Pattern or callable, got {type(q).__name__}")
    return p


def _matches(name: str, module: nn.Module, patterns: Sequence[Pattern]) -> bool:
    """str: fnmatch on the qualified name ("re:" prefix: a regex searched in it); a compiled
    regex: searched; a callable: called with (name, module)."""
    for p in patterns:
        if isinstance(p, re.Pattern):
            if p.search(name):
                return True
        elif isinstance(p, str):
            if p.startswith("re:"):
                if re.search(p[3:], name):
                    return True
            elif fnmatch.fnmatchcase(name, p):
                return True
        elif callable(p):
            if p(name, module):
                return True
        else:
            raise ValueError(f"include/exclude: patterns must be str, re.Pattern or callable, got {type(p).__name__}")
    return False


def is_conv1d(m: nn.Module) -> bool:
    """A Hugging Face Conv1D (GPT-2, GPT, ...): y = x @ weight + bias with weight [in, out]."""
    if type(m).__name__ != "Conv1D" or not hasattr(m, "nf"):
        return False
    w = getattr(m, "weight", None)
    return isinstance(w, torch.Tensor) and w.dim() == 2


def _linear_like(m: nn.Module) -> bool:
    return isinstance(m, nn.Linear) or is_conv1d(m)


def _features(m: nn.Module) -> Tuple[int, int]:
    """(in, out) of a linear-like module."""
    if is_conv1d(m):
        return tuple(m.weight.shape)
    return m.in_features, m.out_features


def _tied_params(model: nn.Module) -> set:
    """ids of parameters that some other module shares, or that alias an embedding's storage
    (weight tying done by pointing at the same tensor or the same memory)."""
    seen: dict = {}
    emb_ptrs = set()
    for m in model.modules():
        for p in m._parameters.values():
            if p is not None:
                seen[id(p)] = seen.get(id(p), 0) + 1
        if isinstance(m, (nn.Embedding, nn.EmbeddingBag)) and m.weight is not None:
            emb_ptrs.add(m.weight.data_ptr())
    tied = {i for i, c in seen.items() if c > 1}
    for m in model.modules():
        w = m._parameters.get("weight") if _linear_like(m) else None
        if w is not None and w.numel() > 0 and w.data_ptr() in emb_ptrs:
            tied.add(id(w))
    return tied


# ------------------------------------------------------------------------------ transformer blocks
def find_blocks(model: nn.Module, blocks=None) -> List[Tuple[str, List[str]]]:
    """The stacks of transformer blocks in `model`: [(ModuleList name, [block names])].

    A stack is an nn.ModuleList whose entries are modules of one class (not linear layers
    themselves) containing linear layers, and that is not nested in another stack (so the
    experts of an MoE block are part of their block). The blocks' insides may differ (dense
    and MoE layers of one decoder-layer class). Llama's `model.layers` and GPT-2's
    `transformer.h` are found this way; encoder-decoder models have two stacks. blocks:
    name(s) of the ModuleList(s) to use instead of the search."""
    if blocks is not None:
        out = []
        for name in _as_list(blocks, "blocks"):
            if not isinstance(name, str):
                raise ValueError(f"blocks: expected ModuleList names, got {type(name).__name__}")
            try:
                ml = model.get_submodule(name)
            except AttributeError:
                raise ValueError(f"blocks: {name!r} is not a submodule of the model") from None
            if not isinstance(ml, (nn.ModuleList, nn.Sequential)):
                raise ValueError(f"blocks: {name!r} is a {type(ml).__name__}, not an nn.ModuleList")
            out.append((name, [f"{name}.{k}" if name else k for k in ml._modules]))
        return out
    stacks: List[Tuple[str, List[str]]] = []
    for name, m in model.named_modules():
        if not isinstance(m, nn.ModuleList) or len(m) == 0:
            continue
        if any(name.startswith(s + ".") for s, _ in stacks):
            continue
        kids = list(m)
        if len({type(k) for k in kids}) != 1 or _linear_like(kids[0]):
            continue
        if not any(_linear_like(c) for k in kids for c in k.modules()):
            continue
        stacks.append((name, [f"{name}.{k}" if name else k for k in m._modules]))
    return stacks


# ------------------------------------------------------------------------------ the plan
#: The action of a fused experts module (is_fused_experts) that convert() puts on the grouped path.
GROUPED = "convert: grouped experts"
#: Names of router / gate layers of MoE blocks: kept in high precision unless `exclude` is given.
ROUTER_NAMES = ("gate", "*.gate", "router", "*.router", "*.shared_expert_gate")


def _is_router(name: str, m: nn.Module) -> bool:
    return "router" in type(m).__name__.lower() or _matches(name, m, ROUTER_NAMES)


class ConversionPlan(list):
    """plan_conversion's result: [(qualified name, action)], action "convert" or the reason
    the module stays as it is. summary() (also str()) groups it for printing."""

    blocks: List[Tuple[str, List[str]]] = []
    # fused experts modules: name -> "E experts, gate_up_proj NxK, down_proj NxK"; routers
    _experts: dict = {}
    _special: set = frozenset()

    def converted(self) -> List[str]:
        return [n for n, a in self if a == "convert"]

    def grouped(self) -> List[str]:
        """The fused experts modules convert() puts on the grouped NVFP4 path."""
        return [n for n, a in self if a == GROUPED]

    def skipped(self) -> "OrderedDict[str, List[str]]":
        out: "OrderedDict[str, List[str]]" = OrderedDict()
        for n, a in self:
            if a not in ("convert", GROUPED):
                out.setdefault(a, []).append(n)
        return out

    def summary(self, verb: str = "convert") -> str:
        def names(ns, k=4):
            return ", ".join(ns if len(ns) <= k else ns[:k - 1] + ["...", ns[-1]])

        conv = self.converted()
        n_lin = sum(1 for n, a in self if a != "skipped: embedding" and n not in self._special)
        lines = [f"nvfp4 {verb}: {len(conv)} of {n_lin} linear layers"]
        if self._experts:
            lines[0] += f"; {len(self.grouped())} of {len(self._experts)} expert groups"
        if self.blocks:
            lines[0] += "; blocks: " + ", ".join(f"{s} ({len(b)})" for s, b in self.blocks)
        if conv:
            lines.append(f"  {verb:<40s} {len(conv):4d}  {names(conv)}")
        for n in self.grouped():
            lines.append(f"  {GROUPED:<40s}       {n}: {self._experts[n]}")
        for reason, ns in self.skipped().items():
            lines.append(f"  {reason:<40s} {len(ns):4d}  {names(ns)}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()


def _check_count(name, v):
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"{name}: must be a non-negative int, got {v!r}")


def plan_conversion(model: nn.Module, skip_first: int = 0, skip_last: int = 0, include=None, exclude=None,
                    convert_tied: bool = False, *, skip_first_blocks: int = 0, skip_last_blocks: int = 0,
                    blocks=None) -> ConversionPlan:
    """What convert() (and freeze_fp4()) would do: [(qualified name, "convert" or the reason
    it is skipped)] for every linear-like module (nn.Linear, nvfp4 Linear, FrozenLinear,
    Conv1D) and every embedding, in registration order. See convert() for the arguments."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model: expected an nn.Module, got {type(model).__name__}")
    for name, v in (("skip_first", skip_first), ("skip_last", skip_last), ("skip_first_blocks", skip_first_blocks),
                    ("skip_last_blocks", skip_last_blocks)):
        _check_count(name, v)
    inc = _as_list(include, "include")
    exc = list(DEFAULT_EXCLUDE) if exclude is None else _as_list(exclude, "exclude")
    tied = set() if convert_tied else _tied_params(model)
    stacks = find_blocks(model, blocks)
    if (skip_first_blocks or skip_last_blocks) and not stacks:
        raise ValueError("skip_first_blocks/skip_last_blocks: no transformer blocks found in the model (an "
                         "nn.ModuleList of blocks); name them with blocks=")
    # block membership: qualified block name -> (stack, index in stack, stack length)
    block_of = {}
    for s, bl in stacks:
        for i, b in enumerate(bl):
            block_of[b] = (s, i, len(bl))
    order = {n: i for i, (n, _) in enumerate(model.named_modules())}
    last_block_end = max((order[n] for n, _ in model.named_modules() if _block(n, block_of)), default=-1)

    plan = ConversionPlan()
    plan.blocks = stacks
    plan._experts = {}
    special = set()
    for name, m in model.named_modules():
        if isinstance(m, (nn.Embedding, nn.EmbeddingBag)):
            plan.append((name, "skipped: embedding"))
            continue
        if is_fused_experts(m):
            shapes = experts_shapes(m)
            plan._experts[name] = f"{shapes[0][1][0]} experts, " + ", ".join(
                f"{p} {n}x{k}" for p, (_, n, k) in shapes)
            special.add(name)
            blk = _block(name, block_of)
            if inc and not _matches(name, m, inc):
                action = "skipped: not included"
            elif exc and _matches(name, m, exc):
                action = "skipped: excluded"
            elif any(n % 16 or k % 16 for _, (_, n, k) in shapes):
                action = "skipped: experts not multiples of 16"
            elif blk is not None and block_of[blk][1] < skip_first_blocks:
                action = "skipped: skip_first_blocks"
            elif blk is not None and block_of[blk][1] >= block_of[blk][2] - skip_last_blocks:
                action = "skipped: skip_last_blocks"
            else:
                action = GROUPED
            plan.append((name, action))
            continue
        if not _linear_like(m) and _is_router(name, m) and any(p.dim() == 2 for p in m.parameters(recurse=False)):
            plan.append((name, "skipped: router (high precision)"))
            special.add(name)
            continue
        if not _linear_like(m):
            continue
        blk = _block(name, block_of)
        if isinstance(m, FrozenLinear):
            action = "skipped: frozen (FrozenLinear)"
        elif isinstance(m, nn.Linear) and type(m) is not nn.Linear and not isinstance(m, Linear):
            action = f"skipped: a subclass of nn.Linear ({type(m).__name__})"
        elif any(part.startswith("lora_") for part in name.split(".")):
            action = "skipped: LoRA adapter"
        elif inc and not _matches(name, m, inc):
            action = "skipped: not included"
        elif exc and _matches(name, m, exc):
            action = "skipped: excluded"
        elif exclude is None and _is_router(name, m):
            action = "skipped: router (high precision)"
        elif id(m._parameters.get("weight")) in tied:
            action = "skipped: weight tied to another module"
        elif any(f % 16 for f in _features(m)):
            k, n = _features(m)
            action = f"skipped: {k}x{n} not a multiple of 16"
        elif exclude is None and blk is None and stacks and order[name] > last_block_end:
            action = "skipped: head (after the transformer blocks)"
        elif blk is not None and block_of[blk][1] < skip_first_blocks:
            action = "skipped: skip_first_blocks"
        elif blk is not None and block_of[blk][1] >= block_of[blk][2] - skip_last_blocks:
            action = "skipped: skip_last_blocks"
        else:
            action = "convert"
        plan.append((name, action))
    idx = [i for i, (_, a) in enumerate(plan) if a == "convert"]
    for j in idx[:skip_first]:
        plan[j] = (plan[j][0], "skipped: skip_first")
    for j in idx[len(idx) - min(skip_last, len(idx)):] if skip_last else []:
        if plan[j][1] == "convert":
            plan[j] = (plan[j][0], "skipped: skip_last")
    plan._special = frozenset(special)
    return plan


def _block(name: str, block_of: dict) -> Optional[str]:
    """The block a module belongs to (its longest prefix that is a block), or None."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        p = ".".join(parts[:i])
        if p in block_of:
            return p
    return None


# ------------------------------------------------------------------------------ GPT-2's Conv1D
class Conv1DLinear(Linear):
    """An nvfp4 Linear converted from a Hugging Face Conv1D (GPT-2): y = x W + b with W
    stored [in, out] there. Conversion keeps the Parameter objects (an optimizer built
    before conversion keeps them) but transposes the weight's data to the [out, in] layout of
    nn.Linear. The state_dict keeps the Conv1D layout: `weight` is saved as [in, out] (a
    copy) and loaded from [in, out], so checkpoints of the original model load into the
    converted one and the other way round. unconvert() restores the Conv1D."""

    @classmethod
    def from_conv1d(cls, module: nn.Module, recipe: Union[str, Recipe] = "nvfp4", layer_index: int = 0):
        if not is_conv1d(module):
            raise TypeError(f"module: expected a Hugging Face Conv1D, got {type(module).__name__}")
        k, n = module.weight.shape
        if k % 16 or n % 16:
            raise ValueError(f"module: in/out features must be multiples of 16, got {k}x{n}")
        conv_cls = type(module)
        with torch.no_grad():
            module.weight.data = module.weight.data.t().contiguous()
        module.__class__ = cls
        module._conv1d_class = conv_cls
        module.in_features, module.out_features = k, n
        try:
            module._nvfp4_init(recipe, layer_index)
        except Exception:
            module.__class__ = conv_cls
            with torch.no_grad():
                module.weight.data = module.weight.data.t().contiguous()
            raise
        return module

    def to_linear(self) -> nn.Module:
        """Back to the Conv1D it was, in place (named to_linear for unconvert())."""
        conv_cls = self._conv1d_class
        super().to_linear()  # drops the nvfp4 state
        with torch.no_grad():
            self.weight.data = self.weight.data.t().contiguous()
        for a in ("in_features", "out_features", "_conv1d_class"):
            self.__dict__.pop(a, None)
        self.__class__ = conv_cls
        return self

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)
        w = destination[prefix + "weight"]
        destination[prefix + "weight"] = w.t() if keep_vars else w.t().contiguous()

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        key = prefix + "weight"
        orig = state_dict.get(key)
        if orig is not None:
            state_dict[key] = orig.t()
        try:
            super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                          error_msgs)
        finally:
            if orig is not None:
                state_dict[key] = orig


# ------------------------------------------------------------------------------ convert / freeze
def convert(model: nn.Module, recipe: Union[str, Recipe] = "nvfp4", skip_first: int = 0, skip_last: int = 0,
            include=None, exclude=None, convert_tied: bool = False, *, skip_first_blocks: int = 0,
            skip_last_blocks: int = 0, blocks=None, verbose: bool = False) -> nn.Module:
    """Replace matching linear layers of `model` by nvfp4.nn.Linear, in place.

    recipe: a Recipe or a name in nvfp4.nn.RECIPES; or an FP8 recipe ("fp8", "fp8_delayed" or
    an nvfp4.nn.fp8.FP8Recipe), which converts to nvfp4.nn.fp8.FP8Linear instead.

    Layers are taken in module registration order. include/exclude: patterns on qualified
    names (fnmatch strings such as "layers.*.mlp.*", "re:"-prefixed or compiled regexes, or
    callables (name, module) -> bool). exclude=None means the default exclusion: the names in
    DEFAULT_EXCLUDE (output heads) and, when transformer blocks are found, the linear layers
    after the last block outside it (heads of any size); pass [] to exclude nothing.
    skip_first_blocks / skip_last_blocks: whole transformer blocks (of each stack found by
    find_blocks, or of the ModuleList(s) named by `blocks`) kept in high precision.
    skip_first / skip_last: after all that filtering, the first / last candidate linear
    layers (single layers, not blocks) also stay in high precision. Linears whose weight is
    tied to another module (an embedding, typically) are left alone unless convert_tied=True.
    Embeddings are never converted.

    nn.Linear modules are converted in place: parameters, hooks and attributes are kept, so
    optimizers made before conversion keep working. GPT-2's Conv1D layers become
    Conv1DLinear (same parameters, weight data transposed; the state_dict keeps the Conv1D
    layout). Layers get layer_index 0, 1, ... in order (their stochastic-rounding seeds).
    verbose: print plan_conversion's summary. Returns the model.
    """
    from .fp8 import FP8_RECIPES, FP8Recipe, get_fp8_recipe
    fp8 = isinstance(recipe, FP8Recipe) or (isinstance(recipe, str) and recipe in FP8_RECIPES)
    recipe = get_fp8_recipe(recipe) if fp8 else get_recipe(recipe)
    plan = plan_conversion(model, skip_first, skip_last, include, exclude, convert_tied,
                           skip_first_blocks=skip_first_blocks, skip_last_blocks=skip_last_blocks, blocks=blocks)
    modules = dict(model.named_modules())
    i = 0
    for j, (name, action) in enumerate(plan):
        if action == GROUPED:
            if fp8:
                plan[j] = (name, "skipped: experts stay in high precision under FP8 recipes")
                continue
            GroupedExperts.convert_module(modules[name], recipe, layer_index=i)
            i += 2  # two projections, two seed streams
            continue
        if action != "convert":
            continue
        m = modules[name]
        if fp8:
            if isinstance(m, FP8Linear):
                m.fp8_recipe = recipe
            elif type(m) is nn.Linear:
                FP8Linear.from_linear(m, recipe)
            else:
                raise TypeError(f"model: {name} is a {type(m).__name__}; the FP8 recipes convert torch.nn.Linear "
                                "layers only (unconvert it first)")
        elif isinstance(m, Linear):
            m.layer_index = i
            m.recipe = recipe
        elif is_conv1d(m):
            Conv1DLinear.from_conv1d(m, recipe, layer_index=i)
        else:
            Linear.from_linear(m, recipe, layer_index=i)
        i += 1
    if verbose:
        print(plan.summary("convert"), file=sys.stdout, flush=True)
    return model


def freeze_fp4(model: nn.Module, recipe: Union[str, Recipe] = "nvfp4", skip_first: int = 0, skip_last: int = 0,
               include=None, exclude=None, convert_tied: bool = False, *, skip_first_blocks: int = 0,
               skip_last_blocks: int = 0, blocks=None, device=None, verbose: bool = False) -> nn.Module:
    """Freeze the matching linear layers of `model` into NVFP4 storage, in place: each becomes
    an nvfp4.nn.FrozenLinear holding only its quantized weight (codes, tile scales, amax:
    0.28x the bytes of BF16), its master weight dropped. Forward and dgrad run in NVFP4 with
    `recipe`'s X and dY quantization; there is no weight gradient. For a LoRA fine-tune
    (nvfp4.nn.add_lora, or peft) and for W4A4 inference.

    The selection is convert()'s (same arguments, same defaults: heads and embeddings stay
    as they are); nvfp4 Linears (already converted) are frozen too, GPT-2's Conv1D layers
    by value (the frozen weight is [out, in]). Layers get layer_index 0, 1, ... in order.
    device: quantize on this device and put the frozen layers there (e.g. quantize a model
    that is still on the CPU straight onto the GPU, never holding its full-precision weights
    there). Freeze before building an optimizer: a dropped weight that an optimizer still
    references stays in memory. verbose: print the summary. Returns the model.
    """
    recipe = get_recipe(recipe)
    plan = plan_conversion(model, skip_first, skip_last, include, exclude, convert_tied,
                           skip_first_blocks=skip_first_blocks, skip_last_blocks=skip_last_blocks, blocks=blocks)
    modules = dict(model.named_modules())
    i = 0
    for name, action in plan:
        if action != "convert":
            continue
        m = modules[name]
        if is_conv1d(m):
            FrozenLinear._freeze(m, m.weight.t(), recipe, i, device, None)
            for a in ("nf", "nx"):
                m.__dict__.pop(a, None)
        elif isinstance(m, Linear):
            if isinstance(m, Conv1DLinear):
                m.__dict__.pop("_conv1d_class", None)
            FrozenLinear.from_linear(m, recipe, layer_index=i, device=device)
        else:
            FrozenLinear.from_linear(m, recipe, layer_index=i, device=device)
        i += 1
    if verbose:
        print(plan.summary("freeze"), file=sys.stdout, flush=True)
    return model


def unconvert(model: nn.Module) -> nn.Module:
    """Turn every nvfp4.nn.Linear (and FP8Linear) in `model` back into a plain nn.Linear (a Conv1DLinear back
    into its Conv1D), in place. Frozen layers stay frozen: their full-precision weight no
    longer exists (FrozenLinear.to_linear() builds an nn.Linear from the decoded one)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model: expected an nn.Module, got {type(model).__name__}")
    for m in list(model.modules()):
        if isinstance(m, (Linear, FP8Linear)):
            m.to_linear()
        elif isinstance(m, GroupedExperts):
            m.to_experts()
    return model


def converted_layers(model: nn.Module) -> List[str]:
    """Names of the (trainable) nvfp4.nn.Linear layers of `model`."""
    return [n for n, m in model.named_modules() if isinstance(m, Linear)]


def frozen_layers(model: nn.Module) -> List[str]:
    """Names of the nvfp4.nn.FrozenLinear layers of `model`."""
    return [n for n, m in model.named_modules() if isinstance(m, FrozenLinear)]


def set_precision(model: nn.Module, precision: Union[str, Recipe]) -> int:
    """Switch every nvfp4 Linear of `model`: "bf16" runs them unquantized (plain F.linear, in
    the autocast or input dtype); "bf16_fwd" runs only their forward GEMM unquantized, the
    backward GEMMs as their recipe says (the NVFP4 paper's late-training switch; frozen layers
    follow "bf16"); "nvfp4" goes back to each layer's own recipe; another
    recipe (name or Recipe) becomes every layer's recipe. Frozen layers follow "bf16" (their
    decoded weight, unquantized activations) and "nvfp4" but keep their own recipe. Returns
    how many layers changed."""
    if isinstance(precision, str) and precision in ("bf16", "nvfp4", "bf16_fwd"):
        target, recipe = precision, None
    else:
        target, recipe = "nvfp4", get_recipe(precision)
    n = 0
    for m in model.modules():
        if isinstance(m, Linear):
            # "bf16_fwd": the layer's recipe with its forward GEMM in the compute dtype (the
            # backward GEMMs stay quantized); the full recipe is kept to go back to
            full = m.__dict__.pop("_nvfp4_full_recipe", None)
            if full is not None:
                m.recipe = full
            if target == "bf16_fwd":
                m._nvfp4_full_recipe = m.recipe
                m.recipe = m.recipe.replace(fprop=False)
                target_m = "nvfp4"
            else:
                target_m = target
            m.precision = target_m
            if recipe is not None:
                m.recipe = recipe
            n += 1
        elif isinstance(m, FrozenLinear):
            m.precision = "bf16" if target == "bf16_fwd" else target
            n += 1
        elif isinstance(m, (GroupedLinear, GroupedExperts)):
            m.precision = target
            if recipe is not None:
                m.recipe = recipe
            n += 1
    return n


def set_sr_step(model: nn.Module, step: int) -> None:
    """Set every layer's stochastic-rounding counter. The counters are in the state_dict,
    so a resume from a checkpoint does not need this."""
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step < 2**63:
        raise ValueError(f"step: must be an int in [0, 2**63) (the counter is an int64 buffer), got {step!r}")
    for m in model.modules():
        if isinstance(m, (Linear, FrozenLinear, GroupedLinear)):
            with torch.no_grad():
                m.sr_step.fill_(step)
        elif isinstance(m, GroupedExperts):
            with torch.no_grad():
                m.sr_step_up.fill_(step)
                m.sr_step_down.fill_(step)


def set_weight_reuse(model: nn.Module, mode) -> int:
    """Set Linear.set_weight_reuse(mode) on every nvfp4 Linear of `model` (None, "store" or
    "reuse"); returns how many layers. The gradient-accumulation pattern:

        set_weight_reuse(model, "store")      # first micro-batch: quantize W, keep it
        ... forward/backward ...
        set_weight_reuse(model, "reuse")      # the other micro-batches of this step
        ... forward/backward ... optimizer.step()
    """
    n = 0
    for m in model.modules():
        if isinstance(m, Linear):
            m.set_weight_reuse(mode)
            n += 1
    return n


def set_saved_operands(model: nn.Module, mode: str) -> int:
    """Set Linear.set_saved_operands(mode) on every nvfp4 Linear of `model` ("fp4", the
    default, or "decoded": the backward's Xᵀ and Wᵀ kept as decoded BF16 values, more
    activation memory and no decode passes, the same bits); returns how many layers. Every
    layer is checked before any changes: a layer whose recipe refuses the mode is named and
    the model left as it was."""
    layers = [(name, m) for name, m in model.named_modules() if isinstance(m, Linear)]
    previous = [m.saved_operands for _, m in layers]
    done = 0
    try:
        for name, m in layers:
            try:
                m.set_saved_operands(mode)
            except ValueError as e:
                raise ValueError(f"{e} (layer {name!r})") from None
            done += 1
    except ValueError:
        for (_, m), old in zip(layers[:done], previous):
            m.set_saved_operands(old)
        raise
    return len(layers)


class Cooldown:
    """Runs the last `frac` of training with every nvfp4 Linear in BF16, or with only their
    forward GEMM in BF16 (`forward_only=True`: the NVFP4 paper's switch, the backward GEMMs
    staying in NVFP4; set_precision's "bf16_fwd").

    Call it with the 0-based step index before each optimizer step; it switches once at
    step >= total_steps - round(frac * total_steps), and switches back if a resume starts
    earlier. Returns True on the step where it switched."""

    def __init__(self, model: nn.Module, total_steps: int, frac: float = 0.1, forward_only: bool = False):
        if not 0.0 <= float(frac) <= 1.0:
            raise ValueError(f"frac: must be in [0, 1], got {frac!r}")
        if total_steps < 0:
            raise ValueError(f"total_steps: must be non-negative, got {total_steps!r}")
        if not isinstance(forward_only, bool):
            raise ValueError(f"forward_only: must be a bool, got {forward_only!r}")
        self.model = model
        self.start = total_steps - int(round(frac * total_steps)) if frac > 0 else total_steps + 1
        self.active = False
        self.mode = "bf16_fwd" if forward_only else "bf16"

    def __call__(self, step: int) -> bool:
        want = step >= self.start
        if want == self.active:
            return False
        set_precision(self.model, self.mode if want else "nvfp4")
        self.active = want
        return True
