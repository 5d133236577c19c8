#!/usr/bin/env bash
# Installs what is missing, builds (Release) in build/ if needed, and runs the main job:
#   mpirun -np 4 build/distmm [arguments...]
# Set DISTMM_NP to change the rank count, e.g. DISTMM_NP=2 ./run.sh --strategy fsdp
set -euo pipefail
cd "$(dirname "$0")"
source scripts/env.sh
scripts/build.sh
np="${DISTMM_NP:-4}"
cores=$(nproc)
if [ "$np" -gt "$cores" ] 2>/dev/null; then
  # Measured on a 2-core machine, 2048^3 warm: 4 ranks 7-12 % slower than 2, setup 2x longer.
  echo "run.sh: $np ranks on $cores cores: ranks are oversubscribed and take turns on the" \
       "cores (about 10 % slower than one rank per core, and setup twice as long);" \
       "DISTMM_NP=$cores ./run.sh runs one rank per core" >&2
fi
exec mpirun -q -np "$np" --oversubscribe --bind-to none build/distmm "$@"
