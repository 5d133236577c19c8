#!/usr/bin/env bash
# The benchmark, in one run: n in {1024, 2048, 4096} x ranks in {1, 2, 4}, every distmm
# strategy on both backends, ScaLAPACK PDGEMM (block 64 and 128; grids 1x1, 1x2, 2x2) as the
# reference distributed GEMM and single-process OpenBLAS with as many threads as ranks as the
# ideal. Each figure is a median of warm repeats after a cold run, with min and max.
# Writes bench/results/results.csv, bench/results/gflops.png and bench/results/summary.md.
#   bench/run_bench.sh                 full sweep (about 15 minutes on 2 cores)
#   BENCH_SIZES="1024" BENCH_RANKS="2" bench/run_bench.sh   a subset
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
scripts/install-deps.sh bench
scripts/build.sh build
out=bench/results
mkdir -p "$out"
csv="$out/results.csv"
echo "method,backend,ranks,n,cold_s,median_s,min_s,max_s,gflops,gflops_min,gflops_max,outside_gemm,peak_param_bytes,shard_bytes" > "$csv"
sizes="${BENCH_SIZES:-1024 2048 4096}"
ranks_list="${BENCH_RANKS:-1 2 4}"
mpi=(mpirun -q --oversubscribe --bind-to none)
for n in $sizes; do
  repeats=5
  [ "$n" -ge 4096 ] && repeats=3
  for p in $ranks_list; do
    echo "n=$n ranks=$p" >&2
    "${mpi[@]}" -np "$p" build/bench/distmm_bench --n "$n" --repeats "$repeats" >> "$csv"
    build/bench/distmm_bench --ranks "$p" --n "$n" --repeats "$repeats" >> "$csv"
    case "$p" in 1) grid="1 1" ;; 2) grid="1 2" ;; 4) grid="2 2" ;; *) grid="1 $p" ;; esac
    for nb in 64 128; do
      "${mpi[@]}" -np "$p" build/bench/pdgemm_bench "$n" "$nb" $grid "$repeats" >> "$csv"
    done
    build/bench/openblas_bench "$n" "$p" "$repeats" >> "$csv"
  done
done
build/bench/sim_message_bench --benchmark_min_time=0.3 --benchmark_format=console \
  > "$out/sim_message.txt" 2>&1
/usr/bin/python3 bench/summarize.py "$csv" "$out"
cat "$out/summary.md"
