"""A small run of the grouped (MoE) kernels for compute-sanitizer:

    compute-sanitizer --tool memcheck python tests/cuda/sanitize_grouped.py

Grouped quantization (rowwise + columnwise, SR, RHT) and the Hopper grouped GEMM in both forms
(ragged M with BF16, FP16 and FP32 output; ragged K), with empty groups, groups of 1, 15, 16,
17 and 300 rows and rows of no group; then invalid offs (decreasing, past the end, negative),
which the kernels must clamp without touching memory outside the buffers. Each result compared
with the CPU reference (quantization bit for bit; GEMMs within the FP32 accumulation bound).
Exit status 0 when everything matched.
"""
from __future__ import annotations

import sys

import torch

import nvfp4


def close(got, want, a, b, k):
    bound = (a.abs() @ b.abs().t()) * k * 2.0 ** -22 + want.abs() * 2.0 ** -7 + 1e-30
    return bool(((got.double() - want).abs() <= bound).all())


def main() -> int:
    if not torch.cuda.is_available():
        print("sanitize_grouped: needs a CUDA GPU")
        return 1
    bad = runs = 0
    g = torch.Generator().manual_seed(0)
    sizes = [0, 1, 15, 16, 17, 300, 0]
    t, k, n = sum(sizes) + 9, 96, 80
    x = torch.randn(t, k, generator=g)
    dy = torch.randn(t, n, generator=g)
    w = torch.randn(len(sizes), n, k, generator=g)
    for offs_list in ([int(v) for v in torch.tensor(sizes).cumsum(0)], [5, 3, 40, 400, -2, 360, 361]):
        offs_c = torch.tensor(offs_list, dtype=torch.int32)
        offs = offs_c.cuda()
        valid = offs_list[0] != 5
        kw = dict(rowwise=True, columnwise=True, rounding="sr", rht="columnwise", seed=3)
        q = nvfp4.grouped_quantize(x.cuda(), offs, **kw)
        torch.cuda.synchronize()
        if valid:
            r = nvfp4.grouped_quantize(x, offs_c, **kw)
            for name in ("rowwise", "columnwise"):
                gd, rd = getattr(q, name), getattr(r, name)
                runs += 1
                if not (torch.equal(gd.data.cpu(), rd.data) and torch.equal(gd.scales.cpu().view(torch.uint8),
                                                                           rd.scales.view(torch.uint8))):
                    bad += 1
                    print(f"MISMATCH quantize {name}")
        elif q.offs_error.item() == 0:
            bad += 1
            print("MISMATCH: a bad offs was not reported")
        wq = nvfp4.batched_quantize(w.cuda(), columnwise=True)
        for dt in (torch.bfloat16, torch.float16, torch.float32):
            y = nvfp4.grouped_gemm(q, wq, out_dtype=dt).cpu()
            torch.cuda.synchronize()
            if not valid:
                continue
            s = 0
            for gi, m in enumerate(sizes):
                if m:
                    a = q.group(gi).dequantize(torch.float32).double().cpu()
                    b = wq.expert(gi).dequantize(torch.float32).double().cpu()
                    runs += 1
                    if not close(y[s:s + m], a @ b.t(), a, b, k):
                        bad += 1
                        print(f"MISMATCH ragged M group {gi} {dt}")
                s += m
        dq = nvfp4.grouped_quantize(dy.cuda(), offs, rowwise=False, columnwise=True, rht="columnwise")
        xq = nvfp4.grouped_quantize(x.cuda(), offs, rowwise=False, columnwise=True, rht="columnwise")
        dw = nvfp4.grouped_gemm(dq.T, xq.T, out_dtype=torch.float32).cpu()
        torch.cuda.synchronize()
        if valid:
            for gi, m in enumerate(sizes):
                runs += 1
                if m == 0:
                    if dw[gi].any():
                        bad += 1
                        print(f"MISMATCH: empty group {gi} not zero")
                    continue
                a = dq.group(gi, columnwise=True).T.dequantize(torch.float32, undo_rht=False).double().cpu()
                b = xq.group(gi, columnwise=True).T.dequantize(torch.float32, undo_rht=False).double().cpu()
                if not close(dw[gi], a @ b.t(), a, b, a.shape[1]):
                    bad += 1
                    print(f"MISMATCH ragged K group {gi}")
    print(f"sanitize_grouped: {runs} checks, {bad} mismatches")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
