#!/usr/bin/env bash
# The benchmark: the distmm program as users run it (mpirun's default binding, cold and warm;
# the simulator), beside the raw-MPI DP/FSDP baseline (bench/raw_mpi_bench.cpp), ScaLAPACK
# PDGEMM (grids 1x2 and 2x1, blocks 64/128/256) and single-process OpenBLAS (2 threads, cold
# and warm), all in one run. Writes bench/results/results.csv, summary.md (figures, targets
# and their ratios) and gflops.png (gnuplot).
#   bench/run_bench.sh                      n = 1024 and 4096 (about 6 minutes on 2 cores)
#   BENCH_SIZES="1024" bench/run_bench.sh   a subset
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
scripts/install-deps.sh bench
scripts/build.sh build
exec /usr/bin/python3 bench/run_bench.py ${BENCH_SIZES:-1024 4096}
