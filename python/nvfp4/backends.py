"""Backend registry: which GEMM backend runs where, and how (native, emulated, reference)."""
from __future__ import annotations

from typing import Optional

import torch

from . import _C

__all__ = ["BACKENDS", "is_supported", "supported_backends", "check_backend", "device_info"]

BACKENDS = {"auto": 0, "reference": 1, "cutlass": 2, "cudnn": 3}

# What each backend does on each architecture family (DESIGN.md section 3).
_MODE = {
    ("cutlass", 90): "exact emulation: FP4 -> BF16 decode + CUTLASS sm90 BF16 GEMM",
    ("cudnn", 90): "exact emulation: FP4 -> BF16 decode + cuDNN BF16 matmul",
    ("cutlass", 100): "native: CUTLASS sm100 block-scaled GEMM (built, not run on hardware)",
    ("cudnn", 100): "native: cuDNN block_scale_dequantize + matmul (built, not run on hardware)",
    ("cutlass", 120): "native: CUTLASS sm120 block-scaled GEMM (built, not run on hardware)",
    ("cudnn", 120): "native where cuDNN accepts (built, not run on hardware)",
}
_NEEDS = {
    "cutlass": "a CUDA GPU of compute capability 9.0 (Hopper, emulated), 10.x (B200/GB200/B300) or 12.x (RTX 50)"
               " with its architecture compiled into this build",
    "cudnn": "a CUDA GPU of compute capability 9.0, 10.x or 12.x and cuDNN 9 (libcudnn.so.9)",
}


def _cc(device: torch.device) -> int:
    if device.type != "cuda":
        return 0
    idx = device.index if device.index is not None else torch.cuda.current_device()
    return _C.cuda_device_cc(idx)


def is_supported(backend: str, device=None) -> bool:
    """True if `backend` can run GEMMs on `device` (a torch device; default: CPU)."""
    if backend not in BACKENDS:
        return False
    dev = torch.device(device) if device is not None else torch.device("cpu")
    return bool(_C.backend_supported(BACKENDS[backend], _cc(dev)))


def supported_backends(device=None) -> list:
    return [b for b in ("reference", "cutlass", "cudnn") if is_supported(b, device)]


def check_backend(backend: str, device: torch.device) -> None:
    if backend not in BACKENDS:
        raise ValueError(f"backend: must be one of {list(BACKENDS)}, got {backend!r}")
    if backend == "auto":
        return
    if device.type == "cpu" and backend != "reference":
        raise ValueError(f"backend: {backend!r} needs CUDA tensors ({_NEEDS[backend]}); "
                         "CPU tensors use backend='reference' or 'auto'")
    if device.type == "cuda" and backend == "reference":
        raise ValueError("backend: 'reference' runs on CPU tensors only; move them with .to('cpu')")
    if not is_supported(backend, device):
        raise RuntimeError(f"backend: {backend!r} cannot run on {device} (compute capability "
                           f"{_cc(device) / 10:.1f}); it needs {_NEEDS.get(backend, 'a CPU')}")


def device_info() -> dict:
    """What this build and this machine can do. Never raises."""
    info = {"version": None, "build_cuda_archs": [], "cuda_devices": [], "backends": {}}
    try:
        info["version"] = _C.version()
        archs = _C.build_cuda_archs()
        info["build_cuda_archs"] = [a for a in archs.split(";") if a]
        n = _C.cuda_device_count()
        for i in range(n):
            cc = _C.cuda_device_cc(i)
            name = None
            try:
                name = torch.cuda.get_device_name(i) if torch.cuda.is_available() else None
            except Exception:
                pass
            modes = {}
            for b in ("cutlass", "cudnn"):
                ok = bool(_C.backend_supported(BACKENDS[b], cc))
                fam = 90 if cc // 10 == 9 else (100 if cc // 10 == 10 else (120 if cc // 10 == 12 else cc))
                modes[b] = _MODE.get((b, fam), "not available") if ok else "not available"
            info["cuda_devices"].append({"index": i, "name": name, "compute_capability": cc / 10, "backends": modes})
        # A runner is listed only when this build has it (the library says so, per
        # architecture); cudnn also needs libcudnn.so.9 to load here.
        backends = {"reference": "CPU, float64 accumulation (always available)"}
        for (b, fam), m in _MODE.items():
            if f"{fam}a" not in info["build_cuda_archs"]:
                continue
            ok = bool(_C.backend_supported(BACKENDS[b], fam))
            backends[f"{b}@sm_{fam}"] = m if ok else (
                "not available (libcudnn.so.9 not loadable or cuDNN runner not built)" if b == "cudnn"
                else "not built")
        info["backends"] = backends
        info["torch_cuda_available"] = bool(torch.cuda.is_available())
    except Exception as e:  # device_info must never throw
        info["error"] = f"{type(e).__name__}: {e}"
    return info
