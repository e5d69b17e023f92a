#!/usr/bin/env python3
"""The GPU work one rank does per FSDP2 unit (a transformer block's four Linear weights) and
gather, measured in the same run for three ways of getting the unsharded NVFP4 weight:

  fp4     the FP4 all-gather of this version: one foreach amax of the unit's shards, then per
          weight one kernel that quantizes the shard into the gather rows and one that writes
          W (forward) or W and Wᵀ (backward) from the gathered rows; the backward gather moves
          the forward's rows again, so its only work is the second kernel;
  fp4_0.3 the FP4 all-gather of 0.3, kept here as the baseline: per weight abs().amax(), the
          batched flags, the shard copied beside a one-tile amax pad, quantized, its scales
          unswizzled and copied into the rows; after the gather the codes copied, the scales
          swizzled, Wᵀ built by ~10 torch ops of nibble arithmetic and transposing copies and
          its scales by a repeat and a swizzle; the backward gather did all of it again;
  bf16    the ordinary gather under a BF16 param_dtype: the FP32 shard cast to BF16 (FSDP2's
          copy-in), and in the Linear's forward the whole BF16 weight quantized (both
          orientations, 2D, one pass with its amax pass); in backward the cast only.

Each also pays FSDP2's copies of what is gathered (the all-gather input into the flat buffer,
the output back out), timed as device copies of those byte counts: 0.5625 bytes an element
for FP4, 2 for BF16. The collective itself is not included (one process). Shards are the
rows [0, N / world) of each weight; the all-gather output is stood in for by a buffer of the
full size. Timing: nvfp4._timing.Timer (CUDA events, inputs rotated past the L2). Without a
GPU it runs on the CPU reference at the --smoke size (the figures then say nothing about a
GPU).

    python3 bench/bench_fsdp_gather.py [--d-model 2048] [--worlds 1 2 4 8] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import torch

import nvfp4
import nvfp4.distributed as nd
from nvfp4 import _ops
from nvfp4._timing import Timer
from nvfp4.nn import _passes

TILE = 16


# ------------------------------------------------------------------------------ the 0.3 path (baseline)
def _v03_amaxes(shards):
    dev = shards[0].device
    amaxes = [t.detach().abs().amax().float().reshape(1) for t in shards]
    a = torch.cat(amaxes).to(torch.float64)
    nan = torch.isnan(a)
    head = torch.zeros((3,), dtype=torch.float64, device=dev)
    vec = torch.cat([torch.where(nan, torch.zeros_like(a), a), nan.to(torch.float64), head])
    a_max, nan_any = vec[:len(shards)], vec[len(shards):2 * len(shards)] > 0
    bad = (vec[2 * len(shards)] > 0) | (vec[2 * len(shards) + 1] != -vec[2 * len(shards) + 2])
    out = torch.where(nan_any | bad, torch.full_like(a_max, float("nan")), a_max).to(torch.float32)
    return [out[i:i + 1] for i in range(len(shards))]


def _v03_nibble_transpose(codes, out):
    n, kh = codes.shape
    d = codes.view(n // 2, 2, kh)
    lo, hi = d[:, 0, :], d[:, 1, :]
    o = out.view(kh, 2, n // 2)
    if kh % 4 == 0 and codes.stride(0) % 4 == 0 and codes.storage_offset() % 4 == 0:
        lo32, hi32 = lo.view(torch.int32), hi.view(torch.int32)
        even = (lo32 & 0x0F0F0F0F) | ((hi32 & 0x0F0F0F0F) << 4)
        odd = ((lo32 >> 4) & 0x0F0F0F0F) | (hi32 & -0x0F0F0F10)
        even, odd = even.view(torch.uint8), odd.view(torch.uint8)
    else:
        even = (lo & 0x0F) | (hi << 4)
        odd = (lo >> 4) | (hi & 0xF0)
    o[:, 0, :].copy_(even.t())
    o[:, 1, :].copy_(odd.t())
    return out


def _v03_quantize_shard(local, amax, lay):
    rows, k = local.shape
    x = torch.empty((rows + TILE, k), dtype=local.dtype, device=local.device)
    x[:rows].copy_(local)
    x[rows:].zero_()
    x[rows, 0] = amax.reshape(()).to(local.dtype)
    data, scales, _ = _ops.quantize(x, 1, 0, 0, 0, 0, 0, None, True, False)[:3]
    linear = _ops.swizzle(scales.view(torch.uint8), rows + TILE, k // 16, False)
    cb, sb = lay.code_bytes, lay.scale_bytes
    out = torch.empty((lay.chunk, lay.in_cols), dtype=torch.uint8, device=local.device)
    out[:rows, :cb].copy_(data[:rows])
    out[:rows, cb:cb + sb].copy_(linear[:rows])
    out[rows:].zero_()
    out[:rows, cb + sb:].zero_()
    return out


def _v03_assemble(gathered, amax, lay, buf, transpose):
    n, k = lay.n, lay.k
    cb, sb = lay.code_bytes, lay.scale_bytes
    rows = gathered[:n]
    codes, lin = rows[:, :cb], rows[:, cb:cb + sb]
    off = _ops.packed_nbytes(n, k)
    d, s, a = _ops.unpack(buf[:off], n, k)
    d.copy_(codes)
    s.view(torch.uint8).copy_(_ops.swizzle(lin.contiguous(), n, sb, True))
    a.copy_(amax.reshape(1))
    if transpose:
        dt, st, at = _ops.unpack(buf[off:], k, n)
        _v03_nibble_transpose(codes, dt)
        lin_t = lin[::TILE].t().repeat_interleave(TILE, dim=0)
        st.view(torch.uint8).copy_(_ops.swizzle(lin_t.contiguous(), k, n // 16, True))
        at.copy_(amax.reshape(1))
    return buf


# ------------------------------------------------------------------------------ one unit
class Unit:
    """One rank's state for a block's weights [(3d, d), (d, d), (4d, d), (d, 4d)] over `world`
    ranks: FP32 master shards, gather rows, the gathered rows (full size), weight caches."""

    def __init__(self, d, world, dev, gen):
        self.shapes = [(3 * d, d), (d, d), (4 * d, d), (d, 4 * d)]
        self.lays = [nd.gather_layout(n, k, world) for n, k in self.shapes]
        self.shards = [torch.randn(lay.chunk, k, generator=gen).to(dev) * 0.02 for lay, (n, k) in
                       zip(self.lays, self.shapes)]
        amax = [s.abs().amax().reshape(1) for s in self.shards]
        self.q = [torch.empty((lay.chunk, lay.in_cols), dtype=torch.uint8, device=dev) for lay in self.lays]
        full = [torch.randn(n, k, generator=gen).to(dev) * 0.02 for n, k in self.shapes]
        self.gathered = [nd.quantize_shard(w, a, nd.gather_layout(n, k, 1)) for w, a, (n, k) in
                         zip(full, amax, self.shapes)]
        self.full_bf16 = [w.to(torch.bfloat16) for w in full]
        del full
        self.bufs = [torch.empty((_passes.w_cache_nbytes(n, k),), dtype=torch.uint8, device=dev) for n, k in
                     self.shapes]
        self.amax = amax
        # FSDP2's copies: the flat all-gather input and output, and what they are copied from/to
        self.fp4_in = sum(lay.bytes_per_rank for lay in self.lays)
        self.fp4_out = self.fp4_in * world
        self.bf16_in = sum(2 * lay.chunk * k for lay, (n, k) in zip(self.lays, self.shapes))
        self.bf16_out = self.bf16_in * world
        mx = max(self.bf16_out, self.fp4_out)
        self.copy_src = torch.empty((mx,), dtype=torch.uint8, device=dev)
        self.copy_dst = torch.empty((mx,), dtype=torch.uint8, device=dev)
        self.elements = sum(n * k for n, k in self.shapes)

    def copies(self, nbytes_in, nbytes_out):
        self.copy_dst[:nbytes_in].copy_(self.copy_src[:nbytes_in])
        self.copy_dst[:nbytes_out].copy_(self.copy_src[:nbytes_out])

    # -- this version
    def fp4_fwd(self):
        norms = torch._foreach_norm(self.shards, float("inf"), dtype=torch.float32)
        bits = torch.stack(norms).view(torch.int32).to(torch.int64) & 0x7FFFFFFF
        amax = bits.to(torch.int32).view(torch.float32)  # (the all-reduce would sit here)
        for i, lay in enumerate(self.lays):
            nd.quantize_shard(self.shards[i], amax[i:i + 1], lay, out=self.q[i])
        self.copies(self.fp4_in, self.fp4_out)
        for i, lay in enumerate(self.lays):
            nd.assemble_gathered(self.gathered[i], self.amax[i], lay, self.bufs[i], transpose=False)

    def fp4_bwd(self):
        self.copies(self.fp4_in, self.fp4_out)
        for i, lay in enumerate(self.lays):
            nd.assemble_gathered(self.gathered[i], self.amax[i], lay, self.bufs[i], transpose=True)

    # -- 0.3
    def v03(self, transpose):
        amax = _v03_amaxes(self.shards)
        for i, lay in enumerate(self.lays):
            _v03_quantize_shard(self.shards[i], amax[i], lay)
        self.copies(self.fp4_in, self.fp4_out)
        for i, lay in enumerate(self.lays):
            _v03_assemble(self.gathered[i], self.amax[i], lay, self.bufs[i], transpose)

    # -- the ordinary gather: cast, copies, and the Linear's quantization of W in forward
    def bf16(self, forward):
        for s in self.shards:
            s.to(torch.bfloat16)
        self.copies(self.bf16_in, self.bf16_out)
        if forward:
            for w in self.full_bf16:
                _ops.quantize(w, 1, 0, 0, 0, 0, 0, None, True, True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--d-model", type=int, default=2048)
    ap.add_argument("--worlds", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--smoke", action="store_true", help="d_model 64, few iterations (CPU)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    dev = torch.device("cuda" if torch.cuda.is_available() and not a.smoke else "cpu")
    if a.smoke:
        a.d_model, a.iters = 64, 3
    timer = Timer(dev, iters=a.iters, warmup=3)
    gen = torch.Generator().manual_seed(0)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    print(f"FSDP2 gather work per unit (d_model {a.d_model}: 4 weights, {12 * a.d_model ** 2 / 1e6:.1f}M elements), "
          f"one rank, {name}; us per unit and gather (median of {a.iters})")
    print(f"{'world':>5s} {'variant':8s} {'fwd us':>9s} {'bwd us':>9s} {'step us':>9s} {'vs fp4_0.3':>10s} "
          f"{'vs bf16':>8s}")
    rows = []
    for world in a.worlds:
        u = Unit(a.d_model, world, dev, gen)
        # rotate through enough units that one pass exceeds the L2
        units = [u] + [Unit(a.d_model, world, dev, gen) for _ in range(timer.sets(4 * u.elements // world) - 1)] \
            if dev.type == "cuda" else [u]
        # the baseline does the same work: its shard rows and weight caches equal this version's
        for i, lay in enumerate(u.lays):
            q = _v03_quantize_shard(u.shards[i], u.amax[i], lay)
            assert torch.equal(q, nd.quantize_shard(u.shards[i], u.amax[i], lay)), "0.3 shard rows differ"
            n, k = u.shapes[i]
            want = _v03_assemble(u.gathered[i], u.amax[i], lay, torch.zeros_like(u.bufs[i]), True)
            got = nd.assemble_gathered(u.gathered[i], u.amax[i], lay, torch.full_like(u.bufs[i], 0xFF), True)
            off = _ops.packed_nbytes(n, k)
            for o, r, c in ((0, n, k), (off, k, n)):
                for x, y in zip(_ops.unpack(got[o:], r, c), _ops.unpack(want[o:], r, c)):
                    assert torch.equal(x.view(torch.uint8), y.view(torch.uint8)), "0.3 weight cache differs"
        res = {}
        for var, fwd, bwd in [("fp4", Unit.fp4_fwd, Unit.fp4_bwd),
                              ("fp4_0.3", lambda x: x.v03(False), lambda x: x.v03(True)),
                              ("bf16", lambda x: x.bf16(True), lambda x: x.bf16(False))]:
            f = timer.time(lambda i: fwd(units[i]), sets=len(units)).median_us
            b = timer.time(lambda i: bwd(units[i]), sets=len(units)).median_us
            res[var] = (f, b, f + b)
        for var, (f, b, t) in res.items():
            print(f"{world:5d} {var:8s} {f:9.1f} {b:9.1f} {t:9.1f} {t / res['fp4_0.3'][2]:10.3f} "
                  f"{t / res['bf16'][2]:8.3f}")
            rows.append({"world": world, "variant": var, "fwd_us": f, "bwd_us": b, "step_us": t})
        # the two kernels alone, as throughput (bytes each must move at least)
        i = 2  # the largest weight, [4d, d]
        lay, (n, k) = u.lays[i], u.shapes[i]
        qt = timer.time(lambda j: nd.quantize_shard(units[j].shards[i], units[j].amax[i], lay, out=units[j].q[i]),
                        sets=len(units)).median_us
        at = timer.time(lambda j: nd.assemble_gathered(units[j].gathered[i], units[j].amax[i], lay, units[j].bufs[i]),
                        sets=len(units)).median_us
        nb = lay.chunk * k * 4  # the copy buffers hold 2 bytes an element of the unit: more than this
        cp = timer.time(lambda j: units[j].copy_dst[:nb].copy_(units[j].copy_src[:nb]), sets=len(units)).median_us
        qb = lay.chunk * k * 4 + lay.chunk * lay.in_cols
        ab = n * (k // 2 + k // 16) + 2 * (n * k // 2) + n * k // 16 * 2
        print(f"{'':5s} kernels on [{n}, {k}] (shard {lay.chunk} rows): quantize {qt:.1f} us {qb / qt / 1e3:.0f} GB/s, "
              f"assemble W+Wt {at:.1f} us {ab / at / 1e3:.0f} GB/s (device copy of the fp32 shard: "
              f"{2 * nb / cp / 1e3:.0f} GB/s)")
        rows.append({"world": world, "kernel_shape": [n, k], "quantize_us": qt, "quantize_GBps": qb / qt / 1e3,
                     "assemble_us": at, "assemble_GBps": ab / at / 1e3})
        units = u = None  # freed before the next world size builds its own
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"device": name, "torch": torch.__version__, "nvfp4": nvfp4.__version__,
                       "date": time.strftime("%Y-%m-%d"), "d_model": a.d_model, "rows": rows}, fh, indent=1)
    return rows


if __name__ == "__main__":
    sys.exit(0 if main() is not None else 1)
