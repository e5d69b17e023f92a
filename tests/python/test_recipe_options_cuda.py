"""The recipe options' CUDA kernels (src/quant/quantize_options.cu), bit for bit against the
CPU reference: 4over6 (MAE/MSE, bound 448/256, 1D and 2D, row and columnwise), one amax per
row, a given amax, MS-EDEN with random signs; every input dtype, odd shapes, zeros, NaN,
infinities, huge and tiny values, both scale layouts, outputs poisoned before each call.
Also the per-operand layer with each option recipe on the GPU against the same layer on the
CPU. Skipped without a GPU.
"""
from __future__ import annotations

import itertools

import pytest
import torch

import nvfp4.nn as nn4
from conftest import assert_bytes_equal
from nvfp4 import _C
from nvfp4._options import percentile_amax

if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)
archs = [a.rstrip("af") for a in _C.build_cuda_archs().split(";") if a]
if "".join(map(str, torch.cuda.get_device_capability())) not in archs:
    pytest.skip("this build has no kernels for this GPU", allow_module_level=True)

from test_recipe_options import KINDS, make_input  # noqa: E402

DEV = torch.device("cuda")
POISON = 0xA5
SHAPES = [(1, 16), (7, 48), (13, 80), (31, 32), (130, 272), (257, 528)]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def run(x, layout, *, block=0, rounding=0, rht=0, seed=0, offset=0, select=0, bound=448, amax_mode=0,
        amax_in=None, mask=0xD7E8, outs=(True, True)):
    R, C = x.shape
    Rp = (R + 15) // 16 * 16
    d = x.device

    def alloc(r, c, n):
        sc = c // 16
        shape = ((r + 127) // 128 * 128, (sc + 3) // 4 * 4) if layout == 1 else (r, sc)
        return (torch.full((r, c // 2), POISON, dtype=torch.uint8, device=d),
                torch.full(shape, POISON, dtype=torch.uint8, device=d),
                torch.full((n,), float("nan"), dtype=torch.float32, device=d))

    row = alloc(R, C, R if amax_mode == 1 else 1) if outs[0] else (None,) * 3
    col = alloc(C, Rp, C if amax_mode == 1 else 1) if outs[1] else (None,) * 3
    a = None if amax_in is None else amax_in.to(d)
    stream = torch.cuda.current_stream().cuda_stream if d.type == "cuda" else 0
    _C.quantize_options(x, *row, *col, block, rounding, layout, rht, mask, seed, offset, select, bound, amax_mode,
                        a, stream)
    return row, col


def same(x, what, **kw):
    for layout in (0, 1):
        g = run(x.to(DEV), layout, **kw)
        c = run(x.cpu(), layout, **kw)
        for o, (gt, ct) in enumerate(zip(g, c)):
            if gt[0] is None:
                continue
            assert_bytes_equal(gt[0], ct[0], f"{what} layout={layout} out={o} data")
            assert_bytes_equal(gt[1], ct[1], f"{what} layout={layout} out={o} scales")
            ga, ca = gt[2].cpu(), ct[2]
            nan = torch.isnan(ga) & torch.isnan(ca)
            assert torch.equal(ga[~nan], ca[~nan]), f"{what} layout={layout} out={o} amax {ga} != {ca}"


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_4over6_cuda_matches_cpu(rng, shape, dtype):
    for kind, sel, bound, block in itertools.product(KINDS, (1, 2), (448, 256), (0, 1)):
        x = make_input(shape, dtype, kind, rng)
        # one output alone only on ordinary data (the launcher's paths, not the arithmetic)
        for outs in ((True, True), (True, False), (False, True)) if kind == "normal" else ((True, True),):
            same(x, f"4over6 {kind} sel={sel} bound={bound} block={block} outs={outs}", select=sel, bound=bound,
                 block=block, outs=outs)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_row_amax_and_given_amax_cuda_match_cpu(rng, shape, dtype):
    for kind in KINDS:
        x = make_input(shape, dtype, kind, rng)
        same(x, f"rows {kind}", amax_mode=1)
        same(x, f"rows 4over6 {kind}", amax_mode=1, select=2, bound=256)
        for q, block in itertools.product((0.5, 0.999, 1.0), (0, 1)):
            a = percentile_amax(x, q)
            assert torch.equal(percentile_amax(x.to(DEV), q).cpu(), a) or torch.isnan(a).all()
            same(x, f"given q={q} block={block} {kind}", amax_mode=2, amax_in=a, block=block)
            same(x, f"given 4over6 q={q} block={block} {kind}", amax_mode=2, amax_in=a, block=block, select=1)


def _kernels(fn):
    """The CUDA kernel names fn launches."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return {e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA}


@pytest.mark.parametrize("shape", [(1, 16), (31, 32), (130, 272), (257, 528)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_given_amax_ordinary_kernels_match_cpu(rng, shape, dtype):
    """A given amax with no other option runs the ordinary quantize kernels (rowwise or tile)
    with no amax pass: every rounding, Hadamard transform, block and output choice against
    the CPU reference, and given values the ordinary amax pass never produces (below the
    data's max, zero, negative, infinite, NaN, tiny)."""
    seed = int(torch.randint(0, 2**62, (1,), generator=rng))
    for kind in ("normal", "outliers", "nan", "inf"):
        x = make_input(shape, dtype, kind, rng)
        true = percentile_amax(x, 1.0)
        givens = [true, percentile_amax(x, 0.5), torch.tensor([0.0]), torch.tensor([-2.5]),
                  torch.tensor([float("inf")]), torch.tensor([float("nan")]), torch.tensor([1e-30])]
        for i, a in enumerate(givens):
            a = a.float().reshape(1)
            for rounding, rht, outs, block in ((0, 0, (True, True), 0), (1, 3, (True, True), 0),
                                               (1, 2, (False, True), 0), (0, 1, (True, False), 0),
                                               (1, 0, (True, False), 0), (0, 0, (True, True), 1)):
                if i > 1 and (rounding, rht) not in ((0, 0), (1, 3)):
                    continue  # the special values on two variants; the rest on ordinary amaxes
                same(x, f"given#{i} {kind} rounding={rounding} rht={rht} outs={outs} block={block}", amax_mode=2,
                     amax_in=a, rounding=rounding, rht=rht, seed=seed, offset=7, outs=outs, block=block)


def _smallest_encode_factor(amax: float) -> float:
    """The encode factor of the largest block scale (448) for a tensor of this amax, in the
    library's fp32 arithmetic (core::block_encode_factor(0x7e, 1 / S_enc))."""
    f = lambda v: torch.tensor(v, dtype=torch.float32)  # noqa: E731
    s_enc = torch.minimum(f(2688.0) / f(amax), f(torch.finfo(torch.float32).max))
    return (f(1.0) / (f(448.0) * (f(1.0) / s_enc))).item()


@pytest.mark.parametrize("rounding", [0, 1])
def test_bf16_columnwise_rht_on_both_sides_of_the_folded_quarter(gen, rounding):
    """The BF16 columnwise-RHT tile kernels with stochastic rounding leave the transform's final
    1/4 to the blocks' scale and encode factors, except where the quarter of the smallest encode
    factor would be subnormal (a tensor amax above ~1.3e38: a given one; the amax pass's is at
    most FLT_MAX / 4); the round-to-nearest ones keep the multiply. Both roundings, given amaxes
    on both sides of that bound and the data's own, with column blocks whose transform reaches
    ~8e37, infinite, tiny and subnormal blocks among ordinary ones, with and without the rowwise
    output (and its transform), both layouts: every byte against the CPU."""
    signs = torch.tensor([-1.0 if (0xD7E8 >> i) & 1 else 1.0 for i in range(16)])
    givens = (1.0e38, 1.25e38, 1.3e38, 1.4e38, 2.0e38, 3.3e38, torch.finfo(torch.float32).max)
    folded = [_smallest_encode_factor(g) >= 2.0 ** -124 for g in givens]
    assert any(folded) and not all(folded), folded  # both branches of the kernels are reached
    x = torch.randn(70, 96, generator=gen)
    x[:, 40:56] *= 1e-30                     # tiny blocks
    x[20:40, 60:70] = 1e-39                  # bf16 subnormals
    x[32:48, 5] = signs * 2.0e37             # a column block whose transform is 8e37 in one row
    x[48:64, 90] = -signs * 1.0e37
    x[0:16, 17] = torch.randn(16, generator=gen) * 1.0e37
    x_inf = x.clone()
    x_inf[16:32, 30] = signs * 3.0e37        # its butterfly overflows: infinities in the block
    for data, xb in (("finite", x.bfloat16()), ("overflowing", x_inf.bfloat16())):
        for given in (None,) + givens:
            kw = {} if given is None else dict(amax_mode=2, amax_in=torch.tensor([given], dtype=torch.float32))
            for rht, outs in ((2, (False, True)), (2, (True, True)), (3, (True, True))):
                same(xb, f"{data} given {given} rounding={rounding} rht={rht} outs={outs}", rounding=rounding,
                     rht=rht, seed=11, offset=3, outs=outs, **kw)


def test_given_amax_takes_no_amax_pass():
    """The ordinary kernels, not the options path or an amax pass, run a given-amax quantization."""
    x = torch.randn(300, 512, device=DEV, dtype=torch.bfloat16)
    a = x.abs().amax().float().reshape(1)
    for outs, want in (((True, False), "rowwise_kernel"), ((True, True), "tile_kernel")):
        names = " ".join(_kernels(lambda: run(x, 1, amax_mode=2, amax_in=a, rounding=1, rht=2, outs=outs)))
        assert want in names, names
        for other in ("amax_flat_kernel", "amax_colrht_kernel", "copy_amax_kernel", "quantize_1d_kernel"):
            assert other not in names, names
    # and the tensor-amax road still runs its amax pass (the profile sees kernels by name)
    names = " ".join(_kernels(lambda: run(x, 1, rounding=1, rht=2)))
    assert "amax_colrht_kernel" in names and "tile_kernel" in names, names


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_eden_cuda_matches_cpu(rng, shape, dtype):
    for kind in KINDS:
        x = make_input(shape, dtype, kind, rng)
        seed = int(torch.randint(0, 2**62, (1,), generator=rng))
        offset = int(torch.randint(0, 2**40, (1,), generator=rng))
        mask = int(torch.randint(0, 1 << 16, (1,), generator=rng))
        for outs, rht in (((True, True), 3), ((True, False), 1), ((False, True), 2)):
            same(x, f"eden {kind} outs={outs}", rounding=2, rht=rht, seed=seed, offset=offset, mask=mask, outs=outs)


def test_options_run_to_run_identical(rng):
    x = make_input((257, 528), torch.bfloat16, "outliers", rng).to(DEV)
    for kw in ({"select": 1, "bound": 256}, {"amax_mode": 1}, {"rounding": 2, "rht": 3, "seed": 9}):
        a = run(x, 1, **kw)
        b = run(x, 1, **kw)
        for u, v in zip(a, b):
            for t, w in zip(u, v):
                assert torch.equal(t.view(torch.uint8), w.view(torch.uint8))


@pytest.mark.parametrize("recipe", ["4over6", "row_scaled", "ms_eden", "adaptive", "bwd_dequantized",
                                    "bwd_high_precision"])
def test_option_layers_cuda_match_cpu(recipe):
    """The per-operand layer on the GPU: operands bit-identical to the CPU's, GEMMs within
    FP32 accumulation (BF16 tensor cores on exact BF16 operands)."""
    torch.manual_seed(0)
    layer = nn4.Linear(64, 96, recipe=recipe, layer_index=2)
    gl = nn4.Linear(64, 96, recipe=recipe, layer_index=2).to(DEV)
    gl.load_state_dict(layer.state_dict())
    x = torch.randn(37, 64)
    dy = torch.randn(37, 96)
    outs = []
    for lay, dev in ((layer, "cpu"), (gl, DEV)):
        xi = x.detach().to(dev).requires_grad_(True)  # a leaf on each device
        y = lay(xi)
        y.backward(dy.to(dev))
        outs.append((y.detach().cpu(), xi.grad.cpu(), lay.weight.grad.cpu()))
    (y0, dx0, dw0), (y1, dx1, dw1) = outs
    for p, q, n in ((y0, y1, "y"), (dx0, dx1, "dx"), (dw0, dw1, "dw")):
        tol = 2.0 ** -18 * p.abs().max().item() * 64
        assert (p - q).abs().max().item() <= tol, f"{recipe} {n}"
