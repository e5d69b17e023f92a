"""An independent model of the recipe options (docs/design.md §1.6), written from their
definitions (TransformerEngine's 4over6 and row-scaled rules as its source states them; the
Quartet II paper's MS-EDEN; the percentile amax) in plain torch/NumPy on top of
nvfp4_ref's element formats. It never calls into nvfp4. The library must match it bit for
bit: every quantity that the definitions fix in FP32 is computed here in FP32 (torch float32
tensors, one rounding per operation, element by element in the stated order); the
quantities the definitions leave exact (order statistics, E4M3 neighbours, SR thresholds)
are computed exactly, in float64 or integers.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from nvfp4_ref import (FLT_MAX, e2m1_decode, e2m1_rn, e4m3_bits, e4m3_value, f32, global_encode_scale, philox,
                       rht_fwht)

MASK = np.uint64(0xFFFFFFFF)


def _clamp6(y):
    return torch.where(y > 6.0, f32(6.0), torch.where(y < -6.0, f32(-6.0), y))


def _encode_factor(sb, s_dec):
    e = f32(1.0) / (e4m3_value(sb) * s_dec)
    return torch.where(e > FLT_MAX, f32(FLT_MAX), e)


def _pack(codes):
    return codes[:, 0::2] | (codes[:, 1::2] << 4)


def bound_amax(a, bound):
    return a * f32(1.75) if bound == 256 else a


def _absmax_rows(v):
    a = v.abs()
    if v.shape[1] == 0:
        return torch.zeros(v.shape[0])
    m = a.amax(dim=1)
    return torch.where(torch.isnan(a).any(dim=1), f32(float("nan")), m)


def _absmax(v):
    if v.numel() == 0:
        return f32(0.0)
    a = v.abs()
    return f32(float("nan")) if torch.isnan(a).any() else a.max()


# ---------------------------------------------------------------- 4over6
def fos_scales(bamax, s_enc):
    base = (bamax / f32(6.0)) * s_enc
    c = lambda t: torch.where(t > 448.0, f32(448.0), torch.where(t < -448.0, f32(-448.0), t))
    return e4m3_bits(c(base * f32(1.5))), e4m3_bits(c(base))


def fos_candidate(vb, sb, s_dec, amax_row, denom, mse):
    """vb [rows, nb, 16]; sb [rows, nb] bytes; amax_row [rows] (before the bound).
    Returns (codes [rows, nb, 16], err [rows, nb]) with the sum in element order."""
    e = _encode_factor(sb, s_dec[:, None] if s_dec.dim() else s_dec)
    codes = e2m1_rn(_clamp6(vb * e[:, :, None]))
    sf = e4m3_value(sb)
    err = torch.zeros(sb.shape, dtype=torch.float32)
    for i in range(16):
        val = ((e2m1_decode(codes[:, :, i]) * sf) * amax_row[:, None]) / denom
        d = val - vb[:, :, i]
        err = err + (d * d if mse else d.abs())
    return codes, err


def _tile_error(e):  # e [tiles..., 16 rows]: TransformerEngine's reduction order
    a = e[..., 0:8] + e[..., 8:16]
    b = a[..., 0:4] + a[..., 4:8]
    return (b[..., 0] + b[..., 2]) + (b[..., 1] + b[..., 3])


def fos_quantize(x, mode="mae", bound=448, block="1d", amax=None, rows_amax=False):
    """4over6 of x [R, C] in both orientations. amax: None (the tensor's), or a float given.
    Returns dict(row=(packed, scales, stored amax), col=(...))."""
    x = x.to(torch.float32)
    R, C = x.shape
    mse = mode == "mse"
    denom = f32(6.0 * bound)
    Rp = (R + 15) // 16 * 16
    col_v = torch.zeros(C, Rp)
    col_v[:, :R] = x.t()
    out = {}
    if block == "2d":
        a = _absmax(x) if amax is None else f32(amax)
        s_enc = global_encode_scale(bound_amax(a, bound))
        s_dec = f32(1.0) / s_enc
        xp = torch.zeros(Rp, C)
        xp[:R] = x
        tiles = xp.reshape(Rp // 16, 16, C // 16, 16).permute(0, 2, 1, 3)  # [tr, tc, 16 rows, 16]
        ta = tiles.abs().amax(dim=(2, 3))
        ta = torch.where(torch.isnan(tiles).any(dim=3).any(dim=2), f32(float("nan")), ta)
        m4, m6 = fos_scales(ta, s_enc)
        tr, tc = ta.shape
        flat = tiles.reshape(tr * tc * 16, 1, 16)
        am = a.expand(tr * tc * 16)
        _, e4 = fos_candidate(flat, m4.repeat_interleave(16).reshape(-1, 1), s_dec, am, denom, mse)
        _, e6 = fos_candidate(flat, m6.repeat_interleave(16).reshape(-1, 1), s_dec, am, denom, mse)
        pick = _tile_error(e4.reshape(tr, tc, 16)) < _tile_error(e6.reshape(tr, tc, 16))
        sb = torch.where(pick, m4, m6)  # [tr, tc]
        e = _encode_factor(sb, s_dec)
        codes = e2m1_rn(_clamp6(tiles * e[:, :, None, None]))  # [tr, tc, 16, 16]
        rows_codes = codes.permute(0, 2, 1, 3).reshape(Rp, C)[:R]
        row_sb = sb.repeat_interleave(16, dim=0)[:R]
        col_codes = codes.permute(1, 3, 0, 2).reshape(C, Rp)
        col_sb = sb.t().repeat_interleave(16, dim=0)
        stored = bound_amax(a, bound).reshape(1)
        out["row"] = (_pack(rows_codes), row_sb, stored)
        out["col"] = (_pack(col_codes), col_sb, stored)
        return out
    for name, v in (("row", x), ("col", col_v)):
        rows, cols = v.shape
        if rows_amax:
            a = _absmax_rows(v)
        else:
            a = (_absmax(v) if amax is None else f32(amax)).expand(rows)
        s_enc = global_encode_scale(bound_amax(a, bound))
        s_dec = f32(1.0) / s_enc
        vb = v.reshape(rows, cols // 16, 16)
        ba = vb.abs().amax(dim=2) if cols else torch.zeros(rows, 0)
        ba = torch.where(torch.isnan(vb).any(dim=2), f32(float("nan")), ba)
        m4, m6 = fos_scales(ba, s_enc[:, None])
        c4, e4 = fos_candidate(vb, m4, s_dec, a, denom, mse)
        c6, e6 = fos_candidate(vb, m6, s_dec, a, denom, mse)
        pick = e4 < e6
        codes = torch.where(pick[:, :, None], c4, c6).reshape(rows, cols)
        stored = bound_amax(a, bound)
        out[name] = (_pack(codes), torch.where(pick, m4, m6), stored if rows_amax else stored[:1])
    return out


# ---------------------------------------------------------------- row-scaled / given amax, RTN
def scaled_quantize(x, amax=None, rows_amax=False, block="1d"):
    """The contract's RTN quantization with a given amax (float) or one amax per row of
    each orientation. Returns dict(row=..., col=...) as fos_quantize."""
    x = x.to(torch.float32)
    R, C = x.shape
    Rp = (R + 15) // 16 * 16
    col_v = torch.zeros(C, Rp)
    col_v[:, :R] = x.t()
    out = {}
    for name, v in (("row", x), ("col", col_v)):
        rows, cols = v.shape
        if rows_amax:
            a = _absmax_rows(v)
        else:
            a = (_absmax(v) if amax is None else f32(amax)).expand(rows)
        s_enc = global_encode_scale(a)
        s_dec = f32(1.0) / s_enc
        vb = v.reshape(rows, cols // 16, 16)
        if block == "1d":
            ba = vb.abs().amax(dim=2)
            ba = torch.where(torch.isnan(vb).any(dim=2), f32(float("nan")), ba)
        else:
            rp = (rows + 15) // 16 * 16
            pad = torch.zeros(rp, cols)
            pad[:rows] = v
            t = pad.reshape(rp // 16, 16, cols // 16, 16)
            ta = t.abs().amax(dim=(1, 3))
            ta = torch.where(torch.isnan(t).any(dim=3).any(dim=1), f32(float("nan")), ta)
            ba = ta.repeat_interleave(16, dim=0)[:rows]
        bs = ba * (s_enc[:, None] * f32(1.0 / 6.0))
        bs = torch.where(bs > FLT_MAX, f32(FLT_MAX), bs)
        sb = e4m3_bits(torch.where(bs > 448.0, f32(448.0), bs))
        e = _encode_factor(sb, s_dec[:, None])
        codes = e2m1_rn(_clamp6(vb * e[:, :, None])).reshape(rows, cols)
        out[name] = (_pack(codes), sb, a if rows_amax else a[:1])
    return out


def percentile(x, q):
    """k-th smallest |x|, k = min(n, max(1, ceil(q n))), exact (float64 sort of float32 values)."""
    a = np.abs(x.reshape(-1).to(torch.float32).numpy().astype(np.float64))
    if a.size == 0:
        return 0.0
    if np.isnan(a).any():
        return float("nan")
    k = min(a.size, max(1, math.ceil(q * a.size)))
    return float(np.sort(a)[k - 1])


# ---------------------------------------------------------------- MS-EDEN
def e4m3_sr(t: np.ndarray, r: np.ndarray) -> np.ndarray:
    """E4M3 bytes of t >= 0 (float32 values, or NaN): the lower E4M3 neighbour lo or the upper
    one, the upper iff floor(65536 (t - lo) / (hi - lo)) + r >= 65536 (exact, in float64);
    448 at or above 448."""
    grid = np.array([float(torch.tensor(i, dtype=torch.uint8).view(torch.float8_e4m3fn).float()) for i in range(127)])
    out = np.zeros(t.shape, dtype=np.uint8)
    for idx, v in np.ndenumerate(t):
        v = float(v)
        if math.isnan(v):
            out[idx] = 0x7F
            continue
        if v >= 448.0:
            out[idx] = 0x7E
            continue
        lo = int(np.searchsorted(grid, v, side="right") - 1)
        if grid[lo] == v:
            out[idx] = lo
            continue
        f = (v - grid[lo]) / (grid[lo + 1] - grid[lo])
        out[idx] = lo + 1 if math.floor(f * 65536.0) + int(r[idx]) >= 65536 else lo
    return out


def _philox_word0(idx0: np.ndarray, seed: int, offset: int) -> np.ndarray:
    g = (idx0.astype(np.uint64) >> np.uint64(4))
    ctr = np.stack([g & MASK, g >> np.uint64(32), np.full_like(g, offset & 0xFFFFFFFF),
                    np.full_like(g, (offset >> 32) & 0xFFFFFFFF)], axis=1).astype(np.uint32)
    return (philox(ctr, seed)[:, 0] & np.uint32(0xFFFF)).astype(np.int64)


def eden_orientation(v: torch.Tensor, seed: int, offset: int):
    """MS-EDEN of v [rows, cols] (already rotated). Returns (packed, scales, amax)."""
    rows, cols = v.shape
    vb = v.reshape(rows, cols // 16, 16)
    ba = vb.abs().amax(dim=2)
    ba = torch.where(torch.isnan(vb).any(dim=2), f32(float("nan")), ba)
    s = ba * f32(1.0 / 6.0)
    s = torch.from_numpy((s.numpy().view(np.uint32) & np.uint32(0xFFF80000)).view(np.float32))
    e = f32(1.0) / s
    e = torch.where(e > FLT_MAX, f32(FLT_MAX), e)
    u = vb * e[:, :, None]
    codes = e2m1_rn(_clamp6(u))
    q = e2m1_decode(codes)
    uu = torch.zeros(rows, cols // 16)
    uq = torch.zeros(rows, cols // 16)
    for i in range(16):
        uu = uu + u[:, :, i] * u[:, :, i]
        uq = uq + u[:, :, i] * q[:, :, i]
    c = torch.where(uq == 0, f32(1.0), uu / uq)
    f = s * c
    max_f = f32(float("nan")) if torch.isnan(f).any() else (f.max() if f.numel() else f32(0.0))
    A = max_f * f32(10.5)
    s_enc = global_encode_scale(A)
    t = (f * s_enc).numpy()
    r = np.arange(rows, dtype=np.uint64)[:, None] * np.uint64((cols + 15) // 16 * 16) + \
        np.arange(0, cols, 16, dtype=np.uint64)[None, :]
    rnd = _philox_word0(r.reshape(-1), seed, offset).reshape(rows, cols // 16)
    sb = torch.from_numpy(e4m3_sr(t, rnd))
    return _pack(codes.reshape(rows, cols)), sb, A.reshape(1)


def eden_quantize(x, seed=0, offset=0, signs=None):
    """MS-EDEN of both orientations of x [R, C], each rotated by the 16-point RHT."""
    x = x.to(torch.float32)
    R, C = x.shape
    kw = {} if signs is None else {"signs": signs}
    Rp = (R + 15) // 16 * 16
    col_v = torch.zeros(C, Rp)
    col_v[:, :R] = x.t()
    return {"row": eden_orientation(rht_fwht(x, **kw), seed, offset),
            "col": eden_orientation(rht_fwht(col_v, **kw), seed, offset)}


def eden_dequantize(packed, sb, A):
    codes = torch.stack([packed & 0xF, packed >> 4], dim=2).reshape(packed.shape[0], -1)
    s_dec = f32(1.0) / global_encode_scale(A)
    return e2m1_decode(codes) * e4m3_value(sb).repeat_interleave(16, dim=1) * s_dec
