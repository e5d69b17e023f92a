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


def assert_bytes_equal(got: torch.Tensor, want: torch.Tensor, what: str):
    got = got.cpu()
    want = want.cpu()
    if got.dtype != want.dtype:
        got, want = got.view(torch.uint8), want.view(torch.uint8)
    assert torch.equal(got, want), f"{what}: {first_mismatch(got, want)}"


@pytest.fixture
def rng():
    return torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))
