#!/usr/bin/env bash
# Configures (Release) and builds distmm in build/, installing missing packages first.
# Usage: scripts/build.sh [extra cmake -D options...]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
if [ ! -f build/CMakeCache.txt ] || [ $# -gt 0 ]; then
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
fi
cmake --build build -j "$(nproc)" >/dev/null
