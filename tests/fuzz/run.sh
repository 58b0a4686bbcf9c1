#!/usr/bin/env bash
# Build the libFuzzer harnesses (preset `fuzz`: clang, ASan + UBSan) and run
# each for a bounded time over its seed corpus (docs/FUZZING.md).
#   tests/fuzz/run.sh [SECONDS [HARNESS...]]
# SECONDS per harness (default 60); HARNESS among evict compact cache_write
# state json diff score api (default: all). FUZZ_JOBS harnesses run at once (default 2).
# FUZZ_SEED fixes libFuzzer's seed (CI: the same mutations on every run, a
# prefix of what a longer run with that seed explores); unset, a random one.
# The corpus in the tree is only read: new inputs go to build-fuzz/corpus/.
# Any crash, leak, sanitizer report or failed check ends the run non-zero,
# its input saved under build-fuzz/artifacts/ (add it to the corpus, and a
# test, once the bug is fixed).
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-60}
[ $# -gt 0 ] && shift
harnesses=("$@")
[ ${#harnesses[@]} -eq 0 ] && harnesses=(evict compact cache_write state json diff score api)
jobs=${FUZZ_JOBS:-2}
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz
mkdir -p build-fuzz/artifacts build-fuzz/logs
export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

run_one() {
    local h=$1 log=build-fuzz/logs/$1.log
    mkdir -p "build-fuzz/corpus/$h"
    # -rss_limit_mb: the harnesses allocate what the header asks, at most MiBs.
    local seed=()
    [ -n "${FUZZ_SEED:-}" ] && seed=(-seed="$FUZZ_SEED")
    if build-fuzz/tests/fuzz/fuzz_"$h" "${seed[@]}" -max_total_time="$seconds" -rss_limit_mb=2048 \
        -timeout=30 -print_final_stats=1 -artifact_prefix="build-fuzz/artifacts/$h-" \
        "build-fuzz/corpus/$h" "tests/fuzz/corpus/$h" >"$log" 2>&1; then
        echo "fuzz_$h: ok, $(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}') runs," \
             "$(grep -E '^stat::average_exec_per_sec' "$log" | awk '{print $2}') exec/s," \
             "$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -1)"
    else
        echo "fuzz_$h: FAILED (log: $log)"; tail -40 "$log"; return 1
    fi
}

status=0 pids=() names=()
for h in "${harnesses[@]}"; do
    [ -d "tests/fuzz/corpus/$h" ] || { echo "no corpus tests/fuzz/corpus/$h"; exit 2; }
    run_one "$h" & pids+=($!) names+=("$h")
    if [ ${#pids[@]} -ge "$jobs" ]; then
        wait "${pids[0]}" || status=1
        pids=("${pids[@]:1}")
    fi
done
for p in "${pids[@]}"; do wait "$p" || status=1; done
exit $status
