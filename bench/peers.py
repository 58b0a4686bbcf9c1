#!/usr/bin/python3
"""peers.py — what a user would write today to evict at random, timed on the
CPU, single-threaded: numpy (random scores, argpartition, sort) and PyTorch
(rand, topk, sort: the Random Attention paper's selector).

One round = every head of the workload picks, among its candidates, the
n_keep to keep and returns them in ascending order (kvevict returns the
evicted slots, and the kept ones on request). Prints one line per peer:
    PEER <name> <workload> median_ms=<m> min_ms=<m> rounds=<r>
Run by bench/kvevict-bench so that the figures sit next to kvevict's own.
"""
import argparse
import os
import statistics
import sys
import time

# Single-threaded peers: set before numpy/torch load their thread pools.
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = "1"

WORKLOADS = {  # heads per round, candidates per head, kept candidates per head
    "G1": (36 * 8, 1024, 960),
    "G2": (64 * 8, 1024, 960),
    "G3": (128 * 36 * 8, 1024, 960),
}


def time_rounds(fn, min_rounds, min_seconds):
    fn()  # warm-up: allocations, first-call dispatch
    times = []
    start = time.perf_counter()
    while len(times) < min_rounds or time.perf_counter() - start < min_seconds:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        if len(times) >= 10 * min_rounds:
            break
    return statistics.median(times), min(times), len(times)


def numpy_peer(heads, cand, keep):
    import numpy as np

    rng = np.random.default_rng(1)

    def one_round():
        scores = rng.random((heads, cand))
        part = np.argpartition(scores, keep - 1, axis=1)
        return np.sort(part[:, :keep], axis=1)  # the kept, ascending, as the paper's selector

    return one_round


def torch_peer(heads, cand, keep):
    import torch

    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(1)

    def one_round():
        scores = torch.rand((heads, cand), generator=gen)
        kept = torch.topk(scores, keep, dim=1).indices
        return torch.sort(kept, dim=1).values

    return one_round


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="G1,G2,G3")
    ap.add_argument("--peers", default="numpy,torch")
    ap.add_argument("--min-rounds", type=int, default=5)
    ap.add_argument("--min-seconds", type=float, default=1.0)
    args = ap.parse_args()
    makers = {"numpy": numpy_peer, "torch": torch_peer}
    for name in args.peers.split(","):
        for wl in args.workloads.split(","):
            heads, cand, keep = WORKLOADS[wl]
            try:
                fn = makers[name](heads, cand, keep)
            except ImportError as exc:
                print(f"PEER {name} {wl} unavailable={exc.name}", flush=True)
                continue
            rounds = args.min_rounds if wl != "G3" else max(2, args.min_rounds // 3)
            med, best, n = time_rounds(fn, rounds, args.min_seconds)
            print(f"PEER {name} {wl} median_ms={med * 1e3:.3f} min_ms={best * 1e3:.3f} rounds={n}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
