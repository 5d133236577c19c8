#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test through CTest: the thread
# (simulator) tests and the mpirun tests, then the whole suite again under AddressSanitizer +
# UndefinedBehaviorSanitizer, the simulator tests under ThreadSanitizer, and a bounded run of
# each fuzzing harness (tests/fuzz).
# Prints CTest's summary of each pass; exits non-zero on any failure.
#   ./run_tests.sh            everything (see docs/testing.md for its time)
#   ./run_tests.sh --quick    the Release pass only
set -euo pipefail
cd "$(dirname "$0")"
source scripts/env.sh
quick=0
[ "${1:-}" = "--quick" ] && quick=1

status=0
pass() {  # pass NAME BUILD_DIR [ctest args...]: runs ctest in BUILD_DIR, remembers a failure
  local name="$1" dir="$2"
  shift 2
  echo "== $name"
  (cd "$dir" && ctest --output-on-failure -j "$(nproc)" "$@") || status=1
}

scripts/build.sh build
pass "Release: all tests" build

if [ "$quick" -eq 0 ]; then
  # The sanitizer builds are clang's (it compiles them in half GCC's time, and its
  # AddressSanitizer build doubles as the fuzzing build), one translation unit per 8 sources,
  # -O1 -g1 (line tables: the sanitizers' reports still name file and line), without the
  # benchmarks. Under TSan only the simulator tests' programs are built.
  scripts/install-deps.sh clang
  sanitized=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG"
    -DDISTMM_BUILD_BENCH=OFF -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=8
    -DCMAKE_CXX_COMPILER=clang++-14)
  # ASan + UBSan, every source also instrumented for libFuzzer (DISTMM_SANITIZE=fuzzer).
  scripts/build.sh build-asan "${sanitized[@]}" -DDISTMM_SANITIZE=fuzzer
  # Open MPI's own allocations outlive MPI_Finalize (and its plugins are unloaded, so no
  # suppression can name them): leak checking stays on for everything but the MPI tests.
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  pass "ASan+UBSan: simulator tests" build-asan -LE "mpi|program|multihost|install"
  # The program's tests on mpirun run in the Release pass only (label "release").
  ASAN_OPTIONS=detect_leaks=0 pass "ASan+UBSan: MPI and program tests" build-asan \
    -L "mpi|program" -LE "multihost|install|release"

  cmake -S . -B build-tsan "${sanitized[@]}" -DDISTMM_SANITIZE=thread >/dev/null
  BUILD_TARGETS=$(cd build-tsan && ctest -N -L threads -LE "mpi|program" |
    sed -n 's/^ *Test *#[0-9]*: //p' | sed 's/\..*//' | sort -u | tr '\n' ' ') \
    scripts/build.sh build-tsan
  # OpenBLAS's own worker threads synchronize outside TSan's view: one BLAS thread.
  OPENBLAS_NUM_THREADS=1 TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
    pass "TSan: simulator tests" build-tsan -L threads -LE "mpi|program"

  # Every reader's libFuzzer harness (in build-asan) for a bounded time, after its corpus.
  echo "== Fuzzing: each reader's harness for ${DISTMM_FUZZ_SECONDS:-20} s"
  tests/fuzz/run_fuzz.sh build-asan "${DISTMM_FUZZ_SECONDS:-20}" || status=1
fi
exit "$status"
