#!/usr/bin/python3
"""A small random-weight transformer decoding over a kvevict-managed paged
cache, read the way a stock attention kernel reads it.

4 layers, 4 KV heads, 8 query heads (GQA groups of 2), head_dim 64, RoPE
applied before caching; budget 48, window 8, interval 8; a vLLM-style NHD
paged cache (block size 16, a block table, blocks per request capped at the
sequence's capacity). Every page starts filled with a sentinel pattern that
stands for another request's K/V, and so does every page a retired or
preempted request gives back.

Each step appends the batch's tokens (kve_state_append into persistent step
buffers), and in every layer kve_cache_write runs the step's moves and
writes the new K/V rows. Attention is then computed exactly as a stock
kernel computes it (vLLM's flash-attention with seqused_k, FlashInfer's
paged prefill/decode): per sequence one KV length, n_valid, read from
slots 0 .. n_valid-1 of every head, with a bottom-right causal mask on slot
order and no other mask. At every layer and step it must equal attention
over the full, never-evicted cache masked to the positions the state's
tables keep (max abs error <= 1e-5), and no sentinel entry may ever be
attended.

Speculative steps (issue 38, deliverable 5): now and then a step carries,
per sequence, a seeded random number of draft tokens (State.draft: the
draft slots capacity + i, outside the tables), verified by attention over
the row's n_valid slots plus its draft slots, causal among the drafts, and
compared to the dense reference over the kept history plus the drafts (no
sentinel attended); a random accepted prefix is committed by an ordinary
append, its entries copied from the draft slots by one cache_write
(src_slots) that also runs the append's moves; later steps read them back.

The run covers one-token steps and steps of 2..8 tokens per sequence (some
straddling a round), prefills inside decode steps, admissions, retirements
and row reuse, a preemption by swap (blocks saved, the row rebuilt from its
history into another row, blocks restored) and one by recompute (the row
rebuilt with a mapping into sentinel-filled pages, every kept position's
K/V rewritten from a recompute prefill), in two modes: fresh per-head keys,
and persistent keys with shared heads.
"""

import math
import os
import sys
import time

import numpy as np
import torch

import kvevict

L, HKV, G, D = 4, 4, 2, 64
HQ, DM, FF, VOCAB = HKV * G, 128, 256, 101
B, W, R = 48, 8, 8
BS, BPR, ROWS = 16, 4, 3  # block size, blocks per row, state rows
MAX_SLOTS = BS * BPR
MAX_NEW = 8
MAX_DRAFT = 6  # draft slots after each row's capacity (<= 56): within its BPR blocks
STEPS = int(os.environ.get("KVE_DECODE_STEPS", "1000"))
TOL = 1e-5
SENTINEL = 1.0e4
# (step, seq_id, prompt_len) admissions into the lowest free row; retirements by seq_id
ADMIT = [(0, 11, 16), (0, 12, 9), (150, 13, 11), (700, 14, 20)]
RETIRE = [(600, 13)]
SWAP = (620, 12, 660)      # seq 12 swapped out at step 620, back in another row at 660
RECOMPUTE = (500, 11)      # seq 11 rebuilt by recompute at step 500
MAXPOS = STEPS * MAX_NEW + 64


def rms(x):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


_HALF = D // 2
_ANG = torch.arange(MAXPOS, dtype=torch.float64)[:, None] / (
    10000 ** (torch.arange(_HALF, dtype=torch.float64) / _HALF))[None, :]
_COS, _SIN = _ANG.cos().float(), _ANG.sin().float()


_TABLES = {}


def rope_tables(dev):
    """The cos and sin tables on device @dev (copied there once)."""
    key = str(dev)
    if key not in _TABLES:
        _TABLES[key] = (_COS.to(dev), _SIN.to(dev))
    return _TABLES[key]


def rope(x, pos):
    """Rotate-half RoPE of x [T, H, D] at positions pos [T] (pos on x's device:
    the tables are indexed where they live)."""
    cos_t, sin_t = rope_tables(x.device)
    pos = pos.to(x.device)
    cos, sin = cos_t[pos][:, None, :], sin_t[pos][:, None, :]
    a, b = x[..., :_HALF], x[..., _HALF:]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)


def attention(q, k, v, mask):
    """GQA attention: q [T, HQ, D], k/v [HKV, S, D], mask [HKV, T, S] bool."""
    qg = q.view(q.shape[0], HKV, G, D)
    s = torch.einsum("thgd,hsd->hgts", qg, k) / math.sqrt(D)
    s = s.masked_fill(~mask[:, None], float("-inf"))
    p = torch.softmax(s, dim=-1)
    return torch.einsum("hgts,hsd->thgd", p, v).reshape(q.shape[0], HQ, D)


def stock_mask(t, n, dev):
    """A stock kernel's mask: query j of t attends slots 0 .. n - t + j (bottom-right)."""
    return (torch.arange(n, device=dev)[None, :] <= (n - t + torch.arange(t, device=dev))[:, None])


class Model:
    def __init__(self, dev):
        g = torch.Generator().manual_seed(7)

        def w(*shape):
            return (torch.randn(*shape, generator=g) / math.sqrt(shape[0])).to(dev)

        self.emb = torch.randn(VOCAB, DM, generator=g).to(dev)
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


class Engine:
    """kve_state + kve_cache_write over paged NHD caches read by a stock
    kernel; the full caches of every sequence kept alongside as the
    reference."""

    def __init__(self, ctx, model, dev, **mode):
        self.ctx, self.model, self.dev = ctx, model, dev
        cap = kvevict.capacity(max(p for *_, p in ADMIT), budget=B, window=W, interval=R)
        self.state = kvevict.State(ctx, max_seqs=ROWS, n_layers=L, n_heads=HKV, budget=B,
                                   window=W, interval=R, max_slots=MAX_SLOTS, seed=2609,
                                   pool_slots=ROWS * cap, tensors="torch",
                                   max_draft=MAX_DRAFT, **mode)
        self.dstep = self.state.step_buffers(max_tokens=ROWS * MAX_DRAFT, max_rows=ROWS,
                                             max_new=1)
        self.step = self.state.step_buffers(max_tokens=ROWS * 48, max_rows=ROWS,
                                            max_new=48)
        n_blocks = ROWS * BPR + 5
        self.k = [torch.full((n_blocks, BS, HKV, D), SENTINEL, device=dev) for _ in range(L)]
        self.v = [torch.full((n_blocks, BS, HKV, D), SENTINEL, device=dev) for _ in range(L)]
        perm = torch.randperm(n_blocks, generator=torch.Generator().manual_seed(1))
        self.block_table = perm[:ROWS * BPR].view(ROWS, BPR).to(torch.int32).to(dev)
        self.row_of = {}                      # seq_id -> row
        self.full_k, self.full_v = {}, {}     # seq_id -> [L, HKV, MAXPOS, D]
        self.history = {}                     # seq_id -> appends since admission
        self.max_err = 0.0
        self.attended = self.multi = self.straddled = self.moved = 0
        self.drafts = self.rejected = self.draft_rounds = 0

    def wipe(self, row):
        """The row's blocks go back to the pool: another request's data lands there."""
        blocks = self.block_table[row].long()
        for l in range(L):
            self.k[l][blocks] = SENTINEL
            self.v[l][blocks] = SENTINEL

    def admit(self, seq_id, prompt_len):
        row = min(set(range(ROWS)) - set(self.row_of.values()))
        self.state.admit(row, seq_id, prompt_len)
        self.row_of[seq_id] = row
        self.full_k[seq_id] = torch.zeros(L, HKV, MAXPOS, D, device=self.dev)
        self.full_v[seq_id] = torch.zeros(L, HKV, MAXPOS, D, device=self.dev)
        self.history[seq_id] = []

    def retire(self, seq_id):
        row = self.row_of.pop(seq_id)
        self.state.retire(row)
        self.wipe(row)

    def swap_out(self, seq_id):
        row = self.row_of.pop(seq_id)
        blocks = self.block_table[row].long()
        saved = ([self.k[l][blocks].clone() for l in range(L)],
                 [self.v[l][blocks].clone() for l in range(L)], self.state.seq(row))
        self.state.retire(row)
        self.wipe(row)
        return saved

    def swap_in(self, seq_id, saved):
        """Rebuild from the appends' history into a free row, restore the blocks."""
        ks, vs, info = saved
        row = max(set(range(ROWS)) - set(self.row_of.values()))  # not the row it left
        self.state.rebuild(row, seq_id, info.prompt_len, info.n_tokens,
                           steps=self.history[seq_id])
        blocks = self.block_table[row].long()
        for l in range(L):
            self.k[l][blocks] = ks[l]
            self.v[l][blocks] = vs[l]
        self.row_of[seq_id] = row

    def recompute(self, seq_id, tokens):
        """Drop the row's pages, rebuild with a mapping, rewrite every kept
        position's K/V from a recompute prefill over the whole history."""
        row = self.row_of[seq_id]
        info = self.state.seq(row)
        self.wipe(row)
        mapping = self.state.rebuild(row, seq_id, info.prompt_len, info.n_tokens, mapping=True,
                                     steps=self.history[seq_id])
        n = info.n_tokens
        pos = torch.arange(n, device=self.dev)
        ids = torch.tensor(tokens[:n], device=self.dev)
        token_row = torch.full((n,), row, dtype=torch.int32, device=self.dev)
        causal = pos[None, :] <= pos[:, None]

        def attend(l, q, k, v):
            kvevict.cache_write(self.ctx, [k, v], [self.k[l], self.v[l]],
                                self.state.layer_slots(mapping, l), token_row,
                                block_table=self.block_table)
            self.full_k[seq_id][l][:, :n] = k.transpose(0, 1)
            self.full_v[seq_id][l][:, :n] = v.transpose(0, 1)
            return attention(q, k.transpose(0, 1), v.transpose(0, 1),
                             causal[None].expand(HKV, -1, -1))

        self.model.forward(ids, pos, attend)

    def begin(self, seqs, n_new, pos):
        rows = [self.row_of[s] for s in seqs]
        before = [self.state.seq(r) for r in rows]
        self.state.append(rows, n_new, out=self.step)
        self.segments, a = [], 0
        for s, r, n, info in zip(seqs, rows, n_new, before):
            self.history[s].append(n)
            after = self.state.seq(r)
            self.segments.append((s, r, a, a + n, after.n_valid))
            self.multi += n > 1
            room = info.capacity - info.n_valid  # tokens it places before a round
            self.straddled += 0 < room < n
            a += n
        self.moved += int(self.step.n_moves[:, :len(rows)].sum())
        self.rows = torch.tensor(rows, dtype=torch.int32, device=self.dev)
        self.token_row = torch.tensor([r for r, n in zip(rows, n_new) for _ in range(n)],
                                      dtype=torch.int32, device=self.dev)
        self.pos = pos

    def do_kv_cache_update(self, l, k, v):
        """What a vLLM attention backend's do_kv_cache_update becomes: the
        step's moves, then the new K/V at each head's slot."""
        st = self.state
        kvevict.cache_write(self.ctx, [k, v], [self.k[l], self.v[l]], st.layer_slots(self.step, l),
                            self.token_row, block_table=self.block_table, move_row=self.rows,
                            **st.layer_moves(self.step, l))

    def attend(self, l, q, k, v):
        self.do_kv_cache_update(l, k, v)
        st = self.state
        outs = []
        tl = l if st.table_layers > 1 else 0
        for s, r, a, b, n in self.segments:
            pos = self.pos[a:b]
            t = b - a
            self.full_k[s][l][:, pos] = k[a:b].transpose(0, 1)
            self.full_v[s][l][:, pos] = v[a:b].transpose(0, 1)
            # The stock kernel: slots 0 .. n-1 of each head, bottom-right causal, nothing else.
            slot = torch.arange(n, device=self.dev)
            blocks = self.block_table[r, slot // BS].long()
            kp = self.k[l][blocks, slot % BS].transpose(0, 1)  # [HKV, n, D]
            vp = self.v[l][blocks, slot % BS].transpose(0, 1)
            mask = stock_mask(t, n, self.dev)
            seen = mask.any(0)  # slots some query attends
            if bool(((kp == SENTINEL).all(-1) | (vp == SENTINEL).all(-1))[:, seen].any()):
                raise AssertionError("seq %d layer %d: a stock kernel attends a sentinel entry"
                                     % (s, l))
            self.attended += int(seen.sum())
            out = attention(q[a:b], kp, vp, mask[None].expand(HKV, -1, -1))
            # Reference: the full cache, masked to the positions the heads keep.
            top = int(pos.max()) + 1
            spos = st.row_table(r)[tl, :, :n].long().expand(HKV, -1)  # live tables, [HKV, n]
            keep = torch.zeros(HKV, top + 1, dtype=torch.bool, device=self.dev)
            keep.scatter_(1, spos + 1, True)
            keep = keep[:, 1:]
            causal = torch.arange(top, device=self.dev)[None, :] <= pos[:, None]
            ref = attention(q[a:b], self.full_k[s][l][:, :top], self.full_v[s][l][:, :top],
                            keep[:, None, :] & causal[None])
            self.max_err = max(self.max_err, float((out - ref).abs().max()))
            outs.append(out)
        return torch.cat(outs)


class Speculation:
    """One speculative step of an Engine: drafts written to the draft
    slots and verified, then the accepted prefix committed."""

    def __init__(self, engine, seqs, n_draft, pos):
        e = self.e = engine
        self.rows = [e.row_of[s] for s in seqs]
        self.info = [e.state.seq(r) for r in self.rows]
        e.state.draft(self.rows, n_draft, out=e.dstep)
        self.segments, a = [], 0
        for s, r, n, info in zip(seqs, self.rows, n_draft, self.info):
            assert info.draft_first == info.capacity and info.max_draft == MAX_DRAFT
            self.segments.append((s, r, a, a + n, info))
            e.draft_rounds += info.n_valid + n > info.capacity  # the drafts reached a round
            a += n
        self.token_row = torch.tensor([r for r, n in zip(self.rows, n_draft) for _ in range(n)],
                                      dtype=torch.int32, device=e.dev)
        self.pos = pos

    def attend(self, l, q, k, v):
        """Verification: each row's n_valid slots and its draft slots, causal
        among the drafts, against the dense reference (kept history plus
        the drafts)."""
        e, st = self.e, self.e.state
        kvevict.cache_write(e.ctx, [k, v], [e.k[l], e.v[l]], st.layer_slots(e.dstep, l),
                            self.token_row, block_table=e.block_table)
        tl = l if st.table_layers > 1 else 0
        outs = []
        for s, r, a, b, info in self.segments:
            pos, t, n = self.pos[a:b], b - a, info.n_valid
            e.full_k[s][l][:, pos] = k[a:b].transpose(0, 1)
            e.full_v[s][l][:, pos] = v[a:b].transpose(0, 1)
            slot = torch.cat([torch.arange(n, device=e.dev),
                              info.capacity + torch.arange(t, device=e.dev)])
            blocks = e.block_table[r, slot // BS].long()
            kp = e.k[l][blocks, slot % BS].transpose(0, 1)
            vp = e.v[l][blocks, slot % BS].transpose(0, 1)
            mask = stock_mask(t, n + t, e.dev)  # the drafts are the last t slots
            if bool(((kp == SENTINEL).all(-1) | (vp == SENTINEL).all(-1)).any()):
                raise AssertionError("seq %d layer %d: verification attends a sentinel entry"
                                     % (s, l))
            e.attended += n + t
            out = attention(q[a:b], kp, vp, mask[None].expand(HKV, -1, -1))
            top = int(pos.max()) + 1
            spos = st.row_table(r)[tl, :, :n].long().expand(HKV, -1)
            keep = torch.zeros(HKV, top + 1, dtype=torch.bool, device=e.dev)
            keep.scatter_(1, spos + 1, True)
            keep = keep[:, 1:]
            keep[:, pos] = True  # the drafts
            causal = torch.arange(top, device=e.dev)[None, :] <= pos[:, None]
            ref = attention(q[a:b], e.full_k[s][l][:, :top], e.full_v[s][l][:, :top],
                            keep[:, None, :] & causal[None])
            e.max_err = max(e.max_err, float((out - ref).abs().max()))
            outs.append(out)
        return torch.cat(outs)

    def commit(self, seqs, n_accept):
        """The accepted prefix: an append, then per layer one cache_write of
        the append's moves and the entries copied from the draft slots."""
        e, st = self.e, self.e.state
        st.append(self.rows, n_accept, out=e.step)
        for s, n, (_, _, a, b, _) in zip(seqs, n_accept, self.segments):
            e.history[s].append(n)
            e.drafts += b - a
            e.rejected += b - a - n
        e.moved += int(e.step.n_moves[:, :len(self.rows)].sum())
        total = int(sum(n_accept))
        token_row = torch.tensor([r for r, n in zip(self.rows, n_accept) for _ in range(n)],
                                 dtype=torch.int32, device=e.dev)
        first = [info.capacity + i for info, n in zip(self.info, n_accept) for i in range(n)]
        dummy = torch.empty(total, HKV, D, device=e.dev)  # shapes only: not read
        assert total or not int(e.step.n_moves[:, :len(self.rows)].sum())  # no token, no round
        for l in range(L if total else 0):
            slots = st.layer_slots(e.step, l)
            src = torch.tensor(first, dtype=torch.int64, device=e.dev)[:, None].expand(
                -1, slots.shape[1]).contiguous()
            kvevict.cache_write(e.ctx, [dummy, dummy], [e.k[l], e.v[l]], slots, token_row,
                                block_table=e.block_table, move_row=torch.tensor(
                                    self.rows, dtype=torch.int32, device=e.dev),
                                src_slots=src, **st.layer_moves(e.step, l))


def run(engine, model, tokens, rng, log):
    """Teacher-forced decode; returns the failures."""
    n_tok, swapped = {}, None
    for step in range(STEPS):
        for s, sid, p in ADMIT:
            if s == step:
                engine.admit(sid, p)
                n_tok[sid] = 0
        for s, sid in RETIRE:
            if s == step:
                engine.retire(sid)
                del n_tok[sid]
        if step == SWAP[0]:
            swapped = engine.swap_out(SWAP[1])
        if step == SWAP[2]:
            engine.swap_in(SWAP[1], swapped)
        if step == RECOMPUTE[0]:
            engine.recompute(RECOMPUTE[1], tokens[RECOMPUTE[1]])
        seqs = sorted(engine.row_of, key=lambda s: engine.row_of[s])
        rng.shuffle(seqs)  # the batch in any row order
        prompts = {s: p for _, s, p in ADMIT}
        n_new = [prompts[s] if n_tok[s] == 0 else
                 int(rng.integers(2, MAX_NEW + 1)) if rng.random() < 0.3 else 1 for s in seqs]
        pos = torch.tensor([n_tok[s] + i for s, n in zip(seqs, n_new) for i in range(n)],
                           device=engine.dev)
        ids = torch.tensor([tokens[s][n_tok[s] + i] for s, n in zip(seqs, n_new)
                            for i in range(n)], device=engine.dev)
        if all(n_tok[s] for s in seqs) and rng.random() < 0.2:
            # speculative: 1..MAX_DRAFT tokens a row (the last sampled one and
            # its drafts), a random accepted prefix of them committed
            n_draft = [int(rng.integers(1, MAX_DRAFT + 1)) for _ in seqs]
            n_acc = [int(rng.integers(0, n + 1)) for n in n_draft]
            pos = torch.tensor([n_tok[s] + i for s, n in zip(seqs, n_draft) for i in range(n)],
                               device=engine.dev)
            ids = torch.tensor([tokens[s][n_tok[s] + i] for s, n in zip(seqs, n_draft)
                                for i in range(n)], device=engine.dev)
            spec = Speculation(engine, seqs, n_draft, pos)
            model.forward(ids, pos, spec.attend)
            spec.commit(seqs, n_acc)
            n_new = n_acc
        else:
            engine.begin(seqs, n_new, pos)
            model.forward(ids, pos, engine.attend)
        for s, n in zip(seqs, n_new):
            n_tok[s] += n
        if step % 250 == 0:
            log("  step %d" % step)
    failures = []
    if engine.max_err > TOL:
        failures.append("stock-kernel attention differs from the masked full cache by %g"
                        % engine.max_err)
    # coverage at the default length (a short run, as under memcheck, checks the rest)
    if STEPS >= 1000 and (engine.multi < 150 or engine.straddled < 20 or engine.moved < 1000):
        failures.append("coverage: %d multi-token appends, %d across a round, %d moves"
                        % (engine.multi, engine.straddled, engine.moved))
    if STEPS >= 1000 and (engine.drafts < 500 or engine.rejected < 100
                          or engine.draft_rounds < 20):
        failures.append("coverage: %d drafts, %d rejected, %d draft steps reaching a round"
                        % (engine.drafts, engine.rejected, engine.draft_rounds))
    return failures


def main():
    """argv: --device cpu, cuda or all (default: the CPU, and CUDA when torch
    sees a GPU). --device cuda without one exits 77 (ctest: skipped)."""
    torch.set_num_threads(1)
    t0 = time.time()
    want = sys.argv[sys.argv.index("--device") + 1] if "--device" in sys.argv else "all"
    if want not in ("cpu", "cuda", "all"):
        print("usage: test_decode_loop.py [--device cpu|cuda|all]")
        return 2
    if want == "cuda" and not torch.cuda.is_available():
        print("no CUDA device for torch: skipped")
        return 77
    devices = {"cpu": ["cpu"], "cuda": ["cuda"],
               "all": ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])}[want]
    failures = []
    log = lambda m: print(m, flush=True)  # noqa: E731
    for dev in devices:
        ctx = kvevict.Context("cpu" if dev == "cpu" else "auto", threads=1)
        model = Model(dev)
        rng = np.random.default_rng(3)
        tokens = {sid: rng.integers(0, VOCAB, MAXPOS).tolist() for _, sid, _ in ADMIT}
        for name, mode in (("fresh per-head keys", {}),
                           ("persistent keys, shared heads",
                            dict(persistent=True, shared_heads=True))):
            log("%s, %s: %d steps" % (dev, name, STEPS))
            e = Engine(ctx, model, dev, **mode)
            fails = run(e, model, tokens, np.random.default_rng(5), log)
            rounds = max(e.state.seq(r).round for r in e.row_of.values())
            log("  stock kernel vs full cache masked to the keep-set: max abs error %.3g; "
                "%d slots attended, no sentinel; %d multi-token appends (%d across a round), "
                "%d moves, up to %d rounds; %d drafts (%d rejected, %d reaching a round)"
                % (e.max_err, e.attended, e.multi, e.straddled, e.moved, rounds, e.drafts,
                   e.rejected, e.draft_rounds))
            if STEPS >= 1000 and rounds < 100:
                fails.append("only %d eviction rounds" % rounds)
            failures += ["%s, %s: %s" % (dev, name, f) for f in fails]
    log("%.1f s" % (time.time() - t0))
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
