"""cfg.offset_counter: a stochastic-rounding counter that the quantization reads like
cfg.offset_device and then advances by one, in stream order (the training Linear's step
counter, advanced by the library instead of a separate increment after each backward).

Through the raw bindings (`_C.quantize_raw`, `_C.quantize_dec_raw`, whose last argument is the
counter's address) on the CPU reference and, where there is one, on the GPU: the bits equal
the same call with the counter's value added to the offset by hand; the counter reads one more
after each call, empty inputs included; several calls queued before any runs each read the
value the previous one left; a captured CUDA graph reads and advances it on every replay; on
the GPU with a workspace the amax pass advances it (no kernel of its own). Outputs are
poisoned first, so an unwritten byte shows as a mismatch.
"""
from __future__ import annotations

import pytest
import torch

from nvfp4 import _C, _ops

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
U64 = 1 << 64
POISON = 0xA5
MASK = _C.default_rht_sign_mask()
# (block, rht mask, rowwise, columnwise): the kernels the recipe's operands take
VARIANTS = {
    "row": (0, 0, True, False),
    "row+col rht(col)": (0, 2, True, True),
    "col rht(col)": (0, 2, False, True),
    "row rht(row)": (0, 1, True, False),
    "2d row+col": (1, 0, True, True),
}


def _signed(v: int) -> int:
    v %= U64
    return v - U64 if v >= 1 << 63 else v


def _counter(value: int, device) -> torch.Tensor:
    return torch.tensor([_signed(value)], dtype=torch.int64, device=device)


def _out(rows, cols, device, decoded):
    sc = cols // 16
    o = [torch.full((rows, cols // 2), POISON, dtype=torch.uint8, device=device),
         torch.full(((rows + 127) // 128 * 128, (sc + 3) // 4 * 4), POISON, dtype=torch.uint8, device=device),
         torch.full((1,), float("nan"), dtype=torch.float32, device=device)]
    if decoded:
        o += [torch.full((rows, cols), float("nan"), dtype=torch.bfloat16, device=device),
              torch.full((1,), float("nan"), dtype=torch.float32, device=device)]
    return o


def run(x, variant="row", rounding=1, seed=77, offset=0, offset_device=None, counter=None, decoded=False,
        workspace=True, outs=None):
    """One quantization of x on its device; returns the list of outputs per direction."""
    block, rht, want_row, want_col = VARIANTS[variant]
    rows, cols = x.shape
    dev = x.device
    if outs is None:
        outs = (_out(rows, cols, dev, decoded) if want_row else None,
                _out(cols, (rows + 15) // 16 * 16, dev, decoded) if want_col else None)
    row, col = outs
    dt, di, st = _ops._device(x)
    # workspace: True (a fresh one, 0xFF bytes), a tensor (that one), None (none); unused on the CPU
    ws = 0
    if x.is_cuda and workspace is not None:
        ws_t = workspace if isinstance(workspace, torch.Tensor) else \
            torch.full((_C.quantize_workspace_bytes,), 0xFF, dtype=torch.uint8, device=dev)
        ws = ws_t.data_ptr()
    od = 0 if offset_device is None else offset_device.data_ptr()
    oc = 0 if counter is None else counter.data_ptr()
    code = _ops.DTYPE_CODE[x.dtype]

    def addr(o, i):
        return o[i].data_ptr() if o is not None else 0

    if decoded:
        _C.quantize_dec_raw(x.data_ptr(), code, rows, cols, addr(row, 0), addr(row, 1), addr(row, 2), addr(row, 3),
                            addr(row, 4), addr(col, 0), addr(col, 1), addr(col, 2), addr(col, 3), addr(col, 4), block,
                            rounding, 1, rht, MASK, seed, offset % U64, od, dt, di, st, ws, oc)
    else:
        _C.quantize_raw(x.data_ptr(), code, rows, cols, addr(row, 0), addr(row, 1), addr(row, 2), addr(col, 0),
                        addr(col, 1), addr(col, 2), block, rounding, 1, rht, MASK, seed, offset % U64, od, dt, di, st,
                        ws, oc)
    return outs


def same(got, want, what):
    for g, w, kind in ((got[0], want[0], "row"), (got[1], want[1], "col")):
        assert (g is None) == (w is None)
        if g is None:
            continue
        for i, (a, b) in enumerate(zip(g, w)):
            assert torch.equal(a.cpu().view(torch.uint8), b.cpu().view(torch.uint8)), f"{what}: {kind} output {i} differs"


def x_for(device, rows=300, cols=208, seed=3):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=g) * torch.exp2(torch.randint(-6, 7, (rows, 1), generator=g).float())
    return x.to(torch.bfloat16).to(device)


@pytest.mark.parametrize("variant,decoded",
                         [(v, False) for v in VARIANTS] + [(v, True) for v in VARIANTS if v != "2d row+col"])
@pytest.mark.parametrize("device", DEVICES)
def test_counter_read_then_advanced(device, variant, decoded):
    x = x_for(device)
    for base, value in ((3, 0), (3, 41), (2**64 - 2, 5), (0, 2**64 - 1), (9, 2**63 + 1)):
        counter = _counter(value, device)
        got = run(x, variant, offset=base, counter=counter, decoded=decoded)
        want = run(x, variant, offset=base + value, decoded=decoded)
        same(got, want, f"offset {base} + counter {value}")
        assert int(counter.item()) == _signed(value + 1), "the counter advanced by one"
        if device == "cuda":  # and the GPU's bits are the CPU reference's
            same(got, run(x.cpu(), variant, offset=base + value, decoded=decoded), "against the CPU")


@pytest.mark.parametrize("device", DEVICES)
def test_counter_2d_decoded(device):
    """2D tiles with decoded outputs (the weight's form), on a smaller shape."""
    x = x_for(device, 64, 96)
    counter = _counter(7, device)
    same(run(x, "2d row+col", counter=counter, decoded=True), run(x, "2d row+col", offset=7, decoded=True), "2d")
    assert int(counter.item()) == 8


@pytest.mark.parametrize("workspace", ["fresh", "shared", "none", "env off"])
@pytest.mark.parametrize("variant", ["row", "row+col rht(col)"])
@pytest.mark.parametrize("device", DEVICES)
def test_calls_queued_before_any_runs(device, variant, workspace, monkeypatch):
    """Three calls queued back to back (on the GPU none has run when the next is queued; with
    one workspace shared by all three, as a layer's scratch is): each reads the value the
    previous one left."""
    if workspace == "env off":
        monkeypatch.setenv("NVFP4_QUANT_WORKSPACE", "0")
    x = x_for(device)
    counter = _counter(100, device)
    ws = None if workspace == "none" else (
        torch.full((_C.quantize_workspace_bytes,), 0xFF, dtype=torch.uint8, device=device)
        if workspace == "shared" else True)
    if device == "cuda":
        torch.cuda._sleep(50_000_000)  # the calls are queued behind ~tens of ms of GPU work
    got = [run(x, variant, offset=5, counter=counter, workspace=ws) for _ in range(3)]
    for i, g in enumerate(got):
        same(g, run(x, variant, offset=105 + i), f"call {i}")
    assert int(counter.item()) == 103


@pytest.mark.parametrize("decoded", [False, True], ids=["codes", "decoded"])
@pytest.mark.parametrize("device", DEVICES)
def test_empty_input_still_advances(device, decoded):
    for rows, cols in ((0, 32), (0, 0)):
        x = torch.zeros(rows, cols, dtype=torch.float32, device=device)
        counter = _counter(9, device)
        outs = run(x, "row", counter=counter, decoded=decoded)
        assert int(counter.item()) == 10
        assert outs[0][2].item() == 0.0  # amax of nothing: 0


def test_refused_by_name_and_counter_untouched():
    x = x_for("cpu", 32, 64)
    counter = _counter(5, "cpu")
    other = _counter(0, "cpu")
    with pytest.raises(ValueError, match="cfg.offset_counter: set together with cfg.offset_device"):
        run(x, counter=counter, offset_device=other)
    pair = torch.zeros(2, dtype=torch.int64)

    class At:  # an address 4 bytes into `pair`
        def data_ptr(self):
            return pair.data_ptr() + 4

    with pytest.raises(ValueError, match="cfg.offset_counter: must be 8-byte aligned"):
        run(x, counter=At())
    outs = (_out(32, 64, "cpu", False), None)

    class Inside:  # the counter inside the rowwise scales
        def data_ptr(self):
            return outs[0][1].data_ptr()

    with pytest.raises(ValueError, match="cfg.offset_counter: overlaps rowwise.scales"):
        run(x, counter=Inside(), outs=outs)

    class OnX:
        def data_ptr(self):
            return x.data_ptr()

    with pytest.raises(ValueError, match="cfg.offset_counter: overlaps input"):
        run(x, counter=OnX())
    assert int(counter.item()) == 5 and int(other.item()) == 0 and not pair.any()


# ----------------------------------------------------------------------------- GPU only
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def _kernels(fn):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


@cuda
@pytest.mark.parametrize("variant", ["row", "row+col rht(col)", "row rht(row)", "2d row+col"])
def test_the_amax_pass_advances_it(variant):
    """With a workspace the call launches what it launches without a counter (the amax pass
    takes it); without one, one more kernel adds one."""
    x = x_for("cuda")
    counter = _counter(0, "cuda")
    run(x, variant, counter=counter)  # warm-up (module loads)
    plain = _kernels(lambda: run(x, variant))
    folded = _kernels(lambda: run(x, variant, counter=counter))
    assert sorted(folded) == sorted(plain), (folded, plain)
    assert not any("advance_counter" in k for k in folded)
    alone = _kernels(lambda: run(x, variant, counter=counter, workspace=None))
    assert sum("advance_counter" in k for k in alone) == 1, alone
    assert int(counter.item()) == 3


@cuda
@pytest.mark.parametrize("workspace", [True, None], ids=["workspace", "no workspace"])
def test_cuda_graph_replays_draw_new_bits(workspace):
    x = x_for("cuda")
    counter = _counter(20, "cuda")
    ws = torch.full((_C.quantize_workspace_bytes,), 0xFF, dtype=torch.uint8, device="cuda") if workspace else None
    outs = (_out(300, 208, "cuda", True), _out(208, 304, "cuda", True))
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        run(x, "row+col rht(col)", offset=1, counter=counter, decoded=True, workspace=ws, outs=outs)  # 20 -> 21
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        run(x, "row+col rht(col)", offset=1, counter=counter, decoded=True, workspace=ws, outs=outs)
    torch.cuda.synchronize()
    assert int(counter.item()) == 21  # capture runs nothing
    for i in range(3):
        g.replay()
        torch.cuda.synchronize()
        same(outs, run(x, "row+col rht(col)", offset=1 + 21 + i, decoded=True), f"replay {i}")
        assert int(counter.item()) == 22 + i


# ----------------------------------------------------------------------------- the recipe options' routes
# (scale_select, amax_mode, rounding, rht, given amax, rowwise, columnwise): a given amax (the
# ordinary kernels, no amax pass), 4over6, one amax per row, MS-EDEN with the rowwise
# transform and a given amax with the columnwise one — each takes the one-thread kernel on a
# GPU, the counter read by the options' kernels or the ordinary ones with the given value
OPTIONS = {
    "given amax, SR": (0, 2, 1, 0, 3.5, True, False),
    "given amax, SR, row+col rht(col)": (0, 2, 1, 2, 40.0, True, True),
    "4over6 MAE (RTN: the counter only advances)": (1, 0, 0, 0, None, True, False),
    "rows amax, SR": (0, 1, 1, 0, None, True, False),
    "EDEN, rht(row)": (0, 0, 2, 1, None, True, False),
}


def run_options(x, name, offset=0, counter=None):
    select, amax_mode, rounding, rht, given, want_row, want_col = OPTIONS[name]
    rows, cols = x.shape
    dev = x.device

    def alloc(r, c, n):
        sc = c // 16
        return [torch.full((r, c // 2), POISON, dtype=torch.uint8, device=dev),
                torch.full(((r + 127) // 128 * 128, (sc + 3) // 4 * 4), POISON, dtype=torch.uint8, device=dev),
                torch.full((n,), float("nan"), dtype=torch.float32, device=dev)]

    rp = (rows + 15) // 16 * 16
    row = alloc(rows, cols, rows if amax_mode == 1 else 1) if want_row else None
    col = alloc(cols, rp, cols if amax_mode == 1 else 1) if want_col else None
    a = None if given is None else torch.tensor([given], dtype=torch.float32, device=dev)
    stream = torch.cuda.current_stream().cuda_stream if x.is_cuda else 0
    _C.quantize_options(x, *(row or (None,) * 3), *(col or (None,) * 3), 0, rounding, 1, rht, MASK, 77,
                        offset % U64, select, 448, amax_mode, a, stream,
                        offset_counter=0 if counter is None else counter.data_ptr())
    return row, col


@pytest.mark.parametrize("name", list(OPTIONS))
@pytest.mark.parametrize("device", DEVICES)
def test_counter_through_the_options(device, name):
    """The options' routes read the counter as the offset (the bits of the same call with the
    value added by hand, and on the GPU the CPU reference's) and advance it once."""
    x = x_for(device)
    for value, offset in ((0, 0), (41, 5), (U64 - 1, 3)):
        counter = _counter(value, device)
        got = run_options(x, name, offset=offset, counter=counter)
        want = run_options(x, name, offset=offset + value)
        same(got, want, f"{name}, counter {value}")
        assert int(counter.item()) % U64 == (value + 1) % U64
        if device == "cuda":
            ref = run_options(x.cpu(), name, offset=offset + value)
            same(got, ref, f"{name}, counter {value}, against the CPU reference")


@cuda
def test_counter_inside_the_workspace_refused():
    """A counter inside the quantization workspace is refused by name, nothing written."""
    x = x_for("cuda", 64, 64)
    ws = torch.zeros(_C.quantize_workspace_bytes, dtype=torch.uint8, device="cuda")

    class InWorkspace:
        def data_ptr(self):
            return ws.data_ptr() + 64

    outs = (_out(64, 64, "cuda", False), None)
    with pytest.raises(ValueError, match="offset_counter.*workspace|workspace.*offset_counter"):
        run(x, counter=InWorkspace(), workspace=ws, outs=outs)
    torch.cuda.synchronize()
    assert not ws.any()
    assert bool((outs[0][0] == POISON).all())
