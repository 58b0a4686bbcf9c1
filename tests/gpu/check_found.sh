#!/bin/sh
# check_found.sh KVEVICT BACKEND... — `KVEVICT version`, run with neither
# KVE_BACKEND_DIR nor LD_LIBRARY_PATH, must have found each BACKEND's library
# (libkvevict_<backend>.so) where the core looks: beside the core library
# (frontend/registry.c). Its line says "available" or the real reason it
# cannot run here (no driver, no device, a GPU runtime missing), never that
# the library itself cannot be opened. Prints the lines it checked.
set -eu
cli=$1
shift
out=$(env -u KVE_BACKEND_DIR -u LD_LIBRARY_PATH -u KVE_BACKEND "$cli" version)
status=0
for backend in "$@"; do
    line=$(printf '%s\n' "$out" | grep "^backend $backend " || true)
    echo "$cli: $line"
    case $line in
    "")
        echo "  FAIL: no line for backend $backend"; status=1 ;;
    *"libkvevict_$backend.so: cannot open shared object file"*)
        echo "  FAIL: libkvevict_$backend.so was not found beside the core"; status=1 ;;
    esac
done
exit $status
