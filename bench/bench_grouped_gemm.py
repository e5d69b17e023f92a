"""Grouped (MoE) FP4 GEMM: nvfp4.grouped_gemm next to torch._grouped_mm in BF16 and per-expert
Python loops, measured in one run, on real expert shapes with realistic routing imbalance.

Shape sets (E experts, weights [E, N, K], top-k routing):
  qwen3-30b-a3b  E=128, N=768,   K=2048, top-8  (an expert's gate/up projection)
  mixtral-8x7b   E=8,   N=14336, K=4096, top-2
for T routed rows (tokens x top-k) in --tokens (default 4096, 16384, 65536). Routing: the rows
are split over the experts by a multinomial draw from expert popularities p ~ Dirichlet(alpha)
(--alpha, default 1.0: a few busy experts, some idle; larger alpha is more balanced), seeded.
Forms (--forms): fprop, y [T, N] = x [T, K] @ W[g]ᵀ per group; wgrad, dW [E, N, K] = dyᵀ x per
group (the ragged dimension is K).

Methods (same operands, same routing):
  bf16-grouped    torch._grouped_mm on BF16 (the baseline of every ratio)
  bf16-loop       a Python loop of BF16 matmuls over the experts (host offsets)
  nvfp4-grouped   nvfp4.grouped_gemm on pre-quantized operands (FP4 -> BF16 decode included)
  nvfp4-loop      a Python loop of nvfp4.gemm over the experts (pre-quantized per expert)
  quant+nvfp4-grouped  nvfp4.grouped_quantize of the BF16 activations + nvfp4.grouped_gemm
Each row prints us, TFLOP/s (routed work: 2 T N K) and the ratio bf16-grouped / method (> 1:
faster than BF16); the CUDA-graph column replays the calls from one graph. Targets (Hopper,
issue 22): nvfp4-grouped >= 0.85 of bf16-grouped at >= 16k rows, >= 5x the nvfp4 loop.
Timing: nvfp4._timing.Timer (CUDA events, warm-up, inputs rotated past L2 where memory allows).
Without a GPU (or --device cpu) the reference backend runs on tiny shapes: those figures say
nothing about GPUs.

  python bench/bench_grouped_gemm.py [--shapes qwen3-30b-a3b,mixtral-8x7b] [--tokens 16384]
                                     [--forms fprop,wgrad] [--alpha 1.0] [--no-graph] [--json out.json]
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys

import torch

try:
    import nvfp4
    from nvfp4._timing import Timer
except ImportError as e:  # pragma: no cover
    sys.exit(f"bench_grouped_gemm: cannot import nvfp4 ({e})")

SHAPES = {"qwen3-30b-a3b": (128, 768, 2048, 8), "mixtral-8x7b": (8, 14336, 4096, 2)}
CPU_SHAPES = {"tiny": (4, 32, 64, 2)}
TOKENS = [4096, 16384, 65536]


def routing(t: int, e: int, alpha: float, seed: int):
    """Rows per expert: multinomial(T, p), p ~ Dirichlet(alpha), seeded."""
    with torch.random.fork_rng(devices=[]):  # Dirichlet samples from the global generator
        torch.manual_seed(seed)
        p = torch.distributions.Dirichlet(torch.full((e,), float(alpha))).sample()
        idx = torch.multinomial(p, t, replacement=True)
    return torch.bincount(idx, minlength=e).tolist()


def make_timer(device) -> Timer:
    on_gpu = torch.device(device).type == "cuda"
    return Timer(device, iters=5, warmup=2 if on_gpu else 1, min_sample_us=20000.0 if on_gpu else 2000.0,
                 l2_factor=3.0, max_sets=4)


def bench(name, e, n, k, t, form, alpha, timer, backend, graph):
    dev = timer.device
    sizes = routing(t, e, alpha, seed=t * 131 + e)
    offs = torch.tensor(torch.tensor(sizes).cumsum(0).tolist(), dtype=torch.int32, device=dev)
    bounds = [0] + torch.tensor(sizes).cumsum(0).tolist()
    g = torch.Generator(device=dev).manual_seed(7)
    x = torch.randn(t, k, generator=g, device=dev, dtype=torch.bfloat16)
    flops = 2.0 * t * n * k
    rows = []

    def record(method, fn, note=""):
        try:
            us = timer.time(fn, 1).median_us
            gus = timer.time_graph(fn, 1) if (graph and timer.on_gpu) else None
            rows.append({"shape": name, "form": form, "E": e, "N": n, "K": k, "T": t, "method": method,
                         "us": us, "tflops": flops / us / 1e6, "graph_us": gus, "note": note,
                         "max_rows": max(sizes), "empty_experts": sum(1 for s in sizes if s == 0)})
        except Exception as ex:  # noqa: BLE001  (a method that fails is a result too)
            rows.append({"shape": name, "form": form, "E": e, "N": n, "K": k, "T": t, "method": method,
                         "us": None, "error": f"{type(ex).__name__}: {str(ex).splitlines()[0][:300]}"})
        if dev.type == "cuda":
            torch.cuda.empty_cache()

    if form == "fprop":
        w = torch.randn(e, n, k, generator=g, device=dev, dtype=torch.bfloat16) * 0.02
        wt = w.transpose(-2, -1)
        record("bf16-grouped", lambda i: torch._grouped_mm(x, wt, offs=offs))
        record("bf16-loop", lambda i: [x[bounds[j]:bounds[j + 1]] @ w[j].t() for j in range(e) if sizes[j]])
        xq = nvfp4.grouped_quantize(x, offs)
        wq = nvfp4.batched_quantize(w, block="2d")
        del w, wt
        record("nvfp4-grouped", lambda i: nvfp4.grouped_gemm(xq, wq, backend=backend))
        record("quant+nvfp4-grouped",
               lambda i: nvfp4.grouped_gemm(nvfp4.grouped_quantize(x, offs), wq, backend=backend))
        qx = [xq.group(j) for j in range(e)]
        qw = [wq.expert(j) for j in range(e)]
        record("nvfp4-loop", lambda i: [nvfp4.gemm(qx[j], qw[j], backend=backend) for j in range(e) if sizes[j]])
    else:
        dy = torch.randn(t, n, generator=g, device=dev, dtype=torch.bfloat16)
        record("bf16-grouped", lambda i: torch._grouped_mm(dy.t(), x, offs=offs))
        record("bf16-loop", lambda i: [dy[bounds[j]:bounds[j + 1]].t() @ x[bounds[j]:bounds[j + 1]]
                                       for j in range(e) if sizes[j]])
        kw = dict(rowwise=False, columnwise=True, rht="columnwise")
        dq, xq = nvfp4.grouped_quantize(dy, offs, **kw), nvfp4.grouped_quantize(x, offs, **kw)
        record("nvfp4-grouped", lambda i: nvfp4.grouped_gemm(dq.T, xq.T, out_dtype=torch.float32, backend=backend))
        record("quant+nvfp4-grouped", lambda i: nvfp4.grouped_gemm(
            nvfp4.grouped_quantize(dy, offs, **kw).T, nvfp4.grouped_quantize(x, offs, **kw).T,
            out_dtype=torch.float32, backend=backend))
        qd = [dq.group(j, columnwise=True).T for j in range(e)]
        qx = [xq.group(j, columnwise=True).T for j in range(e)]
        record("nvfp4-loop", lambda i: [nvfp4.gemm(qd[j], qx[j], out_dtype=torch.float32, backend=backend)
                                        for j in range(e) if sizes[j]])
    base = next((r["us"] for r in rows if r["method"] == "bf16-grouped" and r.get("us")), None)
    base_g = next((r["graph_us"] for r in rows if r["method"] == "bf16-grouped" and r.get("graph_us")), None)
    loop = next((r["us"] for r in rows if r["method"] == "nvfp4-loop" and r.get("us")), None)
    for r in rows:
        if r.get("us") and base:
            r["bf16_grouped_over_this"] = base / r["us"]
        if r.get("graph_us") and base_g:
            r["graph_bf16_grouped_over_this"] = base_g / r["graph_us"]
        if r.get("us") and loop:
            r["nvfp4_loop_over_this"] = loop / r["us"]
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default=None, help=f"comma-separated of {sorted(SHAPES)} (CPU: tiny)")
    ap.add_argument("--tokens", default=None, help="comma-separated routed rows (default 4096,16384,65536)")
    ap.add_argument("--forms", default="fprop,wgrad")
    ap.add_argument("--alpha", type=float, default=1.0, help="Dirichlet concentration of expert popularity")
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--no-graph", action="store_true", help="skip the CUDA-graph replay column")
    ap.add_argument("--device", default=None)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    dev = torch.device(a.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    table = SHAPES if dev.type == "cuda" else CPU_SHAPES
    names = a.shapes.split(",") if a.shapes else list(table)
    for s in names:
        if s not in {**SHAPES, **CPU_SHAPES}:
            ap.error(f"--shapes: unknown shape set {s!r}")
    tokens = [int(v) for v in a.tokens.split(",")] if a.tokens else (TOKENS if dev.type == "cuda" else [48])
    forms = [f.strip() for f in a.forms.split(",")]
    for f in forms:
        if f not in ("fprop", "wgrad"):
            ap.error(f"--forms: unknown form {f!r}")
    backend = a.backend if dev.type == "cuda" else "reference"
    timer = make_timer(dev)
    info = {"device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu", "torch": torch.__version__,
            "nvfp4": nvfp4.__version__, "date": datetime.date.today().isoformat(), "alpha": a.alpha}
    print(f"nvfp4 {nvfp4.__version__} grouped GEMM on {info['device']} (torch {torch.__version__}), "
          f"routing Dirichlet alpha {a.alpha}")
    print(f"{'shape':14s} {'form':5s} {'T':>6s} {'method':20s} {'us':>10s} {'TFLOP/s':>8s} {'graph us':>10s} "
          f"{'bf16/this':>9s} {'loop/this':>9s}")
    results = []
    for s in names:
        e, n, k, top = {**SHAPES, **CPU_SHAPES}[s]
        for form in forms:
            for t in tokens:
                rows = bench(s, e, n, k, t, form, a.alpha, timer, backend, not a.no_graph)
                for r in rows:
                    if r.get("us") is None:
                        print(f"{s:14s} {form:5s} {t:6d} {r['method']:20s} ERROR {r.get('error')}")
                        continue
                    gu = f"{r['graph_us']:10.1f}" if r.get("graph_us") else f"{'-':>10s}"
                    ratio = r.get("bf16_grouped_over_this")
                    loop = r.get("nvfp4_loop_over_this")
                    print(f"{s:14s} {form:5s} {t:6d} {r['method']:20s} {r['us']:10.1f} {r['tflops']:8.1f} {gu} "
                          f"{ratio if ratio else float('nan'):9.3f} {loop if loop else float('nan'):9.2f}", flush=True)
                results.extend(rows)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({**info, "results": results}, f, indent=1)
        print(f"wrote {a.json}")
    return results


if __name__ == "__main__":
    main()
