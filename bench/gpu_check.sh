#!/usr/bin/env bash
# gpu_check.sh — the one prepared run for a GPU machine (an NVIDIA H200, or
# an AMD GPU): preflight, build, GPU tests, benchmarks, the PyTorch peer and
# the Python binding on the same GPU, then one Markdown table (ready for
# docs/BENCHMARKS.md). The whole run fits a budget (default 570 s, under one
# 10-minute command with margin): each step has its own limit, shortened to
# what is left, and a step with no time left is skipped, saying so.
#
# The GPU tests are ctest's (label gpu), never a hand list: the build makes
# every executable they run (the targets configure lists in
# BUILD/kve_gpu_test_targets.txt, read by bench/gpu_tests.py targets), and a
# vendor's "GPU tests" row is yes only when each of its tests shows Passed
# (a test not run, skipped or failed is a NO naming it). The CUDA graph
# tests (label graph) run in a step of their own with its own time cap: a
# row cut for time reads n/a, never NO. Where compute-sanitizer is
# present, memcheck then runs over each CUDA GPU test (smaller case counts),
# and any error, or a test it could not check in the time left, is a NO.
#
#   bench/gpu_check.sh [--carry DIR] [--prebuilt BUILD] [--until STEP] [BUILD_DIR]
#
#   BUILD_DIR       default <repo>/build-gpu-check
#   --carry DIR     Debian packages from bench/gpu_prepare.sh (default
#                   <repo>/.gpu-carry): unpacked into DIR/prefix and found
#                   through CMAKE_PREFIX_PATH and PKG_CONFIG_LIBDIR; nothing
#                   is installed on the machine
#   --prebuilt B    use the build tree B as it is (no configure, no build)
#   --until STEP    stop after preflight, configure, build or tests (tests:
#                   build only what the GPU tests run, table of their rows)
#
# Environment: OUT (folder for gpu_check.log, gpu_check.md, results.txt;
# default BUILD_DIR/gpu-check), KVE_PYTHON (python3 with a CUDA torch;
# default the first python3 on PATH), KVE_NVCC (the nvcc to use; default
# PATH, then /usr/local/cuda/bin/nvcc), KVE_CUDA_ARCHITECTURES (default 90-real:
# sm_90 only), KVE_GPU_CHECK_BUDGET (seconds, default 570),
# KVE_GPU_CHECK_GRAPH_CAP (seconds for the graph tests' step, default 150),
# KVE_GPU_CHECK_HIDE_SYSTEM=1 (rehearsal: the preflight ignores /usr's
# libxxhash, Check and pkg-config, as on a machine without them; for the
# build itself, tests/gpu/without_system_deps.sh hides them for real).
#
# Exit: 0 every step ran (the table's "met" column has the verdicts), 1 a
# step failed or results differ from the CPU, 2 no GPU, 3 the driver is
# missing or too old, 4 a tool is missing (cmake, compiler, nvcc), 5 a
# build dependency is missing (libxxhash, Check), 6 configure or build
# failed, 7 the built backend is not available (the runtime's reason).
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
carry=$root/.gpu-carry
prebuilt=""
until_step=all
build=""
while [ $# -gt 0 ]; do
    case $1 in
    --carry) carry=$2; shift 2 ;;
    --prebuilt) prebuilt=$2; shift 2 ;;
    --until) until_step=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "gpu_check: unknown option $1 (see --help)" >&2; exit 4 ;;
    *) build=$1; shift ;;
    esac
done
case $until_step in preflight | configure | build | tests | all) ;; *)
    echo "gpu_check: --until $until_step: expected preflight, configure, build or tests" >&2; exit 4 ;;
esac
build=${prebuilt:-${build:-$root/build-gpu-check}}
out=${OUT:-$build/gpu-check}
mkdir -p "$build" "$out"
log=$out/gpu_check.log
table=$out/gpu_check.md
results=$out/results.txt
: >"$log"
: >"$results"
budget=${KVE_GPU_CHECK_BUDGET:-570}
t_start=$(date +%s)
jobs=$(nproc 2>/dev/null || echo 4)

# The tree's commit: git's, else what gpu_prepare.sh recorded.
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null ||
    sed -n 's/^# tree //p' "$carry/MANIFEST" 2>/dev/null || true)
commit=${commit:-?}

say() { printf '[%4ds] %s\n' "$(($(date +%s) - t_start))" "$*" | tee -a "$log"; }
# stop CODE REASON: the plain reason, on stdout, in the log and the table.
stop() {
    say "STOP: $2"
    printf 'gpu_check stopped (exit %s): %s\n' "$1" "$2" >"$table"
    exit "$1"
}

declare -A why # step -> why it did not run or did not pass ("" = it passed)
# step NAME CAP [--out FILE] CMD...: CMD under min(CAP, budget left - 10 s).
step() {
    local name=$1 cap=$2 file=""
    shift 2
    if [ "$1" = --out ]; then file=$2; shift 2; fi
    local left=$((budget - ($(date +%s) - t_start) - 10))
    local limit=$((cap < left ? cap : left))
    if [ "$limit" -lt 5 ]; then
        why[$name]="skipped: no time left in the ${budget} s budget"
        [ "$cap" -lt 5 ] && why[$name]="skipped: its cap is ${cap} s"
        say "$name: ${why[$name]}"
        return 124
    fi
    say "$name (limit ${limit} s)"
    local rc=0
    if [ -n "$file" ]; then
        timeout "$limit" "$@" >"$file" 2>>"$log" || rc=$?
    else
        timeout "$limit" "$@" >>"$log" 2>&1 || rc=$?
    fi
    case $rc in
    0) why[$name]="" ;;
    124) why[$name]="timed out after ${limit} s" ;;
    *) why[$name]="failed: exit $rc (see gpu_check.log)" ;;
    esac
    [ "$rc" -eq 0 ] || say "$name: ${why[$name]}"
    return "$rc"
}
row() { printf '| %s | %s | %s | %s | %s | %s |\n' "$@"; }
table_head() {
    echo "gpu_check: $(date -u +%Y-%m-%dT%H:%MZ), tree $commit, $(($(date +%s) - t_start)) s of ${budget}"
    echo
    row "GPU" "metric" "kvevict" "target" "PyTorch peer / floor" "met"
    echo "|---|---|---:|---|---:|---|"
}
# finish: show the table; exit 1 when a row's "met" is NO or n/a, else 0.
finish() {
    echo | tee -a "$log"
    tee -a "$log" <"$table"
    local failed=0
    grep -Eq '\| (NO|n/a)[^|]*\|$' "$table" && failed=1
    say "full log: $log; table: $table"
    exit "$failed"
}
collect() { sed -n "s/^RESULT /$1 /p" >>"$results"; }
# value VENDOR KEY STEP: the result, else n/a and why STEP gave none.
value() {
    local v
    v=$(awk -v k="$1 $2" '$1 " " $2 == k { v = $3 } END { print v }' "$results")
    if [ -n "$v" ]; then echo "$v"; else echo "n/a (${3}: ${why[$3]:-did not run})"; fi
}

# ---- 0. preflight: what this machine has ------------------------------------------
say "gpu_check on ${HOSTNAME:-?}, tree $commit, budget ${budget} s"
vendors=()
if command -v nvidia-smi >/dev/null 2>&1; then
    smi=$(timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1)
    rc=$?
    if [ $rc -ne 0 ] || [ -z "$smi" ]; then
        say "nvidia-smi: $(echo "$smi" | head -3)"
        stop 3 "nvidia-smi is here but cannot reach the NVIDIA driver or a device (exit $rc): is the driver loaded (lsmod | grep nvidia) and the GPU visible (nvidia-smi -L)?"
    fi
    say "NVIDIA: $smi"
    say "NVIDIA driver: $(timeout 20 nvidia-smi 2>/dev/null | grep -o 'Driver Version.*CUDA Version: *[0-9.]*' | head -1)"
    vendors+=(cuda)
fi
amd_arch=""
if command -v rocminfo >/dev/null 2>&1; then
    amd_arch=$(timeout 20 rocminfo 2>/dev/null | grep -o 'gfx[0-9a-f]*' | sort -u | head -1 || true)
    if [ -n "$amd_arch" ]; then
        say "AMD: $amd_arch"
        vendors+=(hip)
    else
        say "rocminfo is here but lists no AMD GPU"
    fi
fi
[ ${#vendors[@]} -gt 0 ] ||
    stop 2 "no GPU: neither nvidia-smi nor rocminfo is on PATH or lists a device; nothing to measure"
have_cuda=0
for v in "${vendors[@]}"; do [ "$v" = cuda ] && have_cuda=1; done

command -v cmake >/dev/null 2>&1 || stop 4 "cmake is not on PATH"
say "cmake: $(cmake --version | head -1)"
cc=$(command -v cc || command -v gcc || true)
[ -n "$cc" ] || stop 4 "no C compiler (cc, gcc) on PATH"
say "C compiler: $("$cc" --version | head -1)"
nvcc=""
if [ "$have_cuda" = 1 ]; then
    candidates=("$(command -v nvcc || true)" /usr/local/cuda/bin/nvcc)
    [ -n "${KVE_NVCC:-}" ] && candidates=("$KVE_NVCC") # only it, when set
    for c in "${candidates[@]}"; do
        if [ -n "$c" ] && [ -x "$c" ]; then nvcc=$c; break; fi
    done
    [ -n "$nvcc" ] || [ -n "$prebuilt" ] ||
        stop 4 "an NVIDIA GPU but no nvcc (PATH, /usr/local/cuda/bin, \$KVE_NVCC): the CUDA backend cannot be built"
    if [ -n "$nvcc" ]; then
        toolkit=$("$nvcc" --version | sed -n 's/.*release \([0-9]*\)\.\([0-9]*\).*/\1.\2/p')
        say "CUDA toolkit: $nvcc, release $toolkit"
        driver=$(echo "$smi" | head -1 | awk -F', ' '{ print $2 }')
        tmajor=${toolkit%%.*}
        need=450
        [ "${tmajor:-0}" -ge 12 ] && need=525
        [ "${tmajor:-0}" -ge 13 ] && need=580
        [ "${driver%%.*}" -ge "$need" ] 2>/dev/null ||
            stop 3 "the NVIDIA driver ($driver) is older than CUDA $toolkit needs (R$need or later): install a newer driver, or build with the toolkit this driver supports (docs/GPU.md \"Driver and toolkit\")"
    fi
fi

# Build dependencies: the carried packages first, then the system's.
prefix=""
if [ -d "$carry/debs" ] && ls "$carry"/debs/*.deb >/dev/null 2>&1; then
    prefix=$carry/prefix
    rm -rf "$prefix"
    mkdir -p "$prefix"
    for deb in "$carry"/debs/*.deb; do
        if command -v dpkg-deb >/dev/null 2>&1; then
            dpkg-deb -x "$deb" "$prefix" || stop 5 "cannot unpack $deb into $prefix"
        else # no dpkg: a .deb is an ar archive holding data.tar.*
            python3 "$root/bench/gpu_unpack_deb.py" "$deb" "$prefix" || stop 5 "cannot unpack $deb"
        fi
    done
    # The .pc files say prefix=/usr: point them at the private prefix.
    find "$prefix" -name '*.pc' -exec sed -i "s|^prefix=/usr\$|prefix=$prefix/usr|" {} +
    say "carried packages unpacked into $prefix: $(grep -v '^#' "$carry/MANIFEST" 2>/dev/null | cut -d' ' -f1,2 | tr '\n' ' ')"
fi
libarch=$("$cc" -print-multiarch 2>/dev/null || true)
libarch=${libarch:-x86_64-linux-gnu}
hide=${KVE_GPU_CHECK_HIDE_SYSTEM:-0}
cmake_deps=()
pc_dirs=""
if [ -n "$prefix" ]; then
    pc_dirs=$prefix/usr/lib/$libarch/pkgconfig:$prefix/usr/share/pkgconfig
    export LD_LIBRARY_PATH=$prefix/usr/lib/$libarch${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    cmake_deps+=("-DCMAKE_PREFIX_PATH=$prefix/usr")
fi
if [ "$hide" = 1 ]; then
    export PKG_CONFIG_LIBDIR=${pc_dirs:-/nonexistent}
    say "rehearsal: the preflight ignores /usr's libxxhash, Check and pkg-config"
elif [ -n "$pc_dirs" ]; then
    export PKG_CONFIG_PATH=$pc_dirs${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
fi
# pkg-config finds Check: the machine's, else the carried pkgconf.
pkgconfig=$(command -v pkg-config || true)
if [ "$hide" = 1 ] || [ -z "$pkgconfig" ]; then
    pkgconfig=""
    [ -n "$prefix" ] && [ -x "$prefix/usr/bin/pkgconf" ] && pkgconfig=$prefix/usr/bin/pkgconf
fi
[ -n "$pkgconfig" ] && cmake_deps+=("-DPKG_CONFIG_EXECUTABLE=$pkgconfig")
xxh=""
for d in ${prefix:+$prefix/usr/include} $([ "$hide" = 1 ] || echo /usr/include /usr/local/include); do
    [ -f "$d/xxhash.h" ] && xxh=$d/xxhash.h && break
done
if [ -z "$prebuilt" ]; then
    [ -n "$xxh" ] || stop 5 "libxxhash's headers (xxhash.h) are not on this machine and no packages were carried in $carry/debs: run bench/gpu_prepare.sh where apt works and carry .gpu-carry with the tree"
    { [ -n "$pkgconfig" ] && "$pkgconfig" --exists check; } ||
        stop 5 "Check (check.pc through ${pkgconfig:-no pkg-config}) is not on this machine and was not carried: run bench/gpu_prepare.sh and carry .gpu-carry"
    say "libxxhash: $xxh; Check: $("$pkgconfig" --modversion check) via $pkgconfig"
fi

python=""
for py in "${KVE_PYTHON:-}" "$(command -v python3 || true)" /usr/bin/python3; do
    [ -n "$py" ] && [ -x "$py" ] || continue
    if timeout 60 "$py" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' >/dev/null 2>&1; then
        python=$py
        break
    fi
done
if [ -n "$python" ]; then
    say "python: $python, $("$python" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda or torch.version.hip)')"
else
    why[torch]="no python3 with a GPU build of torch (set KVE_PYTHON)"
    why[python]=${why[torch]}
    say "python: ${why[torch]}"
fi
# Any python3 reads ctest's test list (bench/gpu_tests.py).
py_any=${python:-$(command -v python3 || echo /usr/bin/python3)}
[ "$until_step" = preflight ] && { say "stopping after preflight (--until)"; exit 0; }

# ---- 1. configure and build ------------------------------------------------------------
hip_archs="gfx90a;gfx1030"
cuda_mode=OFF
hip_mode=OFF
for v in "${vendors[@]}"; do
    [ "$v" = cuda ] && cuda_mode=ON
    if [ "$v" = hip ]; then
        hip_mode=ON
        case ";$hip_archs;" in *";$amd_arch;"*) ;; *) hip_archs="$hip_archs;$amd_arch" ;; esac
    fi
done
targets=(kvevict kvevict_cli)
[ "$cuda_mode" = ON ] && targets+=(kvevict_cuda)
[ "$hip_mode" = ON ] && targets+=(kvevict_hip)
if [ "$until_step" != tests ]; then # the benchmarks
    [ "$cuda_mode" = ON ] && targets+=(kvevict_gpu_bench kvevict_bench_arms)
    [ "$hip_mode" = ON ] && targets+=(kvevict_gpu_bench_hip)
fi
if [ -z "$prebuilt" ]; then
    step configure 60 cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release \
        -DKVE_CUDA="$cuda_mode" -DKVE_HIP="$hip_mode" -DKVE_HIP_ARCHITECTURES="$hip_archs" \
        -DCMAKE_CUDA_ARCHITECTURES="${KVE_CUDA_ARCHITECTURES:-90-real}" ${nvcc:+-DCMAKE_CUDA_COMPILER=$nvcc} \
        -DKVE_BUILD_TESTS=ON -DKVE_BUILD_TOOLS=ON -DKVE_BUILD_BENCH=ON \
        -DKVE_PYTHON="${python:-/usr/bin/python3}" "${cmake_deps[@]}" ||
        stop 6 "configure failed (${why[configure]}): $(grep -m1 -A2 'CMake Error' "$log" | tr '\n' ' ')"
    grep -E '^(XXHASH_INCLUDE_DIR|XXHASH_LIBRARY|pkgcfg_lib_CHECK_[a-z_]*):' "$build/CMakeCache.txt" |
        while read -r found; do say "found: $found"; done
    [ "$until_step" = configure ] && { say "stopping after configure (--until)"; exit 0; }
    # every target a test labelled gpu or gpu-load runs, as configure listed them
    gpu_targets=$("$py_any" "$root/bench/gpu_tests.py" targets "$build" 2>>"$log") ||
        stop 6 "cannot list the GPU tests' executables (bench/gpu_tests.py targets $build: $(tail -1 "$log"))"
    for t in $gpu_targets; do targets+=("$t"); done
    say "GPU tests' executables (from configure): $(echo $gpu_targets)"
    step build 200 cmake --build "$build" -j "$jobs" --target "${targets[@]}" ||
        stop 6 "build failed (${why[build]}): $(grep -m1 -E 'error:|Error [0-9]' "$log" || true)"
fi
[ "$until_step" = build ] && { say "stopping after build (--until)"; exit 0; }
export KVE_BACKEND_DIR=$build KVE_BACKEND=
cli=$build/tools/kvevict
[ -x "$cli" ] || stop 6 "$cli is not built"

# ---- 2. what the built library says ----------------------------------------------------
"$cli" version 2>&1 | tee -a "$log"
for v in "${vendors[@]}"; do
    line=$("$cli" version | grep "^backend $v ")
    case $line in
    *"not available"*)
        # rehearsal only (tests/gpu/test_gpu_check.sh): go on to show every row's reason
        [ "${KVE_GPU_CHECK_ASSUME_AVAILABLE:-0}" = 1 ] ||
            stop 7 "the $v backend was built but is not available: ${line#*not available: }"
        say "rehearsal: going on without the $v backend" ;;
    esac
done

# ---- 3. tests, benchmarks, digest, peers -------------------------------------------------
ctest_out=$out/ctest_gpu.txt
graph_out=$out/ctest_graph.txt
step tests 200 --out "$ctest_out" ctest --test-dir "$build" -L 'gpu|gpu-load' -LE '^graph$' --output-on-failure
cat "$ctest_out" >>"$log"
grep -E 'tests passed|Skipped|Failed|Passed|Not Run' "$ctest_out" | tee -a "$log"
# the CUDA graph tests (capture and replay, label graph), under their own cap
[ "$have_cuda" = 1 ] &&
    step graph "${KVE_GPU_CHECK_GRAPH_CAP:-150}" --out "$graph_out" ctest --test-dir "$build" -L '^graph$' --output-on-failure
cat "$graph_out" >>"$log" 2>/dev/null
grep -E 'tests passed|Skipped|Failed|Passed|Not Run' "$graph_out" 2>/dev/null | tee -a "$log"
tests_ok() { # yes when every gpu-labelled test of this vendor ran and passed (a skip is not a pass)
    if [ ! -s "$ctest_out" ]; then echo "n/a (tests: ${why[tests]:-did not run})"; return; fi
    "$py_any" "$root/bench/gpu_tests.py" verdict "$build" "$ctest_out" "$1" --without graph ||
        echo "NO (bench/gpu_tests.py verdict failed)"
}
graph_ok() { # the same for the graph tests; their step cut for time (or not run) is n/a, not NO
    case ${why[graph]-did not run} in
    "" | "failed: "*) "$py_any" "$root/bench/gpu_tests.py" verdict "$build" "$graph_out" "$1" --label graph ||
        echo "NO (bench/gpu_tests.py verdict failed)" ;;
    *) echo "n/a (graph: ${why[graph]-did not run})" ;;
    esac
}
test_rows() { # VENDOR: the tests' rows of the table
    local t
    t=$(tests_ok "$1")
    row "$1" "GPU tests (10,000+ cases)" "$t" "yes" "-" "$t"
    if [ "$1" = cuda ]; then
        t=$(graph_ok "$1")
        row "$1" "CUDA graph tests (label graph: capture and replay), own step" "$t" "yes" "-" "$t"
    fi
}
if [ "$until_step" = tests ]; then
    { table_head; for v in "${vendors[@]}"; do test_rows "$v"; done; } >"$table"
    finish
fi
# the vLLM plugin on the GPU (FlashAttention), where vLLM imports: the lent image has no vLLM
# (docs/GPU.md), so this logs why it did not run; not a row of the table
if [ "$have_cuda" = 1 ] && "$py_any" -c "import vllm" >/dev/null 2>&1; then
    step vllm 300 --out "$out/vllm_gpu.txt" env KVEVICT_LIBRARY="$build/libkvevict.so" \
        KVE_BACKEND_DIR="$build" "$py_any" "$root/tests/python/vllm_gpu_check.py" ||
        say "vllm plugin on the GPU: ${why[vllm]}"
else
    say "vllm plugin on the GPU: not run (no CUDA backend, or vLLM does not import here)"
fi
# compute-sanitizer memcheck over the CUDA GPU tests (their logs in $build/memcheck)
sanitizer=$(command -v compute-sanitizer || true)
[ -z "$sanitizer" ] && [ -x /usr/local/cuda/bin/compute-sanitizer ] &&
    sanitizer=/usr/local/cuda/bin/compute-sanitizer
if [ "$have_cuda" = 1 ] && [ -n "$sanitizer" ]; then
    mkdir -p "$build/memcheck"
    left=$((budget - ($(date +%s) - t_start) - 200)) # room for the benchmarks after it
    cap=$((left < 150 ? left : 150))
    [ "$cap" -lt 20 ] && cap=20
    if step memcheck $((cap + 10)) --out "$out/memcheck.txt" "$py_any" "$root/bench/gpu_tests.py" \
        memcheck "$build" "$sanitizer" "$build/memcheck" "$cap"; then
        collect cuda <"$out/memcheck.txt"
    fi
    grep -v '^RESULT' "$out/memcheck.txt" 2>/dev/null | tee -a "$log"
elif [ "$have_cuda" = 1 ]; then
    why[memcheck]="no compute-sanitizer on PATH or in /usr/local/cuda/bin"
fi
memcheck_ok() { # yes when memcheck ran over every CUDA GPU test and found nothing
    local v
    v=$(value cuda memcheck_clean memcheck)
    case $v in
    1) echo yes ;;
    0) echo "NO ($(grep '^MEMCHECK' "$out/memcheck.txt" | grep -v ': 0 errors, test exit 0$' |
        sed 's/^MEMCHECK //' | tr '\n' ';' | sed 's/;$//'))" ;;
    *) echo "$v" ;;
    esac
}
for v in "${vendors[@]}"; do
    bench=$build/kernels_cuda/kvevict_gpu_bench
    [ "$v" = hip ] && bench=$build/kernels_hip/kvevict_gpu_bench_hip
    if step bench 60 --out "$out/bench.txt" "$bench" "$v"; then
        collect "$v" <"$out/bench.txt"
        grep -v '^RESULT' "$out/bench.txt" | tee -a "$log"
    fi
    cat "$out/bench.txt" >>"$log" 2>/dev/null
    # the digest row needs this vendor's line: --require makes its absence a failure
    if step digest 30 --out "$out/digest.txt" "$cli" digest --backend all --require "$v" \
        --layers 36 --heads 8 --prompt 1024 --budget 2048 --window 64 --cached 2112 --seed 2609 &&
        grep -q "^$v digest=" "$out/digest.txt"; then
        echo "RESULT digest_all_agree 1" | collect "$v"
    else
        echo "RESULT digest_all_agree 0" | collect "$v"
    fi
    cat "$out/digest.txt" >>"$log"
    if [ -n "$python" ] && [ "$v" = cuda ]; then
        if step torch 60 --out "$out/torch.txt" "$python" "$root/bench/gpu_torch_peer.py"; then
            collect "$v" <"$out/torch.txt"
        fi
        cat "$out/torch.txt" >>"$log"
        step python 60 --out "$out/python.txt" env PYTHONPATH="$root/python" \
            KVEVICT_LIBRARY="$build/libkvevict.so" PYTHONDONTWRITEBYTECODE=1 \
            "$python" "$root/bench/gpu_python_check.py"
        collect "$v" <"$out/python.txt"
        cat "$out/python.txt" >>"$log"
    fi
    # the A/B arms' per-round cost (issue 13's table): kvevict on this GPU, the PyTorch peers too
    if [ "$v" = cuda ]; then
        peers_args=(--no-peers)
        [ -n "$python" ] && peers_args=(--python "$python" --ref-layers 0)
        if step arms 150 --out "$out/arms.txt" "$build/bench/kvevict-bench-arms" --backend "$v" \
            --results --min-time 0.5 "${peers_args[@]}"; then
            collect "$v" <"$out/arms.txt"
        fi
        grep -v '^RESULT' "$out/arms.txt" 2>/dev/null | tee -a "$log"
    fi
    # issue 40: the decode engine end to end at the qwen3-4b shape, the arms' tokens/s
    # (flex attention; if that fails, once more with the gather reference)
    if [ "$v" = cuda ] && [ -n "$python" ]; then
        serve=(env PYTHONPATH="$root/python" KVEVICT_LIBRARY="$build/libkvevict.so"
            PYTHONDONTWRITEBYTECODE=1 "$python" -m kvevict.examples.serve_bench --preset qwen3-4b
            --warmup 8 --steps 60 --results --json "$out/serve.json" --html "$out/serve.html")
        step serve 150 --out "$out/serve.txt" "${serve[@]}" ||
            step serve 120 --out "$out/serve.txt" "${serve[@]}" --attn gather
        collect "$v" <"$out/serve.txt"
        grep -v '^RESULT' "$out/serve.txt" 2>/dev/null | tee -a "$log"
    fi
    # issue 48: the arms inside transformers (KvevictCache; kvpress's presses where installed)
    if [ "$v" = cuda ] && [ -n "$python" ] && "$python" -c 'import transformers' 2>/dev/null; then
        step hf_bench 150 --out "$out/hf_bench.txt" env PYTHONPATH="$root/python" \
            KVEVICT_LIBRARY="$build/libkvevict.so" "$python" -m kvevict.examples.hf_bench \
            --results --html "$out/hf_bench.html" && collect "$v" <"$out/hf_bench.txt"
        grep -v '^RESULT' "$out/hf_bench.txt" 2>/dev/null | tee -a "$log"
    fi
done

# ---- the table -------------------------------------------------------------------------------
verdict() { # value op target
    case $1 in n/a*) echo n/a; return ;; esac
    awk -v x="$1" -v op="$2" -v t="$3" 'BEGIN { ok = (op == "<=") ? (x + 0 <= t + 0) : (x + 0 >= t + 0); print (ok ? "yes" : "NO") }'
}
# arms_cell VENDOR WL ARM: kvevict's ms per round of that arm, else why it did not run
arms_cell() {
    local v reason
    v=$(awk -v k="$1 arms_$2_$3_ms" '$1 " " $2 == k { v = $3 } END { print v }' "$results")
    if [ -n "$v" ]; then echo "$v"; return; fi
    reason=$(grep -m1 -E "^$2 +$3 +not run: " "$out/arms.txt" 2>/dev/null | sed 's/.*not run: //')
    echo "n/a (${reason:-arms: ${why[arms]:-did not run}})"
}
# arms_peer VENDOR WL PEER: the PyTorch peer's ms per round, else n/a and why
arms_peer() {
    local v
    v=$(awk -v k="$1 arms_$2_torch_$3_ms" '$1 " " $2 == k { v = $3 } END { print v }' "$results")
    if [ -n "$v" ]; then echo "$v"; elif [ -z "$python" ]; then echo "n/a (${why[torch]})"; else
        echo "n/a (arms: ${why[arms]:-no figure})"; fi
}
yesno() { case $1 in 1) echo yes ;; 0) echo NO ;; *) echo "$1" ;; esac; }
{
    table_head
    for v in "${vendors[@]}"; do
        g2=$(value "$v" g2_us bench)
        g3=$(value "$v" g3_keys_per_s bench)
        ratio=$(value "$v" compact_out_ratio bench)
        cpu_same=$(awk -v a="$(value "$v" g2_identical bench)" -v b="$(value "$v" g3_identical bench)" \
            'BEGIN { print (a == 1 && b == 1) ? "yes" : (a ~ /^n\/a/ ? a : "NO") }')
        digest=$(yesno "$(value "$v" digest_all_agree digest)")
        skipped=$(grep "^$v skipped: " "$log" | tail -1)
        [ "$digest" = yes ] ||
            digest="NO (${why[digest]:-no $v line in kvevict digest --require $v}${skipped:+; $skipped})"
        row "$v" "G2 round (us)" "$g2" "<= 20 (paper's PyTorch: 300)" "$(value "$v" torch_g2_us torch)" "$(verdict "$g2" '<=' 20)"
        row "$v" "G2 keys/s" "$(value "$v" g2_keys_per_s bench)" "-" "$(value "$v" torch_g2_keys_per_s torch)" "-"
        row "$v" "G3 round (us)" "$(value "$v" g3_us bench)" "-" "$(value "$v" torch_g3_us torch)" "-"
        row "$v" "G3 keys/s" "$g3" ">= 2e10" "$(value "$v" torch_g3_keys_per_s torch)" "$(verdict "$g3" '>=' 2e10)"
        row "$v" "compaction, out of place (GB/s)" "$(value "$v" compact_out_gbs bench)" "-" "torch gather $(value "$v" torch_compact_gbs torch)" "-"
        row "$v" "compaction / device copy" "$ratio" ">= 0.80" "copy $(value "$v" compact_out_copy_gbs bench) GB/s" "$(verdict "$ratio" '>=' 0.80)"
        row "$v" "compaction in place / copy" "$(value "$v" compact_in_ratio bench)" "-" "copy $(value "$v" compact_in_copy_gbs bench) GB/s" "-"
        # issue 38's step rows: append + 64 layers of writes, one token a row
        for sr in "1 round 250" "8 round -" "32 round -" "128 round 3000" "1 none 150" "8 none -" \
            "32 none -" "128 none 300" "128 staggered -"; do
            set -- $sr
            st=$(value "$v" "step_$1_$2_us" bench)
            goal="-"; met="-"
            [ "$3" != - ] && goal="<= $3" && met=$(verdict "$st" '<=' "$3")
            row "$v" "G2 decode step, $1 rows, $2: append (us) / + 64 layers of writes (us)" \
                "$(value "$v" "step_$1_$2_append_us" bench) / $st" "$goal" "-" "$met"
        done
        # the same steps planned on the device: captured once in a CUDA graph and replayed,
        # against the planned step launched eagerly (stream time, not ncu's kernel time)
        for sr in "1 round" "128 round" "1 none" "128 none" "128 staggered"; do
            set -- $sr
            row "$v" "G2 decode step, $1 rows, $2, planned: graph replay (us) / eager (us)" \
                "$(value "$v" "step_$1_$2_graph_us" bench) / $(value "$v" "step_$1_$2_planned_us" bench)" \
                "replay within 10% of the kernels' time" "-" "-"
        done
        # issue 38: a round's fixed cost and per-row cost, from the append rows above
        fixed=$("$py_any" -c "import sys; a,b=map(float,sys.argv[1:]); print('%.1f' % (a-b))" \
            "$(value "$v" step_1_round_append_us bench)" "$(value "$v" step_1_none_append_us bench)" 2>/dev/null || echo n/a)
        per=$("$py_any" -c "import sys; a,b=map(float,sys.argv[1:]); print('%.1f' % ((a-b)/127))" \
            "$(value "$v" step_128_round_append_us bench)" "$(value "$v" step_1_round_append_us bench)" 2>/dev/null || echo n/a)
        row "$v" "round's fixed cost (us): 1-row append with a round - without" "$fixed" "<= 20" "-" "$(verdict "$fixed" '<=' 20)"
        row "$v" "round's cost per further row (us), 1 to 128 rows" "$per" "<= G2 round $g2" "-" "$(verdict "$per" '<=' "$g2")"
        for tk in 1 8 32 128; do
            cw=$(value "$v" "cw_${tk}_us" bench)
            row "$v" "G2 cache write, $tk tokens: us a layer call / ratio to a plain write kernel" \
                "$cw / $(value "$v" "cw_${tk}_ratio" bench)" "<= 3 / <= 1.2" "plain $(value "$v" "cw_${tk}_plain_us" bench) us" \
                "$(verdict "$cw" '<=' 3) / $(verdict "$(value "$v" "cw_${tk}_ratio" bench)" '<=' 1.2)"
        done
        # issue 39: the scorers' G1 round against the device's bandwidth, and the scored step
        # planned on the device (one scorer launch a layer) against the host API
        for sc in "knorm K-norm 0.10" "triattention TriAttention 0.15"; do
            set -- $sc
            ms=$(value "$v" "score_$1_ms" bench)
            frac=$(value "$v" "score_$1_bw_fraction" bench)
            row "$v" "G1 $2 round (ms) / fraction of device bandwidth" "$ms / $frac" "<= $3 / >= 0.30" \
                "$(value "$v" "score_$1_gbs" bench) GB/s" "$(verdict "$ms" '<=' "$3") / $(verdict "$frac" '>=' 0.30)"
        done
        for r in 1 32; do
            row "$v" "G1 scored step (TriAttention), $r rows: graph (us) / planned (us) / host API (us) / its 36 scorer launches (us)" \
                "$(value "$v" "scored_step_${r}_graph_us" bench) / $(value "$v" "scored_step_${r}_planned_us" bench) / $(value "$v" "scored_step_${r}_eager_us" bench) / $(value "$v" "scored_step_${r}_score_us" bench)" \
                "-" "-" "-"
        done
        row "$v" "keep-sets identical to the CPU (bench)" "$cpu_same" "yes" "-" "$cpu_same"
        row "$v" "kvevict digest --backend all --require $v" "$digest" "agree, $v line present" "-" "$digest"
        [ "$v" = cuda ] && row "$v" "Python binding, CUDA tensors = CPU" "$(yesno "$(value "$v" python_cuda_identical python)")" "yes" "-" "$(yesno "$(value "$v" python_cuda_identical python)")"
        test_rows "$v"
        [ "$v" = cuda ] && row "$v" "compute-sanitizer memcheck over the GPU tests" "$(memcheck_ok)" "0 errors" "-" "$(memcheck_ok)"
        if [ "$v" = cuda ]; then
            for wl in G1 G2 G3; do
                kve="$(arms_cell "$v" "$wl" random) / $(arms_cell "$v" "$wl" knorm) / $(arms_cell "$v" "$wl" triattention)"
                peer="torch $(arms_peer "$v" "$wl" random) / $(arms_peer "$v" "$wl" knorm) / ref $(arms_peer "$v" "$wl" tri-ref), factored $(arms_peer "$v" "$wl" tri-factored)"
                [ -n "${why[arms]:-}" ] && kve="n/a (arms: ${why[arms]})"
                [ -z "$python" ] && peer="n/a (${why[torch]})"
                row "$v" "$wl round (ms): random / K-norm / TriAttention" "$kve" \
                    "paper (PyTorch, H200): 0.30 / - / 1.47-1.64" "$peer" "-"
            done
            sv() { value "$v" "serve_$1" serve; }
            row "$v" "serve_bench qwen3-4b tokens/s ($(sv attention) attention): full / random / random-p0 / TriAttention / K-norm" \
                "$(sv full_tok_s) / $(sv random_tok_s) / $(sv random_p0_tok_s) / $(sv triattention_tok_s) / $(sv knorm_tok_s)" \
                "paper's Table 4 (vLLM): 1296 / 2046 / - / 1494 / -" "-" "-"
            row "$v" "serve_bench: random / full tokens/s" "$(sv random_over_full)" ">= 1.5 (paper: 1.58)" "-" "$(verdict "$(sv random_over_full)" '>=' 1.5)"
            row "$v" "serve_bench: random / TriAttention tokens/s" "$(sv random_over_triattention)" ">= 1" "-" "$(verdict "$(sv random_over_triattention)" '>=' 1)"
            row "$v" "serve_bench: eviction + cache writes, % of random's step" "$(sv random_evict_write_pct)" "<= 3" "-" "$(verdict "$(sv random_evict_write_pct)" '<=' 3)"
        fi
    done
} >"$table"
finish
