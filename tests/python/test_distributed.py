"""nvfp4.nn under DDP and FSDP2 (fully_shard) on 2 GPUs: a few AdamW steps of a converted
model must match a single-process run that feeds the same per-rank micro-batches through
gradient accumulation (same quantization scales, same SR seeds and offsets), so the only
differences left are those of the gradient reduction.

Runs only where torch.cuda.device_count() >= 2 (device kind nvidia-h200-x2):
    python3 -m pytest tests/python/test_distributed.py -q
"""
import copy
import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn

WORLD = 2
STEPS = 3

HAS_GPUS = torch.cuda.is_available() and torch.cuda.device_count() >= WORLD


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.up = nn.Linear(d, 4 * d)
        self.down = nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(self.norm(x))))


class Net(nn.Module):
    def __init__(self, d=256, n=2, out=64):
        super().__init__()
        self.blocks = nn.ModuleList([Block(d) for _ in range(n)])
        self.head = nn.Linear(d, out)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _recipe(rank):
    import nvfp4.nn as nn4

    # one SR seed per data-parallel rank, so ranks do not share random bits
    return nn4.get_recipe("nvfp4", seed=1000 + rank)


def _worker(rank, port, mode, device_type):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), NCCL_NVLS_ENABLE="0")
    if device_type == "cuda":
        torch.cuda.set_device(rank)
        dev = torch.device("cuda", rank)
        dist.init_process_group("nccl", rank=rank, world_size=WORLD, device_id=dev)
        d, batch, tokens = 256, 4, 64
    else:  # gloo on CPU: the same logic at a size the reference GEMM finishes quickly
        dev = torch.device("cpu")
        dist.init_process_group("gloo", rank=rank, world_size=WORLD)
        d, batch, tokens = 32, 2, 16
    try:
        import nvfp4.nn as nn4

        torch.manual_seed(0)
        model = Net(d).to(dev)
        nn4.convert(model, _recipe(rank), exclude=[])
        ref = copy.deepcopy(model)
        g = torch.Generator().manual_seed(1)
        xs = [torch.randn(WORLD * batch, tokens, d, generator=g).to(dev) for _ in range(STEPS)]
        ys = [torch.randn(WORLD * batch, tokens, 64, generator=g).to(dev) for _ in range(STEPS)]

        if mode == "ddp":
            from torch.nn.parallel import DistributedDataParallel as DDP

            dmodel = DDP(model, device_ids=[rank] if device_type == "cuda" else None)
        else:
            from torch.distributed.fsdp import fully_shard

            for b in model.blocks:
                fully_shard(b)
            fully_shard(model)
            dmodel = model
        opt = torch.optim.AdamW(dmodel.parameters(), lr=1e-3, weight_decay=0.0)
        ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-3, weight_decay=0.0)

        for step in range(STEPS):
            xb, yb = xs[step].chunk(WORLD), ys[step].chunk(WORLD)
            loss = F.mse_loss(dmodel(xb[rank]), yb[rank])
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            ref_losses = []
            for r in range(WORLD):  # rank r's micro-batch, with rank r's seed and SR offset
                nn4.set_precision(ref, _recipe(r))
                nn4.set_sr_step(ref, step)
                ref_loss = F.mse_loss(ref(xb[r]), yb[r])
                ref_loss.backward()
                ref_losses.append(ref_loss.detach())
            for p in ref.parameters():
                p.grad /= WORLD
            ref_opt.step()
            ref_opt.zero_grad(set_to_none=True)
            torch.testing.assert_close(loss.detach(), ref_losses[rank], rtol=1e-5, atol=1e-7,
                                       msg=lambda m: f"{mode} step {step} rank {rank} loss: {m}")
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            full = p.full_tensor() if hasattr(p, "full_tensor") else p
            torch.testing.assert_close(full.detach(), q.detach(), rtol=1e-5, atol=1e-6,
                                       msg=lambda m: f"{mode} rank {rank} parameter {name}: {m}")
        assert len(nn4.converted_layers(model)) == 5
    finally:
        dist.destroy_process_group()


def _run(mode, device_type):
    if mode == "fsdp2":
        from torch.distributed import fsdp

        if not hasattr(fsdp, "fully_shard"):
            pytest.skip("this torch has no torch.distributed.fsdp.fully_shard")
    if not dist.is_available():
        pytest.skip("torch.distributed is not available")
    os.environ["NCCL_NVLS_ENABLE"] = "0"  # NVLink multicast stays off on the shared machines
    mp.spawn(_worker, args=(_free_port(), mode, device_type), nprocs=WORLD, join=True)


@pytest.mark.skipif(not HAS_GPUS, reason=f"needs {WORLD} CUDA GPUs")
@pytest.mark.parametrize("mode", ["ddp", "fsdp2"])
def test_data_parallel_matches_single_process(mode):
    _run(mode, "cuda")


@pytest.mark.skipif(not os.environ.get("NVFP4_TEST_GLOO"), reason="CPU/gloo variant: set NVFP4_TEST_GLOO=1")
@pytest.mark.parametrize("mode", ["ddp", "fsdp2"])
def test_data_parallel_matches_single_process_gloo(mode):
    _run(mode, "cpu")
