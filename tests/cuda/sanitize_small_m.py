"""A small run of the fused small-M Hopper GEMMs (runners sm90-small-m-stream and
sm90-small-m-ring), for compute-sanitizer:

    compute-sanitizer --tool memcheck  python tests/cuda/sanitize_small_m.py
    compute-sanitizer --tool racecheck python tests/cuda/sanitize_small_m.py

Shapes for the streaming kernel (M <= 32: one and several K splits over a cluster, N not a
multiple of its 128 rows, K not a multiple of 128), for the ring kernel (M up to 128, and
M <= 32 with NVFP4_SM90_SMALL_M_KERNEL=ring), both scale layouts, the three output dtypes,
bias and beta * C; each result compared with the CPU reference runner within the FP32
accumulation bound of tests/python/test_gemm_cuda.py. NVFP4_SM90_TRACE=1 prints each plan,
so the log shows which kernel, split and grid every case ran. Exit status 0 when everything
matched.
"""
from __future__ import annotations

import os
import sys

os.environ["NVFP4_SM90_TRACE"] = "1"

import torch  # noqa: E402

import nvfp4  # noqa: E402


def main() -> int:
    if not (torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)):
        print("sanitize_small_m: needs a Hopper GPU")
        return 1
    ulp = {torch.float32: 2.0 ** -24, torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}
    bad = runs = 0
    g = torch.Generator().manual_seed(0)
    cases = [  # (m, n, k, layout, NVFP4_SM90_SMALL_M_KERNEL)
        (1, 13, 32, "swizzled", ""), (7, 200, 96, "swizzled", ""), (16, 520, 1024, "swizzled", ""),
        (31, 136, 4160, "linear", ""), (24, 300, 256, "swizzled", "ring"), (33, 72, 96, "swizzled", ""),
        (100, 264, 512, "linear", ""), (128, 1000, 2048, "swizzled", ""),
    ]
    for (m, n, k, layout, kernel) in cases:
        os.environ["NVFP4_SM90_SMALL_M_KERNEL"] = kernel
        a = nvfp4.quantize(torch.randn(m, k, generator=g), scale_layout=layout)
        b = nvfp4.quantize(torch.randn(n, k, generator=g), scale_layout=layout)
        bias = torch.randn(n, generator=g)
        c = torch.randn(m, n, generator=g)
        da = a.dequantize(torch.float32).double().abs()
        db = b.dequantize(torch.float32).double().abs()
        for dt in (torch.float32, torch.bfloat16, torch.float16):
            want = c.to(dt).clone()
            nvfp4.gemm(a, b, backend="reference", bias=bias.to(dt), out=want, beta=0.5)
            s_ = da @ db.t()
            extra = bias.to(dt).double().abs() + 0.5 * c.to(dt).double().abs()
            tol = (k * 2.0 ** -23 * s_ + 2.0 ** -22 * (s_ + extra)) * (1 + ulp[dt]) + 2 * ulp[dt] * want.double().abs()
            got = c.to("cuda", dt).clone()
            nvfp4.gemm(a.to("cuda"), b.to("cuda"), backend="cutlass", bias=bias.to("cuda", dt), out=got, beta=0.5)
            err = (got.cpu().double() - want.double()).abs()
            ok = bool((err <= tol + 1e-37).all()) and not bool(torch.isnan(got).any())
            runs += 1
            if not ok:
                bad += 1
                print(f"MISMATCH {m}x{n}x{k} {layout} {kernel or 'planned'} {dt}: worst {err.max().item():.3g}")
    os.environ.pop("NVFP4_SM90_SMALL_M_KERNEL", None)
    torch.cuda.synchronize()
    print(f"sanitize_small_m: {runs} runs, {bad} mismatches")
    return 1 if bad or not runs else 0


if __name__ == "__main__":
    sys.exit(main())
