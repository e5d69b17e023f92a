"""A small run of every kernel of the recipe-options path (src/quant/quantize_options.cu), for
compute-sanitizer, compared with the CPU reference (so also a smoke test):

    compute-sanitizer --tool memcheck  python tests/cuda/sanitize_options.py
    compute-sanitizer --tool racecheck python tests/cuda/sanitize_options.py

Covers: the row and column amax kernels, the amax copy, the MS-EDEN scale-max kernel, the 1D
kernel (4over6 MAE/MSE x bound 448/256, rows, given amax, SR with a given amax, MS-EDEN), the
2D kernel (4over6, given amax; both outputs and each alone), the amax finalize kernel, and a
given amax with no other option (the ordinary rowwise and tile kernels, RTN, SR with the
Hadamard transform, 2D); both scale layouts, bf16 and fp32, odd shapes. Exit status 0 when everything matched.
"""
from __future__ import annotations

import sys

import torch

from nvfp4 import _C
from nvfp4._options import percentile_amax

DEV = torch.device("cuda")
POISON = 0xA5


def run(x, layout, block, rounding, rht, select, bound, amax_mode, amax_in, outs):
    R, C = x.shape
    Rp = (R + 15) // 16 * 16

    def alloc(r, c, n):
        sc = c // 16
        shape = ((r + 127) // 128 * 128, (sc + 3) // 4 * 4) if layout == 1 else (r, sc)
        return (torch.full((r, c // 2), POISON, dtype=torch.uint8, device=x.device),
                torch.full(shape, POISON, dtype=torch.uint8, device=x.device),
                torch.full((n,), float("nan"), dtype=torch.float32, device=x.device))

    row = alloc(R, C, R if amax_mode == 1 else 1) if outs[0] else (None,) * 3
    col = alloc(C, Rp, C if amax_mode == 1 else 1) if outs[1] else (None,) * 3
    a = None if amax_in is None else amax_in.to(x.device)
    stream = torch.cuda.current_stream().cuda_stream if x.is_cuda else 0
    _C.quantize_options(x, *row, *col, block, rounding, layout, rht, 0x5A3C, 77, 5, select, bound, amax_mode, a,
                        stream)
    return row, col


def main() -> int:
    if not torch.cuda.is_available():
        print("sanitize_options: no CUDA device")
        return 1
    gen = torch.Generator().manual_seed(0)
    variants = []
    for outs in ((True, True), (True, False), (False, True)):
        for sel, bound in ((1, 448), (2, 256)):
            variants.append((0, 0, 0, sel, bound, 0, False, outs))   # 4over6 1D
            variants.append((1, 0, 0, sel, bound, 0, False, outs))   # 4over6 2D
            variants.append((0, 0, 0, sel, bound, 1, False, outs))   # 4over6, one amax per row
        variants.append((0, 0, 0, 0, 448, 1, False, outs))           # one amax per row
        variants.append((0, 1, 0, 0, 448, 2, True, outs))            # SR with a given amax
        variants.append((1, 0, 0, 1, 448, 2, True, outs))            # 2D 4over6 with a given amax
        rht = 3 if outs == (True, True) else (1 if outs[0] else 2)
        variants.append((0, 2, rht, 0, 448, 0, False, outs))         # MS-EDEN
        # a given amax and no other option: the ordinary rowwise / tile kernels with the
        # given value as their one partial (no amax pass)
        variants.append((0, 0, 0, 0, 448, 2, True, outs))            # RTN
        variants.append((0, 1, rht, 0, 448, 2, True, outs))          # SR with the Hadamard transform
        variants.append((1, 0, 0, 0, 448, 2, True, outs))            # 2D
    bad = runs = 0
    for dtype in (torch.bfloat16, torch.float32):
        for shape in ((130, 80), (17, 112)):
            x = (torch.randn(shape, generator=gen) * 4).to(dtype)
            given = percentile_amax(x, 0.99)
            for layout in (0, 1):
                for blk, rnd, rht, sel, bound, mode, use_given, outs in variants:
                    args = (layout, blk, rnd, rht, sel, bound, mode, given if use_given else None, outs)
                    g = run(x.to(DEV), *args)
                    w = run(x, *args)
                    torch.cuda.synchronize()
                    runs += 1
                    for gg, ww in zip(g, w):
                        if ww[0] is None:
                            continue
                        ok = torch.equal(gg[0].cpu(), ww[0]) and torch.equal(gg[1].cpu(), ww[1])
                        ga, wa = gg[2].cpu(), ww[2]
                        ok &= torch.equal(torch.isnan(ga), torch.isnan(wa)) and torch.equal(ga[~torch.isnan(ga)],
                                                                                              wa[~torch.isnan(wa)])
                        if not ok:
                            bad += 1
                            print(f"MISMATCH {dtype} {shape} layout={layout} variant={args[1:-2]} outs={outs}")
    print(f"sanitize_options: {runs} runs, {bad} mismatches")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
