#!/usr/bin/env bash
# Installs what is missing, builds (Release) in build/ if needed, and runs the main job:
#   mpirun -np 4 build/distmm [arguments...]
# Set DISTMM_NP to change the rank count, e.g. DISTMM_NP=2 ./run.sh --strategy fsdp
set -euo pipefail
cd "$(dirname "$0")"
source scripts/env.sh
scripts/build.sh
np="${DISTMM_NP:-4}"
exec mpirun -q -np "$np" --oversubscribe --bind-to none build/distmm "$@"
