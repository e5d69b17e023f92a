"""Training recipes: how each operand of a Linear's three GEMMs is quantized.

A Linear runs three GEMMs: fprop Y = X·Wᵀ, dgrad dX = dY·W and wgrad dW = dYᵀ·X.
Each GEMM runs either in NVFP4 (both operands quantized as configured here) or in the
compute dtype (BF16 under autocast). The canned recipes are NVIDIA's default (docs/design.md §1)
and the ablations that each remove one of its ingredients.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Tuple, Union

from .._format import DEFAULT_RHT_SIGNS
from ..backends import BACKENDS

__all__ = ["QuantConfig", "Recipe", "RECIPES", "get_recipe", "layer_seed"]

_MASK64 = (1 << 64) - 1


@dataclass(frozen=True)
class QuantConfig:
    """How one operand is quantized: 16-element 1D blocks or 16x16 2D tiles, round to nearest
    (``"rtn"``) or stochastic (``"sr"``), with or without the 16-point Hadamard transform."""

    block: str = "1d"
    rounding: str = "rtn"
    rht: bool = False

    def _check(self, name: str) -> None:
        if self.block not in ("1d", "2d"):
            raise ValueError(f"{name}.block: must be '1d' or '2d', got {self.block!r}")
        if self.rounding not in ("rtn", "sr"):
            raise ValueError(f"{name}.rounding: must be 'rtn' or 'sr', got {self.rounding!r}")
        if not isinstance(self.rht, bool):
            raise ValueError(f"{name}.rht: must be a bool, got {self.rht!r}")
        if self.rht and self.block == "2d":
            raise ValueError(f"{name}.rht: the Hadamard transform applies to 1d blocks only")


def _qc(block="1d", rounding="rtn", rht=False) -> QuantConfig:
    return QuantConfig(block, rounding, rht)


@dataclass(frozen=True)
class Recipe:
    """Per-operand quantization of a Linear's GEMMs.

    fprop/dgrad/wgrad: run that GEMM in NVFP4 (True) or in the compute dtype (False).
    x, w: forward operands; w's codes are reused, transposed, by dgrad (so with 2D tiles the
    dgrad weight is exactly the forward weight). dy: dgrad's dY. wgrad_dy, wgrad_x: wgrad's
    dYᵀ and Xᵀ, quantized along the token axis; the Hadamard transform, when used, must be on
    both (it cancels in their product). backend: the GEMM backend ("auto", "cutlass", "cudnn",
    "reference"). rht_signs: the transform's 16 signs. seed: the base of the per-layer
    stochastic-rounding seeds.
    """

    name: str = "custom"
    fprop: bool = True
    dgrad: bool = True
    wgrad: bool = True
    x: QuantConfig = field(default_factory=lambda: _qc())
    w: QuantConfig = field(default_factory=lambda: _qc("2d"))
    dy: QuantConfig = field(default_factory=lambda: _qc(rounding="sr"))
    wgrad_dy: QuantConfig = field(default_factory=lambda: _qc(rounding="sr", rht=True))
    wgrad_x: QuantConfig = field(default_factory=lambda: _qc(rht=True))
    backend: str = "auto"
    rht_signs: Tuple[int, ...] = DEFAULT_RHT_SIGNS
    seed: int = 0

    def __post_init__(self):
        # Accept lists for the signs (from JSON or a CLI) but keep the recipe hashable: it is
        # a compile-time constant for torch.compile.
        if not isinstance(self.rht_signs, tuple):
            try:
                object.__setattr__(self, "rht_signs", tuple(int(s) for s in self.rht_signs))
            except TypeError:
                raise ValueError(f"rht_signs: must be 16 values of +1/-1, got {self.rht_signs!r}") from None
        self.validate()

    @property
    def quantized(self) -> bool:
        """True if any GEMM runs in NVFP4."""
        return self.fprop or self.dgrad or self.wgrad

    def validate(self) -> "Recipe":
        for f in ("fprop", "dgrad", "wgrad"):
            if not isinstance(getattr(self, f), bool):
                raise ValueError(f"{f}: must be a bool, got {getattr(self, f)!r}")
        for f in ("x", "w", "dy", "wgrad_dy", "wgrad_x"):
            v = getattr(self, f)
            if not isinstance(v, QuantConfig):
                raise ValueError(f"{f}: must be a QuantConfig, got {type(v).__name__}")
            v._check(f)
        # Only the wgrad GEMM transforms both of its operands along a shared axis the recipe
        # owns; in fprop/dgrad the weight would have to be transformed too.
        for f in ("x", "w", "dy"):
            if getattr(self, f).rht:
                raise ValueError(f"{f}.rht: the Hadamard transform is supported on the wgrad operands only")
        if self.wgrad_dy.rht != self.wgrad_x.rht:
            raise ValueError("wgrad_x.rht: must equal wgrad_dy.rht (the transform cancels only when both "
                             "wgrad operands use it)")
        if self.w.rounding != "rtn":
            raise ValueError("w.rounding: a weight's quantization may be reused across micro-batches, so only "
                             "'rtn' is supported")
        if self.backend not in BACKENDS:
            raise ValueError(f"backend: must be one of {list(BACKENDS)}, got {self.backend!r}")
        if len(self.rht_signs) != 16 or any(s not in (1, -1) for s in self.rht_signs):
            raise ValueError("rht_signs: must be 16 values, each +1 or -1")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < 2**63:
            raise ValueError(f"seed: must be an int in [0, 2**63), got {self.seed!r}")
        if not isinstance(self.name, str):
            raise ValueError(f"name: must be a str, got {self.name!r}")
        return self

    def replace(self, **changes) -> "Recipe":
        """A copy with some fields changed (validated). Operand configs accept dicts:
        ``r.replace(w={"block": "1d"})``."""
        for f in ("x", "w", "dy", "wgrad_dy", "wgrad_x"):
            if isinstance(changes.get(f), dict):
                changes[f] = dataclasses.replace(getattr(self, f), **changes[f])
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise ValueError(f"{sorted(unknown)[0]}: not a Recipe field")
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _make_recipes() -> dict:
    base = Recipe(name="nvfp4")
    return {
        "nvfp4": base,
        "no_rht": base.replace(name="no_rht", wgrad_dy={"rht": False}, wgrad_x={"rht": False}),
        "no_sr": base.replace(name="no_sr", dy={"rounding": "rtn"}, wgrad_dy={"rounding": "rtn"}),
        "no_2d": base.replace(name="no_2d", w={"block": "1d"}),
        "fwd_only": base.replace(name="fwd_only", dgrad=False, wgrad=False),
        "bf16": base.replace(name="bf16", fprop=False, dgrad=False, wgrad=False),
    }


#: The canned recipes, by name.
RECIPES = _make_recipes()


def get_recipe(recipe: Union[str, Recipe, None] = "nvfp4", **changes) -> Recipe:
    """A canned recipe by name (or a Recipe, passed through), with optional field changes."""
    if recipe is None:
        recipe = "nvfp4"
    if isinstance(recipe, str):
        if recipe not in RECIPES:
            raise ValueError(f"recipe: must be one of {sorted(RECIPES)} or a Recipe, got {recipe!r}")
        recipe = RECIPES[recipe]
    elif not isinstance(recipe, Recipe):
        raise ValueError(f"recipe: must be a recipe name or a Recipe, got {type(recipe).__name__}")
    return recipe.replace(**changes) if changes else recipe


def _splitmix64(z: int) -> int:
    z = (z + 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def layer_seed(seed: int, layer_index: int, stream: int = 0) -> int:
    """The stochastic-rounding seed of one layer and one use (stream), from the recipe seed.

    A hash rather than seed + index so that neighbouring layers (or runs whose seeds differ
    by one) do not share Philox streams; kept below 2**63 to fit a torch int argument."""
    z = _splitmix64(int(seed) & _MASK64)
    z = _splitmix64(z ^ (int(layer_index) & _MASK64))
    z = _splitmix64(z ^ (int(stream) & _MASK64))
    return z & ((1 << 63) - 1)
