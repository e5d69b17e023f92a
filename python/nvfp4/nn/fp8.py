"""nvfp4.nn.fp8: the FP8 baseline Linear that NVFP4 and MXFP4 runs are compared against.

E4M3 forward operands (X, W), E5M2 gradients (dY), one FP32 scale per tensor, FP32
accumulation, the output in the input's dtype:

    fprop  Y  = X·Wᵀ     q(X) e4m3,  q(W) e4m3
    dgrad  dX = dY·W     q(dY) e5m2, q(W) e4m3
    wgrad  dW = dYᵀ·X    q(dY) e5m2, q(X) e4m3

A tensor t is quantized as q = fp8(clamp(t * s, -max, max)) (round to nearest even; max = 448
for E4M3, 57344 for E5M2) and stands for q / s. Two ways to choose s, as TransformerEngine
names them:

- ``current`` (recipe "fp8"): s = max / amax(t) from the tensor being quantized.
- ``delayed`` (recipe "fp8_delayed"): s comes from the amaxes of earlier steps, kept in an
  amax history per tensor role (x, w, dy): before a role is quantized, its history gives
  amax = max(history) ("max") or the latest entry ("most_recent"), s = max * 2^-margin / amax
  (kept as it was when that amax is 0, inf or NaN; NaN entries do not count for "max"), and
  the history rolls by one; after quantizing, the tensor's amax becomes the newest entry.
  This is TransformerEngine's DelayedScaling update (its amax_and_scale_update), run at the
  start of a role's next quantization instead of at the end of the step. Scales and
  histories are module buffers, updated in place on the device, with no host
  synchronization: the forward's (x, w), which only forwards change, and the gradient's (dy),
  which only backward passes change, apart, as TransformerEngine keeps its forward and
  backward scaling state, so that a backward reads the gradient state as the backward before
  it left it, whatever forwards ran in between — under torch.compile as in eager (a state
  shared by both passes is what a compiled backward would take as a snapshot of its
  forward). Each is one tensor, a role per row: [scale, history...] (one graph input per
  pass and layer when compiled: each input costs the compiled step host time).

On a CUDA GPU with FP8 tensor cores (compute capability 8.9 or newer) the GEMMs run through
``torch._scaled_mm``; elsewhere (the CPU, or ``emulate=True``) through the reference
emulation: the same quantized operands dequantized to FP32 and multiplied in FP32. A CUDA
GPU without FP8 raises an error that says so.

On the GPU each pass of the layer is one op (nvfp4.nn._fp8_passes: ``fp8_linear_fwd``,
``fp8_linear_bwd``): nvfp4's cast kernels (nvfp4_fp8_cast: the operand and its transpose
from one read; s derived and 1/s written on the device; delayed scaling's amax reduced by
the cast itself into the history) and torch._scaled_mm, with no scale arithmetic or
intermediate tensors in Python. ``fused_cast=False`` keeps the casts as torch ops (the
reference those kernels are tested against).
"""
from __future__ import annotations

import math
import types
import warnings
from dataclasses import dataclass
from typing import Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import nn

from .. import _ops  # also registers torch.ops.nvfp4.fp8_cast
from . import _fp8_passes as _passes  # torch.ops.nvfp4.fp8_linear_fwd / fp8_linear_bwd

__all__ = ["FP8Recipe", "FP8_RECIPES", "get_fp8_recipe", "FP8Linear", "fp8_max", "tensor_amax", "current_scale",
           "delayed_scale_update", "quantize_fp8", "dequantize_fp8", "fp8_supported"]

_FORMATS = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
_FLT_MAX = torch.finfo(torch.float32).max
# Rows of the delayed-scaling state: x and w in the forward's, dy in the gradient's. A row
# is the role's scale (column 0), then its amax history (columns 1..L; the newest in column 1).
ROLE_X, ROLE_W, ROLE_DY = 0, 1, 0
# the delayed-scaling buffers of an FP8Linear (name, rows)
_FP8_STATES = (("fp8_state", 2), ("fp8_grad_state", 1))
_FP8_BUFFERS = tuple(name for name, _ in _FP8_STATES)
# _scaled_mm needs the inner dimension (and N) to be multiples of 16; the token axis is the
# inner dimension of wgrad and is padded with zero rows (they change no amax and no product).
_ALIGN = 16


def fp8_max(dtype: torch.dtype) -> float:
    """Largest finite value of an FP8 dtype (448 for E4M3, 57344 for E5M2)."""
    return float(torch.finfo(dtype).max)


@dataclass(frozen=True)
class FP8Recipe:
    """How an FP8Linear quantizes.

    scaling: "current" (per-tensor scale from the tensor's own amax) or "delayed" (from an
    amax history). fwd_format / bwd_format: "e4m3" or "e5m2" for X and W / for dY.
    amax_history_len, amax_compute_algo ("max" or "most_recent"), margin: the delayed-scaling
    knobs of TransformerEngine's DelayedScaling (scale = fp8_max * 2^-margin / amax).
    fast_accum_fprop: torch._scaled_mm's use_fast_accum for the forward GEMM (faster,
    TransformerEngine's default for fprop); dgrad and wgrad always accumulate exactly in FP32.
    emulate: run the GEMMs by emulation even on a GPU with FP8 (for checks).
    fused_cast: on CUDA, run each pass as one op on nvfp4's own cast kernels
    (nvfp4_fp8_cast: for current scaling an amax pass, then one pass that writes the
    operand and its transpose and 1/s; for delayed scaling that one pass alone; no
    Python-side scale arithmetic); the same bytes as the torch-op path.
    compile_cast: where fused_cast is off or cannot run (a build without CUDA kernels),
    fuse scale-multiply, clamp and cast into one kernel with torch.compile
    (falls back to eager ops, with a warning, where that is unavailable).
    inductor_casts: inside a model compiled with torch.compile, run the casts as torch ops
    that the compiler traces (amax, scale, multiply, clamp, cast, the transposed copy) so
    that Inductor compiles them with the code around the layer (the amax and the cast fused
    with the kernel that produces the tensor), the GEMMs staying torch._scaled_mm, instead
    of the kernel path's two ops per step, which the compiler keeps opaque. Both give the
    same bits (tested); eager calls take the kernel path either way. Off by default: on an
    H100 the traced casts cost more GPU time than the kernels and the compiled step was
    slower with them (400M 0.863x of BF16 against 0.815x; 85M 1.169x against 1.143x;
    bench/NOTES.md); they save host time, which can pay on a slow host. FP16 inputs always
    take the kernel ops.
    """

    name: str = "fp8"
    scaling: str = "current"
    fwd_format: str = "e4m3"
    bwd_format: str = "e5m2"
    amax_history_len: int = 1024
    amax_compute_algo: str = "max"
    margin: float = 0.0
    fast_accum_fprop: bool = True
    emulate: bool = False
    fused_cast: bool = True
    compile_cast: bool = True
    inductor_casts: bool = False

    def __post_init__(self):
        self.validate()

    def validate(self) -> "FP8Recipe":
        if self.scaling not in ("current", "delayed"):
            raise ValueError(f"scaling: must be 'current' or 'delayed', got {self.scaling!r}")
        for f in ("fwd_format", "bwd_format"):
            if getattr(self, f) not in _FORMATS:
                raise ValueError(f"{f}: must be 'e4m3' or 'e5m2', got {getattr(self, f)!r}")
        if isinstance(self.amax_history_len, bool) or not isinstance(self.amax_history_len, int) or \
                self.amax_history_len < 1:
            raise ValueError(f"amax_history_len: must be an int >= 1, got {self.amax_history_len!r}")
        if self.amax_compute_algo not in ("max", "most_recent"):
            raise ValueError(f"amax_compute_algo: must be 'max' or 'most_recent', got {self.amax_compute_algo!r}")
        if not isinstance(self.margin, (int, float)) or isinstance(self.margin, bool) or not math.isfinite(self.margin) \
                or self.margin < 0:
            raise ValueError(f"margin: must be a finite number >= 0, got {self.margin!r}")
        for f in ("fast_accum_fprop", "emulate", "fused_cast", "compile_cast", "inductor_casts"):
            if not isinstance(getattr(self, f), bool):
                raise ValueError(f"{f}: must be a bool, got {getattr(self, f)!r}")
        return self

    @property
    def fwd_dtype(self) -> torch.dtype:
        return _FORMATS[self.fwd_format]

    @property
    def bwd_dtype(self) -> torch.dtype:
        return _FORMATS[self.bwd_format]

    def replace(self, **changes) -> "FP8Recipe":
        import dataclasses
        return dataclasses.replace(self, **changes)


FP8_RECIPES = {
    "fp8": FP8Recipe(name="fp8", scaling="current"),
    "fp8_delayed": FP8Recipe(name="fp8_delayed", scaling="delayed"),
}


def get_fp8_recipe(recipe: Union[str, FP8Recipe]) -> FP8Recipe:
    if isinstance(recipe, FP8Recipe):
        return recipe.validate()
    if isinstance(recipe, str) and recipe in FP8_RECIPES:
        return FP8_RECIPES[recipe]
    raise ValueError(f"recipe: must be an FP8Recipe or one of {sorted(FP8_RECIPES)}, got {recipe!r}")


def fp8_supported(device: Optional[torch.device] = None) -> Tuple[bool, str]:
    """(True, "") if torch._scaled_mm can run FP8 GEMMs on this CUDA device, else (False, why)."""
    if not torch.cuda.is_available():
        return False, "no CUDA device"
    if not hasattr(torch, "_scaled_mm"):
        return False, f"this torch ({torch.__version__}) has no torch._scaled_mm"
    dev = torch.device("cuda") if device is None else torch.device(device)
    major, minor = torch.cuda.get_device_capability(dev)
    if (major, minor) < (8, 9):
        return False, (f"FP8 GEMMs need a GPU with FP8 tensor cores (compute capability >= 8.9: Ada, Hopper, "
                       f"Blackwell); {torch.cuda.get_device_name(dev)} is sm_{major}{minor}")
    return True, ""


# ------------------------------------------------------------------------------ quantization
def tensor_amax(t: torch.Tensor) -> torch.Tensor:
    """max |t| as a float32 0-dim tensor on t's device, in one pass; NaN if t holds a NaN; 0
    for an empty tensor."""
    if t.numel() == 0:
        return torch.zeros((), dtype=torch.float32, device=t.device)
    return torch.linalg.vector_norm(t, float("inf"), dtype=torch.float32)


def _div32(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a / b of two float32 tensors, correctly rounded to float32 wherever it is computed: the
    quotient in float64 rounded to float32 is the correctly rounded float32 quotient (53 >=
    2 * 24 + 2 bits: the double rounding is innocuous), while float32 division compiled by
    Inductor into Triton may be the approximate div.full.f32."""
    return (a.double() / b.double()).float()


def current_scale(amax: torch.Tensor, fmax: float, margin: float = 0.0) -> torch.Tensor:
    """s = fmax * 2^-margin / amax; 1 when amax is 0, inf or NaN; FLT_MAX when that overflows."""
    scaled_max = torch.full_like(amax, fmax * 2.0 ** -margin)
    s = _div32(scaled_max, amax)
    s = torch.where(torch.isinf(s), torch.full_like(s, _FLT_MAX), s)
    ok = torch.isfinite(amax) & (amax > 0)
    return torch.where(ok, s, torch.ones_like(s))


_FMAX_FORMAT = {448.0: 0, 57344.0: 1}
_ALGO_CODE = {"max": 0, "most_recent": 1}


def delayed_scale_update(history: torch.Tensor, scale: torch.Tensor, role: int, fmax: float, margin: float,
                         algo: str) -> None:
    """TransformerEngine's delayed-scaling update of one role, in place on the device:
    amax = max(history[role]) (NaN entries ignored) or history[role, 0]; scale[role] = fmax *
    2^-margin / amax unless amax is 0, inf or NaN (then unchanged; FLT_MAX if it overflows);
    history[role] rolls left by one and its slot 0 is cleared for the next amax.
    One library call (nvfp4_fp8_delayed_update: one kernel on CUDA) in place of ~15 torch
    ops; delayed_scale_update_torch is the same update in torch ops."""
    h = history[role]
    if torch.compiler.is_compiling():
        # traced (FP8Recipe.inductor_casts): torch ops, which Inductor compiles into the step
        delayed_scale_update_torch(history, scale, role, fmax, margin, algo)
        return
    if fmax in _FMAX_FORMAT and algo in _ALGO_CODE and h.is_contiguous() and h.dtype == torch.float32 and \
            scale.dtype == torch.float32 and h.device.type in ("cpu", "cuda") and \
            (h.device.type == "cpu" or _HAS_CUDA_KERNELS):
        torch.ops.nvfp4.fp8_delayed_update(h, scale[role], _FMAX_FORMAT[fmax], float(margin), _ALGO_CODE[algo])
        return
    delayed_scale_update_torch(history, scale, role, fmax, margin, algo)


def delayed_scale_update_torch(history: torch.Tensor, scale: torch.Tensor, role: int, fmax: float, margin: float,
                               algo: str) -> None:
    """delayed_scale_update in torch ops (the reference the library call is tested against)."""
    h = history[role]
    if algo == "max":
        amax = torch.where(torch.isnan(h), torch.zeros_like(h), h).amax()
    else:
        amax = h[0]
    scaled_max = torch.full_like(amax, fmax * 2.0 ** -margin)
    s = _div32(scaled_max, amax)
    s = torch.where(torch.isinf(s), torch.full_like(s, _FLT_MAX), s)
    ok = torch.isfinite(amax) & (amax > 0)
    scale[role].copy_(torch.where(ok, s, scale[role]))
    rolled = torch.roll(h, -1, 0)
    rolled.narrow(0, 0, 1).zero_()  # not `rolled[0] = 0.0`: that copies a host scalar (a sync)
    h.copy_(rolled)


def _cast_eager(t: torch.Tensor, scale: torch.Tensor, fmax: float, dtype: torch.dtype) -> torch.Tensor:
    return (t.float() * scale).clamp(-fmax, fmax).to(dtype)


def _cast_pair_eager(t: torch.Tensor, scale: torch.Tensor, fmax: float, dtype: torch.dtype):
    """(q, qᵀ contiguous) of a 2D t; compiled, both come from one read of t."""
    q = (t.float() * scale).clamp(-fmax, fmax).to(dtype)
    return q, q.t().contiguous()


# (cast, input dtype, format, rank, scale rank, grad mode, autocast) -> compiled cast
_compiled_casts: dict = {}
_compile_failed = False


def _compiled_cast_for(key, fn):
    """One compiled copy of fn per key, each its own code object: dynamo keeps at most 8
    graphs per code object, and input dtypes x formats x ranks x grad mode x autocast would
    exceed it in one (a training step calls the cast in all of them); within a key only
    size-1 dimensions can add graphs."""
    if key not in _compiled_casts:
        code = fn.__code__.replace(co_name=f"_cast_fp8_{len(_compiled_casts)}")
        f = types.FunctionType(code, fn.__globals__, code.co_name)
        _compiled_casts[key] = torch.compile(f, dynamic=True, fullgraph=True)
    return _compiled_casts[key]


def quantize_fp8(t: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype, compiled: bool = False,
                 transposed: bool = False):
    """fp8(clamp(t * scale, -max, max)), computed in FP32 (the product rounds once to FP32,
    the cast rounds to nearest even; NaN stays NaN, its sign bit unspecified: CPU and
    GPU arithmetic propagate NaN signs differently, so a NaN code may be 0x7f or 0xff).
    compiled: one fused kernel on CUDA via torch.compile (the same values: a multiply, a
    clamp and a cast, no reassociation).
    transposed: t is 2D; return (q, qᵀ) with qᵀ contiguous, the layout the other GEMMs of a
    Linear read (compiled: written by the same kernel that writes q, from one read of t;
    otherwise a byte copy of q)."""
    global _compile_failed
    if transposed and t.dim() != 2:
        raise ValueError(f"t: transposed=True needs a 2D tensor, got shape {tuple(t.shape)}")
    fmax = fp8_max(dtype)
    if compiled and torch.compiler.is_compiling():
        compiled = False  # already inside a compiled region: the ops below are traced into it
    if compiled and t.is_cuda and not _compile_failed:
        try:
            # detached (no autograd state, no view base to guard on); grad mode and autocast
            # are part of dynamo's guards, so they are part of the key too
            key = (transposed, t.dtype, dtype, t.dim(), scale.dim(), torch.is_grad_enabled(),
                   torch.is_autocast_enabled("cuda"))
            fn = _compiled_cast_for(key, _cast_pair_eager if transposed else _cast_eager)
            return fn(t.detach(), scale.detach(), fmax, dtype)
        except Exception as e:  # no Triton, an unsupported GPU, ...: same values, unfused
            _compile_failed = True
            warnings.warn(f"nvfp4.nn.fp8: torch.compile of the FP8 cast failed ({type(e).__name__}: {e}); "
                          "using unfused torch ops", RuntimeWarning)
    q = _cast_eager(t, scale, fmax, dtype)
    return (q, _t(q)) if transposed else q


def dequantize_fp8(q: torch.Tensor, scale_inv: torch.Tensor) -> torch.Tensor:
    """q * scale_inv in FP32."""
    return q.float() * scale_inv


def _t(q: torch.Tensor) -> torch.Tensor:
    """Contiguous transpose of a 2D FP8 tensor (as bytes: every torch can copy uint8)."""
    return q.view(torch.uint8).t().contiguous().view(q.dtype)


# ------------------------------------------------------------------------------ autograd
@dataclass(frozen=True)
class _Plan:
    recipe: FP8Recipe
    emulate: bool
    update: bool  # delayed scaling: update and record the history (training forwards)
    cfg: Tuple[int, ...] = ()  # the kernel path's Fp8Config list
    margin: float = 0.0


_FORMAT_CODE = {torch.float8_e4m3fn: 0, torch.float8_e5m2: 1}
_IO_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_HAS_CUDA_KERNELS = bool(_ops.build_cuda_archs())
# Device types whose tensors take the kernel path (nvfp4_fp8_cast and torch._scaled_mm, one
# op per pass) when the recipe allows it. Tests add "cpu" to run that path on the library's
# CPU reference and torch's CPU _scaled_mm.
_KERNEL_DEVICES = frozenset({"cuda"}) if _HAS_CUDA_KERNELS else frozenset()


def _plans(r: FP8Recipe) -> Tuple[_Plan, ...]:
    """The 4 plans of a recipe, indexed 2 * emulate + update (built when the recipe is set,
    so that a forward only indexes)."""
    C = _passes.Fp8Config
    out = []
    for emulate in (False, True):
        for update in (False, True):
            cfg = [0] * C.SIZE
            cfg[C.FWD_FORMAT] = _FORMAT_CODE[r.fwd_dtype]
            cfg[C.BWD_FORMAT] = _FORMAT_CODE[r.bwd_dtype]
            cfg[C.DELAYED] = int(r.scaling == "delayed")
            cfg[C.UPDATE] = int(update and r.scaling == "delayed")
            cfg[C.ALGO] = _ALGO_CODE[r.amax_compute_algo]
            cfg[C.FAST_ACCUM] = int(r.fast_accum_fprop)
            out.append(_Plan(r, emulate, update, tuple(cfg), float(r.margin)))
    return tuple(out)


# torch.device -> "" (FP8 GEMMs run there) or why not; a device's capability does not change.
_FP8_DEVICES: dict = {}


def _require_fp8(device: torch.device) -> None:
    why = _FP8_DEVICES.get(device)
    if why is None:
        why = _FP8_DEVICES[device] = fp8_supported(device)[1]
    if why:
        raise RuntimeError(f"FP8Linear: {why}. Use a recipe with emulate=True to run the FP32 emulation instead.")


def _as_stored(t: torch.Tensor) -> torch.Tensor:
    """t (BF16 or FP32) as FP32 holding the values its dtype stores. Compiled, Inductor may hand
    a consumer fused with t's producer the producer's FP32 result where eager rounds it to
    BF16 first, and folds conversions and bitcast round trips that would round it; the BF16
    bits widened by integer ops into an FP32 word cannot be folded, so the quantization sees
    the BF16 values (NaN and infinities included) as eager does. Eager: t.float()."""
    if t.dtype is torch.bfloat16 and torch.compiler.is_compiling():
        return (t.view(torch.int16).to(torch.int32) << 16).view(torch.float32)
    return t.float()


def _quantize_role(t, role, dtype, plan: _Plan, state, transposed: bool = False):
    """(q, scale_inv) of t for one role with the recipe's scaling, in torch ops (the reference
    path: emulation, or fused_cast=False; and, inside torch.compile, the traced road of
    inductor_casts); (q, qᵀ, scale_inv) with transposed=True."""
    r = plan.recipe
    if torch.compiler.is_compiling():
        t = _as_stored(t)
    fmax = fp8_max(dtype)
    if r.scaling == "current":
        s = current_scale(tensor_amax(t), fmax)
    else:
        history, scale = state[:, 1:], state[:, 0]
        if plan.update:
            delayed_scale_update(history, scale, role, fmax, r.margin, r.amax_compute_algo)
        s = scale[role].clone()  # the value used now, whatever later steps do to the buffer
        if plan.update:
            history[role, 0].copy_(tensor_amax(t))
    q = quantize_fp8(t, s, dtype, compiled=r.compile_cast and not plan.emulate, transposed=transposed)
    s_inv = _div32(torch.ones_like(s), s)
    return (*q, s_inv) if transposed else (q, s_inv)


def _mm(a, a_sinv, b, b_sinv, out_dtype, emulate: bool, fast_accum: bool) -> torch.Tensor:
    """(a / s_a) @ (b / s_b)ᵀ for a [M, K] and b [N, K] FP8 (row-major), in FP32, out_dtype."""
    if emulate:
        return (dequantize_fp8(a, a_sinv) @ dequantize_fp8(b, b_sinv).t()).to(out_dtype)
    # _scaled_mm: the first operand row-major, the second column-major (bᵀ of a row-major b).
    out = torch._scaled_mm(a, b.t(), scale_a=a_sinv, scale_b=b_sinv, out_dtype=out_dtype, use_fast_accum=fast_accum)
    return out[0] if isinstance(out, tuple) else out


class _FP8LinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, state, grad_state, plan: _Plan):
        r = plan.recipe
        cdt = x.dtype
        k = x.shape[-1]
        n = weight.shape[0]
        x2 = x.reshape(-1, k)
        m = x2.shape[0]
        need_dx, need_dw = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        pad = (-m) % _ALIGN if (need_dw and not plan.emulate) else 0
        with torch.autocast(x.device.type, enabled=False):
            xp = F.pad(x2, (0, 0, 0, pad)) if pad else x2
            # Each operand once, in both layouts where the backward needs its transpose
            # (wgrad reads Xᵀ, dgrad Wᵀ): one kernel instead of a cast and a transpose copy.
            qxt = qwt = None
            if need_dw:
                qx, qxt, sx_inv = _quantize_role(xp, ROLE_X, r.fwd_dtype, plan, state, transposed=True)
            else:
                qx, sx_inv = _quantize_role(xp, ROLE_X, r.fwd_dtype, plan, state)
            if need_dx:
                qw, qwt, sw_inv = _quantize_role(weight, ROLE_W, r.fwd_dtype, plan, state, transposed=True)
            else:
                qw, sw_inv = _quantize_role(weight, ROLE_W, r.fwd_dtype, plan, state)
            # With a bias the GEMM's FP32 result takes the bias in FP32 and is rounded once.
            y = _mm(qx, sx_inv, qw, sw_inv, cdt if bias is None else torch.float32, plan.emulate, r.fast_accum_fprop)
            if pad:
                y = y[:m]
            if bias is not None:
                y = (y + bias.float()).to(cdt)
        ctx.save_for_backward(qxt, qwt, sx_inv, sw_inv)
        # The gradient's delayed-scaling state is updated in place by every backward: held by
        # reference, not saved (its version changes with each backward that runs before this
        # one). Forwards never write it, so it is the same buffer whatever forwards run
        # before this backward (gradient accumulation, recomputation), compiled or not.
        ctx.state = grad_state
        ctx.plan = plan
        ctx.meta = (tuple(x.shape), m, n, pad, cdt, weight.dtype, None if bias is None else bias.dtype)
        return y.reshape(*x.shape[:-1], n)

    @staticmethod
    def backward(ctx, dy):
        plan = ctx.plan
        r = plan.recipe
        x_shape, m, n, pad, cdt, w_dtype, b_dtype = ctx.meta
        qxt, qwt, sx_inv, sw_inv = ctx.saved_tensors  # Xᵀ, Wᵀ (contiguous)
        state = ctx.state
        need_dx, need_dw, need_db = ctx.needs_input_grad[0], ctx.needs_input_grad[1], ctx.needs_input_grad[2]
        dx = dw = db = None
        with torch.autocast(dy.device.type, enabled=False):
            dy2 = (_as_stored(dy) if torch.compiler.is_compiling() else dy).reshape(-1, n)
            if need_dx or need_dw:
                dyp = F.pad(dy2, (0, 0, 0, pad)) if pad else dy2
                if need_dw:
                    qdy, qdyt, sdy_inv = _quantize_role(dyp.contiguous(), ROLE_DY, r.bwd_dtype, plan, state,
                                                        transposed=True)
                else:
                    qdy, sdy_inv = _quantize_role(dyp.contiguous(), ROLE_DY, r.bwd_dtype, plan, state)
            if need_dx:
                # dX = dY·W: W's transpose is the second operand
                dx = _mm(qdy, sdy_inv, qwt, sw_inv, cdt, plan.emulate, False)
                dx = (dx[:m] if pad else dx).reshape(x_shape)
            if need_dw:
                # dW = dYᵀ·X, inner dimension the (padded) token axis
                dw = _mm(qdyt, sdy_inv, qxt, sx_inv, torch.float32, plan.emulate, False).to(w_dtype)
            if need_db:
                db = dy2.sum(0, dtype=torch.float32).to(b_dtype)
        return dx, dw, db, None, None, None


class _FP8KernelFn(torch.autograd.Function):
    """The kernel path: one op per pass (nvfp4.nn._fp8_passes). No autocast context is
    entered: nothing these passes run (nvfp4's ops, torch._scaled_mm, an add) is on an
    autocast list."""

    @staticmethod
    def forward(ctx, x, weight, bias, state, grad_state, plan: _Plan):
        k = x.shape[-1]
        x2 = x.reshape(-1, k)
        m = x2.shape[0]
        need_dx, need_dw = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        pad = (-m) % _ALIGN if need_dw else 0
        if pad:
            x2 = F.pad(x2, (0, 0, 0, pad))
        y, xt, wt, sc = _passes.fp8_linear_fwd(x2, weight, bias, state, plan.cfg, plan.margin, need_dw,
                                               need_dx)
        if pad:
            y = y[:m]
        ctx.save_for_backward(xt, wt, sc)
        # held by reference, not saved: see _FP8LinearFn
        ctx.state = grad_state
        ctx.plan = plan
        ctx.meta = (x.shape, m, pad, weight.dtype, None if bias is None else bias.dtype)
        return y.view(*x.shape[:-1], y.shape[-1])

    @staticmethod
    def backward(ctx, dy):
        xt, wt, sc = ctx.saved_tensors
        state = ctx.state
        plan = ctx.plan
        x_shape, m, pad, w_dtype, b_dtype = ctx.meta
        need_dx, need_dw, need_db = ctx.needs_input_grad[0], ctx.needs_input_grad[1], ctx.needs_input_grad[2]
        dy2 = dy.reshape(-1, dy.shape[-1])
        dx = dw = db = None
        if need_dx or need_dw:
            dyp = F.pad(dy2, (0, 0, 0, pad)) if pad else dy2
            gx, gw = _passes.fp8_linear_bwd(dyp, xt, wt, sc, state, plan.cfg, plan.margin, need_dx,
                                            need_dw, w_dtype)
            if need_dx:
                dx = (gx[:m] if pad else gx).view(x_shape)
            if need_dw:
                dw = gw
        if need_db:
            db = dy2.sum(0, dtype=torch.float32).to(b_dtype)
        return dx, dw, db, None, None, None


# ------------------------------------------------------------------------------ module
class FP8Linear(nn.Linear):
    """A drop-in ``nn.Linear`` whose three GEMMs run in FP8 (see the module docstring).

    recipe: "fp8" (current scaling), "fp8_delayed" (delayed scaling) or an FP8Recipe.
    in_features and out_features must be multiples of 16 (FP8 GEMM operand rules).
    With delayed scaling the module holds two buffers (in its state_dict, so a checkpoint
    resumes them), float32, one row per tensor role: its scale in column 0, then its amax
    history (amax_history_len entries, the newest at its index 0, then the earlier ones from
    its end back, as TransformerEngine rolls it) — the forward's ``fp8_state`` [2, 1 + L]
    (rows x, w), updated by training forwards (module in training mode, autograd on), and the
    gradient's ``fp8_grad_state`` [1, 1 + L] (dy), updated by the backward pass; only read
    otherwise. ``fp8_delayed_state()`` gives each role's scale and history as views. A
    state_dict of the earlier layout (``fp8_amax_history`` [3, L] with rows x, w, dy and
    ``fp8_scale`` [3]) loads into these.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None,
                 recipe: Union[str, FP8Recipe] = "fp8"):
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self._fp8_init(recipe)

    def _fp8_init(self, recipe) -> None:
        if self.in_features % _ALIGN or self.out_features % _ALIGN:
            raise ValueError(f"in_features/out_features: must be multiples of 16 for FP8 GEMMs, got "
                             f"{self.in_features}x{self.out_features}")
        self.fp8_recipe = get_fp8_recipe(recipe)

    @property
    def fp8_recipe(self) -> FP8Recipe:
        return self._fp8_recipe

    @fp8_recipe.setter
    def fp8_recipe(self, recipe: Union[str, FP8Recipe]) -> None:
        recipe = get_fp8_recipe(recipe)
        self._fp8_recipe = recipe
        self._fp8_plans = _plans(recipe)
        dev = self.weight.device
        if recipe.scaling == "delayed":
            hlen = recipe.amax_history_len
            for name, rows in _FP8_STATES:
                st = self._buffers.get(name)
                if st is None or st.shape != (rows, 1 + hlen):
                    st = torch.zeros(rows, 1 + hlen, dtype=torch.float32, device=dev)
                    st[:, 0] = 1.0  # the scales before any amax is recorded
                    self.register_buffer(name, st)
        else:
            for b in _FP8_BUFFERS:
                self._buffers.pop(b, None)

    def fp8_delayed_state(self) -> dict:
        """Delayed scaling: {"x" | "w" | "dy": (scale, history)}, views of the layer's buffers
        (a 0-dim scale and the [L] amax history, its newest entry at index 0; writing them
        writes the buffers)."""
        if self._fp8_recipe.scaling != "delayed":
            raise RuntimeError(f"fp8_delayed_state: the layer's recipe {self._fp8_recipe.name!r} uses current "
                               "scaling, which keeps no state")
        fwd, grad = self._delayed_buffers()
        return {"x": (fwd[ROLE_X, 0], fwd[ROLE_X, 1:]), "w": (fwd[ROLE_W, 0], fwd[ROLE_W, 1:]),
                "dy": (grad[ROLE_DY, 0], grad[ROLE_DY, 1:])}

    def _delayed_buffers(self):
        """(fp8_state, fp8_grad_state), or a named error where a layer lacks them."""
        b = self._buffers
        state, grad_state = b.get("fp8_state"), b.get("fp8_grad_state")
        if state is None or grad_state is None:
            raise RuntimeError("FP8Linear: delayed scaling without its fp8_state / fp8_grad_state buffers (a "
                               "layer pickled whole by an earlier version?): set fp8_recipe again, then load "
                               "a state_dict, which converts the earlier layout")
        return state, grad_state

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # the earlier layout: fp8_amax_history [3, L] (rows x, w, dy) and fp8_scale [3]
        h, s = state_dict.get(prefix + "fp8_amax_history"), state_dict.get(prefix + "fp8_scale")
        if isinstance(h, torch.Tensor) and isinstance(s, torch.Tensor) and h.dim() == 2 and h.shape[0] == 3 \
                and s.shape == (3,) and not any(prefix + n in state_dict for n in _FP8_BUFFERS):
            del state_dict[prefix + "fp8_amax_history"], state_dict[prefix + "fp8_scale"]
            both = torch.cat([s.reshape(3, 1).to(h.dtype), h], dim=1)
            state_dict[prefix + "fp8_state"], state_dict[prefix + "fp8_grad_state"] = both[:2], both[2:]
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    @classmethod
    def from_linear(cls, module: nn.Linear, recipe: Union[str, FP8Recipe] = "fp8") -> "FP8Linear":
        """Turn an nn.Linear into an FP8Linear in place (same object and Parameters). Returns it."""
        if type(module) is not nn.Linear:
            raise TypeError(f"module: expected a torch.nn.Linear, got {type(module).__name__}")
        if module.in_features % _ALIGN or module.out_features % _ALIGN:
            raise ValueError(f"module: in_features/out_features must be multiples of 16, got "
                             f"{module.in_features}x{module.out_features}")
        module.__class__ = cls
        module._fp8_init(recipe)
        return module

    def to_linear(self) -> nn.Linear:
        """The reverse of from_linear, in place (the FP8 buffers are dropped)."""
        for b in _FP8_BUFFERS:
            self._buffers.pop(b, None)
        self.__dict__.pop("_fp8_recipe", None)
        self.__dict__.pop("_fp8_plans", None)
        self.__class__ = nn.Linear
        return self

    def extra_repr(self) -> str:
        return super().extra_repr() + f", recipe={self._fp8_recipe.name}"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.numel() == 0 or self.out_features == 0:  # no work: no input, or no output features
            return F.linear(x, self.weight, self.bias)
        dev = x.device.type
        if torch.is_autocast_enabled(dev):
            x = x.to(torch.get_autocast_dtype(dev))
        if x.dtype not in _IO_DTYPES:
            raise TypeError(f"x: FP8Linear takes float32/float16/bfloat16 inputs, got {x.dtype}")
        r = self._fp8_recipe
        kernel = r.fused_cast and not r.emulate and dev in _KERNEL_DEVICES
        emulate = not kernel and (r.emulate or dev != "cuda")
        if dev == "cuda" and not emulate and not torch.compiler.is_compiling():
            _require_fp8(x.device)
        if not x.is_contiguous():
            x = x.contiguous()
        delayed = r.scaling == "delayed"
        update = delayed and self.training and torch.is_grad_enabled()
        plan = self._fp8_plans[2 * emulate + update]
        state, grad_state = self._delayed_buffers() if delayed else (None, None)
        # Inside torch.compile the kernel path is traced as torch ops instead (the recipe's
        # inductor_casts): the same casts and GEMMs, compiled with the model. FP16 inputs keep
        # the kernel ops (_as_stored has no cheap way to restore their rounding).
        traced = kernel and r.inductor_casts and x.dtype is not torch.float16 and torch.compiler.is_compiling()
        fn = _FP8KernelFn if kernel and not traced else _FP8LinearFn
        return fn.apply(x, self.weight, self.bias, state, grad_state, plan)
