"""The MXFP4 recipes (and fp4_all_the_way) against fp4-trainkit's definitions: its recipe
table (format, block size, scale format and rule, double quantization, the rounding of each
of the six quantizers: Q(X), Q(Wᵀ) forward; Q(grad_Y), Q(W), Q(grad_Yᵀ), Q(X) backward) and
its scale equations, checked on the operands the layer actually produces:

  eq.1 (mx_baseline, OCP): s = floor(log2 amax) - floor(log2 6); block values in
       (6 * 2^s, 8 * 2^s) saturate to 6 * 2^s;
  eq.2 (nvidia_round_to_infinity): s = ceil(log2(amax / 6)); nothing saturates;
  eq.2* (tetrajet): the same for amax > 0 (truncation-free scaling).
Each rule has its own test; rounding is checked by what it does (two seeds give other codes
only under SR; SR is unbiased), double quantization by requantizing the dequantized
forward operand.
"""
from __future__ import annotations

import math

import pytest
import torch

import nvfp4.nn as nn4
from nvfp4.nn.emulated import _quantize

# fp4-trainkit's table, transcribed: quantizer -> (format, block, rounding); our operand names:
# Q(X) fwd = x, Q(Wᵀ) fwd = w, Q(grad_Y) = dy, Q(W) bwd = dgrad weight, Q(grad_Yᵀ) = wgrad_dy,
# Q(X) bwd = wgrad_x
TABLE = {
    "mx_baseline": dict(fmt="mxfp4", rule="ocp", dq=False, round={"x": "rtn", "w": "rtn", "dy": "rtn",
                                                                   "dgrad_w": "rtn", "wgrad_dy": "rtn",
                                                                   "wgrad_x": "rtn"}),
    "nvidia_round_to_infinity": dict(fmt="mxfp4", rule="ceil", dq=False,
                                     round={"x": "rtn", "w": "rtn", "dy": "rtn", "dgrad_w": "rtn", "wgrad_dy": "rtn",
                                            "wgrad_x": "rtn"}),
    "tetrajet": dict(fmt="mxfp4", rule="tetrajet", dq=True, round={"x": "rtn", "w": "rtn", "dy": "sr", "dgrad_w": "sr",
                                                                   "wgrad_dy": "sr", "wgrad_x": "sr"}),
    "fp4_all_the_way": dict(fmt="nvfp4", rule=None, dq=False, round={"x": "rtn", "w": "rtn", "dy": "sr",
                                                                      "dgrad_w": "rtn", "wgrad_dy": "sr",
                                                                      "wgrad_x": "sr"}),
}
OPS = ("x", "w", "dy", "dgrad_w", "wgrad_dy", "wgrad_x")


def cfg(r, op):
    return (r.dgrad_w or r.w) if op == "dgrad_w" else getattr(r, op)


@pytest.mark.parametrize("name", sorted(TABLE))
def test_recipe_matches_the_table(name):
    r = nn4.get_recipe(name)
    t = TABLE[name]
    for op in OPS:
        c = cfg(r, op)
        assert c.format == t["fmt"], (name, op)
        assert c.block == "1d" and not c.rht, (name, op)  # 32-element (MX) or 16-element blocks, no transform
        assert c.rounding == t["round"][op], (name, op, c.rounding)
        if t["fmt"] == "mxfp4":
            assert c.mx_rule == t["rule"], (name, op)
    dq = {op: cfg(r, op).double_quant for op in ("dgrad_w", "wgrad_dy", "wgrad_x")}
    assert all(v == t["dq"] for v in dq.values()), (name, dq)
    assert not r.x.double_quant and not r.dy.double_quant and not r.w.double_quant


def _blocks_and_scales(q):
    d = q.rowwise
    e = d.scales.view(torch.uint8).int() - 127
    s = torch.ldexp(torch.ones(e.shape), e)
    return d, s


def _heavy(rng, rows=64, cols=256):
    # heavy-tailed like gradients, blocks spanning many binades
    x = torch.distributions.StudentT(3.0).sample((rows, cols)) * torch.exp2(torch.randint(-30, 30, (rows, 1)).float())
    return x.float()


@pytest.mark.parametrize("op", OPS)
def test_eq1_mx_baseline_floor_scale_saturates(op, rng):
    c = cfg(nn4.get_recipe("mx_baseline"), op)
    x = _heavy(rng)
    q = _quantize(x, c, False, 1, 0, None)
    d, s = _blocks_and_scales(q)
    amax = x.abs().reshape(64, -1, 32).amax(-1)
    want = torch.floor(torch.log2(amax)) - 2  # floor(log2 amax) - floor(log2 6)
    assert torch.equal(torch.log2(s), want)
    y = q.dequantize(torch.float32).reshape(64, -1, 32)
    xb = x.reshape(64, -1, 32)
    sat = xb.abs() > 6 * s[..., None]
    assert sat.any(), "heavy-tailed blocks above 6 * 2^s exist"
    assert torch.equal(y.abs()[sat], (6 * s[..., None]).expand_as(y)[sat]), "values above 6 * 2^s saturate"
    assert (y.abs() <= 6 * s[..., None]).all()


@pytest.mark.parametrize("name", ["nvidia_round_to_infinity", "tetrajet"])
@pytest.mark.parametrize("op", ["x", "w", "wgrad_x"])
def test_eq2_ceil_scale_never_saturates(name, op, rng):
    c = cfg(nn4.get_recipe(name), op)
    x = _heavy(rng)
    q = _quantize(x, c, False, 1, 0, None)
    d, s = _blocks_and_scales(q)
    amax = x.abs().reshape(64, -1, 32).amax(-1)
    want = torch.ceil(torch.log2(amax / 6.0))
    assert torch.equal(torch.log2(s), want)
    y = q.dequantize(torch.float32).reshape(64, -1, 32)
    # nothing clipped: every value within one grid step (SR) or half of one (RTN) of its own;
    # the largest E2M1 gap is 2 * 2^s
    err = (y - x.reshape(64, -1, 32)).abs()
    bound = s[..., None] * (2.0 if c.rounding == "sr" else 1.0)
    assert (err <= bound).all(), "no value clipped"


@pytest.mark.parametrize("name", sorted(TABLE))
def test_rounding_is_stochastic_exactly_where_the_table_says(name, rng):
    r = nn4.get_recipe(name)
    x = torch.randn(64, 256, generator=rng)
    for op in OPS:
        c = cfg(r, op)
        a = _quantize(x, c, False, 11, 0, None)
        b = _quantize(x, c, False, 12, 0, None)
        differs = not torch.equal(a.rowwise.data, b.rowwise.data)
        assert differs == (c.rounding == "sr"), (name, op)
        if c.rounding == "sr":  # unbiased: the mean of many draws tends to x
            acc = torch.zeros_like(x, dtype=torch.float64)
            n = 256
            for i in range(n):
                acc += _quantize(x, c, False, 100 + i, 0, None).dequantize(torch.float32).double()
            rnd = (_quantize(x, c, False, 100, 0, None).dequantize(torch.float32) - x).abs().mean().item()
            assert ((acc / n) - x.double()).abs().mean().item() < 3 * rnd / math.sqrt(n) + 1e-3 * rnd, (name, op)


@pytest.mark.parametrize("name", ["tetrajet"])
def test_double_quantization_requantizes_the_dequantized_forward_operand(name):
    """In the layer: dgrad's W is the requantization (along N) of the forward's dequantized W;
    checked through the gradient: dX with the layer's recipe equals dX computed from that
    operand; changing the rule (no double quantization) changes dX."""
    torch.manual_seed(0)
    r = nn4.get_recipe(name)
    rnd = r.replace(dy={"rounding": "rtn"}, dgrad_w={"rounding": "rtn"}, wgrad_dy={"rounding": "rtn"},
                    wgrad_x={"rounding": "rtn"}, name="t_rtn")
    layer = nn4.Linear(64, 96, recipe=rnd)
    with torch.no_grad():  # rows of different ranges: a column block's scale differs from its rows'
        layer.weight.copy_(torch.randn(96, 64) * torch.exp2(torch.randint(-6, 3, (96, 1)).float()))
    x = torch.randn(32, 64, requires_grad=True)
    dy = torch.randn(32, 96)
    layer(x).backward(dy)
    w = layer.weight.detach()
    wf = _quantize(w, rnd.w, False, 0, 0, None).dequantize(torch.float32)  # the forward's W, dequantized
    wt = _quantize(wf, rnd.dgrad_w, True, 0, 0, None)  # requantized along N
    wt_dec = wt.dequantize(torch.float32, columnwise=True)  # [96, 64] again
    dyq = _quantize(dy, rnd.dy, False, 0, 0, None).dequantize(torch.float32)
    assert torch.allclose(x.grad, dyq @ wt_dec, rtol=0, atol=1e-5 * (dyq.abs() @ wt_dec.abs()).max().item())
    no_dq = rnd.replace(dgrad_w={"double_quant": False})
    layer2 = nn4.Linear(64, 96, recipe=no_dq)
    layer2.load_state_dict(layer.state_dict())
    x2 = x.detach().clone().requires_grad_(True)
    layer2(x2).backward(dy)
    assert not torch.equal(x2.grad, x.grad)
