#!/usr/bin/env python3
"""The FP8 baseline: its cast kernels against a copy, one Linear's step against BF16, and the
host cost of one Linear's forward + backward. Every ratio is to a baseline measured in the
same run.

Sections (--sections, default all three):
- cast:  nvfp4_fp8_cast (the raw entry point, outputs allocated once) on X-, dY- and W-like
         tensors: current scaling (amax pass + cast) and delayed scaling (one pass: the cast
         reduces max |x| itself), q and qᵀ written. GB/s counts one read of x plus the bytes
         written (q, qᵀ) — the traffic of a single ideal pass; current scaling reads x twice
         (the second read partly from L2: the cast walks x backwards), which "reads" shows.
         Beside each: a torch copy_ of x measured in the same run (read + write bytes) and
         the ratio. Inputs rotate through enough buffers to exceed the L2 (nvfp4._timing).
- layer: each Linear of one transformer block of d_model D (examples/train.py's: fused qkv
         D->3D, proj D->D, fc D->4D, out 4D->D, no bias), with T tokens, under BF16 autocast
         and FP32 master weights, timed as y = layer(x); y.backward(dy):
           bf16:         torch.nn.Linear (cuBLAS BF16);
           fp8:          nvfp4.nn.fp8.FP8Linear, current scaling (torch._scaled_mm);
           fp8_delayed:  FP8Linear, delayed scaling;
           fp8_compiled: current scaling through the torch-op cast path (amax, scale, a
                         torch.compile'd cast): what nvfp4's own cast kernels save;
           fp8_unfused:  the same with the cast left as separate torch ops.
         Medians of CUDA-event times over --iters steps after --warmup; ratio = time / bf16.
- host:  one Linear's forward + backward at a size where the GPU waits on the host
         (--host-shape, default 16 tokens x 256 -> 256): host microseconds per fwd+bwd (wall
         time of back-to-back steps), and per fwd+bwd the torch ops the profiler records,
         the tensors allocated and the GPU kernels and memsets launched; bf16 the baseline.
         --host-proxy runs this section on the CPU instead: the FP8 kernel path forced onto
         CPU tensors (the library's CPU reference casts 16x16 tensors), torch._scaled_mm
         replaced by a one-allocation stand-in on both sides (torch's CPU _scaled_mm is ~20
         aten ops where CUDA's is one cuBLASLt call): the Python/dispatch cost of the paths,
         comparable between builds on one machine, not a GPU figure.

    python3 bench/bench_fp8.py                                  # all sections, d_model 2048, 8 x 2048 tokens
    python3 bench/bench_fp8.py --sections cast --json fp8_cast.json
    python3 bench/bench_fp8.py --sections host --host-proxy     # no GPU needed
"""
from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import time

import torch
from torch import nn

from nvfp4 import _ops
from nvfp4._timing import Timer
from nvfp4.nn import fp8 as F8


# ------------------------------------------------------------------------------ cast
def cast_shapes(d: int, tokens: int):
    """(name, rows, cols, dtype) of the operands one block casts: X and dY (BF16) along the
    token axis, W (the FP32 master weight)."""
    return [("X [T, D]", tokens, d, torch.bfloat16), ("X [T, 4D]", tokens, 4 * d, torch.bfloat16),
            ("dY [T, 3D]", tokens, 3 * d, torch.bfloat16), ("W [4D, D]", 4 * d, d, torch.float32)]


def bench_cast(args, timer: Timer) -> list:
    dev = timer.device
    dt, di, st = _ops._device(torch.empty(0, device=dev))
    rows_out = []
    # builds before amax_accumulate (a baseline run): delayed scaling clears and writes the amax
    try:
        probe = torch.zeros(64, device=dev)
        _ops.fp8_cast_raw(probe.data_ptr(), 0, 1, 16, 0, 0.0, probe.data_ptr() + 128, probe.data_ptr() + 192, 0,
                          True, False, probe.data_ptr() + 160, probe.data_ptr() + 164, dt, di, st, True)
        accumulate = True
    except TypeError:
        accumulate = False
        print("(this build has no amax_accumulate: delayed scaling clears the amax before each cast)")
    print("\n## cast: nvfp4_fp8_cast, q and qT (GB/s: one read of x + the bytes written; copy: read + write)")
    hdr = (f"{'tensor':11s} {'shape':>12s} {'dtype':>8s} {'scaling':>8s} {'reads':>5s} {'us':>9s} {'GB/s':>8s} "
           f"{'copy GB/s':>9s} {'x copy':>7s}")
    print(hdr)
    for name, r, c, dtype in cast_shapes(args.d_model, args.tokens):
        esize = torch.empty(0, dtype=dtype).element_size()
        xbytes = r * c * esize
        sets = timer.sets(xbytes + 2 * r * c)
        xs = [torch.randn(r, c, device=dev, dtype=dtype) for _ in range(sets)]
        dst = torch.empty_like(xs[0])
        t_copy = timer.time(lambda i: dst.copy_(xs[i]), sets).median_us
        copy_gbps = 2 * xbytes / t_copy / 1e3
        q = torch.empty(r, c, dtype=torch.uint8, device=dev)
        qt = torch.empty(c, r, dtype=torch.uint8, device=dev)
        sc = torch.ones(4, dtype=torch.float32, device=dev)  # scale_inv, amax, delayed scale (1)
        code = _ops.DTYPE_CODE[dtype]
        for scaling in ("current", "delayed"):
            scale = sc.data_ptr() + 8 if scaling == "delayed" else 0

            # delayed: max |x| accumulated into the amax slot, as FP8Linear does with its history
            extra = (True,) if (scaling == "delayed" and accumulate) else ()

            def call(i, scale=scale, extra=extra):
                _ops.fp8_cast_raw(xs[i].data_ptr(), code, r, c, 0, 0.0, scale, q.data_ptr(), qt.data_ptr(), True,
                                  True, sc.data_ptr(), sc.data_ptr() + 4, dt, di, st, *extra)

            us = timer.time(call, sets).median_us
            moved = xbytes + 2 * r * c
            gbps = moved / us / 1e3
            reads = 2 if scaling == "current" else 1
            print(f"{name:11s} {f'{r}x{c}':>12s} {str(dtype)[6:]:>8s} {scaling:>8s} {reads:5d} {us:9.1f} {gbps:8.0f} "
                  f"{copy_gbps:9.0f} {gbps / copy_gbps:7.2f}")
            rows_out.append({"tensor": name, "rows": r, "cols": c, "dtype": str(dtype), "scaling": scaling,
                             "x_reads": reads, "us": us, "bytes_one_read": moved, "gbps": gbps,
                             "copy_us": t_copy, "copy_gbps": copy_gbps, "ratio_to_copy": gbps / copy_gbps})
    return rows_out


# ------------------------------------------------------------------------------ layer
def layer_shapes(d: int):
    return [("qkv", d, 3 * d), ("proj", d, d), ("fc", d, 4 * d), ("out", 4 * d, d)]


def make(kind: str, k: int, n: int, device):
    if kind == "bf16":
        return nn.Linear(k, n, bias=False, device=device)
    recipe = {"fp8": F8.FP8_RECIPES["fp8"], "fp8_delayed": F8.FP8_RECIPES["fp8_delayed"],
              "fp8_compiled": F8.FP8_RECIPES["fp8"].replace(name="fp8_compiled", fused_cast=False),
              "fp8_unfused": F8.FP8_RECIPES["fp8"].replace(name="fp8_unfused", fused_cast=False,
                                                           compile_cast=False)}[kind]
    return F8.FP8Linear(k, n, bias=False, device=device, recipe=recipe)


def step_fn(layer, x, dy, device_type):
    def step():
        with torch.autocast(device_type, dtype=torch.bfloat16):
            y = layer(x)
        y.backward(dy)
        x.grad = None
        layer.weight.grad = None
    return step


def time_step(layer, x, dy, warmup: int, iters: int) -> float:
    step = step_fn(layer, x, dy, "cuda")
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


def bench_layers(args, kinds) -> dict:
    print(f"\n## layer: one block's Linears, forward + backward (ms, median of {args.iters})")
    print(f"{'layer':6s} {'K':>6s} {'N':>6s} " + " ".join(f"{k + ' ms':>14s} {'x bf16':>7s}" for k in kinds))
    rows, totals = [], {k: 0.0 for k in kinds}
    for name, k, n in layer_shapes(args.d_model):
        x = torch.randn(args.tokens, k, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        dy = torch.randn(args.tokens, n, device="cuda", dtype=torch.bfloat16)
        res = {}
        for kind in kinds:
            layer = make(kind, k, n, "cuda")
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
    return {"layers": rows, "block_ms": totals, "block_ratio_to_bf16": {kd: totals[kd] / base for kd in kinds}}


# ------------------------------------------------------------------------------ host
_ALLOCS = ("aten::empty", "aten::empty_strided", "aten::empty_like", "aten::new_empty", "aten::new_empty_strided")


def _stand_in_scaled_mm(a, b, scale_a=None, scale_b=None, bias=None, scale_result=None, out_dtype=None,
                        use_fast_accum=False):
    return torch.empty(a.shape[0], b.shape[1], dtype=out_dtype or a.dtype, device=a.device)


def bench_host(args, kinds) -> dict:
    proxy = args.host_proxy
    device = "cpu" if proxy else "cuda"
    m, k, n = args.host_shape or ((16, 16, 16) if proxy else (16, 256, 256))
    if proxy:
        torch.set_num_threads(1)
        F8._KERNEL_DEVICES = frozenset({"cpu"})  # the kernel path on the CPU reference
        torch._scaled_mm = _stand_in_scaled_mm
        print(f"\n## host (CPU proxy: the FP8 kernel path on CPU tensors, torch._scaled_mm a stand-in; "
              f"{m} x {k} -> {n})")
    else:
        print(f"\n## host: one Linear's forward + backward, {m} tokens x {k} -> {n} (the GPU waits on the host)")
    steps = {}
    for kind in kinds:
        torch.manual_seed(0)
        layer = make(kind, k, n, device)
        x = torch.randn(m, k, device=device, requires_grad=True)
        dy = torch.randn(m, n, device=device, dtype=torch.bfloat16)
        steps[kind] = step_fn(layer, x, dy, device)
    sync = torch.cuda.synchronize if not proxy else (lambda: None)
    clock = time.thread_time if proxy else time.perf_counter  # the proxy: this thread's CPU time only
    for kind in kinds:
        for _ in range(50):
            steps[kind]()
    sync()
    best = {kd: float("inf") for kd in kinds}
    reps = args.host_reps
    for _ in range(args.host_rounds):  # interleaved, best round: the least disturbed by other work
        for kind in kinds:
            sync()
            t0 = clock()
            for _ in range(reps):
                steps[kind]()
            sync()
            best[kind] = min(best[kind], (clock() - t0) / reps * 1e6)
    print(f"{'variant':12s} {'us/fwd+bwd':>11s} {'x bf16':>7s} {'torch ops':>9s} {'allocs':>6s} {'kernels':>7s} "
          f"{'memsets':>7s}")
    out = {}
    for kind in kinds:
        acts = [torch.profiler.ProfilerActivity.CPU] + ([] if proxy else [torch.profiler.ProfilerActivity.CUDA])
        with torch.profiler.profile(activities=acts) as prof:
            steps[kind]()
            sync()
        ops = collections.Counter()
        kernels = memsets = 0
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                if "memset" in e.name.lower():
                    memsets += 1
                else:
                    kernels += 1
            elif e.name.startswith(("aten::", "nvfp4::")):
                ops[e.name] += 1
        allocs = sum(v for name, v in ops.items() if name in _ALLOCS)
        n_ops = sum(ops.values())
        print(f"{kind:12s} {best[kind]:11.1f} {best[kind] / best['bf16']:7.2f} {n_ops:9d} {allocs:6d} "
              f"{'-' if proxy else kernels:>7} {'-' if proxy else memsets:>7}")
        out[kind] = {"us": best[kind], "ratio_to_bf16": best[kind] / best["bf16"], "torch_ops": n_ops,
                     "allocations": allocs, "ops": dict(ops)}
        if not proxy:
            out[kind].update(kernels=kernels, memsets=memsets)
    result = {"proxy": proxy, "shape": [m, k, n], "rows": out}
    if not proxy:
        # what the GEMM calls alone cost the host: three per Linear fwd+bwd on either side
        a = torch.randn(m, k, device=device, dtype=torch.bfloat16)
        b = torch.randn(n, k, device=device, dtype=torch.bfloat16)
        a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
        one = torch.ones((), device=device)
        calls = {"torch.mm (bf16)": lambda: torch.mm(a, b.t()),
                 "torch._scaled_mm": lambda: torch._scaled_mm(a8, b8.t(), scale_a=one, scale_b=one,
                                                              out_dtype=torch.bfloat16)}
        gemm = {}
        for name, fn in calls.items():
            for _ in range(50):
                fn()
            best_c = float("inf")
            for _ in range(args.host_rounds):
                sync()
                t0 = clock()
                for _ in range(reps):
                    fn()
                sync()
                best_c = min(best_c, (clock() - t0) / reps * 1e6)
            gemm[name] = best_c
        print("one GEMM call, host us: " + ", ".join(f"{k} {v:.1f}" for k, v in gemm.items()))
        result["gemm_call_us"] = gemm
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sections", default="cast,layer,host", help="comma-separated: cast, layer, host")
    ap.add_argument("--d-model", type=int, default=2048)
    ap.add_argument("--tokens", type=int, default=8 * 2048)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--kinds", default="bf16,fp8,fp8_delayed,fp8_compiled,fp8_unfused", help="layer section")
    ap.add_argument("--host-kinds", default="bf16,fp8,fp8_delayed")
    ap.add_argument("--host-shape", type=int, nargs=3, default=None, metavar=("M", "K", "N"),
                    help="default 16 256 256 (--host-proxy: 16 16 16, the CPU reference's casts kept negligible)")
    ap.add_argument("--host-reps", type=int, default=200)
    ap.add_argument("--host-rounds", type=int, default=9)
    ap.add_argument("--host-proxy", action="store_true", help="host section on the CPU (see above)")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args(argv)
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    for s in sections:
        if s not in ("cast", "layer", "host"):
            ap.error(f"--sections: unknown section {s!r}")
    gpu_sections = [s for s in sections if not (s == "host" and args.host_proxy)]
    if gpu_sections:
        if not torch.cuda.is_available() or not _ops.build_cuda_archs():
            print(f"bench_fp8: {', '.join(gpu_sections)} need a CUDA GPU and a CUDA build of nvfp4 (the host section "
                  "runs on the CPU with --host-proxy)", file=sys.stderr)
            return 2
        ok, why = F8.fp8_supported()
        if not ok:
            print(f"bench_fp8: {why}", file=sys.stderr)
            return 2
    result = {"torch": torch.__version__, "d_model": args.d_model, "tokens": args.tokens}
    if gpu_sections:
        result["device"] = torch.cuda.get_device_name()
        print(f"# {result['device']}, torch {torch.__version__}, d_model {args.d_model}, tokens {args.tokens}")
    torch.manual_seed(0)
    if "cast" in sections:
        result["cast"] = bench_cast(args, Timer(torch.device("cuda"), iters=20, warmup=3, l2_factor=3.0))
    if "layer" in sections:
        kinds = args.kinds.split(",")
        if "bf16" not in kinds:
            kinds = ["bf16"] + kinds
        result["layer"] = bench_layers(args, kinds)
    if "host" in sections:
        kinds = args.host_kinds.split(",")
        if "bf16" not in kinds:
            kinds = ["bf16"] + kinds
        result["host"] = bench_host(args, kinds)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
