"""The FP8 baseline layer on a CUDA GPU: the torch._scaled_mm path against the FP32 emulation
of the same quantized operands, within a stated bound; the casts (NaN signs aside) and the delayed-scaling
state bit for bit against the CPU; no host synchronization. Skipped without a GPU; on a GPU without
FP8 (compute capability < 8.9) only the error is checked.

Bound, per output element, with A and B the two dequantized operands of the GEMM:
    |gpu - emulation| <= 2^-7 |emulation| + c * (|A| |B|)
2^-7 is one BF16 ulp (both sides round their FP32 result to BF16 once); c covers the tensor
cores' FP8 accumulation (products exact, sums kept in reduced precision between promotions
to FP32): c = 2^-10 with exact (split) accumulation, 2^-7 with use_fast_accum. A wrong scale,
operand or transposition is off by O(1) relative error and fails it.
"""
from __future__ import annotations

import pytest
import torch

from nvfp4.nn import fp8 as F8
from nvfp4.nn.fp8 import FP8Linear

if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

DEV = torch.device("cuda")
OK, WHY = F8.fp8_supported(DEV)
E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


def test_error_without_fp8_tensor_cores():
    if OK:
        pytest.skip("this GPU has FP8")
    layer = FP8Linear(32, 32).to(DEV)
    with pytest.raises(RuntimeError, match="8.9"):
        layer(torch.randn(4, 32, device=DEV))


needs_fp8 = pytest.mark.skipif(not OK, reason=WHY or "fp8")


def _pair(k, n, recipe="fp8", bias=True, **kw):
    """The same layer twice: the _scaled_mm path and the emulation."""
    g = torch.Generator().manual_seed(k * 1000 + n)
    fast = FP8Linear(k, n, bias=bias, recipe=F8.get_fp8_recipe(recipe).replace(**kw)).to(DEV)
    emu = FP8Linear(k, n, bias=bias, recipe=F8.get_fp8_recipe(recipe).replace(emulate=True, **kw)).to(DEV)
    with torch.no_grad():
        w = torch.randn(n, k, generator=g) * 0.05
        fast.weight.copy_(w)
        emu.weight.copy_(w)
        if bias:
            b = torch.randn(n, generator=g)
            fast.bias.copy_(b)
            emu.bias.copy_(b)
    return fast, emu


def _check(got, want, a_abs, b_abs, c, what):
    bound = 2.0 ** -7 * want.abs().double() + c * (a_abs.double() @ b_abs.double()) + 1e-30
    err = (got.double() - want.double()).abs()
    assert (err <= bound).all(), f"{what}: max err {err.max().item():.3g}, worst ratio {(err / bound).max().item():.3g}"


def _operands(layer, x2, dy2):
    """Dequantized |X|, |W|, |dY| as the layer quantizes them (current scaling)."""
    def dq(t, dtype):
        s = F8.current_scale(F8.tensor_amax(t), F8.fp8_max(dtype))
        return F8.dequantize_fp8(F8.quantize_fp8(t, s, dtype), 1 / s).abs()
    return dq(x2, E4M3), dq(layer.weight.detach(), E4M3), dq(dy2, E5M2)


@needs_fp8
@pytest.mark.parametrize("m,k,n", [(1, 32, 16), (37, 64, 48), (128, 256, 512), (1000, 1024, 768),
                                   (16384, 2048, 8192)], ids=lambda v: str(v))
@pytest.mark.parametrize("fast_accum", [True, False], ids=["fast", "exact"])
def test_scaled_mm_matches_emulation(m, k, n, fast_accum):
    fast, emu = _pair(k, n, fast_accum_fprop=fast_accum)
    g = torch.Generator().manual_seed(m)
    x = (torch.randn(m, k, generator=g) * 2).to(DEV, torch.bfloat16)
    dy = torch.randn(m, n, generator=g).to(DEV, torch.bfloat16)
    outs = []
    for layer in (fast, emu):
        xi = x.clone().requires_grad_(True)
        y = layer(xi)
        y.backward(dy)
        outs.append((y.detach(), xi.grad, layer.weight.grad, layer.bias.grad))
    (y, dx, dw, db), (ye, dxe, dwe, dbe) = outs
    ax, aw, ady = _operands(fast, x, dy)
    _check(y, ye, ax, aw.t(), 2.0 ** -7 if fast_accum else 2.0 ** -10, "y")
    _check(dx, dxe, ady, aw, 2.0 ** -10, "dx")
    # dW is FP32: no BF16 rounding, accumulation only
    err = (dw.double() - dwe.double()).abs()
    bound = 2.0 ** -10 * (ady.t().double() @ ax.double()) + 2.0 ** -20 * dwe.abs().double() + 1e-30
    assert (err <= bound).all(), f"dw: worst ratio {(err / bound).max().item():.3g}"
    assert torch.equal(db, dbe)


@needs_fp8
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["f32", "bf16", "f16"])
@pytest.mark.parametrize("fmt", [E4M3, E5M2], ids=["e4m3", "e5m2"])
def test_cast_bit_exact_with_cpu(dtype, fmt):
    g = torch.Generator().manual_seed(3)
    x = (torch.randn(513, 300, generator=g) * torch.exp2(torch.randint(-12, 12, (513, 1), generator=g).float()))
    x[0, 0] = float("nan")
    x[1, 1] = 1e30 if dtype != torch.float16 else 6e4
    x = x.to(dtype)
    s = F8.current_scale(F8.tensor_amax(x[2:]), F8.fp8_max(fmt))
    want = F8.quantize_fp8(x, s, fmt)
    for compiled in (False, True):
        got = F8.quantize_fp8(x.to(DEV), s.to(DEV), fmt, compiled=compiled).cpu()
        # NaN in, NaN out, at the same places; the NaN's sign bit is unspecified (the CPU's
        # BF16 arithmetic and the GPU's propagate it differently); every other byte equal
        nan_g, nan_w = torch.isnan(got.float()), torch.isnan(want.float())
        assert torch.equal(nan_g, nan_w) and bool(nan_w[0, 0]), f"compiled={compiled}: NaN positions"
        gb, wb = got.view(torch.uint8), want.view(torch.uint8)
        assert torch.equal(gb[~nan_w], wb[~nan_w]), f"compiled={compiled}"
    assert not F8._compile_failed, "the compiled cast fell back to unfused ops (see the RuntimeWarning)"
    assert torch.equal(F8.tensor_amax(x[2:].to(DEV)).cpu(), F8.tensor_amax(x[2:]))
    assert torch.isnan(F8.tensor_amax(x.to(DEV))).item()


@needs_fp8
@pytest.mark.parametrize("shape", [(513, 304), (16, 4096), (4096, 16), (1, 48), (33, 1)])
@pytest.mark.parametrize("fmt", [E4M3, E5M2], ids=["e4m3", "e5m2"])
def test_cast_transposed_pair(shape, fmt):
    """quantize_fp8(transposed=True): q equal to the CPU cast, qᵀ contiguous and equal to q
    transposed byte for byte, compiled (one kernel) and not."""
    g = torch.Generator().manual_seed(5)
    x = (torch.randn(*shape, generator=g) * 30).bfloat16()
    x.view(-1)[0] = float("nan")
    s = F8.current_scale(F8.tensor_amax(x.view(-1)[1:]), F8.fp8_max(fmt))
    want = F8.quantize_fp8(x, s, fmt).view(torch.uint8)
    nan = torch.isnan(want.view(fmt).float())
    for compiled in (False, True):
        q, qt = F8.quantize_fp8(x.to(DEV), s.to(DEV), fmt, compiled=compiled, transposed=True)
        assert q.dtype == fmt and qt.dtype == fmt and qt.is_contiguous()
        assert tuple(qt.shape) == (shape[1], shape[0])
        qb, qtb = q.cpu().view(torch.uint8), qt.cpu().view(torch.uint8)
        assert torch.equal(qb[~nan], want[~nan]), f"compiled={compiled}: q differs from the CPU cast"
        assert torch.equal(torch.isnan(q.cpu().float()), nan)
        assert torch.equal(qtb, qb.t()), f"compiled={compiled}: qT is not q transposed"
    assert not F8._compile_failed, "the compiled cast fell back to unfused ops (see the RuntimeWarning)"
    with pytest.raises(ValueError, match="t: transposed"):
        F8.quantize_fp8(x.to(DEV).reshape(1, *shape), s.to(DEV), fmt, transposed=True)


@needs_fp8
@pytest.mark.parametrize("algo", ["max", "most_recent"])
def test_delayed_state_matches_cpu(algo):
    recipe = F8.get_fp8_recipe("fp8_delayed").replace(amax_history_len=5, amax_compute_algo=algo, margin=1.0)
    cpu = FP8Linear(64, 32, recipe=recipe.replace(emulate=True))
    gpu = FP8Linear(64, 32, recipe=recipe)
    gpu.load_state_dict(cpu.state_dict())
    gpu.to(DEV)
    g = torch.Generator().manual_seed(5)
    for step in range(8):
        x = torch.randn(40, 64, generator=g) * 2.0 ** (step % 5 - 2)
        dy = torch.randn(40, 32, generator=g) * 2.0 ** (3 - step % 4)
        cpu(x).backward(dy)
        gpu(x.to(DEV)).backward(dy.to(DEV))
        for name in F8._FP8_BUFFERS:
            assert torch.equal(getattr(gpu, name).cpu(), getattr(cpu, name)), f"step {step}: {name}"


@needs_fp8
@pytest.mark.parametrize("recipe", ["fp8", "fp8_delayed"])
def test_no_host_synchronization(recipe):
    layer = FP8Linear(256, 512, recipe=recipe).to(DEV)
    x = torch.randn(300, 256, device=DEV, requires_grad=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        layer(x).sum().backward()  # warm-up: compiles the fused cast
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            y = layer(x)
        y.backward(torch.ones_like(y))
    finally:
        torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()
    assert torch.isfinite(layer.weight.grad).all()


@needs_fp8
def test_autocast_training_step_runs_and_learns():
    torch.manual_seed(0)
    model = torch.nn.Sequential(FP8Linear(128, 256, recipe="fp8_delayed"), torch.nn.GELU(),
                                FP8Linear(256, 128, recipe="fp8")).to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(512, 128, device=DEV)
    target = torch.randn(512, 128, device=DEV) * 0.1
    losses = []
    for _ in range(60):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.mse_loss(model(x).float(), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses[::10]
    assert not F8._compile_failed, "the compiled FP8 cast fell back to unfused ops during training"
