"""Backend registry: which GEMM backend runs where, and how (native, emulated, reference).

Everything here is read from the library's runner table (``nvfp4_runner_info`` in the C API):
the rows that dispatch chooses from are the rows reported, so the two cannot drift apart.
"""
from __future__ import annotations

import torch

from . import _ops

__all__ = ["BACKENDS", "is_supported", "supported_backends", "check_backend", "device_info", "runners"]

BACKENDS = {"auto": 0, "reference": 1, "cutlass": 2, "cudnn": 3}
_NAMES = {v: k for k, v in BACKENDS.items()}


def runners() -> list:
    """The library's GEMM runners, in dispatch order: one dict per row (name, backend, format,
    family, cc_min, cc_max, targets, kernels, shapes, description, built)."""
    rows = []
    for i in range(_ops.runner_count()):
        r = dict(_ops.runner_info(i))
        r["backend"] = _NAMES.get(r["backend"], str(r["backend"]))
        r["index"] = i
        rows.append(r)
    return rows


def _cc_str(cc: int) -> str:
    return f"{cc // 10}.{cc % 10}"


def _cc(device: torch.device) -> int:
    """Compute capability (major*10+minor) of a CUDA device, 0 for the CPU, -1 for anything
    else (another device type, or a CUDA device this process cannot see: no CUDA in torch,
    no driver, bad index)."""
    if device.type == "cpu":
        return 0
    if device.type != "cuda":
        return -1
    try:
        if device.index is not None:
            idx = device.index
        elif torch.cuda.is_available():
            idx = torch.cuda.current_device()
        else:
            idx = 0
    except Exception:
        return -1
    cc = _ops.cuda_device_cc(idx)
    return cc if cc > 0 else -1


def _needs(backend: str) -> str:
    """What a backend needs, in words, from the rows that serve it."""
    fams = []
    for r in runners():
        if r["backend"] != backend or r["family"] == "cpu":
            continue
        span = _cc_str(r["cc_min"]) if r["cc_min"] == r["cc_max"] else f"{_cc_str(r['cc_min'])}-{_cc_str(r['cc_max'])}"
        item = f"{r['family']} (compute capability {span})"
        if item not in fams:
            fams.append(item)
    what = "a CUDA GPU of " + ", ".join(fams) if fams else "a CUDA GPU"
    what += " whose target is compiled into this build"
    if backend == "cudnn":
        what += ", and cuDNN 9 (libcudnn.so.9, >= 9.7 on Blackwell) at run time"
    return what


def is_supported(backend: str, device=None) -> bool:
    """True if `backend` can run GEMMs on `device` (a torch device; default: CPU). Never raises."""
    if backend not in BACKENDS:
        return False
    try:
        dev = torch.device(device) if device is not None else torch.device("cpu")
    except Exception:
        return False
    cc = _cc(dev)
    if cc < 0:
        return False
    return bool(_ops.backend_supported(BACKENDS[backend], cc))


def supported_backends(device=None) -> list:
    return [b for b in ("reference", "cutlass", "cudnn") if is_supported(b, device)]


def check_backend(backend: str, device: torch.device) -> None:
    if backend not in BACKENDS:
        raise ValueError(f"backend: must be one of {list(BACKENDS)}, got {backend!r}")
    if backend == "auto":
        return
    if device.type == "cpu" and backend != "reference":
        raise ValueError(f"backend: {backend!r} needs CUDA tensors ({_needs(backend)}); "
                         "CPU tensors use backend='reference' or 'auto'")
    if device.type == "cuda" and backend == "reference":
        raise ValueError("backend: 'reference' runs on CPU tensors only; move them with .to('cpu')")
    if not is_supported(backend, device):
        cc = _cc(device)
        where = f"compute capability {_cc_str(cc)}" if cc > 0 else "no such CUDA device"
        raise RuntimeError(f"backend: {backend!r} cannot run on {device} ({where}); it needs {_needs(backend)}")


def _why_not(rows: list, cc: int) -> str:
    """Why no row of `rows` (one backend) runs on cc."""
    mine = [r for r in rows if r["cc_min"] <= cc <= r["cc_max"]]
    if not mine:
        return "no runner for this architecture"
    if not any(r["built"] for r in mine):
        return "not in this build"
    if not any(_ops.runner_compiled_for(r["index"], cc) for r in mine):
        targets = sorted({r["targets"] for r in mine if r["built"]})
        return (f"no kernel image for compute capability {_cc_str(cc)} (built for {', '.join(t or '-' for t in targets)};"
                " rebuild with NVFP4_CUDA_ARCHS=native)")
    return "libcudnn.so.9 not loadable or too old (cuDNN >= 9.7 on Blackwell)"


def device_info() -> dict:
    """What this build and this machine can do. Never raises."""
    info = {"version": None, "build_cuda_archs": [], "cuda_devices": [], "backends": {}, "runners": []}
    try:
        info["version"] = _ops.version()
        archs = _ops.build_cuda_archs()
        info["build_cuda_archs"] = [a for a in archs.split(";") if a]
        rows = runners()
        info["runners"] = rows
        by_backend = {b: [r for r in rows if r["backend"] == b] for b in ("cutlass", "cudnn")}
        n = _ops.cuda_device_count()
        for i in range(n):
            cc = _ops.cuda_device_cc(i)
            name = None
            try:
                name = torch.cuda.get_device_name(i) if torch.cuda.is_available() else None
            except Exception:
                pass
            modes = {}
            for b, brows in by_backend.items():
                usable = [r for r in brows if _ops.runner_supported(r["index"], cc)]
                if usable:
                    modes[b] = "; ".join(
                        r["description"] + ("" if r["shapes"] == "any shape" else f" [{r['shapes']}]") for r in usable)
                else:
                    modes[b] = "not available: " + _why_not(brows, cc)
            info["cuda_devices"].append({"index": i, "name": name, "compute_capability": cc / 10, "backends": modes})
        # A runner is listed only when this build has it; cudnn also needs libcudnn.so.9 to
        # load here (checked at the first compute capability of its family).
        backends = {}
        for r in rows:
            if not r["built"]:
                continue
            key = r["backend"] if r["family"] == "cpu" else f"{r['backend']}@{r['family']}"
            if r["family"] == "cpu":
                text = r["description"] + " (always available)"
            elif not _ops.runner_compiled_for(r["index"], r["cc_min"]) and not _ops.runner_compiled_for(r["index"], r["cc_max"]):
                continue  # its kernels were not compiled for this family
            elif not _ops.runner_supported(r["index"], r["cc_min"]) and not _ops.runner_supported(r["index"], r["cc_max"]):
                text = "not available (libcudnn.so.9 not loadable or too old)"
            else:
                text = r["description"] + (f" [{r['shapes']}]" if r["shapes"] != "any shape" else "")
            backends[key] = f"{backends[key]}; {text}" if key in backends else text
        info["backends"] = backends
        info["torch_cuda_available"] = bool(torch.cuda.is_available())
    except Exception as e:  # device_info must never throw
        info["error"] = f"{type(e).__name__}: {e}"
    return info
