"""FP4 GEMM throughput: nvfp4 backends next to cuBLAS BF16 and FP8, measured in one run.

For each shape (M, N, K), D[M,N] = A[M,K] @ B[N,K]^T:
  bf16       torch.matmul on BF16 (cuBLAS), the baseline of every ratio
  fp8        torch._scaled_mm on E4M3 with per-tensor scales (cuBLASLt)
  <backend>  nvfp4.gemm on pre-quantized NVFP4 operands (cutlass, cudnn)
  cutlass-2step  on Hopper and M <= 128: the same with the fused small-M kernel disabled
  quant+<b>  the full path: nvfp4.quantize(A) (BF16 activations) + nvfp4.gemm
  mx-<b>     nvfp4.gemm_mxfp4 on pre-quantized MXFP4 operands (K % 32 == 0)
  on Hopper, nvfp4_gemm_decoded with operands given by their decoded BF16 values (what the
  Linear's decoded road hands the GEMM; cutlass backend):
  dec-AB     A and B decoded: the CUTLASS GEMM alone (no decode pass)
  dec-B      A as codes, B decoded: decode pass of A + CUTLASS (NVFP4_SM90_RS=0)
  rs         A as codes, B decoded, through the kernel that decodes A in registers
             (NVFP4_SM90_RS=1: at every shape; the library itself takes it where N <= 768)
  bf16-dec   cuBLAS (torch.mm) on those decoded values: dec-AB's GEMM engine against cuBLAS's
             on the same numbers (the bf16 row's random operands draw more power)
Timing: nvfp4._timing.Timer (the timer of every nvfp4 benchmark): CUDA events, warm-up,
inputs rotated through enough copies to exceed L2 three times (so small problems read
their operands from memory as in a real model), the median of several timed batches.
Shapes: 8192^3 and Llama-3-8B projections (N x K = 4096x4096, 14336x4096, 4096x14336,
128256x4096) for M in {16, 32, 128, 2048, 4096, 8192}. Without a GPU (or --device cpu)
the CPU reference backend is timed against torch's CPU matmul with torch.utils.benchmark,
on small shapes unless --shapes says otherwise; those figures say nothing about GPUs.

Two timings per method:
  us        eager: a Python loop of calls, what one call costs a PyTorch program that
            launches it directly (host overhead included when it exceeds the GPU time)
  graph us  the same calls captured in a CUDA graph and replayed: GPU time per call with
            the launch overhead of a graph (how decoding loops and CUDA-graph training
            steps run); the speed targets compare this column
--kernels adds each nvfp4 method's GPU time per kernel (torch.profiler), e.g. the FP4 ->
BF16 decode and the CUTLASS GEMM of the two-step path, next to cuBLAS's own kernel (its name
says which tile cuBLAS chose).
--out-dtype float32: every method writes FP32 (what a weight gradient into FP32 master
weights is); the baseline is then torch.mm(out_dtype=float32) on the BF16 operands (on the CPU,
where that form does not exist, a float32 matmul of the same values).

  python bench/bench_gemm.py [--quick] [--shapes 16x4096x4096,2048x4096x4096] [--kernels]
                             [--out-dtype bfloat16|float32] [--no-graph] [--json out.json]
                             [--device cpu]
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import sys

import torch

try:
    import nvfp4
    from nvfp4._gemm import clear_workspace_cache
    from nvfp4._timing import Timer
except ImportError as e:  # pragma: no cover
    sys.exit(f"bench_gemm: cannot import nvfp4 ({e})")

LLAMA_NK = [(4096, 4096), (14336, 4096), (4096, 14336), (128256, 4096)]
MS = [16, 32, 128, 2048, 4096, 8192]


CPU_SHAPES = [(16, 64, 64), (64, 128, 256)]


def make_timer(device) -> Timer:
    """Samples of ~24 ms on a GPU (5 of them, median), ~2 ms on the CPU."""
    on_gpu = torch.device(device).type == "cuda"
    return Timer(device, iters=5, warmup=3 if on_gpu else 1, min_sample_us=24000.0 if on_gpu else 2000.0,
                 l2_factor=3.0, max_sets=16)


def timed(timer: Timer, fn_for, n_sets):
    """Median seconds per call of fn_for(i) (i cycles over the input sets)."""
    return timer.time(fn_for, n_sets).median_us * 1e-6


def timed_graph(timer: Timer, fn_for, n_sets):
    """Median seconds per call of fn_for(i) replayed from one CUDA graph, or None (CPU, or
    the calls cannot be captured). The graph cycles over the input sets like the eager loop."""
    us = timer.time_graph(fn_for, n_sets)
    return None if us is None else us * 1e-6


def kernel_times(fn_for, n_sets, calls=20):
    """[(kernel name, GPU seconds per call)] of fn_for's kernels, from torch.profiler."""
    from torch.profiler import ProfilerActivity, profile
    fn_for(0)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(calls):
            fn_for(i % n_sets)
        torch.cuda.synchronize()
    tot = {}
    for ev in prof.events():
        dt = getattr(ev, "device_type", None)
        if dt is None or "CUDA" not in str(dt):
            continue
        us = getattr(ev, "device_time", None)
        if us is None:
            us = getattr(ev, "cuda_time", 0.0)
        name = ev.name if len(ev.name) <= 60 else ev.name[:57] + "..."
        tot[name] = tot.get(name, 0.0) + us
    return sorted(((k, v / 1e6 / calls) for k, v in tot.items()), key=lambda kv: -kv[1])


def n_copies(timer: Timer, bytes_per_set):
    return timer.sets(bytes_per_set)


def fmt_t(sec):
    return f"{sec * 1e6:9.1f}" if sec is not None else "        -"


@contextlib.contextmanager
def _env(env):
    """The environment variables `env` set for the duration, restored after (the GEMM knobs are
    read on each call)."""
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for key, val in saved.items():
            if val is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = val


def _quantize_decoded(x, block, codes: bool):
    """x's rowwise NVFP4 operand as nvfp4_quantize_decoded writes it (round to nearest,
    swizzled scales): (codes, scales, amax) when `codes` (else zeros), and (values bf16,
    amax) of the decoded values (E2M1 x E4M3, no per-tensor scale)."""
    from nvfp4 import _ops
    from nvfp4._format import swizzled_shape
    rows, cols = x.shape
    dev = x.device
    vals = torch.empty(rows, cols, dtype=torch.bfloat16, device=dev)
    vamax = torch.empty(1, dtype=torch.float32, device=dev)
    keep = [vals, vamax]
    c3 = (0, 0, 0)
    if codes:
        data = torch.empty(rows, cols // 2, dtype=torch.uint8, device=dev)
        scales = torch.empty(swizzled_shape(rows, cols // 16), dtype=torch.uint8, device=dev)
        amax = torch.empty(1, dtype=torch.float32, device=dev)
        keep += [data, scales, amax]
        c3 = (data.data_ptr(), scales.data_ptr(), amax.data_ptr())
    _ops.quantize_dec_raw(x.data_ptr(), _ops.DTYPE_CODE[x.dtype], rows, cols, *c3, vals.data_ptr(), vamax.data_ptr(),
                          0, 0, 0, 0, 0, block, 0, 1, 0, _ops.DEFAULT_RHT_SIGN_MASK, 0, 0, 0, *_ops._device(x), 0)
    return c3, (vals.data_ptr(), vamax.data_ptr()), keep


def decoded_variants(m, n, k, a16, b16, nb, out, record, timer):
    """dec-AB, dec-B and rs rows (see the top of the file); A 1D blocks, B 2D (a weight);
    written in out's dtype."""
    from nvfp4 import _ops
    dev = out.device
    dt = _ops._device(out)
    d_code = _ops.DTYPE_CODE[out.dtype]
    try:
        A = [_quantize_decoded(a16[i], 0, True) for i in range(nb)]
        B = [_quantize_decoded(b16[i], 1, False) for i in range(nb)]
    except Exception as ex:  # noqa: BLE001
        for name in ("dec-AB", "dec-B", "rs", "bf16-dec"):
            record(name, None, "error", f"quantize: {type(ex).__name__}: {str(ex).splitlines()[0]}")
        return
    for name, a_dec, env in (("dec-AB", True, {}), ("dec-B", False, {"NVFP4_SM90_RS": "0"}), ("rs", False, {"NVFP4_SM90_RS": "1"})):
        if k % 32 and name == "rs":
            record(name, None, "not supported", "K % 32 != 0")
            continue
        try:
            with _env(env):
                ws_bytes = _ops.gemm_dec_workspace_bytes(m, n, k, 2, out.dtype, None, a_dec, True, dev, dt)
                ws = torch.empty(max(ws_bytes, 1), dtype=torch.uint8, device=dev)

                def fn(i, a_dec=a_dec, ws=ws, ws_bytes=ws_bytes):
                    # the stream of each call (a CUDA-graph capture runs on its own)
                    a3 = (0, 0, 0) if a_dec else A[i][0]
                    a2 = A[i][1] if a_dec else (0, 0)
                    _ops.gemm_dec_raw(*a3, *a2, 0, 0, 0, *B[i][1], m, n, k, 1, 0, 0, 0, 0, 0.0, out.data_ptr(),
                                      d_code, 2, ws.data_ptr(), ws_bytes,
                                      *_ops._device(out))
                record(name, timed(timer, fn, nb), fn=fn, n_sets=nb, with_kernels=True)
        except Exception as ex:  # noqa: BLE001
            record(name, None, "error", f"{type(ex).__name__}: {str(ex).splitlines()[0]}")
    # cuBLAS on the same decoded values (no per-tensor scale): the BF16 engine against
    # CUTLASS's (dec-AB) with equal operands, whose bits change a GEMM's power and clocks
    try:
        a_vals = [A[i][2][0] for i in range(nb)]
        b_vals = [B[i][2][0] for i in range(nb)]
        if out.dtype == torch.float32:
            fn = lambda i: torch.mm(a_vals[i], b_vals[i].t(), out_dtype=torch.float32)  # noqa: E731
        else:
            fn = lambda i: torch.mm(a_vals[i], b_vals[i].t(), out=out)  # noqa: E731
        record("bf16-dec", timed(timer, fn, nb), fn=fn, n_sets=nb, with_kernels=True)
    except Exception as ex:  # noqa: BLE001
        record("bf16-dec", None, "error", f"{type(ex).__name__}: {str(ex).splitlines()[0]}")
    del A, B



def bench_shape(m, n, k, backends, timer, hopper, quick, graph=True, kernels=False, out_dtype=torch.bfloat16):
    flops = 2.0 * m * n * k
    dev = timer.device
    on_gpu = timer.on_gpu
    rows = []

    def record(method, sec, status="ok", note="", fn=None, n_sets=1, with_kernels=False):
        gsec = timed_graph(timer, fn, n_sets) if (graph and on_gpu and fn is not None and sec is not None) else None
        rows.append({"M": m, "N": n, "K": k, "method": method, "status": status, "note": note,
                     "us": None if sec is None else sec * 1e6,
                     "tflops": None if sec is None else flops / sec / 1e12,
                     "graph_us": None if gsec is None else gsec * 1e6,
                     "graph_tflops": None if gsec is None else flops / gsec / 1e12})
        if kernels and on_gpu and with_kernels and fn is not None and sec is not None:
            try:
                rows[-1]["kernels"] = [{"name": nm, "us": t * 1e6} for nm, t in kernel_times(fn, n_sets)]
            except Exception as ex:  # noqa: BLE001
                rows[-1]["kernels"] = [{"name": f"(profiler failed: {type(ex).__name__}: {ex})", "us": 0.0}]

    g = torch.Generator(device=dev).manual_seed(m * 7 + n * 3 + k)
    bytes_bf16 = (m * k + n * k) * 2
    nb = n_copies(timer, bytes_bf16)
    a16 = [torch.randn(m, k, generator=g, device=dev, dtype=torch.bfloat16) for _ in range(nb)]
    b16 = [torch.randn(n, k, generator=g, device=dev, dtype=torch.bfloat16) * 0.02 for _ in range(nb)]
    d16 = torch.empty(m, n, device=dev, dtype=torch.bfloat16)

    # cuBLAS BF16 (BF16 output, or FP32 output with --out-dtype float32)
    try:
        if out_dtype == torch.bfloat16:
            fn = lambda i: torch.matmul(a16[i], b16[i].t(), out=d16)  # noqa: E731
        elif on_gpu:
            fn = lambda i: torch.mm(a16[i], b16[i].t(), out_dtype=torch.float32)  # noqa: E731
        else:  # aten::mm.dtype has no CPU kernel: a float32 matmul of the same values
            a32 = [x.float() for x in a16]
            b32 = [x.float() for x in b16]
            d32 = torch.empty(m, n, device=dev, dtype=torch.float32)
            fn = lambda i: torch.matmul(a32[i], b32[i].t(), out=d32)  # noqa: E731
        sec = timed(timer, fn, nb)
        record("bf16", sec, fn=fn, n_sets=nb, with_kernels=True)
    except Exception as ex:  # noqa: BLE001
        record("bf16", None, "error", f"{type(ex).__name__}: {ex}")

    # cuBLASLt FP8 (E4M3, per-tensor scales)
    try:
        one = torch.ones((), device=dev, dtype=torch.float32)
        a8 = [x.to(torch.float8_e4m3fn) for x in a16]
        b8 = [(x * 50).to(torch.float8_e4m3fn) for x in b16]
        fn = lambda i: torch._scaled_mm(a8[i], b8[i].t(), scale_a=one, scale_b=one,  # noqa: E731
                                        out_dtype=out_dtype)
        sec = timed(timer, fn, nb)
        record("fp8", sec, fn=fn, n_sets=nb)
        del a8, b8
    except Exception as ex:  # noqa: BLE001
        record("fp8", None, "error", f"{type(ex).__name__}: {ex}")

    # nvfp4 operands: B as a weight (2D blocks), A as activations (1D).
    bytes_fp4 = (m * k + n * k) * 9 // 16
    nq = n_copies(timer, bytes_fp4)
    qa = [nvfp4.quantize(a16[i % nb]) for i in range(nq)]
    qb = [nvfp4.quantize(b16[i % nb], block="2d") for i in range(nq)]
    out = torch.empty(m, n, device=dev, dtype=out_dtype)

    variants = []
    for be in backends:
        variants.append((be, be, {}))
        if be == "cutlass" and hopper and m <= 128:
            if m <= 32:
                variants.append(("cutlass-ring", be, {"NVFP4_SM90_SMALL_M_KERNEL": "ring"}))
            variants.append(("cutlass-2step", be, {"NVFP4_SM90_SMALL_M": "0"}))
        if be == "cutlass" and hopper and k % 32 == 0:  # the FP4-reading kernel (opt-in while measured)
            variants.append(("cutlass-direct", be, {"NVFP4_SM90_DIRECT": "1", "NVFP4_SM90_SMALL_M": "0"}))
    for name, be, env in variants:
        if not nvfp4.is_supported(be, dev):
            try:
                nvfp4.gemm(qa[0], qb[0], backend=be, out=out)
                reason = "is_supported() says no"
            except Exception as ex:  # noqa: BLE001
                reason = str(ex).split("\n")[0]
            record(name, None, "not supported", reason)
            continue
        clear_workspace_cache()  # the knobs can change the kernel, hence the workspace
        try:
            with _env(env):
                fn = lambda i: nvfp4.gemm(qa[i], qb[i], backend=be, out=out)  # noqa: E731
                sec = timed(timer, fn, nq)
                record(name, sec, fn=fn, n_sets=nq, with_kernels=True)
                if name == be:
                    x = a16  # the full path: quantize the BF16 activations, then the GEMM
                    sec = timed(timer, lambda i: nvfp4.gemm(nvfp4.quantize(x[i % nb]), qb[i], backend=be, out=out),
                                nq)
                    record(f"quant+{be}", sec)
        except Exception as ex:  # noqa: BLE001
            record(name, None, "error", f"{type(ex).__name__}: {str(ex).splitlines()[0]}")
        finally:
            clear_workspace_cache()
    if hopper and on_gpu and "cutlass" in backends:
        decoded_variants(m, n, k, a16, b16, nb, out, record, timer)
    # MXFP4 operands (E8M0 scales over 32 values): the same GEMM through nvfp4.gemm_mxfp4,
    # for the formats comparison (on Hopper the same decode + BF16 GEMM emulation as NVFP4's).
    del qa, qb
    if k % 32 == 0:
        bytes_mx = (m * k + n * k) * 17 // 32
        nm = n_copies(timer, bytes_mx)
        ma = [nvfp4.quantize_mxfp4(a16[i % nb]) for i in range(nm)]
        mb = [nvfp4.quantize_mxfp4(b16[i % nb]) for i in range(nm)]
        for be in backends:
            name = f"mx-{be}"
            if not nvfp4.is_supported(be, dev):
                record(name, None, "not supported", "is_supported() says no")
                continue
            try:
                fn = lambda i: nvfp4.gemm_mxfp4(ma[i], mb[i], backend=be, out=out)  # noqa: E731
                sec = timed(timer, fn, nm)
                record(name, sec, fn=fn, n_sets=nm, with_kernels=True)
            except Exception as ex:  # noqa: BLE001
                record(name, None, "error", f"{type(ex).__name__}: {str(ex).splitlines()[0]}")
        del ma, mb
    del a16, b16, out, d16
    if on_gpu:
        torch.cuda.empty_cache()
    base = next((r["us"] for r in rows if r["method"] == "bf16" and r["us"]), None)
    gbase = next((r["graph_us"] for r in rows if r["method"] == "bf16" and r["graph_us"]), None)
    for r in rows:
        r["speedup_vs_bf16"] = (base / r["us"]) if (base and r["us"]) else None
        r["graph_speedup_vs_bf16"] = (gbase / r["graph_us"]) if (gbase and r["graph_us"]) else None
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a few representative shapes (CPU: the first only)")
    ap.add_argument("--json", metavar="PATH", help="write every measurement to PATH")
    ap.add_argument("--backends", default=None,
                    help="nvfp4 backends to time, comma-separated (default: cutlass,cudnn; CPU: reference)")
    ap.add_argument("--shapes", help="comma-separated MxNxK list instead of the built-in shapes")
    ap.add_argument("--kernels", action="store_true", help="GPU time per kernel of each nvfp4 method")
    ap.add_argument("--no-graph", action="store_true", help="skip the CUDA-graph timings")
    ap.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    ap.add_argument("--out-dtype", choices=("bfloat16", "float32"), default="bfloat16",
                    help="the output dtype of every method (float32: a weight gradient's)")
    args = ap.parse_args()
    out_dtype = getattr(torch, args.out_dtype)

    gpu = torch.cuda.is_available() and bool(nvfp4.device_info()["build_cuda_archs"])
    if args.device == "cuda" and not gpu:
        sys.exit("bench_gemm: --device cuda, but no CUDA device (or a CPU-only nvfp4 build)")
    gpu = gpu and args.device != "cpu"
    timer = make_timer("cuda" if gpu else "cpu")
    if gpu:
        props = torch.cuda.get_device_properties(0)
        cc = torch.cuda.get_device_capability()
        name, sms = props.name, props.multi_processor_count
    else:
        cc, name, sms = (0, 0), "cpu", 0
        print("# bench_gemm: timing the CPU reference backend (no GPU, or --device cpu); these figures say "
              "nothing about GPU performance")
        if args.kernels:
            print("# --kernels: per-kernel GPU times need a GPU; ignored")
    hopper = cc == (9, 0)
    l2 = timer.l2_bytes
    backends = [b for b in (args.backends or ("cutlass,cudnn" if gpu else "reference")).split(",") if b]

    if args.shapes:
        try:
            shapes = [tuple(int(v) for v in sh.lower().split("x")) for sh in args.shapes.split(",") if sh]
        except ValueError:
            sys.exit(f"bench_gemm: --shapes: expected MxNxK[,MxNxK...], got {args.shapes!r}")
        if any(len(sh) != 3 for sh in shapes):
            sys.exit(f"bench_gemm: --shapes: expected MxNxK[,MxNxK...], got {args.shapes!r}")
    elif not gpu:
        shapes = CPU_SHAPES[:1] if args.quick else CPU_SHAPES
    else:
        shapes = [(8192, 8192, 8192)]
        ms = [16, 2048] if args.quick else MS
        nks = LLAMA_NK[:2] if args.quick else LLAMA_NK
        for n, k in nks:
            for m in ms:
                shapes.append((m, n, k))

    info = {"device": name, "compute_capability": f"{cc[0]}.{cc[1]}", "sms": sms,
            "l2_bytes": l2, "out_dtype": args.out_dtype, "torch": torch.__version__, "cuda": torch.version.cuda, "nvfp4": nvfp4.__version__,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    print(f"# {info['device']} (cc {info['compute_capability']}, {info['sms']} SMs), torch {info['torch']}, "
          f"CUDA {info['cuda']}, nvfp4 {info['nvfp4']}, {info['date']}, {args.out_dtype} output")
    for be in backends:
        ok = nvfp4.is_supported(be, timer.device)
        print(f"# backend {be}: {'supported' if ok else 'NOT supported on this device'}")

    all_rows = []
    hdr = (f"{'M':>6} {'N':>7} {'K':>6}  {'method':<15} {'us':>9} {'TFLOP/s':>8} {'x bf16':>7} "
           f"{'graph us':>9} {'TFLOP/s':>8} {'x bf16':>7}  note")
    print(hdr)
    print("-" * len(hdr))
    for (m, n, k) in shapes:
        try:
            rows = bench_shape(m, n, k, backends, timer, hopper, args.quick, graph=not args.no_graph,
                               kernels=args.kernels, out_dtype=out_dtype)
        except (torch.cuda.OutOfMemoryError, MemoryError) as ex:
            rows = [{"M": m, "N": n, "K": k, "method": "all", "status": "error", "note": f"out of memory: {ex}",
                     "us": None, "tflops": None, "speedup_vs_bf16": None}]
            if gpu:
                torch.cuda.empty_cache()
        for r in rows:
            tf = f"{r['tflops']:8.1f}" if r["tflops"] else "       -"
            sp = f"{r['speedup_vs_bf16']:7.2f}" if r.get("speedup_vs_bf16") else "      -"
            gtf = f"{r['graph_tflops']:8.1f}" if r.get("graph_tflops") else "       -"
            gsp = f"{r['graph_speedup_vs_bf16']:7.2f}" if r.get("graph_speedup_vs_bf16") else "      -"
            gus = r.get("graph_us")
            note = r["note"] if r["status"] != "ok" else ""
            if r["status"] != "ok":
                note = f"[{r['status']}] {note}"
            print(f"{m:>6} {n:>7} {k:>6}  {r['method']:<15} {fmt_t(r['us'] and r['us'] / 1e6)} {tf} {sp} "
                  f"{fmt_t(gus and gus / 1e6)} {gtf} {gsp}  {note}")
            for kt in r.get("kernels", []):
                print(f"{'':>22}    kernel {kt['us']:9.1f} us  {kt['name']}")
        sys.stdout.flush()
        all_rows.extend(rows)

    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump({"info": info, "results": all_rows}, f, indent=1)
        print(f"# wrote {args.json}")


if __name__ == "__main__":
    main()
