"""A resumed training run is the uninterrupted run, bit for bit: the stochastic-rounding
counters travel in the state_dict, so N steps, a save, a reload in a fresh process and M
more steps give exactly the parameters of N + M steps in one go."""
import os
import subprocess
import sys
import textwrap

import torch

SCRIPT = textwrap.dedent('''
    import sys, torch
    from torch import nn
    import nvfp4.nn as nn4

    def model():
        torch.manual_seed(0)
        m = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32))
        return nn4.convert(m, nn4.get_recipe("nvfp4", backend="reference", seed=5), exclude=[])

    def batch(i):
        g = torch.Generator().manual_seed(100 + i)
        return torch.randn(4, 24, 32, generator=g), torch.randn(4, 24, 32, generator=g)

    def train(m, opt, steps, start):
        for i in range(start, start + steps):
            x, y = batch(i)
            loss = (m(x) - y).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

    mode, path, n, k = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    m = model()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    if mode == "first":
        train(m, opt, n, 0)
        torch.save({"model": m.state_dict(), "opt": opt.state_dict()}, path)
    elif mode in ("resume", "resume_without_counters"):
        ck = torch.load(path, weights_only=True)
        if mode == "resume_without_counters":  # what a resume loses if the counters are not saved
            ck["model"] = {k: v for k, v in ck["model"].items() if not k.endswith("sr_step")}
        m.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        train(m, opt, k, n)
        torch.save(m.state_dict(), path + (".final" if mode == "resume" else ".lost"))
    else:
        train(m, opt, n + k, 0)
        torch.save(m.state_dict(), path + ".final")
''')


def _run(tmp_path, *args):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = dict(os.environ)
    subprocess.run([sys.executable, str(script), *map(str, args)], check=True, env=env, timeout=300)


def test_resume_in_fresh_process_is_bit_identical(tmp_path):
    a, b = tmp_path / "a.pt", tmp_path / "b.pt"
    _run(tmp_path, "first", a, 3, 2)
    _run(tmp_path, "resume", a, 3, 2)
    _run(tmp_path, "straight", b, 3, 2)
    got = torch.load(str(a) + ".final", weights_only=True)
    want = torch.load(str(b) + ".final", weights_only=True)
    assert got.keys() == want.keys()
    for k in want:
        assert torch.equal(got[k], want[k]), f"{k} differs after resuming"
    assert int(want["0.sr_step"]) == 5
    # the check has teeth: restarting the counters at 0 repeats earlier random bits and
    # gives other parameters
    _run(tmp_path, "resume_without_counters", a, 3, 2)
    lost = torch.load(str(a) + ".lost", weights_only=True)
    assert not torch.equal(lost["0.weight"], want["0.weight"])
