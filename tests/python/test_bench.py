"""The benchmarks' timer (nvfp4._timing) against known durations, and the benchmark
command lines on the CPU: every option they document is honoured there too."""
import csv
import importlib.util
import json
import os
import subprocess
import sys
import time

import pytest
import torch

import nvfp4
from nvfp4 import bench
from nvfp4._timing import Timer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _spin(us: float) -> None:
    end = time.perf_counter() + us * 1e-6
    while time.perf_counter() < end:
        pass


# Upper bounds use the fastest sample: on a busy machine (CI has 2 shared cores) any sample
# can be preempted, but a timer that misreads would misread them all.

def test_cpu_timer_reads_a_sleep():
    m = Timer("cpu", iters=5, warmup=1, min_sample_us=0).time(lambda i: time.sleep(0.002))
    assert m.reps == 1
    assert 1990 <= m.min_us < 10000, m  # a 2 ms sleep: never less
    assert m.min_us <= m.median_us


def test_cpu_timer_reads_a_short_op():
    """A ~50 us busy loop reads ~50 us (the timer once read 16 ms for a 12 us op); short
    ops are repeated within a sample until it lasts min_sample_us."""
    m = Timer("cpu", iters=5, warmup=2, min_sample_us=2000).time(lambda i: _spin(50))
    assert 45 <= m.min_us < 500, m
    assert m.reps >= 10, m
    assert m.min_us <= m.median_us <= max(m.mean_us, m.median_us)


def test_cpu_timer_small_torch_op():
    """A 16x64x64 matmul: microseconds, not the tens of milliseconds a multi-threaded
    parallel region can wait on a busy machine (the timer uses one torch thread)."""
    a, b = torch.randn(16, 64), torch.randn(64, 64)
    threads = torch.get_num_threads()
    m = Timer("cpu", iters=5, warmup=2, min_sample_us=1000).time(lambda i: a @ b)
    assert m.min_us < 1000, m
    assert torch.get_num_threads() == threads  # restored


def test_timer_cycles_input_sets():
    seen = []
    t = Timer("cpu", iters=2, warmup=1, min_sample_us=0)
    assert t.sets(1 << 30) == 1  # no L2 rotation on the CPU
    m = t.time(lambda i: seen.append(i), sets=3)
    assert m.sets == 3 and set(seen) == {0, 1, 2}
    assert seen[:6] == [0, 1, 2, 0, 1, 2]
    assert Timer("cpu").time_graph(lambda i: None) is None  # CUDA graphs: GPU only


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_timer_events_rotation_and_graph():
    """CUDA events: a 256 MiB device copy reads a plausible bandwidth; the input sets
    exceed 2x L2; the graph replay of the same calls times within 2x of the eager one."""
    t = Timer("cuda", iters=5, warmup=2, min_sample_us=1000, graph=True)
    n = 256 << 20
    src, dst = torch.ones(n, dtype=torch.uint8, device="cuda"), torch.empty(n, dtype=torch.uint8, device="cuda")
    m = t.time(lambda i: dst.copy_(src))
    gbps = 2 * n / (m.median_us * 1e-6) / 1e9
    assert 100 < gbps < 20000, m
    assert m.graph_us is not None and 0.5 < m.graph_us / m.median_us < 2.0, m
    sets = t.sets(1 << 20)
    assert sets * (1 << 20) > 2 * t.l2_bytes or sets == t.max_sets
    # A short kernel is repeated within a sample until the sample lasts min_sample_us.
    x = torch.ones(16, device="cuda")
    m = t.time(lambda i: x.add_(1))
    assert m.reps > 10 and m.median_us < 100, m


def test_timer_rejects_other_devices():
    with pytest.raises(ValueError, match="^device: must be cpu or cuda, got meta"):
        Timer("meta")


# ---------------------------------------------------------------- python -m nvfp4.bench

def test_bench_module_cpu_options(tmp_path, capsys):
    js, cs = tmp_path / "b.json", tmp_path / "b.csv"
    rc = bench.main(["--device", "cpu", "--shapes", "16x32x64,8x16x32", "--ops", "gemm", "--iters", "2",
                     "--warmup", "1", "--min-sample-us", "0", "--backends", "reference,cutlass",
                     "--json", str(js), "--csv", str(cs), "--plot", ""])
    assert rc == 0
    res = json.loads(js.read_text())
    assert res["mode"] == "cpu"
    rows = [r for r in res["rows"] if r["section"] != "copy"]
    assert {r["section"] for r in rows} == {"gemm"}  # --ops gemm: no quantization rows
    assert {(r["m"], r["n"], r["k"]) for r in rows} == {(16, 32, 64), (8, 16, 32)}  # --shapes
    ref = [r for r in rows if r["backend"] == "reference"]
    assert len(ref) == 2 and all(r["status"] == "ok" and r["iters"] == 2 and r["median_us"] > 0 for r in ref)
    assert all(r["status"].startswith("not supported") for r in rows if r["backend"] == "cutlass")
    with open(cs) as f:
        assert len(list(csv.DictReader(f))) == len(res["rows"])


def test_bench_module_cpu_quick_quant(tmp_path):
    js = tmp_path / "q.json"
    assert bench.main(["--device", "cpu", "--quick", "--ops", "quant", "--iters", "1", "--warmup", "0",
                       "--min-sample-us", "0", "--json", str(js), "--plot", ""]) == 0
    rows = [r for r in json.loads(js.read_text())["rows"] if r["section"] == "quant"]
    assert {(r["m"], r["k"]) for r in rows} == {(16, 64), (64, 64)}  # --quick: the first CPU shape
    assert all(r["status"] == "ok" and r["gbps"] > 0 for r in rows)


def test_bench_module_shapes_file_and_errors(tmp_path):
    f = tmp_path / "s.json"
    f.write_text(json.dumps({"models": [{"name": "tiny", "m": [8, 4], "layers": [{"name": "l", "n": 16, "k": 32}]}]}))
    js = tmp_path / "r.json"
    assert bench.main(["--device", "cpu", "--shapes-file", str(f), "--ops", "gemm", "--iters", "1", "--warmup", "0",
                       "--min-sample-us", "0", "--json", str(js), "--plot", ""]) == 0
    assert {(r["m"], r["n"], r["k"]) for r in json.loads(js.read_text())["rows"] if r["section"] == "gemm"} == \
        {(8, 16, 32), (4, 16, 32)}
    with pytest.raises(SystemExit):
        bench.main(["--ops", "everything"])
    with pytest.raises(SystemExit):
        bench.main(["--device", "cpu", "--backends", "fastest"])


def test_packaged_shapes_file():
    shapes = bench.load_shapes()
    assert shapes and all(s["m"] > 0 and s["n"] > 0 and s["k"] > 0 for s in shapes)
    quick = bench.load_shapes(quick=True)
    assert 0 < len(quick) < len(shapes)


# ------------------------------------------------------------ bench/*.py on the CPU

@pytest.mark.parametrize("script,args", [
    ("bench_quant.py", ["--device", "cpu", "--sizes", "64", "--iters", "1", "--no-baseline"]),
    ("bench_gemm.py", ["--device", "cpu", "--shapes", "8x32x32", "--quick"]),
    ("bench_cpu_gemm.py", ["--shapes", "33x40x64"]),
    ("bench_grouped_gemm.py", ["--device", "cpu"]),
])
def test_bench_scripts_run_on_cpu(tmp_path, script, args):
    js = tmp_path / "out.json"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", script), *args, "--json", str(js)],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads(js.read_text())
    results = res.get("results", [])
    assert results and any(x.get("us") for x in results), res
    assert nvfp4.__version__ in r.stdout


def test_bench_gemm_fp32_output_on_cpu(tmp_path):
    """bench_gemm.py --out-dtype float32 (the weight gradient's output): every method runs with
    FP32 output, the baseline included, and the JSON says which output was timed."""
    js = tmp_path / "out.json"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "bench_gemm.py"), "--device", "cpu", "--shapes",
                        "8x32x32", "--quick", "--out-dtype", "float32", "--json", str(js)],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads(js.read_text())
    assert res["info"]["out_dtype"] == "float32" and "float32 output" in r.stdout
    ok = {x["method"] for x in res["results"] if x["status"] == "ok" and x["us"]}
    assert {"bf16", "reference", "quant+reference"} <= ok, res["results"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without a GPU")
def test_ncu_workloads_refuse_without_a_gpu(tmp_path):
    """bench/ncu_kernels.py (the device job's Nsight Compute workloads) says why it cannot
    run instead of failing inside a call."""
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "ncu_kernels.py")],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode != 0
    assert "needs a CUDA GPU" in r.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without a GPU")
@pytest.mark.parametrize("script", ["bench_linear_kernels.py", "bench_producer_amax.py", "bench_gelu_amax.py",
                                    "bench_quant_in_step.py"])
def test_gpu_benches_refuse_without_a_gpu(tmp_path, script):
    """The benchmarks that profile GPU kernels say, without a GPU, that they need one."""
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", script)],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode != 0
    assert "needs a CUDA GPU" in r.stderr


@pytest.mark.parametrize("args,name", [(["--operands", "x,zz"], "--operands"), (["--features", "100"], "--features"),
                                       (["--rounds", "0"], "--rounds")])
def test_quant_in_step_refuses_bad_arguments_by_name(tmp_path, args, name):
    """bench_quant_in_step.py checks its arguments before it looks for a GPU."""
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "bench_quant_in_step.py"), *args],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert name in r.stderr


def _bench_module(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "bench", name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("rows", [16, 40, 33])
def test_gelu_amax_reference_is_the_quantization_amaxes(rows):
    """bench/bench_gelu_amax.py checks its prototypes' maxima against reference_maxima: that
    definition is the library's — the rowwise amax and the columnwise RHT amax of a CPU
    quantization with the columnwise transform (odd row counts padded with zero rows)."""
    b = _bench_module("bench_gelu_amax")
    torch.manual_seed(rows)
    x = (torch.randn(rows, 48) * torch.logspace(-3, 3, 48)).to(torch.bfloat16)
    from nvfp4._format import default_rht_mask
    mask = default_rht_mask()
    q = nvfp4.quantize(x, columnwise=True, rht="columnwise")
    assert q.rht_sign_mask == mask
    plain, rht = b.reference_maxima(x, mask)
    assert plain == q.amax.item()
    # the library's transform sums in its butterfly's order, the reference by a matrix product
    assert rht == pytest.approx(q.amax_t.item(), rel=1e-6)
    assert rht != pytest.approx(b.reference_maxima(x, mask ^ 0x1)[1], rel=1e-6)  # the signs matter


@pytest.mark.parametrize("argv,word", [(["--shapes", "16384"], "--shapes"), (["--shapes", "0x3072"], "--shapes"),
                                       (["--shapes", "axb"], "--shapes"),
                                       (["--shapes", "64x66", "--cuda"], "cols % 4"),
                                       (["--block-n", "96"], "--block-n"), (["--block-n", "0"], "--block-n")])
def test_gelu_amax_bench_refuses_bad_arguments(tmp_path, argv, word):
    """Malformed shapes, a CUDA-form shape it cannot read, block sizes Triton cannot take: refused
    by name before anything runs (with or without a GPU)."""
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "bench_gelu_amax.py"), *argv],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 2
    assert word in r.stderr


def test_gelu_amax_kernel_source_defines_the_five_kernels():
    """The prototypes' module text (written out for Triton, which reads kernels from their
    file) is valid Python and defines the fused and unfused kernels the benchmark times."""
    import ast
    b = _bench_module("bench_gelu_amax")
    tree = ast.parse(b._kernel_source())
    names = {f.name for f in tree.body if isinstance(f, ast.FunctionDef)}
    assert names == {"gelu_fwd", "gelu_fwd_amax", "amax_pass", "gelu_bwd", "gelu_bwd_amax"}


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without a GPU")
def test_tile_sweep_refuses_without_a_hopper_gpu(tmp_path):
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "sm90_tiles", "sweep.py")],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode != 0
    assert "needs a Hopper GPU" in r.stderr + r.stdout


def _nvcc():
    import shutil
    return shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)


@pytest.mark.skipif(_nvcc() is None, reason="needs nvcc (the CUDA build machines have it)")
def test_gelu_amax_cuda_form_compiles(tmp_path):
    """bench_gelu_amax.py --cuda builds bench/gelu_amax/gelu_amax.cu with the command below into
    a shared library exporting its launcher; here for sm_90a (no GPU needed to compile)."""
    b = _bench_module("bench_gelu_amax")
    lib = tmp_path / "libgelu_amax.so"
    cmd = b.nvcc_command(str(lib), "sm_90a")
    cmd[0] = _nvcc()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    syms = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True).stdout
    assert "gelu_amax_launch" in syms


@pytest.mark.skipif(_nvcc() is None, reason="needs nvcc (the CUDA build machines have it)")
def test_tile_sweep_configurations_compile(tmp_path):
    """bench/sm90_tiles/build.sh compiles a configuration of each output type (the sweep's
    template against this CUTLASS) into a library exporting its two C entry points, and
    refuses an unknown configuration by name."""
    pytest.importorskip("cutlass_library")
    script = os.path.join(ROOT, "bench", "sm90_tiles", "build.sh")
    env = dict(os.environ, OBJ=str(tmp_path / "obj"), ONLY="b_128x128pp_c21,f_128x256_c21", NVCC=_nvcc())
    r = subprocess.run(["bash", script, "2"], capture_output=True, text=True, timeout=900, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    lib = tmp_path / "obj" / "libtiles.so"
    syms = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True).stdout
    for name in ("b_128x128pp_c21", "f_128x256_c21"):
        assert f" T {name}_run" in syms and f" T {name}_ws" in syms, syms
    env["ONLY"] = "b_999x1_c11"
    r = subprocess.run(["bash", script], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 2 and "no configuration 'b_999x1_c11'" in r.stderr


def test_producer_amax_bench_smoke(tmp_path):
    """bench/bench_producer_amax.py on the CPU (--smoke, --require-exact): every compiled
    producer + amax form runs and its amax equals the quantization's bit for bit (Inductor's CPU
    backend; on a GPU the plain whole-tensor form of the norms differs, bench/NOTES.md); each row
    carries its times."""
    out = tmp_path / "pa.json"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "bench_producer_amax.py"), "--smoke",
                        "--require-exact", "--producers", "rmsnorm,gelu", "--json", str(out)],
                       capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = json.loads(out.read_text())["rows"]
    assert [(x["producer"], x["features"]) for x in rows] == [("rmsnorm", 128), ("gelu", 128)]
    for x in rows:
        for form in ("+ amax", "+ row amax", "+ amax, emulated casts"):
            assert x[f"{form} bits equal"] is True, (form, x)
        for key in ("producer us", "+ amax us", "+ row amax us", "+ amax, emulated casts us", "quantize us",
                    "quantize given us"):
            assert x[key] > 0, (key, x)
        assert x["amax pass us"] == pytest.approx(x["quantize us"] - x["quantize given us"])
    assert "bits equal: True" in r.stdout and "bits equal: False" not in r.stdout


@pytest.mark.parametrize("argv,word", [(["--producers", "softmax"], "--producers"), (["--producers", ","], "--producers"),
                                       (["--features", "100"], "--features"), (["--tokens", "8"], "--tokens"),
                                       (["--iters", "0"], "--iters")])
def test_producer_amax_bench_refuses_bad_arguments(tmp_path, argv, word):
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "bench_producer_amax.py"), "--smoke", *argv],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 2 and word in r.stderr, r.stdout + r.stderr


def _linear_kernels_bench():
    import importlib.util
    spec = importlib.util.spec_from_file_location("bench_linear_kernels",
                                                  os.path.join(ROOT, "bench", "bench_linear_kernels.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_linear_kernels_byte_model():
    """The bytes bench_linear_kernels.py charges each kernel class, written out by hand for one
    shape (160 tokens, 32 -> 48), and the bandwidth it derives from a time."""
    blk = _linear_kernels_bench()
    t, k, n = 160, 32, 48
    xt_codes = k * t // 2 + 128 * 12 + 4  # X^T [32, 160]: codes, scales [128 rows, 12 cols] swizzled, amax
    wt_codes = k * n // 2 + 128 * 4 + 4   # W^T [32, 48]: scales [128, 4]
    want = {
        "amax X, dY": 2 * t * k + 2 * t * n,
        "quantize X (RTN, row decoded + col RHT codes)": 2 * t * k + 2 * t * k + xt_codes,
        "quantize dY (SR, row decoded + col RHT decoded)": 2 * t * n * 3,
        "quantize W (fp32: amax + 2D tile)": 4 * n * k * 2 + 2 * n * k + wt_codes,
        "decode (Wᵀ, Xᵀ)": wt_codes + 2 * k * n + xt_codes + 2 * k * t,
    }
    assert blk.model_bytes(t, k, n) == want
    assert [c for c, _ in blk.CLASSES] == list(want)
    # the profiler's kernel names, as short() leaves them
    names = {"amax_colrht_kernel<BF16>": "amax X, dY",
             "tile_kernel<BF16, false, false, true, true, false, true>": "quantize X (RTN, row decoded + col RHT codes)",
             "tile_kernel<BF16, true, false, true, true, false, true>": "quantize dY (SR, row decoded + col RHT decoded)",
             "tile_kernel<F32, false, true, true, true, false, false>": "quantize W (fp32: amax + 2D tile)",
             "amax_flat_kernel<F32, false>": "quantize W (fp32: amax + 2D tile)",
             "gemm_prep_kernel": "decode (Wᵀ, Xᵀ)", "Memset ": None, "cutlass GEMM el13Gemm": None}
    for name, cls in names.items():
        assert blk.classify(name) == cls, name
    # the GEMMs summed against cuBLAS: CUTLASS's kernels and the library's own Hopper ones
    for name, gemm in (("cutlass GEMM el13Gemm", True), ("rs_kernel", True), ("direct_kernel", True),
                       ("small_m::stream_kernel<4>", True), ("gemm_prep_kernel", False),
                       ("tile_kernel<BF16, true, false, true, true, false, true>", False)):
        assert blk.is_gemm(name) == gemm, name
    # W's two kernels add up; a class with no kernel is left out; TB/s and the copy fraction
    rows = blk.bandwidth_rows({"tile_kernel<F32, false": 3.0, "amax_flat_kernel<F32, false>": 1.0,
                               "gemm_prep_kernel": 2.0, "Memset ": 5.0}, want, 2.0)
    assert [r[0] for r in rows] == ["quantize W (fp32: amax + 2D tile)", "decode (Wᵀ, Xᵀ)"]
    w = want["quantize W (fp32: amax + 2D tile)"]
    assert rows[0][1] == 4.0 and rows[0][2] == w / 1e6
    assert abs(rows[0][3] - w / 4e-6 / 1e12) < 1e-12 and abs(rows[0][4] - rows[0][3] / 2.0) < 1e-12


def test_linear_kernels_step_floor_with_todays_codes_quantizers():
    """(d) and (e) of the step floor, by hand: today's tile kernels writing codes replace the
    decoded road's X and dY tile kernels, the decode pass goes, the GEMMs stay as fast as they
    are (not cuBLAS's time); (e) takes the measured amax pass off as well. Absent without the
    codes timings."""
    blk = _linear_kernels_bench()
    X, DY = "quantize X (RTN, row decoded + col RHT codes)", "quantize dY (SR, row decoded + col RHT decoded)"
    results = [dict(shape="64x32", tokens=16, copy_tbs=2.0, gemm_us=100.0, cublas_us={"a": 70.0, "b": 20.0},
                    codes_tile_us={"X": 15.0, "dY": 35.0}, bandwidth=[
                        dict(kind="amax X, dY", us=30.0, mb=40.0, tbs=0.0, of_copy=0.0),
                        dict(kind=X, us=20.0, mb=1.0, tbs=0.0, of_copy=0.0),
                        dict(kind=DY, us=50.0, mb=1.0, tbs=0.0, of_copy=0.0),
                        dict(kind="decode (Wᵀ, Xᵀ)", us=12.0, mb=1.0, tbs=0.0, of_copy=0.0)])]
    f = blk.step_floor(results, 2, 10.0, 8.0)
    saved = ((20.0 - 15.0) + (50.0 - 35.0) + 12.0) * 2 / 1000
    assert f["codes_now_ms"] == pytest.approx(saved) and f["amax_now_ms"] == pytest.approx(30.0 * 2 / 1000)
    assert f["codes_now"] == pytest.approx((10.0 - saved) / 8.0)
    assert f["codes_now_no_amax"] == pytest.approx((10.0 - saved - 0.06) / 8.0)
    del results[0]["codes_tile_us"]
    assert "codes_now" not in blk.step_floor(results, 2, 10.0, 8.0)


def test_linear_kernels_step_floor(tmp_path):
    """The step floor bench_linear_kernels.py derives, by hand for two shapes and 3 layers:
    each class's excess over its copy-bandwidth time (MB / TB/s = µs) comes off the nvfp4
    step, then the amax class's copy time; and the same figures printed from saved JSON."""
    blk = _linear_kernels_bench()
    results = [
        dict(shape="64x32", tokens=16, copy_tbs=2.0, bandwidth=[
            dict(kind="amax X, dY", us=30.0, mb=40.0, tbs=0.0, of_copy=0.0),        # floor 20 us
            dict(kind="quantize dY (SR, row decoded + col RHT decoded)", us=50.0, mb=80.0, tbs=0.0, of_copy=0.0)]),
        dict(shape="32x64", tokens=16, copy_tbs=4.0, gemm_us=100.0, cublas_us={"a": 60.0, "b": 30.0}, bandwidth=[
            dict(kind="amax X, dY", us=10.0, mb=20.0, tbs=0.0, of_copy=0.0),        # floor 5 us
            dict(kind="decode (Wᵀ, Xᵀ)", us=12.0, mb=40.0, tbs=0.0, of_copy=0.0)]),  # floor 10 us
    ]
    f = blk.step_floor(results, 3, 10.0, 8.0)
    over = (10.0 + 10.0 + 5.0 + 2.0) * 3 / 1000  # per layer: (30-20) + (50-40) + (10-5) + (12-10) us
    amax = (20.0 + 5.0) * 3 / 1000
    assert f["over_copy_ms"] == pytest.approx(over) and f["amax_ms"] == pytest.approx(amax)
    assert f["now"] == pytest.approx(1.25)
    assert f["at_copy"] == pytest.approx((10.0 - over) / 8.0)
    assert f["no_amax"] == pytest.approx((10.0 - over - amax) / 8.0)
    # (c) GEMMs reading FP4 at cuBLAS's time: amax and decode cost nothing, dY [16, 32] is read
    # once and written as codes both ways (16x32 and 32x16: 256 code bytes, a 128x4 swizzled
    # scale tile, the amax: 772 bytes each), and the second shape's GEMMs lose 100 - 90 us
    dy_road = (2 * 16 * 32 + 772 + 772) / 1e6 / 2.0
    fp4 = (30.0 + (50.0 - dy_road) + 10.0 + 12.0 + 10.0) * 3 / 1000
    assert f["fp4_gemm_ms"] == pytest.approx(fp4)
    assert f["fp4_gemm"] == pytest.approx((10.0 - fp4) / 8.0)
    assert blk.codes_road_bytes(16, 64, 32)["quantize dY (SR, row decoded + col RHT decoded)"] == 2 * 16 * 32 + 772 * 2
    lk, st = tmp_path / "lk.json", tmp_path / "step.json"
    lk.write_text(json.dumps(dict(device="test", results=results)))
    st.write_text(json.dumps(dict(model=dict(n_layers=3), modes=["compile"], rows={
        "nvfp4/compile": dict(step_ms=10.0, profile=dict(gpu_busy_ms=9.0)),
        "bf16/compile": dict(step_ms=8.0, profile=dict(gpu_busy_ms=7.5))})))
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "bench_linear_kernels.py"), "--from-json", str(lk),
                        "--step-json", str(st)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [ln for ln in r.stdout.splitlines() if ln.strip().startswith("compile")]
    assert len(lines) == 2, r.stdout
    assert f"= 1.250; kernels at copy bandwidth (-{over:.2f} ms): {(10.0 - over) / 8.0:.3f}" in lines[0]
    assert f"= {9.0 / 7.5:.3f}; kernels at copy bandwidth" in lines[1]
    assert f"{(9.0 - over - amax) / 7.5:.3f}" in lines[1]
    assert f"GEMMs reading FP4 at cuBLAS's time (-{fp4:.2f} ms in all): {(9.0 - fp4) / 7.5:.3f}" in lines[1]


def _train_step_bench():
    import importlib.util
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    spec = importlib.util.spec_from_file_location("bench_train_step", os.path.join(ROOT, "bench", "bench_train_step.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _set_env(monkeypatch, name, value):
    """name set to value for the test, or unset (None)."""
    if value is None:
        monkeypatch.delenv(name, raising=False)
    else:
        monkeypatch.setenv(name, value)


@pytest.mark.parametrize("initial", [None, "1"])
def test_ab_rounds_interleave_and_restore(monkeypatch, initial):
    """--ab-env: rounds alternate A-B, B-A, ...; every A step sees the variable as it was, every
    B step sees the value asked for, each switch is followed by one untimed step, and the
    variable is restored afterwards (unset stays unset)."""
    bst = _train_step_bench()
    name = "NVFP4_AB_TEST_VAR"
    _set_env(monkeypatch, name, initial)
    log = []

    def step(i):
        log.append(("step", i, os.environ.get(name)))

    def timed(i):
        log.append(("timed", i, os.environ.get(name)))
        return 2.0 if os.environ.get(name) == "0" else 1.0

    res = bst.ab_rounds(step, timed, f"{name}=0", 3, 2)
    assert len(res["a"]) == len(res["b"]) == 6
    assert res["a_ms"] == 1.0 and res["b_ms"] == 2.0 and res["b_over_a"] == 2.0
    assert os.environ.get(name) == initial
    sides = [e[2] for e in log if e[0] == "step"]  # the untimed step opening each side
    assert sides == [initial, "0", "0", initial, initial, "0"]
    assert [e for e in log if e[0] == "timed"][:2] == [("timed", 1, initial), ("timed", 2, initial)]


def test_interleaved_rows_rotate_and_take_medians():
    """--interleave: every round runs every variant (one untimed step after the switch, then
    the timed ones), the order rotated by one each round; each row is the median of its
    samples."""
    bst = _train_step_bench()
    log = []

    def runner(name, ms):
        return (lambda i: log.append(("step", name, i)),
                lambda i: (log.append(("timed", name, i)), ms + i)[1])

    rows = bst.interleaved_rows({"a": runner("a", 10.0), "b": runner("b", 20.0), "c": runner("c", 30.0)}, 3, 2)
    opened = [e[1] for e in log if e[0] == "step"]
    assert opened == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    for name, base in (("a", 10.0), ("b", 20.0), ("c", 30.0)):
        assert rows[name]["samples"] == [base + 1, base + 2] * 3
        assert rows[name]["step_ms"] == base + 1.5 and rows[name]["step_ms_min"] == base + 1
    # each untimed step is followed by that variant's own timed steps
    for k, e in enumerate(log):
        if e[0] == "step":
            assert log[k + 1:k + 3] == [("timed", e[1], 1), ("timed", e[1], 2)]


def test_interleave_refusals_and_fp8_variant_names(capsys):
    """--interleave takes rounds >= 0 and not beside --ab-env; FP8 variant names take only
    the roads they name."""
    bst = _train_step_bench()
    for argv in (["--smoke", "--interleave", "-1"], ["--smoke", "--interleave", "2", "--ab-env", "NVFP4_PDL=0"]):
        with pytest.raises(SystemExit):
            bst.main(argv)
        assert "--interleave" in capsys.readouterr().err
    assert bst._fp8_variant("fp8").inductor_casts is False
    assert bst._fp8_variant("fp8+traced").inductor_casts is True
    assert bst._fp8_variant("fp8_delayed+opaque").inductor_casts is False
    for bad in ("fp8+", "fp8+fast", "nvfp4+traced", "fp8_delayed+traced+opaque"):
        assert bst._fp8_variant(bad) is None, bad


@pytest.mark.parametrize("initial", [None, "1"])
def test_variant_env_is_in_force_around_each_call_and_restored(monkeypatch, initial):
    """VARIANT@NAME=VALUE: the setting is in force inside every call of the variant's step
    functions (build, compile, capture and each step go through them) and the process's own
    value, or none, is back after each."""
    bst = _train_step_bench()
    name = "NVFP4_VARIANT_TEST_VAR"
    _set_env(monkeypatch, name, initial)
    assert bst.split_variant(f"nvfp4@{name}=0") == ("nvfp4", f"{name}=0")
    assert bst.split_variant("nvfp4") == ("nvfp4", None)
    seen = []
    fn = bst.with_env(lambda i: seen.append((i, os.environ.get(name))) or i + 1, f"{name}=0")
    assert fn(3) == 4 and seen == [(3, "0")] and os.environ.get(name) == initial
    with pytest.raises(ZeroDivisionError):
        with bst.variant_env(f"{name}=0"):
            assert os.environ.get(name) == "0"
            1 / 0
    assert os.environ.get(name) == initial
    plain = lambda i: i  # noqa: E731
    assert bst.with_env(plain, None) is plain


def test_variant_env_reaches_the_library_and_only_its_row(capsys):
    """A row with a setting the library refuses fails by that setting's name, the rows beside
    it run as usual, and the setting is gone afterwards; a malformed @ part, or one on the
    fakequant baseline, is refused before anything runs."""
    bst = _train_step_bench()
    os.environ.pop("NVFP4_SM90_TILE", None)
    res = bst.main(["--smoke", "--variants", "bf16,nvfp4,nvfp4@NVFP4_SM90_TILE=bogus", "--no-memory"])
    rows = res["rows"]
    assert "step_ms" in rows["bf16/eager"] and "step_ms" in rows["nvfp4/eager"]
    assert "NVFP4_SM90_TILE" in rows["nvfp4@NVFP4_SM90_TILE=bogus/eager"]["error"]
    assert "NVFP4_SM90_TILE" not in os.environ
    capsys.readouterr()
    for bad, what in (("nvfp4@X", "VARIANT@NAME=VALUE"), ("nvfp4@=1", "VARIANT@NAME=VALUE"),
                      ("fakequant@NVFP4_SM90_TILE=large", "fakequant")):
        with pytest.raises(SystemExit):
            bst.main(["--smoke", "--variants", f"bf16,{bad}", "--no-memory"])
        assert what in capsys.readouterr().err, bad


def test_ab_env_needs_name_and_value(capsys):
    bst = _train_step_bench()
    for bad in ("NVFP4_PDL", "=0"):
        with pytest.raises(SystemExit):
            bst.main(["--smoke", "--ab-env", bad])
        assert "--ab-env: expected NAME=VALUE" in capsys.readouterr().err


def _step_gaps():
    import importlib.util
    spec = importlib.util.spec_from_file_location("step_gaps", os.path.join(ROOT, "bench", "step_gaps.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _x(cat, name, ts, dur, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def test_step_gaps_attribution():
    """Synthetic trace, times in us: the GPU runs k1 [0, 10), k2 [30, 40) and k3 [41, 50).
    k2 was launched at 25 (after the GPU went idle at 10): a host gap of 20 us whose window
    [10, 25) the launching thread spent in aten::empty (self 12..16), in its child
    cudaMalloc (16..20) and outside any op (10..12, 20..25 inside no op, apart from the
    launch's own runtime call from 25). k3 was queued at 28, before k2 ended: a 1 us
    latency gap, not the host's."""
    g = _step_gaps()
    ev = [
        _x("cpu_op", "outer", 0, 9),                     # not overlapping the window
        _x("cuda_runtime", "cudaLaunchKernel", 1, 2, correlation=1),
        _x("cpu_op", "aten::empty", 12, 8),
        _x("cuda_runtime", "cudaMalloc", 16, 4),
        _x("cuda_runtime", "cudaLaunchKernel", 25, 3, correlation=2),
        _x("cuda_runtime", "cudaLaunchKernel", 28, 2, correlation=3),
        _x("cpu_op", "other thread", 10, 15, tid=2),     # another thread: never charged
        _x("kernel", "k1", 3, 7, tid=7, correlation=1),
        _x("kernel", "k2", 30, 10, tid=7, correlation=2),
        _x("kernel", "k3", 41, 9, tid=7, correlation=3),
        {"ph": "i", "cat": "kernel", "name": "not a span"},
    ]
    # k1 runs [3, 10) here: the idle gap is 10 -> 30
    rep = g.gap_report({"traceEvents": ev}, steps=1)
    assert rep["gaps_per_step"] == 2
    assert abs(rep["gpu_idle_ms"] - 0.021) < 1e-9
    assert abs(rep["host_late_ms"] - 0.020) < 1e-9
    assert abs(rep["launch_latency_ms"] - 0.001) < 1e-9
    on = rep["waiting_on_ms"]
    assert abs(on["aten::empty"] - 0.004) < 1e-9
    assert abs(on["cudaMalloc"] - 0.004) < 1e-9
    assert abs(on[g.OUTSIDE] - 0.007) < 1e-9
    assert "other thread" not in on and "outer" not in on
    assert abs(sum(on.values()) - 0.015) < 1e-9  # the window 10 -> 25
    assert list(rep["waiting_for_ms"]) == ["k2"]
    # two steps: per-step figures halve
    rep2 = g.gap_report(ev, steps=2)
    assert abs(rep2["host_late_ms"] - 0.010) < 1e-9 and rep2["gaps_per_step"] == 1


def test_step_gaps_self_time_of_nested_ops():
    g = _step_gaps()
    # a [0, 100) with children b [10, 30) (grandchild c [15, 20)) and d [50, 60)
    selfs = g._self_intervals([(0, 100, "a"), (10, 30, "b"), (15, 20, "c"), (50, 60, "d")])
    tot = {}
    for s, e, n in selfs:
        tot[n] = tot.get(n, 0) + (e - s)
    assert tot == {"a": 70, "b": 15, "c": 5, "d": 10}
    assert all(selfs[i][1] <= selfs[i + 1][0] for i in range(len(selfs) - 1))  # disjoint, in order


def test_step_gaps_reads_a_real_cpu_trace(tmp_path):
    """A torch.profiler trace of CPU work parses (no GPU activity: nothing to attribute)."""
    g = _step_gaps()
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        torch.randn(64, 64) @ torch.randn(64, 64)
    path = tmp_path / "t.json"
    prof.export_chrome_trace(str(path))
    import json
    rep = g.gap_report(json.loads(path.read_text()), steps=1)
    assert rep["gpu_idle_ms"] == 0 and rep["gaps_per_step"] == 0 and rep["waiting_on_ms"] == {}


def test_host_split_counts_entry_points_and_restores_them():
    """--host-split wraps the library's raw entry points and torch.empty for a few eager
    steps: an nvfp4 step calls quantize and GEMM entries (the CPU reference here: the figures
    are not host cost, the counts are the step's), and everything is unwrapped afterwards."""
    from nvfp4 import _ops
    bst = _train_step_bench()
    before = {n: getattr(_ops, n) for n in bst._SPLIT_ENTRIES if hasattr(_ops, n)}
    empty = torch.empty
    res = bst.main(["--smoke", "--variants", "nvfp4", "--host-split", "--no-memory", "--steps", "1",
                    "--warmup", "1", "--profile-steps", "2"])
    h = res["rows"]["nvfp4/eager"]["host_split"]
    assert h["steps"] == 2 and h["host_ms"] > 0
    e = h["entries"]
    # the smoke model: every Linear but the first and last runs one forward and one backward
    # per step; each quantizes X, W and dY and runs three GEMMs
    n_lin = e["gemm_raw"]["calls"] / 3
    assert n_lin >= 1 and n_lin == int(n_lin)
    assert e["quantize_raw"]["calls"] == 3 * n_lin
    assert e["torch.empty"]["calls"] >= 7 * n_lin  # y, X^T, W^T, scratch; dX, dW, scratch
    assert {n: getattr(_ops, n) for n in before} == before and torch.empty is empty


def test_host_split_refuses_rows_it_would_not_time(capsys):
    """--host-split times eager rows of the ordinary timing: without an eager mode, or beside
    --interleave, it would be ignored, so it is refused by name; so is a step count below one."""
    bst = _train_step_bench()
    for argv, word in ((["--smoke", "--host-split", "--modes", "compile"], "--host-split"),
                       (["--smoke", "--host-split", "--interleave", "2"], "--host-split"),
                       (["--smoke", "--host-split", "--profile-steps", "0"], "--profile-steps")):
        with pytest.raises(SystemExit):
            bst.main(argv)
        assert word in capsys.readouterr().err, argv
