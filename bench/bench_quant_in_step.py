#!/usr/bin/env python3
"""The recipe's quantizations timed as a training step runs them: right after the kernel that
wrote their input.

A quantization reads its input twice (the amax pass, then the quantize pass), and in a step the
input was written by the kernel just before. A GPU's L2 (50 MB on an H100/H200) then holds the
part of the tensor touched last, and which part each pass finds there depends on the direction
it walks: for the quantizations timed here (those with the Hadamard transform) the amax pass
walks the tensor from its end down (the end is what the producer wrote last), the quantize pass
from its start up (what the amax pass read last). bench_quant.py
rotates its inputs through buffers so that no call finds its input in L2; this one measures the
opposite case, the one a step has.

The FP8 baseline's casts (nvfp4.nn.fp8, E4M3, q and its transpose from one read) are timed the
same way: `fp8` (current scaling: an amax pass down from the end of x, then the cast up from its
start) and `fp8d` (delayed scaling: the cast alone, walking down from the end, with its amax
fused in and the scale read on the device; here its amax slot is cleared by a memset first,
where FP8Linear accumulates into its history slot with no memset).

For each shape [tokens, features] and operand (the recipe's quantizations as nvfp4.nn.Linear
runs them on the Hopper decoded road: X round-to-nearest, rowwise decoded values and columnwise
codes with the Hadamard transform; dY stochastic rounding, both orientations decoded, the
transform along columns), the sequence producer (an elementwise kernel writing the tensor,
y = x * c) then quantization is captured in a CUDA graph of --reps pairs and replayed, timed
with CUDA events, in --rounds rounds interleaved with the producer alone and a device copy of
the tensor (read + write, the bandwidth baseline); the figure is the median over rounds of the
time per pair less the producer's. Printed: µs per quantization and its ratio to the copy.
A before/after table comes from running it on two builds on one machine (.ci/device_run.sh base).

    python3 bench/bench_quant_in_step.py [--tokens 16384] [--features 768 2048 3072 8192]
                                         [--operands x,dy,fp8,fp8d] [--rounds 7] [--reps 8]
                                         [--json out.json]
It needs a CUDA GPU (without one it says so and exits with status 1).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys

import torch

import nvfp4
from nvfp4 import _ops
from nvfp4._format import swizzled_shape

KINDS = ("x", "dy", "fp8", "fp8d")
RTN, SR = 0, 1
RHT_COL = 2
SWIZZLED = 1


def _up(v: int, m: int) -> int:
    return (v + m - 1) // m * m


class Operand:
    """The buffers of one quantization of x [rows, cols] (the recipe's X or dY form) and its call."""

    def __init__(self, kind: str, x: torch.Tensor):
        self.kind, self.x = kind, x
        rows, cols = x.shape
        dev = x.device
        rp = _up(rows, 16)

        def codes(r, c):
            sr, sc = swizzled_shape(r, c // 16)
            return (torch.empty(r, c // 2, dtype=torch.uint8, device=dev),
                    torch.empty(sr, sc, dtype=torch.uint8, device=dev), torch.empty(1, device=dev))

        def dec(r, c):
            return (torch.empty(r, c, dtype=torch.bfloat16, device=dev), torch.empty(1, device=dev))

        self.row_v = dec(rows, cols)
        if kind == "x":
            self.rounding, self.row_q, self.col_q, self.col_v = RTN, None, codes(cols, rp), None
        else:
            self.rounding, self.row_q, self.col_q, self.col_v = SR, None, None, dec(cols, rp)
        self.ws = torch.zeros(_ops.QUANTIZE_WORKSPACE_BYTES, dtype=torch.uint8, device=dev)

    def __call__(self):
        x = self.x
        a3 = lambda g: tuple(t.data_ptr() for t in g) if g is not None else (0, 0, 0)  # noqa: E731
        a2 = lambda g: tuple(t.data_ptr() for t in g) if g is not None else (0, 0)  # noqa: E731
        st = torch.cuda.current_stream(x.device).cuda_stream
        _ops.quantize_dec_raw(x.data_ptr(), _ops.DTYPE_CODE[x.dtype], x.shape[0], x.shape[1],
                              *a3(self.row_q), *a2(self.row_v), *a3(self.col_q), *a2(self.col_v), 0, self.rounding,
                              SWIZZLED, RHT_COL, _ops.DEFAULT_RHT_SIGN_MASK, 1234, 0, 0, 1, x.device.index, st,
                              self.ws.data_ptr())


class Fp8Operand:
    """The FP8 baseline's cast of x [rows, cols] to E4M3, q and q^T, current (delayed=False) or
    delayed scaling (the scale given, max |x| written to an amax slot cleared first: one memset
    more than nvfp4.nn.fp8's delayed cast, which accumulates into its history slot)."""

    def __init__(self, x: torch.Tensor, delayed: bool):
        self.x, dev = x, x.device
        rows, cols = x.shape
        self.q = torch.empty(rows, cols, dtype=torch.float8_e4m3fn, device=dev)
        self.qt = torch.empty(cols, rows, dtype=torch.float8_e4m3fn, device=dev)
        # [scale, scale_inv, amax]; the scale of a delayed cast is a fixed 1.0 here
        self.f = torch.tensor([1.0, 0.0, 0.0], device=dev)
        self.delayed = delayed

    def __call__(self):
        x, f = self.x, self.f
        dev_type, di, st = _ops._device(x)
        base = f.data_ptr()
        _ops.fp8_cast_raw(x.data_ptr(), _ops.DTYPE_CODE[x.dtype], x.shape[0], x.shape[1], 0, 0.0,
                          base if self.delayed else 0, self.q.data_ptr(), self.qt.data_ptr(), True, True,
                          base + 4, base + 8, dev_type, di, st, False)


def capture(fn, reps: int) -> torch.cuda.CUDAGraph:
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()  # warm-up outside the graph (allocations, lazy loads)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            fn()
    torch.cuda.synchronize()
    return g


def replay_us(g: torch.cuda.CUDAGraph, reps: int, replays: int = 3) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    g.replay()
    start.record()
    for _ in range(replays):
        g.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / (replays * reps)


def run_shape(tokens: int, features: int, kind: str, rounds: int, reps: int) -> dict:
    dev = torch.device("cuda", torch.cuda.current_device())
    gen = torch.Generator(device="cpu").manual_seed(features * 7 + KINDS.index(kind))
    src = torch.randn(tokens, features, generator=gen).to(dev, torch.bfloat16)
    y = torch.empty_like(src)
    op = Fp8Operand(y, kind == "fp8d") if kind.startswith("fp8") else Operand(kind, y)

    def producer():
        torch.mul(src, 1.0009765625, out=y)

    def pair():
        producer()
        op()

    g_pair = capture(pair, reps)
    g_prod = capture(producer, reps)
    g_copy = capture(lambda: y.copy_(src), reps)
    pairs, prod, copy = [], [], []
    for _ in range(rounds):
        pairs.append(replay_us(g_pair, reps))
        prod.append(replay_us(g_prod, reps))
        copy.append(replay_us(g_copy, reps))
    p = statistics.median(prod)
    res = {"kind": kind, "tokens": tokens, "features": features, "mb": src.numel() * 2 / 1e6,
           "producer_us": p, "copy_us": statistics.median(copy), "quant_us": statistics.median(pairs) - p,
           "pair_spread_us": max(pairs) - min(pairs)}
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--features", type=int, nargs="+", default=[768, 2048, 3072, 8192])
    ap.add_argument("--operands", default="x,dy", help="comma-separated: x, dy, fp8, fp8d")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--reps", type=int, default=8, help="producer + quantization pairs per graph")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    kinds = [k for k in a.operands.split(",") if k]
    bad = [k for k in kinds if k not in KINDS]
    if bad or not kinds:
        ap.error(f"--operands: expected a comma-separated list of {', '.join(KINDS)}, got {a.operands!r}")
    if a.tokens <= 0 or any(f <= 0 or f % 64 for f in a.features):
        ap.error("--tokens must be positive and every --features a positive multiple of 64")
    if a.rounds < 1 or a.reps < 1:
        ap.error("--rounds and --reps must be at least 1")
    if not torch.cuda.is_available():
        print("bench_quant_in_step.py: needs a CUDA GPU (it times GPU kernels in the L2 state a step leaves)",
              file=sys.stderr)
        return 1
    print(f"{torch.cuda.get_device_name()}  nvfp4 {nvfp4.__version__}  tokens {a.tokens}")
    print(f"{'operand':8s} {'shape':>13s} {'MB':>6s} {'copy':>7s} {'producer':>8s} {'quantize':>8s} {'/copy':>6s} "
          f"{'spread':>6s}")
    results = []
    for kind in kinds:
        for f in a.features:
            r = run_shape(a.tokens, f, kind, a.rounds, a.reps)
            results.append(r)
            print(f"{kind:8s} {a.tokens:>6d}x{f:<6d} {r['mb']:6.1f} {r['copy_us']:7.1f} {r['producer_us']:8.1f} "
                  f"{r['quant_us']:8.1f} {r['quant_us'] / r['copy_us']:6.2f} {r['pair_spread_us']:6.1f}")
    print("(µs: quantize = producer + quantization less the producer alone, medians of the rounds; spread: max - min "
          "of the pairs' round times)")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"device": torch.cuda.get_device_name(), "results": results}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
