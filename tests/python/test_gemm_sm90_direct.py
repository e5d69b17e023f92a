"""The FP4-reading Hopper GEMM (runner cutlass-sm90-direct, src/gemm/sm90/sm90_direct.cu),
opt-in through NVFP4_SM90_DIRECT=1, against float64 with the bound of test_gemm_cuda.py.

Every test here sets NVFP4_SM90_DIRECT=1 and NVFP4_SM90_SMALL_M=0 (so that M <= 128 reaches
this kernel too, not the fused small-M one) and checks with the profiler that the kernel
that ran is the direct one and that no FP4 -> BF16 decode pass ran.
"""
import pytest
import torch

import nvfp4
from conftest import first_mismatch
from test_gemm_cuda import check_bound, make, on_grid_operands, reference, run_gemm

HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


def _direct_built():
    if not HOPPER:
        return False
    try:
        return any(r["name"] == "cutlass-sm90-direct" and r["built"] for r in nvfp4.device_info()["runners"])
    except Exception:
        return False


needs_direct = pytest.mark.skipif(not _direct_built(), reason="needs a Hopper GPU and a build with the sm90 runners")


@pytest.fixture(autouse=True)
def _direct_on(monkeypatch):
    monkeypatch.setenv("NVFP4_SM90_DIRECT", "1")
    monkeypatch.setenv("NVFP4_SM90_SMALL_M", "0")


def kernels_of(fn):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


SHAPES = [
    # M, N not multiples of the 128 x 256 tile; K a multiple of 32 but not of 64 (a half
    # K tile); one K tile; long K; N = 13 (one partial column group); M = 1.
    (1, 13, 32), (7, 33, 96), (128, 256, 64), (129, 257, 160), (300, 520, 512), (256, 1032, 4096),
    (1000, 300, 2880), (2048, 4096, 4096), (4096, 1024, 4096), (64, 4096, 14336),
]


@needs_direct
def test_the_direct_kernel_runs_and_no_decode_pass():
    qa, qb = make(512, 512, 256)
    names = kernels_of(lambda: nvfp4.gemm(qa, qb, backend="cutlass"))
    assert any("direct_kernel" in n for n in names), names
    assert not any("gemm_prep_kernel" in n for n in names), names


@needs_direct
@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_direct_matches_float64(m, n, k, out_dtype):
    qa, qb = make(m, n, k, scale_a=1.0, block_b="2d")
    r, s = reference(qa, qb)
    got = run_gemm(qa, qb, out_dtype)
    check_bound(got, r, s, k, out_dtype, what=f"direct M={m} N={n} K={k} {out_dtype}")


@needs_direct
@pytest.mark.parametrize("m,n,k", [(1, 72, 256), (13, 40, 4096), (100, 264, 1024), (300, 520, 512)])
def test_direct_on_grid_inputs_are_exact(m, n, k):
    """Inputs on the FP4 grid with power-of-two scales: every product and partial sum is exact
    in fp32, so the fp32 output equals the exact product bit for bit."""
    a, b = on_grid_operands(m, n, k)
    qa, qb = nvfp4.quantize(a), nvfp4.quantize(b)
    exact = (a.double() @ b.double().t()).float()
    got = run_gemm(qa, qb, torch.float32)
    assert torch.equal(got, exact), first_mismatch(got, exact)


@needs_direct
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16])
def test_direct_bias_and_beta(out_dtype):
    m, n, k = 200, 300, 512
    qa, qb = make(m, n, k)
    r, s = reference(qa, qb)
    g = torch.Generator(device="cuda").manual_seed(5)
    bias = (torch.randn(n, generator=g, device="cuda") * 0.1).to(out_dtype)
    got = run_gemm(qa, qb, out_dtype, bias=bias)
    check_bound(got, r, s, k, out_dtype, bias=bias, what="direct bias")
    c = (torch.randn(m, n, generator=g, device="cuda") * 0.1).to(out_dtype)
    out = c.clone()  # beta * C with C aliasing D
    nvfp4.gemm(qa, qb, backend="cutlass", out=out, beta=-0.5, bias=bias)
    check_bound(out, r, s, k, out_dtype, bias=bias, c=c, beta=-0.5, what="direct beta")


@needs_direct
def test_direct_matches_the_two_step_path_within_the_bound(monkeypatch):
    """The same problem with the kernel off (two-step path) and on: both within the float64
    bound of each other's reference (their accumulation orders may differ)."""
    qa, qb = make(384, 768, 1024)
    r, s = reference(qa, qb)
    on = run_gemm(qa, qb, torch.float32)
    monkeypatch.setenv("NVFP4_SM90_DIRECT", "0")
    off = run_gemm(qa, qb, torch.float32)
    check_bound(on, r, s, 1024, torch.float32, what="direct")
    check_bound(off, r, s, 1024, torch.float32, what="two-step")


@needs_direct
def test_linear_scales_and_k_16_fall_back_to_the_two_step_path():
    """Jobs outside the kernel's rule (linear scales; K % 32 != 0) take the two-step path."""
    for layout, k in (("linear", 256), ("swizzled", 48)):
        qa, qb = make(64, 96, k, layout)
        names = kernels_of(lambda: nvfp4.gemm(qa, qb, backend="cutlass"))
        assert not any("direct_kernel" in n for n in names), (layout, k, names)
        r, s = reference(qa, qb)
        check_bound(run_gemm(qa, qb, torch.float32), r, s, k, torch.float32, what=f"{layout} K={k}")


def _gemm_with_c(qa, qb, c, beta, out):
    """The C API with an explicit C tensor (nvfp4.gemm passes C only when beta != 0)."""
    from nvfp4 import _C, _ops
    from nvfp4.backends import BACKENDS
    m, n, k = out.shape[0], out.shape[1], qa.data.shape[1] * 2
    ra, rb = qa.rowwise, qb.rowwise
    dev = _ops._device(out)
    args = (ra.data.data_ptr(), ra.scales.data_ptr(), ra.amax.data_ptr(), rb.data.data_ptr(), rb.scales.data_ptr(),
            rb.amax.data_ptr(), m, n, k, _ops._LAYOUT_SWIZZLED, c.data_ptr(), _ops.DTYPE_CODE[c.dtype], 0, 0, beta,
            out.data_ptr(), _ops.DTYPE_CODE[out.dtype], BACKENDS["cutlass"])
    ws_bytes = _C.gemm_raw(*args, 0, -1, *dev)
    ws = torch.empty((max(ws_bytes, 1),), dtype=torch.uint8, device="cuda")
    _C.gemm_raw(*args, ws.data_ptr(), ws_bytes, *dev)
    torch.cuda.synchronize()


@needs_direct
@pytest.mark.parametrize("direct", ["1", "0"])
def test_beta_zero_never_reads_c(monkeypatch, direct):
    """With beta == 0 a C given to the C API is not read: C full of NaN and inf changes
    nothing (the CUTLASS epilogue's rule, shared by every runner)."""
    monkeypatch.setenv("NVFP4_SM90_DIRECT", direct)
    qa, qb = make(200, 264, 512)
    want = run_gemm(qa, qb, torch.float32)
    c = torch.full((200, 264), float("nan"), device="cuda")
    c[::2] = float("inf")
    out = torch.full((200, 264), -7.0, device="cuda")
    _gemm_with_c(qa, qb, c, 0.0, out)
    assert torch.equal(out, want), first_mismatch(out, want)
