"""A small run of every CUDA quantization kernel variant, for compute-sanitizer:

    compute-sanitizer --tool memcheck  python tests/cuda/sanitize_quant.py
    compute-sanitizer --tool racecheck python tests/cuda/sanitize_quant.py
    compute-sanitizer --tool synccheck python tests/cuda/sanitize_quant.py   (optional)
    (add --full for every dtype x variant x shape, uncapped too: several times longer)

Covers: both amax kernels (flat, RHT along rows, RHT along columns; atomics into the amax
outputs, and partials in a workspace, reduced by the quantize kernel), the rowwise kernel
(RTN/SR x RHT x layouts), every instantiation of the tile kernel (1D both/columnwise-only
with every RHT choice, 2D rowwise/columnwise/both), dequantize (3 output dtypes x 2
layouts), swizzle and unswizzle; each for bf16 (every variant, two shapes: rows not a
multiple of 16 or 128, columns not a multiple of 64) and fp32/fp16 (one of each family),
on odd shapes, with the grid
capped to 2 CTAs so that every CTA loops over several tiles (shared-memory reuse across
tiles is what racecheck must see). Results are also compared with the CPU reference, so the
script doubles as a smoke test. Exit status 0 when everything matched.
"""
from __future__ import annotations

import os
import sys

import torch

from nvfp4 import _C

DEV = torch.device("cuda")
POISON = 0xA5


def alloc(rows, cols, layout, device):
    sc = cols // 16
    shape = ((rows + 127) // 128 * 128, (sc + 3) // 4 * 4) if layout == 1 else (rows, sc)
    return (torch.full((rows, cols // 2), POISON, dtype=torch.uint8, device=device),
            torch.full(shape, POISON, dtype=torch.uint8, device=device),
            torch.full((1,), float("nan"), dtype=torch.float32, device=device))


def quantize(x, block, rounding, layout, rht, row, col, ws=False):
    """ws: with a quantization workspace (poisoned 0xFF): the amax pass's partials."""
    rows, cols = x.shape
    r = alloc(rows, cols, layout, x.device) if row else (None, None, None)
    c = alloc(cols, (rows + 15) // 16 * 16, layout, x.device) if col else (None, None, None)
    stream = torch.cuda.current_stream().cuda_stream if x.is_cuda else 0
    w = torch.full((_C.quantize_workspace_bytes,), 0xFF, dtype=torch.uint8, device=x.device) if ws else None
    _C.quantize(x, *r, *c, block, rounding, layout, rht, _C.default_rht_sign_mask(), 99, 3, stream, w)
    return r, c


def same(g, w):
    for a, b in zip(g[:2], w[:2]):
        if not torch.equal(a.cpu(), b):
            return False
    ga, wa = g[2].cpu(), w[2]
    return bool(torch.isnan(wa).item() and torch.isnan(ga).item()) or torch.equal(ga.view(torch.int32), wa.view(torch.int32))


def variants_all():
    out = []
    for rnd in (0, 1):
        for layout in (0, 1):
            for rht in (0, 1):
                out.append((0, rnd, layout, rht, True, False))   # rowwise kernel
            for rht in (0, 1, 2, 3):
                out.append((0, rnd, layout, rht, True, True))    # tile kernel, both outputs
                out.append((0, rnd, layout, rht, False, True))   # tile kernel, columnwise only
            for row, col in ((True, False), (True, True), (False, True)):
                out.append((1, rnd, layout, 0, row, col))        # 2D
    return out


# one of each kernel instantiation family, for the dtypes other than bf16
VARIANTS_SHORT = [(0, 0, 1, 0, True, False), (0, 1, 0, 1, True, False), (0, 0, 1, 3, True, True),
                  (0, 1, 0, 2, False, True), (0, 1, 1, 2, True, True), (1, 1, 1, 0, True, True),
                  (1, 0, 0, 0, True, False), (1, 1, 0, 0, False, True)]


def main() -> int:
    if not torch.cuda.is_available():
        print("sanitize_quant: no CUDA device")
        return 1
    full = "--full" in sys.argv
    gen = torch.Generator().manual_seed(0)
    bad = 0
    runs = 0
    # Capped to 2 CTAs: every CTA walks several tiles, so shared-memory reuse across tiles
    # is exercised (--full also runs the uncapped grid and every dtype/variant pair).
    caps = [None, "2"] if full else ["2"]
    for cap in caps:
        if cap:
            os.environ["NVFP4_QUANT_GRID_CAP"] = cap
        else:
            os.environ.pop("NVFP4_QUANT_GRID_CAP", None)
        for dtype in (torch.bfloat16, torch.float32, torch.float16):
            if full:
                shapes, variants = [(130, 80), (7, 48), (33, 144)], variants_all()
            elif dtype == torch.bfloat16:
                shapes, variants = [(130, 80), (17, 112)], variants_all()
            else:
                shapes, variants = [(33, 144)], VARIANTS_SHORT
            for shape in shapes:
                x = (torch.randn(shape, generator=gen) * 4).to(dtype)
                xg = x.to(DEV)
                for v in variants:
                    w = quantize(x, *v)
                    # bf16: without and with a workspace (memsets + atomics, or partials)
                    for ws in ((False, True) if dtype == torch.bfloat16 else (True,)):
                        g = quantize(xg, *v, ws=ws)
                        torch.cuda.synchronize()
                        runs += 1
                        for gg, ww in zip(g, w):
                            if ww[0] is not None and not same(gg, ww):
                                bad += 1
                                print(f"MISMATCH {dtype} {shape} variant={v} cap={cap} workspace={ws}")
        # dequantize and swizzle
        for layout in (0, 1):
            rows, cols = 130, 96
            data = torch.randint(0, 256, (rows, cols // 2), generator=gen, dtype=torch.uint8)
            sc = cols // 16
            sshape = ((rows + 127) // 128 * 128, (sc + 3) // 4 * 4) if layout == 1 else (rows, sc)
            scales = torch.randint(0, 126, sshape, generator=gen, dtype=torch.uint8)
            amax = torch.tensor([100.0])
            for odt in (torch.float32, torch.float16, torch.bfloat16):
                want = torch.empty((rows, cols), dtype=odt)
                _C.dequantize(data, scales, amax, layout, want, 0)
                got = torch.empty((rows, cols), dtype=odt, device=DEV)
                _C.dequantize(data.to(DEV), scales.to(DEV), amax.to(DEV), layout, got,
                              torch.cuda.current_stream().cuda_stream)
                runs += 1
                if not torch.equal(got.cpu(), want):
                    bad += 1
                    print(f"MISMATCH dequantize {odt} layout={layout} cap={cap}")
        for r, c in ((130, 7), (5, 4), (256, 33)):
            lin = torch.randint(0, 256, (r, c), generator=gen, dtype=torch.uint8)
            want = torch.empty(((r + 127) // 128 * 128, (c + 3) // 4 * 4), dtype=torch.uint8)
            _C.swizzle(lin, want, True, 0)
            got = torch.full(want.shape, POISON, dtype=torch.uint8, device=DEV)
            s = torch.cuda.current_stream().cuda_stream
            _C.swizzle(lin.to(DEV), got, True, s)
            back = torch.full((r, c), POISON, dtype=torch.uint8, device=DEV)
            _C.swizzle(got, back, False, s)
            runs += 1
            if not (torch.equal(got.cpu(), want) and torch.equal(back.cpu(), lin)):
                bad += 1
                print(f"MISMATCH swizzle {r}x{c} cap={cap}")
    torch.cuda.synchronize()
    print(f"sanitize_quant: {runs} runs, {bad} mismatches")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
