"""nvfp4.nn: the Linear layer's three GEMMs against a float64 reference built from
nvfp4.quantize, recipes, conversion, the weight cache, autocast, gradient accumulation and
torch.compile. CPU tests run the reference backend; the *_cuda variants skip without a GPU."""
import copy
import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import nvfp4
import nvfp4.nn as nn4
from nvfp4.nn import ops
from nvfp4.nn.linear import TOKEN_ALIGN
from conftest import assert_equal

HAS_CUDA = torch.cuda.is_available() and nvfp4.is_supported("cutlass", "cuda")
cuda_only = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU with an nvfp4 GEMM backend")

_E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=torch.float64)


# ------------------------------------------------------------------------------ reference
def decode_unscaled(data, scales):
    """float64 e2m1 value x block scale of one orientation (exact), from its bytes."""
    data, scales = data.cpu(), scales.cpu()
    rows, width = data.shape[0], data.shape[1] * 2
    lin = nvfp4.unswizzle_scales(scales, rows, width // 16).view(torch.float8_e4m3fn).double()
    codes = torch.stack([data & 15, data >> 4], -1).reshape(rows, width).long()
    vals = _E2M1[codes & 7] * torch.where((codes & 8) != 0, -1.0, 1.0).double()
    return vals * lin.repeat_interleave(16, 1)


def s_dec(amax):
    amax = amax.cpu().float()
    # tensor / tensor: torch evaluates scalar / tensor as reciprocal times scalar (two roundings)
    s = torch.clamp(torch.full_like(amax, 448.0 * 6.0) / amax, max=torch.finfo(torch.float32).max)
    s = torch.where(s == 0, torch.ones_like(s), s)
    return 1.0 / s


def lib_alpha(amax_a, amax_b):
    """The fp32 alpha the GEMM backend applies for these two amax values, read back from a
    1x16 product whose exact value is 1 (so the reference below depends on the backend only
    through this one number, checked against docs/design.md's S_dec(a) * S_dec(b) in fp32)."""
    data = torch.zeros(1, 8, dtype=torch.uint8)
    data[0, 0] = 2  # e2m1 code of 1.0
    sc = torch.zeros(128, 4, dtype=torch.uint8)
    sc[0, 0] = 0x38  # e4m3 1.0
    sc = sc.view(torch.float8_e4m3fn)
    dev = amax_a.device
    alpha = ops.gemm((data.to(dev), sc.to(dev), amax_a), (data.to(dev), sc.to(dev), amax_b), 0, torch.float32)
    alpha = alpha[0, 0].cpu()
    want = s_dec(amax_a) * s_dec(amax_b)
    # bit-exact on the CPU reference; a device may round its alpha differently by an ulp
    tol = 0.0 if dev.type == "cpu" else abs(want.item()) * 2.0**-22
    assert abs(alpha.item() - want.item()) <= tol, (alpha.item(), want.item())
    return alpha.double()


def ref_gemm(a, b, out_dtype, bias=None):
    """What every backend computes: fp32 alpha x exact float64 product, one final rounding.
    a, b: (data, scales, amax) of rowwise orientations."""
    alpha = lib_alpha(a[2], b[2])
    d = alpha * (decode_unscaled(a[0], a[1]) @ decode_unscaled(b[0], b[1]).t())
    if bias is not None:
        d = d + bias.cpu().double()
    return d.float().to(out_dtype), alpha * (decode_unscaled(a[0], a[1]).abs() @ decode_unscaled(b[0], b[1]).abs().t())


def rows(q):
    return q.data, q.scales, q.amax


def cols(q):
    return q.data_t, q.scales_t, q.amax_t


def reference_linear(x, w, b, dy, recipe, layer_index=0, offset=0, cdt=None):
    """y, dx, dw, db of an nvfp4 Linear, from nvfp4.quantize and float64 math (CPU)."""
    r = recipe
    cdt = cdt or x.dtype
    x2 = x.to(cdt).reshape(-1, x.shape[-1]).cpu()
    dy2 = dy.reshape(-1, w.shape[0]).cpu().to(cdt)
    m = x2.shape[0]
    pad = (-m) % TOKEN_ALIGN
    xp = F.pad(x2, (0, 0, 0, pad))
    dyp = F.pad(dy2, (0, 0, 0, pad))
    signs = r.rht_signs
    qx = nvfp4.quantize(x2, block=r.x.block, rounding=r.x.rounding, seed=nn4.layer_seed(r.seed, layer_index, 0),
                        offset=offset)
    qxc = nvfp4.quantize(xp, block=r.wgrad_x.block, rounding=r.wgrad_x.rounding,
                         rht="columnwise" if r.wgrad_x.rht else False, rowwise=False, columnwise=True,
                         seed=nn4.layer_seed(r.seed, layer_index, 0), offset=offset, rht_signs=signs)
    qw = nvfp4.quantize(w.detach().cpu(), block=r.w.block, rowwise=True, columnwise=True)
    qdy = nvfp4.quantize(dyp, block=r.dy.block, rounding=r.dy.rounding, seed=nn4.layer_seed(r.seed, layer_index, 1),
                         offset=offset)
    qdyc = nvfp4.quantize(dyp, block=r.wgrad_dy.block, rounding=r.wgrad_dy.rounding,
                          rht="columnwise" if r.wgrad_dy.rht else False, rowwise=False, columnwise=True,
                          seed=nn4.layer_seed(r.seed, layer_index, 1), offset=offset, rht_signs=signs)
    bias = None if b is None else b.detach().cpu().to(cdt)
    y, y_mag = ref_gemm(rows(qx), rows(qw), cdt, bias)
    dx, dx_mag = ref_gemm(rows(qdy), cols(qw), cdt)
    dw, dw_mag = ref_gemm(cols(qdyc), cols(qxc), w.dtype)
    db = None if b is None else dy2.sum(0, dtype=torch.float32).to(b.dtype)
    out = dict(y=y.reshape(*x.shape[:-1], -1), dx=dx[:m].reshape(x.shape), dw=dw, db=db,
               y_mag=y_mag.reshape(*x.shape[:-1], -1), dx_mag=dx_mag[:m].reshape(x.shape), dw_mag=dw_mag)
    # The transform-free view of the same product, from dequantize(): X̂ and dŶ back in the
    # original domain, so dW = dŶᵀ X̂ up to fp32 rounding of the decoded values.
    out["dw_dequant"] = (qdyc.dequantize(torch.float32, columnwise=True).double().t()
                         @ qxc.dequantize(torch.float32, columnwise=True).double())
    return out


def run_layer(layer, x, dy):
    x = x.detach().clone().requires_grad_()
    y = layer(x)
    y.backward(dy)
    return y.detach(), x.grad, layer.weight.grad, None if layer.bias is None else layer.bias.grad


def make(k=64, n=48, shape=(3, 13), bias=True, dtype=torch.float32, seed=0, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, k, generator=g).to(dtype)
    dy = (torch.randn(*shape, n, generator=g) * 1e-3).to(dtype)
    lin = nn.Linear(k, n, bias=bias, dtype=dtype)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(n, k, generator=g) * 0.05)
        if bias:
            lin.bias.copy_(torch.randn(n, generator=g))
    return x.to(device), dy.to(device), lin.to(device)


# ------------------------------------------------------------------------------ bit-exact GEMMs (CPU)
@pytest.mark.parametrize("recipe", ["nvfp4", "no_rht", "no_sr", "no_2d"])
@pytest.mark.parametrize("shape,bias", [((3, 13), True), ((64,), False), ((2, 2, 16), False), ((), True)])
def test_three_gemms_bit_exact_cpu(recipe, shape, bias):
    x, dy, lin = make(shape=shape, bias=bias)
    layer = nn4.Linear.from_linear(copy.deepcopy(lin), nn4.get_recipe(recipe, backend="reference"), layer_index=3)
    want = reference_linear(x, lin.weight, lin.bias, dy, layer.recipe, layer_index=3)
    y, dx, dw, db = run_layer(layer, x, dy)
    assert_equal(y, want["y"], "forward")
    assert_equal(dx, want["dx"], "dgrad")
    assert_equal(dw, want["dw"], "wgrad")
    if bias:
        assert_equal(db, want["db"], "bias grad")
    # the same dW through dequantize(): in the original (inverse-transformed) domain
    assert torch.allclose(dw.double(), want["dw_dequant"], rtol=1e-5, atol=1e-6 * want["dw_dequant"].abs().max())
    # and NVFP4 is an approximation of the real thing
    exact = F.linear(x.double(), lin.weight.double(), None if lin.bias is None else lin.bias.double())
    assert (y.double() - exact).norm() / exact.norm() < 0.25


def test_bf16_input_and_out_dtype():
    x, dy, lin = make(dtype=torch.bfloat16)
    layer = nn4.Linear.from_linear(copy.deepcopy(lin), nn4.get_recipe("nvfp4", backend="reference"))
    y, dx, dw, db = run_layer(layer, x, dy)
    want = reference_linear(x, lin.weight, lin.bias, dy, layer.recipe)
    assert y.dtype == dx.dtype == dw.dtype == torch.bfloat16
    assert_equal(y, want["y"], "forward")
    assert_equal(dx, want["dx"], "dgrad")
    assert_equal(dw, want["dw"], "wgrad")


def test_autocast_fp32_master_weights():
    x, dy, lin = make()
    layer = nn4.Linear.from_linear(copy.deepcopy(lin), nn4.get_recipe("nvfp4", backend="reference"))
    xx = x.clone().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = layer(xx)
    assert y.dtype == torch.bfloat16
    y.backward(dy.bfloat16())
    assert xx.grad.dtype == torch.float32 and layer.weight.grad.dtype == torch.float32
    assert layer.bias.grad.dtype == torch.float32
    want = reference_linear(x, lin.weight, lin.bias, dy, layer.recipe, cdt=torch.bfloat16)
    assert_equal(y.detach(), want["y"], "forward")
    assert_equal(xx.grad, want["dx"].float(), "dgrad")
    assert_equal(layer.weight.grad, want["dw"], "wgrad")  # fp32 output straight from the GEMM


def test_fwd_only_and_bf16_recipes():
    x, dy, lin = make()
    xr = x.clone().requires_grad_()
    ref = copy.deepcopy(lin)
    ref(xr).backward(dy)
    # bf16: exactly nn.Linear
    layer = nn4.Linear.from_linear(copy.deepcopy(lin), "bf16")
    y, dx, dw, db = run_layer(layer, x, dy)
    assert torch.equal(y, F.linear(x, lin.weight, lin.bias)) and torch.equal(dx, xr.grad)
    assert torch.equal(dw, ref.weight.grad) and torch.equal(db, ref.bias.grad)
    # fwd_only: quantized forward, backward in the input dtype
    layer = nn4.Linear.from_linear(copy.deepcopy(lin), nn4.get_recipe("fwd_only", backend="reference"))
    y, dx, dw, db = run_layer(layer, x, dy)
    want = reference_linear(x, lin.weight, lin.bias, dy, layer.recipe)
    assert_equal(y, want["y"], "forward")
    assert torch.allclose(dx, dy.reshape(-1, 48).mm(lin.weight).reshape(x.shape), rtol=1e-6, atol=1e-9)
    assert torch.allclose(dw, dy.reshape(-1, 48).t().mm(x.reshape(-1, 64)), rtol=1e-5, atol=1e-9)


def test_inference_mode_and_no_grad():
    x, _, lin = make()
    layer = nn4.Linear.from_linear(copy.deepcopy(lin), nn4.get_recipe("nvfp4", backend="reference"))
    want = reference_linear(x, lin.weight, lin.bias, torch.zeros(3, 13, 48), layer.recipe)["y"]
    with torch.no_grad():
        assert_equal(layer(x), want, "no_grad forward")
    with torch.inference_mode():
        assert_equal(layer(x), want, "inference forward")
    assert int(layer.sr_step) == 0  # no training step happened


# ------------------------------------------------------------------------------ determinism and seeds
def test_sr_off_is_deterministic_and_sr_reproducible():
    x, dy, lin = make()
    grads = []
    for _ in range(2):
        layer = nn4.Linear.from_linear(copy.deepcopy(lin), nn4.get_recipe("no_sr", backend="reference"))
        a = run_layer(layer, x, dy)
        layer.weight.grad = None
        b = run_layer(layer, x, dy)  # the step counter moved on; without SR nothing depends on it
        assert torch.equal(a[1], b[1]) and torch.equal(a[2], b[2])
        grads.append(a)
    assert torch.equal(grads[0][2], grads[1][2])
    # with SR: a fresh layer with the same seed and index repeats itself exactly ...
    r = nn4.get_recipe("nvfp4", backend="reference", seed=7)
    la = nn4.Linear.from_linear(copy.deepcopy(lin), r, layer_index=2)
    lb = nn4.Linear.from_linear(copy.deepcopy(lin), r, layer_index=2)
    a, b = run_layer(la, x, dy), run_layer(lb, x, dy)
    assert torch.equal(a[1], b[1]) and torch.equal(a[2], b[2])
    # ... the next step draws other random bits, and so does another layer
    la.weight.grad = None
    a2 = run_layer(la, x, dy)
    assert not torch.equal(a[1], a2[1])
    lc = nn4.Linear.from_linear(copy.deepcopy(lin), r, layer_index=3)
    assert not torch.equal(a[1], run_layer(lc, x, dy)[1])
    # and resuming at a step reproduces that step
    ld = nn4.Linear.from_linear(copy.deepcopy(lin), r, layer_index=2)
    nn4.set_sr_step(ld, 1)
    assert torch.equal(run_layer(ld, x, dy)[1], a2[1])
    assert nn4.layer_seed(7, 2) != nn4.layer_seed(7, 3) != nn4.layer_seed(8, 2)


# ------------------------------------------------------------------------------ the weight is never stale
class _OpSpy:
    """Every call of the Linear's two ops, with copies of their tensor inputs, the SR counter
    value they read, and their outputs. The op bodies run both eagerly and from inside an
    inductor graph, so eager and compiled runs can be compared op by op."""

    def __init__(self, monkeypatch):
        self.run = "eager"
        self.calls = {"eager": [], "compiled": []}
        real_fwd, real_bwd = ops._linear_fwd_impl, ops._linear_bwd_impl
        C = ops.LinearConfig

        def fwd(x, w, bias, counter, cfg, save_xt, save_wt, w_mode, w_cache):
            step = int(counter)
            out = real_fwd(x, w, bias, counter, cfg, save_xt, save_wt, w_mode, w_cache)
            key = ("fwd", tuple(x.shape), cfg[C.SEED_X], tuple(cfg), save_xt, save_wt, w_mode)
            x = x.reshape(-1, x.shape[-1])  # the ops take [..., k]; recorded as the 2D [m, k] they quantize
            (m, k), n = x.shape, w.shape[0]
            res = [out[0].detach().clone()]
            if save_xt:
                res += [t.clone() for t in ops.unpack(out[1], k, (m + 15) // 16 * 16)]
            if out[2].numel():
                res += [t.clone() for t in ops.unpack(out[2], k, (n + 15) // 16 * 16)]
            self.calls[self.run].append((key, step, [x.detach().clone(), w.detach().clone()], res))
            return out

        def bwd(dy, xt, wt, counter, cfg, k, need_dx, need_dw, dw_dtype):
            step = int(counter)
            ins = [dy.reshape(-1, dy.shape[-1]).detach().clone(), xt.detach().clone(), wt.detach().clone()]
            out = real_bwd(dy, xt, wt, counter, cfg, k, need_dx, need_dw, dw_dtype)
            key = ("bwd", tuple(dy.shape), cfg[C.SEED_DY], tuple(cfg), k, need_dx, need_dw)
            self.calls[self.run].append((key, step, ins, [t.detach().clone() for t in out]))
            return out

        monkeypatch.setattr(ops, "_linear_fwd_impl", fwd)
        monkeypatch.setattr(ops, "_linear_bwd_impl", bwd)

    def count(self, kind, run="eager"):
        return sum(1 for c in self.calls[run] if c[0][0] == kind)

    def pairs(self):
        """(key, eager record, compiled record), paired by layer and pass: inductor may run
        independent ops in another order."""
        e, c = (sorted(self.calls[r], key=lambda t: repr(t[0])) for r in ("eager", "compiled"))
        assert [t[0] for t in e] == [t[0] for t in c], "eager and compiled ran different ops"
        return [(a[0], a[1:], b[1:]) for a, b in zip(e, c)]

    def dy(self, seed):
        """The (padded) dY each run fed to the backward op of the layer whose dY seed is `seed`."""
        return next((e[1][0], c[1][0]) for key, e, c in self.pairs() if key[0] == "bwd" and key[2] == seed)


def test_weight_never_stale():
    """Every way a weight can change is seen by the next forward: an optimizer step, an
    in-place edit, an edit through .data (no version bump: what peft's merge does),
    load_state_dict, a copy_ into the parameter."""
    x, dy, lin = make()
    r = nn4.get_recipe("nvfp4", backend="reference")
    layer = nn4.Linear.from_linear(copy.deepcopy(lin), r)

    def check(what):
        y = layer(x).detach()
        want = reference_linear(x, layer.weight, layer.bias, dy, r)["y"]
        assert_equal(y, want, what)

    check("fresh layer")
    opt = torch.optim.SGD(layer.parameters(), lr=0.1)
    run_layer(layer, x, dy)
    opt.step()
    check("after an optimizer step")
    with torch.no_grad():
        layer.weight.mul_(0.5)
    check("after an in-place change")
    layer.weight.data.add_(0.01)  # .data: no version bump
    check("after an edit through .data")
    other = nn.Linear(64, 48)
    layer.load_state_dict(other.state_dict())
    check("after load_state_dict")
    with torch.no_grad():
        layer.weight.copy_(torch.randn(48, 64) * 0.1)
    check("after copy_")


def test_weight_reuse_across_microbatches(monkeypatch):
    x, dy, lin = make()
    x2, dy2 = x * 0.5 + 1, dy.flip(0)
    r = nn4.get_recipe("nvfp4", backend="reference")
    ref = nn4.Linear.from_linear(copy.deepcopy(lin), r)
    layer = nn4.Linear.from_linear(copy.deepcopy(lin), r)
    with pytest.raises(RuntimeError, match="mode"):
        layer.set_weight_reuse("reuse")  # nothing stored yet
    with pytest.raises(ValueError, match="mode"):
        layer.set_weight_reuse("sometimes")
    spy = _OpSpy(monkeypatch)
    got, want = [], []
    for i, (xi, dyi) in enumerate(((x, dy), (x2, dy2), (x, dy2))):
        nn4.set_weight_reuse(layer, "store" if i == 0 else "reuse")
        got.append(run_layer(layer, xi, dyi))
        want.append(run_layer(ref, xi, dyi))
    # the kept quantization gives exactly what quantizing again gives
    for g, w in zip(got, want):
        for a, b, what in zip(g, w, ("y", "dx", "dw", "db")):
            assert torch.equal(a, b), what
    modes = [c[0][6] for c in spy.calls["eager"] if c[0][0] == "fwd"]
    assert modes == [ops.W_STORE, ops.W_FRESH, ops.W_REUSE, ops.W_FRESH, ops.W_REUSE, ops.W_FRESH], modes
    # back to the default: quantized on every forward
    nn4.set_weight_reuse(layer, None)
    assert layer.weight_reuse is None
    assert torch.equal(run_layer(layer, x, dy)[0], run_layer(ref, x, dy)[0])


def test_shared_layer_twice_in_one_forward():
    """A layer applied twice in one forward (shared weights): both backward passes run, the
    counter advances twice, and the gradient is the sum of the two uses' gradients."""
    x, _, lin = make(k=64, n=64)
    r = nn4.get_recipe("nvfp4", backend="reference")
    layer = nn4.Linear.from_linear(copy.deepcopy(lin), r)
    xx = x.clone().requires_grad_()
    layer(torch.relu(layer(xx))).square().sum().backward()
    assert int(layer.sr_step) == 2
    assert torch.isfinite(layer.weight.grad).all() and torch.isfinite(xx.grad).all()


def test_devices_refused_by_name():
    layer = nn4.Linear(64, 64, device="meta")
    with pytest.raises(ValueError, match="x: "):
        layer(torch.randn(8, 64))  # mixed meta / cpu
    # all on meta is not an error: shapes and dtypes, as nn.Linear gives them (test_meta.py)
    y = layer(torch.randn(8, 64, device="meta"))
    assert y.device.type == "meta" and y.shape == (8, 64)
    with pytest.raises(ValueError, match="layer_index"):
        nn4.Linear(64, 64, layer_index=-1)


def test_gradient_accumulation():
    x, dy, lin = make()
    x2, dy2 = x * 0.5 + 1, dy.flip(0)
    r = nn4.get_recipe("nvfp4", backend="reference")
    acc = nn4.Linear.from_linear(copy.deepcopy(lin), r)
    for xi, dyi in ((x, dy), (x2, dy2)):
        acc(xi).backward(dyi)
    one = nn4.Linear.from_linear(copy.deepcopy(lin), r)
    g1 = run_layer(one, x, dy)[2].clone()
    one.weight.grad = None
    g2 = run_layer(one, x2, dy2)[2]  # second micro-batch: SR offset 1, as in the accumulating layer
    assert torch.equal(acc.weight.grad, g1 + g2)
    assert torch.equal(acc.bias.grad, dy.reshape(-1, 48).sum(0) + dy2.reshape(-1, 48).sum(0))


def test_saved_activation_memory():
    """Bytes saved for backward per token: FP4 X (columnwise) vs BF16 nn.Linear's X."""
    def saved_bytes(module, m):
        x = torch.randn(m, 256, dtype=torch.bfloat16, requires_grad=True)
        params = {p.data_ptr() for p in module.parameters()}
        total = []

        def pack(t):
            if t.data_ptr() not in params and t.device.type != "meta":
                total.append(t.numel() * t.element_size())
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            module(x)
        return sum(total)

    base = nn.Linear(256, 256, dtype=torch.bfloat16)
    fp4 = nn4.Linear.from_linear(copy.deepcopy(base), nn4.get_recipe("nvfp4", backend="reference"))
    slope = lambda mod: saved_bytes(mod, 512) - saved_bytes(mod, 256)  # noqa: E731 (weight-sized parts cancel)
    ratio = slope(fp4) / slope(base)
    assert ratio <= 0.35, ratio  # 0.5625 / 2 bytes per element = 0.28


# ------------------------------------------------------------------------------ module behaviour
def test_state_dict_round_trip():
    _, _, lin = make()
    layer = nn4.Linear(64, 48, recipe="nvfp4")
    # nn.Linear's parameters plus the stochastic-rounding counter, so that a resume continues
    # the random streams
    assert set(layer.state_dict()) == {"weight", "bias", "sr_step"}
    layer.load_state_dict(lin.state_dict())  # a checkpoint from before conversion: no counter
    assert torch.equal(layer.weight, lin.weight) and int(layer.sr_step) == 0
    nn4.set_sr_step(layer, 7)
    other = nn4.Linear(64, 48, recipe="nvfp4")
    other.load_state_dict(layer.state_dict())
    assert int(other.sr_step) == 7
    with pytest.raises(RuntimeError, match="weight"):  # other missing keys still count
        other.load_state_dict({"bias": lin.bias})
    # unconvert gives back nn.Linear's state_dict
    plain = copy.deepcopy(layer).to_linear()
    assert set(plain.state_dict()) == {"weight", "bias"} and type(plain) is nn.Linear
    # the parameters are nn.Linear's, in the same order, and survive a pickle round trip
    assert [n for n, _ in layer.named_parameters()] == ["weight", "bias"]
    clone = copy.deepcopy(layer)
    assert clone.recipe == layer.recipe and int(clone.sr_step) == 7 and clone.sr_step is not layer.sr_step
    assert isinstance(layer, nn.Linear) and "recipe=nvfp4" in repr(layer)
    with pytest.raises(ValueError, match="step"):
        nn4.set_sr_step(layer, -1)


def test_constructor_and_dtypes():
    layer = nn4.Linear(32, 16, bias=False, dtype=torch.bfloat16, recipe="no_rht", layer_index=5)
    assert layer.weight.dtype == torch.bfloat16 and layer.bias is None and layer.layer_index == 5
    with pytest.raises(ValueError, match="in_features"):
        nn4.Linear(24, 16)
    with pytest.raises(ValueError, match="recipe"):
        nn4.Linear(32, 16, recipe="fp2")
    with pytest.raises(TypeError, match=r"^x: "):
        nn4.Linear(32, 16)(torch.ones(2, 32, dtype=torch.float64))


class Block(nn.Module):
    def __init__(self, d=32):
        super().__init__()
        self.up = nn.Linear(d, 2 * d)
        self.down = nn.Linear(2 * d, d)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(x)))


class Toy(nn.Module):
    def __init__(self, vocab=64, d=32, n=3, tie=True):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.proj_in = nn.Linear(d, d)
        self.blocks = nn.ModuleList([Block(d) for _ in range(n)])
        self.odd = nn.Linear(d, 20)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.out = nn.Linear(d, vocab, bias=False)
        if tie:
            self.out.weight = self.embed.weight

    def forward(self, idx):
        h = self.proj_in(self.embed(idx))
        for b in self.blocks:
            h = b(h)
        return self.lm_head(h) + self.out(h)


def test_convert_selection_and_unconvert():
    model = Toy()
    opt = torch.optim.AdamW(model.parameters())
    before = {k: v.clone() for k, v in model.state_dict().items()}
    plan = dict(nn4.plan_conversion(model))
    assert plan["lm_head"] == "skipped: excluded"
    assert plan["out"] == "skipped: weight tied to another module"
    assert plan["odd"].startswith("skipped") and "16" in plan["odd"]
    nn4.convert(model, "nvfp4", skip_first=1, skip_last=1)
    names = nn4.converted_layers(model)
    # candidates in order: proj_in, blocks.{0,1,2}.{up,down}; first and last skipped
    assert names == ["blocks.0.up", "blocks.0.down", "blocks.1.up", "blocks.1.down", "blocks.2.up"]
    assert [model.get_submodule(n).layer_index for n in names] == [0, 1, 2, 3, 4]
    assert type(model.proj_in) is nn.Linear and type(model.blocks[2].down) is nn.Linear
    assert type(model.embed) is nn.Embedding
    # in place: the same parameters (the optimizer keeps working), the same state_dict
    assert any(p is model.blocks[0].up.weight for p in opt.param_groups[0]["params"])
    after = model.state_dict()
    assert set(after) - set(before) == {n + ".sr_step" for n in names} and set(before) <= set(after)
    assert all(torch.equal(before[k], after[k]) for k in before)
    nn4.unconvert(model)
    assert model.state_dict().keys() == before.keys()
    assert nn4.converted_layers(model) == [] and type(model.blocks[0].up) is nn.Linear
    assert not hasattr(model.blocks[0].up, "recipe")


def test_convert_patterns():
    names = lambda m: nn4.converted_layers(m)  # noqa: E731
    m = nn4.convert(Toy(), include="blocks.*.up")
    assert names(m) == ["blocks.0.up", "blocks.1.up", "blocks.2.up"]
    m = nn4.convert(Toy(), exclude=["re:^blocks\\.1\\.", "proj_in"])
    assert names(m) == ["blocks.0.up", "blocks.0.down", "blocks.2.up", "blocks.2.down", "lm_head"]
    m = nn4.convert(Toy(), include=re.compile(r"down$"), exclude=lambda n, mod: n.startswith("blocks.2"))
    assert names(m) == ["blocks.0.down", "blocks.1.down"]
    m = nn4.convert(Toy(tie=True), convert_tied=True, exclude=[])
    assert "out" in names(m) and "lm_head" in names(m)
    # converting again updates the recipe and renumbers
    m = nn4.convert(Toy(), "no_rht", skip_last=2)
    nn4.convert(m, "no_sr")
    assert {m.get_submodule(n).recipe.name for n in names(m)} == {"no_sr"}
    lin = nn.Linear(32, 32)
    assert nn4.convert(lin) is lin and isinstance(lin, nn4.Linear)
    with pytest.raises(ValueError, match="skip_first"):
        nn4.convert(Toy(), skip_first=-1)
    with pytest.raises(TypeError, match=r"^include\[0\]: patterns must be"):
        nn4.convert(Toy(), include=[3])


def test_precision_switch_and_cooldown():
    x, dy, lin = make()
    layer = nn4.Linear.from_linear(copy.deepcopy(lin), nn4.get_recipe("nvfp4", backend="reference"))
    model = nn.Sequential(layer)
    q = model(x).detach()
    assert nn4.set_precision(model, "bf16") == 1
    assert torch.equal(model(x), F.linear(x, lin.weight, lin.bias))
    nn4.set_precision(model, "nvfp4")
    assert torch.equal(model(x).detach(), q)
    cd = nn4.Cooldown(model, total_steps=10, frac=0.2)
    assert [cd(s) for s in range(10)] == [False] * 8 + [True, False]
    assert layer.precision == "bf16" and cd.active
    assert cd(0) and layer.precision == "nvfp4"  # a resume from before the cooldown switches back
    nn4.set_precision(model, "no_sr")
    assert layer.recipe.name == "no_sr"
    with pytest.raises(ValueError, match="frac"):
        nn4.Cooldown(model, 10, frac=2)


def test_bad_recipes_rejected():
    R, Q = nn4.Recipe, nn4.QuantConfig
    cases = [
        (lambda: R(w=Q(block="3d")), "w.block"),
        (lambda: R(dy=Q(rounding="up")), "dy.rounding"),
        (lambda: R(x=Q(rht=True)), "x.rht"),
        (lambda: R(wgrad_x=Q(rht=False)), "wgrad_x.rht"),
        (lambda: R(wgrad_x=Q(block="2d", rht=True), wgrad_dy=Q(block="2d", rht=True)), "rht"),
        (lambda: R(w=Q(block="2d", rounding="sr")), "w.rounding"),
        (lambda: R(backend="tpu"), "backend"),
        (lambda: R(rht_signs=(1,) * 15), "rht_signs"),
        (lambda: R(rht_signs=(2,) * 16), "rht_signs"),
        (lambda: R(seed=-1), "seed"),
        (lambda: R(fprop="yes"), "fprop"),
        (lambda: R(x="1d"), "x"),
        (lambda: nn4.get_recipe("nvfp5"), "recipe"),
        (lambda: nn4.get_recipe("nvfp4", bogus=1), "bogus"),
        (lambda: nn4.get_recipe("nvfp4", dy={"block": "4d"}), "dy.block"),
    ]
    for make_bad, field in cases:
        with pytest.raises(ValueError, match=re.escape(field)):
            make_bad()
    # the canned recipes are what they claim
    rs = nn4.RECIPES
    assert rs["nvfp4"].w.block == "2d" and rs["nvfp4"].dy.rounding == "sr" and rs["nvfp4"].wgrad_x.rht
    assert not rs["no_rht"].wgrad_dy.rht and rs["no_sr"].wgrad_dy.rounding == "rtn"
    assert rs["no_2d"].w.block == "1d" and not rs["fwd_only"].dgrad and not rs["bf16"].quantized
    assert R(rht_signs=[1] * 16).rht_signs == (1,) * 16


# ------------------------------------------------------------------------------ torch.compile
def test_compile_fullgraph_no_graph_breaks():
    import torch._dynamo

    _reset_dynamo()
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32), nn.GELU(), nn.Linear(32, 16))
    nn4.convert(mlp, nn4.get_recipe("nvfp4", backend="reference"), exclude=[])
    eager = copy.deepcopy(mlp)
    compiled = torch.compile(mlp, backend="aot_eager", fullgraph=True)
    x = torch.randn(4, 10, 32)
    for step in range(2):  # the SR counter moves each step; that must not recompile
        xe, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
        ye, yc = eager(xe), compiled(xc)
        ye.square().sum().backward()
        yc.square().sum().backward()
        assert torch.equal(ye, yc)
        assert torch.equal(xe.grad, xc.grad)
        for pe, pc in zip(eager.parameters(), mlp.parameters()):
            assert torch.equal(pe.grad, pc.grad)
    assert int(mlp[0].sr_step) == 2
    from torch._dynamo.utils import counters
    assert not counters["graph_break"], dict(counters["graph_break"])
    assert counters["stats"]["unique_graphs"] == 1
    explain = torch._dynamo.explain(copy.deepcopy(eager))(x)
    assert explain.graph_break_count == 0


# ------------------------------------------------------------------------------ torch.compile with inductor
def _reset_dynamo():
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()  # reset() keeps them


def _inductor_or_skip(device="cpu"):
    _reset_dynamo()
    try:
        torch.compile(lambda t: t.sin() + 1, fullgraph=True)(torch.randn(8, device=device))
    except Exception as e:  # no C++ compiler, or inductor cannot start on this machine
        pytest.skip(f"inductor unavailable: {type(e).__name__}: {str(e)[:200]}")
    _reset_dynamo()


def _fp4_bytes_changed(key, step, in_e, in_c):
    """FP4 code and scale bytes that differ between the quantizations an op made of two
    different inputs (X or dY, as the op's config quantizes them; W's quantization is part
    of the forward's outputs and inputs)."""
    C = ops.LinearConfig
    cfg = key[3]
    a, b = in_e[0], in_c[0]
    if key[0] == "fwd":
        confs = [(cfg[C.X_ROUND], 0, cfg[C.SEED_X], True, False)]
        if key[4]:
            confs.append((cfg[C.XT_ROUND], 2 * cfg[C.XT_RHT], cfg[C.SEED_X], False, True))
    else:
        confs = [(cfg[C.DY_ROUND], 0, cfg[C.SEED_DY], True, False),
                 (cfg[C.DYT_ROUND], 2 * cfg[C.DYT_RHT], cfg[C.SEED_DY], False, True)]
    n = 0
    for rounding, rht, seed, row, col in confs:
        qa = ops.quantize(a, 0, rounding, rht, cfg[C.SIGN_MASK], seed, step, None, row, col)
        qb = ops.quantize(b, 0, rounding, rht, cfg[C.SIGN_MASK], seed, step, None, row, col)
        n += sum(int((u.view(torch.uint8) != v.view(torch.uint8)).sum()) for u, v in zip(qa, qb)
                 if u.dtype != torch.float32)
    return n


def _eager_vs_inductor(mlp, x, loss_fn, spy, steps=2, autocast_dtype=None):
    """Steps a deep copy of `mlp` eagerly and `mlp` under torch.compile(fullgraph=True,
    inductor) on the same data, and checks what must hold however inductor generates its
    elementwise code: each quantization gets the same seed, SR offset and shape in both runs,
    and identical inputs give identical bytes. Yields, per step, the results of both runs
    and the number of FP4 code and scale bytes that differ (inputs that differ by rounding
    can move a value across a rounding threshold)."""
    from torch._dynamo.utils import counters

    layers = [m for m in mlp.modules() if isinstance(m, nn4.Linear)]
    eager = copy.deepcopy(mlp)
    runs = (("eager", eager, eager), ("compiled", mlp, torch.compile(mlp, fullgraph=True)))
    dev = x.device.type
    for step in range(steps):
        out = {}
        for name, model, call in runs:
            spy.run = name
            model.zero_grad(set_to_none=True)
            xi = x.clone().requires_grad_()
            with torch.autocast(dev, dtype=autocast_dtype or torch.bfloat16, enabled=autocast_dtype is not None):
                y = call(xi)
            loss_fn(y).backward()
            out[name] = dict(y=y.detach(), dx=xi.grad, **{n: p.grad for n, p in model.named_parameters()})
        changed = 0
        for key, (off_e, in_e, out_e), (off_c, in_c, out_c) in spy.pairs():
            assert off_e == off_c, f"step {step}, {key}: SR counter {off_c} compiled, {off_e} eager"
            assert off_e == step, f"step {step}, {key}: SR counter {off_e}"
            if all(torch.equal(a, b) for a, b in zip(in_e, in_c)):
                same = [torch.equal(a, b) for a, b in zip(out_e, out_c)]
                assert all(same), f"step {step}, {key}: identical inputs, different results {same}"
            else:
                changed += _fp4_bytes_changed(key, off_e, in_e, in_c)
        # bias grads are plain sums over tokens, which inductor may add up in another order:
        # each run is within (m-1) u sum|dy| of the exact sum, plus whatever dY differs by
        for layer in layers:
            if layer.bias is None:
                continue
            name = next(n for n, m in mlp.named_modules() if m is layer) + ".bias"
            dy_e, dy_c = (t.float() for t in spy.dy(nn4.layer_seed(layer.recipe.seed, layer.layer_index, 1)))
            bound = (dy_e.shape[0] - 1) * torch.finfo(torch.float32).eps * dy_e.abs().sum(0) + \
                (dy_e - dy_c).abs().sum(0) + 1e-30
            err = (out["eager"][name] - out["compiled"][name]).abs().cpu()
            assert (err <= bound.cpu()).all(), f"step {step}, {name}: {(err / bound.cpu()).max().item():.2f}x bound"
        yield out["eager"], out["compiled"], changed
        spy.calls = {"eager": [], "compiled": []}
    assert [int(m.sr_step) for m in layers] == [int(m.sr_step) for m in eager.modules() if isinstance(m, nn4.Linear)]
    assert all(int(m.sr_step) == steps for m in layers)
    assert not counters["graph_break"], dict(counters["graph_break"])
    assert counters["stats"]["unique_graphs"] == 1  # the moving SR counter does not recompile


def _assert_rounding_close(e, c, changed, what):
    """Eager vs compiled where only the elementwise code around the layers differs. With no
    FP4 byte changed, the quantized operands are the same and an amax (hence alpha) can
    move by an ulp or two: every output moves by at most one rounding of its dtype plus a
    few fp32 ulps. Each changed FP4 byte moves one term of the products by one FP4 step,
    about 1/sqrt(numel) of the result's norm: allow 4x that per byte."""
    for k in e:
        if k.endswith("bias"):
            continue  # checked against the summation bound
        a, b = e[k].float(), c[k].float()
        tol = torch.finfo(e[k].dtype).eps + 16 * torch.finfo(torch.float32).eps + 4 * changed / a.numel() ** 0.5
        rel = ((a - b).norm() / a.norm()).item()
        assert rel <= tol, f"{what}, {k}: relative difference {rel:.3g} > {tol:.3g} ({changed} FP4 bytes differ)"


def test_compile_inductor_matches_eager(monkeypatch):
    """The default backend. Where the code around the layers is exact (ReLU, a loss whose
    gradient is a constant) the two runs must agree bit for bit in every quantized result;
    with a GELU and an MSE loss, inductor's own elementwise code rounds differently from
    eager's, and the results may differ by that rounding only."""
    _inductor_or_skip()
    spy = _OpSpy(monkeypatch)
    r = nn4.get_recipe("nvfp4", backend="reference")
    torch.manual_seed(0)
    # 3 x 20 tokens: not a multiple of TOKEN_ALIGN, so the padded path is compiled too
    x = torch.randn(3, 20, 64)
    mlp = nn.Sequential(nn.Linear(64, 96), nn.ReLU(), nn.Linear(96, 48))
    nn4.convert(mlp, r, exclude=[])
    g = torch.randn(3, 20, 48)
    for step, (e, c, changed) in enumerate(_eager_vs_inductor(mlp, x, lambda y: (y * g).sum(), spy)):
        assert changed == 0
        for k in e:
            if not k.endswith("bias"):
                assert torch.equal(e[k], c[k]), f"step {step}, {k}: compiled differs from eager"

    _reset_dynamo()
    mlp = nn.Sequential(nn.Linear(64, 96), nn.GELU(), nn.Linear(96, 48))
    nn4.convert(mlp, r, exclude=[])
    for step, (e, c, changed) in enumerate(_eager_vs_inductor(mlp, x, lambda y: y.square().mean(), spy)):
        _assert_rounding_close(e, c, changed, f"GELU model, step {step}")


def test_compiled_two_micro_batches_before_their_backwards():
    """Two micro-batches forward, then one backward through both (the engine runs the second's
    first), compiled (fullgraph, through AOTAutograd) against eager: the stochastic-rounding
    counter, advanced by each backward and read by each forward, and every gradient bit for
    bit over steps. The counter is written by backwards only, so a compiled backward advances
    the layer's counter, not a copy taken when its forward ran."""
    _reset_dynamo()
    r = nn4.get_recipe("nvfp4", backend="reference")
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(64, 96), nn.ReLU(), nn.Linear(96, 48))
    nn4.convert(mlp, r, exclude=[])
    ref = copy.deepcopy(mlp)
    compiled = torch.compile(mlp, fullgraph=True, backend="aot_eager")
    g = torch.Generator().manual_seed(1)
    for step in range(2):
        xs = [torch.randn(2, 16, 64, generator=g) * (i + 1) for i in range(2)]
        dys = [torch.randn(2, 16, 48, generator=g) for _ in range(2)]
        xa = [x.clone().requires_grad_(True) for x in xs]
        xb = [x.clone().requires_grad_(True) for x in xs]
        torch.autograd.backward([compiled(x) for x in xa], dys)
        torch.autograd.backward([ref(x) for x in xb], dys)
        for i in range(2):
            assert torch.equal(xa[i].grad, xb[i].grad), f"step {step}, micro-batch {i}: dx"
        for (name, p), q in zip(mlp.named_parameters(), ref.parameters()):
            assert torch.equal(p.grad, q.grad), f"step {step}: {name}.grad"
        for (name, b), c in zip(mlp.named_buffers(), ref.buffers()):
            assert torch.equal(b, c), f"step {step}: {name}"
        mlp.zero_grad(set_to_none=True)
        ref.zero_grad(set_to_none=True)
    assert [int(m.sr_step) for m in (mlp[0], mlp[2])] == [4, 4]  # two backwards a step, two steps


# ------------------------------------------------------------------------------ Hugging Face transformers
def test_convert_transformers_llama():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                   tie_word_embeddings=False)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg)
    keys = set(model.state_dict())
    nn4.convert(model, nn4.get_recipe("nvfp4", backend="reference"))
    names = nn4.converted_layers(model)
    assert len(names) == 2 * 7 and all("layers." in n for n in names)
    assert type(model.lm_head) is nn.Linear
    assert set(model.state_dict()) == keys | {n + ".sr_step" for n in names}
    ids = torch.randint(0, 128, (2, 16))
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    assert torch.isfinite(out.loss) and model.model.layers[0].self_attn.q_proj.weight.grad is not None
    # tied embeddings: the head shares the embedding matrix and stays in high precision
    cfg.tie_word_embeddings = True
    tied = transformers.LlamaForCausalLM(cfg)
    nn4.convert(tied, exclude=[])
    assert type(tied.lm_head) is nn.Linear


# ------------------------------------------------------------------------------ GPU variants
def _gemm_close(got, want, mag, k, what):
    """FP32 accumulation of exact products: |err| <= k * 2^-23 * alpha*|Â||B̂|ᵀ, plus a few
    ulps of the output dtype (its rounding, and alpha computed on the device)."""
    got = got.detach().cpu().double()
    eps_out = torch.finfo(want.dtype).eps
    bound = k * 2.0**-23 * mag.reshape(got.shape) + 4 * eps_out * want.double().abs() + 1e-30
    bad = (got - want.double()).abs() > bound
    assert not bad.any(), f"{what}: {int(bad.sum())} elements outside the bound"


@cuda_only
@pytest.mark.parametrize("recipe", ["nvfp4", "no_rht", "no_sr", "no_2d"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_three_gemms_cuda(recipe, dtype):
    x, dy, lin = make(k=256, n=128, shape=(4, 100), dtype=dtype, device="cuda")
    layer = nn4.Linear.from_linear(copy.deepcopy(lin), recipe, layer_index=1)
    y, dx, dw, db = run_layer(layer, x, dy)
    want = reference_linear(x.cpu(), lin.weight.cpu(), lin.bias.cpu(), dy.cpu(), layer.recipe, layer_index=1)
    _gemm_close(y, want["y"], want["y_mag"], 256, "forward")
    _gemm_close(dx, want["dx"], want["dx_mag"], 128, "dgrad")
    _gemm_close(dw, want["dw"], want["dw_mag"], 416, "wgrad")
    assert torch.allclose(db.cpu().float(), want["db"].float(), rtol=1e-2, atol=1e-2)


def _autocast_compile_case(device, monkeypatch):
    _inductor_or_skip(device)
    spy = _OpSpy(monkeypatch)
    torch.manual_seed(0)
    x = torch.randn(8, 64, 256, device=device)
    g = torch.randn(8, 64, 256, device=device)
    # ReLU and a loss with a constant gradient are exact in any code, so every quantized
    # result must match bit for bit; bias grads only up to the order of their sums
    mlp = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 256)).to(device)
    nn4.convert(mlp, exclude=[])
    for step, (e, c, changed) in enumerate(_eager_vs_inductor(mlp, x, lambda y: (y.float() * g).sum(), spy,
                                                               autocast_dtype=torch.bfloat16)):
        assert e["y"].dtype == c["y"].dtype == torch.bfloat16
        assert e["0.weight"].dtype == c["0.weight"].dtype == torch.float32
        assert changed == 0
        for k in e:
            if not k.endswith("bias"):
                assert torch.equal(e[k], c[k]), f"step {step}, {k}: compiled differs from eager"
    # GELU and an MSE loss: inductor generates its own code for them, which may round a few
    # elements of X or dY differently (on CPU: 10 to 12 of the first layer's 262144 dY
    # elements, by one bf16 ulp, and no FP4 byte changed); results may differ by that only
    _reset_dynamo()
    mlp = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 256)).to(device)
    nn4.convert(mlp, exclude=[])
    for step, (e, c, changed) in enumerate(_eager_vs_inductor(mlp, x, lambda y: y.float().square().mean(), spy,
                                                               autocast_dtype=torch.bfloat16)):
        _assert_rounding_close(e, c, changed, f"GELU model, step {step}")


def test_autocast_compile_3d_cpu(monkeypatch):
    """The same on the CPU: 3D activations reach the ops as they are, eager and compiled."""
    _autocast_compile_case("cpu", monkeypatch)


@cuda_only
def test_autocast_cache_and_compile_cuda(monkeypatch):
    _autocast_compile_case("cuda", monkeypatch)


@cuda_only
def test_saved_memory_cuda():
    def act_bytes(module):
        x = torch.randn(8192, 1024, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        module(x)  # warm the weight cache
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        h = x * 1  # an activation that lives on only if the layer saves it
        y = module(h)
        del h
        torch.cuda.synchronize()
        return torch.cuda.memory_allocated() - base - y.numel() * y.element_size()

    ref = nn.Linear(1024, 1024, device="cuda", dtype=torch.bfloat16)
    fp4 = nn4.Linear.from_linear(copy.deepcopy(ref))
    ratio = act_bytes(fp4) / act_bytes(ref)
    assert ratio <= 0.35, ratio


def test_op_addresses_aligned(monkeypatch):
    """Every address the Linear's ops hand to the library is 16-byte aligned and every GEMM
    workspace 256-byte aligned, as the CUDA kernels require (the CPU reference does not
    care, so this is checked here rather than left to the GPU)."""
    # every address reaches the library through the op layer's raw entry points
    from nvfp4 import _ops as op_layer
    real_q, real_g = op_layer.quantize_raw, op_layer.gemm_raw
    seen = {"q": 0, "g": 0}

    def quantize_raw(x, dtype, rows, cols, rd, rs, ra, cd, cs, ca, *rest):
        offset_device = rest[-4]
        assert all(p % 16 == 0 for p in (x, rd, rs, ra, cd, cs, ca)), "quantize address not 16-byte aligned"
        assert offset_device % 8 == 0
        seen["q"] += 1
        return real_q(x, dtype, rows, cols, rd, rs, ra, cd, cs, ca, *rest)

    def gemm_raw(ad, as_, aa, bd, bs, ba, m, n, k, layout, c, cdt, bias, bdt, beta, d, ddt, backend, ws, ws_bytes,
                 *rest):
        assert all(p % 16 == 0 for p in (ad, as_, aa, bd, bs, ba, c, bias, d)), "gemm address not aligned"
        if ws_bytes >= 0:
            # torch's CPU allocations start on 64-byte boundaries, CUDA ones on 512
            assert ws % (256 if x_dev == "cuda" else 64) == 0, f"workspace at {ws:#x} not aligned"
            seen["g"] += 1
        return real_g(ad, as_, aa, bd, bs, ba, m, n, k, layout, c, cdt, bias, bdt, beta, d, ddt, backend, ws,
                      ws_bytes, *rest)

    x_dev = "cpu"
    monkeypatch.setattr(op_layer, "quantize_raw", quantize_raw)
    monkeypatch.setattr(op_layer, "gemm_raw", gemm_raw)
    # The offsets inside one allocation keep the alignment of its base.
    for r, c in ((1, 16), (3, 80), (13, 48), (129, 4096), (48, 96)):
        so, ao, total = ops.packed_layout(r, c)
        assert so % 256 == ao % 256 == total % 256 == 0 and total >= ao + 4
        assert ops.w_cache_nbytes(r * 16, c) % 256 == 0
    for recipe, shape, bias in (("nvfp4", (3, 13), True), ("no_sr", (40,), False), ("fwd_only", (5, 7), True)):
        x, dy, lin = make(k=80, n=48, shape=shape, bias=bias)
        layer = nn4.Linear.from_linear(copy.deepcopy(lin), nn4.get_recipe(recipe, backend="reference"))
        run_layer(layer, x, dy)
        nn4.set_weight_reuse(layer, "store")
        run_layer(layer, x, dy)
        nn4.set_weight_reuse(layer, "reuse")
        run_layer(layer, x, dy)
    assert seen["q"] > 0 and seen["g"] > 0


def test_ops_refuse_bad_operands_by_name():
    """The op layer (nvfp4.nn.ops, callable directly) names the operand it refuses."""
    x = torch.randn(4, 32)
    with pytest.raises(ValueError, match=r"^x: .*2D"):
        ops.quantize(torch.randn(2, 4, 32))
    q = ops.quantize(x)
    with pytest.raises(ValueError, match=r"^a_data: .*2D"):
        ops.gemm((q[0].reshape(-1), q[1], q[2]), q[:3], 1, torch.float32)
    with pytest.raises(ValueError, match=r"^data: .*2D"):
        ops.dequantize(q[0].reshape(-1), q[1], q[2])
    with pytest.raises(ValueError, match=r"^src: .*2D"):
        ops.swizzle(torch.zeros(8, dtype=torch.uint8), 2, 4)
    with pytest.raises(ValueError, match=r"^buf: "):
        ops.unpack(torch.zeros(16, dtype=torch.uint8), 4, 32)
    with pytest.raises(ValueError, match=r"^w_cache: "):
        cfg = nn4.Linear(32, 16, recipe=nn4.get_recipe("nvfp4", backend="reference"))._plan.cfg
        ops.linear_fwd(x, torch.randn(16, 32), None, torch.zeros((), dtype=torch.int64), cfg, False, False,
                       ops.W_REUSE, None)
    # and what it accepts is the library's own result
    assert torch.equal(ops.dequantize(q[0], q[1], q[2]), nvfp4.quantize(x).dequantize())
    lin = torch.randint(0, 255, (5, 3), dtype=torch.uint8)
    assert torch.equal(ops.swizzle(ops.swizzle(lin, 5, 3), 5, 3, False), lin)
