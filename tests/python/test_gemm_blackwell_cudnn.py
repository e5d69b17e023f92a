"""The cuDNN GEMM backend, and what can be checked of the Blackwell CUTLASS runners.

Without a GPU:
  - the cutlass backend is reported on B300 (10.3) and GB10 (12.1) exactly when a target that
    runs there was compiled (100f / 103a, 120f / 121a), never from an sm_100a / sm_120a build;
  - with NVFP4_CUDNN_PATH pointing at nothing, the cudnn backend reports itself
    unavailable instead of failing to import; is_supported never raises, CPU-only torch
    included.
  What the library holds per target (cubins, MMA instructions, shared memory), the scale
  layout and can_implement checks and the cuDNN graph validation are in
  test_build_targets.py and (C++) tests/cpp/test_blackwell_host.cpp.

With CUDA and cuDNN (H100/H200 run the exact BF16 emulation; B200 and RTX 50 the native
FP4 graph):
  - cudnn against float64 within the bound below, outputs NaN-poisoned first, two runs
    bit-identical (nondeterministic cuDNN engines are filtered out);
  - cudnn == cutlass: bit-identical where the result is exact (inputs on the FP4 grid with
    power-of-two scales: every product and partial sum is exact in fp32, whatever the
    order); elsewhere within twice the bound, since both are within the bound of the same
    float64 result but accumulate in different orders;
  - graph cache: one build per shape and dtype, reused after (NVFP4_CUDNN_DEBUG=1 logs
    each build to stderr); threads share it safely;
  - a missing cuDNN is a clear error;
  - plan choice: with the candidates timed on the first call (the default) and with the
    heuristic's first choice (NVFP4_CUDNN_AUTOTUNE=0), results within the bound and
    run-to-run identical; a first call inside CUDA graph capture keeps its plan; a bad
    NVFP4_CUDNN_AUTOTUNE is refused by name;
  - the separate-epilogue graph (matmul to fp32, then nvfp4's own alpha/bias/beta*C kernel,
    which runs where cuDNN refuses the fused epilogue) is forced with
    NVFP4_CUDNN_EPILOGUE=separate and held to the same bound, also on Hopper.

Bound, per element (m, n), with S = alpha * sum_k |Â_mk| |B̂_nk| (as in test_gemm_cuda.py):
  |D - R_full| <= (K * 2^-23 * S + 2^-22 * (S + |bias| + |beta C|)) * (1 + u_out) + u_out * |R_full|
FP32 accumulation of K exact products (2^-23: tensor cores may truncate), the fp32
epilogue (alpha, + bias, + beta*C), one rounding to the output (u_out = 2^-24 fp32,
2^-11 fp16, 2^-8 bf16).
"""
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

import nvfp4
from nvfp4 import _C
from nvfp4.backends import BACKENDS
from conftest import E2M1, alpha_of, decode_rows, first_mismatch, linear_scales

HAS_CUDA = torch.cuda.is_available()
ARCHS = [a for a in _C.build_cuda_archs().split(";") if a]
U_OUT = {torch.float32: 2.0**-24, torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}


def _supported(backend):
    try:
        return HAS_CUDA and nvfp4.is_supported(backend, "cuda")
    except Exception:
        return False


def _cc():
    major, minor = torch.cuda.get_device_capability()
    return major * 10 + minor


needs_cudnn = pytest.mark.skipif(not _supported("cudnn"), reason="needs a CUDA GPU and cuDNN 9 for the cudnn backend")
needs_both = pytest.mark.skipif(not (_supported("cudnn") and _supported("cutlass")),
                                reason="needs a GPU that runs both the cudnn and the cutlass backends")


# ------------------------------------------------------------------ helpers

def reference(qa, qb):
    """(R, S) = alpha * Â @ B̂ᵀ and alpha * |Â| @ |B̂|ᵀ in float64."""
    alpha = alpha_of(qa, qb)
    a = decode_rows(qa.data, linear_scales(qa))
    b = decode_rows(qb.data, linear_scales(qb))
    return alpha * (a @ b.t()), alpha * (a.abs() @ b.abs().t())


def bound(r, s, k, out_dtype, bias=None, c=None, beta=0.0):
    """(R_full, tolerance) for every element."""
    full, extra = r.clone(), torch.zeros_like(r)
    if bias is not None:
        full += bias.double()
        extra += bias.double().abs()
    if c is not None and beta != 0.0:
        full += beta * c.double().reshape(r.shape)
        extra += abs(beta) * c.double().reshape(r.shape).abs()
    u = U_OUT[out_dtype]
    acc = k * 2.0**-23 * s + 2.0**-22 * (s + extra)
    return full, acc * (1 + u) + u * full.abs() + 1e-37


def check_within(got, want, tol, what):
    got = got.double().reshape(want.shape)
    assert not torch.isnan(got).any(), f"{what}: NaN in output (unwritten elements?)"
    err = (got - want).abs()
    bad = err > tol
    if bad.any():
        i = tuple(bad.nonzero()[0].tolist())
        raise AssertionError(f"{what}: {int(bad.sum())} elements out of bound; first at {i}: got {got[i].item()!r}, "
                             f"want {want[i].item()!r}, |err| {err[i].item():.3e} > bound {tol[i].item():.3e}")


def bits(t):
    return t.view(torch.int16) if t.element_size() == 2 else t.view(torch.int32)


def run(qa, qb, backend, out_dtype=torch.bfloat16, **kw):
    """Twice, into NaN-poisoned outputs; the two runs must agree bit for bit."""
    m, n = qa.data.shape[0], qb.data.shape[0]
    outs = []
    for _ in range(2):
        poison = torch.full((m, n), float("nan"), dtype=out_dtype, device="cuda")
        res = nvfp4.gemm(qa, qb, backend=backend, out_dtype=out_dtype, out=poison, **kw)
        assert res is poison
        outs.append(res)
    torch.cuda.synchronize()
    assert torch.equal(bits(outs[0]), bits(outs[1])), f"{backend}: two runs differ: {first_mismatch(outs[0], outs[1])}"
    return outs[0]


def make(m, n, k, layout="swizzled", seed=0, scale_a=3.0, scale_b=0.02):
    g = torch.Generator(device="cuda").manual_seed(seed * 7919 + m * 131 + n * 17 + k)
    a = torch.randn(m, k, generator=g, device="cuda") * scale_a
    b = torch.randn(n, k, generator=g, device="cuda") * scale_b
    return nvfp4.quantize(a, scale_layout=layout), nvfp4.quantize(b, scale_layout=layout)


def layouts():
    # The native FP4 graph reads the 128x4 layout only (F8_128x4); the Hopper emulation
    # decodes either.
    return ["swizzled", "linear"] if _cc() == 90 else ["swizzled"]


# Native FP4 needs K % 32 == 0 (16-byte rows); the Hopper emulation also takes K = 16, 48.
def shapes():
    base = [(1, 16, 64), (7, 40, 96), (13, 8, 32), (31, 136, 256), (128, 64, 64), (129, 264, 128),
            (1, 1000, 4096), (16, 4096, 4096), (129, 256, 4096), (4096, 1024, 4096)]
    hopper = [(7, 33, 48), (129, 17, 16)]
    return base + hopper if HAS_CUDA and _cc() == 90 else base


# ------------------------------------------------------------------ no GPU needed

def _targets(prefix):
    return [t for r in nvfp4.backends.runners() if r["name"] == prefix for t in r["targets"].split(";") if t]


@pytest.mark.parametrize("cc,runner", [(100, "cutlass-sm100"), (103, "cutlass-sm100"), (120, "cutlass-sm120"),
                                       (121, "cutlass-sm120")])
def test_blackwell_support_follows_the_compiled_targets(cc, runner):
    """The B300 / GB10 case: only a target that runs on cc (a family target, or that exact
    arch-specific one) makes dispatch offer the native runner there."""
    targets = _targets(runner)
    runs = any((t.endswith("a") and int(t[:-1]) == cc) or
               (not t.endswith("a") and int(t.rstrip("f")) // 10 == cc // 10 and cc >= int(t.rstrip("f")))
               for t in targets)
    assert bool(_C.backend_supported(BACKENDS["cutlass"], cc)) == runs, f"{runner} targets {targets}"


def test_is_supported_never_raises_without_cuda():
    for backend in ("cudnn", "cutlass", "auto", "reference"):
        got = nvfp4.is_supported(backend, "cuda")
        assert got in (True, False)
        if not HAS_CUDA:
            assert got is False, backend


def test_missing_cudnn_is_reported_not_fatal():
    """NVFP4_CUDNN_PATH pointing at nothing: the module imports, the backend says it cannot
    run, and (with CUDA) a cudnn GEMM raises an error naming cuDNN."""
    code = r"""
import torch, nvfp4
from nvfp4 import _C
from nvfp4.backends import BACKENDS
print("SUPPORTED", [bool(_C.backend_supported(BACKENDS["cudnn"], cc)) for cc in (90, 100, 103, 120, 121)])
if torch.cuda.is_available():
    a = nvfp4.quantize(torch.randn(32, 64, device="cuda"))
    b = nvfp4.quantize(torch.randn(64, 64, device="cuda"))
    try:
        nvfp4.gemm(a, b, backend="cudnn")
        print("RAISED none")
    except Exception as e:
        print("RAISED", type(e).__name__, str(e).replace("\n", " "))
"""
    env = dict(os.environ, NVFP4_CUDNN_PATH="/nonexistent/libcudnn.so.9")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600,
                         cwd=os.path.dirname(__file__))
    assert out.returncode == 0, out.stderr
    assert "SUPPORTED [False, False, False, False, False]" in out.stdout, out.stdout
    if HAS_CUDA:
        line = next(l for l in out.stdout.splitlines() if l.startswith("RAISED"))
        assert line != "RAISED none" and "cudnn" in line.lower(), line


# ------------------------------------------------------------------ with CUDA and cuDNN

@needs_cudnn
@pytest.mark.parametrize("m,n,k", shapes())
def test_cudnn_matches_float64(m, n, k):
    for layout in layouts():
        qa, qb = make(m, n, k, layout)
        r, s = reference(qa, qb)
        for out_dtype in (torch.float32, torch.bfloat16):
            got = run(qa, qb, "cudnn", out_dtype)
            want, tol = bound(r, s, k, out_dtype)
            check_within(got, want, tol, f"cudnn M={m} N={n} K={k} {layout} {out_dtype}")


@needs_cudnn
@pytest.mark.parametrize("m,n,k", [(5, 40, 256), (200, 136, 64), (256, 1032, 512)])
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_cudnn_bias_and_beta(m, n, k, out_dtype):
    qa, qb = make(m, n, k)
    r, s = reference(qa, qb)
    g = torch.Generator(device="cuda").manual_seed(5)
    for bias_dtype in (torch.float32, out_dtype):
        bias = (torch.randn(n, generator=g, device="cuda") * 0.1).to(bias_dtype)
        got = run(qa, qb, "cudnn", out_dtype, bias=bias)
        want, tol = bound(r, s, k, out_dtype, bias=bias)
        check_within(got, want, tol, f"bias {bias_dtype}")
    for beta in (1.0, -0.5):
        c = (torch.randn(m, n, generator=g, device="cuda") * 0.1).to(out_dtype)
        out = c.clone()
        assert nvfp4.gemm(qa, qb, backend="cudnn", out=out, beta=beta, bias=bias) is out
        torch.cuda.synchronize()
        want, tol = bound(r, s, k, out_dtype, bias=bias, c=c, beta=beta)
        check_within(out, want, tol, f"beta={beta}")


def _grid(rows, k, g):
    """E2M1 values, every block amax 6, tensor amax 42: power-of-two block scales and alpha,
    so every product and partial sum is exact in fp32."""
    vals = torch.tensor(E2M1[:8], device="cuda")
    x = vals[torch.randint(0, 8, (rows, k), generator=g, device="cuda")]
    x = x * torch.where(torch.rand(rows, k, generator=g, device="cuda") < 0.5, -1.0, 1.0)
    x[:, ::16] = 6.0
    x[0, :16] = 0.0
    x[0, 0] = 42.0
    return x


@needs_both
@pytest.mark.parametrize("m,n,k", [(1, 72, 256), (13, 40, 4096), (100, 264, 1024)])
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_cudnn_equals_cutlass_where_exact(m, n, k, out_dtype):
    g = torch.Generator(device="cuda").manual_seed(m + n + k)
    a, b = _grid(m, k, g), _grid(n, k, g)
    qa, qb = nvfp4.quantize(a), nvfp4.quantize(b)
    exact = (a.double() @ b.double().t()).to(out_dtype)
    got_cudnn = run(qa, qb, "cudnn", out_dtype)
    got_cutlass = run(qa, qb, "cutlass", out_dtype)
    assert torch.equal(got_cudnn, exact), f"cudnn vs exact: {first_mismatch(got_cudnn.float(), exact.float())}"
    assert torch.equal(bits(got_cudnn), bits(got_cutlass)), \
        f"cudnn vs cutlass: {first_mismatch(got_cudnn.float(), got_cutlass.float())}"


@needs_both
@pytest.mark.parametrize("m,n,k", [(7, 40, 96), (129, 264, 128), (16, 4096, 4096), (2048, 1024, 4096)])
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16])
def test_cudnn_agrees_with_cutlass(m, n, k, out_dtype):
    """Both backends are within the bound of the same float64 result, so within twice the
    bound of each other (they accumulate in different orders, so not bit for bit)."""
    qa, qb = make(m, n, k, seed=3)
    r, s = reference(qa, qb)
    bias = torch.linspace(-1, 1, n, device="cuda")
    got_cudnn = run(qa, qb, "cudnn", out_dtype, bias=bias)
    got_cutlass = run(qa, qb, "cutlass", out_dtype, bias=bias)
    want, tol = bound(r, s, k, out_dtype, bias=bias)
    check_within(got_cudnn, want, tol, "cudnn vs float64")
    check_within(got_cutlass, want, tol, "cutlass vs float64")
    check_within(got_cudnn, got_cutlass.double(), 2 * tol, "cudnn vs cutlass")


@needs_cudnn
def test_graph_cache_builds_once_per_shape(monkeypatch, capfd):
    monkeypatch.setenv("NVFP4_CUDNN_DEBUG", "1")
    m, n, k = 37, 72, 160  # used by no other test, so its graphs are not cached yet
    qa, qb = make(m, n, k)
    tag = f"M={m} N={n} K={k}"

    def builds():
        torch.cuda.synchronize()
        return [l for l in capfd.readouterr().err.splitlines() if "built graph" in l and tag in l]

    first = nvfp4.gemm(qa, qb, backend="cudnn")
    assert len(builds()) == 1, "the first call builds the graph"
    for _ in range(3):
        again = nvfp4.gemm(qa, qb, backend="cudnn")
    assert builds() == [], "same shape and dtype: the cached graph is reused"
    assert torch.equal(bits(first), bits(again))
    nvfp4.gemm(qa, qb, backend="cudnn", out_dtype=torch.float32)
    assert len(builds()) == 1, "another output dtype is another graph"
    nvfp4.gemm(qa, qb, backend="cudnn", bias=torch.zeros(n, device="cuda"))
    assert len(builds()) == 1, "a bias is another graph"
    nvfp4.gemm(qa, qb, backend="cudnn")
    nvfp4.gemm(qa, qb, backend="cudnn", out_dtype=torch.float32)
    assert builds() == [], "all three are cached"


@needs_cudnn
def test_threads_share_the_cache_safely():
    qa, qb = make(96, 200, 512, seed=11)
    want = nvfp4.gemm(qa, qb, backend="cudnn", out_dtype=torch.float32)
    torch.cuda.synchronize()
    results, errors = [None] * 4, []

    def work(i):
        try:
            outs = [nvfp4.gemm(qa, qb, backend="cudnn", out_dtype=torch.float32) for _ in range(5)]
            torch.cuda.synchronize()
            results[i] = outs
        except Exception as e:  # surfaced below with the thread's index
            errors.append((i, e))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i, outs in enumerate(results):
        for o in outs:
            assert torch.equal(bits(o), bits(want)), f"thread {i}: {first_mismatch(o, want)}"


@needs_cudnn
def test_cudnn_runs_on_the_current_stream():
    qa, qb = make(64, 128, 256, seed=2)
    want = nvfp4.gemm(qa, qb, backend="cudnn")
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        out = torch.full_like(want, float("nan"))
        nvfp4.gemm(qa, qb, backend="cudnn", out=out)
    side.synchronize()
    assert torch.equal(bits(out), bits(want))


@needs_cudnn
def test_cudnn_native_refuses_linear_scales_clearly():
    if _cc() < 100:
        pytest.skip("the Hopper emulation decodes linear scales")
    qa, qb = make(32, 64, 64, layout="linear")
    try:
        out = nvfp4.gemm(qa, qb, backend="cudnn", out_dtype=torch.float32)
    except Exception as e:
        assert "swizzle" in str(e).lower(), str(e)
        return
    # The Python layer may swizzle linear scales before the call; then the result must hold.
    r, s = reference(qa, qb)
    want, tol = bound(r, s, 64, torch.float32)
    check_within(out, want, tol, "linear scales, swizzled by the caller")


@needs_cudnn
@pytest.mark.parametrize("m,n,k", [(1, 16, 64), (7, 40, 96), (129, 264, 128), (256, 1032, 512)])
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_cudnn_separate_epilogue(monkeypatch, m, n, k, out_dtype):
    """The graph without the fused epilogue (the fallback where cuDNN refuses it), forced:
    within the same bound of float64, with bias and beta*C (C aliasing D too), and exact on
    the FP4 grid."""
    monkeypatch.setenv("NVFP4_CUDNN_EPILOGUE", "separate")
    qa, qb = make(m, n, k, seed=7)
    r, s = reference(qa, qb)
    got = run(qa, qb, "cudnn", out_dtype)
    want, tol = bound(r, s, k, out_dtype)
    check_within(got, want, tol, f"separate epilogue M={m} N={n} K={k} {out_dtype}")
    g = torch.Generator(device="cuda").manual_seed(9)
    bias = (torch.randn(n, generator=g, device="cuda") * 0.1).to(out_dtype)
    got = run(qa, qb, "cudnn", out_dtype, bias=bias)
    want, tol = bound(r, s, k, out_dtype, bias=bias)
    check_within(got, want, tol, "separate epilogue +bias")
    c = (torch.randn(m, n, generator=g, device="cuda") * 0.1).to(out_dtype)
    out = c.clone()
    assert nvfp4.gemm(qa, qb, backend="cudnn", out=out, beta=-0.5, bias=bias) is out
    torch.cuda.synchronize()
    want, tol = bound(r, s, k, out_dtype, bias=bias, c=c, beta=-0.5)
    check_within(out, want, tol, "separate epilogue +bias +beta*C in place")
    if k % 16 == 0:
        a, b = _grid(m, k, g), _grid(n, k, g)
        exact = (a.double() @ b.double().t()).to(out_dtype)
        got = run(nvfp4.quantize(a), nvfp4.quantize(b), "cudnn", out_dtype)
        assert torch.equal(got, exact), f"separate epilogue vs exact: {first_mismatch(got.float(), exact.float())}"


@needs_cudnn
@pytest.mark.parametrize("autotune", ["0", "1", "8"])
@pytest.mark.parametrize("epilogue", ["fused", "separate"])
def test_cudnn_plan_choice(monkeypatch, capfd, autotune, epilogue):
    """Each plan-choice mode: within the bound of float64, and the chosen plan kept (two
    more calls give the same bits). With timing on, NVFP4_CUDNN_DEBUG reports the timed
    plans and the choice once per graph."""
    monkeypatch.setenv("NVFP4_CUDNN_AUTOTUNE", autotune)
    monkeypatch.setenv("NVFP4_CUDNN_DEBUG", "1")
    if epilogue == "separate":
        monkeypatch.setenv("NVFP4_CUDNN_EPILOGUE", "separate")
    # a shape no other test uses, so the graph is built (and its plan chosen) here
    m, n, k = 520 + int(autotune), 776, 1024
    qa, qb = make(m, n, k, seed=21)
    r, s = reference(qa, qb)
    got = run(qa, qb, "cudnn", torch.bfloat16)
    want, tol = bound(r, s, k, torch.bfloat16)
    check_within(got, want, tol, f"cudnn, NVFP4_CUDNN_AUTOTUNE={autotune}, {epilogue} epilogue")
    for _ in range(2):
        again = run(qa, qb, "cudnn", torch.bfloat16)
        assert torch.equal(again, got), "cudnn: a later call ran another plan: " + first_mismatch(again.float(),
                                                                                               got.float())
    err = capfd.readouterr().err
    chosen = [l for l in err.splitlines() if f"M={m} N={n} K={k}" in l and "chose #" in l]
    if autotune == "0":
        assert not chosen, err
    else:
        built = [l for l in err.splitlines() if "built graph" in l and f"M={m} N={n} K={k}" in l]
        assert built, err
        # one line when more than one plan built; a graph with a single plan is not timed
        assert len(chosen) <= 1, err


@needs_cudnn
def test_cudnn_plan_choice_first_call_in_graph_capture(monkeypatch):
    """A graph whose first call is captured into a CUDA graph cannot time its plans: the
    capture succeeds, the replay matches the bound, and later eager calls run the same plan
    (bit-identical to the replay)."""
    monkeypatch.setenv("NVFP4_CUDNN_AUTOTUNE", "8")
    m, n, k = 264, 520, 512  # not used elsewhere: its first call is the captured one
    qa, qb = make(m, n, k, seed=23)
    r, s = reference(qa, qb)
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    # The graph is built (no plan chosen yet) by the workspace query, outside the capture:
    # building a cuDNN plan is not a stream operation that capture allows.
    from nvfp4 import _ops
    _ops.gemm_workspace_bytes(m, n, k, BACKENDS["cudnn"], torch.bfloat16, None, False, out.device,
                              _ops._device(out))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(side):
        with torch.cuda.graph(graph, stream=side):
            nvfp4.gemm(qa, qb, backend="cudnn", out=out)
    torch.cuda.current_stream().wait_stream(side)
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    want, tol = bound(r, s, k, torch.bfloat16)
    check_within(out, want, tol, "cudnn, first call captured, replayed")
    eager = run(qa, qb, "cudnn", torch.bfloat16)
    assert torch.equal(eager, out), "cudnn: eager after capture ran another plan: " + \
        first_mismatch(eager.float(), out.float())


@pytest.mark.parametrize("value", ["-1", "x", "65", "1.5"])
def test_cudnn_autotune_refuses_bad_values(monkeypatch, value):
    if not _supported("cudnn"):
        pytest.skip("needs a CUDA GPU and cuDNN 9 for the cudnn backend")
    monkeypatch.setenv("NVFP4_CUDNN_AUTOTUNE", value)
    qa, qb = make(128, 128, 128, seed=3)
    with pytest.raises(Exception, match="NVFP4_CUDNN_AUTOTUNE"):
        run(qa, qb, "cudnn", torch.float32)


@needs_cudnn
def test_cudnn_native_refuses_k_not_multiple_of_32():
    if _cc() < 100:
        pytest.skip("the Hopper emulation takes K % 16 == 0")
    qa, qb = make(32, 64, 48)
    with pytest.raises(RuntimeError, match="K % 32"):
        nvfp4.gemm(qa, qb, backend="cudnn")
