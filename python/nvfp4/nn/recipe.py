"""Training recipes: how each operand of a Linear's three GEMMs is quantized.

A Linear runs three GEMMs: fprop Y = X·Wᵀ, dgrad dX = dY·W and wgrad dW = dYᵀ·X.
Each GEMM runs either in FP4 (both operands quantized as configured here) or in the
compute dtype (BF16 under autocast). Each operand has its own format (NVFP4 or MXFP4),
block shape, rounding, scale rule (MXFP4), Hadamard transform (wgrad operands) and double
quantization. The canned recipes: NVIDIA's NVFP4 recipe (docs/design.md §1) and the
ablations that each remove one of its ingredients; the MXFP4 and NVFP4 recipes of the
literature that users compare against (see RECIPES).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Optional, Tuple, Union

from .._format import DEFAULT_RHT_SIGNS
from .._mx import MX_SCALE_RULES
from ..backends import BACKENDS

__all__ = ["QuantConfig", "Recipe", "RECIPES", "FORMATS", "OPERANDS", "get_recipe", "layer_seed", "four_over_six",
           "rotation_signs"]

_MASK64 = (1 << 64) - 1

#: Operand formats.
FORMATS = ("nvfp4", "mxfp4")
#: The operand fields of a Recipe.
OPERANDS = ("x", "w", "dy", "wgrad_dy", "wgrad_x")


@dataclass(frozen=True)
class QuantConfig:
    """How one operand is quantized.

    format: "nvfp4" (E4M3 scale per 16 values and an FP32 per-tensor scale) or "mxfp4" (E8M0
        scale per 32 values, no per-tensor scale).
    block: "1d" (blocks along the GEMM's K axis) or "2d" (16x16 tiles; NVFP4 weights only).
    rounding: "rtn" (nearest-even) or "sr" (stochastic).
    rht: the 16-point Hadamard transform before quantizing (NVFP4 wgrad operands).
    scale_rule: MXFP4 only: "ocp", "ceil" or "tetrajet" (nvfp4.quantize_mxfp4); None means
        "ocp" for MXFP4 and must stay None for NVFP4.
    double_quant: quantize this operand from the dequantized values of the tensor's previous
        quantization, along the other axis (TetraJet's double quantization): for ``w``, the
        dgrad weight comes from the forward's dequantized weight; for ``wgrad_x`` / ``wgrad_dy``,
        from the dequantized X of fprop / dY of dgrad.

    NVFP4 options (docs/design.md §1.6; any of them sends the recipe through nvfp4.nn.emulated):
    rounding="eden": MS-EDEN (Quartet II) instead of stochastic rounding, for ``dy`` and
        ``wgrad_dy``: the operand and its GEMM partner are rotated by the 16-point Hadamard
        transform with random signs drawn per step (from the seed and the layer's sr_step), the
        codes rounded to nearest and the block scales corrected and rounded stochastically. On
        ``dy`` it rotates dgrad's weight along N too (quantized in 1x16 blocks for that GEMM).
    four_over_six: None, "mae" or "mse": 4over6 block scale selection (TransformerEngine's
        nvfp4_4over6), round-to-nearest operands without the transform.
    e4m3_bound: 448, or 256 with four_over_six (TransformerEngine's nvfp4_4over6_e4m3_use_256).
    amax: "tensor" (the contract), "rows" (one amax per row of the operand as its GEMM reads it:
        per token for ``x``, TransformerEngine's row_scaled_activation; 1d, no transform) or
        "percentile" (the amax_percentile quantile of |operand| as the per-tensor amax: the
        values above it saturate; no transform).
    amax_percentile: the quantile in (0, 1) for amax="percentile" (e.g. 0.999).
    """

    block: str = "1d"
    rounding: str = "rtn"
    rht: bool = False
    format: str = "nvfp4"
    scale_rule: Optional[str] = None
    double_quant: bool = False
    four_over_six: Optional[str] = None
    e4m3_bound: int = 448
    amax: str = "tensor"
    amax_percentile: Optional[float] = None

    def _check(self, name: str) -> None:
        if self.format not in FORMATS:
            raise ValueError(f"{name}.format: must be one of {FORMATS}, got {self.format!r}")
        if self.block not in ("1d", "2d"):
            raise ValueError(f"{name}.block: must be '1d' or '2d', got {self.block!r}")
        if self.rounding not in ("rtn", "sr", "eden"):
            raise ValueError(f"{name}.rounding: must be 'rtn', 'sr' or 'eden', got {self.rounding!r}")
        if not isinstance(self.rht, bool):
            raise ValueError(f"{name}.rht: must be a bool, got {self.rht!r}")
        if not isinstance(self.double_quant, bool):
            raise ValueError(f"{name}.double_quant: must be a bool, got {self.double_quant!r}")
        if self.rht and self.block == "2d":
            raise ValueError(f"{name}.rht: the Hadamard transform applies to 1d blocks only")
        if self.format == "mxfp4":
            if self.block != "1d":
                raise ValueError(f"{name}.block: MXFP4 blocks are 1d (32 values along K)")
            if self.rht:
                raise ValueError(f"{name}.rht: the Hadamard transform is implemented for NVFP4 operands only")
            if self.scale_rule is not None and self.scale_rule not in MX_SCALE_RULES:
                raise ValueError(f"{name}.scale_rule: must be one of {sorted(MX_SCALE_RULES)}, got {self.scale_rule!r}")
        elif self.scale_rule is not None:
            raise ValueError(f"{name}.scale_rule: applies to MXFP4 operands only (NVFP4 scales follow the "
                             f"contract), got {self.scale_rule!r}")
        self._check_options(name)

    def _check_options(self, name: str) -> None:
        if self.four_over_six not in (None, "mae", "mse"):
            raise ValueError(f"{name}.four_over_six: must be None, 'mae' or 'mse', got {self.four_over_six!r}")
        if isinstance(self.e4m3_bound, bool) or self.e4m3_bound not in (448, 256):
            raise ValueError(f"{name}.e4m3_bound: must be 448 or 256, got {self.e4m3_bound!r}")
        if self.amax not in ("tensor", "rows", "percentile"):
            raise ValueError(f"{name}.amax: must be 'tensor', 'rows' or 'percentile', got {self.amax!r}")
        p = self.amax_percentile
        if self.amax == "percentile":
            if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 < float(p) < 1.0:
                raise ValueError(f"{name}.amax_percentile: must be a number in (0, 1) with amax='percentile', got {p!r}")
        elif p is not None:
            raise ValueError(f"{name}.amax_percentile: applies to amax='percentile' only (amax is {self.amax!r})")
        if not self.has_options:
            return
        if self.format != "nvfp4":
            raise ValueError(f"{name}: four_over_six, e4m3_bound, amax and rounding='eden' apply to NVFP4 operands only")
        if self.double_quant:
            raise ValueError(f"{name}.double_quant: not combined with the NVFP4 options")
        if self.four_over_six is not None and (self.rounding != "rtn" or self.rht):
            raise ValueError(f"{name}.four_over_six: compares round-to-nearest candidates without the transform "
                             "(rounding='rtn', rht=False)")
        if self.e4m3_bound == 256 and self.four_over_six is None:
            raise ValueError(f"{name}.e4m3_bound: 256 applies with four_over_six only")
        if self.amax != "tensor" and (self.rht or self.rounding == "eden"):
            raise ValueError(f"{name}.amax: {self.amax!r} is not defined with the Hadamard transform or MS-EDEN")
        if self.amax == "rows" and self.block != "1d":
            raise ValueError(f"{name}.amax: 'rows' applies to 1d blocks only")
        if self.rounding == "eden" and self.block != "1d":
            raise ValueError(f"{name}.rounding: 'eden' applies to 1d blocks only")

    @property
    def has_options(self) -> bool:
        """True if an NVFP4 option of 0.3 is set (four_over_six, e4m3_bound 256, a row or
        percentile amax, MS-EDEN)."""
        return (self.four_over_six is not None or self.e4m3_bound != 448 or self.amax != "tensor"
                or self.rounding == "eden")

    @property
    def mx_rule(self) -> str:
        return self.scale_rule or "ocp"


def _qc(block="1d", rounding="rtn", rht=False, **kw) -> QuantConfig:
    return QuantConfig(block, rounding, rht, **kw)


@dataclass(frozen=True)
class Recipe:
    """Per-operand quantization of a Linear's GEMMs.

    fprop/dgrad/wgrad: run that GEMM in FP4 (True) or in the compute dtype (False).
    x, w: forward operands; w's configuration also quantizes dgrad's weight, along N (with
    2D tiles the dgrad weight is exactly the forward weight). dy: dgrad's dY. wgrad_dy,
    wgrad_x: wgrad's dYᵀ and Xᵀ, quantized along the token axis; the Hadamard transform, when
    used, must be on both (it cancels in their product). backend: the GEMM backend ("auto", "cutlass", "cudnn",
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
    #: TransformerEngine's backward_override: None (the backward GEMMs as configured),
    #: "high_precision" (both in the compute dtype from the unquantized X and W: fwd_only's
    #: backward) or "dequantized" (in the compute dtype from the forward's dequantized Q(X)
    #: and Q(W), dY unquantized).
    backward_override: Optional[str] = None
    #: How dgrad's weight (W along N) is quantized when it differs from the forward's: None
    #: means as ``w`` (2D tiles: the forward codes, transposed). TetraJet quantizes it with
    #: stochastic rounding from the forward's dequantized weight (double_quant) while the
    #: forward weight rounds to nearest. Per-operand path only.
    dgrad_w: Optional[QuantConfig] = None

    def __post_init__(self):
        # Accept lists for the signs (from JSON or a CLI) but keep the recipe hashable: it is
        # a compile-time constant for torch.compile.
        if not isinstance(self.rht_signs, tuple):
            try:
                object.__setattr__(self, "rht_signs", tuple(int(s) for s in self.rht_signs))
            except TypeError:
                raise ValueError(f"rht_signs: must be 16 values of +1/-1, got {self.rht_signs!r}") from None
        self.validate()
        # Read on every forward of every layer: computed once (the recipe is frozen, and
        # dataclasses.replace comes through here again).
        object.__setattr__(self, "_fused", self.backward_override is None and self.dgrad_w is None and all(
            getattr(self, f).format == "nvfp4" and not getattr(self, f).double_quant and not getattr(self, f).has_options
            for f in OPERANDS))

    @property
    def quantized(self) -> bool:
        """True if any GEMM runs in FP4."""
        return self.fprop or self.dgrad or self.wgrad

    @property
    def fused(self) -> bool:
        """True if the fused NVFP4 ops run this recipe (every operand NVFP4, no double
        quantization); otherwise nvfp4.nn.Linear runs it through the per-operand path
        (nvfp4.nn.emulated: quantize, decode exactly, GEMM with FP32 accumulation)."""
        return self._fused

    def validate(self) -> "Recipe":
        for f in ("fprop", "dgrad", "wgrad"):
            if not isinstance(getattr(self, f), bool):
                raise ValueError(f"{f}: must be a bool, got {getattr(self, f)!r}")
        for f in OPERANDS:
            v = getattr(self, f)
            if not isinstance(v, QuantConfig):
                raise ValueError(f"{f}: must be a QuantConfig, got {type(v).__name__}")
            v._check(f)
        if self.dgrad_w is not None:
            if not isinstance(self.dgrad_w, QuantConfig):
                raise ValueError(f"dgrad_w: must be None or a QuantConfig, got {type(self.dgrad_w).__name__}")
            self.dgrad_w._check("dgrad_w")
            if self.dgrad_w.rht or self.dgrad_w.has_options:
                raise ValueError("dgrad_w: the Hadamard transform and the NVFP4 options do not apply to dgrad's weight "
                                 "(its GEMM partner dY is not transformed)")
            if self.dgrad_w.double_quant and not self.fprop:
                raise ValueError("dgrad_w.double_quant: needs fprop=True (it requantizes fprop's quantized W)")
        # Only the wgrad GEMM transforms both of its operands along a shared axis the recipe
        # owns; in fprop/dgrad the weight would have to be transformed too.
        for f in ("x", "w", "dy"):
            if getattr(self, f).rht:
                raise ValueError(f"{f}.rht: the Hadamard transform is supported on the wgrad operands only")
        if self.wgrad_dy.rht != self.wgrad_x.rht:
            raise ValueError("wgrad_x.rht: must equal wgrad_dy.rht (the transform cancels only when both "
                             "wgrad operands use it)")
        for f in ("x", "dy"):
            if getattr(self, f).double_quant:
                raise ValueError(f"{f}.double_quant: applies to w, wgrad_x and wgrad_dy (the operands quantized "
                                 "a second time, along the other axis)")
        if self.wgrad_dy.double_quant and not self.dgrad:
            raise ValueError("wgrad_dy.double_quant: needs dgrad=True (it requantizes dgrad's quantized dY)")
        if self.wgrad_x.double_quant and not self.fprop:
            raise ValueError("wgrad_x.double_quant: needs fprop=True (it requantizes fprop's quantized X)")
        if self.w.double_quant and not self.fprop:
            raise ValueError("w.double_quant: needs fprop=True (it requantizes fprop's quantized W)")
        for f in ("x", "w", "wgrad_x"):
            if getattr(self, f).rounding == "eden":
                raise ValueError(f"{f}.rounding: 'eden' is for the gradient operands (dy, wgrad_dy)")
        if self.dy.rounding == "eden" and self.dy.rht:
            raise ValueError("dy.rht: MS-EDEN on dy brings its own rotation of dgrad's operands; leave rht False")
        if self.dy.rounding == "eden" and self.wgrad_dy.double_quant:
            raise ValueError("wgrad_dy.double_quant: not defined on a rotated (MS-EDEN) dY")
        if self.wgrad_dy.rounding == "eden" and not self.wgrad_dy.rht:
            raise ValueError("wgrad_dy.rht: MS-EDEN needs the Hadamard transform on both wgrad operands (rht=True)")
        if self.backward_override not in (None, "high_precision", "dequantized"):
            raise ValueError(f"backward_override: must be None, 'high_precision' or 'dequantized', got "
                             f"{self.backward_override!r}")
        if self.backward_override == "dequantized" and not self.fprop:
            raise ValueError("backward_override: 'dequantized' uses the forward's quantized X and W; needs fprop=True")
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
        for f in OPERANDS:
            if isinstance(changes.get(f), dict):
                changes[f] = dataclasses.replace(getattr(self, f), **changes[f])
        if isinstance(changes.get("dgrad_w"), dict):  # from the current dgrad weight (w when unset)
            changes["dgrad_w"] = dataclasses.replace(self.dgrad_w or self.w, **changes["dgrad_w"])
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise ValueError(f"{sorted(unknown)[0]}: not a Recipe field")
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _make_recipes() -> dict:
    base = Recipe(name="nvfp4")

    def mx(rounding="rtn", **kw):
        return QuantConfig("1d", rounding, False, "mxfp4", **kw)

    def opt(**kw):
        return dict(kw)

    return {
        "nvfp4": base,
        # NVIDIA's recipe with one option each (docs/design.md §1.6): 4over6 on X and W with
        # TransformerEngine's defaults (MAE, E4M3 bound 256); one amax per token for X; the
        # backward overrides; MS-EDEN instead of SR on dY; a 0.999-percentile amax for X and W
        "4over6": four_over_six(base, "all", "MAE", "all").replace(name="4over6"),
        "row_scaled": base.replace(name="row_scaled", x=opt(amax="rows")),
        "bwd_high_precision": base.replace(name="bwd_high_precision", backward_override="high_precision"),
        "bwd_dequantized": base.replace(name="bwd_dequantized", backward_override="dequantized"),
        "ms_eden": base.replace(name="ms_eden", dy=opt(rounding="eden"), wgrad_dy=opt(rounding="eden")),
        "adaptive": base.replace(name="adaptive", x=opt(amax="percentile", amax_percentile=0.999),
                                 w=opt(amax="percentile", amax_percentile=0.999)),
        "no_rht": base.replace(name="no_rht", wgrad_dy={"rht": False}, wgrad_x={"rht": False}),
        "no_sr": base.replace(name="no_sr", dy={"rounding": "rtn"}, wgrad_dy={"rounding": "rtn"}),
        "no_2d": base.replace(name="no_2d", w={"block": "1d"}),
        "fwd_only": base.replace(name="fwd_only", dgrad=False, wgrad=False),
        "bf16": base.replace(name="bf16", fprop=False, dgrad=False, wgrad=False),
        # NVFP4 with 1x16 blocks everywhere, round-to-nearest forward, stochastic rounding
        # on every backward operand, no Hadamard transform ("FP4 all the way")
        # (the rounding of each operand as fp4-trainkit's table gives it: SR on dY, dYᵀ and Xᵀ)
        "fp4_all_the_way": base.replace(name="fp4_all_the_way", w={"block": "1d"},
                                        wgrad_dy={"rht": False}, wgrad_x={"rht": False, "rounding": "sr"}),
        # MXFP4 on every operand, the OCP scale rule, round-to-nearest: the plain MX baseline
        "mx_baseline": Recipe(name="mx_baseline", x=mx(), w=mx(), dy=mx(), wgrad_dy=mx(), wgrad_x=mx()),
        # MXFP4 with round-to-infinity scales (ceil(log2(amax/6)): nothing saturates),
        # round-to-nearest everywhere
        "nvidia_round_to_infinity": Recipe(name="nvidia_round_to_infinity", x=mx(scale_rule="ceil"),
                                           w=mx(scale_rule="ceil"), dy=mx(scale_rule="ceil"),
                                           wgrad_dy=mx(scale_rule="ceil"), wgrad_x=mx(scale_rule="ceil")),
        # TetraJet: MXFP4, truncation-free scales, round-to-nearest forward, stochastic
        # rounding on every backward operand (dY, dgrad's W, dYᵀ, Xᵀ), and double quantization
        # of every operand used a second time (W, Xᵀ, dYᵀ)
        "tetrajet": Recipe(name="tetrajet", x=mx(scale_rule="tetrajet"), w=mx(scale_rule="tetrajet"),
                           dgrad_w=mx("sr", scale_rule="tetrajet", double_quant=True),
                           dy=mx("sr", scale_rule="tetrajet"),
                           wgrad_dy=mx("sr", scale_rule="tetrajet", double_quant=True),
                           wgrad_x=mx("sr", scale_rule="tetrajet", double_quant=True)),
    }


def four_over_six(recipe: Recipe, scope: str = "all", err_mode: str = "MAE", e4m3_use_256: str = "all") -> Recipe:
    """TransformerEngine's NVFP4BlockScaling 4over6 settings on a recipe: ``scope``
    (nvfp4_4over6: "none", "weights", "activations", "all") says which forward operands take
    4over6 (``w``; ``x``); ``err_mode`` ("MAE" or "MSE") the error it minimizes;
    ``e4m3_use_256`` (same scopes) which of them map the amax to E4M3 256 instead of 448.
    Gradient operands keep the recipe's rounding, as in TransformerEngine."""
    scopes = ("none", "weights", "activations", "all")
    for n, v in (("scope", scope), ("e4m3_use_256", e4m3_use_256)):
        if v not in scopes:
            raise ValueError(f"{n}: must be one of {scopes}, got {v!r}")
    if not isinstance(err_mode, str) or err_mode.upper() not in ("MAE", "MSE"):
        raise ValueError(f"err_mode: must be 'MAE' or 'MSE', got {err_mode!r}")
    changes = {}
    for f, role in (("w", "weights"), ("x", "activations")):
        if scope in (role, "all"):
            bound = 256 if e4m3_use_256 in (role, "all") else 448
            changes[f] = {"four_over_six": err_mode.lower(), "e4m3_bound": bound}
    return recipe.replace(**changes) if changes else recipe


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


def rotation_signs(seed: int, layer_index: int, step: int) -> Tuple[int, ...]:
    """The 16 Hadamard signs of one layer and one step for MS-EDEN (its unbiasedness is over
    random rotations): 16 bits of a hash of (seed, layer, step), bit i set meaning -1. The
    forward and the backward of a step read the same sr_step, so both operands of a GEMM get
    the same rotation."""
    z = _splitmix64(layer_seed(seed, layer_index, 7) ^ (int(step) & _MASK64))
    return tuple(-1 if (z >> i) & 1 else 1 for i in range(16))
