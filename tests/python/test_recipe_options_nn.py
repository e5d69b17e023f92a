"""The recipe options in nvfp4.nn.Linear (the per-operand path, nvfp4.nn.emulated): each
option recipe's three GEMMs against float64 products of operands quantized by the
independent model (recipe_ref.py for the options, nvfp4_ref.py for the contract's
operands), with the seeds, offsets and rotations the layer documents; the backward
overrides against their definitions; TransformerEngine's 4over6 modes; the forward-only
BF16 cooldown. GPU runs of the same tests need CUDA (skipped here otherwise).
"""
from __future__ import annotations

import dataclasses

import pytest
import torch

import nvfp4
import nvfp4.nn as nn4
import nvfp4_ref as ref
import recipe_ref as rr
from nvfp4._ops import TOKEN_ALIGN
from nvfp4.nn.emulated import RECIPE_OPERANDS
from nvfp4.nn.recipe import QuantConfig, four_over_six, layer_seed, rotation_signs

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _decode(packed, sb, amax):
    codes = torch.stack([packed & 0xF, packed >> 4], dim=2).reshape(packed.shape[0], -1)
    s_dec = (ref.f32(1.0) / ref.global_encode_scale(amax.reshape(-1).float())).reshape(-1, 1)
    return (ref.e2m1_decode(codes) * ref.e4m3_value(sb.to(torch.uint8)).repeat_interleave(16, dim=1)) * s_dec


def model_operand(t, c: QuantConfig, columnwise: bool, seed: int, off: int, signs, valid_rows=None):
    """The operand as the layer's recipe defines it, decoded (float64), in the GEMM's
    orientation (rows = M or N, cols = K; RHT domain and token padding kept)."""
    t = t.detach().float().cpu()
    o = "col" if columnwise else "row"
    if c.rounding == "eden":
        q = rr.eden_quantize(t, seed=seed, offset=off, signs=list(signs))[o]
        return _decode(*q).double()
    if c.has_options:
        amax = None
        if c.amax == "percentile":
            amax = rr.percentile(t if valid_rows is None else t[:valid_rows], c.amax_percentile)
        if c.four_over_six:
            q = rr.fos_quantize(t, mode=c.four_over_six, bound=c.e4m3_bound, block=c.block, amax=amax,
                                rows_amax=c.amax == "rows")[o]
        else:
            q = rr.scaled_quantize(t, amax=amax, rows_amax=c.amax == "rows", block=c.block)[o]
        return _decode(*q).double()
    rht = {("columnwise" if columnwise else "rowwise")} if c.rht else set()
    q = ref.quantize(t, block=c.block, rounding=c.rounding, rht=rht, seed=seed, offset=off, signs=list(signs))[o]
    return _decode(*q).double()


def reference(layer, x, dy):
    r = layer.recipe
    i = layer.layer_index
    off = int(layer.sr_step)
    seeds = {f: layer_seed(r.seed, i, 2 + j) for j, f in enumerate(RECIPE_OPERANDS)}
    s = r.rht_signs
    rot = rotation_signs(r.seed, i, off)
    w = layer.weight.detach()
    m = x.shape[0]
    A = model_operand(x, r.x, False, seeds["x"], off, s)
    B = model_operand(w, r.w, False, seeds["w"], off, s)
    y = A @ B.t() + layer.bias.detach().double().cpu()
    if r.dy.rounding == "eden":
        w1d = dataclasses.replace(r.w, block="1d", rht=True, four_over_six=None, e4m3_bound=448, amax="tensor",
                                  amax_percentile=None)
        Bt = model_operand(w, w1d, True, seeds["w"], off, rot)
        Dy = model_operand(dy, r.dy, False, seeds["dy"], off, rot)
    else:
        Bt = model_operand(w, r.w, True, seeds["w"], off, s)
        Dy = model_operand(dy, r.dy, False, seeds["dy"], off, s)
    dx = Dy @ Bt.t()
    pad = (-m) % TOKEN_ALIGN
    pz = lambda t: torch.nn.functional.pad(t, (0, 0, 0, pad)) if pad else t  # noqa: E731
    ws = rot if r.wgrad_dy.rounding == "eden" else s
    Xt = model_operand(pz(x), r.wgrad_x, True, seeds["wgrad_x"], off, ws, valid_rows=m)
    Dyt = model_operand(pz(dy), r.wgrad_dy, True, seeds["wgrad_dy"], off, ws, valid_rows=m)
    dw = Dyt @ Xt.t()
    return (y, A.abs() @ B.abs().t()), (dx, Dy.abs() @ Bt.abs().t()), (dw, Dyt.abs() @ Xt.abs().t())


def _within(got, want, mag, what):
    err = (got.double().cpu() - want).abs()
    bound = 2.0 ** -20 * mag + 1e-30
    assert (err <= bound).all(), f"{what}: worst ratio {(err / bound).max().item():.3g}"


OPTION_RECIPES = ["4over6", "row_scaled", "ms_eden", "adaptive",
                  four_over_six(nn4.get_recipe("nvfp4"), "weights", "MSE", "none").replace(name="4over6_w_mse"),
                  four_over_six(nn4.get_recipe("nvfp4"), "activations", "MAE", "activations").replace(name="4over6_a"),
                  nn4.get_recipe("nvfp4", wgrad_x={"amax": "rows", "rht": False}, wgrad_dy={"rht": False},
                                 name="rows_wgrad"),
                  nn4.get_recipe("ms_eden", w={"four_over_six": "mse"}, x={"amax": "rows"}, name="eden_combo")]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("recipe", OPTION_RECIPES, ids=lambda r: r if isinstance(r, str) else r.name)
@pytest.mark.parametrize("m", [64, 37])
def test_option_linear_matches_model(recipe, m, device):
    torch.manual_seed(m)
    layer = nn4.Linear(64, 96, recipe=recipe, layer_index=3).to(device)
    assert not layer.recipe.fused
    with torch.no_grad():
        layer.sr_step.fill_(5)
    x = (torch.randn(m, 64) * torch.exp2(torch.randint(-4, 5, (m, 1)).float())).to(device)
    dy = torch.randn(m, 96, device=device)
    (y_r, y_m), (dx_r, dx_m), (dw_r, dw_m) = reference(layer, x, dy)
    xi = x.clone().requires_grad_(True)
    y = layer(xi)
    y.backward(dy)
    _within(y.detach(), y_r, y_m + layer.bias.detach().abs().double().cpu(), "y")
    _within(xi.grad, dx_r, dx_m, "dx")
    _within(layer.weight.grad, dw_r, dw_m, "dw")
    uses_rand = any(getattr(layer.recipe, f).rounding in ("sr", "eden") for f in RECIPE_OPERANDS)
    assert int(layer.sr_step) == (6 if uses_rand else 5)


def test_eden_rotation_changes_per_step_and_is_shared():
    a, b = rotation_signs(0, 3, 5), rotation_signs(0, 3, 6)
    assert a != b and rotation_signs(0, 3, 5) == a and rotation_signs(1, 3, 5) != a
    # across many steps the signs are balanced (a random rotation, not a fixed one)
    sgn = torch.tensor([rotation_signs(7, 2, t) for t in range(2000)], dtype=torch.float64)
    assert sgn.mean(0).abs().max() < 0.1


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["high_precision", "dequantized"])
def test_backward_override_is_its_definition(mode, device):
    torch.manual_seed(0)
    base = nn4.Linear(64, 96, recipe="nvfp4").to(device)
    layer = nn4.Linear(64, 96, recipe=nn4.get_recipe("nvfp4", backward_override=mode)).to(device)
    layer.load_state_dict(base.state_dict())
    x = torch.randn(40, 64, device=device)
    dy = torch.randn(40, 96, device=device)
    xi = x.clone().requires_grad_(True)
    y = layer(xi)
    y.backward(dy)
    # the forward is the recipe's
    xb = x.clone().requires_grad_(True)
    assert torch.equal(y, base(xb)) or torch.allclose(y, base(xb), rtol=0, atol=1e-5 * y.abs().max().item())
    w = layer.weight.detach()
    if mode == "high_precision":
        xs, ws = x, w
    else:  # the forward's own quantizations, dequantized
        xs = nvfp4.quantize(x, scale_layout="linear").dequantize(torch.float32)
        ws = nvfp4.quantize(w, block="2d", scale_layout="linear").dequantize(torch.float32)
    assert torch.equal(xi.grad, dy @ ws), "dX = dY . W (unquantized dY)"
    assert torch.equal(layer.weight.grad, dy.t() @ xs), "dW = dY^T . X"
    assert torch.equal(layer.bias.grad, dy.sum(0))


def test_te_4over6_modes_map_to_operands():
    r = nn4.get_recipe("nvfp4")
    assert four_over_six(r, "none") == r
    w = four_over_six(r, "weights", "MSE", "all")
    assert w.w.four_over_six == "mse" and w.w.e4m3_bound == 256 and w.x.four_over_six is None
    a = four_over_six(r, "activations", "MAE", "weights")
    assert a.x.four_over_six == "mae" and a.x.e4m3_bound == 448 and a.w.four_over_six is None
    al = four_over_six(r, "all")
    assert al.x.e4m3_bound == al.w.e4m3_bound == 256
    for f in ("dy", "wgrad_dy", "wgrad_x"):  # gradients and wgrad keep the base recipe's
        assert getattr(al, f) == getattr(r, f)
    with pytest.raises(ValueError, match="scope"):
        four_over_six(r, "gradients")
    with pytest.raises(ValueError, match="err_mode"):
        four_over_six(r, "all", "L2")


@pytest.mark.parametrize("change,name", [
    ({"x": {"four_over_six": "mae", "rounding": "sr"}}, "x.four_over_six"),
    ({"wgrad_x": {"four_over_six": "mae"}}, "wgrad_x.four_over_six"),  # has the RHT
    ({"x": {"e4m3_bound": 256}}, "x.e4m3_bound"),
    ({"x": {"amax": "rows", "block": "2d"}}, "x.amax"),
    ({"x": {"amax": "percentile"}}, "x.amax_percentile"),
    ({"x": {"amax_percentile": 0.9}}, "x.amax_percentile"),
    ({"x": {"rounding": "eden"}}, "x.rounding"),
    ({"dy": {"rounding": "eden", "rht": True}}, "dy.rht"),
    ({"wgrad_dy": {"rounding": "eden", "rht": False}, "wgrad_x": {"rht": False}}, "wgrad_dy.rht"),
    ({"backward_override": "fp8"}, "backward_override"),
    ({"x": {"four_over_six": "mae", "format": "mxfp4"}}, "x"),
])
def test_option_errors_name_the_field(change, name):
    with pytest.raises(ValueError, match=name.replace(".", r"\.")):
        nn4.get_recipe("nvfp4", **change)


def test_cooldown_forward_only_keeps_fp4_backward():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, 64))
    nn4.convert(model, "nvfp4")
    ref_model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, 64))
    nn4.convert(ref_model, nn4.get_recipe("nvfp4", fprop=False))
    ref_model.load_state_dict(model.state_dict())
    cd = nn4.Cooldown(model, total_steps=10, frac=0.3, forward_only=True)
    assert [cd(s) for s in range(10)] == [False] * 7 + [True] + [False] * 2
    x = torch.randn(32, 64)
    y = model(x)
    y.sum().backward()
    yr = ref_model(x)
    yr.sum().backward()
    assert torch.equal(y, yr)
    for a, b in zip(model.parameters(), ref_model.parameters()):
        assert torch.equal(a.grad, b.grad)
    assert all(m.recipe.dgrad and m.recipe.wgrad and not m.recipe.fprop
               for m in model.modules() if isinstance(m, nn4.Linear))
    assert cd(3) is True  # a resume before the switch restores the full recipe
    assert all(m.recipe.fprop and m.recipe.name == "nvfp4" for m in model.modules() if isinstance(m, nn4.Linear))
    with pytest.raises(ValueError, match="forward_only"):
        nn4.Cooldown(model, 10, 0.1, forward_only="yes")
