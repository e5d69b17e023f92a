"""Hugging Face models: conversion that counts transformer blocks, GPT-2's Conv1D, heads left
alone, peft's LoRA on a frozen NVFP4 base (training, merge_and_unload), HF gradient
checkpointing, checkpoints of frozen HF models and models built under inference_mode.
CPU, reference backend; skipped where transformers/peft are not installed."""
import copy

import pytest
import torch
from torch import nn

import nvfp4.nn as nn4
from nvfp4.nn import ops

from conftest import assert_bytes_equal, first_mismatch

transformers = pytest.importorskip("transformers")

REF = nn4.get_recipe("nvfp4", backend="reference")
PROJ = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def llama_config(layers=3, tie=False, **kw):
    return transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                    tie_word_embeddings=tie, pad_token_id=0, **kw)


def llama(seed=0, cls=None, **kw):
    torch.manual_seed(seed)
    return (cls or transformers.LlamaForCausalLM)(llama_config(**kw))


def gpt2(seed=0, cls=None, layers=3):
    torch.manual_seed(seed)
    cfg = transformers.GPT2Config(vocab_size=128, n_embd=64, n_layer=layers, n_head=4, n_positions=64,
                                  pad_token_id=0, num_labels=16)
    return (cls or transformers.GPT2LMHeadModel)(cfg).eval()


def assert_equal(got, want, what):
    assert torch.equal(got, want), f"{what}: {first_mismatch(got, want)}"


# ------------------------------------------------------------------------------ blocks, heads, Conv1D
def test_find_blocks():
    assert nn4.find_blocks(llama()) == [("model.layers", ["model.layers.0", "model.layers.1", "model.layers.2"])]
    assert nn4.find_blocks(gpt2()) == [("transformer.h", ["transformer.h.0", "transformer.h.1", "transformer.h.2"])]
    assert nn4.find_blocks(llama(), blocks="model.layers")[0][1][-1] == "model.layers.2"
    with pytest.raises(ValueError, match="blocks"):
        nn4.find_blocks(llama(), blocks="model.nothing")
    with pytest.raises(ValueError, match="blocks"):
        nn4.find_blocks(llama(), blocks="model.norm")


@pytest.mark.parametrize("first,last", [(1, 0), (0, 1), (1, 1), (2, 2)])
def test_skip_blocks_llama(first, last):
    model = llama()
    nn4.convert(model, REF, skip_first_blocks=first, skip_last_blocks=last)
    kept = {i for i in range(3) if i < first or i >= 3 - last}
    want = [f"model.layers.{i}.{p}" for i in range(3) if i not in kept
            for p in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                      "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")]
    assert nn4.converted_layers(model) == want
    plan = dict(nn4.plan_conversion(model))
    for i in kept:
        assert type(model.model.layers[i].self_attn.q_proj) is nn.Linear
    assert plan["lm_head"] == "skipped: excluded" and plan["model.embed_tokens"] == "skipped: embedding"
    # single Linears still count as before: skip_first=1 keeps only the first candidate
    m2 = nn4.convert(llama(), REF, skip_first=1)
    assert nn4.converted_layers(m2)[0] == "model.layers.0.self_attn.k_proj"
    with pytest.raises(ValueError, match="skip_first_blocks"):
        nn4.convert(llama(), skip_first_blocks=-1)


def test_gpt2_conv1d_converted_and_state_dict_compatible():
    Conv1D = transformers.pytorch_utils.Conv1D
    orig = gpt2()
    model = copy.deepcopy(orig)
    opt_params = {id(p) for p in model.parameters()}
    sd0 = orig.state_dict()
    nn4.convert(model, REF, skip_first_blocks=1, verbose=True)
    names = nn4.converted_layers(model)
    assert names == [f"transformer.h.{i}.{p}" for i in (1, 2) for p in ("attn.c_attn", "attn.c_proj", "mlp.c_fc",
                                                                          "mlp.c_proj")]
    assert isinstance(model.transformer.h[1].attn.c_attn, nn4.Conv1DLinear)
    assert type(model.transformer.h[0].attn.c_attn) is Conv1D
    assert {id(p) for p in model.parameters()} == opt_params  # the same Parameter objects
    plan = dict(nn4.plan_conversion(orig, exclude=[]))
    assert plan["lm_head"] == "skipped: weight tied to another module"
    assert plan["transformer.h.0.attn.c_attn"] == "convert"
    plan = dict(nn4.plan_conversion(orig, skip_last_blocks=1))
    assert plan["transformer.h.2.mlp.c_fc"] == "skipped: skip_last_blocks"
    # the state_dict keeps GPT-2's layout: the same keys (plus counters), shapes and values
    sd = model.state_dict()
    assert set(sd) == set(sd0) | {n + ".sr_step" for n in names}
    for k, v in sd0.items():
        assert_equal(sd[k], v, k)
    fresh = gpt2(seed=1)
    nn4.convert(fresh, REF, skip_first_blocks=1)
    fresh.load_state_dict(sd0, strict=False)  # the original checkpoint loads into a converted model
    back = gpt2(seed=2)
    back.load_state_dict({k: v for k, v in sd.items() if not k.endswith("sr_step")})  # and the other way
    ids = torch.randint(0, 128, (2, 24))
    for m in (orig, model, fresh, back):
        m.eval()  # no dropout
    y0 = orig(input_ids=ids).logits
    y = model(input_ids=ids).logits
    assert_equal(fresh(input_ids=ids).logits, y, "converted model from the original checkpoint")
    assert_equal(back(input_ids=ids).logits, y0, "original model from the converted checkpoint")
    assert (y - y0).abs().max() < 0.1 * y0.abs().max()  # NVFP4 noise, not a transposed weight
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    assert model.transformer.h[1].attn.c_attn.weight.grad.shape == (192, 64)
    nn4.unconvert(model)
    assert type(model.transformer.h[1].attn.c_attn) is Conv1D
    assert_equal(model.transformer.h[1].attn.c_attn.weight, sd0["transformer.h.1.attn.c_attn.weight"], "unconvert")
    assert_equal(model(input_ids=ids).logits, y0, "unconverted forward")


def test_gpt2_frozen():
    model = gpt2()
    nn4.freeze_fp4(model, REF)
    assert len(nn4.frozen_layers(model)) == 12
    fr = model.transformer.h[0].attn.c_attn
    assert (fr.in_features, fr.out_features) == (64, 192) and not hasattr(fr, "nf")
    ref = nn4.FrozenLinear.from_weight(gpt2().transformer.h[0].attn.c_attn.weight.t(), recipe=REF)
    assert_bytes_equal(fr.weight_data, ref.weight_data, "Conv1D frozen by value")
    ids = torch.randint(0, 128, (2, 16))
    assert torch.isfinite(model(input_ids=ids).logits).all()


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_classification_head_left_alone(kind):
    model = (llama(cls=transformers.LlamaForSequenceClassification, num_labels=16) if kind == "llama"
             else gpt2(cls=transformers.GPT2ForSequenceClassification))
    assert model.score.out_features == 16
    plan = nn4.plan_conversion(model)
    assert dict(plan)["score"] == "skipped: excluded"
    nn4.convert(model, REF)
    assert type(model.score) is nn.Linear
    assert "score" in plan.summary() and "skipped: excluded" in str(plan)
    # explicit exclude replaces the default: then the head is converted
    m2 = llama(cls=transformers.LlamaForSequenceClassification, num_labels=16) if kind == "llama" else gpt2(
        cls=transformers.GPT2ForSequenceClassification)
    nn4.convert(m2, REF, exclude=[])
    assert isinstance(m2.score, nn4.Linear)


def test_head_found_by_structure():
    """A head whose name is not in DEFAULT_EXCLUDE: after the blocks and outside them."""

    class Tagger(nn.Module):
        def __init__(self):
            super().__init__()
            self.backbone = transformers.LlamaModel(llama_config())
            self.tags = nn.Linear(64, 16)

        def forward(self, ids):
            return self.tags(self.backbone(input_ids=ids).last_hidden_state)

    torch.manual_seed(0)
    model = Tagger()
    plan = dict(nn4.plan_conversion(model))
    assert plan["tags"] == "skipped: head (after the transformer blocks)"
    nn4.freeze_fp4(model, REF)
    assert type(model.tags) is nn.Linear and len(nn4.frozen_layers(model)) == 21


# ------------------------------------------------------------------------------ peft
peft = None


def _peft():
    global peft
    peft = pytest.importorskip("peft")
    return peft


def _lora_config(dropout=0.0):
    return _peft().LoraConfig(r=8, lora_alpha=16, target_modules=list(PROJ), lora_dropout=dropout)


def _count_frozen_calls(monkeypatch):
    calls = []
    impl = ops._frozen_fwd_impl

    def spy(*a):
        calls.append(tuple(a[0].shape))
        return impl(*a)

    monkeypatch.setattr(ops, "_frozen_fwd_impl", spy)
    return calls


def test_peft_lora_on_frozen_llama_trains_and_merges(monkeypatch):
    p = _peft()
    model = nn4.freeze_fp4(llama(), REF)
    pm = p.get_peft_model(model, _lora_config())
    q = pm.base_model.model.model.layers[1].self_attn.q_proj
    assert isinstance(q, p.tuners.lora.Linear) and isinstance(q.base_layer, nn4.FrozenLinear)
    trainable = [n for n, t in pm.named_parameters() if t.requires_grad]
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    calls = _count_frozen_calls(monkeypatch)
    torch.manual_seed(1)
    ids = torch.randint(0, 128, (4, 32))
    opt = torch.optim.AdamW([t for t in pm.parameters() if t.requires_grad], lr=1e-2)
    losses = []
    for step in range(6):
        out = pm(input_ids=ids, labels=ids)
        out.loss.backward()
        if step == 0:
            assert len(calls) == 21  # every base projection ran through nvfp4
            assert all(m.lora_B.default.weight.grad.abs().sum() > 0 for m in pm.modules()
                       if isinstance(m, p.tuners.lora.Linear))
        opt.step()
        opt.zero_grad()
        losses.append(out.loss.item())
    assert losses[-1] < losses[0] - 0.05, losses
    # the frozen bases' counters moved with their backward passes (dgrad ran)
    assert int(q.base_layer.sr_step) == 6

    # a large update, so that merging visibly changes the model
    with torch.no_grad():
        for m in pm.modules():
            if isinstance(m, p.tuners.lora.Linear):
                m.lora_B.default.weight.normal_(std=0.05)
    pm.eval()
    with torch.no_grad():
        adapter = pm(input_ids=ids).logits
        with pm.disable_adapter():
            base = pm(input_ids=ids).logits
    # what merging gives: by default each base becomes an nn.Linear holding its decoded
    # weight + the delta (the fine-tune kept); inside requantize_writes() the base is
    # re-quantized from it (and a warning reports the error)
    want_w, want_q = {}, {}
    for name, m in pm.named_modules():
        if isinstance(m, p.tuners.lora.Linear):
            b = m.base_layer
            w = b.dequantize(torch.float32) + m.get_delta_weight("default").float()
            want_w[name.replace("base_model.model.", "", 1)] = w
            want_q[name.replace("base_model.model.", "", 1)] = nn4.FrozenLinear.from_weight(w, recipe=REF,
                                                                                            layer_index=b.layer_index)
    nn4.set_precision(pm, "bf16")  # the bases in high precision: what the exported model computes
    with torch.no_grad():
        adapter_hp = pm(input_ids=ids).logits
    nn4.set_precision(pm, "nvfp4")
    for safe in (False, True):
        merged = copy.deepcopy(pm).merge_and_unload(safe_merge=safe)
        assert not nn4.frozen_layers(merged)
        for name, w in want_w.items():
            got = merged.get_submodule(name)
            assert type(got) is nn.Linear and not got.weight.requires_grad
            assert_equal(got.weight, w, f"safe_merge={safe} {name}.weight")
        with torch.no_grad():
            logits = merged(input_ids=ids).logits
        assert torch.allclose(logits, adapter_hp, rtol=1e-4, atol=1e-4 * adapter_hp.abs().max().item())
        with nn4.requantize_writes(warn=False) as errors:
            merged = copy.deepcopy(pm).merge_and_unload(safe_merge=safe)
        assert len(errors) == 21 and all(r > 0 for _, r in errors)
        layers = {n: m for n, m in merged.named_modules() if isinstance(m, nn4.FrozenLinear)}
        assert len(layers) == 21
        for name, ref in want_q.items():
            for k in ("weight_data", "weight_scales", "weight_amax"):
                assert_bytes_equal(getattr(layers[name], k), getattr(ref, k), f"safe_merge={safe} {name}.{k}")
        with torch.no_grad():
            logits = merged(input_ids=ids).logits
        assert (logits - base).abs().max() > 0.2 * (adapter - base).abs().max(), "merge had no effect (stale weight)"
        assert (logits - adapter).abs().max() < 0.5 * (adapter - base).abs().max()
    with pytest.warns(nn4.FP4MergeWarning, match=r"21 frozen layer\(s\) stored a written weight in NVFP4 again"):
        with nn4.requantize_writes():
            copy.deepcopy(pm).merge_and_unload()


def test_peft_lora_on_converted_llama_merge_is_seen():
    """LoRA merged into a trainable nvfp4 model: the next forward quantizes the merged weight."""
    p = _peft()
    model = nn4.convert(llama(), REF)
    pm = p.get_peft_model(model, _lora_config())
    with torch.no_grad():
        for m in pm.modules():
            if isinstance(m, p.tuners.lora.Linear):
                m.lora_B.default.weight.normal_(std=0.05)
    ids = torch.randint(0, 128, (2, 16))
    with torch.no_grad():
        with pm.disable_adapter():
            base = pm(input_ids=ids).logits
        adapter = pm(input_ids=ids).logits
        merged = pm.merge_and_unload()(input_ids=ids).logits
    assert (merged - base).abs().max() > 0.2 * (adapter - base).abs().max()


@pytest.mark.parametrize("lora", ["peft", "builtin"])
@pytest.mark.parametrize("reentrant", [False, True])
def test_hf_gradient_checkpointing_frozen_lora_bit_exact(lora, reentrant):
    """HF's gradient_checkpointing_enable on a frozen-base LoRA Llama: the same gradients,
    bit for bit, as without (dropout on: checkpointing replays the RNG)."""

    def build():
        model = nn4.freeze_fp4(llama(), REF)
        if lora == "peft":
            model = _peft().get_peft_model(model, _lora_config(dropout=0.1))
        else:
            nn4.add_lora(model, rank=8, alpha=16, dropout=0.1, dtype=torch.float32)
        model.train()
        # HF's checkpointing makes the embeddings' output require grad (so the first block's
        # dgrad runs); the run without it does the same, so that the same backward passes run
        model.enable_input_require_grads()
        return model

    def run(model):
        torch.manual_seed(3)
        ids = torch.randint(0, 128, (2, 24))
        out = []
        for _ in range(2):
            model(input_ids=ids, labels=ids).loss.backward()
            out.append({n: t.grad.clone() for n, t in model.named_parameters() if t.grad is not None})
            model.zero_grad(set_to_none=True)
        return out, [int(m.sr_step) for m in model.modules() if isinstance(m, nn4.FrozenLinear)]

    ref, cref = run(build())
    ck = build()
    enable = getattr(ck, "activation_checkpointing_enable", None)
    if enable is not None:
        enable(activation_checkpointing_kwargs={"use_reentrant": reentrant})
    else:
        ck.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": reentrant})
    assert any(getattr(m, "gradient_checkpointing", False) for m in ck.modules())
    got, cgot = run(ck)
    assert cgot == cref == [2] * 21
    for step, (a, b) in enumerate(zip(ref, got)):
        assert a.keys() == b.keys() and len(a) == 2 * 21
        for k in a:
            assert_equal(b[k], a[k], f"step {step}: {k}")


# ------------------------------------------------------------------------------ checkpoints, inference
@pytest.mark.parametrize("tie", [False, True])
def test_frozen_hf_checkpoint_round_trip(tmp_path, tie):
    pytest.importorskip("safetensors")
    model = nn4.freeze_fp4(llama(tie=tie), REF)
    ids = torch.randint(0, 128, (2, 16))
    with torch.no_grad():
        want = model(input_ids=ids).logits
    path = str(tmp_path / "llama_fp4.safetensors")
    nn4.save(model, path)
    fresh = llama(seed=7, tie=tie)
    res = nn4.load(fresh, path)
    assert not res.missing_keys and not res.unexpected_keys
    if tie:
        assert fresh.lm_head.weight is fresh.model.embed_tokens.weight
    with torch.no_grad():
        assert_equal(fresh(input_ids=ids).logits, want, "reloaded frozen Llama")


def test_hf_model_built_under_inference_mode():
    """Built and frozen under inference_mode, run outside it. (Parameters made under
    inference_mode may not be used where autograd would save them, in any PyTorch model: an
    HF model's norms need requires_grad=False or no_grad.)"""
    with torch.inference_mode():
        model = nn4.freeze_fp4(llama(), REF)
        ids = torch.randint(0, 128, (2, 16))
        want = model(input_ids=ids).logits
    with torch.no_grad():
        assert_equal(model(input_ids=ids).logits, want, "no_grad forward")
    model.requires_grad_(False)
    assert_equal(model(input_ids=ids).logits, want, "forward outside inference_mode")
    g = model.generate(ids[:, :4], max_new_tokens=4, do_sample=False)
    assert g.shape == (2, 8)
