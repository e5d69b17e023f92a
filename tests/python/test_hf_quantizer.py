"""nvfp4.hf: from_pretrained(..., quantization_config=NVFP4Config(...)) builds the nvfp4 model,
save_pretrained -> from_pretrained gives it back bit for bit (SR counters included), a
Trainer resumed from its checkpoint continues exactly, peft and built-in LoRA on a frozen base,
dequantize(), and the errors. Tiny Llama, Qwen2 and GPT-2 models built from configs (no
network); CPU, reference backend."""
import json
import os

import pytest
import torch

import nvfp4.nn as nn4

from conftest import first_mismatch

transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")
hf = pytest.importorskip("nvfp4.hf")
from nvfp4.hf import NVFP4Config  # noqa: E402

REF = nn4.get_recipe("nvfp4", backend="reference")
ARCHS = ("llama", "qwen2", "gpt2")


def config(arch):
    if arch == "llama":
        return transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                        tie_word_embeddings=False, pad_token_id=0)
    if arch == "qwen2":  # biases on q/k/v
        return transformers.Qwen2Config(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                        tie_word_embeddings=True, pad_token_id=0)
    return transformers.GPT2Config(vocab_size=128, n_embd=64, n_layer=3, n_head=4, n_positions=64, pad_token_id=0,
                                   bos_token_id=1, eos_token_id=2, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)


@pytest.fixture(scope="module")
def base_dirs(tmp_path_factory):
    """One plain checkpoint per architecture (random weights, seeded)."""
    out = {}
    for i, arch in enumerate(ARCHS):
        torch.manual_seed(10 + i)
        d = str(tmp_path_factory.mktemp(arch))
        transformers.AutoModelForCausalLM.from_config(config(arch)).save_pretrained(d)
        out[arch] = d
    return out


def load(path, **kw):
    return transformers.AutoModelForCausalLM.from_pretrained(path, **kw)


def ids(seed=0, b=2, t=24):
    return torch.randint(1, 128, (b, t), generator=torch.Generator().manual_seed(seed))


def assert_state_equal(got, want, what):
    sg, sw = got.state_dict(), want.state_dict()
    assert sorted(sg) == sorted(sw), f"{what}: keys differ: {sorted(set(sg) ^ set(sw))[:6]}"
    for k in sw:
        a, b = sg[k], sw[k]
        assert a.dtype == b.dtype and a.shape == b.shape, f"{what}: {k}: {a.dtype}{tuple(a.shape)} vs " \
                                                          f"{b.dtype}{tuple(b.shape)}"
        assert torch.equal(a.view(torch.uint8) if a.dtype == torch.float32 else a,
                           b.view(torch.uint8) if b.dtype == torch.float32 else b), f"{what}: {k}: " + \
            first_mismatch(a, b)


def train_steps(model, n=3, lr=1e-2, seed=1):
    model.train()
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=lr)
    for s in range(n):
        x = ids(seed + s)
        model(input_ids=x, labels=x).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    model.eval()


# ------------------------------------------------------------------------------ building
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("frozen", [False, True])
def test_from_pretrained_builds_what_convert_builds(base_dirs, arch, frozen):
    cfg = NVFP4Config(recipe=REF, frozen=frozen, skip_first_blocks=1)
    model = load(base_dirs[arch], quantization_config=cfg)
    want = load(base_dirs[arch])
    (nn4.freeze_fp4 if frozen else nn4.convert)(want, REF, skip_first_blocks=1)
    names = (nn4.frozen_layers if frozen else nn4.converted_layers)(model)
    assert names and names == (nn4.frozen_layers if frozen else nn4.converted_layers)(want)
    assert len(names) == (2 * 4 if arch == "gpt2" else 2 * 7)
    qc = model.config.quantization_config
    assert model.is_quantized and isinstance(qc, NVFP4Config) and qc.recipe == REF and qc.frozen == frozen
    assert sorted(qc.layers) == sorted(names)
    assert_state_equal(model, want, "from_pretrained vs convert")
    x = ids()
    with torch.no_grad():
        got, ref = model(input_ids=x).logits, want(input_ids=x).logits
    assert torch.equal(got, ref), first_mismatch(got, ref)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("frozen", [False, True])
def test_save_pretrained_round_trip_bit_identical(base_dirs, tmp_path, arch, frozen):
    model = load(base_dirs[arch], quantization_config=NVFP4Config(recipe=REF, frozen=frozen))
    if frozen:
        nn4.add_lora(model, rank=4, alpha=8, dtype=torch.float32)
        with torch.no_grad():
            for m in model.modules():
                if isinstance(m, nn4.LoRALinear):
                    m.lora_B.normal_(std=0.02)
    train_steps(model)  # weights (or adapters) moved, SR counters advanced
    counters = {n: int(m.sr_step) for n, m in model.named_modules() if isinstance(m, (nn4.Linear, nn4.FrozenLinear))}
    # (a frozen layer's counter moves with its dgrad, which the first block's K/V skip: no
    # gradient flows into the embeddings)
    assert counters and max(counters.values()) == 3
    out = str(tmp_path / "q")
    model.save_pretrained(out)

    with open(os.path.join(out, "config.json")) as f:
        qc = json.load(f)["quantization_config"]
    assert qc["quant_method"] == hf.QUANT_METHOD and qc["frozen"] == frozen and hf.recipe_from_dict(qc["recipe"]) == REF
    assert sorted(qc["layers"]) == sorted(hf.describe_layers(model))
    from safetensors import safe_open
    with safe_open(os.path.join(out, "model.safetensors"), "pt") as f:
        keys, meta = set(f.keys()), f.metadata()
        for name in counters:
            prefix = name
            want = {".weight_data", ".weight_scales", ".weight_amax", ".sr_step"} if frozen else {".weight", ".sr_step"}
            assert {prefix + s for s in want} <= keys
            assert f.get_tensor(prefix + ".sr_step").item() == counters[name]
            if frozen:
                assert f.get_tensor(prefix + ".weight_data").dtype == torch.uint8
                assert f.get_tensor(prefix + ".weight_amax").dtype == torch.float32
                assert prefix + ".weight" not in keys
    assert json.loads(meta["nvfp4.hf"])["layers"] == qc["layers"]

    back = load(out)
    assert type(back.config.quantization_config) is NVFP4Config
    assert_state_equal(back, model, "reloaded")
    # the same model from here on: forward, backward (SR bits from the counters), training
    x = ids(7)
    for m in (model, back):
        m.train()
        m(input_ids=x, labels=x).loss.backward()
    for (n, p), (_, q) in zip(model.named_parameters(), back.named_parameters()):
        assert (p.grad is None) == (q.grad is None), n
        if p.grad is not None:
            assert torch.equal(p.grad, q.grad), f"{n}.grad: " + first_mismatch(q.grad, p.grad)
    steps = lambda mod: [int(m.sr_step) for m in mod.modules() if hasattr(m, "sr_step")]  # noqa: E731
    assert steps(back) == steps(model) and max(steps(back)) == 4
    # the frozen bases stay frozen; only what was trainable is
    assert [n for n, p in back.named_parameters() if p.requires_grad] == \
           [n for n, p in model.named_parameters() if p.requires_grad]


def test_gpt2_conv1d_layout_kept(base_dirs, tmp_path):
    model = load(base_dirs["gpt2"], quantization_config=NVFP4Config(recipe=REF))
    assert isinstance(model.transformer.h[0].attn.c_attn, nn4.Conv1DLinear)
    model.save_pretrained(str(tmp_path / "q"))
    from safetensors.torch import load_file
    sd = load_file(str(tmp_path / "q" / "model.safetensors"))
    assert sd["transformer.h.0.attn.c_attn.weight"].shape == (64, 192)  # Conv1D's [in, out]
    back = load(str(tmp_path / "q"))
    assert isinstance(back.transformer.h[0].attn.c_attn, nn4.Conv1DLinear)
    assert_state_equal(back, model, "gpt2 reloaded")


def test_dtype_bf16_keeps_amax_and_counters(base_dirs, tmp_path):
    model = load(base_dirs["llama"], quantization_config=NVFP4Config(recipe=REF, frozen=True), dtype=torch.bfloat16)
    q = model.model.layers[1].mlp.down_proj
    assert q.weight_dtype == torch.bfloat16 and q.weight_amax.dtype == torch.float32
    model.save_pretrained(str(tmp_path / "q"))
    back = load(str(tmp_path / "q"), dtype=torch.bfloat16)
    assert_state_equal(back, model, "bf16 reloaded")
    assert back.model.layers[1].mlp.down_proj.weight_dtype == torch.bfloat16


# ------------------------------------------------------------------------------ Trainer resume
class _Tokens(torch.utils.data.Dataset):
    def __init__(self, n=16, t=24):
        self.x = torch.randint(1, 128, (n, t), generator=torch.Generator().manual_seed(123))

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"input_ids": self.x[i], "labels": self.x[i]}


def _trainer(model, out, steps, save_steps):
    args = transformers.TrainingArguments(output_dir=out, max_steps=steps, save_steps=save_steps,
                                          per_device_train_batch_size=2, learning_rate=3e-3, lr_scheduler_type="linear",
                                          warmup_steps=1, weight_decay=0.01, logging_steps=1, report_to=[],
                                          use_cpu=True, seed=5, data_seed=5, dataloader_num_workers=0,
                                          save_only_model=False, disable_tqdm=True)
    return transformers.Trainer(model=model, args=args, train_dataset=_Tokens())


@pytest.mark.parametrize("arch,frozen", [("llama", False), ("gpt2", False), ("qwen2", True)])
def test_trainer_resume_exact(base_dirs, tmp_path, arch, frozen):
    """Trainer: 6 steps straight, against 3 steps, a checkpoint, and a fresh process-like
    resume (a new model from the plain checkpoint) for the other 3: the same weights (or, on
    a frozen base, LoRA adapters), SR counters and optimizer state bit for bit."""
    def build():
        m = load(base_dirs[arch], quantization_config=NVFP4Config(recipe=REF, frozen=frozen, skip_last_blocks=1))
        if frozen:
            nn4.add_lora(m, rank=4, alpha=8, dtype=torch.float32)
        return m

    full = build()
    _trainer(full, str(tmp_path / "full"), 6, 100).train()

    first = build()
    _trainer(first, str(tmp_path / "split"), 6, 3).train()  # writes checkpoint-3 (and -6)
    ckpt = str(tmp_path / "split" / "checkpoint-3")
    with open(os.path.join(ckpt, "config.json")) as f:
        assert json.load(f)["quantization_config"]["quant_method"] == hf.QUANT_METHOD
    resumed = build()
    t = _trainer(resumed, str(tmp_path / "resumed"), 6, 100)
    t.train(resume_from_checkpoint=ckpt)
    kind = nn4.FrozenLinear if frozen else nn4.Linear
    assert max(int(m.sr_step) for m in resumed.modules() if isinstance(m, kind)) == 6
    assert_state_equal(resumed, full, "resumed vs uninterrupted")
    if frozen:
        assert any(m.lora_B.abs().sum() > 0 for m in resumed.modules() if isinstance(m, nn4.LoRALinear))
    # and a checkpoint directory loads as a model on its own
    assert_state_equal(load(str(tmp_path / "split" / "checkpoint-6")), full, "checkpoint-6 vs uninterrupted")


# ------------------------------------------------------------------------------ LoRA
def test_peft_lora_on_quantizer_frozen_base(base_dirs, tmp_path):
    peft = pytest.importorskip("peft")
    base = load(base_dirs["qwen2"], quantization_config=NVFP4Config(recipe=REF, frozen=True))
    base.save_pretrained(str(tmp_path / "base"))
    lcfg = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"], lora_dropout=0.0)
    pm = peft.get_peft_model(base, lcfg)
    q = pm.base_model.model.model.layers[0].self_attn.q_proj
    assert isinstance(q.base_layer, nn4.FrozenLinear)
    trainable = [n for n, p in pm.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)  # the frozen biases stay frozen
    train_steps(pm, n=3, lr=5e-2)
    assert pm.base_model.model.model.layers[0].self_attn.q_proj.lora_B.default.weight.abs().sum() > 0
    pm.save_pretrained(str(tmp_path / "adapter"))
    x = ids(3)
    with torch.no_grad():
        want = pm(input_ids=x).logits
    fresh = peft.PeftModel.from_pretrained(load(str(tmp_path / "base")), str(tmp_path / "adapter"))
    with torch.no_grad():
        got = fresh(input_ids=x).logits
    assert torch.equal(got, want), first_mismatch(got, want)


def test_builtin_lora_checkpoint_rebuilt(base_dirs, tmp_path):
    model = load(base_dirs["llama"], quantization_config=NVFP4Config(recipe=REF, frozen=True))
    names = nn4.add_lora(model, rank=4, alpha=8, dropout=0.1, dtype=torch.bfloat16)
    model.save_pretrained(str(tmp_path / "q"))
    layers = model.config.quantization_config.layers
    assert sorted(layers) == sorted(names)
    assert layers[names[0]]["lora"] == {"rank": 4, "alpha": 8.0, "dropout": 0.1, "dtype": "bfloat16"}
    back = load(str(tmp_path / "q"))
    m = back.get_submodule(names[0])
    assert isinstance(m, nn4.LoRALinear) and m.lora_A.dtype == torch.bfloat16 and m.rank == 4
    assert_state_equal(back, model, "frozen + LoRA reloaded")


# ------------------------------------------------------------------------------ dequantize, errors
def test_dequantize_gives_plain_model(base_dirs):
    model = load(base_dirs["llama"], quantization_config=NVFP4Config(recipe=REF, frozen=True))
    ref = load(base_dirs["llama"], quantization_config=NVFP4Config(recipe=REF, frozen=True))
    nn4.set_precision(ref, "bf16")  # frozen layers: the decoded weight, unquantized activations
    plain = model.dequantize()
    assert not nn4.frozen_layers(plain) and type(plain.model.layers[0].mlp.up_proj) is torch.nn.Linear
    assert getattr(plain.config, "quantization_config", None) is None
    x = ids()
    with torch.no_grad():
        assert torch.equal(plain(input_ids=x).logits, ref(input_ids=x).logits)
    lora = load(base_dirs["llama"], quantization_config=NVFP4Config(recipe=REF, frozen=True))
    nn4.add_lora(lora, rank=4)
    with pytest.raises(ValueError, match="merge it first"):
        lora.dequantize()


def test_config_errors():
    with pytest.raises(ValueError, match="^recipe: "):
        NVFP4Config(recipe="nvfp5")
    with pytest.raises(ValueError, match="^recipe: .*2D tiles"):
        NVFP4Config(recipe="no_2d", frozen=True)
    with pytest.raises(ValueError, match="^frozen: "):
        NVFP4Config(frozen="yes")
    with pytest.raises(ValueError, match="^skip_first_blocks: "):
        NVFP4Config(skip_first_blocks=-1)
    with pytest.raises(ValueError, match="^include: "):
        NVFP4Config(include=lambda n, m: True)
    with pytest.raises(ValueError, match="^rank: not an NVFP4Config argument"):
        NVFP4Config(rank=8)
    with pytest.raises(ValueError, match="^format_version: "):
        NVFP4Config.from_dict({"quant_method": hf.QUANT_METHOD, "format_version": 99})
    with pytest.raises(ValueError, match="^layers: "):
        NVFP4Config(layers={"a": {"kind": "magic"}})
    # round trip through the dict config.json holds
    c = NVFP4Config(recipe=REF.replace(seed=7), frozen=True, exclude=["lm_head"], skip_last=1)
    d = json.loads(json.dumps(c.to_dict()))
    c2 = NVFP4Config.from_dict(d)
    assert c2.recipe == c.recipe and c2.to_dict() == c.to_dict()


def test_checkpoint_errors(base_dirs, tmp_path):
    from safetensors.torch import load_file, save_file
    model = load(base_dirs["llama"], quantization_config=NVFP4Config(recipe=REF, frozen=True))
    out = str(tmp_path / "q")
    model.save_pretrained(out)
    # a tensor of a frozen layer missing from the file: refused by name, not left uninitialized
    f = os.path.join(out, "model.safetensors")
    sd = load_file(f)
    del sd["model.layers.1.self_attn.q_proj.weight_scales"]
    save_file(sd, f, metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"model\.layers\.1\.self_attn\.q_proj\.weight_scales is missing"):
        load(out)
    # a checkpoint of another model
    with open(os.path.join(out, "config.json")) as fh:
        cj = json.load(fh)
    cj["num_hidden_layers"] = 2
    with open(os.path.join(out, "config.json"), "w") as fh:
        json.dump(cj, fh)
    with pytest.raises(ValueError, match=r"model\.layers\.2\..* does not have"):
        load(out)


def test_nn_load_frozen_lora_file_into_plain_model(base_dirs, tmp_path):
    """nvfp4.nn.save of a frozen base with built-in LoRA loads into a freshly built plain
    model (frozen layers and adapters rebuilt from the file); a file without the adapters'
    description says what to call first."""
    from safetensors import safe_open
    from safetensors.torch import save_file
    model = load(base_dirs["llama"], quantization_config=NVFP4Config(recipe=REF, frozen=True))
    nn4.add_lora(model, rank=4, alpha=8, dtype=torch.float32)
    train_steps(model, n=2, lr=5e-2)
    path = str(tmp_path / "ft.safetensors")
    nn4.save(model, path)
    plain = load(base_dirs["llama"])
    res = nn4.load(plain, path)
    assert not res.missing_keys and not res.unexpected_keys
    assert isinstance(plain.model.layers[0].self_attn.q_proj, nn4.LoRALinear)
    assert [n for n, p in plain.named_parameters() if p.requires_grad] == \
           [n for n, p in model.named_parameters() if p.requires_grad]
    assert_state_equal(plain, model, "nn.load into a plain model")
    # a file without the adapters' description (written before they were recorded)
    with safe_open(path, "pt") as f:
        meta = {k: v for k, v in f.metadata().items() if k != "nvfp4.lora"}
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    save_file(tensors, path, metadata=meta)
    with pytest.raises(ValueError, match=r"LoRA adapter around the frozen layer 'model\.layers\.0\.self_attn\.q_proj'"
                                         r".*nvfp4\.freeze_fp4\(model\) and nvfp4\.nn\.add_lora"):
        nn4.load(load(base_dirs["llama"]), path)
    frozen_only = nn4.freeze_fp4(load(base_dirs["llama"]), REF)
    nn4.add_lora(frozen_only, rank=4, alpha=8, dtype=torch.float32)
    assert not nn4.load(frozen_only, path).missing_keys  # as the message says
    assert_state_equal(frozen_only, model, "nn.load after freeze_fp4 + add_lora")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("frozen", [False, True])
def test_cuda_round_trip_default_backend(base_dirs, tmp_path, frozen):
    """On the GPU with the default recipe (backend auto: the CUTLASS GEMMs): from_pretrained
    onto the device, a few steps, save_pretrained, from_pretrained: the same state, and the
    same next forward and backward bit for bit."""
    cfg = NVFP4Config(frozen=frozen)
    model = load(base_dirs["llama"], quantization_config=cfg, device_map="cuda", dtype=torch.bfloat16)
    assert model.model.layers[0].mlp.up_proj.sr_step.device.type == "cuda"
    if frozen:
        nn4.add_lora(model, rank=4, alpha=8)
    model.train()
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    for s in range(3):
        x = ids(s).cuda()
        model(input_ids=x, labels=x).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    model.save_pretrained(str(tmp_path / "q"))
    back = load(str(tmp_path / "q"), device_map="cuda", dtype=torch.bfloat16)
    assert_state_equal(back, model, "reloaded on cuda")
    x = ids(9).cuda()
    outs = []
    for m in (model, back):
        m.train()
        loss = m(input_ids=x, labels=x).loss
        loss.backward()
        outs.append((loss.detach(), {n: p.grad for n, p in m.named_parameters() if p.grad is not None}))
    assert torch.equal(outs[0][0], outs[1][0])
    assert outs[0][1].keys() == outs[1][1].keys() and outs[0][1]
    for n in outs[0][1]:
        assert torch.equal(outs[0][1][n], outs[1][1][n]), n


def test_unknown_nvfp4_layer_refused(base_dirs, tmp_path):
    """A layer kind the checkpoint format does not describe (here the FP8 baseline layer) is
    refused at save time rather than lost on reload."""
    model = load(base_dirs["llama"], quantization_config=NVFP4Config(recipe=REF, skip_last_blocks=1))
    nn4.convert(model.model.layers[2], "fp8")
    with pytest.raises(ValueError, match=r"model\.layers\.2\.self_attn\.q_proj is an nvfp4 FP8Linear"):
        model.save_pretrained(str(tmp_path / "q"))


def test_trainer_resume_exact_peft_with_counter_callback(base_dirs, tmp_path):
    """peft on a frozen base: the Trainer's checkpoints hold the adapters only; with
    SRCounterCallback they also hold the frozen layers' SR counters, and a resumed run is the
    uninterrupted one bit for bit. Without it the counters restart (shown, then refused)."""
    peft = pytest.importorskip("peft")
    base = str(tmp_path / "base")
    load(base_dirs["llama"], quantization_config=NVFP4Config(recipe=REF, frozen=True)).save_pretrained(base)

    def build():
        lcfg = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"], lora_dropout=0.0)
        m = load(base)
        torch.manual_seed(0)  # the adapters' initialization
        return peft.get_peft_model(m, lcfg)

    def trainer(model, out, save_steps, callbacks):
        t = _trainer(model, out, 6, save_steps)
        for c in callbacks:
            t.add_callback(c)
        return t

    def state(m):
        return {k: v.clone() for k, v in m.state_dict().items() if "lora_" in k or k.endswith("sr_step")}

    full = build()
    trainer(full, str(tmp_path / "full"), 100, []).train()
    want = state(full)
    assert max(int(v) for k, v in want.items() if k.endswith("sr_step")) == 6

    out = str(tmp_path / "split")
    trainer(build(), out, 3, [hf.SRCounterCallback()]).train()
    assert os.path.isfile(os.path.join(out, "checkpoint-3", hf.COUNTERS_FILE))
    import shutil
    shutil.rmtree(os.path.join(out, "checkpoint-6"))
    resumed = build()
    trainer(resumed, out, 100, [hf.SRCounterCallback()]).train(resume_from_checkpoint=True)
    got = state(resumed)
    assert got.keys() == want.keys()
    for k in want:
        assert torch.equal(got[k], want[k]), f"{k}: " + first_mismatch(got[k], want[k])

    # without the counters: the adapters' checkpoint alone restarts them (what the callback fixes)
    plain = build()
    trainer(plain, str(tmp_path / "plain"), 100, []).train(resume_from_checkpoint=os.path.join(out, "checkpoint-3"))
    assert max(int(v) for k, v in state(plain).items() if k.endswith("sr_step")) == 3
    # and the callback refuses a resume it cannot make exact
    with pytest.raises(ValueError, match=r"^resume_from: no nvfp4_sr_counters\.safetensors"):
        trainer(build(), str(tmp_path / "other"), 100, [hf.SRCounterCallback()]).train(
            resume_from_checkpoint=os.path.join(out, "checkpoint-3"))


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_attach_hand_converted_model(base_dirs, tmp_path, arch):
    """A model converted by hand (nvfp4.convert, not through NVFP4Config), trained, then
    attach()ed: save_pretrained -> from_pretrained keeps its nvfp4 layers and SR counters."""
    model = load(base_dirs[arch])
    nn4.convert(model, REF, skip_first_blocks=1)
    train_steps(model, n=2)
    with pytest.raises(TypeError, match="^model: "):
        hf.attach(torch.nn.Sequential(torch.nn.Linear(16, 16)))
    assert hf.attach(model) is model
    model.save_pretrained(str(tmp_path / "q"))
    back = load(str(tmp_path / "q"))
    assert nn4.converted_layers(back) == nn4.converted_layers(model)
    assert_state_equal(back, model, "attached, reloaded")
    with pytest.raises(ValueError, match="no nvfp4 layers"):
        hf.attach(load(base_dirs[arch]))
