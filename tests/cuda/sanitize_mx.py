"""A small run of every MXFP4 kernel variant, for compute-sanitizer:

    compute-sanitizer --tool memcheck  python tests/cuda/sanitize_mx.py
    compute-sanitizer --tool racecheck python tests/cuda/sanitize_mx.py

Covers the quantize kernel (rowwise only, columnwise only, both; RTN and SR in each
direction; the three scale rules; linear and swizzled scales) for bf16, fp16 and fp32 on odd
shapes, and dequantize (three output dtypes, two layouts), with the grid capped to 2 CTAs so
that every CTA loops over several tiles (the shared tile's reuse across tiles is what
racecheck must see). Every result is also compared with the CPU reference, so the script
doubles as a smoke test. Exit status 0 when everything matched.
"""
from __future__ import annotations

import itertools
import os
import sys

import torch

from nvfp4 import _C

DEV = torch.device("cuda")
POISON = 0xA5


def alloc(rows, cols, layout, device):
    nb = cols // 32
    shape = ((rows + 127) // 128 * 128, (nb + 3) // 4 * 4) if layout else (rows, nb)
    return (torch.full((rows, cols // 2), POISON, dtype=torch.uint8, device=device),
            torch.full(shape, POISON, dtype=torch.uint8, device=device))


def quantize(x, row, col, rr, rl, cr, cl, layout):
    rows, cols = x.shape
    r = alloc(rows, cols, layout, x.device) if row else (None, None)
    c = alloc(cols, (rows + 31) // 32 * 32, layout, x.device) if col else (None, None)
    stream = torch.cuda.current_stream().cuda_stream if x.is_cuda else 0
    _C.mx_quantize(x, *r, *c, rr, rl, cr, cl, layout, 1234, 5, stream)
    return r, c


def main() -> int:
    os.environ["NVFP4_QUANT_GRID_CAP"] = "2"
    g = torch.Generator().manual_seed(0)
    bad = 0
    shapes = [(33, 160), (129, 96), (7, 32)]
    for dtype, (rows, cols) in itertools.product([torch.bfloat16, torch.float16, torch.float32], shapes):
        x = (torch.randn(rows, cols, generator=g) * 4).to(dtype)
        for (row, col), rr, cr, rule, layout in itertools.product([(1, 0), (0, 1), (1, 1)], (0, 1), (0, 1), (0, 1, 2),
                                                                  (0, 1)):
            got = quantize(x.to(DEV), row, col, rr, rule, cr, (rule + 1) % 3, layout)
            torch.cuda.synchronize()
            want = quantize(x, row, col, rr, rule, cr, (rule + 1) % 3, layout)
            for gd, wd in zip(got, want):
                for a, b in zip(gd, wd):
                    if b is not None and not torch.equal(a.cpu(), b):
                        bad += 1
                        print(f"MISMATCH quantize {dtype} {rows}x{cols} dirs={(row, col)} sr={(rr, cr)} "
                              f"rule={rule} layout={layout}")
    for layout, out_dtype in itertools.product((0, 1), (torch.float32, torch.float16, torch.bfloat16)):
        rows, cols = 129, 96
        data = torch.randint(0, 256, (rows, cols // 2), generator=g, dtype=torch.uint8)
        nb = cols // 32
        shape = ((rows + 127) // 128 * 128, (nb + 3) // 4 * 4) if layout else (rows, nb)
        scales = torch.randint(100, 150, shape, generator=g, dtype=torch.uint8)
        want = torch.empty(rows, cols, dtype=out_dtype)
        _C.mx_dequantize(data, scales, layout, want, 0)
        got = torch.full((rows, cols), float("nan"), dtype=out_dtype, device=DEV)
        _C.mx_dequantize(data.to(DEV), scales.to(DEV), layout, got, torch.cuda.current_stream().cuda_stream)
        if not torch.equal(got.cpu(), want):
            bad += 1
            print(f"MISMATCH dequantize layout={layout} {out_dtype}")
    torch.cuda.synchronize()
    print("sanitize_mx:", "all matched" if bad == 0 else f"{bad} mismatches")
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
