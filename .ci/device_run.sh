#!/usr/bin/env bash
# One session on a lent GPU machine (no network there): install the carried header
# wheels, build nvfp4 for sm_90a only, then run what is asked: "tests", "bench",
# "train", "cpp", or "all". Logs and JSON land in $OUT (or ./out).
# Usage (from the repository root): bash .ci/device_run.sh tests bench
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
ROOT=$PWD
step() { echo; echo "=== $* ($(date +%T))"; }

step setup
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())"

step build
t0=$(date +%s)
NVFP4_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=16 python3 -m pip install --no-build-isolation --no-deps -q . \
  > "$OUT/build.log" 2>&1 || { tail -60 "$OUT/build.log"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
cd /tmp && python3 -c "import nvfp4, json; print(json.dumps(nvfp4.device_info(), indent=1))"; cd "$ROOT"

want() { for a in "${ARGS[@]}"; do [[ $a == "$1" || $a == all ]] && return 0; done; return 1; }
ARGS=("$@")
[[ ${#ARGS[@]} -eq 0 ]] && ARGS=(tests)

if want tests; then
  step gpu tests
  python3 -m pytest tests/python -q -p no:cacheprovider --timeout=300 --maxfail=40 -rf 2>&1 | tee "$OUT/tests.log" | tail -40
fi
if want bench; then
  step bench quant
  [[ -f bench/bench_quant.py ]] && python3 bench/bench_quant.py --json "$OUT/bench_quant.json" 2>&1 | tee "$OUT/bench_quant.log"
  step bench gemm
  [[ -f bench/bench_gemm.py ]] && python3 bench/bench_gemm.py ${GEMM_BENCH_ARGS:-} --json "$OUT/bench_gemm.json" 2>&1 | tee "$OUT/bench_gemm.log"
fi
exit 0
