#!/usr/bin/env python3
"""The workloads whose kernels `.ci/device_run.sh ncu` hands to Nsight Compute: the recipe's
quantizations of a BF16 8192x8192 tensor (the amax pass and the quantize pass of each),
then an 8192^3 CUTLASS GEMM (the FP4 -> BF16 decode, then the BF16 GEMM) and the same
GEMM with NVFP4_SM90_DIRECT=1 (the FP4-reading kernel, where the build has it). Nsight Compute
replays each kernel it profiles, so one call of each (--repeat 1) is enough there; more
calls serve timing by other means. Prints what ran, in order, so that the kernels of the
report can be matched to it. Needs a CUDA GPU.

    ncu --clock-control none --kernel-name regex:... python3 bench/ncu_kernels.py --repeat 1
"""
from __future__ import annotations

import argparse
import os

import torch

import nvfp4

# name, quantize keyword arguments: the operands of the training recipe
QUANTS = [
    ("x: 1d rtn row+col", dict(columnwise=True)),
    ("dy: 1d sr row+col, rht(col)", dict(columnwise=True, rounding="sr", rht="columnwise", seed=1)),
    ("w: 2d rtn row+col", dict(columnwise=True, block="2d")),
    ("1d sr rowwise", dict(rounding="sr", seed=1)),
]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=8192, help="rows = cols of x, and M = N = K of the GEMM")
    ap.add_argument("--repeat", type=int, default=1, help="calls of each workload")
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("ncu_kernels.py: needs a CUDA GPU")
    n = a.size
    x = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for name, kw in QUANTS:
        for _ in range(a.repeat):
            nvfp4.quantize(x, **kw)
        torch.cuda.synchronize()
        print(f"quantize {name}: {a.repeat} calls (2 kernels each: amax, quantize)")
    qa = nvfp4.quantize(x)
    qb = nvfp4.quantize(torch.randn(n, n, device="cuda", dtype=torch.bfloat16))
    for _ in range(a.repeat):
        nvfp4.gemm(qa, qb, backend="cutlass")
    torch.cuda.synchronize()
    print(f"gemm cutlass {n}^3: {a.repeat} calls")
    os.environ["NVFP4_SM90_DIRECT"] = "1"  # the FP4-reading kernel, where the build has it
    try:
        for _ in range(a.repeat):
            nvfp4.gemm(qa, qb, backend="cutlass")
        torch.cuda.synchronize()
        print(f"gemm cutlass {n}^3 with NVFP4_SM90_DIRECT=1: {a.repeat} calls")
    finally:
        del os.environ["NVFP4_SM90_DIRECT"]
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
