#!/usr/bin/env python3
"""FP8 Linear training step (forward + backward) vs BF16, at a ~400M model's shapes.

Each Linear of one transformer block of d_model D (examples/train.py's: fused qkv D->3D,
proj D->D, fc D->4D, out 4D->D, no bias), with T tokens, under BF16 autocast and FP32
master weights, timed as y = layer(x); y.backward(dy):
- bf16:         torch.nn.Linear (cuBLAS BF16);
- fp8:          nvfp4.nn.fp8.FP8Linear, current scaling (torch._scaled_mm);
- fp8_delayed:  FP8Linear, delayed scaling;
- fp8_compiled: current scaling through the torch-op cast path (amax, scale, a
                torch.compile'd cast, a byte transpose): what nvfp4's own cast kernels save;
- fp8_unfused:  the same with the cast left as separate torch ops.
Medians of CUDA-event times over --iters steps after --warmup; the ratio column is time / bf16
measured in the same run. The block total is the sum over the four layers.

    python3 bench/bench_fp8.py                       # d_model 2048, 8 x 2048 tokens
    python3 bench/bench_fp8.py --json fp8.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys

import torch
from torch import nn

from nvfp4.nn import fp8 as F8


def layer_shapes(d: int):
    return [("qkv", d, 3 * d), ("proj", d, d), ("fc", d, 4 * d), ("out", 4 * d, d)]


def make(kind: str, k: int, n: int):
    if kind == "bf16":
        return nn.Linear(k, n, bias=False, device="cuda")
    recipe = {"fp8": F8.FP8_RECIPES["fp8"], "fp8_delayed": F8.FP8_RECIPES["fp8_delayed"],
              "fp8_compiled": F8.FP8_RECIPES["fp8"].replace(name="fp8_compiled", fused_cast=False),
              "fp8_unfused": F8.FP8_RECIPES["fp8"].replace(name="fp8_unfused", fused_cast=False,
                                                           compile_cast=False)}[kind]
    return F8.FP8Linear(k, n, bias=False, device="cuda", recipe=recipe)


def time_step(layer, x, dy, warmup: int, iters: int) -> float:
    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            y = layer(x)
        y.backward(dy)
        x.grad = None
        layer.weight.grad = None

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        step()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--d-model", type=int, default=2048)
    ap.add_argument("--tokens", type=int, default=8 * 2048)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--kinds", default="bf16,fp8,fp8_delayed,fp8_compiled,fp8_unfused")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_fp8: needs a CUDA GPU", file=sys.stderr)
        return 2
    ok, why = F8.fp8_supported()
    if not ok:
        print(f"bench_fp8: {why}", file=sys.stderr)
        return 2
    kinds = args.kinds.split(",")
    if "bf16" not in kinds:
        kinds = ["bf16"] + kinds
    torch.manual_seed(0)
    dev = torch.cuda.get_device_name()
    print(f"# {dev}, torch {torch.__version__}, d_model {args.d_model}, tokens {args.tokens}, "
          f"median of {args.iters} (warm-up {args.warmup})")
    print(f"{'layer':6s} {'K':>6s} {'N':>6s} " + " ".join(f"{k + ' ms':>14s} {'x bf16':>7s}" for k in kinds))
    rows, totals = [], {k: 0.0 for k in kinds}
    for name, k, n in layer_shapes(args.d_model):
        x = torch.randn(args.tokens, k, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        dy = torch.randn(args.tokens, n, device="cuda", dtype=torch.bfloat16)
        res = {}
        for kind in kinds:
            layer = make(kind, k, n)
            res[kind] = time_step(layer, x, dy, args.warmup, args.iters)
            totals[kind] += res[kind]
            del layer
        base = res["bf16"]
        print(f"{name:6s} {k:6d} {n:6d} " + " ".join(f"{res[kd]:14.3f} {res[kd] / base:7.3f}" for kd in kinds))
        flops = 6.0 * args.tokens * k * n  # forward + dgrad + wgrad
        rows.append({"layer": name, "k": k, "n": n, "tokens": args.tokens, "ms": res,
                     "ratio_to_bf16": {kd: res[kd] / base for kd in kinds},
                     "tflops": {kd: flops / res[kd] / 1e9 for kd in kinds}})
    base = totals["bf16"]
    print(f"{'block':6s} {'':6s} {'':6s} " + " ".join(f"{totals[kd]:14.3f} {totals[kd] / base:7.3f}" for kd in kinds))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": dev, "torch": torch.__version__, "d_model": args.d_model, "tokens": args.tokens,
                       "iters": args.iters, "layers": rows, "block_ms": totals,
                       "block_ratio_to_bf16": {kd: totals[kd] / base for kd in kinds}}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
