"""The CUDA GEMM (backend="cutlass"; on Hopper the exact BF16 emulation) against float64.

Reference: R = alpha * (Â @ B̂ᵀ) in float64, Â/B̂ decoded from the tensors' own bytes
(E2M1 value * E4M3 block scale, exact), alpha = fp32((1/S_enc(amax_a)) * (1/S_enc(amax_b))).

Bound, per element (m, n), with S = alpha * sum_k |Â_mk| |B̂_nk|:
  |D - R_full| <= K * 2^-23 * S                      FP32 accumulation of K exact products
                                                       (2^-23: tensor cores may truncate
                                                       instead of rounding each addition)
               +  2^-22 * (S + |bias| + |beta C|)    alpha multiply, + bias, + beta*C in fp32
               +  u_out * |R_full|  (+ u_out * the terms above)   one rounding to the output
where R_full = R + bias + beta*C and u_out = 2^-24 (fp32), 2^-11 (fp16), 2^-8 (bf16).
Inputs on the FP4 grid with power-of-two scales make every product and partial sum exact
in fp32, so there the fp32 output must equal the exact result bit for bit.
"""
import math
import os

import pytest
import torch

import nvfp4
from conftest import E2M1, alpha_of, decode_rows, first_mismatch, linear_scales

HAS_CUDA = torch.cuda.is_available()


def _cutlass_ok():
    try:
        return HAS_CUDA and nvfp4.is_supported("cutlass", "cuda")
    except Exception:
        return False


needs_cutlass = pytest.mark.skipif(not _cutlass_ok(), reason="needs a CUDA GPU the cutlass backend supports")
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA")

U_OUT = {torch.float32: 2.0**-24, torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}


def reference(qa, qb, n_chunk=16384):
    """(R, S): alpha * Â @ B̂ᵀ and alpha * |Â| @ |B̂|ᵀ in float64 (B in row chunks: vocab-sized N)."""
    alpha = alpha_of(qa, qb)
    a = decode_rows(qa.data, linear_scales(qa))
    sb = linear_scales(qb)
    r, s = [], []
    n = qb.data.shape[0]
    for n0 in range(0, n, n_chunk):
        b = decode_rows(qb.data[n0:n0 + n_chunk], sb[n0:n0 + n_chunk])
        r.append(a @ b.t())
        s.append(a.abs() @ b.abs().t())
    return alpha * torch.cat(r, 1), alpha * torch.cat(s, 1)


def bits(t):
    return t.view(torch.int16) if t.element_size() == 2 else t.view(torch.int32)


def check_bound(got, r, s, k, out_dtype, bias=None, c=None, beta=0.0, what=""):
    got = got.double().reshape(r.shape)
    full = r.clone()
    extra = torch.zeros_like(r)
    if bias is not None:
        full += bias.double()
        extra += bias.double().abs()
    if c is not None and beta != 0.0:
        full += beta * c.double().reshape(r.shape)
        extra += abs(beta) * c.double().reshape(r.shape).abs()
    u = U_OUT[out_dtype]
    acc = k * 2.0**-23 * s + 2.0**-22 * (s + extra)
    tol = acc * (1 + u) + u * full.abs() + 1e-37
    assert not torch.isnan(got).any(), f"{what}: NaN in output (unwritten elements?)"
    err = (got - full).abs()
    bad = err > tol
    if bad.any():
        i = tuple(bad.nonzero()[0].tolist())
        raise AssertionError(f"{what}: {int(bad.sum())} elements out of bound; first at {i}: got {got[i].item()!r}, "
                             f"want {full[i].item()!r}, |err| {err[i].item():.3e} > bound {tol[i].item():.3e}")


def run_gemm(qa, qb, out_dtype=torch.bfloat16, backend="cutlass", **kw):
    """Runs twice into NaN-poisoned outputs; both runs must agree bit for bit."""
    m, n = qa.data.shape[0], qb.data.shape[0]
    outs = []
    for _ in range(2):
        poison = torch.full((m, n), float("nan"), dtype=out_dtype, device="cuda")
        res = nvfp4.gemm(qa, qb, backend=backend, out_dtype=out_dtype, out=poison, **kw)
        assert res is poison
        outs.append(res)
    torch.cuda.synchronize()
    assert torch.equal(bits(outs[0]), bits(outs[1])), f"two runs differ: {first_mismatch(outs[0], outs[1])}"
    return outs[0]


def make(m, n, k, layout="swizzled", seed=0, scale_a=3.0, scale_b=0.02, block_b="1d"):
    g = torch.Generator(device="cuda").manual_seed(seed * 7919 + m * 131 + n * 17 + k)
    a = torch.randn(m, k, generator=g, device="cuda") * scale_a
    b = torch.randn(n, k, generator=g, device="cuda") * scale_b
    return nvfp4.quantize(a, scale_layout=layout), nvfp4.quantize(b, block=block_b, scale_layout=layout)


# ------------------------------------------------------------------ shapes and paths

SHAPES = [
    # (M, N, K): M spans the fused small-M kernel (M <= 128; K % 32 == 0 with swizzled
    # scales, K % 64 == 0 with linear ones; a partial last 128-element chunk when K % 128
    # != 0) and the two-step path (decode + CUTLASS: M > 128, or K = 16 / 48). Odd N
    # exercises the fp32-intermediate fallback (a BF16 row of D not a multiple of 16 bytes).
    (1, 16, 16), (7, 33, 48), (13, 5, 16), (31, 127, 48), (128, 64, 48), (129, 17, 16),
    (3, 64, 32), (16, 200, 160), (7, 255, 2880), (31, 130, 4160),
    (1, 1000, 4096), (7, 255, 4096), (13, 513, 4096), (31, 96, 4096), (128, 384, 4096), (129, 256, 4096),
    (64, 1024, 256), (100, 200, 512), (4096, 264, 48), (4096, 1024, 4096),
]


@needs_cutlass
@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("layout", ["swizzled", "linear"])
def test_gemm_matches_float64(m, n, k, layout):
    qa, qb = make(m, n, k, layout)
    r, s = reference(qa, qb)
    got = run_gemm(qa, qb, torch.float32)
    check_bound(got, r, s, k, torch.float32, what=f"M={m} N={n} K={k} {layout} fp32")
    got = run_gemm(qa, qb, torch.bfloat16)
    check_bound(got, r, s, k, torch.bfloat16, what=f"M={m} N={n} K={k} {layout} bf16")


@needs_cutlass
@pytest.mark.parametrize("m,n,k", [(1, 4096, 4096), (16, 4096, 4096), (32, 14336, 4096), (16, 4096, 14336),
                                   (128, 4096, 4096), (1, 128256, 4096), (16, 32000, 4096), (2048, 4096, 4096)])
def test_llm_shapes(m, n, k):
    """Llama-3-8B projections (N x K = 4096x4096, 14336x4096, 4096x14336) and vocab heads."""
    qa, qb = make(m, n, k, "swizzled", scale_a=1.0, scale_b=0.02, block_b="2d")
    r, s = reference(qa, qb)
    got = run_gemm(qa, qb, torch.bfloat16)
    check_bound(got, r, s, k, torch.bfloat16, what=f"M={m} N={n} K={k}")


def on_grid_operands(m, n, k):
    """A [m, k] and B [n, k] on the FP4 grid: E2M1 values with every block amax 6 and tensor
    amax 42 (S_enc = 64), so the block scales are powers of two (the amax block is 42 alone,
    scale 448 = 7*64, still exact), alpha = 2^-12, and every product and partial sum of the
    GEMM is exact in fp32."""
    g = torch.Generator(device="cuda").manual_seed(m + n + k)
    vals = torch.tensor(E2M1[:8], device="cuda")

    def grid(rows):
        x = vals[torch.randint(0, 8, (rows, k), generator=g, device="cuda")]
        x = x * torch.where(torch.rand(rows, k, generator=g, device="cuda") < 0.5, -1.0, 1.0)
        x[:, ::16] = 6.0
        x[0, :16] = 0.0
        x[0, 0] = 42.0
        return x

    return grid(m), grid(n)


@needs_cutlass
@pytest.mark.parametrize("m,n,k", [(1, 72, 256), (13, 40, 4096), (100, 264, 1024), (300, 520, 512)])
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_on_grid_inputs_are_exact(m, n, k, out_dtype):
    """E2M1 values with every block amax 6 and tensor amax 42 (S_enc = 64): block scales are
    powers of two (the amax block is 42 alone, scale 448 = 7*64, still exact), alpha = 2^-12,
    every product and partial sum is exact in fp32, so the result is exact."""
    a, b = on_grid_operands(m, n, k)
    for layout in ("swizzled", "linear"):
        qa, qb = nvfp4.quantize(a, scale_layout=layout), nvfp4.quantize(b, scale_layout=layout)
        assert torch.equal(qa.dequantize(torch.float32), a) and torch.equal(qb.dequantize(torch.float32), b)
        exact = (a.double() @ b.double().t()).float()
        got = run_gemm(qa, qb, out_dtype)
        want = exact.to(out_dtype)
        assert torch.equal(got, want), f"{layout} {out_dtype}: {first_mismatch(got.float(), want.float())}"


@needs_cutlass
@pytest.mark.parametrize("m,n,k", [(5, 40, 256), (16, 1000, 4096), (200, 136, 64), (256, 1032, 512), (33, 77, 48)])
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_bias_and_beta(m, n, k, out_dtype):
    qa, qb = make(m, n, k)
    r, s = reference(qa, qb)
    g = torch.Generator(device="cuda").manual_seed(5)
    for bias_dtype in (torch.float32, out_dtype):
        bias = (torch.randn(n, generator=g, device="cuda") * 0.1).to(bias_dtype)
        got = run_gemm(qa, qb, out_dtype, bias=bias)
        check_bound(got, r, s, k, out_dtype, bias=bias, what=f"bias {bias_dtype}")
    for beta in (1.0, 0.5, -2.0):
        c = (torch.randn(m, n, generator=g, device="cuda") * 0.1).to(out_dtype)
        out = c.clone()
        res = nvfp4.gemm(qa, qb, backend="cutlass", out=out, beta=beta, bias=bias)
        assert res is out
        check_bound(out, r, s, k, out_dtype, bias=bias, c=c, beta=beta, what=f"beta={beta}")
        out2 = c.clone()
        nvfp4.gemm(qa, qb, backend="cutlass", out=out2, beta=beta, bias=bias)
        assert torch.equal(out, out2), "beta path: two runs differ"


# The streaming small-M kernel (M <= 32) picks its K split per shape: these shapes reach
# clusters of several sizes (non-powers of two too), a partial last K chunk inside a split,
# N not a multiple of its 128-row tile, more CTAs than one wave, long K, and (M > 16 with
# no one-wave split) the fallback to the ring kernel.
STREAM_SHAPES = [
    (1, 4096, 4160), (8, 4096, 4096), (9, 1000, 2880), (17, 4100, 4096), (32, 4096, 14336),
    (24, 14336, 1024), (5, 300, 96), (32, 33, 8192), (16, 128256, 512), (2, 8, 32),
]


@needs_cutlass
@pytest.mark.parametrize("m,n,k", STREAM_SHAPES)
@pytest.mark.parametrize("layout", ["swizzled", "linear"])
def test_small_m_stream_kernel(m, n, k, layout):
    if layout == "linear" and k % 64:
        pytest.skip("linear scales need K % 64 == 0 on the fused path")
    qa, qb = make(m, n, k, layout, scale_a=1.0, block_b="2d")
    r, s = reference(qa, qb)
    got = run_gemm(qa, qb, torch.float32)
    check_bound(got, r, s, k, torch.float32, what=f"stream M={m} N={n} K={k} {layout}")


@needs_cutlass
@pytest.mark.parametrize("env", [{"NVFP4_SM90_SMALL_M": "0"}, {"NVFP4_SM90_TILE": "large"},
                                 {"NVFP4_SM90_TILE": "medium"}, {"NVFP4_SM90_TILE": "streamk"},
                                 {"NVFP4_SM90_SMALL_M_KERNEL": "ring"}])
@pytest.mark.parametrize("m,n,k", [(16, 520, 4096), (128, 264, 1024), (1024, 2048, 512), (31, 4096, 4160)])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32])
def test_every_hopper_configuration(monkeypatch, env, m, n, k, out_dtype):
    """The same problems through the two-step path and each BF16 and FP32-output tile
    configuration."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("Hopper-specific configurations")
    for key, val in env.items():
        monkeypatch.setenv(key, val)
    qa, qb = make(m, n, k)
    r, s = reference(qa, qb)
    got = run_gemm(qa, qb, out_dtype)
    check_bound(got, r, s, k, out_dtype, what=f"{env} M={m} N={n} K={k} {out_dtype}")


# FP32 output where 128x256 tiles fill the machine (the weight gradients of wide layers):
# the 128x256 FP32 configuration by default, against the 128x128 one it replaced there
# (NVFP4_SM90_TILE=medium); N = 4350 takes the FP32 staging path (a row of D not a multiple
# of 16 bytes) through the same kernel, with a bias and beta * C.
@needs_cutlass
@pytest.mark.parametrize("m,n,k", [(2048, 4352, 256), (2304, 4350, 512), (4096, 2048, 1040)])
def test_fp32_output_large_tiles(monkeypatch, m, n, k):
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("Hopper-specific configurations")
    monkeypatch.setenv("NVFP4_SM90_SMALL_M", "0")
    qa, qb = make(m, n, k, block_b="2d")
    r, s = reference(qa, qb)
    got = run_gemm(qa, qb, torch.float32)
    check_bound(got, r, s, k, torch.float32, what=f"default M={m} N={n} K={k}")
    g = torch.Generator(device="cuda").manual_seed(11)
    bias = torch.randn(n, generator=g, device="cuda")
    c = torch.randn(m, n, generator=g, device="cuda")
    d = c.clone()
    nvfp4.gemm(qa, qb, out_dtype=torch.float32, bias=bias, out=d, beta=0.5)
    check_bound(d, r, s, k, torch.float32, bias=bias, c=c, beta=0.5, what=f"bias + beta M={m} N={n} K={k}")
    monkeypatch.setenv("NVFP4_SM90_TILE", "medium")
    check_bound(run_gemm(qa, qb, torch.float32), r, s, k, torch.float32, what=f"128x128 M={m} N={n} K={k}")


# Few 128x128 output tiles over a long K: the shapes the stream-K configurations take by
# default (sm90_gemm.cu, wants_stream_k), e.g. the weight gradients of narrow layers; the
# partial sums of split tiles are reduced in a fixed order, so two runs agree bit for bit
# (run_gemm checks it).
STREAM_K_SHAPES = [(256, 384, 8192), (768, 768, 4096), (130, 264, 2080), (1152, 2304, 2048)]


@needs_cutlass
@pytest.mark.parametrize("m,n,k", STREAM_K_SHAPES)
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32])
def test_stream_k_shapes(monkeypatch, m, n, k, out_dtype):
    monkeypatch.setenv("NVFP4_SM90_SMALL_M", "0")
    qa, qb = make(m, n, k, block_b="2d")
    r, s = reference(qa, qb)
    got = run_gemm(qa, qb, out_dtype)
    check_bound(got, r, s, k, out_dtype, what=f"M={m} N={n} K={k} {out_dtype}")
    if torch.cuda.get_device_capability() == (9, 0):  # the data-parallel kernel, same bound
        monkeypatch.setenv("NVFP4_SM90_TILE", "medium")
        check_bound(run_gemm(qa, qb, out_dtype), r, s, k, out_dtype, what=f"data-parallel M={m} N={n} K={k}")


@needs_cutlass
def test_stream_k_bias_and_beta(monkeypatch):
    monkeypatch.setenv("NVFP4_SM90_SMALL_M", "0")
    m, n, k = 384, 256, 8192
    qa, qb = make(m, n, k)
    r, s = reference(qa, qb)
    g = torch.Generator(device="cuda").manual_seed(5)
    bias = torch.randn(n, device="cuda", generator=g).to(torch.bfloat16)
    c = torch.randn(m, n, device="cuda", generator=g).to(torch.bfloat16)
    out = c.clone()
    nvfp4.gemm(qa, qb, backend="cutlass", out=out, bias=bias, beta=0.5)
    check_bound(out, r, s, k, torch.bfloat16, bias=bias, c=c, beta=0.5, what="stream-K bias + beta*C")


@needs_cutlass
def test_unknown_tile_setting_is_refused(monkeypatch):
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("a Hopper setting")
    monkeypatch.setenv("NVFP4_SM90_SMALL_M", "0")
    monkeypatch.setenv("NVFP4_SM90_TILE", "huge")
    qa, qb = make(256, 256, 256)
    with pytest.raises(ValueError, match="NVFP4_SM90_TILE"):
        nvfp4.gemm(qa, qb, backend="cutlass")
    # medium2x1 names a BF16-output kernel: an FP32-output GEMM (and a BF16 one staged
    # through FP32) is refused by name instead of running another kernel.
    monkeypatch.setenv("NVFP4_SM90_TILE", "medium2x1")
    with pytest.raises(ValueError, match="NVFP4_SM90_TILE=medium2x1"):
        nvfp4.gemm(qa, qb, backend="cutlass", out_dtype=torch.float32)
    qa, qb = make(256, 260, 256)  # N * 2 bytes not a multiple of 16: FP32 staging
    with pytest.raises(ValueError, match="NVFP4_SM90_TILE=medium2x1"):
        nvfp4.gemm(qa, qb, backend="cutlass", out_dtype=torch.bfloat16)


@needs_cutlass
def test_auto_is_cutlass_and_batched_input():
    x = torch.randn(2, 3, 256, device="cuda")
    w = torch.randn(40, 256, device="cuda")
    qx, qw = nvfp4.quantize(x), nvfp4.quantize(w, block="2d")
    d_auto = nvfp4.gemm(qx, qw)
    d_cut = nvfp4.gemm(qx, qw, backend="cutlass")
    assert d_auto.shape == (2, 3, 40) and d_auto.dtype == torch.bfloat16
    assert torch.equal(d_auto, d_cut)


@needs_cutlass
def test_runs_on_the_current_stream():
    qa, qb = make(16, 4096, 4096)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())  # the operands were made on the default stream
    with torch.cuda.stream(s):
        out = torch.full((16, 4096), float("nan"), dtype=torch.bfloat16, device="cuda")
        nvfp4.gemm(qa, qb, out=out)
        first = out.clone()  # ordered on s after the GEMM
    s.synchronize()
    r, sa = reference(qa, qb)
    check_bound(first, r, sa, 4096, torch.bfloat16, what="side stream")


@needs_cutlass
def test_wgrad_with_columnwise_operands():
    x = torch.randn(256, 64, device="cuda")
    dy = torch.randn(256, 32, device="cuda")
    qx = nvfp4.quantize(x, rowwise=False, columnwise=True)
    qd = nvfp4.quantize(dy, rowwise=False, columnwise=True)
    w = nvfp4.gemm(qd.T, qx.T, backend="cutlass", out_dtype=torch.float32)
    ref = nvfp4.gemm(qd.T.to("cpu"), qx.T.to("cpu"), backend="reference", out_dtype=torch.float32)
    r, s = reference(qd.T, qx.T)
    check_bound(w, r, s, 256, torch.float32, what="wgrad")
    assert torch.allclose(w.cpu(), ref, rtol=2**-16, atol=1e-6)


# ------------------------------------------------------------------ errors


@needs_cuda
def test_bad_inputs_raise_clear_errors():
    qa = nvfp4.quantize(torch.randn(8, 64, device="cuda"))
    qb = nvfp4.quantize(torch.randn(8, 32, device="cuda"))
    with pytest.raises(ValueError, match="K mismatch"):
        nvfp4.gemm(qa, qb, backend="cutlass")
    qcol = nvfp4.quantize(torch.randn(8, 64, device="cuda"), rowwise=False, columnwise=True)
    with pytest.raises(ValueError, match=r"^b: has no rowwise"):
        nvfp4.gemm(qa, qcol, backend="cutlass")
    qcpu = nvfp4.quantize(torch.randn(8, 64))
    with pytest.raises(ValueError, match="b: on"):
        nvfp4.gemm(qa, qcpu, backend="cutlass")
    with pytest.raises(ValueError, match=r"^backend: "):
        nvfp4.gemm(qcpu, qcpu, backend="cutlass")
    with pytest.raises(ValueError, match=r"^backend: "):
        nvfp4.gemm(qa, qa, backend="reference")
    with pytest.raises(ValueError, match=r"^out: "):
        nvfp4.gemm(qa, qa, out=torch.empty(8, 8, dtype=torch.bfloat16))  # CPU out for CUDA operands
    with pytest.raises(ValueError, match=r"^bias: "):
        nvfp4.gemm(qa, qa, bias=torch.zeros(8))  # CPU bias
    if torch.cuda.device_count() > 1:
        qother = nvfp4.quantize(torch.randn(8, 64, device="cuda:1"))
        with pytest.raises(ValueError, match="b: on"):
            nvfp4.gemm(qa, qother)


@needs_cuda
def test_unsupported_gpu_names_the_requirement():
    if _cutlass_ok():
        pytest.skip("this GPU runs the cutlass backend")
    qa = nvfp4.quantize(torch.randn(8, 64, device="cuda"))
    with pytest.raises(RuntimeError, match="needs"):
        nvfp4.gemm(qa, qa, backend="cutlass")


@needs_cutlass
@pytest.mark.parametrize("m,env,kernel", [
    (8, {}, "stream"),                                          # the streaming kernel's own case
    (8, {"NVFP4_SM90_SMALL_M_KERNEL": "ring"}, "ring"),
    (64, {}, "ring"),                                           # M > 32: the ring kernel
    (100, {"NVFP4_SM90_STREAM_SPLIT": "2"}, "ring"),            # a streaming knob does not apply there
    (256, {}, None),                                            # M > 128: the two-step path
    (8, {"NVFP4_SM90_SMALL_M": "0"}, None),
])
def test_sm90_trace_prints_the_plan_that_runs(capfd, monkeypatch, m, env, kernel):
    """NVFP4_SM90_TRACE=1 prints each Hopper GEMM's plan (the small-M kernel with its split
    and grid, or the two-step path's CUTLASS configuration) to stderr; the runner that runs
    is the one the plan names, and tracing changes no bit of the result."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("Hopper-specific runners")
    for key, val in env.items():
        monkeypatch.setenv(key, val)
    qa, qb = make(m, 4096, 4096)
    want = run_gemm(qa, qb, torch.bfloat16)
    monkeypatch.setenv("NVFP4_SM90_TRACE", "1")
    torch.cuda.synchronize()
    capfd.readouterr()
    got = run_gemm(qa, qb, torch.bfloat16)
    torch.cuda.synchronize()
    err = capfd.readouterr().err
    if kernel is None:
        assert f"nvfp4 sm90 two-step: M={m} N=4096 K=4096 -> decode + CUTLASS" in err, err
        assert "small-M" not in err, err
    else:
        assert f"nvfp4 sm90 small-M: M={m} N=4096 K=4096 -> {kernel} kernel" in err, err
        assert "two-step" not in err, err
    assert torch.equal(got, want)


@needs_cutlass
def test_settings_are_read_on_every_call(capfd, monkeypatch):
    """Within one call the GEMM and quantization paths skip their settings lookups when no
    NVFP4_* variable is set (src/settings.h, SettingsScope); a setting set or unset between
    two calls still takes effect on the next one: nothing carries over from one call to the
    next, with none set before and after. Observed through NVFP4_SM90_TRACE (M = 256: the
    two-step path) on a GEMM and on the quantization of its operands right before it."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("Hopper-specific trace")
    for key in [k for k in os.environ if k.startswith("NVFP4_")]:
        monkeypatch.delenv(key)
    x = torch.randn(256, 512, device="cuda")
    w = torch.randn(384, 512, device="cuda")

    def traced():
        torch.cuda.synchronize()
        capfd.readouterr()
        out = nvfp4.gemm(nvfp4.quantize(x), nvfp4.quantize(w), backend="cutlass")
        torch.cuda.synchronize()
        return out, capfd.readouterr().err

    want, err = traced()
    assert "nvfp4 sm90" not in err, err
    for _ in range(2):
        monkeypatch.setenv("NVFP4_SM90_TRACE", "1")
        got, err = traced()
        assert "nvfp4 sm90 two-step: M=256 N=384 K=512" in err, err
        assert torch.equal(got, want)
        monkeypatch.delenv("NVFP4_SM90_TRACE")
        got, err = traced()
        assert "nvfp4 sm90" not in err, err
        assert torch.equal(got, want)


def _run_traced(monkeypatch, capfd, qa, qb, out_dtype, env):
    """The GEMM run with the default settings, then with `env` and NVFP4_SM90_TRACE=1 set:
    (default output, output under env, the plan the trace printed)."""
    want = run_gemm(qa, qb, out_dtype)
    with monkeypatch.context() as mp:
        for key, val in env.items():
            mp.setenv(key, val)
        mp.setenv("NVFP4_SM90_TRACE", "1")
        torch.cuda.synchronize()
        capfd.readouterr()
        got = run_gemm(qa, qb, out_dtype)
        torch.cuda.synchronize()
        err = capfd.readouterr().err
    return want, got, err


def _fp32_rule(m, n, k, sms, large_allowed):
    """The FP32-output choice of sm90_gemm.cu (pick_kernel), restated: 128x256 tiles where
    they fill 90% of the machine or more (unless NVFP4_SM90_F32_LARGE=0), else stream-K
    where 128x128 tiles leave a wave mostly idle over a long K, else 128x128."""
    large = -(-m // 128) * -(-n // 256) * 10 >= sms * 9 and large_allowed
    tiles = -(-m // 128) * -(-n // 128)
    slots = -(-tiles // sms) * sms
    if large:
        return "fp32-out 128x256x64 2x1 cooperative"
    if k >= 2048 and tiles * 5 < slots * 4:
        return "fp32-out 128x128x64 1x1 cooperative stream-K"
    return "fp32-out 128x128x64 1x1 cooperative ("


@needs_cutlass
@pytest.mark.parametrize("f32_large", [None, "0"])
def test_fp32_output_choice_follows_its_rule(capfd, monkeypatch, f32_large):
    """Which CUTLASS kernel an FP32-output GEMM takes, read from NVFP4_SM90_TRACE: the
    128x256 kernel where its tiles fill the machine, and with NVFP4_SM90_F32_LARGE=0 exactly
    the rule from before that kernel (stream-K where 128x128 tiles leave a wave idle and
    K >= 2048, else 128x128). Shapes are sized from this GPU's SM count so that each rule's
    branch is taken; between the data-parallel kernels the knob changes no bit of the result."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("Hopper-specific configurations")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    monkeypatch.setenv("NVFP4_SM90_SMALL_M", "0")
    monkeypatch.setenv("NVFP4_SM90_RS", "0")  # the two-step path's choice
    # 128x256 tiles just fill the machine while 128x128 tiles leave most of a wave idle:
    # (m/128) * (n/256) = r * r >= sms with r = ceil(sqrt(sms)).
    r = math.isqrt(sms - 1) + 1
    # 128x256 tiles filling between 90% and all of one wave: 8 rows of b >= 0.9 * sms / 8.
    b = -(-(-(-sms * 9 // 10)) // 8)
    assert 8 * b * 10 >= sms * 9 and 8 * b < sms
    shapes = [(128 * r, 256 * r, 2048),     # large by default; stream-K under the knob if a wave idles
              (128 * r, 256 * r, 1024),     # the same, K too short for stream-K
              (128 * 8, 256 * b, 4096),     # 90% of a wave of 128x256 tiles: large by default
              (256, 512, 4096)]             # few tiles: never large
    for m, n, k in shapes:
        qa, qb = make(m, n, k, block_b="2d")
        env = {} if f32_large is None else {"NVFP4_SM90_F32_LARGE": f32_large}
        want, got, err = _run_traced(monkeypatch, capfd, qa, qb, torch.float32, env)
        expect = _fp32_rule(m, n, k, sms, f32_large is None)
        assert f"M={m} N={n} K={k} -> decode + CUTLASS {expect}" in err, (expect, err)
        r_, s_ = reference(qa, qb)
        check_bound(got, r_, s_, k, torch.float32, what=f"M={m} N={n} K={k} F32_LARGE={f32_large}")
        if "stream-K" not in expect + _fp32_rule(m, n, k, sms, True):
            # the data-parallel kernels sum each output's K in the same order
            assert torch.equal(got, want), (m, n, k)


def _bf16_rule(m, n, k, sms, pingpong=True):
    """The BF16-output choice of sm90_gemm.cu (pick_kernel), restated: where 128x256 tiles
    fill the machine, the 128x128 ping-pong kernels over K <= 1024 (on a 2x1 cluster from
    N >= 2048; unless NVFP4_SM90_PINGPONG=0), else the 128x256 kernel."""
    if -(-m // 128) * -(-n // 256) < sms:
        return None  # stream-K or 128x128: covered by test_stream_k_shapes
    if k <= 1024 and pingpong:
        return "bf16 128x128x64 2x1 pingpong" if n >= 2048 else "bf16 128x128x64 1x1 pingpong"
    return "bf16 128x256x64 2x1 cooperative"


@needs_cutlass
@pytest.mark.parametrize("pingpong", [None, "0"])
def test_bf16_output_choice_follows_its_rule(capfd, monkeypatch, pingpong):
    """Which CUTLASS kernel a BF16-output GEMM takes where 128x256 tiles fill the machine,
    read from NVFP4_SM90_TRACE: over K <= 1024 the 128x128 ping-pong kernels (2x1 cluster
    from N >= 2048, else 1x1), over longer K the 128x256 one; NVFP4_SM90_PINGPONG=0 keeps the
    128x256 kernel everywhere. Every configuration sums each output's K in the same order, so
    the knob changes no bit of the result."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("Hopper-specific configurations")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    monkeypatch.setenv("NVFP4_SM90_SMALL_M", "0")
    monkeypatch.setenv("NVFP4_SM90_RS", "0")  # the two-step path's choice (N = 768 would take sm90-fp4-rs)
    monkeypatch.setenv("NVFP4_SM90_CUBLASLT", "0")  # CUTLASS's choice (K 1040 and 2048 would take cuBLASLt)
    rows = -(-sms // 3)  # 3 columns of 128x256 tiles (N = 768) filling the machine
    r = math.isqrt(sms - 1) + 1
    shapes = [(128 * r, 2048 * 2, 768), (128 * r, 2048 * 2, 1024), (128 * r, 2048 * 2, 1040),
              (128 * r, 2048 * 2, 2048), (128 * rows, 768, 768), (128 * rows, 768, 1024),
              (128 * rows, 768, 3072), (128 * rows, 776, 512)]
    for m, n, k in shapes:
        qa, qb = make(m, n, k, block_b="2d")
        env = {} if pingpong is None else {"NVFP4_SM90_PINGPONG": pingpong}
        want, got, err = _run_traced(monkeypatch, capfd, qa, qb, torch.bfloat16, env)
        expect = _bf16_rule(m, n, k, sms, pingpong is None)
        assert expect is not None, (m, n, k)
        assert f"M={m} N={n} K={k} -> decode + CUTLASS {expect}" in err, (expect, err)
        r_, s_ = reference(qa, qb)
        check_bound(got, r_, s_, k, torch.bfloat16, what=f"M={m} N={n} K={k} PINGPONG={pingpong}")
        assert torch.equal(got, want), (m, n, k)


@needs_cutlass
@pytest.mark.parametrize("m,n,k", [(1024, 2048, 512), (2176, 4104, 1040), (300, 2056, 2048), (4096, 4096, 768)])
def test_bf16_pingpong_2x1_configuration(monkeypatch, m, n, k):
    """The 128x128 ping-pong kernel on a 2x1 cluster, forced (NVFP4_SM90_TILE=medium2x1) at
    odd and even shapes (M not a multiple of the cluster's 256 rows, N not a multiple of 128),
    with and without bias and beta * C, against the float64 bound, and bit for bit against the
    1x1 ping-pong and 128x256 kernels (same K order)."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("Hopper-specific configurations")
    monkeypatch.setenv("NVFP4_SM90_SMALL_M", "0")
    qa, qb = make(m, n, k, block_b="2d")
    r, s = reference(qa, qb)
    outs = {}
    for tile in ("medium2x1", "medium", "large"):
        monkeypatch.setenv("NVFP4_SM90_TILE", tile)
        outs[tile] = run_gemm(qa, qb, torch.bfloat16)
        check_bound(outs[tile], r, s, k, torch.bfloat16, what=f"{tile} M={m} N={n} K={k}")
    assert torch.equal(outs["medium2x1"], outs["medium"])
    assert torch.equal(outs["medium2x1"], outs["large"])
    monkeypatch.setenv("NVFP4_SM90_TILE", "medium2x1")
    g = torch.Generator(device="cuda").manual_seed(7)
    bias = torch.randn(n, generator=g, device="cuda").to(torch.bfloat16)
    c = torch.randn(m, n, generator=g, device="cuda").to(torch.bfloat16)
    d = c.clone()
    nvfp4.gemm(qa, qb, backend="cutlass", out=d, bias=bias, beta=0.5)
    check_bound(d, r, s, k, torch.bfloat16, bias=bias, c=c, beta=0.5, what=f"medium2x1 bias + beta M={m} N={n}")


def test_fp16_decode_of_the_small_m_kernel_is_exact():
    """The Hopper small-M kernel decodes E2M1 code (s, e1 e0, m) as the E4M3 byte
    s|0|0|e1 e0|m|0|0 (= value * 2^-6, converted to FP16 by hardware) times the FP16
    (block scale * 2^6). Both factors and the product must be exact FP16 values equal to
    value * scale, for every code and every finite E4M3 scale."""
    codes = torch.arange(16, dtype=torch.uint8)
    byte = ((codes & 8) << 4) | ((codes & 7) << 2)
    v = byte.view(torch.float8_e4m3fn).to(torch.float64)
    want_v = torch.tensor(E2M1, dtype=torch.float64) * 2.0**-6
    assert torch.equal(v, want_v)
    scales = torch.arange(0x7F, dtype=torch.uint8).view(torch.float8_e4m3fn).to(torch.float64)
    s64 = scales * 64
    assert torch.equal(s64.to(torch.float16).double(), s64)          # scale * 2^6 is exact in FP16
    assert torch.equal(v.to(torch.float16).double(), v)              # decoded code is exact in FP16
    prod = v[:, None] * s64[None, :]
    assert torch.equal(prod.to(torch.float16).double(), prod)        # the FP16 product is exact
    assert torch.equal(prod, torch.tensor(E2M1, dtype=torch.float64)[:, None] * scales[None, :])


def test_backend_support_answers():
    from nvfp4 import _C
    assert _C.backend_supported(1, 0) == 1          # reference on CPU
    assert _C.backend_supported(2, 0) == 0          # cutlass never on CPU
    assert _C.backend_supported(2, 75) == 0         # no Turing runner
    assert _C.backend_supported(2, 89) == 0         # nor Ada
    archs = _C.build_cuda_archs().split(";")
    assert bool(_C.backend_supported(2, 90)) == ("90a" in archs)
    assert _C.backend_supported(1, 90) == 0          # the reference is CPU-only
