"""Decoded operands: nvfp4_quantize_decoded writes the values the codes stand for (E2M1 x
E4M3, BF16, no per-tensor scale), nvfp4_gemm_decoded reads them in place of the codes, and
nvfp4.nn.Linear takes that road where the GEMM runner does (the Hopper two-step path).

Every comparison is bit for bit: the decoded values against a decode of the codes written
in the same call (nvfp4_ref's E2M1/E4M3 tables, independent of the library) and against the
CPU reference; the decoded GEMM against the GEMM on codes; the Linear's decoded road against
its codes road (NVFP4_SM90_DECODED=0)."""
from __future__ import annotations

import pytest
import torch

import nvfp4
from nvfp4 import _ops
from nvfp4._format import swizzled_shape
import nvfp4_ref as ref

CUDA = torch.cuda.is_available()
cuda_only = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
hopper_only = pytest.mark.skipif(not (CUDA and torch.cuda.get_device_capability()[0] == 9),
                                 reason="the decoded road is the Hopper two-step runner's")

LINEAR, SWIZZLED = 0, 1


def _up(v, m):
    return (v + m - 1) // m * m


def _dev(t):
    if t.is_cuda:
        return 1, t.device.index, torch.cuda.current_stream(t.device).cuda_stream
    return 0, 0, 0


class Out:
    """The buffers of one orientation [rows, cols]: codes (data, scales, amax) and decoded
    (values, amax), each poisoned so that an unwritten byte shows."""

    def __init__(self, rows, cols, layout, device, codes: bool, dec: bool):
        self.rows, self.cols, self.layout = rows, cols, layout
        sr, sc = swizzled_shape(rows, cols // 16) if layout == SWIZZLED else (rows, cols // 16)
        self.data = torch.full((rows, cols // 2), 0xA5, dtype=torch.uint8, device=device) if codes else None
        self.scales = torch.full((sr, sc), 0x5A, dtype=torch.uint8, device=device) if codes else None
        self.amax = torch.full((1,), float("nan"), device=device) if codes else None
        # 0xFFC1: a NaN no decode produces (canonical NaNs are 0x7FC0 / 0xFFC0)
        self.values = (torch.full((rows, cols), -1, dtype=torch.int16, device=device).fill_(-63).view(torch.bfloat16)
                       if dec else None)
        self.vamax = torch.full((1,), float("nan"), device=device) if dec else None

    def codes_addr(self):
        if self.data is None:
            return (0, 0, 0)
        return (self.data.data_ptr(), self.scales.data_ptr(), self.amax.data_ptr())

    def dec_addr(self):
        if self.values is None:
            return (0, 0)
        return (self.values.data_ptr(), self.vamax.data_ptr())

    def linear_scales(self):
        if self.layout == LINEAR:
            return self.scales
        return nvfp4.nn.ops.swizzle(self.scales, self.rows, self.cols // 16, False)


def quantize_decoded(x, row_codes=False, row_dec=False, col_codes=False, col_dec=False, block=0, rounding=0,
                     layout=SWIZZLED, rht=0, seed=0, offset=0, workspace=True):
    """workspace: the call gets a quantization workspace, poisoned with 0xFF bytes (the largest
    partial there is: a slot the amax pass did not write would win every max)."""
    rows, cols = x.shape
    wst = torch.full((_ops.QUANTIZE_WORKSPACE_BYTES,), 0xFF, dtype=torch.uint8, device=x.device) if workspace else None
    ws = 0 if wst is None else wst.data_ptr()
    rp = _up(rows, 16)
    row = Out(rows, cols, layout, x.device, row_codes, row_dec) if (row_codes or row_dec) else None
    col = Out(cols, rp, layout, x.device, col_codes, col_dec) if (col_codes or col_dec) else None
    z3, z2 = (0, 0, 0), (0, 0)
    _ops.quantize_dec_raw(x.data_ptr(), _ops.DTYPE_CODE[x.dtype], rows, cols,
                          *(row.codes_addr() if row else z3), *(row.dec_addr() if row else z2),
                          *(col.codes_addr() if col else z3), *(col.dec_addr() if col else z2),
                          block, rounding, layout, rht, _ops.DEFAULT_RHT_SIGN_MASK, seed, offset, 0, *_dev(x), ws)
    return row, col


def same_amax(a, b):
    """Equal float32 bits, a NaN equal to any NaN (an RHT that meets inf - inf makes its own)."""
    a, b = a.cpu(), b.cpu()
    return bool(a.isnan().all() and b.isnan().all()) or torch.equal(a.view(torch.int32), b.view(torch.int32))


def ref_decode(data, scales_linear):
    """The values of codes [rows, cols/2] with linear scales [rows, cols/16], rounded to BF16."""
    d = data.cpu().to(torch.int64)
    codes = torch.stack([d & 15, d >> 4], dim=-1).reshape(d.shape[0], -1)
    s = ref.e4m3_value(scales_linear.cpu().contiguous())
    return (ref.e2m1_decode(codes) * s.repeat_interleave(16, dim=1)).to(torch.bfloat16)


def same_bits(a, b):
    """Equal bit for bit, except that a NaN equals any NaN (the CPU reference and the CUDA
    conversion write different NaN payloads; nothing reads them but as NaN)."""
    a, b = a.cpu(), b.cpu()
    na, nb = a.isnan(), b.isnan()
    return torch.equal(na, nb) and torch.equal(a.view(torch.int16)[~na], b.view(torch.int16)[~nb])


def decoded_mismatches(gpu, cpu):
    """What a GPU quantize_decoded call wrote differently from the CPU reference's call with
    the same arguments: the names of the differing fields ([] when every requested output
    matches: decoded values and their amax by same_bits / same_amax, codes and scales bit for
    bit)."""
    bad = []
    for name, c, g in zip(("row", "col"), cpu, gpu):
        if c is None:
            continue
        if c.values is not None:
            if not same_bits(g.values, c.values):  # every element written
                bad.append(f"{name} values")
            if not same_amax(g.vamax, c.vamax):
                bad.append(f"{name} amax")
        if c.data is not None:
            if not torch.equal(g.data.cpu(), c.data):
                bad.append(f"{name} codes")
            if not torch.equal(g.scales.cpu(), c.scales):
                bad.append(f"{name} scales")
    return bad


def inputs(rows, cols, dtype, device, kind="randn", seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=g) * 3
    if kind == "special":
        x.view(-1)[::7] = 0.0
        x.view(-1)[1::13] = 1e30 if dtype == torch.float32 else 6e4
        x.view(-1)[2::17] = 1e-30 if dtype == torch.float32 else 1e-6
        x.view(-1)[3] = float("inf")
        x.view(-1)[5] = float("nan")
    elif kind == "zeros":
        x.zero_()
    return x.to(dtype).to(device)


CONFIGS = [  # (block, rounding, rht): the recipe's operands and the others
    (0, 0, 0), (0, 1, 0), (0, 1, 2), (0, 0, 2), (0, 1, 3), (1, 0, 0)]
SHAPES = [(16, 16), (37, 48), (128, 64), (130, 208), (257, 96)]


def _check_orientation(o):
    """Decoded values of an orientation that has both forms = the decode of its codes, and
    both amax equal."""
    assert same_bits(o.values, ref_decode(o.data, o.linear_scales()))
    assert same_amax(o.amax, o.vamax)


@pytest.mark.parametrize("block,rounding,rht", CONFIGS)
@pytest.mark.parametrize("shape", SHAPES)
def test_decoded_values_are_the_codes_values_cpu(block, rounding, rht, shape):
    x = inputs(*shape, torch.float32, "cpu", seed=shape[0])
    for layout in (LINEAR, SWIZZLED):
        row, col = quantize_decoded(x, True, True, True, True, block, rounding, layout, rht, seed=7, offset=3)
        _check_orientation(row)
        _check_orientation(col)
        # rows of x^T past x's rows are zero (unless the columnwise RHT mixed them into a block)
        if not rht & 2:
            assert not col.values.float()[:, shape[0]:].any()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_decoded_alone_equals_decoded_beside_codes_cpu(dtype):
    x = inputs(100, 64, dtype, "cpu", seed=3)
    both_r, both_c = quantize_decoded(x, True, True, True, True, 0, 1, SWIZZLED, 2, seed=5)
    alone_r, alone_c = quantize_decoded(x, False, True, False, True, 0, 1, SWIZZLED, 2, seed=5)
    assert same_bits(alone_r.values, both_r.values) and same_bits(alone_c.values, both_c.values)
    assert torch.equal(alone_r.vamax, both_r.amax) and torch.equal(alone_c.vamax, both_c.amax)
    # and the codes equal nvfp4_quantize's
    q = nvfp4.quantize(x, rounding="sr", rht="columnwise", seed=5, columnwise=True)
    assert torch.equal(q.data, both_r.data) and torch.equal(q.amax, both_r.amax)


def test_decoded_mismatches_names_what_differs():
    """The comparison the GPU tests and sanitize_decoded.py use: [] for equal outputs, and each
    differing field by name."""
    x = inputs(40, 64, torch.bfloat16, "cpu", seed=1)
    a = quantize_decoded(x, True, True, True, True, rht=2, seed=4)
    b = quantize_decoded(x, True, True, True, True, rht=2, seed=4)
    assert decoded_mismatches(b, a) == []
    b[0].values.view(torch.int16)[3, 5] += 1
    b[1].scales[0, 0] ^= 1
    b[1].vamax.fill_(1.0)
    assert decoded_mismatches(b, a) == ["row values", "col amax", "col scales"]


def test_decoded_refusals():
    x = torch.randn(32, 32)
    rows, cols = x.shape
    good = Out(rows, cols, SWIZZLED, "cpu", False, True)

    def call(rv=None, rva=None, rounding=0, block=0, rht=0, nothing=False):
        v = good.values if rv is None else rv
        a = good.vamax if rva is None else rva
        addr = (0, 0) if nothing else (v.data_ptr(), a.data_ptr())
        return _ops.quantize_dec_raw(x.data_ptr(), 0, rows, cols, 0, 0, 0, *addr, 0, 0, 0, 0, 0, block, rounding,
                                     SWIZZLED, rht, _ops.DEFAULT_RHT_SIGN_MASK, 0, 0, 0, 0, 0, 0, 0)

    with pytest.raises(ValueError, match="at least one output"):
        call(nothing=True)
    with pytest.raises(ValueError, match="cfg.rounding: the decoded outputs"):
        call(rounding=2, rht=1)
    # the values overlapping the input
    with pytest.raises(ValueError, match="rowwise_decoded.values"):
        _ops.quantize_dec_raw(x.data_ptr(), 0, rows, cols, 0, 0, 0, x.data_ptr(), good.vamax.data_ptr(), 0, 0, 0, 0, 0,
                              0, 0, SWIZZLED, 0, _ops.DEFAULT_RHT_SIGN_MASK, 0, 0, 0, 0, 0, 0, 0)
    # the amax overlapping the values
    with pytest.raises(ValueError, match="rowwise_decoded"):
        call(rva=good.values)


def test_gemm_decoded_refused_on_cpu():
    a = torch.randn(32, 64)
    b = torch.randn(48, 64)
    ra, _ = quantize_decoded(a, False, True)
    rb, _ = quantize_decoded(b, True, False)
    d = torch.empty(32, 48)
    with pytest.raises(RuntimeError, match="decoded operands are read by CUDA runners only"):
        _ops.gemm_dec_raw(0, 0, 0, *ra.dec_addr(), *rb.codes_addr(), 0, 0, 32, 48, 64, SWIZZLED, 0, 0, 0, 0, 0.0,
                          d.data_ptr(), 0, 0, 0, 0, 0, 0, 0)
    assert _ops.gemm_takes_decoded(32, 48, 64, 0, torch.float32, None, torch.device("cpu"), (0, 0, 0)) is False


# ------------------------------------------------------------------------------ CUDA
@cuda_only
@pytest.mark.parametrize("block,rounding,rht", CONFIGS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("kind", ["randn", "special", "zeros"])
def test_decoded_values_cuda_match_cpu(block, rounding, rht, dtype, kind):
    combos = ((True, True, True, True), (False, True, False, True), (False, True, True, False),
              (True, False, False, True))
    for i, shape in enumerate(SHAPES + [(1000, 768)]):
        x = inputs(*shape, dtype, "cpu", kind=kind, seed=shape[1])
        for outs in (combos if i % 2 == 0 else combos[1:3]):
            if block == 1 and not (outs[0] or outs[1]):
                continue
            cpu = quantize_decoded(x, *outs, block, rounding, SWIZZLED, rht, seed=11, offset=5)
            gpu = quantize_decoded(x.cuda(), *outs, block, rounding, SWIZZLED, rht, seed=11, offset=5)
            torch.cuda.synchronize()
            assert decoded_mismatches(gpu, cpu) == [], (shape, outs)
            for c, g in zip(cpu, gpu):
                if c is not None and c.values is not None and c.data is not None:
                    _check_orientation(g)


def _gemm(a, b, m, n, k, out_dtype, bias=None, a_dec=False, b_dec=False, backend=2):
    """d = alpha * (Â B̂ᵀ) (+ bias) on the codes of a/b (Out with both forms), or with the
    decoded values of the operands marked decoded."""
    dev = torch.device("cuda")
    d = torch.full((m, n), float("nan"), dtype=out_dtype, device=dev)
    z3, z2 = (0, 0, 0), (0, 0)
    bias_dt = None if bias is None else bias.dtype
    if a_dec or b_dec:
        ws_bytes = _ops.gemm_dec_workspace_bytes(m, n, k, backend, out_dtype, bias_dt, a_dec, b_dec, dev, _dev(d))
        ws = torch.empty(max(ws_bytes, 1), dtype=torch.uint8, device=dev)
        _ops.gemm_dec_raw(*(z3 if a_dec else a.codes_addr()), *(a.dec_addr() if a_dec else z2),
                          *(z3 if b_dec else b.codes_addr()), *(b.dec_addr() if b_dec else z2), m, n, k, SWIZZLED,
                          0, 0, 0 if bias is None else bias.data_ptr(), _ops.DTYPE_CODE.get(bias_dt, 0), 0.0,
                          d.data_ptr(), _ops.DTYPE_CODE[out_dtype], backend, ws.data_ptr(), ws_bytes, *_dev(d))
    else:
        ws_bytes = _ops.gemm_workspace_bytes(m, n, k, backend, out_dtype, bias_dt, False, dev, _dev(d))
        ws = torch.empty(max(ws_bytes, 1), dtype=torch.uint8, device=dev)
        _ops.gemm_raw(*a.codes_addr(), *b.codes_addr(), m, n, k, SWIZZLED, 0, 0,
                      0 if bias is None else bias.data_ptr(), _ops.DTYPE_CODE.get(bias_dt, 0), 0.0, d.data_ptr(),
                      _ops.DTYPE_CODE[out_dtype], backend, ws.data_ptr(), ws_bytes, *_dev(d))
    torch.cuda.synchronize()
    return d


@hopper_only
@pytest.mark.parametrize("m,n,k", [(256, 256, 128), (1000, 768, 512), (300, 83, 64), (2048, 1040, 4096),
                                   (768, 768, 16384)])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32, torch.float16])
def test_gemm_decoded_equals_gemm_on_codes(m, n, k, out_dtype):
    g = torch.Generator().manual_seed(m + n + k)
    a = (torch.randn(m, k, generator=g) * 2).to(torch.bfloat16).cuda()
    b = torch.randn(n, k, generator=g).to(torch.bfloat16).cuda()
    ra, _ = quantize_decoded(a, True, True, rounding=1, seed=3)
    rb, _ = quantize_decoded(b, True, True, block=1)
    bias = torch.randn(n, generator=g).to(out_dtype).cuda()
    for bb in (None, bias):
        want = _gemm(ra, rb, m, n, k, out_dtype, bb)
        assert not want.isnan().any()
        for a_dec, b_dec in ((True, False), (False, True), (True, True)):
            got = _gemm(ra, rb, m, n, k, out_dtype, bb, a_dec, b_dec)
            assert torch.equal(got.view(torch.uint8), want.view(torch.uint8)), (a_dec, b_dec, bb is None)


def _library_kernels(fn):
    """The library's kernels (nvfp4's own and CUTLASS's) that fn launches, by name."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
            and ("nvfp4" in e.name or "cutlass" in e.name)]


@hopper_only
@pytest.mark.parametrize("amax_a,amax_b", [(2.5, 0.75), (0.0, 3.0), (1e-30, 2.0), (3e38, 7.0), (float("inf"), 5.0),
                                           (4.0, float("inf")), (float("nan"), 1.0), (1e-3, 0.0)])
def test_gemm_both_decoded_alpha_from_the_amax(amax_a, amax_b):
    """Both operands decoded and no bias: the GEMM is one kernel (no decode/prep launch
    before it), whose epilogue forms alpha from the two amax as every runner does
    (S_dec(amax_a) * S_dec(amax_b), nvfp4_ref's formula here). With FP32 output, D for any
    amax equals fl(alpha * D1) bit for bit, D1 the same GEMM with both amax 2688 (alpha 1):
    zero, tiny, huge, infinite and NaN amax included."""
    m, n, k = 1000, 1040, 512  # N > 768: the two-step runner (CUTLASS on decoded operands)
    g = torch.Generator().manual_seed(7)
    ra, _ = quantize_decoded((torch.randn(m, k, generator=g) * 3).to(torch.bfloat16).cuda(), False, True)
    rb, _ = quantize_decoded(torch.randn(n, k, generator=g).to(torch.bfloat16).cuda(), False, True, block=1)
    ra.vamax.fill_(2688.0)
    rb.vamax.fill_(2688.0)
    d1 = _gemm(ra, rb, m, n, k, torch.float32, a_dec=True, b_dec=True)
    assert not d1.isnan().any()
    ra.vamax.fill_(amax_a)
    rb.vamax.fill_(amax_b)
    names = _library_kernels(lambda: _gemm(ra, rb, m, n, k, torch.float32, a_dec=True, b_dec=True))
    assert len(names) == 1 and "GemmUniversal" in names[0], names
    got = _gemm(ra, rb, m, n, k, torch.float32, a_dec=True, b_dec=True)
    amax = torch.tensor([amax_a, amax_b], dtype=torch.float32)
    s_dec = torch.tensor(1.0, dtype=torch.float32) / ref.global_encode_scale(amax)
    alpha = (s_dec[0] * s_dec[1]).cuda()
    want = alpha * d1 + 0.0  # the epilogue's alpha * acc + (null bias: 0), so -0 reads +0
    assert torch.equal(got.view(torch.int32), want.view(torch.int32)) or (
        alpha.isnan() and got.isnan().all()), (alpha.item(), (got - want).abs().max().item())
    # with a bias the prep launch converts it, and alpha is the same
    bias = torch.randn(n, generator=g).cuda()
    names = _library_kernels(lambda: _gemm(ra, rb, m, n, k, torch.float32, bias, a_dec=True, b_dec=True))
    assert any("gemm_prep_kernel" in x for x in names), names


@hopper_only
def test_takes_decoded_follows_the_runner(monkeypatch):
    dev = torch.device("cuda")
    d3 = (1, torch.cuda.current_device(), 0)
    assert _ops.gemm_takes_decoded(4096, 1024, 1024, 2, torch.bfloat16, None, dev, d3) is True
    # few tokens: the fused small-M kernels read codes
    assert _ops.gemm_takes_decoded(16, 1024, 1024, 2, torch.bfloat16, None, dev, d3) is False
    monkeypatch.setenv("NVFP4_SM90_DECODED", "0")
    assert _ops.gemm_takes_decoded(4096, 1024, 1024, 2, torch.bfloat16, None, dev, d3) is False


@hopper_only
@pytest.mark.parametrize("tokens,fin,fout,bias", [(4096, 768, 3072, True), (1000, 512, 256, False),
                                                  (8192, 1024, 1040, True)])
def test_linear_decoded_road_equals_codes_road(monkeypatch, tokens, fin, fout, bias):
    """Forward, dX, dW and the bias gradient over three steps with stochastic rounding: the
    decoded road and the codes road give the same bits."""
    def run():
        torch.manual_seed(0)
        lin = nvfp4.nn.Linear(fin, fout, bias=bias, device="cuda", dtype=torch.bfloat16)
        outs = []
        for step in range(3):
            x = torch.randn(tokens, fin, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            y = lin(x)
            (y.float() * torch.linspace(-1, 1, fout, device="cuda")).sum().backward()
            outs += [y.detach().clone(), x.grad.clone(), lin.weight.grad.clone()]
            if bias:
                outs.append(lin.bias.grad.clone())
            lin.zero_grad()
        torch.cuda.synchronize()
        return outs

    calls = []
    real = _ops.gemm_dec_raw

    def counted(*a):
        if a[23] >= 0:  # a run (workspace_bytes -1: a size query)
            calls.append(a)
        return real(*a)

    monkeypatch.setattr(_ops, "gemm_dec_raw", counted)
    _ops.clear_workspace_cache()
    decoded = run()
    assert len(calls) == 9  # the road under test ran: fprop, dgrad and wgrad on decoded operands, 3 steps
    monkeypatch.setenv("NVFP4_SM90_DECODED", "0")
    codes = run()
    assert len(calls) == 9  # ... and the other road did not
    monkeypatch.delenv("NVFP4_SM90_DECODED")
    for i, (a, b) in enumerate(zip(decoded, codes)):
        assert torch.equal(a.view(torch.int16), b.view(torch.int16)), i


@hopper_only
def test_frozen_linear_decoded_road_equals_codes_road(monkeypatch):
    """FrozenLinear's forward (X quantized straight into its decoded values) against its codes
    road, and both against the trainable layer of the same weight."""
    import copy

    torch.manual_seed(0)
    lin = torch.nn.Linear(1024, 1536, bias=True).cuda()
    r = nvfp4.nn.get_recipe("nvfp4", seed=3)
    fr = nvfp4.nn.FrozenLinear.from_linear(copy.deepcopy(lin), r, layer_index=2)
    tr = nvfp4.nn.Linear.from_linear(copy.deepcopy(lin), r, layer_index=2)
    x = torch.randn(4096, 1024, device="cuda", dtype=torch.bfloat16)
    calls = []
    real = _ops.gemm_dec_raw
    monkeypatch.setattr(_ops, "gemm_dec_raw", lambda *a: (calls.append(a[23]), real(*a))[1])
    with torch.no_grad():
        y_dec = fr(x)
        y_tr = tr(x)
        assert sum(1 for w in calls if w >= 0) == 2  # both layers took the decoded road
        monkeypatch.setenv("NVFP4_SM90_DECODED", "0")
        y_codes = fr(x)
    torch.cuda.synchronize()
    assert torch.equal(y_dec.view(torch.int16), y_codes.view(torch.int16))
    assert torch.equal(y_dec.view(torch.int16), y_tr.view(torch.int16))


def _memory(addr, shape, dtype):
    """A CPU tensor over the memory at addr (the stub below reads what the passes wrote)."""
    import ctypes
    n = 1
    for s in shape:
        n *= s
    nbytes = n * torch.empty((), dtype=dtype).element_size()
    buf = (ctypes.c_char * nbytes).from_address(addr)
    return torch.frombuffer(buf, dtype=torch.uint8).view(dtype).view(*shape)


def _emulated_gemm_dec(ad, as_, aa, av, ava, bd, bs, ba, bv, bva, m, n, k, layout, c, c_dtype, bias, bias_dtype,
                       beta, d, d_dtype, backend, ws, ws_bytes, dt, di, st):
    """nvfp4_gemm_decoded on the CPU, from what is in memory: each operand's values times its
    decode scale (decoded values) or its dequantized codes, multiplied in float64."""
    if ws_bytes < 0:
        return 0
    dtypes = {0: torch.float32, 1: torch.float16, 2: torch.bfloat16}

    def operand(data, scales, amax, vals, vamax, rows):
        if vamax:
            s_dec = _memory(vamax, (1,), torch.float32).double() / (448.0 * 6.0)
            return _memory(vals, (rows, k), torch.bfloat16).double() * s_dec
        sr, sc = swizzled_shape(rows, k // 16)
        return nvfp4.nn.ops.dequantize(_memory(data, (rows, k // 2), torch.uint8),
                                       _memory(scales, (sr, sc), torch.uint8),
                                       _memory(amax, (1,), torch.float32), torch.float32).double()

    out = operand(ad, as_, aa, av, ava, m) @ operand(bd, bs, ba, bv, bva, n).T
    if bias:
        out = out + _memory(bias, (n,), dtypes[bias_dtype]).double()
    _memory(d, (m, n), dtypes[d_dtype]).copy_(out.to(dtypes[d_dtype]))
    return 0


@pytest.mark.parametrize("recipe", ["nvfp4", "no_rht"])
def test_linear_decoded_road_plumbing_cpu(monkeypatch, recipe):
    """The Linear passes' decoded road without a GPU: the runner's answer forced (every GEMM
    "takes decoded operands") and nvfp4_gemm_decoded emulated from the bytes the passes wrote.
    Forward, dX and dW over two SR steps agree with the codes road (the CPU reference GEMM) to
    the output's rounding, and the stub saw the operands each GEMM should get decoded."""
    def run(decoded):
        torch.manual_seed(1)
        lin = nvfp4.nn.Linear(64, 48, bias=True, recipe=nvfp4.nn.get_recipe(recipe, backend="reference", seed=2))
        outs = []
        for step in range(2):
            x = torch.randn(40, 64, requires_grad=True)
            y = lin(x)
            (y * torch.linspace(-1, 1, 48)).sum().backward()
            outs += [y.detach().clone(), x.grad.clone(), lin.weight.grad.clone()]
            lin.zero_grad()
        return outs

    codes = run(False)
    seen = []

    def stub(*a):
        if a[23] >= 0:
            seen.append((a[4] != 0, a[9] != 0))  # (A decoded, B decoded)
        return _emulated_gemm_dec(*a)

    # (the plans cached under the forced answer must not outlive this test)
    _ops.clear_workspace_cache()
    monkeypatch.setattr(_ops, "gemm_takes_decoded", lambda *a: True)
    monkeypatch.setattr(_ops, "gemm_dec_raw", stub)
    try:
        decoded = run(True)
    finally:
        _ops.clear_workspace_cache()
    # fprop: X and W decoded; dgrad: dY decoded, W^T codes; wgrad: dY^T decoded, X^T codes
    assert seen == [(True, True), (True, False), (True, False)] * 2, seen
    for i, (a, b) in enumerate(zip(decoded, codes)):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6, msg=f"output {i}")


def test_frozen_linear_decoded_road_plumbing_cpu(monkeypatch):
    """FrozenLinear's decoded road without a GPU, as above: X decoded, the frozen W as codes."""
    import copy

    torch.manual_seed(3)
    lin = torch.nn.Linear(64, 48, bias=True)
    fr = nvfp4.nn.FrozenLinear.from_linear(copy.deepcopy(lin), nvfp4.nn.get_recipe("nvfp4", backend="reference",
                                                                                      seed=1), layer_index=1)
    x = torch.randn(24, 64)
    with torch.no_grad():
        codes = fr(x)
    seen = []

    def stub(*a):
        if a[23] >= 0:
            seen.append((a[4] != 0, a[9] != 0))
        return _emulated_gemm_dec(*a)

    _ops.clear_workspace_cache()
    monkeypatch.setattr(_ops, "gemm_takes_decoded", lambda *a: True)
    monkeypatch.setattr(_ops, "gemm_dec_raw", stub)
    try:
        with torch.no_grad():
            decoded = fr(x)
    finally:
        _ops.clear_workspace_cache()
    assert seen == [(True, False)], seen
    torch.testing.assert_close(decoded, codes, rtol=1e-6, atol=1e-6)
