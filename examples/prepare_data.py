"""Build the training corpus from text every Python installation ships: the standard
library's own source files (about 30 MB of real, varied code and docstrings).

Byte-level tokens (vocabulary 256): no tokenizer to train or download, and the loss is in
nats per byte, comparable across runs. Files are split into train/val by a hash of their
path, so the split is the same on every machine with the same Python version.

    python3 examples/prepare_data.py --out /tmp/nvfp4_data
writes train.bin and val.bin (uint8) and meta.json there.
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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=DEFAULT_OUT, help="output directory (default: %(default)s)")
    ap.add_argument("--val-percent", type=float, default=2.0, help="share of files held out for validation")
    ap.add_argument("--max-mb", type=float, default=0.0, help="stop after this many MB of source (0: all)")
    a = ap.parse_args()
    prepare(a.out, a.val_percent, a.max_mb)


if __name__ == "__main__":
    main()
