"""python -m nvfp4.bench: nvfp4's quantization kernels and FP4 GEMMs next to torch baselines.

The figures are those of the C++ ``nvfp4-bench`` (same shapes file, same method), measured
through the Python API, beside what PyTorch gives on the same device in the same run:
cuBLAS BF16 (``torch.matmul``), FP8 (``torch._scaled_mm``, tensor-wise scales) and
copy bandwidth.

Method (nvfp4._timing.Timer, shared with bench/bench_quant.py and bench/bench_gemm.py):
warm-up; a sample is ``reps`` back-to-back calls divided by ``reps`` (reps chosen so a
sample lasts >= --min-sample-us); the median of --iters samples is reported. On a GPU,
CUDA events on the current stream, and inputs rotate through enough copies to exceed 2x
the L2 cache. Quantization bandwidth counts the bytes that must move at least once (input
read, codes, scales and amax written); GEMMs count 2*M*N*K flops. For small shapes the
Python call overhead (argument checks, output allocation) may show: nvfp4-bench has none.

Without a GPU (or with a CPU-only build, or --device cpu) it times the CPU reference with
torch.utils.benchmark (--cpu-threads torch threads, default 1), on tiny shapes unless
--shapes or --shapes-file says otherwise; every option applies there too. Those numbers
say nothing about GPU performance.

    python -m nvfp4.bench --quick
    python -m nvfp4.bench --shapes 8192x8192x8192,16x4096x4096 --json out.json --csv out.csv
    python -m nvfp4.bench --device cpu --shapes 32x64x128 --ops gemm --plot cpu.png
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

import torch

import nvfp4
from ._format import swizzled_shape
from ._timing import Timer

__all__ = ["load_shapes", "main"]

#: The one shapes file, shared with nvfp4-bench (packaged with the module).
SHAPES_FILE = Path(__file__).with_name("shapes.json")

_QUANT_VARIANTS = (
    # name, tensor ("x" [M,K] or "w" [N,K]), quantize kwargs
    ("1d rtn rowwise (x)", "x", dict()),
    ("1d sr rht-col row+col (x)", "x", dict(rounding="sr", seed=1, rht="columnwise", columnwise=True)),
    ("2d rtn row+col (w)", "w", dict(block="2d", columnwise=True)),
)


# ----------------------------------------------------------------------------------------
# shapes
# ----------------------------------------------------------------------------------------

def load_shapes(path: Optional[str] = None, quick: bool = False) -> List[dict]:
    """Unique (m, n, k) GEMM shapes of the shapes file, each with the model layers that use it.

    quick: the first model only, its smallest and largest token count.
    """
    with open(path or SHAPES_FILE) as f:
        spec = json.load(f)
    shapes: Dict[tuple, dict] = {}
    for model in spec["models"]:
        ms = sorted(int(m) for m in model["m"])
        if quick:
            ms = sorted({ms[0], ms[-1]})
        for layer in model["layers"]:
            for m in ms:
                key = (m, int(layer["n"]), int(layer["k"]))
                shapes.setdefault(key, {"m": key[0], "n": key[1], "k": key[2], "models": []})
                shapes[key]["models"].append(f"{model['name']}.{layer['name']}")
        if quick:
            break
    return list(shapes.values())


def _parse_shapes(arg: str) -> List[dict]:
    out = []
    for item in filter(None, arg.split(",")):
        try:
            m, n, k = (int(v) for v in item.lower().split("x"))
        except ValueError:
            raise SystemExit(f"--shapes: expected MxNxK[,MxNxK...], got {item!r}")
        out.append({"m": m, "n": n, "k": k, "models": [item]})
    return out


def _label(shape: dict) -> str:
    names = shape["models"]
    return names[0] + (f" (+{len(names) - 1})" if len(names) > 1 else "")


# ----------------------------------------------------------------------------------------
# rows
# ----------------------------------------------------------------------------------------

def _row(section, op, backend, shape=None, **kw) -> dict:
    r = {"section": section, "op": op, "backend": backend, "m": 0, "n": 0, "k": 0, "models": "",
         "bytes": 0.0, "flops": 0.0, "iters": 0, "reps": 0, "sets": 0, "median_us": 0.0, "min_us": 0.0,
         "mean_us": 0.0, "gbps": 0.0, "tflops": 0.0, "ratio": 0.0, "ratio_to": "", "status": "ok"}
    if shape:
        r.update(m=shape["m"], n=shape["n"], k=shape["k"], models=_label(shape))
    r.update(kw)
    return r


def _random(rows: int, cols: int, device, dtype=torch.bfloat16) -> torch.Tensor:
    # Generated where it is used: a GEMM operand can be ~0.5 G values, slow to make on a CPU.
    device = torch.device(device)
    g = torch.Generator(device=device).manual_seed(rows * 131 + cols)
    return torch.randn(rows, cols, generator=g, dtype=torch.float32, device=device).to(dtype)


def _fmt(v: float) -> str:
    return f"{v:.1f}" if v >= 1 else f"{v:.3g}"


# ----------------------------------------------------------------------------------------
# the runs (GPU, or the CPU reference)
# ----------------------------------------------------------------------------------------

#: CPU shapes when none are given: the reference backend decodes and accumulates in
#: float64, one value at a time; model shapes would take hours.
_CPU_SHAPES = ((16, 64, 64), (64, 128, 256))


def _m(res) -> dict:
    return res.as_dict()


def _copy_baseline(t: Timer) -> dict:
    nbytes = max(256 << 20, 4 * t.l2_bytes) if t.on_gpu else 16 << 20
    src = torch.ones(nbytes, dtype=torch.uint8, device=t.device)
    dst = torch.empty_like(src)
    res = _m(t.time(lambda i: dst.copy_(src), 1))
    row = _row("copy", "copy", "torch", bytes=2.0 * nbytes, **res)
    row["gbps"] = row["bytes"] / (res["median_us"] * 1e-6) / 1e9
    return row


def _bench_quant(t: Timer, name: str, kwargs: dict, rows: int, cols: int, shape: dict, copy_gbps: float) -> dict:
    row = _row("quant", name, "nvfp4", m=rows, k=cols, models=_label(shape))
    try:
        x = _random(rows, cols, t.device)

        def layout_bytes(r: int, c: int) -> int:  # codes + swizzled scales + amax
            sr, sc = swizzled_shape(r, c // 16)
            return r * c // 2 + sr * sc + 4

        out = layout_bytes(rows, cols)
        if kwargs.get("columnwise"):
            out += layout_bytes(cols, (rows + 15) // 16 * 16)
        row["bytes"] = float(rows * cols * 2 + out)
        sets = t.sets(row["bytes"])
        xs = [x] + [x.clone() for _ in range(sets - 1)]
        row.update(_m(t.time(lambda i: nvfp4.quantize(xs[i], **kwargs), sets)))
        row["gbps"] = row["bytes"] / (row["median_us"] * 1e-6) / 1e9
        if copy_gbps:
            row.update(ratio=row["gbps"] / copy_gbps, ratio_to="of copy")
    except Exception as e:  # one failed row must not end the run
        row["status"] = f"error: {type(e).__name__}: {e}"
    return row


def _bench_gemms(t: Timer, shape: dict, backends: List[str]) -> List[dict]:
    m, n, k = shape["m"], shape["n"], shape["k"]
    flops = 2.0 * m * n * k
    rows = []

    def finish(row, res):
        row.update(_m(res))
        row["tflops"] = flops / (row["median_us"] * 1e-6) / 1e12
        return row

    a, b = _random(m, k, t.device), _random(n, k, t.device)
    bf16 = None
    # BF16 matmul (cuBLAS on a GPU): what an FP4 GEMM has to beat.
    row = _row("gemm", "bf16 matmul", "torch-bf16", shape, flops=flops)
    try:
        sets = t.sets(2.0 * (m * k + n * k + m * n))
        ops = [(a, b)] + [(a.clone(), b.clone()) for _ in range(sets - 1)]
        bf16 = finish(row, t.time(lambda i: torch.matmul(ops[i][0], ops[i][1].t()), sets))
        del ops
    except Exception as e:
        row["status"] = f"error: {type(e).__name__}: {e}"
    rows.append(row)
    # FP8 E4M3 with tensor-wise scales (cuBLASLt through torch._scaled_mm).
    row = _row("gemm", "fp8 _scaled_mm", "torch-fp8", shape, flops=flops)
    try:
        one = torch.ones((), dtype=torch.float32, device=t.device)
        a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
        sets = t.sets(1.0 * (m * k + n * k) + 2.0 * m * n)
        ops = [(a8, b8)] + [(a8.clone(), b8.clone()) for _ in range(sets - 1)]
        rows.append(finish(row, t.time(
            lambda i: torch._scaled_mm(ops[i][0], ops[i][1].t(), scale_a=one, scale_b=one,
                                       out_dtype=torch.bfloat16), sets)))
        del ops
    except Exception as e:
        row["status"] = f"n/a: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        rows.append(row)
    # nvfp4, one row per requested backend.
    try:
        qa = nvfp4.quantize(a)
        qb = nvfp4.quantize(b, block="2d")
        set_bytes = (m * k + n * k) / 2 + (m + n) * k / 16 + 2.0 * m * n
        sets = t.sets(set_bytes)
        ops = [(qa, qb)] + [(nvfp4.quantize(a), nvfp4.quantize(b, block="2d")) for _ in range(sets - 1)]
    except Exception as e:
        ops = None
        err = f"error: {type(e).__name__}: {e}"
    for backend in backends:
        row = _row("gemm", "nvfp4 gemm (bf16 out)", backend, shape, flops=flops)
        if not nvfp4.is_supported(backend, t.device):
            row["status"] = f"not supported on {t.device} in this build"
        elif ops is None:
            row["status"] = err
        else:
            try:
                finish(row, t.time(lambda i: nvfp4.gemm(ops[i][0], ops[i][1], backend=backend), sets))
                if bf16 is not None and bf16["status"] == "ok":
                    row.update(ratio=row["tflops"] / bf16["tflops"], ratio_to="of bf16")
            except Exception as e:
                row["status"] = f"error: {type(e).__name__}: {e}"
        rows.append(row)
    return rows


def _run(args, device: torch.device, shapes: List[dict]) -> dict:
    t = Timer(device, iters=args.iters, warmup=args.warmup, min_sample_us=args.min_sample_us,
              cpu_threads=args.cpu_threads)
    if t.on_gpu:
        props = torch.cuda.get_device_properties(t.device)
        cc = props.major * 10 + props.minor
        name = props.name
        print(f"device: {name} (sm_{cc}), L2 {t.l2_bytes / 2**20:.0f} MiB; nvfp4 {nvfp4.__version__}, "
              f"torch {torch.__version__}; {t.iters} iters (median), warm-up {t.warmup}")
    else:
        cc, name = 0, "cpu"
        print(f"device: CPU, {t.cpu_threads} torch thread(s); nvfp4 {nvfp4.__version__}, torch {torch.__version__}; "
              f"{t.iters} iters (median), warm-up {t.warmup}")
    rows = [_copy_baseline(t)]
    copy_gbps = rows[0]["gbps"]
    print(f"copy baseline: {copy_gbps:.0f} GB/s (read + write)")
    if "quant" in args.ops:
        done = set()
        for s in shapes:
            for vname, which, kw in _QUANT_VARIANTS:
                r, c = (s["m"], s["k"]) if which == "x" else (s["n"], s["k"])
                if (vname, r, c) in done:
                    continue
                done.add((vname, r, c))
                rows.append(_bench_quant(t, vname, kw, r, c, s, copy_gbps))
                if t.on_gpu:
                    torch.cuda.empty_cache()
    if "gemm" in args.ops:
        for s in shapes:
            rows.extend(_bench_gemms(t, s, args.backends))
            if t.on_gpu:
                torch.cuda.empty_cache()
    return {"mode": "gpu" if t.on_gpu else "cpu", "device": name, "cc": cc, "copy_gbps": copy_gbps, "rows": rows}


# ----------------------------------------------------------------------------------------
# output
# ----------------------------------------------------------------------------------------

def _print_table(rows: List[dict]) -> None:
    for section, title in (("quant", "quantization"), ("gemm", "gemm")):
        sel = [r for r in rows if r["section"] == section]
        if not sel:
            continue
        gemm = section == "gemm"
        print(f"\n{title:<28} {'backend':<12} {'M x N x K' if gemm else 'tensor':<22} {'median us':>10} "
              f"{'min us':>10} {'TFLOP/s' if gemm else 'GB/s':>9} ratio")
        for r in sel:
            shape = f"{r['m']} x {r['n']} x {r['k']}" if gemm else f"{r['m']} x {r['k']}"
            if r["status"] != "ok":
                print(f"{r['op']:<28} {r['backend']:<12} {shape:<22}  {r['status']}")
                continue
            ratio = f"{r['ratio']:.2f}x {r['ratio_to']}" if r["ratio"] else ""
            fig = _fmt(r["tflops"] if gemm else r["gbps"])
            print(f"{r['op']:<28} {r['backend']:<12} {shape:<22} {r['median_us']:>10.2f} {r['min_us']:>10.2f} "
                  f"{fig:>9} {ratio}")


def _print_summary(rows: List[dict]) -> None:
    """One line per GEMM shape: every method's TFLOP/s side by side."""
    ok = [r for r in rows if r["section"] == "gemm" and r["status"] == "ok"]
    cols = list(dict.fromkeys(r["backend"] for r in ok))
    by_shape: Dict[tuple, Dict[str, float]] = {}
    for r in ok:
        by_shape.setdefault((r["m"], r["n"], r["k"], r["models"]), {})[r["backend"]] = r["tflops"]
    if not by_shape:
        return
    print(f"\nsummary (TFLOP/s)  {'M x N x K':<22}" + "".join(f"{c:>12}" for c in cols) + "  best nvfp4 / bf16  layer")
    for (m, n, k, models), v in by_shape.items():
        best = max(v.get("cutlass", 0.0), v.get("cudnn", 0.0), v.get("reference", 0.0))
        speed = f"{best / v['torch-bf16']:.2f}x" if best and v.get("torch-bf16") else "-"
        cells = "".join(f"{_fmt(v[c]):>12}" if c in v else f"{'-':>12}" for c in cols)
        print(f"{'':<19}{f'{m} x {n} x {k}':<22}{cells}  {speed:>17}  {models}")


def _write_csv(path: str, result: dict) -> None:
    keys = ["device", "cc", "section", "op", "backend", "m", "n", "k", "models", "bytes", "flops", "iters", "reps",
            "sets", "median_us", "min_us", "mean_us", "gbps", "tflops", "ratio", "ratio_to", "status"]

    def esc(v):
        s = str(v)
        return '"' + s.replace('"', '""') + '"' if any(c in s for c in ',"\n') else s

    with open(path, "w") as f:
        f.write(",".join(keys) + "\n")
        for r in result["rows"]:
            full = dict(r, device=result["device"], cc=result["cc"])
            f.write(",".join(esc(full[k]) for k in keys) + "\n")
    print(f"wrote {path}")


def _plot(path: str, result: dict) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib is not installed: no plot)")
        return
    gemm = [r for r in result["rows"] if r["section"] == "gemm" and r["status"] == "ok"]
    if not gemm:
        return
    shapes = list(dict.fromkeys((r["m"], r["n"], r["k"]) for r in gemm))
    methods = list(dict.fromkeys(r["backend"] for r in gemm))
    width = 0.8 / max(len(methods), 1)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(shapes) * max(len(methods), 1) * 0.5 + 2), 4.5))
    for j, meth in enumerate(methods):
        vals = {(r["m"], r["n"], r["k"]): r["tflops"] for r in gemm if r["backend"] == meth}
        xs = [i + (j - (len(methods) - 1) / 2) * width for i in range(len(shapes))]
        ax.bar(xs, [vals.get(s, 0.0) for s in shapes], width, label=meth)
    ax.set_xticks(range(len(shapes)))
    ax.set_xticklabels([f"{m}x{n}x{k}" for m, n, k in shapes], rotation=45, ha="right", fontsize=7)
    ax.set_ylabel("TFLOP/s")
    ax.set_yscale("log")
    ax.set_title(f"nvfp4 GEMMs vs torch, {result['device']}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m nvfp4.bench", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", help="GEMM shapes MxNxK[,...] instead of the shapes file")
    p.add_argument("--shapes-file", default=None, help=f"JSON of model shapes (default: {SHAPES_FILE}; "
                   "on the CPU, small built-in shapes unless this is given)")
    p.add_argument("--quick", action="store_true",
                   help="first model only, smallest and largest M (CPU: the first shape only)")
    p.add_argument("--ops", default="quant,gemm", help="what to time: quant, gemm or both (default)")
    p.add_argument("--backends", default=None,
                   help="nvfp4 GEMM backends to time (default: cutlass,cudnn on a GPU, reference on the CPU)")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto",
                   help="where to run (auto: the GPU when this build and torch can use one)")
    p.add_argument("--iters", type=int, default=30, help="samples per op; the median is reported")
    p.add_argument("--warmup", type=int, default=5, help="untimed calls before the samples")
    p.add_argument("--min-sample-us", type=float, default=200.0, help="a sample repeats the call to last this long")
    p.add_argument("--cpu-threads", type=int, default=1, help="torch threads for the CPU timings (default 1)")
    p.add_argument("--json", help="write every row (and the device) as JSON")
    p.add_argument("--csv", help="write every row as CSV (the columns of nvfp4-bench --csv)")
    p.add_argument("--plot", default="nvfp4_bench.png", help="GEMM bar chart (needs matplotlib; '' for none)")
    args = p.parse_args(argv)
    args.ops = set(filter(None, args.ops.split(",")))
    bad = args.ops - {"quant", "gemm"}
    if bad or not args.ops:
        p.error(f"--ops: expected quant, gemm or both, got {','.join(sorted(bad)) or 'nothing'}")
    args.iters = max(1, args.iters)

    info = nvfp4.device_info()
    why = None
    if not info.get("build_cuda_archs"):
        why = "this nvfp4 build has no CUDA code"
    elif not torch.cuda.is_available():
        why = "no CUDA device visible to torch"
    if args.device == "cuda" and why:
        p.error(f"--device cuda: {why}")
    on_cpu = args.device == "cpu" or (args.device == "auto" and why is not None)
    if on_cpu:
        print(f"{why or '--device cpu'}: timing the CPU reference backend. These numbers say nothing about GPU "
              "performance; run on a GPU for the real figures.")
    backends = args.backends if args.backends is not None else ("reference" if on_cpu else "cutlass,cudnn")
    args.backends = [b for b in backends.split(",") if b]
    bad = [b for b in args.backends if b not in ("reference", "cutlass", "cudnn")]
    if bad:
        p.error(f"--backends: unknown backend(s) {', '.join(bad)} (reference, cutlass, cudnn)")

    if args.shapes:
        shapes = _parse_shapes(args.shapes)
    elif on_cpu and not args.shapes_file:
        shapes = [{"m": m, "n": n, "k": k, "models": [f"cpu {m}x{n}x{k}"]} for m, n, k in _CPU_SHAPES]
    else:
        shapes = load_shapes(args.shapes_file, args.quick)
    if on_cpu and args.quick:
        shapes = shapes[:1]
    device = torch.device("cpu") if on_cpu else torch.device("cuda", torch.cuda.current_device())
    result = _run(args, device, shapes)
    result.update(date=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), nvfp4=nvfp4.__version__,
                  torch=torch.__version__, shapes_file=str(args.shapes_file or SHAPES_FILE),
                  shapes=len(shapes), build_cuda_archs=info.get("build_cuda_archs"))
    if on_cpu:
        result["note"] = why or "--device cpu"
    _print_table(result["rows"])
    _print_summary(result["rows"])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
        print(f"wrote {args.json}")
    if args.csv:
        _write_csv(args.csv, result)
    if args.plot:
        _plot(args.plot, result)
    errors = [r for r in result["rows"] if r["status"].startswith("error")]
    if errors:
        print(f"{len(errors)} row(s) failed")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
