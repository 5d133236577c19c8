#!/usr/bin/env bash
# The installed package, used as a project outside the tree would: installs distmm from
# BUILD_DIR into a temporary prefix, builds examples/ against it with find_package(distmm),
# and runs the examples' own strategies on the simulator and under mpirun, checked against A*B.
# Usage: install_test.sh BUILD_DIR SOURCE_DIR MPIEXEC [MPIEXEC_PREFLAGS...]
set -euo pipefail
build="$1" source="$2" mpiexec="$3"
shift 3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
for f in bin/distmm include/distmm/communicator.hpp include/distmm/plan.hpp \
         include/distmm/program.hpp include/distmm/strategies/dp.hpp lib/libdistmm.a \
         lib/libdistmm_program.a lib/cmake/distmm/distmmConfig.cmake; do
  [ -e "$work/prefix/$f" ] || { echo "install_test: $f was not installed" >&2; exit 1; }
done
cmake -S "$source/examples" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/build" >/dev/null
for ranks in 1 3 5 40; do
  "$work/build/ring_allreduce" --ranks "$ranks" >/dev/null
  echo "simulator, $ranks ranks: exact"
done
for ranks in 1 2 3; do
  "$mpiexec" -q -np "$ranks" "$@" "$work/build/ring_allreduce" >/dev/null
  echo "mpirun -np $ranks: exact"
done
# A strategy from outside the tree (examples/custom_strategy.cpp): registered, then run as the
# distmm program. It is verified against A*B (exit 1 otherwise), listed by --strategy all, and
# has the counters, the report, the dry run and the prediction: a dry run counts what a real
# run counts, and both equal the strategy's own formula.
ex="$work/build/custom_strategy"
"$ex" --ranks 3 --m 37 --k 11 --n 7 | grep -q '^fsdp-bcast '
"$ex" --strategy fsdp-bcast --ranks 4 --m 64 --k 48 --n 40 --report "$work/real.json" >/dev/null
"$ex" --strategy fsdp-bcast --ranks 4 --m 64 --k 48 --n 40 --dry-run --report "$work/dry.json" \
  --model "$source/bench/results/models/simulator-4-ranks.json" >/dev/null
"$mpiexec" -q -np 3 "$@" "$ex" --strategy fsdp-bcast --m 50 --k 30 --n 20 \
  --report "$work/mpi.json" >/dev/null
python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
def run(name):
    return json.load(open(f"{work}/{name}.json"))["runs"][0]
real, dry, mpi = run("real"), run("dry"), run("mpi")
assert real["strategy"] == dry["strategy"] == mpi["strategy"] == "fsdp-bcast"
assert dry["predicted_time_s"] > 0 and dry["predicted_cold_s"] > 0
keys = ("bytes_sent", "bytes_received", "messages_sent", "messages_received",
        "persistent_param_bytes", "peak_param_bytes")
for r, d in zip(real["per_rank"], dry["per_rank"]):
    assert all(r[k] == d[k] for k in keys), (r, d)
def shard(total, parts, i):
    return total // parts + (1 if i < total % parts else 0)
for run_, ranks in ((real, 4), (mpi, 3)):
    m, k, n = run_["m"], run_["k"], run_["n"]
    for r in run_["per_rank"][1:]:
        i = r["rank"]
        # setup: its shard of B; each execution: its rows of A, the other shards of B
        want = 8 * (k * shard(n, ranks, i) + shard(m, ranks, i) * k + k * (n - shard(n, ranks, i)))
        assert r["bytes_received"] == want, (r, want)
PY
echo "custom strategy: verified, reported, dry run = real run = formula, predicted"
# The installed program runs from the prefix too.
"$work/prefix/bin/distmm" --ranks 2 --m 9 --k 7 --n 5 | grep -q '^dp '
echo "installed distmm runs"
