"""CUTLASS sm90 tile configurations against cuBLAS at the training step's GEMM shapes.

Times every configuration that build.sh compiled into obj/libtiles.so (the library's own
CUTLASS sm90 template at other tiles, clusters and schedules: BF16 operands, FP32
accumulation, BF16 or FP32 output, the Hopper GEMM nvfp4 runs on decoded FP4 operands) at the
fprop/dgrad (BF16 output) and wgrad (FP32 output) shapes of the 85M and 400M models of
examples/train.py, 16384 tokens, against cuBLAS on the same operands (torch.matmul, or
torch.mm(out_dtype=float32)). The operands hold values of the FP4 grid (E2M1 code times an
E4M3-like block scale), like the decoded operands. Kernel time from torch.profiler, in
interleaved rounds (order reversed every other round), medians; each output is checked
against cuBLAS's (relative error), for unwritten elements (NaN poison), and bit for bit
against the first configuration of its kind.

    bench/sm90_tiles/build.sh 16 && python3 bench/sm90_tiles/sweep.py [--rounds 5] [--only NAME,...]
    (`.ci/device_run.sh tiles` does both on a GPU machine)

Which configuration nvfp4 runs at a shape is chosen in src/gemm/sm90/sm90_gemm.cu
(pick_kernel); bench/NOTES.md records the sweeps behind those rules.
"""
import argparse
import ctypes
import json
import os
import statistics

import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from bench_linear_kernels import kernel_times  # noqa: E402  (bench/, the profiler's per-kernel times)
BF16_SHAPES = [(16384, 6144, 2048), (16384, 2048, 6144), (16384, 2048, 2048), (16384, 8192, 2048),
               (16384, 2048, 8192), (16384, 2304, 768), (16384, 768, 2304), (16384, 768, 768),
               (16384, 3072, 768), (16384, 768, 3072)]
F32_SHAPES = [(6144, 2048, 16384), (2048, 2048, 16384), (8192, 2048, 16384), (2048, 8192, 16384),
              (2304, 768, 16384), (768, 768, 16384), (3072, 768, 16384), (768, 3072, 16384)]


def fp4_grid(r, c, g):
    """E2M1 codes (uniform) times one scale per 16 values (2^e * (1 + j/8), e in [-4, 2])."""
    e2m1 = torch.tensor([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6], device="cuda")
    codes = torch.randint(0, 16, (r, c), device="cuda", generator=g)
    e = torch.randint(-4, 3, (r, c // 16, 1), device="cuda", generator=g).float()
    mant = 1 + torch.randint(0, 8, (r, c // 16, 1), device="cuda", generator=g).float() / 8
    return (e2m1[codes] * (torch.exp2(e) * mant).expand(r, c // 16, 16).reshape(r, c)).to(torch.bfloat16)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", default=os.path.join(HERE, "obj", "libtiles.so"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=10, help="calls per timing")
    ap.add_argument("--only", default=None, help="comma-separated configuration names")
    ap.add_argument("--json", default=None, help="write every row here")
    a = ap.parse_args()
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        raise SystemExit("sweep.py: needs a Hopper GPU (compute capability 9.0)")
    if a.rounds < 1 or a.calls < 1:
        raise SystemExit("--rounds and --calls: at least 1")
    lib = ctypes.CDLL(a.lib)
    cfgs = [ln.split()[0] for ln in open(os.path.join(os.path.dirname(a.lib), "configs.txt")) if ln.strip()]
    if a.only:
        unknown = set(a.only.split(",")) - set(cfgs)
        if unknown:
            raise SystemExit(f"--only: not built: {sorted(unknown)} (built: {cfgs})")
        cfgs = [c for c in cfgs if c in a.only.split(",")]
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"{torch.cuda.get_device_name(0)}, {sms} SMs; kernel time, median of {a.rounds} rounds", flush=True)
    rows = []
    for kind, shapes, odt in (("b", BF16_SHAPES, torch.bfloat16), ("f", F32_SHAPES, torch.float32)):
        mine = [c for c in cfgs if c.startswith(kind + "_")]
        if not mine:
            continue
        for m, n, k in shapes:
            g = torch.Generator(device="cuda").manual_seed(m + n + k)
            x, w = fp4_grid(m, k, g), fp4_grid(n, k, g)
            # the two amax: S_dec(1344) * S_dec(2688) = 0.5 * 1, exact
            amax = torch.tensor([1344.0, 2688.0], device="cuda")
            ref = torch.mm(x, w.t(), out_dtype=torch.float32) * 0.5
            if odt == torch.bfloat16:
                dref = torch.empty(m, n, device="cuda", dtype=odt)
                fns = {"cublas": lambda: torch.matmul(x, w.t(), out=dref)}
            else:
                fns = {"cublas": lambda: torch.mm(x, w.t(), out_dtype=torch.float32)}
            outs = {}
            for c in mine:
                ws_fn = getattr(lib, f"{c}_ws")
                ws_fn.restype = ctypes.c_size_t
                ws = torch.empty(max(ws_fn(m, n, k, sms), 16), dtype=torch.uint8, device="cuda")
                d = torch.full((m, n), float("nan"), device="cuda", dtype=odt)
                args = (ctypes.c_int(m), ctypes.c_int(n), ctypes.c_int(k), ctypes.c_void_p(x.data_ptr()),
                        ctypes.c_void_p(w.data_ptr()), ctypes.c_void_p(d.data_ptr()),
                        ctypes.c_void_p(amax.data_ptr()), ctypes.c_void_p(ws.data_ptr()), ctypes.c_int(sms),
                        ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
                run = getattr(lib, f"{c}_run")
                rc = run(*args)
                torch.cuda.synchronize()
                if rc != 0:  # the library's status code; its message went to stderr
                    print(f"  {c}: cannot run {m}x{n}x{k} (nvfp4 status {rc})", flush=True)
                    continue
                outs[c] = (d, ws)
                fns[c] = lambda run=run, args=args: run(*args)
            times = {c: [] for c in fns}
            names = {}
            for r in range(a.rounds):
                for c in (list(fns) if r % 2 == 0 else list(reversed(fns))):
                    per_kernel = kernel_times(fns[c], a.calls)  # {name: (µs per call, launches per call)}
                    times[c].append(sum(us for us, _ in per_kernel.values()))
                    if c == "cublas":
                        names = {name: us for name, (us, _) in per_kernel.items()}
            cub = statistics.median(times["cublas"])
            top = max(names, key=names.get) if names else "?"
            print(f"{'bf16' if kind == 'b' else 'fp32'} out {m}x{n}x{k}: cuBLAS {cub:.1f} us [{top[:80]}]", flush=True)
            first = next(iter(outs), None)
            for c, (d, _) in outs.items():
                med = statistics.median(times[c])
                err = ((d.float() - ref).norm() / ref.norm()).item()
                unwritten = int(torch.isnan(d).sum().item())
                same = bool(torch.equal(d, outs[first][0]))
                spread = (max(times[c]) - min(times[c])) / med
                print(f"   {c:22s} {med:9.1f} us  {med / cub:6.3f}x cuBLAS  spread {spread:.3f}  rel.err {err:.1e}"
                      f"  unwritten {unwritten}  same bits as {first}: {same}", flush=True)
                rows.append(dict(out=str(odt), m=m, n=n, k=k, config=c, us=med, cublas_us=cub, ratio=med / cub,
                                 rounds=times[c], rel_err=err, unwritten=unwritten, same_as_first=same,
                                 cublas_kernel=top))
            del outs, fns
            torch.cuda.empty_cache()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
