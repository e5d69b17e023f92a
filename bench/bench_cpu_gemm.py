#!/usr/bin/env python3
"""The CPU reference GEMM: time per call against a float64 BLAS product in the same run.

nvfp4.gemm on CPU tensors runs the reference backend (src/cpu/gemm.cpp: decode once into
float64 panels, blocked kernels on every core the process may use, each output the in-order
float64 sum). The baseline is torch.mm on the same decoded operands in float64 (torch's
multithreaded BLAS; its summation order is its own), timed after the decode, so the ratio
is what the reference's exact ordering, its decode and its epilogue cost over a plain
float64 BLAS call. Medians over --iters runs after one warm-up.

    python3 bench/bench_cpu_gemm.py                       # README's 4096x11008x4096 example
    python3 bench/bench_cpu_gemm.py --shapes 1024x1024x1024,257x333x512 --iters 3
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch

import nvfp4


def timed(fn, iters):
    fn()
    runs = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="4096x11008x4096", help="comma-separated MxNxK")
    ap.add_argument("--iters", type=int, default=1)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = f"; load average {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else ""
    print(f"nvfp4 {nvfp4.__version__} CPU reference GEMM, {threads} CPUs available, torch threads "
          f"{torch.get_num_threads()}{load}", flush=True)
    rows = []
    for shape in a.shapes.split(","):
        m, n, k = (int(v) for v in shape.lower().split("x"))
        g = torch.Generator().manual_seed(0)
        qx = nvfp4.quantize(torch.randn(m, k, generator=g, dtype=torch.bfloat16))
        qw = nvfp4.quantize(torch.randn(n, k, generator=g, dtype=torch.bfloat16) * 0.02, block="2d")
        t_ref = timed(lambda: nvfp4.gemm(qx, qw, out_dtype=torch.bfloat16), a.iters)
        xa, wa = qx.dequantize(torch.float32).double(), qw.dequantize(torch.float32).double()
        t_blas = timed(lambda: torch.mm(xa, wa.t()), a.iters)
        gmacs = m * n * k / 1e9
        rows.append({"shape": [m, n, k], "what": "reference", "us": t_ref * 1e6})
        rows.append({"shape": [m, n, k], "what": "torch.mm float64", "us": t_blas * 1e6, "ratio": t_ref / t_blas})
        print(f"{m}x{n}x{k}: reference {t_ref:8.3f} s ({gmacs / t_ref:6.1f} GMAC/s)   float64 torch.mm "
              f"{t_blas:8.3f} s ({gmacs / t_blas:6.1f} GMAC/s)   reference / torch.mm {t_ref / t_blas:.2f}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"nvfp4": nvfp4.__version__, "threads": threads, "results": rows}, f, indent=1)


if __name__ == "__main__":
    main()
