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
import sys

from peer_timing import add_peer_options, peer_line, single_threaded, time_rounds

single_threaded()  # before numpy/torch load their thread pools

WORKLOADS = {  # heads per round, candidates per head, kept candidates per head
    "G1": (36 * 8, 1024, 960),
    "G2": (64 * 8, 1024, 960),
    "G3": (128 * 36 * 8, 1024, 960),
}


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
    add_peer_options(ap, "G1,G2,G3", "numpy,torch", 5)
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
            peer_line(name, *time_rounds(fn, rounds, args.min_seconds, max_rounds=10 * rounds),
                      workload=wl)
    return 0


if __name__ == "__main__":
    sys.exit(main())
