"""nvfp4.nn.GroupedLinear: per-expert equality with the dense nvfp4.nn.Linear (round-to-nearest
recipes, bit for bit), gradients against float64, the sr_step counter (state_dict, resume,
activation checkpointing), the BF16 fallback. CPU runs the reference backend; the *_cuda cases
skip without a GPU."""
import copy

import pytest
import torch
from torch.utils.checkpoint import checkpoint

import nvfp4
from nvfp4.nn import GroupedLinear, Linear

CUDA = torch.cuda.is_available() and nvfp4.is_supported("cutlass", "cuda")
DEVICES = ["cpu"] + (["cuda"] if CUDA else [])


def offs_of(sizes, device="cpu"):
    return torch.tensor(torch.tensor(sizes).cumsum(0).tolist(), dtype=torch.int32, device=device)


def run(layer, x, offs, dy):
    x = x.detach().clone().requires_grad_()
    y = layer(x, offs)
    y.backward(dy)
    return y.detach(), x.grad, layer.weight.grad.clone()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("recipe", ["no_sr", "fwd_only"])
@pytest.mark.parametrize("sizes", [[0, 1, 15, 16, 17, 70], [40], [9, 0, 0]], ids=str)
def test_equals_dense_linear_per_expert(device, recipe, sizes):
    """Round-to-nearest recipes draw no random bits: expert g of the grouped layer computes
    exactly what a dense nvfp4 Linear with W[g] computes on the expert's rows."""
    e, k, n = len(sizes), 64, 48
    torch.manual_seed(sum(sizes) + len(recipe))
    layer = GroupedLinear(e, k, n, device=device, recipe=recipe)
    t = sum(sizes) + 5
    x = torch.randn(t, k, device=device, dtype=torch.bfloat16)
    dy = torch.randn(t, n, device=device, dtype=torch.bfloat16)
    layer.weight.data = layer.weight.data.to(torch.bfloat16)
    y, dx, dw = run(layer, x, offs_of(sizes, device), dy)
    s = 0
    for g, m in enumerate(sizes):
        if m == 0:
            assert not dw[g].any(), "an expert without tokens gets a zero gradient"
            continue
        dense = Linear(k, n, bias=False, device=device, dtype=torch.bfloat16, recipe=recipe)
        dense.weight.data.copy_(layer.weight.data[g])
        yg, dxg, dwg = _dense(dense, x[s:s + m], dy[s:s + m])
        assert torch.equal(y[s:s + m], yg), f"y of expert {g}"
        assert torch.equal(dx[s:s + m], dxg), f"dx of expert {g}"
        assert torch.equal(dw[g], dwg), f"dw of expert {g}"
        s += m
    assert not y[s:].any() and not dx[s:].any(), "rows of no expert: zero output and gradient"


def _dense(layer, x, dy):
    x = x.detach().clone().requires_grad_()
    y = layer(x)
    y.backward(dy)
    return y.detach(), x.grad, layer.weight.grad.clone()


@pytest.mark.parametrize("device", DEVICES)
def test_gradients_against_float64(device):
    """NVIDIA's recipe (2D weights, SR on dY, RHT on the wgrad operands), several seeds: the
    output and both gradients stay within the FP4 quantization error of the float64 result."""
    sizes = [50, 0, 130, 77]
    e, k, n = len(sizes), 128, 96
    offs = offs_of(sizes, device)
    errs = {"y": [], "dx": [], "dw": []}
    for seed in range(3):
        torch.manual_seed(seed)
        layer = GroupedLinear(e, k, n, device=device)
        t = sum(sizes)
        x = torch.randn(t, k, device=device)
        dy = torch.randn(t, n, device=device)
        y, dx, dw = run(layer, x, offs, dy)
        w = layer.weight.detach().double()
        s = 0
        yr, dxr, dwr = torch.zeros(t, n, dtype=torch.float64), torch.zeros(t, k, dtype=torch.float64), torch.zeros(
            e, n, k, dtype=torch.float64)
        for g, m in enumerate(sizes):
            xg, dyg = x[s:s + m].double().cpu(), dy[s:s + m].double().cpu()
            yr[s:s + m] = xg @ w[g].cpu().t()
            dxr[s:s + m] = dyg @ w[g].cpu()
            dwr[g] = dyg.t() @ xg
            s += m
        for name, got, want in (("y", y, yr), ("dx", dx, dxr), ("dw", dw, dwr)):
            errs[name].append(((got.double().cpu() - want).norm() / want.norm()).item())
    for name, v in errs.items():
        mean = sum(v) / len(v)
        # one FP4 quantization of each operand: ~0.1 relative error per product (measured 0.10-0.13)
        assert mean < 0.2 and max(v) < 0.25, (name, v)


@pytest.mark.parametrize("device", DEVICES)
def test_sr_step_state_dict_resume_and_recompute(device):
    sizes = [20, 0, 44]
    offs = offs_of(sizes, device)
    torch.manual_seed(0)
    layer = GroupedLinear(3, 64, 32, device=device, bias=True)
    x = torch.randn(64, 64, device=device)
    dy = torch.randn(64, 32, device=device)
    run(layer, x, offs, dy)
    assert int(layer.sr_step) == 1 and "sr_step" in layer.state_dict()
    saved = copy.deepcopy(layer.state_dict())
    layer.weight.grad = None
    a = run(layer, x, offs, dy)
    assert int(layer.sr_step) == 2
    resumed = GroupedLinear(3, 64, 32, device=device, bias=True)
    resumed.load_state_dict(saved)
    b = run(resumed, x, offs, dy)
    for u, v in zip(a, b):
        assert torch.equal(u, v), "a resumed layer continues the same random streams"
    # activation checkpointing recomputes the forward: same counter, same bits
    layer.weight.grad = None
    resumed.weight.grad = None
    xa = x.clone().requires_grad_()
    checkpoint(lambda t: layer(t, offs), xa, use_reentrant=False).backward(dy)
    xb = x.clone().requires_grad_()
    resumed(xb, offs).backward(dy)
    assert torch.equal(xa.grad, xb.grad) and torch.equal(layer.weight.grad, resumed.weight.grad)
    assert int(layer.sr_step) == int(resumed.sr_step) == 3


def test_bias_and_bf16_fallback():
    sizes = [6, 10, 0]
    offs = offs_of(sizes)
    torch.manual_seed(1)
    layer = GroupedLinear(3, 32, 16, bias=True)
    x = torch.randn(20, 32)
    y = layer(x, offs)
    layer_nb = GroupedLinear.from_weights(layer.weight.detach().clone())
    y0 = layer_nb(x, offs)
    bias_rows = torch.cat([layer.bias[0].expand(6, 16), layer.bias[1].expand(10, 16), torch.zeros(4, 16)])
    assert torch.allclose(y, y0 + bias_rows, atol=0, rtol=0)
    nvfp4.nn.set_precision(layer, "bf16")
    assert layer.precision == "bf16"
    yb = layer(x, offs)
    want = torch.cat([x[:6] @ layer.weight[0].t(), x[6:16] @ layer.weight[1].t(), torch.zeros(4, 16)]) + bias_rows
    assert torch.allclose(yb, want, atol=1e-5)
    nvfp4.nn.set_precision(layer, "nvfp4")
    assert layer.precision == "nvfp4"


def test_recipe_and_shape_checks():
    with pytest.raises(ValueError, match="in_features"):
        GroupedLinear(2, 24, 16)
    with pytest.raises(ValueError, match="recipe"):
        GroupedLinear(2, 32, 32, recipe="mx_baseline")
    layer = GroupedLinear(2, 32, 16)
    with pytest.raises(ValueError, match="x"):
        layer(torch.randn(4, 48), offs_of([2, 2]))


@pytest.mark.parametrize("device", DEVICES)
def test_fullgraph_compile_equals_eager(device):
    """torch.compile(fullgraph=True) of forward and backward: the same bits as eager, and the
    counter advanced once per backward in both."""
    torch.manual_seed(3)
    layer = GroupedLinear(4, 64, 32, device=device)
    offs = offs_of([10, 0, 37, 43], device)
    x = torch.randn(100, 64, device=device, requires_grad=True)

    def f(x, offs):
        return layer(x, offs).float().square().sum()

    f(x, offs).backward()
    want = (x.grad.clone(), layer.weight.grad.clone())
    x.grad = layer.weight.grad = None
    layer.sr_step.zero_()
    torch.compile(f, fullgraph=True, backend="aot_eager")(x, offs).backward()
    assert torch.equal(x.grad, want[0]) and torch.equal(layer.weight.grad, want[1])
    assert int(layer.sr_step) == 1


def test_forward_on_a_quantized_weight_equals_the_forward_pass():
    """grouped_linear_fwd_q (the forward on W already quantized, as FSDP2's FP4 all-gather of
    the experts hands it) gives the bits of grouped_linear_fwd, which quantizes W itself; the
    W it is given is refused by name when its parts do not fit, and its fake gives the
    shapes without running anything."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from nvfp4.nn import _grouped_passes as gp

    torch.manual_seed(0)
    layer = GroupedLinear(4, 32, 48)
    cfg = layer._plan.cfg
    x = torch.randn(21, 32)
    offs = torch.tensor([5, 5, 12, 21], dtype=torch.int32)
    w = layer.weight.detach()
    row, col = gp.quantize_experts(w, cfg, transposed=True)
    a = gp.grouped_linear_fwd(x, w, offs, torch.zeros((), dtype=torch.int64), cfg, True, True)
    b = gp.grouped_linear_fwd_q(x, row, offs, torch.zeros((), dtype=torch.int64), cfg, True)
    assert len(b) == 5
    assert torch.equal(a[0].view(torch.int32), b[0].view(torch.int32))
    for u, v in zip(a[1:4] + a[4:7], b[1:4] + list(col)):  # Xᵀ from both; Wᵀ: the pass's and the given
        assert torch.equal(u.view(torch.uint8), v.view(torch.uint8))
    c = torch.zeros((), dtype=torch.int64)
    bad = [((row[0].float(), row[1], row[2]), "w_data"), ((row[0], row[1][:, :64], row[2]), "w_scales"),
           ((row[0], row[1], row[2][:3]), "w_amax"), ((row[0][:, :, :8], row[1], row[2]), "w_data"),
           ((row[0].transpose(1, 2).contiguous().transpose(1, 2), row[1], row[2]), "w_data")]
    for wq, name in bad:
        with pytest.raises(ValueError, match=name):
            gp.grouped_linear_fwd_q(x, wq, offs, c, cfg, True)
    with pytest.raises(ValueError, match="offs"):
        gp.grouped_linear_fwd_q(x, row, offs[:3], c, cfg, True)
    with FakeTensorMode() as mode:
        fx, fo, fc = mode.from_tensor(x), mode.from_tensor(offs), mode.from_tensor(c)
        fw = [mode.from_tensor(t) for t in row]
        out = torch.ops.nvfp4.grouped_linear_fwd_q(fx, *fw, fo, fc, cfg, True)
        assert [tuple(t.shape) for t in out] == [tuple(t.shape) for t in b]
