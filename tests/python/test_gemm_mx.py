"""MXFP4 GEMM (nvfp4.gemm_mxfp4, and nvfp4.gemm with two MXFP4Tensor operands) against the
float64 product of the decoded operands. Bound per element: FP32 accumulation of exact
products, |got - ref| <= 2^-20 * (|A| |B|), plus one rounding to the output dtype. On the FP4
grid with small K every partial sum is exact, so the result is exact. CPU always; CUDA
("auto": BF16 tensor cores, FP32 output) when there is a GPU.
"""
from __future__ import annotations

import pytest
import torch

import nvfp4

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
ULP = {torch.float32: 2.0 ** -24, torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}


def _ref(a, b):
    da, db = a.dequantize(torch.float32).double(), b.dequantize(torch.float32).double()
    da, db = da.reshape(-1, da.shape[-1]), db.reshape(-1, db.shape[-1])
    return da @ db.t(), da.abs() @ db.abs().t()


def _check(got, ref, mag, out_dtype, what):
    bound = 2.0 ** -20 * mag + ULP[out_dtype] * ref.abs() + 1e-300
    err = (got.double().reshape(ref.shape) - ref).abs()
    assert (err <= bound).all(), f"{what}: worst ratio {(err / bound).max().item():.3g}"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("m,n,k", [(1, 32, 32), (37, 48, 64), (129, 96, 224), (256, 256, 1024)])
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("layout", ["swizzled", "linear"])
def test_matches_float64(device, m, n, k, out_dtype, layout):
    g = torch.Generator().manual_seed(m * 1000 + n + k)
    x = (torch.randn(m, k, generator=g) * torch.exp2(torch.randint(-8, 9, (m, 1), generator=g).float())).to(device)
    w = torch.randn(n, k, generator=g).to(device)
    a = nvfp4.quantize_mxfp4(x, scale_layout=layout)
    b = nvfp4.quantize_mxfp4(w, rounding="sr", scale_rule="ceil", seed=3, scale_layout=layout)
    ref, mag = _ref(a, b)
    for backend in ("auto", "reference"):
        y = nvfp4.gemm(a, b, out_dtype=out_dtype, backend=backend)
        assert y.shape == (m, n) and y.dtype == out_dtype and y.device.type == device
        _check(y, ref, mag, out_dtype, f"{backend} {m}x{n}x{k}")


@pytest.mark.parametrize("device", DEVICES)
def test_on_grid_is_exact_and_columnwise_via_T(device):
    g = torch.Generator().manual_seed(1)
    grid = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
    x = (grid[torch.randint(0, 8, (64, 96), generator=g)] * torch.where(torch.rand(64, 96, generator=g) < 0.5, -1, 1))
    x[:, ::32] = 6.0  # each block's max is 6: scale 2^0 under the OCP rule, values stay on the grid
    x = x.to(device)
    a = nvfp4.quantize_mxfp4(x, columnwise=True)
    exact = (x.double() @ x.double().t())
    assert torch.equal(nvfp4.gemm(a, a, out_dtype=torch.float32).double(), exact)
    # xᵀ x through the columnwise orientation (K = 64 tokens)
    xt = x.t().contiguous()
    assert torch.equal(a.dequantize(torch.float32, columnwise=True), x.float())
    y = nvfp4.gemm(a.T, a.T, out_dtype=torch.float32)
    assert torch.equal(y.double(), xt.double() @ xt.double().t())


@pytest.mark.parametrize("device", DEVICES)
def test_bias_out_beta(device):
    g = torch.Generator().manual_seed(2)
    a = nvfp4.quantize_mxfp4(torch.randn(40, 64, generator=g).to(device))
    b = nvfp4.quantize_mxfp4(torch.randn(32, 64, generator=g).to(device))
    ref, mag = _ref(a, b)
    bias = torch.randn(32, generator=g).to(device)
    c = torch.randn(40, 32, generator=g).to(device)
    out = c.clone()
    assert nvfp4.gemm(a, b, out=out, beta=-0.5, bias=bias) is out
    _check(out, ref + bias.double() - 0.5 * c.double(), mag + bias.abs().double() + 0.5 * c.abs().double(),
           torch.float32, "out/beta/bias")


def test_nan_and_inf_blocks():
    x = torch.randn(2, 64)
    x[0, 3] = float("inf")
    x[1, 40] = float("nan")
    a = nvfp4.quantize_mxfp4(x)
    b = nvfp4.quantize_mxfp4(torch.randn(3, 64))
    y = nvfp4.gemm(a, b, out_dtype=torch.float32)
    assert torch.isnan(y).all()  # a NaN or infinite element makes its block's scale NaN


def test_errors_name_the_parameter():
    a = nvfp4.quantize_mxfp4(torch.randn(4, 64))
    q = nvfp4.quantize(torch.randn(4, 64))
    with pytest.raises(TypeError, match="^b:"):
        nvfp4.gemm_mxfp4(a, q)
    with pytest.raises(TypeError, match="^a:"):
        nvfp4.gemm(a, q)  # mixed formats reach the NVFP4 path and are refused there
    with pytest.raises(ValueError, match="^backend:"):
        nvfp4.gemm(a, a, backend="cutlass")
    with pytest.raises(ValueError, match="^b: K mismatch"):
        nvfp4.gemm(a, nvfp4.quantize_mxfp4(torch.randn(4, 96)))
    with pytest.raises(ValueError, match="^a: has no rowwise"):
        nvfp4.gemm(nvfp4.quantize_mxfp4(torch.randn(4, 64), rowwise=False, columnwise=True), a)
    with pytest.raises(ValueError, match="^beta:"):
        nvfp4.gemm(a, a, beta=1.0)
    with pytest.raises(ValueError, match="^bias:"):
        nvfp4.gemm(a, a, bias=torch.zeros(5))
    with pytest.raises(ValueError, match="^out:"):
        nvfp4.gemm(a, a, out=torch.zeros(3, 4))
    with pytest.raises(TypeError, match="^out_dtype:"):
        nvfp4.gemm(a, a, out_dtype=torch.int32)
