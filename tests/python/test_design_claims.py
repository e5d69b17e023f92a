"""The facts docs/design.md states about the numerics (sections 1.3, 1.5 and 2), checked
against the library so that the document stays true. Each test names the statement it
backs; bounds are loose enough for fresh random data, tight enough to catch a change."""
import warnings

import numpy as np
import pytest
import torch

import nvfp4
from nvfp4._format import default_rht_mask, rht_matrix

F32 = np.float32
FLT_MAX = np.finfo(F32).max
FLT_MIN = np.finfo(F32).tiny


def codes_of(data: torch.Tensor) -> torch.Tensor:
    """uint8 [rows, cols/2] packed codes -> [rows, cols] 4-bit codes."""
    return torch.stack([data & 15, data >> 4], -1).reshape(data.shape[0], -1)


# ----------------------------------------------------------------------- section 1.2/1.3

def test_negative_zero_keeps_its_sign_and_nan_codes():
    """-0.0 and values rounding to zero from below give code 0x8; a NaN element code 0x7
    with every block scale 0x7F and every decoded value NaN."""
    assert codes_of(nvfp4.quantize(torch.full((1, 16), -0.0)).data)[0, 0].item() == 8
    q = nvfp4.quantize(torch.tensor([[1.0] + [-1e-9] * 15]))
    assert codes_of(q.data)[0, 1].item() == 8
    x = torch.randn(4, 32)
    x[1, 7] = float("nan")
    q = nvfp4.quantize(x, scale_layout="linear", columnwise=True)
    assert codes_of(q.data)[1, 7].item() == 7
    assert (q.scales.view(torch.uint8) == 0x7F).all() and (q.scales_t.view(torch.uint8) == 0x7F).all()
    assert torch.isnan(q.dequantize()).all() and torch.isnan(q.dequantize(columnwise=True)).all()


def test_infinity():
    """amax = inf gives S_enc = 1; the infinity saturates to +-6 at scale 448 (decodes to
    +-2688); other blocks keep their own, coarse, scales."""
    torch.manual_seed(3)
    y = torch.randn(2, 32) * 0.01
    y[0, 0], y[1, 5] = float("inf"), -float("inf")
    q = nvfp4.quantize(y, scale_layout="linear")
    d = q.dequantize()
    assert q.amax.item() == float("inf")
    assert q.scales[:, 0].float().tolist() == [448.0, 448.0]
    assert d[0, 0].item() == 2688.0 and d[1, 5].item() == -2688.0
    err = (d[:, 16:] - y[:, 16:]).abs().max().item()
    assert 0 < err < 0.25 * y[:, 16:].abs().max().item()


def test_dequantize_is_the_inverse_scale_bit_exact():
    """Dequantization computes (e2m1 * s_b) * (1 / S_enc(amax)) in FP32, exactly."""
    torch.manual_seed(4)
    for amax in (1.0, 3e30, 2e-36, 1e36):
        x = torch.randn(64, 64) * (amax / 4)
        q = nvfp4.quantize(x, scale_layout="linear")
        codes = codes_of(q.data).numpy()
        mag = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], F32)
        val = np.where(codes & 8, -mag[codes & 7], mag[codes & 7]).astype(F32)
        sb = np.repeat(q.scales.float().numpy().astype(F32), 16, axis=1)
        a = F32(q.amax.item())
        with np.errstate(divide="ignore", over="ignore"):
            enc = F32(min(F32(2688.0) / a, FLT_MAX)) or F32(1.0)
        want = ((val * sb).astype(F32) * (F32(1.0) / enc)).astype(F32)
        got = q.dequantize(torch.float32).numpy()
        assert np.array_equal(got.view(np.int32), want.view(np.int32)), f"amax {amax}"


# ----------------------------------------------------------------------------- section 1.5

def test_tiny_amax_accuracy():
    """Round-trip relative error of a Gaussian tensor scaled to amax (table of 1.5)."""
    g = torch.Generator().manual_seed(0)
    x0 = torch.randn(256, 256, dtype=torch.float64, generator=g)
    x0 = x0 / x0.abs().max()

    def rel(amax):
        x = (x0 * amax).float()
        y = nvfp4.quantize(x).dequantize(torch.float32).double()
        return ((y - x.double()).norm() / x.double().norm()).item()

    normal = rel(1.0)
    assert 0.08 < normal < 0.11
    for amax in (1e-30, 1e-37):
        assert abs(rel(amax) - normal) < 0.005, amax
    assert 0.15 < rel(3e-38) < 0.35
    assert 0.6 < rel(1e-38) < 0.8
    assert rel(1e-39) > 0.95


# ---------------------------------------------------------------------- section 2, item 1

def _butterfly(v: np.ndarray, mask: int) -> np.ndarray:
    """The contract's RHT (signs, butterfly 1-2-4-8, * 0.25) on [n, 16] FP32 rows."""
    signs = np.array([-1 if (mask >> i) & 1 else 1 for i in range(16)], F32)
    v = (v * signs).astype(F32)
    h = 1
    while h < 16:
        w = v.copy()
        for i in range(16):
            if not i & h:
                w[:, i], w[:, i + h] = v[:, i] + v[:, i + h], v[:, i] - v[:, i + h]
        v, h = w, h * 2
    return (v * F32(0.25)).astype(F32)


def test_rht_vs_matrix_product():
    """FP32: the butterfly and a 16-term matrix product differ by ulps in most values but
    almost never in the codes; BF16: rounding the transform to BF16 (the reference's
    choice) changes about 1% of the codes."""
    torch.manual_seed(0)
    mask = default_rht_mask()
    m = rht_matrix(mask, torch.float32)
    x = torch.randn(1024, 256)
    yb = _butterfly(x.reshape(-1, 16).numpy(), mask)
    ym = (x.reshape(-1, 16) @ m).numpy()
    assert (yb != ym).mean() > 0.3  # the two orders of summation really do differ
    assert np.abs(yb - ym).max() < 1e-5 * np.abs(ym).max()

    def code_diff(dt):
        xd = x.to(dt)
        ours = nvfp4.quantize(xd, rht="rowwise", scale_layout="linear")
        ref = nvfp4.quantize((xd.reshape(-1, 16) @ m.to(dt)).reshape(x.shape), scale_layout="linear")
        return (codes_of(ours.data) != codes_of(ref.data)).float().mean().item()

    assert code_diff(torch.float32) < 1e-3
    assert 0.002 < code_diff(torch.bfloat16) < 0.05


# ------------------------------------------------------------------- section 2, items 2-3

def test_rht_padding_lanes():
    """Columnwise RHT with R = 20: xᵀ is zero-padded to 32 before the transform, so most
    padded lanes hold non-zero codes; those rounding to zero keep their sign."""
    torch.manual_seed(5)
    q = nvfp4.quantize(torch.randn(20, 64), rowwise=False, columnwise=True, rht="columnwise",
                       scale_layout="linear")
    pad = codes_of(q.data_t)[:, 20:]
    nonzero = ((pad != 0) & (pad != 8)).float().mean().item()
    assert nonzero > 0.8
    assert (pad == 8).any()
    # Without the RHT the padding is plain zeros: code 0x0.
    q = nvfp4.quantize(torch.randn(20, 64), rowwise=False, columnwise=True, scale_layout="linear")
    assert (codes_of(q.data_t)[:, 20:] == 0).all()


# ---------------------------------------------------------------------- section 2, item 5

def _decode_both(amax: np.ndarray):
    e4m3 = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float().numpy()
    sb = np.unique(e4m3[np.isfinite(e4m3) & (e4m3 > 0)]).astype(F32)
    codes = np.array([0.5, 1, 1.5, 2, 3, 4, 6], F32)
    a, s, c = amax[:, None, None], sb[None, :, None], codes[None, None, :]
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        enc = np.minimum(F32(2688.0) / a, FLT_MAX).astype(F32)
        enc = np.where(enc == 0, F32(1), enc)
        ours = ((c * s).astype(F32) * (F32(1) / enc).astype(F32)).astype(F32)
        te = (c * ((s * a).astype(F32) * F32(1.0 / 2688.0)).astype(F32)).astype(F32)
    return np.broadcast_to(ours, te.shape), te


def test_dequantize_formula():
    """nvfp4's decode against (s_b * amax) * (1/2688) over every scale and code (table of
    section 2, item 5)."""
    rng = np.random.default_rng(1)

    def sample(lo, hi, n=2000):
        return np.exp(rng.uniform(np.log(lo), np.log(hi), n)).astype(F32)

    o, t = _decode_both(sample(1e-30, 7.5e35))
    ulps = np.abs(o.view(np.int32).astype(np.int64) - t.view(np.int32).astype(np.int64))
    assert 0.3 < (o != t).mean() < 0.6 and ulps.max() <= 3
    o, t = _decode_both(sample(1e-37, 7.8e-36))
    rel = np.abs(t.astype(np.float64) - o) / np.abs(o.astype(np.float64))
    assert (o != t).mean() > 0.99 and rel.max() > 0.9
    o, t = _decode_both(sample(7.7e35, 3.4e38))
    assert np.isfinite(o).all() and 0.1 < (~np.isfinite(t)).mean() < 0.5


# ----------------------------------------------------------------------- workspace cache

def test_workspace_keys_cover_every_gemm_environment_variable(monkeypatch):
    """The Python layer caches GEMM workspace sizes keyed by nvfp4_gemm_env_key(); every
    environment variable the GEMM code reads on a call (which can pick another kernel or
    cuDNN graph, hence another workspace) must change that key, so a size cannot go stale
    when one changes. Debug, trace and cache-size knobs change no workspace."""
    import pathlib
    import re

    from nvfp4 import _ops
    src = pathlib.Path(__file__).resolve().parents[2] / "src" / "gemm"
    if not src.is_dir():
        pytest.skip("needs the source tree")
    read = set()
    for f in src.rglob("*"):
        if f.suffix in (".cpp", ".cu", ".cuh", ".h"):
            read |= set(re.findall(r'"(NVFP4_[A-Z0-9_]+)"', f.read_text()))
    read = {n for n in read if not n.endswith(("_DEBUG", "_TRACE", "_CACHE_SIZE"))}
    assert read, "no environment variables found: the pattern is out of date"
    for name in sorted(read):
        monkeypatch.delenv(name, raising=False)
    base = _ops.gemm_env_key()
    missing = []
    for name in sorted(read):
        monkeypatch.setenv(name, "probe")
        if _ops.gemm_env_key() == base:
            missing.append(name)
        monkeypatch.delenv(name)
    assert not missing, f"not in nvfp4_gemm_env_key (src/api_gemm.cpp): {missing}"
