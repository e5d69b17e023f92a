"""The CPU reference quantizer against the tests' independent reference (nvfp4_ref),
bit for bit, over random tensors, every option and the edge cases."""
import itertools
import math
import random

import numpy as np
import pytest
import torch

import nvfp4
import nvfp4_ref as ref
from conftest import assert_bytes_equal

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def check_against_ref(x, block="1d", rounding="rtn", rht=(), seed=0, offset=0, layout="linear", signs=None):
    rht_arg = {(): False, ("rowwise",): "rowwise", ("columnwise",): "columnwise",
               ("columnwise", "rowwise"): True}[tuple(sorted(rht))]
    q = nvfp4.quantize(x, block=block, rounding=rounding, rht=rht_arg, seed=seed, offset=offset,
                       rowwise=True, columnwise=True, scale_layout=layout, rht_signs=signs)
    want = ref.quantize(x, block, rounding, rht, seed, offset, signs or ref.DEFAULT_SIGNS)
    tag = f"shape={tuple(x.shape)} dtype={x.dtype} block={block} rounding={rounding} rht={rht} layout={layout}"
    for name, d in (("row", q.rowwise), ("col", q.columnwise)):
        wd, ws, wa = want[name]
        assert_bytes_equal(d.data, wd, f"{name} data [{tag}]")
        got_s = d.scales.view(torch.uint8)
        if layout == "swizzled":
            ws = ref.swizzle(ws)
        assert_bytes_equal(got_s, ws, f"{name} scales [{tag}]")
        if torch.isnan(wa):  # any NaN will do: payloads differ between CPUs, GPUs and torch
            assert torch.isnan(d.amax).all(), f"{name} amax should be NaN [{tag}]"
        else:
            assert_bytes_equal(d.amax.view(torch.int32), wa.reshape(1).view(torch.int32), f"{name} amax [{tag}]")
    return q


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("block,rounding,rht", [
    ("1d", "rtn", ()), ("1d", "sr", ()), ("2d", "rtn", ()), ("2d", "sr", ()),
    ("1d", "rtn", ("columnwise",)), ("1d", "sr", ("columnwise",)), ("1d", "rtn", ("rowwise", "columnwise")),
])
@pytest.mark.parametrize("layout", ["linear", "swizzled"])
def test_options_grid(dtype, block, rounding, rht, layout):
    g = torch.Generator().manual_seed(hash((str(dtype), block, rounding, rht, layout)) & 0xFFFF)
    for shape in [(1, 16), (7, 48), (13, 32), (31, 64), (129, 80), (2, 3, 160)]:
        x = (torch.randn(shape, generator=g) * 10 ** torch.empty(1).uniform_(-3, 3, generator=g)).to(dtype)
        check_against_ref(x, block, rounding, rht, seed=1234, offset=5, layout=layout)


def test_thousands_of_random_tensors():
    """2000 fresh random tensors: random shape, dtype, distribution and options."""
    r = random.Random()
    seed = r.randrange(1 << 30)
    g = torch.Generator().manual_seed(seed)
    for it in range(2000):
        rows = r.choice([1, 2, 3, 5, 7, 13, 16, 17, 31, 33, 64])
        cols = 16 * r.choice([1, 2, 3, 4, 5])
        dtype = r.choice(DTYPES)
        kind = r.randrange(4)
        if kind == 0:
            x = torch.randn(rows, cols, generator=g)
        elif kind == 1:
            x = torch.rand(rows, cols, generator=g) * 2 - 1
        elif kind == 2:  # wide dynamic range
            x = torch.randn(rows, cols, generator=g) * torch.exp2(torch.randint(-20, 20, (rows, cols), generator=g).float())
        else:  # heavy tail: outliers
            x = torch.randn(rows, cols, generator=g)
            x[torch.rand(rows, cols, generator=g) < 0.02] *= 1000
        x = x.to(dtype)
        block = r.choice(["1d", "2d"])
        rounding = r.choice(["rtn", "sr"])
        rht = () if block == "2d" else r.choice([(), ("columnwise",), ("rowwise", "columnwise")])
        layout = r.choice(["linear", "swizzled"])
        check_against_ref(x, block, rounding, rht, seed=r.randrange(1 << 63), offset=r.randrange(1 << 40),
                          layout=layout)


def test_custom_rht_signs():
    x = torch.randn(20, 64)
    signs = [(-1) ** (i * 7 % 3) for i in range(16)]
    check_against_ref(x, rht=("columnwise", "rowwise"), signs=signs)


@pytest.mark.parametrize("layout", ["linear", "swizzled"])
def test_edge_cases(layout):
    cases = {
        "zeros": torch.zeros(3, 32),
        "one_huge": torch.cat([torch.full((1, 16), 1e-3), torch.tensor([[3e38] + [1.0] * 15])]),
        "subnormal": torch.full((4, 16), 1e-40) * torch.arange(1, 17),
        "tiny": torch.randn(5, 32) * 1e-30,
        "fp16_subnormal": (torch.randn(4, 32) * 1e-6).half(),
        "max_fp16": torch.full((2, 16), 65504.0).half(),
        "inf": torch.tensor([[float("inf")] + [0.5] * 15, [-1.0] * 16]),
        "neg_inf": torch.tensor([[float("-inf")] + [0.5] * 15, [2.0] * 16]),
        "nan": torch.tensor([[float("nan")] + [0.5] * 15, [1.0] * 16]),
        "neg_zero": torch.full((1, 16), -0.0),
        "odd_rows": torch.randn(127, 16),
        "rows_129": torch.randn(129, 32),
    }
    for name, x in cases.items():
        for block, rounding in itertools.product(["1d", "2d"], ["rtn", "sr"]):
            check_against_ref(x, block, rounding, seed=7, layout=layout)
        check_against_ref(x, "1d", "rtn", ("columnwise",), layout=layout)


def test_zero_tensor_behaviour():
    q = nvfp4.quantize(torch.zeros(4, 32), columnwise=True, scale_layout="linear")
    assert q.amax.item() == 0.0
    assert (q.data == 0).all() and (q.scales.view(torch.uint8) == 0).all()
    assert torch.equal(q.dequantize(), torch.zeros(4, 32))


def test_nan_poisons_the_whole_tensor():
    """Documented behaviour: a NaN anywhere makes amax NaN, every scale byte 0x7f and every
    decoded value NaN — a NaN never hides behind plausible numbers."""
    x = torch.randn(8, 64)
    x[3, 5] = float("nan")
    q = nvfp4.quantize(x, columnwise=True, scale_layout="linear")
    assert math.isnan(q.amax.item()) and math.isnan(q.amax_t.item())
    assert (q.scales.view(torch.uint8) == 0x7F).all()
    assert torch.isnan(q.dequantize()).all()
    assert torch.isnan(q.dequantize(columnwise=True)).all()


def test_inf_behaviour():
    """Documented behaviour: Inf saturates to the largest code of its block (scale 448),
    the tensor scale falls back to 1, finite values elsewhere keep their blocks' scales."""
    x = torch.ones(2, 16)
    x[0, 0] = float("inf")
    x[0, 1] = float("-inf")
    q = nvfp4.quantize(x, scale_layout="linear")
    d = q.dequantize()
    assert d[0, 0].item() == 6 * 448 and d[0, 1].item() == -6 * 448
    # 1.0 with S_enc = 1: s_b = e4m3(1/6) = 0.171875, code 6 -> 1.03125 (scale rounding)
    assert torch.equal(d[1], torch.full((16,), 1.03125))


def test_empty_tensor():
    for shape in [(0, 32), (2, 0, 16)]:
        q = nvfp4.quantize(torch.empty(shape), columnwise=True)
        assert q.data.numel() == 0
        assert q.amax.item() == 0.0
        assert q.dequantize().shape == shape


def test_2d_scales_shared_by_tile_rows_and_transpose_exact():
    x = torch.randn(50, 96) * torch.rand(50, 96) * 10
    q = nvfp4.quantize(x, block="2d", columnwise=True, scale_layout="linear")
    s = q.scales.view(torch.uint8)
    for t in range(0, 50, 16):
        band = s[t:t + 16]
        assert (band == band[0]).all(), f"tile rows {t}..{t + 15} do not share their scales"
    # the columnwise quantization of a 2D-quantized tensor is its exact transpose
    assert torch.equal(q.dequantize(), q.dequantize(columnwise=True))
    st = q.scales_t.view(torch.uint8)  # [96, 64/16]
    assert torch.equal(st[:, :4].repeat_interleave(16, 1)[:, :50].t()[:, ::16], s)
    codes = torch.stack([q.data & 15, q.data >> 4], -1).reshape(50, 96)
    codes_t = torch.stack([q.data_t & 15, q.data_t >> 4], -1).reshape(96, 64)[:, :50]
    assert torch.equal(codes, codes_t.t())


def test_columnwise_padding_is_zero():
    x = torch.randn(13, 32) + 3
    q = nvfp4.quantize(x, columnwise=True, rowwise=False, scale_layout="linear")
    codes = torch.stack([q.data_t & 15, q.data_t >> 4], -1).reshape(32, 16)
    assert (codes[:, 13:] == 0).all()


def test_dequantize_error_bound():
    """|x - x̂| <= half an E2M1 step at the block's scale: step <= 2 (between 4 and 6) in
    units of s_b * S_dec, plus the scale's own rounding. Checked per block as
    |x - x̂| <= (block_amax / 6) * (1 + 2^-3) * 1  (the worst gap 4→6 is 2 units; half is 1)."""
    # rows spread over 2^-4..2^4: every block scale stays in E4M3's normal range, where its
    # relative rounding is at most 2^-4 (subnormal scales, for blocks 2^-9 below the
    # tensor amax, are coarser and not covered by this bound)
    x = torch.randn(64, 256) * torch.exp2(torch.randint(-4, 4, (64, 1)).float())
    q = nvfp4.quantize(x, scale_layout="linear")
    d = q.dequantize()
    bamax = x.abs().reshape(64, 16, 16).amax(-1, keepdim=True)
    err = (x - d).abs().reshape(64, 16, 16)
    assert (err <= bamax / 6 * 1.0625 + 1e-30).all()
    rel = ((x - d).norm() / x.norm()).item()
    assert rel < 0.12, rel  # NVFP4 on Gaussian data: ~0.08-0.1


def test_numpy_input_via_dlpack():
    a = np.random.randn(4, 32).astype(np.float32)
    q = nvfp4.quantize(a, scale_layout="linear")
    want = ref.quantize(torch.from_numpy(a))["row"]
    assert_bytes_equal(q.data, want[0], "numpy data")
    a16 = a.astype(np.float16)
    q16 = nvfp4.quantize(a16)
    assert q16.dtype == torch.float16


def test_repr_and_to():
    q = nvfp4.quantize(torch.randn(4, 32), columnwise=True)
    s = repr(q)
    assert "NVFP4Tensor" in s and "shape=(4, 32)" in s and "columnwise" in s
    q2 = q.to("cpu")
    assert torch.equal(q2.data, q.data)


def test_batched_leading_dims_flatten():
    x = torch.randn(2, 3, 5, 32)
    q = nvfp4.quantize(x, scale_layout="linear")
    want = ref.quantize(x.reshape(30, 32))["row"]
    assert_bytes_equal(q.data, want[0], "batched data")
    assert q.dequantize().shape == x.shape


def test_quantize_workspace_on_the_cpu():
    """nvfp4_quantize_ws on the CPU: the workspace is unused (same bytes as without one) but
    checked like on CUDA: size, alignment, overlaps, device, each refused by name."""
    from nvfp4 import _C

    n = _C.quantize_workspace_bytes
    assert n == 8192
    x = torch.randn(48, 64)
    mask = _C.default_rht_sign_mask()

    def run(ws):
        row = (torch.empty(48, 32, dtype=torch.uint8), torch.empty(128, 4, dtype=torch.uint8), torch.empty(1))
        col = (torch.empty(64, 24, dtype=torch.uint8), torch.empty(128, 4, dtype=torch.uint8), torch.empty(1))
        _C.quantize(x, *row, *col, 0, 1, 1, 2, mask, 7, 3, 0, ws)
        return row + col

    want = run(None)
    got = run(torch.full((n,), 0xFF, dtype=torch.uint8))
    for g, w in zip(got, want):
        assert torch.equal(g.view(torch.uint8), w.view(torch.uint8))
    with pytest.raises(ValueError, match=r"workspace_bytes: 8191, at least NVFP4_QUANTIZE_WORKSPACE_BYTES \(8192\)"):
        run(torch.zeros(n - 1, dtype=torch.uint8))
    with pytest.raises(ValueError, match="workspace: must be 16-byte aligned"):
        run(torch.zeros(n + 64, dtype=torch.uint8)[4:4 + n])
    with pytest.raises(ValueError, match="workspace: overlaps input"):
        run(x.view(torch.uint8).view(-1)[:n])
    if torch.cuda.is_available():
        with pytest.raises(ValueError, match="workspace: must be on x's device"):
            run(torch.zeros(n, dtype=torch.uint8, device="cuda"))
