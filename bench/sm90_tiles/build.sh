#!/bin/bash
# Builds libtiles.so (one object per configuration of CONFIGS, $JOBS compilers at a time;
# ~40 s and ~5 GB per configuration) for sweep.py: the library's own CUTLASS sm90 template
# (src/gemm/sm90/sm90_cutlass_impl.cuh) instantiated at other tiles, clusters and schedules.
# Needs nvcc (sm_90a) and the CUTLASS headers of the nvidia-cutlass wheel (or CUTLASS_INC).
# Usage: bench/sm90_tiles/build.sh [JOBS]; ONLY=name,... builds those configurations alone;
# OBJ=dir puts the outputs there (default obj).
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$(cd ../.. && pwd)
CUT=${CUTLASS_INC:-$(python3 -c 'import cutlass_library, os; print(os.path.join(os.path.dirname(cutlass_library.__file__), "source", "include"))')}
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
JOBS=${1:-${JOBS:-4}}
# The library's flags (CMakeLists.txt: no FMA contraction, so the epilogue rounds as it does there).
FLAGS="-O3 -DNDEBUG -std=c++17 -fmad=false -Xcompiler=-fPIC -Xcompiler=-ffp-contract=off -I$ROOT/src -I$ROOT/include"
# name TM TN TK CM CN pingpong streamk f32   (b_: BF16 output, f_: FP32 output)
CONFIGS="
b_128x256_c21 128 256 64 2 1 0 0 0
b_256x128_c12 256 128 64 1 2 0 0 0
b_128x256_c11 128 256 64 1 1 0 0 0
b_128x128pp_c11 128 128 64 1 1 1 0 0
b_128x128pp_c21 128 128 64 2 1 1 0 0
b_128x128pp_c12 128 128 64 1 2 1 0 0
b_128x192_c21 128 192 64 2 1 0 0 0
b_64x256pp_c11 64 256 64 1 1 1 0 0
f_128x256_c21 128 256 64 2 1 0 0 1
f_128x128_c11 128 128 64 1 1 0 0 1
f_128x128_c11_sk 128 128 64 1 1 0 1 1
f_128x128pp_c21 128 128 64 2 1 1 0 1
f_128x192_c11_sk 128 192 64 1 1 0 1 1
"
OBJ=${OBJ:-obj}
mkdir -p "$OBJ"
echo "$CONFIGS" | grep -v '^$' > "$OBJ/all.txt"
if [ -n "${ONLY:-}" ]; then
  for n in ${ONLY//,/ }; do
    grep -q "^$n " "$OBJ/all.txt" || { echo "ONLY: no configuration '$n' in build.sh" >&2; exit 2; }
  done
  grep -E "^(${ONLY//,/|}) " "$OBJ/all.txt" > "$OBJ/configs.txt"
else
  cp "$OBJ/all.txt" "$OBJ/configs.txt"
fi
while read -r name tm tn tk cm cn pp sk f32; do
  extra=""
  [ "$f32" = 1 ] && extra="-DOUT_F32"
  echo "$NVCC $FLAGS --generate-code=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -isystem $CUT" \
       "-DNAME=$name -DTM=$tm -DTN=$tn -DTK=$tk -DCM=$cm -DCN=$cn -DPINGPONG=$pp -DSTREAMK=$sk $extra" \
       "-c tiles.cu -o $OBJ/$name.o"
done < "$OBJ/configs.txt" > "$OBJ/commands.txt"
echo "$NVCC $FLAGS -c support.cpp -o $OBJ/support.o" >> "$OBJ/commands.txt"
xargs -P "$JOBS" -I{} sh -c '{}' < "$OBJ/commands.txt"
objs=$(sed 's/ .*//; s|^|'"$OBJ"'/|; s/$/.o/' "$OBJ/configs.txt")
$NVCC -shared -o "$OBJ/libtiles.so" $objs "$OBJ/support.o" -lcudart
echo "built $(wc -l < "$OBJ/configs.txt") configurations into $OBJ/libtiles.so"
