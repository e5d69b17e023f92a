#!/usr/bin/env python3
"""LoRA fine-tune of a Llama-architecture model with its linear layers frozen in NVFP4.

The model is Hugging Face transformers' LlamaForCausalLM built from a config (no downloads;
random weights unless --init-from names a saved model), byte-level on the examples' corpus
(the Python standard library's source, examples/prepare_data.py). With --base fp4 the
attention and MLP projections of every block are frozen into NVFP4 storage
(nvfp4.nn.freeze_fp4: 0.28x the bytes of BF16, no master copy) and LoRA adapters train on top
in BF16; --base bf16 runs the same fine-tune on a frozen high-precision base, for comparison
(the model's --dtype: BF16 on a GPU, FP32 on the CPU unless --dtype bf16; reports and file
names say which).

    python3 examples/finetune_lora.py --smoke                        # CPU, tiny model, < 1 minute
    python3 examples/finetune_lora.py --base fp4 --recompute         # GPU, ~400M parameters
    python3 examples/finetune_lora.py --base bf16 --recompute
    python3 examples/finetune_lora.py --base both --recompute        # both, then the comparison table

Each run prints and writes (OUT: ~/.cache/nvfp4/runs/lora unless --out) OUT/NAME.json (config, loss curves, validation loss, tokens/s and
the memory: weight bytes by kind, the static memory after setup, the peak during training)
and OUT/NAME.png (the loss curves, with matplotlib). --base both also writes
OUT/lora-compare.md: peak memory and loss of the FP4 base against the high-precision base.

Checkpoints (OUT/NAME-ckpt/ckpt.pt, torch.load(weights_only=True) reads them): the adapters,
the optimizer, the frozen layers' stochastic-rounding counters, the RNG states and the data
position; the frozen base itself is rebuilt from --seed (or --init-from). --save-every N
writes one every N steps, --stop-after N writes one and exits (an interrupted run), --resume
continues from it: a resumed run computes the same bits as an uninterrupted one.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import json
import os
import platform
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import prepare_data  # noqa: E402
from train import Batches, Progress, lr_at  # noqa: E402

import nvfp4  # noqa: E402
import nvfp4.nn as nn4  # noqa: E402

VOCAB = 256
PROJ = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

# hidden, intermediate, layers, heads, kv heads, context, batch (sequences)
SIZES = {
    "smoke": dict(hidden=64, intermediate=128, layers=2, heads=4, kv_heads=2, seq_len=64, batch_size=4),
    "small": dict(hidden=512, intermediate=1536, layers=8, heads=8, kv_heads=8, seq_len=512, batch_size=8),  # ~25M
    "400m": dict(hidden=1024, intermediate=4096, layers=24, heads=16, kv_heads=16, seq_len=512,
                 batch_size=2),  # ~403M parameters
}


# ------------------------------------------------------------------------------ model
def build_model(args, base: str, device: torch.device):
    """The Llama model with a frozen `base` ("fp4" or "bf16") and LoRA adapters."""
    import transformers

    torch.manual_seed(args.seed)
    if args.init_from:
        model = transformers.LlamaForCausalLM.from_pretrained(args.init_from, local_files_only=True,
                                                              torch_dtype=args.dtype)
    else:
        cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=args.hidden, intermediate_size=args.intermediate,
                                       num_hidden_layers=args.layers, num_attention_heads=args.heads,
                                       num_key_value_heads=args.kv_heads, max_position_embeddings=args.seq_len,
                                       tie_word_embeddings=False, use_cache=False,
                                       attn_implementation=args.attn)
        # built on the CPU: the GPU never holds the full-precision weights of a frozen NVFP4 base
        with torch.device("cpu"):
            model = transformers.LlamaForCausalLM(cfg)
        model.to(args.dtype)
    model.requires_grad_(False)
    if base == "fp4":
        recipe = nn4.get_recipe(args.recipe, backend=args.backend, seed=args.seed)
        nn4.freeze_fp4(model, recipe, include=[f"*.{p}" for p in PROJ], skip_first_blocks=args.skip_first_blocks,
                       skip_last_blocks=args.skip_last_blocks, device=device, verbose=True)
    model.to(device)
    gc.collect()
    if args.lora == "peft":
        import peft

        cfg = peft.LoraConfig(r=args.rank, lora_alpha=args.alpha, lora_dropout=args.dropout,
                              target_modules=list(PROJ))
        model = peft.get_peft_model(model, cfg, autocast_adapter_dtype=False)
        for n, p in model.named_parameters():
            if p.requires_grad:
                p.data = p.data.to(args.adapter_dtype)
    else:
        nn4.add_lora(model, rank=args.rank, alpha=args.alpha, dropout=args.dropout,
                     target=[f"*.{p}" for p in PROJ], dtype=args.adapter_dtype)
    if args.recompute:
        enable = getattr(model, "activation_checkpointing_enable", None)  # transformers >= 5.x
        if enable is not None:
            enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    return model


def _nbytes(tensors) -> int:
    seen, n = set(), 0
    for t in tensors:
        if t.numel() and t.data_ptr() not in seen:
            seen.add(t.data_ptr())
            n += t.numel() * t.element_size()
    return n


def weight_bytes(model) -> dict:
    """Bytes of the model's tensors by kind: the frozen projections (NVFP4 or BF16), the
    adapters, everything else (embeddings, norms, output head, counters)."""
    base, adapters = [], []
    for m in model.modules():
        if isinstance(m, nn4.FrozenLinear):
            base += [m.weight_data, m.weight_scales, m.weight_amax]
        elif isinstance(m, nn4.LoRALinear) and isinstance(m.base, torch.nn.Linear) and not isinstance(
                m.base, nn4.FrozenLinear):
            base.append(m.base.weight)
    try:
        from peft.tuners.lora import Linear as PeftLinear
    except ImportError:
        PeftLinear = ()
    for m in model.modules():
        if PeftLinear and isinstance(m, PeftLinear) and not isinstance(m.base_layer, nn4.FrozenLinear):
            base.append(m.base_layer.weight)
    adapters = [p for p in model.parameters() if p.requires_grad]
    total = _nbytes(list(model.parameters()) + list(model.buffers()))
    b, a = _nbytes(base), _nbytes(adapters)
    return {"base_linear": b, "adapters": a, "other": total - b - a, "total": total}


def state_bytes(opt) -> int:
    return _nbytes([v for s in opt.state.values() for v in s.values() if isinstance(v, torch.Tensor)])


# ------------------------------------------------------------------------------ checkpoints
def counters(model) -> dict:
    return {n: m.sr_step.detach().clone().cpu() for n, m in model.named_modules()
            if isinstance(m, (nn4.FrozenLinear, nn4.Linear))}


def save_checkpoint(path, model, opt, train, step, curve, val_curve, args):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    ckpt = {
        "step": step,
        "adapters": {n: p.detach().cpu() for n, p in model.named_parameters() if p.requires_grad},
        "counters": counters(model),
        "optimizer": opt.state_dict(),
        "rng": {"torch": torch.get_rng_state(), "data": train.gen.get_state(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []},
        "curve": curve,
        "val_curve": val_curve,
        "config": identity(args),
    }
    tmp = path + ".tmp"
    torch.save(ckpt, tmp)
    os.replace(tmp, path)


def identity(args) -> dict:
    """What a resumed run must share with the run that wrote the checkpoint."""
    keys = ("base_kind", "hidden", "intermediate", "layers", "heads", "kv_heads", "seq_len", "batch_size", "rank",
            "alpha", "dropout", "lora", "recipe", "seed", "steps", "lr", "warmup_steps", "skip_first_blocks",
            "skip_last_blocks", "init_from", "attn")
    return {k: getattr(args, k) for k in keys} | {"dtype": str(args.dtype), "adapter_dtype": str(args.adapter_dtype)}


def load_checkpoint(path, model, opt, train, args):
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    if ckpt["config"] != identity(args):
        diff = {k: (ckpt["config"].get(k), v) for k, v in identity(args).items() if ckpt["config"].get(k) != v}
        raise SystemExit(f"--resume: {path} was written by a run with other settings: {diff}")
    params = dict(model.named_parameters())
    with torch.no_grad():
        for n, v in ckpt["adapters"].items():
            params[n].copy_(v)
        mods = dict(model.named_modules())
        for n, v in ckpt["counters"].items():
            mods[n].sr_step.copy_(v)
    opt.load_state_dict(ckpt["optimizer"])
    torch.set_rng_state(ckpt["rng"]["torch"])
    if ckpt["rng"]["cuda"]:
        torch.cuda.set_rng_state_all(ckpt["rng"]["cuda"])
    train.gen.set_state(ckpt["rng"]["data"])
    return ckpt["step"], ckpt["curve"], ckpt["val_curve"]


# ------------------------------------------------------------------------------ training
@torch.no_grad()
def evaluate(model, batches):
    model.eval()
    total = 0.0
    for x, y in batches:
        logits = model(input_ids=x).logits
        total += F.cross_entropy(logits.float().reshape(-1, VOCAB), y.reshape(-1)).item()
    model.train()
    return total / len(batches)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def base_label(args, base: str) -> str:
    """What the run's frozen base is: "fp4", or the high-precision base's real dtype ("bf16",
    or "fp32": the default on the CPU, where BF16 matmuls are slow)."""
    return "fp4" if base == "fp4" else {torch.bfloat16: "bf16", torch.float32: "fp32"}[args.dtype]


def run(args, base: str, device: torch.device) -> dict:
    label = base_label(args, base)
    name = args.name or f"lora-{label}"
    args.base_kind = base
    ckpt_path = os.path.join(args.ckpt_dir or os.path.join(args.out, f"{name}-ckpt"), "ckpt.pt")
    if device.type == "cuda":
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    t0 = time.time()
    model = build_model(args, base, device)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.99), weight_decay=0.0,
                            fused=device.type == "cuda" and args.adapter_dtype != torch.bfloat16 or None)
    step_model = torch.compile(model) if args.compile else model
    train = Batches(os.path.join(args.data, "train.bin"), args.seq_len, args.batch_size, device, args.seed)
    val_src = Batches(os.path.join(args.data, "val.bin"), args.seq_len, args.batch_size, device, 1234)
    val_batches = [val_src.get() for _ in range(args.eval_batches)]
    tokens_per_step = args.seq_len * args.batch_size
    start, curve, val_curve = 0, [], []
    if args.resume:
        if not os.path.exists(ckpt_path):
            raise SystemExit(f"--resume: no checkpoint at {ckpt_path}")
        start, curve, val_curve = load_checkpoint(ckpt_path, model, opt, train, args)
        print(f"{name}: resumed from {ckpt_path} at step {start}", flush=True)
    wb = weight_bytes(model)
    n_params = sum(p.numel() for p in model.parameters()) + sum(
        m.in_features * m.out_features for m in model.modules() if isinstance(m, nn4.FrozenLinear))
    print(f"{name}: {n_params / 1e6:.1f}M parameters ({sum(p.numel() for p in params) / 1e6:.2f}M trainable, LoRA "
          f"rank {args.rank}), base projections {wb['base_linear'] / 2**20:.1f} MiB, device {device}, setup "
          f"{time.time() - t0:.1f} s", flush=True)

    sync(device)
    static_setup = torch.cuda.memory_allocated(device) if device.type == "cuda" else 0
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    progress = Progress(args.steps - start, args.log_interval)
    step_times, static_after_step, tok_s = [], None, float("nan")
    t_start = time.time()
    window_t = time.time()
    stopped = False
    for step in range(start, args.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args)
        x, y = train.get()
        logits = step_model(input_ids=x).logits
        loss = F.cross_entropy(logits.float().reshape(-1, VOCAB), y.reshape(-1))
        loss.backward()
        del logits
        gnorm = torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        curve.append({"step": step + 1, "loss": loss.item(), "grad_norm": gnorm.item()})
        if static_after_step is None:
            sync(device)
            static_after_step = torch.cuda.memory_allocated(device) if device.type == "cuda" else 0
        now = time.time()
        if step > start:  # the first step holds compilation and warm-up
            step_times.append(now - window_t)
            tok_s = tokens_per_step / (now - window_t)
        window_t = now
        progress.update(step + 1 - start, {"loss": f"{curve[-1]['loss']:.4f}", "tok/s": f"{tok_s:,.0f}"})
        last = step + 1 == args.steps
        if (step + 1) % args.eval_interval == 0 or last:
            vl = evaluate(step_model, val_batches)
            val_curve.append({"step": step + 1, "tokens": (step + 1) * tokens_per_step, "val_loss": vl})
            progress.write(f"step {step + 1}: val_loss {vl:.4f}")
            window_t = time.time()
        if (args.save_every and (step + 1) % args.save_every == 0) or last or step + 1 == args.stop_after:
            save_checkpoint(ckpt_path, model, opt, train, step + 1, curve, val_curve, args)
            window_t = time.time()
        if step + 1 == args.stop_after and not last:
            progress.write(f"step {step + 1}: --stop-after reached, checkpoint in {ckpt_path}")
            stopped = True
            break
    progress.close()
    sync(device)
    wall = time.time() - t_start
    mem = {"weights": wb, "optimizer_state": state_bytes(opt)}
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device)
        mem.update(static_setup=static_setup, static_after_step=static_after_step, peak_allocated=peak,
                   peak_reserved=torch.cuda.max_memory_reserved(device),
                   activations=peak - (static_after_step or static_setup))
    else:
        import resource

        mem["peak_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    done = curve[-1]["step"] if curve else start
    tail = [c["loss"] for c in curve[-max(1, len(curve) // 10):]]
    step_time = float(np.median(step_times)) if step_times else float("nan")
    report = {
        "name": name,
        "base": label,
        "recipe": nn4.get_recipe(args.recipe).to_dict() if base == "fp4" else {"name": label},
        "lora": {"impl": args.lora, "rank": args.rank, "alpha": args.alpha, "dropout": args.dropout,
                 "dtype": str(args.adapter_dtype)},
        "model": {"hidden": args.hidden, "intermediate": args.intermediate, "layers": args.layers,
                  "heads": args.heads, "kv_heads": args.kv_heads, "seq_len": args.seq_len, "params": n_params,
                  "vocab": VOCAB},
        "config": {k: (str(v) if isinstance(v, torch.dtype) else v) for k, v in vars(args).items()},
        "steps": done,
        "stopped_early": stopped,
        "tokens": done * tokens_per_step,
        "final_val_loss": val_curve[-1]["val_loss"] if val_curve else None,
        "final_train_loss": curve[-1]["loss"] if curve else None,
        "train_loss_last10pct": float(np.mean(tail)) if tail else None,
        "step_time_s": step_time,
        "tokens_per_s": tokens_per_step / step_time if step_times else None,
        "wall_s": wall,
        "memory": mem,
        "train_curve": curve,
        "val_curve": val_curve,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "torch": torch.__version__,
        "nvfp4": nvfp4.__version__,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"{name}.json")
    with open(path, "w") as f:
        json.dump(report, f, indent=1)
    print(summary_line(report) + f" -> {path}", flush=True)
    if val_curve and not stopped:
        plot([report], os.path.join(args.out, f"{name}.png"))
    del model, opt, step_model, params
    gc.collect()
    return report


def gib(b):
    return f"{b / 2**30:.3f} GiB" if b >= 2**28 else f"{b / 2**20:.2f} MiB"


def summary_line(r) -> str:
    m = r["memory"]
    s = (f"{r['name']}: {r['steps']} steps, train loss {r['final_train_loss']:.4f}, val loss "
         f"{r['final_val_loss'] if r['final_val_loss'] is None else round(r['final_val_loss'], 4)}, "
         f"base projections {gib(m['weights']['base_linear'])}, all weights {gib(m['weights']['total'])}")
    if "peak_allocated" in m:
        s += (f", static {gib(m['static_after_step'] or m['static_setup'])}, peak {gib(m['peak_allocated'])} "
              f"(activations and transients {gib(m['activations'])})")
    if r.get("tokens_per_s"):
        s += f", {r['tokens_per_s']:,.0f} tokens/s"
    return s


def plot(reports, png):
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print(f"no matplotlib: {png} not written (pip install matplotlib)")
        return
    import plot_runs

    if plot_runs.plot(reports, png):
        print(f"wrote {png}")


def compare(bf16, fp4, out) -> str:
    """The targets: FP4-base peak <= 0.45x the BF16 run's weight + activation memory, loss
    within 1%. `bf16` is the high-precision run: BF16, or FP32 where the model ran in FP32 (the
    CPU default), which the labels then say."""
    mb, mf = bf16["memory"], fp4["memory"]
    hp = bf16["base"].upper()
    lines = [f"# LoRA fine-tune: frozen FP4 base vs {hp} base ({fp4['device']}, {fp4['date'][:10]})", "",
             f"model: {fp4['model']['params'] / 1e6:.1f}M parameters, hidden {fp4['model']['hidden']}, "
             f"{fp4['model']['layers']} layers, {fp4['config']['batch_size']} x {fp4['config']['seq_len']} tokens "
             f"per step, recompute {fp4['config']['recompute']}, LoRA rank {fp4['lora']['rank']} "
             f"({fp4['lora']['dtype']}), {fp4['steps']} steps", "",
             "| base | base projections | all weights | static | peak | peak - static | train loss (last 10%) "
             "| val loss | tokens/s |", "|---|---|---|---|---|---|---|---|---|"]
    for r in (bf16, fp4):
        m = r["memory"]
        cells = [r["base"], gib(m["weights"]["base_linear"]), gib(m["weights"]["total"])]
        if "peak_allocated" in m:
            cells += [gib(m["static_after_step"]), gib(m["peak_allocated"]), gib(m["activations"])]
        else:
            cells += ["n/a", "n/a", "n/a"]
        cells += [f"{r['train_loss_last10pct']:.4f}", f"{r['final_val_loss']:.4f}",
                  f"{r['tokens_per_s']:,.0f}" if r.get("tokens_per_s") else "n/a"]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    if "peak_allocated" in mb:
        ratio = mf["peak_allocated"] / mb["peak_allocated"]
        wa = mb["weights"]["total"] + mb["activations"]
        lines.append(f"- peak memory, FP4 base / {hp} base: {ratio:.3f}")
        lines.append(f"- peak memory, FP4 base / ({hp} run's weights + activations = {gib(wa)}): "
                     f"{mf['peak_allocated'] / wa:.3f} (target <= 0.45)")
    wr = mf["weights"]["base_linear"] / mb["weights"]["base_linear"]
    line = f"- base projection bytes, FP4 / {hp}: {wr:.3f}"
    if hp == "FP32":
        line += f" (FP4 / BF16: {2 * wr:.3f})"
    lines.append(line)
    for key, what in (("train_loss_last10pct", "train loss (mean of the last 10% of steps)"),
                      ("final_val_loss", "validation loss")):
        d = fp4[key] / bf16[key] - 1
        lines.append(f"- {what}, FP4 vs {hp} base: {100 * d:+.2f}% (target within 1%)")
    text = "\n".join(lines)
    path = os.path.join(out, "lora-compare.md")
    with open(path, "w") as f:
        f.write(text + "\n")
    plot([bf16, fp4], os.path.join(out, "lora-compare.png"))
    return text + f"\n\n-> {path}"


# ------------------------------------------------------------------------------ main
def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default="fp4", choices=["fp4", "bf16", "both"],
                    help="frozen base: NVFP4 projections, high precision (bf16: the model's --dtype, which "
                         "is FP32 on the CPU unless --dtype bf16; reports name it by that dtype), or both runs "
                         "one after the other")
    ap.add_argument("--size", default=None, choices=sorted(SIZES), help="model size (default 400m; smoke with --smoke)")
    for k in ("hidden", "intermediate", "layers", "heads", "kv_heads", "seq_len", "batch_size"):
        ap.add_argument("--" + k.replace("_", "-"), type=int, dest=k)
    ap.add_argument("--init-from", default=None, help="a LlamaForCausalLM saved with save_pretrained (local)")
    ap.add_argument("--recipe", default="nvfp4", help="the frozen layers' recipe (X and dY quantization)")
    ap.add_argument("--backend", default="auto", choices=["auto", "cutlass", "cudnn", "reference"])
    ap.add_argument("--skip-first-blocks", type=int, default=0, help="first N blocks keep a BF16 base")
    ap.add_argument("--skip-last-blocks", type=int, default=0, help="last N blocks keep a BF16 base")
    ap.add_argument("--lora", default="builtin", choices=["builtin", "peft"], help="nvfp4.nn.add_lora or peft")
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--alpha", type=float, default=16.0)
    ap.add_argument("--dropout", type=float, default=0.0, help="LoRA dropout (each adapter then keeps its own "
                                                              "copy of its input for the backward)")
    ap.add_argument("--adapter-dtype", default="bf16", choices=["bf16", "fp32"])
    ap.add_argument("--dtype", default=None, choices=["bf16", "fp32"],
                    help="dtype of the model (default bf16 on CUDA, fp32 on CPU)")
    ap.add_argument("--recompute", action="store_true", help="activation checkpointing of every block")
    ap.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"],
                    help="attention implementation (eager: deterministic backward on CUDA)")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--steps", type=int, default=None, help="optimizer steps (default 200; 12 with --smoke)")
    ap.add_argument("--lr", type=float, default=None, help="peak learning rate (default 1e-3)")
    ap.add_argument("--warmup-steps", type=int, default=20)
    ap.add_argument("--eval-interval", type=int, default=None)
    ap.add_argument("--eval-batches", type=int, default=None, help="validation batches (default 10; 2 with --smoke)")
    ap.add_argument("--log-interval", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default=None, help="default: cuda when available, else cpu")
    ap.add_argument("--data", default=prepare_data.DEFAULT_OUT, help="prepared corpus directory")
    ap.add_argument("--data-max-mb", type=float, default=0.0, help="prepare only this many MB of source (0: all)")
    ap.add_argument("--out", default=os.path.join(prepare_data.RUNS_DIR, "lora"),
                    help="directory for reports, plots and checkpoints (default: %(default)s)")
    ap.add_argument("--name", default=None, help="run name (default lora-fp4 / lora-bf16, or lora-fp32 for an FP32 model)")
    ap.add_argument("--ckpt-dir", default=None, help="checkpoint directory (default OUT/NAME-ckpt)")
    ap.add_argument("--save-every", type=int, default=0, help="write a checkpoint every N steps (0: at the end)")
    ap.add_argument("--stop-after", type=int, default=0, help="write a checkpoint after N steps and stop")
    ap.add_argument("--resume", action="store_true", help="continue from the checkpoint in --ckpt-dir")
    ap.add_argument("--smoke", action="store_true", help="tiny model on the CPU, a few steps")
    a = ap.parse_args(argv)
    size = SIZES[a.size or ("smoke" if a.smoke else "400m")]
    for k, v in size.items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    if a.smoke:
        a.device = a.device or "cpu"
        a.steps = a.steps or 12
        a.eval_batches = a.eval_batches or 2
        a.warmup_steps = min(a.warmup_steps, 2)
        a.log_interval = min(a.log_interval, 4)
    a.device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    a.steps = a.steps or 200
    a.lr = a.lr or 1e-3
    a.eval_batches = a.eval_batches or 10
    a.eval_interval = a.eval_interval or max(1, a.steps // 5)
    dt = a.dtype or ("bf16" if a.device.startswith("cuda") else "fp32")
    a.dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[dt]
    a.adapter_dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[a.adapter_dtype]
    if a.hidden % a.heads or a.heads % a.kv_heads:
        ap.error("--hidden must be a multiple of --heads, and --heads of --kv-heads")
    if a.hidden % 16 or a.intermediate % 16:
        ap.error("--hidden and --intermediate must be multiples of 16 (NVFP4 blocks)")
    if a.base == "both" and (a.resume or a.stop_after or a.name or a.ckpt_dir):
        ap.error("--base both runs two fresh runs: no --resume/--stop-after/--name/--ckpt-dir")
    return a


def main(argv=None):
    args = parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    meta = prepare_data.prepare(args.data, max_mb=args.data_max_mb, quiet=False)
    print(f"data: {meta['train_tokens'] / 1e6:.1f}M train bytes in {args.data}", flush=True)
    if args.base != "both":
        return run(args, args.base, device)
    reports = {b: run(args, b, device) for b in ("bf16", "fp4")}  # "bf16": the high-precision base
    print(compare(reports["bf16"], reports["fp4"], args.out), flush=True)
    return reports


if __name__ == "__main__":
    main()
