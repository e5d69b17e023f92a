"""The Hopper two-step runner's cuBLASLt engine (src/gemm/sm90/sm90_cublaslt.cu): NVFP4 jobs
with no bias and no C have their decoded operands (given by nvfp4_gemm_decoded, or decoded from
their codes by the runner first) multiplied by cublasLtMatmul, alpha formed on the device from the
two amax. Chosen where measured faster (BF16 output, K in (1024, 2048], N >= 2048, 128 x 256 tiles
filling the machine), for every job it can take with NVFP4_SM90_CUBLASLT=1, for none with 0.

Checked against float64 with test_gemm_cuda.py's bound, twice into NaN-poisoned outputs (the
same bits both times, every element written), against CUTLASS on the same job within the same
bound, by which kernels run, and the codes road against the decoded road bit for bit (the same
engine either way).
"""
import pytest
import torch

import nvfp4
from nvfp4 import _ops
from test_decoded import SWIZZLED, _dev, _gemm, quantize_decoded
from test_gemm_cuda import check_bound
from test_gemm_sm90_direct import kernels_of
from test_gemm_sm90_rs import _sdec, operands  # operands: A's codes and values (SR), B's (2D)

HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


def _two_step_built():
    if not HOPPER:
        return False
    try:
        return any(r["name"].startswith("cutlass-sm90") and r["built"] for r in nvfp4.device_info()["runners"])
    except Exception:
        return False


needs_sm90 = pytest.mark.skipif(not _two_step_built(), reason="needs a Hopper GPU and a build with the sm90 runners")


def reference(ra, rb):
    alpha = float(_sdec(ra.vamax) * _sdec(rb.vamax))
    a, b = ra.values.double().cpu(), rb.values.double().cpu()
    return alpha * (a @ b.t()), alpha * (a.abs() @ b.abs().t())


def gemm_both_decoded(ra, rb, m, n, k, out_dtype, bias=None, ws_pad=0, d_offset=0):
    """nvfp4_gemm_decoded with both operands' decoded values into a NaN-poisoned D (d_offset
    elements into its allocation); D on the CPU."""
    dev = torch.device("cuda")
    d = torch.full((m * n + d_offset,), float("nan"), dtype=out_dtype, device=dev)[d_offset:].view(m, n)
    bias_dt = None if bias is None else bias.dtype
    ws_bytes = _ops.gemm_dec_workspace_bytes(m, n, k, 2, out_dtype, bias_dt, True, True, dev, _dev(d)) + ws_pad
    ws = torch.full((max(ws_bytes, 1),), 0xFF, dtype=torch.uint8, device=dev)
    _ops.gemm_dec_raw(0, 0, 0, *ra.dec_addr(), 0, 0, 0, *rb.dec_addr(), m, n, k, SWIZZLED, 0, 0,
                      0 if bias is None else bias.data_ptr(), _ops.DTYPE_CODE.get(bias_dt, 0), 0.0,
                      d.data_ptr(), _ops.DTYPE_CODE[out_dtype], 2, ws.data_ptr(), ws_bytes, *_dev(d))
    torch.cuda.synchronize()
    return d.cpu()


def _lt_ran(names):
    # cuBLAS's kernels: nvjet_* (Hopper) or *gemm* kernels that are neither CUTLASS's nor the library's
    return any(n.startswith("nvjet") or ("gemm" in n.lower() and "cutlass" not in n and "nvfp4" not in n)
               for n in names)


@needs_sm90
@pytest.mark.parametrize("m,n,k", [(1, 8, 16), (7, 40, 96), (129, 264, 160), (300, 2048, 2048), (2048, 6144, 2048),
                                   (1000, 776, 2880)])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32])
def test_forced_matches_float64_and_cutlass(monkeypatch, m, n, k, out_dtype):
    ra, rb = operands(m, n, k)
    r, s = reference(ra, rb)
    monkeypatch.setenv("NVFP4_SM90_CUBLASLT", "1")
    names = kernels_of(lambda: gemm_both_decoded(ra, rb, m, n, k, out_dtype))
    assert _lt_ran(names) and not any("cutlass" in x for x in names), names
    got = gemm_both_decoded(ra, rb, m, n, k, out_dtype)
    check_bound(got, r, s, k, out_dtype, what=f"cuBLASLt M={m} N={n} K={k} {out_dtype}")
    again = gemm_both_decoded(ra, rb, m, n, k, out_dtype)
    assert torch.equal(got.view(torch.uint8), again.view(torch.uint8)), "two runs differ"
    monkeypatch.setenv("NVFP4_SM90_CUBLASLT", "0")
    names = kernels_of(lambda: gemm_both_decoded(ra, rb, m, n, k, out_dtype))
    assert any("cutlass" in x for x in names) and not _lt_ran(names), names
    cut = gemm_both_decoded(ra, rb, m, n, k, out_dtype)
    check_bound(cut, r, s, k, out_dtype, what=f"CUTLASS M={m} N={n} K={k} {out_dtype}")


@needs_sm90
def test_fp16_output_stays_on_cutlass(monkeypatch):
    """BF16 x BF16 -> FP16 is no cuBLASLt combination: even forced, an FP16 output runs CUTLASS."""
    monkeypatch.setenv("NVFP4_SM90_CUBLASLT", "1")
    m, n, k = 300, 2048, 2048
    ra, rb = operands(m, n, k)
    names = kernels_of(lambda: gemm_both_decoded(ra, rb, m, n, k, torch.float16))
    assert any("cutlass" in x for x in names) and not _lt_ran(names), names
    r, s = reference(ra, rb)
    check_bound(gemm_both_decoded(ra, rb, m, n, k, torch.float16), r, s, k, torch.float16, what="fp16 output")


@needs_sm90
def test_special_values_and_alpha_from_the_amax(monkeypatch):
    # zeros of both signs, large and tiny values; alpha from two amax far from 1
    m, n, k = 264, 2048, 1536
    ra, rb = operands(m, n, k, special=True)
    r, s = reference(ra, rb)
    monkeypatch.setenv("NVFP4_SM90_CUBLASLT", "1")
    got = gemm_both_decoded(ra, rb, m, n, k, torch.bfloat16)
    check_bound(got, r, s, k, torch.bfloat16, what="cuBLASLt special values")


@needs_sm90
def test_chosen_by_shape_and_declined_elsewhere(monkeypatch):
    """Unset: the measured shapes (BF16 output, K 2048, N >= 2048, a full wave of 128 x 256 tiles)
    run cuBLASLt; K = 768 and K = 4096, N = 1024, FP32 output, a bias run CUTLASS."""
    monkeypatch.delenv("NVFP4_SM90_CUBLASLT", raising=False)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    m = 128 * sms  # one row of 128 x 256 tiles per SM at N = 256 ... a full wave from N = 256 on
    cases = [((m, 2048, 2048, torch.bfloat16, None), True), ((m, 6144, 2048, torch.bfloat16, None), True),
             ((m, 2048, 768, torch.bfloat16, None), False), ((m, 2048, 4096, torch.bfloat16, None), False),
             ((m, 1024, 2048, torch.bfloat16, None), False), ((m, 2048, 2048, torch.float32, None), False),
             ((m, 2048, 2048, torch.bfloat16, torch.zeros(2048, device="cuda")), False),
             ((256, 2048, 2048, torch.bfloat16, None), False)]
    for (mm, n, k, dt, bias), want in cases:
        ra, rb = operands(mm, n, k)
        names = kernels_of(lambda: gemm_both_decoded(ra, rb, mm, n, k, dt, bias=bias))
        assert _lt_ran(names) == want, ((mm, n, k, dt, bias is not None), names)
        if want:
            r, s = reference(ra, rb)
            check_bound(gemm_both_decoded(ra, rb, mm, n, k, dt), r, s, k, dt, what=f"chosen M={mm} N={n} K={k}")


@needs_sm90
def test_forced_leaves_what_it_cannot_take_to_cutlass(monkeypatch):
    """NVFP4_SM90_CUBLASLT=1 takes every job it can: one with a bias (which it does not take)
    still runs, on CUTLASS, within the bound."""
    monkeypatch.setenv("NVFP4_SM90_CUBLASLT", "1")
    m, n, k = 64, 256, 256
    ra, rb = operands(m, n, k)
    bias = torch.randn(n, device="cuda")
    names = kernels_of(lambda: gemm_both_decoded(ra, rb, m, n, k, torch.bfloat16, bias=bias))
    assert any("cutlass" in x for x in names) and not _lt_ran(names), names
    r, s = reference(ra, rb)
    check_bound(gemm_both_decoded(ra, rb, m, n, k, torch.bfloat16, bias=bias), r, s, k, torch.bfloat16,
                bias=bias.cpu(), what="bias job under NVFP4_SM90_CUBLASLT=1")


@needs_sm90
def test_workspace_one_byte_short_is_refused(monkeypatch):
    monkeypatch.setenv("NVFP4_SM90_CUBLASLT", "1")
    m, n, k = 256, 512, 256
    ra, rb = operands(m, n, k)
    with pytest.raises(RuntimeError, match="workspace"):
        gemm_both_decoded(ra, rb, m, n, k, torch.bfloat16, ws_pad=-1)


@needs_sm90
def test_cuda_graph_replays_with_fresh_alpha(monkeypatch):
    """Captured and replayed with the operands' values and amax rewritten between replays: alpha is
    formed on the device at each replay."""
    monkeypatch.setenv("NVFP4_SM90_CUBLASLT", "1")
    m, n, k = 512, 2048, 2048
    ra, rb = operands(m, n, k, seed=1)
    dev = torch.device("cuda")
    d = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device=dev)
    ws_bytes = _ops.gemm_dec_workspace_bytes(m, n, k, 2, torch.bfloat16, None, True, True, dev, _dev(d))
    ws = torch.empty(ws_bytes, dtype=torch.uint8, device=dev)

    def call():
        _ops.gemm_dec_raw(0, 0, 0, *ra.dec_addr(), 0, 0, 0, *rb.dec_addr(), m, n, k, SWIZZLED, 0, 0, 0, 0, 0.0,
                          d.data_ptr(), _ops.DTYPE_CODE[torch.bfloat16], 2, ws.data_ptr(), ws_bytes,
                          *_ops._device(d))

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        call()  # the plan (descriptors, algorithm) outside the capture
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        call()
    for seed in (2, 3):
        fa, fb = operands(m, n, k, seed=seed)
        ra.values.copy_(fa.values)
        ra.vamax.copy_(fa.vamax)
        rb.values.copy_(fb.values)
        rb.vamax.copy_(fb.vamax)
        d.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        r, s_ = reference(ra, rb)
        check_bound(d.cpu(), r, s_, k, torch.bfloat16, what=f"graph replay seed {seed}")


@needs_sm90
@pytest.mark.parametrize("forced", [False, True])
def test_codes_road_equals_decoded_road(monkeypatch, forced):
    """Operands as codes (decoded by the runner first) or as values, in every combination: the
    same engine, the same bits. Unset at a shape of the rule, forced at a small one."""
    if forced:
        monkeypatch.setenv("NVFP4_SM90_CUBLASLT", "1")
        m, n, k = 257, 264, 1536
    else:
        monkeypatch.delenv("NVFP4_SM90_CUBLASLT", raising=False)
        m, n, k = 128 * torch.cuda.get_device_properties(0).multi_processor_count, 2048, 2048
    g = torch.Generator().manual_seed(5)
    ra, _ = quantize_decoded((torch.randn(m, k, generator=g) * 2).to(torch.bfloat16).cuda(), True, True, rounding=1,
                             seed=3)
    rb, _ = quantize_decoded(torch.randn(n, k, generator=g).to(torch.bfloat16).cuda(), True, True, block=1)
    names = kernels_of(lambda: _gemm(ra, rb, m, n, k, torch.bfloat16))
    assert _lt_ran(names) and any("gemm_prep_kernel" in x for x in names), names
    want = _gemm(ra, rb, m, n, k, torch.bfloat16)
    assert not want.isnan().any()
    for a_dec, b_dec in ((True, False), (False, True), (True, True)):
        got = _gemm(ra, rb, m, n, k, torch.bfloat16, None, a_dec, b_dec)
        assert torch.equal(got.view(torch.uint8), want.view(torch.uint8)), (a_dec, b_dec)


@needs_sm90
@pytest.mark.parametrize("name,value", [("NVFP4_SM90_TILE", "large"), ("NVFP4_SM90_SWIZZLE", "4"),
                                        ("NVFP4_SM90_RASTER", "n"), ("NVFP4_SM90_SPLITS", "2")])
def test_a_cutlass_setting_keeps_cutlass_and_both_forced_is_refused(monkeypatch, name, value):
    """A setting that steers CUTLASS (a forced configuration, the scheduler's order, split-K)
    keeps a job of the rule on CUTLASS, so it never goes without effect; with
    NVFP4_SM90_CUBLASLT=1 as well the call is refused, naming both."""
    monkeypatch.delenv("NVFP4_SM90_CUBLASLT", raising=False)
    m, n, k = 128 * torch.cuda.get_device_properties(0).multi_processor_count, 2048, 2048
    ra, rb = operands(m, n, k)
    monkeypatch.setenv(name, value)
    names = kernels_of(lambda: gemm_both_decoded(ra, rb, m, n, k, torch.bfloat16))
    assert any("cutlass" in x for x in names) and not _lt_ran(names), names
    monkeypatch.setenv("NVFP4_SM90_CUBLASLT", "1")
    with pytest.raises((RuntimeError, ValueError), match=f"NVFP4_SM90_CUBLASLT=1 and {name}={value}"):
        gemm_both_decoded(ra, rb, m, n, k, torch.bfloat16)


@needs_sm90
def test_operands_off_256_byte_alignment_stay_on_cutlass(monkeypatch):
    """cuBLASLt's heuristic plans for 256-byte aligned matrices: a D 16 bytes off that (still
    what CUTLASS takes) runs CUTLASS even under NVFP4_SM90_CUBLASLT=1, within the bound."""
    monkeypatch.setenv("NVFP4_SM90_CUBLASLT", "1")
    m, n, k = 264, 2048, 2048
    ra, rb = operands(m, n, k)
    names = kernels_of(lambda: gemm_both_decoded(ra, rb, m, n, k, torch.bfloat16, d_offset=8))
    assert any("cutlass" in x for x in names) and not _lt_ran(names), names
    r, s = reference(ra, rb)
    check_bound(gemm_both_decoded(ra, rb, m, n, k, torch.bfloat16, d_offset=8), r, s, k, torch.bfloat16,
                what="D 16 bytes off 256-byte alignment")
