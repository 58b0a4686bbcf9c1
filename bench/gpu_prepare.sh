#!/usr/bin/env bash
# gpu_prepare.sh — run HERE (a Debian 12 machine with apt), before taking
# the tree to a GPU machine that reaches no package registry. Fetches the
# Debian packages the build needs beyond a CUDA image (libxxhash's library
# and headers, Check and the subunit library it links, pkgconf for CMake's
# pkg-config lookups) with `apt-get download` into an ignored folder,
# .gpu-carry/debs by default. Nothing is installed, here or there:
# bench/gpu_check.sh unpacks them into a private prefix (dpkg -x) and
# points CMake at it (CMAKE_PREFIX_PATH, PKG_CONFIG_LIBDIR).
#
#   bench/gpu_prepare.sh [CARRY_DIR]          default: <repo>/.gpu-carry
#
# Exit 0 with a manifest (CARRY_DIR/MANIFEST: package, version, sha256);
# non-zero, with the reason, when apt-get cannot fetch a package.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
carry=${1:-$root/.gpu-carry}
packages=(libxxhash0 libxxhash-dev check libsubunit0 libsubunit-dev pkgconf-bin libpkgconf3)

command -v apt-get >/dev/null 2>&1 || {
    echo "gpu_prepare: apt-get not found: run this on a Debian or Ubuntu machine" >&2
    exit 2
}
mkdir -p "$carry/debs"
rm -f "$carry"/debs/*.deb
# apt-get download writes into the current folder and needs no root.
if ! (cd "$carry/debs" && apt-get download "${packages[@]}"); then
    echo "gpu_prepare: apt-get download ${packages[*]} failed (apt-get update first?)" >&2
    exit 3
fi
{
    echo "# packages for bench/gpu_check.sh, fetched $(date -u +%Y-%m-%dT%H:%MZ) on $(. /etc/os-release && echo "$PRETTY_NAME")"
    for deb in "$carry"/debs/*.deb; do
        printf '%s %s %s\n' "$(dpkg-deb -f "$deb" Package)" "$(dpkg-deb -f "$deb" Version)" \
            "$(sha256sum "$deb" | cut -d' ' -f1)"
    done
} >"$carry/MANIFEST"
for p in "${packages[@]}"; do
    grep -q "^$p " "$carry/MANIFEST" || {
        echo "gpu_prepare: $p is missing from $carry/debs" >&2
        exit 3
    }
done
cat "$carry/MANIFEST"
echo "gpu_prepare: $(du -sh "$carry" | cut -f1) in $carry; carry it with the tree" \
    "(device tool: carry [\"$(basename "$carry")\"])"
