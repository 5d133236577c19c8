#!/usr/bin/env bash
# Installs the Debian 12 packages distmm needs, only those that are missing.
# Used by run.sh and run_tests.sh; safe to run again (does nothing when all are present).
set -euo pipefail

packages=(
  cmake g++ make
  openmpi-bin libopenmpi-dev libboost-mpi-dev
  libarmadillo-dev libopenblas-dev
  libgtest-dev libcli11-dev nlohmann-json3-dev zlib1g-dev
  libbenchmark-dev libscalapack-openmpi-dev
  python3 python3-jsonschema iproute2 bc dpkg-dev
  python3-dev pybind11-dev python3-numpy python3-mpi4py python3-pytest
)
# Extra package groups, requested by name: e.g. `install-deps.sh bench`.
for group in "$@"; do
  case "$group" in
    bench) packages+=(gnuplot-nox) ;;
    clang) packages+=(clang-14 libclang-rt-14-dev) ;;  # the sanitizer and fuzzing builds
    *) echo "install-deps.sh: unknown package group '$group'" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps.sh: installing ${missing[*]}" >&2
if [ "$(id -u)" -eq 0 ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo)
else
  echo "install-deps.sh: missing packages (${missing[*]}) and neither root nor sudo" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
