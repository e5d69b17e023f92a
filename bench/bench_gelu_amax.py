#!/usr/bin/env python3
"""Prices the fused-producer road at the MLP's activation before it is built: a GELU that,
as it stores its output, also computes the two maxima the NVFP4 quantization of that output
needs — max |x| (the rowwise output's amax) and max |H x| over 16-row column groups (the
columnwise RHT output's amax, H the recipe's 16-point transform with its row signs) — against
the same GELU without them followed by a separate pass over its output for those maxima, which
is what a training step runs today (torch's or Inductor's GELU, then the library's amax pass).
The forward's output is X of the second MLP Linear, the backward's (GELU backward) dY of the
first: at the 85M model's shapes the largest X and the largest dY of a block, half the bytes
the amax pass reads a step (bench/NOTES.md, 2026-11-29).

The GELU is the erf form (F.gelu's default; examples/train.py's model uses the tanh form).
The five kernels are Triton prototypes written alike (one program per 16-row group x BLOCK_N
columns, its 16 rows as 16 vectors, the transform as its four add/subtract stages written
out, maxima by atomics on their bits), so their ratios compare fused with unfused within one
code style; they are not the library's kernels and not bit-exact with them, and on an H200
(2026-11-29) their own GELU ran at about half of torch's kernel's speed, so they do not price
a library kernel yet (bench/NOTES.md). Beside them, in the same run: torch's own GELU and
GELU-backward kernels, a read of the output (torch.amax) and a copy of it. Times from
triton.testing.do_bench (median, the L2 flushed between calls). The maxima are checked against
a float32 reference of the same definition (to a relative 1e-6: the reference sums in another
order), which a CPU test holds equal to the library's quantization amaxes.

--cuda adds the form a library kernel would take (bench/gelu_amax/gelu_amax.cu, built here
with nvcc): the tanh-form GELU and its backward in the amax pass's work unit, with the two
maxima as one partial per CTA, timed against torch's tanh-form kernels plus the library's amax
pass over the same output (nvfp4.quantize with the columnwise RHT, less the same call given
its amax: the pass the given amax skips), and its output bits compared with torch's.

    python3 bench/bench_gelu_amax.py [--shapes 16384x3072 16384x8192] [--cuda] [--json out.json]

Needs a CUDA GPU and Triton (shipped with PyTorch's CUDA builds).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile

import torch

# RHT row signs: any fixed pattern prices the same work (the recipe's mask is a seed's)
SIGN_MASK = 0b1011_0010_0110_1001


def _kernel_source() -> str:
    """The Triton module text: 16 row vectors and the four butterfly stages written out."""
    def load_rows(name, ptr):
        return [f"    {name}{i} = tl.load({ptr} + (r0 + {i}) * stride + cols, mask=cm & (r0 + {i} < M), "
                f"other=0.0).to(tl.float32)" for i in range(16)]

    def maxima(name):
        # the stored BF16 values (x), their signs flipped by row, then the scaled transform
        out = []
        acc = f"tl.abs({name}0)"
        for i in range(1, 16):
            acc = f"tl.maximum({acc}, tl.abs({name}{i}))"
        out.append(f"    m_plain = tl.max({acc}, axis=0)")
        names = []
        for i in range(16):
            neg = (SIGN_MASK >> i) & 1
            out.append(f"    t{i} = {'-' if neg else ''}{name}{i}")
            names.append(f"t{i}")
        h, st = 1, 0
        while h < 16:
            new = list(names)
            for i in range(16):
                if i & h == 0:
                    a, b = names[i], names[i + h]
                    out.append(f"    s{st}_{i} = {a} + {b}")
                    out.append(f"    s{st}_{i + h} = {a} - {b}")
                    new[i], new[i + h] = f"s{st}_{i}", f"s{st}_{i + h}"
            names, h, st = new, h * 2, st + 1
        acc = f"tl.abs({names[0]})"
        for n in names[1:]:
            acc = f"tl.maximum({acc}, tl.abs({n}))"
        out.append(f"    m_rht = tl.max({acc}, axis=0) * 0.25")
        out.append("    tl.atomic_max(amax_ptr, m_plain.to(tl.int32, bitcast=True))")
        out.append("    tl.atomic_max(amax_ptr + 1, m_rht.to(tl.int32, bitcast=True))")
        return out

    head = ["    g = tl.program_id(0)", "    r0 = g * 16",
            "    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)", "    cm = cols < N"]

    def store_rows(name, ptr):
        # store in BF16, then continue from the stored values (the quantization reads those)
        out = []
        for i in range(16):
            out.append(f"    {name}{i} = {name}{i}.to(tl.bfloat16)")
            out.append(f"    tl.store({ptr} + (r0 + {i}) * stride + cols, {name}{i}, mask=cm & (r0 + {i} < M))")
            out.append(f"    {name}{i} = {name}{i}.to(tl.float32)")
        return out

    def gelu(src, dst):
        return [f"    {dst}{i} = 0.5 * {src}{i} * (1.0 + tl.math.erf({src}{i} * 0.7071067811865476))"
                for i in range(16)]

    def gelu_bwd(dx, hh, dst):
        return [f"    {dst}{i} = {dx}{i} * (0.5 * (1.0 + tl.math.erf({hh}{i} * 0.7071067811865476)) + {hh}{i} * "
                f"0.3989422804014327 * tl.exp(-0.5 * {hh}{i} * {hh}{i}))" for i in range(16)]

    sig = "(M, N, stride, BLOCK_N: tl.constexpr)"
    k = ["import triton", "import triton.language as tl", ""]
    k += ["@triton.jit", "def gelu_fwd(h_ptr, x_ptr, " + sig[1:] + ":"] + head + load_rows("h", "h_ptr") + \
        gelu("h", "x") + store_rows("x", "x_ptr") + [""]
    k += ["@triton.jit", "def gelu_fwd_amax(h_ptr, x_ptr, amax_ptr, " + sig[1:] + ":"] + head + \
        load_rows("h", "h_ptr") + gelu("h", "x") + store_rows("x", "x_ptr") + maxima("x") + [""]
    k += ["@triton.jit", "def amax_pass(x_ptr, amax_ptr, " + sig[1:] + ":"] + head + load_rows("x", "x_ptr") + \
        maxima("x") + [""]
    k += ["@triton.jit", "def gelu_bwd(dx_ptr, h_ptr, d_ptr, " + sig[1:] + ":"] + head + \
        load_rows("dx", "dx_ptr") + load_rows("h", "h_ptr") + gelu_bwd("dx", "h", "d") + store_rows("d", "d_ptr") + [""]
    k += ["@triton.jit", "def gelu_bwd_amax(dx_ptr, h_ptr, d_ptr, amax_ptr, " + sig[1:] + ":"] + head + \
        load_rows("dx", "dx_ptr") + load_rows("h", "h_ptr") + gelu_bwd("dx", "h", "d") + store_rows("d", "d_ptr") + \
        maxima("d") + [""]
    return "\n".join(k) + "\n"


def _load_kernels():
    # Triton reads a kernel's source from its file: write the module out, then import it
    d = tempfile.mkdtemp(prefix="nvfp4_gelu_amax_")
    path = os.path.join(d, "gelu_amax_kernels.py")
    with open(path, "w") as f:
        f.write(_kernel_source())
    spec = importlib.util.spec_from_file_location("gelu_amax_kernels", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


CUDA_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gelu_amax", "gelu_amax.cu")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def nvcc_command(out: str, arch: str, shared: bool = True) -> list:
    """The nvcc command that builds gelu_amax.cu (a shared library, or with shared=False a
    cubin: what the CPU test compiles)."""
    import shutil
    home = os.environ.get("CUDA_HOME")
    nvcc = (os.path.join(home, "bin", "nvcc") if home else None) or shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    kind = ["-shared", "-Xcompiler", "-fPIC"] if shared else ["-cubin"]
    return [nvcc, "-std=c++17", "-O3", f"-arch={arch}", *kind, "-I" + os.path.join(REPO, "src"),
            "-I" + os.path.join(REPO, "include"), "-o", out, CUDA_SOURCE]


def _load_cuda():
    import ctypes
    import subprocess
    major, minor = torch.cuda.get_device_capability()
    arch = f"sm_{major}{minor}" + ("a" if major == 9 else "")
    out = os.path.join(tempfile.mkdtemp(prefix="nvfp4_gelu_amax_cu_"), "libgelu_amax.so")
    subprocess.run(nvcc_command(out, arch), check=True)
    lib = ctypes.CDLL(out)
    lib.gelu_amax_launch.restype = ctypes.c_int
    lib.gelu_amax_launch.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                     ctypes.c_int64, ctypes.c_int64, ctypes.c_uint32, ctypes.c_int, ctypes.c_void_p]
    return lib


def _cuda_rows(lib, m, n, h, dx, do_bench, ok_list):
    """The CUDA form against torch's tanh-form kernels plus the library's amax pass."""
    import nvfp4
    mask = SIGN_MASK
    units = (n // 4) * ((m + 15) // 16)
    grid = max(1, min(1022, (units + 255) // 256))
    parts = torch.zeros(2 * grid, device=h.device, dtype=torch.int32)
    x = torch.empty_like(h)
    d = torch.empty_like(h)

    def run(bwd, out):
        a = dx if bwd else h
        rc = lib.gelu_amax_launch(int(bwd), a.data_ptr(), h.data_ptr(), out.data_ptr(), parts.data_ptr(), m, n, mask,
                                  grid, torch.cuda.current_stream().cuda_stream)
        if rc != 0:
            raise RuntimeError(f"gelu_amax_launch: CUDA error {rc}")

    row = {}
    row["cuda gelu+amax"] = do_bench(lambda: run(False, x)) * 1e3
    row["cuda gelu bwd+amax"] = do_bench(lambda: run(True, d)) * 1e3
    row["torch gelu (tanh)"] = do_bench(lambda: torch.nn.functional.gelu(h, approximate="tanh")) * 1e3
    row["torch gelu bwd (tanh)"] = do_bench(lambda: torch.ops.aten.gelu_backward(dx, h, approximate="tanh")) * 1e3
    for name, out in (("fwd", x), ("bwd", d)):
        given = out.abs().amax().float().reshape(1)
        own = do_bench(lambda: nvfp4.quantize(out, columnwise=True, rht="columnwise")) * 1e3
        giv = do_bench(lambda: nvfp4.quantize_options(out, columnwise=True, rht="columnwise", amax=given)) * 1e3
        row[f"library amax pass ({name} output)"] = own - giv
    run(False, x)
    torch.cuda.synchronize()
    p = parts.view(2, grid)
    got = [p[0].max().view(torch.float32).item(), p[1].max().view(torch.float32).item()]
    want = reference_maxima(x, mask)
    run(True, d)
    torch.cuda.synchronize()
    got_b = [p[0].max().view(torch.float32).item(), p[1].max().view(torch.float32).item()]
    want_b = reference_maxima(d, mask)
    for g_, w_ in ((got, want), (got_b, want_b)):
        good = all(abs(gv - wv) <= 1e-6 * max(abs(wv), 1e-30) for gv, wv in zip(g_, w_))
        ok_list.append(good)
        row.setdefault("cuda maxima_checked", []).append({"got": g_, "want": list(w_), "ok": good})
    row["cuda gelu bits equal torch"] = bool(torch.equal(x, torch.nn.functional.gelu(h, approximate="tanh")))
    row["cuda gelu bwd bits equal torch"] = bool(torch.equal(d, torch.ops.aten.gelu_backward(dx, h,
                                                                                             approximate="tanh")))
    row["fwd: cuda fused / (torch gelu + library pass)"] = row["cuda gelu+amax"] / (
        row["torch gelu (tanh)"] + row["library amax pass (fwd output)"])
    row["bwd: cuda fused / (torch gelu bwd + library pass)"] = row["cuda gelu bwd+amax"] / (
        row["torch gelu bwd (tanh)"] + row["library amax pass (bwd output)"])
    return row


def reference_maxima(x: torch.Tensor, sign_mask: int = SIGN_MASK):
    """max |x| and max |RHT(v)| over every column's 16-row groups v (rows padded with zeros),
    in float32, RHT the library's (nvfp4.rht_matrix: the signs of `sign_mask`, the 16-point
    Walsh-Hadamard matrix / 4) — the two tensor amaxes of a quantization with the columnwise
    RHT (its rowwise output's, its columnwise output's)."""
    import nvfp4
    m, n = x.shape
    xf = x.float()
    pad = (-m) % 16
    if pad:
        xf = torch.cat([xf, xf.new_zeros(pad, n)])
    y = torch.einsum("gin,ij->gjn", xf.view(-1, 16, n), nvfp4.rht_matrix(sign_mask, torch.float32, x.device))
    return xf.abs().max().item(), y.abs().max().item()


def parse_shapes(shapes, cuda: bool) -> list:
    """(rows, cols) of each "ROWSxCOLS", refused by name when malformed, empty, or (the CUDA
    form reads 8-byte strips) with cols not a multiple of 4."""
    out = []
    for shape in shapes:
        parts = shape.lower().split("x")
        if len(parts) != 2 or not all(p.isdigit() for p in parts) or 0 in (int(parts[0]), int(parts[1])):
            raise ValueError(f"--shapes: expected ROWSxCOLS with positive integers, got {shape!r}")
        m, n = int(parts[0]), int(parts[1])
        if cuda and n % 4:
            raise ValueError(f"--shapes: the CUDA form needs cols % 4 == 0, got {shape!r}")
        out.append((m, n))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", nargs="+", default=["16384x3072", "16384x8192"],
                    help="tokens x features of the GELU (85M: 16384x3072, 400M: 16384x8192)")
    ap.add_argument("--block-n", type=int, nargs="+", default=[128, 256],
                    help="columns per program; each kernel is timed at each and its best kept")
    ap.add_argument("--cuda", action="store_true", help="also the CUDA form (bench/gelu_amax/gelu_amax.cu, built "
                    "with nvcc) against torch's tanh-form kernels plus the library's amax pass")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    try:
        shapes = parse_shapes(a.shapes, a.cuda)
    except ValueError as e:
        ap.error(str(e))
    if any(b <= 0 or b & (b - 1) for b in a.block_n):
        ap.error(f"--block-n: expected powers of two (Triton's block sizes), got {a.block_n}")
    if not torch.cuda.is_available():
        print("bench_gelu_amax: needs a CUDA GPU", file=sys.stderr)
        return 2
    try:
        import triton
    except ImportError:
        print("bench_gelu_amax: needs Triton", file=sys.stderr)
        return 2
    k = _load_kernels()
    lib = _load_cuda() if a.cuda else None
    cuda_ok = []
    do_bench = triton.testing.do_bench
    dev = torch.device("cuda")
    results = {"device": torch.cuda.get_device_name(dev), "torch": torch.__version__, "triton": triton.__version__,
               "shapes": []}
    print(f"{results['device']}, torch {torch.__version__}, triton {triton.__version__}; us, median of do_bench")
    ok = True
    for shape, (m, n) in zip(a.shapes, shapes):
        g = torch.Generator(device=dev).manual_seed(0)
        h = torch.randn(m, n, device=dev, dtype=torch.bfloat16, generator=g)
        dx = torch.randn(m, n, device=dev, dtype=torch.bfloat16, generator=g) * 1e-3
        x = torch.empty_like(h)
        d = torch.empty_like(h)
        amax = torch.zeros(2, device=dev, dtype=torch.int32)  # the maxima's float32 bits

        def launch(fn, args, bn):
            grid = (triton.cdiv(m, 16), triton.cdiv(n, bn))
            return lambda: fn[grid](*args, m, n, n, BLOCK_N=bn)

        def best(fn, args):
            return min(do_bench(launch(fn, args, bn)) for bn in a.block_n) * 1e3

        row = {"shape": shape}
        row["gelu"] = best(k.gelu_fwd, (h, x))
        row["gelu+amax (fused)"] = best(k.gelu_fwd_amax, (h, x, amax))
        row["amax pass"] = best(k.amax_pass, (x, amax))
        row["gelu bwd"] = best(k.gelu_bwd, (dx, h, d))
        row["gelu bwd+amax (fused)"] = best(k.gelu_bwd_amax, (dx, h, d, amax))
        row["torch gelu"] = do_bench(lambda: torch.nn.functional.gelu(h)) * 1e3
        row["torch gelu bwd"] = do_bench(lambda: torch.ops.aten.gelu_backward(dx, h)) * 1e3
        row["read (torch.amax)"] = do_bench(lambda: torch.amax(x)) * 1e3
        row["copy"] = do_bench(lambda: x.clone()) * 1e3
        # the maxima of one fused call of each, against the reference
        for fn, args, out in ((k.gelu_fwd_amax, (h, x, amax), x), (k.gelu_bwd_amax, (dx, h, d, amax), d)):
            amax.zero_()
            launch(fn, args, a.block_n[0])()
            torch.cuda.synchronize()
            want = reference_maxima(out)
            got = amax.view(torch.float32).tolist()
            good = all(abs(gv - wv) <= 1e-6 * max(abs(wv), 1e-30) for gv, wv in zip(got, want))
            ok &= good
            row.setdefault("maxima_checked", []).append({"got": got, "want": list(want), "ok": good})
        row["gelu_bits_equal_torch"] = bool(torch.equal(x, torch.nn.functional.gelu(h)))
        row["fwd: fused / (gelu + amax pass)"] = row["gelu+amax (fused)"] / (row["gelu"] + row["amax pass"])
        row["bwd: fused / (gelu bwd + amax pass)"] = row["gelu bwd+amax (fused)"] / (row["gelu bwd"] + row["amax pass"])
        results["shapes"].append(row)
        print(f"\n{shape} (bf16, {m * n * 2 / 1e6:.1f} MB a tensor)")
        for key in ("gelu", "gelu+amax (fused)", "amax pass", "gelu bwd", "gelu bwd+amax (fused)", "torch gelu",
                    "torch gelu bwd", "read (torch.amax)", "copy"):
            print(f"  {row[key]:9.1f}  {key}")
        print(f"  fwd: fused / (gelu + amax pass) = {row['fwd: fused / (gelu + amax pass)']:.3f}; "
              f"saved {row['gelu'] + row['amax pass'] - row['gelu+amax (fused)']:.1f} us")
        print(f"  bwd: fused / (gelu bwd + amax pass) = {row['bwd: fused / (gelu bwd + amax pass)']:.3f}; "
              f"saved {row['gelu bwd'] + row['amax pass'] - row['gelu bwd+amax (fused)']:.1f} us")
        print(f"  maxima against the reference: {'ok' if all(c['ok'] for c in row['maxima_checked']) else 'MISMATCH'}"
              f"; prototype GELU bits equal torch's: {row['gelu_bits_equal_torch']}")
        if lib is not None:
            c = _cuda_rows(lib, m, n, h, dx, do_bench, cuda_ok)
            row.update(c)
            for key in ("cuda gelu+amax", "torch gelu (tanh)", "library amax pass (fwd output)", "cuda gelu bwd+amax",
                        "torch gelu bwd (tanh)", "library amax pass (bwd output)"):
                print(f"  {c[key]:9.1f}  {key}")
            print(f"  fwd: cuda fused / (torch gelu + library pass) = "
                  f"{c['fwd: cuda fused / (torch gelu + library pass)']:.3f}; bwd: "
                  f"{c['bwd: cuda fused / (torch gelu bwd + library pass)']:.3f}")
            print(f"  cuda maxima against the reference: "
                  f"{'ok' if all(x['ok'] for x in c['cuda maxima_checked']) else 'MISMATCH'}; output bits equal "
                  f"torch's: forward {c['cuda gelu bits equal torch']}, backward {c['cuda gelu bwd bits equal torch']}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0 if ok and all(cuda_ok) else 1


if __name__ == "__main__":
    sys.exit(main())
