#!/usr/bin/env bash
# Builds the libFuzzer harnesses (clang, ASan + UBSan) in BUILD_DIR (configured here unless it
# already is, as run_tests.sh's build-asan/ is) and runs each: its corpus
# (tests/fuzz/corpus/NAME) replayed, then SECONDS of fuzzing, new inputs kept in a scratch copy.
# A finding (crash, sanitizer report, an exception other than the library's InputError, a
# hang past 10 s) stops it with libFuzzer's report and the input saved as crash-*; such an input
# goes into the corpus with the fix.
# Usage: tests/fuzz/run_fuzz.sh [BUILD_DIR [SECONDS]]   (default build-fuzz, 30 s each)
set -euo pipefail
cd "$(dirname "$0")/../.."
dir="${1:-build-fuzz}" seconds="${2:-30}"
scripts/install-deps.sh clang
if [ ! -f "$dir/CMakeCache.txt" ]; then
  cmake -S . -B "$dir" -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DDISTMM_SANITIZE=fuzzer \
    -DDISTMM_BUILD_TESTS=OFF -DDISTMM_BUILD_BENCH=OFF >/dev/null
fi
cmake --build "$dir" -j "$(nproc)" --target matrix_fuzz model_fuzz checkpoint_fuzz >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ASAN_OPTIONS=detect_leaks=0
for name in matrix model checkpoint; do
  mkdir -p "$work/$name"
  cp tests/fuzz/corpus/$name/* "$work/$name/"
  echo "== ${name}_fuzz: $seconds s"
  "$dir/tests/fuzz/${name}_fuzz" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -max_len=4096 -artifact_prefix="$work/" "$work/$name" 2>&1 | grep -E "^(#[0-9]+ +DONE|Done|==|SUMMARY|not an)" || true
  if compgen -G "$work/crash-*" >/dev/null || compgen -G "$work/timeout-*" >/dev/null; then
    cp "$work"/crash-* "$work"/timeout-* . 2>/dev/null || true
    echo "run_fuzz.sh: ${name}_fuzz found an input that breaks the contract (saved here)" >&2
    exit 1
  fi
done
