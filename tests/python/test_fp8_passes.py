"""The FP8 Linear's kernel path (nvfp4.nn._fp8_passes: fp8_linear_fwd / fp8_linear_bwd) and
the cast's accumulating amax (nvfp4_fp8_cast with cfg.amax_accumulate).

On the CPU the kernel path runs on the library's CPU reference casts and torch's CPU
_scaled_mm, which dequantizes and multiplies in FP32 exactly as the emulation does: so
there the layer's kernel path must equal its emulation bit for bit (forward, dgrad, wgrad,
bias grad, delayed-scaling state over steps), which checks every operand, transpose, scale
and state update the ops hand to the GEMMs. torch.compile of the layer must equal eager.
On a GPU, the same path against the torch-op casts (fused_cast=False), bit for bit.
"""
from __future__ import annotations

import copy

import pytest
import torch

from nvfp4 import _C, _ops
from nvfp4.nn import _fp8_passes as P
from nvfp4.nn import fp8 as F8
from nvfp4.nn.fp8 import FP8Linear
from conftest import first_mismatch

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


@pytest.fixture
def kernel_path_on_cpu(monkeypatch):
    monkeypatch.setattr(F8, "_KERNEL_DEVICES", frozenset({"cpu"}) | F8._KERNEL_DEVICES)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.float().view(torch.int32)


# ----------------------------------------------------------------------------- the cast's amax_accumulate
def _cpu_cast(x, scale, amax_prior, accumulate):
    rows, cols = x.shape
    q = torch.empty(rows, cols, dtype=torch.uint8)
    sc = torch.tensor([0.0, amax_prior, scale])
    _C.fp8_cast_raw(x.data_ptr(), _ops.DTYPE_CODE[x.dtype], rows, cols, 0, 0.0, sc.data_ptr() + 8, q.data_ptr(), 0,
                    True, False, sc.data_ptr(), sc.data_ptr() + 4, 0, 0, 0, accumulate)
    return q, sc[1]


@pytest.mark.parametrize("prior", [0.0, 0.5, 1e30, float("inf"), float("nan")])
@pytest.mark.parametrize("x_nan", [False, True])
def test_amax_accumulate_is_max_with_nan_winning(prior, x_nan):
    """Delayed scaling with amax_accumulate: *amax = max(*amax, max|x|), a NaN on either side
    giving NaN; the cast itself unchanged."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(9, 32, generator=g) * 4
    if x_nan:
        x[4, 5] = float("nan")
    q_acc, a_acc = _cpu_cast(x, 2.0, prior, True)
    q_new, a_new = _cpu_cast(x, 2.0, prior, False)
    assert torch.equal(q_acc, q_new)
    amax = float("nan") if x_nan else x.abs().max().item()
    prior32 = torch.tensor(prior).item()  # as the float32 slot holds it
    want = float("nan") if (x_nan or prior != prior) else max(prior32, amax)
    if want != want:
        assert torch.isnan(a_acc), a_acc
    else:
        assert a_acc.item() == want
    if x_nan:
        assert torch.isnan(a_new)
    else:
        assert a_new.item() == amax  # without accumulate the prior content is overwritten


def test_amax_accumulate_refusals():
    x = torch.randn(4, 32)
    q = torch.empty(4, 32, dtype=torch.uint8)
    sc = torch.ones(3)
    with pytest.raises(ValueError, match="cfg.amax_accumulate: only with delayed scaling"):
        _C.fp8_cast_raw(x.data_ptr(), 0, 4, 32, 0, 0.0, 0, q.data_ptr(), 0, True, False, sc.data_ptr(),
                        sc.data_ptr() + 4, 0, 0, 0, True)
    with pytest.raises(ValueError, match="amax: required with cfg.amax_accumulate"):
        _C.fp8_cast_raw(x.data_ptr(), 0, 4, 32, 0, 0.0, sc.data_ptr() + 8, q.data_ptr(), 0, True, False,
                        sc.data_ptr(), 0, 0, 0, 0, True)


# ----------------------------------------------------------------------------- the layer's kernel path
def _pair(k, n, recipe, bias):
    torch.manual_seed(k * 31 + n)
    base = torch.nn.Linear(k, n, bias=bias)
    kern = FP8Linear.from_linear(copy.deepcopy(base), recipe)
    emu = FP8Linear.from_linear(copy.deepcopy(base), recipe.replace(emulate=True))
    return kern, emu


def _run(layer, x, dy, autocast_dtype, x_grad, train):
    layer.train(train)
    xi = x.clone().requires_grad_(x_grad)
    if autocast_dtype is not None:
        with torch.autocast("cpu", dtype=autocast_dtype):
            y = layer(xi)
    else:
        y = layer(xi)
    grads = {}
    if y.requires_grad:
        y.backward(dy.to(y.dtype))
        grads = {"dx": xi.grad, "dw": layer.weight.grad,
                 "db": None if layer.bias is None else layer.bias.grad}
        layer.zero_grad(set_to_none=True)
    return y.detach(), grads


def _same(a, b, what):
    # The same FP8 operands on both sides; torch's CPU BLAS may sum their products in another
    # order for _scaled_mm's operand layout than for the emulation's, and which order depends
    # on the CPU (one machine gave equal bits for every multi-row product, another an ulp
    # apart): FP32 sums of <= 64 products far below 2^-16 of the largest output, then one
    # rounding to the output dtype, which such a difference can move by one of its ulps.
    assert a.dtype == b.dtype and a.shape == b.shape, what
    eps = torch.finfo(b.dtype).eps if b.dtype != torch.float32 else 0.0
    torch.testing.assert_close(a.float(), b.float(), rtol=eps, atol=2.0 ** -16 * b.float().abs().max().item(),
                               msg=what)


RECIPES = {
    "fp8": F8.get_fp8_recipe("fp8"),
    "fp8_delayed": F8.get_fp8_recipe("fp8_delayed"),
    "delayed_recent_margin": F8.get_fp8_recipe("fp8_delayed").replace(amax_history_len=4,
                                                                      amax_compute_algo="most_recent", margin=1.0),
    "e5m2_fwd_e4m3_bwd": F8.get_fp8_recipe("fp8").replace(fwd_format="e5m2", bwd_format="e4m3",
                                                          fast_accum_fprop=False),
}


@pytest.mark.parametrize("recipe", list(RECIPES))
@pytest.mark.parametrize("shape", [(37, 64, 48), (48, 32, 16), (1, 16, 32), ((3, 5), 48, 64)],
                         ids=["m37", "m48", "m1", "3d"])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("mode", ["bf16_autocast", "fp16_autocast", "fp32", "frozen_w", "x_no_grad", "eval"])
def test_kernel_path_equals_emulation_on_cpu(kernel_path_on_cpu, recipe, shape, bias, mode):
    m, k, n = shape
    r = RECIPES[recipe]
    kern, emu = _pair(k, n, r, bias)
    if mode == "frozen_w":
        for lin in (kern, emu):
            lin.weight.requires_grad_(False)
    autocast = {"bf16_autocast": torch.bfloat16, "fp16_autocast": torch.float16}.get(mode)
    if mode in ("frozen_w", "x_no_grad", "eval"):
        autocast = torch.bfloat16
    g = torch.Generator().manual_seed(7)
    lead = m if isinstance(m, tuple) else (m,)
    for step in range(3):
        x = torch.randn(*lead, k, generator=g) * 2.0 ** (step * 3 - 3)
        dy = torch.randn(*lead, n, generator=g) * 2.0 ** (2 - step)
        outs = [_run(lin, x, dy, autocast, mode != "x_no_grad", mode != "eval") for lin in (kern, emu)]
        (yk, gk), (ye, ge) = outs
        assert yk.dtype == ye.dtype and yk.shape == ye.shape
        _same(yk, ye, f"step {step}: y")
        assert gk.keys() == ge.keys()
        for name in gk:
            a, b = gk[name], ge[name]
            assert (a is None) == (b is None), f"step {step}: {name} present on one side only"
            if a is not None:
                _same(a, b, f"step {step}: {name}")
        if r.scaling == "delayed":
            for name in F8._FP8_BUFFERS:
                assert torch.equal(_bits(getattr(kern, name)), _bits(getattr(emu, name))), f"step {step}: {name}"
    if r.scaling == "delayed" and mode != "eval":
        assert bool((kern.fp8_state[:, 2:] > 0).any()), "the history never recorded an amax"
        assert bool((kern.fp8_grad_state[:, 2:] > 0).any()), "the gradient history never recorded an amax"


def test_kernel_path_runs_one_op_per_pass(kernel_path_on_cpu):
    """The layer reaches the library through fp8_linear_fwd / fp8_linear_bwd alone: no scale
    arithmetic, casts or transposes as separate torch ops."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.names = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names.append(str(func.overloadpacket))
            return func(*args, **(kwargs or {}))

    for recipe in ("fp8", "fp8_delayed"):
        layer = FP8Linear(32, 48, bias=False, recipe=recipe)
        x = torch.randn(16, 32, requires_grad=True)
        rec = Ops()
        with rec:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                y = layer(x)
            y.backward(torch.ones_like(y))
        nvfp4_ops = [o for o in rec.names if o.startswith("nvfp4.")]
        assert nvfp4_ops == ["nvfp4.fp8_linear_fwd", "nvfp4.fp8_linear_bwd"], rec.names
        heavy = [o for o in rec.names if o.split(".")[-1] in ("mul", "div", "abs", "amax", "linalg_vector_norm",
                                                              "clamp", "copy_", "clone", "where", "select")]
        assert not heavy, f"{recipe}: torch ops beside the passes: {heavy}"


def _noting_backend(codes: list, inductor: bool):
    """A torch.compile backend that notes the code of what dynamo traced, then compiles it
    with Inductor, or runs it through AOTAutograd alone (inductor=False: the traced road on
    the CPU, where what matters is the graph — no nvfp4 op in it, the state mutations, the
    padding — and Inductor's CPU code generation is not what runs in training; torch 2.11's
    fails to compile the delayed-scaling update. Inductor's numerics on that road are checked
    on the GPU.)"""
    def backend(gm, example_inputs):
        codes.extend(m.code for _, m in gm.named_modules() if isinstance(m, torch.fx.GraphModule))
        if inductor:
            from torch._inductor.compile_fx import compile_fx
            return compile_fx(gm, example_inputs)
        return torch._dynamo.lookup_backend("aot_eager")(gm, example_inputs)
    return backend


def _same_state_then_zero_grad(model, ref, step) -> None:
    """The delayed-scaling buffers of both models equal bit for bit; gradients cleared."""
    for (name, b), c in zip(model.named_buffers(), ref.buffers()):
        assert torch.equal(_bits(b), _bits(c)), f"step {step}: {name}"
    model.zero_grad(set_to_none=True)
    ref.zero_grad(set_to_none=True)


def _assert_road(codes: list, traced: bool) -> None:
    """What dynamo traced: the casts as torch ops and torch._scaled_mm (traced), or the two
    nvfp4 ops of the kernel path."""
    text = "\n".join(codes)
    assert ("fp8_linear_fwd" in text and "fp8_linear_bwd" in text) == (not traced), text
    assert not traced or "_scaled_mm" in text, text


@pytest.mark.parametrize("inductor_casts", [True, False], ids=["traced", "opaque"])
@pytest.mark.parametrize("recipe", ["fp8", "fp8_delayed"])
def test_kernel_path_compiled_equals_eager(kernel_path_on_cpu, recipe, inductor_casts):
    """torch.compile (fullgraph) of two FP8 layers: the same outputs, gradients and delayed
    state as eager (the kernel path), bit for bit, over steps (the state is mutated by the
    forward and the backward). Compiled, the casts are either traced as torch ops
    (inductor_casts) or the kernel path's two ops."""
    torch.manual_seed(0)
    r = F8.get_fp8_recipe(recipe).replace(amax_history_len=8, inductor_casts=inductor_casts)
    model = torch.nn.Sequential(FP8Linear(32, 64, bias=False, recipe=r), FP8Linear(64, 32, bias=True, recipe=r))
    ref = copy.deepcopy(model)

    def fwd(mod):
        def f(x):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return mod(x)
        return f

    codes = []
    torch._dynamo.reset()
    compiled = torch.compile(fwd(model), fullgraph=True, backend=_noting_backend(codes, inductor=not inductor_casts))
    g = torch.Generator().manual_seed(1)
    for step in range(3):
        x = torch.randn(48, 32, generator=g) * (step + 1)
        dy = torch.randn(48, 32, generator=g).bfloat16()
        xa, xb = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
        ya = compiled(xa)
        ya.backward(dy)
        yb = fwd(ref)(xb)
        yb.backward(dy)
        assert torch.equal(ya, yb), f"step {step}: y"
        assert torch.equal(xa.grad, xb.grad), f"step {step}: dx"
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            assert torch.equal(p.grad, q.grad), f"step {step}: {name}.grad"
        _same_state_then_zero_grad(model, ref, step)
    _assert_road(codes, traced=inductor_casts)


# ----------------------------------------------------------------------------- the ops themselves
CUR = (0, 1, 0, 0, 0, 1)        # E4M3 forward, E5M2 backward, current scaling, fast accumulation
DEL = (0, 1, 1, 1, 0, 1)        # delayed scaling, updating


def test_ops_shapes_and_meta():
    x, w = torch.randn(32, 64), torch.randn(48, 64)
    y, xt, wt, sc = P.fp8_linear_fwd(x, w, None, None, CUR, 0.0, True, True)
    assert y.shape == (32, 48) and y.dtype == torch.float32
    assert xt.shape == (64, 32) and xt.dtype == E4M3 and wt.shape == (64, 48) and sc.shape == (16,)
    # each scalar in a 16-byte slot: cuBLASLt refuses scale pointers that are not 16-byte aligned
    assert sc.data_ptr() % 16 == 0 and sc[4].data_ptr() % 16 == 0
    _, xt0, wt0, _ = P.fp8_linear_fwd(x, w, None, None, CUR, 0.0, False, False)
    assert xt0.numel() == 0 and wt0.numel() == 0
    dx, dw = P.fp8_linear_bwd(torch.randn(32, 48), xt, wt, sc, None, CUR, 0.0, True, True, torch.float32)
    assert dx.shape == (32, 64) and dw.shape == (48, 64) and dw.dtype == torch.float32
    # the meta device: shapes and dtypes, nothing run
    xm, wm = x.to("meta").bfloat16(), w.to("meta")
    ym, xtm, wtm, scm = P.fp8_linear_fwd(xm, wm, None, None, CUR, 0.0, True, True)
    assert ym.device.type == "meta" and ym.shape == (32, 48) and ym.dtype == torch.bfloat16 and xtm.shape == (64, 32)
    dxm, dwm = P.fp8_linear_bwd(torch.empty(32, 48, device="meta", dtype=torch.bfloat16), xtm, wtm, scm, None,
                                CUR, 0.0, True, True, torch.float32)
    assert dxm.shape == (32, 64) and dwm.shape == (48, 64)


def test_ops_refuse_bad_arguments():
    x, w = torch.randn(32, 64), torch.randn(48, 64)
    st = torch.zeros(2, 5)  # the forward's state: rows x, w; per row the scale, 4 history entries
    fwd = P.fp8_linear_fwd
    with pytest.raises(ValueError, match="x: in_features must be a multiple of 16"):
        fwd(torch.randn(32, 40), torch.randn(48, 40), None, None, CUR, 0.0, False, False)
    with pytest.raises(ValueError, match="w: out_features must be a multiple of 16"):
        fwd(x, torch.randn(40, 64), None, None, CUR, 0.0, False, False)
    with pytest.raises(ValueError, match="w: expected a weight"):
        fwd(x, torch.randn(48, 32), None, None, CUR, 0.0, False, False)
    with pytest.raises(ValueError, match="x: with save_xt the rows"):
        fwd(torch.randn(30, 64), w, None, None, CUR, 0.0, True, False)
    with pytest.raises(ValueError, match="bias"):
        fwd(x, w, torch.randn(40), None, CUR, 0.0, False, False)
    with pytest.raises(ValueError, match="cfg: expected 6 ints"):
        fwd(x, w, None, None, (0, 1, 0), 0.0, False, False)
    with pytest.raises(ValueError, match="cfg: every entry must be 0 or 1"):
        fwd(x, w, None, None, (2, 1, 0, 0, 0, 1), 0.0, False, False)
    with pytest.raises(ValueError, match="state: given with current scaling"):
        fwd(x, w, None, st, CUR, 0.0, False, False)
    with pytest.raises(ValueError, match="state: delayed scaling .* needs the layer's state"):
        fwd(x, w, None, None, DEL, 0.0, False, False)
    with pytest.raises(ValueError, match=r"state: expected float32 \[2, 1 \+ L\] \(the forward's state"):
        fwd(x, w, None, torch.zeros(3, 5), DEL, 0.0, False, False)
    with pytest.raises(ValueError, match=r"state: expected float32 \[2, 1 \+ L\]"):
        fwd(x, w, None, torch.zeros(2, 1), DEL, 0.0, False, False)  # a scale and no history
    with pytest.raises(ValueError, match="state"):
        fwd(x, w, None, st.double(), DEL, 0.0, False, False)
    with pytest.raises(ValueError, match="state"):
        fwd(x, w, None, torch.zeros(5, 2).t(), DEL, 0.0, False, False)  # not contiguous
    y, xt, wt, sc = fwd(x, w, None, None, CUR, 0.0, True, True)
    bwd = P.fp8_linear_bwd
    dy = torch.randn(32, 48)
    with pytest.raises(ValueError, match=r"xt: expected X\^T"):
        bwd(dy, xt[:, :16].contiguous(), wt, sc, None, CUR, 0.0, True, True, torch.float32)
    with pytest.raises(ValueError, match="xt"):
        bwd(dy, xt.view(torch.uint8), wt, sc, None, CUR, 0.0, True, True, torch.float32)
    with pytest.raises(ValueError, match=r"wt: expected W\^T"):
        bwd(dy, xt, wt[:, :16].contiguous(), sc, None, CUR, 0.0, True, True, torch.float32)
    with pytest.raises(ValueError, match="scalars"):
        bwd(dy, xt, wt, sc[:2], None, CUR, 0.0, True, True, torch.float32)
    with pytest.raises(ValueError, match="dy: with need_dw the rows"):
        bwd(torch.randn(30, 48), xt, wt, sc, None, CUR, 0.0, False, True, torch.float32)
    with pytest.raises(TypeError, match="dw_dtype"):
        bwd(dy, xt, wt, sc, None, CUR, 0.0, True, True, torch.float64)
    # the backward takes the gradient's state (row dy), not the forward's
    with pytest.raises(ValueError, match=r"state: expected float32 \[1, 1 \+ L\] \(the gradient's state"):
        bwd(dy, xt, wt, sc, st, DEL, 0.0, True, True, torch.float32)
    with pytest.raises(ValueError, match="state: given with current scaling"):
        bwd(dy, xt, wt, sc, torch.zeros(1, 5), CUR, 0.0, True, True, torch.float32)


def test_delayed_state_addressed_by_role():
    """fp8_linear_fwd updates and records the x and w rows of the forward's state ([scale,
    history...] each) and writes nothing else; fp8_linear_bwd the dy row of the gradient's
    state alone."""
    x, w = torch.randn(32, 64) * 3, torch.randn(48, 64) * 0.5
    st, gst = torch.zeros(2, 5), torch.zeros(1, 5)
    st[:, 0] = torch.tensor([2.0, 3.0])   # scales
    st[:, 1] = torch.tensor([5.0, 6.0])   # newest history entries
    gst[0, 0], gst[0, 1] = 4.0, 7.0
    g0 = gst.clone()
    y, xt, wt, sc = P.fp8_linear_fwd(x, w, None, st, DEL, 0.0, True, True)
    # each forward role: rolled, then the new amax in slot 0; the scale from the old slot-0 value
    f32 = torch.tensor  # the scale is an fp32 quotient
    assert torch.equal(st[0], torch.stack([f32(448.0) / 5.0, x.abs().max(), f32(0.0), f32(0.0), f32(5.0)]))
    assert torch.equal(st[1], torch.stack([f32(448.0) / 6.0, w.abs().max(), f32(0.0), f32(0.0), f32(6.0)]))
    assert torch.equal(gst, g0)  # the forward leaves the gradient's state alone
    st1 = st.clone()
    dy = torch.randn(32, 48)
    P.fp8_linear_bwd(dy, xt, wt, sc, gst, DEL, 0.0, True, True, torch.float32)
    assert torch.equal(gst[0], torch.stack([f32(57344.0) / 7.0, dy.abs().max(), f32(0.0), f32(0.0), f32(7.0)]))
    assert torch.equal(st, st1)  # the backward leaves the forward's state alone
    # without the update flag: the state is only read
    st0, gst0 = st.clone(), gst.clone()
    nu = (0, 1, 1, 0, 0, 1)
    P.fp8_linear_fwd(x, w, None, st, nu, 0.0, True, True)
    P.fp8_linear_bwd(dy, xt, wt, sc, gst, nu, 0.0, True, True, torch.float32)
    assert torch.equal(st, st0) and torch.equal(gst, gst0)


# ----------------------------------------------------------------------------- GPU
needs_fp8_gpu = pytest.mark.skipif(not (torch.cuda.is_available() and F8._HAS_CUDA_KERNELS and F8.fp8_supported()[0]),
                                   reason="needs a CUDA GPU with FP8 and a CUDA build of nvfp4")


@needs_fp8_gpu
@pytest.mark.parametrize("recipe", ["fp8", "fp8_delayed"])
@pytest.mark.parametrize("shape", [((4, 50), 256, 384), (16, 64, 16), (1, 48, 32)], ids=["3d_pad", "m16", "m1"])
@pytest.mark.parametrize("autocast", [torch.bfloat16, torch.float16, None], ids=["bf16", "f16", "f32"])
def test_gpu_kernel_path_equals_torch_op_path(recipe, shape, autocast):
    """The kernel path and the torch-op casts (fused_cast=False) on the GPU: the same y, dx,
    dW, db and delayed state, bit for bit, over steps (both run torch._scaled_mm on the same
    operands)."""
    m, k, n = shape
    torch.manual_seed(0)
    base = torch.nn.Linear(k, n, bias=True)
    r = F8.get_fp8_recipe(recipe).replace(amax_history_len=5)
    fused = FP8Linear.from_linear(copy.deepcopy(base), r).cuda()
    ref = FP8Linear.from_linear(copy.deepcopy(base), r.replace(fused_cast=False)).cuda()
    lead = m if isinstance(m, tuple) else (m,)
    g = torch.Generator().manual_seed(2)
    for step in range(3):
        x = (torch.randn(*lead, k, generator=g) * (step + 1)).cuda()
        outs = []
        for lin in (fused, ref):
            xi = x.clone().requires_grad_(True)
            with torch.autocast("cuda", dtype=autocast or torch.bfloat16, enabled=autocast is not None):
                y = lin(xi)
            y.float().square().sum().backward()
            outs.append((y.detach(), xi.grad, lin.weight.grad.clone(), lin.bias.grad.clone()))
            lin.zero_grad(set_to_none=True)
        for name, a, b in zip(("y", "dx", "dw", "db"), *outs):
            assert torch.equal(a, b), f"step {step}: {name}: {first_mismatch(a.float(), b.float())}"
        if recipe == "fp8_delayed":
            for name in F8._FP8_BUFFERS:
                assert torch.equal(_bits(getattr(fused, name)), _bits(getattr(ref, name))), f"step {step}: {name}"


@pytest.mark.parametrize("recipe", ["fp8", "fp8_delayed"])
def test_direct_eager_road_equals_the_dispatched_ops(kernel_path_on_cpu, monkeypatch, recipe):
    """Plain eager calls run the passes' implementations without the dispatcher (one call
    each per pass); every pass through the dispatcher gives the same outputs, gradients and
    delayed-scaling state, bit for bit (the same function on the same inputs)."""
    torch.manual_seed(5)
    layers = [FP8Linear(32, 48, bias=True, recipe=recipe) for _ in range(2)]
    layers[1].load_state_dict(layers[0].state_dict())
    xs = [torch.randn(24, 32) for _ in range(3)]
    runs = []
    for layer, direct in zip(layers, (True, False)):
        calls = {"fwd": 0, "bwd": 0}
        fwd_impl, bwd_impl = P._fwd_impl, P._bwd_impl

        def spy_fwd(*a):
            calls["fwd"] += 1
            return fwd_impl(*a)

        def spy_bwd(*a):
            calls["bwd"] += 1
            return bwd_impl(*a)

        monkeypatch.setattr(P, "_fwd_impl", spy_fwd)
        monkeypatch.setattr(P, "_bwd_impl", spy_bwd)
        if not direct:
            monkeypatch.setattr(P, "_direct", lambda *a: False)
        out = []
        for x in xs:
            x = x.clone().requires_grad_(True)
            y = layer(x)
            y.backward(torch.ones_like(y))
            out += [y.detach(), x.grad, layer.weight.grad.clone(), layer.bias.grad.clone()]
            layer.weight.grad = layer.bias.grad = None
        out += [b.clone() for b in layer.buffers()]
        # direct: the implementations called by name; dispatched: reached through the
        # dispatcher's registration (which the spies do not replace)
        n = 3 if direct else 0
        assert calls == {"fwd": n, "bwd": n}, (direct, calls)
        monkeypatch.undo()
        monkeypatch.setattr(F8, "_KERNEL_DEVICES", frozenset({"cpu"}) | F8._KERNEL_DEVICES)
        runs.append(out)
    assert len(runs[0]) == len(runs[1])
    for i, (a, b) in enumerate(zip(*runs)):
        assert a.dtype == b.dtype and torch.equal(_bits(a), _bits(b)), i


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=needs_fp8_gpu)])
@pytest.mark.parametrize("recipe", ["fp8", "fp8_delayed"])
@pytest.mark.parametrize("autocast", [torch.bfloat16, torch.float16, None], ids=["bf16", "f16", "f32"])
def test_compiled_equals_eager_with_fused_producers(request, device, recipe, autocast):
    """torch.compile (fullgraph) of two FP8 layers, each fed by an op Inductor fuses with their
    casts (x * 1.5, a ReLU), against the same model in eager (the kernel path): y, dx, W's
    gradients and the delayed state bit for bit over steps, with 50 x 4 tokens (padded for
    wgrad). BF16 and FP32 inputs take the traced road (no nvfp4 op left in the graph: the
    casts compiled by Inductor, the GEMMs torch._scaled_mm), FP16 inputs the kernel ops.
    The bias gradient is a torch sum over tokens on both roads, whose order Inductor chooses:
    within FP32 summation error of eager's. (ReLU, not GELU: an op whose compiled and eager
    values differ would make the layers' inputs differ.) On the CPU the kernel path runs on
    the library's CPU casts and torch's CPU _scaled_mm, and the traced road without Inductor
    (_noting_backend)."""
    if device == "cpu":
        request.getfixturevalue("kernel_path_on_cpu")
    torch.manual_seed(0)
    r = F8.get_fp8_recipe(recipe).replace(amax_history_len=5, inductor_casts=True)  # off by default
    model = torch.nn.Sequential(FP8Linear(64, 96, bias=True, recipe=r), torch.nn.ReLU(),
                                FP8Linear(96, 48, bias=False, recipe=r)).to(device)
    ref = copy.deepcopy(model)

    def fwd(mod):
        def f(x):
            with torch.autocast(device, dtype=autocast or torch.bfloat16, enabled=autocast is not None):
                return mod(x * 1.5)
        return f

    codes = []
    torch._dynamo.reset()  # one code object for every parametrization: no recompile limit across them
    traced_road = autocast is not torch.float16
    compiled = torch.compile(fwd(model), fullgraph=True,
                             backend=_noting_backend(codes, inductor=device == "cuda" or not traced_road))
    dy1 = []  # the first layer's output gradient in the eager model
    ref[0].register_full_backward_hook(lambda mod, gin, gout: dy1.__setitem__(slice(None), [gout[0].detach()]))
    g = torch.Generator().manual_seed(4)
    for step in range(3):
        x = (torch.randn(4, 50, 64, generator=g) * 2.0 ** (step - 1)).to(device, autocast or torch.float32)
        xa, xb = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
        ya = compiled(xa)
        yb = fwd(ref)(xb)
        dy = torch.randn(ya.shape, generator=g).to(device, ya.dtype)
        ya.backward(dy)
        yb.backward(dy)
        assert torch.equal(ya, yb), f"step {step}: y: {first_mismatch(ya.float(), yb.float())}"
        assert torch.equal(xa.grad, xb.grad), f"step {step}: dx: {first_mismatch(xa.grad.float(), xb.grad.float())}"
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            if name.endswith("bias"):
                # 200 FP32 additions per column in any order: |error| <= 200 * 2^-24 * sum |dY1|
                colsum = dy1[0].reshape(-1, dy1[0].shape[-1]).float().abs().sum(0)
                err = (p.grad - q.grad).abs()
                assert torch.all(err <= 2.0 ** -16 * colsum), f"step {step}: {name}: {err.max()}"
            else:
                assert torch.equal(p.grad, q.grad), f"step {step}: {name}.grad: {first_mismatch(p.grad, q.grad)}"
        _same_state_then_zero_grad(model, ref, step)
    _assert_road(codes, traced=traced_road)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=needs_fp8_gpu)])
@pytest.mark.parametrize("inductor_casts", [True, False], ids=["traced", "opaque"])
def test_compiled_delayed_state_two_forwards_before_their_backwards(request, device, inductor_casts):
    """Delayed scaling, compiled (fullgraph) against eager: two micro-batches forward, then one
    backward through both (the engine runs the second's first), over steps. The forward's
    state is written by forwards only and the gradient's by backwards only, so a compiled
    backward updates the layer's gradient state as eager does, not a copy taken when its
    forward ran (which a later forward would have made stale): y, dx, dW and all four
    buffers bit for bit, on both roads (traced casts, or the kernel path's ops). On the CPU
    the kernel path runs on the library's CPU casts and torch's CPU _scaled_mm, the traced
    road through AOTAutograd alone (_noting_backend)."""
    if device == "cpu":
        request.getfixturevalue("kernel_path_on_cpu")
    torch.manual_seed(0)
    r = F8.get_fp8_recipe("fp8_delayed").replace(amax_history_len=4, inductor_casts=inductor_casts)
    model = torch.nn.Sequential(FP8Linear(64, 96, bias=False, recipe=r), torch.nn.ReLU(),
                                FP8Linear(96, 48, bias=False, recipe=r)).to(device)
    ref = copy.deepcopy(model)

    def fwd(mod):
        def f(x):
            with torch.autocast(device, dtype=torch.bfloat16):
                return mod(x)
        return f

    codes = []
    torch._dynamo.reset()
    compiled = torch.compile(fwd(model), fullgraph=True,
                             backend=_noting_backend(codes, inductor=device == "cuda" or not inductor_casts))
    g = torch.Generator().manual_seed(5)
    for step in range(3):
        xs = [(torch.randn(32, 64, generator=g) * 2.0 ** (2 * i - step)).to(device) for i in range(2)]
        dys = [(torch.randn(32, 48, generator=g) * 2.0 ** (3 * i + step)).to(device, torch.bfloat16)
               for i in range(2)]
        xa = [x.clone().requires_grad_(True) for x in xs]
        xb = [x.clone().requires_grad_(True) for x in xs]
        ya = [compiled(x) for x in xa]
        yb = [fwd(ref)(x) for x in xb]
        torch.autograd.backward(ya, dys)
        torch.autograd.backward(yb, dys)
        for i in range(2):
            assert torch.equal(ya[i], yb[i]), f"step {step}, micro-batch {i}: y"
            assert torch.equal(xa[i].grad, xb[i].grad), \
                f"step {step}, micro-batch {i}: dx: {first_mismatch(xa[i].grad.float(), xb[i].grad.float())}"
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            assert torch.equal(p.grad, q.grad), f"step {step}: {name}.grad: {first_mismatch(p.grad, q.grad)}"
        _same_state_then_zero_grad(model, ref, step)
    assert set(dict(model.named_buffers())) == {f"{i}.{b}" for i in (0, 2) for b in F8._FP8_BUFFERS}
    assert bool((model[0].fp8_grad_state[:, 1:] > 0).all()), "each of the 4 backward passes recorded its amax"
    _assert_road(codes, traced=inductor_casts)
