#!/usr/bin/env python3
"""What an amax computed by the activation's producer costs under torch.compile, against the
amax pass of the quantization that it would replace.

For each producer of a BF16 activation [tokens, features] (RMSNorm, LayerNorm, GELU with the
tanh approximation, SwiGLU), compiled by torch.compile, in the same run:
- producer:   the compiled producer alone;
- + amax:     the same compiled function also returning y.abs().amax() as float32 (Inductor
              may compute the reduction inside the producer's kernel);
- + row amax: the same with the maximum taken per row first, then over the rows;
- + amax, emulated casts: "+ amax" compiled with Inductor's emulate_precision_casts (a
              fused kernel rounds y to BF16 before the reduction reads it, as the stored
              tensor is rounded);
- amax pass:  nvfp4's rowwise round-to-nearest quantization of y with its own amax, minus the
              same quantization with that amax given (nvfp4.quantize_options(amax=...): the
              ordinary kernels with no amax pass) — the time a producer's amax saves.
Each row's time per call: on a GPU the profiler's kernel time (the sum over the kernels a
call launches, and how many), on the CPU (--smoke, tiny sizes) the wall clock. Printed per
producer: the extra time of each fused form over the producer alone and its ratio to the
amax pass. Checked on every run and printed beside each form: whether the compiled amax equals
the amax the quantization stored, bit for bit (max |y| of the stored BF16 y is exact in any
order, so a form whose amax differs is not reading the values the quantization reads — Inductor
may reduce the float32 value before its rounding to BF16; such a form cannot replace the
amax pass without changing the numerics). The exit status is 0 when every form ran, whatever
the bit checks found (they are findings, in the output and the JSON); --require-exact makes a
form that differs an error (exit 1).

    python3 bench/bench_producer_amax.py [--tokens 16384] [--features 768 3072]
                                         [--producers rmsnorm,layernorm,gelu,swiglu]
                                         [--iters 20] [--json out.json] [--require-exact]
    python3 bench/bench_producer_amax.py --smoke        # CPU, tiny sizes: the checks, no figures
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import nvfp4

PRODUCERS = ("rmsnorm", "layernorm", "gelu", "swiglu")
FUSED = ("+ amax", "+ row amax", "+ amax, emulated casts")  # the forms that also return an amax


def producer_fn(name: str):
    """(function of the inputs -> y, inputs builder(tokens, features, device))."""
    def inputs(t, d, dev, n=1):
        g = torch.Generator(device="cpu").manual_seed(0)
        return [torch.randn(t, d, generator=g).to(dev, torch.bfloat16) for _ in range(n)]

    if name == "rmsnorm":
        def build(t, d, dev):
            return inputs(t, d, dev) + [torch.rand(d, generator=torch.Generator().manual_seed(1)).to(
                dev, torch.bfloat16) + 0.5]
        return (lambda x, w: F.rms_norm(x, (x.shape[-1],), w)), build
    if name == "layernorm":
        def build(t, d, dev):
            g = torch.Generator().manual_seed(1)
            return inputs(t, d, dev) + [(torch.rand(d, generator=g) + 0.5).to(dev, torch.bfloat16),
                                        torch.randn(d, generator=g).to(dev, torch.bfloat16)]
        return (lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b)), build
    if name == "gelu":
        return (lambda x: F.gelu(x, approximate="tanh")), (lambda t, d, dev: inputs(t, d, dev))
    if name == "swiglu":
        return (lambda g, u: F.silu(g) * u), (lambda t, d, dev: inputs(t, d, dev, 2))
    raise ValueError(f"--producers: unknown producer {name!r} (choose from {', '.join(PRODUCERS)})")


def variants(fn):
    """The compiled forms of a producer: alone, + amax, + per-row amax then the max, + amax
    with Inductor's emulated precision casts."""
    def with_amax(*a):
        y = fn(*a)
        return y, y.abs().amax().float()

    def with_row_amax(*a):
        y = fn(*a)
        return y, y.abs().amax(dim=-1).amax().float()

    return {"producer": torch.compile(fn, fullgraph=True, dynamic=False),
            "+ amax": torch.compile(with_amax, fullgraph=True, dynamic=False),
            "+ row amax": torch.compile(with_row_amax, fullgraph=True, dynamic=False),
            "+ amax, emulated casts": torch.compile(with_amax, fullgraph=True, dynamic=False,
                                                    options={"emulate_precision_casts": True})}


def gpu_us(fn, iters: int):
    """(kernel time per call in µs, kernels per call): bench_linear_kernels's profiler
    reading, summed over the kernels a call launches."""
    from bench_linear_kernels import kernel_times  # this script's folder is on sys.path
    ks = kernel_times(fn, iters).values()
    return sum(us for us, _ in ks), sum(n for _, n in ks)


def cpu_us(fn, iters: int):
    """(wall time per call in µs, None): the median of 5 runs of `iters` calls."""
    for _ in range(2):
        fn()
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        runs.append((time.perf_counter() - t0) / iters * 1e6)
    return statistics.median(runs), None


def measure(name: str, tokens: int, features: int, dev, iters: int) -> dict:
    fn, build = producer_fn(name)
    args = build(tokens, features, dev)
    forms = variants(fn)
    timer = gpu_us if dev.type == "cuda" else cpu_us
    row = {"producer": name, "tokens": tokens, "features": features}
    y = None
    for form, f in forms.items():
        out = f(*args)
        if form == "producer":
            y = out
        else:
            q = nvfp4.quantize(out[0])
            # the compiled amax against the one the quantization stored: the same float bits
            row[f"{form} bits equal"] = bool(torch.equal(out[1].reshape(1).view(torch.int32).cpu(),
                                                         q.rowwise.amax.view(torch.int32).cpu()))
        us, k = timer(lambda f=f: f(*args), iters)
        row[f"{form} us"], row[f"{form} kernels"] = us, k
    given = y.abs().amax().float().reshape(1)
    own, _ = timer(lambda: nvfp4.quantize(y), iters)
    giv, _ = timer(lambda: nvfp4.quantize_options(y, amax=given), iters)
    row["quantize us"], row["quantize given us"] = own, giv
    row["amax pass us"] = own - giv
    for form in FUSED:
        extra = row[f"{form} us"] - row["producer us"]
        row[f"{form} extra us"] = extra
        row[f"{form} extra / pass"] = extra / row["amax pass us"] if row["amax pass us"] > 0 else float("nan")
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--features", type=int, nargs="+", default=[768, 3072])
    ap.add_argument("--producers", default=",".join(PRODUCERS))
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--json", default=None)
    ap.add_argument("--smoke", action="store_true", help="CPU, tiny sizes: the bit checks, no meaningful figures")
    ap.add_argument("--require-exact", action="store_true",
                    help="exit 1 when a fused form's amax differs from the quantization's")
    a = ap.parse_args(argv)
    names = [p for p in a.producers.split(",") if p]
    if not names:
        ap.error("--producers: name at least one")
    for p in names:
        try:
            producer_fn(p)  # refuses an unknown name before anything is compiled
        except ValueError as e:
            ap.error(str(e))
    if a.tokens < 16:
        ap.error(f"--tokens: at least 16, got {a.tokens}")
    if a.iters < 1:
        ap.error(f"--iters: at least 1, got {a.iters}")
    for f in a.features:
        if f < 16 or f % 16:
            ap.error(f"--features: positive multiples of 16, got {f}")
    if a.smoke:
        dev, tokens, feats, iters = torch.device("cpu"), 64, [128], 3
    elif torch.cuda.is_available():
        dev, tokens, feats, iters = torch.device("cuda"), a.tokens, a.features, a.iters
    else:
        print("bench_producer_amax: needs a CUDA GPU (or --smoke for the CPU checks)", file=sys.stderr)
        return 2
    # each form is one code object compiled once per producer and size (16 graphs for the
    # defaults): above Dynamo's default recompile limit of 8, which fullgraph turns into an error
    from torch import _dynamo
    _dynamo.config.recompile_limit = max(_dynamo.config.recompile_limit, 8 * len(names) * len(feats))
    where = torch.cuda.get_device_name() if dev.type == "cuda" else "cpu (smoke: wall clock, tiny sizes)"
    print(f"device: {where}, torch {torch.__version__}, {tokens} tokens, BF16")
    rows = []
    for p in names:
        for d in feats:
            r = measure(p, tokens, d, dev, iters)
            rows.append(r)
            k = (lambda form: "" if r[f"{form} kernels"] is None else f" ({r[f'{form} kernels']:.0f} kernels)")
            print(f"\n== {p} {tokens}x{d}")
            print(f"   {r['producer us']:9.1f} us  producer{k('producer')}")
            for form in FUSED:
                print(f"   {r[form + ' us']:9.1f} us  {form}{k(form)}: extra {r[form + ' extra us']:.1f} us, "
                      f"{r[form + ' extra / pass']:.2f} of the amax pass; bits equal: {r[form + ' bits equal']}")
            print(f"   {r['amax pass us']:9.1f} us  amax pass (quantize {r['quantize us']:.1f} - given amax "
                  f"{r['quantize given us']:.1f})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(device=where, torch=torch.__version__, rows=rows), f, indent=1)
    bad = [(r["producer"], r["features"], form) for r in rows for form in FUSED if not r[f"{form} bits equal"]]
    if bad:
        print(f"\nforms whose compiled amax differs from the quantization's (not a drop-in for the amax pass): {bad}")
        return 1 if a.require_exact else 0
    print("\nevery fused form's amax equals the quantization's, bit for bit")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
