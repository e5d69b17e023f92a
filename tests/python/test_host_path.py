"""The eager road of nvfp4.quantize and nvfp4.gemm: in plain eager code they run the op's
implementation without the dispatcher, and a GEMM proves its operands' buffers unchanged
instead of checking them again. Both must be invisible: the same bits as the op's road,
the op's road whenever anything could watch it (modes, the profiler, autograd, tracing),
and no record that outlives a change of the buffers it describes."""
import copy
import dataclasses
import gc
import io
import weakref

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

import nvfp4
from nvfp4 import _ops
from nvfp4._tensor import _Direction, _OneBufferDirection

from conftest import assert_bytes_equal, assert_equal

R = dataclasses.replace
HAVE_CUDA = torch.cuda.is_available() and nvfp4.is_supported("auto", "cuda")
DEVICES = ["cpu"] + (["cuda"] if HAVE_CUDA else [])


class Watch(TorchDispatchMode):
    """Passes every op through and notes the nvfp4 ones."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func._schema.name.startswith("nvfp4::"):
            self.ops.append(func._schema.name)
        return func(*args, **(kwargs or {}))


class WatchFunctions(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


@pytest.fixture
def op_calls(monkeypatch):
    """How often the op's implementations ran (the dispatcher's road; the eager road runs
    the same code below them without these)."""
    calls = {"quantize": 0, "gemm": 0}
    for op, name in (("quantize", "_quantize_impl"), ("gemm", "_gemm_impl")):
        def spy(*a, _real=getattr(_ops, name), _op=op):
            calls[_op] += 1
            return _real(*a)
        monkeypatch.setattr(_ops, name, spy)
    return calls


CASES = [  # (x shape, w shape, quantize options of x, of w, gemm options)
    ((1, 16), (1, 16), {}, {}, {}),
    ((7, 48), (13, 48), {"rounding": "sr", "seed": 5, "offset": 3}, {"block": "2d"}, {"out_dtype": torch.float32}),
    ((2, 5, 64), (24, 64), {"columnwise": True}, {"block": "2d", "columnwise": True}, {"bias": True}),
    ((33, 32), (40, 32), {"rht": "rowwise"}, {"rht": "rowwise"}, {"out_dtype": torch.float16}),
    ((130, 96), (7, 96), {"rht": "both", "columnwise": True, "rounding": "sr", "seed": 2**64 - 1},
     {"rht": "rowwise"}, {}),
]


def _run(x, w, qx_opts, qw_opts, g_opts, gen):
    qx = nvfp4.quantize(x, **qx_opts)
    qw = nvfp4.quantize(w, **qw_opts)
    opts = dict(g_opts)
    if opts.pop("bias", False):
        opts["bias"] = torch.randn(w.shape[0], generator=gen).to(x.device)
    ys = [nvfp4.gemm(qx, qw, **opts), nvfp4.gemm(qx, qw, **opts)]  # the second through the proven record
    if qx.columnwise is not None:
        ys.append(nvfp4.gemm(qx.T, qx.T, out_dtype=torch.float32))
        ys.append(nvfp4.gemm(qx.T, qx.T, out_dtype=torch.float32))
    return qx, qw, ys


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_eager_road_computes_the_op_roads_bits(device, case, op_calls, gen):
    xs, ws, qx_opts, qw_opts, g_opts = CASES[case]
    x = torch.randn(xs, generator=gen).to(device)
    w = (torch.randn(ws, generator=gen) * 0.1).to(torch.bfloat16).to(device)
    x[0, 0] = 0.0
    seed = gen.initial_seed()
    eager = _run(x, w, qx_opts, qw_opts, g_opts, torch.Generator().manual_seed(seed))
    assert op_calls == {"quantize": 0, "gemm": 0}, "plain eager calls took the dispatcher's road"
    with Watch() as watch:
        op = _run(x, w, qx_opts, qw_opts, g_opts, torch.Generator().manual_seed(seed))
    assert op_calls["quantize"] == 2 and op_calls["gemm"] == len(op[2]), op_calls
    assert watch.ops.count("nvfp4::gemm") == len(op[2])
    for qe, qo in zip(eager[:2], op[:2]):
        assert qe.shape == qo.shape and qe.transposed == qo.transposed
        for name in ("rowwise", "columnwise"):
            de, do = getattr(qe, name), getattr(qo, name)
            assert (de is None) == (do is None)
            if de is not None:
                assert de.rht == do.rht
                for f in ("data", "scales", "amax"):
                    assert getattr(de, f).dtype == getattr(do, f).dtype
                    assert_bytes_equal(getattr(de, f), getattr(do, f), f"{name}.{f}")
    for i, (ye, yo) in enumerate(zip(eager[2], op[2])):
        assert ye.shape == yo.shape and ye.device == yo.device
        assert_equal(ye, yo, f"gemm {i}")


def test_op_road_whenever_something_watches(op_calls):
    torch.manual_seed(1)
    x, w = torch.randn(8, 64), torch.randn(24, 64)
    qw = nvfp4.quantize(w)
    want = nvfp4.gemm(nvfp4.quantize(x), qw)
    assert op_calls == {"quantize": 0, "gemm": 0}

    for what, ctx in (("a dispatch mode", Watch), ("a function mode", WatchFunctions),
                      ("the profiler", torch.profiler.profile)):
        before = dict(op_calls)
        with ctx() as watcher:
            got = nvfp4.gemm(nvfp4.quantize(x), qw)
        assert op_calls == {"quantize": before["quantize"] + 1, "gemm": before["gemm"] + 1}, what
        assert torch.equal(got, want), what
    # the profiler shows the ops by name, as before
    assert {"nvfp4::quantize", "nvfp4::gemm"} <= {e.name for e in watcher.events()}

    # autograd: an input that requires grad gets the op's autograd fallback on its outputs
    xg = x.clone().requires_grad_()
    q = nvfp4.quantize(xg)
    assert q.amax.requires_grad and q.scales.requires_grad
    assert nvfp4.gemm(q, qw).requires_grad
    with torch.no_grad():  # ...and none without grad mode
        calls = dict(op_calls)
        q = nvfp4.quantize(xg)
        assert not q.amax.requires_grad and torch.equal(nvfp4.gemm(q, qw), want)
        assert op_calls == calls
    bias = torch.zeros(24, requires_grad=True)
    assert nvfp4.gemm(nvfp4.quantize(x), qw, bias=bias).requires_grad


def test_op_road_under_tracing():
    """torch.jit.trace records the ops (it records only what the dispatcher sees)."""
    torch.manual_seed(2)
    qw = nvfp4.quantize(torch.randn(16, 32))

    def f(x):
        return nvfp4.gemm(nvfp4.quantize(x), qw, out_dtype=torch.float32)

    x = torch.randn(4, 32)
    with pytest.warns(torch.jit.TracerWarning):
        traced = torch.jit.trace(f, x, check_trace=False)
    kinds = [n.kind() for n in traced.graph.nodes()]
    assert "nvfp4::quantize" in kinds and "nvfp4::gemm" in kinds
    assert torch.equal(traced(x), f(x))


def test_compiled_gemm_of_built_tensors_equals_eager():
    """torch.compile(fullgraph=True) of nvfp4.gemm on NVFP4Tensors (and their .T) traces the
    op, whether or not an eager call has already recorded the operands."""
    torch.manual_seed(3)
    qx = nvfp4.quantize(torch.randn(32, 64), columnwise=True)
    qw = nvfp4.quantize(torch.randn(48, 64), block="2d")

    def f(qx, qw):
        return nvfp4.gemm(qx, qw, out_dtype=torch.float32) * 2, nvfp4.gemm(qx.T, qx.T, out_dtype=torch.float32)

    torch._dynamo.reset()
    got_first = torch.compile(f, fullgraph=True, backend="aot_eager")(qx, qw)
    want = f(qx, qw)
    got = torch.compile(f, fullgraph=True, backend="aot_eager")(qx, qw)
    for g1, g2, w in zip(got_first, got, want):
        assert torch.equal(g1, w) and torch.equal(g2, w)


# ------------------------------------------------------------------------------ the proven record
def _plain(q):
    """q with its orientations as separate tensors (copies): what a caller builds."""
    def d(o):
        return None if o is None else _Direction(o.data.clone(), o.scales.clone(), o.amax.clone(), o.rht)
    return dataclasses.replace(q, rowwise=d(q.rowwise), columnwise=d(q.columnwise))


def _fresh(record=None):
    """Two operands: as nvfp4.quantize returns them (record="quantize": one allocation, the
    views not made yet), recorded by a first GEMM ("gemm") or not at all (None; copies into
    separate tensors)."""
    torch.manual_seed(4)
    a = nvfp4.quantize(torch.randn(8, 32), columnwise=True)
    b = nvfp4.quantize(torch.randn(16, 32))
    for q in (a, b):  # quantize's own buffer, on the eager road: its addresses without a check
        assert type(q.rowwise) is _OneBufferDirection and q.rowwise._lazy and q._seen is None
        assert q._gemm_operand() is q.rowwise._rec and q.rowwise._lazy
    if record == "quantize":
        return a, b
    a, b = _plain(a), _plain(b)
    assert a._seen is None and b._seen is None
    if record == "gemm":
        nvfp4.gemm(a, b)
        assert a._seen is not None and b._seen is not None
    return a, b


def _recorded():
    a, b = _fresh("gemm")
    return a, b, nvfp4.gemm(a, b, out_dtype=torch.float32)


def _outcome(fn):
    try:
        return fn()
    except (TypeError, ValueError, RuntimeError) as e:
        return e


TAMPER_IN_PLACE = {  # each advances the tampered tensor's version counter
    "resize_ smaller": lambda a: a.rowwise.data.resize_(4, 16),
    "t_": lambda a: a.rowwise.data.t_(),
    "unsqueeze_": lambda a: a.rowwise.amax.unsqueeze_(0),
    "as_strided_": lambda a: a.rowwise.scales.as_strided_((64, 4), (4, 1)),
    "set_ to a short buffer": lambda a: a.rowwise.scales.set_(torch.zeros(4, 4, dtype=torch.float8_e4m3fn)),
    "set_ to 3 elements": lambda a: a.rowwise.amax.set_(torch.ones(3)),
}


@pytest.mark.parametrize("recorded_by", ["quantize", "gemm"])
@pytest.mark.parametrize("case", TAMPER_IN_PLACE)
def test_in_place_change_after_a_record_is_checked_again(case, recorded_by):
    """A buffer changed in place after its record was made gets exactly the answer it would
    have got without a record: the record never answers for a changed buffer."""
    a, b = _fresh(recorded_by)
    a0, b0 = _fresh()
    TAMPER_IN_PLACE[case](a)
    TAMPER_IN_PLACE[case](a0)
    got, want = (_outcome(lambda q=q: nvfp4.gemm(q, bq, out_dtype=torch.float32)) for q, bq in ((a, b), (a0, b0)))
    assert isinstance(want, ValueError), f"{case}: the untouched road accepted a tampered buffer: {want!r}"
    assert type(got) is type(want) and str(got) == str(want)


def test_data_written_in_place_is_read_not_remembered():
    a, b, y = _recorded()
    a.rowwise.amax.mul_(2.0)  # alpha doubles
    assert torch.equal(nvfp4.gemm(a, b, out_dtype=torch.float32), y * 2)
    a.rowwise.data.zero_()
    assert torch.equal(nvfp4.gemm(a, b, out_dtype=torch.float32), torch.zeros_like(y))


def test_buffer_moved_without_a_version_change_is_followed():
    """`.data =` moves a tensor to other memory without advancing its version counter: the
    address differs from the record's, so the GEMM checks and reads the new buffer."""
    a, b, y = _recorded()
    other = nvfp4.quantize(torch.randn(8, 32) * 3)
    a.rowwise.data.data = other.data.clone()
    a.rowwise.scales.data = other.scales.clone()
    a.rowwise.amax.data = other.amax.clone()
    want = nvfp4.gemm(other, b, out_dtype=torch.float32)
    assert not torch.equal(want, y)
    assert torch.equal(nvfp4.gemm(a, b, out_dtype=torch.float32), want)
    # moved to a buffer of another shape: refused by name
    a.rowwise.data.data = torch.zeros(8, 8, dtype=torch.uint8)
    with pytest.raises(ValueError, match=r"^a.rowwise.data: expected uint8 \[8, 16\], got uint8 \[8, 8\]"):
        nvfp4.gemm(a, b)


TAMPER_DATA_VIEW = {  # `.data =` a view of the same storage: same address, no version change
    "scales: a shorter flat view": lambda t: t.flatten()[:10],
    "scales: transposed": lambda t: t.t(),
    "codes: fewer rows": lambda t: t[:4],
    "codes: a strided view of the same shape": lambda t: t.as_strided(t.shape, (1, t.shape[0])),
    "amax: [1] as [1, 1]": lambda t: t.view(1, 1),
}


@pytest.mark.parametrize("recorded_by", ["quantize", "gemm"])
@pytest.mark.parametrize("case", TAMPER_DATA_VIEW)
def test_view_of_the_same_memory_swapped_in_is_checked_again(case, recorded_by):
    """`.data =` with a view of the buffer's own storage keeps its address and its version
    counter; the record compares shapes and strides too, so the GEMM answers as it would
    without a record."""
    field = {"scales": "scales", "codes": "data", "amax": "amax"}[case.split(":")[0]]
    a, b = _fresh(recorded_by)
    a0, b0 = _fresh()
    for q in (a, a0):
        t = getattr(q.rowwise, field)
        t.data = TAMPER_DATA_VIEW[case](t)
    got, want = (_outcome(lambda q=q, bq=bq: nvfp4.gemm(q, bq, out_dtype=torch.float32)) for q, bq in ((a, b), (a0, b0)))
    assert isinstance(want, ValueError), f"{case}: the untouched road accepted a tampered buffer: {want!r}"
    assert type(got) is type(want) and str(got) == str(want)


def test_frozen_fields_replaced_by_force_are_checked():
    a, b, _ = _recorded()
    c = nvfp4.quantize(torch.randn(8, 64))
    object.__setattr__(a, "rowwise", c.rowwise)  # what a frozen dataclass is meant to forbid
    with pytest.raises(ValueError, match=r"^a.rowwise.data: expected uint8 \[8, 16\], got uint8 \[8, 32\]"):
        nvfp4.gemm(a, b)


def test_record_holds_the_memory_it_describes():
    """While a record lives, the storages it describes stay allocated, so no other buffer can
    take their addresses and pass for the recorded one."""
    a, b, _ = _recorded()
    held = a._seen[-1]
    assert [s.data_ptr() for s in held] == list(a._seen[:3])
    a.rowwise.data.data = torch.zeros(8, 16, dtype=torch.uint8)
    assert held[0].data_ptr() == a._seen[0]  # the old codes' memory is still allocated


def test_one_buffer_only_on_the_eager_road():
    x = torch.randn(8, 32)
    with Watch():
        q = nvfp4.quantize(x)
    assert type(q.rowwise) is _Direction  # what a mode returns: the op's outputs, checked at the first GEMM
    q = nvfp4.quantize(x, rowwise=False, columnwise=True)
    assert type(q.columnwise) is _OneBufferDirection and q.columnwise._lazy
    assert q.T._gemm_operand() is q.columnwise._rec  # the transpose's rowwise slot
    q = nvfp4.quantize(x, scale_layout="linear")
    assert type(q.rowwise) is _Direction and q._gemm_operand() is None  # not a layout the GEMMs read


def test_inference_tensors_are_checked_on_every_call():
    """Inference tensors keep no version counter: no record, a full check on each GEMM."""
    torch.manual_seed(6)
    x, w = torch.randn(8, 32), torch.randn(16, 32)
    qw = nvfp4.quantize(w)
    want = nvfp4.gemm(nvfp4.quantize(x), qw)
    with torch.inference_mode():
        q = nvfp4.quantize(x)
        assert q._seen is None and q.data.is_inference()
        assert torch.equal(nvfp4.gemm(q, qw), want) and torch.equal(nvfp4.gemm(q, qw), want)
        assert q._seen is None
        q.rowwise.data.resize_(4, 16)  # in place, counted nowhere: the next check sees it
        with pytest.raises(ValueError, match=r"^a.rowwise.data: expected uint8 \[8, 16\], got uint8 \[4, 16\]"):
            nvfp4.gemm(q, qw)
    assert torch.equal(nvfp4.gemm(nvfp4.quantize(x), qw), want)


def test_transposed_view_is_kept_without_a_cycle():
    gc.collect()
    gc.disable()
    try:
        a, b = _fresh("gemm")
        t = a.T
        assert a.T is t and t.T is a and t.transposed and not a.transposed
        nvfp4.gemm(t, t)  # records t too
        ra, rd, rs = weakref.ref(a), weakref.ref(a.rowwise.data), weakref.ref(a._seen[-1][0])
        del a
        assert ra() is None, "a and a.T form a reference cycle"
        assert t.T is not None and t.T.T is t  # rebuilt on demand
        rt = weakref.ref(t)
        del t
        assert rt() is None
        assert rd() is None and rs() is None, "a record keeps its buffers alive"
    finally:
        gc.enable()


def _saved(v):
    buf = io.BytesIO()
    torch.save(v, buf)  # (plain pickle cannot hold float8 tensors)
    buf.seek(0)
    return torch.load(buf, weights_only=False)


@pytest.mark.parametrize("how", ["deepcopy", "copy", "torch.save"])
def test_copies_carry_fields_only(how):
    a, b, y = _recorded()
    t = a.T
    nvfp4.gemm(t, t)
    for q in (a, t):
        c = {"deepcopy": copy.deepcopy, "copy": copy.copy, "torch.save": _saved}[how](q)
        assert set(vars(c)) == {f.name for f in dataclasses.fields(c)}
        assert torch.equal(c.dequantize(), q.dequantize())
    c = copy.deepcopy(a)
    assert torch.equal(nvfp4.gemm(c, b, out_dtype=torch.float32), y)


def test_explicit_backends_keep_their_errors():
    a, b, y = _recorded()
    assert torch.equal(nvfp4.gemm(a, b, out_dtype=torch.float32, backend="reference"), y)
    with pytest.raises(ValueError, match="^backend: 'cutlass' needs CUDA tensors"):
        nvfp4.gemm(a, b, backend="cutlass")
    with pytest.raises(ValueError, match="^backend: must be one of"):
        nvfp4.gemm(a, b, backend="fast")
    with pytest.raises(TypeError, match="^out_dtype:"):
        nvfp4.gemm(a, b, out_dtype=torch.int8)
    with pytest.raises(TypeError, match="^beta:"):
        nvfp4.gemm(a, b, beta=False)
    with pytest.raises(ValueError, match=r"^bias: expected shape \(16,\)"):
        nvfp4.gemm(a, b, bias=torch.zeros(15))


@pytest.mark.skipif(not HAVE_CUDA, reason="needs a CUDA GPU with an nvfp4 GEMM backend")
def test_eager_road_in_a_cuda_graph():
    """Quantize + GEMM captured on the eager road replay to the eagerly computed bits."""
    torch.manual_seed(5)
    x = torch.randn(16, 256, device="cuda")
    qw = nvfp4.quantize(torch.randn(64, 256, device="cuda"), block="2d")
    nvfp4.gemm(nvfp4.quantize(x), qw)  # records qw, warms up
    want = nvfp4.gemm(nvfp4.quantize(x), qw)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        nvfp4.gemm(nvfp4.quantize(x), qw)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = nvfp4.gemm(nvfp4.quantize(x), qw)
    y.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    assert_equal(y, want, "replayed")


# ------------------------------------------------------------------------------ one allocation per quantize call
ONE_BUFFER_CASES = [  # (shape, options)
    ((8, 32), dict(columnwise=True)),
    ((37, 48), dict(columnwise=True, rounding="sr", seed=7, rht="columnwise")),
    ((3, 5, 64), dict(rht=True)),
    ((48, 32), dict(block="2d", columnwise=True)),
    ((1, 16), dict(rowwise=False, columnwise=True)),
    ((0, 32), dict(columnwise=True)),
]


def _orientations(q):
    return [(name, d) for name, d in (("rowwise", q.rowwise), ("columnwise", q.columnwise)) if d is not None]


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("shape,opts", ONE_BUFFER_CASES)
def test_one_buffer_holds_the_op_roads_bits(dev, shape, opts):
    """nvfp4.quantize's eager road writes every output into one allocation: the same bits,
    shapes, dtypes and strides as the op's separate tensors, each view inside the buffer,
    no two sharing a byte; the views are made when first read and then kept."""
    torch.manual_seed(11)
    x = torch.randn(*shape, device=dev) * 5
    with Watch() as w:
        want = nvfp4.quantize(x, **opts)
    assert w.ops == ["nvfp4::quantize"]
    got = nvfp4.quantize(x, **opts)
    bufs = {id(d._buf) for _, d in _orientations(got)}
    assert len(bufs) == 1
    spans = []
    for (name, d), (_, e) in zip(_orientations(got), _orientations(want)):
        assert type(d) is _OneBufferDirection and d._lazy and type(e) is _Direction
        assert d.rht == e.rht
        views = d.data, d.scales, d.amax
        assert not d._lazy and (d.data, d.scales, d.amax) == tuple(views)  # made once, kept
        base, size = d._buf.data_ptr(), d._buf.numel()
        for v, t in zip(views, (e.data, e.scales, e.amax)):
            assert v.dtype == t.dtype and v.shape == t.shape and v.stride() == t.stride(), name
            assert v.is_contiguous() and v.untyped_storage().data_ptr() == base
            if v.numel():
                lo = v.data_ptr() - base
                assert 0 <= lo and lo + v.numel() * v.element_size() <= size and v.data_ptr() % 16 == 0
                spans.append((lo, lo + v.numel() * v.element_size()))
            assert_bytes_equal(v, t, f"{name} {v.dtype}")
    spans.sort()
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), spans
    if got.rowwise is not None:
        assert_equal(got.dequantize(), want.dequantize(), "dequantized")


@pytest.mark.parametrize("dev", DEVICES)
def test_one_buffer_gemm_makes_no_views_and_equals_plain_operands(dev):
    torch.manual_seed(12)
    x, w = torch.randn(40, 64, device=dev), torch.randn(24, 64, device=dev)
    px = _plain(nvfp4.quantize(x, columnwise=True))
    want = nvfp4.gemm(px, _plain(nvfp4.quantize(w, block="2d")), out_dtype=torch.float32)
    want_t = nvfp4.gemm(px.T, px.T, out_dtype=torch.float32)
    qx, qw = nvfp4.quantize(x, columnwise=True), nvfp4.quantize(w, block="2d", columnwise=True)
    assert_equal(nvfp4.gemm(qx, qw, out_dtype=torch.float32), want, "one buffer")
    assert_equal(nvfp4.gemm(qx.T, qx.T, out_dtype=torch.float32), want_t, "one buffer, transposed")
    assert qx.rowwise._lazy and qx.columnwise._lazy and qw.rowwise._lazy  # no view was made
    assert qx.device == x.device and qx.rowwise._lazy
    # the views, once made, are what the GEMM reads: a write through one is seen
    qx.rowwise.amax.mul_(2.0)
    assert not qx.rowwise._lazy
    assert_equal(nvfp4.gemm(qx, qw, out_dtype=torch.float32), want * 2, "amax doubled through its view")
    qx.rowwise.data.zero_()
    assert_equal(nvfp4.gemm(qx, qw, out_dtype=torch.float32), torch.zeros_like(want), "codes zeroed")


def test_one_buffer_views_swapped_or_resized_are_checked_again():
    """Once read, the views are ordinary buffers: changed or swapped, the GEMM answers as it
    does for separate tensors changed the same way."""
    for change in (lambda q: setattr(q.rowwise.data, "data", torch.zeros(8, 8, dtype=torch.uint8)),
                   lambda q: q.rowwise.scales.resize_(64, 4),
                   lambda q: q.rowwise.amax.set_(torch.ones(3))):
        a, b = _fresh("quantize")
        a0, b0 = _fresh()
        change(a)
        change(a0)
        got, want = (_outcome(lambda q=q, bq=bq: nvfp4.gemm(q, bq)) for q, bq in ((a, b), (a0, b0)))
        assert isinstance(want, ValueError) and type(got) is type(want) and str(got) == str(want)


def test_one_buffer_view_marked_for_grad_takes_the_op_road(op_calls):
    a, b = _fresh("quantize")
    nvfp4.gemm(a, b)
    assert op_calls["gemm"] == 0
    a.rowwise.amax.requires_grad_(True)
    nvfp4.gemm(a, b)
    assert op_calls["gemm"] == 1


@pytest.mark.parametrize("how", ["deepcopy", "copy", "torch.save"])
@pytest.mark.parametrize("views_read", [False, True])
def test_one_buffer_copies_are_compact_and_plain(how, views_read):
    """Copies and checkpoints of a one-buffer tensor hold separate, compact tensors (not the
    buffer, its alignment gaps and workspace), whether or not its views were read."""
    torch.manual_seed(13)
    x = torch.randn(8, 32)
    want = [t for _, d in _orientations(_plain(nvfp4.quantize(x, columnwise=True))) for t in (d.data, d.scales, d.amax)]
    q = nvfp4.quantize(x, columnwise=True)
    if views_read:
        q.rowwise.data, q.columnwise.amax
    c = {"deepcopy": copy.deepcopy, "copy": copy.copy, "torch.save": _saved}[how](q)
    assert q.rowwise._lazy is not views_read
    got = [t for _, d in _orientations(c) for t in (d.data, d.scales, d.amax)]
    assert len(got) == len(want) == 6
    for g, w in zip(got, want):
        assert_bytes_equal(g, w, how)
    if how == "copy":  # a shallow copy shares the orientation objects
        assert c.rowwise is q.rowwise and c.columnwise is q.columnwise
        return
    for _, d in _orientations(c):
        assert type(d) is _Direction
        for t in (d.data, d.scales, d.amax):
            assert t.untyped_storage().nbytes() == t.numel() * t.element_size()
