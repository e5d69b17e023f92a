"""The Hopper GEMM that decodes A in registers (runner sm90-fp4-rs, src/gemm/sm90/sm90_rs.cu):
A given by its codes and swizzled scales, B by its decoded BF16 values (nvfp4_gemm_decoded) or
by its codes (decoded into the workspace first). Chosen where it beats the two-step path (N <=
768 with 90% of a wave of 128 x 256 tiles), for every job it can run with NVFP4_SM90_RS=1, for none
with NVFP4_SM90_RS=0.

Checked against float64 with the bound of test_gemm_cuda.py, and against the two-step path
(decode + CUTLASS) on the same job: where that path runs a data-parallel CUTLASS kernel
(NVFP4_SM90_TILE=large) it multiplies the same BF16 values in the same K order with FP32
accumulation, so the outputs are compared bit for bit as well. Outputs are NaN-poisoned
before each run (an unwritten element fails the bound check).
"""
import pytest
import torch

import types

import nvfp4
from nvfp4 import _ops
import nvfp4_ref as ref
from conftest import first_mismatch
from test_decoded import SWIZZLED, _dev, quantize_decoded
from test_gemm_cuda import check_bound
from test_gemm_sm90_direct import kernels_of

HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


def _rs_built():
    if not HOPPER:
        return False
    try:
        return any(r["name"] == "sm90-fp4-rs" and r["built"] for r in nvfp4.device_info()["runners"])
    except Exception:
        return False


needs_rs = pytest.mark.skipif(not _rs_built(), reason="needs a Hopper GPU and a build with the sm90 runners")


def _sdec(amax):
    a = amax.float().cpu().reshape(())
    s = torch.tensor(448.0 * 6.0) / a
    s = torch.where(s > torch.finfo(torch.float32).max, torch.tensor(torch.finfo(torch.float32).max), s)
    s = torch.where(s == 0, torch.tensor(1.0), s)
    return torch.tensor(1.0) / s


def operands(m, n, k, seed=0, special=False):
    g = torch.Generator().manual_seed(seed * 7919 + m * 131 + n * 17 + k)
    a = torch.randn(m, k, generator=g) * 3
    b = torch.randn(n, k, generator=g) * 0.02
    if special:
        a.view(-1)[::11] = 0.0
        a.view(-1)[1::29] = -0.0
        a.view(-1)[2::37] = 4e4
        a.view(-1)[3::41] = 1e-6
    ra, _ = quantize_decoded(a.to(torch.bfloat16).cuda(), True, True, rounding=1, seed=seed + 3)
    rb, _ = quantize_decoded(b.to(torch.bfloat16).cuda(), True, True, block=1)
    return ra, rb


def reference(ra, rb):
    """(R, S) of test_gemm_cuda: alpha * Â B̂ᵀ and alpha * |Â| |B̂|ᵀ in float64, from the
    decoded values (exact: E2M1 x E4M3 is exact in BF16)."""
    alpha = float(_sdec(ra.amax) * _sdec(rb.vamax))
    a, b = ra.values.double().cpu(), rb.values.double().cpu()
    return alpha * (a @ b.t()), alpha * (a.abs() @ b.abs().t())


def gemm_codes_x_decoded(ra, rb, m, n, k, out_dtype, bias=None, c=None, beta=0.0, out=None):
    """nvfp4_gemm_decoded with A's codes and B's decoded values, into a NaN-poisoned D (or `out`);
    returns D on the CPU."""
    dev = torch.device("cuda")
    d = torch.full((m, n), float("nan"), dtype=out_dtype, device=dev) if out is None else out
    bias_dt = None if bias is None else bias.dtype
    ws_bytes = _ops.gemm_dec_workspace_bytes(m, n, k, 2, out_dtype, bias_dt, False, True, dev, _dev(d))
    ws = torch.empty(max(ws_bytes, 1), dtype=torch.uint8, device=dev)
    _ops.gemm_dec_raw(*ra.codes_addr(), 0, 0, 0, 0, 0, *rb.dec_addr(), m, n, k, SWIZZLED,
                      0 if c is None else c.data_ptr(), _ops.DTYPE_CODE[c.dtype] if c is not None else 0,
                      0 if bias is None else bias.data_ptr(), _ops.DTYPE_CODE.get(bias_dt, 0), beta,
                      d.data_ptr(), _ops.DTYPE_CODE[out_dtype], 2, ws.data_ptr(), ws_bytes, *_dev(d))
    torch.cuda.synchronize()
    return d.cpu()


SHAPES = [
    # M, N not multiples of the 128 x 256 tile; K % 64 == 32 (a half K tile), an odd and an
    # even number of K tiles, one K tile; the 85M model's forward and dgrad shapes.
    (1, 8, 32), (7, 33, 96), (128, 256, 64), (129, 257, 160), (300, 520, 512), (300, 83, 192),
    (1000, 768, 2880), (2048, 2304, 768), (2048, 768, 3072), (4096, 1024, 4096),
]


@needs_rs
def test_the_rs_kernel_runs_and_no_decode_pass(monkeypatch):
    monkeypatch.setenv("NVFP4_SM90_RS", "1")
    ra, rb = operands(512, 512, 256)
    names = kernels_of(lambda: gemm_codes_x_decoded(ra, rb, 512, 512, 256, torch.bfloat16))
    assert any("rs_kernel" in n for n in names), names
    assert not any("gemm_prep_kernel" in n for n in names), names


@needs_rs
@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32, torch.float16])
def test_rs_matches_float64_and_the_two_step_path(monkeypatch, m, n, k, out_dtype):
    ra, rb = operands(m, n, k)
    r, s = reference(ra, rb)
    monkeypatch.setenv("NVFP4_SM90_RS", "1")
    got = gemm_codes_x_decoded(ra, rb, m, n, k, out_dtype)
    check_bound(got, r, s, k, out_dtype, what=f"rs M={m} N={n} K={k} {out_dtype}")
    again = gemm_codes_x_decoded(ra, rb, m, n, k, out_dtype)
    assert torch.equal(got.view(torch.uint8), again.view(torch.uint8)), "two runs differ"
    monkeypatch.setenv("NVFP4_SM90_RS", "0")
    monkeypatch.setenv("NVFP4_SM90_TILE", "large")
    two_step = gemm_codes_x_decoded(ra, rb, m, n, k, out_dtype)
    assert torch.equal(got.view(torch.uint8), two_step.view(torch.uint8)), first_mismatch(got, two_step)


@needs_rs
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32])
def test_rs_special_values_bias_and_beta(monkeypatch, out_dtype):
    m, n, k = 260, 264, 544
    ra, rb = operands(m, n, k, special=True)
    r, s = reference(ra, rb)
    g = torch.Generator().manual_seed(5)
    bias_cpu = (torch.randn(n, generator=g) * 0.1).to(out_dtype)
    bias = bias_cpu.cuda()
    c = (torch.randn(m, n, generator=g) * 0.1).to(out_dtype).cuda()
    monkeypatch.setenv("NVFP4_SM90_RS", "1")
    got = gemm_codes_x_decoded(ra, rb, m, n, k, out_dtype, bias=bias)
    check_bound(got, r, s, k, out_dtype, bias=bias_cpu, what="rs bias")
    out = c.clone()  # beta * C with C aliasing D (the per-element epilogue)
    got_c = gemm_codes_x_decoded(ra, rb, m, n, k, out_dtype, bias=bias, c=out, beta=-0.5, out=out)
    check_bound(got_c, r, s, k, out_dtype, bias=bias_cpu, c=c.cpu(), beta=-0.5, what="rs beta")
    monkeypatch.setenv("NVFP4_SM90_RS", "0")
    monkeypatch.setenv("NVFP4_SM90_TILE", "large")
    two_step = gemm_codes_x_decoded(ra, rb, m, n, k, out_dtype, bias=bias)
    assert torch.equal(got.view(torch.uint8), two_step.view(torch.uint8)), first_mismatch(got, two_step)


@needs_rs
def test_rs_decodes_every_code_with_every_scale(monkeypatch):
    """Every E2M1 code with every E4M3 scale byte, NaN (0x7F) included: row r of A has scale
    byte r in each block and the 16 codes in turn along K; B is the identity (decoded BF16)
    and both amaxes are 2688 (alpha = 1), so the fp32 output is A's decoded values exactly.
    Checked against the reference decode (nvfp4_ref's tables, independent of the library)
    and, bit for bit, against the two-step path."""
    m, k = 128, 256
    n = k
    codes = torch.arange(16, dtype=torch.uint8).repeat(k // 16)  # element j: code j % 16
    data = (codes[0::2] | (codes[1::2] << 4)).repeat(m, 1).cuda()
    lin = torch.arange(128, dtype=torch.uint8)[:, None].repeat(1, k // 16)  # row r: scale byte r
    scales = _ops.swizzle(lin.cuda(), m, k // 16, True)
    amax = torch.full((1,), 2688.0, device="cuda")
    ra = types.SimpleNamespace(codes_addr=lambda: (data.data_ptr(), scales.data_ptr(), amax.data_ptr()))
    eye = torch.eye(n, k, dtype=torch.bfloat16, device="cuda")
    rb = types.SimpleNamespace(dec_addr=lambda: (eye.data_ptr(), amax.data_ptr()))
    want = ref.e2m1_decode(codes.long())[None, :].double() * ref.e4m3_value(lin.contiguous()).double().repeat_interleave(16, 1)
    monkeypatch.setenv("NVFP4_SM90_RS", "1")
    got = gemm_codes_x_decoded(ra, rb, m, n, k, torch.float32)
    nan = got.isnan()
    assert nan[127].all() and not nan[:127].any(), "NaN exactly in the row of the NaN scale byte"
    assert torch.equal(got[:127].double(), want[:127]), first_mismatch(got[:127].double(), want[:127])
    monkeypatch.setenv("NVFP4_SM90_RS", "0")
    monkeypatch.setenv("NVFP4_SM90_TILE", "large")
    two_step = gemm_codes_x_decoded(ra, rb, m, n, k, torch.float32)
    assert torch.equal(two_step.isnan(), nan)
    assert torch.equal(got[:127].view(torch.int32), two_step[:127].view(torch.int32))


@needs_rs
def test_rs_odd_n_uses_the_per_element_epilogue(monkeypatch):
    """N % 8 != 0: no 16-byte stores; every element still written (NaN poison)."""
    m, n, k = 300, 83, 256
    ra, rb = operands(m, n, k)
    r, s = reference(ra, rb)
    monkeypatch.setenv("NVFP4_SM90_RS", "1")
    for out_dtype in (torch.bfloat16, torch.float32):
        got = gemm_codes_x_decoded(ra, rb, m, n, k, out_dtype)
        check_bound(got, r, s, k, out_dtype, what=f"rs odd N {out_dtype}")


@needs_rs
def test_rs_declines_what_it_cannot_take(monkeypatch):
    """Jobs outside its rule take the two-step path: K % 32 != 0, both operands as codes,
    A decoded."""
    monkeypatch.setenv("NVFP4_SM90_RS", "1")
    ra, rb = operands(256, 256, 48)
    names = kernels_of(lambda: gemm_codes_x_decoded(ra, rb, 256, 256, 48, torch.bfloat16))
    assert not any("rs_kernel" in n for n in names), names
    r, s = reference(ra, rb)
    check_bound(gemm_codes_x_decoded(ra, rb, 256, 256, 48, torch.bfloat16), r, s, 48, torch.bfloat16, what="K=48")


def _sms():
    return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count


def gemm_codes(ra, rb, m, n, k, out_dtype, ws_bytes=None):
    """nvfp4_gemm on both operands' codes (through the decoded entry point with no decoded
    operand), into a NaN-poisoned D; returns (D on the CPU, the workspace size asked)."""
    dev = torch.device("cuda")
    d = torch.full((m, n), float("nan"), dtype=out_dtype, device=dev)
    need = _ops.gemm_dec_workspace_bytes(m, n, k, 2, out_dtype, None, False, False, dev, _dev(d))
    give = need if ws_bytes is None else ws_bytes
    ws = torch.empty(max(give, 1), dtype=torch.uint8, device=dev)
    _ops.gemm_dec_raw(*ra.codes_addr(), 0, 0, *rb.codes_addr(), 0, 0, m, n, k, SWIZZLED, 0, 0, 0, 0, 0.0,
                      d.data_ptr(), _ops.DTYPE_CODE[out_dtype], 2, ws.data_ptr(), give, *_dev(d))
    torch.cuda.synchronize()
    return d.cpu(), need


@needs_rs
def test_rs_is_chosen_where_it_pays(monkeypatch):
    """Without NVFP4_SM90_RS: the kernel for N <= 768 with at least 90% of a wave of 128 x 256
    tiles (A as codes), the two-step path otherwise, and never with NVFP4_SM90_RS=0."""
    monkeypatch.delenv("NVFP4_SM90_RS", raising=False)
    _ops.clear_workspace_cache()
    sms = _sms()
    least = -(-sms * 9 // 10)  # the fewest tiles it takes
    rows = -(-least // 3) * 128  # N = 768: three tile columns
    k = 256
    cases = [(rows, 768, True), (rows - 128 * 3, 768, False), (rows, 1024, False), (least * 128, 256, True),
             ((least - 1) * 128, 256, False), (rows, 776, False)]
    for m, n, chosen in cases:
        ra, rb = operands(m, n, k)
        names = kernels_of(lambda: gemm_codes_x_decoded(ra, rb, m, n, k, torch.bfloat16))
        assert any("rs_kernel" in x for x in names) == chosen, (m, n, names)
        names = kernels_of(lambda: gemm_codes(ra, rb, m, n, k, torch.bfloat16))
        assert any("rs_kernel" in x for x in names) == chosen, (m, n, names)
    m, n, _ = cases[0]
    monkeypatch.setenv("NVFP4_SM90_RS", "0")
    ra, rb = operands(m, n, k)
    for call in (gemm_codes_x_decoded, gemm_codes):
        names = kernels_of(lambda: call(ra, rb, m, n, k, torch.bfloat16))
        assert not any("rs_kernel" in x for x in names), names


@needs_rs
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32])
def test_rs_takes_b_as_codes(monkeypatch, out_dtype):
    """Both operands as codes at a shape of the rule: B decoded into the workspace, then the
    kernel; the same bits as the two-step path, within the float64 bound; a workspace one
    byte short is refused by name."""
    monkeypatch.delenv("NVFP4_SM90_RS", raising=False)
    _ops.clear_workspace_cache()
    m, n, k = -(-_sms() // 3) * 128 + 5, 760, 544
    ra, rb = operands(m, n, k, special=True)
    r, s = reference(ra, rb)
    names = []
    got, need = None, None

    def run():
        nonlocal got, need
        got, need = gemm_codes(ra, rb, m, n, k, out_dtype)

    names = kernels_of(run)
    assert any("rs_kernel" in x for x in names) and any("gemm_prep_kernel" in x for x in names), names
    assert need >= n * k * 2
    check_bound(got, r, s, k, out_dtype, what=f"rs, B as codes, {out_dtype}")
    with pytest.raises(Exception, match="workspace"):
        gemm_codes(ra, rb, m, n, k, out_dtype, ws_bytes=need - 1)
    monkeypatch.setenv("NVFP4_SM90_RS", "0")
    monkeypatch.setenv("NVFP4_SM90_TILE", "large")
    two_step, _ = gemm_codes(ra, rb, m, n, k, out_dtype)
    assert torch.equal(got.view(torch.uint8), two_step.view(torch.uint8)), first_mismatch(got, two_step)


@needs_rs
def test_linear_codes_road_runs_the_kernel(monkeypatch):
    """An nvfp4.nn.Linear on the codes road (NVFP4_SM90_DECODED=0) whose forward and dgrad GEMMs
    fall in the kernel's rule: it runs twice a step with both operands as codes (W and Wᵀ
    decoded into the workspace), and the output, dX, dW and the bias gradient over three
    steps with stochastic rounding equal the decoded road's bit for bit."""
    tokens, fin, fout = -(-_sms() // 3) * 128, 768, 768

    def run():
        torch.manual_seed(0)
        lin = nvfp4.nn.Linear(fin, fout, bias=True, device="cuda", dtype=torch.bfloat16)
        outs, names = [], []
        for step in range(3):
            x = torch.randn(tokens, fin, device="cuda", dtype=torch.bfloat16, requires_grad=True)

            def one():
                y = lin(x)
                (y.float() * torch.linspace(-1, 1, fout, device="cuda")).sum().backward()
                outs.extend([y.detach().clone(), x.grad.clone(), lin.weight.grad.clone(), lin.bias.grad.clone()])

            if step == 1:
                names.extend(kernels_of(one))
            else:
                one()
            lin.zero_grad()
        torch.cuda.synchronize()
        return outs, names

    monkeypatch.delenv("NVFP4_SM90_RS", raising=False)
    _ops.clear_workspace_cache()
    decoded, names = run()
    assert not any("rs_kernel" in x for x in names), names
    monkeypatch.setenv("NVFP4_SM90_DECODED", "0")
    codes, names = run()
    assert sum("rs_kernel" in x for x in names) == 2, names
    for i, (a, b) in enumerate(zip(codes, decoded)):
        assert torch.equal(a.view(torch.int16), b.view(torch.int16)), i
