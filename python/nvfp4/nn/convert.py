"""Model conversion: nn.Linear <-> nvfp4.nn.Linear in place, and the precision schedule."""
from __future__ import annotations

import fnmatch
import re
from typing import Callable, List, Sequence, Tuple, Union

import torch
from torch import nn

from .linear import Linear
from .recipe import Recipe, get_recipe

__all__ = ["convert", "unconvert", "plan_conversion", "converted_layers", "set_precision", "set_sr_step",
           "set_weight_reuse", "Cooldown", "DEFAULT_EXCLUDE"]

#: Names left alone unless `exclude` is given explicitly: output heads, whose logits feed the
#: loss directly (the recipe keeps them in high precision).
DEFAULT_EXCLUDE = ("lm_head", "*.lm_head", "output", "*.output", "head", "*.head", "classifier", "*.classifier")

Pattern = Union[str, "re.Pattern", Callable[[str, nn.Module], bool]]


def _as_list(p) -> list:
    if p is None:
        return []
    if isinstance(p, (str, re.Pattern)) or callable(p):
        return [p]
    return list(p)


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
        if isinstance(m, nn.Linear) and m.weight.data_ptr() in emb_ptrs and m.weight.numel() > 0:
            tied.add(id(m.weight))
    return tied


def plan_conversion(model: nn.Module, skip_first: int = 0, skip_last: int = 0, include=None, exclude=None,
                    convert_tied: bool = False) -> List[Tuple[str, str]]:
    """What convert() would do: [(qualified name, "convert" or the reason it is skipped)] for
    every nn.Linear (and nvfp4 Linear) in registration order."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model: expected an nn.Module, got {type(model).__name__}")
    for name, v in (("skip_first", skip_first), ("skip_last", skip_last)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"{name}: must be a non-negative int, got {v!r}")
    inc = _as_list(include)
    exc = list(DEFAULT_EXCLUDE) if exclude is None else _as_list(exclude)
    tied = set() if convert_tied else _tied_params(model)
    plan = []
    for name, m in model.named_modules():
        if not isinstance(m, nn.Linear):
            continue
        if type(m) is not nn.Linear and not isinstance(m, Linear):
            plan.append((name, f"skipped: a subclass of nn.Linear ({type(m).__name__})"))
        elif inc and not _matches(name, m, inc):
            plan.append((name, "skipped: not included"))
        elif exc and _matches(name, m, exc):
            plan.append((name, "skipped: excluded"))
        elif id(m.weight) in tied:
            plan.append((name, "skipped: weight tied to another module"))
        elif m.in_features % 16 or m.out_features % 16:
            plan.append((name, f"skipped: {m.in_features}x{m.out_features} not a multiple of 16"))
        else:
            plan.append((name, "convert"))
    idx = [i for i, (_, a) in enumerate(plan) if a == "convert"]
    for j in idx[:skip_first]:
        plan[j] = (plan[j][0], "skipped: skip_first")
    for j in idx[len(idx) - min(skip_last, len(idx)):] if skip_last else []:
        if plan[j][1] == "convert":
            plan[j] = (plan[j][0], "skipped: skip_last")
    return plan


def convert(model: nn.Module, recipe: Union[str, Recipe] = "nvfp4", skip_first: int = 0, skip_last: int = 0,
            include=None, exclude=None, convert_tied: bool = False) -> nn.Module:
    """Replace matching nn.Linear modules of `model` by nvfp4.nn.Linear, in place.

    Layers are taken in module registration order. include/exclude: patterns on qualified
    names (fnmatch strings such as "layers.*.mlp.*", "re:"-prefixed or compiled regexes, or
    callables (name, module) -> bool). exclude=None means DEFAULT_EXCLUDE (output heads);
    pass [] to exclude nothing. After filtering, the first `skip_first` and last `skip_last`
    candidates stay in high precision. Linears whose weight is tied to another module (an
    embedding, typically) are left alone unless convert_tied=True. Parameters, hooks and
    attributes are kept, so optimizers made before conversion keep working. Layers get
    layer_index 0, 1, ... in order (their stochastic-rounding seeds). Returns the model.
    """
    recipe = get_recipe(recipe)
    plan = plan_conversion(model, skip_first, skip_last, include, exclude, convert_tied)
    modules = dict(model.named_modules())
    i = 0
    for name, action in plan:
        if action != "convert":
            continue
        m = modules[name]
        if isinstance(m, Linear):
            m.layer_index = i
            m.recipe = recipe
        else:
            Linear.from_linear(m, recipe, layer_index=i)
        i += 1
    return model


def unconvert(model: nn.Module) -> nn.Module:
    """Turn every nvfp4.nn.Linear in `model` back into a plain nn.Linear, in place."""
    for m in list(model.modules()):
        if isinstance(m, Linear):
            m.to_linear()
    return model


def converted_layers(model: nn.Module) -> List[str]:
    return [n for n, m in model.named_modules() if isinstance(m, Linear)]


def set_precision(model: nn.Module, precision: Union[str, Recipe]) -> int:
    """Switch every nvfp4 Linear of `model`: "bf16" runs them unquantized (plain F.linear, in
    the autocast or input dtype); "nvfp4" goes back to each layer's own recipe; another
    recipe (name or Recipe) becomes every layer's recipe. Returns how many layers changed."""
    if isinstance(precision, str) and precision in ("bf16", "nvfp4"):
        target, recipe = precision, None
    else:
        target, recipe = "nvfp4", get_recipe(precision)
    n = 0
    for m in model.modules():
        if isinstance(m, Linear):
            m.precision = target
            if recipe is not None:
                m.recipe = recipe
            n += 1
    return n


def set_sr_step(model: nn.Module, step: int) -> None:
    """Set every layer's stochastic-rounding counter. The counters are in the state_dict,
    so a resume from a checkpoint does not need this."""
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step: must be a non-negative int, got {step!r}")
    for m in model.modules():
        if isinstance(m, Linear):
            with torch.no_grad():
                m.sr_step.fill_(step)


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


class Cooldown:
    """Runs the last `frac` of training with every nvfp4 Linear in BF16.

    Call it with the 0-based step index before each optimizer step; it switches once at
    step >= total_steps - round(frac * total_steps), and switches back if a resume starts
    earlier. Returns True on the step where it switched."""

    def __init__(self, model: nn.Module, total_steps: int, frac: float = 0.1):
        if not 0.0 <= float(frac) <= 1.0:
            raise ValueError(f"frac: must be in [0, 1], got {frac!r}")
        if total_steps < 0:
            raise ValueError(f"total_steps: must be non-negative, got {total_steps!r}")
        self.model = model
        self.start = total_steps - int(round(frac * total_steps)) if frac > 0 else total_steps + 1
        self.active = False

    def __call__(self, step: int) -> bool:
        want = step >= self.start
        if want == self.active:
            return False
        set_precision(self.model, "bf16" if want else "nvfp4")
        self.active = want
        return True
