#!/usr/bin/python3
"""peers_scored.py — the per-round selectors a user would write in PyTorch
for the four A/B arms, timed on the CPU, single-threaded (or on a GPU with
--device cuda), at the standard workloads' shapes:

  random        rand + topk + sort (the Random Attention paper's selector)
  knorm         -||k|| + topk + sort (kvpress's KnormPress: the smallest norms kept)
  tri-ref       TriAttention's reference scorer, as its repository computes it:
                undo RoPE, per (query head, key, offset, frequency) the cosine
                of the phase, mean over the 17 geometric offsets, plus the
                magnitude term; z-normalized per query head over the
                candidates, max over the GQA group; then topk + sort
  tri-factored  the same score through the phase identity (mean over offsets
                folded into one complex coefficient per frequency): one
                complex dot product per key; then topk + sort

One round = every KV head of the workload picks the n_keep of its
candidates with the highest score and returns them ascending. Keys are
post-RoPE bf16 [heads, candidates, head_dim] (Qwen3-4B/32B-like: head_dim
128, GQA group 4, rope theta 1e6), query statistics random. Prints
    PEER <name> <workload> median_ms=<m> min_ms=<m> rounds=<r>
or  PEER <name> <workload> skipped=<reason>
Run by kvevict-bench --workloads arms next to kvevict's own figures.
"""
import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_timing import add_peer_options, peer_line, single_threaded, time_rounds  # noqa: E402

single_threaded()

P, B, W, S = 1024, 2048, 64, 2112    # prompt, budget, window, slots at a round
CAND, KEEP = S - P - W, B - P - W     # 1024 candidates, 960 kept per head
D, G, THETA = 128, 4, 1.0e6           # head_dim, query heads per KV head, RoPE base
OFFSETS = [float(1 << i) for i in range(17)]  # 1, 2, 4, ..., 65536
WORKLOADS = {"G1": (1, 36), "G2": (1, 64), "G3": (128, 36)}  # sequences, layers; 8 KV heads
STORED = 36  # layers of inputs held: G3's 128 sequences cycle over them (9.6 GB otherwise)


class Round:
    """One round's inputs, per layer: keys [8, CAND, D] bf16, positions, stats."""

    def __init__(self, torch, seqs, layers, dev):
        g = torch.Generator().manual_seed(1)
        self.torch, self.layers, self.heads = torch, seqs * layers, 8
        F, n = D // 2, min(self.layers, STORED)
        self.keys = torch.randn(n, self.heads, CAND, D, generator=g).to(torch.bfloat16).to(dev)
        self.pos = (P + torch.randperm(CAND, generator=g)).to(dev)  # slots hold positions in any order
        self.t0 = float(S)
        self.omega = (THETA ** (-2.0 * torch.arange(F, dtype=torch.float64) / D)).float().to(dev)
        qm = torch.randn(n, self.heads, G, F, 2, generator=g)
        self.q_mean = torch.complex(qm[..., 0], qm[..., 1]).to(dev)
        self.q_abs = self.q_mean.abs() * (1 + torch.rand(n, self.heads, G, F, generator=g).to(dev))
        self.offsets = torch.tensor(OFFSETS, device=dev)

    def select(self, score):
        """The n_keep highest of [heads, CAND], ascending."""
        return self.torch.sort(self.torch.topk(score, KEEP, dim=-1).indices, dim=-1).values

    def znorm_max(self, s):
        """[heads, G, CAND]: z-normalize each query head over the candidates, max over G."""
        mean = s.mean(-1, keepdim=True)
        std = s.std(-1, unbiased=False, keepdim=True).clamp_min(1e-6)
        return ((s - mean) / std).max(dim=1).values


def random_peer(r):
    torch = r.torch
    gen = torch.Generator(device=r.keys.device).manual_seed(1)

    def one_round():
        return [r.select(torch.rand(r.heads, CAND, generator=gen, device=r.keys.device))
                for _ in range(r.layers)]

    return one_round


def knorm_peer(r):
    def one_round():
        return [r.select(-r.keys[l % STORED].float().norm(dim=-1)) for l in range(r.layers)]

    return one_round


def tri_ref_scores(r, l):
    """TriAttention's reference formula for layer l: [heads, CAND]."""
    torch, F = r.torch, D // 2
    k = r.keys[l % STORED].float()
    ang = r.pos.float()[:, None] * r.omega[None, :]                 # [CAND, F]
    cos, sin = torch.cos(ang), torch.sin(ang)
    kr, ki = k[..., :F], k[..., F:]
    k_unrot = torch.complex(kr * cos + ki * sin, ki * cos - kr * sin)  # RoPE undone
    q = r.q_mean[l % STORED][:, :, None, :]                                 # [heads, G, 1, F]
    rel = q * torch.conj(k_unrot)[:, None]                         # [heads, G, CAND, F]
    amp, phi = rel.abs(), torch.atan2(rel.imag, rel.real)
    extra = ((r.q_abs[l % STORED] - r.q_mean[l % STORED].abs())[:, :, None, :] * k_unrot.abs()[:, None]).sum(-1)
    delta = (r.t0 - r.pos.float())[:, None] + r.offsets[None, :]   # [CAND, O]
    phase = delta[None, None, :, :, None] * r.omega + phi[:, :, :, None, :]
    base = (amp[:, :, :, None, :] * torch.cos(phase)).sum(-1)      # [heads, G, CAND, O]
    return r.znorm_max(base.mean(-1) + extra)


def tri_factored_scores(r, l, coef):
    torch, F = r.torch, D // 2
    k = r.keys[l % STORED].float()
    kc = torch.complex(k[..., :F], k[..., F:])                     # post-RoPE pairs
    a = r.q_mean[l % STORED] * coef                                         # [heads, G, F]
    dot = torch.einsum("hgf,hnf->hgn", a, torch.conj(kc)).real
    mag = torch.einsum("hgf,hnf->hgn", r.q_abs[l % STORED] - r.q_mean[l % STORED].abs(), kc.abs())
    return r.znorm_max(dot + mag)


def tri_ref_peer(r, layers=None):
    def one_round():
        return [r.select(tri_ref_scores(r, l)) for l in range(layers or r.layers)]

    return one_round


def tri_factored_peer(r):
    torch = r.torch
    w = r.omega.double()
    mean = torch.exp(1j * w[None, :] * r.offsets.double()[:, None]).mean(0)   # mean_d e^{i w d}
    coef = (torch.exp(1j * w * r.t0) * mean).to(torch.complex64)

    def one_round():
        return [r.select(tri_factored_scores(r, l, coef)) for l in range(r.layers)]

    return one_round


PEERS = {"random": random_peer, "knorm": knorm_peer, "tri-ref": tri_ref_peer,
         "tri-factored": tri_factored_peer}


def agree(r):
    """How far the two TriAttention forms' z-scores are apart (float rounding only)."""
    torch = r.torch
    w = r.omega.double()
    coef = (torch.exp(1j * w * r.t0) * torch.exp(1j * w[None, :] * r.offsets.double()[:, None])
            .mean(0)).to(torch.complex64)
    return float((tri_ref_scores(r, 0) - tri_factored_scores(r, 0, coef)).abs().max())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_peer_options(ap, "G1,G2", "random,knorm,tri-ref,tri-factored", 3)
    ap.add_argument("--max-round-seconds", type=float, default=20.0,
                    help="skip a peer whose estimated round exceeds this")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--ref-layers", type=int, default=0,
                    help="time tri-ref on this many layers of a round and scale to all "
                         "(0 = every layer); its phase tensor makes a whole CPU round minutes")
    args = ap.parse_args()
    try:
        import torch
    except ImportError as exc:
        for wl in args.workloads.split(","):
            for name in args.peers.split(","):
                print(f"PEER {name} {wl} skipped=no_torch:{exc.name}", flush=True)
        return 0
    if args.device == "cpu":
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    print(f"# torch {torch.__version__}, {torch.get_num_threads()} threads, device {args.device}",
          flush=True)
    per_layer = {}  # peer -> seconds per layer seen so far (to skip what cannot fit)
    for wl in args.workloads.split(","):
        seqs, layers = WORKLOADS[wl]
        r = Round(torch, seqs, layers, args.device)
        if wl == args.workloads.split(",")[0]:
            print(f"# tri-ref vs tri-factored, layer 0: max |score difference| {agree(r):.3g}",
                  flush=True)
        for name in args.peers.split(","):
            part = args.ref_layers if name == "tri-ref" and 0 < args.ref_layers < r.layers else 0
            est = per_layer.get(name, 0) * (part or r.layers)  # what timing it would cost
            if est > args.max_round_seconds:
                print(f"PEER {name} {wl} skipped=estimated_{est:.0f}s_to_time_over_"
                      f"{args.max_round_seconds:.0f}s", flush=True)
                continue
            fn = PEERS[name](r, part) if part else PEERS[name](r)
            scale = r.layers / part if part else 1.0

            def timed():
                out = fn()
                sync()
                return out

            med, best, n = time_rounds(timed, args.min_rounds, args.min_seconds,
                                       max_rounds=10 * args.min_rounds)
            med, best = med * scale, best * scale
            per_layer[name] = max(per_layer.get(name, 0), best / r.layers)
            extra = f" layers_timed={part}" if part else ""
            peer_line(name, med, best, n, workload=wl, extra=extra)
        del r
    return 0


if __name__ == "__main__":
    sys.exit(main())
