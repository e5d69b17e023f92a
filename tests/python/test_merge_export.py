"""Exporting a LoRA fine-tune of a frozen NVFP4 base: merge_and_unload (built-in and peft)
keeps the update by default, in high precision: the merged weight is Ŵ + ΔW rounded once to
the base's dtype, and the merged model computes what the unmerged one computes with its bases
in high precision, within that rounding. fp4=True / requantize_writes() stores Q(Ŵ + ΔW)
instead and warns with the measured error. Tiny Llama from a config; CPU, reference backend."""
import copy

import pytest
import torch
from torch import nn

import nvfp4.nn as nn4

transformers = pytest.importorskip("transformers")

REF = nn4.get_recipe("nvfp4", backend="reference")
PROJ = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def frozen_llama(dtype, seed=0):
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                   tie_word_embeddings=False, pad_token_id=0)
    model = transformers.LlamaForCausalLM(cfg).to(dtype).eval()
    return nn4.freeze_fp4(model, REF)


def with_adapters(kind, dtype, seed=0):
    model = frozen_llama(dtype, seed)
    g = torch.Generator().manual_seed(seed + 1)
    if kind == "builtin":
        nn4.add_lora(model, rank=8, alpha=16, dtype=dtype)
        for m in model.modules():
            if isinstance(m, nn4.LoRALinear):
                with torch.no_grad():  # a trained adapter's size: the update ~ the weights' scale
                    m.lora_B.copy_(torch.randn(m.lora_B.shape, generator=g) * 0.05)
        return model
    peft = pytest.importorskip("peft")
    pm = peft.get_peft_model(model, peft.LoraConfig(r=8, lora_alpha=16, target_modules=PROJ, lora_dropout=0.0))
    for m in pm.modules():
        if isinstance(m, peft.tuners.lora.Linear):
            with torch.no_grad():
                w = m.lora_B["default"].weight
                w.copy_(torch.randn(w.shape, generator=g) * 0.05)
    return pm.to(dtype) if dtype != torch.float32 else pm


def deltas(model):
    """{layer name in the merged model: (Ŵ in float32, ΔW in float32)}."""
    out = {}
    for name, m in model.named_modules():
        if isinstance(m, nn4.LoRALinear):
            out[name] = (m.base.dequantize(torch.float32), m.delta_weight())
        elif hasattr(m, "get_delta_weight") and isinstance(getattr(m, "base_layer", None), nn4.FrozenLinear):
            out[name.replace("base_model.model.", "", 1)] = (m.base_layer.dequantize(torch.float32),
                                                              m.get_delta_weight("default").float())
    return out


def merge(model, kind, **kw):
    model = copy.deepcopy(model)
    return nn4.merge_and_unload(model, **kw) if kind == "builtin" else model.merge_and_unload(**kw)


def logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits.float()


def rel(a, b):
    return ((a - b).norm() / b.norm()).item()


@pytest.mark.parametrize("kind", ["builtin", "peft"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_high_precision_export_is_the_default(kind, dtype):
    model = with_adapters(kind, dtype)
    ids = torch.randint(1, 128, (2, 16), generator=torch.Generator().manual_seed(3))
    want = deltas(model)
    assert len(want) == 14
    merged = merge(model, kind)
    assert not nn4.frozen_layers(merged) and not any(isinstance(m, nn4.LoRALinear) for m in merged.modules())
    for name, (w_hat, dw) in want.items():
        m = merged.get_submodule(name)
        assert type(m) is nn.Linear and m.weight.dtype == dtype and not m.weight.requires_grad, name
        exact = w_hat + dw
        if dtype == torch.float32:
            assert torch.equal(m.weight, exact), name
        else:  # one rounding of Ŵ + ΔW to BF16 (ΔW itself made in BF16 by the adapter's matmul)
            assert ((m.weight.float() - exact).abs() <= exact.abs() * 2.0**-8 + 2.0**-120).all(), name
    # the merged model computes the unmerged one with its bases in high precision
    nn4.set_precision(model, "bf16")
    hp = logits(model, ids)
    nn4.set_precision(model, "nvfp4")
    got = logits(merged, ids)
    bound = 1e-5 if dtype == torch.float32 else 2e-2  # BF16: ~2^-8 per rounding, through two blocks
    assert rel(got, hp) < bound, rel(got, hp)


@pytest.mark.parametrize("kind", ["builtin", "peft"])
def test_fp4_export_warns_with_the_measured_error(kind):
    model = with_adapters(kind, torch.float32)
    want = deltas(model)
    if kind == "builtin":
        with pytest.warns(nn4.FP4MergeWarning) as rec:
            merged = merge(model, kind, fp4=True)
    else:
        with pytest.warns(nn4.FP4MergeWarning) as rec:
            with nn4.requantize_writes():
                merged = merge(model, kind)
    assert len(rec) == 1
    msg = str(rec[0].message)
    assert msg.startswith("nvfp4: 14 frozen layer(s) stored a written weight in NVFP4 again")
    # the reported mean is the mean over layers of ‖Q(Ŵ+ΔW) − (Ŵ+ΔW)‖ / ‖ΔW‖, measured here independently
    ratios = []
    for name, (w_hat, dw) in want.items():
        m = merged.get_submodule(name)
        assert isinstance(m, nn4.FrozenLinear)
        ratios.append(((m.dequantize(torch.float32) - (w_hat + dw)).norm() / dw.norm()).item())
    assert f"off by {sum(ratios) / len(ratios):.3g} of the written change on average" in msg
    assert f"{max(ratios):.3g} at worst" in msg


@pytest.mark.parametrize("kind", ["builtin", "peft"])
def test_export_keeps_the_fine_tune(kind):
    """What the choice is about: the FP4 re-quantization moves the model by a sizeable part of
    the adapter's own effect; the high-precision export does not (here with the bases in high
    precision on both sides, so that only the merge differs)."""
    model = with_adapters(kind, torch.float32)
    ids = torch.randint(1, 128, (2, 16), generator=torch.Generator().manual_seed(4))
    nn4.set_precision(model, "bf16")
    unmerged = logits(model, ids)
    if kind == "builtin":
        base = logits(nn4.merge_and_unload(copy.deepcopy(model).apply(_zero_b)), ids)
    else:
        with model.disable_adapter():
            base = logits(model, ids)
    nn4.set_precision(model, "nvfp4")
    effect = rel(unmerged, base)
    hp = merge(model, kind)
    with nn4.requantize_writes(warn=False):
        fp4 = merge(model, kind, **({"fp4": True} if kind == "builtin" else {}))
    nn4.set_precision(fp4, "bf16")
    assert rel(logits(hp, ids), unmerged) < 1e-5 * effect
    assert rel(logits(fp4, ids), unmerged) > 0.05 * effect


def _zero_b(m):
    if isinstance(m, nn4.LoRALinear):
        with torch.no_grad():
            m.lora_B.zero_()
