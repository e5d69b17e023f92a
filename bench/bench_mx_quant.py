#!/usr/bin/env python3
"""Throughput of the MXFP4 quantization kernels against a device-to-device copy and the NVFP4
kernels on the same inputs, all measured in the same run.

Bytes counted per call: |x| once (MX has no amax pass: one read of x) + every output byte
(codes and E8M0 scales, swizzle padding included) for each direction; NVFP4 rows count
what bench_quant.py counts for its one-pass figure (|x| + outputs), so the two GB/s are
comparable; copy: 2 * |x|. The ratio column is GB/s over the copy's GB/s. Inputs rotate
through enough buffers to exceed L2 several times over; CUDA events; median.

    python3 bench/bench_mx_quant.py [--sizes 4096 8192 16384] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys

import torch

import nvfp4
from nvfp4 import _C

ROUND = {"rtn": 0, "sr": 1}
RULE = {"ocp": 0, "ceil": 1, "tetrajet": 2}


def _alloc_mx(rows, cols):
    nb = cols // 32
    return (torch.empty(rows, cols // 2, dtype=torch.uint8, device="cuda"),
            torch.empty((rows + 127) // 128 * 128, (nb + 3) // 4 * 4, dtype=torch.uint8, device="cuda"))


def _alloc_nv(rows, cols):
    nb = cols // 16
    return (torch.empty(rows, cols // 2, dtype=torch.uint8, device="cuda"),
            torch.empty((rows + 127) // 128 * 128, (nb + 3) // 4 * 4, dtype=torch.uint8, device="cuda"),
            torch.empty(1, dtype=torch.float32, device="cuda"))


def bench(fn, xs, warmup, iters):
    for i in range(warmup):
        fn(xs[i % len(xs)])
    torch.cuda.synchronize()
    ts = []
    for i in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn(xs[i % len(xs)])
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192, 16384])
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_mx_quant: needs a CUDA GPU", file=sys.stderr)
        return 2
    stream = lambda: torch.cuda.current_stream().cuda_stream  # noqa: E731
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    results = []
    print(f"# {torch.cuda.get_device_name()}, bf16 inputs, GB/s and ratio to copy")
    cases = [  # name, (row rounding, rule) or None, (col rounding, rule) or None, nvfp4 equivalent kwargs
        ("row rtn ocp", ("rtn", "ocp"), None, dict()),
        ("row rtn ceil", ("rtn", "ceil"), None, dict()),
        ("row+col rtn", ("rtn", "ocp"), ("rtn", "ocp"), dict(columnwise=True)),
        ("row+col sr", ("sr", "ceil"), ("sr", "ceil"), dict(columnwise=True, rounding="sr")),
        ("col sr", None, ("sr", "tetrajet"), dict(rowwise=False, columnwise=True, rounding="sr")),
    ]
    for n in args.sizes:
        rows = cols = n
        nbuf = max(2, 3 * l2 // (rows * cols * 2) + 1)
        xs = [torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16) for _ in range(nbuf)]
        dst = torch.empty_like(xs[0])
        t_copy = bench(lambda x: dst.copy_(x), xs, args.warmup, args.iters)
        copy_gbs = 2 * rows * cols * 2 / t_copy / 1e6
        print(f"{n}x{n}: copy {copy_gbs:.0f} GB/s")
        row_mx, col_mx = _alloc_mx(rows, cols), _alloc_mx(cols, (rows + 31) // 32 * 32)
        row_nv, col_nv = _alloc_nv(rows, cols), _alloc_nv(cols, (rows + 15) // 16 * 16)
        for name, r, c, nvkw in cases:
            def mx(x, r=r, c=c):
                _C.mx_quantize(x, *(row_mx if r else (None, None)), *(col_mx if c else (None, None)),
                               ROUND[(r or c)[0]], RULE[(r or c)[1]], ROUND[(c or r)[0]], RULE[(c or r)[1]], 1, 7, 0,
                               stream())

            def nv(x, kw=nvkw):
                row = row_nv if kw.get("rowwise", True) else (None, None, None)
                col = col_nv if kw.get("columnwise", False) else (None, None, None)
                _C.quantize(x, *row, *col, 0, ROUND[kw.get("rounding", "rtn")], 1, 0, _C.default_rht_sign_mask(),
                            7, 0, stream())

            out_mx = (sum(t.numel() for t in row_mx) if r else 0) + (sum(t.numel() for t in col_mx) if c else 0)
            out_nv = (sum(t.numel() * t.element_size() for t in row_nv) if nvkw.get("rowwise", True) else 0) + \
                (sum(t.numel() * t.element_size() for t in col_nv) if nvkw.get("columnwise", False) else 0)
            t_mx = bench(mx, xs, args.warmup, args.iters)
            t_nv = bench(nv, xs, args.warmup, args.iters)
            gbs_mx = (rows * cols * 2 + out_mx) / t_mx / 1e6
            gbs_nv = (rows * cols * 2 + out_nv) / t_nv / 1e6
            print(f"  {name:14s} mxfp4 {t_mx * 1e3:8.1f} us {gbs_mx:6.0f} GB/s {gbs_mx / copy_gbs:5.2f} of copy | "
                  f"nvfp4 {t_nv * 1e3:8.1f} us {gbs_nv:6.0f} GB/s {gbs_nv / copy_gbs:5.2f} of copy")
            results.append({"size": n, "case": name, "mx_us": t_mx * 1e3, "nv_us": t_nv * 1e3, "copy_gbs": copy_gbs,
                            "mx_ratio_to_copy": gbs_mx / copy_gbs, "nv_ratio_to_copy": gbs_nv / copy_gbs})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "results": results}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
