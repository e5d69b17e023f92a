"""Build training corpora from text every Python installation ships, with no network:

- "stdlib" (the default): the standard library's own source files (about 30 MB of real,
  varied code and docstrings);
- "prose": the English prose inside installed Python packages: every docstring (the
  standard library's, and numpy's and torch's where they are installed) and every run of
  comment lines of the standard library joined into a paragraph, code removed (about 12 MB
  with torch and numpy installed, 5 MB without). Natural language, though technical; what it
  holds depends on the installed versions, which meta.json records.

Byte-level tokens (vocabulary 256): no tokenizer to train or download, and the loss is in
nats per byte, comparable across runs. Files are split into train/val by a hash of their
path, so the split is the same on every machine with the same Python (and package) versions.

    python3 examples/prepare_data.py --out /tmp/nvfp4_data
    python3 examples/prepare_data.py --corpus prose --out /tmp/nvfp4_prose
write train.bin and val.bin (uint8) and meta.json there.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import sysconfig
import time

import numpy as np

DEFAULT_OUT = os.path.join(os.path.expanduser("~"), ".cache", "nvfp4", "pystdlib")
#: Where every example writes its reports, plots and checkpoints unless --out says otherwise:
#: beside the data, never the working directory (a checkout stays clean).
RUNS_DIR = os.path.join(os.path.expanduser("~"), ".cache", "nvfp4", "runs")
_SEP = b"\n\x00\n"  # file separator: a byte that source files do not contain


def stdlib_files(root: str):
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in ("site-packages", "dist-packages", "__pycache__"))
        for f in sorted(filenames):
            if f.endswith(".py"):
                yield os.path.join(dirpath, f)


def is_val(rel_path: str, val_percent: float) -> bool:
    h = int.from_bytes(hashlib.sha256(rel_path.encode()).digest()[:4], "little")
    return (h % 10000) < val_percent * 100


def prepare(out: str = DEFAULT_OUT, val_percent: float = 2.0, max_mb: float = 0.0, quiet: bool = False) -> dict:
    """Write train.bin/val.bin/meta.json into `out` (skipped when meta.json already matches)."""
    root = sysconfig.get_paths()["stdlib"]
    meta_path = os.path.join(out, "meta.json")
    want = {"source": "python-stdlib", "python": sys.version.split()[0], "root": root, "val_percent": val_percent,
            "max_mb": max_mb, "vocab_size": 256, "tokenizer": "bytes"}
    if os.path.exists(meta_path):
        with open(meta_path) as f:
            meta = json.load(f)
        if all(meta.get(k) == v for k, v in want.items()):
            return meta
    os.makedirs(out, exist_ok=True)
    t0 = time.time()
    train, val = [], []
    n_train = n_val = nbytes = 0
    for path in stdlib_files(root):
        rel = os.path.relpath(path, root)
        with open(path, "rb") as f:
            text = f.read()
        if b"\x00" in text:
            continue
        if is_val(rel, val_percent):
            val.append(text + _SEP)
            n_val += 1
        else:
            train.append(text + _SEP)
            n_train += 1
        nbytes += len(text)
        if max_mb and nbytes >= max_mb * 1e6:
            break
    tr = np.frombuffer(b"".join(train), dtype=np.uint8)
    va = np.frombuffer(b"".join(val), dtype=np.uint8)
    tr.tofile(os.path.join(out, "train.bin"))
    va.tofile(os.path.join(out, "val.bin"))
    meta = dict(want, train_files=n_train, val_files=n_val, train_tokens=int(tr.size), val_tokens=int(va.size))
    with open(meta_path, "w") as f:
        json.dump(meta, f, indent=1)
    if not quiet:
        print(f"prepared {n_train} train / {n_val} val files: {tr.size / 1e6:.1f}M / {va.size / 1e6:.2f}M byte "
              f"tokens in {time.time() - t0:.1f} s -> {out}")
    return meta


# ---------------------------------------------------------------------------- prose
DEFAULT_PROSE_OUT = os.path.join(os.path.expanduser("~"), ".cache", "nvfp4", "prose")
PROSE_PACKAGES = ("numpy", "torch")


def _prose_of_file(args):
    """The docstrings of a Python file and (with comments=True) its comment paragraphs:
    consecutive comment lines joined, markers stripped; code dropped. b"" if it does not parse."""
    import ast
    import io
    import tokenize

    path, comments = args
    try:
        with open(path, "rb") as f:
            src = f.read()
        tree = ast.parse(src)
    except (SyntaxError, ValueError, OSError, UnicodeDecodeError, RecursionError, MemoryError):
        return b""
    parts = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            d = ast.get_docstring(node, clean=True)
            if d and len(d) > 40:
                parts.append(d)
    if comments:
        para, last = [], -2
        try:
            for tok in tokenize.tokenize(io.BytesIO(src).readline):
                if tok.type != tokenize.COMMENT:
                    continue
                text = tok.string.lstrip("#!").strip()
                line = tok.start[0]
                if line != last + 1 and para:
                    parts.append(" ".join(para))
                    para = []
                if text and not text.startswith(("-*-", "type:", "noqa", "pragma", "pylint", "fmt:")):
                    para.append(text)
                last = line
        except (tokenize.TokenError, SyntaxError, IndentationError):
            pass
        if para:
            parts.append(" ".join(para))
    parts = [p for p in parts if len(p) > 40]
    return "\n\n".join(parts).encode("utf-8", "replace")


def prose_sources(packages=PROSE_PACKAGES):
    """(label, root, with comments) for the standard library and the installed packages."""
    import importlib.util

    out = [("stdlib", sysconfig.get_paths()["stdlib"], True)]
    for name in packages:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin:
            out.append((name, os.path.dirname(spec.origin), False))
    return out


def _package_files(root):
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames
                             if d not in ("site-packages", "dist-packages", "__pycache__", "tests", "test"))
        for f in sorted(filenames):
            if f.endswith(".py"):
                yield os.path.join(dirpath, f)


def prepare_prose(out: str = DEFAULT_PROSE_OUT, val_percent: float = 4.0, packages=PROSE_PACKAGES,
                  quiet: bool = False, workers: int = 0) -> dict:
    """Write the prose corpus (train.bin/val.bin/meta.json) into `out` (skipped when
    meta.json already matches)."""
    import importlib.metadata
    from multiprocessing import Pool

    srcs = prose_sources(packages)
    versions = {}
    for label, _, _ in srcs:
        try:
            versions[label] = sys.version.split()[0] if label == "stdlib" else importlib.metadata.version(label)
        except importlib.metadata.PackageNotFoundError:
            versions[label] = "unknown"
    want = {"source": "python-prose", "packages": versions, "val_percent": val_percent, "vocab_size": 256,
            "tokenizer": "bytes"}
    meta_path = os.path.join(out, "meta.json")
    if os.path.exists(meta_path):
        with open(meta_path) as f:
            meta = json.load(f)
        if all(meta.get(k) == v for k, v in want.items()):
            return meta
    os.makedirs(out, exist_ok=True)
    t0 = time.time()
    jobs, names = [], []
    for label, root, comments in srcs:
        for path in _package_files(root):
            jobs.append((path, comments))
            names.append(f"{label}/{os.path.relpath(path, root)}")
    with Pool(workers or max(1, min(16, os.cpu_count() or 1))) as pool:
        texts = pool.map(_prose_of_file, jobs, chunksize=16)
    train, val = [], []
    n_train = n_val = 0
    for name, text in zip(names, texts):
        if not text or b"\x00" in text:
            continue
        if is_val(name, val_percent):
            val.append(text + _SEP)
            n_val += 1
        else:
            train.append(text + _SEP)
            n_train += 1
    tr = np.frombuffer(b"".join(train), dtype=np.uint8)
    va = np.frombuffer(b"".join(val), dtype=np.uint8)
    tr.tofile(os.path.join(out, "train.bin"))
    va.tofile(os.path.join(out, "val.bin"))
    meta = dict(want, train_files=n_train, val_files=n_val, train_tokens=int(tr.size), val_tokens=int(va.size))
    with open(meta_path, "w") as f:
        json.dump(meta, f, indent=1)
    if not quiet:
        print(f"prepared prose of {n_train} train / {n_val} val files ({', '.join(f'{k} {v}' for k, v in versions.items())}): "
              f"{tr.size / 1e6:.1f}M / {va.size / 1e6:.2f}M byte tokens in {time.time() - t0:.1f} s -> {out}")
    return meta


#: corpus name -> (prepare function, default directory)
CORPORA = {"stdlib": (prepare, DEFAULT_OUT), "prose": (prepare_prose, DEFAULT_PROSE_OUT)}


def prepare_corpus(name: str, out: str = None, quiet: bool = False) -> dict:
    if name not in CORPORA:
        raise ValueError(f"corpus: must be one of {sorted(CORPORA)}, got {name!r}")
    fn, default = CORPORA[name]
    return fn(out or default, quiet=quiet)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default="stdlib", choices=sorted(CORPORA))
    ap.add_argument("--out", default=None, help="output directory (default: ~/.cache/nvfp4/<corpus name>, "
                                                "pystdlib for stdlib)")
    ap.add_argument("--val-percent", type=float, default=None,
                    help="share of files held out for validation (default 2 for stdlib, 4 for prose)")
    ap.add_argument("--max-mb", type=float, default=0.0, help="stdlib: stop after this many MB of source (0: all)")
    a = ap.parse_args()
    if a.corpus == "stdlib":
        prepare(a.out or DEFAULT_OUT, 2.0 if a.val_percent is None else a.val_percent, a.max_mb)
    else:
        prepare_prose(a.out or DEFAULT_PROSE_OUT, 4.0 if a.val_percent is None else a.val_percent)


if __name__ == "__main__":
    main()
