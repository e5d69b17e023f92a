"""A small run of the decoded-operand paths, for compute-sanitizer:

    compute-sanitizer --tool memcheck python tests/cuda/sanitize_decoded.py

nvfp4_quantize_decoded on odd shapes (rows not a multiple of 16 or 128, one block of
columns, both scale layouts) through the rowwise kernel (rowwise output alone) and the tile
kernel (1D with and without the RHT, stochastic rounding, 2D), every combination of codes and
decoded values; nvfp4_gemm_decoded with A, B or both decoded, including the fp32 fallback
where a decoded B with N % 8 != 0 is copied into the workspace. Every decoded output is
checked against the CPU reference bit for bit (NaN as NaN) and every GEMM against the GEMM on
the codes. Exit status 0 when everything matched.
"""
from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

from test_decoded import SWIZZLED, LINEAR, _gemm, decoded_mismatches, quantize_decoded  # noqa: E402


def main() -> int:
    if not (torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9):
        print("sanitize_decoded: needs a Hopper GPU")
        return 1
    bad = runs = 0
    g = torch.Generator().manual_seed(0)
    shapes = [(1, 16), (15, 48), (129, 32), (300, 80)]
    configs = [(0, 0, 0), (0, 1, 2), (0, 0, 3), (1, 0, 0)]
    combos = [(False, True, False, False), (True, True, False, False), (False, True, False, True),
              (True, False, True, True), (False, False, False, True)]
    for rows, cols in shapes:
        x = (torch.randn(rows, cols, generator=g) * 4).to(torch.bfloat16)
        for block, rounding, rht in configs:
            for outs in combos:
                for layout in (SWIZZLED, LINEAR):
                    cpu = quantize_decoded(x, *outs, block, rounding, layout, rht, seed=3, offset=1)
                    gpu = quantize_decoded(x.cuda(), *outs, block, rounding, layout, rht, seed=3, offset=1)
                    torch.cuda.synchronize()
                    diff = decoded_mismatches(gpu, cpu)
                    runs += 1
                    if diff:
                        bad += 1
                        print(f"MISMATCH quantize {rows}x{cols} cfg {(block, rounding, rht)} outs {outs} "
                              f"layout {layout}: {', '.join(diff)}")
    for m, n, k, dt in [(130, 83, 64, torch.float32), (256, 264, 128, torch.bfloat16), (200, 77, 96, torch.bfloat16)]:
        a = torch.randn(m, k, generator=g).to(torch.bfloat16).cuda()
        b = torch.randn(n, k, generator=g).to(torch.bfloat16).cuda()
        ra, _ = quantize_decoded(a, True, True, rounding=1, seed=5)
        rb, _ = quantize_decoded(b, True, True, block=1)
        want = _gemm(ra, rb, m, n, k, dt)
        for a_dec, b_dec in ((True, False), (False, True), (True, True)):
            got = _gemm(ra, rb, m, n, k, dt, None, a_dec, b_dec)
            runs += 1
            if not torch.equal(got.view(torch.uint8), want.view(torch.uint8)):
                bad += 1
                print(f"MISMATCH gemm {m}x{n}x{k} {dt} a_dec={a_dec} b_dec={b_dec}")
    print(f"sanitize_decoded: {runs} checks, {bad} mismatches")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
