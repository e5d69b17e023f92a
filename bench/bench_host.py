#!/usr/bin/env python3
"""Host overhead: the CPU time one call costs, where the GPU work is too small to hide it.

Each row times N back-to-back calls with the host clock (the median of several such runs,
divided by N). On a GPU a sleep kernel is queued before each run, long enough to outlast
it, so the calls only enqueue work and every row reads host time even where the host is
faster than the kernels. Baselines measured in the same run: torch.mm (cuBLAS) for the
calls, nn.Linear for a layer; every call row is printed beside torch.mm (difference, ratio).

Rows:
- calls: nvfp4.gemm with operands quantized once (the target: within +10 us of torch.mm),
  nvfp4.quantize, the two together on a fresh operand, the op layer's gemm on raw triples;
- parts: the output allocation, and the raw entry points alone (addresses precomputed,
  output and workspace allocated once): the C++ side and the launch, without Python;
- checks (the validation layer's budget is 1 us a call): the op layer's checks of two raw
  triples; nvfp4.gemm's proof of two built NVFP4Tensors (addresses and version counters)
  beside the address reads any road needs; a Linear forward's arguments; the one-time
  check of an NVFP4Tensor built by the caller;
- layers: one Linear forward + backward, 16 tokens.

--stub replaces the raw entry points with no-ops and skips the layers: what remains is the
Python side of each call alone (a CPU proxy for a machine without a GPU, where the CPU
reference GEMM would otherwise dominate). Rows absent from an older build are left out, so
the same script measures a baseline build in the same session.

    python3 bench/bench_host.py [--json out.json] [--stub] [--m 16 --n 4096 --k 4096]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time

import torch
from torch import nn

import nvfp4
import nvfp4.nn as nn4
from nvfp4 import _ops


def host_us(fn, n=200, reps=7, busy=None):
    """Median over `reps` runs of the host time per call of `n` back-to-back calls. busy():
    queues GPU work that outlasts a run (None on the CPU)."""
    for _ in range(20):
        fn()
    runs = []
    for _ in range(reps):
        if busy:
            busy()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        runs.append((time.perf_counter() - t0) / n * 1e6)
    if busy:
        torch.cuda.synchronize()
    return statistics.median(runs)


def _busy_gpu():
    """A sleep kernel of ~50 ms (at <= 2 GHz, 1e8 cycles), then synchronize before the next one."""
    def busy():
        torch.cuda.synchronize()
        torch.cuda._sleep(100_000_000)
    return busy


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", default=None)
    ap.add_argument("--stub", action="store_true", help="no-op raw entry points: the Python side alone")
    ap.add_argument("--m", type=int, default=None)
    ap.add_argument("--n", type=int, default=None)
    ap.add_argument("--k", type=int, default=None)
    a = ap.parse_args(argv)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    busy = _busy_gpu() if dev.type == "cuda" else None
    res = {"device": torch.cuda.get_device_name() if dev.type == "cuda" else "cpu", "stub": a.stub, "rows": {}}
    m, n, k = (16, 4096, 4096) if dev.type == "cuda" else (16, 256, 256)
    m, n, k = a.m or m, a.n or n, a.k or k
    res["shape"] = [m, n, k]
    x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    w = torch.randn(n, k, device=dev, dtype=torch.bfloat16)
    qa, qb = nvfp4.quantize(x), nvfp4.quantize(w)
    ta = (qa.data, qa.scales, qa.amax)
    tb = (qb.data, qb.scales, qb.amax)
    if a.stub:
        _ops.gemm_raw = lambda *args: 0
        _ops.quantize_raw = lambda *args: None
    r = res["rows"]

    def row(name, fn, count=200):
        r[name] = host_us(fn, n=count, busy=busy)

    calls = {
        "torch.mm (bf16)": lambda: torch.mm(x, w.t()),
        "nvfp4.gemm": lambda: nvfp4.gemm(qa, qb),
        "nvfp4.quantize": lambda: nvfp4.quantize(x),
        "nvfp4.quantize + nvfp4.gemm": lambda: nvfp4.gemm(nvfp4.quantize(x), qb),
        "nvfp4._ops.gemm (raw triples)": lambda: _ops.gemm(ta, tb),
    }
    for name, fn in calls.items():
        row(name, fn)

    # parts of a call: the output's allocation, and the library's entry points on their own
    row("part: torch.empty of the output", lambda: torch.empty((m, n), dtype=torch.bfloat16, device=dev))
    if not a.stub and hasattr(_ops, "_device"):
        dv = _ops._device(x)
        d = torch.empty((m, n), dtype=torch.bfloat16, device=dev)
        wsb = _ops.gemm_workspace_bytes(m, n, k, 0, torch.bfloat16, None, False, dev, dv)
        ws = torch.empty((max(wsb, 1),), dtype=torch.uint8, device=dev)
        pa = tuple(t.data_ptr() for t in ta)
        pb = tuple(t.data_ptr() for t in tb)
        dp, wp = d.data_ptr(), ws.data_ptr()
        row("part: gemm_raw alone (C++ + launch)",
            lambda: _ops.gemm_raw(*pa, *pb, m, n, k, 1, 0, 0, 0, 0, 0.0, dp, 2, 0, wp, wsb, *dv))
        q = _ops.quantize(x.view(m, k))
        qp = tuple(t.data_ptr() for t in q[:3])
        xp, mask = x.data_ptr(), _ops.default_rht_sign_mask()
        row("part: quantize_raw alone (C++ + launch)",
            lambda: _ops.quantize_raw(xp, 2, m, k, *qp, 0, 0, 0, 0, 0, 1, 0, mask, 0, 0, 0, *dv, 0))
    row("part: gemm_env_key()", _ops.gemm_env_key, 2000)

    # the validation layer (nvfp4._checks; absent from builds before it)
    if hasattr(_ops, "_gemm_check"):
        from nvfp4.nn import _passes
        layer = nn4.Linear(k, n, bias=False, device=dev)
        cfg = layer._plan.cfg
        row("check: op layer, two raw triples", lambda: _ops._gemm_check(*ta, *tb, torch.bfloat16, None), 2000)
        if hasattr(qa, "_gemm_operand"):
            row("check: nvfp4.gemm, two NVFP4Tensors proven", lambda: (qa._gemm_operand(), qb._gemm_operand()), 2000)

            def reads(qa=qa, qb=qb):
                ra, rb = qa.rowwise, qb.rowwise
                return (ra.data.data_ptr(), ra.scales.data_ptr(), ra.amax.data_ptr(), rb.data.data_ptr(),
                        rb.scales.data_ptr(), rb.amax.data_ptr())
            row("  the address reads any road needs", reads, 2000)
        row("check: linear_fwd arguments", lambda: _passes._fwd_check(x, w, None, layer.sr_step, cfg, True, True,
                                                                        _passes.W_FRESH, None), 2000)
        row("check: NVFP4Tensor built by the caller", lambda: dataclasses.replace(qb), 2000)
        row("  the same, built unchecked", lambda: dataclasses.replace(qb, _checked=True), 2000)

    # one layer, forward + backward, 16 tokens
    if not a.stub:
        for name, layer in (("layer: nn.Linear fwd+bwd", nn.Linear(k, n, bias=False, device=dev)),
                            ("layer: nvfp4 Linear fwd+bwd",
                             nn4.Linear.from_linear(nn.Linear(k, n, bias=False, device=dev)))):
            xi = torch.randn(m, k, device=dev, requires_grad=True)

            def fb(layer=layer, xi=xi):
                with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
                    y = layer(xi)
                y.sum().backward()
            row(name, fb, 50)

    mm = r["torch.mm (bf16)"]
    res["vs_torch_mm"] = {name: {"us": r[name], "minus_torch_mm_us": r[name] - mm, "ratio": r[name] / mm}
                          for name in calls if name != "torch.mm (bf16)"}
    checks = {}
    if "check: op layer, two raw triples" in r:
        checks["op layer: two raw triples (us)"] = r["check: op layer, two raw triples"]
        if "check: nvfp4.gemm, two NVFP4Tensors proven" in r:
            checks["nvfp4.gemm: proof beyond the address reads (us)"] = (
                r["check: nvfp4.gemm, two NVFP4Tensors proven"] - r["  the address reads any road needs"])
        checks["linear_fwd arguments (us)"] = r["check: linear_fwd arguments"]
        checks["NVFP4Tensor check at construction (us, once per tensor)"] = (
            r["check: NVFP4Tensor built by the caller"] - r["  the same, built unchecked"])
    res["checks"] = checks
    if "layer: nn.Linear fwd+bwd" in r:
        res["layer_ratio"] = r["layer: nvfp4 Linear fwd+bwd"] / r["layer: nn.Linear fwd+bwd"]

    print(f"host time per call, {m}x{n}x{k}, {res['device']}"
          + (" (raw entry points stubbed: the Python side alone)" if a.stub else ""))
    print(f"  {'':44s} {'us':>8s} {'- torch.mm':>11s} {'/ torch.mm':>11s}")
    for name, v in r.items():
        line = f"  {name:44s} {v:8.2f}"
        if name in res["vs_torch_mm"]:
            line += f" {v - mm:+11.2f} {v / mm:11.2f}"
        print(line)
    for name, v in checks.items():
        print(f"  {name}: {v:.2f}")
    if "layer_ratio" in res:
        print(f"  nvfp4 Linear / nn.Linear (fwd+bwd host time): {res['layer_ratio']:.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    return res


if __name__ == "__main__":
    main()
