"""Linear.set_saved_operands: the backward's Xᵀ and Wᵀ kept as FP4 codes (the default) or as
their decoded BF16 values (no decode pass before the backward GEMMs). The same values reach
the same GEMMs, so every output and gradient must be the same bits in both modes; the saved
tensors' dtype says which form was kept. CPU tests check the setting, its refusals and the
linear_bwd checks of a decoded buffer; the GPU tests check the bits, the saved forms, the
kernels launched, CUDA-graph replay and torch.compile."""
import copy

import pytest
import torch
from torch import nn

import nvfp4
import nvfp4.nn as nn4
from nvfp4.nn import ops
from conftest import assert_equal

HAS_CUDA = torch.cuda.is_available() and nvfp4.is_supported("cutlass", "cuda")
cuda_only = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU with an nvfp4 GEMM backend")


def _saved_forms(layer, x):
    """The dtypes and sizes of what the layer's forward saves for its backward (x needing a
    gradient: the forward then saves W^T for dgrad too)."""
    x = x.detach().clone().requires_grad_(True)
    seen = []

    def pack(t):
        seen.append((t.dtype, t.numel()))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = layer(x)
    return y, seen


def _step(layer, x, dy):
    x = x.detach().clone().requires_grad_(True)
    for p in layer.parameters():
        p.grad = None
    y = layer(x)
    y.backward(dy)
    out = {"y": y.detach(), "dx": x.grad}
    out.update({f"d{n}": p.grad for n, p in layer.named_parameters()})
    out["sr_step"] = layer.sr_step.clone()
    return out


def _pair(recipe="nvfp4", k=256, n=192, shape=(3, 70), dtype=torch.bfloat16, wdtype=torch.float32, device="cpu",
          bias=True, seed=0):
    torch.manual_seed(seed)
    lin = nn.Linear(k, n, bias=bias).to(device=device, dtype=wdtype)
    a = nn4.Linear.from_linear(copy.deepcopy(lin), recipe, layer_index=3)
    b = nn4.Linear.from_linear(copy.deepcopy(lin), recipe, layer_index=3)
    b.set_saved_operands("decoded")
    x = torch.randn(*shape, k, device=device, dtype=dtype)
    dy = torch.randn(*shape, n, device=device, dtype=dtype)
    return a, b, x, dy


def _same_steps(a, b, x, dy, steps=3):
    for s in range(steps):
        ra, rb = _step(a, x, dy), _step(b, x, dy)
        assert ra.keys() == rb.keys()
        for key in ra:
            assert_equal(rb[key], ra[key], f"step {s}, {key}")


# ------------------------------------------------------------------------------ the setting
def test_setting_and_refusals():
    layer = nn4.Linear(64, 32)
    assert layer.saved_operands == "fp4"
    assert layer._plan.cfg[ops.LinearConfig.SAVE_DECODED] == 0
    layer.set_saved_operands("decoded")
    assert layer._plan.cfg[ops.LinearConfig.SAVE_DECODED] == 1
    assert "saved_operands=decoded" in repr(layer)
    # the recipe's own switches are kept when the setting changes, and survive a recipe change
    layer.recipe = "no_sr"
    assert layer._plan.cfg[ops.LinearConfig.SAVE_DECODED] == 1
    for name in ("bf16", "mx_baseline"):
        other = nn4.Linear(64, 32, recipe=name)
        with pytest.raises(ValueError, match="mode: 'decoded' applies to the fused NVFP4 recipes"):
            other.set_saved_operands("decoded")
        other.set_saved_operands("fp4")
        assert other.saved_operands == "fp4"
    for bad in ("bf16", None, True, "Decoded"):
        with pytest.raises(ValueError, match="mode"):
            layer.set_saved_operands(bad)
    assert layer.saved_operands == "decoded"  # a refused value changes nothing
    layer.set_saved_operands("fp4")
    assert layer._plan.cfg[ops.LinearConfig.SAVE_DECODED] == 0 and "saved_operands" not in repr(layer)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 32))
    nn4.convert(model, exclude=[])
    assert nn4.set_saved_operands(model, "decoded") == 2
    assert all(m.saved_operands == "decoded" for m in model.modules() if isinstance(m, nn4.Linear))
    # a model with a layer whose recipe refuses the mode: named, and nothing changed
    nn4.set_saved_operands(model, "fp4")
    model[2].recipe = "mx_baseline"
    with pytest.raises(ValueError, match="layer '2'"):
        nn4.set_saved_operands(model, "decoded")
    assert model[0].saved_operands == "fp4" and model[0]._plan.cfg[ops.LinearConfig.SAVE_DECODED] == 0
    with pytest.raises(ValueError, match="mode: must be one of"):
        nn4.set_saved_operands(model, "codes")
    model[2].recipe = "nvfp4"
    plain = model[0].to_linear()
    assert type(plain) is nn.Linear and "saved_operands" not in plain.__dict__


def test_cpu_keeps_codes_and_bits():
    """The CPU reference reads codes: "decoded" keeps codes there, and the same bits."""
    a, b, x, dy = _pair()
    _, fa = _saved_forms(a, x)
    _, fb = _saved_forms(b, x)
    assert fa == fb and fa and all(dt == torch.uint8 for dt, _ in fa[:2])
    _same_steps(a, b, x, dy)


def test_linear_bwd_checks_a_decoded_buffer():
    """linear_bwd reads a bfloat16 X^T / W^T as decoded values: their size is checked by name,
    and another dtype is refused naming the buffer."""
    m, k, n = 32, 64, 48
    dy = torch.randn(m, n)
    counter = torch.zeros((), dtype=torch.int64)
    cfg = nn4.Linear(k, n)._plan.cfg
    good_w = torch.zeros(ops.packed_nbytes(k, n), dtype=torch.uint8)
    need = (k * m * 2 + 255) // 256 * 256 // 2 + 128
    with pytest.raises(ValueError, match="xt: expected decoded values"):
        ops.linear_bwd(dy, torch.zeros(need - 1, dtype=torch.bfloat16), good_w, counter, cfg, k, True, True,
                       torch.float32)
    with pytest.raises(ValueError, match="xt: expected decoded values"):
        ops.linear_bwd(dy, torch.zeros(2, need // 2, dtype=torch.bfloat16), good_w, counter, cfg, k, True, True,
                       torch.float32)
    with pytest.raises(ValueError, match="xt: expected uint8 .* or bfloat16"):
        ops.linear_bwd(dy, torch.zeros(need, dtype=torch.float16), good_w, counter, cfg, k, True, True,
                       torch.float32)
    need_w = (k * n * 2 + 255) // 256 * 256 // 2 + 128
    good_x = torch.zeros(ops.packed_nbytes(k, m), dtype=torch.uint8)
    with pytest.raises(ValueError, match="wt: expected decoded values"):
        ops.linear_bwd(dy, good_x, torch.zeros(need_w - 1, dtype=torch.bfloat16), counter, cfg, k, True, True,
                       torch.float32)
    if not HAS_CUDA:
        # the right size, on the CPU: no runner there reads decoded operands, said by name
        with pytest.raises(RuntimeError, match="decoded"):
            ops.linear_bwd(dy, torch.zeros(need, dtype=torch.bfloat16), good_w, counter, cfg, k, True, True,
                           torch.float32)
    assert counter.item() == 0  # nothing ran


# ------------------------------------------------------------------------------ GPU
def _kernels(fn):
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


@cuda_only
@pytest.mark.parametrize("recipe", ["nvfp4", "no_rht", "no_sr", "no_2d", "fwd_only"])
@pytest.mark.parametrize("dtype,wdtype", [(torch.bfloat16, torch.float32), (torch.bfloat16, torch.bfloat16),
                                          (torch.float32, torch.float32), (torch.float16, torch.float32)])
def test_same_bits_cuda(recipe, dtype, wdtype):
    a, b, x, dy = _pair(recipe, dtype=dtype, wdtype=wdtype, device="cuda")
    _same_steps(a, b, x, dy)


@cuda_only
@pytest.mark.parametrize("k,n,shape,bias", [(256, 192, (3, 70), True), (768, 768, (2048,), False),
                                            (128, 2304, (4, 256), True), (3072, 768, (1000,), True),
                                            (16, 16, (1,), False), (64, 48, (2, 3, 5), True)])
def test_same_bits_shapes_cuda(k, n, shape, bias):
    a, b, x, dy = _pair(k=k, n=n, shape=shape, device="cuda", bias=bias, seed=k + n)
    _same_steps(a, b, x, dy, steps=2)


def _takes(m, n, k, out_dtype):
    dev = torch.device("cuda")
    return ops._ops.gemm_takes_decoded(m, n, k, 0, out_dtype, None, dev, (1, dev.index or 0, 0))


@cuda_only
def test_saved_forms_and_kernels_cuda():
    """Where the backward GEMMs' runner takes decoded operands, X^T and W^T are saved as
    bfloat16 (2 bytes an element) and the backward launches no decode pass; the default keeps
    codes and decodes them."""
    m, k, n = 4096, 768, 768
    a, b, x, dy = _pair(k=k, n=n, shape=(m,), device="cuda")
    if not (_takes(n, k, m, torch.float32) and _takes(m, k, n, torch.bfloat16)):
        pytest.skip("the GEMM runner of these shapes does not read decoded operands on this GPU")
    _, fa = _saved_forms(a, x)
    _, fb = _saved_forms(b, x)
    assert [dt for dt, _ in fa[:2]] == [torch.uint8, torch.uint8]
    assert [dt for dt, _ in fb[:2]] == [torch.bfloat16, torch.bfloat16]
    # X^T [k, m] and W^T [k, n] decoded, with their amax in a 256-byte slot
    assert fb[0][1] == (k * m * 2 + 255) // 256 * 256 // 2 + 128
    assert fb[1][1] == (k * n * 2 + 255) // 256 * 256 // 2 + 128
    assert fb[0][1] * 2 > 3 * fa[0][1]  # the memory the mode trades
    xa = x.detach().clone().requires_grad_(True)
    xb = x.detach().clone().requires_grad_(True)
    ya, yb = a(xa), b(xb)
    ka = _kernels(lambda: ya.backward(dy))
    kb = _kernels(lambda: yb.backward(dy))
    prep = [s for s in ka if "gemm_prep_kernel" in s]
    assert len(prep) == 2, ka  # W^T before dgrad, X^T before wgrad
    assert not any("gemm_prep_kernel" in s for s in kb), kb
    assert len(kb) == len(ka) - 2, (ka, kb)
    assert_equal(xb.grad, xa.grad, "dx")
    assert_equal(b.weight.grad, a.weight.grad, "dw")


@cuda_only
def test_weight_cache_keeps_codes_cuda():
    """With the weight in the layer's cache (set_weight_reuse), W^T stays codes; X^T is decoded."""
    m, k, n = 4096, 768, 768
    a, b, x, dy = _pair(k=k, n=n, shape=(m,), device="cuda")
    if not _takes(n, k, m, torch.float32):
        pytest.skip("the wgrad runner of these shapes does not read decoded operands on this GPU")
    for layer in (a, b):
        layer.set_weight_reuse("store")
    ra, rb = _step(a, x, dy), _step(b, x, dy)
    for key in ra:
        assert_equal(rb[key], ra[key], f"store, {key}")
    for layer in (a, b):
        layer.set_weight_reuse("reuse")
    _, fb = _saved_forms(b, x)
    assert fb[0][0] == torch.bfloat16  # X^T decoded
    assert all(dt != torch.bfloat16 for dt, _ in fb[1:2])  # W^T: a uint8 view of the cache
    ra, rb = _step(a, x, dy), _step(b, x, dy)
    for key in ra:
        assert_equal(rb[key], ra[key], f"reuse, {key}")


@cuda_only
def test_cuda_graph_replay_cuda():
    """A captured step with decoded saved operands replays the eager steps' bits (the
    stochastic rounding counter advancing on each replay)."""
    a, b, x, dy = _pair(k=256, n=256, shape=(512,), device="cuda")
    want = [_step(a, x, dy) for _ in range(3)]
    xs = x.detach().clone().requires_grad_(True)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up off the capture
        b(xs).backward(dy)
    torch.cuda.current_stream().wait_stream(s)
    b.sr_step.zero_()
    for p in [*b.parameters(), xs]:
        p.grad = None
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        yg = b(xs)
        yg.backward(dy)
    b.sr_step.zero_()
    for step, w in enumerate(want):
        for p in [*b.parameters(), xs]:
            p.grad.zero_()
        g.replay()
        torch.cuda.synchronize()
        assert_equal(yg.detach(), w["y"], f"replay {step}: y")
        assert_equal(xs.grad, w["dx"], f"replay {step}: dx")
        assert_equal(b.weight.grad, w["dweight"], f"replay {step}: dw")


@cuda_only
def test_compiled_equals_eager_cuda():
    torch._dynamo.reset()
    torch.manual_seed(1)
    x = torch.randn(4, 256, 256, device="cuda", dtype=torch.bfloat16)
    g = torch.randn(4, 256, 256, device="cuda", dtype=torch.bfloat16)
    mlp = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 256)).cuda()
    nn4.convert(mlp, exclude=[])
    nn4.set_saved_operands(mlp, "decoded")
    comp = copy.deepcopy(mlp)
    run = torch.compile(comp)
    for step in range(3):
        outs = []
        for model, fn in ((mlp, mlp), (comp, run)):
            xi = x.detach().clone().requires_grad_(True)
            for p in model.parameters():
                p.grad = None
            y = fn(xi)
            (y.float() * g).sum().backward()
            outs.append({"y": y.detach(), "dx": xi.grad, **{n: p.grad for n, p in model.named_parameters()}})
        for key in outs[0]:
            if not key.endswith("bias"):
                assert_equal(outs[1][key], outs[0][key], f"step {step}, {key}")


def test_example_trainer_flag(capsys):
    """examples/train.py --saved-operands: applied to the converted layers, refused by name
    for recipes the fused passes do not run."""
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
    try:
        import train as T
    finally:
        sys.path.pop(0)
    args = T.parse_args(["--smoke", "--saved-operands", "decoded"])
    assert args.name.endswith("-saved_decoded")
    model = T.build_model(args, torch.device("cpu"))
    names = T.convert_model(model, args, T.make_recipe(args))
    layers = [m for m in model.modules() if isinstance(m, nn4.Linear)]
    assert names and layers and all(m.saved_operands == "decoded" for m in layers)
    for recipe in ("bf16", "fp8", "mx_baseline"):
        with pytest.raises(SystemExit):
            T.parse_args(["--smoke", "--saved-operands", "decoded", "--recipe", recipe])
        assert "--saved-operands: applies to the fused NVFP4 recipes" in capsys.readouterr().err
