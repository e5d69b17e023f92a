"""examples/compare_recipes.py: a comparison cut short and resumed gives the runs of an
uninterrupted one exactly (model, optimizer, SR counters, batches); the statistics are the
stated ones (Student-t quantiles, paired gaps); bad settings are refused by name."""
from __future__ import annotations

import json
import math
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
import compare_recipes as cr  # noqa: E402

COMMON = ["--recipes", "bf16,nvfp4", "--seeds", "0", "--size", "smoke", "--steps", "4", "--eval-interval", "2",
          "--eval-batches", "1", "--device", "cpu", "--corpora", "stdlib", "--ckpt-every", "1"]


def _prepared(tmp_path_factory):
    import prepare_data
    d = str(tmp_path_factory.mktemp("data") / "stdlib")
    prepare_data.prepare(d, max_mb=2.0, quiet=True)
    return d


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    d = _prepared(tmp_path_factory)
    return os.path.dirname(d)


def test_resume_is_exact(tmp_path, data_root, capsys):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    cr.main(COMMON + ["--data-root", data_root, "--out", a])
    cr.main(COMMON + ["--data-root", data_root, "--out", b, "--stop-at-step", "3"])
    for r in ("bf16", "nvfp4"):
        with open(os.path.join(b, "stdlib", r, "seed0", "result.json")) as f:
            assert json.load(f)["status"] == "partial"
    cr.main(["--out", b, "--resume", "--data-root", data_root, "--device", "cpu"])
    for r in ("bf16", "nvfp4"):
        ra = json.load(open(os.path.join(a, "stdlib", r, "seed0", "result.json")))
        rb = json.load(open(os.path.join(b, "stdlib", r, "seed0", "result.json")))
        assert rb["status"] == "done"
        assert ra["val_curve"] == rb["val_curve"], r  # bit for bit: every validation loss equal
        assert ra["train_curve"] == rb["train_curve"], r
    out = capsys.readouterr().out
    assert "| nvfp4 | 1 |" in out and "(one seed)" in out
    with pytest.raises(SystemExit, match="--resume"):
        cr.main(COMMON + ["--data-root", data_root, "--out", a])  # exists: needs --resume
    with pytest.raises(SystemExit, match="--steps"):
        cr.main(["--out", a, "--resume", "--steps", "5", "--data-root", data_root, "--device", "cpu"])


def test_t_quantiles_and_intervals():
    # Student-t 0.975 quantiles (standard tables)
    for df, q in ((1, 12.706), (2, 4.303), (3, 3.182), (4, 2.776), (9, 2.262), (29, 2.045)):
        assert abs(cr.t_quantile(0.975, df) - q) < 1e-3, df
    m, lo, hi, n = cr.t_interval([1.0, 2.0, 3.0])
    assert n == 3 and m == 2.0 and abs((hi - m) - 4.303 * 1.0 / math.sqrt(3)) < 1e-3 and abs((m - lo) - (hi - m)) < 1e-12
    assert math.isnan(cr.t_interval([1.0])[1])


def test_unknown_names_are_refused():
    with pytest.raises(SystemExit):
        cr.parse(["--out", "x", "--recipes", "nvfp5"])
    with pytest.raises(SystemExit):
        cr.parse(["--out", "x", "--corpora", "wiki"])
