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


def _sr_unit_scale(values: torch.Tensor, seed: int, offset: int = 0) -> torch.Tensor:
    """Decoded SR results of `values` (each in [0, 6]) at S_enc = 1 and block scale 1, so
    each value is rounded as is: block 0 carries the tensor amax 2688, every other block
    a 6 that pins its scale at 1.0."""
    n = values.numel()
    nblk = (n + 14) // 15
    x = torch.zeros(nblk + 1, 16)
    x[0, 0] = 2688.0
    flat = torch.zeros(nblk * 15)
    flat[:n] = values
    x[1:, :15] = flat.reshape(nblk, 15)
    x[1:, 15] = 6.0
    q = nvfp4.quantize(x.reshape(1, -1), rounding="sr", seed=seed, offset=offset, scale_layout="linear")
    assert (q.scales.view(torch.uint8).reshape(-1)[1:] == 0x38).all()
    return q.dequantize().reshape(nblk + 1, 16)[1:, :15].reshape(-1)[:n]


# (lo, hi) gaps of the E2M1 grid, one in each binade
GAPS = [(0.0, 0.5), (1.0, 1.5), (2.0, 3.0), (4.0, 6.0)]


def test_sr_probability_is_floor_256f_over_256():
    """The contract: a value at fraction f of its gap [lo, hi) rounds to hi with probability
    floor(256 f) / 256 (8 random bits per element). Checked on 30000 draws per value (each
    element has its own random byte) to within 5 binomial standard deviations; the bias of the
    mean is therefore in (-gap/256, 0] (toward zero) up to that noise."""
    n = 30000
    for lo, hi in GAPS:
        gap = hi - lo
        for f in (0.5, 0.25, 1 / 3, 0.999, 200.5 / 256, 1 / 256, 3 / 256 - 1e-6):
            v = lo + f * gap
            got = _sr_unit_scale(torch.full((n,), v), seed=int(f * 1e6) + int(lo))
            assert set(torch.unique(got).tolist()) <= {lo, hi}, (v, torch.unique(got))
            p_up = (got == hi).double().mean().item()
            fv = (torch.tensor(v, dtype=torch.float32).double().item() - lo) / gap  # f of the fp32 value
            p = np.floor(256 * fv) / 256
            sigma = max(np.sqrt(p * (1 - p) / n), 1 / n)
            assert abs(p_up - p) <= 5 * sigma, f"v={v}: P(up)={p_up:.5f}, contract {p:.5f} (sigma {sigma:.5f})"
            bias = got.double().mean().item() - torch.tensor(v).double().item()
            assert -gap / 256 - 5 * sigma * gap <= bias <= 5 * sigma * gap, (v, bias)


def test_sr_below_resolution_never_rounds_up_and_grid_points_stay():
    """floor(256 f) = 0 (f < 1/256 of the gap) never rounds up, whatever the random bits; a
    value on the grid is never moved; f just below 1 rounds up with probability 255/256 < 1."""
    for lo, hi in GAPS:
        gap = hi - lo
        tiny = torch.tensor([lo + gap * 0.999 / 256, lo + gap * 1e-5, lo + gap / 512]).repeat(4000)
        assert (_sr_unit_scale(tiny, seed=3) == lo).all()
        assert (_sr_unit_scale(torch.full((4000,), lo), seed=4) == lo).all()
    assert (_sr_unit_scale(torch.full((4000,), 6.0), seed=5) == 6.0).all()
    below = torch.nextafter(torch.tensor(0.5), torch.tensor(0.0)).repeat(60000)  # f = 1 - 2^-24
    got = _sr_unit_scale(below, seed=6)
    p_up = (got == 0.5).double().mean().item()
    assert abs(p_up - 255 / 256) < 5 * np.sqrt(255 / 256 / 256 / 60000)


def test_sr_random_bytes_follow_the_contract():
    """Which random byte serves which element: element idx of the orientation uses byte
    idx % 16 of Philox4x32-10 call idx // 16 (counter (idx//16, offset), key seed), bytes
    numbered little-endian across the four output words. The reference reads it the same
    way; here the rule is checked against a value whose rounding exposes the byte: at
    f = k/256 an element rounds up iff its byte r >= 256 - k."""
    seed, offset = 0x1234_5678_9ABC, 77
    k = 128
    v = torch.full((15 * 40,), 1.0 + 0.5 * k / 256)  # gap [1, 1.5), f = k / 256
    got = _sr_unit_scale(v, seed=seed, offset=offset)
    # element j of the tensor row sits at index 16 + 16 * (j // 15) + j % 15 (block 0 is the amax block)
    j = np.arange(v.numel())
    idx = 16 + 16 * (j // 15) + j % 15
    r = ref.philox_bytes(idx.astype(np.uint64), seed, offset).astype(np.int64)
    want_up = torch.from_numpy(r >= 256 - k)
    assert torch.equal(got == 1.5, want_up)
    # and byte i of the call is byte i % 4 of word i // 4 (little-endian)
    words = ref.philox(np.array([[1, 0, offset, 0]], dtype=np.uint32), seed)[0]
    b = ref.philox_bytes(np.arange(16, 32, dtype=np.uint64), seed, offset)
    assert b.tolist() == [(int(words[i // 4]) >> (8 * (i % 4))) & 0xFF for i in range(16)]


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
