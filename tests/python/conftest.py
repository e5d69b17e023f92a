import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))


def first_mismatch(a: torch.Tensor, b: torch.Tensor) -> str:
    """Where two equally shaped tensors first differ, for assertion messages."""
    if a.shape != b.shape:
        return f"shape {tuple(a.shape)} != {tuple(b.shape)}"
    ne = (a != b)
    if a.is_floating_point():
        ne &= ~(torch.isnan(a) & torch.isnan(b))
    idx = ne.nonzero()
    if len(idx) == 0:
        return "equal"
    i = tuple(idx[0].tolist())
    return f"{len(idx)} mismatches; first at {i}: {a[i].item()} != {b[i].item()}"


def assert_equal(got: torch.Tensor, want: torch.Tensor, what: str):
    """Same dtype and the same values, bit for bit (a NaN equals nothing); both moved to the CPU."""
    got, want = got.cpu(), want.cpu()
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    assert torch.equal(got, want), f"{what}: {first_mismatch(got, want)}"


def assert_bytes_equal(got: torch.Tensor, want: torch.Tensor, what: str):
    got = got.cpu()
    want = want.cpu()
    if got.dtype != want.dtype:
        got, want = got.view(torch.uint8), want.view(torch.uint8)
    assert torch.equal(got, want), f"{what}: {first_mismatch(got, want)}"


@pytest.fixture
def rng():
    return torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))


@pytest.fixture
def gen():
    """A CPU generator seeded at random, the seed printed (pytest shows it with a failure);
    NVFP4_TEST_SEED=<seed> reproduces a run."""
    seed = int(os.environ.get("NVFP4_TEST_SEED", int.from_bytes(os.urandom(4), "little")))
    print(f"generator seed: NVFP4_TEST_SEED={seed}")
    return torch.Generator().manual_seed(seed)


def first_diff(got: torch.Tensor, want: torch.Tensor) -> str:
    """Where two byte tensors first differ, in hex, for assertion messages."""
    idx = (got != want).nonzero()
    if len(idx) == 0:
        return "equal"
    i = tuple(idx[0].tolist())
    return f"{len(idx)} of {got.numel()} differ; first at {i}: got 0x{int(got[i]):02x}, want 0x{int(want[i]):02x}"


# ------------------------------------------------------------------------------ float64 models of a GEMM's operands
#: E2M1 values by code (bit 3 the sign).
E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def linear_scales(q):
    """The block scales of q's rowwise data as a linear uint8 [rows, K/16] tensor."""
    import nvfp4
    d = q.rowwise
    rows, k = d.data.shape[0], d.data.shape[1] * 2
    sc = d.scales.view(torch.uint8)
    if q.scale_layout == "swizzled":
        sc = nvfp4.unswizzle_scales(sc, rows, k // 16)
    return sc.contiguous()


def decode_rows(data, sc, dtype=torch.float64):
    """Â = e2m1 value * block scale (exact) from packed codes [rows, K/2] and linear scales."""
    rows, k = data.shape[0], data.shape[1] * 2
    lut = torch.tensor(E2M1, dtype=dtype, device=data.device)
    codes = torch.stack([data & 15, data >> 4], -1).reshape(rows, k).long()
    return lut[codes] * sc.view(torch.float8_e4m3fn).to(dtype).repeat_interleave(16, 1)


def alpha_of(qa, qb) -> float:
    """alpha = S_dec(a) * S_dec(b), the fp32 product every backend uses."""
    def sdec(amax):
        a = amax.detach().float().cpu().reshape(())
        s = torch.tensor(448.0 * 6.0, dtype=torch.float32) / a
        s = torch.where(s > torch.finfo(torch.float32).max, torch.tensor(torch.finfo(torch.float32).max), s)
        s = torch.where(s == 0, torch.tensor(1.0), s)
        return torch.tensor(1.0, dtype=torch.float32) / s
    return float(sdec(qa.amax) * sdec(qb.amax))
