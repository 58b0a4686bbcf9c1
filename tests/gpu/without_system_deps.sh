#!/bin/sh
# without_system_deps.sh CMD... — run CMD as on a GPU machine that lacks
# libxxhash, Check (and subunit) and pkg-config: in a private mount
# namespace (unshare -m, root), /usr/include, /usr/lib/<arch> and /usr/bin
# get an overlay in which those packages' files are deleted. Nothing
# changes outside the namespace; the overlays' upper layers live in a
# temporary folder removed afterwards. Used to rehearse bench/gpu_check.sh
# with carried packages (docs/GPU.md "Rehearsal").
set -eu
[ $# -gt 0 ] || { echo "usage: $0 CMD..." >&2; exit 2; }
arch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export KVE_HIDE_TMP=$tmp KVE_HIDE_ARCH=$arch
unshare -m sh -eu -c '
    for d in /usr/include /usr/lib/$KVE_HIDE_ARCH /usr/bin; do
        n=$(echo "$d" | tr / _)
        mkdir -p "$KVE_HIDE_TMP/u$n" "$KVE_HIDE_TMP/w$n"
        mount -t overlay overlay -o "lowerdir=$d,upperdir=$KVE_HIDE_TMP/u$n,workdir=$KVE_HIDE_TMP/w$n" "$d"
    done
    for p in libxxhash-dev libxxhash0 check libsubunit-dev libsubunit0 pkgconf pkgconf-bin pkg-config; do
        dpkg -L "$p" 2>/dev/null | while read -r f; do
            case $f in /usr/include/*|/usr/lib/$KVE_HIDE_ARCH/*|/usr/bin/*) [ -f "$f" ] || [ -L "$f" ] && rm -f "$f" ;; esac
        done
    done
    echo "without_system_deps: hidden: $(ls /usr/include/xxhash.h /usr/include/check.h /usr/bin/pkg-config 2>&1 | grep -c "No such") of 3 probes gone"
    exec "$@"' sh "$@"
