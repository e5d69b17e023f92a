"""Bad input gets a clear exception that names the parameter; never a crash."""
import numpy as np
import pytest
import torch

import nvfp4


@pytest.mark.parametrize("x,exc,word", [
    (torch.zeros(4, 32, dtype=torch.int32), TypeError, "x"),
    (torch.zeros(4, 32, dtype=torch.float64), TypeError, "x"),
    (torch.tensor(1.0), ValueError, "x"),
    (torch.zeros(4, 30), ValueError, "multiple of 16"),
    (torch.zeros(32, 4).t(), ValueError, "contiguous"),
    ([1.0] * 16, TypeError, "x"),
    (np.zeros((2, 16), dtype=np.int64), TypeError, "x"),
])
def test_bad_input(x, exc, word):
    with pytest.raises(exc, match=word):
        nvfp4.quantize(x)


@pytest.mark.parametrize("kwargs,word", [
    (dict(block="3d"), "block"),
    (dict(rounding="nearest"), "rounding"),
    (dict(scale_layout="blocked"), "scale_layout"),
    (dict(rht="sometimes"), "rht"),
    (dict(rht=1), "rht"),
    (dict(block="2d", rht=True), "rht"),
    (dict(rowwise=False, columnwise=False), "rowwise"),
    (dict(seed=-1, rounding="sr"), "seed"),
    (dict(offset=2**64), "offset"),
    (dict(rht=True, rht_signs=[1] * 15), "rht_signs"),
    (dict(rht=True, rht_signs=[2] * 16), "rht_signs"),
])
def test_bad_options(kwargs, word):
    with pytest.raises(ValueError, match=word):
        nvfp4.quantize(torch.zeros(4, 32), **kwargs)


def test_bad_dequantize_and_swizzle():
    q = nvfp4.quantize(torch.randn(4, 32))
    with pytest.raises(TypeError, match="dtype"):
        q.dequantize(torch.int8)
    with pytest.raises(ValueError, match="columnwise"):
        q.dequantize(columnwise=True)
    with pytest.raises(TypeError, match="t"):
        nvfp4.dequantize(torch.zeros(3))
    with pytest.raises(TypeError, match="scales"):
        nvfp4.swizzle_scales(torch.zeros(4, 4))
    with pytest.raises(ValueError, match="scales"):
        nvfp4.swizzle_scales(torch.zeros(4, dtype=torch.uint8))
    with pytest.raises(ValueError, match="swizzled"):
        nvfp4.unswizzle_scales(torch.zeros(128, 4, dtype=torch.uint8), 200, 4)


def test_low_level_binding_rejects_bad_shapes():
    """The C API validates too: a wrongly sized output is refused with a message, not
    written past its end."""
    x = torch.randn(4, 32)
    data = torch.empty(4, 8, dtype=torch.uint8)  # should be [4, 16]
    scales = torch.empty(128, 4, dtype=torch.uint8)
    amax = torch.empty(1)
    with pytest.raises(ValueError, match="rowwise.data: expected shape"):
        nvfp4._C.quantize(x, data, scales, amax, None, None, None, 0, 0, 1, 0, 0, 0, 0, 0)
    with pytest.raises(ValueError, match="cfg.block"):
        nvfp4._C.quantize(x, torch.empty(4, 16, dtype=torch.uint8), scales, amax, None, None, None,
                          7, 0, 1, 0, 0, 0, 0, 0)
    with pytest.raises(ValueError, match="amax"):
        nvfp4._C.quantize(x, torch.empty(4, 16, dtype=torch.uint8), scales, torch.empty(2), None, None, None,
                          0, 0, 1, 0, 0, 0, 0, 0)


def test_device_info_never_throws():
    info = nvfp4.device_info()
    assert info["version"] == nvfp4.__version__
    assert "reference" in info["backends"]
    assert isinstance(info["cuda_devices"], list)
    assert nvfp4.is_supported("reference")
    assert not nvfp4.is_supported("cutlass")  # CPU device
    assert not nvfp4.is_supported("nonsense")
