#!/usr/bin/python3
"""kvevict.hf.KvevictCache and kvevict.press.KvevictPress against the real
transformers and kvpress (label hf; exit 77, skipped, without them), on
tiny Qwen3 and Llama models (GQA: 4 query heads, 2 KV heads) built from a
config with seeded random weights: offline, no download.

- a budget never reached: tokens and logits equal plain generate (greedy),
  tokens equal under sampling with the same seed;
- with eviction (random, random-p0, K-norm, TriAttention): each head holds
  exactly the keep-set of a kvevict.State driven independently (random
  arms; the positions are recovered by matching the cache's keys against
  every key the model produced, so they do not come from the cache's own
  bookkeeping), its digest equals the State's, the keys and values equal
  the dense ones at those positions, and the bytes held follow the budget;
- kvpress's RandomPress and KnormPress under DecodingPress at the same
  budget run as peers (KvevictPress: test_press.py);
- bad configurations give errors naming why.
"""
import os
import sys

import numpy as np
import torch

try:
    import transformers  # noqa: F401
    from transformers import (DynamicCache, LlamaConfig, LlamaForCausalLM, Qwen3Config,
                              Qwen3ForCausalLM)
except ImportError as e:
    print("skipped: transformers is not installed (%s)" % e)
    sys.exit(1 if os.environ.get("KVE_HF_REQUIRED") else 77)  # run.sh's venvs: required
# KVE_HF_REQUIRED=1 (the hf venv): kvpress too; =transformers (the vllm venv,
# transformers 5.19, which kvpress 0.5.5 does not share): the kvpress parts skip
try:
    import kvpress  # noqa: F401
    HAVE_KVPRESS = True
except ImportError as e:
    if os.environ.get("KVE_HF_REQUIRED") == "1":
        print("FAIL: kvpress is not installed (%s)" % e)
        sys.exit(1)
    if not os.environ.get("KVE_HF_REQUIRED"):
        print("skipped: kvpress is not installed (%s)" % e)
        sys.exit(77)
    HAVE_KVPRESS = False
    print("kvpress parts skipped: kvpress is not installed in this venv (%s)" % e)

import kvevict  # noqa: E402
import kvevict.hf  # noqa: E402
from kvevict.hf import KvevictCache, calibrate_triattention, positions_digest  # noqa: E402

P, NEW, B, W, R = 12, 40, 24, 4, 8
FAILS = []


def check(ok, what):
    if not ok:
        FAILS.append(what)
        print("FAIL:", what)


def tiny(kind):
    torch.manual_seed(1234)
    common = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                  tie_word_embeddings=False)
    if kind == "qwen3":
        return Qwen3ForCausalLM(Qwen3Config(head_dim=32, **common)).eval()
    return LlamaForCausalLM(LlamaConfig(**common)).eval()


class Recording(KvevictCache):
    """Records every key / value the model hands the cache (the dense cache)."""

    def update(self, key_states, value_states, layer_idx, cache_kwargs=None):
        self.rec = getattr(self, "rec", {})
        k, v = self.rec.get(layer_idx, (None, None))
        self.rec[layer_idx] = (key_states.clone() if k is None else torch.cat([k, key_states], 2),
                               value_states.clone() if v is None else torch.cat([v, value_states], 2))
        return super().update(key_states, value_states, layer_idx, cache_kwargs)


def gen(model, ids, cache=None, sample=False, n=NEW):
    torch.manual_seed(7)
    return model.generate(ids, past_key_values=cache, max_new_tokens=n, min_new_tokens=n, do_sample=sample,
                          output_logits=True, return_dict_in_generate=True, pad_token_id=0)


def no_eviction(name, model, ids):
    a, b = gen(model, ids), gen(model, ids, KvevictCache(model.config, budget=4096))
    check(torch.equal(a.sequences, b.sequences), "%s: tokens differ from plain generate" % name)
    same = all(torch.equal(x, y) for x, y in zip(a.logits, b.logits))
    check(same and len(a.logits) == len(b.logits), "%s: logits differ from plain generate" % name)
    a, b = gen(model, ids, sample=True), gen(model, ids, KvevictCache(model.config, budget=4096),
                                             sample=True)
    check(torch.equal(a.sequences, b.sequences), "%s: sampled tokens differ" % name)


def recovered(cache, layer):
    """positions [head] of the cache's entries, found by matching its keys
    to the recorded dense keys (exactly one match each); values checked."""
    k, v = cache.rec[layer]
    out = []
    for h in range(k.shape[1]):
        ck, cv = cache.layers[layer].keys[0, h], cache.layers[layer].values[0, h]
        eq = (ck[:, None, :] == k[0, h][None, :, :]).all(-1)  # [held, n_tokens]
        if not bool((eq.sum(1) == 1).all()):
            check(False, "layer %d head %d: a cached key matches %s dense keys"
                  % (layer, h, eq.sum(1).tolist()))
            return None
        pos = eq.float().argmax(1)
        check(torch.equal(cv, v[0, h, pos]), "layer %d head %d: values differ from the dense "
              "cache's at the kept positions" % (layer, h))
        out.append(sorted(pos.tolist()))
    return out


def oracle(n_layers, n_heads, pinned, steps, seed=0, seq_id=0):
    """A kvevict.State given the same appends: its positions per (layer, head) and digest."""
    cap = max(B, pinned + W) + R
    st = kvevict.State(kvevict.Context("cpu"), max_seqs=1, n_layers=n_layers, n_heads=n_heads,
                       budget=B, window=W, interval=R, max_slots=cap, seed=seed)
    st.admit(0, seq_id, pinned)
    for q in steps:
        st.append([0], [q], outputs=False)
    info, t = st.seq(0), st.slots(0)
    pos = [[sorted(t[l, h, :info.n_valid].tolist()) for h in range(n_heads)]
           for l in range(n_layers)]
    return pos, st.keepset_digest(0), cap


def eviction(name, model, ids, stats):
    cfg = model.config
    L, H, D = cfg.num_hidden_layers, cfg.num_key_value_heads, kvevict.hf.check_config(cfg)[3]
    entry = 2 * L * H * D * 4  # bytes of one position in every head: K and V, float32
    for arm, scorer, pin in (("random", None, True), ("random-p0", None, False),
                             ("knorm", "knorm", True), ("triattention", "triattention", True)):
        what = "%s %s" % (name, arm)
        c = Recording(cfg, budget=B, window=W, interval=R, scorer=scorer, pin_prompt=pin,
                      stats=stats, seed=5, seq_id=99)
        gen(model, ids, c, sample=arm == "random")
        n = c.n_tokens
        check(n == P + NEW - 1, "%s: %d tokens seen, expected %d" % (what, n, P + NEW - 1))
        got = [recovered(c, l) for l in range(L)]
        if None in got:
            continue
        check(got == c.kept_positions(), "%s: the cache's positions are not the ones it holds"
              % what)
        pinned = P if pin else 0
        held = len(got[0][0])
        cap = max(B, pinned + W) + R
        if scorer is None:
            want, dig, cap = oracle(L, H, pinned, [P] + [1] * (NEW - 1), seed=5, seq_id=99)
            check(got == want, "%s: kept positions differ from kvevict.State's" % what)
            check(positions_digest(99, got) == dig, "%s: digest differs from kvevict.State's"
                  % what)
        else:  # the scored keep-sets: pinned prompt, last W, the rest scored
            for l in range(L):
                for h in range(H):
                    p = got[l][h]
                    check(p[:P] == list(range(P)) and p[-W:] == list(range(n - W, n)),
                          "%s: layer %d head %d lost its prompt or window" % (what, l, h))
        check(c.digest() == c.state.keepset_digest(0), "%s: digest differs from the state's"
              % what)
        check(B <= held <= cap and c.kv_bytes() == held * entry,
              "%s: holds %d entries (%d bytes), expected B..C = %d..%d" % (what, held,
                                                                            c.kv_bytes(), B, cap))
        check(c.peak_bytes == cap * entry, "%s: peak %d bytes, expected C x %d = %d"
              % (what, c.peak_bytes, entry, cap * entry))
        if arm != "random-p0":
            check(len(set(map(tuple, got[0]))) > 1, "%s: every head kept the same positions"
                  % what)
        print("%-22s held %d of %d (C %d), %d bytes, digest %016x" % (what, held, n, cap,
                                                                     c.kv_bytes(), c.digest()))


def peers(name, model, ids):
    """kvpress's presses at the same budget: B kept after every r steps."""
    from kvpress import DecodingPress, KnormPress, RandomPress

    for press in (RandomPress(), KnormPress()):
        dp = DecodingPress(base_press=press, compression_interval=R, target_size=B)
        cache = DynamicCache()
        with dp(model):
            out = gen(model, ids, cache)
        held = cache.layers[0].keys.shape[-2]
        check(out.sequences.shape[1] == P + NEW and B <= held <= B + R,
              "%s kvpress %s: holds %d entries, expected %d..%d" % (name, type(press).__name__,
                                                                    held, B, B + R))
        print("%-22s held %d" % ("%s kvpress %s" % (name, type(press).__name__), held))


def refusals(model):
    from transformers import (DeepseekV3Config, MistralConfig, T5Config)

    cases = [
        (lambda: KvevictCache(MistralConfig(sliding_window=64)), "sliding"),
        (lambda: kvevict.hf.check_config(Qwen3Config(
            layer_types=["sliding_attention", "full_attention"], num_hidden_layers=2,
            use_sliding_window=True, sliding_window=16)), "sliding_attention layers"),
        (lambda: KvevictCache(Qwen3Config(layer_types=["full_attention", "chunked_attention"],
                                          num_hidden_layers=2)), "chunked_attention"),
        (lambda: KvevictCache(DeepseekV3Config()), "latent"),
        (lambda: KvevictCache(T5Config()), "encoder-decoder"),
        (lambda: KvevictCache(model.config, budget=0), "budget = 0"),
        (lambda: KvevictCache(model.config, window=-1), "window = -1"),
        (lambda: KvevictCache(model.config, scorer="lru"), "scorer = 'lru'"),
        (lambda: KvevictCache(model.config, scorer="triattention"), "needs stats"),
        (lambda: KvevictCache(model.config, scorer="triattention", stats=(np.zeros(3), np.zeros(3))),
         "stats: shapes"),
        (lambda: gen(model, torch.zeros((2, 5), dtype=torch.long),
                     KvevictCache(model.config, seq_id=[1, 2, 3], rows_unpadded=True)),
         "seq_id: 3 ids for a batch of 2"),
        (lambda: KvevictCache(model.config, seq_id=[1, -1]), "seq_id[1] = -1"),
        (lambda: KvevictCache(model.config, seq_id=[]), "seq_id = []"),
        (lambda: gen(model, torch.zeros((2, 5), dtype=torch.long),
                     KvevictCache(model.config, seq_id=2 ** 64 - 1, rows_unpadded=True)),
         "past 2^64-1"),
        (lambda: KvevictCache(model.config, rows_unpadded=1), "rows_unpadded = 1"),
        # issue 60 item 4: at construction, not at the first forward (with
        # budget=None never: digest() raised numpy's OverflowError)
        (lambda: KvevictCache(model.config, seed=-1), "seed = -1: out of range"),
        (lambda: KvevictCache(model.config, seed=2 ** 64), "seed = 18446744073709551616"),
        (lambda: KvevictCache(model.config, seq_id=-1, budget=None), "seq_id = -1: out of range"),
        (lambda: KvevictCache(model.config, seq_id=2 ** 64), "seq_id = 18446744073709551616"),
    ]
    for make, words in cases:
        try:
            make()
            check(False, "no error for %r" % words)
        except ValueError as e:
            check(words in str(e), "error %r does not say %r" % (str(e), words))
    # budget=None: digest() of the positions held, also before any forward
    c = KvevictCache(model.config, budget=None, seq_id=2 ** 64 - 1)
    heads = model.config.num_key_value_heads
    layers = model.config.num_hidden_layers
    check(c.digest() == positions_digest(2 ** 64 - 1, [[[]] * heads] * layers),
          "digest() of an empty cache")
    gen(model, torch.zeros((1, 5), dtype=torch.long), c)
    want = positions_digest(2 ** 64 - 1, [[list(range(c.n_tokens))] * heads] * layers)
    check(c.digest() == want, "digest() with budget=None: %d, not %d" % (c.digest(), want))


def bench():
    """hf_bench: every arm printed, the figure written, arms interleaved."""
    import contextlib
    import io
    import os
    import tempfile

    from kvevict.examples import hf_bench

    with tempfile.TemporaryDirectory() as tmp:
        page = os.path.join(tmp, "b.html")
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = hf_bench.main(["--prompt", "16", "--budget", "8", "--window", "2",
                                "--interval", "4", "--warmup", "1", "--steps", "6", "--block",
                                "4", "--html", page, "--results"])
        text = out.getvalue()
        check(rc == 0, "hf_bench returned %r" % rc)
        for arm in hf_bench.ARMS:
            check("RESULT hf_%s_tok_s " % arm.replace("-", "_") in text,
                  "hf_bench printed no figure for %s:\n%s" % (arm, text))
        check("100%" in err.getvalue(), "hf_bench drew no progress bar")
        with open(page) as f:
            check(f.read().count("<svg") == 2, "hf_bench's figure lacks its charts")
        tiny("llama").save_pretrained(os.path.join(tmp, "m"))  # --model DIR: a local checkpoint
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            rc = hf_bench.main(["--model", os.path.join(tmp, "m"), "--arms", "none,random,knorm",
                                "--prompt", "16", "--budget", "8", "--window", "2", "--interval",
                                "4", "--warmup", "0", "--steps", "4", "--results"])
        check(rc == 0 and "RESULT hf_knorm_tok_s " in out.getvalue()
              and "2 layers, 4 q / 2 KV heads" in out.getvalue(),
              "hf_bench --model: rc %r\n%s" % (rc, out.getvalue()))


def attention_impls(ids):
    """With eviction, eager attention (which builds the mask from get_mask_sizes) and SDPA
    (which skips it for one query) decode the same tokens."""
    outs = []
    for impl in ("eager", "sdpa"):
        model = tiny("qwen3")
        model.config._attn_implementation = impl
        outs.append(gen(model, ids, KvevictCache(model.config, budget=B, window=W,
                                                 interval=R)).sequences)
    check(torch.equal(*outs), "eager and sdpa attention decode different tokens with eviction")


def docs():
    """docs/INTEGRATION.md's three-line uses, run as written on a tiny model."""
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "INTEGRATION.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", doc, re.S)
    for tag in ("hf-cache",):  # hf-press: test_press.py
        code = [b for b in blocks if b.startswith("# doc-test: %s\n" % tag)]
        check(len(code) == 1, "INTEGRATION.md: %d blocks tagged %s" % (len(code), tag))
        model = tiny("qwen3")
        ns = dict(model=model, input_ids=torch.randint(1, 128, (1, P)))
        exec(compile(code[0], "INTEGRATION.md[%s]" % tag, "exec"), ns)
        n = ns["out"].shape[1]
        check(n > P, "INTEGRATION.md %s: generated %d tokens" % (tag, n - P))
        if tag == "hf-cache":
            check(ns["cache"].held() <= max(B, P + W) + R, "INTEGRATION.md: the cache holds %d"
                  % ns["cache"].held())


def rope_args():
    """TriAttention's RoPE from the config (kvevict.hf.rope_score_args):
    rope_theta for plain RoPE, transformers' own inv_freq for scaled RoPE
    (llama3 here), which the scorer then uses (the keep-sets differ from
    plain RoPE's), a hybrid's full layers' parameters (Gemma 3), partial
    rotary embeddings refused."""
    from transformers import Gemma3TextConfig

    from kvevict.hf import rope_score_args

    plain_cfg = tiny("llama").config
    check(rope_score_args(plain_cfg) == {"rope_theta": 10000.0} and
          rope_score_args(plain_cfg, theta=5e5) == {"rope_theta": 5e5},
          "plain RoPE: %r" % rope_score_args(plain_cfg))
    torch.manual_seed(1234)
    cfg = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False,
                      max_position_embeddings=16384,
                      rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                        high_freq_factor=4.0,
                                        original_max_position_embeddings=8192))
    model = LlamaForCausalLM(cfg).eval()
    got = rope_score_args(cfg)
    inv = model.model.rotary_emb.inv_freq.float().numpy()
    plain = 10000.0 ** (-np.arange(8, dtype=np.float64) * 2 / 16)
    check(set(got) == {"omega"} and np.array_equal(got["omega"], inv) and
          np.array_equal(rope_score_args(cfg, theta=10000.0)["omega"], inv) and
          not np.allclose(inv, plain), "llama3 RoPE: %r, the model's inv_freq %s" % (got, inv))
    torch.manual_seed(3)
    ids = torch.randint(1, 128, (1, P))
    stats = calibrate_triattention(model, torch.randint(1, 128, (1, 32)))

    class PlainRope(KvevictCache):  # the same cache told plain RoPE
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self.rope = {"rope_theta": 10000.0}

    digests = []
    for cls in (KvevictCache, PlainRope):
        c = cls(cfg, budget=B, window=W, interval=R, seed=5, scorer="triattention", stats=stats)
        gen(model, ids, c)
        check(c.digest() == c.state.keepset_digest(0) and c.state.seq(0).round >= 2,
              "llama3 RoPE triattention (%s): digest or rounds" % cls.__name__)
        digests.append(c.digest())
    check(digests[0] != digests[1], "llama3 RoPE: the keep-sets are plain RoPE's (omega unused)")
    gemma = Gemma3TextConfig(num_hidden_layers=2, layer_types=["sliding_attention",
                                                                "full_attention"])
    check(rope_score_args(gemma) == {"rope_theta": 1e6}, "Gemma 3: %r, expected the full "
          "layers' rope_theta 1e6" % rope_score_args(gemma))
    partial = LlamaConfig()
    partial.partial_rotary_factor = 0.5
    try:
        rope_score_args(partial)
        check(False, "partial rotary: no error")
    except ValueError as e:
        check("partial_rotary_factor = 0.5" in str(e), "partial rotary: %s" % e)
    print("%-22s plain theta, llama3 omega = the model's inv_freq (keep-sets differ from plain "
          "RoPE's), Gemma 3's full layers, partial rotary refused" % "triattention RoPE")


def main():
    torch.set_num_threads(1)  # tiny models: threads only contend (ctest runs tests side by side)
    for name in ("qwen3", "llama"):
        model = tiny(name)
        torch.manual_seed(3)
        ids = torch.randint(1, 128, (1, P))
        stats = calibrate_triattention(model, torch.randint(1, 128, (1, 32)))
        no_eviction(name, model, ids)
        eviction(name, model, ids, stats)
        if HAVE_KVPRESS:
            peers(name, model, ids)
    refusals(model)
    rope_args()
    attention_impls(ids)
    docs()
    if HAVE_KVPRESS:
        bench()
    print("transformers %s%s" % (transformers.__version__, "" if HAVE_KVPRESS else
                                 ", kvpress absent: its peers, KvevictPress, the hf-press "
                                 "doc block and hf_bench skipped"))
    if FAILS:
        print("%d failures" % len(FAILS))
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
