"""Grouped (MoE) tensors: grouped quantization == nvfp4.quantize per group, batched == per expert,
the grouped GEMM == a loop of nvfp4.gemm per group, bit for bit; the layouts of nvfp4.h built
independently here from dense calls; poisoned outputs; bad offs refused by name. CPU runs the
reference; the CUDA cases (same checks against the CPU) skip without a GPU."""
import random

import pytest
import torch

import nvfp4
from nvfp4 import _C, _ops
from conftest import assert_bytes_equal

CUDA = torch.cuda.is_available() and nvfp4.is_supported("cutlass", "cuda")
DEVICES = ["cpu"] + (["cuda"] if CUDA else [])
cuda_only = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU nvfp4 supports")
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
POISON = 0xA5


def up(v, m):
    return (v + m - 1) // m * m


def offs_of(sizes, device="cpu"):
    return torch.tensor(list(torch.tensor(sizes).cumsum(0).tolist()), dtype=torch.int32, device=device)


# ------------------------------------------------------------------ the layout, built from dense calls

def expected_grouped(x, sizes, rounding="rtn", rht=False, seed=0, offset=0, rowwise=True, columnwise=True):
    """The grouped buffers of nvfp4.h, assembled from nvfp4.quantize per group on the CPU."""
    x = x.cpu()
    t, k = x.shape
    e = len(sizes)
    (rd, rs, ra), (cd, cs, ca) = _ops.grouped_row_shapes(t, k, e), _ops.grouped_col_shapes(t, k, e)
    row = [torch.zeros(rd, dtype=torch.uint8), torch.zeros(rs, dtype=torch.uint8), torch.zeros(ra)]
    col = [torch.zeros(cd, dtype=torch.uint8), torch.zeros(cs, dtype=torch.uint8), torch.zeros(ca)]
    cp, kp = up(k // 16, 4), up(k, 128)
    s = srow = p = q = 0
    for g, m in enumerate(sizes):
        off = offset + (g << 32)
        mp = up(m, 32)
        if m and k:
            xg = x[s:s + m]
            if rowwise:
                d = nvfp4.quantize(xg, rounding=rounding, rht="rowwise" if rht in (True, "rowwise") else False,
                                   seed=seed, offset=off)
                row[0][s:s + m] = d.data
                sc = d.scales.view(torch.uint8)
                row[1][srow:srow + sc.shape[0]] = sc
                row[2][g] = d.amax[0]
            if columnwise:
                xp = torch.cat([xg, xg.new_zeros((mp - m, k))])
                d = nvfp4.quantize(xp, rounding=rounding, rht="columnwise" if rht in (True, "columnwise") else False,
                                   seed=seed, offset=off, rowwise=False, columnwise=True)
                col[0][k * p // 2: k * (p + mp) // 2] = d.data_t.reshape(-1)
                sc = d.scales_t.view(torch.uint8).reshape(-1)
                col[1][kp * q: kp * q + sc.numel()] = sc
                col[2][g] = d.amax_t[0]
        s += m
        srow += up(m, 128)
        p += mp
        q += up(mp // 16, 4)
    return row, col


def poisoned(shapes, device, dtypes=(torch.uint8, torch.uint8, torch.float32)):
    out = []
    for shp, dt in zip(shapes, dtypes):
        t = torch.empty(shp, dtype=dt, device=device)
        t.view(torch.uint8).fill_(POISON)
        out.append(t)
    return out


def raw_grouped_quantize(x, offs, rounding=0, rht=0, seed=0, offset=0, rowwise=True, columnwise=True,
                         offset_device=None):
    """nvfp4_grouped_quantize into poisoned buffers; returns (row, col, offs_error)."""
    t, k = x.shape
    e = offs.shape[0]
    dev = x.device
    row = poisoned(_ops.grouped_row_shapes(t, k, e), dev) if rowwise else None
    col = poisoned(_ops.grouped_col_shapes(t, k, e), dev) if columnwise else None
    err = torch.full((1,), -1, dtype=torch.int32, device=dev)
    dt, di, st = _ops._device(x)
    _C.grouped_quantize_raw(x.data_ptr(), _ops.DTYPE_CODE[x.dtype], t, k, offs.data_ptr(), e, err.data_ptr(),
                            *([u.data_ptr() for u in row] if row else (0, 0, 0)),
                            *([u.data_ptr() for u in col] if col else (0, 0, 0)), rounding, rht,
                            nvfp4._C.default_rht_sign_mask(), seed, offset,
                            0 if offset_device is None else offset_device.data_ptr(), dt, di, st)
    return row, col, err


def check_dir(got, want, what):
    assert_bytes_equal(got[0], want[0], f"{what} data")
    assert_bytes_equal(got[1].view(torch.uint8), want[1], f"{what} scales")
    ga, wa = got[2].cpu(), want[2]
    nan = torch.isnan(wa)
    assert torch.equal(torch.isnan(ga), nan), f"{what} amax NaN pattern"
    assert_bytes_equal(ga[~nan].view(torch.int32), wa[~nan].view(torch.int32), f"{what} amax")


SIZES = [
    [0, 1, 15, 16, 17, 4097],   # the padding cases of the columnwise layout
    [5],                         # one expert
    [0, 0, 0],                   # nothing routed
    [3, 0, 40, 0, 0, 129, 2],    # empty groups between full ones
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("sizes", SIZES, ids=lambda s: "-".join(map(str, s)))
@pytest.mark.parametrize("rounding,rht", [("rtn", False), ("sr", "columnwise"), ("rtn", True), ("sr", False)])
def test_grouped_quantize_matches_dense_per_group(device, sizes, rounding, rht):
    g = torch.Generator().manual_seed(random.randrange(1 << 30))
    k = 32 if sum(sizes) > 1000 else 48
    tail = 7  # rows past the last group: no group's, zero codes
    t = sum(sizes) + tail
    dtype = random.choice(DTYPES)
    x = (torch.randn((t, k), generator=g) * 10 ** torch.empty(1).uniform_(-3, 3, generator=g)).to(dtype)
    offs = offs_of(sizes, device)
    rmask = {False: 0, "columnwise": 2, True: 3}[rht]
    row, col, err = raw_grouped_quantize(x.to(device), offs, rounding=int(rounding == "sr"), rht=rmask, seed=77,
                                         offset=3)
    want_row, want_col = expected_grouped(x, sizes, rounding, rht, seed=77, offset=3)
    check_dir(row, want_row, "rowwise")
    check_dir(col, want_col, "columnwise")
    assert err.item() == 0


@pytest.mark.parametrize("device", DEVICES)
def test_grouped_quantize_special_values(device):
    """NaN, inf, zeros, huge and tiny values, each in its own group."""
    k = 32
    blocks = [torch.zeros(5, k), torch.full((3, k), float("nan")), torch.randn(9, k) * 1e30,
              torch.randn(4, k) * 1e-30, torch.randn(6, k)]
    blocks[4][2, 3] = float("inf")
    x = torch.cat(blocks)
    sizes = [b.shape[0] for b in blocks]
    for rounding, rht in ((0, 0), (1, 2)):
        row, col, _ = raw_grouped_quantize(x.to(device), offs_of(sizes, device), rounding=rounding, rht=rht, seed=5)
        want_row, want_col = expected_grouped(x, sizes, ["rtn", "sr"][rounding], [False, "columnwise"][rht // 2],
                                              seed=5)
        check_dir(row, want_row, "rowwise")
        check_dir(col, want_col, "columnwise")


@pytest.mark.parametrize("device", DEVICES)
def test_sr_offset_device_and_group_streams(device):
    """offset_device is added when the work runs; group g uses offset + g * 2**32, so two groups
    with identical rows draw different bits."""
    x = torch.randn(1, 64).repeat(64, 1)
    offs = offs_of([32, 32], device)
    cnt = torch.tensor([9], dtype=torch.int64, device=device)
    row, _, _ = raw_grouped_quantize(x.to(device), offs, rounding=1, seed=11, offset=2, columnwise=False,
                                     offset_device=cnt)
    want_row, _ = expected_grouped(x, [32, 32], "sr", False, seed=11, offset=11, columnwise=False)
    check_dir(row, want_row, "rowwise")
    assert not torch.equal(row[0][:32].cpu(), row[0][32:].cpu())


@pytest.mark.parametrize("device", DEVICES)
def test_many_experts_unbalanced(device):
    """128 experts under a Zipf-like routing: a few large groups, many empty or tiny ones."""
    rng = random.Random()
    w = [1.0 / (i + 1) ** 1.2 for i in range(128)]
    rng.shuffle(w)
    t = 3000
    sizes = [int(t * v / sum(w)) for v in w]
    x = torch.randn(sum(sizes) + 3, 32)
    offs = offs_of(sizes, device)
    row, col, err = raw_grouped_quantize(x.to(device), offs, rounding=1, rht=2, seed=3)
    want_row, want_col = expected_grouped(x, sizes, "sr", "columnwise", seed=3)
    check_dir(row, want_row, "rowwise")
    check_dir(col, want_col, "columnwise")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("block,rounding", [("2d", "rtn"), ("1d", "sr"), ("2d", "sr")])
def test_batched_quantize_matches_dense_per_expert(device, block, rounding):
    w = torch.randn(5, 48, 64, dtype=torch.bfloat16)
    q = nvfp4.batched_quantize(w.to(device), block=block, rounding=rounding, seed=8, offset=1, columnwise=True)
    for g in range(5):
        d = nvfp4.quantize(w[g], block=block, rounding=rounding, seed=8, offset=1 + (g << 32), columnwise=True)
        got = q.expert(g)
        for name in ("data", "scales", "data_t", "scales_t"):
            assert_bytes_equal(getattr(got, name).view(torch.uint8), getattr(d, name).view(torch.uint8),
                               f"expert {g} {name}")
        assert_bytes_equal(got.amax.cpu(), d.amax, "amax")
        assert_bytes_equal(got.amax_t.cpu(), d.amax_t, "amax_t")


# ------------------------------------------------------------------ the grouped GEMM

def _dense_gemm(a, b, out_dtype, device="cpu"):
    """nvfp4.gemm of one group's operands: the reference on the CPU; on CUDA the two-step
    CUTLASS path with the grouped runner's tile configuration (128x256x64; no fused small-M
    kernel, no stream-K), whose K order is the grouped kernel's, so the bits must agree."""
    if device == "cpu":
        return nvfp4.gemm(a.to("cpu"), b.to("cpu"), out_dtype=out_dtype, backend="reference")
    return nvfp4.gemm(a, b, out_dtype=out_dtype, backend="cutlass").cpu()


@pytest.fixture
def dense_like_grouped(monkeypatch):
    monkeypatch.setenv("NVFP4_SM90_SMALL_M", "0")
    monkeypatch.setenv("NVFP4_SM90_TILE", "large")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("sizes", [[0, 1, 15, 16, 17, 300], [7], [0, 0], [64, 0, 3]], ids=str)
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32, torch.float16])
def test_ragged_m_equals_loop_of_gemm(device, sizes, out_dtype, dense_like_grouped):
    k, n = 64, 48
    t = sum(sizes) + 5
    x = torch.randn(t, k, dtype=torch.bfloat16)
    w = torch.randn(len(sizes), n, k, dtype=torch.bfloat16)
    offs = offs_of(sizes, device)
    xq = nvfp4.grouped_quantize(x.to(device), offs, rounding="sr", seed=4)
    wq = nvfp4.batched_quantize(w.to(device), columnwise=True)
    y = nvfp4.grouped_gemm(xq, wq, out_dtype=out_dtype).cpu()
    assert y.shape == (t, n)
    s = 0
    for g, m in enumerate(sizes):
        if m:
            want = _dense_gemm(xq.group(g), wq.expert(g), out_dtype, device)
            assert torch.equal(y[s:s + m], want), f"group {g}"
        s += m
    assert torch.equal(y[s:], torch.zeros_like(y[s:])), "rows of no group must be 0"
    # the input-gradient form: dy [T, N] @ W[g] via the columnwise (Wᵀ) direction
    dy = torch.randn(t, n, dtype=torch.bfloat16)
    dq = nvfp4.grouped_quantize(dy.to(device), offs)
    dx = nvfp4.grouped_gemm(dq, wq.T, out_dtype=out_dtype).cpu()
    s = 0
    for g, m in enumerate(sizes):
        if m:
            assert torch.equal(dx[s:s + m], _dense_gemm(dq.group(g), wq.T.expert(g), out_dtype, device)), f"dx {g}"
        s += m


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("sizes", [[0, 1, 15, 16, 17, 100], [33], [0, 0, 5]], ids=str)
def test_ragged_k_equals_loop_of_gemm(device, sizes, dense_like_grouped):
    k, n = 48, 32
    t = sum(sizes) + 3
    x = torch.randn(t, k)
    dy = torch.randn(t, n)
    offs = offs_of(sizes, device)
    kw = dict(rowwise=False, columnwise=True, rht="columnwise", rounding="sr", seed=2)
    dw = nvfp4.grouped_gemm(nvfp4.grouped_quantize(dy.to(device), offs, **kw).T,
                            nvfp4.grouped_quantize(x.to(device), offs, **kw).T, out_dtype=torch.float32).cpu()
    assert dw.shape == (len(sizes), n, k)
    dq = nvfp4.grouped_quantize(dy.to(device), offs, **kw)
    xq = nvfp4.grouped_quantize(x.to(device), offs, **kw)
    s = 0
    for g, m in enumerate(sizes):
        if m == 0:
            assert torch.equal(dw[g], torch.zeros_like(dw[g])), f"empty group {g} must give zeros"
            continue
        want = _dense_gemm(dq.group(g, columnwise=True).T, xq.group(g, columnwise=True).T, torch.float32, device)
        assert torch.equal(dw[g], want), f"group {g}"
        # and it is the weight gradient: the RHT cancels, the error is the quantization's
        exact = dy[s:s + m].double().t() @ x[s:s + m].double()
        rel = ((dw[g].double() - exact).norm() / exact.norm()).item()
        assert rel < 0.35, (g, rel)
        s += m


@pytest.mark.parametrize("device", DEVICES)
def test_gemm_output_poisoned(device):
    """Every element of D is written: rows of no group are 0, not left over."""
    sizes = [3, 0, 20]
    t, k, n = 30, 32, 16
    offs = offs_of(sizes, device)
    xq = nvfp4.grouped_quantize(torch.randn(t, k, device=device), offs)
    wq = nvfp4.batched_quantize(torch.randn(3, n, k, device=device))
    d = torch.empty((t, n), dtype=torch.float32, device=device)
    d.view(torch.uint8).fill_(POISON)
    err = torch.full((1,), -1, dtype=torch.int32, device=device)
    a = (xq.rowwise.data, xq.rowwise.scales, xq.rowwise.amax)
    b = (wq.rowwise.data, wq.rowwise.scales, wq.rowwise.amax)
    ws = _ops._grouped_gemm_run(_ops.RAGGED_M, _ops._addr3(a), _ops._addr3(b), offs, t, n, k, 0, d, err,
                                _ops._device(d))
    del ws
    assert not (d.view(torch.int32) == int.from_bytes(bytes([POISON] * 4), "little", signed=True)).any()
    assert err.item() == 0


# ------------------------------------------------------------------ bad offs

BAD_OFFS = [([5, 3, 9], "below offs"), ([5, 40, 41], "past the"), ([-1, 3, 9], "negative")]


@pytest.mark.parametrize("values,words", BAD_OFFS)
def test_bad_offs_refused_by_name_on_cpu(values, words):
    x = torch.randn(20, 32)
    offs = torch.tensor(values, dtype=torch.int32)
    with pytest.raises(ValueError, match="offs") as e:
        nvfp4.grouped_quantize(x, offs)
    assert words in str(e.value)
    xq = nvfp4.grouped_quantize(x, torch.tensor([5, 9, 20], dtype=torch.int32))
    wq = nvfp4.batched_quantize(torch.randn(3, 16, 32))
    with pytest.raises(ValueError, match="offs"):
        nvfp4.grouped_gemm(replace_offs(xq, offs), wq)


def replace_offs(q, offs):
    import dataclasses
    return dataclasses.replace(q, offs=offs)


@pytest.mark.parametrize("bad,words", [
    (torch.tensor([5, 9], dtype=torch.int64), "int32"),
    (torch.tensor([[5, 9]], dtype=torch.int32), "1-D"),
    ([5, 9], "torch.Tensor"),
    (torch.tensor([5, 9, 10, 20], dtype=torch.int32)[::2], "contiguous"),
])
def test_offs_type_checks(bad, words):
    with pytest.raises((ValueError, TypeError), match="offs") as e:
        nvfp4.grouped_quantize(torch.randn(20, 32), bad)
    assert words in str(e.value)


def test_layer_offs_count_checked():
    layer = nvfp4.nn.GroupedLinear(3, 32, 16)
    with pytest.raises(ValueError, match="offs"):
        layer(torch.randn(10, 32), torch.tensor([4, 10], dtype=torch.int32))


@cuda_only
@pytest.mark.parametrize("values,bits", [([5, 3, 9], 1), ([5, 40, 41], 2), ([-1, 3, 9], 4), ([7, 2, 99], 3)])
def test_bad_offs_on_cuda_clamped_and_reported(values, bits):
    """On CUDA nothing is read on the host: the kernels clamp offs, results are those of the
    clamped offs, the error word says what was wrong, check_offs raises naming offs."""
    t = 20
    x = torch.randn(t, 32)
    offs = torch.tensor(values, dtype=torch.int32, device="cuda")
    q = nvfp4.grouped_quantize(x.cuda(), offs, columnwise=True)
    assert q.offs_error.item() == bits
    with pytest.raises(ValueError, match="offs"):
        q.check_offs()
    ends, run = [], 0
    for v in values:
        run = max(run, v)
        ends.append(min(run, t))
    sizes = [e - s for s, e in zip([0] + ends[:-1], ends)]
    want_row, want_col = expected_grouped(x, sizes)
    check_dir((q.rowwise.data, q.rowwise.scales, q.rowwise.amax), want_row, "rowwise")
    check_dir((q.columnwise.data, q.columnwise.scales, q.columnwise.amax), want_col, "columnwise")
    wq = nvfp4.batched_quantize(torch.randn(3, 16, 32, device="cuda"))
    with pytest.raises(ValueError, match="offs"):
        nvfp4.grouped_gemm(q, wq, check_offs=True)


@cuda_only
def test_offs_on_the_wrong_device():
    with pytest.raises(ValueError, match="offs"):
        nvfp4.grouped_quantize(torch.randn(20, 32, device="cuda"), torch.tensor([5, 20], dtype=torch.int32))


# ------------------------------------------------------------------ compiled and captured

@pytest.mark.parametrize("device", DEVICES)
def test_fullgraph_compile_equals_eager(device):
    sizes = [4, 0, 27]
    offs = offs_of(sizes, device)
    x = torch.randn(33, 64, device=device)
    w = torch.randn(3, 32, 64, device=device)

    def f(x, w, offs):
        xq = _ops.grouped_quantize(x, offs, 1, 2, 0xD7E8, 5, 0, None, True, True)
        wq = _ops.batched_quantize(w, 1, 0, 0, 0, 0, 0, None, True, False)
        y, _ = _ops.grouped_gemm(_ops.RAGGED_M, xq[0:3], wq[0:3], offs, x.shape[0], w.shape[1], x.shape[1], 0,
                                 torch.float32)
        return y

    eager = f(x, w, offs)
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")(x, w, offs)
    assert torch.equal(eager, compiled)


@cuda_only
def test_cuda_graph_replay_equals_eager():
    sizes = [100, 0, 300, 57]
    offs = offs_of(sizes, "cuda")
    layer = nvfp4.nn.GroupedLinear(4, 128, 64, device="cuda", recipe="no_sr").requires_grad_(False)
    x = torch.randn(sum(sizes) + 9, 128, device="cuda")
    eager = layer(x, offs)
    static_x = x.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        layer(static_x, offs)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = layer(static_x, offs)
    offs2 = offs_of([0, 200, 200, 57], "cuda")
    offs.copy_(offs2)  # new routing, same buffers: the graph reads offs on the device
    static_x.copy_(x)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, layer(x, offs2))
    offs.copy_(offs_of(sizes, "cuda"))
    graph.replay()
    assert torch.equal(out, eager)


@cuda_only
@pytest.mark.parametrize("kind", ["ragged_m", "ragged_k"])
def test_cuda_against_float64(kind):
    """The Hopper grouped runner against the float64 product of the decoded operands: within
    FP32 accumulation (K * 2^-23 relative to sum |a||b|, times alpha) and one output rounding."""
    sizes = [300, 0, 129, 1000, 5]
    offs = offs_of(sizes, "cuda")
    t, k, n = sum(sizes) + 11, 256, 192
    x = torch.randn(t, k, device="cuda")
    if kind == "ragged_m":
        xq = nvfp4.grouped_quantize(x, offs)
        wq = nvfp4.batched_quantize(torch.randn(len(sizes), n, k, device="cuda"))
        got = nvfp4.grouped_gemm(xq, wq, out_dtype=torch.float32).cpu()
        s = 0
        for g, m in enumerate(sizes):
            if m:
                a, b = xq.group(g), wq.expert(g)
                da, db = a.dequantize(torch.float32).double().cpu(), b.dequantize(torch.float32).double().cpu()
                want = da @ db.t()
                bound = (da.abs() @ db.abs().t()) * k * 2.0 ** -22 + want.abs() * 2.0 ** -23 + 1e-30
                assert ((got[s:s + m].double() - want).abs() <= bound).all(), g
            s += m
        assert not got[s:].any()
    else:
        dy = torch.randn(t, n, device="cuda")
        kw = dict(rowwise=False, columnwise=True, rht="columnwise")
        dq, xq = nvfp4.grouped_quantize(dy, offs, **kw), nvfp4.grouped_quantize(x, offs, **kw)
        got = nvfp4.grouped_gemm(dq.T, xq.T, out_dtype=torch.float32).cpu()
        for g, m in enumerate(sizes):
            if not m:
                assert not got[g].any()
                continue
            a, b = dq.group(g, columnwise=True).T, xq.group(g, columnwise=True).T
            da = a.dequantize(torch.float32, undo_rht=False).double().cpu()
            db = b.dequantize(torch.float32, undo_rht=False).double().cpu()
            want = da @ db.t()
            mp = da.shape[1]
            bound = (da.abs() @ db.abs().t()) * mp * 2.0 ** -22 + want.abs() * 2.0 ** -23 + 1e-30
            assert ((got[g].double() - want).abs() <= bound).all(), g


@pytest.mark.parametrize("call,exc,name", [
    (lambda x, o: nvfp4.grouped_quantize(x, o, seed=1.5), TypeError, "seed"),
    (lambda x, o: nvfp4.grouped_quantize(x, o, rounding="up"), ValueError, "rounding"),
    (lambda x, o: nvfp4.grouped_quantize(x, o, rowwise="yes"), TypeError, "rowwise"),
    (lambda x, o: nvfp4.grouped_quantize(x, o, check_offs=1), TypeError, "check_offs"),
    (lambda x, o: nvfp4.grouped_quantize(x.to(torch.int32), o), TypeError, "x"),
    (lambda x, o: nvfp4.grouped_quantize(x[:, :24], o), ValueError, "x"),
    (lambda x, o: nvfp4.grouped_quantize(x, o, rowwise=False, columnwise=False), ValueError, "rowwise"),
    (lambda x, o: nvfp4.batched_quantize(x.view(2, 10, 32), block="3d"), ValueError, "block"),
    (lambda x, o: nvfp4.batched_quantize(x.view(4, 5, 32)), ValueError, "w"),
    (lambda x, o: nvfp4.grouped_gemm(nvfp4.grouped_quantize(x, o), x), TypeError, "b"),
    (lambda x, o: nvfp4.grouped_gemm(nvfp4.grouped_quantize(x, o), nvfp4.batched_quantize(
        torch.randn(2, 16, 32)), out_dtype=torch.int8), TypeError, "out_dtype"),
    (lambda x, o: nvfp4.grouped_gemm(nvfp4.grouped_quantize(x, o), nvfp4.batched_quantize(
        torch.randn(3, 16, 32))), ValueError, "b"),
    (lambda x, o: nvfp4.grouped_gemm(nvfp4.grouped_quantize(x, o), nvfp4.batched_quantize(
        torch.randn(2, 16, 32)), backend="nope"), ValueError, "backend"),
])
def test_python_arguments_named(call, exc, name):
    x = torch.randn(20, 32)
    offs = torch.tensor([8, 20], dtype=torch.int32)
    with pytest.raises(exc) as e:
        call(x, offs)
    assert str(e.value).startswith(name), str(e.value)


@pytest.mark.parametrize("device", DEVICES)
def test_no_tokens(device):
    """T = 0: every amax 0, every scale byte 0, the columnwise codes (upper-bound buffer) 0, and
    GEMMs of the right empty shapes (ragged K: all zeros)."""
    offs = torch.zeros(3, dtype=torch.int32, device=device)
    x = torch.randn(0, 32, device=device)
    row, col, err = raw_grouped_quantize(x, offs)
    for d in (row, col):
        assert not d[2].any() and not d[1].view(torch.uint8).any() and not d[0].any()
    assert err.item() == 0
    q = nvfp4.grouped_quantize(x, offs, columnwise=True)
    wq = nvfp4.batched_quantize(torch.randn(3, 16, 32, device=device))
    assert nvfp4.grouped_gemm(q, wq).shape == (0, 16)
    dq = nvfp4.grouped_quantize(torch.randn(0, 16, device=device), offs, rowwise=False, columnwise=True)
    dw = nvfp4.grouped_gemm(dq.T, q.T, out_dtype=torch.float32)
    assert dw.shape == (3, 16, 32) and not dw.any()
