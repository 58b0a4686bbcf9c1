"""peer_timing.py — what the peers' scripts (peers.py, peers_scored.py,
score_peers.py) share: single-threaded numpy / PyTorch, the timing of a
round, the command-line options and the PEER line kvevict-bench reads.
Imports neither numpy nor torch, so that single_threaded() runs first."""
import os
import statistics
import time

THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def single_threaded():
    """One thread for numpy's and torch's pools: call before they load."""
    for var in THREAD_VARS:
        os.environ[var] = "1"


def time_rounds(fn, min_rounds, min_seconds, warm=True, max_rounds=None):
    """(median, least, count) seconds of fn() over at least min_rounds calls
    and min_seconds, after one warm-up call (allocations, first-call
    dispatch) unless warm is False; at most max_rounds calls when given."""
    if warm:
        fn()
    times = []
    start = time.perf_counter()
    while len(times) < min_rounds or time.perf_counter() - start < min_seconds:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        if max_rounds is not None and len(times) >= max_rounds:
            break
    return statistics.median(times), min(times), len(times)


def add_peer_options(ap, workloads, peers, min_rounds):
    """--workloads, --peers, --min-rounds and --min-seconds, with defaults."""
    ap.add_argument("--workloads", default=workloads)
    ap.add_argument("--peers", default=peers)
    ap.add_argument("--min-rounds", type=int, default=min_rounds)
    ap.add_argument("--min-seconds", type=float, default=1.0)


def peer_line(name, med, best, n, workload=None, extra=""):
    """Prints the PEER line of one figure (seconds in, milliseconds out)."""
    wl = f" {workload}" if workload else ""
    print(f"PEER {name}{wl} median_ms={med * 1e3:.3f} min_ms={best * 1e3:.3f} rounds={n}{extra}",
          flush=True)
