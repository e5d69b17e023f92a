"""Bad input gets a clear exception that names the parameter; never a crash, never a
silently coerced value. Each case states the exception type and the start of its
message ("<parameter>: "), so a check that fires for the wrong reason fails the test."""
import math
import re

import numpy as np
import pytest
import torch

import nvfp4
from conftest import assert_bytes_equal


def raises(exc, param, detail=""):
    """pytest.raises for a message that starts with '<param>: ' (then `detail`, a regex)."""
    return pytest.raises(exc, match="^" + re.escape(param) + ": " + detail)


# ---------------------------------------------------------------------------- quantize: x

@pytest.mark.parametrize("x,exc,detail", [
    (torch.zeros(4, 32, dtype=torch.int32), TypeError, "dtype must be"),
    (torch.zeros(4, 32, dtype=torch.float64), TypeError, "dtype must be"),
    (torch.zeros(4, 32, dtype=torch.bool), TypeError, "dtype must be"),
    (torch.tensor(1.0), ValueError, "must have at least one dimension"),
    (torch.zeros(4, 30), ValueError, "last dimension must be a multiple of 16, got 30"),
    (torch.zeros(32, 4).t(), ValueError, "must be contiguous"),
    (torch.zeros(4, 32, device="meta"), ValueError, "device must be cpu or cuda, got meta"),
    ([1.0] * 16, TypeError, "expected a torch tensor"),
    ("x" * 16, TypeError, "expected a torch tensor"),
    (None, TypeError, "expected a torch tensor"),
    (np.zeros((2, 16), dtype=np.int64), TypeError, "dtype must be"),
    (np.array([[object()] * 16]), TypeError, "unsupported NumPy dtype object"),
    (np.zeros((2, 16), dtype="U3"), TypeError, "unsupported NumPy dtype"),
])
def test_bad_input(x, exc, detail):
    with raises(exc, "x", detail):
        nvfp4.quantize(x)


# ---------------------------------------------------------------------- quantize: options

@pytest.mark.parametrize("kwargs,exc,param,detail", [
    (dict(block="3d"), ValueError, "block", "must be one of '1d', '2d', got '3d'"),
    (dict(block=1), TypeError, "block", "must be a str"),
    (dict(block=None), TypeError, "block", "must be a str"),
    (dict(rounding="nearest"), ValueError, "rounding", "must be one of"),
    (dict(rounding=0), TypeError, "rounding", "must be a str"),
    (dict(scale_layout="blocked"), ValueError, "scale_layout", "must be one of"),
    (dict(scale_layout=1), TypeError, "scale_layout", "must be a str"),
    (dict(rht="sometimes"), ValueError, "rht", "must be False, True"),
    (dict(rht=1), TypeError, "rht", "must be a bool or one of"),
    (dict(rht=1.0), TypeError, "rht", "must be a bool or one of"),
    (dict(block="2d", rht=True), ValueError, "rht", "the Hadamard transform applies to 1d blocks only"),
    (dict(block="2d", rht="columnwise"), ValueError, "rht", "the Hadamard transform applies to 1d"),
    (dict(rowwise="no"), TypeError, "rowwise", "must be a bool, got str 'no'"),
    (dict(rowwise=1), TypeError, "rowwise", "must be a bool, got int"),
    (dict(rowwise=None), TypeError, "rowwise", "must be a bool"),
    (dict(columnwise="yes"), TypeError, "columnwise", "must be a bool"),
    (dict(columnwise=torch.tensor(True)), TypeError, "columnwise", "must be a bool"),
    (dict(rowwise=False, columnwise=False), ValueError, "rowwise/columnwise", "at least one must be True"),
    (dict(seed=-1, rounding="sr"), ValueError, "seed", r"must be in \[0, 2\*\*64\), got -1"),
    (dict(seed=2**64), ValueError, "seed", r"must be in \[0, 2\*\*64\)"),
    (dict(seed=1.5), TypeError, "seed", "must be an int, got float 1.5"),
    (dict(seed=2.0), TypeError, "seed", "must be an int, got float"),
    (dict(seed="1"), TypeError, "seed", "must be an int, got str"),
    (dict(seed=True), TypeError, "seed", "must be an int, got bool"),
    (dict(offset=2**64), ValueError, "offset", r"must be in \[0, 2\*\*64\)"),
    (dict(offset=-1), ValueError, "offset", "must be in"),
    (dict(offset=0.0), TypeError, "offset", "must be an int"),
    (dict(offset=None), TypeError, "offset", "must be an int"),
    (dict(rht=True, rht_signs=[1] * 15), ValueError, "rht_signs", "must have 16 values, got 15"),
    (dict(rht=True, rht_signs=[1] * 17), ValueError, "rht_signs", "must have 16 values, got 17"),
    (dict(rht=True, rht_signs=[2] * 16), ValueError, "rht_signs[0]", r"must be \+1 or -1, got 2"),
    (dict(rht=True, rht_signs=[1] * 15 + [0]), ValueError, "rht_signs[15]", r"must be \+1 or -1, got 0"),
    (dict(rht=True, rht_signs=[1.5] * 16), TypeError, "rht_signs[0]", "must be an int, got float 1.5"),
    (dict(rht=True, rht_signs=[1.0] * 16), TypeError, "rht_signs[0]", "must be an int"),
    (dict(rht=True, rht_signs=[True] * 16), TypeError, "rht_signs[0]", "must be an int, got bool"),
    (dict(rht=True, rht_signs="1" * 16), TypeError, "rht_signs", "must be a sequence of 16 ints"),
    (dict(rht=True, rht_signs=5), TypeError, "rht_signs", "must be a sequence of 16 ints"),
    (dict(rht=True, rht_signs=torch.ones(16)), TypeError, "rht_signs[0]", "must be an int"),
])
def test_bad_options(kwargs, exc, param, detail):
    with raises(exc, param, detail):
        nvfp4.quantize(torch.zeros(4, 32), **kwargs)


def test_options_type_checked_before_x():
    """An option of the wrong type is reported even when x is fine, and x's problems do
    not hide it: the options are checked first."""
    with raises(TypeError, "seed"):
        nvfp4.quantize(torch.zeros(4, 30), seed=1.5)


@pytest.mark.parametrize("kwargs", [
    dict(rowwise=np.bool_(True), columnwise=np.bool_(False)),
    dict(seed=np.int64(7), rounding="sr", offset=np.uint64(3)),
    dict(seed=torch.tensor(7), rounding="sr"),
    dict(rht="both", rht_signs=np.array(nvfp4.DEFAULT_RHT_SIGNS)),
    dict(rht="none"), dict(rht=None), dict(rht=False),
    dict(rht="rowwise", rht_signs=torch.tensor(nvfp4.DEFAULT_RHT_SIGNS)),
    dict(seed=2**64 - 1, offset=2**64 - 1, rounding="sr"),
])
def test_good_options_of_other_integer_and_bool_types(kwargs):
    """NumPy and 0-dim torch integers and NumPy bools are what they say they are."""
    nvfp4.quantize(torch.randn(4, 32), **kwargs)


# ----------------------------------------------------------- NumPy and DLPack inputs

def _same_quantization(arr):
    """quantize(arr) equals quantize of a C-contiguous copy of it, byte for byte."""
    want = nvfp4.quantize(torch.from_numpy(np.array(arr, dtype=arr.dtype.newbyteorder("="), order="C")),
                          columnwise=True, scale_layout="linear")
    got = nvfp4.quantize(arr, columnwise=True, scale_layout="linear")
    for name in ("data", "scales", "amax", "data_t", "scales_t", "amax_t"):
        assert_bytes_equal(getattr(got, name), getattr(want, name), name)


def _base(rows=8, cols=32, dtype=np.float32):
    return np.random.default_rng(0).standard_normal((rows, cols)).astype(dtype)


@pytest.mark.parametrize("make", [
    pytest.param(lambda: _base()[::-1], id="negative-row-stride"),
    pytest.param(lambda: _base()[:, ::-1], id="negative-col-stride"),
    pytest.param(lambda: _base()[::-1, ::-1], id="both-negative"),
    pytest.param(lambda: _base(cols=64)[:, ::2], id="gapped"),
    pytest.param(lambda: _base(16, 16).T, id="transposed"),
    pytest.param(lambda: np.ndarray((8, 32), dtype=np.float32, buffer=bytearray(8 * 130 + 8), offset=2,
                                    strides=(130, 4)), id="odd-byte-strides-misaligned"),
    pytest.param(lambda: _base().astype(">f4"), id="big-endian"),
    pytest.param(lambda: _base(dtype=np.float16), id="float16"),
    pytest.param(lambda: _base(), id="contiguous"),
])
def test_numpy_layouts_are_copied_not_aborted(make):
    """torch.from_dlpack aborts the process on a negative stride; these go through
    torch.from_numpy, copied first where torch cannot view them."""
    arr = make()
    _same_quantization(arr)


def test_numpy_readonly_input():
    arr = _base()
    arr.setflags(write=False)
    _same_quantization(arr)


# -------------------------------------------------------------- dequantize, swizzle

def test_bad_dequantize():
    q = nvfp4.quantize(torch.randn(4, 32))
    with raises(TypeError, "dtype", "must be one of float32, float16, bfloat16, got torch.int8"):
        q.dequantize(torch.int8)
    with raises(TypeError, "dtype", "must be a torch.dtype"):
        q.dequantize("float32")
    with raises(ValueError, "columnwise", "this tensor has no columnwise data"):
        q.dequantize(columnwise=True)
    with raises(TypeError, "columnwise", "must be a bool"):
        q.dequantize(columnwise="yes")
    with raises(TypeError, "undo_rht", "must be a bool"):
        q.dequantize(undo_rht=1)
    with raises(TypeError, "t", "expected an NVFP4Tensor, got Tensor"):
        nvfp4.dequantize(torch.zeros(3))
    with raises(TypeError, "columnwise", "must be a bool"):
        q.global_decode_scale(columnwise=0)
    with raises(ValueError, "device", "must be cpu or cuda, got meta"):
        q.to("meta")
    with raises(TypeError, "device", "not a device"):
        q.to("nonsense")
    with raises(TypeError, "device", "not a device"):
        q.to(2**64)


def test_bad_swizzle():
    with raises(TypeError, "scales", "dtype must be float8_e4m3fn or uint8, got torch.float32"):
        nvfp4.swizzle_scales(torch.zeros(4, 4))
    with raises(ValueError, "scales", "must be 2D, got 1 dims"):
        nvfp4.swizzle_scales(torch.zeros(4, dtype=torch.uint8))
    with raises(ValueError, "scales", "must be contiguous"):
        nvfp4.swizzle_scales(torch.zeros(4, 8, dtype=torch.uint8)[:, ::2])
    with raises(TypeError, "scales", "expected a torch tensor"):
        nvfp4.swizzle_scales([[1, 2]])
    with raises(ValueError, "scales", r"a swizzled \[200, 4\] scale matrix has shape \[256, 4\], got \[128, 4\]"):
        nvfp4.unswizzle_scales(torch.zeros(128, 4, dtype=torch.uint8), 200, 4)
    with raises(TypeError, "rows", "must be an int, got float"):
        nvfp4.unswizzle_scales(torch.zeros(128, 4, dtype=torch.uint8), 1.5, 4)
    with raises(ValueError, "cols", "must be in"):
        nvfp4.unswizzle_scales(torch.zeros(128, 4, dtype=torch.uint8), 1, -1)
    with raises(ValueError, "rows", r"must be in \[0, 2\*\*62\)"):
        nvfp4.unswizzle_scales(torch.zeros(128, 4, dtype=torch.uint8), 2**64, 4)


# --------------------------------------------------------------------------------- gemm

@pytest.fixture
def ab():
    torch.manual_seed(0)
    return nvfp4.quantize(torch.randn(8, 64)), nvfp4.quantize(torch.randn(16, 64))


def test_bad_gemm_operands(ab):
    a, b = ab
    with raises(TypeError, "a", "expected an NVFP4Tensor, got Tensor"):
        nvfp4.gemm(torch.zeros(8, 64), b)
    with raises(TypeError, "b", "expected an NVFP4Tensor, got NoneType"):
        nvfp4.gemm(a, None)
    with raises(ValueError, "a", "has no rowwise"):
        nvfp4.gemm(nvfp4.quantize(torch.randn(8, 64), rowwise=False, columnwise=True), b)
    with raises(ValueError, "b", "K mismatch: a has K=64, b has K=32"):
        nvfp4.gemm(a, nvfp4.quantize(torch.randn(16, 32)))
    with raises(ValueError, "b", "scale_layout 'linear' differs from a's 'swizzled'"):
        nvfp4.gemm(a, nvfp4.quantize(torch.randn(16, 64), scale_layout="linear"))


def test_bad_gemm_options(ab):
    a, b = ab
    with raises(TypeError, "backend", "must be a str"):
        nvfp4.gemm(a, b, backend=1)
    with raises(ValueError, "backend", "must be one of"):
        nvfp4.gemm(a, b, backend="fast")
    with raises(ValueError, "backend", "'cutlass' needs CUDA tensors"):
        nvfp4.gemm(a, b, backend="cutlass")
    with raises(TypeError, "out_dtype", "must be one of bfloat16, float16, float32, got torch.int8"):
        nvfp4.gemm(a, b, out_dtype=torch.int8)
    with raises(TypeError, "out_dtype", "must be a torch.dtype"):
        nvfp4.gemm(a, b, out_dtype="bfloat16")
    with raises(TypeError, "beta", "must be a real number, got str"):
        nvfp4.gemm(a, b, beta="1")
    with raises(TypeError, "beta", "must be a real number, got bool"):
        nvfp4.gemm(a, b, beta=True)
    with raises(ValueError, "beta", "nonzero beta needs out="):
        nvfp4.gemm(a, b, beta=1.0)
    with raises(TypeError, "bias", "must be a torch.Tensor or None, got list"):
        nvfp4.gemm(a, b, bias=[0.0] * 16)
    with raises(ValueError, "bias", r"expected shape \(16,\), got \(15,\)"):
        nvfp4.gemm(a, b, bias=torch.zeros(15))
    with raises(TypeError, "bias", "dtype must be"):
        nvfp4.gemm(a, b, bias=torch.zeros(16, dtype=torch.int32))
    with raises(TypeError, "out", "must be a torch.Tensor or None, got ndarray"):
        nvfp4.gemm(a, b, out=np.zeros((8, 16), np.float32))
    with raises(ValueError, "out", "expected 128 elements"):
        nvfp4.gemm(a, b, out=torch.zeros(8, 15))
    with raises(ValueError, "out", "must be contiguous"):
        nvfp4.gemm(a, b, out=torch.zeros(16, 8).t())
    with raises(TypeError, "out", "dtype must be"):
        nvfp4.gemm(a, b, out=torch.zeros(8, 16, dtype=torch.float64))
    out = torch.zeros(8, 16)
    with raises(ValueError, "out", "shares memory with bias"):
        nvfp4.gemm(a, b, out=out, bias=out[0])


def test_gemm_refuses_mismatched_transforms():
    """An RHT on one operand only, or two different sign vectors, would make the product
    meaningless (the issue measured results ~150% off): gemm refuses them."""
    torch.manual_seed(1)
    x, w = torch.randn(32, 128), torch.randn(48, 128)
    with raises(ValueError, "b", "the Hadamard transform was applied along K to a only"):
        nvfp4.gemm(nvfp4.quantize(x, rht="rowwise"), nvfp4.quantize(w))
    with raises(ValueError, "b", "the Hadamard transform was applied along K to b only"):
        nvfp4.gemm(nvfp4.quantize(x), nvfp4.quantize(w, rht=True))
    flipped = [-s for s in nvfp4.DEFAULT_RHT_SIGNS]
    with raises(ValueError, "b", "RHT sign mask 0x2817 differs from a's 0xd7e8"):
        nvfp4.gemm(nvfp4.quantize(x, rht="rowwise"), nvfp4.quantize(w, rht="rowwise", rht_signs=flipped))
    # The columnwise direction (through .T) carries its own flag.
    qa = nvfp4.quantize(x.t().contiguous(), rowwise=False, columnwise=True, rht="columnwise")
    with raises(ValueError, "b", "the Hadamard transform was applied along K to a only"):
        nvfp4.gemm(qa.T, nvfp4.quantize(w))
    # Matching transforms are accepted and cancel: the product is that of the inputs.
    for signs in (None, flipped):
        y = nvfp4.gemm(nvfp4.quantize(x, rht="rowwise", rht_signs=signs),
                       nvfp4.quantize(w, rht="rowwise", rht_signs=signs), out_dtype=torch.float32)
        ref = x.double() @ w.double().t()
        rel = ((y.double() - ref).norm() / ref.norm()).item()
        assert rel < 0.25, f"relative error {rel} with matching RHT signs"


# ------------------------------------------------------------- the low-level bindings

def test_low_level_binding_rejects_bad_shapes_and_enums():
    """The C API validates too: a wrongly sized output is refused with a message, not
    written past its end; an enum int out of range is refused before any cast."""
    x = torch.randn(4, 32)
    data, scales, amax = torch.empty(4, 16, dtype=torch.uint8), torch.empty(128, 4, dtype=torch.uint8), torch.empty(1)
    with raises(ValueError, "rowwise.data", r"expected shape \[4, 16\], got \[4, 8\]"):
        nvfp4._C.quantize(x, torch.empty(4, 8, dtype=torch.uint8), scales, amax, None, None, None, 0, 0, 1, 0, 0, 0, 0, 0)
    with raises(ValueError, "block", "unknown value 7"):
        nvfp4._C.quantize(x, data, scales, amax, None, None, None, 7, 0, 1, 0, 0, 0, 0, 0)
    with raises(ValueError, "rounding", "unknown value -1"):
        nvfp4._C.quantize(x, data, scales, amax, None, None, None, 0, -1, 1, 0, 0, 0, 0, 0)
    with raises(ValueError, "scale_layout", "unknown value 2"):
        nvfp4._C.quantize(x, data, scales, amax, None, None, None, 0, 0, 2, 0, 0, 0, 0, 0)
    with raises(ValueError, "cfg.rht", "unknown bits 0x4"):
        nvfp4._C.quantize(x, data, scales, amax, None, None, None, 0, 0, 1, 4, 0, 0, 0, 0)
    with raises(ValueError, "cfg.rht_sign_mask", "0x10000 has bits above bit 15"):
        nvfp4._C.quantize(x, data, scales, amax, None, None, None, 0, 0, 1, 1, 0x10000, 0, 0, 0)
    with raises(ValueError, "rowwise.amax", "must be float32 with 1 element"):
        nvfp4._C.quantize(x, data, scales, torch.empty(2), None, None, None, 0, 0, 1, 0, 0, 0, 0, 0)
    with raises(ValueError, "rowwise.data", "overlaps input"):
        nvfp4._C.quantize(x, x.view(torch.uint8).reshape(-1)[:64].view(4, 16), scales, amax, None, None, None, 0, 0, 1, 0, 0, 0, 0, 0)
    out = torch.empty(4, 32)
    with raises(ValueError, "scale_layout", "unknown value 5"):
        nvfp4._C.dequantize(data, scales, amax, 5, out, 0)
    d = torch.empty(4, 4)
    with raises(ValueError, "backend", "unknown value 9"):
        nvfp4._C.gemm(data, scales, amax, data, scales, amax, 1, None, None, 0.0, d, 9, None, 0)
    with raises(ValueError, "scale_layout", "unknown value -3"):
        nvfp4._C.gemm_workspace_size(data, scales, amax, data, scales, amax, -3, None, None, 0.0, d, 0)
    assert nvfp4._C.backend_supported(77, 0) is False
    assert nvfp4._C.backend_supported(-1, 90) is False


def test_device_info_never_throws():
    info = nvfp4.device_info()
    assert info["version"] == nvfp4.__version__
    assert "reference" in info["backends"]
    assert isinstance(info["cuda_devices"], list)
    assert nvfp4.is_supported("reference")
    assert not nvfp4.is_supported("cutlass")  # CPU device
    assert not nvfp4.is_supported("nonsense")


def test_version_is_the_headers():
    """One version, written in nvfp4.h, seen by the library, the package and its metadata."""
    from importlib.metadata import version
    assert re.fullmatch(r"\d+\.\d+\.\d+", nvfp4.__version__)
    assert version("nvfp4") == nvfp4.__version__


@pytest.mark.parametrize("shape", [(0, 32), (5, 0), (2, 3, 0), (0, 4, 16)])
def test_empty_inputs(shape):
    """An empty x quantizes to empty outputs with amax 0; its 2D view keeps the leading
    dims even when the last one is 0 (the C API's rule too)."""
    q = nvfp4.quantize(torch.zeros(shape), columnwise=True)
    rows, cols = math.prod(shape[:-1]), shape[-1]
    assert tuple(q.data.shape) == (rows, cols // 2) and tuple(q.data_t.shape) == (cols, (rows + 15) // 16 * 16 // 2)
    assert q.amax.item() == 0.0 and q.amax_t.item() == 0.0
    assert q.dequantize().shape == torch.Size(shape)


# ---------------------------------------------------------------- environment settings

def _settings_read_by(folder):
    """The NVFP4_* environment variables the kernels under src/<folder> read (debug,
    trace and cache-size knobs, and the cuDNN library path, take free-form values)."""
    import pathlib
    src = pathlib.Path(__file__).resolve().parents[2] / "src" / folder
    if not src.is_dir():
        pytest.skip("needs the source tree")
    names = set()
    for f in src.rglob("*"):
        if f.suffix in (".cpp", ".cu", ".cuh", ".h"):
            names |= set(re.findall(r'(?:getenv|setting|env_int|knob_off)\("(NVFP4_[A-Z0-9_]+)"', f.read_text()))
    names = {n for n in names if not n.endswith(("_DEBUG", "_TRACE", "_CACHE_SIZE")) and n != "NVFP4_CUDNN_PATH"}
    assert names, "no environment variables found: the pattern is out of date"
    return sorted(names)


def _cpu_gemm():
    a = nvfp4.quantize(torch.randn(4, 32))
    b = nvfp4.quantize(torch.randn(8, 32))
    return nvfp4.gemm(a, b, backend="reference")


def test_every_gemm_setting_refuses_an_unknown_value(monkeypatch):
    """A GEMM setting with a value the library does not know is refused by name on every
    GEMM call (the CPU reference runner included), never read as unset."""
    for name in _settings_read_by("gemm"):
        for bad in ("bogus", "-1", "1x"):
            monkeypatch.setenv(name, bad)
            with raises(ValueError, name, "expected"):
                _cpu_gemm()
        monkeypatch.delenv(name)
    _cpu_gemm()


def test_every_quant_setting_refuses_an_unknown_value(monkeypatch):
    x = torch.randn(4, 32)
    for name in _settings_read_by("quant"):
        for bad in ("bogus", "-1", "2x"):
            monkeypatch.setenv(name, bad)
            with raises(ValueError, name, "expected"):
                nvfp4.quantize(x)
            with raises(ValueError, name, "expected"):
                nvfp4.quantize_mxfp4(x)
        monkeypatch.delenv(name)
    nvfp4.quantize(x)


@pytest.mark.parametrize("name,value", [
    ("NVFP4_SM90_TILE", "streamk"), ("NVFP4_SM90_TILE", "large"), ("NVFP4_SM90_DIRECT", "1"),
    ("NVFP4_SM90_SMALL_M", "0"), ("NVFP4_SM90_SMALL_M_KERNEL", "ring"), ("NVFP4_SM90_SWIZZLE", "4"),
    ("NVFP4_SM90_RASTER", "n"), ("NVFP4_SM90_STREAM_SPLIT", "8"), ("NVFP4_CUDNN_AUTOTUNE", "0"),
    ("NVFP4_SM90_TRACE", "1"), ("NVFP4_SM90_STREAM_TRACE", "0"), ("NVFP4_SM90_F32_LARGE", "0"),
    ("NVFP4_SM90_TILE", ""), ("NVFP4_SM90_TILE", "medium2x1"), ("NVFP4_SM90_PINGPONG", "0"),
    ("NVFP4_SM90_RS", "0"), ("NVFP4_SM90_RS", "1"), ("NVFP4_SM90_RS", ""),
])
def test_known_gemm_settings_are_accepted(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    want = nvfp4.gemm(nvfp4.quantize(torch.ones(4, 32)), nvfp4.quantize(torch.ones(8, 32)), backend="reference")
    assert torch.equal(want, torch.full((4, 8), 32.0, dtype=want.dtype))


@pytest.mark.parametrize("name,value", [("NVFP4_QUANT_GRID_CAP", "17"), ("NVFP4_QUANT_GRID_CAP", "0"),
                                        ("NVFP4_QUANT_WORKSPACE", "0"), ("NVFP4_QUANT_WORKSPACE", "1")])
def test_known_quant_settings_are_accepted(monkeypatch, name, value):
    x = torch.randn(4, 32)
    ref = nvfp4.quantize(x)
    monkeypatch.setenv(name, value)
    got = nvfp4.quantize(x)
    assert torch.equal(got.data, ref.data) and torch.equal(got.scales, ref.scales)


def test_settings_checked_again_after_calls_with_none_set(monkeypatch):
    """With no NVFP4_* variable set the checks take one pass over the environment and stop;
    a variable set afterwards is still seen on the next call (no remembered answer), and the
    GEMM environment key follows it."""
    import os

    from nvfp4 import _ops
    for name in [n for n in os.environ if n.startswith("NVFP4_")]:
        monkeypatch.delenv(name)
    x = torch.randn(4, 32)
    for _ in range(3):
        _cpu_gemm()
        nvfp4.quantize(x)
    assert _ops.gemm_env_key() == ""
    monkeypatch.setenv("NVFP4_SM90_TILE", "bogus")
    with raises(ValueError, "NVFP4_SM90_TILE", "expected"):
        _cpu_gemm()
    assert "NVFP4_SM90_TILE=bogus" in _ops.gemm_env_key()
    monkeypatch.setenv("NVFP4_QUANT_GRID_CAP", "x")
    with raises(ValueError, "NVFP4_QUANT_GRID_CAP", "expected"):
        nvfp4.quantize(x)
    monkeypatch.delenv("NVFP4_SM90_TILE")
    monkeypatch.delenv("NVFP4_QUANT_GRID_CAP")
    _cpu_gemm()
    nvfp4.quantize(x)
    assert _ops.gemm_env_key() == ""


def test_trace_settings_refuse_an_unknown_value(monkeypatch):
    """The trace switches take 0 or 1; anything else is refused by name, not ignored."""
    for name in ("NVFP4_SM90_TRACE", "NVFP4_SM90_STREAM_TRACE"):
        monkeypatch.setenv(name, "yes")
        with raises(ValueError, name, "expected"):
            _cpu_gemm()
        monkeypatch.delenv(name)


def test_removed_gemm_setting_is_refused(monkeypatch):
    """NVFP4_SM90_STREAM_DEBUG printed the small-M plan; NVFP4_SM90_TRACE does now, and a
    set NVFP4_SM90_STREAM_DEBUG is refused by name rather than ignored."""
    monkeypatch.setenv("NVFP4_SM90_STREAM_DEBUG", "1")
    with raises(ValueError, "NVFP4_SM90_STREAM_DEBUG", "no longer read .*NVFP4_SM90_TRACE"):
        _cpu_gemm()


@pytest.mark.parametrize("name", ["NVFP4_QUANT_LEGACY", "NVFP4_QUANT_COOP"])
@pytest.mark.parametrize("value", ["1", "0"])
def test_removed_quant_setting_is_refused(monkeypatch, name, value):
    """NVFP4_QUANT_LEGACY selected kernels that no longer exist, NVFP4_QUANT_COOP an amax
    zeroing that no longer exists: any value is refused by name (on every quantization,
    NVFP4 and MXFP4), not silently ignored; unset, nothing changes."""
    x = torch.randn(4, 32)
    monkeypatch.setenv(name, value)
    with raises(ValueError, name, "no longer read"):
        nvfp4.quantize(x)
    with raises(ValueError, name, "no longer read"):
        nvfp4.quantize_mxfp4(x)
    monkeypatch.setenv(name, "")
    nvfp4.quantize(x)
