"""The reference GEMM (CPU) against float64 math on the decoded operands."""
import pytest
import torch

import nvfp4
import nvfp4_ref as ref
from conftest import first_mismatch


def decoded_unscaled(q):
    """Â = e2m1 value * block scale (exact), from the tensor's bytes, in float64."""
    d = q.rowwise
    lin = d.scales.view(torch.uint8)
    rows, k = d.data.shape[0], d.data.shape[1] * 2
    if q.scale_layout == "swizzled":
        lin = nvfp4.unswizzle_scales(lin, rows, k // 16)
    codes = torch.stack([d.data & 15, d.data >> 4], -1).reshape(rows, k)
    return (ref.e2m1_decode(codes) * ref.e4m3_value(lin).repeat_interleave(16, 1)).double()


def alpha_of(qa, qb):
    sa = torch.tensor(1.0, dtype=torch.float32) / ref.global_encode_scale(qa.amax)
    sb = torch.tensor(1.0, dtype=torch.float32) / ref.global_encode_scale(qb.amax)
    return (sa * sb).double()  # the fp32 product every backend uses


def reference(qa, qb):
    return alpha_of(qa, qb) * (decoded_unscaled(qa) @ decoded_unscaled(qb).t())


@pytest.mark.parametrize("m,n,k", [(1, 16, 16), (7, 33, 48), (13, 5, 64), (31, 64, 256), (129, 17, 80)])
@pytest.mark.parametrize("layout", ["linear", "swizzled"])
def test_reference_gemm_matches_float64(m, n, k, layout):
    g = torch.Generator().manual_seed(m * 1000 + n + k)
    a = torch.randn(m, k, generator=g) * 3
    b = torch.randn(n, k, generator=g) * 0.02
    qa = nvfp4.quantize(a, scale_layout=layout)
    qb = nvfp4.quantize(b, scale_layout=layout)
    got = nvfp4.gemm(qa, qb, out_dtype=torch.float32, backend="reference")
    want = reference(qa, qb)
    # one rounding of the float64 result to float32
    assert torch.allclose(got.double(), want, rtol=2**-23, atol=1e-30)
    # and close to the unquantized product (NVFP4 error, loose)
    exact = a.double() @ b.double().t()
    assert ((got.double() - exact).norm() / exact.norm()) < 0.2


def on_grid_operands(m, n, k, seed=3):
    """Operands whose quantization is lossless at the code level: E2M1 grid values with
    every block amax = 6 and power-of-two multipliers per block. Every product Â·B̂ is
    exact in fp32 and so is every partial sum, so an fp32 GEMM must return exactly
    fp32(alpha * exact_sum)."""
    g = torch.Generator().manual_seed(seed)
    vals = torch.tensor(ref.E2M1_VALUES)
    def make(r):
        x = vals[torch.randint(0, 8, (r, k), generator=g)]
        x = x * torch.where(torch.rand(r, k, generator=g) < 0.5, -1.0, 1.0)
        x[:, ::16] = 6.0
        p2 = torch.exp2(torch.randint(-3, 4, (r, k // 16), generator=g).float()).repeat_interleave(16, 1)
        return x * p2
    return make(m), make(n)


def test_on_grid_inputs_are_exact():
    m, n, k = 9, 12, 64
    a, b = on_grid_operands(m, n, k)
    qa = nvfp4.quantize(a, scale_layout="linear")
    qb = nvfp4.quantize(b, scale_layout="linear")
    # lossless at the code level: Â / block scale is the grid value we put in
    assert torch.allclose(qa.dequantize(), a, rtol=1e-6) and torch.allclose(qb.dequantize(), b, rtol=1e-6)
    got = nvfp4.gemm(qa, qb, out_dtype=torch.float32)
    want = (alpha_of(qa, qb) * (decoded_unscaled(qa) @ decoded_unscaled(qb).t())).float()
    assert torch.equal(got, want)


def test_bias_beta_out_dtypes_and_batch():
    a = torch.randn(2, 3, 32)
    b = torch.randn(8, 32)
    qa, qb = nvfp4.quantize(a), nvfp4.quantize(b)
    base = nvfp4.gemm(qa, qb, out_dtype=torch.float32)
    assert base.shape == (2, 3, 8)
    bias = torch.randn(8)
    with_bias = nvfp4.gemm(qa, qb, out_dtype=torch.float32, bias=bias)
    assert torch.allclose(with_bias, base + bias, rtol=1e-6, atol=1e-6)
    out = torch.randn(2, 3, 8)
    c = out.clone()
    res = nvfp4.gemm(qa, qb, out=out, beta=0.5)
    assert res is out
    assert torch.allclose(out, base + 0.5 * c, rtol=1e-6, atol=1e-6)
    for dt in (torch.bfloat16, torch.float16):
        o = nvfp4.gemm(qa, qb, out_dtype=dt)
        assert o.dtype == dt and torch.equal(o, base.to(dt))


def test_gemm_with_transposed_operands():
    x = torch.randn(40, 32)
    dy = torch.randn(40, 16)
    qx = nvfp4.quantize(x, rowwise=False, columnwise=True)
    qd = nvfp4.quantize(dy, rowwise=False, columnwise=True)
    w = nvfp4.gemm(qd.T, qx.T, out_dtype=torch.float32)  # dy^T x: [16, 32]
    assert w.shape == (16, 32)
    assert ((w - dy.t() @ x).norm() / (dy.t() @ x).norm()) < 0.2


def test_gemm_errors():
    qa = nvfp4.quantize(torch.randn(4, 32))
    qb = nvfp4.quantize(torch.randn(4, 48))
    with pytest.raises(ValueError, match="K mismatch"):
        nvfp4.gemm(qa, qb)
    qc = nvfp4.quantize(torch.randn(4, 32), rowwise=False, columnwise=True)
    with pytest.raises(ValueError, match=r"^b: has no rowwise"):
        nvfp4.gemm(qa, qc)
    ql = nvfp4.quantize(torch.randn(4, 32), scale_layout="linear")
    with pytest.raises(ValueError, match=r"^b: scale_layout"):
        nvfp4.gemm(qa, ql)
    for be in ("cutlass", "cudnn"):
        with pytest.raises(ValueError, match=r"^backend: "):
            nvfp4.gemm(qa, qa, backend=be)
    with pytest.raises(ValueError, match=r"^backend: "):
        nvfp4.gemm(qa, qa, backend="magic")
    with pytest.raises(TypeError, match=r"^out_dtype: "):
        nvfp4.gemm(qa, qa, out_dtype=torch.int32)
    with pytest.raises(ValueError, match=r"^bias: "):
        nvfp4.gemm(qa, qa, bias=torch.zeros(5))
    with pytest.raises(ValueError, match=r"^beta: "):
        nvfp4.gemm(qa, qa, beta=1.0)
    with pytest.raises(TypeError, match=r"^a: "):
        nvfp4.gemm(torch.randn(4, 32), qa)
    with pytest.raises(ValueError, match=r"^out: "):
        nvfp4.gemm(qa, qa, out=torch.empty(3, 3))


def sequential(a64, b64):
    """Σ_k a[:, k] b[:, k] in float64, each sum taken in order k = 0, 1, ... (what the
    reference computes; the products of decoded values are exact in float64)."""
    acc = torch.zeros(a64.shape[0], b64.shape[0], dtype=torch.float64)
    for k in range(a64.shape[1]):
        acc += a64[:, k:k + 1] * b64[:, k]
    return acc


@pytest.mark.parametrize("m,n,k", [(203, 517, 400), (1, 250, 208), (97, 25, 16), (300, 7, 1024)])
def test_reference_gemm_blocked_is_the_sequential_sum(m, n, k):
    """Shapes that cross the reference's register tiles, cache blocks and K slices (and stop
    inside them): the float64 sums are the in-order sums bit for bit, on every thread; every
    output written (poisoned first); repeated runs identical."""
    g = torch.Generator().manual_seed(m + n + k)
    a = torch.randn(m, k, generator=g) * torch.exp2(torch.randint(-8, 8, (m, 1), generator=g).float())
    b = torch.randn(n, k, generator=g) * 0.02
    a[0, :16] = 0.0  # a zero block
    qa, qb = nvfp4.quantize(a), nvfp4.quantize(b, block="2d")
    want = (alpha_of(qa, qb) * sequential(decoded_unscaled(qa), decoded_unscaled(qb))).float()
    out = torch.full((m, n), float("nan"))
    got = nvfp4.gemm(qa, qb, out=out)
    assert torch.equal(got, want), first_mismatch(got, want)
    assert torch.equal(nvfp4.gemm(qa, qb, out_dtype=torch.float32), got)
    # the float64 bound against an unordered float64 product (what the other tests use)
    assert torch.allclose(got.double(), reference(qa, qb), rtol=2**-23, atol=1e-30)
    bias = torch.randn(n, generator=g)
    c = torch.randn(m, n, generator=g)
    got2 = nvfp4.gemm(qa, qb, out=c.clone(), beta=0.25, bias=bias)
    want2 = (alpha_of(qa, qb) * sequential(decoded_unscaled(qa), decoded_unscaled(qb))
             + 0.25 * c.double() + bias.double()).float()
    assert torch.equal(got2, want2), first_mismatch(got2, want2)


def test_reference_gemm_mxfp4_blocked_is_the_sequential_sum():
    g = torch.Generator().manual_seed(5)
    a, b = torch.randn(130, 416, generator=g), torch.randn(260, 416, generator=g)
    qa, qb = nvfp4.quantize_mxfp4(a), nvfp4.quantize_mxfp4(b)
    want = sequential(qa.dequantize(torch.float32).double(), qb.dequantize(torch.float32).double()).float()
    got = nvfp4.gemm(qa, qb, out=torch.full((130, 260), float("nan")))
    assert torch.equal(got, want), first_mismatch(got, want)


def test_reference_gemm_nan_and_inf_operands():
    a, b = torch.randn(100, 256), torch.randn(260, 256)
    a[3, 5] = float("inf")  # saturates in its block; the tensor's scale becomes 1
    qa, qb = nvfp4.quantize(a), nvfp4.quantize(b)
    got = nvfp4.gemm(qa, qb, out_dtype=torch.float32)
    want = (alpha_of(qa, qb) * sequential(decoded_unscaled(qa), decoded_unscaled(qb))).float()
    assert torch.isfinite(got).all() and torch.equal(got, want)
    a[7, 9] = float("nan")  # a NaN anywhere: every decoded value of A is NaN
    got = nvfp4.gemm(nvfp4.quantize(a), qb, out_dtype=torch.float32)
    assert torch.isnan(got).all()
