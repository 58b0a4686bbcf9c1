#!/usr/bin/env bash
# The CI subset of docs/STATISTICS.md: a few quick dieharder tests on the key
# stream in each of its four orders. Fails on any FAILED (WEAK is printed and
# passes: at 100 p-values one test in a hundred is WEAK by chance; the full
# battery in docs/STATISTICS.md re-runs them). dieharder is required: without
# it this test fails rather than drop out (run.sh installs it).
#   usage: dieharder_subset.sh KVE_KEYSTREAM
set -euo pipefail
keystream=$1
command -v dieharder >/dev/null || { echo "dieharder is not installed (apt-get install dieharder)"; exit 1; }
# birthdays, 6x8 binary rank, count-the-1s (stream), parking lot, STS monobit:
# seconds each. The 6x8 rank test FAILED (p = 0) on keep-set v1's key in the
# pos, head and round orders (docs/STATISTICS.md): it guards the finisher.
tests=(0 3 8 10 100)
failed=0 ran=0
for order in pos head round seq; do
    for d in "${tests[@]}"; do
        # dieharder closes the pipe when done; the generator then stops.
        out=$("$keystream" "$order" | dieharder -g 200 -d "$d" 2>&1 || true)
        line=$(grep -E '\|\s*(PASSED|WEAK|FAILED)\s*$' <<<"$out" || true)
        if [ -z "$line" ]; then
            echo "order $order, test $d: no result from dieharder:"; echo "$out"; exit 1
        fi
        while IFS= read -r l; do
            echo "$order: $l"
            ran=$((ran + 1))
            [[ $l == *FAILED* ]] && failed=$((failed + 1))
        done <<<"$line"
    done
done
echo "$ran results, $failed FAILED"
[ "$failed" -eq 0 ]
