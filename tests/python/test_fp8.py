"""The FP8 baseline layer (nvfp4.nn.fp8) on the CPU, where it runs the reference emulation.

- The FP8 casts against an independent nearest-even search over each format's value grid.
- Forward, dgrad and wgrad against a float64 computation on the same quantized operands,
  within a stated bound: FP32 accumulation of K products is off by at most
  gamma_K * sum|a||b| with gamma_K = K u / (1 - K u), u = 2^-24, plus the rounding of the
  dequantized operands (2 u relative each) and of the output to its dtype (half an ulp).
- Current and delayed scaling against hand computations of TransformerEngine's rules.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from nvfp4.nn import fp8 as F8
from nvfp4.nn.fp8 import FP8Linear, FP8Recipe

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
U32 = 2.0 ** -24


def emu(name="fp8", **kw) -> FP8Recipe:
    return F8.get_fp8_recipe(name).replace(emulate=True, **kw)


# ----------------------------------------------------------------------------- the casts
def _grid(dtype) -> np.ndarray:
    """Every finite non-negative value of the format, decoded from its bytes, with its code."""
    b = torch.arange(256, dtype=torch.int64).to(torch.uint8)
    v = b.view(dtype).double().numpy()
    ok = np.isfinite(v) & (v >= 0) & (np.arange(256) < 128)
    return v[ok], np.arange(256)[ok]


def nearest_even(v: np.ndarray, dtype) -> np.ndarray:
    """Round |v| (float64, already within the format's max) to the grid, ties to the even code."""
    grid, codes = _grid(dtype)
    order = np.argsort(grid)
    grid, codes = grid[order], codes[order]
    a = np.abs(v)
    hi = np.clip(np.searchsorted(grid, a, side="left"), 0, len(grid) - 1)
    lo = np.clip(hi - 1, 0, len(grid) - 1)
    d_lo, d_hi = a - grid[lo], grid[hi] - a
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (codes[hi] % 2 == 0))
    r = np.where(pick_hi, grid[hi], grid[lo])
    return np.copysign(r, v)


@pytest.mark.parametrize("dtype", [E4M3, E5M2], ids=["e4m3", "e5m2"])
def test_cast_is_nearest_even_with_saturation(dtype):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(20000, generator=g) * torch.exp2(torch.randint(-20, 18, (20000,), generator=g).float())
    fmax = F8.fp8_max(dtype)
    # grid points, midpoints and their neighbours, and values past the max
    grid, _ = _grid(dtype)
    mids = (grid[1:] + grid[:-1]) / 2
    pts = torch.tensor(np.concatenate([grid, mids]), dtype=torch.float32)
    pts = torch.cat([pts, pts.nextafter(torch.tensor(0.0)), pts.nextafter(torch.tensor(1e30))])
    x = torch.cat([x, pts, -pts, torch.tensor([fmax * 1.01, -fmax * 3, 1e30, -0.0])])
    scale = torch.tensor(1.0)
    q = F8.quantize_fp8(x, scale, dtype)
    assert q.dtype == dtype
    want = nearest_even(np.clip(x.double().numpy(), -fmax, fmax), dtype)
    got = q.double().numpy()
    bad = np.nonzero(got != want)[0]
    assert len(bad) == 0, f"{len(bad)} differ; first x={x[bad[0]].item()!r}: got {got[bad[0]]}, want {want[bad[0]]}"
    assert torch.isnan(F8.quantize_fp8(torch.tensor([float("nan")]), scale, dtype).float()).all()


def test_current_scale_rule():
    fmax = 448.0
    amax = torch.tensor([2.0, 0.0, float("inf"), float("nan"), 1e-44, 448.0])
    s = torch.stack([F8.current_scale(a, fmax) for a in amax])
    assert s[0] == torch.tensor(224.0) and s[5] == 1.0
    assert s[1] == 1.0 and s[2] == 1.0 and s[3] == 1.0        # zero / inf / NaN amax: unit scale
    assert s[4] == torch.finfo(torch.float32).max               # fmax / tiny overflows: FLT_MAX
    assert F8.current_scale(torch.tensor(3.0), fmax, margin=2) == torch.tensor(448.0 / 4 / 3.0)
    assert F8.tensor_amax(torch.tensor([[1.0, -5.0], [2.0, 0.5]])) == 5.0
    assert torch.isnan(F8.tensor_amax(torch.tensor([1.0, float("nan")])))
    assert F8.tensor_amax(torch.empty(0, 3)) == 0.0


# ----------------------------------------------------------------------------- the GEMMs
def _ref_layer(x, w, b, dy, recipe: FP8Recipe):
    """float64 forward/backward on the operands the layer quantizes (current scaling)."""
    def q(t, dtype):
        s = F8.current_scale(F8.tensor_amax(t), F8.fp8_max(dtype))
        return F8.quantize_fp8(t, s, dtype).double() * (1.0 / s).double(), s
    x2, dy2 = x.reshape(-1, x.shape[-1]), dy.reshape(-1, dy.shape[-1])
    xq, _ = q(x2, recipe.fwd_dtype)
    wq, _ = q(w, recipe.fwd_dtype)
    dyq, _ = q(dy2, recipe.bwd_dtype)
    y = xq @ wq.t()
    if b is not None:
        y = y + b.double()
    dx = dyq @ wq
    dw = dyq.t() @ xq
    return y, dx, dw, (xq, wq, dyq)


def _bound(a_abs, b_abs, k, out_dtype, ref):
    """gamma_k-style bound on an FP32 product of dequantized operands, plus output rounding."""
    u = U32
    gamma = (k + 2) * u / (1 - (k + 2) * u)
    out_u = {torch.float32: U32, torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}[out_dtype]
    return gamma * (a_abs @ b_abs) + out_u * ref.abs() + 1e-300


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("shape", [(7, 32, 48), (33, 64, 16), (2, 5, 96, 32)], ids=lambda s: "x".join(map(str, s)))
def test_emulation_matches_float64_reference(shape, dtype):
    g = torch.Generator().manual_seed(hash(shape) & 0xFFFF)
    *lead, k, n = shape
    layer = FP8Linear(k, n, bias=True, recipe=emu())
    with torch.no_grad():
        layer.weight.copy_(torch.randn(n, k, generator=g) * 0.05)
        layer.bias.copy_(torch.randn(n, generator=g))
    x = (torch.randn(*lead, k, generator=g) * 3).to(dtype).requires_grad_(True)
    y = layer(x)
    assert y.dtype == dtype and y.shape == (*lead, n)
    dy = torch.randn(*lead, n, generator=g).to(dtype)
    y.backward(dy)
    ry, rdx, rdw, (xq, wq, dyq) = _ref_layer(x.detach(), layer.weight.detach(), layer.bias.detach(), dy, layer.fp8_recipe)
    m = xq.shape[0]
    checks = [
        ("y", y.detach().reshape(m, n).double(), ry, _bound(xq.abs(), wq.abs().t(), k, dtype, ry)),
        ("dx", x.grad.reshape(m, k).double(), rdx, _bound(dyq.abs(), wq.abs(), n, dtype, rdx)),
        ("dw", layer.weight.grad.double(), rdw, _bound(dyq.abs().t(), xq.abs(), m, torch.float32, rdw)),
        ("db", layer.bias.grad.double(), dy.reshape(m, n).double().sum(0), None),
    ]
    for name, got, want, bound in checks:
        err = (got - want).abs()
        if bound is None:
            assert torch.allclose(got, want, rtol=1e-6, atol=1e-6), name
        else:
            assert (err <= bound).all(), f"{name}: max err {err.max().item():.3g}, ratio {(err / bound).max().item():.3g}"
    # the reference is not trivially equal to the unquantized product: FP8 changed something
    assert (y.detach().double().reshape(m, n) - (x.detach().double().reshape(m, k) @ layer.weight.double().t()
                                                  + layer.bias.double())).abs().max() > 0


def test_autocast_bf16_and_grads():
    layer = FP8Linear(64, 32, bias=False, recipe=emu())
    x = torch.randn(10, 64, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = layer(x)
    assert y.dtype == torch.bfloat16
    y.float().sum().backward()
    assert x.grad.shape == x.shape and x.grad.dtype == torch.float32
    assert layer.weight.grad.shape == layer.weight.shape and layer.weight.grad.dtype == torch.float32
    # X is cast to BF16 by autocast, the weight quantized from the FP32 master (not from a
    # BF16 copy), the product taken in FP32 and rounded once to BF16
    with torch.no_grad():
        xb = x.detach().bfloat16()
        sx = F8.current_scale(F8.tensor_amax(xb), 448.0)
        sw = F8.current_scale(F8.tensor_amax(layer.weight), 448.0)
        want = (F8.dequantize_fp8(F8.quantize_fp8(xb, sx, E4M3), 1 / sx)
                @ F8.dequantize_fp8(F8.quantize_fp8(layer.weight, sw, E4M3), 1 / sw).t()).bfloat16()
    assert torch.equal(y.detach(), want)


def test_zero_input_and_nan():
    layer = FP8Linear(32, 16, recipe=emu())
    y = layer(torch.zeros(3, 32))
    assert torch.equal(y, layer.bias.detach().expand(3, 16))
    x = torch.randn(3, 32)
    x[1, 4] = float("nan")
    y = layer(x)
    assert torch.isnan(y[1]).all() and not torch.isnan(y[0]).any()


# ----------------------------------------------------------------------------- delayed scaling
def _state_rows(layer):
    """role -> (scale, history) of a delayed-scaling FP8Linear, views of its buffers: x and w
    rows of the forward's state, dy of the gradient's; per row the scale, then the history."""
    fwd, grad = layer.fp8_state, layer.fp8_grad_state
    rows = {"x": (fwd[0, 0], fwd[0, 1:]), "w": (fwd[1, 0], fwd[1, 1:]), "dy": (grad[0, 0], grad[0, 1:])}
    got = layer.fp8_delayed_state()
    assert got.keys() == rows.keys() and all(
        a.data_ptr() == b.data_ptr() and a.shape == b.shape for r in rows for a, b in zip(got[r], rows[r]))
    return rows


def _hand_update(hist: list, scale: float, fmax: float, margin: float, algo: str):
    """TransformerEngine's rule, written out: returns (new history, new scale)."""
    vals = [0.0 if math.isnan(v) else v for v in hist]
    amax = max(vals) if algo == "max" else hist[0]
    if math.isfinite(amax) and amax > 0:
        scale = float(np.float32(np.float32(fmax * 2.0 ** -margin) / np.float32(amax)))
    rolled = hist[1:] + hist[:1]
    rolled[0] = 0.0
    return rolled, scale


@pytest.mark.parametrize("algo", ["max", "most_recent"])
@pytest.mark.parametrize("margin", [0, 1])
def test_delayed_scaling_history_and_scales(algo, margin):
    L = 4
    recipe = emu("fp8_delayed", amax_history_len=L, amax_compute_algo=algo, margin=float(margin))
    layer = FP8Linear(32, 16, bias=False, recipe=recipe)
    assert layer.fp8_state.shape == (2, 1 + L) and layer.fp8_grad_state.shape == (1, 1 + L)
    for st in (layer.fp8_state, layer.fp8_grad_state):  # scales 1, histories empty
        assert torch.equal(st[:, 0], torch.ones(st.shape[0])) and not st[:, 1:].any()
    base = torch.randn(8, 32)
    base = base / base.abs().max()           # amax 1
    gbase = torch.randn(8, 16)
    gbase = gbase / gbase.abs().max()
    with torch.no_grad():
        layer.weight.copy_(torch.randn(16, 32) * 0.1)
    w_amax = float(layer.weight.detach().abs().max())
    x_amaxes = [2.0, 0.5, 8.0, 3.0, 0.25, 1.0, 16.0]
    dy_amaxes = [1.0, 4.0, 0.125, 2.0, 64.0, 0.5, 1.0]
    hist = {r: [0.0] * L for r in ("x", "w", "dy")}
    scale = {"x": 1.0, "w": 1.0, "dy": 1.0}
    fmax = {"x": 448.0, "w": 448.0, "dy": 57344.0}
    for step, (ax, ad) in enumerate(zip(x_amaxes, dy_amaxes)):
        x = (base * ax).requires_grad_(True)
        # expected: update from the history so far, quantize with that scale, then record
        used = {}
        for role, a in (("x", ax), ("w", w_amax)):
            hist[role], scale[role] = _hand_update(hist[role], scale[role], fmax[role], margin, algo)
            used[role] = scale[role]
            hist[role][0] = a
        y = layer(x)
        hist["dy"], scale["dy"] = _hand_update(hist["dy"], scale["dy"], fmax["dy"], margin, algo)
        used["dy"] = scale["dy"]
        hist["dy"][0] = ad
        y.backward(gbase * ad)
        for role, (s, h) in _state_rows(layer).items():
            got_h = h.tolist()
            assert got_h == pytest.approx(hist[role], rel=0, abs=0), f"step {step} {role} history {got_h} != {hist[role]}"
            assert s.item() == used[role], f"step {step} {role} scale"
        # the forward used exactly those scales
        sx = torch.tensor(used["x"])
        sw = torch.tensor(used["w"])
        want = (F8.dequantize_fp8(F8.quantize_fp8(x.detach(), sx, E4M3), 1 / sx)
                @ F8.dequantize_fp8(F8.quantize_fp8(layer.weight.detach(), sw, E4M3), 1 / sw).t())
        assert torch.equal(y.detach(), want), f"step {step}"


def test_delayed_scaling_ignores_nan_and_keeps_scale_on_zero_or_inf():
    L = 3
    layer = FP8Linear(32, 16, bias=False, recipe=emu("fp8_delayed", amax_history_len=L))
    h, s = layer.fp8_state[:, 1:], layer.fp8_state[:, 0]  # views: the update writes the layer's buffer
    with torch.no_grad():
        h[0] = torch.tensor([2.0, float("nan"), 1.0])
        s[0] = 7.0
        F8.delayed_scale_update(h, s, 0, 448.0, 0.0, "max")
        assert s[0].item() == 224.0                                   # NaN entries do not count
        assert h[0].tolist()[1:] == [1.0, 2.0] and h[0, 0].item() == 0.0
        h[0] = torch.tensor([float("inf"), 1.0, 1.0])
        F8.delayed_scale_update(h, s, 0, 448.0, 0.0, "max")
        assert s[0].item() == 224.0                                   # inf amax: scale kept
        h[0] = 0.0
        F8.delayed_scale_update(h, s, 0, 448.0, 0.0, "max")
        assert s[0].item() == 224.0                                   # zero amax: scale kept
        h[0] = torch.tensor([float("nan"), 5.0, 1.0])
        F8.delayed_scale_update(h, s, 0, 448.0, 0.0, "most_recent")
        assert s[0].item() == 224.0                                   # NaN most recent: kept


def test_delayed_scaling_eval_and_no_grad_do_not_update():
    layer = FP8Linear(32, 16, recipe=emu("fp8_delayed", amax_history_len=8))
    layer(torch.randn(4, 32)).sum().backward()
    h0, s0 = layer.fp8_state.clone(), layer.fp8_grad_state.clone()
    with torch.no_grad():
        layer(torch.randn(4, 32) * 100)
    layer.eval()
    layer(torch.randn(4, 32) * 100)
    assert torch.equal(layer.fp8_state, h0) and torch.equal(layer.fp8_grad_state, s0)


def test_delayed_state_two_forwards_before_their_backwards():
    """Forwards update x and w, backwards dy, in the order they run: two forwards, then their
    backwards (the engine runs the second call's first). Each role's history and scale follow
    TransformerEngine's update in that order, and each backward casts dY with the scale the
    backward before it left (the gradients say which scale each call used)."""
    L = 4
    algo, margin = "max", 0.0
    layer = FP8Linear(32, 16, bias=False, recipe=emu("fp8_delayed", amax_history_len=L))
    with torch.no_grad():
        layer.weight.copy_(torch.randn(16, 32) * 0.1)
    w = layer.weight.detach().clone()
    w_amax = float(w.abs().max())
    x_amaxes, dy_amaxes = (2.0, 8.0), (0.5, 4.0)
    def with_amax(shape, a):  # values in [-a, a], one of them a
        t = (torch.rand(shape) * 2 - 1) * a
        t[0, 0] = a
        return t

    xs = [with_amax((4, 32), a).requires_grad_(True) for a in x_amaxes]
    dys = [with_amax((4, 16), a) for a in dy_amaxes]
    hist = {r: [0.0] * L for r in ("x", "w", "dy")}
    scale = {"x": 1.0, "w": 1.0, "dy": 1.0}
    fmax = {"x": 448.0, "w": 448.0, "dy": 57344.0}
    used_w, used_dy = [], [None, None]

    def record(role, amax):
        hist[role], scale[role] = _hand_update(hist[role], scale[role], fmax[role], margin, algo)
        hist[role][0] = amax
        return scale[role]

    ys = []
    for x, a in zip(xs, x_amaxes):
        record("x", a)
        used_w.append(record("w", w_amax))
        ys.append(layer(x))
    for i in (1, 0):
        used_dy[i] = record("dy", dy_amaxes[i])
    torch.autograd.backward(ys, dys)  # the engine runs the second call's backward first
    for role, (s, h) in _state_rows(layer).items():
        assert h.tolist() == pytest.approx(hist[role], rel=0, abs=0), f"{role}: {h.tolist()} != {hist[role]}"
        assert s.item() == scale[role], role
    assert used_dy[0] != used_dy[1]  # the two backwards used different scales
    for i, x in enumerate(xs):
        s_dy, s_w = torch.tensor(used_dy[i]), torch.tensor(used_w[i])
        want = (F8.dequantize_fp8(F8.quantize_fp8(dys[i], s_dy, E5M2), 1 / s_dy)
                @ F8.dequantize_fp8(F8.quantize_fp8(w, s_w, E4M3), 1 / s_w))
        assert torch.equal(x.grad, want), f"call {i}: dX"


# ----------------------------------------------------------------------------- module API
def test_delayed_state_dict_of_the_earlier_layout_loads():
    """A checkpoint of the layout with one history [3, L] (rows x, w, dy) and one scale [3]
    loads into the forward's and the gradient's state, row by row ([scale, history...]); the
    current layout round-trips; a history of another length is refused by load_state_dict."""
    L = 6
    layer = FP8Linear(32, 16, recipe=emu("fp8_delayed", amax_history_len=L))
    old = {k: v for k, v in layer.state_dict().items() if not k.startswith("fp8_")}
    old["fp8_amax_history"] = torch.arange(3 * L, dtype=torch.float32).view(3, L)
    old["fp8_scale"] = torch.tensor([2.0, 3.0, 4.0])
    layer.load_state_dict(old)
    rows = _state_rows(layer)
    for i, role in enumerate(("x", "w", "dy")):
        assert rows[role][0].item() == old["fp8_scale"][i].item(), role
        assert torch.equal(rows[role][1], old["fp8_amax_history"][i]), role
    assert "fp8_amax_history" in old  # the caller's dict is not changed
    other = FP8Linear(32, 16, recipe=emu("fp8_delayed", amax_history_len=L))
    other.load_state_dict(layer.state_dict())
    for name in F8._FP8_BUFFERS:
        assert torch.equal(getattr(other, name), getattr(layer, name)), name
    bad = dict(old, fp8_amax_history=torch.zeros(3, L + 1))
    with pytest.raises(RuntimeError, match="fp8_state"):
        layer.load_state_dict(bad)


def test_module_api_and_errors():
    lin = nn.Linear(64, 32)
    w = lin.weight
    m = FP8Linear.from_linear(lin, "fp8_delayed")
    assert m is lin and type(m) is FP8Linear and m.weight is w
    sd = m.state_dict()
    assert sd["fp8_state"].shape == (2, 1025) and sd["fp8_grad_state"].shape == (1, 1025)
    assert "recipe=fp8_delayed" in repr(m)
    m.fp8_recipe = "fp8"
    assert not any(k.startswith("fp8_") for k in m.state_dict())
    with pytest.raises(RuntimeError, match="fp8_delayed_state: .*current scaling"):
        m.fp8_delayed_state()
    stale = FP8Linear(32, 16, recipe="fp8_delayed")
    del stale._buffers["fp8_grad_state"]  # as a layer pickled whole with the earlier buffers
    with pytest.raises(RuntimeError, match="fp8_state / fp8_grad_state"):
        stale(torch.randn(2, 32))
    with pytest.raises(RuntimeError, match="fp8_state / fp8_grad_state"):
        stale.fp8_delayed_state()
    back = m.to_linear()
    assert type(back) is nn.Linear and set(back.state_dict()) == {"weight", "bias"}
    with pytest.raises(ValueError, match="multiples of 16"):
        FP8Linear(40, 32)
    with pytest.raises(ValueError, match="multiples of 16"):
        FP8Linear.from_linear(nn.Linear(32, 24))
    with pytest.raises(TypeError, match="module"):
        FP8Linear.from_linear(nn.Conv1d(3, 3, 1))
    with pytest.raises(ValueError, match="recipe"):
        FP8Linear(32, 32, recipe="fp16")
    for bad, field in ((dict(scaling="static"), "scaling"), (dict(fwd_format="e3m4"), "fwd_format"),
                       (dict(amax_history_len=0), "amax_history_len"), (dict(amax_compute_algo="mean"), "amax_compute_algo"),
                       (dict(margin=-1), "margin"), (dict(emulate=1), "emulate"),
                       (dict(inductor_casts="yes"), "inductor_casts")):
        with pytest.raises(ValueError, match=field):
            FP8Recipe(**bad)
    with pytest.raises(TypeError, match="x: FP8Linear"):
        FP8Linear(32, 32, recipe=emu())(torch.ones(2, 32, dtype=torch.float64))


def test_cuda_error_names_the_requirement(monkeypatch):
    """On a CUDA device without FP8 the error says what is needed (simulated here)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: (8, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "NVIDIA A100")
    ok, why = F8.fp8_supported(torch.device("cuda"))
    assert not ok and "8.9" in why and "sm_80" in why


def _cpu_scaled_mm_works() -> bool:
    try:
        a = torch.zeros(16, 16).to(E4M3)
        torch._scaled_mm(a, a.t(), scale_a=torch.tensor(1.0), scale_b=torch.tensor(1.0), out_dtype=torch.float32)
        return True
    except Exception:
        return False


@pytest.mark.skipif(not _cpu_scaled_mm_works(), reason="this torch has no CPU torch._scaled_mm")
@pytest.mark.parametrize("m", [1, 37, 64])
@pytest.mark.parametrize("recipe", ["fp8", "fp8_delayed"])
def test_scaled_mm_path_on_cpu(m, recipe):
    """The torch._scaled_mm code path (operand order, transposes, token padding, scales) run
    through this torch's CPU _scaled_mm, against the emulation: both take FP32 sums of the
    same FP8 products, so they agree to the FP32 accumulation bound."""
    k, n = 64, 48
    g = torch.Generator().manual_seed(m)
    x = torch.randn(m, k, generator=g) * 4
    w = torch.randn(n, k, generator=g) * 0.1
    b = torch.randn(n, generator=g)
    dy = torch.randn(m, n, generator=g)
    res = []
    for emulate in (True, False):
        r = F8.get_fp8_recipe(recipe).replace(emulate=emulate, fast_accum_fprop=False, amax_history_len=4)
        layer = FP8Linear(k, n, recipe=r)
        with torch.no_grad():
            layer.weight.copy_(w)
            layer.bias.copy_(b)
        xi = x.clone().requires_grad_(True)
        for _ in range(2):  # twice: the delayed recipe then uses a history-derived scale
            xi.grad = None
            layer.weight.grad = None
            # bypass the device check: run the _scaled_mm path on CPU tensors
            state = (layer.fp8_state, layer.fp8_grad_state) if recipe == "fp8_delayed" else (None, None)
            y = F8._FP8LinearFn.apply(xi, layer.weight, layer.bias, *state,
                                      F8._Plan(r, emulate, recipe == "fp8_delayed"))
            y.backward(dy)
        res.append((y.detach(), xi.grad, layer.weight.grad, layer.bias.grad,
                    [t.clone() for t in state if t is not None]))
    (ye, dxe, dwe, dbe, state_e), (y, dx, dw, db, state) = res

    def mag(t):
        # bounds |dequantized t|: FP8 rounding changes a value by at most 2^-3 of it (E5M2;
        # 2^-4 for E4M3) or, below the normal range, by less than 2^-8 of the amax
        return t.abs().double() * 1.25 + t.abs().max().double() * 2.0 ** -8

    ax, aw, ady = mag(x), mag(w), mag(dy)
    for name, got, want, kk, ab in (("y", y, ye, k, ax @ aw.t()), ("dx", dx, dxe, n, ady @ aw),
                                    ("dw", dw, dwe, m, ady.t() @ ax)):
        # two FP32 sums of the same K products, each within gamma_K * sum|a||b| of the exact one,
        bound = 2 * (kk + 2) * U32 * ab + 2 * U32 * want.abs().double() + 1e-30  # (+ the bias add)
        err = (got.double() - want.double()).abs()
        assert (err <= bound).all(), f"{name}: worst ratio {(err / bound).max().item():.3g}"
    assert torch.equal(db, dbe)
    assert len(state) == (2 if recipe == "fp8_delayed" else 0)
    for got, want in zip(state, state_e):
        assert torch.equal(got, want)
