"""No silent garbage: inputs that once ran and returned wrong numbers (or read past a
buffer), or ended in errors that named nothing, each get a clear error that names the
field; meta inputs get meta outputs. One case a row, as first reproduced."""
import dataclasses
import re

import pytest
import torch
from torch import nn

import nvfp4
import nvfp4.nn as nn4
from nvfp4.nn import ops

R = dataclasses.replace


def raises(exc, field, detail=""):
    """The message starts with '<field>: ' (then `detail`, a regex)."""
    return pytest.raises(exc, match="^" + re.escape(field) + ": " + detail)


@pytest.fixture(scope="module")
def qs():
    torch.manual_seed(0)
    a = nvfp4.quantize(torch.randn(4, 32), columnwise=True)
    b = nvfp4.quantize(torch.randn(8, 32))
    m = nvfp4.quantize_mxfp4(torch.randn(4, 64), columnwise=True)
    return a, b, m


def _row(q, **kw):
    return R(q, rowwise=R(q.rowwise, **kw))


# ------------------------------------------------------------------------------ tampered quantized tensors
# Each was accepted and handed to the kernels; now refused where the tensor is built
# (dataclasses.replace goes through the constructor's checks).
TAMPERED = [
    ("amax float64", lambda a, b, m: _row(b, amax=b.amax.double()), ValueError, "rowwise.amax",
     r"expected float32 \[1\], got float64 \[1\]"),
    ("amax of 3", lambda a, b, m: _row(b, amax=torch.ones(3)), ValueError, "rowwise.amax",
     r"expected float32 \[1\], got float32 \[3\]"),
    ("amax negative", lambda a, b, m: _row(b, amax=-b.amax), ValueError, "rowwise.amax", "expected max"),
    ("codes not contiguous", lambda a, b, m: _row(b, data=torch.zeros(8, 32, dtype=torch.uint8)[:, ::2]),
     ValueError, "rowwise.data", "expected a contiguous tensor"),
    ("codes too narrow", lambda a, b, m: _row(b, data=b.data[:, :8].contiguous()), ValueError, "rowwise.data",
     r"expected uint8 \[8, 16\], got uint8 \[8, 8\]"),
    ("codes float", lambda a, b, m: _row(b, data=b.data.float()), ValueError, "rowwise.data", "expected uint8"),
    ("scales too short", lambda a, b, m: _row(b, scales=b.scales[:64]), ValueError, "rowwise.scales",
     r"expected float8_e4m3fn or uint8 \[128, 4\], got float8_e4m3fn \[64, 4\]"),
    ("scales float32", lambda a, b, m: _row(b, scales=b.scales.float()), ValueError, "rowwise.scales", "expected"),
    ("shape smaller (was a reshape error)", lambda a, b, m: R(a, shape=(3, 32)), ValueError, "rowwise.data",
     r"expected uint8 \[3, 16\]"),
    ("shape narrower (read past the codes)", lambda a, b, m: R(a, shape=(4, 16)), ValueError, "rowwise.data",
     r"expected uint8 \[4, 8\]"),
    ("shape not a multiple of 16", lambda a, b, m: R(a, shape=(4, 24)), ValueError, "shape", "the last dimension"),
    ("shape not a tuple", lambda a, b, m: R(a, shape=[4, 32]), TypeError, "shape", "expected a non-empty tuple"),
    ("scale_layout 'blocked' (was a KeyError)", lambda a, b, m: R(a, scale_layout="blocked"), ValueError,
     "scale_layout", "must be one of"),
    ("rowwise 'x' (was an AttributeError)", lambda a, b, m: R(a, rowwise="x"), TypeError, "rowwise",
     "expected a _Direction or None, got str"),
    ("no orientation", lambda a, b, m: R(a, rowwise=None, columnwise=None), ValueError, "rowwise/columnwise", ""),
    ("block 3d", lambda a, b, m: R(a, block="3d"), ValueError, "block", "must be one of"),
    ("rht flag not a bool", lambda a, b, m: _row(a, rht=1), TypeError, "rowwise.rht", "must be a bool"),
    ("sign mask too wide", lambda a, b, m: R(a, rht_sign_mask=1 << 16), ValueError, "rht_sign_mask", ""),
    ("columnwise codes of another shape", lambda a, b, m: R(a, columnwise=R(a.columnwise, data=a.data)),
     ValueError, "columnwise.data", r"expected uint8 \[32, 8\]"),
    ("codes on meta (was nanobind's 'incompatible function arguments')",
     lambda a, b, m: _row(a, data=a.data.to("meta")), ValueError, "rowwise.data", "on meta"),
    ("orientations on two devices", lambda a, b, m: R(a, columnwise=R(a.columnwise, data=a.data_t.to("meta"))),
     ValueError, "columnwise.data", "on meta"),
    ("MXFP4 scale_layout 'blocked'", lambda a, b, m: R(m, scale_layout="blocked"), ValueError, "scale_layout", ""),
    ("MXFP4 codes not contiguous", lambda a, b, m: _row(m, data=torch.zeros(4, 64, dtype=torch.uint8)[:, ::2]),
     ValueError, "rowwise.data", "expected a contiguous tensor"),
    ("MXFP4 scales short", lambda a, b, m: _row(m, scales=m.rowwise.scales[:1]), ValueError, "rowwise.scales", ""),
    ("MXFP4 scale rule", lambda a, b, m: _row(m, scale_rule="floor"), ValueError, "rowwise.scale_rule", ""),
    ("MXFP4 rowwise 'x'", lambda a, b, m: R(m, rowwise="x"), TypeError, "rowwise", ""),
]


@pytest.mark.parametrize("case", TAMPERED, ids=[c[0] for c in TAMPERED])
def test_tampered_tensor_refused_where_built(qs, case):
    _, make, exc, field, detail = case
    with raises(exc, field, detail):
        make(*qs)


def test_quantized_tensors_are_immutable_and_checked_views_stay_valid(qs):
    a, b, m = qs
    for q in (a, m):
        with pytest.raises(dataclasses.FrozenInstanceError):
            q.rowwise = q.columnwise
    # the views nvfp4 builds from checked tensors need no new check and stay usable
    assert torch.equal(a.T.T.dequantize(), a.dequantize())
    assert torch.equal(a.to("cpu").dequantize(), a.dequantize())
    assert torch.equal(m.T.T.dequantize(), m.dequantize())
    # an untampered rebuild is accepted, and computes the same bits
    a2 = R(a, rowwise=R(a.rowwise, amax=a.amax.clone()))
    assert torch.equal(nvfp4.gemm(a2, b), nvfp4.gemm(a, b))


# ------------------------------------------------------------------------------ the op layer (raw triples)
def test_ops_gemm_refuses_a_meta_operand_beside_a_cpu_one(qs):
    """Was: a CPU tensor of uninitialised memory."""
    a, b, _ = qs
    ta = (a.data, a.scales, a.amax)
    tm = tuple(t.to("meta") for t in (b.data, b.scales, b.amax))
    with raises(ValueError, "b_data", "on meta, but a_data is on cpu"):
        ops.gemm(ta, tm)
    with raises(ValueError, "b_data", "on cpu, but a_data is on meta"):
        ops.gemm(tm, ta)
    with raises(ValueError, "b_amax", "on meta"):
        ops.gemm(ta, (b.data, b.scales, b.amax.to("meta")))


@pytest.mark.parametrize("field,make,detail", [
    ("a_amax", lambda a: (a.data, a.scales, a.amax.double()), r"expected float32 \[1\], got float64 \[1\]"),
    ("a_amax", lambda a: (a.data, a.scales, torch.ones(3)), r"expected float32 \[1\], got float32 \[3\]"),
    ("a_scales", lambda a: (a.data, a.scales[:64], a.amax), r"expected .*\[128, 4\], got float8_e4m3fn \[64, 4\]"),
    ("a_scales", lambda a: (a.data, a.scales.t(), a.amax), "expected"),
    ("a_data", lambda a: (torch.zeros(4, 32, dtype=torch.uint8)[:, ::2], a.scales, a.amax),
     "expected a contiguous tensor"),
    ("a_data", lambda a: (a.data.to(torch.int8), a.scales, a.amax), "expected uint8"),
    ("a_data", lambda a: (a.data[:, :7], a.scales, a.amax), "K = 2 \\* shape\\[1\\] must be a multiple of 16"),
])
def test_ops_gemm_checks_every_buffer(qs, field, make, detail):
    a, b, _ = qs
    with raises(ValueError, field, detail):
        ops.gemm(make(a), (b.data, b.scales, b.amax), 1, torch.float32)


def test_ops_gemm_checks_k_and_bias(qs):
    a, b, _ = qs
    b64 = nvfp4.quantize(torch.randn(8, 64))
    with raises(ValueError, "b_data", r"expected uint8 \[8, 16\], got uint8 \[8, 32\]"):
        ops.gemm((a.data, a.scales, a.amax), (b64.data, b64.scales, b64.amax))
    with raises(ValueError, "bias", r"expected float32 or float16 or bfloat16 \[8\]"):
        ops.gemm((a.data, a.scales, a.amax), (b.data, b.scales, b.amax), bias=torch.zeros(7))
    with raises(ValueError, "bias", "on meta"):
        ops.gemm((a.data, a.scales, a.amax), (b.data, b.scales, b.amax), bias=torch.zeros(8, device="meta"))
    with raises(TypeError, "a", "expected a \\(data, scales, amax\\) triple"):
        ops.gemm(a, (b.data, b.scales, b.amax))


def test_ops_dequantize_and_swizzle_check_their_buffers(qs):
    a, _, _ = qs
    with raises(ValueError, "amax", r"expected float32 \[1\], got float64 \[1\]"):
        ops.dequantize(a.data, a.scales, a.amax.double())
    with raises(ValueError, "scales", r"expected .*\[128, 4\]"):
        ops.dequantize(a.data, a.scales[:3], a.amax)
    with raises(ValueError, "data", "expected a contiguous tensor"):
        ops.dequantize(torch.zeros(4, 32, dtype=torch.uint8)[:, ::2], a.scales, a.amax)
    assert torch.equal(ops.dequantize(a.data, a.scales, a.amax.view(torch.uint8)), a.dequantize())  # its 4 bytes
    with raises(ValueError, "src", r"expected .*\[5, 3\], got uint8 \[5, 4\]"):
        ops.swizzle(torch.zeros(5, 4, dtype=torch.uint8), 5, 3)
    with raises(ValueError, "src", r"expected .*\[128, 4\]"):
        ops.swizzle(torch.zeros(64, 4, dtype=torch.uint8), 5, 3, False)


def test_ops_mx_gemm_checks_every_buffer(qs):
    _, _, m = qs
    d, s = m.rowwise.data, m.rowwise.scales
    with raises(ValueError, "a_scales", "expected"):
        ops.mx_gemm(d, s[:1], d, s, 1)
    with raises(ValueError, "b_data", "on meta"):
        ops.mx_gemm(d, s, d.to("meta"), s.to("meta"), 1)
    with raises(ValueError, "layout", ""):
        ops.mx_gemm(d, s, d, s, 2)


def test_ops_quantize_checks_x_and_the_counter():
    with raises(ValueError, "x", "expected float32 or float16 or bfloat16"):
        ops.quantize(torch.zeros(4, 32, dtype=torch.int32))
    with raises(ValueError, "offset_device", "on meta"):
        ops.quantize(torch.zeros(4, 32), offset_device=torch.zeros((), dtype=torch.int64, device="meta"))
    with raises(ValueError, "offset_device", "expected"):
        ops.quantize(torch.zeros(4, 32), offset_device=torch.zeros((), dtype=torch.float32))
    with raises(ValueError, "offset_device", "expected one int64 element"):
        ops.quantize(torch.zeros(4, 32), offset_device=torch.zeros(2, dtype=torch.int64))


# ------------------------------------------------------------------------------ shapes where they meet
def test_linear_input_features_checked():
    """Was: a [4, 32] result, read past the weight in the CPU quantizer (K taken from x)."""
    with raises(ValueError, "x", "expected 16 input features"):
        nn4.Linear(16, 32)(torch.randn(4, 32))
    with raises(ValueError, "x", "expected 16 input features"):
        nn4.FrozenLinear(16, 32)(torch.randn(4, 32))
    with raises(ValueError, "x", "expected 16 input features"):
        nn4.LoRALinear(nn4.FrozenLinear(16, 32), rank=4)(torch.randn(4, 32))
    with raises(ValueError, "x", "expected 32 input features"):
        nn4.Linear(32, 32, recipe="mx_baseline")(torch.randn(4, 64))


_ZERO_LAYERS = {
    "nvfp4": lambda i, o, b: nn4.Linear(i, o, bias=b),
    "fwd_only": lambda i, o, b: nn4.Linear(i, o, bias=b, recipe="fwd_only"),
    "mx_baseline": lambda i, o, b: nn4.Linear(i, o, bias=b, recipe="mx_baseline"),
    "4over6": lambda i, o, b: nn4.Linear(i, o, bias=b, recipe="4over6"),
    "fp8": lambda i, o, b: nn4.fp8.FP8Linear(i, o, bias=b, recipe="fp8"),
    "fp8_delayed": lambda i, o, b: nn4.fp8.FP8Linear(i, o, bias=b, recipe="fp8_delayed"),
    "frozen": lambda i, o, b: nn4.freeze_fp4(nn.Sequential(nn.Linear(i, o, bias=b)))[0],
    "lora": lambda i, o, b: nn4.LoRALinear(nn4.freeze_fp4(nn.Sequential(nn.Linear(i, o, bias=b)))[0], rank=4),
}


@pytest.mark.parametrize("kind", sorted(_ZERO_LAYERS))
def test_layers_with_zero_features_run_as_nn_linear_does(kind):
    """Was: a layer with out_features = 0 ran its forward, then its backward stopped in torch's
    reshape of dy to [-1, 0] ("cannot reshape tensor of 0 elements", no field named) — and,
    past that, in a GEMM of K = 0. Zero input or output features now run as nn.Linear does:
    the same output shapes and values (the bias alone where there are no input features),
    gradients of the input's shape (zeros) and the parameters' shapes; CPU, and CUDA too where
    there is a GPU (FP8 there only where it has FP8 GEMMs)."""
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    for dev in devices:
        if kind.startswith("fp8") and dev == "cuda" and not nn4.fp8.fp8_supported(torch.device(dev))[0]:
            continue
        for fin, fout in ((32, 0), (0, 32), (0, 0)):
            for lead in ((5,), (2, 3), (), (0,)):
                for bias in (True, False):
                    torch.manual_seed(0)
                    layer = _ZERO_LAYERS[kind](fin, fout, bias).to(dev)
                    b = getattr(layer, "bias", None)
                    if b is not None:
                        with torch.no_grad():
                            b.copy_(torch.arange(1, fout + 1, dtype=b.dtype))
                    x = torch.randn(*lead, fin, device=dev, requires_grad=True)
                    y = layer(x)
                    what = f"{kind} {dev} {fin}->{fout} x{tuple(x.shape)} bias={bias}"
                    assert y.shape == (*lead, fout), what
                    want = torch.zeros(*lead, fout) if b is None or fin else \
                        torch.arange(1, fout + 1, dtype=torch.float32).expand(*lead, fout)
                    assert torch.equal(y.detach().float().cpu(), want), what
                    y.float().square().sum().backward()
                    assert x.grad.shape == x.shape and not x.grad.any(), what
                    for name, p in layer.named_parameters():
                        assert p.grad is None or p.grad.shape == p.shape, f"{what} {name}"


def test_linear_0d_input_named():
    """Was: a bare IndexError."""
    for layer in (nn4.Linear(16, 32), nn4.FrozenLinear(16, 32)):
        with raises(ValueError, "x", "expected a tensor \\[..., 16\\], got a 0-d tensor"):
            layer(torch.tensor(1.0))
    with raises(TypeError, "x", "expected a torch.Tensor"):
        nn4.Linear(16, 32)([1.0] * 16)


def test_linear_op_checks_the_weight_against_x():
    """The op itself, called directly, refuses a weight of other features."""
    layer = nn4.Linear(32, 16, recipe=nn4.get_recipe("nvfp4", backend="reference"))
    with raises(ValueError, "w", "expected a weight \\[out_features, 32\\] for an input of 32 features"):
        ops.linear_fwd(torch.randn(4, 32), torch.randn(16, 16), None, layer.sr_step, layer._plan.cfg, True, True)
    with raises(ValueError, "bias", r"expected .*\[16\]"):
        ops.linear_fwd(torch.randn(4, 32), torch.randn(16, 32), torch.zeros(3), layer.sr_step, layer._plan.cfg,
                       False, False)
    with raises(ValueError, "counter", "on meta"):
        ops.linear_fwd(torch.randn(4, 32), torch.randn(16, 32), None, layer.sr_step.to("meta"), layer._plan.cfg,
                       False, False)
    with raises(ValueError, "cfg", "expected 13 ints"):
        ops.linear_fwd(torch.randn(4, 32), torch.randn(16, 32), None, layer.sr_step, [0] * 3, False, False)
    with raises(ValueError, "w_cache", "expected a packed uint8 buffer of at least"):
        ops.linear_fwd(torch.randn(4, 32), torch.randn(16, 32), None, layer.sr_step, layer._plan.cfg, False, False,
                       ops.W_REUSE, torch.zeros(16, dtype=torch.uint8))
    y, xt, wt = ops.linear_fwd(torch.randn(4, 32), torch.randn(16, 32), None, layer.sr_step, layer._plan.cfg,
                               True, True)
    with raises(ValueError, "xt", "expected a packed uint8 buffer of at least"):
        ops.linear_bwd(torch.randn(4, 16), xt[:100], wt, layer.sr_step, layer._plan.cfg, 32, True, True,
                       torch.float32)
    with raises(ValueError, "wt", "expected a packed uint8 buffer"):
        ops.linear_bwd(torch.randn(4, 16), xt, wt[:10], layer.sr_step, layer._plan.cfg, 32, True, True, torch.float32)
    with raises(ValueError, "k", ""):
        ops.linear_bwd(torch.randn(4, 16), xt, wt, layer.sr_step, layer._plan.cfg, 33, True, True, torch.float32)


def test_frozen_op_checks_the_weight():
    f = nn4.FrozenLinear.from_weight(torch.randn(32, 16), recipe=nn4.get_recipe("nvfp4", backend="reference"))
    x = torch.randn(4, 16)
    args = (f.weight_data, f.weight_scales, f.weight_amax, None, f.sr_step, f._plan.cfg)
    with raises(ValueError, "w_data", "expected \\[out_features, 16\\] packed codes for an input of 32 features"):
        ops.frozen_linear_fwd(torch.randn(4, 32), *args)
    with raises(ValueError, "w_amax", r"expected float32 \[1\], got float64 \[1\]"):
        ops.frozen_linear_fwd(x, f.weight_data, f.weight_scales, f.weight_amax.double(), None, f.sr_step, f._plan.cfg)
    with raises(ValueError, "w_scales", "expected"):
        ops.frozen_linear_fwd(x, f.weight_data, f.weight_scales[:64], f.weight_amax, None, f.sr_step, f._plan.cfg)
    with raises(ValueError, "w_data", "on meta"):
        ops.frozen_linear_fwd(x, f.weight_data.to("meta"), f.weight_scales, f.weight_amax, None, f.sr_step,
                              f._plan.cfg)


def test_frozen_state_checked_on_load():
    """Was: a negative weight_amax loaded and every output sign-flipped."""
    src = nn4.FrozenLinear.from_weight(torch.randn(32, 16), bias=torch.zeros(32))
    sd = src.state_dict()
    dst = nn4.FrozenLinear(16, 32)
    with raises(ValueError, "weight_amax", "expected max \\|W\\| \\(>= 0\\)"):
        dst.load_state_dict({**sd, "weight_amax": -sd["weight_amax"]})
    with raises(ValueError, "weight_amax", r"expected float32 \[1\], got float64 \[1\]"):
        dst.load_state_dict({**sd, "weight_amax": sd["weight_amax"].double()})
    with raises(ValueError, "weight_data", r"expected uint8 \[32, 8\], got float32 \[32, 8\]"):
        dst.load_state_dict({**sd, "weight_data": sd["weight_data"].float()})
    with raises(ValueError, "weight_scales", "expected"):
        dst.load_state_dict({**sd, "weight_scales": sd["weight_scales"][:64]})
    with raises(ValueError, "sr_step", "expected one int64 element"):
        dst.load_state_dict({**sd, "sr_step": torch.tensor(1.5)})
    # nested: the key is named with its prefix
    model = nn.Sequential(nn4.FrozenLinear(16, 32))
    with raises(ValueError, "0.weight_amax", ""):
        model.load_state_dict({"0." + k: (-v if k == "weight_amax" else v) for k, v in sd.items()})
    # a buffer replaced by assignment is checked the same way
    with raises(ValueError, "weight_amax", ""):
        dst.weight_amax = torch.tensor([-1.0])
    with raises(ValueError, "weight_data", "expected uint8"):
        dst.weight_data = torch.zeros(32, 8)
    dst.load_state_dict(sd)
    x = torch.randn(4, 16)
    assert torch.equal(dst(x), src(x))


def test_frozen_checkpoint_with_negative_amax_refused(tmp_path):
    src = nn.Sequential(nn4.FrozenLinear.from_weight(torch.randn(32, 16)))
    with torch.no_grad():
        src[0].weight_amax.neg_()  # in place, behind every check, then saved
    path = str(tmp_path / "m.safetensors")
    nn4.save(src, path)
    with raises(ValueError, "0.weight_amax", "expected max"):
        nn4.load(nn.Sequential(nn.Linear(16, 32)), path)


def test_linear_counter_checked_on_load():
    layer = nn4.Linear(16, 16)
    sd = layer.state_dict()
    with raises(ValueError, "sr_step", "expected one int64 element"):
        layer.load_state_dict({**sd, "sr_step": torch.tensor(2.5)})
    with raises(ValueError, "step", r"must be an int in \[0, 2\*\*63\)"):
        nn4.set_sr_step(layer, 2**64)


def test_lora_shapes_checked():
    """Was: an A of [rank, 1] merged by broadcasting over every input column."""
    lora = nn4.LoRALinear(nn4.FrozenLinear.from_weight(torch.randn(32, 16)), rank=4)
    with raises(ValueError, "lora_A", r"expected shape \[4, 16\]"):
        lora.lora_A = nn.Parameter(torch.ones(4, 1))
    with raises(ValueError, "lora_B", r"expected shape \[32, 4\]"):
        lora.lora_B = nn.Parameter(torch.ones(32, 5))
    with raises(TypeError, "lora_A", ""):
        lora.lora_A = None
    lora.lora_A.data = torch.ones(4, 1)  # .data bypasses the assignment check: merge checks again
    with raises(ValueError, "lora_A", r"expected shape \[4, 16\]"):
        lora.merge()
    assert not lora.merged


# ------------------------------------------------------------------------------ names for every argument
def test_convert_arguments_named():
    """Were: TypeError 'int' object is not iterable, re.error, AttributeError."""
    model = nn.Sequential(nn.Linear(32, 32))
    with raises(TypeError, "include", "expected a pattern"):
        nvfp4.convert(model, include=5)
    with raises(ValueError, "include", r"'re:\[' is not a valid regular expression"):
        nvfp4.convert(model, include="re:[")
    with raises(ValueError, "exclude", ".* is not a valid regular expression"):
        nvfp4.convert(model, exclude=["re:(("])
    with raises(TypeError, "model", "expected an nn.Module, got int"):
        nvfp4.unconvert(5)
    with raises(TypeError, "target", "expected a pattern"):
        nn4.add_lora(nn.Sequential(nn4.FrozenLinear(16, 32)), target=3)


# ------------------------------------------------------------------------------ meta tensors
def test_gemm_op_on_meta_gives_meta(qs):
    a, b, _ = qs
    tm = lambda q: tuple(t.to("meta") for t in (q.data, q.scales, q.amax))  # noqa: E731
    y = ops.gemm(tm(a), tm(b), 0, torch.bfloat16)
    assert y.device.type == "meta" and y.shape == (4, 8) and y.dtype == torch.bfloat16
    q = ops.quantize(torch.empty(5, 48, device="meta"), columnwise=True)
    assert [tuple(t.shape) for t in q] == [(5, 24), (128, 4), (1,), (48, 8), (128, 4), (1,)]
    assert all(t.device.type == "meta" for t in q)


# ------------------------------------------------------------------------------ documentation and behaviour agree
def test_last_dimension_rule_holds_for_a_columnwise_only_quantization():
    """The header states C % 16 == 0 for either output (the kernels read 16-column tiles):
    a columnwise-only quantization of 40 columns is refused, by the public API and the C
    API alike, and 48 columns (any row count) are quantized."""
    with raises(ValueError, "x", "last dimension must be a multiple of 16, got 40"):
        nvfp4.quantize(torch.randn(8, 40), rowwise=False, columnwise=True)
    col = (torch.empty(40, 8, dtype=torch.uint8), torch.empty(128, 4, dtype=torch.uint8), torch.empty(1))
    with raises(ValueError, "input", "last dimension must be a multiple of 16, got 40"):
        nvfp4._C.quantize(torch.randn(8, 40), None, None, None, *col, 0, 0, 1, 0, 0, 0, 0, 0)
    q = nvfp4.quantize(torch.randn(7, 48), rowwise=False, columnwise=True)
    assert tuple(q.data_t.shape) == (48, 8)
    import pathlib
    header = pathlib.Path(__file__).resolve().parents[2] / "include" / "nvfp4" / "nvfp4.h"
    if header.is_file():
        text = " ".join(w for w in header.read_text().split() if w != "*")
        assert "last dim % 16 == 0 whichever outputs are requested, a columnwise-only call included" in text


# ------------------------------------------------------------------------------ on a GPU
cuda_only = pytest.mark.skipif(not torch.cuda.is_available() or not nvfp4.is_supported("cutlass", "cuda"),
                               reason="needs a CUDA GPU with an nvfp4 GEMM backend")


@cuda_only
def test_cuda_operand_beside_a_cpu_one_refused_by_name():
    a = nvfp4.quantize(torch.randn(16, 64, device="cuda"))
    b = nvfp4.quantize(torch.randn(32, 64))
    ta, tb = (a.data, a.scales, a.amax), (b.data, b.scales, b.amax)
    with raises(ValueError, "b_data", "on cpu, but a_data is on cuda"):
        ops.gemm(ta, tb)
    with raises(ValueError, "b_amax", "on cpu, but b_data is on cuda"):
        ops.gemm(ta, (a.data, a.scales, b.amax))
    with raises(ValueError, "b", "on cpu, but a is on cuda"):
        nvfp4.gemm(a, b)
    with raises(ValueError, "rowwise.amax", "on cpu, but rowwise.data is on cuda"):
        R(a, rowwise=R(a.rowwise, amax=b.amax))
    with raises(ValueError, "x", "on cpu, but the layer's weight is on cuda"):
        nn4.Linear(64, 32, device="cuda")(torch.randn(4, 64))


@cuda_only
def test_cuda_checks_and_results():
    """The checks pass what the library builds and leave its results as they were: the op
    layer's GEMM on checked triples equals nvfp4.gemm, bit for bit; tampered CUDA buffers
    are refused like CPU ones; a CUDA amax is not read when a tensor is built (no sync),
    and a negative one is refused when a frozen state_dict loads."""
    torch.manual_seed(0)
    a = nvfp4.quantize(torch.randn(48, 128, device="cuda"))
    b = nvfp4.quantize(torch.randn(80, 128, device="cuda"))
    y = nvfp4.gemm(a, b, out_dtype=torch.float32)
    assert torch.equal(ops.gemm((a.data, a.scales, a.amax), (b.data, b.scales, b.amax), 0, torch.float32), y)
    with raises(ValueError, "a_scales", "expected"):
        ops.gemm((a.data, a.scales[:64], a.amax), (b.data, b.scales, b.amax))
    with raises(ValueError, "rowwise.data", "expected a contiguous tensor"):
        R(a, rowwise=R(a.rowwise, data=torch.zeros(48, 128, dtype=torch.uint8, device="cuda")[:, ::2]))
    neg = R(a, rowwise=R(a.rowwise, amax=-a.amax))  # on the device: not read here
    assert neg.amax.device.type == "cuda"
    with raises(ValueError, "x", "expected 128 input features"):
        nn4.Linear(128, 32, device="cuda")(torch.randn(4, 64, device="cuda"))
    src = nn4.FrozenLinear.from_weight(torch.randn(32, 128, device="cuda"))
    sd = src.state_dict()
    with raises(ValueError, "weight_amax", "expected max"):
        nn4.FrozenLinear(128, 32, device="cuda").load_state_dict({**sd, "weight_amax": -sd["weight_amax"]})
