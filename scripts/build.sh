#!/usr/bin/env bash
# Configures and builds distmm, installing missing packages first.
# Usage: scripts/build.sh [BUILD_DIR [extra cmake -D options...]]   (default: build/, Release)
# BUILD_TARGETS="a b": build only those targets (default: all).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
dir="${1:-build}"
shift || true
if [ ! -f "$dir/CMakeCache.txt" ] || [ $# -gt 0 ]; then
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
fi
targets=()
for t in ${BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$dir" -j "$(nproc)" "${targets[@]}" >/dev/null
