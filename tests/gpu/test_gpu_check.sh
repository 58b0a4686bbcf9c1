#!/bin/sh
# test_gpu_check.sh BUILD_DIR NVCC — bench/gpu_check.sh's failure paths on a
# machine without a GPU, against a fake nvidia-smi (tests/gpu/fake_gpu):
# each one must stop with its own exit code and a plain reason, on the
# output and in the table file, before building anything. Then, as a GPU
# machine starts, from an empty build folder (--until tests): every test
# labelled gpu or gpu-load must be built and run (here: skipped), none "Not
# Run". That build uses $CMAKE_C_COMPILER_LAUNCHER (the outer build's, passed
# by ctest), else ccache where it is installed.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$1
nvcc=$2
if [ -n "${KVE_GPU_CHECK_NESTED:-}" ]; then
    echo "SKIP: run by the gpu_check.sh this test runs"
    exit 77
fi
if nvidia-smi -L >/dev/null 2>&1; then
    echo "SKIP: a real NVIDIA GPU is here: run bench/gpu_check.sh itself"
    exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

# expect NAME CODE TEXT [ENV=VALUE...] -- ARGS...: gpu_check.sh ARGS under
# ENV must exit CODE and say TEXT on its output and in gpu_check.md.
expect() {
    name=$1 code=$2 text=$3
    shift 3
    envs=""
    while [ "$1" != -- ]; do envs="$envs $1"; shift; done
    shift
    mkdir -p "$tmp/$name"
    # shellcheck disable=SC2086
    env OUT="$tmp/$name" $envs "$root/bench/gpu_check.sh" "$@" >"$tmp/$name.txt" 2>&1
    rc=$?
    if [ "$rc" -ne "$code" ]; then
        echo "FAIL $name: exit $rc, expected $code"; failures=$((failures + 1))
    elif ! grep -qF "$text" "$tmp/$name.txt"; then
        echo "FAIL $name: the output does not say \"$text\""; failures=$((failures + 1))
    elif [ "$code" -ne 0 ] && ! grep -qF "$text" "$tmp/$name/gpu_check.md"; then
        echo "FAIL $name: the table file does not say \"$text\""; failures=$((failures + 1))
    else
        echo "ok   $name: exit $rc: $(grep STOP "$tmp/$name.txt" | head -1 | cut -c1-150)"
    fi
    [ "$rc" -eq "$code" ] || sed 's/^/    /' "$tmp/$name.txt"
}

fake="PATH=$here/fake_gpu:$PATH"
# no nvidia-smi anywhere, and a rocminfo (if any) that lists no GPU
mkdir -p "$tmp/nogpu"
printf '#!/bin/sh\nexit 1\n' >"$tmp/nogpu/rocminfo"
chmod +x "$tmp/nogpu/rocminfo"
nogpu_path=$tmp/nogpu:$(echo "$PATH" | tr ':' '\n' | while read -r d; do
    [ -x "$d/nvidia-smi" ] || printf '%s:' "$d"; done)
expect no_gpu 2 "no GPU: neither nvidia-smi nor rocminfo" "PATH=$nogpu_path" -- "$tmp/b"
expect no_driver 3 "cannot reach the NVIDIA driver" "$fake" FAKE_SMI_MODE=nodriver -- "$tmp/b"
expect old_driver 3 "is older than CUDA" "$fake" FAKE_SMI_DRIVER=535.104.05 KVE_NVCC=$nvcc -- "$tmp/b"
expect no_nvcc 4 "an NVIDIA GPU but no nvcc" "$fake" KVE_NVCC=/nonexistent/nvcc -- "$tmp/b"
expect no_xxhash 5 "libxxhash's headers (xxhash.h) are not on this machine" "$fake" \
    KVE_GPU_CHECK_HIDE_SYSTEM=1 KVE_NVCC=$nvcc -- --carry "$tmp/nothing" "$tmp/b"
# a built tree on a machine whose driver the runtime cannot find: the
# backend's own reason
expect not_available 7 "the cuda backend was built but is not available" "$fake" \
    KVE_NVCC=$nvcc -- --prebuilt "$build"
# ... and, made to go on, a table whose every row that did not run says why
# (the graph tests' step given no time: their row n/a, not NO)
expect table 1 "n/a (bench: failed: exit" "$fake" KVE_NVCC=$nvcc KVE_GPU_CHECK_ASSUME_AVAILABLE=1 \
    KVE_GPU_CHECK_NESTED=1 KVE_PYTHON=/nonexistent KVE_GPU_CHECK_GRAPH_CAP=0 -- --prebuilt "$build"
for text in "| cuda | kvevict digest --backend all --require cuda | NO (failed: exit 3 (see gpu_check.log); cuda skipped: backend = cuda: not available here" \
    "| cuda | GPU tests (10,000+ cases) | NO (gpu_cuda: " "python_decode_loop_cuda: Skipped" \
    "gpu_score_cuda: Skipped" "| cuda | compute-sanitizer memcheck over the GPU tests | " \
    "| cuda | G2 decode step, 128 rows, round: append (us) / + 64 layers of writes (us) | n/a (bench: failed: exit" \
    "n/a (torch: no python3 with a GPU build of torch" "n/a (python: no python3" \
    "| cuda | CUDA graph tests (label graph: capture and replay), own step | n/a (graph: skipped: its cap is 0 s) | yes | - | n/a (graph: "; do
    grep -qF "$text" "$tmp/table/gpu_check.md" || {
        echo "FAIL table: no \"$text\" in the table"; failures=$((failures + 1)); }
done
grep -qF "| cuda | compute-sanitizer memcheck over the GPU tests | yes" "$tmp/table/gpu_check.md" && {
    echo "FAIL table: memcheck said yes over tests that did not run"; failures=$((failures + 1)); }
[ -d "$tmp/b" ] && [ -n "$(ls "$tmp/b" | grep -v gpu-check)" ] && {
    echo "FAIL: a preflight failure left a build behind"; failures=$((failures + 1)); }

# From an empty build folder: configure lists the tests' targets, the build
# makes them (and no benchmark), every GPU test runs (skips: no device here).
launcher=${CMAKE_C_COMPILER_LAUNCHER:-}
[ -z "$launcher" ] && command -v ccache >/dev/null 2>&1 && launcher=ccache
cuda_launcher=${CMAKE_CUDA_COMPILER_LAUNCHER:-$launcher}
expect empty 1 "| cuda | GPU tests (10,000+ cases) | NO (gpu_cuda: Skipped" "$fake" KVE_NVCC=$nvcc \
    KVE_GPU_CHECK_ASSUME_AVAILABLE=1 KVE_GPU_CHECK_NESTED=1 KVE_PYTHON=/nonexistent \
    ${launcher:+CMAKE_C_COMPILER_LAUNCHER=$launcher} ${cuda_launcher:+CMAKE_CUDA_COMPILER_LAUNCHER=$cuda_launcher} \
    -- --until tests "$tmp/eb"
fail() { echo "FAIL empty: $*"; failures=$((failures + 1)); }
ran="$tmp/empty/ctest_gpu.txt $tmp/empty/ctest_graph.txt"
for f in $ran; do [ -s "$f" ] || fail "no $f"; done
# shellcheck disable=SC2086
cat $ran 2>/dev/null | grep -E 'Not Run|Unable to find|Could not find executable' && fail "a test was not run"
names=$(ctest --test-dir "$tmp/eb" -N -L 'gpu|gpu-load' | sed -n 's/^ *Test *#[0-9]*: //p')
[ -n "$names" ] || fail "ctest lists no GPU test in $tmp/eb"
for n in $names; do
    # shellcheck disable=SC2086
    grep -Eq "Test +#[0-9]+: $n \.+ *(\*{3})?(Passed|Skipped)" $ran /dev/null ||
        fail "$n: not Passed or Skipped ($(grep -h ": $n \." $ran /dev/null | head -1))"
done
[ -e "$tmp/eb/kernels_cuda/kvevict_gpu_bench" ] && fail "--until tests built the benchmark"
grep -F 'did not run' "$tmp/empty/gpu_check.md" && fail "the table says a test did not run"
grep -qF '| cuda | CUDA graph tests (label graph: capture and replay), own step | NO (python_graph_step: Skipped' \
    "$tmp/empty/gpu_check.md" || fail "no graph tests' row naming python_graph_step"
[ "$failures" -eq 0 ] || sed -n '/GPU tests. executables/,/tests (limit/p' "$tmp/empty.txt" | head -20
[ "$failures" -eq 0 ] && echo "gpu_check.sh: every failure path gave its reason"
exit "$failures"
