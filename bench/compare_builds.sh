#!/usr/bin/env bash
# compare_builds.sh OLD_BENCH NEW_BENCH [ROUNDS] [ISAS]
# Two builds of kvevict-bench (e.g. before and after a change to the key) side
# by side in one run: G1, one thread, no peers, the fastest round of each
# figure; the two binaries alternate ROUNDS times (default 3) and each keeps
# the fastest of its runs. Prints, per ISA, the checked and trusted G1 rounds
# and the hash-only floor of each build and their ratio new / old.
set -euo pipefail
old=$1 new=$2 rounds=${3:-3} isas=${4:-avx512,avx2}
args=(--workloads G1 --isa "$isas" --threads 1 --no-peers --stat min --min-time 1)
declare -A best
keep() { # keep BUILD ISA FIELD VALUE: the smallest value seen
    local k="$1/$2/$3"
    if [ -z "${best[$k]:-}" ] || awk -v a="$4" -v b="${best[$k]}" 'BEGIN{exit !(a < b)}'; then
        best[$k]=$4
    fi
}
for ((i = 0; i < rounds; i++)); do
    for b in old new; do
        bin=$old; [ "$b" = new ] && bin=$new
        # rows: "G1 isa thr | checked ns/cand xfloor | trusted xfloor | floor ns/key | ..."
        while IFS='|' read -r head checked trusted floor _; do
            read -r wl isa thr <<<"$head"
            [ "$wl" = G1 ] && [ "$thr" = 1 ] || continue
            keep "$b" "$isa" checked "$(awk '{print $1}' <<<"$checked")"
            keep "$b" "$isa" trusted "$(awk '{print $1}' <<<"$trusted")"
            keep "$b" "$isa" floor "$(awk '{print $1}' <<<"$floor")"
        # (the eviction rows only: the digest and per-call rows have two fields)
        done < <("$bin" "${args[@]}" | grep -E '^G1 +[a-z0-9]+ +[0-9]+ \| +[0-9.]+ +[0-9.]+ +[0-9.]+ \|')
    done
done
grep -m1 'model name' /proc/cpuinfo
printf '%-7s %-8s %10s %10s %8s\n' isa figure "old ms" "new ms" "new/old"
for isa in ${isas//,/ }; do
    for f in floor checked trusted; do
        o=${best[old/$isa/$f]} n=${best[new/$isa/$f]}
        printf '%-7s %-8s %10.3f %10.3f %8.3f\n' "$isa" "$f" "$o" "$n" "$(awk -v a="$n" -v b="$o" 'BEGIN{print a / b}')"
    done
done
