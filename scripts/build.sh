#!/usr/bin/env bash
# Configures and builds distmm, installing missing packages first.
# Usage: scripts/build.sh [BUILD_DIR [extra cmake -D options...]]   (default: build/, Release)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
dir="${1:-build}"
shift || true
if [ ! -f "$dir/CMakeCache.txt" ] || [ $# -gt 0 ]; then
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
fi
cmake --build "$dir" -j "$(nproc)" >/dev/null
