#!/usr/bin/env python3
"""GPU time of each kernel of one nvfp4.nn.Linear's forward + backward, per Linear shape of
a training step, against the memory traffic floors measured in the same run.

For each shape (tokens x in -> out; the defaults are the four Linears of a block of
examples/train.py's 85M model at 16x1024 tokens) the layer runs forward + backward under BF16
autocast (FP32 master weight, as in bench_train_step.py) for --iters steps under
torch.profiler; each kernel's total GPU time is divided by the number of steps. Beside it, in
the same run: a device copy of X and of dY (read + write) and a read-only reduction of each
(`torch.amax`, one reduction kernel), which bound what any pass over that tensor can cost. A kernel that reads X once
and writes less than it reads cannot beat the read-only row; the amax pass should sit near it.

Two more columns of the same run say how far each kernel is from its floor:
- bytes: what each of the nvfp4 recipe's kernels must read and write on the Hopper decoded
  road (model_bytes: X, dY and W read, decoded values, codes, swizzled scales written; the
  GEMMs excluded), the bandwidth that makes at the measured time, and its fraction of the
  copy bandwidth measured on the same tensor;
- cuBLAS: the three GEMMs of the layer (fprop X Wᵀ, dgrad dY W, wgrad dYᵀ X) as torch.mm on
  BF16 tensors of the same shapes (wgrad with a float32 output where torch.mm offers one, as
  the Linear writes its float32 weight gradient), the ceiling of the emulated GEMMs.

The step's floor (--step-json, a bench_train_step.py JSON of the model whose block these
shapes are): the nvfp4 / bf16 step ratio of each mode as measured, and what it would be (a) with
every one of these kernel classes at the copy bandwidth of its shape's run (the step's time less
the difference, over the model's layers), and (b) with the amax pass's bytes gone as well (the
amax computed where the activation is produced) — what this design on this GPU can reach at
best; and (c) with the GEMMs reading the FP4 codes themselves at cuBLAS BF16's time (no
decoded operands written, no decode pass, the amax from the producer: codes_road_bytes) —
what a design with such a GEMM could reach. (a)-(c) put every kernel at copy bandwidth; (d)
and (e) take the quantizers as they are: the same run also times today's tile kernels
quantizing X and dY to codes only (both orientations, the recipe's roundings and transform:
what they would write for GEMMs that read codes); (d) is the step with those in place of the
decoded-road tile kernels, no decode pass and GEMMs reading codes as fast as today's read
decoded values, (e) that and no amax pass. --from-json re-reads a saved result instead of measuring (no GPU needed).

    python3 bench/bench_linear_kernels.py [--tokens 16384] [--shapes 768x2304 768x768 ...]
                                          [--iters 20] [--recipe nvfp4] [--json out.json]
                                          [--step-json step.json] [--from-json out.json]
    (the 400M model's block: --shapes 2048x6144 2048x2048 2048x8192 8192x2048)
"""
from __future__ import annotations

import argparse
import collections
import json

import torch
from torch import nn

import nvfp4
import nvfp4.nn as nn4
from nvfp4._format import swizzled_shape


def kernel_times(fn, iters: int):
    """{kernel name: µs per call of fn} over `iters` calls, from the profiler's device events."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    tot = collections.Counter()
    cnt = collections.Counter()
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            tot[e.name] += e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
            cnt[e.name] += 1
    return {k: (tot[k] / iters, cnt[k] / iters) for k in tot}


def short(name: str) -> str:
    for cut in ("void ", "nvfp4::detail::quant::", "nvfp4::detail::", "(anonymous namespace)::", "unnamed>::"):
        name = name.replace(cut, "")
    if name.startswith("_ZN7cutlass"):
        return "cutlass GEMM " + name[40:90]
    return name.split("(")[0][:90]


# The library's GEMM kernels by short name: CUTLASS's, and its own Hopper kernels (the
# register-decoding, FP4-reading and small-M ones).
_OWN_GEMMS = ("rs_kernel", "direct_kernel", "small_m::")


def is_gemm(short_name: str) -> bool:
    return short_name.startswith("cutlass GEMM") or any(g in short_name for g in _OWN_GEMMS)


def _up(v: int, m: int) -> int:
    return (v + m - 1) // m * m


def codes_bytes(rows: int, cols: int) -> int:
    """An NVFP4 orientation [rows, cols]: codes, swizzled E4M3 scales, the float32 amax."""
    sr, sc = swizzled_shape(rows, cols // 16)
    return rows * cols // 2 + sr * sc + 4


# The kernel classes of the nvfp4 recipe's Linear on the Hopper decoded road, as named by the
# profiler, and the bytes each must move (model_bytes).
CLASSES = (
    ("amax X, dY", lambda n: n.startswith("amax_colrht_kernel<")),
    ("quantize X (RTN, row decoded + col RHT codes)", lambda n: n.startswith("tile_kernel<BF16, false")),
    ("quantize dY (SR, row decoded + col RHT decoded)", lambda n: n.startswith("tile_kernel<BF16, true")),
    ("quantize W (fp32: amax + 2D tile)", lambda n: n.startswith(("tile_kernel<F32", "amax_flat_kernel<F32"))),
    ("decode (Wᵀ, Xᵀ)", lambda n: n.startswith("gemm_prep_kernel")),
)


_AMAX, _X_TILE, _DY_TILE, _DECODE = CLASSES[0][0], CLASSES[1][0], CLASSES[2][0], CLASSES[4][0]


def classify(name: str):
    """The CLASSES entry a kernel (short name) belongs to, or None."""
    for cls, match in CLASSES:
        if match(name):
            return cls
    return None


def model_bytes(tokens: int, fin: int, fout: int) -> dict:
    """Bytes read + written by each kernel class of one nvfp4-recipe Linear's forward +
    backward (BF16 X [tokens, fin] and dY [tokens, fout], float32 W [fout, fin]), on the Hopper
    decoded road: X rowwise and dY both ways go to the GEMMs as BF16 values, Xᵀ and Wᵀ are
    saved as codes and decoded for the backward GEMMs."""
    t, k, n = tokens, fin, fout
    tp, np_ = _up(t, 16), _up(n, 16)
    return {
        "amax X, dY": 2 * t * k + 2 * t * n,
        "quantize X (RTN, row decoded + col RHT codes)": 2 * t * k + 2 * t * k + codes_bytes(k, tp),
        "quantize dY (SR, row decoded + col RHT decoded)": 2 * t * n + 2 * t * n + 2 * n * tp,
        "quantize W (fp32: amax + 2D tile)": 4 * n * k + 4 * n * k + 2 * n * k + codes_bytes(k, np_),
        "decode (Wᵀ, Xᵀ)": codes_bytes(k, np_) + 2 * k * np_ + codes_bytes(k, tp) + 2 * k * tp,
    }


def codes_road_bytes(tokens: int, fin: int, fout: int) -> dict:
    """model_bytes for a design whose GEMMs read the FP4 codes themselves and whose amax comes
    from the activation's producer: X and dY read once and written as codes both ways, W as
    today less its decoded rows, no decode pass and no amax pass (W's own amax read stays:
    nothing produces W in the step)."""
    t, k, n = tokens, fin, fout
    tp, np_ = _up(t, 16), _up(n, 16)
    return {
        "amax X, dY": 0,
        "quantize X (RTN, row decoded + col RHT codes)": 2 * t * k + codes_bytes(t, k) + codes_bytes(k, tp),
        "quantize dY (SR, row decoded + col RHT decoded)": 2 * t * n + codes_bytes(t, n) + codes_bytes(n, tp),
        "quantize W (fp32: amax + 2D tile)": 4 * n * k + 4 * n * k + codes_bytes(n, k) + codes_bytes(k, np_),
        "decode (Wᵀ, Xᵀ)": 0,
    }


def gemm_excess_us(result) -> float:
    """µs per step by which a shape's emulated GEMMs exceed cuBLAS BF16 on the same shapes."""
    gemm = result.get("gemm_us", 0.0)
    return gemm - sum(result["cublas_us"].values()) if gemm > 0 else 0.0


def bandwidth_rows(kernels: dict, bytes_by_class: dict, copy_tbs: float):
    """[(class, µs, MB, TB/s, fraction of copy_tbs)] from {short kernel name: µs per step}."""
    us = {}
    for name, t in kernels.items():
        cls = classify(name)
        if cls is not None:
            us[cls] = us.get(cls, 0.0) + t
    rows = []
    for cls, _ in CLASSES:
        if cls in us and us[cls] > 0:
            b = bytes_by_class[cls]
            tbs = b / (us[cls] * 1e-6) / 1e12
            rows.append((cls, us[cls], b / 1e6, tbs, tbs / copy_tbs if copy_tbs > 0 else float("nan")))
    return rows


def step_floor(results, layers: int, nvfp4_ms: float, bf16_ms: float) -> dict:
    """The step ratio nvfp4 / bf16 as measured and at the floors, from bench_linear_kernels
    results (one entry per Linear of a block, each with its kernel classes' µs, MB and the
    copy bandwidth of its run) and a step of `layers` such blocks: at_copy, every class at
    its run's copy bandwidth; no_amax, that and the amax pass's bytes gone too. Times in ms."""
    over = sum(b["us"] - b["mb"] / r["copy_tbs"] for r in results for b in r["bandwidth"]) * layers / 1000.0
    amax = sum(b["mb"] / r["copy_tbs"] for r in results for b in r["bandwidth"]
               if b["kind"].startswith("amax")) * layers / 1000.0
    # (c) the GEMMs read FP4 at cuBLAS BF16's time: every class at the codes road's bytes
    fp4 = 0.0
    for r in results:
        fin, fout = (int(v) for v in r["shape"].split("x"))
        road = codes_road_bytes(int(r["tokens"]), fin, fout)
        fp4 += sum(b["us"] - road[b["kind"]] / 1e6 / r["copy_tbs"] for b in r["bandwidth"]) + gemm_excess_us(r)
    fp4 *= layers / 1000.0
    out = dict(now=nvfp4_ms / bf16_ms, at_copy=(nvfp4_ms - over) / bf16_ms,
               no_amax=(nvfp4_ms - over - amax) / bf16_ms, fp4_gemm=(nvfp4_ms - fp4) / bf16_ms,
               over_copy_ms=over, amax_ms=amax, fp4_gemm_ms=fp4)
    # (d), (e): today's tile kernels writing codes only, GEMMs reading them as fast as today's
    # read decoded operands (not cuBLAS's time: on these operands the emulated GEMMs can be the
    # faster, and (d) asks what the quantizers and passes leave, not what a better GEMM gives)
    if results and all("codes_tile_us" in r for r in results):
        saved = amax_now = 0.0
        for r in results:
            by = {b["kind"]: b["us"] for b in r["bandwidth"]}
            saved += (by.get(_X_TILE, 0.0) - r["codes_tile_us"]["X"] + by.get(_DY_TILE, 0.0)
                      - r["codes_tile_us"]["dY"] + by.get(_DECODE, 0.0))
            amax_now += by.get(_AMAX, 0.0)
        saved *= layers / 1000.0
        amax_now *= layers / 1000.0
        out.update(codes_now=(nvfp4_ms - saved) / bf16_ms, codes_now_no_amax=(nvfp4_ms - saved - amax_now) / bf16_ms,
                   codes_now_ms=saved, amax_now_ms=amax_now)
    return out


def print_step_floor(results, step_json: str) -> list:
    with open(step_json) as f:
        step = json.load(f)
    layers = int(step["model"]["n_layers"])
    rows = step["rows"]
    out = []
    print(f"\n== the step's floor: {layers} blocks of these shapes ({step_json})")
    for mode in step.get("modes", ["eager"]):
        nv, bf = rows.get(f"nvfp4/{mode}"), rows.get(f"bf16/{mode}")
        if not nv or not bf:
            continue
        for what, key in (("step", "step_ms"), ("GPU busy", None)):
            if key is None:
                if "profile" not in nv or "profile" not in bf:
                    continue
                a, b = nv["profile"]["gpu_busy_ms"], bf["profile"]["gpu_busy_ms"]
            else:
                a, b = nv[key], bf[key]
            f = step_floor(results, layers, a, b)
            out.append(dict(mode=mode, what=what, nvfp4_ms=a, bf16_ms=b, **f))
            print(f"   {mode:8s} {what:8s} nvfp4 {a:7.2f} ms / bf16 {b:7.2f} ms = {f['now']:.3f}; "
                  f"kernels at copy bandwidth (-{f['over_copy_ms']:.2f} ms): {f['at_copy']:.3f}; "
                  f"and no amax pass (-{f['amax_ms']:.2f} ms more): {f['no_amax']:.3f}; "
                  f"GEMMs reading FP4 at cuBLAS's time (-{f['fp4_gemm_ms']:.2f} ms in all): {f['fp4_gemm']:.3f}")
            if "codes_now" in f:
                print(f"   {'':17s} today's tile kernels writing codes, no decode pass, GEMMs as today's "
                      f"(-{f['codes_now_ms']:.2f} ms): {f['codes_now']:.3f}; and no amax pass "
                      f"(-{f['amax_now_ms']:.2f} ms more): {f['codes_now_no_amax']:.3f}")
    return out


def event_us(fn, iters: int) -> float:
    fn()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    s.record()
    for _ in range(iters):
        fn()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) * 1000.0 / iters


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--shapes", nargs="+", default=["768x2304", "768x768", "768x3072", "3072x768"],
                    help="in x out features of each Linear")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--recipe", default="nvfp4")
    ap.add_argument("--json", default=None)
    ap.add_argument("--step-json", default=None,
                    help="a bench_train_step.py JSON of the model whose block these shapes are: print the step's floor")
    ap.add_argument("--from-json", default=None, help="re-read a saved --json result instead of measuring")
    a = ap.parse_args(argv)
    if a.from_json:
        with open(a.from_json) as f:
            saved = json.load(f)
        print(f"device: {saved['device']} (from {a.from_json})")
        for r in saved["results"]:
            print(f"\n== {r['tokens']} x {r['shape'].replace('x', ' -> ')}, copy {r['copy_tbs']:.2f} TB/s in that run:")
            for b in r["bandwidth"]:
                print(f"   {b['us']:9.1f} us {b['mb']:8.1f} MB {b['tbs']:6.2f} TB/s {b['of_copy']:5.2f} of copy  {b['kind']}")
        if a.step_json:
            print_step_floor(saved["results"], a.step_json)
        return 0
    if not torch.cuda.is_available():
        raise SystemExit("bench_linear_kernels.py: needs a CUDA GPU")
    torch.manual_seed(0)
    dev = torch.device("cuda")
    print(f"device: {torch.cuda.get_device_name()}, tokens {a.tokens}, recipe {a.recipe}, {a.iters} steps each")
    results = []
    grand = collections.Counter()
    for shp in a.shapes:
        fin, fout = (int(v) for v in shp.split("x"))
        lin = nn4.convert(nn.Sequential(nn.Linear(fin, fout, bias=False)), a.recipe, exclude=[])[0].to(dev)
        x = torch.randn(a.tokens, fin, device=dev, dtype=torch.bfloat16, requires_grad=True)
        dy = torch.randn(a.tokens, fout, device=dev, dtype=torch.bfloat16)

        def step():
            x.grad = None  # as zero_grad(set_to_none=True) leaves them: no accumulation kernels
            lin.weight.grad = None
            with torch.autocast("cuda", dtype=torch.bfloat16):
                y = lin(x)
            y.backward(dy)

        ks = kernel_times(step, a.iters)
        xs, ys = x.detach().clone(), dy.clone()
        # today's tile kernels writing codes only (both orientations, the recipe's roundings
        # and columnwise transform): what X and dY would cost for GEMMs that read codes
        codes_tile = {}
        if a.recipe == "nvfp4":
            for what, t, kw in (("X", xs, dict()), ("dY", ys, dict(rounding="sr", seed=1))):
                kt = kernel_times(lambda: nvfp4.quantize(t, rowwise=True, columnwise=True, rht="columnwise", **kw),
                                  a.iters)
                codes_tile[what] = sum(us for name, (us, _) in kt.items() if short(name).startswith("tile_kernel<"))
        floors = {
            "copy X (r+w)": event_us(lambda: xs.clone(), a.iters),
            "read X (amax)": event_us(lambda: xs.amax(), a.iters),
            "copy dY (r+w)": event_us(lambda: ys.clone(), a.iters),
            "read dY (amax)": event_us(lambda: ys.amax(), a.iters),
        }
        # the layer's three GEMMs through cuBLAS on BF16 tensors of the same shapes
        wb = torch.randn(fout, fin, device=dev, dtype=torch.bfloat16)
        try:
            torch.mm(ys[:16].t(), xs[:16], out_dtype=torch.float32)
            wgrad_out = torch.float32
        except (TypeError, RuntimeError):
            wgrad_out = torch.bfloat16
        blas = {
            "fprop X Wᵀ": event_us(lambda: torch.mm(xs, wb.t()), a.iters),
            "dgrad dY W": event_us(lambda: torch.mm(ys, wb), a.iters),
            f"wgrad dYᵀ X ({str(wgrad_out).split('.')[-1]} out)": event_us(
                (lambda: torch.mm(ys.t(), xs, out_dtype=torch.float32)) if wgrad_out is torch.float32
                else (lambda: torch.mm(ys.t(), xs)), a.iters),
        }
        del wb
        print(f"\n== {a.tokens} x {fin} -> {fout}: X {xs.numel() * 2 / 1e6:.1f} MB, dY {ys.numel() * 2 / 1e6:.1f} MB")
        for k, v in floors.items():
            print(f"   {v:9.1f} us  {k}")
        for k, v in blas.items():
            print(f"   {v:9.1f} us  cuBLAS BF16 {k}")
        total = 0.0
        named = {}
        for name, (us, n) in sorted(ks.items(), key=lambda kv: -kv[1][0]):
            total += us
            grand[short(name)] += us
            named[short(name)] = named.get(short(name), 0.0) + us
            print(f"   {us:9.1f} us  x{n:<4.1f} {short(name)}")
        print(f"   {total:9.1f} us  all kernels of one forward + backward")
        for what, us in codes_tile.items():
            print(f"   {us:9.1f} us  (today's tile kernel quantizing {what} to codes only, both orientations)")
        gemm_us = sum(v for k, v in named.items() if is_gemm(k))
        blas_us = sum(blas.values())
        grand["cuBLAS BF16, the same 3 GEMMs (reference, not in the total)"] += blas_us
        if blas_us > 0 and gemm_us > 0:
            print(f"   GEMMs: {gemm_us:.1f} us vs cuBLAS BF16 {blas_us:.1f} us: {gemm_us / blas_us:.3f}x")
        copy_tbs = max(2 * xs.numel() * 2 / (floors["copy X (r+w)"] * 1e-6),
                       2 * ys.numel() * 2 / (floors["copy dY (r+w)"] * 1e-6)) / 1e12
        bw = bandwidth_rows(named, model_bytes(a.tokens, fin, fout), copy_tbs) if a.recipe == "nvfp4" else []
        if bw:
            print(f"   bytes moved (model) and bandwidth, copy {copy_tbs:.2f} TB/s in this run:")
            for cls, us, mb, tbs, frac in bw:
                print(f"   {us:9.1f} us {mb:8.1f} MB {tbs:6.2f} TB/s {frac:5.2f} of copy  {cls}")
        kernels = {}  # by short name: two kernels can share one (the CUTLASS GEMMs do)
        for k, (us, n) in ks.items():
            e = kernels.setdefault(short(k), dict(us=0.0, calls=0.0))
            e["us"] += us
            e["calls"] += n
        extra = dict(codes_tile_us=codes_tile) if codes_tile else {}
        results.append(dict(shape=shp, tokens=a.tokens, floors_us=floors, cublas_us=blas, copy_tbs=copy_tbs,
                            gemm_us=gemm_us, kernels=kernels, **extra,
                            bandwidth=[dict(kind=c, us=u, mb=m, tbs=t, of_copy=f) for c, u, m, t, f in bw]))
    print("\n== all shapes, per kernel name (µs per step of one Linear of each shape)")
    for name, us in grand.most_common():
        print(f"   {us:9.1f} us  {name}")
    floor = print_step_floor(results, a.step_json) if (a.step_json and a.recipe == "nvfp4") else []
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), results=results, step_floor=floor), f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
