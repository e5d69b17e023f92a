"""LoRA adapters on a frozen NVFP4 base: nvfp4.nn.LoRALinear and the model-level helpers.

    y = base(x) + (alpha / rank) · B·A·dropout(x)

The base is a FrozenLinear (forward and dgrad in NVFP4) or any frozen linear layer (an
nn.Linear in BF16, for comparison); A [rank, in] and B [out, rank] are ordinary parameters
(BF16 by default) trained by autograd, initialized as in the LoRA paper (A Kaiming-uniform,
B zero, so training starts from the base model).

Merging folds the update into the base weight. Into a FrozenLinear it exports by default in
high precision: the base becomes an nn.Linear holding Ŵ + (alpha/rank)·B·A in the base's
dtype (the decoded NVFP4 weight plus the update: the fine-tune is kept, and the merged layer
computes the unmerged one's output with the base in high precision, up to that dtype's
rounding of the sum). fp4=True stores Q(Ŵ + ΔW) in NVFP4 again instead (0.28x the bytes),
a re-quantization whose error can be as large as a small update; a FP4MergeWarning then
reports it. unmerge() restores the original base (its NVFP4 bytes). peft's LoRA works on
frozen layers too (it wraps them like any nn.Linear); its merge writes FrozenLinear.weight,
which follows the same rule (high precision; NVFP4 inside nvfp4.nn.requantize_writes()).
"""
from __future__ import annotations

import math
from typing import Dict, List, Optional

import torch
import torch.nn.functional as F
from torch import nn

from .convert import _as_list, _matches
import warnings

from .frozen import FP4MergeWarning, FrozenLinear, _merge_error_message, _quantize_weight, _write_ratio
from .linear import Linear

__all__ = ["LoRALinear", "add_lora", "merge_and_unload", "lora_state_dict", "lora_parameters"]


class LoRALinear(nn.Module):
    """A low-rank adapter around a frozen linear layer `base` (kept as `self.base`).

    rank, alpha: the update is (alpha / rank) · B·A. dropout: on the adapter's input only.
    dtype: of A and B (default bfloat16). The base's parameters are set to
    requires_grad=False; A and B are the only trainable parameters."""

    def __init__(self, base: nn.Module, rank: int = 8, alpha: float = 16.0, dropout: float = 0.0,
                 dtype: Optional[torch.dtype] = torch.bfloat16, device=None):
        super().__init__()
        if not hasattr(base, "in_features") or not hasattr(base, "out_features"):
            raise TypeError(f"base: expected a linear layer (FrozenLinear or nn.Linear), got {type(base).__name__}")
        if isinstance(rank, bool) or not isinstance(rank, int) or rank <= 0:
            raise ValueError(f"rank: must be a positive int, got {rank!r}")
        if not 0.0 <= float(dropout) < 1.0:
            raise ValueError(f"dropout: must be in [0, 1), got {dropout!r}")
        self.base = base
        for p in base.parameters():
            p.requires_grad_(False)
        if device is None:
            ref = base.weight_data if isinstance(base, FrozenLinear) else next(base.parameters(), None)
            device = ref.device if ref is not None else None
        k, n = base.in_features, base.out_features
        self.rank, self.alpha = rank, float(alpha)
        self.scaling = self.alpha / rank
        self.lora_A = nn.Parameter(torch.empty((rank, k), dtype=dtype, device=device))
        self.lora_B = nn.Parameter(torch.zeros((n, rank), dtype=dtype, device=device))
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.merged = False
        self.enabled = True
        self._unmerged_state = None
        self.reset_parameters()

    @property
    def in_features(self) -> int:
        return self.base.in_features

    @property
    def out_features(self) -> int:
        return self.base.out_features

    @property
    def weight(self):
        """The base layer's weight (for code that reads `.weight` of a linear layer, as
        peft's LoRA layers also expose it); the adapter's own are lora_A and lora_B."""
        return self.base.weight

    def reset_parameters(self) -> None:
        with torch.no_grad():
            # what nn.Linear does for its weight; B = 0 so the adapter starts as a no-op
            nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
            self.lora_B.zero_()

    def extra_repr(self) -> str:
        return f"rank={self.rank}, alpha={self.alpha:g}, merged={self.merged}"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.base(x)
        if self.merged or not self.enabled:
            return y
        h = self.dropout(x)
        if h.device.type == "meta" or not torch.is_autocast_enabled(h.device.type):
            h = h.to(self.lora_A.dtype)
        d = F.linear(F.linear(h, self.lora_A), self.lora_B)
        return y + (d * self.scaling).to(y.dtype)

    def __setattr__(self, name, value):
        if name in ("lora_A", "lora_B") and "base" in self.__dict__.get("_modules", {}):
            self._check_adapter(name, value)
        super().__setattr__(name, value)

    def _check_adapter(self, name: str, t) -> None:
        """A is [rank, in_features], B is [out_features, rank]: anything else would broadcast
        into a wrong update (an A of [rank, 1] adds B·A to every input column)."""
        want = (self.rank, self.in_features) if name == "lora_A" else (self.out_features, self.rank)
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a tensor {list(want)}, got {type(t).__name__}")
        if tuple(t.shape) != want:
            raise ValueError(f"{name}: expected shape {list(want)} (rank {self.rank}, "
                             f"{self.in_features} -> {self.out_features}), got {list(t.shape)}")
        if not t.is_floating_point():
            raise ValueError(f"{name}: expected a floating-point tensor, got {t.dtype}")

    def delta_weight(self) -> torch.Tensor:
        """(alpha / rank) · B·A in float32, [out, in]."""
        # checked again here: `.data` assignments bypass __setattr__
        self._check_adapter("lora_A", self.lora_A)
        self._check_adapter("lora_B", self.lora_B)
        return (self.lora_B.float() @ self.lora_A.float()) * self.scaling

    @torch.no_grad()
    def merge(self, fp4: bool = False, warn: bool = True) -> Optional[float]:
        """Fold the update into the base weight. Into a FrozenLinear: fp4=False (default) makes
        the base an nn.Linear holding Ŵ + ΔW in the base's dtype; fp4=True re-quantizes Ŵ + ΔW
        into the frozen layer and returns the measured error ‖Q(Ŵ+ΔW) − (Ŵ+ΔW)‖ / ‖ΔW‖, with a
        FP4MergeWarning if warn. unmerge() restores the original base either way."""
        if self.merged:
            return None
        b = self.base
        ratio = None
        if isinstance(b, FrozenLinear):
            dw = self.delta_weight().to(b.weight_data.device)
            before = b.dequantize(torch.float32)
            w = before + dw
            if fp4:
                self._unmerged_state = tuple(t.clone() for t in (b.weight_data, b.weight_scales, b.weight_amax))
                b._store(*_quantize_weight(w))
                ratio = _write_ratio(before, w, b.dequantize(torch.float32))
                if warn:
                    warnings.warn(_merge_error_message([(f"a {b.out_features}x{b.in_features} layer", ratio)]),
                                  FP4MergeWarning, stacklevel=2)
            else:
                merged = nn.Linear(b.in_features, b.out_features, bias=b.bias is not None, device="meta")
                merged.weight = nn.Parameter(w.to(b.weight_dtype), requires_grad=False)
                if b.bias is not None:
                    merged.bias = b.bias  # the same (frozen) Parameter
                self._unmerged_state = (b,)  # a tuple: kept out of the module tree (and the state_dict)
                self.base = merged
        elif isinstance(b, nn.Linear):
            b.weight.data += self.delta_weight().to(b.weight.dtype)
        else:
            raise TypeError(f"merge: cannot merge into a {type(b).__name__}")
        self.merged = True
        return ratio

    @torch.no_grad()
    def unmerge(self) -> None:
        if not self.merged:
            return
        b = self.base
        if isinstance(self._unmerged_state, tuple) and len(self._unmerged_state) == 1:
            self.base = self._unmerged_state[0]
            self._unmerged_state = None
        elif isinstance(b, FrozenLinear):
            b._store(*self._unmerged_state)
            self._unmerged_state = None
        else:
            b.weight.data -= self.delta_weight().to(b.weight.dtype)
        self.merged = False


def add_lora(model: nn.Module, rank: int = 8, alpha: float = 16.0, dropout: float = 0.0, target=None,
             dtype: Optional[torch.dtype] = torch.bfloat16, freeze_others: bool = True) -> List[str]:
    """Wrap linear layers of `model` in LoRALinear, in place. target: name patterns (as in
    convert's include); default: every FrozenLinear, or every nn.Linear / nvfp4 Linear inside
    the model's transformer blocks when it has no frozen layer (a BF16 base). freeze_others:
    set requires_grad=False on every parameter that is not an adapter's. Returns the wrapped
    layers' names."""
    from .convert import find_blocks, _block

    pats = _as_list(target, "target")
    frozen = [n for n, m in model.named_modules() if isinstance(m, FrozenLinear)]
    block_of = {b: s for s, bl in find_blocks(model) for b in bl}
    names = []
    for name, m in list(model.named_modules()):
        if isinstance(m, LoRALinear) or any(p.startswith("lora_") for p in name.split(".")):
            continue
        if pats:
            ok = isinstance(m, nn.Linear) and _matches(name, m, pats)
        elif frozen:
            ok = isinstance(m, FrozenLinear)
        else:
            ok = (type(m) is nn.Linear or isinstance(m, Linear)) and _block(name, block_of) is not None
        if ok and name and not name.endswith(".base"):
            names.append(name)
    for name in names:
        m = model.get_submodule(name)
        parent, _, leaf = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, leaf, LoRALinear(m, rank, alpha, dropout, dtype))
    if freeze_others:
        for n, p in model.named_parameters():
            p.requires_grad_(n.rsplit(".", 1)[-1] in ("lora_A", "lora_B"))
    return names


def merge_and_unload(model: nn.Module, fp4: bool = False) -> nn.Module:
    """Merge every LoRALinear of `model` into its base and put the base back in its place.

    fp4=False (default): a frozen NVFP4 base becomes an nn.Linear holding the decoded weight
    plus the update, Ŵ + ΔW, in the base's dtype: the export keeps the fine-tune (the merged
    model computes what the unmerged one computes with its bases in high precision, up to the
    rounding of Ŵ + ΔW to that dtype). fp4=True re-quantizes Ŵ + ΔW into the frozen layers
    (0.28x the bytes); one FP4MergeWarning then reports the measured error over the layers,
    ‖Q(Ŵ+ΔW) − (Ŵ+ΔW)‖ / ‖ΔW‖ (near or above 1: the re-quantization erases most of the
    update). Bases that are nn.Linear get W + ΔW either way."""
    errors = []
    for name, m in list(model.named_modules()):
        if isinstance(m, LoRALinear):
            ratio = m.merge(fp4=fp4, warn=False)
            if ratio is not None:
                errors.append((name, ratio))
            m._unmerged_state = None
            parent, _, leaf = name.rpartition(".")
            setattr(model.get_submodule(parent) if parent else model, leaf, m.base)
    if errors:
        warnings.warn(_merge_error_message(errors), FP4MergeWarning, stacklevel=2)
    return model


def lora_parameters(model: nn.Module) -> List[nn.Parameter]:
    """The adapters' parameters (A and B of every LoRALinear)."""
    return [p for m in model.modules() if isinstance(m, LoRALinear) for p in (m.lora_A, m.lora_B)]


def lora_state_dict(model: nn.Module, counters: bool = True) -> Dict[str, torch.Tensor]:
    """What a LoRA fine-tune needs to save: the adapters' A and B and (counters=True) every
    nvfp4 layer's stochastic-rounding counter, which a bit-exact resume needs. Load it back
    with model.load_state_dict(sd, strict=False)."""
    out = {}
    for k, v in model.state_dict().items():
        leaf = k.rsplit(".", 1)[-1]
        if leaf in ("lora_A", "lora_B") or (counters and leaf == "sr_step"):
            out[k] = v
    return out
