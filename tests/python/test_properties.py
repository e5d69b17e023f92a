"""Property-based tests of the public API (hypothesis): random shapes, dtypes, strides,
devices (cpu / meta) and tampered tensors, thrown at quantize, gemm, the op layer and the
Linear. Every call ends in one of two ways: a ValueError / TypeError whose message starts
with the name of a parameter or field, or the reference result (the tests' independent
quantizer, nvfp4_ref; float64 GEMMs on the decoded operands). Anything else (another
exception, a result that differs, a crash) fails.

NVFP4_PROPERTY_EXAMPLES sets the number of examples per test (default 60; CI's sanitized
run uses its own)."""
import dataclasses
import os
import re

import pytest
import torch

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

import nvfp4  # noqa: E402
import nvfp4_ref as ref  # noqa: E402
from conftest import decode_rows, linear_scales  # noqa: E402
from nvfp4.nn import ops  # noqa: E402

EXAMPLES = int(os.environ.get("NVFP4_PROPERTY_EXAMPLES", "60"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=False, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# "<field>: ..." where a field is a name, possibly dotted, indexed or slashed (rowwise.amax,
# rht_signs[3], rowwise/columnwise)
NAMED = re.compile(r"^[A-Za-z_][\w.\[\]/]*: \S")
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.uint8, torch.bool]


def named_error(e: BaseException) -> bool:
    return isinstance(e, (ValueError, TypeError)) and bool(NAMED.match(str(e)))


def outcome(fn):
    """(result, None) or (None, the named error); any other exception fails the test."""
    try:
        return fn(), None
    except (ValueError, TypeError) as e:
        assert named_error(e), f"an error that names no parameter: {type(e).__name__}: {e}"
        return None, e


def often(good, bad):
    """Mostly one of `good`, sometimes one of `bad` (so that most examples get through to a
    result, and every bad value still comes up)."""
    return st.sampled_from(list(good) * 7 + list(bad))


@st.composite
def tensors(draw, min_dims=0, max_dims=3, last=(16, 32, 48), floats_only=False):
    """A tensor of a random shape, dtype, layout (contiguous, transposed, strided slice,
    offset view) and device (cpu or meta), with ordinary, tiny, huge, zero, NaN and inf values."""
    nd = draw(st.integers(min_dims, max_dims))
    shape = [draw(st.sampled_from([0, 1, 3, 7, 16, 17, 33])) for _ in range(nd)]
    if nd:
        shape[-1] = draw(often(list(last), [0, 1, 7, 24, 40]))
    dtype = draw(often(DTYPES[:3], DTYPES[:3] if floats_only else DTYPES[3:]))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    base = torch.randn([s * 2 if i == nd - 1 else s for i, s in enumerate(shape)] or [], generator=g)
    base = base * draw(often([1.0], [1e-30, 1e30, 0.0]))
    if base.numel() and draw(st.integers(0, 3)) == 0:
        base.view(-1)[draw(st.integers(0, base.numel() - 1))] = draw(st.sampled_from([float("nan"), float("inf"),
                                                                                      -float("inf")]))
    t = base.to(dtype) if dtype != torch.bool else base > 0
    layout = draw(often(["contiguous"], ["strided", "transposed", "offset"]))
    if nd >= 1:
        t = t[..., ::2] if layout == "strided" else t[..., : t.shape[-1] // 2]
        if layout == "transposed" and nd >= 2:
            t = t.transpose(-1, -2)
        elif layout != "strided":
            t = t.contiguous()
        if layout == "offset" and t.numel() > 1:
            t = t.reshape(-1)[1:]
    if draw(often(["cpu"], ["meta"])) == "meta":
        t = t.to("meta")
    return t


# ------------------------------------------------------------------------------ quantize
@SETTINGS
@given(x=tensors(), block=often(["1d", "2d"], ["3d", 1]), rounding=st.sampled_from(["rtn", "sr"]),
       rht=often([False, "rowwise", "columnwise"], ["x", 2]), columnwise=often([True, False], ["yes", None]),
       seed=often([0, 7, 2**64 - 1], [-1, 2**64, 1.5]), layout=often(["linear", "swizzled"], ["blocked", 1]))
def test_quantize_named_error_or_reference(x, block, rounding, rht, columnwise, seed, layout):
    q, err = outcome(lambda: nvfp4.quantize(x, block=block, rounding=rounding, rht=rht, columnwise=columnwise,
                                            seed=seed, scale_layout=layout))
    if err is not None:
        return
    rht_set = {False: (), "rowwise": ("rowwise",), "columnwise": ("columnwise",)}[rht]
    rows = 1
    for v in x.shape[:-1]:
        rows *= v
    if x.numel() == 0:  # (the reference takes no empty tensor) empty codes, amax 0
        assert tuple(q.data.shape) == (rows, x.shape[-1] // 2) and float(q.amax) == 0.0
        return
    want = ref.quantize(x.reshape(rows, x.shape[-1]), block, rounding, rht_set, seed, 0)
    for name, d in (("row", q.rowwise), ("col", q.columnwise if columnwise else None)):
        if d is None:
            continue
        wd, ws, wa = want[name]
        assert torch.equal(d.data, wd), name
        got_s = d.scales.view(torch.uint8)
        assert torch.equal(got_s, ref.swizzle(ws) if layout == "swizzled" else ws), name
        assert (torch.isnan(d.amax).all() and torch.isnan(wa).all()) or torch.equal(d.amax.reshape(()),
                                                                                    wa.reshape(())), name


# ------------------------------------------------------------------------------ gemm of (tampered) quantized tensors
def _tamper(draw, t: torch.Tensor):
    """A replacement of one buffer: wrong dtype, shape, layout or device, or an honest copy."""
    how = draw(st.sampled_from(["copy", "dtype", "shorter", "longer", "strided", "meta", "negative", "flat"]))
    if how == "copy":
        return t.clone(), True
    if how == "dtype":
        return t.view(torch.uint8).to(draw(st.sampled_from([torch.float32, torch.int16, torch.float64]))), False
    if how == "shorter":
        return t[: max(t.shape[0] - 1, 0)].clone(), False
    if how == "longer":
        return torch.cat([t, t[:1]]), False
    if how == "strided":
        return torch.stack([t, t], -1)[..., 0], t.dim() == 1 and t.numel() <= 1
    if how == "meta":
        return t.to("meta"), False
    if how == "negative":
        return (-t.abs() - 1.0, False) if t.dtype == torch.float32 else (t.clone(), True)
    return t.reshape(-1).clone(), t.dim() == 1


@st.composite
def operands(draw):
    m, n = draw(st.sampled_from([1, 5, 16, 33])), draw(st.sampled_from([1, 8, 19]))
    k = draw(st.sampled_from([16, 32, 48]))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    layout = draw(st.sampled_from(["swizzled", "linear"]))
    a = nvfp4.quantize(torch.randn(m, k, generator=g), scale_layout=layout)
    b = nvfp4.quantize(torch.randn(n, k, generator=g), block=draw(st.sampled_from(["1d", "2d"])), scale_layout=layout)
    which = draw(st.sampled_from(["none", "a", "b"]))
    field = draw(st.sampled_from(["data", "scales", "amax"]))
    honest = True
    if which != "none":
        q = a if which == "a" else b
        new, honest = _tamper(draw, getattr(q.rowwise, field))
        # replace() checks what it builds: a tampered tensor may be refused right here
        built, err = outcome(lambda: dataclasses.replace(q, rowwise=dataclasses.replace(q.rowwise, **{field: new})))
        if err is not None:
            return None, None, err, honest
        a, b = (built, b) if which == "a" else (a, built)
    return a, b, None, honest


def _reference(a, b):
    x = decode_rows(a.data, linear_scales(a)) * float(1.0 / ref.global_encode_scale(a.amax))
    w = decode_rows(b.data, linear_scales(b)) * float(1.0 / ref.global_encode_scale(b.amax))
    return x @ w.t()


@SETTINGS
@given(ops_=operands(), out_dtype=st.sampled_from([torch.float32, torch.bfloat16, torch.float64]))
def test_gemm_named_error_or_reference(ops_, out_dtype):
    a, b, err, honest = ops_
    if err is not None:
        assert not honest, f"an honest copy was refused: {err}"
        return
    y, err = outcome(lambda: nvfp4.gemm(a, b, out_dtype=out_dtype))
    if err is not None:
        assert not honest or out_dtype == torch.float64, f"refused: {err}"
        return
    want = _reference(a, b)
    bound = 1e-5 * (decode_rows(a.data, linear_scales(a)).abs() @ decode_rows(b.data, linear_scales(b)).abs().t()
                    ).max().item() * float(1.0 / ref.global_encode_scale(a.amax)) \
        * float(1.0 / ref.global_encode_scale(b.amax)) + (0.0 if out_dtype == torch.float32 else 1e-2 * want.abs().max())
    assert torch.allclose(y.double(), want, rtol=0 if out_dtype == torch.float32 else 1e-2, atol=float(bound) + 1e-30)


# ------------------------------------------------------------------------------ the op layer with raw triples
@st.composite
def raw_triples(draw):
    m, n, k = draw(st.sampled_from([1, 7, 16])), draw(st.sampled_from([1, 9])), draw(st.sampled_from([16, 32]))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    qa, qb = nvfp4.quantize(torch.randn(m, k, generator=g)), nvfp4.quantize(torch.randn(n, k, generator=g))
    ta, tb = [qa.data, qa.scales, qa.amax], [qb.data, qb.scales, qb.amax]
    honest = True
    for t in (ta, tb):
        if draw(st.booleans()):
            i = draw(st.integers(0, 2))
            t[i], h = _tamper(draw, t[i])
            honest = honest and h
    return (qa, qb), tuple(ta), tuple(tb), honest


def _decode_triple(t):
    """alpha-scaled float64 values of a raw swizzled triple, whatever it holds (a negative amax
    decodes sign-flipped, as the contract's S_enc = 2688 / amax says)."""
    d, sc, amax = t
    rows, k = d.shape[0], d.shape[1] * 2
    lin = nvfp4.unswizzle_scales(sc.view(torch.uint8), rows, k // 16)
    return decode_rows(d, lin) * float(1.0 / ref.global_encode_scale(amax.reshape(())))


@SETTINGS
@given(trip=raw_triples(), bias=st.sampled_from([None, "ok", "short", "meta", "int"]))
def test_ops_gemm_named_error_or_reference(trip, bias):
    """The raw road reads no values: whatever it accepts is a well-formed triple, and the
    result is the product of what those buffers hold."""
    _, ta, tb, honest = trip
    n = tb[0].shape[0] if tb[0].dim() == 2 else 1
    bt = {None: None, "ok": torch.randn(n), "short": torch.randn(n + 1), "meta": torch.randn(n, device="meta"),
          "int": torch.ones(n, dtype=torch.int32)}[bias]
    y, err = outcome(lambda: ops.gemm(ta, tb, 1, torch.float32, bt))
    if err is not None:
        assert not honest or bias not in (None, "ok"), f"refused: {err}"
        return
    if y.device.type == "meta":
        assert all(t.device.type == "meta" for t in (*ta, *tb))
        return
    want = _decode_triple(ta) @ _decode_triple(tb).t()
    if bt is not None:
        want = want + bt.double()
    scale = (_decode_triple(ta).abs() @ _decode_triple(tb).abs().t()).max().item()
    assert torch.allclose(y.double(), want, rtol=1e-5, atol=1e-6 * scale + 1e-30)


# ------------------------------------------------------------------------------ the Linear
@SETTINGS
@given(x=tensors(min_dims=0, max_dims=3, last=(16,), floats_only=True), features=often([16], [32]))
def test_linear_named_error_or_a_result_of_the_right_shape(x, features):
    torch.manual_seed(0)  # the same layer for every example: a failure reproduces from x alone
    layer = nvfp4.nn.Linear(features, 16, recipe=nvfp4.nn.get_recipe("nvfp4", backend="reference"))
    y, err = outcome(lambda: layer(x))
    if err is not None:
        return
    assert x.dim() >= 1 and x.shape[-1] == features and x.device.type in ("cpu", "meta")
    assert y.shape == (*x.shape[:-1], 16) and y.dtype == x.dtype and y.device == x.device
    if y.device.type == "cpu" and y.numel():
        xf = x.float()
        good = torch.isfinite(xf).all() and xf.abs().max() < 1e30
        if good:
            w, b = layer.weight.float(), layer.bias.float()
            want = torch.nn.functional.linear(xf, w, b)
            # FP4 error against the size of the terms, not of their sum: a sum that cancels
            # (|want| far below |x|·|W|) has no relative accuracy to ask for. Round to
            # nearest moves a value by at most its distance to the nearest grid point, so
            # each term's error stays below its magnitude; 0.5 of the whole is far from any
            # example seen (typically ~0.1)
            mag = torch.nn.functional.linear(xf.abs(), w.abs(), b.abs())
            rel = ((y.float() - want).norm() / mag.norm().clamp_min(1e-30)).item()
            assert rel < 0.5, rel
