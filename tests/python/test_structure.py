"""The package's shape: one road to the library (only the op layer, nvfp4._ops, touches the
compiled module), an import graph without cycles, every module importable on its own."""
import ast
import pathlib
import subprocess
import sys


import nvfp4

PKG = pathlib.Path(nvfp4.__file__).resolve().parent


def _modules():
    """{dotted name: path} of every module of the package."""
    out = {}
    for f in sorted(PKG.rglob("*.py")):
        rel = f.relative_to(PKG.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = f
    return out


def _resolve(mod: str, is_pkg: bool, level: int, name) -> str:
    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def _imports(mod: str, path: pathlib.Path, known) -> set:
    """Package modules `mod` imports, at the top or inside functions (lazy imports count:
    they are cycles too, only postponed)."""
    is_pkg = path.name == "__init__.py"
    deps = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            # `from P import x`: the submodule P.x where x is one, else P itself
            target = node.module if node.level == 0 else _resolve(mod, is_pkg, node.level, node.module)
            names = [f"{target}.{a.name}" if f"{target}.{a.name}" in known else target for a in node.names]
        else:
            continue
        for n in names:
            if n in known and n != mod:
                deps.add(n)
    return deps


def _graph():
    mods = _modules()
    known = set(mods) | {"nvfp4._C"}  # the compiled module: a leaf
    return mods, {m: _imports(m, p, known) for m, p in mods.items()}


def test_import_graph_has_no_cycle():
    mods, g = _graph()
    # A cycle through lazy (function-level) imports is a cycle too: only postponed.
    state, stack, cycles = {}, [], []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for d in sorted(g[m]):
            if d not in g:
                continue
            if state.get(d) == 1:
                cycles.append(stack[stack.index(d):] + [d])
            elif d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(mods):
        if m not in state:
            visit(m)
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_only_the_op_layer_touches_the_library():
    mods = _modules()
    users = []
    for m, p in mods.items():
        tree = ast.parse(p.read_text())
        for node in ast.walk(tree):
            hit = False
            if isinstance(node, ast.ImportFrom):
                hit = any(a.name == "_C" for a in node.names) or (node.module or "").endswith("_C")
            elif isinstance(node, ast.Import):
                hit = any(a.name.endswith("._C") for a in node.names)
            elif isinstance(node, ast.Attribute) and node.attr == "_C":
                # torch._C is torch's, not ours
                hit = not (isinstance(node.value, ast.Name) and node.value.id == "torch")
            elif isinstance(node, ast.Name) and node.id == "_C":
                hit = True
            if hit:
                users.append(f"{m}:{node.lineno}")
    assert users and all(u.startswith("nvfp4._ops:") for u in users), \
        "modules other than nvfp4._ops use the compiled module: " + ", ".join(
            u for u in users if not u.startswith("nvfp4._ops:"))


def test_the_passes_call_the_op_layer():
    """The nn layers' passes live in nvfp4.nn._passes and reach the library only through
    nvfp4._ops (the raw entry points); nvfp4.nn.ops is that module."""
    _, g = _graph()
    assert "nvfp4._ops" in g["nvfp4.nn._passes"]
    assert nvfp4.nn.ops is sys.modules["nvfp4.nn._passes"]
    for name in ("linear_fwd", "linear_bwd", "frozen_linear_fwd", "quantize", "gemm", "dequantize", "swizzle"):
        assert callable(getattr(nvfp4.nn.ops, name)), name


def test_one_workspace_cache():
    """Every GEMM path (NVFP4 swizzled and linear, MXFP4) asks the library for its workspace
    size through one cache, and one function forgets it."""
    import torch
    from nvfp4 import _ops
    _ops.clear_workspace_cache()
    a, b = nvfp4.quantize(torch.randn(4, 64)), nvfp4.quantize(torch.randn(8, 64))
    nvfp4.gemm(a, b)
    la, lb = (nvfp4.quantize(t, scale_layout="linear") for t in (torch.randn(4, 64), torch.randn(8, 64)))
    nvfp4.gemm(la, lb)
    ma, mb = nvfp4.quantize_mxfp4(torch.randn(4, 64)), nvfp4.quantize_mxfp4(torch.randn(8, 64))
    nvfp4.gemm_mxfp4(ma, mb)
    kinds = {k[0] for k in _ops._WS}
    assert kinds == {"raw", "array", "mx"}, kinds
    nvfp4._gemm.clear_workspace_cache()
    assert not _ops._WS


def test_default_signs_are_the_librarys():
    from nvfp4 import _format, _ops
    assert _format.default_rht_mask() == _ops.default_rht_sign_mask()


def test_every_module_imports_in_a_fresh_interpreter():
    """Each module imports in a fresh interpreter. (Importing any of them runs the
    package's __init__ first, which fixes one order; the static graph above is what shows
    that no other order can hit a half-initialized module.)"""
    mods = sorted(_modules())
    code = ("import importlib, sys\n"
            f"for m in {mods!r}:\n"
            "    importlib.import_module(m)\n"
            "    assert m in sys.modules, m\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
