"""Meta tensors as torch has them: nvfp4's layers and ops on meta inputs return meta outputs
of the right shape and dtype (model builders, shape propagation, FSDP2's meta-device
initialization) and run no kernel; a meta operand beside a real one is refused by name."""
import copy

import pytest
import torch
from torch import nn

import nvfp4
import nvfp4.nn as nn4
from nvfp4 import _ops

REF = nn4.get_recipe("nvfp4", backend="reference")


@pytest.fixture
def no_kernels(monkeypatch):
    """Fails the test if anything reaches the library."""
    def refuse(*a, **k):
        raise AssertionError("a kernel ran on meta tensors")
    for name in ("quantize_raw", "gemm_raw", "quantize_into", "dequantize_into", "swizzle_into", "gemm_into",
                 "mx_quantize_into", "mx_dequantize_into", "mx_gemm_into", "quantize_dec_raw", "gemm_dec_raw",
                 "gemm_takes_decoded_raw"):
        monkeypatch.setattr(_ops, name, refuse)


@pytest.mark.parametrize("recipe", ["nvfp4", "no_sr", "fwd_only", "mx_baseline", "bf16"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_linear_on_meta(no_kernels, recipe, dtype):
    layer = nn4.Linear(64, 32, device="meta", dtype=dtype, recipe=recipe)
    x = torch.empty(3, 5, 64, device="meta", dtype=dtype, requires_grad=True)
    y = layer(x)
    assert y.device.type == "meta" and y.shape == (3, 5, 32) and y.dtype == dtype
    y.sum().backward()
    assert x.grad.shape == x.shape and x.grad.device.type == "meta"
    assert layer.weight.grad.shape == (32, 64) and layer.weight.grad.dtype == dtype
    assert layer.bias.grad.shape == (32,)


def test_linear_like_nn_linear_on_meta():
    """Same shapes and dtypes as nn.Linear's for the same call."""
    ref, layer = nn.Linear(48, 16, device="meta"), nn4.Linear(48, 16, device="meta")
    for shape in ((7, 48), (2, 3, 48), (48,)):
        x = torch.empty(shape, device="meta")
        a, b = ref(x), layer(x)
        assert (a.shape, a.dtype, a.device) == (b.shape, b.dtype, b.device), shape


def test_frozen_and_lora_on_meta(no_kernels):
    f = nn4.FrozenLinear(32, 48, device="meta")
    x = torch.empty(6, 32, device="meta", requires_grad=True)
    y = f(x)
    assert y.device.type == "meta" and y.shape == (6, 48)
    y.sum().backward()
    assert x.grad.shape == (6, 32)
    lora = nn4.LoRALinear(nn4.FrozenLinear(32, 48, device="meta"), rank=4)
    y = lora(torch.empty(2, 32, device="meta"))
    assert y.device.type == "meta" and y.shape == (2, 48)


def test_meta_beside_cpu_refused_by_name():
    with pytest.raises(ValueError, match="^x: on cpu, but the layer's weight is on meta"):
        nn4.Linear(32, 32, device="meta")(torch.randn(2, 32))
    with pytest.raises(ValueError, match="^x: on meta, but the layer's weight is on cpu"):
        nn4.Linear(32, 32)(torch.empty(2, 32, device="meta"))
    with pytest.raises(ValueError, match="^x: on meta, but the layer's weight is on cpu"):
        nn4.FrozenLinear(32, 32)(torch.empty(2, 32, device="meta"))
    layer = nn4.Linear(32, 32, recipe=REF)
    with pytest.raises(ValueError, match="^w: on meta, but x is on cpu"):
        nn4.ops.linear_fwd(torch.randn(2, 32), layer.weight.to("meta"), None, layer.sr_step, layer._plan.cfg, False,
                           False)


def test_meta_init_then_materialize():
    """FSDP2's way: build on meta, to_empty() on the real device, reset_parameters(). The
    counter (uninitialized after to_empty) starts at 0, and the layer computes what a layer
    built on the CPU with the same weights computes."""
    torch.manual_seed(0)
    model = nn.Sequential(nn4.Linear(32, 64, device="meta", recipe=REF), nn.GELU(),
                          nn4.Linear(64, 32, device="meta", recipe=REF))
    model.to_empty(device="cpu")
    for m in model.modules():
        if isinstance(m, nn.Linear):
            m.reset_parameters()
    assert all(int(m.sr_step) == 0 for m in model if isinstance(m, nn4.Linear))
    twin = nn.Sequential(nn4.Linear(32, 64, recipe=REF), nn.GELU(), nn4.Linear(64, 32, recipe=REF))
    twin.load_state_dict(copy.deepcopy(model.state_dict()))
    x = torch.randn(16, 32)
    for _ in range(2):
        a, b = model(x), twin(x)
        assert torch.equal(a, b)
        a.sum().backward()
        b.sum().backward()
    assert torch.equal(model[0].weight.grad, twin[0].weight.grad)


def test_convert_a_meta_model():
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 32))
    nvfp4.convert(model, exclude=[])
    assert isinstance(model[0], nn4.Linear)
    y = model(torch.empty(4, 32, device="meta"))
    assert y.device.type == "meta" and y.shape == (4, 32)
