"""Frozen NVFP4 layers (nvfp4.nn.FrozenLinear) and the built-in LoRA on top of them: the same
bits as the trainable Linear, the memory the master weight held is freed, the layout helpers
against the library, checkpoints (torch.load(weights_only=True), safetensors), the weight
stand-in's re-quantization, inference_mode, torch.compile and activation checkpointing.
CPU tests run the reference backend; the *_cuda variants skip without a GPU."""
import copy
import gc
import io
import os
import weakref

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

import nvfp4
import nvfp4.nn as nn4
from nvfp4.nn import ops
from nvfp4.nn.frozen import dequantize_weight, swizzle_bytes, transpose_weight, unswizzle_bytes

from conftest import assert_bytes_equal, assert_equal

HAS_CUDA = torch.cuda.is_available() and nvfp4.is_supported("cutlass", "cuda")
cuda_only = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU with an nvfp4 GEMM backend")

REF = nn4.get_recipe("nvfp4", backend="reference")


def _pair(k, n, bias, recipe=REF, index=0, device="cpu", seed=0):
    """A trainable nvfp4 Linear and a frozen copy of the same weight."""
    torch.manual_seed(seed)
    lin = nn.Linear(k, n, bias=bias).to(device)
    tr = nn4.Linear.from_linear(copy.deepcopy(lin), recipe, layer_index=index)
    fr = nn4.FrozenLinear.from_linear(copy.deepcopy(lin), recipe, layer_index=index)
    return lin, tr, fr


def _step(layer, x, dy):
    x = x.detach().clone().requires_grad_()
    y = layer(x)
    y.backward(dy)
    return y.detach(), x.grad


# ------------------------------------------------------------------------------ the same bits as nn4.Linear
@pytest.mark.parametrize("recipe", ["nvfp4", "no_sr", "no_rht"])
@pytest.mark.parametrize("shape", [(1, 64, 48), (3 * 13, 64, 48), (64, 32, 160), (7, 272, 16)])
@pytest.mark.parametrize("bias", [False, True])
def test_frozen_matches_trainable_bit_exact(recipe, shape, bias):
    """Forward and dX of a frozen layer are the trainable layer's bits, step after step (the
    trainable layer also computes dW, pads the token axis and quantizes dY both ways; none
    of that may change the rowwise operands)."""
    m, k, n = shape
    r = nn4.get_recipe(recipe, backend="reference", seed=3)
    _, tr, fr = _pair(k, n, bias, r, index=5)
    nn4.set_sr_step(tr, 11)
    nn4.set_sr_step(fr, 11)
    for step in range(3):
        x = torch.randn(m, k) * (10.0 ** (step - 1))
        dy = torch.randn(m, n)
        ya, dxa = _step(tr, x, dy)
        yb, dxb = _step(fr, x, dy)
        assert_equal(yb, ya, f"step {step}: y")
        assert_equal(dxb, dxa, f"step {step}: dX")
        assert int(fr.sr_step) == int(tr.sr_step) == 12 + step
        tr.weight.grad = None
        if bias:
            assert torch.equal(fr.bias, tr.bias) and fr.bias.grad is None  # the bias is frozen too


def test_frozen_bf16_input_and_autocast():
    _, tr, fr = _pair(64, 32, True)
    x = torch.randn(2, 9, 64, dtype=torch.bfloat16)
    dy = torch.randn(2, 9, 32, dtype=torch.bfloat16)
    ya, dxa = _step(tr, x, dy)
    yb, dxb = _step(fr, x, dy)
    assert_equal(yb, ya, "bf16 y")
    assert_equal(dxb, dxa, "bf16 dX")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert fr(torch.randn(4, 64)).dtype == torch.bfloat16


# ------------------------------------------------------------------------------ layout helpers vs the library
@pytest.mark.parametrize("nk", [(16, 16), (48, 64), (144, 272), (272, 32), (128, 512)])
@pytest.mark.parametrize("kind", ["randn", "zeros", "huge_tiny", "inf"])
def test_transpose_is_the_columnwise_quantization(nk, kind, rng):
    """transpose_weight(rowwise 2D quantization) == the library's columnwise output, every
    byte (padding of the swizzled scales included)."""
    n, k = nk
    w = torch.randn(n, k, generator=rng)
    if kind == "zeros":
        w.zero_()
    elif kind == "huge_tiny":
        w = w * torch.where(torch.rand(n, k, generator=rng) < 0.5, 1e30, 1e-30)
    elif kind == "inf":
        w[0, 0] = float("inf")
    q = ops.quantize(w, 1, 0, 0, 0, 0, 0, None, True, True)
    buf = transpose_weight(q[0], q[1].view(torch.uint8), q[2])
    assert buf.numel() == ops.packed_nbytes(k, n)
    d, s, a = ops.unpack(buf, k, n)
    assert_bytes_equal(d, q[3], "W^T codes")
    assert_bytes_equal(s, q[4], "W^T scales")
    assert_bytes_equal(a, q[5], "W^T amax")


@pytest.mark.parametrize("rc", [(1, 1), (7, 3), (128, 4), (130, 9), (300, 70)])
def test_swizzle_helpers_match_the_library(rc, rng):
    r, c = rc
    lin = torch.randint(0, 256, (r, c), dtype=torch.uint8, generator=rng)
    swz = swizzle_bytes(lin)
    assert_bytes_equal(swz, nvfp4.swizzle_scales(lin), "swizzled")
    assert_bytes_equal(unswizzle_bytes(swz, r, c), lin, "unswizzled")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_dequantize_matches_the_library(dtype, rng):
    w = torch.randn(80, 96, generator=rng) * torch.logspace(-6, 6, 96)
    w[3, :16] = 0
    t = nvfp4.quantize(w, block="2d")
    got = dequantize_weight(t.data, t.scales.view(torch.uint8), t.amax, dtype)
    assert_bytes_equal(got, t.dequantize(dtype), f"dequantize {dtype}")


# ------------------------------------------------------------------------------ memory
def _bytes(model):
    return sum(t.numel() * t.element_size() for t in list(model.parameters()) + list(model.buffers()))


def test_master_weight_is_freed():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512, bias=False), nn.ReLU(), nn.Linear(512, 256, bias=False)).bfloat16()
    w_ref = weakref.ref(model[0].weight)
    before = _bytes(model)
    nn4.freeze_fp4(model, REF, exclude=[])
    gc.collect()
    assert w_ref() is None, "the master weight is still referenced"
    assert not any(True for _ in model.parameters())
    after = _bytes(model)
    # per layer: codes N*K/2, scales roundup(N,128)*roundup(K/16,4), amax 4, counter 8 (the
    # zero-size dtype tracker holds nothing)
    want = (256 * 512 // 2 + 512 * 16 + 4 + 8) + (512 * 256 // 2 + 256 * 32 + 4 + 8)
    assert after == want, (after, want)
    assert after / before < 0.29  # NVFP4 is 0.28x of BF16
    assert model[0].weight_nbytes == 256 * 512 // 2 + 512 * 16 + 4


def test_optimizer_reference_is_the_only_thing_keeping_it():
    lin = nn.Linear(64, 64)
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)
    ref = weakref.ref(lin.weight)
    nn4.FrozenLinear.from_linear(lin, REF)
    gc.collect()
    assert ref() is not None  # the optimizer still holds it (documented: freeze first)
    del opt
    gc.collect()
    assert ref() is None


# ------------------------------------------------------------------------------ checkpoints
def _model(seed=0, bias=True):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(64, 96, bias=bias), nn.GELU(), nn.Linear(96, 48, bias=bias))


def test_state_dict_is_plain_tensors_and_round_trips():
    model = nn4.freeze_fp4(_model(), REF, exclude=[])
    nn4.set_sr_step(model, 9)
    sd = model.state_dict()
    assert set(sd) == {f"{i}.{k}" for i in (0, 2) for k in ("weight_data", "weight_scales", "weight_amax", "bias",
                                                               "sr_step")}
    assert sd["0.weight_data"].dtype == torch.uint8 and tuple(sd["0.weight_data"].shape) == (96, 32)
    assert sd["0.weight_scales"].dtype == torch.uint8 and tuple(sd["0.weight_scales"].shape) == (128, 4)
    assert sd["0.weight_amax"].dtype == torch.float32 and tuple(sd["0.weight_amax"].shape) == (1,)
    assert sd["0.sr_step"].dtype == torch.int64 and int(sd["0.sr_step"]) == 9
    # the padding of the swizzled scales is written (zero), so saved bytes are deterministic
    pad = unswizzle_bytes(sd["0.weight_scales"], 128, 4)[96:]
    assert not pad.any()
    buf = io.BytesIO()
    torch.save(sd, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=True)
    fresh = nn.Sequential(nn4.FrozenLinear(64, 96, recipe=REF), nn.GELU(), nn4.FrozenLinear(96, 48, recipe=REF,
                                                                                            layer_index=1))
    fresh.load_state_dict(loaded)
    x = torch.randn(5, 64)
    assert_equal(fresh(x), model(x), "torch.load(weights_only=True) round trip")
    assert int(fresh[0].sr_step) == 9


def test_safetensors_save_load_fresh_model(tmp_path):
    pytest.importorskip("safetensors")
    model = nn4.freeze_fp4(_model(), REF, exclude=[])
    x = torch.randn(4, 7, 64, requires_grad=True)
    want = model(x)
    want.sum().backward()
    want_dx = x.grad.clone()
    p = str(tmp_path / "frozen.safetensors")
    nn4.save(model, p)
    # deterministic contents: the same model saves the same tensor bytes (the JSON header's
    # metadata order is the safetensors library's choice)
    p2 = str(tmp_path / "again.safetensors")
    nn4.save(nn4.freeze_fp4(_model(), REF, exclude=[]), p2)
    nn4.set_sr_step(model, 0)
    nn4.save(model, p)

    def data_section(path):
        with open(path, "rb") as f:
            b = f.read()
        return b[8 + int.from_bytes(b[:8], "little"):]

    assert data_section(p) == data_section(p2)
    # a freshly built (unfrozen, other weights) model takes the frozen layers from the file
    fresh = _model(seed=1)
    res = nn4.load(fresh, p)
    assert not res.missing_keys and not res.unexpected_keys
    assert nn4.frozen_layers(fresh) == ["0", "2"] and fresh[2].layer_index == 1
    x2 = x.detach().clone().requires_grad_()
    got = fresh(x2)
    got.sum().backward()
    assert_equal(got, want, "safetensors round trip: y")
    assert_equal(x2.grad, want_dx, "safetensors round trip: dX")
    with pytest.raises(ValueError, match="path"):
        from safetensors.torch import save_file
        q = str(tmp_path / "plain.safetensors")
        save_file({"a": torch.zeros(2)}, q)
        nn4.load(fresh, q)


def test_load_unfrozen_checkpoint_quantizes():
    lin = nn.Linear(64, 32)
    fr = nn4.FrozenLinear(64, 32, recipe=REF)
    res = fr.load_state_dict(lin.state_dict())
    assert not res.missing_keys and not res.unexpected_keys
    want = nn4.FrozenLinear.from_linear(copy.deepcopy(lin), REF)
    for k in ("weight_data", "weight_scales", "weight_amax", "bias"):
        assert_bytes_equal(getattr(fr, k).detach(), getattr(want, k).detach(), k)


def test_dtype_moves_keep_the_amax():
    model = nn4.freeze_fp4(_model(), REF, exclude=[])
    amax = model[0].weight_amax.clone()
    model.to(torch.bfloat16)
    assert model[0].weight_amax.dtype == torch.float32 and torch.equal(model[0].weight_amax, amax)
    assert model[0].weight_dtype == torch.bfloat16 and model[0].weight.dtype == torch.bfloat16
    assert model[0].bias.dtype == torch.bfloat16
    model.half().float()
    assert torch.equal(model[0].weight_amax, amax) and model[0].weight_dtype == torch.float32


# ------------------------------------------------------------------------------ the weight stand-in
def test_weight_reads_decode_and_writes_requantize():
    torch.manual_seed(0)
    lin = nn.Linear(64, 48, bias=False)
    fr = nn4.FrozenLinear.from_linear(copy.deepcopy(lin), REF)
    w = fr.weight
    assert isinstance(w, nn4.FP4Weight) and tuple(w.shape) == (48, 64) and not w.requires_grad
    dec = fr.dequantize(torch.float32)
    assert torch.equal(w.clone(), dec) and torch.equal(w * 2, dec * 2) and torch.equal(w.t().contiguous(), dec.t())
    delta = torch.randn(48, 64) * 0.01

    def expect(v):
        return nn4.FrozenLinear.from_weight(v, recipe=REF)

    def check(what, ref):
        for k in ("weight_data", "weight_scales", "weight_amax"):
            assert_bytes_equal(getattr(fr, k), getattr(ref, k), f"{what}: {k}")

    # inside requantize_writes(): every write is quantized into the layer, its error recorded
    with nn4.requantize_writes(warn=False) as errors:
        fr.weight.data += delta  # what peft's merge does
        check("data +=", expect(dec + delta))
        dec2 = fr.dequantize(torch.float32)
        fr.weight.data -= delta  # peft's unmerge: a re-quantization again (not the original bytes)
        check("data -=", expect(dec2 - delta))
        fr.weight.copy_(lin.weight)
        check("copy_", expect(lin.weight.detach()))
        fr.weight = lin.weight * 2
        check("assignment", expect(lin.weight.detach() * 2))
        fr.weight.data = lin.weight.detach()  # peft's safe_merge assigns .data
        check(".data =", expect(lin.weight.detach()))
        with pytest.raises(NotImplementedError, match="frozen NVFP4 weight"):
            torch.add(lin.weight.detach(), 1.0, out=fr.weight)
        with pytest.raises(ValueError, match="weight"):
            fr.weight = torch.zeros(3, 3)
    assert len(errors) == 5
    d = expect(dec + delta).dequantize(torch.float32)
    assert errors[0][1] == pytest.approx(((d - (dec + delta)).norm() / delta.norm()).item(), rel=1e-5)
    assert isinstance(fr, nn4.FrozenLinear)

    # by default a write keeps what was written: the layer becomes a frozen nn.Linear
    for write in ("data +=", "copy_", "assignment", ".data ="):
        fr = nn4.FrozenLinear.from_linear(copy.deepcopy(lin).to(torch.bfloat16), REF)
        hooked = []
        fr.register_forward_hook(lambda *a: hooked.append(1))
        dec = fr.dequantize(torch.float32)
        if write == "data +=":
            fr.weight.data += delta
            want = (dec + delta).bfloat16()
        elif write == "copy_":
            fr.weight.copy_(lin.weight)
            want = lin.weight.detach().bfloat16()
        elif write == "assignment":
            fr.weight = lin.weight * 2
            want = (lin.weight.detach() * 2).bfloat16()
        else:
            fr.weight.data = lin.weight.detach()
            want = lin.weight.detach().bfloat16()
        assert type(fr) is nn.Linear and fr.weight.dtype == torch.bfloat16 and not fr.weight.requires_grad, write
        assert torch.equal(fr.weight, want), write
        assert set(fr.state_dict()) == {"weight"}, write
        fr(torch.randn(2, 64, dtype=torch.bfloat16))
        assert hooked == [1], write


# ------------------------------------------------------------------------------ inference mode
def test_model_built_under_inference_mode():
    """Built and frozen under inference_mode: forward in and out of it, and a LoRA step
    (the backward advances the frozen layers' counters)."""
    torch.manual_seed(0)
    with torch.inference_mode():
        model = _model()
        nn4.freeze_fp4(model, REF, exclude=[])
        x = torch.randn(3, 64)
        y_inf = model(x)
    with torch.no_grad():
        assert_equal(model(x), y_inf, "no_grad")
    assert_equal(model(x), y_inf, "plain")
    nn4.add_lora(model, rank=4)
    opt = torch.optim.SGD(nn4.lora_parameters(model), lr=0.1)
    for _ in range(2):
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad()
    assert [int(m.sr_step) for m in model.modules() if isinstance(m, nn4.FrozenLinear)] == [0, 2]
    with torch.inference_mode():
        model(x)


def test_trainable_linear_built_under_inference_mode_backward():
    """A trainable nvfp4 Linear converted under inference_mode still trains: its counter is
    a normal tensor the backward can advance."""
    with torch.inference_mode():
        model = nn4.convert(_model(), REF, exclude=[])
    model(torch.randn(3, 64)).sum().backward()
    assert all(int(m.sr_step) == 1 for m in model.modules() if isinstance(m, nn4.Linear))


# ------------------------------------------------------------------------------ built-in LoRA
def _lora_model(seed=0, dropout=0.0, rank=4, device="cpu"):
    torch.manual_seed(seed)
    m = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 64))
    nn4.freeze_fp4(m, REF if device == "cpu" else "nvfp4", exclude=[], device=device)
    nn4.add_lora(m, rank=rank, alpha=8, dropout=dropout, dtype=torch.float32)
    return m.to(device)


def test_builtin_lora_trains_merges_and_unmerges():
    model = _lora_model()
    assert all(n.endswith(("lora_A", "lora_B")) for n, p in model.named_parameters() if p.requires_grad)
    torch.manual_seed(1)
    x = torch.randn(32, 64)
    target = torch.randn(32, 64)
    opt = torch.optim.Adam(nn4.lora_parameters(model), lr=1e-2)
    losses = []
    for _ in range(8):
        loss = F.mse_loss(model(x), target)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < losses[0] * 0.95, losses
    assert all(p.grad is None for n, p in model.named_parameters() if not n.endswith(("lora_A", "lora_B")))
    lora = model[2]
    assert isinstance(lora, nn4.LoRALinear) and lora.lora_B.abs().sum() > 0
    base = lora.base
    orig = [t.clone() for t in (base.weight_data, base.weight_scales, base.weight_amax)]
    want_hp = base.dequantize(torch.float32) + lora.delta_weight()
    want = nn4.FrozenLinear.from_weight(want_hp, base.bias, recipe=REF, layer_index=base.layer_index)
    with torch.no_grad():
        y_adapter = model(x)
        # the default: the base becomes an nn.Linear holding Ŵ + ΔW (the fine-tune exported
        # in high precision); unmerge() brings the frozen base back
        lora.merge()
        assert type(lora.base) is nn.Linear and torch.equal(lora.base.weight, want_hp)
        lora.unmerge()
        assert lora.base is base
        assert_equal(model(x), y_adapter, "unmerged forward")
        with pytest.warns(nn4.FP4MergeWarning, match="stored a written weight in NVFP4 again"):
            ratio = lora.merge(fp4=True)
        assert ratio > 0
        for k in ("weight_data", "weight_scales", "weight_amax"):
            assert_bytes_equal(getattr(base, k), getattr(want, k), f"merged {k}")
        y_merged = model(x)
        # merging re-quantizes Ŵ + ΔW: a fresh FP4 rounding of every weight of the merged
        # layer, so the outputs agree to about NVFP4's relative error (0.096 measured with
        # these seeds), not bit for bit (the merged bytes are checked exactly above)
        rel = ((y_merged - y_adapter).norm() / y_adapter.norm()).item()
        assert rel < 0.2, rel
        lora.unmerge()
        for t, o in zip((base.weight_data, base.weight_scales, base.weight_amax), orig):
            assert_bytes_equal(t, o, "unmerged")
        assert_equal(model(x), y_adapter, "unmerged forward")
        for fp4 in (False, True):
            each = copy.deepcopy(model)
            for m in each.modules():
                if isinstance(m, nn4.LoRALinear):
                    m.merge(fp4=fp4, warn=False)
            if fp4:
                with pytest.warns(nn4.FP4MergeWarning, match=r"^nvfp4: 3 frozen layer"):
                    merged = nn4.merge_and_unload(copy.deepcopy(model), fp4=True)
            else:
                merged = nn4.merge_and_unload(copy.deepcopy(model))
            assert not any(isinstance(m, nn4.LoRALinear) for m in merged.modules())
            assert len(nn4.frozen_layers(merged)) == (3 if fp4 else 0)
            assert_equal(merged(x), each(x), f"merge_and_unload fp4={fp4}")
    sd = nn4.lora_state_dict(model)
    assert set(sd) == {f"{i}.{k}" for i in (0, 2, 4) for k in ("lora_A", "lora_B", "base.sr_step")}


def _grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


class _Ckpt(nn.Module):
    def __init__(self, inner, how):
        super().__init__()
        self.inner, self.how = inner, how

    def forward(self, x):
        if self.how == "none":
            return self.inner(x)
        return checkpoint(self.inner, x, use_reentrant=self.how == "reentrant")


def _run(model, steps=2, call=None, device="cpu"):
    call = model if call is None else call
    out = []
    torch.manual_seed(5)
    for _ in range(steps):
        x = torch.randn(3, 20, 64, device=device, requires_grad=True)
        g = torch.randn(3, 20, 64, device=device)
        (call(x) * g).sum().backward()
        out.append((x.grad.clone(), _grads(model)))
        model.zero_grad(set_to_none=True)
    return out


def _checkpointed_case(how, device):
    ref = _run(_Ckpt(_lora_model(dropout=0.1, device=device), "none"), device=device)
    got = _run(_Ckpt(_lora_model(dropout=0.1, device=device), how), device=device)
    for step, ((dx_r, g_r), (dx_g, g_g)) in enumerate(zip(ref, got)):
        assert_equal(dx_g, dx_r, f"step {step}: dX")
        assert g_r.keys() == g_g.keys() and len(g_r) == 6
        for k in g_r:
            assert_equal(g_g[k], g_r[k], f"step {step}: {k}")


@pytest.mark.parametrize("how", ["reentrant", "non_reentrant"])
def test_checkpointed_lora_is_plain_bit_for_bit(how):
    """A frozen-base LoRA under activation checkpointing (dropout on: the RNG state is
    replayed) computes the same gradients as without."""
    _checkpointed_case(how, "cpu")


def _compile_or_skip(backend):
    import torch._dynamo
    torch._dynamo.reset()
    if backend == "inductor":
        try:
            torch.compile(lambda t: t.sin() + 1, fullgraph=True)(torch.randn(8))
        except Exception as e:  # no C++ compiler here
            pytest.skip(f"inductor unavailable: {type(e).__name__}: {str(e)[:200]}")
        torch._dynamo.reset()


def _compiled_case(backend, ckpt, device):
    from torch._dynamo.utils import counters
    counters.clear()
    eager = _Ckpt(_lora_model(device=device), "none")
    model = _Ckpt(_lora_model(device=device), "non_reentrant" if ckpt else "none")
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    ref = _run(eager, steps=3, device=device)
    got = _run(model, steps=3, call=compiled, device=device)
    for step, ((dx_r, g_r), (dx_g, g_g)) in enumerate(zip(ref, got)):
        assert_equal(dx_g, dx_r, f"step {step}: dX")
        for k in g_r:
            if k.endswith("lora_A") or k.endswith("lora_B"):
                # adapters: plain BF16/FP32 matmuls that inductor may order differently
                tol = 1e-5 if backend == "inductor" else 0.0
                assert torch.allclose(g_g[k], g_r[k], rtol=tol, atol=tol), f"step {step}: {k}"
    cnt = [int(m.sr_step) for m in model.modules() if isinstance(m, nn4.FrozenLinear)]
    assert cnt == [int(m.sr_step) for m in eager.modules() if isinstance(m, nn4.FrozenLinear)] == [3, 3, 3]
    assert not counters["graph_break"], dict(counters["graph_break"])
    assert counters["stats"]["unique_graphs"] == 1


@pytest.mark.parametrize("backend,ckpt", [("aot_eager", False), ("aot_eager", True), ("inductor", True)])
def test_compiled_frozen_lora_matches_eager(backend, ckpt):
    """torch.compile(fullgraph=True) of a frozen-base LoRA model (optionally checkpointed):
    no graph break, no recompilation as the counters move, eager's bits. The model is
    ReLU-only, so generated elementwise code cannot round differently."""
    _compile_or_skip(backend)
    _compiled_case(backend, ckpt, "cpu")


def test_compiled_inference_forward():
    _compile_or_skip("aot_eager")
    model = nn4.freeze_fp4(_model(), REF, exclude=[])
    x = torch.randn(6, 64)
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    with torch.inference_mode():
        assert_equal(compiled(x), model(x), "compiled W4A4 forward")


# ------------------------------------------------------------------------------ precision, errors
def test_precision_bf16_runs_the_decoded_weight():
    model = nn4.freeze_fp4(_model(), REF, exclude=[])
    x = torch.randn(4, 64, dtype=torch.bfloat16)
    q = model(x)
    assert nn4.set_precision(model, "bf16") == 2
    want = F.linear(F.gelu(F.linear(x, model[0].dequantize(torch.bfloat16), model[0].bias.bfloat16())),
                    model[2].dequantize(torch.bfloat16), model[2].bias.bfloat16())
    assert_equal(model(x), want, "bf16 precision")
    nn4.set_precision(model, "nvfp4")
    assert_equal(model(x), q, "back to nvfp4")


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="recipe"):
        nn4.FrozenLinear.from_linear(nn.Linear(32, 32), nn4.get_recipe("no_2d"))
    with pytest.raises(ValueError, match="recipe"):
        nn4.FrozenLinear.from_linear(nn.Linear(32, 32), "bf16")
    with pytest.raises(ValueError, match="in_features"):
        nn4.FrozenLinear(24, 32)
    with pytest.raises(ValueError, match="multiples of 16"):
        nn4.FrozenLinear.from_linear(nn.Linear(24, 32))
    with pytest.raises(TypeError, match="module"):
        nn4.FrozenLinear.from_linear(nn.Conv1d(3, 3, 1))
    fr = nn4.FrozenLinear.from_linear(nn.Linear(32, 32), REF)
    with pytest.raises(TypeError, match="module"):
        nn4.FrozenLinear.from_linear(fr)
    with pytest.raises(TypeError, match=r"^x: "):
        fr(torch.ones(2, 32, dtype=torch.float64))
    with pytest.raises(ValueError, match="meta"):
        nn4.FrozenLinear.from_linear(nn.Linear(32, 32, device="meta"))
    with pytest.raises(ValueError, match="rank"):
        nn4.LoRALinear(fr, rank=0)


# ------------------------------------------------------------------------------ GPU variants
@cuda_only
@pytest.mark.parametrize("shape", [(1, 64, 64), (3 * 13, 256, 160), (2048, 1024, 512)])
def test_frozen_matches_trainable_cuda(shape):
    m, k, n = shape
    r = nn4.get_recipe("nvfp4", backend="auto")
    torch.manual_seed(0)
    lin = nn.Linear(k, n, device="cuda")
    tr = nn4.Linear.from_linear(copy.deepcopy(lin), r, layer_index=2)
    fr = nn4.FrozenLinear.from_linear(copy.deepcopy(lin), r, layer_index=2)
    for step in range(2):
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        dy = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        ya, dxa = _step(tr, x, dy)
        yb, dxb = _step(fr, x, dy)
        assert_equal(yb, ya, f"cuda step {step}: y")
        assert_equal(dxb, dxa, f"cuda step {step}: dX")
        tr.weight.grad = None
    assert int(fr.sr_step) == int(tr.sr_step) == 2


@cuda_only
@pytest.mark.parametrize("how", ["reentrant", "non_reentrant"])
def test_checkpointed_lora_cuda(how):
    _checkpointed_case(how, "cuda")


@cuda_only
@pytest.mark.parametrize("ckpt", [False, True])
def test_compiled_frozen_lora_cuda(ckpt):
    import torch._dynamo
    torch._dynamo.reset()
    _compiled_case("inductor", ckpt, "cuda")


@cuda_only
def test_transpose_and_dequantize_cuda(rng):
    w = torch.randn(272, 144, generator=rng).cuda()
    q = ops.quantize(w, 1, 0, 0, 0, 0, 0, None, True, True)
    d, s, a = ops.unpack(transpose_weight(q[0], q[1].view(torch.uint8), q[2]), 144, 272)
    assert_bytes_equal(d, q[3], "cuda W^T codes")
    assert_bytes_equal(s, q[4], "cuda W^T scales")
    t = nvfp4.quantize(w, block="2d")
    assert_bytes_equal(dequantize_weight(t.data, t.scales.view(torch.uint8), t.amax, torch.bfloat16),
                       t.dequantize(torch.bfloat16), "cuda dequantize")


@cuda_only
def test_freeze_onto_the_gpu_frees_memory():
    torch.cuda.empty_cache()
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(1024, 1024, bias=False) for _ in range(4)]).bfloat16()
    base = torch.cuda.memory_allocated()
    nn4.freeze_fp4(model, "nvfp4", exclude=[], device="cuda")  # quantized on the GPU, from CPU weights
    used = torch.cuda.memory_allocated() - base
    want = 4 * (1024 * 512 + 1024 * 64 + 4)
    assert used < want * 1.1 + 4 * 1024, (used, want)  # the allocator rounds small buffers up
    torch.manual_seed(0)
    model_gpu = nn.Sequential(*[nn.Linear(1024, 1024, bias=False) for _ in range(4)]).bfloat16().cuda()
    with_master = torch.cuda.memory_allocated() - base - used
    nn4.freeze_fp4(model_gpu, "nvfp4", exclude=[])
    gc.collect()
    freed = with_master - (torch.cuda.memory_allocated() - base - used)
    assert freed >= 4 * 1024 * 1024 * 2 - want * 1.1 - 4 * 1024, freed
    x = torch.randn(64, 1024, device="cuda", dtype=torch.bfloat16)
    assert torch.equal(model(x), model_gpu(x))
