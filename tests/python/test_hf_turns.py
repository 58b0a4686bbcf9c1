#!/usr/bin/python3
"""kvevict.hf.KvevictCache where a transformers user meets it past one
token a step (label hf; exit 77, skipped, without transformers): tiny
seeded Qwen3 / Llama models (GQA: 4 query heads, 2 KV heads), fp32,
offline. Every log-probability is checked against a dense forward of the
same tokens masked per layer and KV head (the reference, written out
below), within 1e-4:

- appends of many tokens after eviction (a second chat turn, a chunked
  prefill, a step of more than r tokens): each query reads the entries
  held after its step's first round plus the step's tokens up to itself
  (docs/SPEC.md section 5); the keep-set and digest equal an independent
  kvevict.State's given the same appends, and the same as one token a step;
  the scored arms (K-norm, TriAttention) likewise on a one-layer model;
- a second turn through generate();
- batches of equal-length rows (row b is seq_id + b, or seq_id[b]): each
  row's tokens and digest equal that row's run alone; num_return_sequences
  (sampled rows against the reference); beam search (reorder_cache moves a
  row's history and seq_id: each row's keep-set equals a State's for its
  seq_id, the best beam's score equals the reference's); the refusals
  (padded batches where transformers shows them, scored arms' beams);
- the scored arms' batches (each row's log-probs and digest the row's
  alone, through two turns) and a hybrid model (log-probs against the
  reference masked by what the cache held, keep-sets an independent
  State's scored from the reference's keys of the same model layer);
- a hybrid model (Qwen3 with layer_types mixing sliding_attention and
  full_attention): the full layers evicted per head, the sliding layers
  masked by their window, the bytes of the full layers following the budget;
  tiny Gemma 2 and Gemma 3: transformers' own tokens without eviction, the
  full layers' keep-sets a State's with it, through a second chat turn.

Runs on transformers 5.2 (the hf venv) and 5.19 (the vllm venv).
"""
import os
import sys

import numpy as np
import torch

try:
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM
except ImportError as e:
    print("skipped: transformers is not installed (%s)" % e)
    sys.exit(1 if os.environ.get("KVE_HF_REQUIRED") else 77)

import kvevict  # noqa: E402
from kvevict.hf import KvevictCache, positions_digest  # noqa: E402
from masked_ref import masked_logprobs  # noqa: E402  (the dense masked reference)

B, W, R, TOL = 24, 4, 8, 1e-4
FAILS = []


def check(ok, what):
    if not ok:
        FAILS.append(what)
        print("FAIL:", what)


def tiny(kind, layer_types=None, window=None, layers=2):
    torch.manual_seed(1234)
    common = dict(vocab_size=128, hidden_size=64, intermediate_size=128,
                  num_hidden_layers=len(layer_types) if layer_types else layers,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                  tie_word_embeddings=False)
    if kind == "qwen3":
        extra = {}
        if layer_types:
            extra = dict(layer_types=layer_types, use_sliding_window=True, sliding_window=window,
                         max_window_layers=0)
        return Qwen3ForCausalLM(Qwen3Config(head_dim=32, **common, **extra)).eval()
    return LlamaForCausalLM(LlamaConfig(**common)).eval()


def new_state(n_layers, n_heads, pinned, seed, seq_id):
    cap = max(B, pinned + W) + R
    st = kvevict.State(kvevict.Context("cpu"), max_seqs=1, n_layers=n_layers, n_heads=n_heads,
                       budget=B, window=W, interval=R, max_slots=cap, seed=seed)
    st.admit(0, seq_id, pinned)
    return st


def held(st):
    n = st.seq(0).n_valid
    return st.slots(0)[:, :, :n]


def oracle(steps, n_layers=2, n_heads=2, pin=True, seed=5, seq_id=42, windows=None):
    """What the rule says for appends of steps[i] tokens: masks[l] [H, T, T]
    per model layer (full layers: each query reads the positions held after
    its step's first round, the heads full, and its step's tokens up to
    itself; sliding layers (windows[l]): the last windows[l] positions), the
    keep-set (positions[layer][head] of the full layers) and digest of a
    State given the appends whole, and what happened (a round first, rounds
    after the attention)."""
    T, P = sum(steps), steps[0]
    windows = windows or [None] * n_layers
    full = [l for l, w in enumerate(windows) if w is None]
    pinned = P if pin else 0
    whole = new_state(len(full), n_heads, pinned, seed, seq_id)
    split = new_state(len(full), n_heads, pinned, seed, seq_id)
    att = np.zeros((len(full), n_heads, T, T), dtype=bool)
    seen, pos0 = {"round first": 0, "rounds after attention": 0}, 0
    for i, q in enumerate(steps):
        whole.append([0], [q], outputs=False)
        info = split.seq(0)
        if i and info.n_valid == info.capacity:
            split.append([0], [1], outputs=False)
            old = held(split)[:, :, :-1]
            rest = q - 1
            seen["round first"] += 1
        else:
            old, rest = held(split), q
        r0 = split.seq(0).round
        if rest:
            split.append([0], [rest], outputs=False)
        seen["rounds after attention"] += split.seq(0).round != r0
        for f in range(len(full)):
            for h in range(n_heads):
                for p in range(pos0, pos0 + q):
                    att[f, h, p, old[f, h]] = True
                    att[f, h, p, pos0:p + 1] = True
        pos0 += q
    causal = np.tril(np.ones((T, T), dtype=bool))
    masks = []
    for l, w in enumerate(windows):
        if w is None:
            masks.append(att[full.index(l)])
        else:
            band = causal & ~np.tril(np.ones((T, T), dtype=bool), -w)
            masks.append(np.broadcast_to(band, (n_heads, T, T)))
    t = held(whole)
    pos = [[sorted(t[f, h].tolist()) for h in range(n_heads)] for f in range(len(full))]
    check(np.array_equal(t, held(split)) or
          pos == [[sorted(x.tolist()) for x in y] for y in held(split)],
          "oracle: the appends split at the first round hold another keep-set")
    return masks, pos, whole.keepset_digest(0), whole.seq(0).capacity, seen


def feed(model, ids, steps, cache):
    """Teacher-forced appends of steps[i] tokens: log-probs [T, vocab] (ids
    a list), or [rows, T, vocab] (ids a tensor [rows, T])."""
    rows = ids if isinstance(ids, torch.Tensor) else torch.tensor([ids])
    out, at = [], 0
    with torch.no_grad():
        for q in steps:
            logits = model(input_ids=rows[:, at:at + q], past_key_values=cache,
                           use_cache=True).logits
            out.append(logits.float().log_softmax(-1))
            at += q
    got = torch.cat(out, 1)
    return got if isinstance(ids, torch.Tensor) else got[0]


def turns(name, model, pin=True, steps=None, windows=None):
    """Chat turns and chunked prefills after eviction against the reference."""
    steps = steps or [12] + [1] * 20 + [7] + [1] * 6 + [20] + [1] * 3 + [5, 11] + [1] * 4
    T = sum(steps)
    torch.manual_seed(11)
    ids = torch.randint(1, 128, (T,)).tolist()
    cfg = model.config
    L = cfg.num_hidden_layers
    masks, want, dig, cap, seen = oracle(steps, L, cfg.num_key_value_heads, pin=pin,
                                         windows=windows)
    cache = KvevictCache(cfg, budget=B, window=W, interval=R, seed=5, seq_id=42, pin_prompt=pin)
    got = feed(model, ids, steps, cache)
    with torch.no_grad():
        ref = masked_logprobs(model, ids, masks)
    worst = float((got - ref).abs().max())
    what = "%s %s" % (name, "pinned" if pin else "random-p0")
    check(seen["round first"] > 0 and seen["rounds after attention"] > 0,
          "%s: the schedule ran no round-first step or no round after an attention (%s)"
          % (what, seen))
    check(worst <= TOL, "%s: log-probs differ from the masked reference by %.2e" % (what, worst))
    check(cache.kept_positions() == want, "%s: keep-set differs from kvevict.State's" % what)
    check(cache.digest() == dig, "%s: digest %016x, kvevict.State's %016x"
          % (what, cache.digest(), dig))
    one = oracle([steps[0]] + [1] * (T - steps[0]), L, cfg.num_key_value_heads, pin=pin,
                 windows=windows)
    check(one[2] == dig, "%s: one token a step gives another digest" % what)
    check(cache.held() <= cap, "%s: holds %d entries, C = %d" % (what, cache.held(), cap))
    print("%-28s %d appends (%s), |diff| %.1e, held %d (C %d), digest %016x"
          % (what, len(steps), ", ".join("%s %d" % kv for kv in seen.items()), worst,
             cache.held(), cap, dig))
    return cache


def chat_generate(model):
    """A second turn through generate(), with the cache the first turn left."""
    torch.manual_seed(12)
    prompt = torch.randint(1, 128, (1, 12))
    cache = KvevictCache(model.config, budget=B, window=W, interval=R, seed=5, seq_id=42)
    kw = dict(do_sample=False, pad_token_id=0, output_logits=True, return_dict_in_generate=True)
    a = model.generate(prompt, past_key_values=cache, max_new_tokens=20, min_new_tokens=20, **kw)
    user = torch.randint(1, 128, (1, 7))
    ids2 = torch.cat([a.sequences, user], 1)
    b = model.generate(ids2, past_key_values=cache, max_new_tokens=10, min_new_tokens=10, **kw)
    seq = b.sequences[0].tolist()
    steps = [12] + [1] * 19 + [8] + [1] * 9
    check(cache.n_tokens == sum(steps) and len(seq) == sum(steps) + 1,
          "chat: %d tokens in the cache, %d in the sequence" % (cache.n_tokens, len(seq)))
    masks, want, dig, cap, _ = oracle(steps)
    with torch.no_grad():
        ref = masked_logprobs(model, seq[:-1], masks)
    worst = 0.0
    for i, lg in enumerate(b.logits):  # turn 2's logits: the 8-token step's last query, then one a step
        p = 12 + 19 + 8 - 1 + i
        worst = max(worst, float((lg[0].log_softmax(-1) - ref[p]).abs().max()))
    check(worst <= TOL, "chat: turn 2's log-probs differ from the reference by %.2e" % worst)
    check(cache.digest() == dig, "chat: digest differs from kvevict.State's")
    print("%-28s turn 2 of %d tokens after %d, |diff| %.1e, digest %016x"
          % ("chat through generate()", 7, 32, worst, dig))


def scored_turns():
    """The scored arms' long appends (rounds scored after the step's
    attention) on a one-layer model, whose keys do not depend on what its
    attention reads, so the keep-sets of any grouping of the tokens are one
    token a step's: its digest equals that run's, and its log-probs equal
    the reference masked by that run's keep-sets (a step's queries reading
    what the step's first token found held, and the step's tokens)."""
    from kvevict.hf import calibrate_triattention

    # Llama: Qwen3's k_norm gives every key nearly one norm, so K-norm's
    # order would rest on the last bits, which differ between groupings
    model = tiny("llama", layers=1)
    stats = calibrate_triattention(model, torch.randint(1, 128, (1, 32)))
    torch.manual_seed(16)
    for scorer, pin, steps in (("knorm", True, [12] + [1] * 20 + [7, 20, 1, 1, 30, 2, 9]),
                               ("triattention", True, [12] + [1] * 22 + [19, 1, 26]),
                               ("knorm", False, [40, 1, 1, 20, 3])):
        what = "%s%s" % (scorer, "" if pin else " unpinned")
        T = sum(steps)
        ids = torch.randint(1, 128, (T,)).tolist()
        kw = dict(budget=B, window=W, interval=R, seed=5, seq_id=42, pin_prompt=pin,
                  scorer=scorer, stats=stats)
        one, history = KvevictCache(model.config, **kw), []
        with torch.no_grad():
            for t in range(T):
                a = steps[0] if pin and t < steps[0] else 1
                if pin and 0 < t < steps[0]:
                    continue
                model(input_ids=torch.tensor([ids[t:t + a]]), past_key_values=one)
                while len(history) < t + a:
                    history.append(one.kept_positions()[0])
        cache = KvevictCache(model.config, **kw)
        got = feed(model, ids, steps, cache)
        mask = np.zeros((2, T, T), dtype=bool)
        pos0 = 0
        for q in steps:
            for h in range(2):
                old = [] if pos0 == 0 else [x for x in history[pos0][h] if x != pos0]
                for p in range(pos0, pos0 + q):
                    mask[h, p, old] = True
                    mask[h, p, pos0:p + 1] = True
            pos0 += q
        with torch.no_grad():
            ref = masked_logprobs(model, ids, [mask])
        worst = float((got - ref).abs().max())
        cap = max(B, (steps[0] if pin else 0) + W) + R
        check(max(steps) > R and cache.state.seq(0).round > 2, "%s: no long append" % what)
        check(cache.digest() == one.digest() and cache.digest() == cache.state.keepset_digest(0),
              "%s: digest differs from one token a step's" % what)
        check(worst <= TOL, "%s: log-probs differ from the reference by %.2e" % (what, worst))
        check(cache.held() <= cap and cache.peak_bytes <= one.peak_bytes,
              "%s: holds %d entries (C %d), peak %d bytes (one a step: %d)"
              % (what, cache.held(), cap, cache.peak_bytes, one.peak_bytes))
        print("%-28s %d appends, |diff| %.1e, digest %016x = one token a step's"
              % ("scored " + what, len(steps), worst, cache.digest()))


def scored_refused(model, ids, kw, words, what):
    """generate() with a K-norm cache of unpadded rows is refused, saying @words."""
    try:
        model.generate(ids, past_key_values=KvevictCache(model.config, budget=B, window=W,
                                                         interval=R, scorer="knorm",
                                                         rows_unpadded=True), **kw)
        check(False, "no error for %s with scorer='knorm'" % what)
    except ValueError as e:
        check(words in str(e), "scored %s refusal: %s" % (what, e))


def batches(model):
    """Rows of a batch against each row alone."""
    torch.manual_seed(13)
    ids = torch.randint(1, 128, (3, 12))
    kw = dict(do_sample=False, pad_token_id=0, max_new_tokens=30, min_new_tokens=30,
              output_logits=True, return_dict_in_generate=True)
    for seq_id, rows_ids in ((100, [100, 101, 102]), ([7, 90, 3], [7, 90, 3])):
        cache = KvevictCache(model.config, budget=B, window=W, interval=R, seed=5, seq_id=seq_id,
                             rows_unpadded=True)
        out = model.generate(ids, past_key_values=cache, **kw)
        for b in range(3):
            alone = KvevictCache(model.config, budget=B, window=W, interval=R, seed=5,
                                 seq_id=rows_ids[b])
            one = model.generate(ids[b:b + 1], past_key_values=alone, **kw)
            check(torch.equal(out.sequences[b], one.sequences[0]),
                  "batch (seq_id %r) row %d: tokens differ from the row alone" % (seq_id, b))
            check(cache.digest(b) == alone.digest() and cache.row_seq_id(b) == rows_ids[b],
                  "batch (seq_id %r) row %d: digest differs from the row alone" % (seq_id, b))
        print("%-28s 3 rows (seq_id %r) = each row alone, held %d" % ("batch", seq_id,
                                                                      cache.held()))
    # a padded batch: refused on every version, by its rows' positions where
    # they reach the cache (transformers 5.2), else for want of rows_unpadded
    mask = torch.ones_like(ids)
    mask[0, :3] = 0
    try:
        model.generate(ids, attention_mask=mask, past_key_values=KvevictCache(model.config),
                       **kw)
        check(False, "a padded batch: no error on transformers %s" % transformers.__version__)
    except ValueError as e:
        check("(a padded batch)" in str(e) or "rows_unpadded=True" in str(e),
              "padded batch refusal: %s" % e)
        print("%-28s refused on transformers %s: %s" % ("padded batch", transformers.__version__,
                                                        str(e)[:60]))


def scored_batches():
    """The scored arms' batches: each row scored from its own keys, its
    log-probs and digest those of the row alone, through a first turn and
    a second turn of more than r tokens (its rounds scored after the step's
    attention, every row at once). Llama, as scored_turns; teacher-forced
    tokens, no token twice in a row's sequence (a repeated token's layer-0
    keys have one norm at any position: a K-norm tie the last bits break)."""
    from kvevict.hf import calibrate_triattention

    model = tiny("llama")
    stats = calibrate_triattention(model, torch.randint(1, 128, (1, 32)))
    torch.manual_seed(18)
    steps = [12] + [1] * 23 + [13] + [1] * 23
    ids = torch.stack([torch.randperm(127)[:sum(steps)] + 1 for _ in range(3)])
    for scorer in ("knorm", "triattention"):
        arm = dict(budget=B, window=W, interval=R, seed=5, scorer=scorer, stats=stats)
        cache = KvevictCache(model.config, seq_id=200, rows_unpadded=True, **arm)
        got = feed(model, ids, steps, cache)
        worst = 0.0
        for b in range(3):
            alone = KvevictCache(model.config, seq_id=200 + b, **arm)
            one = feed(model, ids[b:b + 1], steps, alone)
            worst = max(worst, float((got[b] - one[0]).abs().max()))
            check(cache.digest(b) == alone.digest() == cache.state.keepset_digest(b),
                  "scored batch (%s) row %d: digest differs from the row alone" % (scorer, b))
        rounds = cache.state.seq(0).round
        distinct = len(set(tuple(c) for c in cache.kept_positions(0)[0])) > 1
        check(worst <= TOL, "scored batch (%s): log-probs differ from the rows alone by %.2e"
              % (scorer, worst))
        check(rounds >= 4 and distinct and cache.held() <= max(B, 12 + W) + R,
              "scored batch (%s): %d rounds, held %d, heads distinct: %s"
              % (scorer, rounds, cache.held(), distinct))
        print("%-28s 3 rows through 2 turns = each row alone, %d rounds, |diff| %.1e"
              % ("scored batch " + scorer, rounds, worst))


def scored_hybrid():
    """The scored arms on a hybrid model (Qwen3, layer_types [full, sliding,
    full, sliding], its k_norm weights drawn so that key norms differ):
    teacher-forced one token a step, the log-probs equal the dense forward
    masked by the positions the cache held after each step (the sliding
    layers by their window), and after every step the keep-sets equal those
    of an independent kvevict.State scored from that reference's keys of
    the same model layer (the full layers 0 and 2 as the State's 0 and 1)."""
    from kvevict.hf import calibrate_triattention

    types = ["full_attention", "sliding_attention", "full_attention", "sliding_attention"]
    model = tiny("qwen3", types, window=6)
    torch.manual_seed(19)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.k_norm.weight.uniform_(0.2, 2.0)
    stats = calibrate_triattention(model, torch.randint(1, 128, (1, 32)))
    P, T, full, H = 12, 60, [0, 2], 2
    ids = (torch.randperm(127)[:T] + 1).tolist()  # no K-norm ties (scored_batches)
    cap = max(B, P + W) + R
    causal = np.tril(np.ones((T, T), dtype=bool))
    band = causal & ~np.tril(np.ones((T, T), dtype=bool), -6)
    for scorer in ("knorm", "triattention"):
        cache = KvevictCache(model.config, budget=B, window=W, interval=R, seed=5, seq_id=42,
                             scorer=scorer, stats=stats)
        history, got = [], []
        with torch.no_grad():
            for t in [0] + list(range(P, T)):
                q = P if t == 0 else 1
                logits = model(input_ids=torch.tensor([ids[t:t + q]]),
                               past_key_values=cache).logits
                got.append(logits[0].log_softmax(-1))
                history.append(cache.kept_positions())
        masks = [np.broadcast_to(band, (H, T, T)).copy() for _ in types]
        for f, l in enumerate(full):
            masks[l] = np.broadcast_to(causal, (H, T, T)).copy()
            for i, t in enumerate(range(P, T)):
                for h in range(H):
                    masks[l][h, t] = False
                    masks[l][h, t, history[1 + i][f][h]] = True
        keys = []
        with torch.no_grad():
            ref = masked_logprobs(model, ids, masks, keys=keys)
        worst = float((torch.cat(got) - ref).abs().max())
        check(worst <= TOL, "scored hybrid (%s): log-probs differ from the masked reference by "
              "%.2e" % (scorer, worst))
        # the independent State, scored from the reference's keys
        st = kvevict.State(kvevict.Context("cpu"), max_seqs=1, n_layers=2, n_heads=H, budget=B,
                           window=W, interval=R, max_slots=cap, seed=5, scored=True,
                           tensors="torch")
        st.admit(0, 42, P)
        buf = st.scores_buffer(1)
        st.append([0], [P])
        same, rounds = True, 0
        for i, t in enumerate(range(P, T)):
            scores = None
            if st.rounds_due([0], [1])[0]:
                rounds += 1
                n = st.seq(0).n_valid
                tab = st.row_table(0)[:, :, :n].long()
                for f, l in enumerate(full):
                    k = torch.stack([keys[l][h, tab[f, h]] for h in range(H)])[None]
                    kw = dict(group=2, q_mean=stats[0][l], q_abs_mean=stats[1][l],
                              **cache.rope) if scorer == "triattention" else {}
                    st.score([0], [1], f, k.contiguous(), buf, scorer=scorer, layout="hnd",
                             cache_row=[0], **kw)
                scores = buf[:1]
            st.append([0], [1], scores=scores)
            n = st.seq(0).n_valid
            tab = st.row_table(0)[:, :, :n]
            want = [[sorted(tab[f, h].tolist()) for h in range(H)] for f in range(2)]
            same = same and want == history[1 + i]
        check(same and rounds >= 4, "scored hybrid (%s): keep-sets differ from an independent "
              "State's scored from the reference keys (%d rounds)" % (scorer, rounds))
        check(cache.digest() == st.keepset_digest(0) and cache.held() <= cap,
              "scored hybrid (%s): digest or held (%d, C %d)" % (scorer, cache.held(), cap))
        print("%-28s %d rounds, |diff| %.1e, keep-sets = a State's from the reference keys"
              % ("scored hybrid " + scorer, rounds, worst))


def sampled_rows(model):
    """num_return_sequences: each sampled row against the reference for its seq_id."""
    torch.manual_seed(14)
    ids = torch.randint(1, 128, (1, 12))
    cache = KvevictCache(model.config, budget=B, window=W, interval=R, seed=5, seq_id=500,
                         rows_unpadded=True)
    n = 30
    out = model.generate(ids, past_key_values=cache, do_sample=True, num_return_sequences=3,
                         max_new_tokens=n, min_new_tokens=n, pad_token_id=0, output_logits=True,
                         return_dict_in_generate=True)
    steps = [12] + [1] * (n - 1)
    worst = 0.0
    for b in range(3):
        masks, want, dig, _, _ = oracle(steps, seq_id=500 + b)
        check(cache.digest(b) == dig, "num_return_sequences row %d: digest differs from "
              "kvevict.State's for seq_id %d" % (b, 500 + b))
        seq = out.sequences[b].tolist()
        with torch.no_grad():
            ref = masked_logprobs(model, seq[:-1], masks)
        for i, lg in enumerate(out.logits):
            worst = max(worst, float((lg[b].log_softmax(-1) - ref[11 + i]).abs().max()))
    distinct = len(set(tuple(s.tolist()) for s in out.sequences))
    check(worst <= TOL and distinct > 1, "num_return_sequences: |diff| %.2e, %d distinct rows"
          % (worst, distinct))
    print("%-28s 3 rows, %d distinct, |diff| %.1e" % ("num_return_sequences", distinct, worst))


def beams(model):
    """Beam search: reorder_cache moves histories; each row's keep-set is a
    State's for the seq_id it carries; the best beam's score is the reference's."""
    torch.manual_seed(15)
    ids = torch.randint(1, 128, (1, 12))
    n = 24
    kw = dict(num_beams=3, do_sample=False, max_new_tokens=n, min_new_tokens=n, pad_token_id=0,
              length_penalty=0.0, early_stopping=True, output_scores=True,
              return_dict_in_generate=True)
    plain = model.generate(ids, **kw)
    big = model.generate(ids, past_key_values=KvevictCache(model.config, budget=4096,
                                                           rows_unpadded=True), **kw)
    check(torch.equal(plain.sequences, big.sequences), "beams without eviction: tokens differ "
          "from transformers' own cache")
    cache = KvevictCache(model.config, budget=B, window=W, interval=R, seed=5, seq_id=300,
                         rows_unpadded=True)
    out = model.generate(ids, past_key_values=cache, **kw)
    steps = [12] + [1] * (n - 1)
    check(cache.seq_ids != [300, 301, 302], "beams: no row took another's history")
    for b in range(3):
        _, _, dig, _, _ = oracle(steps, seq_id=cache.seq_ids[b])
        check(cache.digest(b) == dig, "beam row %d: digest differs from kvevict.State's for "
              "seq_id %d" % (b, cache.seq_ids[b]))
    seq = out.sequences[0].tolist()
    best = []
    for sid in sorted(set(cache.seq_ids)):
        masks = oracle(steps, seq_id=sid)[0]
        with torch.no_grad():
            ref = masked_logprobs(model, seq[:-1], masks)
        best.append(abs(float(sum(ref[11 + i, t] for i, t in enumerate(seq[12:]))) -
                        float(out.sequences_scores[0])))
    check(min(best) <= TOL * n, "beams: the best beam's score differs from the reference's "
          "by %.2e" % min(best))
    print("%-28s 3 beams, rows carry seq_ids %s, score |diff| %.1e"
          % ("beam search", cache.seq_ids, min(best)))
    scored_refused(model, ids, kw, "beam search with scorer='knorm'", "beam search")
    c = KvevictCache(model.config)
    model.generate(ids, past_key_values=c, max_new_tokens=2, pad_token_id=0)
    for call, words in ((lambda: c.batch_repeat_interleave(2), "batch_repeat_interleave(2)"),
                        (lambda: c.batch_select_indices(torch.tensor([0])),
                         "batch_select_indices"),
                        (lambda: c.reorder_cache(torch.tensor([0, 1])), "beam_idx = [0, 1]")):
        try:
            call()
            check(False, "no error for %s" % words)
        except ValueError as e:
            check(words in str(e), "error %r does not say %r" % (str(e), words))


def hybrid():
    """Sliding and full layers: the full ones evicted, the sliding ones transformers'."""
    types = ["full_attention", "sliding_attention", "full_attention", "sliding_attention"]
    model = tiny("qwen3", types, window=6)
    check(model.model.layers[1].self_attn.sliding_window == 6, "the model has no sliding layer")
    windows = [None, 6, None, 6]
    steps = [12] + [1] * 20 + [7] + [1] * 6 + [20] + [1] * 3
    cache = turns("hybrid qwen3", model, steps=steps, windows=windows)
    cfg = model.config
    entry = 2 * cfg.num_key_value_heads * 32 * 4  # one position of a layer: K and V, fp32
    full = sum(cache.layers[i].keys.numel() * 4 * 2 for i in (0, 2))
    slide = [cache.layers[i].keys.shape[-2] for i in (1, 3)]
    check(full == 2 * cache.held() * entry and cache.held() <= max(B, 12 + W) + R,
          "hybrid: the full layers hold %d bytes for %d entries" % (full, cache.held()))
    check(slide == [5, 5], "hybrid: the sliding layers hold %s entries (window 6)" % slide)
    check(len(cache.kept_positions()) == 2, "hybrid: the keep-sets name %d layers"
          % len(cache.kept_positions()))
    print("%-28s full layers hold %d entries a head, sliding layers %s"
          % ("hybrid memory", cache.held(), slide))


def gemma():
    """Gemma 2 and Gemma 3 (sliding layers first, softcapping, their own
    norms): with no eviction the tokens and logits of transformers' own
    cache; with eviction the full layers hold a kvevict.State's keep-sets
    (the random keep-set does not depend on the model) within C, the
    sliding layers their window, and a chat turn of many tokens runs."""
    from transformers import (DynamicCache, Gemma2Config, Gemma2ForCausalLM, Gemma3ForCausalLM,
                              Gemma3TextConfig)

    common = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=16, sliding_window=6,
                  layer_types=["sliding_attention", "full_attention"] * 2)
    for name, cls, cfg in (("gemma2", Gemma2ForCausalLM, Gemma2Config(**common)),
                           ("gemma3", Gemma3ForCausalLM, Gemma3TextConfig(**common))):
        torch.manual_seed(1234)
        model = cls(cfg).eval()
        torch.manual_seed(17)
        ids = torch.randint(1, 128, (1, 12))
        n = 40
        kw = dict(do_sample=False, max_new_tokens=n, min_new_tokens=n, pad_token_id=0,
                  output_logits=True, return_dict_in_generate=True)
        a = model.generate(ids, past_key_values=DynamicCache(config=cfg), **kw)
        b = model.generate(ids, past_key_values=KvevictCache(cfg, budget=4096), **kw)
        check(torch.equal(a.sequences, b.sequences) and
              all(torch.equal(x, y) for x, y in zip(a.logits, b.logits)),
              "%s: no eviction: tokens or logits differ from DynamicCache's" % name)
        cache = KvevictCache(cfg, budget=B, window=W, interval=R, seed=5, seq_id=42)
        out = model.generate(ids, past_key_values=cache, **kw)
        user = torch.randint(1, 128, (1, 15))
        model.generate(torch.cat([out.sequences, user], 1), past_key_values=cache, **kw)
        steps = [12] + [1] * (n - 1) + [16] + [1] * (n - 1)
        _, want, dig, cap, _ = oracle(steps, n_layers=2)
        slide = [cache.layers[i].keys.shape[-2] for i in (0, 2)]
        check(cache.kept_positions() == want and cache.digest() == dig,
              "%s: the full layers' keep-sets differ from kvevict.State's" % name)
        check(cache.held() <= cap and slide == [5, 5], "%s: full layers hold %d (C %d), sliding "
              "layers %s (window 6)" % (name, cache.held(), cap, slide))
        print("%-28s no eviction = DynamicCache; full layers %d (C %d), sliding %s, digest %016x"
              % (name, cache.held(), cap, slide, dig))


def main():
    torch.set_num_threads(1)
    print("transformers %s, torch %s" % (transformers.__version__, torch.__version__))
    for name in ("qwen3", "llama"):
        turns(name, tiny(name))
    eager = tiny("qwen3")
    eager.config._attn_implementation = "eager"  # the mask built whole, not SDPA's
    turns("qwen3 eager", eager)
    model = tiny("qwen3")
    turns("qwen3", model, pin=False)
    chat_generate(model)
    scored_turns()
    batches(model)
    scored_batches()
    sampled_rows(model)
    beams(model)
    hybrid()
    scored_hybrid()
    gemma()
    if FAILS:
        print("%d failures" % len(FAILS))
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
