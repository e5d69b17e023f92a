#!/usr/bin/env bash
# One session on a GPU machine with no network: install the carried header wheels (.whl/),
# build nvfp4 for sm_90a only, then run the named jobs in order. With a .base/ folder (the
# source of an earlier commit, `git archive REV | tar -x -C .base`), `base` builds it too, in
# parallel, so that benchmarks can compare both in the same run. Logs and JSON land in $OUT.
#
#   bash .ci/device_run.sh base tests step85 step400       (from the repository root)
#
# jobs: base, nobuild (reuse /tmp/new from an earlier call on the same warm machine),
#       tests (every test file with GPU tests), quick (QUICK_TESTS), sanitize, quant, ncu
#       (Nsight Compute sections of the quantization and decode kernels),
#       gemm, host, step85, step400 (DIRECT_TOO=1: also with NVFP4_SM90_DIRECT=1), step85c
#       (compile + reduce-overhead rows), step400c, lora (the LoRA example, FP4 vs BF16 base),
#       dist (the distributed tests, NCCL), fsdp (FSDP2 with the FP4 weight all-gather: NCCL
#       tests on the visible GPUs, then bench_fsdp.py for 400m and 1b: BF16 gather vs FP4 gather
#       vs the BF16 model, bytes gathered), fsdptrain (train.py loss curves, 1 GPU vs all GPUs,
#       FSDP_SEEDS seeds; FSDP_TRAIN_CONTROL=1 adds the all-GPU runs with the ordinary gather),
#       recipes (the recipe comparison on the 85M model: RECIPES, SEEDS, STEPS, CORPUS, SIZE,
#       RECIPES_BUDGET_MIN, RECIPES_RESUME)
#       grouped (the grouped MoE path: its GPU tests, compute-sanitizer memcheck,
#       bench_grouped_gemm.py, MoE train step), linhost (one Linear's host time, eager and compiled,
#       bench_linear_host.py; with base, the baseline build too), fp8 (the FP8 baseline: its GPU tests,
#       bench_fp8.py, the train step eager + compiled: FP8_SIZES, FP8_MODES), prodamax (an amax computed by
#       the compiled producer against the quantization's amax pass, bench_producer_amax.py), geluamax
#       (GELU with the quantization's two maxima, Triton prototypes: bench_gelu_amax.py; GELUAMAX_ARGS,
#       e.g. --cuda for the CUDA form against torch's kernels plus the library's amax pass),
#       tiles (CUTLASS sm90 tile configurations against cuBLAS at the training step's GEMM
#       shapes: bench/sm90_tiles/, TILES_ONLY=name,... for a subset),
#       stepab (STEP_AB=NAME=VALUE: the 85M step with and without a library setting, interleaved in one
#       process, compiled and with CUDA graphs: STEP_AB_MODES, STEP_AB_ROUNDS, STEP_AB_SIZE),
#       sweep (the GPU test files one at a time until SWEEP_BUDGET seconds, default 420, have
#       gone: a line per file, the files not reached named; SWEEP_FILES=test_a,test_b,... to
#       choose and order them, default every file with GPU tests), qis (bench_quant_in_step.py
#       on this build and, with base, the baseline build, alternating processes QIS_ROUNDS
#       times, default 2; QIS_ARGS, default "--operands x,dy --features 768 2304 3072")
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
ROOT=$PWD
step() { echo; echo "=== $* ($(date +%T))"; }
ARGS=("$@")
want() { for a in "${ARGS[@]}"; do [[ $a == "$1" ]] && return 0; done; return 1; }

step setup
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())"

step build
t0=$(date +%s)
build() {  # build SRC into /tmp/TARGET
  NVFP4_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=${JOBS:-16} python3 -m pip install --no-build-isolation \
    --no-deps -q --target "/tmp/$2" "$1" > "$OUT/build_$2.log" 2>&1
}
if want nobuild && [[ -d /tmp/new/nvfp4 ]]; then
  echo "reusing /tmp/new"
elif want base && [[ -d .base ]]; then
  JOBS=8 build "$ROOT/.base" base & bpid=$!
  JOBS=8 build "$ROOT" new || { tail -60 "$OUT/build_new.log"; exit 1; }
  wait $bpid || { echo "baseline build failed"; tail -30 "$OUT/build_base.log"; }
else
  build "$ROOT" new || { tail -60 "$OUT/build_new.log"; exit 1; }
fi
echo "build: $(( $(date +%s) - t0 )) s"
NEW=/tmp/new:/tmp/site
BASE=/tmp/base:/tmp/site
(cd /tmp && PYTHONPATH=$NEW python3 -c "import nvfp4, json; print(json.dumps(nvfp4.device_info(), indent=1))")

# the test files that hold GPU tests (the CPU-only ones run in CI)
gpu_test_files() { grep -l -E "cuda_only|needs a CUDA GPU|is_available\(\)|device_count" tests/python/test_*.py; }
job_tests() {
  step gpu tests
  files=$(gpu_test_files)
  pt=$(python3 -c "import pytest_timeout" 2>/dev/null && echo "--timeout=200")
  PYTHONPATH=$NEW timeout ${TEST_TIMEOUT:-330} python3 -m pytest $files -q -p no:cacheprovider --maxfail=30 -rfE \
    $pt 2>&1 | tee "$OUT/tests.log" | tail -45
}
job_quick() {
  step quick gpu tests
  PYTHONPATH=$NEW timeout 400 python3 -m pytest ${QUICK_TESTS:-tests/python/test_nn.py tests/python/test_graphs.py} \
    -q -p no:cacheprovider --maxfail=20 -rfE 2>&1 | tee "$OUT/quick.log" | tail -40
}
job_sanitize() {  # SAN_SCRIPTS (default: the quantization script), SAN_TOOLS (default: memcheck)
  local s t
  for s in ${SAN_SCRIPTS:-tests/cuda/sanitize_quant.py}; do
    for t in ${SAN_TOOLS:-memcheck}; do
      step "compute-sanitizer $t $s"
      PYTHONPATH=$NEW timeout ${SAN_TIMEOUT:-120} compute-sanitizer --tool "$t" python3 "$s" \
        2>&1 | tee -a "$OUT/sanitize.log" | tail -12
    done
  done
}
job_quant() {  # with a baseline build (base), the same benchmark on it right after, same machine
  step bench quant
  PYTHONPATH=$NEW timeout 150 python3 bench/bench_quant.py --sizes 8192 16384 --json "$OUT/bench_quant.json" 2>&1 \
    | tee "$OUT/bench_quant.log" | tail -30
  if [[ -d /tmp/base/nvfp4 ]]; then
    step bench quant, baseline build
    PYTHONPATH=$BASE timeout 150 python3 bench/bench_quant.py --sizes 8192 16384 --json "$OUT/bench_quant_base.json" \
      2>&1 | tee "$OUT/bench_quant_base.log" | tail -30
  fi
}
job_gemm() {  # with a baseline build (base), the same benchmark on it right after, same machine
  step bench gemm
  PYTHONPATH=$NEW python3 bench/bench_gemm.py ${GEMM_BENCH_ARGS:-} --json "$OUT/bench_gemm.json" 2>&1 \
    | tee "$OUT/bench_gemm.log" | tail -40
  if [[ -d /tmp/base/nvfp4 ]]; then
    step bench gemm, baseline build
    PYTHONPATH=$BASE python3 bench/bench_gemm.py ${GEMM_BENCH_ARGS:-} --json "$OUT/bench_gemm_base.json" 2>&1 \
      | tee "$OUT/bench_gemm_base.log" | tail -40
  fi
}
job_ncu() {  # Nsight Compute on the quantization and decode kernels (bench/ncu_kernels.py)
  step "ncu: quantization and decode kernels"
  local names="regex:amax_|tile_kernel|rowwise_kernel|gemm_prep_kernel|direct_kernel"
  PYTHONPATH=$NEW timeout ${NCU_TIMEOUT:-300} ncu --clock-control none --kernel-name "$names" \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    --section MemoryWorkloadAnalysis --section SchedulerStats python3 bench/ncu_kernels.py --repeat 1 > "$OUT/ncu.txt" 2>&1
  echo "ncu exit $?"
  grep -E "^  [a-z_].*\(|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Issue Slots Busy|No Eligible|Stall Long Scoreboard" \
    "$OUT/ncu.txt" | head -150
}
job_host() {  # with a baseline build (base), the same benchmark on it right after, same machine
  step host path tests
  PYTHONPATH=$NEW timeout 300 python3 -m pytest tests/python/test_host_path.py -q -p no:cacheprovider -rfE 2>&1 \
    | tee "$OUT/host_tests.log" | tail -8
  step bench host overhead
  PYTHONPATH=$NEW python3 bench/bench_host.py --json "$OUT/bench_host.json" 2>&1 | tee "$OUT/bench_host.log" | tail -30
  if [[ -d /tmp/base/nvfp4 ]]; then
    step bench host overhead, baseline build
    PYTHONPATH=$BASE python3 bench/bench_host.py --json "$OUT/bench_host_base.json" 2>&1 \
      | tee "$OUT/bench_host_base.log" | tail -30
  fi
}
stepbench() {  # name, lib path, extra args
  local name=$1 lib=$2; shift 2
  step "train step $name"
  PYTHONPATH=$lib timeout 400 python3 bench/bench_train_step.py "$@" --json "$OUT/step_$name.json" 2>&1 \
    | grep -v -E "Warning|warn" | tee "$OUT/step_$name.log" | tail -25
}
job_step() {  # 85 | 400, [c]
  local size=$1 sz
  sz=$([[ $size == 85 ]] && echo full || echo 400m)
  if [[ ${2:-} == c ]]; then
    stepbench "${size}_new_compiled" "$NEW" --size "$sz" --variants bf16,nvfp4 --modes compile,reduce-overhead \
      --profile --no-memory --steps 10 --warmup 3
    return
  fi
  [[ -d /tmp/base/nvfp4 ]] && stepbench "${size}_base_eager" "$BASE" --size "$sz" --variants bf16,nvfp4 \
    --modes eager --profile --no-memory --steps 10 --warmup 3
  stepbench "${size}_new_eager" "$NEW" --size "$sz" --variants bf16,nvfp4,fakequant --modes eager --profile \
    --steps 10 --warmup 3 $([[ $size == 400 ]] && echo --no-memory)
  if [[ -n ${DIRECT_TOO:-} ]]; then  # the same build with the FP4-reading sm90 GEMM
    NVFP4_SM90_DIRECT=1 stepbench "${size}_direct_eager" "$NEW" --size "$sz" --variants bf16,nvfp4 --modes eager \
      --profile --no-memory --steps 10 --warmup 3
  fi
}
job_stepab() {  # STEP_AB=NAME=VALUE: the 85M step (STEP_AB_SIZE, default full) with and without the setting,
  # interleaved in one process in each of STEP_AB_MODES (default "compile reduce-overhead"): the variant
  # nvfp4@NAME=VALUE beside nvfp4 and bf16, so that a setting read when a CUDA graph is captured is compared too
  [[ -n ${STEP_AB:-} ]] || { echo "stepab: set STEP_AB=NAME=VALUE"; return; }
  local mode
  for mode in ${STEP_AB_MODES:-compile reduce-overhead}; do
    stepbench "ab_$mode" "$NEW" --size "${STEP_AB_SIZE:-full}" --variants "bf16,nvfp4,nvfp4@$STEP_AB" --modes "$mode" \
      --no-memory --interleave ${STEP_AB_ROUNDS:-5} --steps 6 --warmup 3
  done
}
job_fp8() {  # the FP8 baseline: its GPU tests, bench_fp8.py (cast GB/s vs copy, layers, host cost per Linear) and
  # the training step (bf16, fp8, fp8_delayed; FP8_SIZES, default "85 400"; FP8_MODES, default "eager compile");
  # with a baseline build (base) the benchmarks on it too, right after, same machine
  step "fp8 tests"
  PYTHONPATH=$NEW timeout ${FP8_TEST_TIMEOUT:-600} python3 -m pytest tests/python/test_fp8_cast.py \
    tests/python/test_fp8_passes.py tests/python/test_fp8_cuda.py tests/python/test_fp8.py -q -p no:cacheprovider \
    --maxfail=20 -rfE 2>&1 | tee "$OUT/fp8_tests.log" | tail -20
  local lib path size sz
  for lib in new base; do
    path=$([[ $lib == new ]] && echo "$NEW" || echo "$BASE")
    [[ $lib == base && ! -d /tmp/base/nvfp4 ]] && continue
    step "bench_fp8 ($lib)"
    PYTHONPATH=$path timeout 400 python3 bench/bench_fp8.py --json "$OUT/bench_fp8_$lib.json" 2>&1 \
      | grep -v -E "Warning|warn" | tee "$OUT/bench_fp8_$lib.log" | tail -40
  done
  local mode
  for size in ${FP8_SIZES:-85 400}; do
    sz=$([[ $size == 85 ]] && echo full || echo 400m)
    for mode in ${FP8_MODES:-eager compile}; do  # one call per mode: each under stepbench's time limit
      for lib in new base; do
        path=$([[ $lib == new ]] && echo "$NEW" || echo "$BASE")
        [[ $lib == base && ! -d /tmp/base/nvfp4 ]] && continue
        # interleaved rounds: the compiled FP8 step waits on its host, and rows timed one after
        # the other moved by up to 50% between calls (bench/NOTES.md)
        stepbench "fp8_${size}_${mode}_$lib" "$path" --size "$sz" --variants bf16,fp8,fp8_delayed --modes "$mode" \
          --profile --no-memory --steps 5 --warmup 3 --interleave ${FP8_ROUNDS:-8}
      done
    done
  done
}
job_lora() {
  step "LoRA fine-tune, FP4 base vs BF16 base"
  PYTHONPATH=$NEW timeout ${LORA_TIMEOUT:-420} python3 examples/finetune_lora.py --base both --recompute \
    --size 400m --steps ${LORA_STEPS:-200} --data /tmp/lora_data --out "$OUT/lora" ${LORA_ARGS:-} 2>&1 \
    | grep -v -E "Warning|warn|it/s" | tee "$OUT/lora.log" | tail -30
}
job_recipes() {  # the recipe comparison on the ~85M model (examples/compare_recipes.py), inside a time budget
  # RECIPES (space-separated) ["bf16 nvfp4 4over6 ms_eden"], SEEDS ["0,1,2"], STEPS [250], CORPUS [stdlib; or prose,
  # or "stdlib,prose"], SIZE [full: ~85M; 400m], RECIPES_BUDGET_MIN [6.5: minutes after which it checkpoints the
  # current run and stops; 6.5 leaves room for the build in a 10-minute call, 8.5 fits a `nobuild` call],
  # RECIPES_RESUME=1: continue the comparison in /tmp/recipes_cmp (a later call on the same warm machine, with
  # `nobuild`). The comparison lives in /tmp (an unfinished 85M run's checkpoint is ~1 GB); its results,
  # report and curves are copied to $OUT/recipes.
  local dir=/tmp/recipes_cmp args
  if [[ -n ${RECIPES_RESUME:-} ]]; then  # RECIPES / SEEDS given with it are added to the comparison
    args=(--resume)
    [[ -n ${RECIPES:-} ]] && args+=(--recipes "$(echo $RECIPES | tr ' ' ',')")
    [[ -n ${SEEDS:-} ]] && args+=(--seeds "$SEEDS")
  else
    rm -rf "$dir"
    args=(--recipes "$(echo ${RECIPES:-bf16 nvfp4 4over6 ms_eden} | tr ' ' ',')" --seeds "${SEEDS:-0,1,2}"
          --corpora "${CORPUS:-stdlib}" --size "${SIZE:-full}" --steps "${STEPS:-250}")
  fi
  step "recipe comparison ${args[*]}"
  local budget=${RECIPES_BUDGET_MIN:-6.5}
  PYTHONPATH=$NEW timeout "$(python3 -c "print(int($budget * 60 + 60))")" python3 examples/compare_recipes.py \
    "${args[@]}" --out "$dir" --data-root /tmp/recipes_data --time-budget-min "$budget" --ckpt-every 100 2>&1 \
    | grep -v -E "Warning|warn" | tee "$OUT/recipes.log" | tail -40
  mkdir -p "$OUT/recipes"
  (cd "$dir" && find . -name "*.json" -o -name "*.md" -o -name "*.png" -o -name "*.csv" | tar -cf - -T - ) \
    | tar -xf - -C "$OUT/recipes"
}
job_dist() {
  step "distributed tests (NCCL on the GPUs present)"
  PYTHONPATH=$NEW NVFP4_SKIP_GLOO=1 timeout ${DIST_TIMEOUT:-300} python3 -m pytest tests/python/test_distributed.py \
    -q -p no:cacheprovider -rfEs 2>&1 | tee "$OUT/dist.log" | tail -25
}
job_fsdp() {  # FSDP_SIZES (default "400m 1b"), FSDP_WORLDS (default "1 <all GPUs>" for 400m, all GPUs for 1b),
             # FSDP_NO_SMALL=1 skips the 1b run at one sequence per rank; then, on one GPU, the
             # gather's GPU work per unit (bench_fsdp_gather.py) and the op/kernel counts per gather
  local ngpu size n worlds
  ngpu=$(python3 -c "import torch; print(torch.cuda.device_count())")
  export NCCL_NVLS_ENABLE=0
  step "FSDP2 FP4 all-gather: NCCL tests on $ngpu GPUs"
  PYTHONPATH=$NEW NVFP4_SKIP_GLOO=1 timeout ${FSDP_TEST_TIMEOUT:-200} python3 -m pytest tests/python/test_fsdp.py \
    -q -p no:cacheprovider -rfEs 2>&1 | tee "$OUT/fsdp_tests.log" | tail -25
  for size in ${FSDP_SIZES:-400m 1b}; do
    worlds=${FSDP_WORLDS:-$([[ $size == 400m ]] && echo "1 $ngpu" || echo "$ngpu")}
    for n in $worlds; do
      step "bench_fsdp $size on $n GPUs"
      PYTHONPATH=$NEW timeout ${FSDP_BENCH_TIMEOUT:-150} python3 -m torch.distributed.run --standalone \
        --nproc-per-node "$n" bench/bench_fsdp.py --size "$size" --json "$OUT/fsdp_${size}_${n}gpu.json" 2>&1 \
        | grep -v -E "Warning|warn|^\*+$|OMP_NUM_THREADS" | tee "$OUT/fsdp_${size}_${n}gpu.log" | tail -12
    done
  done
  if [[ -z ${FSDP_NO_SMALL:-} ]]; then  # one sequence per rank: the gather's time shows
    step "bench_fsdp 1b, batch 1 per rank, on $ngpu GPUs"
    PYTHONPATH=$NEW timeout ${FSDP_BENCH_TIMEOUT:-150} python3 -m torch.distributed.run --standalone \
      --nproc-per-node "$ngpu" bench/bench_fsdp.py --size 1b --batch-size 1 --json "$OUT/fsdp_1b_b1_${ngpu}gpu.json" \
      2>&1 | grep -v -E "Warning|warn|^\*+$|OMP_NUM_THREADS" | tee "$OUT/fsdp_1b_b1_${ngpu}gpu.log" | tail -12
  fi
  step "FSDP2 gather: GPU work per unit (this version, 0.3's FP4 gather, the BF16 gather; one GPU)"
  PYTHONPATH=$NEW timeout ${FSDP_BENCH_TIMEOUT:-150} python3 bench/bench_fsdp_gather.py \
    --json "$OUT/fsdp_gather_kernels.json" 2>&1 | tee "$OUT/fsdp_gather_kernels.log" | tail -20
  step "FSDP2 ops and kernel launches per step and per gather (400m, one GPU, torch.profiler)"
  PYTHONPATH=$NEW timeout ${FSDP_BENCH_TIMEOUT:-150} python3 -m torch.distributed.run --standalone --nproc-per-node 1 \
    bench/bench_fsdp.py --size 400m --count-ops --warmup 2 --json "$OUT/fsdp_count_ops.json" 2>&1 \
    | grep -v -E "Warning|warn|^\*+$|OMP_NUM_THREADS" | tee "$OUT/fsdp_count_ops.log" | tail -8
  step "FSDP2 step time and bytes gathered (ms; ratios from the same run)"
  ls "$OUT"/fsdp_*gpu.json >/dev/null 2>&1 && PYTHONPATH=$NEW python3 bench/bench_fsdp.py --table "$OUT"/fsdp_*gpu.json \
    | tee "$OUT/fsdp_table.txt"
}
job_fsdptrain() {  # loss curves: the same global batch on 1 GPU and on all GPUs (FSDP2 + FP4 gather)
  local ngpu seed
  ngpu=$(python3 -c "import torch; print(torch.cuda.device_count())")
  export NCCL_NVLS_ENABLE=0
  PYTHONPATH=$NEW python3 examples/prepare_data.py --out /tmp/nvfp4_data > /dev/null
  for seed in ${FSDP_SEEDS:-0 1 2}; do
    step "train.py ${FSDP_TRAIN_SIZE:-full}, seed $seed: 1 GPU, then $ngpu GPUs with FSDP2 + FP4 gather"
    PYTHONPATH=$NEW timeout ${FSDP_TRAIN_TIMEOUT:-150} python3 examples/train.py --size "${FSDP_TRAIN_SIZE:-full}" \
      --steps "${FSDP_TRAIN_STEPS:-300}" --seed "$seed" --data /tmp/nvfp4_data --out "$OUT/fsdptrain" \
      --name "1gpu-s$seed" 2>&1 | grep -v -E "Warning|warn|it/s\]" | tail -2
    PYTHONPATH=$NEW timeout ${FSDP_TRAIN_TIMEOUT:-150} python3 -m torch.distributed.run --standalone \
      --nproc-per-node "$ngpu" examples/train.py --fsdp --fp4-all-gather --size "${FSDP_TRAIN_SIZE:-full}" \
      --steps "${FSDP_TRAIN_STEPS:-300}" --seed "$seed" --data /tmp/nvfp4_data --out "$OUT/fsdptrain" \
      --name "${ngpu}gpu-fp4ag-s$seed" 2>&1 | grep -v -E "Warning|warn|it/s\]|^\*+$|OMP_NUM" | tail -2
    if [[ -n ${FSDP_TRAIN_CONTROL:-} ]]; then  # the same sharded run with the ordinary (BF16) gather
      PYTHONPATH=$NEW timeout ${FSDP_TRAIN_TIMEOUT:-150} python3 -m torch.distributed.run --standalone \
        --nproc-per-node "$ngpu" examples/train.py --fsdp --size "${FSDP_TRAIN_SIZE:-full}" \
        --steps "${FSDP_TRAIN_STEPS:-300}" --seed "$seed" --data /tmp/nvfp4_data --out "$OUT/fsdptrain" \
        --name "${ngpu}gpu-bf16ag-s$seed" 2>&1 | grep -v -E "Warning|warn|it/s\]|^\*+$|OMP_NUM" | tail -2
    fi
  done
  step "final validation loss by GPU count (mean, spread over seeds)"
  python3 - "$OUT/fsdptrain" <<'PYEOF'
import glob, json, os, statistics, sys
runs = {}
for p in glob.glob(os.path.join(sys.argv[1], "*.json")):
    r = json.load(open(p))
    runs.setdefault(r["name"].split("-s")[0], []).append((r["name"], r["final_val_loss"], r["step_time_s"]))
for k, v in sorted(runs.items()):
    losses = [x[1] for x in v]
    sd = statistics.stdev(losses) if len(losses) > 1 else float("nan")
    print(f"{k:14s} n={len(v)} val loss mean {statistics.mean(losses):.4f} sd {sd:.4f} "
          f"min {min(losses):.4f} max {max(losses):.4f}; step {statistics.median(x[2] for x in v) * 1e3:.1f} ms")
PYEOF
}
job_grouped() {  # GROUPED_BENCH_ARGS: extra arguments of bench_grouped_gemm.py
  step "grouped (MoE): GPU tests"
  PYTHONPATH=$NEW timeout ${GROUPED_TEST_TIMEOUT:-600} python3 -m pytest tests/python/test_grouped.py \
    tests/python/test_grouped_nn.py tests/python/test_build_targets.py -q -p no:cacheprovider --maxfail=30 -rfE \
    2>&1 | tee "$OUT/grouped_tests.log" | tail -40
  step "grouped (MoE): compute-sanitizer memcheck"
  PYTHONPATH=$NEW timeout ${SAN_TIMEOUT:-300} compute-sanitizer --tool memcheck python3 tests/cuda/sanitize_grouped.py \
    2>&1 | tee "$OUT/grouped_sanitize.log" | tail -12
  step "grouped (MoE): bench_grouped_gemm.py"
  PYTHONPATH=$NEW timeout ${GROUPED_BENCH_TIMEOUT:-900} python3 bench/bench_grouped_gemm.py ${GROUPED_BENCH_ARGS:-} \
    --json "$OUT/bench_grouped_gemm.json" 2>&1 | tee "$OUT/bench_grouped_gemm.log" | tail -70
  stepbench moe_eager "$NEW" --size moe --batch-size ${MOE_BATCH:-8} --variants bf16,nvfp4 --modes eager --profile \
    --no-memory --steps 10 --warmup 3
}
job_linhost() {  # one Linear's host time (bench/bench_linear_host.py), eager and compiled, on this build and,
  # with `base`, on the baseline build right after: the 85M model's 768x768 Linear at 32 tokens, and
  # bench_host.py's 4096x4096 at 16 tokens (its padded-token path)
  local name lib
  for name in new base; do
    lib=$([[ $name == new ]] && echo "$NEW" || echo "$BASE")
    [[ $name == base && ! -d /tmp/base/nvfp4 ]] && continue
    step "bench linear host, $name build"
    PYTHONPATH=$lib timeout 300 python3 bench/bench_linear_host.py --compile --json "$OUT/linear_host_$name.json" \
      2>&1 | grep -v -E "Warning|warn|USDT" | tee "$OUT/linear_host_$name.log" | tail -12
    PYTHONPATH=$lib timeout 200 python3 bench/bench_linear_host.py --tokens 16 --features 4096 \
      --json "$OUT/linear_host_4096_$name.json" 2>&1 | grep -v -E "Warning|warn|USDT" \
      | tee "$OUT/linear_host_4096_$name.log" | tail -12
  done
}
job_prodamax() {  # an amax computed by the compiled producer against the amax pass (bench_producer_amax.py)
  step "producer amax"
  PYTHONPATH=$NEW timeout ${PRODAMAX_TIMEOUT:-400} python3 bench/bench_producer_amax.py --json "$OUT/producer_amax.json" \
    2>&1 | grep -v -E "Warning|warn" | tee "$OUT/producer_amax.log" | tail -40
}
job_geluamax() {  # GELU with the quantization's two maxima, prototypes (bench_gelu_amax.py; GELUAMAX_ARGS=--cuda)
  step "GELU + amax prototypes"
  PYTHONPATH=$NEW timeout ${GELUAMAX_TIMEOUT:-300} python3 bench/bench_gelu_amax.py ${GELUAMAX_ARGS:-} \
    --json "$OUT/gelu_amax.json" 2>&1 | grep -v -E "Warning|warn" | tee "$OUT/gelu_amax.log" | tail -40
}
job_tiles() {  # CUTLASS sm90 tile configurations against cuBLAS (bench/sm90_tiles/)
  step "tile sweep: build"
  OBJ=/tmp/tiles ONLY=${TILES_ONLY:-} bash bench/sm90_tiles/build.sh 16 > "$OUT/tiles_build.log" 2>&1 \
    || { tail -30 "$OUT/tiles_build.log"; return; }
  step "tile sweep"
  PYTHONPATH=$NEW timeout ${TILES_TIMEOUT:-500} python3 bench/sm90_tiles/sweep.py --lib /tmp/tiles/libtiles.so \
    --json "$OUT/tiles.json" 2>&1 | grep -v -E "Warning|warn" | tee "$OUT/tiles.log" | tail -120
}
job_sweep() {
  step "gpu tests, one file at a time (budget ${SWEEP_BUDGET:-420} s)"
  local files f left s rc t0 logs=()
  if [[ -n ${SWEEP_FILES:-} ]]; then
    files=${SWEEP_FILES//,/ }
  else
    files=$(gpu_test_files | xargs -n1 basename | sed 's/\.py$//')
  fi
  t0=$(date +%s)
  for f in $files; do
    left=$(( ${SWEEP_BUDGET:-420} - ($(date +%s) - t0) ))
    if (( left < 20 )); then echo "$f: not run (budget)"; continue; fi
    s=$(date +%s)
    PYTHONPATH=$NEW timeout "$left" python3 -m pytest "tests/python/$f.py" -q -p no:cacheprovider -rfE --maxfail=10 \
      > "$OUT/sweep_$f.log" 2>&1
    rc=$?
    logs+=("sweep_$f.log")
    echo "$f: exit $rc, $(( $(date +%s) - s )) s: $(tail -n 1 "$OUT/sweep_$f.log")$( (( rc == 124 )) && echo " (stopped by the budget)")"
    if (( rc != 0 && rc != 124 )); then grep -E "^(FAILED|ERROR)" "$OUT/sweep_$f.log" | head -n 8; fi
  done
  # one archive: what comes back from a call is a few files
  if (( ${#logs[@]} )); then tar czf "$OUT/sweep_logs.tgz" -C "$OUT" "${logs[@]}" && (cd "$OUT" && rm -f "${logs[@]}"); fi
}
job_qis() {  # the quantizations in the step's order, this build and (with base) the baseline, alternating
  local r b lib
  for (( r = 1; r <= ${QIS_ROUNDS:-2}; r++ )); do
    for b in new base; do
      [[ $b == base && ! -d /tmp/base/nvfp4 ]] && continue
      lib=$NEW; [[ $b == base ]] && lib=$BASE
      step "quantization in the step's order: $b build, round $r"
      PYTHONPATH=$lib timeout ${QIS_TIMEOUT:-90} python3 bench/bench_quant_in_step.py \
        ${QIS_ARGS:---operands x,dy --features 768 2304 3072} --json "$OUT/qis_${b}_$r.json" 2>&1 \
        | grep -v -i warn | tail -n 12
    done
  done
}
# the jobs, in the order given on the command line
for a in "${ARGS[@]}"; do
  case $a in
    base|nobuild) ;;
    tests|quick|quant|gemm|host|lora|dist|ncu|fsdp|fsdptrain|recipes|grouped|fp8) "job_$a" ;;
    sanitize) job_sanitize ;;
    step85) job_step 85 ;;
    step400) job_step 400 ;;
    step85c) job_step 85 c ;;
    stepab) job_stepab ;;
    step400c) job_step 400 c ;;
    linhost) job_linhost ;;
    prodamax) job_prodamax ;;
    geluamax) job_geluamax ;;
    tiles) job_tiles ;;
    sweep) job_sweep ;;
    qis) job_qis ;;
    *) echo "unknown job: $a" ;;
  esac
done
exit 0
