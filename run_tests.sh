#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test through CTest (thread tests and the
# mpirun tests). Prints CTest's summary; exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")"
source scripts/env.sh
scripts/build.sh
cd build
ctest --output-on-failure -j "$(nproc)" "$@"
