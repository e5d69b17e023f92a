"""The repository's shell scripts (CI's and the device runs'): under `set -o pipefail` a
pipeline that ends in `grep -q` fails at random, since grep exits at its first match and the
command writing into the pipe may die of SIGPIPE (CI failed this way when the sanitized check
read `ldd | grep -q libasan` on a loaded machine). Such a test reads the whole output first."""
import os
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
# a pipe into grep with -q (or --quiet / --silent, or -m: it also stops reading early)
EARLY_EXIT_GREP = re.compile(r"(?<!\|)\|\s*grep\s+(?:-[A-Za-z]*[qm]|--quiet|--silent|--max-count)")


def _scripts():
    """The scripts that set pipefail: every file in .ci/ and every *.sh of the tree (build
    folders and hidden ones left out)."""
    found = [p for p in (ROOT / ".ci").glob("*") if p.is_file()]
    for d, dirs, files in os.walk(ROOT):
        dirs[:] = [x for x in dirs if not x.startswith(".") and x != "build" and x != "__pycache__"]
        found += [pathlib.Path(d) / f for f in files if f.endswith(".sh")]
    return sorted({p for p in found if "pipefail" in p.read_text(errors="replace")})


def _early_exit_pipes(text: str):
    """(line number, line) of every pipe into an early-exiting grep, comments aside."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.lstrip().startswith("#") and EARLY_EXIT_GREP.search(line):
            out.append((n, line.strip()))
    return out


def test_the_pattern_finds_what_it_is_for():
    assert _early_exit_pipes('if ! ldd "$lib" | grep -q libasan; then')
    assert _early_exit_pipes("x=$(nm -D lib | grep -qv foo)")
    assert _early_exit_pipes("cmd | grep --quiet x")
    assert _early_exit_pipes("cmd | grep -m1 x")
    assert not _early_exit_pipes("cmd || grep -q x file")  # not a pipe
    assert not _early_exit_pipes('grep -q "x" file')        # reads a file, nothing writes into it
    assert not _early_exit_pipes("# ldd | grep -q libasan")  # a comment
    assert not _early_exit_pipes("nm -D lib | grep -c ' nvfp4_'")


def test_scripts_are_found():
    names = {p.relative_to(ROOT).as_posix() for p in _scripts()}
    if not (ROOT / ".ci" / "run").is_file():
        pytest.skip("needs the source tree")
    assert {".ci/run", ".ci/install", ".ci/sanitized_python.sh"} <= names, sorted(names)


@pytest.mark.parametrize("path", _scripts(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_pipe_into_an_early_exiting_grep_under_pipefail(path):
    bad = _early_exit_pipes(path.read_text(errors="replace"))
    assert not bad, f"{path.relative_to(ROOT)}: a pipe into an early-exiting grep under pipefail: {bad}"
