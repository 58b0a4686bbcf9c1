#!/bin/sh
# check_code_objects.sh BUNDLER LIBRARY ARCH... — list the AMD GPU code
# objects inside LIBRARY's .hip_fatbin with clang-offload-bundler and fail
# when one of ARCH (e.g. gfx90a) is missing: a build that silently dropped
# a target would otherwise only fail on that GPU, at run time.
set -eu
bundler=$1
lib=$2
shift 2
fatbin=$(mktemp)
trap 'rm -f "$fatbin"' EXIT
"${OBJCOPY:-objcopy}" -O binary --only-section=.hip_fatbin "$lib" "$fatbin"
list=$("$bundler" --list --type=o --input="$fatbin")
echo "code objects in $lib:"
echo "$list" | sed 's/^/  /'
missing=0
for arch in "$@"; do
    if ! echo "$list" | grep -q -- "-${arch}\$"; then
        echo "missing code object for $arch" >&2
        missing=1
    fi
done
exit "$missing"
