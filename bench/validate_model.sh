#!/usr/bin/env bash
# Validates the time model: calibrates this machine (distmm calibrate, under mpirun and on the
# simulator), then runs every strategy (matmul and train) at several shapes, cold and warm,
# and compares distmm's predicted_s with the measured time. Settings: mpirun -np 2 and 4 on
# this host, the simulator with 2 and 4 ranks, and (as root, where network namespaces work)
# two namespace hosts joined by a veth link shaped with tc (VALIDATE_NETNS=0 skips them).
# Prints a table and per-setting summary; writes bench/results/model_validation.csv and
# model_validation.png (predicted vs measured, log-log, gnuplot).
#   bench/validate_model.sh                   held-out cases drawn anew (--seed S to redraw)
#   bench/validate_model.sh --fixed           the fixed cases (about 55 minutes on 2 cores)
#   VALIDATE_QUICK=1 bench/validate_model.sh  two shapes, fewer settings (the test's version)
set -euo pipefail
cd "$(dirname "$0")/.."
for arg in "$@"; do  # the options, without installing or building anything
  case "$arg" in -h | --help) exec /usr/bin/python3 bench/validate_model.py --help ;; esac
done
source scripts/env.sh
scripts/install-deps.sh bench
scripts/build.sh build
exec /usr/bin/python3 bench/validate_model.py "$@"
