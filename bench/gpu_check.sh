#!/usr/bin/env bash
# gpu_check.sh — the one prepared run for a GPU machine (an NVIDIA H200, or
# an AMD GPU): build, GPU tests, benchmarks, the PyTorch peer on the same
# GPU, then one table (Markdown, ready for docs/BENCHMARKS.md). Budget: 8
# minutes on a 16-core machine; each step has its own time limit.
#
#   bench/gpu_check.sh [BUILD_DIR]        default: build-gpu-check
#
# Steps, per GPU vendor found (nvidia-smi / rocminfo):
#   1  configure + build: the core, the backend .so, test_gpu, the benchmark
#   2  ctest -L 'gpu|gpu-load': 10,000+ random cases against the CPU backend
#   3  kvevict_gpu_bench: G2 and G3 eviction (us per round, keys per second,
#      digest against the CPU), compaction against a device copy
#   4  kvevict digest on every backend of this machine (CPU ISAs and GPU)
#   5  PyTorch on the same GPU: rand + topk + sort, then gather (the peer)
# A machine with no GPU gets a table of n/a and says so.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-gpu-check}
jobs=$(nproc 2>/dev/null || echo 4)
t_start=$(date +%s)
mkdir -p "$build"
log=$build/gpu_check.log
: >"$log"
results=$build/gpu_check.results
: >"$results"

say() { printf '[%4ds] %s\n' "$(($(date +%s) - t_start))" "$*" | tee -a "$log"; }

# step LIMIT NAME [--out FILE] CMD...: run CMD under a time limit, its
# output to the log (stdout to FILE with --out); 0 or the step's code.
step() {
    local limit=$1 name=$2 out=""
    shift 2
    if [ "$1" = --out ]; then
        out=$2
        shift 2
    fi
    say "$name"
    local rc=0
    if [ -n "$out" ]; then
        timeout "$limit" "$@" >"$out" 2>>"$log" || rc=$?
    else
        timeout "$limit" "$@" >>"$log" 2>&1 || rc=$?
    fi
    [ "$rc" -eq 0 ] || say "$name: exit $rc (see $log)"
    return "$rc"
}

# RESULT lines of a step's output go to the results file, tagged by vendor.
collect() { sed -n "s/^RESULT /$1 /p" >>"$results"; }
result() { awk -v k="$1 $2" '$1 " " $2 == k { v = $3 } END { print (v == "" ? "n/a" : v) }' "$results"; }

# ---- which GPUs ------------------------------------------------------------
vendors=()
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    vendors+=(cuda)
    say "NVIDIA: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
fi
amd_arch=""
if command -v rocminfo >/dev/null 2>&1; then
    amd_arch=$(rocminfo 2>/dev/null | grep -o 'gfx[0-9a-f]*' | sort -u | head -1 || true)
    if [ -n "$amd_arch" ]; then
        vendors+=(hip)
        say "AMD: $amd_arch"
    fi
fi
[ ${#vendors[@]} -gt 0 ] || say "no GPU found (nvidia-smi, rocminfo): nothing will be measured"

# ---- 1. build ----------------------------------------------------------------
cuda_mode=AUTO
hip_mode=AUTO
hip_archs="gfx90a;gfx1030"
for v in "${vendors[@]}"; do
    [ "$v" = cuda ] && cuda_mode=ON
    if [ "$v" = hip ]; then
        hip_mode=ON
        case ";$hip_archs;" in *";$amd_arch;"*) ;; *) hip_archs="$hip_archs;$amd_arch" ;; esac
    fi
done
configure() { # $1: ON/OFF for the Check test suites
    step 45 "configure (KVE_CUDA=$cuda_mode, KVE_HIP=$hip_mode, HIP targets $hip_archs, tests $1)" \
        cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DKVE_CUDA="$cuda_mode" \
        -DKVE_HIP="$hip_mode" -DKVE_HIP_ARCHITECTURES="$hip_archs" -DKVE_BUILD_TESTS="$1" \
        -DKVE_BUILD_TOOLS=ON -DKVE_BUILD_BENCH=ON
}
build_ok=1
with_tests=1
if ! configure ON; then # no Check here? measure anyway, without the tests
    with_tests=0
    configure OFF || build_ok=0
fi
targets=(kvevict kvevict_cli)
[ "$with_tests" = 1 ] && targets+=(test_gpu test_gpu_load)
for v in "${vendors[@]}"; do
    [ "$v" = cuda ] && targets+=(kvevict_cuda kvevict_gpu_bench)
    [ "$v" = hip ] && targets+=(kvevict_hip kvevict_gpu_bench_hip)
done
if [ "$build_ok" = 1 ]; then
    step 170 "build (${targets[*]})" cmake --build "$build" -j "$jobs" --target "${targets[@]}" ||
        build_ok=0
fi
export KVE_BACKEND_DIR=$build/gpu

# ---- 2. tests ------------------------------------------------------------------
ctest_out=$build/ctest_gpu.txt
: >"$ctest_out"
if [ "$build_ok" = 1 ] && [ "$with_tests" = 1 ] && [ ${#vendors[@]} -gt 0 ]; then
    step 120 "GPU tests (ctest -L 'gpu|gpu-load')" --out "$ctest_out" \
        ctest --test-dir "$build" -L "gpu|gpu-load" --output-on-failure || true
    cat "$ctest_out" >>"$log"
    grep -E 'tests passed|Skipped|Failed|Passed' "$ctest_out" || true
fi
# yes when this vendor's device test ran and passed (a skip is not a pass)
tests_ok() {
    if [ ! -s "$ctest_out" ]; then echo n/a
    elif grep -Eq "gpu_$1 \.+ +Passed" "$ctest_out"; then echo yes
    else echo NO; fi
}

# ---- 3-5. per vendor: benchmark, digest, PyTorch -----------------------------
peer=$build/torch_peer.py
cat >"$peer" <<'PY'
import sys
try:
    import torch
except Exception as e:  # no torch: no peer
    print(f"# torch unavailable: {e}")
    sys.exit(0)
if not torch.cuda.is_available():  # ROCm builds of torch answer here too
    print("# torch has no GPU here")
    sys.exit(0)
dev = "cuda"
P, B, W, S, D = 1024, 2048, 64, 2112, 128  # the paper's shape, head_dim 128
cand, keep = S - P - W, B - P - W


def timed_us(fn, iters):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) * 1000.0 / iters


def selector(heads):
    slots = torch.arange(P, P + cand, device=dev, dtype=torch.int32).expand(heads, cand)

    def one_round():  # the paper's selector: kept candidates, ascending
        scores = torch.rand(heads, cand, device=dev)
        idx = scores.topk(keep, dim=1).indices.sort(dim=1).values
        return slots.gather(1, idx)

    return one_round


print(f"# torch {torch.__version__} on {torch.cuda.get_device_name(0)}")
for name, heads, iters in (("g2", 64 * 8, 200), ("g3", 128 * 36 * 8, 10)):
    us = timed_us(selector(heads), iters)
    print(f"RESULT torch_{name}_us {us:.3f}")
    print(f"RESULT torch_{name}_keys_per_s {heads * cand / (us * 1e-6):.6g}")

# compaction peer: gather the kept entries of K and V (G2 round, bf16)
heads = 64 * 8
k = torch.randn(heads, S, D, device=dev, dtype=torch.bfloat16)
v = torch.randn_like(k)
kept = torch.rand(heads, S, device=dev).argsort(dim=1)[:, : S - 64].sort(dim=1).values
idx = kept.unsqueeze(-1).expand(-1, -1, D)
k2 = torch.empty(heads, S - 64, D, device=dev, dtype=torch.bfloat16)
v2 = torch.empty_like(k2)


def gather():
    torch.gather(k, 1, idx, out=k2)
    torch.gather(v, 1, idx, out=v2)


us = timed_us(gather, 30)
print(f"RESULT torch_compact_gbs {2 * k2.numel() * 2 / (us * 1e3):.1f}")
PY

# The peer needs a torch that sees the GPU (Debian's python3-torch is CPU-only):
# $KVE_PYTHON, else the first python3 on PATH, else /usr/bin/python3.
python=""
if [ ${#vendors[@]} -gt 0 ]; then
    for py in "${KVE_PYTHON:-}" "$(command -v python3 || true)" /usr/bin/python3; do
        if [ -z "$py" ] || [ ! -x "$py" ]; then continue; fi
        if timeout 60 "$py" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' \
            >/dev/null 2>&1; then
            python=$py
            break
        fi
    done
    [ -n "$python" ] || say "no python3 with a GPU build of torch: the PyTorch peer is skipped"
fi

for v in "${vendors[@]}"; do
    [ "$build_ok" = 1 ] || break
    bench=$build/kernels_cuda/kvevict_gpu_bench
    [ "$v" = hip ] && bench=$build/kernels_hip/kvevict_gpu_bench_hip
    out=$build/bench_$v.txt
    if step 60 "benchmark ($v)" --out "$out" "$bench" "$v"; then
        collect "$v" <"$out"
        grep -v '^RESULT' "$out" | tee -a "$log" || true
    fi
    digest_out=$build/digest_$v.txt
    if step 25 "digest on every backend" --out "$digest_out" "$build/tools/kvevict" digest \
        --backend all --layers 36 --heads 8 --prompt 1024 --budget 2048 --window 64 \
        --cached 2112 --seed 2609; then
        echo "RESULT digest_all_agree 1" | collect "$v"
    else
        echo "RESULT digest_all_agree 0" | collect "$v"
    fi
    cat "$digest_out" >>"$log" 2>/dev/null || true
    if [ -n "$python" ] && step 60 "PyTorch peer ($v, $python)" --out "$build/torch_$v.txt" \
        "$python" "$peer"; then
        collect "$v" <"$build/torch_$v.txt"
        grep '^#' "$build/torch_$v.txt" | tee -a "$log" || true
    fi
done

# ---- the table -------------------------------------------------------------------
verdict() { # value op target
    awk -v x="$1" -v op="$2" -v t="$3" 'BEGIN {
        if (x == "n/a") { print "n/a"; exit }
        ok = (op == "<=") ? (x + 0 <= t + 0) : (x + 0 >= t + 0)
        print (ok ? "yes" : "NO") }'
}
row() { printf '| %s | %s | %s | %s | %s | %s |\n' "$@"; }
echo
echo "gpu_check: $(date -u +%Y-%m-%dT%H:%MZ), $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?'), $(($(date +%s) - t_start)) s"
row "GPU" "metric" "kvevict" "target" "PyTorch peer / floor" "met"
echo "|---|---|---:|---|---:|---|"
if [ ${#vendors[@]} -eq 0 ]; then
    row "none" "no GPU on this machine: nothing measured" "n/a" "-" "n/a" "n/a"
fi
for v in "${vendors[@]}"; do
    g2=$(result "$v" g2_us)
    g3=$(result "$v" g3_keys_per_s)
    ratio=$(result "$v" compact_out_ratio)
    same=$(awk -v a="$(result "$v" g2_identical)" -v b="$(result "$v" g3_identical)" \
        -v c="$(result "$v" digest_all_agree)" 'BEGIN { print (a == 1 && b == 1 && c == 1) ? "yes" : (a == "n/a" ? "n/a" : "NO") }')
    row "$v" "G2 round (us)" "$g2" "<= 20 (paper's PyTorch: 300)" "$(result "$v" torch_g2_us)" "$(verdict "$g2" '<=' 20)"
    row "$v" "G2 keys/s" "$(result "$v" g2_keys_per_s)" "-" "$(result "$v" torch_g2_keys_per_s)" "-"
    row "$v" "G3 round (us)" "$(result "$v" g3_us)" "-" "$(result "$v" torch_g3_us)" "-"
    row "$v" "G3 keys/s" "$g3" ">= 2e10" "$(result "$v" torch_g3_keys_per_s)" "$(verdict "$g3" '>=' 2e10)"
    row "$v" "compaction, out of place (GB/s)" "$(result "$v" compact_out_gbs)" "-" "torch gather $(result "$v" torch_compact_gbs)" "-"
    row "$v" "compaction / device copy" "$ratio" ">= 0.80" "copy $(result "$v" compact_out_copy_gbs) GB/s" "$(verdict "$ratio" '>=' 0.80)"
    row "$v" "compaction in place / copy" "$(result "$v" compact_in_ratio)" "-" "copy $(result "$v" compact_in_copy_gbs) GB/s" "-"
    row "$v" "keep-sets identical to the CPU" "$same" "yes" "-" "$same"
    row "$v" "GPU tests (10,000+ cases)" "$(tests_ok "$v")" "yes" "-" "$(tests_ok "$v")"
done
