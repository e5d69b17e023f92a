"""examples/finetune_lora.py --smoke on the CPU: a frozen-FP4 and a BF16-base LoRA run with
their comparison, and an interrupted run resumed in a fresh process that ends with the same
bits as the uninterrupted one (adapters, optimizer state, counters, losses)."""
import contextlib
import importlib
import io
import json
import os
import subprocess
import sys

import pytest
import torch

pytest.importorskip("transformers")

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples")


HAS_CUDA = torch.cuda.is_available()


def _argv(tmp, out, *extra):
    return ["--smoke", "--steps", "6", "--eval-interval", "3", "--data", str(tmp / "data"), "--data-max-mb", "6",
            "--out", str(tmp / out), *extra]


def _run(tmp, out, *extra):
    """In a fresh process (one thread: tiny matmuls, and the same summation order as the
    in-process runs)."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [sys.executable, os.path.join(EXAMPLES, "finetune_lora.py"), *_argv(tmp, out, *extra)]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"{' '.join(cmd)}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p.stdout


def _run_here(tmp, out, *extra):
    """In this process (saves the start-up of another interpreter), on one thread."""
    sys.path.insert(0, EXAMPLES)
    threads = torch.get_num_threads()
    rng = torch.get_rng_state()
    torch.set_num_threads(1)
    buf = io.StringIO()
    try:
        example = importlib.import_module("finetune_lora")
        with contextlib.redirect_stdout(buf):
            example.main(_argv(tmp, out, *extra))
    finally:
        torch.set_num_threads(threads)
        torch.set_rng_state(rng)
        sys.path.remove(EXAMPLES)
    return buf.getvalue()


def _ckpt(path):
    return torch.load(path, map_location="cpu", weights_only=True)


def _same(a, b, what):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), what
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), what
        for k in a:
            _same(a[k], b[k], f"{what}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), what
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{what}[{i}]")
    else:
        assert a == b, f"{what}: {a!r} != {b!r}"


def test_finetune_lora_smoke_and_resume(tmp_path):
    out = _run_here(tmp_path, "full", "--base", "both")
    assert "lora-compare.md" in out
    rep = json.loads((tmp_path / "full" / "lora-fp4.json").read_text())
    assert rep["steps"] == 6 and rep["base"] == "fp4"
    hp = json.loads((tmp_path / "full" / "lora-fp32.json").read_text())  # the CPU's high-precision base is FP32
    assert hp["base"] == "fp32" and hp["config"]["dtype"] == "torch.float32"
    assert rep["memory"]["weights"]["base_linear"] < 0.3 * hp["memory"]["weights"]["base_linear"] * 2
    compare = (tmp_path / "full" / "lora-compare.md").read_text()
    assert "frozen FP4 base vs FP32 base" in compare and "FP4 / FP32: " in compare and "(FP4 / BF16: " in compare
    vc = rep["val_curve"]
    assert [v["step"] for v in vc] == [3, 6] and vc[1]["val_loss"] < vc[0]["val_loss"]
    assert (tmp_path / "full" / "lora-compare.md").exists()

    # interrupted after 3 steps, resumed in a fresh process for the other 3
    _run_here(tmp_path, "resumed", "--base", "fp4", "--stop-after", "3")
    part = _ckpt(tmp_path / "resumed" / "lora-fp4-ckpt" / "ckpt.pt")
    assert part["step"] == 3
    assert max(int(v) for v in part["counters"].values()) == 3  # the frozen layers' SR counters are saved
    _run(tmp_path, "resumed", "--base", "fp4", "--resume")
    full = _ckpt(tmp_path / "full" / "lora-fp4-ckpt" / "ckpt.pt")
    resumed = _ckpt(tmp_path / "resumed" / "lora-fp4-ckpt" / "ckpt.pt")
    assert full["step"] == resumed["step"] == 6
    for key in ("adapters", "counters", "optimizer", "curve", "val_curve", "rng"):
        _same(resumed[key], full[key], key)
    assert len(full["adapters"]) == 2 * 14 and any(v.abs().sum() > 0 for k, v in full["adapters"].items()
                                                   if k.endswith("lora_B"))


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_finetune_lora_resume_cuda(tmp_path):
    """The same on the GPU (BF16 model and adapters; eager attention, whose backward is
    deterministic), with activation checkpointing."""
    args = ("--device", "cuda", "--attn", "eager", "--recompute", "--dropout", "0.1")
    _run(tmp_path, "full", "--base", "fp4", *args)
    _run(tmp_path, "resumed", "--base", "fp4", "--stop-after", "3", *args)
    _run(tmp_path, "resumed", "--base", "fp4", "--resume", *args)
    full = _ckpt(tmp_path / "full" / "lora-fp4-ckpt" / "ckpt.pt")
    resumed = _ckpt(tmp_path / "resumed" / "lora-fp4-ckpt" / "ckpt.pt")
    for key in ("adapters", "counters", "optimizer", "curve", "val_curve"):
        _same(resumed[key], full[key], key)
    rep = json.loads((tmp_path / "full" / "lora-fp4.json").read_text())
    assert rep["memory"]["peak_allocated"] > 0
