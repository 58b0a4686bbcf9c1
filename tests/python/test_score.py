#!/usr/bin/python3
"""kvevict's scorers against the independent float64 reference of score_ref.py.

The keys and queries come from a tiny random-weight transformer decoding in
torch (2 layers, 2 KV heads, GQA groups of 2, head_dim 32, RoPE before the
cache): the calibration statistics are computed from its pre-RoPE queries
on one sequence, the keys scored are its post-RoPE keys on another.

Tolerances (docs/SCORERS.md): a raw score within 1e-5 x the sum of its
terms' magnitudes (+1e-5); a z-normalized score within that over the
candidates' std (+1e-5). K-norm within 1e-5 relative. The candidates are
exactly SPEC §3's (zeros elsewhere, exactly).
"""

import os
import sys
import tempfile

import numpy as np
import torch

import kvevict
from score_ref import (candidates, knorm_raw, omega_of, table_scores, tri_raw, tri_terms)

L, HKV, G, D = 2, 2, 2, 32
HQ, DM, VOCAB, THETA = HKV * G, 64, 97, 10000.0
NF = D // 2
FAILS = []


def expect(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL:", what)


def rope(x, pos):
    """HF's rotate-half RoPE of x [..., n, D] at positions [n]."""
    om = torch.tensor(omega_of(D, THETA), dtype=torch.float64)
    ang = pos.double()[:, None] * om[None, :]
    c, s = torch.cos(ang).to(x.dtype), torch.sin(ang).to(x.dtype)
    x1, x2 = x[..., :NF], x[..., NF:]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


def decode(tokens, weights):
    """Run the model one token at a time; return pre-RoPE queries [L, HQ, T,
    D] and post-RoPE keys [L, HKV, T, D] (float32)."""
    emb, layers = weights
    T = len(tokens)
    qs = torch.zeros(L, HQ, T, D)
    ks = torch.zeros(L, HKV, T, D)
    vs = torch.zeros(L, HKV, T, D)
    with torch.no_grad():
        for t in range(T):
            x = emb[tokens[t]][None, :]
            pos = torch.tensor([t])
            for l, (wq, wk, wv, wo) in enumerate(layers):
                h = x / x.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt()
                q = (h @ wq).view(HQ, 1, D)
                k = (h @ wk).view(HKV, 1, D)
                v = (h @ wv).view(HKV, 1, D)
                qs[l, :, t] = q[:, 0]
                ks[l, :, t] = rope(k, pos)[:, 0]
                vs[l, :, t] = v[:, 0]
                qr = rope(q, pos)
                kk = ks[l, :, :t + 1].repeat_interleave(G, 0)
                att = torch.softmax((qr @ kk.transpose(1, 2)) / D ** 0.5, -1)
                o = att @ vs[l, :, :t + 1].repeat_interleave(G, 0)
                x = x + o.reshape(1, HQ * D) @ wo
    return qs, ks


def model():
    g = torch.Generator().manual_seed(7)
    emb = torch.randn(VOCAB, DM, generator=g)
    layers = []
    for _ in range(L):
        layers.append((torch.randn(DM, HQ * D, generator=g) / DM ** 0.5,
                       torch.randn(DM, HKV * D, generator=g) / DM ** 0.5 + 0.05,
                       torch.randn(DM, HKV * D, generator=g) / DM ** 0.5,
                       torch.randn(HQ * D, DM, generator=g) / (HQ * D) ** 0.5))
    return emb, layers


def to_dtype(x, name):
    t = torch.from_numpy(np.ascontiguousarray(x))
    return {"float32": t.float(), "bfloat16": t.bfloat16(), "float16": t.half()}[name]


def build_cache(keys_l, tabs, layout, rng):
    """A cache holding keys_l [HKV, T, D] (torch, its dtype) at the slots of
    tabs [rows, HKV, S] (-1 empty), in @layout; returns (cache tensor, kwargs)."""
    rows, _, S = tabs.shape
    ps = 8
    blocks = (S + ps - 1) // ps
    n_pages = rows * blocks + 3
    perm = rng.permutation(n_pages)[:rows * blocks].reshape(rows, blocks).astype(np.int32)
    nhd = layout in ("nhd", "flat")
    shape = (n_pages, ps, HKV, D) if nhd else (n_pages, HKV, ps, D)
    if layout == "contiguous":
        shape, ps = (rows, HKV, S, D), S
    cache = torch.full(shape, 1e4, dtype=keys_l.dtype)  # stands for other requests' keys
    kw = {}
    for r in range(rows):
        for h in range(HKV):
            for s in range(S):
                p = tabs[r, h, s]
                if p < 0:
                    continue
                if layout == "contiguous":
                    cache[r, h, s] = keys_l[h, p]
                    continue
                page = perm[r, s // ps] if layout != "flat" else r * blocks + s // ps
                if nhd:
                    cache[page, s % ps, h] = keys_l[h, p]
                else:
                    cache[page, h, s % ps] = keys_l[h, p]
    if layout == "nhd":
        kw = dict(block_table=perm)
    elif layout == "hnd":
        indptr = np.arange(0, rows * blocks + 1, blocks, dtype=np.int32)
        last = np.full(rows, S - (blocks - 1) * ps, dtype=np.int32)
        kw = dict(indptr=indptr, indices=perm.reshape(-1).copy(), last_page_len=last)
    elif layout == "flat":
        kw = dict(flat=True, cache_row=[r * blocks for r in range(rows)])
    lay = {"flat": "nhd", "contiguous": "contiguous"}.get(layout, layout)
    return cache, lay, kw


def random_tables(rng, rows, S, T, heads=HKV):
    """Slot tables [rows, heads, S]: each head holds a random subset of
    positions 0..T-1 in random slots, some slots empty."""
    tabs = np.full((rows, heads, S), -1, np.int32)
    for r in range(rows):
        for h in range(heads):
            n = rng.integers(S // 2, S)
            pos = np.sort(rng.choice(T, size=n, replace=False))
            pos[-8:] = np.arange(T - 8, T)  # the newest are always there, as in a state
            pos = np.unique(pos)
            slots = rng.choice(S, size=len(pos), replace=False)
            tabs[r, h, slots] = pos
    return tabs


def ref_tables(keys64, tabs, prompt, window, t0, stats, scorer, zn, shared):
    q_mean, q_abs = stats
    s2 = np.ones(NF)
    om = omega_of(D, THETA)
    offs = kvevict.default_offsets().astype(np.float64)
    rows, tables, S = tabs.shape
    out = np.zeros((rows, tables, S))
    for r in range(rows):
        for t in range(tables):
            hs = range(HKV) if shared else [t]
            heads = [(h, [h * G + j for j in range(G)] if scorer == "triattention" else [h])
                     for h in hs]

            def keys_of(h, slots, r=r, t=t):
                return keys64[h, tabs[r, t, slots]]

            def raw_of(h, j, k, pos, r=r):
                if scorer == "knorm":
                    return knorm_raw(k)
                return tri_raw(k, pos, t0[r], q_mean[j], q_abs[j], om, s2, offs)

            out[r, t] = table_scores(keys_of, tabs[r, t], prompt[r], window[r], heads, raw_of, zn)
    return out


def tolerance(keys64, tabs, prompt, window, stats, scorer, zn, shared, t0):
    """Per-table absolute tolerance of the stated rule."""
    q_mean, q_abs = stats
    rows, tables, S = tabs.shape
    tol = np.zeros((rows, tables, 1))
    for r in range(rows):
        for t in range(tables):
            mask = candidates(tabs[r, t], prompt[r], window[r])
            if not mask.any():
                continue
            worst = 0.0
            for h in (range(HKV) if shared else [t]):
                k = keys64[h, tabs[r, t, mask]]
                js = [h * G + j for j in range(G)] if scorer == "triattention" else [h]
                for j in js:
                    if scorer == "knorm":
                        raw, terms = knorm_raw(k), np.abs(knorm_raw(k))
                    else:
                        raw = tri_raw(k, tabs[r, t, mask], t0[r], q_mean[j], q_abs[j],
                                      omega_of(D, THETA), np.ones(NF),
                                      kvevict.default_offsets().astype(np.float64))
                        terms = tri_terms(k, q_mean[j], q_abs[j], np.ones(NF))
                    e = 1e-5 * terms.max() + 1e-5
                    worst = max(worst, e / max(raw.std(), 1e-6) + 1e-5 if zn else e)
            tol[r, t] = worst
    return tol


def check_case(ctx, qstats, keys, layer, dtype, layout, scorer, zn, shared, rng):
    rows, S, T = 3, 40, keys.shape[2]
    tabs = random_tables(rng, rows, S, T)
    if shared:
        tabs[:, 1:] = tabs[:, :1]
    kl = to_dtype(keys[layer].numpy(), dtype)
    keys64 = kl.double().numpy()
    cache, lay, kw = build_cache(kl, tabs, layout, rng)
    prompt, window, t0 = [5, 9, 0], [8, 4, 0], [T, T + 3, T]
    stats = (qstats[0][layer], qstats[1][layer])
    tab_in = np.ascontiguousarray(tabs[:, :1]) if shared else tabs
    got = kvevict.score(ctx, cache, tab_in, prompt_len=prompt, window=window, round_start=t0,
                        scorer=scorer, layout=lay, q_mean=stats[0], q_abs_mean=stats[1],
                        group=G, rope_theta=THETA, znorm=zn, shared_heads=shared, **kw)
    ref = ref_tables(keys64, tab_in, prompt, window, t0, stats, scorer, zn, shared)
    tol = tolerance(keys64, tab_in, prompt, window, stats, scorer, zn, shared, t0)
    err = np.abs(got - ref)
    name = "%s %s %s zn=%d shared=%d layer %d" % (scorer, dtype, layout, zn, shared, layer)
    expect(np.all(err <= tol), "%s: max err %.3g > tol (worst ratio %.3g)"
           % (name, err.max(), (err / tol.clip(1e-30)).max()))
    for r in range(rows):
        for t in range(tab_in.shape[1]):
            mask = candidates(tab_in[r, t], prompt[r], window[r])
            expect(np.all(got[r, t][~mask] == 0), "%s: non-candidate not 0" % name)
    return got


def test_layers_mean(ctx, qstats, keys, rng):
    """Mean over layers by accumulation with weight 1/L equals the mean of the
    per-layer z-scores, on one shared table (TriAttention's default mode)."""
    T = keys.shape[2]
    tabs = random_tables(rng, 2, 40, T, heads=1)
    out = np.zeros((2, 1, 40), np.float32)
    ref = 0
    for layer in range(L):
        kl = to_dtype(keys[layer].numpy(), "bfloat16")
        tabs_h = np.repeat(tabs, HKV, axis=1)
        cache, lay, kw = build_cache(kl, tabs_h, "nhd", rng)
        stats = (qstats[0][layer], qstats[1][layer])
        kvevict.score(ctx, cache, tabs, prompt_len=4, window=8, round_start=T, layout=lay,
                      q_mean=stats[0], q_abs_mean=stats[1], group=G, rope_theta=THETA,
                      shared_heads=True, out=out, accumulate=True, weight=1.0 / L, **kw)
        ref = ref + ref_tables(kl.double().numpy(), tabs, [4, 4], [8, 8], [T, T], stats,
                               "triattention", True, True) / L
    expect(np.abs(out - ref).max() < 1e-3, "mean over layers: max err %.3g"
           % np.abs(out - ref).max())


def test_stats_file(qstats):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "stats.bin")
        kvevict.write_triattention_stats(path, qstats[0], qstats[1], THETA)
        a = kvevict.read_triattention_stats(path)
        b = kvevict.load_triattention_stats(path)
        expect(np.array_equal(a[0], qstats[0]) and np.array_equal(a[1], qstats[1]),
               "numpy reader round trip")
        expect(np.array_equal(b[0], qstats[0]) and np.array_equal(b[1], qstats[1])
               and b[2] == THETA, "C loader round trip")
        data = open(path, "rb").read()
        bad = {"magic": b"X" + data[1:], "truncated": data[:-4], "trailing": data + b"\0",
               "version": data[:8] + b"\x02" + data[9:],
               "nan": data[:-4] + np.float32(np.nan).tobytes()}
        for what, blob in bad.items():
            open(path, "wb").write(blob)
            try:
                kvevict.load_triattention_stats(path)
                expect(False, "stats file with bad %s accepted" % what)
            except kvevict.KvevictError as e:
                expect(e.name == "KVE_ERR_INVALID" and "stats.bin" in e.message,
                       "bad %s: %s" % (what, e))


def test_errors(ctx, qstats, keys):
    kl = to_dtype(keys[0].numpy(), "float32")
    tabs = np.full((1, HKV, 8), -1, np.int32)
    cache = torch.zeros(1, HKV, 8, D)
    cases = [
        (dict(scorer="triattention", q_mean=qstats[0][0], q_abs_mean=qstats[1][0], group=G,
              rope_theta=0.5), "KVE_ERR_RANGE", "rope_theta"),
        (dict(scorer="triattention", q_mean=qstats[0][0], q_abs_mean=qstats[1][0], group=0,
              rope_theta=THETA), "KVE_ERR_RANGE", "group"),
        (dict(scorer="knorm", weight=float("inf")), "KVE_ERR_INVALID", "weight"),
        (dict(scorer="knorm", cache_row=[5]), "KVE_ERR_RANGE", "cache_row"),
    ]
    for kw, status, word in cases:
        try:
            kvevict.score(ctx, cache, tabs, prompt_len=0, window=0, layout="contiguous", **kw)
            expect(False, "accepted: %s" % word)
        except kvevict.KvevictError as e:
            expect(e.name == status and word in e.message, "%s: got %s" % (word, e))
    del kl


def test_state(ctx, qstats, keys):
    """State.score equals kvevict.score on the row's own tables, with the
    round's window (W less the tokens before the round) and t0."""
    T = keys.shape[2]
    st = kvevict.State(ctx, max_seqs=2, n_layers=L, n_heads=HKV, budget=24, window=8,
                       interval=8, max_slots=64)
    st.admit(0, 1, 10)
    st.admit(1, 2, 6)
    st.append([0, 1], [10, 6], outputs=False)
    n = 0
    while st.seq(0).n_valid < st.seq(0).capacity - 3:
        st.append([0, 1], [1, 1], outputs=False)
        n += 1
    info = st.seq(0)
    kl = to_dtype(keys[1].numpy()[:, :T], "bfloat16")
    tab0 = st.row_table(0)[1][None]  # [1, HKV, C]
    tab1 = st.row_table(1)[1][None]
    cap = max(tab0.shape[2], tab1.shape[2])
    tabs = np.full((2, HKV, cap), -1, np.int32)
    tabs[0, :, :tab0.shape[2]] = tab0[0]
    tabs[1, :, :tab1.shape[2]] = tab1[0]
    cache, lay, kw = build_cache(kl, tabs, "contiguous", np.random.default_rng(3))
    out = st.scores_buffer(2)
    stats = (qstats[0][1], qstats[1][1])
    st.score([0, 1], [4, 1], 1, cache, out, layout=lay, q_mean=stats[0], q_abs_mean=stats[1],
             group=G, rope_theta=THETA)
    before = info.capacity - info.n_valid
    direct = kvevict.score(ctx, cache, np.ascontiguousarray(tabs[:1, :, :tab0.shape[2]]),
                           prompt_len=info.prompt_len, window=8 - before,
                           round_start=info.n_tokens + before, layout=lay, q_mean=stats[0],
                           q_abs_mean=stats[1], group=G, rope_theta=THETA)
    got = out[0, HKV:2 * HKV, :tab0.shape[2]]
    expect(np.array_equal(got, direct[0]), "State.score row 0 != kvevict.score")
    expect(np.all(out[1] == 0), "State.score wrote a row with no round due")
    expect(np.all(out[0, :HKV] == 0), "State.score wrote another table layer")
    try:
        st.score([0], [12], 1, cache, out, layout=lay, q_mean=stats[0], q_abs_mean=stats[1],
                 group=G, rope_theta=THETA)
        expect(False, "a row receiving more than W tokens before its round accepted")
    except kvevict.KvevictError as e:
        expect(e.name == "KVE_ERR_INVALID" and "window" in e.message, str(e))
    del n


def main():
    torch.manual_seed(0)
    w = model()
    g = torch.Generator().manual_seed(11)
    calib = torch.randint(0, VOCAB, (96,), generator=g).tolist()
    scored = torch.randint(0, VOCAB, (80,), generator=g).tolist()
    q_cal, _ = decode(calib, w)
    _, keys = decode(scored, w)
    qstats = kvevict.triattention_stats(q_cal)
    ref_mean = q_cal[..., :NF].mean(2).numpy()
    expect(np.allclose(qstats[0][..., 0], ref_mean, atol=1e-6), "stats: q_mean real part")
    ctx = kvevict.Context("cpu")
    rng = np.random.default_rng(5)
    for dtype in ("float32", "bfloat16", "float16"):
        for layout in ("contiguous", "nhd", "hnd", "flat"):
            for scorer in ("triattention", "knorm"):
                for zn in (False, True):
                    check_case(ctx, qstats, keys, int(layout == "hnd"), dtype, layout, scorer, zn,
                               False, rng)
    for scorer in ("triattention", "knorm"):
        check_case(ctx, qstats, keys, 1, "bfloat16", "nhd", scorer, True, True, rng)
    # torch tensors in, the same scores out
    test_layers_mean(ctx, qstats, keys, rng)
    test_stats_file(qstats)
    test_errors(ctx, qstats, keys)
    test_state(ctx, qstats, keys)
    if FAILS:
        print("%d failures" % len(FAILS))
        sys.exit(1)
    print("test_score: all passed")


if __name__ == "__main__":
    main()
