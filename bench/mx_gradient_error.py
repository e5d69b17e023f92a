#!/usr/bin/env python3
"""How far each recipe's three GEMMs are from the exact ones, on tensors of a real training
run: the error of one quantized GEMM (relative Frobenius norm), its bias (the error of the
mean over several stochastic-rounding draws; a round-to-nearest operand has the same error
on every draw, so its bias is its error), and what the MXFP4 scale rules do to the operands
(the share of block values clipped at 6 * 2^s; the share of non-zero values rounded to 0).

    python3 bench/mx_gradient_error.py [--steps 60] [--draws 8] [--size smoke] [--json out.json]

The tensors: examples/train.py's byte-level decoder trained in BF16 for --steps steps on the
stdlib corpus (CPU), then one batch's X, W and dY of every block's linear layers captured
with hooks. The exact GEMMs are float64 products of the unquantized tensors; each recipe runs
through nvfp4.nn.Linear on the CPU (the reference backend) with the same X, W and dY, its SR
draws taken by advancing the layer's counter. Prints one line per recipe and GEMM.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import prepare_data  # noqa: E402
import train  # noqa: E402

import nvfp4  # noqa: E402
import nvfp4.nn as nn4  # noqa: E402

RECIPES = ["mx_baseline", "nvidia_round_to_infinity", "tetrajet", "nvfp4", "no_sr"]


def capture(args):
    """(x, w, dy) of every linear layer of the blocks after a short BF16 training run."""
    targs = train.parse_args(["--recipe", "bf16", "--size", args.size, "--device", "cpu", "--data", args.data,
                              "--seed", "0", "--steps", str(args.steps), "--amp", "off"])
    model = train.build_model(targs, torch.device("cpu"))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3 if args.size == "smoke" else 6e-4)
    batches = train.Batches(os.path.join(args.data, "train.bin"), targs.seq_len, targs.batch_size,
                            torch.device("cpu"), 0)
    for step in range(args.steps):
        x, y = batches.get()
        loss = F.cross_entropy(model(x).reshape(-1, train.VOCAB), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    print(f"trained {args.steps} BF16 steps, loss {loss.item():.3f}", flush=True)
    got = {}

    def hooks(name, mod):
        def fwd(m, inp, out):
            got.setdefault(name, {})["x"] = inp[0].detach().reshape(-1, inp[0].shape[-1]).clone()

        def bwd(m, gin, gout):
            got[name]["dy"] = gout[0].detach().reshape(-1, gout[0].shape[-1]).clone()
        return mod.register_forward_hook(fwd), mod.register_full_backward_hook(bwd)

    hs = []
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear) and name.startswith("blocks."):
            hs += hooks(name, mod)
            got.setdefault(name, {})["w"] = mod.weight.detach().clone()
    x, y = batches.get()
    F.cross_entropy(model(x).reshape(-1, train.VOCAB), y.reshape(-1)).backward()
    for h in hs:
        h.remove()
    return got


def mx_stats(t, rule):
    """Share of clipped values (|v| > 6 * 2^s) and of non-zero values quantized to 0 for
    32-value blocks along the last axis."""
    q = nvfp4.quantize_mxfp4(t.float().contiguous(), scale_rule=rule, scale_layout="linear")
    d = q.dequantize(torch.float32)
    e = q.rowwise.scales.view(torch.uint8).int() - 127
    s = torch.ldexp(torch.ones(e.shape), e).repeat_interleave(32, dim=1)
    nz = t != 0
    return {"clipped": float((t.abs() > 6 * s).float().mean()),
            "flushed": float(((d == 0) & nz).float().sum() / nz.float().sum().clamp(min=1))}


def gemms(layer, x, w, dy):
    with torch.no_grad():
        layer.weight.copy_(w)
    xi = x.clone().requires_grad_(True)
    y = layer(xi)
    y.backward(dy)
    return y.detach().double(), xi.grad.double(), layer.weight.grad.double()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--draws", type=int, default=8)
    ap.add_argument("--size", default="smoke", choices=sorted(train.SIZES))
    ap.add_argument("--data", default=prepare_data.DEFAULT_OUT)
    ap.add_argument("--recipes", default=",".join(RECIPES))
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    torch.manual_seed(0)
    prepare_data.prepare(args.data, quiet=True)
    tensors = capture(args)
    results = {}
    for rname in args.recipes.split(","):
        acc = {g: [0.0, 0.0, 0.0] for g in ("y", "dx", "dw")}  # sum |err|^2, sum |bias|^2, sum |exact|^2
        for name, t in tensors.items():
            x, w, dy = t["x"].float(), t["w"].float(), t["dy"].float()
            exact = (x.double() @ w.double().t(), dy.double() @ w.double(), dy.double().t() @ x.double())
            layer = nn4.Linear(w.shape[1], w.shape[0], bias=False, recipe=rname)
            draws = []
            for i in range(args.draws):
                with torch.no_grad():
                    layer.sr_step.fill_(i)
                layer.weight.grad = None
                draws.append(gemms(layer, x, w, dy))
            for gi, g in enumerate(("y", "dx", "dw")):
                ex = exact[gi]
                mean = sum(d[gi] for d in draws) / len(draws)
                acc[g][0] += float(((draws[0][gi] - ex) ** 2).sum())
                acc[g][1] += float(((mean - ex) ** 2).sum())
                acc[g][2] += float((ex ** 2).sum())
        res = {g: {"rel_error": (a[0] / a[2]) ** 0.5, "rel_bias": (a[1] / a[2]) ** 0.5} for g, a in acc.items()}
        r = nn4.get_recipe(rname)
        if r.dy.format == "mxfp4":
            st = {"dy": [], "x": []}
            for t in tensors.values():
                st["dy"].append(mx_stats(t["dy"], r.dy.mx_rule))
                st["x"].append(mx_stats(t["x"], r.x.mx_rule))
            res["operands"] = {k: {m: sum(d[m] for d in v) / len(v) for m in ("clipped", "flushed")} for k, v in st.items()}
        results[rname] = res
        line = "  ".join(f"{g}: err {res[g]['rel_error']:.4f} bias {res[g]['rel_bias']:.4f}" for g in ("y", "dx", "dw"))
        ops = res.get("operands")
        extra = ("  |  dY clipped {:.2%} flushed {:.2%}; X clipped {:.2%} flushed {:.2%}".format(
            ops["dy"]["clipped"], ops["dy"]["flushed"], ops["x"]["clipped"], ops["x"]["flushed"]) if ops else "")
        print(f"{rname:26s} {line}{extra}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
