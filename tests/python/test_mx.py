"""MXFP4 on the CPU: the library's reference against the tests' independent reference
(mx_ref), bit for bit (atol = rtol = 0), over fresh random tensors, every mode and the edge
cases; the scale rules against their written formulas at every power-of-two boundary; E8M0
decoding for all 256 bytes; the MXFP4Tensor API and argument errors."""
from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest
import torch

import nvfp4
import mx_ref as ref
from conftest import assert_bytes_equal, first_mismatch
from nvfp4 import _C

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
RULES = list(ref.RULES)
ROUNDINGS = ["rtn", "sr"]
LAYOUT = {"linear": 0, "swizzled": 1}
ROUND = {"rtn": 0, "sr": 1}
RULE = {"ocp": 0, "ceil": 1, "tetrajet": 2}


def check(x, rounding="rtn", rule="ocp", seed=0, offset=0, layout="linear", rowwise=True, columnwise=True):
    """nvfp4.quantize_mxfp4 against mx_ref, every byte of every requested output."""
    q = nvfp4.quantize_mxfp4(x, rounding=rounding, scale_rule=rule, seed=seed, offset=offset, rowwise=rowwise,
                             columnwise=columnwise, scale_layout=layout)
    want = ref.quantize(x, rounding, rule, seed, offset)
    tag = f"shape={tuple(x.shape)} dtype={x.dtype} rounding={rounding} rule={rule} layout={layout}"
    for name, d, on in (("row", q.rowwise, rowwise), ("col", q.columnwise, columnwise)):
        if not on:
            assert d is None
            continue
        wd, ws = want[name]
        assert_bytes_equal(d.data, wd, f"{name} data [{tag}]")
        if layout == "swizzled":
            ws = ref.swizzle(ws)
        assert d.scales.dtype == nvfp4._mx.E8M0_DTYPE
        assert_bytes_equal(d.scales.view(torch.uint8), ws, f"{name} scales [{tag}]")
    return q


def randn(shape, dtype, gen):
    """Rows and columns at different magnitudes (so block scales vary), over a wide range."""
    x = torch.randn(shape, generator=gen)
    if len(shape) == 2 and shape[0] > 0:
        x = x * torch.exp2(torch.randint(-40, 40, (shape[0], 1), generator=gen).float())
        x = x * torch.exp2(torch.randint(-4, 5, (1, shape[1]), generator=gen).float())
    if dtype == torch.float16:
        x = x.clamp(-6e4, 6e4)
    return x.to(dtype)


# ----------------------------------------------------------------------------- every mode
MODES = list(itertools.product(ROUNDINGS, RULES))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("rounding,rule", MODES, ids=lambda v: str(v))
@pytest.mark.parametrize("layout", ["linear", "swizzled"])
def test_every_mode_random(dtype, rounding, rule, layout, gen):
    for shape in [(1, 32), (7, 64), (31, 96), (32, 32), (33, 160), (129, 64), (2, 3, 96)]:
        check(randn(shape, dtype, gen), rounding, rule, seed=int(torch.randint(0, 2**62, (1,), generator=gen)),
              offset=int(torch.randint(0, 2**40, (1,), generator=gen)), layout=layout)


def test_thousands_of_random_tensors():
    """200 fresh random tensors: random shape, dtype, distribution, modes per direction."""
    r = random.Random()
    seed = r.randrange(1 << 30)
    g = torch.Generator().manual_seed(seed)
    for _ in range(200):
        rows = r.choice([1, 2, 3, 5, 7, 13, 31, 32, 33, 64, 65])
        cols = 32 * r.choice([1, 2, 3, 5])
        dtype = r.choice(DTYPES)
        kind = r.choice(["normal", "uniform", "heavy", "sparse"])
        x = torch.randn(rows, cols, generator=g)
        if kind == "uniform":
            x = torch.rand(rows, cols, generator=g) * 2 - 1
        elif kind == "heavy":
            x = x * torch.exp2(torch.randint(-60, 60, (rows, cols), generator=g).float())
        elif kind == "sparse":
            x = torch.where(torch.rand(rows, cols, generator=g) < 0.9, torch.zeros_like(x), x)
        x = (x * 2.0 ** r.randint(-30, 30)).clamp(-6e4, 6e4) if dtype == torch.float16 else x * 2.0 ** r.randint(-90, 90)
        rnd = (r.choice(ROUNDINGS), r.choice(ROUNDINGS))
        rule = (r.choice(RULES), r.choice(RULES))
        try:
            check(x.to(dtype), rnd, rule, seed=r.randrange(1 << 64), offset=r.randrange(1 << 64),
                  layout=r.choice(["linear", "swizzled"]))
        except AssertionError as e:
            raise AssertionError(f"python seed {seed}: {e}") from None


def test_per_direction_modes_equal_separate_calls(gen):
    """One call with different rowwise/columnwise modes = two single-direction calls."""
    x = randn((45, 96), torch.bfloat16, gen)
    both = nvfp4.quantize_mxfp4(x, rounding=("rtn", "sr"), scale_rule=("ocp", "tetrajet"), seed=9, offset=2,
                                columnwise=True)
    row = nvfp4.quantize_mxfp4(x, rounding="rtn", scale_rule="ocp", seed=9, offset=2)
    col = nvfp4.quantize_mxfp4(x, rounding="sr", scale_rule="tetrajet", seed=9, offset=2, rowwise=False,
                               columnwise=True)
    assert torch.equal(both.data, row.data) and torch.equal(both.scales.view(torch.uint8), row.scales.view(torch.uint8))
    assert torch.equal(both.data_t, col.data_t)
    assert torch.equal(both.scales_t.view(torch.uint8), col.scales_t.view(torch.uint8))


# ----------------------------------------------------------------------------- edge values
def edge_tensors():
    g = torch.Generator().manual_seed(7)
    out = {}
    out["zeros"] = torch.zeros(37, 64)
    out["neg_zeros"] = -torch.zeros(37, 64)
    x = torch.randn(37, 64, generator=g)
    x[5, 17] = 3.0e38
    out["one_huge"] = x
    out["flt_max"] = torch.full((20, 32), 3.4028234663852886e38) * torch.sign(torch.randn(20, 32, generator=g))
    out["tiny_subnormal"] = torch.randn(33, 64, generator=g) * 1e-45 * 8
    out["near_2^-126"] = torch.randn(33, 64, generator=g) * 2.0 ** -126
    out["mixed_tiny"] = torch.where(torch.rand(33, 64, generator=g) < 0.5, torch.randn(33, 64, generator=g),
                                    torch.randn(33, 64, generator=g) * 1e-40)
    x = torch.randn(37, 64, generator=g)
    x[3, 9] = float("nan")
    out["one_nan"] = x
    out["all_nan"] = torch.full((17, 32), float("nan"))
    x = torch.randn(37, 64, generator=g)
    x[30, 40] = float("inf")
    x[2, 2] = -float("inf")
    out["inf"] = x
    x = torch.randn(37, 64, generator=g)
    x[0, 0] = float("nan")
    x[1, 1] = float("inf")
    out["nan_and_inf"] = x
    # values on the E2M1 thresholds and grid points once scaled by 2^0 (block amax 6 or 4)
    grid = torch.tensor([0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0, 6.0])
    v = torch.cat([grid, -grid]).reshape(1, 32)
    out["thresholds"] = torch.cat([v, v.flip(1), v * 2 ** 20, v * 2.0 ** -100], 0).repeat(3, 1)
    # ocp saturation: block maxima just below 8 * 2^s
    out["ocp_saturates"] = torch.tensor([7.99, 7.0, 6.5, 6.01, 4.0, 4.01, 5.99, 1.0] * 4).reshape(1, 32) * \
        torch.exp2(torch.arange(-20, 20).float())[:, None]
    return out


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("rounding,rule", MODES, ids=lambda v: str(v))
def test_edge_values(dtype, rounding, rule):
    for name, x in edge_tensors().items():
        # the scale layout is independent of the rounding: both layouts once, with RTN
        for layout in (("linear", "swizzled") if rounding == "rtn" else ("linear",)):
            try:
                check(x.to(dtype), rounding, rule, seed=5, offset=1, layout=layout)
            except AssertionError as e:
                raise AssertionError(f"[{name}] {e}") from None


@pytest.mark.parametrize("rule", RULES)
def test_nan_or_inf_block_decodes_to_nan(rule):
    x = torch.randn(4, 96)
    x[1, 40] = float("nan")     # block (1, 1)
    x[2, 70] = float("inf")     # block (2, 2)
    x[3, 5] = -float("inf")     # block (3, 0)
    q = nvfp4.quantize_mxfp4(x, scale_rule=rule, scale_layout="linear")
    s = q.scales.view(torch.uint8)
    bad = {(1, 1), (2, 2), (3, 0)}
    for r in range(4):
        for b in range(3):
            if (r, b) in bad:
                assert s[r, b] == 0xFF
                assert (q.data[r, 16 * b: 16 * b + 16] == 0x77).all()
            else:
                assert s[r, b] != 0xFF
    d = q.dequantize()
    for r, b in bad:
        assert torch.isnan(d[r, 32 * b: 32 * b + 32]).all()
    assert not torch.isnan(d[0]).any()


@pytest.mark.parametrize("rule", RULES)
def test_zero_block(rule):
    x = torch.zeros(2, 64)
    x[1] = -0.0
    x[0, 40] = 1.0  # block (0, 1) is not zero
    q = nvfp4.quantize_mxfp4(x, scale_rule=rule, scale_layout="linear")
    s = q.scales.view(torch.uint8)
    zero_byte = 127 - 29 if rule == "tetrajet" else 0  # 2^ceil(log2(1e-8 / 6)) = 2^-29, else 2^-127
    assert s[0, 0] == zero_byte and s[1, 0] == zero_byte and s[1, 1] == zero_byte
    assert (q.data[0, :16] == 0).all() and (q.data[1] == 0x88).all()  # -0.0 keeps its sign
    d = q.dequantize()
    assert torch.equal(d, x) and torch.equal(torch.signbit(d), torch.signbit(x))


# ----------------------------------------------------------------------------- scale rules
def _neighbours(v: np.ndarray) -> np.ndarray:
    v = v.astype(np.float32)
    up = np.nextafter(v, np.float32(np.inf))
    dn = np.nextafter(v, np.float32(0))
    return np.concatenate([v, up, dn])


def boundary_amaxes() -> np.ndarray:
    """Every power of two fp32 holds (2^-149 .. 2^127), every 1.5 * 2^e (the ceil rule's
    decision points), each with its neighbours one ulp up and down; 0, FLT_MAX, inf, NaN."""
    p2 = np.ldexp(np.float32(1.0), np.arange(-149, 128)).astype(np.float32)
    p15 = (np.ldexp(np.float64(1.5), np.arange(-149, 128))).astype(np.float32)
    p15 = p15[(p15 > 0) & np.isfinite(p15)]
    special = np.array([0.0, np.finfo(np.float32).max, np.finfo(np.float32).tiny, np.inf, np.nan, 1e-8, 6.0, 4.0,
                        8.0, 3.0 * 2.0 ** 125], dtype=np.float32)
    v = np.concatenate([_neighbours(p2), _neighbours(p15), special])
    return np.unique(v[~np.isnan(v)]).tolist() + [np.nan]


def _blocks_with_amax(amax, gen) -> torch.Tensor:
    """[N, 32]: row i has max |x| = amax[i] (at a random position, random sign), the rest
    smaller values of the same magnitude."""
    a = torch.tensor(amax, dtype=torch.float32)
    n = len(a)
    fill = torch.rand(n, 32, generator=gen) * torch.where(torch.isfinite(a), a, torch.zeros_like(a))[:, None]
    pos = torch.randint(0, 32, (n,), generator=gen)
    sign = torch.where(torch.rand(n, generator=gen) < 0.5, -1.0, 1.0)
    fill[torch.arange(n), pos] = a * sign
    return fill


@pytest.mark.parametrize("rule", RULES)
def test_scale_rule_at_every_power_of_two_boundary(rule, gen):
    amax = boundary_amaxes()
    x = _blocks_with_amax(amax, gen)
    q = nvfp4.quantize_mxfp4(x, scale_rule=rule, scale_layout="linear")
    got = q.scales.view(torch.uint8)[:, 0].numpy()
    want = ref.scale_byte(np.array(amax, dtype=np.float32), rule)
    bad = np.nonzero(got != want)[0]
    assert len(bad) == 0, (f"{len(bad)} of {len(amax)} scale bytes differ; first: amax={amax[bad[0]]!r} "
                           f"got {got[bad[0]]} want {want[bad[0]]}")
    # and the rules say what they promise, in exact arithmetic
    for m, b in zip(amax, got.tolist()):
        if math.isnan(m) or math.isinf(m):
            assert b == 0xFF
            continue
        s = b - 127
        m_eff = 1e-8 if (m == 0 and rule == "tetrajet") else m
        m_eff = float(np.float32(m_eff))
        if m_eff == 0:
            assert b == 0
        elif rule == "ocp":
            assert s == max(-127, math.frexp(m_eff)[1] - 1 - 2)  # floor(log2 M) - 2
        else:  # the smallest s >= -127 with M <= 6 * 2^s
            assert m_eff <= 6.0 * 2.0 ** s and (s == -127 or m_eff > 6.0 * 2.0 ** (s - 1)), (m, s)


@pytest.mark.parametrize("rule", RULES)
def test_scale_rule_random_bit_patterns(rule, gen):
    """Block maxima from random fp32 bit patterns (every exponent, subnormals included)."""
    bits = torch.randint(0, 0x7F800000, (20000,), generator=gen, dtype=torch.int64).to(torch.int32)
    amax = bits.view(torch.float32).numpy().tolist()
    x = _blocks_with_amax(amax, gen)
    q = nvfp4.quantize_mxfp4(x, scale_rule=rule, scale_layout="linear")
    got = q.scales.view(torch.uint8)[:, 0].numpy()
    want = ref.scale_byte(np.array(amax, dtype=np.float32), rule)
    assert (got == want).all(), f"{int((got != want).sum())} differ"


@pytest.mark.parametrize("rule", ["ceil", "tetrajet"])
def test_ceil_rules_never_saturate(rule, gen):
    """|x| <= 6 * 2^s for every element: the block maximum's code is the E2M1 rounding of
    M / 2^s, never a clamp of something above 6."""
    x = torch.randn(300, 128, generator=gen) * torch.exp2(torch.randint(-120, 120, (300, 1), generator=gen).float())
    q = nvfp4.quantize_mxfp4(x, scale_rule=rule, scale_layout="linear")
    s = q.scales.view(torch.uint8).to(torch.int64) - 127
    ratio = x.abs().double().reshape(300, 4, 32).amax(2) / torch.pow(2.0, s.double())
    assert (ratio <= 6.0).all() and (ratio > 3.0).all()
    qo = nvfp4.quantize_mxfp4(x, scale_rule="ocp", scale_layout="linear")
    so = qo.scales.view(torch.uint8).to(torch.int64) - 127
    ratio_o = x.abs().double().reshape(300, 4, 32).amax(2) / torch.pow(2.0, so.double())
    assert (ratio_o >= 4.0).all() and (ratio_o < 8.0).all()
    assert (s - so).min() >= 0 and (s - so).max() <= 1


def test_scale_exponent_clamped_below():
    """Blocks whose exponent would be below -127 get 2^-127 and keep codes (no saturation)."""
    x = torch.zeros(3, 32)
    x[0, 0] = 2.0 ** -126     # ocp: -128 -> -127; x / 2^-127 = 2 -> code 2.0
    x[1, 0] = 1e-45          # smallest subnormal: everything rounds to 0 at 2^-127
    x[2, 0] = 2.0 ** -125 * 1.5
    for rule in RULES:
        q = nvfp4.quantize_mxfp4(x, scale_rule=rule, scale_layout="linear")
        s = q.scales.view(torch.uint8)[:, 0]
        assert int(s[0]) == 0 and int(s[1]) == 0
        d = q.dequantize()
        assert d[0, 0] == 2.0 ** -126 and d[1, 0] == 0.0 and d[2, 0] == 2.0 ** -125 * 1.5


# ----------------------------------------------------------------------------- E8M0 / decode
def _all_pairs():
    """data [256, 16]: row b holds the 16 codes twice; scales [256, 1] = b."""
    codes = torch.arange(16, dtype=torch.uint8)
    packed = (codes[0::2] | (codes[1::2] << 4)).repeat(256, 2)
    scales = torch.arange(256, dtype=torch.int64).to(torch.uint8).reshape(256, 1)
    return packed, scales


def test_e8m0_decode_all_256_bytes():
    packed, scales = _all_pairs()
    out = torch.empty(256, 32)
    _C.mx_dequantize(packed, scales, 0, out, 0)
    one = out[:, 2]  # code 2 = 1.0
    for b in range(256):
        if b == 255:
            assert math.isnan(one[b].item())
        else:
            assert one[b].item() == 2.0 ** (b - 127), b
    # the same bytes through torch's own float8_e8m0fnu decoder
    if hasattr(torch, "float8_e8m0fnu"):
        t = scales.reshape(-1).view(torch.float8_e8m0fnu).float()
        assert torch.equal(torch.isnan(t), torch.isnan(one))
        assert torch.equal(t[:255], one[:255])


@pytest.mark.parametrize("out_dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
def test_decode_every_code_and_scale(out_dtype):
    """Every (code, scale byte) pair: the exact product rounded once to the output dtype.
    In float32 and bfloat16 that is the exact value, except |v| >= 2^128 -> inf."""
    packed, scales = _all_pairs()
    for layout in ("linear", "swizzled"):
        sc = scales if layout == "linear" else ref.swizzle(scales)
        out = torch.empty(256, 32, dtype=out_dtype)
        _C.mx_dequantize(packed, sc, LAYOUT[layout], out, 0)
        exact = ref.decode_exact(packed, scales)
        want = exact.to(out_dtype)
        nan = torch.isnan(want)
        assert torch.equal(torch.isnan(out), nan)
        assert torch.equal(out[~nan].view(torch.uint8 if out_dtype != torch.float32 else torch.uint8),
                           want[~nan].view(torch.uint8)), first_mismatch(out[~nan], want[~nan])
        if out_dtype in (torch.float32, torch.bfloat16):
            fin = ~nan & (exact.abs() < 2.0 ** 128)
            assert torch.equal(out[fin].double(), exact[fin]), "not exact"
            assert torch.isinf(out[~nan & ~fin]).all()
    # where overflow starts: scale 2^127 with |code| >= 2 (codes 4..7), 2^126 with |code| >= 4
    out = torch.empty(256, 32)
    _C.mx_dequantize(packed, scales, 0, out, 0)
    assert torch.isinf(out[254, 4:8]).all() and torch.isfinite(out[254, :4]).all()
    assert torch.isinf(out[253, 6:8]).all() and torch.isfinite(out[253, :6]).all()
    assert torch.isfinite(out[:253]).all()


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
def test_dequantize_matches_reference(dtype, gen):
    for rule in RULES:
        x = randn((70, 160), torch.float32, gen)
        for rounding in ROUNDINGS:
            q = nvfp4.quantize_mxfp4(x, rounding=rounding, scale_rule=rule, seed=3, columnwise=True)
            want = ref.quantize(x, rounding, rule, 3, 0)
            for col in (False, True):
                got = q.dequantize(dtype, columnwise=col)
                d, s = want["col" if col else "row"]
                w = ref.dequantize(d, s, dtype)
                w = w[:, :70].t() if col else w
                got, w = got.contiguous(), w.contiguous()
                assert torch.equal(got.view(torch.uint8), w.view(torch.uint8)), first_mismatch(got, w)


# ----------------------------------------------------------------------------- SR
def test_sr_reproducible_and_seeded(gen):
    x = randn((64, 128), torch.bfloat16, gen)
    a = nvfp4.quantize_mxfp4(x, rounding="sr", seed=11, offset=3, columnwise=True)
    b = nvfp4.quantize_mxfp4(x, rounding="sr", seed=11, offset=3, columnwise=True)
    c = nvfp4.quantize_mxfp4(x, rounding="sr", seed=12, offset=3, columnwise=True)
    d = nvfp4.quantize_mxfp4(x, rounding="sr", seed=11, offset=4, columnwise=True)
    assert torch.equal(a.data, b.data) and torch.equal(a.data_t, b.data_t)
    assert not torch.equal(a.data, c.data) and not torch.equal(a.data, d.data)
    assert not torch.equal(a.data_t, c.data_t)


@pytest.mark.parametrize("rule", ["ceil", "tetrajet"])
def test_sr_is_unbiased(rule, gen):
    """E[Q_sr(x)] = x where nothing saturates: the mean over 4096 seeds of every element
    of a block is within 5 standard errors of x (the SR error of one draw is bounded by the
    local E2M1 gap, so its variance is at most gap^2 / 4)."""
    x = torch.rand(1, 32, generator=gen) * 6 - 3
    x[0, 0] = 5.9  # block max: scale 2^0 for both rules
    n = 4096
    xs = x.repeat(n, 1)
    q = nvfp4.quantize_mxfp4(xs, rounding="sr", scale_rule=rule, seed=int(torch.randint(0, 2**62, (1,), generator=gen)),
                             scale_layout="linear")
    assert (q.scales.view(torch.uint8) == 127).all()
    mean = q.dequantize().double().mean(0)
    gap = torch.where(x.abs() < 2, 0.5, torch.where(x.abs() < 4, 1.0, 2.0)).double()[0]
    tol = 5 * gap / 2 / math.sqrt(n)
    assert ((mean - x[0].double()).abs() <= tol).all(), (mean - x[0].double()).abs().max()


# ----------------------------------------------------------------------------- API
def test_tensor_api(gen):
    x = randn((3, 5, 64), torch.bfloat16, gen)
    q = nvfp4.quantize_mxfp4(x, columnwise=True)
    assert q.shape == (3, 5, 64) and q.dtype == torch.bfloat16 and q.block_size == 32
    assert q.data.shape == (15, 32) and q.scales.shape == (128, 4)
    assert q.data_t.shape == (64, 16) and q.scales_t.shape == (128, 4)
    assert q.rows == 15 and q.cols == 64
    d = q.dequantize()
    assert d.shape == x.shape and d.dtype == torch.bfloat16
    dc = q.dequantize(torch.float32, columnwise=True)
    assert dc.shape == x.shape
    # both directions approximate x, to within half an E2M1 step of each block's scale
    assert (d.float() - x.float()).abs().max() <= x.float().abs().max() / 4 * 2 + 1e-30
    t = q.T
    assert t.transposed and t.rows == 64 and t.cols == 15 and t.data is q.data_t
    assert torch.equal(t.dequantize(torch.float32), dc.reshape(15, 64).t())
    assert torch.equal(t.T.dequantize(torch.float32), q.dequantize(torch.float32))
    r = repr(q)
    assert "MXFP4Tensor" in r and "rowwise" in r and "columnwise" in r and "ocp" in r
    assert q.to("cpu").data.data_ptr() == q.data.data_ptr() or torch.equal(q.to("cpu").data, q.data)
    with pytest.raises(ValueError, match="columnwise"):
        nvfp4.quantize_mxfp4(x).dequantize(columnwise=True)
    with pytest.raises(TypeError, match="dtype"):
        q.dequantize(torch.int32)


def test_numpy_input_and_empty():
    x = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    q = nvfp4.quantize_mxfp4(x)
    assert torch.equal(q.data, nvfp4.quantize_mxfp4(torch.from_numpy(x)).data)
    for shape in [(0, 32), (0, 64)]:
        e = nvfp4.quantize_mxfp4(torch.empty(shape), columnwise=True)
        assert e.data.numel() == 0 and e.data_t.shape == (shape[1], 0) and e.dequantize().shape == shape


def test_swizzled_scales_are_the_swizzle_of_linear(gen):
    x = randn((300, 224), torch.float32, gen)
    lin = nvfp4.quantize_mxfp4(x, columnwise=True, scale_layout="linear")
    swz = nvfp4.quantize_mxfp4(x, columnwise=True, scale_layout="swizzled")
    for a, b in ((lin.scales, swz.scales), (lin.scales_t, swz.scales_t)):
        assert torch.equal(nvfp4.swizzle_scales(a.view(torch.uint8)), b.view(torch.uint8))
        assert torch.equal(ref.swizzle(a.view(torch.uint8)), b.view(torch.uint8))
    assert torch.equal(lin.dequantize(), swz.dequantize())


def test_python_errors_name_the_parameter():
    x = torch.randn(4, 64)
    with pytest.raises(TypeError, match="x: dtype"):
        nvfp4.quantize_mxfp4(x.to(torch.int32))
    with pytest.raises(ValueError, match="multiple of 32"):
        nvfp4.quantize_mxfp4(torch.randn(4, 48))
    with pytest.raises(ValueError, match="contiguous"):
        nvfp4.quantize_mxfp4(torch.randn(64, 64).t())
    with pytest.raises(ValueError, match="rounding"):
        nvfp4.quantize_mxfp4(x, rounding="nearest")
    with pytest.raises(TypeError, match="rounding"):
        nvfp4.quantize_mxfp4(x, rounding=("rtn",))
    with pytest.raises(TypeError, match="rounding\\[1\\]: must be a str"):
        nvfp4.quantize_mxfp4(x, rounding=("rtn", 1))
    with pytest.raises(TypeError, match="rowwise: must be a bool"):
        nvfp4.quantize_mxfp4(x, rowwise=1)
    with pytest.raises(TypeError, match="seed: must be an int"):
        nvfp4.quantize_mxfp4(x, rounding="sr", seed="7")
    with pytest.raises(TypeError, match="columnwise: must be a bool"):
        nvfp4.quantize_mxfp4(x).dequantize(columnwise="yes")
    with pytest.raises(ValueError, match="scale_rule"):
        nvfp4.quantize_mxfp4(x, scale_rule="floor")
    with pytest.raises(ValueError, match="scale_rule"):
        nvfp4.quantize_mxfp4(x, scale_rule=("ocp", "x"))
    with pytest.raises(ValueError, match="scale_layout"):
        nvfp4.quantize_mxfp4(x, scale_layout="blocked")
    with pytest.raises(ValueError, match="rowwise/columnwise"):
        nvfp4.quantize_mxfp4(x, rowwise=False)
    with pytest.raises(ValueError, match="seed"):
        nvfp4.quantize_mxfp4(x, rounding="sr", seed=-1)
    with pytest.raises(ValueError, match="offset"):
        nvfp4.quantize_mxfp4(x, offset=2**64)
    with pytest.raises(ValueError, match="x: must have"):
        nvfp4.quantize_mxfp4(torch.tensor(1.0))


def test_c_api_errors_name_the_parameter():
    x = torch.randn(4, 64)
    d = torch.empty(4, 32, dtype=torch.uint8)
    s = torch.empty(4, 2, dtype=torch.uint8)

    def call(xx=x, rd=d, rs=s, cd=None, cs=None, rr=0, rule=0, layout=0):
        _C.mx_quantize(xx, rd, rs, cd, cs, rr, rule, 0, 0, layout, 0, 0, 0)

    call()  # valid
    with pytest.raises(ValueError, match="rowwise.data: expected shape"):
        call(rd=torch.empty(4, 16, dtype=torch.uint8))
    with pytest.raises(ValueError, match="rowwise.scales: expected shape"):
        call(layout=1)  # swizzled needs [128, 4]
    with pytest.raises(ValueError, match="rowwise.scales: dtype"):
        call(rs=torch.empty(4, 2, dtype=torch.float32))
    with pytest.raises(ValueError, match="row_rounding: unknown value 5"):
        call(rr=5)
    with pytest.raises(ValueError, match="row_rule: unknown value 3"):
        call(rule=3)
    with pytest.raises(ValueError, match="scale_layout: unknown value 2"):
        call(layout=2)
    with pytest.raises(ValueError, match="at least one output"):
        call(rd=None, rs=None)
    with pytest.raises(ValueError, match="row_scales"):
        call(rs=None)
    with pytest.raises(ValueError, match="multiple of 32"):
        _C.mx_quantize(torch.randn(4, 48), torch.empty(4, 24, dtype=torch.uint8), torch.empty(4, 1, dtype=torch.uint8),
                       None, None, 0, 0, 0, 0, 0, 0, 0, 0)
    with pytest.raises(ValueError, match="columnwise.data: expected shape \\[64, 16\\]"):
        call(rd=None, rs=None, cd=torch.empty(64, 2, dtype=torch.uint8), cs=torch.empty(64, 1, dtype=torch.uint8))
    out = torch.empty(4, 64)
    with pytest.raises(ValueError, match="out: expected shape"):
        _C.mx_dequantize(d, s, 0, torch.empty(4, 32), 0)
    with pytest.raises(ValueError, match="out: dtype"):
        _C.mx_dequantize(d, s, 0, out.to(torch.float64), 0)
    with pytest.raises(ValueError, match="scale_layout"):
        _C.mx_dequantize(d, s, 7, out, 0)
    with pytest.raises(ValueError, match="q.scales: expected shape"):
        _C.mx_dequantize(d, s, 1, out, 0)
    with pytest.raises(ValueError, match="multiple of 32"):
        _C.mx_dequantize(torch.empty(4, 8, dtype=torch.uint8), s, 0, torch.empty(4, 16), 0)
