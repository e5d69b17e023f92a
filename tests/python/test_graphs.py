"""A converted model under CUDA graphs (torch.cuda.make_graphed_callables and
torch.compile(mode="reduce-overhead")) and under activation checkpointing: the same bits as
the eager model, step after step, with the stochastic-rounding counter advancing on the
device. The graph tests need a CUDA GPU; the checkpointing tests run on the CPU too."""
import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

import nvfp4
import nvfp4.nn as nn4

HAS_CUDA = torch.cuda.is_available() and nvfp4.is_supported("cutlass", "cuda")
cuda_only = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU with an nvfp4 GEMM backend")


def _mlp(d=256, device="cpu", recipe=None, dtype=torch.float32):
    torch.manual_seed(0)
    # ReLU and a loss with a constant gradient are exact in any generated code, so a
    # compiled or graphed run must reproduce the eager bits exactly
    m = nn.Sequential(nn.Linear(d, 2 * d), nn.ReLU(), nn.Linear(2 * d, d), nn.ReLU(), nn.Linear(d, d))
    nn4.convert(m, recipe or nn4.get_recipe("nvfp4", backend="reference" if device == "cpu" else "auto"),
                exclude=[])
    return m.to(device=device, dtype=dtype)


def _grads(model):
    return {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def _assert_same(a, b, what):
    """Every gradient bit-identical, except bias gradients: those are plain sums over the
    tokens, which compiled code may add in another order (a few float32 ulps)."""
    assert a.keys() == b.keys()
    for k in a:
        if k.endswith("bias"):
            tol = 64 * torch.finfo(torch.float32).eps
            assert torch.allclose(a[k], b[k], rtol=tol, atol=tol * a[k].abs().max().item()), f"{what}: {k}"
        else:
            assert torch.equal(a[k], b[k]), f"{what}: {k} differs"


def _counters(model):
    return [int(m.sr_step) for m in model.modules() if isinstance(m, nn4.Linear)]


# ------------------------------------------------------------------------------ CUDA graphs
@cuda_only
def test_make_graphed_callables_matches_eager():
    dev = "cuda"
    model = _mlp(device=dev, dtype=torch.bfloat16)
    eager = copy.deepcopy(model)
    x0 = torch.randn(128, 256, device=dev, dtype=torch.bfloat16, requires_grad=True)
    graphed = torch.cuda.make_graphed_callables(model, (x0,))
    # the warm-up iterations of make_graphed_callables ran backward passes: start the eager
    # copy from the same counters
    for me, mg in zip(eager.modules(), model.modules()):
        if isinstance(me, nn4.Linear):
            me.sr_step.copy_(mg.sr_step)
    g = torch.randn(128, 256, device=dev, dtype=torch.bfloat16)
    for step in range(3):
        x = torch.randn(128, 256, device=dev, dtype=torch.bfloat16)
        outs = {}
        for name, m, call in (("eager", eager, eager), ("graphed", model, graphed)):
            m.zero_grad(set_to_none=True)
            xi = x.clone().requires_grad_()
            y = call(xi)
            (y.float() * g.float()).sum().backward()
            outs[name] = (y.detach().clone(), xi.grad.clone(), _grads(m))
        assert torch.equal(outs["eager"][0], outs["graphed"][0]), f"step {step}: forward differs"
        assert torch.equal(outs["eager"][1], outs["graphed"][1]), f"step {step}: dX differs"
        _assert_same(outs["eager"][2], outs["graphed"][2], f"step {step}")
        assert _counters(eager) == _counters(model)
    # the replays advanced the counters on the device: different steps drew different bits
    assert len(set(_counters(model))) == 1


@cuda_only
def test_compile_reduce_overhead_matches_eager():
    import torch._dynamo
    torch._dynamo.reset()
    dev = "cuda"
    model = _mlp(device=dev)
    eager = copy.deepcopy(model)
    compiled = torch.compile(model, mode="reduce-overhead", fullgraph=True)
    g = torch.randn(64, 256, device=dev)
    opt_e = torch.optim.SGD(eager.parameters(), lr=1e-3)
    opt_c = torch.optim.SGD(model.parameters(), lr=1e-3)
    for step in range(4):
        x = torch.randn(64, 256, device=dev)
        res = {}
        for name, m, call, opt in (("eager", eager, eager, opt_e), ("compiled", model, compiled, opt_c)):
            xi = x.clone().requires_grad_()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                y = call(xi)
            (y.float() * g).sum().backward()
            res[name] = (y.detach().clone(), xi.grad.clone(), _grads(m))
            opt.step()
            opt.zero_grad(set_to_none=True)
        assert torch.equal(res["eager"][0], res["compiled"][0]), f"step {step}: forward differs"
        assert torch.equal(res["eager"][1], res["compiled"][1]), f"step {step}: dX differs"
        _assert_same(res["eager"][2], res["compiled"][2], f"step {step}")
        assert _counters(eager) == _counters(model) == [step + 1] * 3
    for pe, pc in zip(eager.parameters(), model.parameters()):
        assert torch.equal(pe, pc)


# ------------------------------------------------------------------------------ activation checkpointing
class _Ckpt(nn.Module):
    def __init__(self, inner, how):
        super().__init__()
        self.inner, self.how = inner, how

    def forward(self, x):
        if self.how == "none":
            return self.inner(x)
        return checkpoint(self.inner, x, use_reentrant=self.how == "reentrant")


def _ckpt_run(how, device, compile_=False, steps=2):
    base = _mlp(d=64, device=device)
    model = _Ckpt(base, how)
    call = torch.compile(model, fullgraph=True) if compile_ else model
    torch.manual_seed(1)
    out = []
    for _ in range(steps):
        x = torch.randn(4, 24, 64, device=device, requires_grad=True)
        g = torch.randn(4, 24, 64, device=device)
        model.zero_grad(set_to_none=True)
        (call(x) * g).sum().backward()
        out.append((x.grad.clone(), _grads(model)))
    return out, _counters(model)


@pytest.mark.parametrize("how", ["reentrant", "non_reentrant"])
def test_checkpointing_reproduces_the_forward(how):
    """The recomputed forward reads the counter the original forward read (the backward
    advances it), so gradients are the same bits as without checkpointing."""
    ref, cref = _ckpt_run("none", "cpu")
    got, cgot = _ckpt_run(how, "cpu")
    assert cgot == cref == [2, 2, 2]
    for (dx_r, g_r), (dx_g, g_g) in zip(ref, got):
        assert torch.equal(dx_r, dx_g)
        _assert_same(g_r, g_g, how)


def test_checkpointing_under_compile():
    """torch.compile(fullgraph=True) of a checkpointed model: no dynamo flags needed, and the
    same bits as the eager model without checkpointing."""
    import torch._dynamo
    torch._dynamo.reset()
    try:
        torch.compile(lambda t: t.sin() + 1, fullgraph=True)(torch.randn(8))
    except Exception as e:  # no C++ compiler here
        pytest.skip(f"inductor unavailable: {type(e).__name__}: {str(e)[:200]}")
    torch._dynamo.reset()
    ref, cref = _ckpt_run("none", "cpu")
    got, cgot = _ckpt_run("non_reentrant", "cpu", compile_=True)
    assert cgot == cref
    for (dx_r, g_r), (dx_g, g_g) in zip(ref, got):
        assert torch.equal(dx_r, dx_g)
        _assert_same(g_r, g_g, "compiled + checkpoint")


@cuda_only
@pytest.mark.parametrize("how", ["reentrant", "non_reentrant"])
def test_checkpointing_cuda(how):
    ref, cref = _ckpt_run("none", "cuda")
    got, cgot = _ckpt_run(how, "cuda")
    assert cgot == cref
    for (dx_r, g_r), (dx_g, g_g) in zip(ref, got):
        assert torch.equal(dx_r, dx_g)
        _assert_same(g_r, g_g, how)
