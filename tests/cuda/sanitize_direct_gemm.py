"""A small run of an FP4-reading Hopper GEMM (runner cutlass-sm90-direct, or with the argument
`rs` the runner sm90-fp4-rs: A decoded in registers, B as codes decoded into the workspace
first), for compute-sanitizer:

    compute-sanitizer --tool memcheck  python tests/cuda/sanitize_direct_gemm.py [rs]
    compute-sanitizer --tool racecheck python tests/cuda/sanitize_direct_gemm.py [rs]

Sets NVFP4_SM90_DIRECT=1 (or NVFP4_SM90_RS=1) and NVFP4_SM90_SMALL_M=0 before the library is
loaded, so that every shape below reaches that kernel. Odd shapes (M, N not multiples of the 128 x 256
tile, K a multiple of 32 but not of 64, one K tile, several), the three output dtypes, bias
and beta * C; each result compared with the CPU reference runner within the FP32
accumulation bound of tests/python/test_gemm_cuda.py. Exit status 0 when everything matched.
(That the runner is the one chosen under these settings is checked, with the profiler, by
tests/python/test_gemm_sm90_direct.py and test_gemm_sm90_rs.py; the profiler is not used here,
under the sanitizer.)
"""
from __future__ import annotations

import os
import sys

RUNNER = sys.argv[1] if len(sys.argv) > 1 else "direct"
if RUNNER not in ("direct", "rs"):
    sys.exit(f"sanitize_direct_gemm: the runner is 'direct' or 'rs', got {RUNNER!r}")
os.environ["NVFP4_SM90_DIRECT" if RUNNER == "direct" else "NVFP4_SM90_RS"] = "1"
os.environ["NVFP4_SM90_SMALL_M"] = "0"

import torch  # noqa: E402

import nvfp4  # noqa: E402


def main() -> int:
    if not (torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)):
        print("sanitize_direct_gemm: needs a Hopper GPU")
        return 1
    ulp = {torch.float32: 2.0 ** -24, torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}
    bad = runs = 0
    g = torch.Generator().manual_seed(0)
    for (m, n, k) in [(1, 13, 32), (33, 72, 96), (130, 264, 160), (257, 520, 512)]:
        a = nvfp4.quantize(torch.randn(m, k, generator=g))
        b = nvfp4.quantize(torch.randn(n, k, generator=g))
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
                print(f"MISMATCH {m}x{n}x{k} {dt}: worst {err.max().item():.3g}")
    torch.cuda.synchronize()
    print(f"sanitize_direct_gemm ({RUNNER}): {runs} runs, {bad} mismatches")
    return 1 if bad or not runs else 0


if __name__ == "__main__":
    sys.exit(main())
