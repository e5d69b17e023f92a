"""An independent NVFP4 reference quantizer for the tests, written from docs/design.md §1 in
plain torch/NumPy (it never calls into nvfp4). The C++ reference and the kernels must
match it bit for bit.

Definitions it shares with the library by contract (not by code):
- E2M1 RN thresholds on |v|, sign kept, NaN -> 0x7.
- SR: for a = min(|v|, 6) in [lo, hi) between two E2M1 neighbours and f = (a-lo)/(hi-lo),
  round to hi iff floor(256 * f) + r >= 256, r the element's random byte: Philox4x32-10 with
  key = seed (lo, hi words), counter = (idx//16 lo, idx//16 hi, offset lo, offset hi); the
  four output words read as 16 little-endian bytes, byte idx % 16 (= byte idx % 4 of word
  (idx % 16) // 4), where idx = row * roundup(cols, 16) + col in the orientation being
  quantized.
- RHT: signs, then the butterfly (a, b) -> (a + b, a - b) with strides 1, 2, 4, 8, then
  * 0.25, all in fp32.
- amax and block amax propagate NaN.
"""
from __future__ import annotations

import numpy as np
import torch

FLT_MAX = float(np.finfo(np.float32).max)
E2M1_VALUES = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
DEFAULT_SIGNS = [1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1]


def f32(v):
    return torch.as_tensor(v, dtype=torch.float32)


# ---------------------------------------------------------------- element formats
def e2m1_rn(v: torch.Tensor) -> torch.Tensor:
    """uint8 codes (0..15) of float32 v, round-to-nearest-even with saturation."""
    a = v.abs()
    m = torch.full(v.shape, 7, dtype=torch.uint8)
    # Walk the thresholds from the top so the smallest matching bucket wins.
    for thr, strict, code in ((5.0, False, 6), (3.5, True, 5), (2.5, False, 4), (1.75, True, 3),
                              (1.25, False, 2), (0.75, True, 1), (0.25, False, 0)):
        hit = (a < thr) if strict else (a <= thr)
        m = torch.where(hit, torch.tensor(code, dtype=torch.uint8), m)
    nan = torch.isnan(v)
    sign = torch.signbit(v) & ~nan
    return m | (sign.to(torch.uint8) << 3)


def e2m1_sr(v: torch.Tensor, rnd: np.ndarray) -> torch.Tensor:
    """Codes of float32 v rounded stochastically with the random bytes rnd (uint8 values)."""
    grid = torch.tensor(E2M1_VALUES, dtype=torch.float32)
    a = v.abs()
    nan = torch.isnan(v)
    a_c = torch.where(nan, torch.zeros_like(a), torch.clamp(a, max=6.0))
    lo = (torch.searchsorted(grid, a_c, right=True) - 1).clamp(0, 7)
    hi = (lo + 1).clamp(max=7)
    gap = torch.where(hi > lo, grid[hi] - grid[lo], torch.ones_like(a_c))
    # a - lo is exact (Sterbenz) and gap a power of two: f and 256 * f are exact in fp32
    f = (a_c - grid[lo]) / gap
    f256 = torch.floor(f * 256.0).to(torch.int64)
    r = torch.from_numpy(rnd.astype(np.int64)).reshape(v.shape)
    code = torch.where((f256 + r >= 256) & (hi > lo), hi, lo).to(torch.uint8)
    code = torch.where(nan, torch.tensor(7, dtype=torch.uint8), code)
    sign = torch.signbit(v) & ~nan
    return code | (sign.to(torch.uint8) << 3)


def e2m1_decode(codes: torch.Tensor) -> torch.Tensor:
    mag = torch.tensor(E2M1_VALUES, dtype=torch.float32)[(codes & 7).long()]
    return torch.where((codes & 8) != 0, -mag, mag)


def e4m3_bits(v: torch.Tensor) -> torch.Tensor:
    """E4M3 bytes of float32 v already clamped to [-448, 448]; NaN -> 0x7f."""
    b = v.to(torch.float8_e4m3fn).view(torch.uint8)
    return torch.where(torch.isnan(v), torch.tensor(0x7F, dtype=torch.uint8), b)


def e4m3_value(b: torch.Tensor) -> torch.Tensor:
    return b.view(torch.float8_e4m3fn).to(torch.float32)


# ---------------------------------------------------------------- scales
def global_encode_scale(amax: torch.Tensor) -> torch.Tensor:
    s = f32(448.0 * 6.0) / amax.to(torch.float32)
    s = torch.where(s > FLT_MAX, f32(FLT_MAX), s)  # NaN stays NaN
    return torch.where(s == 0, f32(1.0), s)


def nan_amax(t: torch.Tensor, dim=None) -> torch.Tensor:
    a = t.abs()
    if dim is None:
        return a.max() if a.numel() else f32(0.0)
    return a.amax(dim=dim)  # torch.amax propagates NaN


def block_scale(block_amax: torch.Tensor, s_enc: torch.Tensor) -> torch.Tensor:
    v = block_amax * (s_enc * f32(1.0 / 6.0))
    v = torch.where(v > FLT_MAX, f32(FLT_MAX), v)
    v = torch.where(v > 448.0, f32(448.0), torch.where(v < -448.0, f32(-448.0), v))
    return e4m3_bits(v)


# ---------------------------------------------------------------- Philox4x32-10
M0, M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
W0, W1 = np.uint32(0x9E3779B9), np.uint32(0xBB67AE85)
MASK = np.uint64(0xFFFFFFFF)


def philox(counters: np.ndarray, seed: int, ) -> np.ndarray:
    """counters: uint32 [n, 4]; returns uint32 [n, 4]."""
    c = [counters[:, i].astype(np.uint64) for i in range(4)]
    k0 = np.uint64(seed & 0xFFFFFFFF)
    k1 = np.uint64((seed >> 32) & 0xFFFFFFFF)
    for _ in range(10):
        p0 = M0 * c[0]
        p1 = M1 * c[2]
        hi0, lo0 = p0 >> np.uint64(32), p0 & MASK
        hi1, lo1 = p1 >> np.uint64(32), p1 & MASK
        c = [hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0]
        k0 = (k0 + np.uint64(W0)) & MASK
        k1 = (k1 + np.uint64(W1)) & MASK
    return np.stack(c, axis=1).astype(np.uint32)


def philox_bytes(idx: np.ndarray, seed: int, offset: int) -> np.ndarray:
    """The random byte of each element index: Philox call idx // 16, byte idx % 16."""
    idx = idx.astype(np.uint64)
    g = idx >> np.uint64(4)
    ctr = np.stack([g & MASK, g >> np.uint64(32), np.full_like(g, offset & 0xFFFFFFFF),
                    np.full_like(g, (offset >> 32) & 0xFFFFFFFF)], axis=1).astype(np.uint32)
    out = philox(ctr, seed)
    k = (idx & np.uint64(15)).astype(np.int64)
    words = out[np.arange(len(idx)), k >> 2]
    return ((words >> (8 * (k & 3)).astype(np.uint32)) & np.uint32(0xFF)).astype(np.uint8)


# ---------------------------------------------------------------- RHT
def rht_fwht(v: torch.Tensor, signs=DEFAULT_SIGNS) -> torch.Tensor:
    """Blocks of 16 along the last dim, in the contract's fp32 order."""
    shp = v.shape
    x = v.reshape(-1, 16).to(torch.float32).clone()
    s = torch.tensor(signs)
    x = torch.where(s < 0, -x, x)
    h = 1
    while h < 16:
        x = x.reshape(-1, 16 // (2 * h), 2, h)
        a, b = x[:, :, 0, :], x[:, :, 1, :]
        x = torch.stack([a + b, a - b], dim=2).reshape(-1, 16)
        h *= 2
    return (x * f32(0.25)).reshape(shp)


# ---------------------------------------------------------------- layouts
def swizzle_offset(r, c, cols):
    cp = (cols + 3) // 4 * 4
    return (r // 128) * (cp // 4) * 512 + (c // 4) * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + (c % 4)


def swizzle(lin: torch.Tensor) -> torch.Tensor:
    R, C = lin.shape
    Rp, Cp = (R + 127) // 128 * 128, (C + 3) // 4 * 4
    out = torch.zeros(Rp * Cp, dtype=lin.dtype)
    r = torch.arange(R)[:, None].expand(R, C)
    c = torch.arange(C)[None, :].expand(R, C)
    out[swizzle_offset(r, c, C).reshape(-1)] = lin.reshape(-1)
    return out.reshape(Rp, Cp)


# ---------------------------------------------------------------- quantization
def quantize_orientation(v: torch.Tensor, block="1d", rounding="rtn", seed=0, offset=0):
    """v: float32 [rows, cols] (cols % 16 == 0). Returns (packed uint8 [rows, cols/2],
    linear scales uint8 [rows, cols/16], amax float32)."""
    rows, cols = v.shape
    amax = nan_amax(v) if v.numel() else f32(0.0)
    s_enc = global_encode_scale(amax)
    s_dec = f32(1.0) / s_enc
    vb = v.reshape(rows, cols // 16, 16)
    if block == "1d":
        bamax = nan_amax(vb, dim=2) if v.numel() else torch.zeros(rows, cols // 16)
    else:
        rp = (rows + 15) // 16 * 16
        padded = torch.zeros(rp, cols)
        padded[:rows] = v
        t = padded.reshape(rp // 16, 16, cols // 16, 16).abs().amax(dim=(1, 3))
        bamax = t.repeat_interleave(16, dim=0)[:rows]
    sb = block_scale(bamax, s_enc)
    e = f32(1.0) / (e4m3_value(sb) * s_dec)
    e = torch.where(e > FLT_MAX, f32(FLT_MAX), e)
    y = vb * e[:, :, None]
    y = torch.where(y > 6.0, f32(6.0), torch.where(y < -6.0, f32(-6.0), y))
    if rounding == "rtn":
        codes = e2m1_rn(y)
    else:
        r = np.arange(rows, dtype=np.uint64)[:, None]
        c = np.arange(cols, dtype=np.uint64)[None, :]
        idx = (r * np.uint64((cols + 15) // 16 * 16) + c).reshape(-1)
        rnd = philox_bytes(idx, seed, offset) if idx.size else np.zeros(0, np.uint8)
        codes = e2m1_sr(y, rnd)
    codes = codes.reshape(rows, cols)
    packed = codes[:, 0::2] | (codes[:, 1::2] << 4)
    return packed, sb, amax


def quantize(x: torch.Tensor, block="1d", rounding="rtn", rht=(), seed=0, offset=0, signs=DEFAULT_SIGNS):
    """Both orientations of x (2D view [R, C]). rht: set of {"rowwise", "columnwise"}.
    Returns dict(row=(data, scales, amax), col=(...))."""
    x2 = x.reshape(-1, x.shape[-1]).to(torch.float32)
    R, C = x2.shape
    row_v = rht_fwht(x2, signs) if "rowwise" in rht else x2
    Rp = (R + 15) // 16 * 16
    col_v = torch.zeros(C, Rp)
    col_v[:, :R] = x2.t()
    if "columnwise" in rht:
        col_v = rht_fwht(col_v, signs)
    return {"row": quantize_orientation(row_v, block, rounding, seed, offset),
            "col": quantize_orientation(col_v, block, rounding, seed, offset)}


def dequantize(packed: torch.Tensor, scales_linear: torch.Tensor, amax: torch.Tensor) -> torch.Tensor:
    rows = packed.shape[0]
    codes = torch.stack([packed & 0xF, packed >> 4], dim=2).reshape(rows, -1)
    s_dec = f32(1.0) / global_encode_scale(amax)
    vals = e2m1_decode(codes) * e4m3_value(scales_linear).repeat_interleave(16, dim=1)
    return vals * s_dec
