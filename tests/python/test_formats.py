"""Element formats seen through quantization: E2M1 thresholds and E4M3 scale bytes,
checked against the value table and torch's float8_e4m3fn cast."""
import numpy as np
import torch

import nvfp4
import nvfp4_ref as ref
from conftest import assert_bytes_equal

E4M3_ALL = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float()


def _codes_with_unit_scales(v: torch.Tensor) -> torch.Tensor:
    """Quantize values so that S_enc = 1 and every block scale is 1.0: the codes are then
    e2m1(v) itself. Block 0 carries the tensor amax 2688 (= 448*6), every other block
    carries a 6 to pin its scale at 6 * fp32(1/6) = 1.0."""
    n = v.numel()
    per = 15
    nblk = (n + per - 1) // per
    x = torch.zeros(nblk + 1, 16)
    x[0, 0] = 2688.0
    flat = torch.zeros(nblk * per)
    flat[:n] = v
    x[1:, :per] = flat.reshape(nblk, per)
    x[1:, per] = 6.0
    q = nvfp4.quantize(x.reshape(1, -1), scale_layout="linear")
    sc = q.scales.view(torch.uint8).reshape(-1)
    assert (sc[1:] == 0x38).all(), "block scales should all be 1.0 (0x38)"
    codes = torch.stack([q.data & 0xF, q.data >> 4], -1).reshape(-1)[16:]
    return codes.reshape(nblk, 16)[:, :per].reshape(-1)[:n]


def test_e2m1_value_table_and_decode():
    # decode of every code through dequantize: unit scales, S_dec = 1
    codes = torch.arange(16, dtype=torch.uint8)
    vals = ref.e2m1_decode(codes)
    assert vals.tolist() == [0, .5, 1, 1.5, 2, 3, 4, 6, -0.0, -.5, -1, -1.5, -2, -3, -4, -6]
    x = torch.zeros(2, 16)
    x[0, 0] = 2688.0
    x[1, :8] = torch.tensor(ref.E2M1_VALUES)
    x[1, 8:] = -torch.tensor(ref.E2M1_VALUES)
    x[1, 15] = 6.0  # keep the block amax at 6 with a positive sign; -6 sits at index 15 otherwise
    q = nvfp4.quantize(x.reshape(1, -1), scale_layout="linear")
    d = q.dequantize(torch.float32).reshape(2, 16)
    assert torch.equal(d[1], x[1])


def test_e2m1_rn_thresholds_exhaustive():
    """Every threshold, its float32 neighbours, the grid, and a dense sweep, both signs."""
    pts = [0.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0] + ref.E2M1_VALUES
    vals = []
    for p in pts:
        t = torch.tensor(p, dtype=torch.float32)
        vals += [t, torch.nextafter(t, torch.tensor(0.0)), torch.nextafter(t, torch.tensor(7.0))]
    v = torch.stack(vals)
    v = torch.cat([v, torch.linspace(0, 6, 4001), torch.tensor([1e-30, 1e-45])])
    v = v[v <= 6.0]
    v = torch.cat([v, -v])
    got = _codes_with_unit_scales(v)
    want = ref.e2m1_rn(v)
    assert_bytes_equal(got, want, "e2m1 codes")
    # and the table itself, spelled out
    assert ref.e2m1_rn(torch.tensor([0.25, 0.26, 0.74, 0.75, 1.25, 1.26, 1.74, 1.75, 2.5, 2.51, 3.49, 3.5, 5.0, 5.01, -0.1])).tolist() == \
        [0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 8]


def test_negative_zero_keeps_sign():
    got = _codes_with_unit_scales(torch.tensor([-0.0, -0.1, 0.0, 0.1]))
    assert got.tolist() == [8, 8, 0, 0]


def _scale_bytes_for(block_amax: torch.Tensor) -> torch.Tensor:
    """Block scale bytes when S_enc = 1: e4m3(block_amax * fp32(1/6))."""
    n = block_amax.numel()
    x = torch.zeros(n + 1, 16)
    x[0, 0] = 2688.0
    x[1:, 0] = block_amax
    q = nvfp4.quantize(x.reshape(1, -1), scale_layout="linear")
    return q.scales.view(torch.uint8).reshape(-1)[1:]


def test_e4m3_encode_against_torch_cast():
    """E4M3 encoding of the block scale vs torch's float8_e4m3fn cast (RNE): every E4M3
    value, every midpoint between neighbours and their float32 neighbours, random values."""
    pos = E4M3_ALL[:127]  # 0 .. 448
    mids = (pos[1:].double() + pos[:-1].double()) / 2
    mids = mids.float()
    cand = torch.cat([pos, mids, torch.nextafter(mids, torch.tensor(0.0)), torch.nextafter(mids, torch.tensor(1e9)),
                      torch.rand(20000, generator=torch.Generator().manual_seed(1)) * 448,
                      torch.exp2(torch.rand(20000, generator=torch.Generator().manual_seed(2)) * -20)])
    cand = cand[(cand >= 0) & (cand <= 448)]
    # block_amax = s * 6 is not exact in general, so compare against what the formula asks:
    # e4m3(fp32(block_amax * fp32(1/6))) with block_amax chosen as fp32(s * 6).
    block_amax = (cand * 6.0).float()
    block_amax = block_amax[block_amax <= 2688.0]
    want_in = block_amax * torch.tensor(1.0 / 6.0, dtype=torch.float32)
    want = want_in.to(torch.float8_e4m3fn).view(torch.uint8)
    got = _scale_bytes_for(block_amax)
    assert_bytes_equal(got, want, "e4m3 scale bytes")


def test_e4m3_decode_all_codes():
    """Dequantize with every positive finite E4M3 scale byte vs torch's float8 decode."""
    # Build scales by quantizing blocks whose scale lands on each code, then decode.
    pos = E4M3_ALL[:127]
    block_amax = pos * 6.0
    got_bytes = _scale_bytes_for(block_amax)
    # each byte must decode (torch) to exactly the value we aimed at
    assert torch.equal(got_bytes.view(torch.float8_e4m3fn).float(), pos)
    assert sorted(set(got_bytes.tolist())) == list(range(127))


def test_e4m3_saturates_and_nan():
    # Values past 448 can't occur after the clamp; Inf amax forces S_enc = 1 and the
    # block with Inf gets the largest scale, 448 (0x7e).
    x = torch.zeros(2, 16)
    x[0, 0] = float("inf")
    x[1, 0] = 1.0
    q = nvfp4.quantize(x.reshape(1, -1), scale_layout="linear")
    assert q.amax.item() == float("inf")
    assert q.scales.view(torch.uint8).reshape(-1).tolist() == [0x7E, ref.e4m3_bits(torch.tensor(1.0 / 6.0)).item()]
