#!/usr/bin/env bash
# The installed package, used as a project outside the tree would: installs distmm from
# BUILD_DIR into a temporary prefix, builds examples/ against it with find_package(distmm),
# and runs the example's own strategy on the simulator and under mpirun, checked against A*B.
# Usage: install_test.sh BUILD_DIR SOURCE_DIR MPIEXEC [MPIEXEC_PREFLAGS...]
set -euo pipefail
build="$1" source="$2" mpiexec="$3"
shift 3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
for f in bin/distmm include/distmm/communicator.hpp include/distmm/plan.hpp \
         include/distmm/strategies/dp.hpp lib/libdistmm.a lib/cmake/distmm/distmmConfig.cmake; do
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
# The installed program runs from the prefix too.
"$work/prefix/bin/distmm" --ranks 2 --m 9 --k 7 --n 5 | grep -q '^dp '
echo "installed distmm runs"
