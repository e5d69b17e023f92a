"""MXFP4 CUDA kernels, bit for bit against the CPU reference (atol = rtol = 0).

Every GPU call writes into outputs poisoned beforehand (0xA5 bytes), so a byte the kernels
forget to write shows up as a mismatch; the reference is the same call on the same input on
the CPU (itself checked against the independent mx_ref in test_mx.py). Skipped when there is
no GPU, or when this build has no kernels for the GPU's architecture.
"""
from __future__ import annotations

import itertools
import math

import pytest
import torch

import nvfp4
from conftest import first_diff
from nvfp4 import _C

if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)


def _arch_built() -> bool:
    archs = [a.rstrip("af") for a in _C.build_cuda_archs().split(";") if a]
    major, minor = torch.cuda.get_device_capability()
    return f"{major}{minor}" in archs


if not _arch_built():
    pytest.skip(f"this nvfp4 build has no kernels for sm_{''.join(map(str, torch.cuda.get_device_capability()))} "
                f"(built: {_C.build_cuda_archs() or 'none'})", allow_module_level=True)

from test_mx import edge_tensors  # noqa: E402  (after the skips: it imports nothing GPU-specific)

DEV = torch.device("cuda")
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
POISON = 0xA5
ROUND = {"rtn": 0, "sr": 1}
RULE = {"ocp": 0, "ceil": 1, "tetrajet": 2}
LAYOUT = {"linear": 0, "swizzled": 1}


def _alloc(rows: int, cols: int, layout: str, device):
    nb = cols // 32
    data = torch.full((rows, cols // 2), POISON, dtype=torch.uint8, device=device)
    shape = ((rows + 127) // 128 * 128, (nb + 3) // 4 * 4) if layout == "swizzled" else (rows, nb)
    return data, torch.full(shape, POISON, dtype=torch.uint8, device=device)


def quantize_raw(x, rounding=("rtn", "rtn"), rule=("ocp", "ocp"), seed=0, offset=0, rowwise=True, columnwise=False,
                 layout="swizzled"):
    """_C.mx_quantize on x's device into poisoned outputs: {"row": (data, scales), "col": ...}."""
    if isinstance(rounding, str):
        rounding = (rounding, rounding)
    if isinstance(rule, str):
        rule = (rule, rule)
    x2 = x.reshape(-1, x.shape[-1])
    rows, cols = x2.shape
    row = _alloc(rows, cols, layout, x.device) if rowwise else None
    col = _alloc(cols, (rows + 31) // 32 * 32, layout, x.device) if columnwise else None
    stream = torch.cuda.current_stream().cuda_stream if x.is_cuda else 0
    _C.mx_quantize(x2, *(row or (None, None)), *(col or (None, None)), ROUND[rounding[0]], RULE[rule[0]],
                   ROUND[rounding[1]], RULE[rule[1]], LAYOUT[layout], seed, offset, stream)
    return {"row": row, "col": col}


def assert_same(got, want, what):
    for name, g, w in (("data", got[0], want[0]), ("scales", got[1], want[1])):
        g = g.cpu()
        assert g.shape == w.shape, f"{what} {name}: shape {tuple(g.shape)} != {tuple(w.shape)}"
        assert torch.equal(g, w), f"{what} {name}: {first_diff(g, w)}"


def check(x, **kw):
    """Quantize x on the GPU and on the CPU with the same options; compare every byte."""
    got = quantize_raw(x.to(DEV), **kw)
    torch.cuda.synchronize()
    want = quantize_raw(x.cpu(), **kw)
    what = f"{tuple(x.shape)} {x.dtype} {kw}"
    for d in ("row", "col"):
        if want[d] is not None:
            assert_same(got[d], want[d], f"{what} [{d}]")
    return got


def randn(shape, dtype, gen):
    x = torch.randn(shape, generator=gen)
    if len(shape) == 2 and shape[0] > 0:
        x = x * torch.exp2(torch.randint(-30, 30, (shape[0], 1), generator=gen).float())
        x = x * torch.exp2(torch.randint(-3, 4, (1, shape[1]), generator=gen).float())
    if dtype == torch.float16:
        x = x.clamp(-6e4, 6e4)
    return x.to(dtype)


# ----------------------------------------------------------------------------- shapes
SHAPES = [(m, k) for m in (1, 7, 31, 32, 33, 63, 64, 65, 127, 129, 300) for k in (32, 96, 128, 160, 544)]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_odd_shapes(shape, dtype, gen):
    x = randn(shape, dtype, gen)
    check(x)                                                        # rowwise only, swizzled
    check(x, columnwise=True, layout="linear")                      # both, linear
    check(x, rowwise=False, columnwise=True, rounding="sr", rule="ceil", seed=1234, offset=3)
    check(x, columnwise=True, rounding=("sr", "rtn"), rule=("tetrajet", "ocp"), seed=99)


# ----------------------------------------------------------------------------- every mode
MODES = list(itertools.product(["rtn", "sr"], ["ocp", "ceil", "tetrajet"]))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("shape", [(129, 160), (200, 288), (5, 32)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_every_mode_combination(shape, dtype, gen):
    x = randn(shape, dtype, gen)
    for (rr, rl), (cr, cl) in itertools.product(MODES, MODES):
        for layout in ("linear", "swizzled"):
            check(x, rounding=(rr, cr), rule=(rl, cl), rowwise=True, columnwise=True, layout=layout, seed=77, offset=5)
    for (r, l), layout in itertools.product(MODES, ("linear", "swizzled")):
        check(x, rounding=r, rule=l, rowwise=True, columnwise=False, layout=layout, seed=78)
        check(x, rounding=r, rule=l, rowwise=False, columnwise=True, layout=layout, seed=79)


REAL_SHAPES = [(4096, 4096), (2048, 14336), (14336, 512), (8 * 2048 + 5, 2048)]


@pytest.mark.parametrize("shape", REAL_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_llm_shapes(shape, gen):
    x = randn(shape, torch.bfloat16, gen)
    check(x)                                                                  # forward operand
    check(x, rounding="sr", rule="ceil", columnwise=True, seed=11)            # gradient, both ways


def test_batched_leading_dims(gen):
    x = randn((3, 5, 7, 64), torch.float16, gen)
    check(x, columnwise=True)
    check(x, columnwise=True, rounding="sr", rule="tetrajet", seed=9, layout="linear")


# ----------------------------------------------------------------------------- edge values
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
def test_edge_values(dtype):
    for name, x in edge_tensors().items():
        for rounding, rule in MODES:
            for layout in ("linear", "swizzled"):
                try:
                    check(x.to(dtype), rounding=rounding, rule=rule, columnwise=True, layout=layout, seed=5)
                except AssertionError as e:
                    raise AssertionError(f"[{name}] {e}") from None


def _around(values, ulps):
    base = torch.tensor(values, dtype=torch.float32).view(torch.int32)
    steps = torch.arange(-ulps, ulps + 1, dtype=torch.int32)
    v = (base[:, None] + steps[None, :]).reshape(-1)
    v = v[v >= 0].view(torch.float32)
    v = v[(v >= 0) & (v <= 6.0)]
    return torch.cat([v, -v])


def test_codec_boundaries_near_decisions(gen):
    """Blocks [6, v1..v31] have scale 2^0 under every rule, so each v is encoded as is: every
    fp32 within 2048 ulps of each RN threshold and E2M1 grid point, plus random values."""
    pts = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
    v = torch.cat([_around(pts, 2048), torch.rand(30000, generator=gen) * 12 - 6,
                   torch.tensor([0.0, -0.0, 1e-45, -1e-45, 1e-30, 6.0, -6.0])])
    v = v[torch.randperm(len(v), generator=gen)]
    n = (len(v) + 30) // 31 * 31
    v = torch.cat([v, torch.zeros(n - len(v))]).reshape(-1, 31)
    x = torch.cat([torch.full((v.shape[0], 1), 6.0), v], 1)
    for rule in RULE:
        check(x, rule=rule, layout="linear")
        for seed in (0, 1, 2**63 + 5):
            check(x, rounding="sr", rule=rule, seed=seed, offset=seed // 3, layout="linear")
    check(x, rounding="sr", seed=4, columnwise=True)


# ----------------------------------------------------------------------------- SR and launch config
def test_sr_reproducible_and_launch_independent(gen, monkeypatch):
    x = randn((777, 288), torch.bfloat16, gen).to(DEV)
    kw = dict(rounding="sr", rule=("ceil", "tetrajet"), seed=2024, offset=7, columnwise=True)
    ref = quantize_raw(x, **kw)
    same = quantize_raw(x, **kw)
    for cap in ("1", "3", "17"):
        monkeypatch.setenv("NVFP4_QUANT_GRID_CAP", cap)
        capped = quantize_raw(x, **kw)
        for d in ("row", "col"):
            assert torch.equal(capped[d][0], ref[d][0]) and torch.equal(capped[d][1], ref[d][1]), f"grid cap {cap}"
    monkeypatch.delenv("NVFP4_QUANT_GRID_CAP")
    other = quantize_raw(x, **{**kw, "seed": 2025})
    other_off = quantize_raw(x, **{**kw, "offset": 8})
    for d in ("row", "col"):
        assert torch.equal(same[d][0], ref[d][0])
        assert not torch.equal(other[d][0], ref[d][0])
        assert not torch.equal(other_off[d][0], ref[d][0])
    want = quantize_raw(x.cpu(), **kw)
    for d in ("row", "col"):
        assert_same(ref[d], want[d], f"sr {d}")


def test_grid_cap_rtn_and_dequantize(gen, monkeypatch):
    x = randn((300, 224), torch.float32, gen)
    for cap in ("1", "2", "5"):
        monkeypatch.setenv("NVFP4_QUANT_GRID_CAP", cap)
        check(x)
        check(x, columnwise=True, rule="ceil")
        check(x, columnwise=True, layout="linear", rounding="sr", seed=3)
        q = nvfp4.quantize_mxfp4(x.to(DEV), columnwise=True)
        assert torch.equal(q.dequantize(torch.float32).cpu(), q.to("cpu").dequantize(torch.float32))


def test_non_default_stream(gen):
    x = randn((513, 96), torch.float16, gen).to(DEV)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        got = quantize_raw(x, columnwise=True, rounding="sr", seed=1)
    s.synchronize()
    want = quantize_raw(x.cpu(), columnwise=True, rounding="sr", seed=1)
    for d in ("row", "col"):
        assert_same(got[d], want[d], d)


def test_empty_tensor():
    for shape in [(0, 32), (0, 64)]:
        q = nvfp4.quantize_mxfp4(torch.empty(shape, device=DEV), columnwise=True)
        torch.cuda.synchronize()
        assert q.data.numel() == 0 and q.dequantize().shape == shape


# ----------------------------------------------------------------------------- high level + dequantize
def test_high_level_api_matches_cpu(gen):
    x = randn((200, 160), torch.bfloat16, gen)
    for kw in (dict(), dict(columnwise=True, rounding="sr", scale_rule="tetrajet", seed=8),
               dict(columnwise=True, rounding=("rtn", "sr"), scale_rule=("ocp", "ceil"), seed=8)):
        qg = nvfp4.quantize_mxfp4(x.to(DEV), **kw)
        qc = nvfp4.quantize_mxfp4(x, **kw)
        for a, b in ((qg.data, qc.data), (qg.scales, qc.scales), (qg.data_t, qc.data_t), (qg.scales_t, qc.scales_t)):
            if b is not None:
                assert torch.equal(a.cpu().view(torch.uint8), b.view(torch.uint8))
        for dt in DTYPES:
            assert torch.equal(qg.dequantize(dt).cpu().view(torch.uint8), qc.dequantize(dt).view(torch.uint8))


@pytest.mark.parametrize("layout", ["linear", "swizzled"])
@pytest.mark.parametrize("out_dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
def test_dequantize_matches_cpu(layout, out_dtype, gen):
    """Random code bytes and every scale byte (0xFF NaN, 2^127 overflow included)."""
    for rows, cols in ((1, 32), (7, 96), (129, 160), (300, 1024)):
        data = torch.randint(0, 256, (rows, cols // 2), generator=gen, dtype=torch.uint8)
        nb = cols // 32
        shape = ((rows + 127) // 128 * 128, (nb + 3) // 4 * 4) if layout == "swizzled" else (rows, nb)
        scales = torch.randint(0, 256, shape, generator=gen, dtype=torch.uint8)
        want = torch.empty((rows, cols), dtype=out_dtype)
        _C.mx_dequantize(data, scales, LAYOUT[layout], want, 0)
        got = torch.full((rows, cols), float("nan"), dtype=out_dtype, device=DEV)
        _C.mx_dequantize(data.to(DEV), scales.to(DEV), LAYOUT[layout], got, torch.cuda.current_stream().cuda_stream)
        got = got.cpu()
        # NaN results: any NaN is right where the reference is NaN (payloads differ).
        nan = torch.isnan(want)
        assert torch.equal(torch.isnan(got), nan), f"{rows}x{cols}: NaN positions differ"
        g = got.view(torch.int16 if out_dtype != torch.float32 else torch.int32)[~nan]
        w = want.view(g.dtype)[~nan]
        assert torch.equal(g, w), f"{rows}x{cols}: {first_diff(g, w)}"


def test_swizzled_equals_swizzle_of_linear_on_gpu(gen):
    x = randn((300, 224), torch.bfloat16, gen).to(DEV)
    lin = quantize_raw(x, columnwise=True, layout="linear")
    swz = quantize_raw(x, columnwise=True, layout="swizzled")
    for d in ("row", "col"):
        expect = torch.full(swz[d][1].shape, POISON, dtype=torch.uint8, device=DEV)
        _C.swizzle(lin[d][1], expect, True, torch.cuda.current_stream().cuda_stream)
        assert torch.equal(swz[d][1], expect), d
        assert torch.equal(swz[d][0], lin[d][0]), d
