"""Stochastic rounding statistics, the Hadamard transform and the scale swizzle."""
import numpy as np
import pytest
import torch

import nvfp4
import nvfp4_ref as ref
from conftest import assert_bytes_equal


def _codes(q):
    return torch.stack([q.data & 15, q.data >> 4], -1).reshape(q.data.shape[0], -1)


def test_sr_unbiased_and_neighbours():
    """Many SR draws of the same tensor: every result is one of x's two E2M1 neighbours
    (at the block's scale), and the mean of the draws is closer to x than RTN is."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 64, generator=g)
    x[0, 0] = 4.0  # pin amax so every draw has the same scales
    rtn = nvfp4.quantize(x, scale_layout="linear").dequantize()
    draws = torch.stack([nvfp4.quantize(x, rounding="sr", seed=s, scale_layout="linear").dequantize()
                         for s in range(400)])
    mean = draws.mean(0)
    assert (mean - x).abs().mean() < 0.25 * (rtn - x).abs().mean()
    # neighbours: |draw - x| < one grid step at that scale, and draws only take 2 values
    for i in range(8):
        for j in range(64):
            vals = torch.unique(draws[:, i, j])
            assert len(vals) <= 2
            if len(vals) == 2:
                assert vals[0] <= x[i, j] <= vals[1]


def test_sr_reproducible_and_seeded():
    x = torch.randn(16, 64)
    a = nvfp4.quantize(x, rounding="sr", seed=42, offset=3)
    b = nvfp4.quantize(x, rounding="sr", seed=42, offset=3)
    c = nvfp4.quantize(x, rounding="sr", seed=43, offset=3)
    d = nvfp4.quantize(x, rounding="sr", seed=42, offset=4)
    assert torch.equal(a.data, b.data)
    assert not torch.equal(a.data, c.data)
    assert not torch.equal(a.data, d.data)


def test_sr_default_seed_follows_torch_manual_seed():
    x = torch.randn(16, 64)
    torch.manual_seed(5)
    a = nvfp4.quantize(x, rounding="sr")
    torch.manual_seed(5)
    b = nvfp4.quantize(x, rounding="sr")
    assert torch.equal(a.data, b.data)


def test_philox_known_answer():
    """Philox4x32-10 known-answer vectors (Random123 kat_vectors)."""
    ctr = np.array([[0, 0, 0, 0]], dtype=np.uint32)
    assert ref.philox(ctr, 0).tolist() == [[0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]]
    ctr = np.array([[0xFFFFFFFF] * 4], dtype=np.uint32)
    assert ref.philox(ctr, 0xFFFFFFFFFFFFFFFF).tolist() == [[0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]]
    ctr = np.array([[0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344]], dtype=np.uint32)
    assert ref.philox(ctr, 0x299F31D0A4093822).tolist() == [[0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]]


def test_rht_orthonormal_and_invertible():
    m = nvfp4.rht_matrix(sum(1 << i for i, s in enumerate(nvfp4.DEFAULT_RHT_SIGNS) if s < 0), torch.float64)
    assert torch.allclose(m @ m.t(), torch.eye(16, dtype=torch.float64), atol=0)
    v = torch.randn(100, 16, dtype=torch.float64)
    assert torch.allclose((v @ m) @ m.t(), v, atol=1e-12)
    # the butterfly reference equals the matrix form (up to fp32 rounding)
    x = torch.randn(50, 16)
    assert torch.allclose(ref.rht_fwht(x), (x.double() @ m).float(), atol=1e-6)


def test_rht_quantization_dequantizes_back():
    x = torch.randn(32, 64)
    x[:, 3] *= 50  # an outlier channel, which RHT spreads
    q = nvfp4.quantize(x, rht=True, columnwise=True)
    for cw in (False, True):
        d = q.dequantize(columnwise=cw)
        assert ((d - x).norm() / x.norm()) < 0.15
    assert q.rowwise.rht and q.columnwise.rht


def test_rht_cancels_in_wgrad_product():
    """RHT on both operands along the shared axis cancels: (H dy)^T (H x) = dy^T x."""
    dy = torch.randn(64, 32)
    x = torch.randn(64, 48)
    qd = nvfp4.quantize(dy, rowwise=False, columnwise=True, rht="columnwise")
    qx = nvfp4.quantize(x, rowwise=False, columnwise=True, rht="columnwise")
    got = nvfp4.gemm(qd.T, qx.T, out_dtype=torch.float32)
    want = dy.t() @ x
    assert ((got - want).norm() / want.norm()) < 0.2


def test_swizzle_formula_roundtrip_and_padding():
    for R, C in [(1, 1), (7, 3), (128, 4), (129, 5), (300, 9), (256, 64)]:
        lin = torch.randint(1, 255, (R, C), dtype=torch.uint8)
        swz = nvfp4.swizzle_scales(lin)
        assert swz.shape == ((R + 127) // 128 * 128, (C + 3) // 4 * 4)
        assert_bytes_equal(swz, ref.swizzle(lin), f"swizzle {R}x{C}")
        # every padding byte is zero, every real byte where the formula says
        flat = swz.reshape(-1)
        r = torch.arange(R)[:, None].expand(R, C)
        c = torch.arange(C)[None, :].expand(R, C)
        off = ref.swizzle_offset(r, c, C)
        assert torch.equal(flat[off], lin)
        mask = torch.ones_like(flat, dtype=torch.bool)
        mask[off.reshape(-1)] = False
        assert (flat[mask] == 0).all()
        back = nvfp4.unswizzle_scales(swz, R, C)
        assert torch.equal(back, lin)


def test_swizzle_of_fp8_view_and_quantizer_agree():
    x = torch.randn(200, 96)
    ql = nvfp4.quantize(x, scale_layout="linear")
    qs = nvfp4.quantize(x, scale_layout="swizzled")
    assert torch.equal(nvfp4.swizzle_scales(ql.scales).view(torch.uint8), qs.scales.view(torch.uint8))
    assert qs.scales.dtype == torch.float8_e4m3fn
    assert torch.equal(ql.dequantize(), qs.dequantize())
