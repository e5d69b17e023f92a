"""Per-operand recipes: MXFP4 operands, scale rules, double quantization, mixed formats, the
FP8 baseline through convert. The emulated Linear (nvfp4.nn.emulated) is checked against a
reference written here from the public quantizers: each operand quantized with the seeds
and offsets the layer documents, dequantized in float64, multiplied in float64. Bound per
element (FP32 outputs, FP32 accumulation of exact products): |got - ref| <= 2^-20 * (|A| |B|).
Runs on the CPU, and on CUDA when there is one.
"""
from __future__ import annotations

import pytest
import torch

import nvfp4
import nvfp4.nn as nn4
from nvfp4.nn.emulated import RECIPE_OPERANDS, TOKEN_ALIGN
from nvfp4.nn.fp8 import FP8Linear
from nvfp4.nn.recipe import QuantConfig, layer_seed

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
MX = dict(format="mxfp4")


# ----------------------------------------------------------------------------- validation
@pytest.mark.parametrize("change,name", [
    (dict(x=dict(format="fp6")), "x.format"),
    (dict(w=dict(format="mxfp4", block="2d")), "w.block"),
    (dict(wgrad_x=dict(format="mxfp4", rht=True), wgrad_dy=dict(rht=True)), "wgrad_x.rht"),
    (dict(x=dict(scale_rule="ceil")), "x.scale_rule"),
    (dict(x=dict(format="mxfp4", scale_rule="floor")), "x.scale_rule"),
    (dict(x=dict(double_quant=True)), "x.double_quant"),
    (dict(dy=dict(double_quant=True)), "dy.double_quant"),
    (dict(wgrad_dy=dict(double_quant=1)), "wgrad_dy.double_quant"),
    (dict(dgrad=False, wgrad_dy=dict(double_quant=True)), "wgrad_dy.double_quant"),
])
def test_recipe_errors_name_the_field(change, name):
    with pytest.raises(ValueError, match=name.replace(".", r"\.")):
        nn4.get_recipe("nvfp4", **change)


def test_mx_operands_need_multiples_of_32():
    with pytest.raises(ValueError, match="in_features"):
        nn4.Linear(48, 64, recipe="mx_baseline")
    with pytest.raises(ValueError, match="out_features"):
        nn4.Linear(64, 48, recipe="mx_baseline")
    nn4.Linear(48, 64, recipe="nvfp4")  # NVFP4 needs 16


def test_canned_recipes():
    R = nn4.RECIPES
    for name in ("mx_baseline", "nvidia_round_to_infinity", "tetrajet"):
        assert all(getattr(R[name], f).format == "mxfp4" for f in RECIPE_OPERANDS), name
        assert not R[name].fused
    assert {getattr(R["mx_baseline"], f).mx_rule for f in RECIPE_OPERANDS} == {"ocp"}
    assert {getattr(R["mx_baseline"], f).rounding for f in RECIPE_OPERANDS} == {"rtn"}
    assert {getattr(R["nvidia_round_to_infinity"], f).mx_rule for f in RECIPE_OPERANDS} == {"ceil"}
    t = R["tetrajet"]
    assert {getattr(t, f).mx_rule for f in RECIPE_OPERANDS} == {"tetrajet"}
    assert t.dy.rounding == t.wgrad_dy.rounding == t.wgrad_x.rounding == t.dgrad_w.rounding == "sr"
    assert t.x.rounding == t.w.rounding == "rtn"
    assert t.dgrad_w.double_quant and t.wgrad_x.double_quant and t.wgrad_dy.double_quant
    f = R["fp4_all_the_way"]
    assert f.fused and f.w.block == "1d" and not f.wgrad_x.rht and not f.wgrad_dy.rht
    assert f.dy.rounding == f.wgrad_dy.rounding == f.wgrad_x.rounding == "sr" and f.x.rounding == f.w.rounding == "rtn"


def test_frozen_layers_refuse_per_operand_recipes():
    m = torch.nn.Sequential(torch.nn.Linear(64, 64))
    mixed = nn4.get_recipe("nvfp4", dy={"format": "mxfp4"})
    for r in ("mx_baseline", mixed):
        with pytest.raises(ValueError, match="recipe"):
            nn4.freeze_fp4(m, r, exclude=[])


def test_weight_reuse_refused_on_the_per_operand_path():
    layer = nn4.Linear(64, 64, recipe="mx_baseline")
    layer.set_weight_reuse("store")
    with pytest.raises(RuntimeError, match="weight_reuse"):
        layer(torch.randn(4, 64))


# ----------------------------------------------------------------------------- reference
def _q_dequant(t, c: QuantConfig, columnwise: bool, seed: int, offset: int, signs):
    """The operand as the layer quantizes it, dequantized in float64, in the orientation the
    GEMM consumes (rows = the GEMM's M or N, cols = its K, padding and RHT domain kept)."""
    if c.format == "mxfp4":
        q = nvfp4.quantize_mxfp4(t, rounding=c.rounding, scale_rule=c.mx_rule, seed=seed, offset=offset,
                                 rowwise=not columnwise, columnwise=columnwise, scale_layout="linear")
        full = q.dequantize(torch.float32, columnwise=columnwise)
        d = q.columnwise if columnwise else q.rowwise
        dec = torch.empty(d.data.shape[0], d.data.shape[1] * 2, dtype=torch.float32, device=t.device)
        nvfp4._C.mx_dequantize(d.data, d.scales.view(torch.uint8), 0, dec,
                               torch.cuda.current_stream().cuda_stream if t.is_cuda else 0)
        return dec.double(), full
    rht = ("columnwise" if columnwise else "rowwise") if c.rht else "none"
    q = nvfp4.quantize(t, block=c.block, rounding=c.rounding, rht=rht, seed=seed, offset=offset,
                       rowwise=not columnwise, columnwise=columnwise, scale_layout="linear", rht_signs=signs)
    full = q.dequantize(torch.float32, columnwise=columnwise)
    raw = q.dequantize(torch.float32, columnwise=columnwise, undo_rht=False)
    if columnwise:  # keep the padded token lanes: they belong to the transform
        d = q.columnwise
        dec = torch.empty(d.data.shape[0], d.data.shape[1] * 2, dtype=torch.float32, device=t.device)
        nvfp4._C.dequantize(d.data, d.scales.view(torch.uint8), d.amax, 0, dec,
                            torch.cuda.current_stream().cuda_stream if t.is_cuda else 0)
        return dec.double(), full
    return raw.double(), full


def reference(layer, x, dy):
    r = layer.recipe
    i = layer.layer_index
    off = int(layer.sr_step)
    seeds = {f: layer_seed(r.seed, i, 2 + j) for j, f in enumerate(RECIPE_OPERANDS)}
    s = r.rht_signs
    w = layer.weight.detach()  # quantized from the master weight
    m = x.shape[0]
    A, xf = _q_dequant(x, r.x, False, seeds["x"], off, s)
    B, wf = _q_dequant(w, r.w, False, seeds["w"], off, s)
    y = A @ B.t() + layer.bias.detach().double()
    wq = r.dgrad_w or r.w  # dgrad's weight and its SR stream
    seed_wt = seeds["w"] if r.dgrad_w is None else layer_seed(r.seed, i, 8)
    Bt, _ = _q_dequant(wf if wq.double_quant else w, wq, True, seed_wt, off, s)
    Dy, dyf = _q_dequant(dy, r.dy, False, seeds["dy"], off, s)
    dx = Dy @ Bt.t()
    pad = (-m) % TOKEN_ALIGN
    xs = xf if r.wgrad_x.double_quant else x
    dys = dyf if r.wgrad_dy.double_quant else dy
    pz = lambda t: torch.nn.functional.pad(t, (0, 0, 0, pad)) if pad else t  # noqa: E731
    Xt, _ = _q_dequant(pz(xs), r.wgrad_x, True, seeds["wgrad_x"], off, s)
    Dyt, _ = _q_dequant(pz(dys), r.wgrad_dy, True, seeds["wgrad_dy"], off, s)
    dw = Dyt @ Xt.t()
    return (y, A.abs() @ B.abs().t()), (dx, Dy.abs() @ Bt.abs().t()), (dw, Dyt.abs() @ Xt.abs().t())


def _within(got, want, mag, what, rel=0.0):
    err = (got.double() - want).abs()
    bound = 2.0 ** -20 * mag + rel * want.abs() + 1e-30
    assert (err <= bound).all(), f"{what}: worst ratio {(err / bound).max().item():.3g}"


MIXED = nn4.Recipe(name="mixed", x=QuantConfig(), w=QuantConfig(block="2d"), dy=QuantConfig("1d", "sr", **MX),
                   wgrad_dy=QuantConfig("1d", "sr", True), wgrad_x=QuantConfig("1d", "rtn", True, double_quant=True))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("recipe", ["mx_baseline", "nvidia_round_to_infinity", "tetrajet", MIXED],
                         ids=lambda r: r if isinstance(r, str) else r.name)
@pytest.mark.parametrize("m", [64, 37])
def test_emulated_linear_matches_reference(recipe, m, device):
    torch.manual_seed(m)
    layer = nn4.Linear(64, 96, recipe=recipe, layer_index=3).to(device)
    with torch.no_grad():
        layer.sr_step.fill_(5)
    x = (torch.randn(m, 64) * torch.exp2(torch.randint(-4, 5, (m, 1)).float())).to(device)
    dy = torch.randn(m, 96, device=device)
    (y_r, y_m), (dx_r, dx_m), (dw_r, dw_m) = reference(layer, x, dy)
    xi = x.clone().requires_grad_(True)
    y = layer(xi)
    y.backward(dy)
    _within(y.detach(), y_r, y_m + layer.bias.detach().abs().double(), "y")
    _within(xi.grad, dx_r, dx_m, "dx")
    _within(layer.weight.grad, dw_r, dw_m, "dw")
    uses_sr = any(getattr(layer.recipe, f).rounding == "sr" for f in RECIPE_OPERANDS + ("dgrad_w",)
                  if getattr(layer.recipe, f) is not None)
    assert int(layer.sr_step) == (6 if uses_sr else 5)  # the backward advances it when SR is used
    assert torch.isfinite(y).all()


@pytest.mark.parametrize("device", DEVICES)
def test_emulated_sr_is_reproducible_and_advances(device):
    torch.manual_seed(0)
    a = nn4.Linear(64, 64, recipe="tetrajet").to(device)
    b = nn4.Linear(64, 64, recipe="tetrajet").to(device)
    b.load_state_dict(a.state_dict())
    x = torch.randn(32, 64, device=device)
    dy = torch.randn(32, 64, device=device)  # off the FP4 grid, so SR has something to round
    grads = []
    for layer in (a, b, a):
        layer.weight.grad = None
        layer(x).backward(dy)
        grads.append(layer.weight.grad.clone())
    assert torch.equal(grads[0], grads[1])          # same state, same bits
    assert not torch.equal(grads[0], grads[2])      # the counter moved: fresh bits
    assert int(a.sr_step) == 2 and int(b.sr_step) == 1


@pytest.mark.parametrize("recipe", ["mx_baseline", "tetrajet", "fp8"])
def test_small_model_learns(recipe):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 64))
    nn4.convert(model, recipe, exclude=[])
    kinds = {type(mod).__name__ for mod in model.modules()}
    assert ("FP8Linear" if recipe == "fp8" else "Linear") in kinds
    if recipe == "fp8":
        assert all(isinstance(mod, FP8Linear) for mod in (model[0], model[2]))
    else:
        assert all(isinstance(mod, nn4.Linear) and mod.recipe.name == recipe for mod in (model[0], model[2]))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    x = torch.randn(256, 64)
    target = torch.tanh(x @ torch.randn(64, 64) * 0.3)
    losses = []
    for _ in range(40):
        loss = torch.nn.functional.mse_loss(model(x), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses[::8]
    nn4.unconvert(model)
    assert all(type(mod) is torch.nn.Linear for mod in (model[0], model[2]))


def test_compiled_and_autocast_equal_eager():
    """torch.compile runs the per-operand path eagerly between compiled regions: the same
    outputs, gradients and counters as eager, under BF16 autocast."""
    def make():
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 64))
        return nn4.convert(m, "tetrajet", exclude=[])

    x, dy = torch.randn(64, 64), torch.randn(64, 64)
    runs = []
    for compiled in (False, True):
        m = make()
        f = torch.compile(m) if compiled else m
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = f(x)
        assert y.dtype == torch.bfloat16
        y.float().backward(dy)
        runs.append((y.float(), [p.grad for p in m.parameters()], [int(m[i].sr_step) for i in (0, 2)]))
    (y0, g0, s0), (y1, g1, s1) = runs
    assert torch.equal(y0, y1) and all(torch.equal(a, b) for a, b in zip(g0, g1)) and s0 == s1 == [1, 1]


def test_non_contiguous_and_batched_inputs():
    torch.manual_seed(0)
    layer = nn4.Linear(64, 96, recipe="mx_baseline")
    x = torch.randn(3, 64, 32).transpose(1, 2)  # [3, 32, 64], not contiguous
    y = layer(x)
    assert y.shape == (3, 32, 96)
    assert torch.equal(y, layer(x.contiguous()))
    y.sum().backward()


@pytest.mark.parametrize("device", DEVICES)
def test_mx_pairs_keep_quantized_operands_for_backward(device):
    """An all-MXFP4 recipe keeps Xᵀ and Wᵀ for its backward GEMMs as MXFP4 codes and E8M0
    scales (uint8: 0.53 bytes per element), not as decoded values."""
    torch.manual_seed(0)
    m, k, n = 40, 64, 96

    def saved_dtypes(recipe):
        lin = nn4.Linear(k, n, recipe=recipe).to(device)
        x = torch.randn(m, k, device=device, requires_grad=True)
        seen = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: seen.append(t) or t, lambda t: t):
            y = lin(x)
        y.sum().backward()
        assert x.grad is not None and torch.isfinite(x.grad).all() and torch.isfinite(lin.weight.grad).all()
        return seen

    seen = saved_dtypes("mx_baseline")
    # Xᵀ: codes [k, m_pad/2] and scales [k, m_pad/32]; Wᵀ: codes [k, n/2] and scales [k, n/32]
    mp = (m + TOKEN_ALIGN - 1) // TOKEN_ALIGN * TOKEN_ALIGN
    shapes = sorted(tuple(t.shape) for t in seen if t.dtype == torch.uint8)
    assert shapes == sorted([(k, mp // 2), (k, mp // 32), (k, n // 2), (k, n // 32)]), shapes
    assert not any(t.dtype.is_floating_point and t.dim() == 2 and t.shape[0] == k for t in seen)
