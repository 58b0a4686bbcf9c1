#!/usr/bin/env bash
# Installs the build tree into a scratch prefix, then builds and runs a
# consumer through find_package(kvevict) (shared and static) and through
# pkg-config. Usage: check_install.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
test -f "$work/prefix/include/kvevict.h"
lib=$(find "$work/prefix" -name 'libkvevict.so' | head -n 1)
test -n "$lib" && test -f "$(dirname "$lib")/libkvevict.a"
cmake -S "$src/tests/install/consumer" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$work/prefix" > "$work/configure.log"
cmake --build "$work/consumer" > "$work/build.log"
LD_LIBRARY_PATH="$(dirname "$lib")" "$work/consumer/consumer"
"$work/consumer/consumer_static"
pc_dir=$(dirname "$(find "$work/prefix" -name kvevict.pc | head -n 1)")
# shellcheck disable=SC2046
cc -o "$work/pc_consumer" "$src/tests/install/consumer/main.c" \
   $(PKG_CONFIG_PATH="$pc_dir" pkg-config --cflags --libs kvevict)
LD_LIBRARY_PATH="$(dirname "$lib")" "$work/pc_consumer"
echo "install check: find_package (shared, static) and pkg-config consumers ok"
