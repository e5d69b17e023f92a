#!/usr/bin/env python3
"""Host overhead: the CPU time one call costs, where the GPU work is too small to hide it.

For each call, N back-to-back calls are timed with the host clock without synchronizing
(the median of several such runs, divided by N): with kernels of a few microseconds the
launch queue never fills, so that is the time the Python + binding + launch path costs.
Baselines measured in the same run: torch.mm (cuBLAS) for a GEMM, nn.Linear for a layer.
The checks of the validation layer (nvfp4._checks) are timed on their own next to the calls
they guard.

    python3 bench/bench_host.py [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from torch import nn

import nvfp4
import nvfp4.nn as nn4
from nvfp4 import _ops


def host_us(fn, n=200, reps=7, sync=None):
    for _ in range(20):
        fn()
    if sync:
        sync()
    runs = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        runs.append((time.perf_counter() - t0) / n * 1e6)
        if sync:
            sync()
    return statistics.median(runs)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    sync = torch.cuda.synchronize if dev.type == "cuda" else None
    res = {"device": torch.cuda.get_device_name() if dev.type == "cuda" else "cpu", "rows": {}}
    m, n, k = (16, 4096, 4096) if dev.type == "cuda" else (16, 256, 256)
    x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    w = torch.randn(n, k, device=dev, dtype=torch.bfloat16)
    qa, qb = nvfp4.quantize(x), nvfp4.quantize(w)
    ta = (qa.data, qa.scales, qa.amax)
    tb = (qb.data, qb.scales, qb.amax)
    rows = {
        "torch.mm (bf16)": lambda: torch.mm(x, w.t()),
        "nvfp4.gemm": lambda: nvfp4.gemm(qa, qb),
        "nvfp4._ops.gemm": lambda: _ops.gemm(ta, tb),
        "nvfp4.quantize": lambda: nvfp4.quantize(x),
    }
    for name, fn in rows.items():
        res["rows"][name] = host_us(fn, sync=sync)
    # The validation layer's share of those calls (nvfp4._checks; absent from builds before it):
    # the op layer's checks of two raw triples, of the Linear's forward arguments, and the
    # one-time check of an NVFP4Tensor built by the caller (dataclasses.replace).
    checks = {}
    if hasattr(_ops, "_gemm_check"):
        import dataclasses
        from nvfp4.nn import _passes
        layer = nn4.Linear(k, n, bias=False, device=dev)
        cfg = layer._plan.cfg
        checks = {
            "check: gemm operands (2 triples)": lambda: _ops._gemm_check(*ta, *tb, torch.bfloat16, None),
            "check: linear_fwd arguments": lambda: _passes._fwd_check(x, w, None, layer.sr_step, cfg, True, True,
                                                                      _passes.W_FRESH, None),
            "check: NVFP4Tensor built by the caller": lambda: dataclasses.replace(qb),
            "NVFP4Tensor built unchecked (the same)": lambda: dataclasses.replace(qb, _checked=True),
        }
    for name, fn in checks.items():
        res["rows"][name] = host_us(fn, n=2000)
    # one layer, forward + backward, 16 tokens
    for name, layer in (("nn.Linear fwd+bwd", nn.Linear(k, n, bias=False, device=dev)),
                        ("nvfp4 Linear fwd+bwd", nn4.Linear.from_linear(nn.Linear(k, n, bias=False, device=dev)))):
        xi = torch.randn(m, k, device=dev, requires_grad=True)

        def fb(layer=layer, xi=xi):
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
                y = layer(xi)
            y.sum().backward()
        res["rows"][name] = host_us(fb, n=50, sync=sync)
    r = res["rows"]
    if checks:
        r = res["rows"]
        res["checks"] = {
            "gemm operand checks / nvfp4._ops.gemm call": r["check: gemm operands (2 triples)"] / r["nvfp4._ops.gemm"],
            "linear_fwd checks (us)": r["check: linear_fwd arguments"],
            "NVFP4Tensor check at construction (us)": r["check: NVFP4Tensor built by the caller"]
            - r["NVFP4Tensor built unchecked (the same)"],
        }
    res["ratios"] = {"nvfp4.gemm - torch.mm (us)": r["nvfp4.gemm"] - r["torch.mm (bf16)"],
                     "_ops.gemm - torch.mm (us)": r["nvfp4._ops.gemm"] - r["torch.mm (bf16)"],
                     "nvfp4 Linear / nn.Linear (fwd+bwd host time)": r["nvfp4 Linear fwd+bwd"] /
                     r["nn.Linear fwd+bwd"]}
    print(f"host time per call, {m}x{n}x{k}, {res['device']}")
    for name, v in r.items():
        print(f"  {name:40s} {v:8.2f} us")
    for name, v in {**res["ratios"], **res.get("checks", {})}.items():
        print(f"  {name}: {v:.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    return res


if __name__ == "__main__":
    main()
