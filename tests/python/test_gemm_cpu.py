"""The reference GEMM (CPU) against float64 math on the decoded operands."""
import pytest
import torch

import nvfp4
import nvfp4_ref as ref


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
