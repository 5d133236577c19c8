#!/usr/bin/env bash
# The Debian package: cpack in BUILD_DIR makes distmm_<version>_amd64.deb; its metadata and
# contents are checked with dpkg-deb, and the packaged program, unpacked, runs.
# Usage: package_test.sh BUILD_DIR VERSION
set -euo pipefail
build="$1" version="$2"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "package_test: $*" >&2; exit 1; }
(cd "$build" && cpack -G DEB -B "$work" >/dev/null)
deb="$work/distmm_${version}_amd64.deb"
[ -f "$deb" ] || fail "no $deb (made: $(ls "$work"))"
info=$(dpkg-deb --info "$deb")
echo "$info" | grep -q "^ Package: distmm$" || fail "package name: $info"
echo "$info" | grep -q "^ Version: $version$" || fail "version: $info"
echo "$info" | grep -q "^ Architecture: amd64$" || fail "architecture: $info"
depends=$(echo "$info" | sed -n 's/^ Depends: //p')
for dep in openmpi-bin libopenmpi3 libboost-mpi libopenblas libstdc++6; do
  echo "$depends" | grep -q "$dep" || fail "Depends lacks $dep: $depends"
done
contents=$(dpkg-deb --contents "$deb")
for f in ./usr/bin/distmm ./usr/include/distmm/communicator.hpp \
         ./usr/include/distmm/strategies/fsdp.hpp ./usr/lib/libdistmm.a \
         ./usr/lib/cmake/distmm/distmmConfig.cmake ./usr/share/doc/distmm/README.md; do
  echo "$contents" | grep -q " $f$" || fail "$f is not in the package"
done
# The Python module, where Debian's python3 looks (when the build has it).
if [ -d "$build/python/distmm" ]; then
  for f in ./usr/lib/python3/dist-packages/distmm/__init__.py \
           ./usr/lib/python3/dist-packages/distmm/draw.py; do
    echo "$contents" | grep -q " $f$" || fail "$f is not in the package"
  done
  echo "$contents" | grep -q " ./usr/lib/python3/dist-packages/distmm/_distmm.*\.so$" ||
    fail "the compiled module is not in the package"
fi
dpkg-deb -x "$deb" "$work/root"
if [ -d "$build/python/distmm" ]; then
  PYTHONPATH="$work/root/usr/lib/python3/dist-packages" /usr/bin/python3 -c \
    "import numpy, distmm; a = numpy.ones((5, 3)); assert (distmm.matmul(a, a.T, 'grid', ranks=3) == 3).all()" ||
    fail "the packaged Python module did not run"
fi
"$work/root/usr/bin/distmm" --ranks 3 --m 10 --k 6 --n 4 | grep -q '^fsdp ' ||
  fail "the packaged distmm did not run"
echo "$(basename "$deb"): Depends: $depends"
