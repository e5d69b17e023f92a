"""What a CPU can check of the CUDA kernels in the built library (no GPU is used).

The Blackwell paths cannot be run here, so they are checked by construction:
  - dispatch answers "can this runner run on compute capability X" from the targets each
    kernel object was compiled for; the rule is re-derived here and compared for every
    runner and every cc in CCS (Hopper and every Blackwell chip);
  - for each cc, every runner that says it can run there has, in the library itself
    (cuobjdump), a cubin that runs on that cc for every kernel it launches, and so do the
    quantization kernels;
  - the Blackwell GEMM kernels' SASS holds the block-scaled MMA instructions (a kernel body
    compiled out by an architecture guard would hold none), and the quantization kernels
    use the hardware E2M1 conversion on Blackwell targets, software on Hopper;
  - static shared memory of every kernel fits; the CUTLASS kernels' dynamic shared memory,
    their scale layout and shape rules, and the cuDNN graphs are checked by the library's
    own host-side self-checks (nvfp4_runner_check);
  - the E2M1 encoders equal NVIDIA's host model of the hardware conversion on every float,
    and a Blackwell kernel's NaN-block replacement gives the reference's codes
    (tests/cpp/e2m1_host_model.cpp, compiled here);
  - the wheel holds libnvfp4 once.
Checks that need cuobjdump skip, saying so, where it is not installed
(pip install --no-deps nvidia-cuda-cuobjdump provides it), and where the library was built
without the CUDA targets they inspect.
"""
import functools
import glob
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import nvfp4
from nvfp4 import _C
from nvfp4.backends import BACKENDS, runners

ROOT = Path(__file__).resolve().parents[2]
CCS = (90, 100, 101, 103, 110, 120, 121)
ARCHS = [a for a in _C.build_cuda_archs().split(";") if a]
BLACKWELL_BUILT = any(not a.startswith("9") for a in ARCHS)
STATIC_SMEM_LIMIT = 48 * 1024  # statically declared shared memory, any target


def target_runs_on(target: str, cc: int) -> bool:
    """The compatibility rule of dispatch.cpp, restated: "100a" runs on cc 100 only; "100f" and
    "100" on 100..109 from 100 on (same major, not lower)."""
    m = re.fullmatch(r"(?:sm_)?(\d+)([af]?)", target)
    assert m, target
    t, kind = int(m.group(1)), m.group(2)
    if kind == "a" or cc == 101 or t == 101:  # 10.1 (Thor before CUDA 13) is a family of its own
        return cc == t
    return cc // 10 == t // 10 and cc >= t


def _find_tool(name):
    cands = [shutil.which(name), f"/usr/local/cuda/bin/{name}"]
    if os.environ.get("CUDA_HOME"):
        cands.append(os.path.join(os.environ["CUDA_HOME"], "bin", name))
    for p in sys.path:
        cands += [os.path.join(p, "nvidia", "cu13", "bin", name), os.path.join(p, "nvidia", "cuda_cuobjdump", "bin", name)]
    for c in cands:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def _library():
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1]
            if re.search(r"/libnvfp4\.so", path):
                return path
    return None


CUOBJDUMP = _find_tool("cuobjdump")
NVDISASM = _find_tool("nvdisasm")  # cuobjdump -sass runs it
LIB = _library()

needs_cuda_build = pytest.mark.skipif(not ARCHS, reason="library built without CUDA (no targets to inspect)")
needs_blackwell = pytest.mark.skipif(not BLACKWELL_BUILT,
                                     reason=f"library built without Blackwell targets (NVFP4_CUDA_ARCHS: {ARCHS or 'none'})")
needs_cuobjdump = pytest.mark.skipif(
    CUOBJDUMP is None or LIB is None,
    reason=f"cuobjdump ({CUOBJDUMP}) or the loaded libnvfp4 ({LIB}) not found; "
           "pip install --no-deps nvidia-cuda-cuobjdump provides cuobjdump")
needs_disassembler = pytest.mark.skipif(
    CUOBJDUMP is None or NVDISASM is None or LIB is None,
    reason=f"cuobjdump ({CUOBJDUMP}), nvdisasm ({NVDISASM}) or the loaded libnvfp4 ({LIB}) not found; "
           "pip install --no-deps nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm provides them")


def _run(cmd, **kw):
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=kw.pop("timeout", 600), **kw)
    assert out.returncode == 0, f"{cmd[0]} failed ({out.returncode}): {out.stderr[-2000:]}"
    return out.stdout


def _demangle(names):
    tool = shutil.which("c++filt")
    if tool is None or not names:
        return list(names)
    out = _run([tool], input="\n".join(names) + "\n")
    lines = out.splitlines()
    return lines if len(lines) == len(names) else list(names)


@functools.lru_cache(maxsize=None)
def images():
    """[(arch, demangled kernel name, mangled name, static shared bytes)] of every cubin."""
    text = _run([CUOBJDUMP, "--dump-resource-usage", LIB])
    rows, arch, fn = [], None, None
    for line in text.splitlines():
        m = re.match(r"\s*arch = (sm_\w+)", line)
        if m:
            arch = m.group(1)
            continue
        m = re.match(r"\s*Function (\S+):", line)
        if m:
            fn = m.group(1)
            continue
        m = re.search(r"\bSHARED:(\d+)", line)
        if m and fn is not None:
            rows.append((arch, fn, int(m.group(1))))
            fn = None
    names = _demangle([r[1] for r in rows])
    return [(a, d, f, s) for (a, f, s), d in zip(rows, names)]


def _sass(mangled: str, arch: str) -> str:
    env = dict(os.environ, PATH=os.path.dirname(NVDISASM) + os.pathsep + os.environ.get("PATH", ""))
    return _run([CUOBJDUMP, "-sass", "-arch", arch, "-fun", mangled, LIB], env=env)


# ------------------------------------------------------------------ the runner table

def test_runner_table_is_whole():
    rows = runners()
    assert rows[0]["name"] == "reference" and rows[0]["built"]
    names = [r["name"] for r in rows]
    assert len(names) == len(set(names)), names
    assert {r["format"] for r in rows} == {"nvfp4", "mxfp4", "nvfp4-grouped"}
    grouped = [r for r in rows if r["format"] == "nvfp4-grouped"]
    assert any(r["family"] == "cpu" and r["backend"] == "reference" and r["built"] for r in grouped)
    assert {r["family"] for r in grouped if r["backend"] == "cutlass"} <= {"sm_90", "sm_100", "sm_110", "sm_120"}
    for fmt in ("nvfp4", "mxfp4"):
        mine = [r for r in rows if r["format"] == fmt]
        # every format has its CPU reference and, per CUDA backend, the same families
        assert any(r["family"] == "cpu" and r["backend"] == "reference" and r["built"] for r in mine), fmt
        for backend in ("cutlass", "cudnn"):
            fams = {r["family"] for r in mine if r["backend"] == backend}
            assert fams == {"sm_90", "sm_100", "sm_110", "sm_120"}, (fmt, backend, fams)
    for r in rows:
        assert r["backend"] in BACKENDS and r["format"] in ("nvfp4", "mxfp4", "nvfp4-grouped") and r["description"], r
        if r["family"] != "cpu":
            assert 90 <= r["cc_min"] <= r["cc_max"], r
            assert r["kernels"], f"{r['name']}: a CUDA runner names the kernels it launches"


@pytest.mark.parametrize("cc", CCS)
def test_dispatch_answers_from_the_compiled_targets(cc):
    """runner_compiled_for(i, cc) is the rule above applied to the runner's own targets and
    to the small kernels' (built for every target of the build), within its cc range."""
    any_cuda = False
    for r in runners():
        if r["family"] == "cpu":
            assert _C.runner_compiled_for(r["index"], cc) is False
            continue
        want = (r["built"] and r["cc_min"] <= cc <= r["cc_max"]
                and any(target_runs_on(t, cc) for t in r["targets"].split(";") if t)
                and any(target_runs_on(t, cc) for t in ARCHS))
        assert _C.runner_compiled_for(r["index"], cc) == want, (r["name"], cc, r["targets"], ARCHS)
        assert not _C.runner_supported(r["index"], cc) or want, (r["name"], cc)
        any_cuda |= bool(_C.runner_supported(r["index"], cc))
    for backend in ("cutlass", "cudnn", "auto"):
        ok = bool(_C.backend_supported(BACKENDS[backend], cc))
        serving = [r for r in runners() if r["family"] != "cpu" and (backend == "auto" or r["backend"] == backend)]
        assert ok == any(_C.runner_supported(r["index"], cc) for r in serving), (backend, cc)
    if cc == 101:
        # nvcc 13 has no sm_101 target (Thor is 11.0 under CUDA 13 drivers): nothing may claim it.
        assert not any_cuda


def test_arch_specific_target_does_not_claim_the_family():
    """The B300 / GB10 failure: an sm_100a or sm_120a cubin does not run on 10.3 or 12.1."""
    assert target_runs_on("100a", 100) and not target_runs_on("100a", 103)
    assert target_runs_on("100f", 103) and not target_runs_on("100f", 110) and not target_runs_on("100f", 120)
    assert target_runs_on("120f", 121) and not target_runs_on("120a", 121) and not target_runs_on("121a", 120)
    assert target_runs_on("110f", 110) and not target_runs_on("110f", 100)
    assert not target_runs_on("90a", 100) and not target_runs_on("103a", 100)
    assert not target_runs_on("100f", 101) and not target_runs_on("100", 101)


def test_is_supported_never_raises():
    for backend in list(BACKENDS) + ["nope"]:
        for dev in ("cpu", "cuda", "cuda:7", "meta"):
            assert nvfp4.is_supported(backend, dev) in (True, False)
    assert nvfp4.is_supported("reference", "cpu")


def test_device_info_comes_from_the_table():
    info = nvfp4.device_info()
    assert "error" not in info, info.get("error")
    assert [r["name"] for r in info["runners"]] == [r["name"] for r in runners()]
    assert info["backends"]["reference"].startswith(runners()[0]["description"])
    for key, text in info["backends"].items():
        if key == "reference":
            continue
        backend, fam = key.split("@")
        rows = [r for r in runners() if r["backend"] == backend and r["family"] == fam]
        assert rows and all(r["built"] for r in rows), key
        assert any(r["description"] in text for r in rows) or text.startswith("not available"), (key, text)


# ------------------------------------------------------------------ what the library holds

@needs_cuda_build
@needs_cuobjdump
def test_library_holds_the_targets_it_reports():
    archs = {a for a, _, _, _ in images()}
    for t in ARCHS:
        num = re.match(r"\d+", t).group(0)
        want = {f"sm_{num}a"} if t.endswith("a") else {f"sm_{num}", f"sm_{num}f"}
        assert archs & want, f"no cubin for target {t} in {LIB}: {sorted(archs)}"


@needs_cuda_build
@pytest.mark.skipif(LIB is None or shutil.which("nm") is None, reason="the loaded libnvfp4 or binutils' nm not found")
def test_driver_function_stays_internal():
    """The GEMMs' TMA descriptors go through nvfp4internal_cuTensorMapEncodeTiled (the driver
    function looked up once: src/gemm/common/driver_api.h): the library needs no driver
    symbol to load (it imports on machines without a driver) and does not export the helper."""
    undefined = _run(["nm", "-D", "--undefined-only", LIB]).split()
    assert not [s for s in undefined if s.startswith("cuTensorMap")], "the library calls the driver directly"
    exported = _run(["nm", "-D", "--defined-only", LIB]).split()
    assert "nvfp4internal_cuTensorMapEncodeTiled" not in exported
    assert [s for s in exported if s.startswith("nvfp4_")], "no exported C API found: wrong library?"


# The small kernels every CUDA path depends on: quantization, dequantization, swizzle, the
# GEMMs' decode and epilogue kernels.
SMALL_KERNELS = (r"nvfp4::detail::quant::|dequantize_kernel|swizzle_kernel|gemm_prep_kernel|gemm_finalize_kernel|"
                 r"gemm_epilogue_kernel")


@needs_cuda_build
@needs_cuobjdump
@pytest.mark.parametrize("cc", CCS)
def test_every_launched_kernel_has_an_image(cc):
    """Whenever a runner says it can run on cc, every kernel it launches has a cubin that runs
    there, and so has every quantization kernel."""
    imgs = images()
    here = [name for arch, name, _, _ in imgs if target_runs_on(arch, cc)]
    claimed = [r for r in runners() if r["family"] != "cpu" and _C.runner_compiled_for(r["index"], cc)]
    for r in claimed:
        for pat in r["kernels"].split(";"):
            assert any(re.search(pat, n) for n in here), (
                f"{r['name']} claims compute capability {cc / 10:.1f} but no kernel matching {pat!r} has an image "
                f"for it in {LIB}")
    if claimed:
        small = {name for _, name, _, _ in imgs if re.search(SMALL_KERNELS, name)}
        assert small, "no quantization kernels found"
        missing = sorted(small - set(here))
        assert not missing, f"quantization / decode kernels without an image for cc {cc}: {missing[:5]}"


@needs_cuda_build
@needs_cuobjdump
def test_kernel_patterns_are_not_stale():
    """Each kernel a built runner names exists in the library (for some target)."""
    names = [name for _, name, _, _ in images()]
    for r in runners():
        if r["family"] == "cpu" or not r["built"] or not r["targets"]:
            continue
        for pat in r["kernels"].split(";"):
            assert any(re.search(pat, n) for n in names), f"{r['name']}: no kernel in {LIB} matches {pat!r}"


@needs_cuda_build
@needs_cuobjdump
def test_static_shared_memory_fits():
    over = [(a, n, s) for a, n, _, s in images() if s > STATIC_SMEM_LIMIT]
    assert not over, over[:3]


# The block-scaled MMA of each family, as the disassembler prints it: tcgen05's UTCOMMA
# with four scale vectors per K block (NVFP4: one E4M3 scale per 16 values) on
# sm_100/103/110, OMMA.SF with E2M1 operands and UE4M3 scales on sm_120/121.
# The block-scaled MMA of each family in SASS: NVFP4 (E4M3 scales over 16 values: "4X" scale
# vectors, UE4M3) and MXFP4 (E8M0 scales over 32 values: no "4X", E8).
MMA = {10: r"\bUTCOMMA\.\S*4X", 11: r"\bUTCOMMA\.\S*4X", 12: r"\bOMMA\.SF\.\S*E2M1\.E2M1\.UE4M3"}
MMA_MX = {10: r"\bUTCOMMA(\.2CTA)?\s", 11: r"\bUTCOMMA(\.2CTA)?\s", 12: r"\bOMMA\.SF\.\S*E2M1\.E2M1\.E8\b"}


@needs_blackwell
@needs_disassembler
def test_blackwell_gemms_hold_the_block_scaled_mma():
    checked = checked_mx = 0
    for arch, name, mangled, _ in images():
        major = int(re.match(r"sm_(\d+)", arch).group(1)) // 10
        if major not in MMA or not re.search(r"device_kernel.*GemmUniversal.*Sm1[02]0", name):
            continue
        sass = _sass(mangled, arch)
        if "ue8m0" in mangled:  # the MXFP4 kernel (mx_float4_t: float_ue8m0_t scales)
            assert re.search(MMA_MX[major], sass), f"{arch} {name[:160]}: no MXFP4 block-scaled MMA in its SASS"
            assert not re.search(MMA[major], sass), f"{arch} {name[:160]}: an NVFP4 MMA in the MXFP4 kernel"
            checked_mx += 1
            continue
        assert re.search(MMA[major], sass), f"{arch} {name[:160]}: no block-scaled MMA in its SASS"
        checked += 1
    targets = sum(1 for t in ARCHS if not t.startswith("9"))
    assert checked >= 3 * targets, f"checked {checked} NVFP4 GEMM kernels, expected {3 * targets} ({ARCHS})"
    assert checked_mx >= targets, f"checked {checked_mx} MXFP4 GEMM kernels, expected {targets} ({ARCHS})"


@needs_cuda_build
@needs_disassembler
def test_quantization_uses_hardware_e2m1_on_blackwell_only():
    """The round-to-nearest rowwise kernel rounds with cvt.rn.satfinite.e2m1x2 (SASS: F2FP
    ... E2M1) on the family-specific Blackwell targets and in software on Hopper."""
    rn = [(a, m) for a, n, m, _ in images()
          if re.search(r"quant::\(anonymous namespace\)::rowwise_kernel<nvfp4::detail::quant::F32, false, false>", n)]
    archs = sorted({a for a, _ in rn})
    assert len(archs) == len(ARCHS), f"RN rowwise kernel found for {archs}, build targets {ARCHS}"
    for arch, mangled in rn:
        hw = re.search(r"F2FP\.SATFINITE\.E2M1", _sass(mangled, arch)) is not None
        assert hw == (not arch.startswith("sm_9")), f"{arch}: hardware E2M1 conversion {'present' if hw else 'absent'}"


# ------------------------------------------------------------------ host-side self-checks

@pytest.mark.parametrize("name", [r["name"] for r in runners()])
def test_runner_self_check(name):
    r = next(r for r in runners() if r["name"] == name)
    status, checked, msg = _C.runner_check(r["index"])
    if r["backend"] == "cudnn" and r["built"] and status == 4 and "libcudnn" in msg:
        pytest.skip(f"no loadable libcudnn.so.9 here for the cuDNN graph checks: {msg.splitlines()[0]}")
    assert status == 0, f"{name}: {msg}"
    if r["built"] and r["name"].startswith(("cutlass-sm100", "cutlass-sm110", "cutlass-sm120")):
        assert checked > 50, f"{name}: only {checked} checks ran"
    if r["built"] and r["backend"] == "cudnn":
        assert checked >= 96, f"{name}: only {checked} graphs validated"


def test_wheel_holds_one_library():
    if LIB is None:
        pytest.skip("the loaded libnvfp4 was not found")
    pkg = Path(nvfp4.__file__).parent
    if Path(LIB).parent != pkg:
        pytest.skip(f"libnvfp4 is loaded from {LIB}, not from the package directory {pkg}")
    libs = sorted(p.name for p in pkg.iterdir() if p.name.startswith("libnvfp4"))
    assert libs == ["libnvfp4.so"], libs


# ------------------------------------------------------------------ E2M1 against NVIDIA's host model

def _cuda_include():
    cands = [os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", ""), "/usr/local/cuda"]
    for c in cands:
        if c and os.path.isfile(os.path.join(c, "include", "cuda_fp4.hpp")):
            return os.path.join(c, "include")
    for p in sys.path:
        inc = os.path.join(p, "nvidia", "cu13", "include")
        if os.path.isfile(os.path.join(inc, "cuda_fp4.hpp")):
            return inc
    return None


@pytest.fixture(scope="module")
def host_model(tmp_path_factory):
    cxx = shutil.which(os.environ.get("CXX", "c++")) or shutil.which("g++") or shutil.which("clang++")
    inc = _cuda_include()
    if cxx is None or inc is None:
        pytest.skip(f"needs a C++ compiler ({cxx}) and CUDA's cuda_fp4.hpp ({inc})")
    exe = tmp_path_factory.mktemp("e2m1") / "e2m1_host_model"
    _run([cxx, "-O2", "-std=c++17", "-ffp-contract=off", "-pthread", f"-I{ROOT / 'src'}", f"-I{ROOT / 'include'}",
          f"-I{inc}", str(ROOT / "tests" / "cpp" / "e2m1_host_model.cpp"), "-o", str(exe)])
    return exe


def test_e2m1_matches_the_hardware_model_on_every_float(host_model):
    out = _run([str(host_model), "exhaustive", str(max(1, os.cpu_count() or 1))], timeout=1800)
    assert "4278190082 non-NaN floats" in out and "0 failed" in out, out


def test_nan_block_replacement_matches_the_reference(host_model):
    out = _run([str(host_model), "nan-block"])
    assert re.search(r"\b3 passed, 0 failed", out), out


def test_bf16_decode_words_match_the_format(host_model):
    out = _run([str(host_model), "decode"])
    assert "decode: 131072 words of 8 codes" in out and re.search(r"\b2 passed, 0 failed", out), out
