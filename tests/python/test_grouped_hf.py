"""convert() on Hugging Face MoE models (transformers >= 5 stores experts as 3D parameters):
Mixtral, Qwen2-MoE, Qwen3-MoE, gpt-oss (transposed, biased, its own gate), DeepSeek-V3, built
from tiny random configs (no network). The experts go to the grouped path, routers stay in high
precision, the summary lists each expert group; the grouped forward in BF16 precision matches
transformers' own; training steps, state_dict, unconvert. CPU, reference backend."""
import copy

import pytest
import torch

import nvfp4.nn as nn4
from nvfp4.nn.grouped import GroupedExperts

transformers = pytest.importorskip("transformers")
REF = nn4.get_recipe("nvfp4", backend="reference")


def configs():
    common = dict(vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=64)
    return {
        "mixtral": lambda: transformers.MixtralConfig(intermediate_size=32, num_key_value_heads=2, num_local_experts=4,
                                                      num_experts_per_tok=2, **common),
        "qwen2_moe": lambda: transformers.Qwen2MoeConfig(intermediate_size=64, moe_intermediate_size=32,
                                                         shared_expert_intermediate_size=64, num_key_value_heads=2,
                                                         num_experts=4, num_experts_per_tok=2, **common),
        "qwen3_moe": lambda: transformers.Qwen3MoeConfig(intermediate_size=64, moe_intermediate_size=32, head_dim=16,
                                                         num_key_value_heads=2, num_experts=8, num_experts_per_tok=2,
                                                         **common),
        "gpt_oss": lambda: transformers.GptOssConfig(intermediate_size=32, num_key_value_heads=2, head_dim=16,
                                                     num_local_experts=4, num_experts_per_tok=2, **common),
        "deepseek_v3": lambda: transformers.DeepseekV3Config(
            intermediate_size=64, moe_intermediate_size=32, num_key_value_heads=4, n_routed_experts=4,
            num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=1, q_lora_rank=32, kv_lora_rank=32,
            qk_rope_head_dim=16, qk_nope_head_dim=16, v_head_dim=16, n_group=1, topk_group=1, **common),
    }


CONFIGS = configs()


def build(name, seed=0):
    torch.manual_seed(seed)
    return transformers.AutoModelForCausalLM.from_config(CONFIGS[name]())


@pytest.mark.parametrize("name", list(CONFIGS))
def test_convert_moe_model(name):
    model = build(name)
    ids = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(1))
    ref = model(ids).logits.detach()
    plan = nn4.plan_conversion(model)
    experts = [n for n, m in model.named_modules() if n.endswith("mlp.experts")]
    assert experts and plan.grouped() == experts
    summary = plan.summary()
    for n in experts:
        assert n in summary and "experts," in summary
    routers = plan.skipped().get("skipped: router (high precision)", [])
    assert routers, "the routers are listed as kept in high precision"
    nn4.convert(model, REF)
    for n in experts:
        assert isinstance(model.get_submodule(n), GroupedExperts)
    for n in routers:
        assert not any("nvfp4" in type(m).__module__ for m in model.get_submodule(n).modules())
    # the grouped path itself, unquantized: what transformers computes
    nn4.set_precision(model, "bf16")
    assert torch.allclose(model(ids).logits, ref, atol=1e-5, rtol=1e-5)
    # in NVFP4: within the quantization error, and it trains
    nn4.set_precision(model, "nvfp4")
    out = model(ids, labels=ids)
    rel = ((out.logits.detach() - ref).norm() / ref.norm()).item()
    assert rel < 0.3, rel
    out.loss.backward()
    for n in experts:
        m = model.get_submodule(n)
        for p in (m.gate_up_proj, m.down_proj):
            assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0
        assert int(m.sr_step_up) == 1 and int(m.sr_step_down) == 1


def test_state_dict_and_unconvert():
    model = build("qwen3_moe")
    before = copy.deepcopy(model.state_dict())
    nn4.convert(model, REF)
    sd = model.state_dict()
    assert any(k.endswith("experts.sr_step_up") for k in sd)
    model.load_state_dict(before)  # a checkpoint of the unconverted model loads (strict)
    fresh = build("qwen3_moe", seed=5)
    nn4.convert(fresh, REF)
    fresh.load_state_dict(sd)
    ids = torch.randint(0, 128, (1, 8))
    torch.testing.assert_close(model(ids).logits, fresh(ids).logits, rtol=0, atol=0)
    nn4.set_sr_step(model, 7)
    assert all(int(m.sr_step_up) == 7 for m in model.modules() if isinstance(m, GroupedExperts))
    nn4.unconvert(model)
    assert not any(isinstance(m, GroupedExperts) for m in model.modules())
    ref = build("qwen3_moe")
    ref.load_state_dict(before)
    model.load_state_dict(before)
    torch.testing.assert_close(model(ids).logits, ref(ids).logits, rtol=0, atol=0)


def test_fp8_recipes_leave_experts_alone():
    model = build("mixtral")
    nn4.convert(model, "fp8")
    assert not any(isinstance(m, GroupedExperts) for m in model.modules())


def test_converted_experts_compile_fullgraph():
    """The grouped experts' forward (sort by expert, offs on the device, two grouped ops, the
    top-k sum) traces into one graph; compiled == eager, forward and backward."""
    model = build("qwen3_moe")
    nn4.convert(model, REF)
    ex = model.model.layers[0].mlp.experts
    g = torch.Generator().manual_seed(2)
    h = torch.randn(12, 64, generator=g, requires_grad=True)
    idx = torch.randint(0, 8, (12, 2), generator=g)
    w = torch.rand(12, 2, generator=g)

    def f(h, idx, w):
        return ex(h, idx, w).square().sum()

    f(h, idx, w).backward()
    want = (h.grad.clone(), ex.gate_up_proj.grad.clone(), ex.down_proj.grad.clone())
    h.grad = ex.gate_up_proj.grad = ex.down_proj.grad = None
    nn4.set_sr_step(model, 0)
    torch.compile(f, fullgraph=True, backend="aot_eager")(h, idx, w).backward()
    for got, exp in zip((h.grad, ex.gate_up_proj.grad, ex.down_proj.grad), want):
        assert torch.equal(got, exp)


def test_grouped_experts_recipe_and_layer_index_refused_by_name():
    """The converted experts take their recipe and layer index like the dense layers: a bad
    value is refused by name and leaves the plans as they were."""
    model = build(next(iter(CONFIGS)))
    nn4.convert(model, REF)
    m = next(m for m in model.modules() if isinstance(m, GroupedExperts))
    before = m._plan
    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="layer_index"):
            m.layer_index = bad
    assert m._plan is before
    with pytest.raises(ValueError, match="recipe"):
        m.recipe = "mx_baseline"
    assert m._plan is before
    m.layer_index = 3  # the plans follow: two projections, seed streams 3 and 4
    assert m.layer_index == 3 and len(m._plan) == 2 and m._plan is not before
