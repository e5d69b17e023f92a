#!/usr/bin/env python3
"""Host time of one Linear's forward + backward: nn.Linear (the baseline, measured in the same
run) against nvfp4.nn.Linear, eager and optionally compiled, and what one nvfp4 Linear asks of
the dispatcher and of the library per forward + backward.

The shape defaults to one block Linear of examples/train.py's 85M model at 32 tokens (768 ->
768, no bias, FP32 master weight, BF16 autocast on the GPU; 64 -> 64 and one thread on the
CPU, where nn.Linear's GEMMs run for real), where every kernel is a few microseconds: N
back-to-back calls timed with the host clock, no synchronization inside a run (the median of
several runs, rows interleaved), so the figure is what the Python, dispatch and launch path
costs. The 85M model has 48 converted Linears: 10 us per Linear is ~0.5 ms a step.

Rows: nn.Linear; nvfp4 Linear (eager: the passes run their implementations directly); the same
with every pass through the dispatcher (as a compiled graph calls them); with --compile, both
layers under torch.compile.

On a machine without a GPU the library's entry points are replaced by no-ops unless --kernels
is given (the CPU reference kernels would dominate): the figures are then the Python and
dispatch path alone, and the outputs are garbage.

    python3 bench/bench_linear_host.py [--tokens 32] [--features 768] [--bias] [--compile]
                                       [--kernels] [--json out.json]
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import json
import statistics
import time

import torch
from torch import nn

import nvfp4.nn as nn4
from nvfp4 import _ops
from nvfp4.nn import _passes


def _stub_library():
    """No-op library entry points (gemm_raw answers workspace-size queries with 0)."""
    _ops.quantize_raw = lambda *a: None
    _ops.gemm_raw = lambda *a: 0
    _ops.quantize_dec_raw = lambda *a: None
    _ops.gemm_dec_raw = lambda *a: 0


@contextlib.contextmanager
def _dispatched():
    """Every pass through the dispatcher, as before the direct eager path existed."""
    real = getattr(_passes, "_direct", None)
    if real is None:  # a build without the direct path: everything is dispatched already
        yield
        return
    _passes._direct = lambda *a: False
    try:
        yield
    finally:
        _passes._direct = real


def _fwd_bwd(layer, x, dy, autocast):
    def run():
        with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=autocast):
            y = layer(x)
        y.backward(dy)
    return run


def _time(rows, n, reps, sync, busy=None):
    """Median host us per call of each row, the rows interleaved rep by rep. busy(): called
    before each timed run (e.g. a sleep kernel that keeps the GPU busy for the whole run, so
    that launches never wait for a full queue and the clock reads host time at any size)."""
    for fn, ctx in rows.values():
        with ctx():
            for _ in range(max(5, n // 10)):
                fn()
    if sync:
        sync()
    runs = {name: [] for name in rows}
    for _ in range(reps):
        for name, (fn, ctx) in rows.items():
            with ctx():
                if busy:
                    busy()
                t0 = time.perf_counter()
                for _ in range(n):
                    fn()
                runs[name].append((time.perf_counter() - t0) / n * 1e6)
            if sync:
                sync()
    return {name: statistics.median(v) for name, v in runs.items()}, {name: min(v) for name, v in runs.items()}


_RAW = ("quantize_raw", "gemm_raw", "quantize_dec_raw", "gemm_dec_raw")


def _split(fn, n, busy, sync):
    """Host us per call spent inside each library entry point (its C++ side: checks, dispatch,
    launches) over n calls of fn, the GPU kept busy; the rest of a call is Python and torch."""
    spent = collections.Counter()
    calls = collections.Counter()
    real = {name: getattr(_ops, name) for name in _RAW}
    for name, f in real.items():
        def spy(*a, _f=f, _name=name):
            t0 = time.perf_counter()
            r = _f(*a)
            spent[_name] += time.perf_counter() - t0
            calls[_name] += 1
            return r
        setattr(_ops, name, spy)
    try:
        for _ in range(3):
            fn()
        if sync:
            sync()
        spent.clear()
        calls.clear()
        if busy:
            busy()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        total = time.perf_counter() - t0
        if sync:
            sync()
    finally:
        for name, f in real.items():
            setattr(_ops, name, f)
    out = {name: {"calls": calls[name] / n, "us": spent[name] / n * 1e6} for name in calls}
    out["total"] = {"calls": 1, "us": total / n * 1e6}
    return out


def _counts(fn, ctx=contextlib.nullcontext):
    """Per call: profiler events by name (the profiler sends nvfp4's passes through the
    dispatcher), library calls, and passes run directly / dispatched in plain eager."""
    lib = collections.Counter()
    # the codes road's entry points and the decoded road's (where the GEMM runner takes decoded
    # operands: nvfp4.nn._passes)
    real = {name: getattr(_ops, name) for name in ("quantize_raw", "gemm_raw", "quantize_dec_raw", "gemm_dec_raw")}
    size_arg = {"gemm_raw": 19, "gemm_dec_raw": 23}  # workspace_bytes: -1 in a size query
    for name, f in real.items():
        def spy(*a, _f=f, _name=name):
            i = size_arg.get(_name)
            if not (i is not None and len(a) > i and a[i] == -1):  # size queries are not runs
                lib[_name] += 1
            return _f(*a)
        setattr(_ops, name, spy)
    paths = collections.Counter()
    real_direct = getattr(_passes, "_direct", None)
    if real_direct is not None:
        def direct(*a):
            ok = real_direct(*a)
            paths["direct" if ok else "dispatched"] += 1
            return ok
        _passes._direct = direct
    try:
        with ctx():
            fn()  # plain eager: library calls and paths
            lib_plain, paths_plain = dict(lib), dict(paths)
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                fn()
    finally:
        for name, f in real.items():
            setattr(_ops, name, f)
        if real_direct is not None:
            _passes._direct = real_direct
    ev = collections.Counter(e.name for e in prof.events())
    ops = {k: v for k, v in ev.items() if k.startswith(("aten::", "nvfp4::"))}
    return {"library calls": lib_plain, "passes (plain eager)": paths_plain or {"dispatched": "all"},
            "dispatched ops (profiler)": sum(ops.values()), "by name": dict(sorted(ops.items(), key=lambda t: -t[1]))}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--features", type=int, nargs="+", default=None,
                    help="in [out] features (default 768 on the GPU, 64 on the CPU, where nn.Linear's GEMMs are real)")
    ap.add_argument("--bias", action="store_true")
    ap.add_argument("--recipe", default="nvfp4")
    ap.add_argument("--compile", action="store_true", help="also both layers under torch.compile")
    ap.add_argument("--kernels", action="store_true", help="on the CPU: run the reference kernels (slow)")
    ap.add_argument("--calls", type=int, default=None, help="calls per timed run (default 200 GPU, 300 CPU)")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--busy-ms", type=float, default=0.0,
                    help="GPU: a sleep kernel of this many ms before each timed run (at step-sized shapes, so that "
                         "the clock reads host time; keep --calls small: ~18 launches a call, 1024 queued at most)")
    ap.add_argument("--split", action="store_true",
                    help="also: host time inside each library entry point per nvfp4 Linear forward + backward")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    cuda = torch.cuda.is_available()
    if a.busy_ms < 0:
        ap.error(f"--busy-ms: a duration in ms >= 0, got {a.busy_ms}")
    if a.busy_ms > 0 and not cuda:
        ap.error("--busy-ms: keeps a GPU busy; there is no GPU here (the CPU rows never wait for one)")
    dev = torch.device("cuda" if cuda else "cpu")
    stubbed = not cuda and not a.kernels
    if stubbed:
        _stub_library()
    if not cuda:
        torch.set_num_threads(1)  # host cost, not the CPU GEMMs' thread start-up
    feats = a.features or ([768] if cuda else [64])
    k, n = feats[0], feats[-1]
    m = a.tokens
    torch.manual_seed(0)
    base = nn.Linear(k, n, bias=a.bias, device=dev)
    fp4 = nn4.Linear.from_linear(nn.Linear(k, n, bias=a.bias, device=dev), a.recipe)
    shape = (2, m // 2, k) if m % 2 == 0 else (m, k)  # a 3D activation, as in a transformer block
    x = torch.randn(*shape, device=dev, requires_grad=True)
    dy = torch.randn(*shape[:-1], n, device=dev, dtype=torch.bfloat16 if cuda else torch.float32)
    null = contextlib.nullcontext
    rows = {"nn.Linear": (_fwd_bwd(base, x, dy, cuda), null),
            "nvfp4 Linear": (_fwd_bwd(fp4, x, dy, cuda), null),
            "nvfp4 Linear, every pass dispatched": (_fwd_bwd(fp4, x, dy, cuda), _dispatched)}
    if a.compile:
        rows["nn.Linear, compiled"] = (_fwd_bwd(torch.compile(base), x, dy, cuda), null)
        rows["nvfp4 Linear, compiled"] = (_fwd_bwd(torch.compile(fp4), x, dy, cuda), null)
    sync = torch.cuda.synchronize if cuda else None
    calls = a.calls or (200 if cuda else 300)
    busy = None
    if cuda and a.busy_ms > 0:
        rate = torch.cuda.get_device_properties(dev).clock_rate or 1_500_000  # kHz
        cycles = int(a.busy_ms * rate)
        busy = lambda: torch.cuda._sleep(cycles)  # noqa: E731
    med, best = _time(rows, calls, a.reps, sync, busy)
    res = {"device": torch.cuda.get_device_name() if cuda else "cpu", "library": "no-op stubs" if stubbed else "real",
           "shape": {"x": list(shape), "in": k, "out": n, "bias": a.bias, "recipe": a.recipe,
                     "autocast": "bf16" if cuda else None},
           "host_us": med, "host_us_min": best,
           "ratios": {"nvfp4 / nn.Linear": med["nvfp4 Linear"] / med["nn.Linear"],
                      "dispatched / nn.Linear": med["nvfp4 Linear, every pass dispatched"] / med["nn.Linear"],
                      "nvfp4 direct - dispatched (us)":
                      med["nvfp4 Linear"] - med["nvfp4 Linear, every pass dispatched"]},
           "per_call": {"nn.Linear": _counts(rows["nn.Linear"][0]), "nvfp4 Linear": _counts(rows["nvfp4 Linear"][0])}}
    if a.split:
        res["split"] = {name: _split(rows[name][0], calls, busy, sync) for name in rows if name.startswith("nvfp4")}
    if a.compile:
        res["ratios"]["compiled nvfp4 / nn.Linear"] = med["nvfp4 Linear, compiled"] / med["nn.Linear, compiled"]
    print(f"host time of one Linear forward + backward, x {list(shape)}, {k} -> {n}, recipe {a.recipe}, "
          f"{res['device']}" + (" (library calls replaced by no-ops: the Python path only)" if stubbed else ""))
    for name in rows:
        print(f"  {name:40s} {med[name]:8.2f} us   (min {best[name]:.2f})")
    for name, v in res["ratios"].items():
        print(f"  {name}: {v:.3f}")
    for name, c in res["per_call"].items():
        top = ", ".join(f"{k_} {v}" for k_, v in list(c["by name"].items())[:8])
        print(f"  {name}: library calls {c['library calls']}, passes {c['passes (plain eager)']}, "
              f"{c['dispatched ops (profiler)']} dispatched ops ({top})")
    for name, sp in res.get("split", {}).items():
        print(f"  {name}: host us per forward + backward inside the library: " + ", ".join(
            f"{k_} {v['us']:.1f} ({v['calls']:.0f} calls)" for k_, v in sp.items()))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    return res


if __name__ == "__main__":
    main()
