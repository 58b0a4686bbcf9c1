#!/usr/bin/python3
"""score_peers.py — the PyTorch scorer a user would write today for one G1
round, on the CPU, single-threaded, timed for kvevict-bench's scoring
figure: TriAttention as its reference computes it (invert RoPE, complex
pairs, amplitude and phase per frequency, cosines over the offset grid,
mean, magnitude term; z-normalization per query head, max over the GQA
group), per query head as the reference loops (its time on --layers of the 36
layers, scaled to the round); K-norm as kvpress's KnormPress
(-||k||), z-normalized. Prints one line per peer:
    PEER <name> median_ms=<m> min_ms=<m> rounds=<r>
"""
import argparse

from peer_timing import peer_line, single_threaded, time_rounds

single_threaded()
import torch  # noqa: E402

LAYERS, HKV, GROUP, D, SLOTS, P, W = 36, 8, 4, 128, 2112, 1024, 64
NF = D // 2


def znorm(x):
    return (x - x.mean(-1, keepdim=True)) / x.std(-1, unbiased=False, keepdim=True).clamp_min(1e-6)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--min-seconds", type=float, default=1.0)
    ap.add_argument("--layers", type=int, default=4,
                    help="TriAttention layers timed (seconds each on one core); the round's "
                         "time is scaled to 36 (every layer costs the same)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(1)
    keys = [torch.randn(HKV, SLOTS, D, generator=g).to(torch.bfloat16) for _ in range(LAYERS)]
    q_mean = [torch.randn(HKV * GROUP, NF, dtype=torch.complex64, generator=g)
              for _ in range(LAYERS)]
    q_abs = [q.abs() + 0.5 for q in q_mean]
    pos = torch.arange(P, SLOTS - W)  # the candidates: slot s holds position s
    omega = 1e6 ** (-torch.arange(NF, dtype=torch.float64) * 2 / D)
    omega32 = omega.float()
    ang = pos.double()[:, None] * omega[None, :]
    cos = torch.cat([torch.cos(ang)] * 2, -1).float()
    sin = torch.cat([torch.sin(ang)] * 2, -1).float()
    offsets = 2.0 ** torch.arange(17, dtype=torch.float32)
    t0 = SLOTS
    delta = (t0 - pos.float())[:, None] + offsets[None, :]

    def tri_round():
        # per query head, as the reference's _compute_layer_head_scores loops
        out = []
        for l in range(args.layers):
            k_all = keys[l][:, pos].float()  # [HKV, n, D]
            k_un = k_all * cos - torch.cat([-k_all[..., NF:], k_all[..., :NF]], -1) * sin
            kc_all = torch.complex(k_un[..., :NF].contiguous(), k_un[..., NF:].contiguous())
            heads = []
            for q in range(HKV * GROUP):
                kc = kc_all[q // GROUP]
                qm = q_mean[l][q]
                amp = qm.abs()[None, :] * kc.abs()
                rel = qm[None, :] * kc.conj()
                phi = torch.atan2(rel.imag, rel.real)
                phase = delta[:, :, None] * omega32[None, None, :] + phi[:, None, :]
                base = (amp[:, None, :] * torch.cos(phase)).sum(-1).mean(-1)
                extra = ((q_abs[l][q] - qm.abs())[None, :] * kc.abs()).sum(-1)
                heads.append(base + extra)
            s = znorm(torch.stack(heads)).view(HKV, GROUP, -1).max(1).values
            out.append(s)
        return out

    def knorm_round():
        return [znorm(-keys[l][:, pos].float().norm(dim=-1)) for l in range(LAYERS)]

    # a TriAttention round takes seconds: no warm-up, 2 rounds
    for name, fn, rounds in (("torch-triattention", tri_round, 2), ("torch-knorm", knorm_round, 5)):
        med, low, n = time_rounds(fn, rounds, args.min_seconds, warm=rounds > 2)
        if fn is tri_round:
            med, low = med * LAYERS / args.layers, low * LAYERS / args.layers
        peer_line(name, med, low, n)


if __name__ == "__main__":
    main()
