#!/usr/bin/env python3
"""GPU time of each kernel of one nvfp4.nn.Linear's forward + backward, per Linear shape of
a training step, against the memory traffic floors measured in the same run.

For each shape (tokens x in -> out; the defaults are the four Linears of a block of
examples/train.py's 85M model at 16x1024 tokens) the layer runs forward + backward under BF16
autocast (FP32 master weight, as in bench_train_step.py) for --iters steps under
torch.profiler; each kernel's total GPU time is divided by the number of steps. Beside it, in
the same run: a device copy of X and of dY (read + write) and a read-only reduction of each
(`torch.amax`, one reduction kernel), which bound what any pass over that tensor can cost. A kernel that reads X once
and writes less than it reads cannot beat the read-only row; the amax pass should sit near it.

    python3 bench/bench_linear_kernels.py [--tokens 16384] [--shapes 768x2304 768x768 ...]
                                          [--iters 20] [--recipe nvfp4] [--json out.json]
"""
from __future__ import annotations

import argparse
import collections
import json

import torch
from torch import nn

import nvfp4.nn as nn4


def kernel_times(fn, iters: int):
    """{kernel name: µs per call of fn} over `iters` calls, from the profiler's device events."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    tot = collections.Counter()
    cnt = collections.Counter()
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            tot[e.name] += e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
            cnt[e.name] += 1
    return {k: (tot[k] / iters, cnt[k] / iters) for k in tot}


def short(name: str) -> str:
    for cut in ("void ", "nvfp4::detail::quant::", "nvfp4::detail::", "(anonymous namespace)::", "unnamed>::"):
        name = name.replace(cut, "")
    if name.startswith("_ZN7cutlass"):
        return "cutlass GEMM " + name[40:90]
    return name.split("(")[0][:90]


def event_us(fn, iters: int) -> float:
    fn()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    s.record()
    for _ in range(iters):
        fn()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) * 1000.0 / iters


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--shapes", nargs="+", default=["768x2304", "768x768", "768x3072", "3072x768"],
                    help="in x out features of each Linear")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--recipe", default="nvfp4")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("bench_linear_kernels.py: needs a CUDA GPU")
    torch.manual_seed(0)
    dev = torch.device("cuda")
    print(f"device: {torch.cuda.get_device_name()}, tokens {a.tokens}, recipe {a.recipe}, {a.iters} steps each")
    results = []
    grand = collections.Counter()
    for shp in a.shapes:
        fin, fout = (int(v) for v in shp.split("x"))
        lin = nn4.convert(nn.Sequential(nn.Linear(fin, fout, bias=False)), a.recipe, exclude=[])[0].to(dev)
        x = torch.randn(a.tokens, fin, device=dev, dtype=torch.bfloat16, requires_grad=True)
        dy = torch.randn(a.tokens, fout, device=dev, dtype=torch.bfloat16)

        def step():
            x.grad = None  # as zero_grad(set_to_none=True) leaves them: no accumulation kernels
            lin.weight.grad = None
            with torch.autocast("cuda", dtype=torch.bfloat16):
                y = lin(x)
            y.backward(dy)

        ks = kernel_times(step, a.iters)
        xs, ys = x.detach().clone(), dy.clone()
        floors = {
            "copy X (r+w)": event_us(lambda: xs.clone(), a.iters),
            "read X (amax)": event_us(lambda: xs.amax(), a.iters),
            "copy dY (r+w)": event_us(lambda: ys.clone(), a.iters),
            "read dY (amax)": event_us(lambda: ys.amax(), a.iters),
        }
        print(f"\n== {a.tokens} x {fin} -> {fout}: X {xs.numel() * 2 / 1e6:.1f} MB, dY {ys.numel() * 2 / 1e6:.1f} MB")
        for k, v in floors.items():
            print(f"   {v:9.1f} us  {k}")
        total = 0.0
        for name, (us, n) in sorted(ks.items(), key=lambda kv: -kv[1][0]):
            total += us
            grand[short(name)] += us
            print(f"   {us:9.1f} us  x{n:<4.1f} {short(name)}")
        print(f"   {total:9.1f} us  all kernels of one forward + backward")
        results.append(dict(shape=shp, tokens=a.tokens, floors_us=floors,
                            kernels={short(k): dict(us=v[0], calls=v[1]) for k, v in ks.items()}))
    print("\n== all shapes, per kernel name (µs per step of one Linear of each shape)")
    for name, us in grand.most_common():
        print(f"   {us:9.1f} us  {name}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), results=results), f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
