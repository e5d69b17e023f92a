"""Throughput of the CUDA quantization kernels, against a device-to-device copy and a
plain-PyTorch quantizer, all measured in the same run.

What is counted (bytes, per call):
  quantize: the amax pass reads x once and the quantize pass reads it again, so
            2 * |x| + every output byte (codes, E4M3 scales incl. swizzle padding,
            4-byte amax) for each requested direction. "1-pass GB/s" counts x once, the
            traffic an ideal single-pass kernel would need; both are printed. (With the RHT
            along both rows and columns the implementation reads x three times; the count
            stays 2 * |x|, so that row understates its traffic.) The amax and quantize
            passes walk x in opposite directions, so part of the second read is served
            by L2 (up to its ~50 MB); the count does not discount that.
  dequantize: codes + scales read, output written.
  swizzle:  linear scales read, swizzled scales written.
  copy:     2 * |x| (read + write) of a torch copy_ of the same bf16 tensor.
Timing: nvfp4._timing.Timer (the timer of every nvfp4 benchmark): warm-up, then the
median of --iters samples of back-to-back calls; on a GPU, CUDA events with the inputs
rotated through enough buffers to exceed the L2 three times over (so no call starts with
its input cached by the previous one). Output buffers are allocated once. Without a GPU
(or with --device cpu) the same runs on the CPU reference with torch.utils.benchmark, on
small sizes; those figures say nothing about GPU throughput.

  python bench/bench_quant.py [--quick] [--json out.json] [--sizes 4096 8192 16384] [--device cpu]
A before/after table times a build of the earlier commit right after this one, on the same
machine (.ci/device_run.sh base quant).
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys

import torch

import nvfp4
from nvfp4 import _C
from nvfp4._timing import Timer

FLT_MAX = torch.finfo(torch.float32).max


# ----------------------------------------------------------------------------- baselines
def torch_fake_quant_rowwise(x: torch.Tensor, sr: bool = False, rht: torch.Tensor | None = None):
    """NVFP4 1D quantization along the last dim in plain torch ops, in the contract's fp32
    order: returns (packed codes uint8, E4M3 scales, amax). RTN is bit-exact with nvfp4
    (checked below); SR draws from torch's RNG instead of Philox (same work, other bits)."""
    v = x.float().reshape(-1, 16)
    if rht is not None:
        v = v @ rht
    amax = v.abs().amax()
    # an FP32 tensor numerator: `python_float / tensor` is evaluated as a reciprocal times
    # the float (2688 / 14 gave 192.00002, not 192)
    s_enc = torch.clamp(torch.tensor(448.0 * 6.0, device=v.device) / amax, max=FLT_MAX)
    s_enc = torch.where(s_enc == 0, torch.ones_like(s_enc), s_enc)
    s_dec = 1.0 / s_enc
    bamax = v.abs().amax(dim=1)
    sb = torch.clamp(torch.clamp(bamax * (s_enc * (1.0 / 6.0)), max=FLT_MAX), -448.0, 448.0).to(torch.float8_e4m3fn)
    e = torch.clamp(1.0 / (sb.float() * s_dec), max=FLT_MAX)
    y = torch.clamp(v * e[:, None], -6.0, 6.0)
    a = y.abs()
    if not sr:
        code = ((a > 0.25).to(torch.uint8) + (a >= 0.75) + (a > 1.25) + (a >= 1.75) + (a > 2.5) + (a >= 3.5) + (a > 5.0))
    else:
        grid = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], device=x.device)
        lo = torch.clamp(torch.searchsorted(grid, a, right=True) - 1, 0, 7)
        hi = torch.clamp(lo + 1, max=7)
        gap = torch.where(hi > lo, grid[hi] - grid[lo], torch.ones_like(a))
        up = torch.rand_like(a) < (a - grid[lo]) / gap
        code = torch.where(up & (hi > lo), hi, lo).to(torch.uint8)
    code = code | (torch.signbit(y).to(torch.uint8) << 3)
    packed = code[:, 0::2] | (code[:, 1::2] << 4)
    return packed.reshape(x.shape[0], -1), sb.view(torch.uint8).reshape(x.shape[0], -1), amax


def torch_fake_quant_wgrad(x: torch.Tensor, rht: torch.Tensor):
    """Rowwise SR + columnwise SR with RHT (the wgrad operand), in torch ops."""
    row = torch_fake_quant_rowwise(x, sr=True)
    col = torch_fake_quant_rowwise(x.t().contiguous(), sr=True, rht=rht)
    return row, col


# ----------------------------------------------------------------------------- timing
def time_calls(timer: Timer, fn, n_inputs: int) -> float:
    """Median microseconds of fn(i), i cycling through n_inputs buffers."""
    return timer.time(fn, n_inputs).median_us


def out_bytes(rows: int, cols: int, layout: str) -> int:
    sc = cols // 16
    s = ((rows + 127) // 128 * 128) * ((sc + 3) // 4 * 4) if layout == "swizzled" else rows * sc
    return rows * cols // 2 + s + 4


def alloc(rows, cols, layout, dev):
    sc = cols // 16
    d = torch.empty((rows, cols // 2), dtype=torch.uint8, device=dev)
    shape = ((rows + 127) // 128 * 128, (sc + 3) // 4 * 4) if layout == "swizzled" else (rows, sc)
    return d, torch.empty(shape, dtype=torch.uint8, device=dev), torch.empty((1,), dtype=torch.float32, device=dev)


CONFIGS = [
    # name, block, rounding, rht, rowwise, columnwise, layout
    ("1d rtn rowwise", "1d", "rtn", 0, True, False, "swizzled"),
    ("1d sr rowwise", "1d", "sr", 0, True, False, "swizzled"),
    ("1d rtn row+col", "1d", "rtn", 0, True, True, "swizzled"),
    ("1d sr row+col", "1d", "sr", 0, True, True, "swizzled"),
    ("1d sr row+col rht(col)", "1d", "sr", 2, True, True, "swizzled"),
    ("1d sr row+col rht(both)", "1d", "sr", 3, True, True, "swizzled"),
    ("2d rtn row+col", "2d", "rtn", 0, True, True, "swizzled"),
    ("1d rtn rowwise linear", "1d", "rtn", 0, True, False, "linear"),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=None,
                    help="square bf16 sizes (default 4096 8192 12288 16384; CPU: 256 512)")
    ap.add_argument("--quick", action="store_true", help="two sizes (CPU: one), fewer iterations")
    ap.add_argument("--iters", type=int, default=None, help="samples per kernel, median reported")
    ap.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    ap.add_argument("--json", type=str, default=None, help="write results here")
    ap.add_argument("--no-baseline", action="store_true", help="skip the plain-PyTorch quantizer")
    args = ap.parse_args()
    gpu = torch.cuda.is_available() and bool(nvfp4.device_info()["build_cuda_archs"])
    if args.device == "cuda" and not gpu:
        print("bench_quant: --device cuda, but no CUDA device (or a CPU-only nvfp4 build)", file=sys.stderr)
        return 1
    gpu = gpu and args.device != "cpu"
    if gpu:
        sizes = args.sizes or ([4096, 8192] if args.quick else [4096, 8192, 12288, 16384])
        iters = args.iters or (10 if args.quick else 30)
        warmup = 3 if args.quick else 5
        dev = torch.device("cuda")
    else:
        sizes = args.sizes or ([256] if args.quick else [256, 512])
        iters = args.iters or (3 if args.quick else 5)
        warmup = 1
        dev = torch.device("cpu")
        print("bench_quant: timing the CPU reference (no GPU, or --device cpu); these figures say nothing about "
              "GPU throughput.")
    timer = Timer(dev, iters=iters, warmup=warmup, min_sample_us=200.0, l2_factor=3.0)
    stream = torch.cuda.current_stream().cuda_stream if gpu else 0
    if gpu:
        props = torch.cuda.get_device_properties(0)
        dev_name, sms, l2 = props.name, props.multi_processor_count, timer.l2_bytes
    else:
        dev_name, sms, l2 = "cpu", 0, 0
    rht = nvfp4.rht_matrix(_C.default_rht_sign_mask(), torch.float32, dev)

    # The baseline's RTN path is the same math: check it once on a small tensor.
    xs = torch.randn(512, 1024, device=dev, dtype=torch.bfloat16) * 3
    p, s, _ = torch_fake_quant_rowwise(xs)
    q = nvfp4.quantize(xs, scale_layout="linear")
    baseline_exact = bool(torch.equal(p, q.data) and torch.equal(s, q.scales.view(torch.uint8)))

    results = []
    print(f"device: {dev_name} ({sms} SMs, L2 {l2 >> 20} MiB), "
          f"torch {torch.__version__}, nvfp4 {nvfp4.__version__}, {datetime.datetime.now().isoformat(timespec='seconds')}")
    print(f"plain-PyTorch RTN baseline bit-exact with nvfp4: {baseline_exact}")
    hdr = f"{'kernel':28s} {'shape':>13s} {'us':>9s} {'GB/s':>8s} {'x copy':>7s} {'1-pass GB/s':>11s} {'torch us':>10s} {'speedup':>8s}"
    print(hdr)
    print("-" * len(hdr))
    for n in sizes:
        rows = cols = n
        xbytes = rows * cols * 2
        n_in = timer.sets(xbytes)
        xs = [torch.randn(rows, cols, device=dev, dtype=torch.bfloat16) for _ in range(n_in)]
        # copy reference
        dst = torch.empty_like(xs[0])
        t_copy = time_calls(timer, lambda i: dst.copy_(xs[i]), n_in)
        copy_gbps = 2 * xbytes / t_copy / 1e3
        results.append(dict(kernel="copy (torch copy_)", rows=rows, cols=cols, us=t_copy, bytes=2 * xbytes, gbps=copy_gbps,
                            ratio_to_copy=1.0))
        print(f"{'copy (torch copy_)':28s} {f'{rows}x{cols}':>13s} {t_copy:9.1f} {copy_gbps:8.0f} {1.0:7.2f}")
        for name, block, rounding, rht_mask, rw, cw, layout in CONFIGS:
            outs = []
            for _ in range(n_in):
                r = alloc(rows, cols, layout, dev) if rw else (None, None, None)
                c = alloc(cols, (rows + 15) // 16 * 16, layout, dev) if cw else (None, None, None)
                outs.append((r, c))

            def call(i, outs=outs, block=block, rounding=rounding, rht_mask=rht_mask, layout=layout):
                r, c = outs[i]
                _C.quantize(xs[i], *r, *c, nvfp4._format.BLOCKS[block], nvfp4._format.ROUNDINGS[rounding],
                            nvfp4._format.SCALE_LAYOUTS[layout], rht_mask, _C.default_rht_sign_mask(), 1234, 0, stream)

            t = time_calls(timer, call, n_in)
            wbytes = (out_bytes(rows, cols, layout) if rw else 0) + (out_bytes(cols, (rows + 15) // 16 * 16, layout) if cw else 0)
            two_pass = 2 * xbytes + wbytes
            gbps = two_pass / t / 1e3
            one_pass = (xbytes + wbytes) / t / 1e3
            # How often the implementation actually reads x: once per amax kernel, once to quantize
            # (RHT along rows and along columns takes two amax kernels).
            x_reads = 3 if rht_mask == 3 else 2
            entry = dict(kernel=name, rows=rows, cols=cols, us=t, bytes=two_pass, gbps=gbps,
                         ratio_to_copy=gbps / copy_gbps, one_pass_gbps=one_pass, x_reads_by_implementation=x_reads)
            tb = ""
            if not args.no_baseline and name in ("1d rtn rowwise", "1d sr row+col rht(col)") and n <= 16384:
                base = Timer(dev, iters=max(3, iters // 5), warmup=1, min_sample_us=0.0, l2_factor=3.0)
                if name == "1d rtn rowwise":
                    tt = time_calls(base, lambda i: torch_fake_quant_rowwise(xs[i]), n_in)
                else:
                    tt = time_calls(base, lambda i: torch_fake_quant_wgrad(xs[i], rht), n_in)
                entry.update(torch_us=tt, speedup_vs_torch=tt / t)
                tb = f"{tt:10.1f} {tt / t:7.1f}x"
            results.append(entry)
            print(f"{name:28s} {f'{rows}x{cols}':>13s} {t:9.1f} {gbps:8.0f} {gbps / copy_gbps:7.2f} {one_pass:11.0f} {tb}")
        # dequantize (bf16 out) and swizzle, from one quantized tensor
        q = [nvfp4.quantize(xs[i], scale_layout="swizzled") for i in range(min(n_in, 4))]
        outd = [torch.empty(rows, cols, device=dev, dtype=torch.bfloat16) for _ in q]
        t = time_calls(timer, lambda i: _C.dequantize(q[i].data, q[i].scales.view(torch.uint8), q[i].amax, 1,
                                                       outd[i], stream), len(q))
        b = out_bytes(rows, cols, "swizzled") + xbytes
        results.append(dict(kernel="dequantize -> bf16", rows=rows, cols=cols, us=t, bytes=b, gbps=b / t / 1e3,
                            ratio_to_copy=b / t / 1e3 / copy_gbps))
        print(f"{'dequantize -> bf16':28s} {f'{rows}x{cols}':>13s} {t:9.1f} {b / t / 1e3:8.0f} {b / t / 1e3 / copy_gbps:7.2f}")
        lin = [torch.randint(0, 256, (rows, cols // 16), device=dev, dtype=torch.uint8) for _ in range(4)]
        swz = [torch.empty(((rows + 127) // 128 * 128, (cols // 16 + 3) // 4 * 4), device=dev, dtype=torch.uint8) for _ in lin]
        t = time_calls(timer, lambda i: _C.swizzle(lin[i], swz[i], True, stream), 4)
        b = lin[0].numel() + swz[0].numel()
        results.append(dict(kernel="swizzle scales", rows=rows, cols=cols // 16, us=t, bytes=b, gbps=b / t / 1e3,
                            ratio_to_copy=b / t / 1e3 / copy_gbps))
        print(f"{'swizzle scales':28s} {f'{rows}x{cols // 16}':>13s} {t:9.1f} {b / t / 1e3:8.0f} {b / t / 1e3 / copy_gbps:7.2f}")
        xs = q = outd = lin = swz = dst = None  # free this size's buffers before the next
        if gpu:
            torch.cuda.empty_cache()

    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=dev_name, sms=sms, l2_bytes=l2,
                           date=datetime.datetime.now().isoformat(timespec="seconds"), torch=torch.__version__,
                           nvfp4=nvfp4.__version__, baseline_rtn_bit_exact=baseline_exact, iters=iters,
                           results=results), f, indent=2)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
