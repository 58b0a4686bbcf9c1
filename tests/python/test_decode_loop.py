#!/usr/bin/python3
"""A small random-weight transformer decoding over a kvevict-managed cache.

4 layers, 4 KV heads, 8 query heads (GQA groups of 2), head_dim 64, RoPE
applied before caching; budget 48, window 8, interval 8. Two sequences share
the batch (the second admitted later, with its prefill in a decode step, then
retired, and its row reused), over 1,100 decode steps with about 130
eviction rounds each.

Engine A (slot reuse): kve_state_append gives per-head slots, kve_cache_write
puts K/V into a vLLM-style paged NHD cache through a block table, and
attention reads each sequence's first n_used slots with one length per
sequence, masking the slots the state's table marks empty. At every layer
and step it must equal attention over the full, never-evicted cache masked
to the same kept positions (max abs error <= 1e-5).

The same cache read by a stock kernel (one length, no mask) sees the kept
tokens plus, between rounds, the evicted ones whose slots are not refilled
yet: it must equal the full cache masked to what the slots physically hold,
with at most r - 1 such extra tokens per head.

Engine B (compaction): kve_evict + kve_compact on a contiguous
[seq, layer, head, slot] cache, new tokens appended after the kept ones. Its
logits must equal engine A's at every step, and its kept positions the
state's.
"""

import math
import sys
import time

import numpy as np
import torch

import kvevict

L, HKV, G, D = 4, 4, 2, 64
HQ, DM, FF, VOCAB = HKV * G, 128, 256, 101
B, W, R = 48, 8, 8
BS, BPR, ROWS = 16, 4, 2  # block size, blocks per row, rows
MAX_SLOTS = BS * BPR
SEED = 2609
STEPS = 1100
TOL = 1e-5
# (step, row, seq_id, prompt_len) admissions, and (step, row) retirements
ADMIT = [(0, 0, 11, 16), (150, 1, 12, 11), (1050, 1, 13, 20)]
RETIRE = [(1000, 1)]


def rms(x):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


_HALF = D // 2
_ANG = torch.arange(STEPS + 1 + max(p for *_, p in ADMIT), dtype=torch.float64)[:, None] / (
    10000 ** (torch.arange(_HALF, dtype=torch.float64) / _HALF))[None, :]
_COS, _SIN = _ANG.cos().float(), _ANG.sin().float()


def rope(x, pos):
    """Rotate-half RoPE of x [T, H, D] at positions pos [T]."""
    cos, sin = _COS[pos][:, None, :], _SIN[pos][:, None, :]
    a, b = x[..., :_HALF], x[..., _HALF:]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)


def position_mask(spos, n):
    """[HKV, n] bool: True at the positions listed in spos [HKV, S] (-1 ignored)."""
    m = torch.zeros(HKV, n + 1, dtype=torch.bool)
    m.scatter_(1, spos + 1, True)
    return m[:, 1:]


def attention(q, k, v, mask):
    """GQA attention: q [T, HQ, D], k/v [HKV, S, D], mask [HKV, T, S] bool."""
    qg = q.view(q.shape[0], HKV, G, D)
    s = torch.einsum("thgd,hsd->hgts", qg, k) / math.sqrt(D)
    s = s.masked_fill(~mask[:, None], float("-inf"))
    p = torch.softmax(s, dim=-1)
    return torch.einsum("hgts,hsd->thgd", p, v).reshape(q.shape[0], HQ, D)


class Model:
    def __init__(self):
        g = torch.Generator().manual_seed(7)

        def w(*shape):
            return torch.randn(*shape, generator=g) / math.sqrt(shape[0])

        self.emb = torch.randn(VOCAB, DM, generator=g)
        self.layers = [dict(q=w(DM, HQ * D), k=w(DM, HKV * D), v=w(DM, HKV * D),
                            o=w(HQ * D, DM), f1=w(DM, FF), f2=w(FF, DM)) for _ in range(L)]
        self.out = w(DM, VOCAB)

    def forward(self, tokens, pos, attend):
        """tokens, pos [T]; attend(layer, q, k, v) -> [T, HQ, D]."""
        h = self.emb[tokens]
        for l, p in enumerate(self.layers):
            x = rms(h)
            q = rope((x @ p["q"]).view(-1, HQ, D), pos)
            k = rope((x @ p["k"]).view(-1, HKV, D), pos)
            v = (x @ p["v"]).view(-1, HKV, D)
            h = h + attend(l, q, k, v).reshape(-1, HQ * D) @ p["o"]
            h = h + torch.relu(rms(h) @ p["f1"]) @ p["f2"]
        return rms(h) @ self.out


class SlotReuseEngine:
    """kve_state + kve_cache_write into paged NHD caches; full caches kept
    alongside as the reference."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.state = kvevict.State(ctx, max_seqs=ROWS, n_layers=L, n_heads=HKV, budget=B,
                                   window=W, interval=R, max_slots=MAX_SLOTS, seed=SEED,
                                   tensors="torch")
        n_blocks = ROWS * BPR + 3
        self.k = [torch.zeros(n_blocks, BS, HKV, D) for _ in range(L)]
        self.v = [torch.zeros(n_blocks, BS, HKV, D) for _ in range(L)]
        perm = torch.randperm(n_blocks, generator=torch.Generator().manual_seed(1))
        self.block_table = perm[:ROWS * BPR].view(ROWS, BPR).to(torch.int32)
        self.table = self.state.slot_table()  # live view of the state's tables
        self.full_k = [None] * ROWS
        self.full_v = [None] * ROWS
        self.resident = [None] * ROWS  # [L, HKV, MAX_SLOTS]: last position written per slot
        self.max_err = self.max_err_stock = 0.0
        self.max_extra = 0

    def admit(self, row, seq_id, prompt_len):
        self.state.admit(row, seq_id, prompt_len)
        self.full_k[row] = torch.zeros(L, HKV, prompt_len + STEPS + 1, D)
        self.full_v[row] = torch.zeros(L, HKV, prompt_len + STEPS + 1, D)
        self.resident[row] = torch.full((L, HKV, MAX_SLOTS), -1, dtype=torch.long)

    def retire(self, row):
        self.state.retire(row)

    def begin(self, rows, n_new, pos):
        self.mapping = self.state.append(rows, n_new)
        self.segments, a = [], 0
        for r, n in zip(rows, n_new):
            self.segments.append((r, a, a + n, self.state.seq(r).n_used))
            a += n
        self.token_row = torch.tensor([r for r, n in zip(rows, n_new) for _ in range(n)],
                                      dtype=torch.int32)
        self.pos = pos

    def attend(self, l, q, k, v):
        kvevict.cache_write(self.ctx, [k, v], [self.k[l], self.v[l]],
                            self.state.layer_slots(self.mapping, l), self.token_row,
                            block_table=self.block_table)
        slots = self.state.layer_slots(self.mapping, l).long().expand(-1, HKV)
        heads = torch.arange(HKV).expand_as(slots)
        outs = []
        for r, a, b, used in self.segments:
            pos = self.pos[a:b]
            self.full_k[r][l][:, pos] = k[a:b].transpose(0, 1)
            self.full_v[r][l][:, pos] = v[a:b].transpose(0, 1)
            sl, hd = slots[a:b], heads[a:b]
            ok = sl >= 0
            self.resident[r][l][hd[ok], sl[ok]] = pos[:, None].expand_as(sl)[ok]
            # Paged: one length per sequence, the head's empty slots masked.
            s = torch.arange(used)
            blocks = self.block_table[r, s // BS].long()
            kp = self.k[l][blocks, s % BS].transpose(0, 1)  # [HKV, used, D]
            vp = self.v[l][blocks, s % BS].transpose(0, 1)
            spos = self.table[r, l, :, :used].long()  # [HKV, used]
            mask = (spos[:, None, :] >= 0) & (spos[:, None, :] <= pos[None, :, None])
            out = attention(q[a:b], kp, vp, mask)
            # Reference: the full cache, masked to the positions the heads keep.
            n = int(pos.max()) + 1
            keep = position_mask(spos, n)
            causal = torch.arange(n)[None, :] <= pos[:, None]
            ref = attention(q[a:b], self.full_k[r][l][:, :n], self.full_v[r][l][:, :n],
                            keep[:, None, :] & causal[None])
            self.max_err = max(self.max_err, float((out - ref).abs().max()))
            # A stock kernel: the first `used` slots, no mask but causality.
            held = self.resident[r][l][:, :used]
            stock = attention(q[a:b], kp, vp, held[:, None, :] <= pos[None, :, None])
            phys = position_mask(held, n)
            ref = attention(q[a:b], self.full_k[r][l][:, :n], self.full_v[r][l][:, :n],
                            phys[:, None, :] & causal[None])
            self.max_err_stock = max(self.max_err_stock, float((stock - ref).abs().max()))
            extra = int(((held >= 0) & (spos < 0)).sum(1).max())
            self.max_extra = max(self.max_extra, extra)
            outs.append(out)
        return torch.cat(outs)


class CompactionEngine:
    """kve_evict + kve_compact on contiguous caches, appending after the kept tokens."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.k = torch.zeros(ROWS, L, HKV, MAX_SLOTS, D)
        self.v = torch.zeros(ROWS, L, HKV, MAX_SLOTS, D)
        self.table = np.full((ROWS, L, HKV, MAX_SLOTS), -1, np.int32)
        self.count = [0] * ROWS
        self.info = [None] * ROWS  # (seq_id, prompt_len, capacity, rounds)

    def admit(self, row, seq_id, prompt_len):
        c = kvevict.capacity(prompt_len, budget=B, window=W, interval=R)
        self.info[row] = [seq_id, prompt_len, c, 0]
        self.table[row] = -1
        self.count[row] = 0

    def retire(self, row):
        self.info[row] = None

    def begin(self, rows, n_new, pos):
        slots, a = [], 0
        for r, n in zip(rows, n_new):
            seq_id, prompt_len, c, rounds = self.info[r]
            if self.count[r] + n > c:  # heads full: evict one round, compact
                assert n == 1 and self.count[r] == c
                t, kc, vc = self.table[r:r + 1], self.k[r:r + 1], self.v[r:r + 1]
                ev, n_ev = kvevict.evict(self.ctx, t, [(seq_id, prompt_len, rounds)], seed=SEED,
                                         budget=B, window=W, n_slots=c)
                kvevict.compact(self.ctx, t, ev, n_ev, [kc, vc], n_slots=c)
                self.count[r] = c - R
                self.info[r][3] += 1
            for i in range(n):
                self.table[r, :, :, self.count[r] + i] = int(pos[a + i])
                slots.append([self.count[r] + i])
            self.count[r] += n
            a += n
        self.rows, self.n_new, self.pos = rows, n_new, pos
        self.slots = torch.tensor(slots, dtype=torch.int64)
        self.token_row = torch.tensor([r for r, n in zip(rows, n_new) for _ in range(n)],
                                      dtype=torch.int32)

    def attend(self, l, q, k, v):
        kvevict.cache_write(self.ctx, [k, v], [self.k[:, l], self.v[:, l]], self.slots,
                            self.token_row, layout="contiguous")
        outs, a = [], 0
        for r, n in zip(self.rows, self.n_new):
            pos = self.pos[a:a + n]
            c = self.count[r]
            spos = torch.from_numpy(self.table[r, l, :, :c]).long()
            mask = spos[:, None, :] <= pos[None, :, None]
            outs.append(attention(q[a:a + n], self.k[r, l, :, :c], self.v[r, l, :, :c], mask))
            a += n
        return torch.cat(outs)


def run(engine, model, tokens, log):
    """Teacher-forced decode; returns the logits of every step."""
    active, n_tok, out = {}, {}, []
    for step in range(STEPS + 1):
        for s, r, sid, p in ADMIT:
            if s == step:
                engine.admit(r, sid, p)
                active[r], n_tok[r] = (sid, p), 0
        for s, r in RETIRE:
            if s == step:
                engine.retire(r)
                del active[r]
        rows = sorted(active)
        n_new = [active[r][1] if n_tok[r] == 0 else 1 for r in rows]
        pos = torch.tensor([n_tok[r] + i for r, n in zip(rows, n_new) for i in range(n)])
        ids = torch.tensor([tokens[active[r][0]][n_tok[r] + i]
                            for r, n in zip(rows, n_new) for i in range(n)])
        engine.begin(rows, n_new, pos)
        out.append(model.forward(ids, pos, engine.attend))
        for r, n in zip(rows, n_new):
            n_tok[r] += n
        if step % 250 == 0:
            log("  step %d" % step)
    return out


def main():
    torch.set_num_threads(1)
    t0 = time.time()
    ctx = kvevict.Context("cpu", threads=1)
    model = Model()
    rng = np.random.default_rng(3)
    tokens = {sid: rng.integers(0, VOCAB, p + STEPS + 1).tolist() for _, _, sid, p in ADMIT}
    log = lambda m: print(m, flush=True)  # noqa: E731
    log("slot reuse (paged NHD, kve_state + kve_cache_write)")
    a = SlotReuseEngine(ctx)
    out_a = run(a, model, tokens, log)
    log("compaction (contiguous, kve_evict + kve_compact)")
    b = CompactionEngine(ctx)
    out_b = run(b, model, tokens, log)

    failures = []
    rounds = a.state.seq(0).round
    log("row 0: %d tokens, %d eviction rounds" % (a.state.seq(0).n_tokens, rounds))
    if rounds < 100:
        failures.append("only %d eviction rounds" % rounds)
    log("paged attention vs full cache masked to the kept set: max abs error %.3g" % a.max_err)
    if not a.max_err <= TOL:
        failures.append("slot reuse differs from the masked full cache by %g" % a.max_err)
    log("stock kernel (no mask) vs full cache masked to the slots' contents: %.3g, up to %d "
        "evicted tokens still held per head" % (a.max_err_stock, a.max_extra))
    if not a.max_err_stock <= TOL:
        failures.append("stock attention differs from the resident set by %g" % a.max_err_stock)
    if not 0 < a.max_extra <= R - 1:
        failures.append("%d evicted tokens visible to a stock kernel, expected 1..r-1"
                        % a.max_extra)
    diff = max(float((x - y).abs().max()) for x, y in zip(out_a, out_b))
    log("slot reuse vs compaction logits: max abs difference %.3g" % diff)
    if not diff <= TOL:
        failures.append("compaction differs from slot reuse by %g" % diff)
    for r in range(ROWS):
        tables = a.state.slots(r)
        for l in range(L):
            for h in range(HKV):
                kept_a = sorted(p for p in tables[l, h] if p >= 0)
                kept_b = sorted(p for p in b.table[r, l, h] if p >= 0)
                if kept_a != kept_b:
                    failures.append("row %d layer %d head %d: kept sets differ" % (r, l, h))
    log("%.1f s" % (time.time() - t0))
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
