"""CUDA quantization kernels, bit for bit against the CPU reference.

Every call goes through the low-level binding with output buffers poisoned beforehand
(0xA5 bytes, NaN amax), so a byte the kernels forget to write shows up as a mismatch.
The reference is the same call on the same input moved to the CPU. Skipped when there is
no GPU, or when this build has no kernels for the GPU's architecture.
"""
from __future__ import annotations

import ctypes
import glob
import itertools
import math
import os

import pytest
import torch

import nvfp4
from conftest import first_diff
from nvfp4 import _C

if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)


def _arch_built() -> bool:
    # family-specific targets ("90a", "100a"...) run only on that exact compute capability
    archs = [a.rstrip("af") for a in _C.build_cuda_archs().split(";") if a]
    major, minor = torch.cuda.get_device_capability()
    return f"{major}{minor}" in archs


if not _arch_built():
    pytest.skip(f"this nvfp4 build has no kernels for sm_{''.join(map(str, torch.cuda.get_device_capability()))} "
                f"(built: {_C.build_cuda_archs() or 'none'})", allow_module_level=True)

DEV = torch.device("cuda")
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
POISON = 0xA5
BLOCK = {"1d": 0, "2d": 1}
ROUND = {"rtn": 0, "sr": 1}
LAYOUT = {"linear": 0, "swizzled": 1}
RHT = {"none": 0, "rowwise": 1, "columnwise": 2, "both": 3}
DEFAULT_MASK = _C.default_rht_sign_mask()


# ----------------------------------------------------------------------------- helpers
def _alloc(rows: int, cols: int, layout: str, device) -> tuple:
    sc = cols // 16
    data = torch.full((rows, cols // 2), POISON, dtype=torch.uint8, device=device)
    if layout == "swizzled":
        shape = ((rows + 127) // 128 * 128, (sc + 3) // 4 * 4)
    else:
        shape = (rows, sc)
    scales = torch.full(shape, POISON, dtype=torch.uint8, device=device)
    amax = torch.full((1,), float("nan"), dtype=torch.float32, device=device)
    return data, scales, amax


def poisoned_workspace(device):
    """A quantization workspace of 0xFF bytes: 0xFFFFFFFF is larger than any partial the amax
    pass stores, so a slot it did not write would win the quantize pass's max."""
    return torch.full((_C.quantize_workspace_bytes,), 0xFF, dtype=torch.uint8, device=device)


def quantize_raw(x: torch.Tensor, block="1d", rounding="rtn", rht="none", sign_mask=DEFAULT_MASK, seed=0, offset=0,
                 rowwise=True, columnwise=False, layout="swizzled", workspace=None):
    """_C.quantize on x's device with poisoned outputs; returns {"row": (d, s, a), "col": ...}.
    workspace: None (the amax outputs zeroed by memsets) or a tensor (nvfp4_quantize_ws)."""
    x2 = x.reshape(-1, x.shape[-1]) if x.dim() != 2 else x
    rows, cols = x2.shape
    row = _alloc(rows, cols, layout, x.device) if rowwise else None
    col = _alloc(cols, (rows + 15) // 16 * 16, layout, x.device) if columnwise else None
    stream = torch.cuda.current_stream().cuda_stream if x.is_cuda else 0
    _C.quantize(x2, *(row or (None, None, None)), *(col or (None, None, None)), BLOCK[block], ROUND[rounding],
                LAYOUT[layout], RHT[rht], sign_mask, seed, offset, stream, workspace)
    return {"row": row, "col": col}


def assert_same(got, want, what: str):
    """Bytes of data/scales equal; amax bit-equal (NaN: both NaN, payloads may differ)."""
    for name, g, w in (("data", got[0], want[0]), ("scales", got[1], want[1])):
        g = g.cpu()
        assert g.shape == w.shape, f"{what} {name}: shape {tuple(g.shape)} != {tuple(w.shape)}"
        assert torch.equal(g, w), f"{what} {name}: {first_diff(g, w)}"
    ga, wa = got[2].cpu(), want[2]
    if math.isnan(wa.item()):
        assert math.isnan(ga.item()), f"{what} amax: got {ga.item()}, want NaN"
    else:
        assert ga.view(torch.int32).item() == wa.view(torch.int32).item(), \
            f"{what} amax: got {ga.item()!r} ({ga.view(torch.int32).item():#010x}), want {wa.item()!r}"


def check(x: torch.Tensor, workspace=False, **kw):
    """Quantize x on the GPU and on the CPU with the same options; compare every byte.
    workspace: the GPU call gets a poisoned quantization workspace."""
    xg = x.to(DEV)
    got = quantize_raw(xg, workspace=poisoned_workspace(DEV) if workspace else None, **kw)
    torch.cuda.synchronize()
    want = quantize_raw(x.cpu(), **kw)
    what = f"{tuple(x.shape)} {x.dtype} {kw}"
    for d in ("row", "col"):
        if want[d] is not None:
            assert_same(got[d], want[d], f"{what} [{d}]")
    return got


def randn(shape, dtype, gen, scale_spread=True):
    x = torch.randn(shape, generator=gen, dtype=torch.float32)
    if scale_spread and len(shape) == 2 and shape[0] > 0:
        # rows and columns at different magnitudes, so block scales vary
        x = x * torch.exp2(torch.randint(-6, 7, (shape[0], 1), generator=gen).float())
        x = x * torch.exp2(torch.randint(-3, 4, (1, shape[1]), generator=gen).float())
    return x.to(dtype)


# ----------------------------------------------------------------------------- shapes
SHAPES = [(m, k) for m in (1, 7, 13, 31, 127, 129, 4096) for k in (16, 48, 4096)]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_shapes_rowwise_and_both(shape, dtype, gen):
    x = randn(shape, dtype, gen)
    check(x)                                               # rowwise kernel
    check(x, columnwise=True, layout="linear")             # tile kernel, both outputs
    if shape[0] * shape[1] <= 1 << 20:
        check(x, rowwise=False, columnwise=True, rounding="sr", seed=1234, rht="columnwise")


# ----------------------------------------------------------------------------- options
OPTS_1D = list(itertools.product(["rtn", "sr"], ["none", "rowwise", "columnwise", "both"],
                                 [(True, False), (False, True), (True, True)], ["linear", "swizzled"]))
OPTS_2D = list(itertools.product(["rtn", "sr"], [(True, False), (False, True), (True, True)], ["linear", "swizzled"]))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
# rows below/above multiples of 16 and 128, one row, columns not a multiple of 64
@pytest.mark.parametrize("shape", [(129, 80), (200, 272), (5, 16), (1, 48), (17, 112), (255, 208)],
                         ids=lambda s: f"{s[0]}x{s[1]}")
def test_every_option_combination(shape, dtype, gen):
    x = randn(shape, dtype, gen)
    for rounding, rht, (row, col), layout in OPTS_1D:
        check(x, block="1d", rounding=rounding, rht=rht, rowwise=row, columnwise=col, layout=layout, seed=77, offset=5)
    for rounding, (row, col), layout in OPTS_2D:
        check(x, block="2d", rounding=rounding, rowwise=row, columnwise=col, layout=layout, seed=78, offset=6)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
def test_every_sign_pattern(dtype, gen):
    # 256 rows of 16; row r's first 8 elements carry the sign pattern r, the last 8 its
    # complement, with magnitudes whose exponent bits vary (the sign gathering must read bit 31
    # alone) and -0.0 among them; RN and SR, both kernels, both orientations.
    mags = torch.exp2(torch.randint(-12, 13, (256, 16), generator=gen).float()) * (1 + torch.rand(256, 16, generator=gen))
    mags[:, 5] = 0.0
    bits = (torch.arange(256)[:, None] >> torch.arange(8)[None, :]) & 1
    neg = torch.cat([bits, 1 - bits], dim=1).bool()
    x = torch.where(neg, -mags, mags).to(dtype)
    for rounding in ("rtn", "sr"):
        check(x, rounding=rounding, seed=3)
        check(x, rounding=rounding, seed=3, columnwise=True, layout="linear")
        check(x.t().contiguous(), rounding=rounding, seed=3, rowwise=False, columnwise=True, layout="linear")
        check(x, block="2d", rounding=rounding, seed=3, columnwise=True)


def test_custom_rht_signs(gen):
    x = randn((96, 160), torch.bfloat16, gen)
    for mask in (0x0000, 0xFFFF, 0x1234, int(torch.randint(0, 1 << 16, (1,), generator=gen))):
        check(x, rht="both", sign_mask=mask, rowwise=True, columnwise=True)
        check(x, rht="rowwise", sign_mask=mask, rounding="sr", seed=3)


REAL_SHAPES = [(4096, 4096), (2048, 14336), (14336, 512)]


@pytest.mark.parametrize("shape", REAL_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_llm_shapes(shape, gen):
    x = randn(shape, torch.bfloat16, gen)
    check(x)                                                          # forward activation: 1D RTN
    check(x, rounding="sr", rht="columnwise", columnwise=True, seed=11)  # wgrad operand
    if shape == (4096, 4096):
        check(x, block="2d", columnwise=True)                         # weight


def test_batched_leading_dims(gen):
    x = randn((3, 5, 7, 64), torch.float16, gen, scale_spread=False)
    check(x, columnwise=True)
    check(x.reshape(-1, 64), block="2d", columnwise=True, rounding="sr", seed=9)


# ----------------------------------------------------------------------------- edge values
def _edge_tensors(dtype):
    big = {torch.float32: 3.0e38, torch.float16: 65504.0, torch.bfloat16: 3.0e38}[dtype]
    tiny = {torch.float32: 1e-45, torch.float16: 6e-8, torch.bfloat16: 1e-38}[dtype]
    out = {}
    out["zeros"] = torch.zeros(37, 64)
    out["neg_zeros"] = -torch.zeros(37, 64)
    x = torch.randn(37, 64)
    x[5, 17] = big
    out["one_huge"] = x
    out["all_huge"] = torch.full((20, 32), big) * torch.sign(torch.randn(20, 32))
    out["tiny"] = torch.randn(33, 48) * tiny * 4
    out["mixed_tiny"] = torch.where(torch.rand(33, 48) < 0.5, torch.randn(33, 48), torch.randn(33, 48) * tiny)
    x = torch.randn(37, 64)
    x[3, 9] = float("nan")
    out["one_nan"] = x
    out["all_nan"] = torch.full((17, 32), float("nan"))
    x = torch.randn(37, 64)
    x[30, 40] = float("inf")
    x[2, 2] = -float("inf")
    out["inf"] = x
    x = torch.randn(37, 64)
    x[0, 0] = float("nan")
    x[1, 1] = float("inf")
    out["nan_and_inf"] = x
    # values on E2M1 thresholds and grid points once scaled by a unit block scale
    grid = torch.tensor([0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0])
    v = torch.cat([grid, -grid, torch.tensor([6.0, -6.0])]).reshape(1, 32)
    out["thresholds"] = torch.cat([v, v.flip(1), torch.full((1, 32), 2688.0)], 0).repeat(3, 1)
    return {k: t.to(dtype) for k, t in out.items()}


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
def test_edge_values(dtype):
    for name, x in _edge_tensors(dtype).items():
        for kw in (dict(), dict(columnwise=True, layout="linear"), dict(rounding="sr", seed=5, columnwise=True),
                   dict(rht="both", columnwise=True), dict(block="2d", columnwise=True),
                   dict(block="2d", rounding="sr", seed=6, columnwise=True, layout="linear")):
            try:
                check(x, **kw)
            except AssertionError as e:
                raise AssertionError(f"[{name}] {e}") from None


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
def test_columnwise_rht_amax_where_the_last_butterfly_stage_meets_infinities(dtype):
    """The columnwise-RHT amax pass takes each pair of its last butterfly stage as |a| + |b|
    (the larger of |a + b| and |a - b|), which is inf where the reference's a + b or a - b is
    inf - inf = NaN: its branch for an infinite maximum must then give NaN, and inf where one
    operand is infinite. Infinities in rows r and r + 8 of a 16-row group reach the last stage
    as two infinite operands; one in row r as one; rows 0 and 3 meet (inf - inf) in an earlier
    stage, whose NaN the sums carry. With the recipe's signs (compiled into the
    BF16 pass) and others, both amax paths (memsets, workspace partials); every byte against
    the CPU reference, and the amax's kind checked directly."""
    for mask in (DEFAULT_MASK, 0x0000, 0x1234):
        for rows, want_nan in (((16, 24), True), ((21, 29), True), ((19,), False), ((16, 19), True)):
            x = torch.randn(48, 64)
            for r in rows:
                x[r, 7] = float("inf")
            x = x.to(dtype)
            for ws in (False, True):
                got = check(x, rht="columnwise", columnwise=True, sign_mask=mask, workspace=ws)
                amax = got["col"][2].item()
                assert math.isnan(amax) if want_nan else amax == float("inf"), (mask, rows, ws, amax)


def test_nan_gives_nan_amax_and_0x7_codes():
    x = torch.randn(64, 64, device=DEV)
    x[10, 10] = float("nan")
    r = quantize_raw(x, columnwise=True, layout="linear")
    torch.cuda.synchronize()
    for d in ("row", "col"):
        assert math.isnan(r[d][2].item())
        assert (r[d][0] == 0x77).all(), "every code of a NaN tensor decodes to NaN (0x7 with NaN scales)"
        assert (r[d][1] == 0x7F).all()


def test_empty_tensor():
    for shape in [(0, 32), (0, 16)]:
        x = torch.empty(shape, device=DEV)
        q = nvfp4.quantize(x, columnwise=True)
        torch.cuda.synchronize()
        assert q.amax.item() == 0.0 and q.amax_t.item() == 0.0
        assert q.data.numel() == 0


# ----------------------------------------------------------------------------- the E2M1 codec
def _around(values, ulps):
    """fp32 values within +-ulps units in the last place of each of `values` (both signs)."""
    base = torch.tensor(values, dtype=torch.float32).view(torch.int32)
    steps = torch.arange(-ulps, ulps + 1, dtype=torch.int32)
    v = (base[:, None] + steps[None, :]).reshape(-1)
    v = v[v >= 0].view(torch.float32)
    v = v[(v >= 0) & (v <= 6.0)]
    return torch.cat([v, -v])


def test_codec_boundaries_exhaustively_near_decisions(gen):
    """Blocks [6, v1..v15] in a tensor of amax 2688 have S_enc = 1 and block scale 1, so
    each v is encoded as is: sweep every fp32 within 2048 ulps of every RN threshold and
    every E2M1 grid point (the SR decision points), plus random values, RN and SR."""
    pts = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
    v = torch.cat([_around(pts, 2048), torch.rand(30000, generator=gen) * 12 - 6,
                   torch.tensor([0.0, -0.0, 1e-45, -1e-45, 1e-30, 6.0, -6.0])])
    v = v[torch.randperm(len(v), generator=gen)]
    n = (len(v) + 14) // 15 * 15
    v = torch.cat([v, torch.zeros(n - len(v))]).reshape(-1, 15)
    x = torch.cat([torch.full((v.shape[0], 1), 6.0), v], 1)
    x = torch.cat([x, torch.full((1, 16), 2688.0)], 0)
    check(x)
    for seed in (0, 1, 2**63 + 5):
        check(x, rounding="sr", seed=seed, offset=seed // 3)
    check(x, rounding="sr", seed=4, columnwise=True)


# ----------------------------------------------------------------------------- stochastic rounding
# one configuration per SR kernel variant: rowwise kernel (with and without RHT), tile kernel
# (both outputs with each RHT choice, columnwise only), 2D tile kernel
SR_VARIANTS = [
    dict(),
    dict(rht="rowwise"),
    dict(columnwise=True),
    dict(columnwise=True, rht="columnwise"),
    dict(columnwise=True, rht="both"),
    dict(rowwise=False, columnwise=True, rht="columnwise"),
    dict(block="2d", columnwise=True),
    dict(block="2d", rowwise=False, columnwise=True),
]


@pytest.mark.parametrize("variant", SR_VARIANTS, ids=lambda v: ",".join(f"{k}={w}" for k, w in v.items()) or "rowwise")
def test_sr_reproducible_and_launch_independent(variant, gen, monkeypatch):
    """SR bits depend on data, seed and offset only: the same with the grid capped to 1, 3
    or 17 CTAs (each CTA then walks many tiles), run to run, and equal to the CPU's."""
    x = randn((777, 272), torch.bfloat16, gen).to(DEV)
    kw = dict(rounding="sr", seed=2024, offset=7, **variant)
    ref = quantize_raw(x, **kw)
    same = quantize_raw(x, **kw)
    outs = [d for d in ("row", "col") if ref[d] is not None]
    for cap in ("1", "3", "17"):
        monkeypatch.setenv("NVFP4_QUANT_GRID_CAP", cap)
        capped = quantize_raw(x, **kw)
        for d in outs:
            assert torch.equal(capped[d][0], ref[d][0]) and torch.equal(capped[d][1], ref[d][1]), f"grid cap {cap}"
    monkeypatch.delenv("NVFP4_QUANT_GRID_CAP")
    other = quantize_raw(x, **{**kw, "seed": 2025})
    other_off = quantize_raw(x, **{**kw, "offset": 8})
    for d in outs:
        assert torch.equal(same[d][0], ref[d][0])
        assert not torch.equal(other[d][0], ref[d][0])
        assert not torch.equal(other_off[d][0], ref[d][0])
    want = quantize_raw(x.cpu(), **kw)
    for d in outs:
        assert_same(ref[d], want[d], f"sr {d}")


def test_sr_carry_boundaries_of_the_8_bit_rule(gen):
    """The SR rule rounds up iff floor(256 f) + r >= 256: sweep values at and within a few
    ulps of every f = k/256 in every E2M1 gap (where floor(256 f) changes), both signs, at
    unit scales (S_enc = 1, block scale 1, as in the codec test), several seeds and offsets,
    both directions; every byte against the CPU."""
    vals = []
    for lo, hi in ((0.0, 0.5), (0.5, 1.0), (1.0, 1.5), (1.5, 2.0), (2.0, 3.0), (3.0, 4.0), (4.0, 6.0)):
        k = torch.arange(0, 257, dtype=torch.float64)
        vals.append((lo + (hi - lo) * k / 256).float())
    v = _around(torch.cat(vals).tolist(), 3)
    v = v[torch.randperm(len(v), generator=gen)]
    n = (len(v) + 14) // 15 * 15
    v = torch.cat([v, torch.zeros(n - len(v))]).reshape(-1, 15)
    x = torch.cat([torch.full((v.shape[0], 1), 6.0), v], 1)
    x = torch.cat([x, torch.full((1, 16), 2688.0)], 0)
    for seed, offset in ((0, 0), (1, 2**40 + 3), (2**64 - 1, 2**64 - 1), (0x9E3779B97F4A7C15, 12345)):
        check(x, rounding="sr", seed=seed, offset=offset)
        check(x, rounding="sr", seed=seed, offset=offset, columnwise=True, layout="linear")
    check(x.to(torch.bfloat16), rounding="sr", seed=7, columnwise=True)


# ----------------------------------------------------------------------------- offset_device
# cfg.offset_device is reachable only through the C API: call nvfp4_quantize with ctypes.
class _Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int), ("ndim", ctypes.c_int32),
                ("shape", ctypes.c_int64 * 8), ("strides", ctypes.c_int64 * 8), ("device_type", ctypes.c_int),
                ("device_id", ctypes.c_int32)]


class _Config(ctypes.Structure):
    _fields_ = [("block", ctypes.c_int), ("rounding", ctypes.c_int), ("scale_layout", ctypes.c_int),
                ("rht", ctypes.c_uint32), ("rht_sign_mask", ctypes.c_uint32), ("seed", ctypes.c_uint64),
                ("offset", ctypes.c_uint64), ("offset_device", ctypes.c_void_p),
                # 0.3: the recipe options (defaults: no scale selection, bound 448, one amax per tensor)
                ("scale_select", ctypes.c_int), ("e4m3_bound", ctypes.c_uint32), ("amax_mode", ctypes.c_int),
                ("amax_in", ctypes.c_void_p),
                # the counter the call advances
                ("offset_counter", ctypes.c_void_p)]

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.e4m3_bound = 448


class _Quantized(ctypes.Structure):
    _fields_ = [("data", _Tensor), ("scales", _Tensor), ("amax", _Tensor)]


_DT = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2, torch.uint8: 3}


def _desc(t: torch.Tensor) -> _Tensor:
    d = _Tensor()
    d.data = t.data_ptr()
    d.dtype = _DT[t.dtype]
    d.ndim = t.dim()
    for i in range(t.dim()):
        d.shape[i] = t.shape[i]
        d.strides[i] = t.stride(i)
    d.device_type = 1 if t.is_cuda else 0
    d.device_id = (t.device.index or 0) if t.is_cuda else 0
    return d


def _capi():
    # the package's own libnvfp4 (the wheel ships libnvfp4.so; a build tree may add .so.N)
    libs = sorted(glob.glob(os.path.join(os.path.dirname(nvfp4.__file__), "libnvfp4.so*")), key=len)
    assert libs, f"no libnvfp4.so* beside {nvfp4.__file__}"
    lib = ctypes.CDLL(libs[0])
    lib.nvfp4_quantize.restype = ctypes.c_int
    lib.nvfp4_quantize.argtypes = [ctypes.POINTER(_Tensor), ctypes.POINTER(_Config), ctypes.POINTER(_Quantized),
                                   ctypes.POINTER(_Quantized), ctypes.c_void_p]
    lib.nvfp4_last_error.restype = ctypes.c_char_p
    return lib


def _quantize_capi(lib, x, counter, block="1d", rht="none", offset=0, seed=5, rowwise=True, columnwise=False):
    """nvfp4_quantize with cfg.offset_device = counter (a 1-element uint64 tensor on x's device)."""
    rows, cols = x.shape
    row = _alloc(rows, cols, "swizzled", x.device) if rowwise else None
    col = _alloc(cols, (rows + 15) // 16 * 16, "swizzled", x.device) if columnwise else None
    cfg = _Config(BLOCK[block], ROUND["sr"], LAYOUT["swizzled"], RHT[rht], DEFAULT_MASK, seed, offset,
                  counter.data_ptr() if counter is not None else None)
    qs = [_Quantized(_desc(o[0]), _desc(o[1]), _desc(o[2])) if o is not None else None for o in (row, col)]
    st = lib.nvfp4_quantize(ctypes.byref(_desc(x)), ctypes.byref(cfg), *(ctypes.byref(q) if q else None for q in qs),
                            torch.cuda.current_stream().cuda_stream if x.is_cuda else None)
    assert st == 0, lib.nvfp4_last_error()
    return {"row": row, "col": col}


@pytest.mark.parametrize("variant", [dict(), dict(columnwise=True, rht="columnwise"),
                                     dict(rowwise=False, columnwise=True, rht="columnwise"),
                                     dict(block="2d", columnwise=True)],
                         ids=["rowwise", "row+col rht(col)", "col rht(col)", "2d"])
def test_offset_device_is_added_when_the_kernel_runs(variant, gen):
    """cfg.offset_device: the counter's value at run time is added to cfg.offset (mod 2^64),
    in every SR kernel; changing the counter on the device between two launches changes the
    bits, and they equal the CPU's quantization at offset + counter."""
    lib = _capi()
    x = randn((300, 208), torch.bfloat16, gen)
    xg = x.to(DEV)
    counter = torch.zeros(1, dtype=torch.int64, device=DEV)
    outs = ["row", "col"] if variant.get("columnwise") else ["row"]
    if variant.get("rowwise") is False:
        outs = ["col"]
    for base, value in ((3, 0), (3, 41), (2**64 - 2, 5), (0, 2**63 + 1)):
        counter.fill_(value - (1 << 64) if value >= 1 << 63 else value)
        got = _quantize_capi(lib, xg, counter, offset=base, **variant)
        torch.cuda.synchronize()
        want = quantize_raw(x, rounding="sr", seed=5, offset=(base + value) % (1 << 64), **variant)
        for d in outs:
            assert_same(got[d], want[d], f"offset {base} + counter {value} [{d}]")
    # the counter is read when the kernel runs: queue both launches, then the update between them
    counter.fill_(1)
    a = _quantize_capi(lib, xg, counter, offset=10, **variant)
    counter.add_(1)
    b = _quantize_capi(lib, xg, counter, offset=10, **variant)
    torch.cuda.synchronize()
    want_a = quantize_raw(x, rounding="sr", seed=5, offset=11, **variant)
    want_b = quantize_raw(x, rounding="sr", seed=5, offset=12, **variant)
    for d in outs:
        assert_same(a[d], want_a[d], f"first launch [{d}]")
        assert_same(b[d], want_b[d], f"second launch [{d}]")


def test_grid_cap_rtn_all_kernels(gen, monkeypatch):
    x = randn((300, 208), torch.float32, gen)
    for cap in ("1", "2", "5"):
        monkeypatch.setenv("NVFP4_QUANT_GRID_CAP", cap)
        check(x)
        check(x, columnwise=True, rht="both")
        check(x, block="2d", columnwise=True, layout="linear")


_AMAX_MODES = ["memsets", "workspace", "workspace_off"]


def _amax_mode(mode, monkeypatch):
    """memsets: no workspace; workspace: partials in it; workspace_off: one given, but
    NVFP4_QUANT_WORKSPACE=0 (memsets again). Returns the check() flag."""
    monkeypatch.setenv("NVFP4_QUANT_WORKSPACE", "0" if mode == "workspace_off" else "1")
    return mode != "memsets"


@pytest.mark.parametrize("mode", _AMAX_MODES)
def test_amax_by_memsets_or_partials(mode, gen, monkeypatch):
    """The amax outputs (poisoned NaN by quantize_raw) come out right whether the amax pass
    reduces into them after memsets zero them, or leaves one partial per CTA in a (poisoned)
    workspace for the quantize kernel to reduce: the same bytes as the CPU reference for
    every amax kernel (flat, flat with the row RHT, columnwise RHT, both), every quantize
    kernel (rowwise, tile 1D, tile 2D), codes of one orientation or both, with full and
    capped grids."""
    ws = _amax_mode(mode, monkeypatch)
    x = randn((300, 208), torch.bfloat16, gen)
    for cap in ("", "1", "3"):
        monkeypatch.setenv("NVFP4_QUANT_GRID_CAP", cap)
        check(x, workspace=ws)
        check(x, workspace=ws, rht="rowwise", rounding="sr", seed=2)
        check(x, workspace=ws, rowwise=False, columnwise=True, rht="columnwise", rounding="sr", seed=3)
        check(x, workspace=ws, columnwise=True, rht="columnwise")
        check(x, workspace=ws, columnwise=True, rht="both")
        check(x, workspace=ws, columnwise=True)
        check(x, workspace=ws, block="2d", columnwise=True, layout="linear")
        check(x, workspace=ws, block="2d")


@pytest.mark.parametrize("mode", _AMAX_MODES)
def test_amax_partials_grid_past_the_workspace(mode, gen, monkeypatch):
    """A tensor whose amax grid would be larger than the workspace's partial slots (the grid
    is capped to them), and the largest value in the last rows, read by the last CTAs."""
    ws = _amax_mode(mode, monkeypatch)
    monkeypatch.delenv("NVFP4_QUANT_GRID_CAP", raising=False)
    x = randn((2304, 4096), torch.bfloat16, gen)
    x[-1, -7] = 1.0e4
    check(x, workspace=ws)
    check(x, workspace=ws, columnwise=True, rht="columnwise")


def test_amax_partials_do_not_leak_between_calls(gen):
    """One workspace for two quantizations in stream order, the first of a much larger
    tensor: the second's amax is its own (no partial of the first survives in its max)."""
    big = randn((1024, 512), torch.float32, gen) * 1000
    small = randn((96, 64), torch.float32, gen)
    ws = poisoned_workspace(DEV)
    quantize_raw(big.to(DEV), columnwise=True, rht="columnwise", workspace=ws)
    for kw in ({}, {"columnwise": True, "rht": "columnwise"}, {"block": "2d", "columnwise": True}):
        got = quantize_raw(small.to(DEV), workspace=ws, **kw)
        torch.cuda.synchronize()
        want = quantize_raw(small, **kw)
        for d in ("row", "col"):
            if want[d] is not None:
                assert_same(got[d], want[d], f"after a larger tensor {kw} [{d}]")


@pytest.mark.parametrize("mode", ["memsets", "workspace"])
def test_amax_right_on_each_graph_replay(mode, gen, monkeypatch):
    """A quantization captured in a CUDA graph gets its amax right on every replay (memset
    nodes before the amax kernel, or partials reduced by the quantize kernel): the outputs,
    and the workspace, poisoned between replays come back equal to the CPU reference."""
    monkeypatch.setenv("NVFP4_QUANT_WORKSPACE", "1")
    x = randn((512, 256), torch.bfloat16, gen).to(DEV)
    want = quantize_raw(x.cpu(), columnwise=True, rht="columnwise")
    ws = poisoned_workspace(DEV) if mode == "workspace" else None
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        # warm-up (occupancy queries) outside capture
        got = quantize_raw(x, columnwise=True, rht="columnwise", workspace=ws)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            _C.quantize(x, *got["row"], *got["col"], BLOCK["1d"], ROUND["rtn"], LAYOUT["swizzled"],
                        RHT["columnwise"], DEFAULT_MASK, 0, 0, s.cuda_stream, ws)
    for _ in range(3):
        for d in ("row", "col"):
            got[d][0].fill_(POISON)
            got[d][1].fill_(POISON)
            got[d][2].fill_(float("inf"))  # larger than any amax: only a rewritten output comes back right
        if ws is not None:
            ws.fill_(0xFF)
        g.replay()
        torch.cuda.synchronize()
        for d in ("row", "col"):
            assert_same(got[d], want[d], f"replay [{d}]")


def test_the_max_at_either_end_with_capped_grids(gen, monkeypatch):
    """The amax and quantize passes walk x in opposite directions, which way by kernel variant
    (with a transform: the amax pass from the end down, the quantize pass from the start up;
    without one the reverse): with the largest value in the last element, then in the first,
    every kernel's outputs stay the CPU reference's, byte for byte, with the workspace's
    partials or memsets, full or capped grids (a CTA then walks several tiles or units, so the
    steps between them are exercised), odd shapes and SR."""
    for shape, dtype in (((300, 208), torch.bfloat16), ((129, 80), torch.float32), ((1000, 48), torch.float16)):
        x = randn(shape, dtype, gen)
        x[-1, -1] = 8.0 * x.abs().max()  # the max in the last element: a pass that skips it shows
        for cap in ("", "1", "3"):
            monkeypatch.setenv("NVFP4_QUANT_GRID_CAP", cap)
            for ws in (False, True):
                check(x, workspace=ws)
                check(x, workspace=ws, rht="rowwise", rounding="sr", seed=2)
                check(x, workspace=ws, columnwise=True, rht="columnwise", rounding="sr", seed=3)
                check(x, workspace=ws, rowwise=False, columnwise=True, rht="columnwise")
                check(x, workspace=ws, columnwise=True, rht="both")
                check(x, workspace=ws, columnwise=True)
                check(x, workspace=ws, block="2d", columnwise=True, layout="linear")
        x[-1, -1] = 0.0
        x[0, 0] = 8.0 * x.abs().max()  # and in the first
        monkeypatch.setenv("NVFP4_QUANT_GRID_CAP", "2")
        check(x, workspace=True, columnwise=True, rht="columnwise", rounding="sr", seed=4)
        check(x, workspace=True, rht="rowwise")


def test_workspace_refusals(gen):
    x = randn((64, 64), torch.bfloat16, gen).to(DEV)
    with pytest.raises(ValueError, match="workspace: must be on x's device"):
        quantize_raw(x, workspace=torch.zeros(_C.quantize_workspace_bytes, dtype=torch.uint8))
    with pytest.raises(ValueError, match="workspace_bytes: 8188, at least"):
        quantize_raw(x, workspace=torch.zeros(_C.quantize_workspace_bytes // 4 - 1, dtype=torch.float32, device=DEV))
    buf = torch.zeros(_C.quantize_workspace_bytes + 16, dtype=torch.uint8, device=DEV)
    with pytest.raises(ValueError, match="workspace: must be 16-byte aligned"):
        quantize_raw(x, workspace=buf[4:4 + _C.quantize_workspace_bytes])
    with pytest.raises(ValueError, match="workspace: overlaps input"):
        quantize_raw(x, workspace=x.view(torch.uint8).view(-1)[: _C.quantize_workspace_bytes])


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


def test_high_level_api_matches_cpu(gen):
    x = randn((200, 144), torch.bfloat16, gen)
    for kw in (dict(), dict(columnwise=True, rht="columnwise", rounding="sr", seed=8), dict(block="2d", columnwise=True)):
        qg = nvfp4.quantize(x.to(DEV), **kw)
        qc = nvfp4.quantize(x, **kw)
        for a, b in ((qg.data, qc.data), (qg.scales, qc.scales), (qg.data_t, qc.data_t), (qg.scales_t, qc.scales_t)):
            if b is not None:
                assert torch.equal(a.cpu().view(torch.uint8), b.view(torch.uint8))
        assert torch.equal(qg.dequantize(torch.float32).cpu(), qc.dequantize(torch.float32))


# ----------------------------------------------------------------------------- dequantize
@pytest.mark.parametrize("layout", ["linear", "swizzled"])
@pytest.mark.parametrize("out_dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
def test_dequantize_matches_cpu(layout, out_dtype, gen):
    for rows, cols in ((1, 16), (7, 48), (129, 96), (300, 1024)):
        data = torch.randint(0, 256, (rows, cols // 2), generator=gen, dtype=torch.uint8)
        sc = cols // 16
        shape = ((rows + 127) // 128 * 128, (sc + 3) // 4 * 4) if layout == "swizzled" else (rows, sc)
        scales = torch.randint(0, 256, shape, generator=gen, dtype=torch.uint8)  # every byte, NaN 0x7f/0xff too
        for amax_v in (1.0, 2688.0, 0.0, 3e38, float("inf"), float("nan"), 1e-30):
            amax = torch.tensor([amax_v], dtype=torch.float32)
            want = torch.empty((rows, cols), dtype=out_dtype)
            _C.dequantize(data, scales, amax, LAYOUT[layout], want, 0)
            got = torch.full((rows, cols), float("nan"), dtype=out_dtype, device=DEV)
            _C.dequantize(data.to(DEV), scales.to(DEV), amax.to(DEV), LAYOUT[layout], got,
                          torch.cuda.current_stream().cuda_stream)
            # NaN results: the GPU's arithmetic gives the canonical NaN, the CPU's keeps an
            # operand's payload and sign; where the reference is NaN, any NaN is right.
            got = got.cpu()
            nan = torch.isnan(want)
            assert torch.equal(torch.isnan(got), nan), f"{rows}x{cols} amax={amax_v}: NaN positions differ"
            g = got.view(torch.int16 if out_dtype != torch.float32 else torch.int32)[~nan]
            w = want.view(g.dtype)[~nan]
            assert torch.equal(g, w), f"{rows}x{cols} amax={amax_v}: {first_diff(g, w)}"


def test_quantize_then_dequantize_on_gpu(gen):
    x = randn((256, 512), torch.bfloat16, gen)
    for kw in (dict(), dict(block="2d"), dict(rounding="sr", seed=3)):
        qg = nvfp4.quantize(x.to(DEV), scale_layout="swizzled", **kw)
        qc = qg.to("cpu")
        for dt in DTYPES:
            assert torch.equal(qg.dequantize(dt).cpu().view(torch.uint8), qc.dequantize(dt).view(torch.uint8))


# ----------------------------------------------------------------------------- swizzle
@pytest.mark.parametrize("rows,cols", [(1, 1), (3, 5), (127, 3), (128, 4), (129, 7), (300, 256), (1000, 3)])
def test_swizzle_and_unswizzle_match_cpu(rows, cols, gen):
    lin = torch.randint(0, 256, (rows, cols), generator=gen, dtype=torch.uint8)
    want = torch.empty(((rows + 127) // 128 * 128, (cols + 3) // 4 * 4), dtype=torch.uint8)
    _C.swizzle(lin, want, True, 0)
    got = torch.full(want.shape, POISON, dtype=torch.uint8, device=DEV)
    _C.swizzle(lin.to(DEV), got, True, torch.cuda.current_stream().cuda_stream)
    assert torch.equal(got.cpu(), want), first_diff(got.cpu(), want)
    back = torch.full((rows, cols), POISON, dtype=torch.uint8, device=DEV)
    _C.swizzle(got, back, False, torch.cuda.current_stream().cuda_stream)
    assert torch.equal(back.cpu(), lin)
    # the public helpers, on device
    assert torch.equal(nvfp4.swizzle_scales(lin.to(DEV)).cpu(), want)
    assert torch.equal(nvfp4.unswizzle_scales(want.to(DEV), rows, cols).cpu(), lin)


def test_quantizer_swizzle_equals_swizzle_of_linear(gen):
    x = randn((300, 208), torch.bfloat16, gen).to(DEV)
    lin = quantize_raw(x, columnwise=True, layout="linear")
    swz = quantize_raw(x, columnwise=True, layout="swizzled")
    for d in ("row", "col"):
        s_lin = lin[d][1]
        expect = torch.full(swz[d][1].shape, POISON, dtype=torch.uint8, device=DEV)
        _C.swizzle(s_lin, expect, True, torch.cuda.current_stream().cuda_stream)
        assert torch.equal(swz[d][1], expect), d
        assert torch.equal(swz[d][0], lin[d][0]), d
