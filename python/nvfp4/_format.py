"""Small format helpers shared by the Python modules (the numerics live in C++)."""
from __future__ import annotations

import torch

from . import _C

BLOCKS = {"1d": 0, "2d": 1}
ROUNDINGS = {"rtn": 0, "sr": 1}
SCALE_LAYOUTS = {"linear": 0, "swizzled": 1}
RHT_ROWWISE, RHT_COLUMNWISE = 1, 2

#: TransformerEngine's default wgrad sign vector.
DEFAULT_RHT_SIGNS = (1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1)


def signs_to_mask(signs) -> int:
    signs = [int(s) for s in signs]
    if len(signs) != 16 or any(s not in (1, -1) for s in signs):
        raise ValueError("rht_signs: must be 16 values, each +1 or -1")
    return sum(1 << i for i, s in enumerate(signs) if s < 0)


def mask_to_signs(mask: int) -> tuple:
    return tuple(-1 if (mask >> i) & 1 else 1 for i in range(16))


def hadamard16(dtype=torch.float32, device="cpu") -> torch.Tensor:
    h = torch.ones(1, 1, dtype=dtype, device=device)
    while h.shape[0] < 16:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h


def rht_matrix(mask: int, dtype=torch.float32, device="cpu") -> torch.Tensor:
    """The 16x16 matrix M with RHT(v) = v @ M = v . diag(signs) . H16 / 4."""
    s = torch.tensor(mask_to_signs(mask), dtype=dtype, device=device)
    return s[:, None] * hadamard16(dtype, device) / 4


def inverse_rht_blocks(y: torch.Tensor, mask: int) -> torch.Tensor:
    """Undo the RHT on every 16-block of the last dim (M is orthonormal: M^-1 = M^T)."""
    m = rht_matrix(mask, torch.float32, y.device)
    shp = y.shape
    return (y.float().reshape(-1, 16) @ m.t()).reshape(shp)


def global_decode_scale(amax: torch.Tensor) -> torch.Tensor:
    """1 / S_enc, in the contract's fp32 order (works on any device, no sync)."""
    amax = amax.float()
    # full_like, not `2688.0 / amax`: torch evaluates scalar / tensor as a reciprocal
    # times the scalar, which rounds twice and misses the contract by an ulp.
    s_enc = torch.clamp(torch.full_like(amax, 448.0 * 6.0) / amax, max=torch.finfo(torch.float32).max)
    s_enc = torch.where(s_enc == 0, torch.ones_like(s_enc), s_enc)
    return 1.0 / s_enc


def stream_of(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.current_stream(device).cuda_stream
    return 0


def default_rht_mask() -> int:
    return _C.default_rht_sign_mask()
