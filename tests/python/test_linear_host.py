"""The host path of nvfp4.nn.Linear: eager passes that call the op implementations without
the dispatcher compute what the dispatched ops compute, the dispatcher is kept wherever
something else acts on the call, the per-shape plans of the passes are keyed on everything
they depend on, and the fast argument checks still refuse bad input by name."""
import copy

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import nvfp4
import nvfp4.nn as nn4
from nvfp4 import _ops
from nvfp4.nn import _passes, ops
from conftest import assert_equal

HAS_CUDA = torch.cuda.is_available() and nvfp4.is_supported("cutlass", "cuda")
DEVICES = ["cpu"] + (["cuda"] if HAS_CUDA else [])


class _SeenOps(TorchDispatchMode):
    """Records the ops the dispatcher sees (and, being a mode, sends the passes through it)."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def _make(recipe, shape, bias, device, seed=0, k=64, n=48):
    g = torch.Generator().manual_seed(seed)
    lin = nn.Linear(k, n, bias=bias)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(n, k, generator=g) * 0.05)
        if bias:
            lin.bias.copy_(torch.randn(n, generator=g))
    backend = "reference" if device == "cpu" else "auto"
    layer = nn4.Linear.from_linear(lin.to(device), nn4.get_recipe(recipe, backend=backend), layer_index=5)
    xs = [torch.randn(*shape, k, generator=g).to(device) for _ in range(2)]
    dys = [(torch.randn(*shape, n, generator=g) * 1e-2).to(device) for _ in range(2)]
    return layer, xs, dys


def _steps(layer, xs, dys, autocast):
    """Two forward + backward passes (the SR counter moves between them); every result."""
    out = []
    for x, dy in zip(xs, dys):
        x = x.clone().requires_grad_()
        with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=autocast):
            y = layer(x)
        y.backward(dy.to(y.dtype))
        out += [y.detach(), x.grad, layer.weight.grad.clone()]
        if layer.bias is not None:
            out.append(layer.bias.grad.clone())
    out.append(layer.sr_step.clone())
    return out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("recipe", ["nvfp4", "no_sr", "no_2d", "fwd_only", "fp4_all_the_way"])
@pytest.mark.parametrize("shape,bias", [((3, 13), True), ((64,), False), ((2, 32), True)])
def test_direct_and_dispatched_passes_agree(device, recipe, shape, bias):
    """The same bits whether the passes run directly (plain eager) or through the dispatcher
    (here: under a dispatch mode, which must see both ops)."""
    layer, xs, dys = _make(recipe, shape, bias, device)
    other = copy.deepcopy(layer)
    autocast = device == "cuda"
    direct = _steps(layer, xs, dys, autocast)
    with _SeenOps() as seen:
        dispatched = _steps(other, xs, dys, autocast)
    assert seen.ops.count("nvfp4.linear_fwd.default") == 2, seen.ops
    want_bwd = 0 if recipe == "fwd_only" else 2
    assert seen.ops.count("nvfp4.linear_bwd.default") == want_bwd, seen.ops
    assert len(direct) == len(dispatched)
    for i, (a, b) in enumerate(zip(direct, dispatched)):
        assert_equal(a, b, f"result {i}")


def test_profiler_sees_the_ops():
    """With the profiler on, the passes go through the dispatcher, so a trace names them."""
    layer, xs, dys = _make("nvfp4", (32,), False, "cpu")
    want = _steps(copy.deepcopy(layer), xs, dys, False)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        got = _steps(layer, xs, dys, False)
    names = {e.name for e in prof.events()}
    assert {"nvfp4::linear_fwd", "nvfp4::linear_bwd"} <= names, sorted(n for n in names if "nvfp4" in n)
    for i, (a, b) in enumerate(zip(got, want)):
        assert_equal(a, b, f"result {i}")


class _Sub(torch.Tensor):
    pass


class _OtherFunctionMode(torch.overrides.TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def test_direct_only_where_nothing_else_acts():
    x, w = torch.randn(4, 32), nn.Parameter(torch.randn(16, 32))
    assert _passes._direct(x, w, None)
    assert not _passes._direct(x.as_subclass(_Sub), w)        # a subclass may handle the op itself
    assert not _passes._direct(x, w.detach().to("meta"))      # fake outputs, no kernel
    with _SeenOps():
        assert not _passes._direct(x, w)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        assert not _passes._direct(x, w)
    with _OtherFunctionMode():
        assert not _passes._direct(x, w)
    torch.set_default_device("cpu")  # a function mode that only fills in factories' device
    try:
        assert _passes._direct(x, w)
    finally:
        torch.set_default_device(None)
    assert _passes._direct(x, w)


def test_compiled_graphs_hold_the_ops():
    """Under torch.compile the passes stay ops of the graph (traced, not run)."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd
    targets = []

    def grab(gm, example_inputs):
        for node in gm.graph.nodes:
            if node.op == "call_function":
                # ops with mutable arguments come wrapped: auto_functionalized(op, ...)
                wrapped = "auto_functionalized" in str(node.target)
                targets.append(str(node.args[0] if wrapped else node.target))
        return make_boxed_func(gm)

    torch._dynamo.reset()
    layer, xs, dys = _make("nvfp4", (32,), False, "cpu")
    eager = _steps(copy.deepcopy(layer), xs, dys, False)
    compiled = torch.compile(layer, backend=aot_autograd(fw_compiler=grab, bw_compiler=grab), fullgraph=True)
    got = []
    for x, dy in zip(xs, dys):
        x = x.clone().requires_grad_()
        y = compiled(x)
        y.backward(dy)
        got += [y.detach(), x.grad, layer.weight.grad.clone()]
    got.append(layer.sr_step.clone())
    torch._dynamo.reset()
    assert "nvfp4.linear_fwd.default" in targets and "nvfp4.linear_bwd.default" in targets, targets
    for i, (a, b) in enumerate(zip(got, eager)):
        assert_equal(a, b, f"result {i}")


# ------------------------------------------------------------------------------ per-shape plans
def _plan_keys():
    return sorted((k for k in _ops._WS if k[0] in ("linear_fwd", "linear_bwd")), key=repr)


def test_plans_keyed_on_shape_and_cleared_with_the_workspace_cache():
    layer, xs, dys = _make("no_sr", (32,), False, "cpu")
    _ops.clear_workspace_cache()
    first = _steps(layer, xs, dys, False)
    keys = _plan_keys()
    assert [k[0] for k in keys] == ["linear_bwd", "linear_fwd"], keys
    _steps(layer, xs, dys, False)
    assert _plan_keys() == keys  # the same shapes: the same plans
    other_x = [torch.randn(48, 64) for _ in range(2)]
    other_dy = [torch.randn(48, 48) for _ in range(2)]
    _steps(layer, other_x, other_dy, False)
    assert len(_plan_keys()) == 4  # another token count: plans of its own
    _ops.clear_workspace_cache()
    assert not _plan_keys()
    layer.weight.grad = None
    again = _steps(layer, xs, dys, False)
    for i, (a, b) in enumerate(zip(again[:2], first[:2])):  # y, dx (dW accumulates)
        assert_equal(a, b, f"result {i}")


def test_plans_keyed_on_the_gemm_environment(monkeypatch):
    """A variable that can change the GEMM kernel (and so its workspace) is part of every
    plan's key: a plan made before it was set is not used after."""
    layer, xs, dys = _make("no_sr", (32,), False, "cpu")
    _ops.clear_workspace_cache()
    want = _steps(copy.deepcopy(layer), xs, dys, False)
    before = _plan_keys()
    monkeypatch.setenv("NVFP4_SM90_TILE", "medium")
    got = _steps(layer, xs, dys, False)
    after = [k for k in _plan_keys() if k not in before]
    assert len(after) == 2 and all("NVFP4_SM90_TILE=medium;" in k[-1] for k in after), after
    for i, (a, b) in enumerate(zip(got, want)):
        assert_equal(a, b, f"result {i}")


def test_outputs_fully_written(monkeypatch):
    """Every buffer the passes allocate is poisoned (NaN / 0xff): the results must be those of
    an unpoisoned run, so every output element is written and no scratch byte is read before
    it is written."""
    layer, xs, dys = _make("nvfp4", (3, 13), True, "cpu")
    want = _steps(copy.deepcopy(layer), xs, dys, False)
    real_empty = torch.empty

    def poisoned(*size, **kw):
        t = real_empty(*size, **kw)
        if t.is_floating_point():
            t.fill_(float("nan"))
        elif t.dtype == torch.uint8:
            t.fill_(0xFF)
        return t

    monkeypatch.setattr(_passes.torch, "empty", poisoned)
    got = _steps(layer, xs, dys, False)
    monkeypatch.undo()
    for i, (a, b) in enumerate(zip(got, want)):
        assert_equal(a, b, f"result {i}")


def test_library_calls_per_pass(monkeypatch):
    """The default recipe: the forward quantizes X (both orientations, one call) and W (one
    call) and runs one GEMM; the backward quantizes dY once and runs two GEMMs."""
    layer, xs, dys = _make("nvfp4", (32,), False, "cpu")
    calls = []
    for name in ("quantize_raw", "gemm_raw"):
        real = getattr(_ops, name)

        def spy(*a, _real=real, _name=name):
            if not (_name == "gemm_raw" and a[19] == -1):  # workspace-size queries are not runs
                calls.append(_name)
            return _real(*a)
        monkeypatch.setattr(_ops, name, spy)
    x = xs[0].clone().requires_grad_()
    _ops.clear_workspace_cache()
    y = layer(x)
    assert calls == ["quantize_raw", "quantize_raw", "gemm_raw"], calls
    calls.clear()
    y.backward(dys[0])
    assert calls == ["quantize_raw", "gemm_raw", "gemm_raw"], calls


# ------------------------------------------------------------------------------ bad input, both paths
def _fwd_direct(*a):
    return ops.linear_fwd(*a)


def _fwd_op(*a):
    return torch.ops.nvfp4.linear_fwd(*a)


def _bwd_direct(*a):
    return ops.linear_bwd(*a)


def _bwd_op(*a):
    return torch.ops.nvfp4.linear_bwd(*a)


@pytest.mark.parametrize("fwd", [_fwd_direct, _fwd_op])
def test_fwd_refuses_by_name(fwd):
    layer = nn4.Linear(32, 16, recipe=nn4.get_recipe("nvfp4", backend="reference"))
    cfg, c = layer._plan.cfg, layer.sr_step
    x, w = torch.randn(8, 32), torch.randn(16, 32)
    small = torch.zeros(ops.w_cache_nbytes(16, 32) - 1, dtype=torch.uint8)
    with pytest.raises(ValueError, match=r"^w_cache: "):
        fwd(x, w, None, c, cfg, True, True, ops.W_REUSE, small)
    with pytest.raises((TypeError, ValueError), match=r"^w_cache: "):
        fwd(x, w, None, c, cfg, True, True, ops.W_STORE, torch.zeros(ops.w_cache_nbytes(16, 32)))
    with pytest.raises(ValueError, match=r"^w_mode: "):
        fwd(x, w, None, c, cfg, True, True, 7, None)
    with pytest.raises(ValueError, match=r"^bias: "):
        fwd(x, w, torch.zeros(15), c, cfg, True, True, ops.W_FRESH, None)
    with pytest.raises((TypeError, ValueError), match=r"^counter: "):
        fwd(x, w, None, c.int(), cfg, True, True, ops.W_FRESH, None)
    with pytest.raises(ValueError, match=r"^cfg: "):
        fwd(x, w, None, c, list(cfg)[:-1], True, True, ops.W_FRESH, None)
    with pytest.raises(ValueError, match=r"^x: "):
        fwd(x[0], w, None, c, cfg, True, True, ops.W_FRESH, None)
    with pytest.raises((TypeError, ValueError), match=r"^x: "):
        fwd(x.double(), w, None, c, cfg, True, True, ops.W_FRESH, None)
    # and a cache of the right size is used
    cache = torch.zeros(ops.w_cache_nbytes(16, 32), dtype=torch.uint8)
    y, _, wt = fwd(x, w, None, c, cfg, True, True, ops.W_STORE, cache)
    assert wt.numel() == 0 and cache.any()
    y2, _, _ = fwd(x, w * 0, None, c, cfg, True, True, ops.W_REUSE, cache)  # W read from the cache only
    assert_equal(y2, y, "reused weight")


@pytest.mark.parametrize("bwd", [_bwd_direct, _bwd_op])
def test_bwd_refuses_by_name(bwd):
    layer = nn4.Linear(32, 16, recipe=nn4.get_recipe("nvfp4", backend="reference"))
    cfg, c = layer._plan.cfg, layer.sr_step
    _, xt, wt = ops.linear_fwd(torch.randn(8, 32), torch.randn(16, 32), None, c, cfg, True, True)
    dy = torch.randn(8, 16)
    f32 = torch.float32
    with pytest.raises((TypeError, ValueError), match=r"^wt: "):
        bwd(dy, xt, wt.float(), c, cfg, 32, True, True, f32)
    with pytest.raises((TypeError, ValueError), match=r"^xt: "):
        bwd(dy, xt.reshape(1, -1), wt, c, cfg, 32, True, True, f32)
    with pytest.raises((TypeError, ValueError), match=r"^counter: "):
        bwd(dy, xt, wt, c.float(), cfg, 32, True, True, f32)
    with pytest.raises(TypeError, match=r"^dw_dtype: "):
        bwd(dy, xt, wt, c, cfg, 32, True, True, torch.int32)
    with pytest.raises(ValueError, match=r"^cfg: "):
        bwd(dy, xt, wt, c, [0] * 3, 32, True, True, f32)
    with pytest.raises(ValueError, match=r"^k: "):
        bwd(dy, xt, wt, c, cfg, 24, True, True, f32)
    with pytest.raises(ValueError, match=r"^dy: "):
        bwd(dy[0], xt, wt, c, cfg, 32, True, True, f32)
    with pytest.raises(ValueError, match=r"^xt: "):  # saved for 8 tokens, given 40
        bwd(torch.randn(40, 16), xt, wt, c, cfg, 32, True, True, f32)
    # what is not needed is not looked at
    dx, dw = bwd(dy, xt[:0], wt, c, cfg, 32, True, False, f32)
    assert dx.shape == (8, 32) and dw.numel() == 0


@pytest.mark.parametrize("device", DEVICES)
def test_ops_take_leading_dimensions(device):
    """linear_fwd / linear_bwd take [..., features] as F.linear does: the same bits as the 2D
    call, outputs shaped like the input."""
    layer = nn4.Linear(32, 16, recipe=nn4.get_recipe("nvfp4", backend="reference" if device == "cpu" else "auto"))
    cfg, c = layer._plan.cfg, layer.sr_step.to(device)
    g = torch.Generator().manual_seed(3)
    x, w, b = (torch.randn(2, 3, 32, generator=g), torch.randn(16, 32, generator=g), torch.randn(16, generator=g))
    dy = torch.randn(2, 3, 16, generator=g)
    x, w, b, dy = x.to(device), w.to(device), b.to(device), dy.to(device)
    y3, xt3, wt3 = ops.linear_fwd(x, w, b, c, cfg, True, True)
    y2, xt2, wt2 = ops.linear_fwd(x.reshape(6, 32), w, b, c, cfg, True, True)
    assert y3.shape == (2, 3, 16)
    assert_equal(y3.reshape(6, 16), y2, "y")
    # the saved buffers: compare what they hold (alignment gaps are never written)
    for name, a, b_, rows, cols in (("xt", xt3, xt2, 32, 16), ("wt", wt3, wt2, 32, 16)):
        for i, (p, q) in enumerate(zip(ops.unpack(a, rows, cols), ops.unpack(b_, rows, cols))):
            assert_equal(p, q, f"{name}[{i}]")
    dx3, dw3 = ops.linear_bwd(dy, xt3, wt3, c, cfg, 32, True, True, torch.float32)
    c -= 1  # the same counter value for the 2D call
    dx2, dw2 = ops.linear_bwd(dy.reshape(6, 16), xt2, wt2, c, cfg, 32, True, True, torch.float32)
    assert dx3.shape == (2, 3, 32)
    assert_equal(dx3.reshape(6, 32), dx2, "dx")
    assert_equal(dw3, dw2, "dw")
    with _SeenOps():  # and the fake implementations give the same shapes
        fx = torch.empty(2, 3, 32, device="meta")
        fy, _, _ = torch.ops.nvfp4.linear_fwd(fx, w.to("meta"), None, c.to("meta"), cfg, True, True, 0, None)
        fdx, fdw = torch.ops.nvfp4.linear_bwd(torch.empty(2, 3, 16, device="meta"), xt3.to("meta"), wt3.to("meta"),
                                              c.to("meta"), cfg, 32, True, True, torch.float32)
    assert fy.shape == (2, 3, 16) and fdx.shape == (2, 3, 32) and fdw.shape == (16, 32)


def test_parametrized_weight_is_read():
    """The forward reads parameters from the module's dict; a parametrized weight (not in the
    dict: torch.nn.utils.parametrize computes it) is still the one used."""
    import torch.nn.utils.parametrize as parametrize

    class Double(nn.Module):
        def forward(self, w):
            return w * 2

    layer, xs, dys = _make("no_sr", (32,), True, "cpu")
    ref = copy.deepcopy(layer)
    with torch.no_grad():
        ref.weight.mul_(2)
    parametrize.register_parametrization(layer, "weight", Double())
    assert "weight" not in layer._parameters
    assert_equal(layer(xs[0]), ref(xs[0]), "y")


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU with an nvfp4 GEMM backend")
@pytest.mark.parametrize("reuse", [None, "store"])
def test_no_host_synchronization_cuda(reuse):
    """A forward + backward never waits for the GPU (after the first call, which may ask the
    library for workspace sizes): CUDA's sync debug mode turns any synchronization into an
    error."""
    layer, xs, dys = _make("nvfp4", (2, 32), False, "cuda")
    if reuse:
        layer.set_weight_reuse(reuse)
    _steps(layer, xs, dys, True)  # plans and workspace sizes
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        _steps(layer, xs, dys, True)
    finally:
        torch.cuda.set_sync_debug_mode("default")


def test_bench_linear_host_split_and_busy_refusals(tmp_path):
    """--split reports the time inside the library's entry points per forward + backward (the
    six calls, no more than the whole call); --busy-ms refuses a negative duration and, without
    a GPU, any duration (it would be ignored), naming the option."""
    import json
    import os
    import subprocess
    import sys
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    bench = os.path.join(root, "bench", "bench_linear_host.py")
    js = tmp_path / "out.json"
    r = subprocess.run([sys.executable, bench, "--reps", "2", "--calls", "10", "--split", "--json", str(js)],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    split = json.loads(js.read_text())["split"]["nvfp4 Linear"]
    inside = {k: v for k, v in split.items() if k != "total"}
    assert sum(v["calls"] for v in inside.values()) == 6, split
    assert 0 < sum(v["us"] for v in inside.values()) <= split["total"]["us"], split
    bad = [["--busy-ms", "-1"]] + ([] if torch.cuda.is_available() else [["--busy-ms", "5"]])
    for args in bad:
        r = subprocess.run([sys.executable, bench, "--reps", "1", "--calls", "2", *args], capture_output=True,
                           text=True, timeout=300, cwd=tmp_path)
        assert r.returncode == 2 and "--busy-ms" in r.stderr, (args, r.stdout + r.stderr)


def test_bench_linear_host_runs_on_cpu(tmp_path):
    """bench/bench_linear_host.py: both layers timed in one run, and the calls one nvfp4 Linear
    forward + backward makes (the library's entry points are no-ops without a GPU)."""
    import json
    import os
    import subprocess
    import sys
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    js = tmp_path / "out.json"
    r = subprocess.run([sys.executable, os.path.join(root, "bench", "bench_linear_host.py"), "--reps", "2",
                        "--calls", "20", "--json", str(js)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads(js.read_text())
    assert all(res["host_us"][row] > 0 for row in ("nn.Linear", "nvfp4 Linear", "nvfp4 Linear, every pass dispatched"))
    calls = res["per_call"]["nvfp4 Linear"]
    lib = calls["library calls"]
    # three quantizations (X, W, dY) and three GEMMs, on the codes road or (where the GEMM runner
    # takes decoded operands) the decoded road's entry points
    assert lib.get("quantize_raw", 0) + lib.get("quantize_dec_raw", 0) == 3, calls
    assert lib.get("gemm_raw", 0) + lib.get("gemm_dec_raw", 0) == 3, calls
    assert set(lib) <= {"quantize_raw", "gemm_raw", "quantize_dec_raw", "gemm_dec_raw"}, calls
    assert calls["passes (plain eager)"] == {"direct": 2}, calls
    assert calls["by name"]["nvfp4::linear_fwd"] == calls["by name"]["nvfp4::linear_bwd"] == 1, calls
