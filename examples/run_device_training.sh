#!/usr/bin/env bash
# Training runs on the device, inside a bounded time: the formats users compare (BF16, the
# FP8 baseline, NVFP4, MXFP4) on the same model, data and steps, then the loss table and PNG.
#
#   bash examples/run_device_training.sh OUTDIR
#
# Environment (defaults in brackets):
#   RECIPES       runs, in order ["bf16 fp8 nvfp4 mx_baseline"]; any --recipe of train.py
#                 (the NVFP4 ablations no_rht no_sr no_2d fwd_only, fp4_all_the_way, tetrajet,
#                 nvidia_round_to_infinity, fp8_delayed, and the options 4over6 row_scaled
#                 ms_eden adaptive bwd_high_precision bwd_dequantized); "nvfp4-cooldown" is
#                 nvfp4 with the last 10% of steps in BF16, "nvfp4-fwdcooldown" with the forward
#                 GEMMs of the last 15% in BF16
#   STEPS         optimizer steps per run [600]
#   SIZE          model size: full (~85M parameters), small, smoke [full]
#   BATCH         sequences of 1024 bytes per step [16]
#   MAX_MINUTES   cap per run; a capped run is marked stopped_early [1.3]
#   BUDGET_MIN    no new run starts after this many minutes [8.5]
#   COMPILE       1: torch.compile every run (costs about a minute of compilation each) [0]
#   BENCH         1: run bench/bench_train_step.py first, into OUTDIR/bench.json [0]
#   EXTRA         more flags for train.py
# Each run writes OUTDIR/NAME.json; at the end plot_runs.py writes OUTDIR/loss.png and
# OUTDIR/loss.md (the table) from every JSON in OUTDIR.
set -uo pipefail
OUT=${1:?usage: run_device_training.sh OUTDIR}
cd "$(dirname "$0")/.."
mkdir -p "$OUT"
RECIPES=${RECIPES:-"bf16 fp8 nvfp4 mx_baseline"}
STEPS=${STEPS:-600}
SIZE=${SIZE:-full}
BATCH=${BATCH:-16}
MAX_MINUTES=${MAX_MINUTES:-1.3}
BUDGET_MIN=${BUDGET_MIN:-8.5}
DATA=${DATA:-/tmp/nvfp4_data}
start=$(date +%s)

python3 examples/prepare_data.py --out "$DATA"
python3 -c "import nvfp4, json; print(json.dumps(nvfp4.device_info()))"

if [ "${BENCH:-0}" = 1 ]; then
  python3 bench/bench_train_step.py --json "$OUT/bench.json" 2>&1 | tee "$OUT/bench.log"
fi

for r in $RECIPES; do
  elapsed=$(( $(date +%s) - start ))
  if python3 -c "import sys; sys.exit(0 if $elapsed / 60 < $BUDGET_MIN else 1)"; then :; else
    echo "budget of $BUDGET_MIN min reached: not running $r"; continue
  fi
  args=(--recipe "$r")
  if [ "$r" = nvfp4-cooldown ]; then args=(--recipe nvfp4 --cooldown-frac 0.1); fi
  if [ "$r" = nvfp4-fwdcooldown ]; then args=(--recipe nvfp4 --cooldown-frac 0.15 --cooldown-forward-only); fi
  if [ "${COMPILE:-0}" = 1 ]; then args+=(--compile); fi
  echo "=== $r ($(( $(date +%s) - start )) s elapsed)"
  python3 examples/train.py "${args[@]}" --size "$SIZE" --batch-size "$BATCH" --steps "$STEPS" \
    --max-minutes "$MAX_MINUTES" --data "$DATA" --out "$OUT" --log-interval 25 ${EXTRA:-} 2>&1 \
    | tr '\r' '\n' | grep -v '^ *[0-9]*%|' | tee "$OUT/$r.log" | tail -n 15
done

python3 examples/plot_runs.py "$OUT"/*.json -o "$OUT/loss.png"
echo "total $(( $(date +%s) - start )) s"
