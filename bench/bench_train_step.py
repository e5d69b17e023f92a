#!/usr/bin/env python3
"""Training-step time and activation memory: BF16 vs nvfp4.nn vs plain-PyTorch fake quantization.

The model is examples/train.py's transformer. Three variants of the same model, measured in
the same run:
- bf16:      nn.Linear under BF16 autocast;
- nvfp4:     every block's Linear converted with nvfp4.nn (recipe --recipe);
- fakequant: the same recipe written with torch ops only (FakeQuantLinear below): quantize
             and dequantize in FP32 torch code, BF16 matmuls, the BF16 input saved;
- fp8, fp8_delayed (on request, --variants): every block's Linear converted to the FP8
             baseline recipes (E4M3 forward, E5M2 gradients, torch._scaled_mm); with
             "+opaque" / "+traced" (fp8+opaque), compiled steps keep the kernel path's ops
             opaque / trace the casts as torch ops (FP8Recipe.inductor_casts);
- nvfp4+decoded (on request): nvfp4 with the backward's Xᵀ and Wᵀ saved as decoded BF16
             values (nvfp4.nn.set_saved_operands(model, "decoded"): no decode passes, more
             activation memory, the same bits);
- any other name of nvfp4.nn.RECIPES (on request, e.g. mx_baseline, tetrajet): every
             block's Linear converted with that recipe;
- VARIANT@NAME=VALUE (e.g. nvfp4@NVFP4_SM90_CUBLASLT=0): that variant with the environment
             variable NAME set to VALUE around everything it does (building, compiling,
             capturing its CUDA graphs, every step), restored after each; its ratio to the
             variant without the setting is printed too. With --interleave this is the A/B of
             a setting that is read when a graph is captured, which --ab-env cannot time.
A step is forward + backward + fused AdamW. Times are medians over --steps steps after
--warmup (CUDA events on the GPU). Also: bytes each Linear keeps for its backward pass
(saved-tensor hooks; plus a memory_allocated delta on the GPU), and peak memory per step.
--ab-env NAME=VALUE times each eager/compile row again in interleaved rounds, as the process
is set and with NAME=VALUE, in the same process (same compiled graphs, host and GPU state):
the before/after of a library setting read at each call, free of run-to-run drift (the bf16
row's figure is the noise floor). --interleave R times the variants themselves that way: every
model built and compiled first, then R rounds that each run every variant in turn.
--profile also attributes the GPU's idle gaps in the profiled steps to what the launching
thread was doing (bench/step_gaps.py; the profiler's own overhead is in those figures).
--host-split (eager rows) times the library's entry points and torch.empty inside a few steps
with plain wrappers, against the time step() takes to return: whether the step waits on its
host, and how much of that host time is the library's C++ calls.

    python3 bench/bench_train_step.py                               # GPU, ~85M parameters, eager (CPU: --smoke)
    python3 bench/bench_train_step.py --size 400m --modes eager,compile,reduce-overhead --profile
    python3 bench/bench_train_step.py --size 400m --variants bf16,fp8 --no-memory
    python3 bench/bench_train_step.py --smoke                       # CPU, toy size
    python3 bench/bench_train_step.py --json out.json
    python3 bench/bench_train_step.py --modes compile --ab-env NVFP4_SM90_DECODED=0   # decoded vs codes road
    python3 bench/bench_train_step.py --variants bf16,nvfp4 --host-split --no-memory
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import train as T  # noqa: E402

import nvfp4  # noqa: E402
import nvfp4.nn as nn4  # noqa: E402

FLT_MAX = torch.finfo(torch.float32).max
FP8_VARIANTS = ("fp8", "fp8_delayed")  # converted with nvfp4.nn.convert(model, name)
# "+opaque" / "+traced": the same FP8 recipe with inductor_casts False / True (compiled, the
# kernel path's ops stay opaque to the compiler, or the casts are traced as torch ops); eager
# rows take the same kernel path either way
FP8_ROADS = {"+opaque": False, "+traced": True}


def _fp8_variant(name: str):
    """The FP8Recipe a variant name stands for, or None."""
    from nvfp4.nn.fp8 import get_fp8_recipe
    base, plus, road = name.partition("+")
    if base not in FP8_VARIANTS or (plus and plus + road not in FP8_ROADS):
        return None
    r = get_fp8_recipe(base)
    return r.replace(name=name, inductor_casts=FP8_ROADS[plus + road]) if plus else r


# ------------------------------------------------------------------------------ fake quantization in torch
class _Grid:
    cache: dict = {}

    @classmethod
    def get(cls, device):
        if device not in cls.cache:
            grid = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], device=device)
            mids = (grid[1:] + grid[:-1]) / 2
            # ties go to the even code: up at 0.75, 1.75, 3.5 (their lower neighbour's code is odd)
            tie_up = torch.tensor([False, True, False, True, False, True, False], device=device)
            rht = nvfp4.rht_matrix(sum(1 << i for i, s in enumerate(nvfp4.DEFAULT_RHT_SIGNS) if s < 0),
                                   torch.float32, device)
            cls.cache[device] = (grid, mids, tie_up, rht)
        return cls.cache[device]


def qdq(x: torch.Tensor, block="1d", rounding="rtn", rht=False) -> torch.Tensor:
    """NVFP4 quantize-dequantize of a 2D tensor along its last dim, in FP32 torch ops (values
    stay in the Hadamard domain when rht, as an FP4 GEMM would consume them)."""
    grid, mids, tie_up, hmat = _Grid.get(x.device)
    r, c = x.shape
    x = x.float()
    if rht:
        x = (x.reshape(r, c // 16, 16) @ hmat).reshape(r, c)
    amax = x.abs().amax()
    s_enc = torch.clamp(torch.full_like(amax, 2688.0) / amax, max=FLT_MAX)  # scalar / tensor rounds twice
    s_enc = torch.where(s_enc == 0, torch.ones_like(s_enc), s_enc)
    s_dec = 1.0 / s_enc
    if block == "2d":
        xb = x.reshape(r // 16, 16, c // 16, 16)
        bam = xb.abs().amax(dim=(1, 3), keepdim=True)
    else:
        xb = x.reshape(r, c // 16, 16)
        bam = xb.abs().amax(dim=-1, keepdim=True)
    s_b = torch.clamp(torch.clamp(bam * (s_enc * (1.0 / 6.0)), max=FLT_MAX), -448, 448)
    s_b = s_b.to(torch.float8_e4m3fn).float()
    e = torch.clamp(1.0 / (s_b * s_dec), max=FLT_MAX)
    v = torch.clamp(xb * e, -6.0, 6.0)
    a = v.abs()
    if rounding == "sr":
        lo_i = torch.clamp(torch.bucketize(a, grid, right=True) - 1, 0, 6)
        lo, hi = grid[lo_i], grid[lo_i + 1]
        up = torch.rand_like(a) < (a - lo) / (hi - lo)
        q = torch.where(up, hi, lo)
    else:
        i = torch.bucketize(a, mids)  # number of midpoints below a
        at_mid = (i < 7) & (a == mids[torch.clamp(i, max=6)])
        i = i + (at_mid & tie_up[torch.clamp(i, max=6)]).long()
        q = grid[i]
    return (torch.copysign(q, v) * s_b * s_dec).reshape(r, c)


class _FakeQuantFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, r):
        cdt = x.dtype
        x2 = x.reshape(-1, x.shape[-1])
        xq = qdq(x2, r.x.block, r.x.rounding).to(cdt)
        wq = qdq(w, r.w.block, r.w.rounding).to(cdt)
        ctx.save_for_backward(x2, wq)  # fake quantization keeps the high-precision input
        ctx.r, ctx.shape, ctx.wdt = r, x.shape, w.dtype
        return (xq @ wq.t()).reshape(*x.shape[:-1], w.shape[0])

    @staticmethod
    def backward(ctx, dy):
        x2, wq = ctx.saved_tensors
        r = ctx.r
        cdt = dy.dtype
        dy2 = dy.reshape(-1, dy.shape[-1])
        dyq = qdq(dy2, r.dy.block, r.dy.rounding).to(cdt)
        dx = (dyq @ wq).reshape(ctx.shape)
        dyt = qdq(dy2.t().contiguous(), r.wgrad_dy.block, r.wgrad_dy.rounding, r.wgrad_dy.rht).to(cdt)
        xt = qdq(x2.t().contiguous(), r.wgrad_x.block, r.wgrad_x.rounding, r.wgrad_x.rht).to(cdt)
        dw = (dyt @ xt.t()).to(ctx.wdt)
        return dx, dw, None


class FakeQuantLinear(nn.Linear):
    """nn.Linear running the nvfp4 recipe as torch fake quantization (no bias; the model has none)."""

    recipe = nn4.RECIPES["nvfp4"]

    def forward(self, x):
        if torch.is_autocast_enabled(x.device.type):
            x = x.to(torch.get_autocast_dtype(x.device.type))
        return _FakeQuantFn.apply(x, self.weight, self.recipe)


def fakequant_convert(model, recipe):
    for m in model.blocks.modules():
        if type(m) is nn.Linear:
            m.__class__ = FakeQuantLinear
            m.recipe = recipe
    return model


# ------------------------------------------------------------------------------ measurements
def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


# Kernel names by kind, for --profile: where a step's GPU time goes.
_KINDS = (
    ("memset", ("Memset",)),
    ("quantize", ("nvfp4::detail::quant", "amax_kernel", "rowwise_kernel", "tile_kernel", "amax_colrht")),
    ("decode", ("gemm_prep", "decode")),
    ("gemm", ("gemm", "cutlass", "sm90_xmma", "nvjet", "cublas", "Kernel2", "small_m", "stream_kernel",
              "flash", "fmha", "attention")),
)


def _kind(name: str) -> str:
    low = name.lower()
    for kind, keys in _KINDS:
        if any(k.lower() in low for k in keys):
            return "attention" if kind == "gemm" and any(a in low for a in ("flash", "fmha", "attention")) else kind
    return "other"


def profile_steps(step, dev, n):
    """n steps under torch.profiler: kernels per step, GPU-busy time (union of kernel
    intervals) vs wall time, and GPU time by kind."""
    from torch.profiler import ProfilerActivity, profile
    sync(dev)
    t0 = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for i in range(n):
            step(i)
        sync(dev)
    wall = time.perf_counter() - t0
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    spans = sorted((e.time_range.start, e.time_range.end) for e in kernels)
    busy, cur_s, cur_e = 0.0, None, None
    for a, b in spans:
        if cur_e is None or a > cur_e:
            if cur_e is not None:
                busy += cur_e - cur_s
            cur_s, cur_e = a, b
        else:
            cur_e = max(cur_e, b)
    if cur_e is not None:
        busy += cur_e - cur_s
    by_kind: dict = {}
    launches: dict = {}
    top: dict = {}
    count: dict = {}
    for e in kernels:
        k = _kind(e.name)
        by_kind[k] = by_kind.get(k, 0.0) + (e.time_range.end - e.time_range.start)
        launches[k] = launches.get(k, 0) + 1
        short = e.name[:120]
        top[short] = top.get(short, 0.0) + (e.time_range.end - e.time_range.start)
        count[short] = count.get(short, 0) + 1
    us = 1e-3 / n  # profiler times are in us; report ms per step
    # What holds the host back: calls that wait for the GPU (synchronizations, scalar reads of
    # device tensors), and the host ops with the most time of their own.
    waits: dict = {}
    host: dict = {}
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CPU:
            continue
        if e.name in _WAITS:
            c, t = waits.get(e.name, (0, 0.0))
            waits[e.name] = (c + 1, t + (e.time_range.end - e.time_range.start))
        host[e.name] = host.get(e.name, 0.0) + e.self_cpu_time_total
    gaps = None
    try:  # where the GPU waits on the host (bench/step_gaps.py), from the same profile's trace
        import tempfile
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from step_gaps import gap_report
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "trace.json")
            prof.export_chrome_trace(path)
            with open(path) as f:
                gaps = gap_report(json.load(f), steps=n)
    except Exception as e:  # the analysis is extra: its failure is reported, the profile kept
        gaps = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
    return {"kernels_per_step": len(kernels) / n, "gpu_busy_ms": busy * us, "wall_ms": wall * 1e3 / n,
            "gaps": gaps,
            "by_kind_ms": {k: v * us for k, v in sorted(by_kind.items())},
            "launches_by_kind": {k: v / n for k, v in sorted(launches.items())},
            "top_kernels_ms": {k: v * us for k, v in sorted(top.items(), key=lambda kv: -kv[1])[:16]},
            # every kernel name: launches and GPU ms per step
            "kernels": {k: {"per_step": count[k] / n, "ms": v * us}
                        for k, v in sorted(top.items(), key=lambda kv: -kv[1])},
            # (the profile's own final synchronization is one of the n steps' waits)
            "host_waits_per_step": {k: {"calls": c / n, "ms": t * us} for k, (c, t) in sorted(waits.items())},
            "top_host_self_ms": {k: v * us for k, v in sorted(host.items(), key=lambda kv: -kv[1])[:10]}}


# --host-split: the host time of the library's entry points inside a step, against the step's.
_SPLIT_ENTRIES = ("quantize_raw", "quantize_dec_raw", "gemm_raw", "gemm_dec_raw", "fp8_cast_raw")


def host_split(step, dev, n):
    """n eager steps with the library's raw entry points (nvfp4._ops: C++ checks, kernel
    launches) and torch.empty wrapped by timers: per step, the host time until step() returns
    (its launches issued; the GPU may still run), each entry's calls and host ms, and the GPU
    time (CUDA events) for reference. No profiler: the wrappers add ~0.2 us a call."""
    from nvfp4 import _ops
    acc = {}

    def wrap(name, fn):
        def timed(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                c, t = acc.get(name, (0, 0.0))
                acc[name] = (c + 1, t + time.perf_counter() - t0)
        return timed

    saved = {name: getattr(_ops, name) for name in _SPLIT_ENTRIES if hasattr(_ops, name)}
    saved_empty = torch.empty
    host, gpu = [], []
    try:
        for name, fn in saved.items():
            setattr(_ops, name, wrap(name, fn))
        torch.empty = wrap("torch.empty", saved_empty)
        for i in range(n):
            sync(dev)
            if dev.type == "cuda":
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
            t0 = time.perf_counter()
            step(i)
            host.append(time.perf_counter() - t0)
            if dev.type == "cuda":
                b.record()
                b.synchronize()
                gpu.append(a.elapsed_time(b))
    finally:
        for name, fn in saved.items():
            setattr(_ops, name, fn)
        torch.empty = saved_empty
    return {"steps": n, "host_ms": 1e3 * statistics.median(host),
            "step_ms": statistics.median(gpu) if gpu else None,
            "entries": {k: {"calls": c / n, "ms": 1e3 * t / n, "us_per_call": 1e6 * t / c}
                        for k, (c, t) in sorted(acc.items(), key=lambda kv: -kv[1][1])}}


# Host calls that wait for the GPU (a step that makes them cannot run ahead of its kernels).
_WAITS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy",
          "aten::_local_scalar_dense", "aten::item", "aten::is_nonzero")


def time_steps(model, args, dev, batches, mode):
    """mode: "eager", "compile" (torch.compile fullgraph) or "reduce-overhead" (the same with
    CUDA graphs). The first step's time includes compilation: reported as compile_s."""
    step, timed, first, base = prepare_steps(model, args, dev, batches, mode)
    times = [timed(i) for i in range(args.steps)]
    out = {"step_ms": statistics.median(times), "step_ms_min": min(times), "first_step_s": first}
    if args.ab_env and dev.type == "cuda" and mode != "reduce-overhead":
        out["ab"] = ab_rounds(step, timed, args.ab_env, args.ab_rounds, args.ab_steps)
    if dev.type == "cuda":
        out["peak_step_memory_gb"] = (torch.cuda.max_memory_allocated(dev) - base) / 2**30
    if args.profile and dev.type == "cuda":
        out["profile"] = profile_steps(step, dev, args.profile_steps)
    if args.host_split and mode == "eager":
        out["host_split"] = host_split(step, dev, args.profile_steps)
    return out


def interleaved_rows(runners: dict, rounds: int, steps: int) -> dict:
    """--interleave: the variants' prepared steps timed in rounds, each round running every
    variant (one untimed step after the switch, then `steps` timed ones) in a rotated order,
    so that all of them see the same host and GPU state; the median over the rounds."""
    names = list(runners)
    samples = {n: [] for n in names}
    for r in range(rounds):
        for n in names[r % len(names):] + names[:r % len(names)]:
            step, timed = runners[n]
            step(0)
            samples[n] += [timed(i) for i in range(1, 1 + steps)]
    return {n: {"step_ms": statistics.median(v), "step_ms_min": min(v), "samples": v} for n, v in samples.items()}


def prepare_steps(model, args, dev, batches, mode):
    """(step(i), timed(i) -> ms, first step seconds, memory base) for one model and mode, after
    compilation and warm-up."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=dev.type == "cuda")
    if mode == "eager":
        run = model
    elif mode == "compile":
        run = torch.compile(model, fullgraph=True)
    else:
        run = torch.compile(model, fullgraph=True, mode="reduce-overhead")
    amp = torch.autocast(dev.type, dtype=torch.bfloat16) if dev.type == "cuda" else torch.autocast("cpu",
                                                                                                   enabled=False)

    def step(i):
        x, y = batches[i % len(batches)]
        with amp:
            logits = run(x)
        loss = F.cross_entropy(logits.float().reshape(-1, T.VOCAB), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    t0 = time.perf_counter()
    step(0)
    sync(dev)
    first = time.perf_counter() - t0
    for i in range(1, args.warmup):
        step(i)
    sync(dev)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
        base = torch.cuda.memory_allocated(dev)
    def timed(i):
        """One step, its time in ms (CUDA events on the GPU, the host clock on the CPU)."""
        if dev.type != "cuda":
            t0 = time.perf_counter()
            step(i)
            return 1e3 * (time.perf_counter() - t0)
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        step(i)
        b.record()
        b.synchronize()
        return a.elapsed_time(b)

    return step, timed, first, (base if dev.type == "cuda" else 0)


def split_variant(name: str):
    """(variant, "NAME=VALUE" or None) of a --variants entry VARIANT[@NAME=VALUE]."""
    base, _, env = name.partition("@")
    return base, (env or None)


@contextlib.contextmanager
def variant_env(env):
    """The environment of a VARIANT@NAME=VALUE row: NAME=VALUE while the block runs, the
    process's own value (or none) after."""
    if env is None:
        yield
        return
    key, value = env.split("=", 1)
    old = os.environ.get(key)
    os.environ[key] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = old


def with_env(fn, env):
    """fn, called inside variant_env(env)."""
    if env is None:
        return fn

    def call(*args):
        with variant_env(env):
            return fn(*args)
    return call


def ab_rounds(step, timed, env: str, rounds: int, steps: int) -> dict:
    """--ab-env NAME=VALUE: the same compiled (or eager) step timed in interleaved rounds, with
    the variable as the process has it (A) and set to VALUE (B), so that both see the same
    host and GPU state. Only for settings the library reads at each call (NVFP4_SM90_*): a
    CUDA graph would replay what it captured, so reduce-overhead rows skip it (a variant
    VARIANT@NAME=VALUE with --interleave times those). step(i) runs a
    step, timed(i) runs one and returns its milliseconds; the variable is restored after."""
    res = {"env": env, "a": [], "b": []}
    for r in range(rounds):
        for side in ("a", "b") if r % 2 == 0 else ("b", "a"):
            with variant_env(env if side == "b" else None):
                step(0)  # one untimed step after the switch
                res[side] += [timed(i) for i in range(1, 1 + steps)]
    res["a_ms"] = statistics.median(res["a"])
    res["b_ms"] = statistics.median(res["b"])
    res["b_over_a"] = res["b_ms"] / res["a_ms"]
    return res


def build_variant(name, margs, dev, a, ap):
    """examples/train.py's model with the variant's Linear layers (name without its @ setting)."""
    model = T.build_model(margs, dev)
    if name in ("nvfp4", "nvfp4+decoded"):
        nn4.convert(model, a.recipe_obj, include="blocks.*")
        if name == "nvfp4+decoded":
            nn4.set_saved_operands(model, "decoded")
    elif name == "fakequant":
        fakequant_convert(model, a.recipe_obj)
    elif _fp8_variant(name) is not None:
        nn4.convert(model, _fp8_variant(name), include="blocks.*")
    elif name in nn4.RECIPES and name not in ("nvfp4", "bf16"):
        nn4.convert(model, name, include="blocks.*")
    elif name != "bf16":
        ap.error(f"--variants: unknown variant {name!r}")
    return model


def saved_bytes(layer, x):
    """Bytes a layer keeps for backward, excluding its own parameters and anything weight-sized
    that outlives the step (the quantized-weight cache)."""
    params = {p.data_ptr() for p in layer.parameters()}
    sizes = []

    def pack(t):
        if t.data_ptr() not in params:
            sizes.append(t.numel() * t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with torch.autocast(x.device.type, dtype=torch.bfloat16):
            layer(x)
    return sum(sizes)


def activation_memory(args, dev):
    """Per-Linear bytes saved for backward at two token counts; their difference is the part
    that scales with tokens (activation memory), free of weight-sized terms."""
    k, n = args.d_model, 4 * args.d_model
    m1, m2 = args.mem_tokens, 2 * args.mem_tokens
    torch.manual_seed(0)
    base = nn.Linear(k, n, bias=False, device=dev)
    layers = {"bf16": base, "nvfp4": nn4.Linear.from_linear(copy.deepcopy(base), args.recipe_obj)}
    if "nvfp4+decoded" in args.variants.split(","):
        layers["nvfp4+decoded"] = nn4.Linear.from_linear(copy.deepcopy(base), args.recipe_obj)
        layers["nvfp4+decoded"].set_saved_operands("decoded")
    fq = copy.deepcopy(base)
    fq.__class__ = FakeQuantLinear
    fq.recipe = args.recipe_obj
    layers["fakequant"] = fq
    dtype = torch.bfloat16
    res = {}
    for name, layer in layers.items():
        x1 = torch.randn(m1, k, device=dev, dtype=dtype, requires_grad=True)
        x2 = torch.randn(m2, k, device=dev, dtype=dtype, requires_grad=True)
        per_token = (saved_bytes(layer, x2) - saved_bytes(layer, x1)) / (m2 - m1)
        res[name] = {"saved_bytes_per_token": per_token, "saved_bytes_per_element": per_token / k}
        if dev.type == "cuda":
            with torch.autocast("cuda", dtype=torch.bfloat16):
                layer(x1)  # warm the weight cache
            sync(dev)
            before = torch.cuda.memory_allocated(dev)
            h = x2 * 1  # an activation that survives only if the layer saves it
            with torch.autocast("cuda", dtype=torch.bfloat16):
                y = layer(h)
            del h
            sync(dev)
            res[name]["allocated_delta_bytes"] = torch.cuda.memory_allocated(dev) - before - y.numel() * y.element_size()
            del y
    for name in [n for n in res if n != "bf16"]:
        res[name]["ratio_to_bf16"] = res[name]["saved_bytes_per_token"] / res["bf16"]["saved_bytes_per_token"]
        if "allocated_delta_bytes" in res[name]:
            res[name]["allocated_ratio_to_bf16"] = res[name]["allocated_delta_bytes"] / \
                max(1, res["bf16"]["allocated_delta_bytes"])
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default=None, choices=sorted(T.SIZES), help="model size (default full, ~85M; "
                    "400m: d2048, 8 layers, 8x2048 tokens)")
    ap.add_argument("--batch-size", type=int, default=None, help="sequences per step (default: the size's)")
    ap.add_argument("--seq-len", type=int, default=None)
    ap.add_argument("--recipe", default="nvfp4", choices=[r for r in nn4.RECIPES if r != "bf16"])
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--steps", type=int, default=None, help="timed steps (default 20; 3 with --smoke)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed steps first (default 5; 1 with --smoke)")
    ap.add_argument("--modes", default="eager", help="comma-separated: eager, compile (torch.compile fullgraph), "
                    "reduce-overhead (the same with CUDA graphs)")
    ap.add_argument("--compile", action="store_true", help="shorthand for --modes compile")
    ap.add_argument("--variants", default="bf16,nvfp4,fakequant")
    ap.add_argument("--profile", action="store_true", help="also profile a few steps of each row: kernels per "
                    "step, GPU-busy vs wall time, GPU time by kind")
    ap.add_argument("--profile-steps", type=int, default=3, help="steps profiled (--profile) or host-split "
                    "(--host-split) per row")
    ap.add_argument("--host-split", action="store_true", help="eager rows: the host time of the library's entry "
                    "points and torch.empty within a step, timed by wrappers (no profiler); needs eager in --modes")
    ap.add_argument("--mem-tokens", type=int, default=None, help="tokens for the per-Linear memory test")
    ap.add_argument("--no-memory", action="store_true", help="skip the per-Linear saved-memory test")
    ap.add_argument("--smoke", action="store_true", help="CPU, toy size")
    ap.add_argument("--json", default=None, help="write the results here")
    ap.add_argument("--moe", type=int, default=None, metavar="E",
                    help="examples/train.py's MoE model: E experts per MLP (default 32 with --size moe, else 0); "
                         "nvfp4 runs the experts as grouped NVFP4 GEMMs (the fakequant variant leaves them in BF16)")
    ap.add_argument("--ab-env", default=None, metavar="NAME=VALUE",
                    help="also time each eager/compile row in interleaved rounds with and without this "
                         "environment setting (a library setting read at each call, e.g. NVFP4_PDL=0)")
    ap.add_argument("--ab-rounds", type=int, default=6, help="rounds of --ab-env (A then B, B then A, ...)")
    ap.add_argument("--ab-steps", type=int, default=5, help="timed steps per side and round of --ab-env")
    ap.add_argument("--interleave", type=int, default=0, metavar="ROUNDS",
                    help="time the variants of each mode in ROUNDS interleaved rounds of --steps steps each "
                         "(all models built and compiled first, the order rotated every round) instead of "
                         "one after the other: ratios free of the host's drift between rows")
    ap.add_argument("--moe-top-k", type=int, default=2)
    ap.add_argument("--moe-ffn", type=int, default=None, help="hidden units per expert (default d_model)")
    a = ap.parse_args(argv)
    if a.size is None and not a.smoke and not torch.cuda.is_available():
        # the ~85M model's steps take minutes each on a CPU
        a.smoke = True
        print("bench_train_step: no CUDA GPU: the CPU smoke size, as with --smoke (--size full times the ~85M "
              "model on the CPU, minutes a step)", flush=True)
    elif a.size not in (None, "smoke") and not torch.cuda.is_available():
        print(f"bench_train_step: no CUDA GPU: timing the {a.size} model on the CPU (minutes a step)", flush=True)
    size = dict(T.SIZES[a.size or ("smoke" if a.smoke else "full")])
    a.d_model, a.n_layers, a.n_heads = size["d_model"], size["n_layers"], size["n_heads"]
    a.seq_len = a.seq_len or size["seq_len"]
    a.batch_size = a.batch_size or size["batch_size"]
    a.steps = a.steps or (3 if a.smoke else 20)
    a.warmup = a.warmup or (1 if a.smoke else 5)
    a.mem_tokens = a.mem_tokens or (64 if a.smoke else 8192)
    if a.ab_env is not None and ("=" not in a.ab_env or not a.ab_env.split("=", 1)[0]):
        ap.error(f"--ab-env: expected NAME=VALUE, got {a.ab_env!r}")
    for v in a.variants.split(","):
        base, env = split_variant(v)
        if "@" in v and (env is None or "=" not in env or not env.split("=", 1)[0]):
            ap.error(f"--variants: {v!r}: expected VARIANT@NAME=VALUE")
        if base == "fakequant" and env is not None:
            ap.error(f"--variants: {v!r}: the fakequant baseline reads no library setting")
    if a.interleave < 0:
        ap.error(f"--interleave: expected a number of rounds >= 1 (0: off), got {a.interleave}")
    if a.interleave and a.ab_env is not None:
        ap.error("--interleave and --ab-env: one at a time (--ab-env interleaves one row with a setting, "
                 "--interleave the variants)")
    modes = ["compile"] if a.compile else [m.strip() for m in a.modes.split(",") if m.strip()]
    for m in modes:
        if m not in ("eager", "compile", "reduce-overhead"):
            ap.error(f"--modes: unknown mode {m!r}")
    if a.host_split and (a.interleave or "eager" not in modes):
        ap.error("--host-split: times the eager rows of the ordinary timing (needs eager in --modes, "
                 "and not --interleave)")
    if a.profile_steps < 1:
        ap.error(f"--profile-steps: expected a number of steps >= 1, got {a.profile_steps}")
    dev = torch.device("cpu" if a.smoke or not torch.cuda.is_available() else "cuda")
    if "reduce-overhead" in modes and dev.type != "cuda":
        ap.error("--modes: reduce-overhead (CUDA graphs) needs a GPU")
    if a.profile and dev.type != "cuda":
        print("--profile: kernel profiles need a GPU; not profiled on the CPU")
    a.recipe_obj = nn4.get_recipe(a.recipe, backend=a.backend)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True

    g = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(4):  # a few different batches so nothing is cached by accident
        xy = torch.randint(0, T.VOCAB, (a.batch_size, a.seq_len + 1), generator=g).to(dev)
        batches.append((xy[:, :-1], xy[:, 1:]))
    tokens = a.batch_size * a.seq_len

    results = {"device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
               "torch": torch.__version__, "nvfp4": nvfp4.__version__, "recipe": a.recipe, "modes": modes,
               "date": time.strftime("%Y-%m-%d"),
               "model": {"d_model": a.d_model, "n_layers": a.n_layers, "seq_len": a.seq_len,
                         "batch_size": a.batch_size},
               "rows": {}}
    moe = a.moe if a.moe is not None else (32 if a.size == "moe" else 0)
    margs = argparse.Namespace(d_model=a.d_model, n_layers=a.n_layers, n_heads=a.n_heads, seq_len=a.seq_len,
                               seed=0, master_dtype=torch.float32, moe=moe, moe_top_k=a.moe_top_k,
                               moe_ffn=a.moe_ffn or a.d_model)
    if moe:
        results["model"]["moe"] = {"experts": moe, "top_k": a.moe_top_k, "ffn": margs.moe_ffn}
    for mode in modes:
        if a.interleave:
            held = {}  # name -> (model, step, timed, first)
            torch._dynamo.reset()  # once: the models' compiled graphs must all stay cached
            for name in a.variants.split(","):
                base, env = split_variant(name)
                if base == "fakequant" and mode != "eager":
                    continue
                with variant_env(env):
                    model = build_variant(base, margs, dev, a, ap)
                    step, timed, first, _ = prepare_steps(model, a, dev, batches, mode)
                held[name] = (model, with_env(step, env), with_env(timed, env), first)
            got = interleaved_rows({n: h[1:3] for n, h in held.items()}, a.interleave, a.steps)
            for name, r in got.items():
                r.update(first_step_s=held[name][3], interleaved_rounds=a.interleave,
                         tokens_per_s=tokens / (r["step_ms"] / 1e3))
                if a.profile and dev.type == "cuda":
                    r["profile"] = profile_steps(held[name][1], dev, a.profile_steps)
                results["rows"][f"{name}/{mode}"] = r
                print(f"{name:10s} {mode:16s} step {r['step_ms']:9.2f} ms  {r['tokens_per_s']:12,.0f} tokens/s  "
                      f"({a.interleave} interleaved rounds of {a.steps}; min {r['step_ms_min']:.2f})", flush=True)
                if "profile" in r:
                    p = r["profile"]
                    print(f"{'':27s}profile: {p['kernels_per_step']:.0f} kernels/step, GPU busy "
                          f"{p['gpu_busy_ms']:.2f} ms", flush=True)
            del held
            if dev.type == "cuda":
                torch.cuda.empty_cache()
            continue
        for name in a.variants.split(","):
            base, env = split_variant(name)
            if base == "fakequant" and mode != "eager":
                continue  # the plain-PyTorch baseline is an eager baseline
            with variant_env(env):
                model = build_variant(base, margs, dev, a, ap)
            if mode != "eager":
                torch._dynamo.reset()
            try:
                with variant_env(env):
                    r = time_steps(model, a, dev, batches, mode)
            except Exception as e:  # a mode that fails is a result too (reported, not hidden)
                r = {"error": f"{type(e).__name__}: {str(e)[:400]}"}
                print(f"{name:10s} {mode:16s} FAILED: {r['error']}", flush=True)
                results["rows"][f"{name}/{mode}"] = r
                del model
                continue
            r["tokens_per_s"] = tokens / (r["step_ms"] / 1e3)
            results["rows"][f"{name}/{mode}"] = r
            line = f"{name:10s} {mode:16s} step {r['step_ms']:9.2f} ms  {r['tokens_per_s']:12,.0f} tokens/s" \
                   f"  first step {r['first_step_s']:6.1f} s"
            if "peak_step_memory_gb" in r:
                line += f"  peak step memory {r['peak_step_memory_gb']:.2f} GB"
            print(line, flush=True)
            if "ab" in r:
                ab = r["ab"]
                print(f"{'':27s}interleaved: as set {ab['a_ms']:.2f} ms, with {ab['env']} {ab['b_ms']:.2f} ms "
                      f"({ab['b_over_a']:.3f}x; {len(ab['a'])} + {len(ab['b'])} steps)", flush=True)
            if "host_split" in r:
                h = r["host_split"]
                print(f"{'':27s}host split: step() returns after {h['host_ms']:.2f} ms (step {h['step_ms'] or 0:.2f} ms); "
                      + ", ".join(f"{k} {v['calls']:.0f}x {v['ms']:.2f} ms ({v['us_per_call']:.1f} us)"
                                  for k, v in h["entries"].items()), flush=True)
            if "profile" in r:
                p = r["profile"]
                kinds = "  ".join(f"{k} {v:.2f}" for k, v in p["by_kind_ms"].items())
                print(f"{'':27s}profile: {p['kernels_per_step']:.0f} kernels/step, GPU busy {p['gpu_busy_ms']:.2f} ms "
                      f"of {p['wall_ms']:.2f} ms wall; by kind (ms): {kinds}; launches per step by kind: "
                      + "  ".join(f"{k} {v:.0f}" for k, v in p.get("launches_by_kind", {}).items()), flush=True)
                waits = p.get("host_waits_per_step") or {}
                g = p.get("gaps") or {}
                if "error" in g:
                    print(f"{'':27s}gaps: not analysed ({g['error']})", flush=True)
                elif g:
                    print(f"{'':27s}gaps per step: GPU idle {g['gpu_idle_ms']:.2f} ms in {g['gaps_per_step']:.0f} gaps "
                          f"({g['host_late_ms']:.2f} waiting for a launch, {g['launch_latency_ms']:.2f} queued); "
                          "the launching thread meanwhile (ms): " + ", ".join(
                              f"{k} {v:.2f}" for k, v in list(g["waiting_on_ms"].items())[:8]) + "; waiting for: "
                          + ", ".join(f"{k[:40]} {v:.2f}" for k, v in list(g["waiting_for_ms"].items())[:5]),
                          flush=True)
                print(f"{'':27s}host waits per step: " + (", ".join(
                    f"{k} {v['calls']:.1f}x {v['ms']:.2f} ms" for k, v in waits.items()) or "none") + "; host self "
                      "time (ms): " + ", ".join(f"{k} {v:.2f}" for k, v in list(p["top_host_self_ms"].items())[:6]),
                      flush=True)
            del model
            if dev.type == "cuda":
                torch.cuda.empty_cache()
    rows = results["rows"]
    ratios = {}
    for mode in modes:
        b, q = rows.get(f"bf16/{mode}", {}), rows.get(f"nvfp4/{mode}", {})
        others = [v for v in a.variants.split(",")
                  if _fp8_variant(v) is not None or v == "nvfp4+decoded" or "@" in v
                  or (v in nn4.RECIPES and v not in ("nvfp4", "bf16"))]
        for f8 in others:
            r8 = rows.get(f"{f8}/{mode}", {})
            if "step_ms" in b and "step_ms" in r8:
                ratios[f"{f8}_over_bf16_step_time/{mode}"] = r8["step_ms"] / b["step_ms"]
            plain = rows.get(f"{split_variant(f8)[0]}/{mode}", {})
            if "@" in f8 and "step_ms" in plain and "step_ms" in r8:
                ratios[f"{f8}_over_{split_variant(f8)[0]}_step_time/{mode}"] = r8["step_ms"] / plain["step_ms"]
        if "step_ms" in b and "step_ms" in q:
            ratios[f"nvfp4_over_bf16_step_time/{mode}"] = q["step_ms"] / b["step_ms"]
            ratios[f"nvfp4_over_bf16_first_step/{mode}"] = q["first_step_s"] / max(b["first_step_s"], 1e-9)
            if "profile" in b and "profile" in q and b["profile"]["kernels_per_step"]:
                ratios[f"nvfp4_over_bf16_kernels_per_step/{mode}"] = \
                    q["profile"]["kernels_per_step"] / b["profile"]["kernels_per_step"]
    if "step_ms" in rows.get("fakequant/eager", {}) and "step_ms" in rows.get("nvfp4/eager", {}):
        ratios["fakequant_over_nvfp4_step_time/eager"] = rows["fakequant/eager"]["step_ms"] / \
            rows["nvfp4/eager"]["step_ms"]
    results["ratios"] = ratios
    for k, val in ratios.items():
        print(f"{k}: {val:.3f}")
    if not a.no_memory:
        mem = activation_memory(a, dev)
        results["activation_memory_per_linear"] = mem
        for name, r in mem.items():
            extra = f"  ratio {r['ratio_to_bf16']:.3f}" if "ratio_to_bf16" in r else ""
            if "allocated_ratio_to_bf16" in r:
                extra += f"  (allocated-delta ratio {r['allocated_ratio_to_bf16']:.3f})"
            print(f"saved for backward, {name:10s}: {r['saved_bytes_per_element']:.4f} bytes/input element{extra}")
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
        print(f"wrote {a.json}")
    return results


if __name__ == "__main__":
    main()
