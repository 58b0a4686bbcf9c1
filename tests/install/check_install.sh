#!/usr/bin/env bash
# Installs the build tree into a scratch prefix, then checks that what was
# installed runs from there with no LD_LIBRARY_PATH (RUNPATH $ORIGIN/../lib,
# issue 37): the CLI (`kvevict version`, also after the prefix is moved), a
# consumer through find_package(kvevict) (shared and static), one through
# pkg-config, and the GPU backend libraries found beside the installed core
# (each built one, and a fake one whose probe's answer must be the reason).
# Usage: check_install.sh BUILD_DIR SOURCE_DIR FAKE_BACKEND [BACKEND...]
set -euo pipefail
build=$1
src=$2
fake=$3
shift 3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
unset LD_LIBRARY_PATH KVE_BACKEND_DIR KVE_BACKEND
cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
test -f "$work/prefix/include/kvevict.h"
lib=$(find "$work/prefix" -name 'libkvevict.so' | head -n 1)
test -n "$lib" && test -f "$(dirname "$lib")/libkvevict.a"
libdir=$(dirname "$lib")

# The CLI and the libraries carry a RUNPATH relative to themselves.
for f in "$work/prefix/bin/kvevict" "$libdir"/libkvevict.so "$libdir"/libkvevict_*.so; do
    [ -e "$f" ] || continue
    readelf -d "$f" | grep -q 'RUNPATH.*\$ORIGIN' || { echo "no \$ORIGIN RUNPATH in $f"; exit 1; }
done
"$work/prefix/bin/kvevict" version > "$work/version.txt"
grep -q '^kvevict [0-9]' "$work/version.txt"
# The GPU backends this build made, found beside the installed core.
sh "$src/tests/gpu/check_found.sh" "$work/prefix/bin/kvevict" "$@"

# The prefix moved elsewhere, with a fake CUDA backend beside the core: the
# CLI still runs, and the reason it gives is the fake's probe's.
cp -a "$work/prefix" "$work/moved"
cp "$fake" "$work/moved/${libdir#"$work/prefix/"}/libkvevict_cuda.so"
"$work/moved/bin/kvevict" version > "$work/moved.txt"
grep '^backend cuda ' "$work/moved.txt" | grep -qF 'fake CUDA backend of the install check: no device' || { echo "the moved prefix's fake backend was not the one loaded:"; cat "$work/moved.txt"; exit 1; }

cmake -S "$src/tests/install/consumer" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$work/prefix" > "$work/configure.log"
cmake --build "$work/consumer" > "$work/build.log"
"$work/consumer/consumer"
"$work/consumer/consumer_static"
pc_dir=$(dirname "$(find "$work/prefix" -name kvevict.pc | head -n 1)")
# shellcheck disable=SC2046
cc -o "$work/pc_consumer" "$src/tests/install/consumer/main.c" \
   $(PKG_CONFIG_PATH="$pc_dir" pkg-config --cflags --libs kvevict)
"$work/pc_consumer"
echo "install check: kvevict version, find_package (shared, static) and pkg-config consumers," \
     "backends beside the core: ok, without LD_LIBRARY_PATH"
