"""MXFP4 GEMM (nvfp4.gemm_mxfp4, and nvfp4.gemm with two MXFP4Tensor operands) against the
float64 product of the decoded operands. Bound per element: FP32 accumulation of exact
products, |got - ref| <= 2^-20 * (|A| |B|), plus one rounding to the output dtype. On the FP4
grid with small K every partial sum is exact, so the result is exact. CPU always (the
reference runner); CUDA (every backend the GPU has: on Hopper the CUTLASS and cuDNN
emulations) when there is a GPU.
"""
from __future__ import annotations

import pytest
import torch

import nvfp4

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _backends(device):
    """The backends to check on a device: the CPU's reference, or every CUDA backend it has."""
    if device == "cpu":
        return ["auto", "reference"]
    return ["auto"] + [b for b in ("cutlass", "cudnn") if nvfp4.is_supported(b, torch.device(device))]
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
    for backend in _backends(device):
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
        nvfp4.gemm(a, a, backend="cutlass")  # CPU tensors: the reference only
    with pytest.raises(ValueError, match="^backend:"):
        nvfp4.gemm(a, a, backend="fast")
    with pytest.raises(ValueError, match="^b: scale_layout"):
        nvfp4.gemm(a, nvfp4.quantize_mxfp4(torch.randn(4, 64), scale_layout="linear"))
    with pytest.raises(ValueError, match="^out: shares memory with a.data"):
        nvfp4.gemm(a, a, out=a.rowwise.data.view(torch.float32).reshape(-1)[:16].view(4, 4))
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


# ---- CUDA runners against the CPU reference runner ----------------------------------------
cuda_only = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _cuda_backends():
    return [b for b in ("cutlass", "cudnn") if nvfp4.is_supported(b, torch.device("cuda"))]


def _pair(m, n, k, seed, layout="swizzled", spread=4):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g) * torch.exp2(torch.randint(-spread, spread + 1, (m, k // 32), generator=g)
                                                    .float()).repeat_interleave(32, 1)
    w = torch.randn(n, k, generator=g)
    a = nvfp4.quantize_mxfp4(x, scale_layout=layout)
    b = nvfp4.quantize_mxfp4(w, rounding="sr", scale_rule="tetrajet", seed=seed, scale_layout=layout)
    return a, b, g


@cuda_only
@pytest.mark.parametrize("m,n,k", [(1, 8, 32), (5, 13, 96), (128, 264, 224), (129, 100, 4096), (1000, 520, 352)])
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("layout", ["swizzled", "linear"])
def test_cuda_runners_match_the_reference(m, n, k, out_dtype, layout):
    """Odd M and N (N = 13: D's rows are not 16-byte multiples, the fallback epilogue), K not
    a multiple of 64, bias and beta * C, an output poisoned with NaN before the call (beta =
    0: every element must be written), and two runs bit-identical."""
    a, b, g = _pair(m, n, k, m * 7 + n + k, layout)
    bias = torch.randn(n, generator=g)
    c = torch.randn(m, n, generator=g)
    ref, mag = _ref(a, b)
    for backend in _cuda_backends():
        ac, bc = a.to("cuda"), b.to("cuda")
        out = torch.full((m, n), float("nan"), dtype=out_dtype, device="cuda")
        y = nvfp4.gemm(ac, bc, backend=backend, bias=bias.to("cuda", out_dtype), out=out)
        assert y is out
        _check(out.cpu(), ref + bias.to(out_dtype).double(), mag + bias.abs().double(), out_dtype,
               f"{backend} {m}x{n}x{k} {layout}")
        again = torch.full_like(out, float("nan"))
        nvfp4.gemm(ac, bc, backend=backend, bias=bias.to("cuda", out_dtype), out=again)
        assert torch.equal(out, again), f"{backend}: two runs differ"
        # beta * C with C aliasing D
        cc = c.to("cuda", out_dtype)
        out2 = cc.clone()
        nvfp4.gemm(ac, bc, backend=backend, out=out2, beta=0.75)
        cref = cc.double().cpu()
        _check(out2.cpu(), ref + 0.75 * cref, mag + 0.75 * cref.abs(), out_dtype, f"{backend} beta")


@cuda_only
@pytest.mark.parametrize("rule", ["ocp", "ceil"])
def test_cuda_extreme_scales_and_specials(rule):
    """Blocks near both ends of E8M0 (2^±120), values that decode to >= 2^128 (inf under the
    ceil rule), NaN and inf inputs (NaN scale): the CUDA runners give what the reference gives
    (the same non-finite positions, the finite values within the bound)."""
    g = torch.Generator().manual_seed(5)
    k = 128
    x = torch.randn(16, k, generator=g)
    w = torch.randn(24, k, generator=g)
    x[0] *= 2.0 ** 120
    w[0] *= 2.0 ** -120          # row 0 x col 0: products of order 1
    # ceil: 1.9 * 2^127 -> 4 * 2^126 = 2^128 decodes to inf (the row becomes NaN: +-inf terms);
    # ocp would saturate it to 6 * 2^125 and overflow the fp32 sums, which the GPU may do
    # at another partial sum than the float64 reference: 2^120 there.
    x[1, :32] = 1.9 * 2.0 ** (127 if rule == "ceil" else 120)
    x[2, 40] = float("nan")
    w[3, 70] = float("inf")
    x[4] *= 2.0 ** -100
    w[4] *= 2.0 ** -20            # products of order 2^-120: inside fp32's normal range
    # (x[4] x w[0] is of order 2^-220: zero in fp32, hence the absolute term of the bound)
    a = nvfp4.quantize_mxfp4(x, scale_rule=rule)
    b = nvfp4.quantize_mxfp4(w, scale_rule=rule)
    want = nvfp4.gemm(a, b, out_dtype=torch.float32, backend="reference").double()
    ref, mag = _ref(a, b)
    fin = torch.isfinite(want)
    assert not fin.all()  # the specials reached the output
    for backend in _cuda_backends():
        got = nvfp4.gemm(a.to("cuda"), b.to("cuda"), out_dtype=torch.float32, backend=backend).cpu().double()
        assert torch.equal(torch.isnan(got), torch.isnan(want)), backend
        assert torch.equal(torch.isinf(got), torch.isinf(want)), backend
        assert torch.equal(got[torch.isinf(want)], want[torch.isinf(want)]), backend
        err = (got[fin] - ref[fin]).abs()
        assert (err <= 2.0 ** -20 * mag[fin] + 2.0 ** -24 * ref[fin].abs() + k * 2.0 ** -126).all(), backend


@cuda_only
def test_cuda_on_grid_exact_and_refusals():
    grid = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
    g = torch.Generator().manual_seed(3)
    x = grid[torch.randint(0, 8, (200, 160), generator=g)] * torch.where(torch.rand(200, 160, generator=g) < 0.5, -1, 1)
    x[:, ::32] = 6.0
    a = nvfp4.quantize_mxfp4(x.cuda())
    exact = x.double() @ x.double().t()
    for backend in _cuda_backends():
        assert torch.equal(nvfp4.gemm(a, a, out_dtype=torch.float32, backend=backend).cpu().double(), exact)
    with pytest.raises(ValueError, match="^backend:"):
        nvfp4.gemm(a, a, backend="reference")  # CUDA tensors: not the CPU reference


@pytest.mark.parametrize("device", DEVICES)
def test_op_traces_under_compile(device):
    """nvfp4.gemm_mxfp4 without out= is one op (torch.ops.nvfp4.mx_gemm): torch.compile with
    fullgraph=True traces it, with the eager result."""
    g = torch.Generator().manual_seed(9)
    a = nvfp4.quantize_mxfp4(torch.randn(24, 96, generator=g).to(device))
    b = nvfp4.quantize_mxfp4(torch.randn(40, 96, generator=g).to(device))
    bias = torch.randn(40, generator=g).to(device)

    def f(ad, as_, bd, bs, bias):
        return torch.ops.nvfp4.mx_gemm(ad, as_, bd, bs, 1, 0, torch.float32, bias) * 2.0

    args = (a.rowwise.data, a.rowwise.scales.view(torch.uint8), b.rowwise.data, b.rowwise.scales.view(torch.uint8),
            bias)
    want = nvfp4.gemm(a, b, out_dtype=torch.float32, bias=bias) * 2.0
    got = torch.compile(f, fullgraph=True, backend="aot_eager")(*args)
    assert torch.equal(got, want)
