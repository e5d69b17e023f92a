#!/usr/bin/env bash
# C/C++ packaging check: build libnvfp4 as a C++ library (no Python), run its ctest suite,
# install it to a prefix, then build examples/embed against the *installed* package with
# find_package(nvfp4) and run it (it exits 0 with a message where there is no GPU), and
# smoke-run nvfp4-bench. Called by .ci/run; also fine by hand from the repository root.
#
# Environment:
#   NVFP4_CUDA_ARCHS   CUDA targets (default 90a). The GEMM kernels dominate the build:
#                      ~100 CPU-seconds per CUTLASS file per target, and CI has 2 cores and
#                      has already compiled them once through pip, so this check builds one
#                      target unless told otherwise. NVFP4_CUDA_ARCHS=all (90a;100f;110f;120f) for all.
#   NVFP4_CPP_BUILD    build directory (default build/cpp); the prefix is $NVFP4_CPP_BUILD/prefix
#   CMAKE_ARGS         extra configure arguments (e.g. -DNVFP4_WITH_CUDA=OFF)
#   PYTHON             interpreter whose site-packages hold the CUTLASS headers (default python3)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export NVFP4_CUDA_ARCHS=${NVFP4_CUDA_ARCHS:-90a}
BUILD=${NVFP4_CPP_BUILD:-build/cpp}
PREFIX=$ROOT/$BUILD/prefix
[[ $BUILD = /* ]] && PREFIX=$BUILD/prefix
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
GEN=()
command -v ninja >/dev/null 2>&1 && GEN=(-G Ninja)
PY=$(command -v "${PYTHON:-python3}" || true)
t0=$(date +%s)
stage() { echo; echo "=== embed_check: $* ($(( $(date +%s) - t0 )) s)"; }

# tests/cpp/CMakeLists.txt belongs to the test suite; the API tests come in through
# tests/cpp/api_tests.cmake, which it includes.
TESTS=ON
if [[ ! -f tests/cpp/CMakeLists.txt ]]; then
  echo "embed_check: tests/cpp/CMakeLists.txt is missing: building without the C++ tests"
  TESTS=OFF
elif ! grep -q "api_tests.cmake" tests/cpp/CMakeLists.txt; then
  echo "embed_check: warning: tests/cpp/CMakeLists.txt does not include api_tests.cmake; the C API tests will not run"
fi

stage "configure (NVFP4_CUDA_ARCHS=$NVFP4_CUDA_ARCHS)"
# shellcheck disable=SC2086
cmake -S . -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_INSTALL_PREFIX="$PREFIX" -DNVFP4_BUILD_TESTS=$TESTS -DNVFP4_BUILD_BENCH=ON \
  -DNVFP4_CUDA_ARCHS="$NVFP4_CUDA_ARCHS" ${PY:+-DPython3_EXECUTABLE="$PY"} ${CMAKE_ARGS:-}

stage "build"
cmake --build "$BUILD"

if [[ $TESTS == ON ]]; then
  stage "ctest"
  (cd "$BUILD" && ctest --output-on-failure --timeout 600)
fi

stage "install to $PREFIX"
rm -rf "$PREFIX"
cmake --install "$BUILD" > /dev/null
LIB=$(ls "$PREFIX"/lib*/libnvfp4.so | head -1)
echo "installed: $(cd "$PREFIX" && find . -type f -o -type l | sort | tr '\n' ' ')"
# The library promises to export nvfp4_* and nothing else (src/nvfp4.map).
if command -v nm >/dev/null 2>&1; then
  extra=$(nm -D --defined-only "$LIB" | awk '{print $NF}' | grep -v '^nvfp4_' | grep -v '^NVFP4' || true)
  if [[ -n $extra ]]; then
    echo "embed_check: libnvfp4.so exports symbols outside nvfp4_*:"; echo "$extra" | head -20; exit 1
  fi
  echo "exports: $(nm -D --defined-only "$LIB" | grep -c ' nvfp4_') nvfp4_* symbols, nothing else"
fi

stage "examples/embed against the installed package"
rm -rf "$BUILD/embed"
cmake -S examples/embed -B "$BUILD/embed" "${GEN[@]}" -DCMAKE_PREFIX_PATH="$PREFIX"
cmake --build "$BUILD/embed"
"$BUILD/embed/nvfp4_embed"

stage "nvfp4-bench smoke run"
"$BUILD/bench/cpp/nvfp4-bench" --list --quick > /dev/null
# The installed binary finds its shapes (compiled in) from any directory.
(cd / && "$PREFIX/bin/nvfp4-bench" --list --quick > /dev/null)
"$BUILD/bench/cpp/nvfp4-bench" --shapes 256x256x256 --iters 3 --warmup 1 --min-sample-us 0

stage "done"
