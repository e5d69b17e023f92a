#!/usr/bin/env bash
# The Python tests that feed the library bad, odd and random input, against a CPU build of
# libnvfp4 and its Python module under AddressSanitizer + UndefinedBehaviorSanitizer: a read
# or write past a buffer, a use after free or undefined behaviour anywhere under the Python
# API aborts the run and fails CI.
#
# torch and Python are not instrumented. The ASan runtime is loaded first (LD_PRELOAD, as
# it must be when the executable is not built with it); leak detection is off, since an
# interpreter and torch keep their allocations to the end on purpose; every report aborts.
#
#   bash .ci/sanitized_python.sh              build into .site-asan (build/asan), then test
#   NVFP4_ASAN_SITE=dir bash ...              test an existing sanitized install in dir
#   NVFP4_ASAN_TESTS="tests/python/x.py ..."  other test files
#   NVFP4_PROPERTY_EXAMPLES=N                 examples per property test (default 150 here)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-python3}
SITE=${NVFP4_ASAN_SITE:-}
t0=$(date +%s)
if [[ -z $SITE ]]; then
  SITE=$ROOT/.site-asan
  # -fno-sanitize=bounds: GCC 12 miscompiles a shift in a loop over an array with the bounds
  # and shift checks both on (tests/cpp/fuzz_tests.cmake); ASan covers out-of-bounds accesses.
  SAN="-fsanitize=address,undefined -fno-sanitize=bounds -fno-sanitize-recover=all -fno-omit-frame-pointer -g"
  LSAN="-fsanitize=address,undefined"
  echo "=== sanitized CPU build of nvfp4 into $SITE"
  CMAKE_ARGS="-DNVFP4_WITH_CUDA=OFF -DCMAKE_C_FLAGS='$SAN' -DCMAKE_CXX_FLAGS='$SAN' \
-DCMAKE_SHARED_LINKER_FLAGS='$LSAN' -DCMAKE_MODULE_LINKER_FLAGS='$LSAN'" \
    "$PY" -m pip install --disable-pip-version-check --no-build-isolation --no-deps -q --upgrade \
    -C build-dir=build/asan --target "$SITE" .
  echo "build: $(( $(date +%s) - t0 )) s"
fi
# ldd's whole output first: `ldd | grep -q` under pipefail fails at random when grep exits at
# its match and ldd, still writing, dies of SIGPIPE.
deps=$(ldd "$SITE"/nvfp4/libnvfp4.so)
if [[ $deps != *libasan* ]]; then
  echo "sanitized_python: $SITE/nvfp4/libnvfp4.so is not linked against libasan"
  exit 1
fi

ASAN_RT=$(gcc -print-file-name=libasan.so)
UBSAN_RT=$(gcc -print-file-name=libubsan.so)
TESTS=${NVFP4_ASAN_TESTS:-tests/python/test_bad_inputs.py tests/python/test_errors.py tests/python/test_meta.py
  tests/python/test_properties.py tests/python/test_quantize.py tests/python/test_gemm_cpu.py tests/python/test_mx.py
  tests/python/test_frozen.py tests/python/test_decoded.py}
echo "=== pytest under ASan + UBSan: $TESTS"
t1=$(date +%s)
# The tests import nvfp4 from $SITE (the sanitized build of this checkout), not from the tree.
# --capture=sys: pytest captures Python's streams only, so a sanitizer's report, written to
# file descriptor 2 just before the process aborts, reaches the log.
set +e
(cd "$ROOT" && env LD_PRELOAD="$ASAN_RT:$UBSAN_RT" \
  ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:halt_on_error=1:symbolize=1:detect_stack_use_after_return=0" \
  UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
  NVFP4_PROPERTY_EXAMPLES=${NVFP4_PROPERTY_EXAMPLES:-150} PYTHONPATH="$SITE" \
  "$PY" -m pytest $TESTS -q -p no:cacheprovider -x --capture=sys)
rc=$?
set -e
echo "sanitized tests: $(( $(date +%s) - t1 )) s, exit $rc"
if (( rc > 128 || rc == 134 )); then
  echo "sanitized_python: the test process was killed (a sanitizer report above)"
fi
exit $rc
