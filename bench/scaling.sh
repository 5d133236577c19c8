#!/usr/bin/env bash
# A scaling study on a cluster we do not have: the time model (docs/models/example-cluster.json,
# 8 ranks per host, shared memory within, 100 Gbit/s across; or MODEL=FILE) predicts, from 1 to
# 4096 ranks, the time of a training step (dp, fsdp, hsdp with one replica per host, tp-col)
# and of a forward multiply (dp, fsdp, fsdp-overlap), with each rank's peak parameter memory,
# for weak scaling (the batch grows with the ranks) and strong scaling (a fixed batch).
# Dry runs only: nothing is allocated. Writes bench/results/scaling.csv and scaling.png.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
scripts/install-deps.sh bench
scripts/build.sh build
exec /usr/bin/python3 bench/scaling.py "${MODEL:-docs/models/example-cluster.json}"
