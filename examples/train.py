#!/usr/bin/env python3
"""Train a byte-level decoder-only transformer with its linear layers in NVFP4.

The corpus is the Python standard library's source (examples/prepare_data.py, prepared on
first use). The model's attention and MLP projections go through nvfp4.nn.Linear with the
chosen recipe; embeddings, norms, attention itself, the output head, the optimizer state and
the master weights stay in high precision (NVIDIA's recipe; docs/design.md, "Numerics").

    python3 examples/train.py --smoke                          # CPU, toy size, < 1 minute
    python3 examples/train.py --recipe nvfp4 --steps 500 --compile --out runs/
    python3 examples/plot_runs.py runs/*.json -o runs/loss.png
    torchrun --nproc-per-node 4 examples/train.py --fsdp --fp4-all-gather --size 400m --out runs/

Under torchrun with --fsdp, every block and the root are sharded by FSDP2 (fully_shard);
--batch-size is then the global micro-batch (split across the ranks, the same sequences for
any number of ranks), and --fp4-all-gather makes FSDP2 gather the NVFP4 layers' weights in
NVFP4 (nvfp4.distributed). Rank 0 writes the report.

Writes OUT/NAME.json (config, loss curves, validation loss, tokens/s, peak memory); OUT
defaults to ~/.cache/nvfp4/runs, beside the prepared corpus, not the working directory.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import json
import math
import os
import platform
import resource
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import prepare_data  # noqa: E402

import nvfp4  # noqa: E402
import nvfp4.nn as nn4  # noqa: E402
from nvfp4.nn.fp8 import FP8_RECIPES, FP8Linear  # noqa: E402

# d_model, layers, heads, context, batch (sequences per micro-batch)
SIZES = {
    "smoke": dict(d_model=64, n_layers=2, n_heads=4, seq_len=64, batch_size=8),
    "small": dict(d_model=384, n_layers=6, n_heads=6, seq_len=512, batch_size=16),     # ~11M parameters
    "full": dict(d_model=768, n_layers=12, n_heads=12, seq_len=1024, batch_size=16),   # ~85M parameters
    "400m": dict(d_model=2048, n_layers=8, n_heads=16, seq_len=2048, batch_size=8),    # ~403M parameters
    "1b": dict(d_model=2048, n_layers=20, n_heads=16, seq_len=2048, batch_size=8),     # ~1.0B parameters
    # with --moe (default 32 experts of d_model hidden units, top-2): ~0.57B parameters, ~70M active
    "moe": dict(d_model=1024, n_layers=8, n_heads=16, seq_len=1024, batch_size=16),
}
VOCAB = 256
#: Where reports go unless --out says otherwise (never the working directory).
DEFAULT_RUNS = prepare_data.RUNS_DIR


# ------------------------------------------------------------------------------ model
class Attention(nn.Module):
    def __init__(self, d, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.proj = nn.Linear(d, d, bias=False)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class MLP(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, 4 * d, bias=False)
        self.out = nn.Linear(4 * d, d, bias=False)

    def forward(self, x):
        return self.out(F.gelu(self.fc(x), approximate="tanh"))


class Experts(nn.Module):
    """E GELU MLPs stored as 3D parameters ([E, out, in], the layout of Hugging Face's fused
    experts), run on the tokens routed to each: tokens sorted by expert on the device and one
    torch._grouped_mm per projection (no host synchronization). nvfp4.convert() turns this
    module into nvfp4.nn.GroupedExperts: the same projections as grouped NVFP4 GEMMs."""

    def __init__(self, d, n_experts, d_ff):
        super().__init__()
        self.num_experts = n_experts
        self.up_proj = nn.Parameter(torch.empty(n_experts, d_ff, d))
        self.down_proj = nn.Parameter(torch.empty(n_experts, d, d_ff))

    def act_fn(self, h):
        return F.gelu(h, approximate="tanh")

    def forward(self, x, top_k_index, top_k_weights):
        t, k = top_k_index.shape
        ids, perm = torch.sort(top_k_index.reshape(-1), stable=True)
        counts = torch.zeros(self.num_experts, dtype=torch.int64, device=x.device)
        counts.scatter_add_(0, ids, torch.ones_like(ids))
        offs = counts.cumsum(0).to(torch.int32)
        xs = x[perm // k]
        h = torch._grouped_mm(xs, self.up_proj.to(xs.dtype).transpose(-2, -1), offs=offs)
        h = torch._grouped_mm(self.act_fn(h), self.down_proj.to(xs.dtype).transpose(-2, -1), offs=offs)
        h = h * top_k_weights.reshape(-1)[perm].unsqueeze(-1)
        inv = torch.empty_like(perm)
        inv[perm] = torch.arange(perm.shape[0], device=perm.device)
        return h[inv].view(t, k, -1).sum(1).to(x.dtype)


class _AuxLoss(torch.autograd.Function):
    """Adds d(coef * aux)/d(aux) to the backward pass without changing the forward value (the
    load-balancing loss reaches the router without a second output of the model)."""

    @staticmethod
    def forward(ctx, y, aux, coef):
        ctx.coef = coef
        ctx.shape = aux.shape
        return y

    @staticmethod
    def backward(ctx, dy):
        return dy, torch.full(ctx.shape, ctx.coef, device=dy.device, dtype=torch.float32), None


class MoEMLP(nn.Module):
    """Top-k routing (softmax router, kept in high precision) over Experts, with the Switch
    Transformer load-balancing loss (coefficient 0.01)."""

    def __init__(self, d, n_experts, top_k, d_ff):
        super().__init__()
        self.top_k = top_k
        self.router = nn.Linear(d, n_experts, bias=False)
        self.experts = Experts(d, n_experts, d_ff)

    def forward(self, x):
        b, t, d = x.shape
        x2 = x.reshape(-1, d)
        probs = torch.softmax(self.router(x2).float(), dim=-1)
        w, idx = torch.topk(probs, self.top_k, dim=-1)
        w = w / w.sum(-1, keepdim=True)
        y = self.experts(x2, idx, w)
        e = probs.shape[-1]
        frac = torch.zeros(e, device=x.device).scatter_add_(0, idx.reshape(-1), torch.ones_like(w.reshape(-1)))
        aux = e * (frac / idx.numel() * probs.mean(0)).sum()
        return _AuxLoss.apply(y, aux, 0.01).reshape(b, t, d)


class Block(nn.Module):
    def __init__(self, d, n_heads, moe=None):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = Attention(d, n_heads)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = MLP(d) if moe is None else MoEMLP(d, *moe)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, d_model, n_layers, n_heads, seq_len, vocab=VOCAB, moe=None):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(seq_len, d_model)
        self.blocks = nn.ModuleList([Block(d_model, n_heads, moe) for _ in range(n_layers)])
        self.ln_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab, bias=False)
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                # residual-branch outputs scaled down with depth (GPT-2's initialization)
                out = name.endswith(("proj.weight", "out.weight", "experts.down_proj"))
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * n_layers) if out else 0.02)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for b in self.blocks:
            x = b(x)
        return self.lm_head(self.ln_f(x))


def build_model(args, device) -> GPT:
    torch.manual_seed(args.seed)
    moe = (args.moe, args.moe_top_k, args.moe_ffn) if getattr(args, "moe", 0) else None
    model = GPT(args.d_model, args.n_layers, args.n_heads, args.seq_len, moe=moe)
    return model.to(device=device, dtype=args.master_dtype)


def make_recipe(args):
    """The recipe named by --recipe, with the flag overrides."""
    if args.recipe == "bf16":
        return nn4.get_recipe("bf16")
    if args.recipe in FP8_RECIPES:  # the FP8 baseline: FP8Linear layers
        if args.no_fp4_hadamard or args.no_fp4_stochastic_rounding:
            raise SystemExit("--no-fp4-*: these flags change FP4 recipes, not the FP8 ones")
        return FP8_RECIPES[args.recipe]
    r = nn4.get_recipe(args.recipe, backend=args.backend, seed=args.seed)
    if args.no_fp4_hadamard:
        r = r.replace(wgrad_dy={"rht": False}, wgrad_x={"rht": False})
    if args.no_fp4_stochastic_rounding:
        r = r.replace(dy={"rounding": "rtn"}, wgrad_dy={"rounding": "rtn"})
    return r


def convert_model(model, args, recipe):
    """Quantize the blocks' linear layers, except the first/last N blocks (kept in BF16)."""
    if not getattr(recipe, "quantized", True):
        return []
    n = args.n_layers
    keep = [i for i in range(n) if i < args.skip_quant_first_layers or i >= n - args.skip_quant_last_layers]
    exclude = list(nn4.DEFAULT_EXCLUDE) + list(nn4.ROUTER_NAMES) + [f"blocks.{i}.*" for i in keep]
    nn4.convert(model, recipe, include="blocks.*", exclude=exclude)
    if getattr(args, "saved_operands", "fp4") != "fp4":
        nn4.set_saved_operands(model, args.saved_operands)
    return [n for n, m in model.named_modules() if isinstance(m, (nn4.Linear, FP8Linear, nn4.GroupedExperts))]


# ------------------------------------------------------------------------------ data
class Batches:
    def __init__(self, path, seq_len, batch_size, device, seed, rank=0, world=1):
        self.data = np.memmap(path, dtype=np.uint8, mode="r")
        if self.data.size <= seq_len + 1:
            raise ValueError(f"{path}: {self.data.size} tokens, fewer than one sequence of {seq_len}")
        self.seq_len, self.batch_size, self.device = seq_len, batch_size, device
        self.gen = torch.Generator().manual_seed(seed)
        # data parallel: every rank draws the global batch and keeps its share of the rows
        self.rows = slice(rank * batch_size // world, (rank + 1) * batch_size // world)

    def get(self):
        t = self.seq_len
        ix = torch.randint(self.data.size - t - 1, (self.batch_size,), generator=self.gen).tolist()[self.rows]
        buf = np.stack([self.data[i:i + t + 1] for i in ix]).astype(np.int64)
        xy = torch.from_numpy(buf)
        if self.device.type == "cuda":
            xy = xy.pin_memory().to(self.device, non_blocking=True)
        return xy[:, :-1], xy[:, 1:]


def lr_at(step, args):
    warm = max(1, min(args.warmup_steps, args.steps // 10))
    if step < warm:
        return args.lr * (step + 1) / warm
    p = (step - warm) / max(1, args.steps - warm)
    return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, p))))


def autocast_ctx(args, device):
    if args.amp_dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=args.amp_dtype)


@torch.no_grad()
def evaluate(model, val_batches, args, device):
    model.eval()
    total = torch.zeros((), dtype=torch.float64, device=device)  # the sum a Python float would hold
    for x, y in val_batches:
        with autocast_ctx(args, device):
            logits = model(x)
        total += F.cross_entropy(logits.float().reshape(-1, VOCAB), y.reshape(-1))
    model.train()
    return mean_over_ranks(total, args).item() / len(val_batches)


# ------------------------------------------------------------------------------ data parallel (FSDP2)
def init_distributed(args):
    """torchrun's process group and this rank's device; (rank, world) = (0, 1) without torchrun."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not args.fsdp:
        raise SystemExit("train.py: launched on several ranks without --fsdp")
    if not args.fsdp:
        return 0, 1, torch.device(args.device)
    import torch.distributed as dist

    rank = int(os.environ.get("RANK", "0"))
    if args.batch_size % world:
        raise SystemExit(f"--batch-size: the global micro-batch ({args.batch_size}) must divide among {world} ranks")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    if args.device.startswith("cuda"):
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", rank=rank, world_size=world, device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo", rank=rank, world_size=world)
    return rank, world, device


def shard_model(model, args, device):
    """FSDP2: each block, then the root; the NVFP4 layers' weights gathered in NVFP4 with
    --fp4-all-gather. Under BF16 autocast the other parameters are gathered in BF16 and the
    gradients reduced in FP32."""
    import nvfp4.distributed as nd
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    fp4 = nd.enable_fp4_all_gather(model) if args.fp4_all_gather else []
    mesh = init_device_mesh(device.type, (args.world,))
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if args.amp_dtype \
        else MixedPrecisionPolicy()
    for b in model.blocks:
        fully_shard(b, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)
    return fp4


def mean_over_ranks(t, args):
    if args.world == 1:
        return t
    import torch.distributed as dist

    t = t.clone()
    dist.all_reduce(t)  # gloo has no AVG: a sum, then the mean (every rank holds as many tokens)
    return t / args.world


def full_value(t):
    return t.full_tensor() if hasattr(t, "full_tensor") else t


class Progress:
    """tqdm when it is installed, plain lines otherwise."""

    def __init__(self, total, every):
        self.every, self.bar = every, None
        try:
            from tqdm import tqdm

            self.bar = tqdm(total=total, dynamic_ncols=True, mininterval=0.5 if sys.stderr.isatty() else 10)
        except ImportError:
            pass

    def update(self, step, info: dict):
        text = " ".join(f"{k}={v}" for k, v in info.items())
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix_str(text, refresh=False)
        elif step % self.every == 0 or step == 1:
            print(f"step {step}: {text}", flush=True)

    def write(self, msg):
        if self.bar is not None:
            self.bar.write(msg)
        else:
            print(msg, flush=True)

    def close(self):
        if self.bar is not None:
            self.bar.close()


class Quiet:
    """The progress display of the ranks other than 0."""

    def update(self, step, info):
        pass

    def write(self, msg):
        pass

    def close(self):
        pass


def peak_memory(device):
    if device.type == "cuda":
        return {"peak_allocated_gb": torch.cuda.max_memory_allocated(device) / 2**30,
                "peak_reserved_gb": torch.cuda.max_memory_reserved(device) / 2**30}
    return {"peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}


# ------------------------------------------------------------------------------ main
def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--recipe", default="nvfp4", choices=sorted(nn4.RECIPES) + sorted(FP8_RECIPES))
    ap.add_argument("--backend", default="auto", choices=["auto", "cutlass", "cudnn", "reference"])
    ap.add_argument("--no-fp4-hadamard", action="store_true", help="no RHT on the wgrad operands")
    ap.add_argument("--no-fp4-stochastic-rounding", action="store_true", help="round dY to nearest")
    ap.add_argument("--skip-quant-first-layers", type=int, default=None,
                    help="first N transformer blocks kept in BF16 (default 1, 0 with --smoke)")
    ap.add_argument("--skip-quant-last-layers", type=int, default=None,
                    help="last N transformer blocks kept in BF16 (default 1, 0 with --smoke)")
    ap.add_argument("--saved-operands", default="fp4", choices=["fp4", "decoded"],
                    help="what the NVFP4 layers keep for their backward GEMMs: FP4 codes (default) or decoded "
                         "BF16 values (more activation memory, no decode passes on Hopper, the same bits)")
    ap.add_argument("--master-dtype", default="fp32", choices=["fp32", "bf16"], help="parameter dtype")
    ap.add_argument("--amp", default="auto", choices=["auto", "bf16", "off"],
                    help="autocast: auto = bf16 on CUDA, off on CPU")
    ap.add_argument("--grad-accumulation", type=int, default=1, help="micro-batches per optimizer step")
    ap.add_argument("--steps", type=int, default=None, help="optimizer steps (default 500; 20 with --smoke)")
    ap.add_argument("--size", default=None, choices=sorted(SIZES), help="model size (default full; smoke with --smoke)")
    ap.add_argument("--d-model", type=int)
    ap.add_argument("--n-layers", type=int)
    ap.add_argument("--n-heads", type=int)
    ap.add_argument("--seq-len", type=int)
    ap.add_argument("--batch-size", type=int, help="sequences per micro-batch")
    ap.add_argument("--lr", type=float, default=None, help="peak learning rate (default 6e-4; 3e-3 with --smoke)")
    ap.add_argument("--warmup-steps", type=int, default=100)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--compile", action="store_true", help="torch.compile(model, fullgraph=True)")
    ap.add_argument("--compile-backend", default="inductor")
    ap.add_argument("--cooldown-frac", type=float, default=0.0,
                    help="run the last fraction of steps with every quantized layer in BF16")
    ap.add_argument("--cooldown-forward-only", action="store_true",
                    help="the cooldown switches only the forward GEMMs to BF16 (backward stays quantized)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-interval", type=int, default=None, help="steps between validations (default steps/10)")
    ap.add_argument("--eval-batches", type=int, default=None, help="validation micro-batches (default 20; 2 with --smoke)")
    ap.add_argument("--log-interval", type=int, default=10)
    ap.add_argument("--max-minutes", type=float, default=0.0, help="stop early after this long (0: no limit)")
    ap.add_argument("--device", default=None, help="default: cuda when available, else cpu")
    ap.add_argument("--data", default=prepare_data.DEFAULT_OUT, help="prepared corpus directory")
    ap.add_argument("--out", default=DEFAULT_RUNS, help="directory for the JSON report (default: %(default)s)")
    ap.add_argument("--name", default=None, help="run name (default: from the recipe and flags)")
    ap.add_argument("--smoke", action="store_true", help="toy model on CPU, a few steps")
    ap.add_argument("--fsdp", action="store_true", help="shard with FSDP2 across torchrun's ranks (--batch-size is "
                    "then the global micro-batch)")
    ap.add_argument("--fp4-all-gather", action="store_true", help="with --fsdp: gather the NVFP4 layers' weights "
                    "in NVFP4 (nvfp4.distributed)")
    ap.add_argument("--moe", type=int, default=None, metavar="E",
                    help="mixture of experts: E experts per MLP (default 32 with --size moe, 8 with --smoke; "
                         "0: dense MLPs); the experts run as grouped NVFP4 GEMMs")
    ap.add_argument("--moe-top-k", type=int, default=2, help="experts per token (default 2)")
    ap.add_argument("--moe-ffn", type=int, default=None, help="hidden units per expert (default d_model)")
    a = ap.parse_args(argv)

    size = SIZES[a.size or ("smoke" if a.smoke else "full")]
    for k, v in size.items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    if a.smoke:
        a.device = a.device or "cpu"
        a.steps = a.steps or 20
        a.lr = a.lr or 3e-3
        a.eval_batches = a.eval_batches or 2
        a.eval_interval = a.eval_interval or max(1, a.steps // 2)
        a.log_interval = min(a.log_interval, 5)
        a.warmup_steps = min(a.warmup_steps, 5)
    a.steps = a.steps or 500
    a.lr = a.lr or 6e-4
    a.eval_batches = a.eval_batches or 20
    a.eval_interval = a.eval_interval or max(1, a.steps // 10)
    if a.moe is None:
        a.moe = 32 if a.size == "moe" else 0
    elif a.moe and a.smoke and a.size is None:
        a.moe = min(a.moe, 8)
    if a.moe:
        a.moe_ffn = a.moe_ffn or a.d_model
        if not 1 <= a.moe_top_k <= a.moe:
            ap.error("--moe-top-k must lie in [1, --moe]")
    default_skip = 0 if a.smoke else 1
    a.skip_quant_first_layers = default_skip if a.skip_quant_first_layers is None else a.skip_quant_first_layers
    a.skip_quant_last_layers = default_skip if a.skip_quant_last_layers is None else a.skip_quant_last_layers
    a.device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    a.master_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[a.master_dtype]
    amp = a.amp if a.amp != "auto" else ("bf16" if a.device.startswith("cuda") else "off")
    a.amp_dtype = torch.bfloat16 if amp == "bf16" else None
    if a.d_model % a.n_heads:
        ap.error("--d-model must be a multiple of --n-heads")
    if a.grad_accumulation < 1:
        ap.error("--grad-accumulation must be >= 1")
    if a.fp4_all_gather and not a.fsdp:
        ap.error("--fp4-all-gather: needs --fsdp")
    if a.fsdp and a.compile:
        ap.error("--compile: not combined with --fsdp in this example")
    if a.saved_operands != "fp4" and (a.recipe in FP8_RECIPES or not nn4.get_recipe(a.recipe).fused
                                      or not nn4.get_recipe(a.recipe).quantized):
        ap.error(f"--saved-operands: applies to the fused NVFP4 recipes' layers, not to --recipe {a.recipe}")
    if a.fp4_all_gather and a.cooldown_frac:
        ap.error("--cooldown-frac: a BF16 cooldown needs the dense weights, which --fp4-all-gather does not gather")
    if a.name is None:
        a.name = a.recipe
        if a.no_fp4_hadamard:
            a.name += "-no_hadamard"
        if a.no_fp4_stochastic_rounding:
            a.name += "-no_sr"
        if a.cooldown_frac:
            a.name += f"-{'fwd' if a.cooldown_forward_only else ''}cooldown{a.cooldown_frac:g}"
        if a.fsdp:
            a.name += f"-fsdp{os.environ.get('WORLD_SIZE', '1')}" + ("-fp4ag" if a.fp4_all_gather else "")
        if a.moe:
            a.name += f"-moe{a.moe}x{a.moe_top_k}"
        if a.saved_operands != "fp4":
            a.name += f"-saved_{a.saved_operands}"
    return a


def main(argv=None):
    args = parse_args(argv)
    args.rank, args.world, device = init_distributed(args)
    rank0 = args.rank == 0
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.cuda.reset_peak_memory_stats(device)
    if rank0:
        meta = prepare_data.prepare(args.data, quiet=False)
    if args.world > 1:
        import torch.distributed as dist

        dist.barrier()  # rank 0 prepares the corpus once
    meta = prepare_data.prepare(args.data, quiet=True) if not rank0 else meta
    recipe = make_recipe(args)
    if args.rank and isinstance(recipe, nn4.Recipe):
        # each rank its own stochastic-rounding bits; rank 0 keeps the single-process seed
        recipe = recipe.replace(seed=(recipe.seed + 1_000_003 * args.rank) % 2**63)
    model = build_model(args, device)
    n_params = sum(p.numel() for p in model.parameters())
    converted = convert_model(model, args, recipe)
    fp4_gathered = shard_model(model, args, device) if args.fsdp else []
    if rank0:
        print(f"{args.name}: {n_params / 1e6:.1f}M parameters, {len(converted)} linear layers in NVFP4 "
              f"(recipe {recipe.name}), device {device}, data {meta['train_tokens'] / 1e6:.1f}M train bytes"
              + (f", FSDP2 on {args.world} ranks, {len(fp4_gathered)} weights gathered in NVFP4" if args.fsdp else ""),
              flush=True)

    fused = device.type == "cuda"
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, betas=(0.9, 0.95),
                            fused=fused)
    step_model = torch.compile(model, fullgraph=True, backend=args.compile_backend) if args.compile else model
    cooldown = (nn4.Cooldown(model, args.steps, args.cooldown_frac, forward_only=args.cooldown_forward_only)
                if args.cooldown_frac > 0 else None)

    train = Batches(os.path.join(args.data, "train.bin"), args.seq_len, args.batch_size, device, args.seed,
                    args.rank, args.world)
    val_src = Batches(os.path.join(args.data, "val.bin"), args.seq_len, args.batch_size, device, 1234, args.rank,
                      args.world)
    val_batches = [val_src.get() for _ in range(args.eval_batches)]
    tokens_per_step = args.seq_len * args.batch_size * args.grad_accumulation

    curve, val_curve, step_times = [], [], []
    pending = []  # losses kept on the device until the next log (no sync per step)
    progress = Progress(args.steps, args.log_interval) if rank0 else Quiet()
    gather_bytes = None
    t_start = time.time()
    stopped_early = False
    tok_s = float("nan")
    window_t, window_steps = time.time(), 0
    for step in range(args.steps):
        if cooldown is not None and cooldown(step):
            progress.write(f"step {step}: cooldown, quantized layers now run "
                           f"{'their forward GEMM ' if args.cooldown_forward_only else ''}in BF16")
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args)
        loss_sum = torch.zeros((), device=device)
        counting = args.fsdp and step == min(1, args.steps - 1)  # the bytes one step all-gathers
        if counting:
            import nvfp4.distributed as nd

            counter_ctx = nd.count_collectives()
            counter = counter_ctx.__enter__()
        for _ in range(args.grad_accumulation):
            x, y = train.get()
            with autocast_ctx(args, device):
                logits = step_model(x)
            loss = F.cross_entropy(logits.float().reshape(-1, VOCAB), y.reshape(-1)) / args.grad_accumulation
            loss.backward()
            loss_sum += loss.detach()
        if counting:
            counter_ctx.__exit__(None, None, None)
            gather_bytes = counter.all_gather_bytes
        gnorm = full_value(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
        loss_sum = mean_over_ranks(loss_sum, args)
        opt.step()
        opt.zero_grad(set_to_none=True)
        pending.append((step + 1, loss_sum, gnorm))
        window_steps += 1
        last = step + 1 == args.steps
        if (step + 1) % args.log_interval == 0 or last:
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            now = time.time()
            # the first window holds compilation and warm-up: report it, but do not time with it
            if step + 1 > args.log_interval:
                step_times.append((now - window_t) / window_steps)
            tok_s = window_steps * tokens_per_step / (now - window_t)
            for s, l, gn in pending:
                curve.append({"step": s, "loss": l.item(), "grad_norm": gn.item()})
            pending.clear()
            window_t, window_steps = now, 0
        info = {"loss": f"{curve[-1]['loss']:.4f}" if curve else "-", "tok/s": f"{tok_s:,.0f}"}
        progress.update(step + 1, info)
        if (step + 1) % args.eval_interval == 0 or last:
            vl = evaluate(step_model, val_batches, args, device)
            val_curve.append({"step": step + 1, "tokens": (step + 1) * tokens_per_step, "val_loss": vl})
            progress.write(f"step {step + 1}: val_loss {vl:.4f}")
            window_t = time.time()  # validation time is not training time
        out_of_time = bool(args.max_minutes) and time.time() - t_start > 60 * args.max_minutes and not last
        if args.max_minutes and args.world > 1:  # every rank stops at the same step
            flag = torch.tensor([float(out_of_time)], device=device)
            out_of_time = bool(mean_over_ranks(flag, args).item() > 0)
        if out_of_time:
            progress.write(f"stopping at step {step + 1}: --max-minutes {args.max_minutes} reached")
            stopped_early = True
            if not val_curve or val_curve[-1]["step"] != step + 1:
                vl = evaluate(step_model, val_batches, args, device)
                val_curve.append({"step": step + 1, "tokens": (step + 1) * tokens_per_step, "val_loss": vl})
            for s, l, gn in pending:
                curve.append({"step": s, "loss": l.item(), "grad_norm": gn.item()})
            break
    progress.close()
    wall = time.time() - t_start
    if not rank0:
        import torch.distributed as dist

        dist.barrier()
        dist.destroy_process_group()
        return None

    steps_done = val_curve[-1]["step"]
    step_time = float(np.median(step_times)) if step_times else float("nan")
    report = {
        "name": args.name,
        "recipe": dataclasses.asdict(recipe),
        "converted_layers": converted,
        "model": {"d_model": args.d_model, "n_layers": args.n_layers, "n_heads": args.n_heads,
                  "seq_len": args.seq_len, "params": n_params, "vocab": VOCAB,
                  "moe": {"experts": args.moe, "top_k": args.moe_top_k, "ffn": args.moe_ffn} if args.moe else None},
        "config": {k: (str(v) if isinstance(v, torch.dtype) else v) for k, v in vars(args).items()},
        "data": meta,
        "steps": steps_done,
        "stopped_early": stopped_early,
        "tokens": steps_done * tokens_per_step,
        "final_val_loss": val_curve[-1]["val_loss"],
        "final_train_loss": curve[-1]["loss"] if curve else None,
        "step_time_s": step_time,
        "tokens_per_s": tokens_per_step / step_time if step_times else None,
        "wall_s": wall,
        "memory": peak_memory(device),
        "train_curve": curve,
        "val_curve": val_curve,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "distributed": {"world_size": args.world, "fsdp": args.fsdp, "fp4_all_gather": args.fp4_all_gather,
                        "fp4_gathered_layers": fp4_gathered, "rows_per_rank": args.batch_size // args.world,
                        "all_gather_bytes_per_step_per_rank": gather_bytes},
        "torch": torch.__version__,
        "nvfp4": nvfp4.__version__,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"{args.name}.json")
    with open(path, "w") as f:
        json.dump(report, f, indent=1)
    tps = f"{report['tokens_per_s']:,.0f}" if report["tokens_per_s"] else "n/a"
    print(f"{args.name}: {steps_done} steps, {report['tokens'] / 1e6:.2f}M tokens, final val loss "
          f"{report['final_val_loss']:.4f}, {tps} tokens/s, {wall:.0f} s, memory {report['memory']} -> {path}")
    if args.fsdp:
        import torch.distributed as dist

        dist.barrier()
        dist.destroy_process_group()
    return report


if __name__ == "__main__":
    main()
