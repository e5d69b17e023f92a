"""An independent MXFP4 reference quantizer for the tests, in plain torch/NumPy (it never
calls into nvfp4). The library's CPU reference and its kernels must match it bit for bit.

Written from the formulas, not from the library's bit tricks:
- block amax M = max |x_i| over 32 elements, NaN wins;
- scale exponent s (float64 log2 of the fp32 M, which is exact enough: log2 of a power of
  two is exact, and an fp32 one ulp away from a decision point is resolved by float64):
    ocp       floor(log2 M) - 2
    ceil      ceil(log2(M / 6))
    tetrajet  ceil(log2(2 M' / (6 - (-6)))), M' = M, or 1e-8 when M == 0
  M == 0: s = -127 for ocp and ceil; M NaN or inf: the NaN byte 0xFF; s < -127 -> -127;
  s > 127 -> 0xFF. E8M0 byte = s + 127.
- codes e2m1(clamp(x * 2^-s, -6, 6)) with the E2M1 rules and the stochastic-rounding
  contract of nvfp4_ref (imported from there, so that the two formats share one statement
  of the contract: element (i, j) of an orientation of width W takes Philox word i*W + j).
"""
from __future__ import annotations

import numpy as np
import torch

from nvfp4_ref import e2m1_decode, e2m1_rn, e2m1_sr, philox_bytes, swizzle  # noqa: F401 (re-exported)

BLOCK = 32
RULES = ("ocp", "ceil", "tetrajet")
NAN_BYTE = 0xFF


def f32(v):
    return torch.as_tensor(v, dtype=torch.float32)


def scale_exponent(amax: np.ndarray, rule: str) -> np.ndarray:
    """Unclamped exponent s (float64; NaN where M is NaN or inf; -inf where M == 0 for ocp/ceil)."""
    m = np.asarray(amax, dtype=np.float32).astype(np.float64)
    if rule == "tetrajet":
        m = np.where(m == 0, np.float64(np.float32(1e-8)), m)
    with np.errstate(divide="ignore", invalid="ignore"):
        if rule == "ocp":
            s = np.floor(np.log2(m)) - 2
        elif rule == "ceil":
            s = np.ceil(np.log2(m / 6.0))
        elif rule == "tetrajet":
            s = np.ceil(np.log2((2.0 * m) / (6.0 - (-6.0))))
        else:
            raise ValueError(rule)
    return np.where(np.isfinite(m), s, np.nan)


def scale_byte(amax: np.ndarray, rule: str) -> np.ndarray:
    """E8M0 bytes (uint8) of blocks with these maxima."""
    s = scale_exponent(amax, rule)
    out = np.full(s.shape, NAN_BYTE, dtype=np.int64)
    ok = ~np.isnan(s)
    sc = np.clip(s[ok], -127, None)  # -inf (M == 0) too
    b = np.where(sc > 127, NAN_BYTE, sc + 127)
    out[ok] = b.astype(np.int64)
    return out.astype(np.uint8)


def e8m0_value(b: torch.Tensor) -> torch.Tensor:
    """float64 2^(b-127), NaN for 0xFF."""
    b = b.to(torch.int64)
    v = torch.pow(torch.tensor(2.0, dtype=torch.float64), (b - 127).to(torch.float64))
    return torch.where(b == NAN_BYTE, torch.tensor(float("nan"), dtype=torch.float64), v)


def quantize_orientation(v: torch.Tensor, rounding: str = "rtn", rule: str = "ocp", seed: int = 0, offset: int = 0):
    """v: float32 [rows, cols], cols % 32 == 0. Returns (packed uint8 [rows, cols/2],
    linear scale bytes uint8 [rows, cols/32])."""
    rows, cols = v.shape
    nb = cols // BLOCK
    vb = v.reshape(rows, nb, BLOCK)
    amax = vb.abs().amax(dim=2) if v.numel() else torch.zeros(rows, nb)  # torch.amax propagates NaN
    sb = torch.from_numpy(scale_byte(amax.numpy(), rule))
    # 2^-s as float32 (exact: -s is in [-126, 127] for every byte but 0xFF)
    factor = torch.where(sb == NAN_BYTE, torch.tensor(float("nan"), dtype=torch.float64),
                         torch.pow(torch.tensor(2.0, dtype=torch.float64), (127 - sb.to(torch.int64)).double()))
    y = vb * factor.to(torch.float32)[:, :, None]
    y = torch.where(y > 6.0, f32(6.0), torch.where(y < -6.0, f32(-6.0), y)).reshape(rows, cols)
    if rounding == "rtn":
        codes = e2m1_rn(y)
    else:
        r = np.arange(rows, dtype=np.uint64)[:, None]
        c = np.arange(cols, dtype=np.uint64)[None, :]
        idx = (r * np.uint64(cols) + c).reshape(-1)
        rnd = philox_bytes(idx, seed, offset) if idx.size else np.zeros(0, np.uint8)
        codes = e2m1_sr(y, rnd)
    codes = codes.reshape(rows, cols)
    return codes[:, 0::2] | (codes[:, 1::2] << 4), sb


def quantize(x: torch.Tensor, rounding=("rtn", "rtn"), rule=("ocp", "ocp"), seed=0, offset=0):
    """Both orientations of x (2D view [R, C], C % 32 == 0): dict(row=(data, scales), col=(...)),
    scales linear. rounding / rule: (rowwise, columnwise) pairs or one name for both."""
    if isinstance(rounding, str):
        rounding = (rounding, rounding)
    if isinstance(rule, str):
        rule = (rule, rule)
    x2 = x.reshape(-1, x.shape[-1]).to(torch.float32)
    R, C = x2.shape
    Rp = (R + BLOCK - 1) // BLOCK * BLOCK
    col_v = torch.zeros(C, Rp)
    col_v[:, :R] = x2.t()
    return {"row": quantize_orientation(x2, rounding[0], rule[0], seed, offset),
            "col": quantize_orientation(col_v, rounding[1], rule[1], seed, offset)}


def decode_exact(packed: torch.Tensor, scales_linear: torch.Tensor) -> torch.Tensor:
    """float64 values e2m1 * 2^(b-127) (exact in float64), NaN for the NaN byte."""
    rows = packed.shape[0]
    codes = torch.stack([packed & 0xF, packed >> 4], dim=2).reshape(rows, -1)
    return e2m1_decode(codes).double() * e8m0_value(scales_linear).repeat_interleave(BLOCK, dim=1)


def dequantize(packed: torch.Tensor, scales_linear: torch.Tensor, dtype=torch.float32) -> torch.Tensor:
    """The exact values rounded once to dtype (float64 -> dtype rounds to nearest even and
    overflows to inf, as IEEE conversions do)."""
    return decode_exact(packed, scales_linear).to(dtype)
