"""A small run of the gather-row kernels (the FSDP weight all-gather) for compute-sanitizer:

    compute-sanitizer --tool memcheck python tests/cuda/sanitize_gather.py
    compute-sanitizer --tool racecheck python tests/cuda/sanitize_gather.py

Every output is allocated at exactly its size (no slack a stray write could land in):
nvfp4_gather_rows_quantize on shards of 16 to 2064 rows, K with an odd number of scale
columns (rows of odd length) and with extra zero rows and bytes, fp32/bf16/fp16, a NaN and an
infinity; nvfp4_gather_rows_assemble into W and Wᵀ separately (their swizzled padding), with
code tiles cut at the edges (N and K not multiples of 64). Each result compared with the CPU
reference bit for bit. Exit status 0 when everything matched.
"""
from __future__ import annotations

import sys

import torch

from nvfp4 import _ops


def main() -> int:
    if not torch.cuda.is_available():
        print("sanitize_gather: needs a CUDA GPU")
        return 1
    bad = runs = 0
    g = torch.Generator().manual_seed(0)
    for n, k, rows_out, extra, dt in [(16, 16, 16, 0, torch.float32), (80, 1040, 96, 3, torch.bfloat16),
                                      (272, 160, 272, 0, torch.float16), (2064, 48, 2080, 5, torch.float32),
                                      (48, 4112, 48, 1, torch.bfloat16)]:
        w = torch.randn(n, k, generator=g)
        w[n // 2, 7] = float("nan") if n > 16 else 1.0
        w[0, k - 1] = float("inf") if k > 16 else 1.0
        w = w.to(dt)
        amax = torch.tensor([3.5])
        rb = k // 2 + k // 16 + extra
        want = torch.empty((rows_out, rb), dtype=torch.uint8)
        _ops.gather_rows_quantize(w, amax, want)
        got = torch.empty((rows_out, rb), dtype=torch.uint8, device="cuda")
        _ops.gather_rows_quantize(w.cuda(), amax.cuda(), got)
        runs += 1
        if not torch.equal(got.cpu(), want):
            bad += 1
            print(f"MISMATCH gather_rows_quantize [{n}, {k}] {dt}")
        for transpose in (False, True):
            # W alone, then W and Wᵀ, each in a buffer of exactly the bytes they need
            nb = _ops.packed_nbytes(n, k) + (_ops.packed_nbytes(k, n) if transpose else 0)
            ref = torch.zeros((nb,), dtype=torch.uint8)
            _ops.gather_rows_assemble(want, amax, n, k, ref, transpose)
            buf = torch.zeros((nb,), dtype=torch.uint8, device="cuda")
            _ops.gather_rows_assemble(got, amax.cuda(), n, k, buf, transpose)
            runs += 1
            if not torch.equal(buf.cpu(), ref):
                bad += 1
                print(f"MISMATCH gather_rows_assemble [{n}, {k}] transpose={transpose}")
    torch.cuda.synchronize()
    print(f"sanitize_gather: {runs} checks, {bad} mismatches")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
