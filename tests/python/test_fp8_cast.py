"""nvfp4_fp8_cast (torch.ops.nvfp4.fp8_cast), the FP8 baseline's fused cast.

CPU (CI): the C reference against the torch-op path of nvfp4.nn.fp8 (tensor_amax,
current_scale, quantize_fp8, 1/s) bit for bit — q, its transpose, 1/s and amax — for both
formats, float32/float16/bfloat16 inputs, odd row counts, zeros, NaN, inf, huge and
subnormal values, current and delayed scaling; the refusals by parameter name.
GPU: the CUDA kernels against the CPU reference bit for bit (NaN bytes by position only:
their sign is unspecified), outputs poisoned first and fully written, and FP8Linear with
the fused cast bit-identical to the torch-op path (forward, dgrad, wgrad, delayed state).
"""
from __future__ import annotations

import copy

import pytest
import torch

import nvfp4  # noqa: F401  (registers the ops)
from nvfp4 import _C, _ops
from nvfp4.nn import fp8 as F8
from nvfp4.nn.fp8 import FP8Linear
from conftest import first_mismatch

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
FMT = {E4M3: 0, E5M2: 1}
HAS_GPU = torch.cuda.is_available() and bool(_C.build_cuda_archs())
needs_gpu = pytest.mark.skipif(not (HAS_GPU and F8.fp8_supported()[0]),
                               reason="needs a CUDA GPU with FP8 and a CUDA build of nvfp4")


def sample(rows, cols, dtype, seed, special=True):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=g) * torch.exp2(torch.randint(-20, 20, (rows, 1), generator=g).float())
    if special and rows * cols >= 8:
        flat = x.view(-1)
        flat[1] = 0.0
        flat[2] = -0.0
        flat[3] = 1e-40 if dtype == torch.float32 else 1e-7  # subnormal input (fp32) / tiny
        flat[4] = -3e38 if dtype == torch.float32 else -6e4
        flat[5] = 5e-8
    return x.to(dtype)


def torch_path(x, fmt, scale=None):
    """(q, scale_inv, amax) as nvfp4.nn.fp8's torch ops compute them."""
    amax = F8.tensor_amax(x)
    s = F8.current_scale(amax, F8.fp8_max(fmt)) if scale is None else scale
    return F8.quantize_fp8(x, s, fmt), 1.0 / s, amax


def same_fp8(got, want, what):
    gb, wb = got.view(torch.uint8), want.view(torch.uint8)
    gn, wn = torch.isnan(got.float()), torch.isnan(want.float())
    assert torch.equal(gn, wn), f"{what}: NaN positions differ"
    if not torch.equal(gb[~wn], wb[~wn]):
        d = (gb.int() - wb.int()).masked_fill(wn, 0)
        raise AssertionError(f"{what}: bytes differ: {first_mismatch(d.float(), torch.zeros_like(d.float()))}")


def same_float(got, want, what):
    g, w = got.float().reshape(()), want.float().reshape(())
    if torch.isnan(w):
        assert torch.isnan(g), f"{what}: want NaN, got {g.item()}"
    else:
        assert g.view(torch.int32) == w.view(torch.int32), f"{what}: got {g.item()!r}, want {w.item()!r}"


@pytest.mark.parametrize("fmt", [E4M3, E5M2], ids=["e4m3", "e5m2"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=["f32", "f16", "bf16"])
@pytest.mark.parametrize("shape", [(1, 16), (7, 48), (33, 160), (130, 64)])
def test_cpu_matches_torch_path(fmt, dtype, shape):
    x = sample(*shape, dtype, seed=shape[0] * 7 + shape[1])
    q, qt, s_inv, amax = torch.ops.nvfp4.fp8_cast(x, FMT[fmt], 0.0, None, True, True)
    want_q, want_sinv, want_amax = torch_path(x, fmt)
    assert q.dtype == fmt and qt.dtype == fmt and tuple(qt.shape) == (shape[1], shape[0])
    same_fp8(q, want_q, "q")
    assert torch.equal(qt.view(torch.uint8), q.view(torch.uint8).t()), "qt is not q transposed"
    same_float(s_inv, want_sinv, "scale_inv")
    same_float(amax, want_amax, "amax")


@pytest.mark.parametrize("fmt", [E4M3, E5M2], ids=["e4m3", "e5m2"])
@pytest.mark.parametrize("case", ["zeros", "nan", "inf", "tiny", "huge_scale"])
def test_cpu_special_tensors(fmt, case):
    x = torch.randn(5, 32) * 3
    if case == "zeros":
        x.zero_()  # amax 0: s = 1
    elif case == "nan":
        x[2, 7] = float("nan")  # amax NaN: s = 1, the NaN stays NaN
    elif case == "inf":
        x[0, 0] = float("inf")  # amax inf: s = 1, inf clamps to max
    elif case == "tiny":
        x *= 1e-38  # max / amax overflows fp32: s = FLT_MAX
    scale = torch.tensor(1e30) if case == "huge_scale" else None  # delayed: products beyond max clamp
    q, qt, s_inv, amax = torch.ops.nvfp4.fp8_cast(x, FMT[fmt], 0.0, scale, True, True)
    want_q, want_sinv, want_amax = torch_path(x, fmt, scale)
    same_fp8(q, want_q, case)
    same_fp8(qt, want_q.t().contiguous(), case + " (transposed)")
    same_float(s_inv, want_sinv, case + " scale_inv")
    same_float(amax, want_amax, case + " amax")


def test_cpu_margin_and_outputs_optional():
    x = sample(9, 32, torch.bfloat16, seed=4)
    q, qt, s_inv, _ = torch.ops.nvfp4.fp8_cast(x, 0, 2.0, None, True, False)
    assert qt.numel() == 0
    s = F8.current_scale(F8.tensor_amax(x), 448.0, margin=2.0)
    same_fp8(q, F8.quantize_fp8(x, s, E4M3), "margin 2")
    same_float(s_inv, 1.0 / s, "margin 2 scale_inv")
    q, qt, _, _ = torch.ops.nvfp4.fp8_cast(x, 1, 0.0, None, False, True)
    assert q.numel() == 0 and tuple(qt.shape) == (32, 9)


@pytest.mark.parametrize("shape", [(0, 32), (5, 0), (0, 0)])
def test_cpu_empty(shape):
    """An empty x: empty outputs, amax 0 and so s = 1 (current scaling)."""
    x = torch.empty(shape)
    q, qt, s_inv, amax = torch.ops.nvfp4.fp8_cast(x, 0, 0.0, None, True, True)
    assert tuple(q.shape) == shape and tuple(qt.shape) == shape[::-1]
    assert float(amax) == 0.0 and float(s_inv) == 1.0


def test_cpu_refusals():
    x = torch.randn(4, 32)
    with pytest.raises(ValueError, match="format"):
        torch.ops.nvfp4.fp8_cast(x, 2, 0.0, None, True, False)
    with pytest.raises(ValueError, match="x: cols must be a multiple of 16"):
        torch.ops.nvfp4.fp8_cast(torch.randn(4, 24), 0, 0.0, None, True, False)
    with pytest.raises(ValueError, match="x: dtype"):
        torch.ops.nvfp4.fp8_cast(torch.randn(4, 32).double(), 0, 0.0, None, True, False)
    with pytest.raises(ValueError, match="q/qt"):
        torch.ops.nvfp4.fp8_cast(x, 0, 0.0, None, False, False)
    with pytest.raises(ValueError, match="cfg.margin"):
        torch.ops.nvfp4.fp8_cast(x, 0, float("nan"), None, True, False)
    with pytest.raises(ValueError, match="x: the nvfp4 ops take 2D"):
        torch.ops.nvfp4.fp8_cast(torch.randn(2, 4, 32), 0, 0.0, None, True, False)


# ----------------------------------------------------------------------------- GPU
@needs_gpu
@pytest.mark.parametrize("fmt", [E4M3, E5M2], ids=["e4m3", "e5m2"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=["f32", "f16", "bf16"])
@pytest.mark.parametrize("shape", [(0, 48), (1, 16), (7, 48), (33, 160), (1000, 304), (4096, 1024)])
@pytest.mark.parametrize("delayed", [False, True])
def test_gpu_matches_cpu(fmt, dtype, shape, delayed):
    x = sample(*shape, dtype, seed=shape[0] + 3 * shape[1])
    scale = torch.tensor(37.5) if delayed else None
    want = torch.ops.nvfp4.fp8_cast(x, FMT[fmt], 0.0, scale, True, True)
    xd = x.cuda()
    # outputs poisoned first: the op allocates them, so run it through the raw entry point
    q = torch.full(shape, 0xAB, dtype=torch.uint8, device="cuda")
    qt = torch.full((shape[1], shape[0]), 0xAB, dtype=torch.uint8, device="cuda")
    sc = torch.full((2,), float("nan"), device="cuda")  # scale_inv, then amax 4 bytes after it
    # the delayed scale as FP8Linear passes it: one slot of a buffer (4-byte aligned only)
    sd = torch.cat([torch.zeros(1), scale.reshape(1)]).cuda()[1] if delayed else None
    dt, di, st = _ops._device(xd)
    _C.fp8_cast_raw(xd.data_ptr(), _ops.DTYPE_CODE[dtype], shape[0], shape[1], FMT[fmt], 0.0,
                    0 if sd is None else sd.data_ptr(), q.data_ptr(), qt.data_ptr(), True, True, sc.data_ptr(),
                    sc.data_ptr() + 4, dt, di, st)
    torch.cuda.synchronize()
    same_fp8(q.cpu().view(fmt), want[0], "q")
    same_fp8(qt.cpu().view(fmt), want[1], "qt")
    same_float(sc[0].cpu(), want[2], "scale_inv")
    same_float(sc[1].cpu(), want[3], "amax")
    got = torch.ops.nvfp4.fp8_cast(xd, FMT[fmt], 0.0, sd, True, True)  # the op itself
    same_fp8(got[0].cpu(), want[0], "op q")
    same_fp8(got[1].cpu(), want[1], "op qt")


def special_sample(rows, cols, dtype, g):
    """Random magnitudes over a wide range with zeros, NaN, +-inf, the largest finite values
    and subnormals scattered at random positions (the last, partial tiles included)."""
    x = torch.randn(rows, cols, generator=g) * torch.exp2(torch.randint(-24, 24, (rows, cols), generator=g).float())
    fin = torch.finfo(dtype)
    n = rows * cols
    specials = [0.0, -0.0, float("nan"), float("inf"), -float("inf"), fin.max, -fin.max, fin.tiny / 4, -fin.tiny]
    for v in specials:
        idx = torch.randint(0, n, (max(1, n // 500),), generator=g)
        x.view(-1)[idx] = v
    x.view(-1)[-1] = float("nan")  # the very last element
    return x.to(dtype)


def raw_cast(x, fmt, scale, want_q, want_qt, poison, amax_prior=None):
    """nvfp4_fp8_cast through the raw entry point into outputs pre-filled with `poison`:
    (q, qt, scale_inv, amax), all on the CPU. amax_prior: delayed scaling, accumulate max |x|
    into an amax slot holding this value."""
    rows, cols = x.shape
    dev = x.device
    q = torch.full((rows, cols), poison, dtype=torch.uint8, device=dev)
    qt = torch.full((cols, rows), poison, dtype=torch.uint8, device=dev)
    sc = torch.full((3,), float("nan"), device=dev)  # scale_inv, amax, the delayed scale
    if amax_prior is not None:
        sc[1] = amax_prior
    if scale is not None:
        sc[2] = scale
    dt, di, st = _ops._device(x)
    _C.fp8_cast_raw(x.data_ptr(), _ops.DTYPE_CODE[x.dtype], rows, cols, FMT[fmt], 0.0,
                    0 if scale is None else sc.data_ptr() + 8, q.data_ptr(), qt.data_ptr(), want_q, want_qt,
                    sc.data_ptr(), sc.data_ptr() + 4, dt, di, st, amax_prior is not None)
    return q.cpu(), qt.cpu(), sc[0].cpu(), sc[1].cpu()


# the tiled cast: one tile, partial tiles along both axes, row counts that are and are not
# multiples of 16 (q^T written with 16-byte or byte stores), a single 16-column block, many
# tiles; float32 inputs take 4-element chunks, 16-bit ones 8.
TILE_SHAPES = [(1, 16), (15, 32), (16, 64), (17, 80), (63, 48), (64, 64), (65, 16), (96, 208), (127, 1040),
               (128, 4096), (1000, 304), (4096, 1024)]


@needs_gpu
@pytest.mark.parametrize("shape", TILE_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=["f32", "f16", "bf16"])
@pytest.mark.parametrize("outputs", ["q+qt", "q", "qt"])
@pytest.mark.parametrize("scaling", ["current", "delayed"])
def test_gpu_tiled_cast_every_byte(shape, dtype, outputs, scaling, gen):
    """The cast kernels against the CPU reference, bit for bit (NaN bytes by position: their
    sign is unspecified), both formats: the requested outputs fully written (two runs with
    different poison bytes, so an unwritten byte cannot pass by equalling the poison), the
    others untouched; 1/s and amax, delayed scaling's accumulated amax included."""
    x = special_sample(*shape, dtype, gen)
    want_q, want_qt = outputs != "qt", outputs != "q"
    for fmt in (E4M3, E5M2):
        scale = 0.37 if scaling == "delayed" else None
        for prior in ((None,) if scaling == "current" else (0.0, 3e38)):
            want = raw_cast(x, fmt, scale, True, True, 0, prior)
            for poison in (0xAB, 0x54):
                got = raw_cast(x.cuda(), fmt, scale, want_q, want_qt, poison, prior)
                what = f"{fmt} {scaling} prior={prior} poison={poison:#x}"
                if want_q:
                    same_fp8(got[0].view(fmt), want[0].view(fmt), f"q, {what}")
                else:
                    assert bool((got[0] == poison).all()), f"q written though not requested, {what}"
                if want_qt:
                    same_fp8(got[1].view(fmt), want[1].view(fmt), f"qt, {what}")
                else:
                    assert bool((got[1] == poison).all()), f"qt written though not requested, {what}"
                same_float(got[2], want[2], f"scale_inv, {what}")
                same_float(got[3], want[3], f"amax, {what}")


@needs_gpu
@pytest.mark.parametrize("case", ["zeros", "all_nan", "inf", "tiny"])
@pytest.mark.parametrize("scaling", ["current", "delayed"])
def test_gpu_tiled_cast_special_tensors(case, scaling):
    x = torch.randn(80, 96) * 3
    if case == "zeros":
        x.zero_()
    elif case == "all_nan":
        x.fill_(float("nan"))
    elif case == "inf":
        x[::7, ::5] = float("inf")
        x[1::7, ::5] = -float("inf")
    elif case == "tiny":
        x *= 1e-38
    for dtype in (torch.float32, torch.bfloat16):
        xd = x.to(dtype)
        for fmt in (E4M3, E5M2):
            scale = 1e30 if scaling == "delayed" else None  # delayed: products beyond max clamp
            prior = 0.0 if scaling == "delayed" else None
            want = raw_cast(xd, fmt, scale, True, True, 0, prior)
            got = raw_cast(xd.cuda(), fmt, scale, True, True, 0xAB, prior)
            for name, a, b in (("q", got[0], want[0]), ("qt", got[1], want[1])):
                same_fp8(a.view(fmt), b.view(fmt), f"{case} {dtype} {fmt}: {name}")
            same_float(got[2], want[2], f"{case}: scale_inv")
            same_float(got[3], want[3], f"{case}: amax")


@needs_gpu
@pytest.mark.parametrize("shape", [(4099, 48), (16384, 1024)], ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("scaling", ["current", "delayed"])
def test_gpu_the_max_at_either_end(shape, scaling):
    """The amax pass walks x from its end down, the cast after it from its start up (a delayed
    cast, alone, down): a maximum in the first element, then in the last, is found by both
    directions, on shapes whose amax pass loops over its persistent grid several times (16384
    x 1024) and whose last row tile is partial (4099 rows); bit for bit against the CPU."""
    g = torch.Generator().manual_seed(shape[0])
    base = torch.rand(*shape, generator=g) * 2 - 1
    for where in (0, -1):
        x = base.clone()
        x.view(-1)[where] = -1000.0
        x = x.bfloat16()
        scale = 0.37 if scaling == "delayed" else None
        prior = 0.0 if scaling == "delayed" else None
        want = raw_cast(x, E4M3, scale, True, True, 0, prior)
        got = raw_cast(x.cuda(), E4M3, scale, True, True, 0xAB, prior)
        assert float(want[3]) == 1000.0, "the reference's amax"
        for name, a, b in (("q", got[0], want[0]), ("qt", got[1], want[1])):
            same_fp8(a.view(E4M3), b.view(E4M3), f"max at {where}: {name}")
        same_float(got[2], want[2], f"max at {where}: scale_inv")
        same_float(got[3], want[3], f"max at {where}: amax")


@needs_gpu
def test_gpu_cast_more_row_tiles_than_the_grid():
    """More than 65535 row tiles of 64: the grid loops over row tiles."""
    rows, cols = 65536 * 64 + 16, 16
    g = torch.Generator().manual_seed(11)
    x = (torch.randn(rows, cols, generator=g) * 5).bfloat16()
    want = raw_cast(x, E4M3, None, True, True, 0)
    got = raw_cast(x.cuda(), E4M3, None, True, True, 0xAB)
    for name, a, b in (("q", got[0], want[0]), ("qt", got[1], want[1])):
        same_fp8(a.view(E4M3), b.view(E4M3), name)
    same_float(got[2], want[2], "scale_inv")


@needs_gpu
@pytest.mark.parametrize("recipe", ["fp8", "fp8_delayed"])
def test_gpu_fp8linear_fused_equals_torch_path(recipe):
    """The same layer and data through the fused cast and through the torch-op casts: the
    same forward output, dgrad, wgrad and delayed-scaling state, bit for bit, over steps."""
    torch.manual_seed(0)
    base = torch.nn.Linear(256, 384, bias=True)
    layers = {}
    for fused in (True, False):
        lin = FP8Linear.from_linear(copy.deepcopy(base), F8.get_fp8_recipe(recipe).replace(fused_cast=fused)).cuda()
        layers[fused] = lin
    for step in range(3):
        x = (torch.randn(200, 256) * (step + 1)).cuda()
        outs = {}
        for fused, lin in layers.items():
            xi = x.clone().requires_grad_(True)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                y = lin(xi)
            y.float().square().sum().backward()
            outs[fused] = (y.detach(), xi.grad, lin.weight.grad.clone(), lin.bias.grad.clone())
            lin.weight.grad = None
            lin.bias.grad = None
        for name, a, b in zip(("y", "dx", "dw", "db"), outs[True], outs[False]):
            assert torch.equal(a, b), f"step {step}: {name} differs: {first_mismatch(a.float(), b.float())}"
        if recipe == "fp8_delayed":
            for buf in F8._FP8_BUFFERS:
                assert torch.equal(getattr(layers[True], buf), getattr(layers[False], buf)), f"step {step}: {buf}"


# ---- delayed scaling's update: the library call against the torch ops ----------------------
_DEVS = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", _DEVS)
@pytest.mark.parametrize("length", [1, 2, 7, 256, 257, 1024, 3000])
@pytest.mark.parametrize("algo", ["max", "most_recent"])
@pytest.mark.parametrize("fmt", [torch.float8_e4m3fn, torch.float8_e5m2], ids=["e4m3", "e5m2"])
def test_delayed_update_matches_torch_ops(device, length, algo, fmt):
    """nvfp4_fp8_delayed_update ≡ the torch-op update, bit for bit (history and scale), over
    histories with zeros, NaN, inf, tiny and huge entries; every role updated, the others
    untouched."""
    from nvfp4.nn.fp8 import delayed_scale_update, delayed_scale_update_torch, fp8_max
    g = torch.Generator().manual_seed(length)
    cases = []
    h = torch.rand(3, length, generator=g) * torch.exp2(torch.randint(-30, 30, (3, length), generator=g).float())
    cases.append(h)
    z = h.clone()
    z[0] = 0.0                          # all zero: the scale stays
    z[1, ::3] = float("nan")            # NaN entries count as 0
    z[2, -1] = float("inf")             # inf amax: the scale stays
    cases.append(z)
    t = torch.full((3, length), 1e-45)  # a subnormal amax: the quotient overflows to FLT_MAX
    cases.append(t)
    for hist in cases:
        for margin in (0.0, 2.0, -1.5):
            h1, h2 = hist.clone().to(device), hist.clone().to(device)
            s1 = torch.tensor([0.5, 2.0, 3.0], device=device)
            s2 = s1.clone()
            for role in range(3):
                delayed_scale_update(h1, s1, role, fp8_max(fmt), margin, algo)
                delayed_scale_update_torch(h2, s2, role, fp8_max(fmt), margin, algo)
                assert torch.equal(h1.view(torch.int32), h2.view(torch.int32)), (role, margin)
                assert torch.equal(s1.view(torch.int32), s2.view(torch.int32)), (role, margin, s1, s2)


def test_delayed_update_refusals():
    h = torch.zeros(3, 8)
    s = torch.ones(3)
    op = torch.ops.nvfp4.fp8_delayed_update
    with pytest.raises(ValueError, match="history"):
        op(h, s[0], 0, 0.0, 0)                        # 2D history
    with pytest.raises(ValueError, match="scale"):
        op(h[0], s, 0, 0.0, 0)                        # three scale elements
    with pytest.raises(ValueError, match="^format"):
        op(h[0], s[0], 2, 0.0, 0)
    with pytest.raises(ValueError, match="^algo"):
        op(h[0], s[0], 0, 0.0, 5)
    with pytest.raises(ValueError, match="^margin"):
        op(h[0], s[0], 0, float("nan"), 0)
    with pytest.raises(ValueError, match="^history: must have 1 dimension of at least 1"):
        op(torch.zeros(0), s[0], 0, 0.0, 0)
