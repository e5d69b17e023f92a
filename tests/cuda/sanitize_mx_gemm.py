"""A small run of the MXFP4 GEMM runners of this GPU, for compute-sanitizer:

    compute-sanitizer --tool memcheck python tests/cuda/sanitize_mx_gemm.py

Odd shapes (N not a multiple of 8: the fp32-workspace epilogue; M = 1; K not a multiple of
64), the three output dtypes, both scale layouts, bias and beta * C, on every CUDA backend
the GPU has; each result compared with the CPU reference runner (the bound of
tests/python/test_gemm_mx.py). Exit status 0 when everything matched.
"""
from __future__ import annotations

import sys

import torch

import nvfp4


def main() -> int:
    backends = [b for b in ("cutlass", "cudnn") if nvfp4.is_supported(b, torch.device("cuda"))]
    ulp = {torch.float32: 2.0 ** -24, torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}
    bad = runs = 0
    g = torch.Generator().manual_seed(0)
    for (m, n, k) in [(1, 8, 32), (33, 13, 96), (130, 72, 160)]:
        for layout in ("swizzled", "linear"):
            a = nvfp4.quantize_mxfp4(torch.randn(m, k, generator=g), scale_layout=layout)
            b = nvfp4.quantize_mxfp4(torch.randn(n, k, generator=g), scale_layout=layout)
            bias = torch.randn(n, generator=g)
            c = torch.randn(m, n, generator=g)
            for dt in (torch.float32, torch.bfloat16, torch.float16):
                want = c.to(dt).clone()
                nvfp4.gemm(a, b, backend="reference", bias=bias.to(dt), out=want, beta=0.5)
                mag = (a.dequantize(torch.float32).double().abs() @ b.dequantize(torch.float32).double().abs().t()
                       + bias.to(dt).double().abs() + 0.5 * c.to(dt).double().abs())
                for be in backends:
                    got = c.to("cuda", dt).clone()
                    nvfp4.gemm(a.to("cuda"), b.to("cuda"), backend=be, bias=bias.to("cuda", dt), out=got, beta=0.5)
                    err = (got.cpu().double() - want.double()).abs()
                    ok = bool((err <= 2.0 ** -19 * mag + 2 * ulp[dt] * want.double().abs()).all())
                    runs += 1
                    if not ok:
                        bad += 1
                        print(f"MISMATCH {be} {m}x{n}x{k} {layout} {dt}: worst {err.max().item():.3g}")
    torch.cuda.synchronize()
    print(f"sanitize_mx_gemm: {runs} runs on {backends}, {bad} mismatches")
    return 1 if bad or not runs else 0


if __name__ == "__main__":
    sys.exit(main())
