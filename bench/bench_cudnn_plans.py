#!/usr/bin/env python3
"""Every cuDNN engine for the BF16 matmul graph the Hopper cuDNN runner builds, timed.

On Hopper the cudnn backend decodes both FP4 operands to BF16 and hands cuDNN a BF16
matmul graph (A [M, K] row-major, B [N, K] row-major, i.e. K-major, FP32 accumulation),
with the epilogue (times alpha, to the output dtype) either fused into the graph or
applied afterwards. Which engine runs is cuDNN's heuristic's first choice. This benchmark
builds that graph with the cuDNN Python frontend, builds every plan the heuristics
(modes A and B) and the fallback list offer, times each one, and prints each plan's time
beside cuBLAS's (torch.matmul) in the same run:

    python3 bench/bench_cudnn_plans.py                      # 8192^3, GPU
    python3 bench/bench_cudnn_plans.py --shapes 8192x4096x14336,2048x4096x4096 --json out.json

Needs a CUDA GPU, torch and the nvidia-cudnn-frontend wheel (its `cudnn` module).
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import torch


def time_ms(fn, warmup, iters):
    for _ in range(warmup):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(iters):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def build(cudnn, handle, a, b_kn, out_dtype, fused_alpha, mode):
    """The runner's graph; mode: a heur_mode member or 'fallback'. Returns (graph, tensors)."""
    g = cudnn.pygraph(io_data_type=cudnn.data_type.BFLOAT16, intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT, handle=handle)
    ta, tb = g.tensor_like(a), g.tensor_like(b_kn)
    t = g.matmul(name="matmul", A=ta, B=tb, compute_data_type=cudnn.data_type.FLOAT)
    talpha = None
    if fused_alpha:
        t.set_data_type(cudnn.data_type.FLOAT)
        talpha = g.tensor(name="alpha", dim=[1, 1, 1], stride=[1, 1, 1], data_type=cudnn.data_type.FLOAT)
        t = g.mul(t, talpha, name="scale_alpha", compute_data_type=cudnn.data_type.FLOAT)
    t.set_output(True).set_data_type(out_dtype)
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([mode])
    g.check_support()
    built = []
    for i in range(g.get_execution_plan_count()):
        try:  # plans that decline (or need what this machine lacks) are left out
            g.build_plan_at_index(i)
            built.append(i)
        except Exception as e:
            print(f"    plan {i} ({g.get_plan_name_at_index(i)}) did not build: {str(e)[:100]}")
    return g, ta, tb, talpha, t, built


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="8192x8192x8192", help="comma-separated MxNxK")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--json", default=None, help="write the results here")
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_cudnn_plans: needs a CUDA GPU")
        return 0
    try:
        import cudnn
    except ImportError as e:
        print(f"bench_cudnn_plans: the cuDNN Python frontend is not installed ({e})")
        return 1
    dev = torch.device("cuda")
    handle = cudnn.create_handle()
    cudnn.set_stream(handle=handle, stream=torch.cuda.current_stream().cuda_stream)
    modes = [("A", cudnn.heur_mode.A), ("B", cudnn.heur_mode.B), ("fallback", cudnn.heur_mode.FALLBACK)]
    res = {"device": torch.cuda.get_device_name(), "cudnn": cudnn.backend_version(), "torch": torch.__version__,
           "date": time.strftime("%Y-%m-%d"), "shapes": {}}
    print(f"{res['device']}, cuDNN {res['cudnn']}, torch {torch.__version__}")
    for shape in a.shapes.split(","):
        m, n, k = (int(v) for v in shape.lower().split("x"))
        g = torch.Generator(device=dev).manual_seed(0)
        A = torch.randn(1, m, k, device=dev, dtype=torch.bfloat16, generator=g)
        B = torch.randn(1, n, k, device=dev, dtype=torch.bfloat16, generator=g)
        B_kn = B.transpose(1, 2)  # [1, K, N] with strides (N*K, 1, K): the runner's K-major B
        alpha = torch.ones(1, 1, 1, device=dev, dtype=torch.float32)
        flops = 2.0 * m * n * k
        cublas_ms = time_ms(lambda: torch.matmul(A[0], B[0].t()), a.warmup, a.iters)
        entry = {"cublas_ms": cublas_ms, "cublas_tflops": flops / cublas_ms / 1e9, "graphs": {}}
        print(f"\n{m}x{n}x{k}: cuBLAS BF16 (torch.matmul) {cublas_ms:.3f} ms, {flops / cublas_ms / 1e9:.0f} TFLOP/s")
        for gname, out_dtype, fused in (("bf16 out, alpha fused", cudnn.data_type.BFLOAT16, True),
                                        ("fp32 out (separate epilogue)", cudnn.data_type.FLOAT, False)):
            D = torch.empty(1, m, n, device=dev, dtype=torch.bfloat16 if fused else torch.float32)
            rows = []
            for mname, mode in modes:
                try:
                    graph, ta, tb, talpha, td, built = build(cudnn, handle, A, B_kn, out_dtype, fused, mode)
                except Exception as e:  # a mode with no plan is a result too
                    rows.append({"mode": mname, "error": str(e)[:200]})
                    print(f"  [{gname}] heuristics {mname}: no plan ({str(e)[:120]})")
                    continue
                pack = {ta: A, tb: B_kn, td: D}
                if talpha is not None:
                    pack[talpha] = alpha
                for i in built:
                    try:
                        name = graph.get_plan_name_at_index(i)
                        ws = torch.empty(max(graph.get_workspace_size_plan_at_index(i), 1), device=dev,
                                         dtype=torch.uint8)
                        ms = time_ms(lambda: graph.execute_plan_at_index(pack, ws, i, handle=handle),
                                     a.warmup, a.iters)
                    except Exception as e:
                        rows.append({"mode": mname, "index": i, "error": str(e)[:200]})
                        continue
                    ratio = cublas_ms / ms
                    rows.append({"mode": mname, "index": i, "plan": name, "ms": ms, "ratio_to_cublas": ratio})
                    first = " <- the heuristic's first choice" if i == 0 else ""
                    print(f"  [{gname}] {mname}#{i:<2d} {ms:8.3f} ms  {ratio:5.2f} of cuBLAS  {name}{first}")
            timed = [r for r in rows if "ms" in r]
            if timed:
                best = min(timed, key=lambda r: r["ms"])
                firstA = next((r for r in timed if r["mode"] == "A" and r["index"] == 0), None)
                line = f"  [{gname}] best {best['ms']:.3f} ms ({best['ratio_to_cublas']:.2f} of cuBLAS, " \
                       f"{best['mode']}#{best['index']} {best['plan']})"
                if firstA:
                    line += f"; heuristic A's first {firstA['ratio_to_cublas']:.2f} of cuBLAS"
                print(line)
            entry["graphs"][gname] = rows
        res["shapes"][shape] = entry
        del A, B, D
        torch.cuda.empty_cache()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
