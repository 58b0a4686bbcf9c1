#!/usr/bin/python3
"""kvevict.press.KvevictPress in kvpress 0.5.5 (label hf; exit 77, skipped,
without transformers / kvpress), on tiny seeded models (offline):

- alone (``with press(model)``, model.generate): the tokens, the entries and
  the digest of kvevict.hf.KvevictCache with B = target_size - 1, r =
  compression_interval (random, random-p0, K-norm and TriAttention arms);
- in kvpress's kv-press-text-generation pipeline: a DecodingPress there, it
  evicts during decoding: after every step a head holds T .. T + i - 1
  entries (T = target_size, i = compression_interval) as DecodingPress's
  do, and its keep-sets are those of a kvevict.State given the pipeline's
  steps (the context and question adopted as the prompt); two questions are
  refused as kvpress refuses them for a DecodingPress; a second run of the
  same press gives the same keep-sets;
- compression_ratio: B from the prompt as kvpress counts it;
- PrefillDecodingPress(KnormPress, KvevictPress): the compressed context
  adopted; ComposedPress([KvevictPress]): the same run as alone;
  ComposedPress([KnormPress, KvevictPress]) adopts Knorm's output;
  ComposedPress([KvevictPress, KnormPress]) refused, naming why;
- the press's hooks leave with its context (or at the next forward, for
  ComposedPress, which never resets its presses);
- kvpress_registry(): DecodingPress entries that evaluate.py configures;
- docs/INTEGRATION.md's hf-press block, run as written;
- bad arguments give errors naming the argument and its value.
"""
import os
import re
import sys
import tempfile
from pathlib import Path

import torch

try:
    import transformers  # noqa: F401
    from transformers import DynamicCache, Qwen3Config, Qwen3ForCausalLM, pipeline
    import kvpress
    from kvpress import (ComposedPress, DecodingPress, KnormPress, PrefillDecodingPress,
                         RandomPress)
except ImportError as e:
    print("skipped: transformers / kvpress are not installed (%s)" % e)
    sys.exit(1 if os.environ.get("KVE_HF_REQUIRED") else 77)  # run.sh's venv: required

import kvevict  # noqa: E402
from kvevict.hf import KvevictCache, calibrate_triattention  # noqa: E402
from kvevict.press import KvevictPress, kvpress_registry  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kvpress_tiny  # noqa: E402

P, NEW, B, W, R = 12, 40, 24, 4, 8
FAILS = []


def check(ok, what):
    if not ok:
        FAILS.append(what)
        print("FAIL:", what)


def tiny_qwen3():
    torch.manual_seed(1234)
    return Qwen3ForCausalLM(Qwen3Config(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        tie_word_embeddings=False, head_dim=32)).eval()


def gen(model, ids, cache=None, n=NEW):
    return model.generate(ids, past_key_values=cache, max_new_tokens=n, min_new_tokens=n,
                          do_sample=False, return_dict_in_generate=True, pad_token_id=0)


def oracle_digest(cfg, pinned, steps, budget, window, interval, seed=0, seq_id=0):
    """The digest of a kvevict.State given the same appends."""
    cap = max(budget, pinned + window) + interval
    st = kvevict.State(kvevict.Context("cpu"), max_seqs=1, n_layers=cfg.num_hidden_layers,
                       n_heads=cfg.num_key_value_heads, budget=budget, window=window,
                       interval=interval, max_slots=cap, seed=seed)
    st.admit(0, seq_id, pinned)
    for q in steps:
        st.append([0], [q], outputs=False)
    return st.keepset_digest(0)


def hooks_left(model):
    return sum(len(l.self_attn._forward_pre_hooks) + len(l.self_attn._forward_hooks)
               for l in model.model.layers)


def alone(name, model, ids, stats):
    """KvevictPress: the tokens, keep-sets and entries of KvevictCache, in the
    model's DynamicCache, its tensors shrunk to them."""
    for scorer, pin in ((None, True), (None, False), ("knorm", True), ("triattention", True)):
        what = "%s KvevictPress %s%s" % (name, scorer or "random", "" if pin else "-p0")
        kw = dict(window=W, scorer=scorer, pin_prompt=pin, stats=stats, seed=5, seq_id=99)
        ref = KvevictCache(model.config, budget=B, interval=R, **kw)
        a = gen(model, ids, ref)
        p, cache = KvevictPress(target_size=B + 1, compression_interval=R, **kw), DynamicCache()
        with p(model):
            b = gen(model, ids, cache)
        check(torch.equal(a.sequences, b.sequences), "%s: tokens differ from KvevictCache's" % what)
        same = all(torch.equal(x.keys, y.keys) and torch.equal(x.values, y.values)
                   for x, y in zip(ref.layers, cache.layers))
        check(same, "%s: the cache's entries differ from KvevictCache's" % what)
        check(p.digest() == ref.digest(), "%s: digest differs from KvevictCache's" % what)
        check(hooks_left(model) == 0, "%s: hooks left on the model after its context" % what)
        print("%-30s held %d, digest %016x" % (what, cache.layers[0].keys.shape[-2], p.digest()))
        if scorer is None and pin:
            # ComposedPress([press]): the same run (its pre-hooks come from post_init)
            p2 = KvevictPress(target_size=B + 1, compression_interval=R, **kw)
            cache, comp = DynamicCache(), ComposedPress([p2])
            with comp(model):
                c = gen(model, ids, cache)
            check(torch.equal(a.sequences, c.sequences) and p2.digest() == ref.digest(),
                  "%s in ComposedPress: tokens or digest differ from alone" % what)
            check(comp.compression_ratio == 0.0, "ComposedPress's compression_ratio %r"
                  % comp.compression_ratio)
            model(ids)  # a forward without the press: its stale pre-hooks leave
            check(hooks_left(model) == 0, "ComposedPress: stale pre-hooks stayed")


class Steps:
    """Records, per forward of the model, (entries held before, tokens) and,
    after it, the entries every layer holds."""

    def __init__(self, model):
        self.before, self.after = [], []
        first, last = model.model.layers[0], model.model.layers[-1]
        self.h = [first.register_forward_pre_hook(self.pre, with_kwargs=True),
                  last.register_forward_hook(self.post, with_kwargs=True)]

    def pre(self, mod, args, kwargs):
        c = kwargs["past_key_values"]
        held = c.layers[0].keys.shape[-2] if c.layers and c.layers[0].is_initialized else 0
        x = args[0] if args else kwargs["hidden_states"]
        self.before.append((held, x.shape[1]))

    def post(self, mod, args, kwargs, out):
        c = kwargs["past_key_values"]
        self.after.append([l.keys.shape[-2] for l in c.layers])

    def remove(self):
        for h in self.h:
            h.remove()


def in_pipeline(pipe):
    model, cfg = pipe.model, pipe.model.config
    context = "The quick brown fox jumps over the lazy dog. " * 6
    question = "What animal jumps over the dog?"
    T, I, N = 24, 4, 30
    for pin in (True, False):
        what = "pipeline KvevictPress %s" % ("random" if pin else "random-p0")
        press = KvevictPress(target_size=T, compression_interval=I, window=W, pin_prompt=pin,
                             seed=3, seq_id=7)
        rec, cache = Steps(model), DynamicCache()
        try:
            out = pipe(context, question=question, press=press, cache=cache, max_new_tokens=N)
        finally:
            rec.remove()
        ctx = rec.before[0][1]                       # the context's prefill (no press)
        dec = rec.before[1:]
        check(dec[0][0] == ctx and len(dec) == N, "%s: steps %s" % (what, rec.before[:3]))
        prompt = ctx + dec[0][1]                      # adopted: context + question
        steps = [prompt] + [q for _, q in dec[1:]]
        want = oracle_digest(cfg, prompt if pin else 0, steps, T - 1, W, I, seed=3, seq_id=7)
        check(press.digest() == want, "%s: digest differs from kvevict.State's" % what)
        held = [a[0] for a in rec.after[1:]]
        check(all(len(set(a)) == 1 for a in rec.after), "%s: layers hold different counts" % what)
        check(press.schedule.state.seq(0).round > 0, "%s: no round ran" % what)
        if pin:
            cap = max(T - 1, prompt + W) + I
            check(max(held) <= cap and held[-1] > T + I, "%s: held %s, C = %d" % (what, held, cap))
        else:  # as DecodingPress: T .. T + i - 1 after every step once it compressed
            k = next(i for i, h in enumerate(held) if h <= T + I - 1)
            check(all(T <= h <= T + I - 1 for h in held[k:]) and k <= 1,
                  "%s: held after each step %s, expected %d..%d" % (what, held, T, T + I - 1))
        print("%-30s prompt %d, held after steps %s..%s, digest %016x, answer %r"
              % (what, prompt, held[:3], held[-3:], press.digest(), out["answer"][:24]))
        # the same press again: the same keep-sets (reset() at the context's end)
        first = press.digest()
        pipe(context, question=question, press=press, cache=DynamicCache(), max_new_tokens=N)
        check(press.digest() == first, "%s: a second run's digest differs" % what)
        check(hooks_left(model) == 0, "%s: hooks left on the model" % what)
    # the control: kvpress's DecodingPress holds the same counts after each step
    rec, dp = Steps(model), DecodingPress(base_press=RandomPress(seed=0), target_size=T,
                                          compression_interval=I)
    try:
        pipe(context, question=question, press=dp, cache=DynamicCache(), max_new_tokens=N)
    finally:
        rec.remove()
    held = [a[0] for a in rec.after[1:]]
    k = next(i for i, h in enumerate(held) if h <= T + I - 1)  # its first compression
    check(all(T <= h <= T + I - 1 for h in held[k:]) and k <= I,
          "DecodingPress control: held %s" % held)
    # two questions: refused for a DecodingPress, by kvpress
    try:
        pipe(context, questions=[question, question], press=KvevictPress(), max_new_tokens=2)
        check(False, "two questions were not refused")
    except ValueError as e:
        check("DecodingPress is not compatible with multiple questions" in str(e), str(e))
    # compression_ratio: B = int(P (1 - ratio)), kvpress's count of the prompt
    press = KvevictPress(compression_ratio=0.5, compression_interval=I, window=W, pin_prompt=False)
    rec = Steps(model)
    try:
        pipe(context, question=question, press=press, cache=DynamicCache(), max_new_tokens=N)
    finally:
        rec.remove()
    prompt = rec.before[0][1] + rec.before[1][1]
    check(press.schedule.budget == int(prompt * 0.5) and
          rec.after[-1][0] <= int(prompt * 0.5) + I,
          "compression_ratio 0.5: budget %d, held %d, prompt %d"
          % (press.schedule.budget, rec.after[-1][0], prompt))
    # PrefillDecodingPress: Knorm compresses the context, KvevictPress adopts it
    kp = KvevictPress(target_size=T, compression_interval=I, window=W, pin_prompt=False, seed=3)
    comb = PrefillDecodingPress(prefilling_press=KnormPress(compression_ratio=0.5),
                                decoding_press=kp)
    rec = Steps(model)
    try:
        pipe(context, question=question, press=comb, cache=DynamicCache(), max_new_tokens=N)
    finally:
        rec.remove()
    ctx = rec.before[0][1]
    kept = rec.before[1][0]
    check(kept == int(ctx * 0.5), "PrefillDecodingPress: Knorm kept %d of %d" % (kept, ctx))
    steps = [kept + rec.before[1][1]] + [q for _, q in rec.before[2:]]
    check(kp.digest() == oracle_digest(cfg, 0, steps, T - 1, W, I, seed=3),
          "PrefillDecodingPress(Knorm, KvevictPress): digest differs from kvevict.State's")
    held = [a[0] for a in rec.after[2:]]
    check(all(T <= h <= T + I - 1 for h in held),
          "PrefillDecodingPress(Knorm, KvevictPress): held %s" % held)
    print("%-30s context %d -> %d, held %s..%s" % ("pipeline PrefillDecodingPress", ctx, kept,
                                                  held[:3], held[-3:]))
    check(hooks_left(model) == 0, "PrefillDecodingPress: hooks left on the model")


def composed(model, ids):
    cfg = model.config
    kp = KvevictPress(target_size=B + 1, compression_interval=R, window=W, pin_prompt=False)
    with ComposedPress([KnormPress(compression_ratio=0.5), kp])(model):
        out = gen(model, ids)
    steps = [P // 2] + [1] * (NEW - 1)
    check(kp.digest() == oracle_digest(cfg, 0, steps, B, W, R)
          and out.sequences.shape[1] == P + NEW,
          "ComposedPress([Knorm, KvevictPress]): digest differs from kvevict.State's")
    try:
        bad = ComposedPress([KvevictPress(target_size=B + 1), KnormPress(compression_ratio=0.5)])
        with bad(model):
            gen(model, ids, n=3)
        check(False, "ComposedPress([KvevictPress, Knorm]) was not refused")
    except ValueError as e:
        check("put KvevictPress last" in str(e), "ComposedPress refusal: %s" % e)
    model(ids)  # stale hooks leave
    check(hooks_left(model) == 0, "ComposedPress: hooks left on the model")


def registry(model, ids):
    reg = kvpress_registry()
    check(set(reg) == {"kvevict_random", "kvevict_random_p0", "kvevict_knorm"},
          "kvpress_registry: %s" % sorted(reg))
    for name, press in reg.items():
        check(isinstance(press, DecodingPress), "%s is not a DecodingPress" % name)
        # what evaluate.py's _setup_press does for a DecodingPress
        press.compression_interval, press.target_size = R, B + 1
        press.hidden_states_buffer_size = 0
        with press(model):
            gen(model, ids, n=20)
        check(press.schedule.budget == B and press.schedule.interval == R,
              "%s: evaluate.py's target_size / compression_interval not used" % name)


def refusals(model):
    cases = [
        (lambda: KvevictPress(base_press=KnormPress()), "base_press = KnormPress"),
        (lambda: KvevictPress(target_size=1), "target_size = 1"),
        (lambda: KvevictPress(compression_interval=0), "compression_interval = 0"),
        (lambda: KvevictPress(window=0), "window = 0"),
        (lambda: KvevictPress(compression_ratio=1.0), "compression_ratio = 1.0"),
        (lambda: KvevictPress(scorer="lru"), "scorer = 'lru'"),
        (lambda: KvevictPress(scorer="triattention"), "needs stats"),
        (lambda: KvevictPress(seed=-1), "seed = -1"),
        (lambda: KvevictPress().compress(None, None, None, None, None, {}), "base press"),
        (lambda: KvevictPress().digest(), "no sequence"),
    ]

    try:  # kvpress's own refusal: its wrappers take a ScorerPress
        DecodingPress(base_press=KvevictPress())
        check(False, "DecodingPress(base_press=KvevictPress()) was not refused")
    except AssertionError as e:
        check("ScorerPress" in str(e), "DecodingPress's refusal: %s" % e)

    def batch():
        with KvevictPress(target_size=B + 1)(model):
            model.generate(torch.ones((2, 5), dtype=torch.long), max_new_tokens=2, pad_token_id=0)
    cases.append((batch, "batch size 2"))
    for make, words in cases:
        try:
            make()
            check(False, "no error for %r" % words)
        except ValueError as e:
            check(words in str(e), "error %r does not say %r" % (str(e), words))
    check(hooks_left(model) == 0, "refusals: hooks left on the model")


def docs():
    """docs/INTEGRATION.md's hf-press block, run as written on a tiny model."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "INTEGRATION.md").read_text()
    code = [b for b in re.findall(r"```python\n(.*?)```", doc, re.S)
            if b.startswith("# doc-test: hf-press\n")]
    check(len(code) == 1, "INTEGRATION.md: %d blocks tagged hf-press" % len(code))
    ns = dict(model=tiny_qwen3(), input_ids=torch.randint(1, 128, (1, P)))
    exec(compile(code[0], "INTEGRATION.md[hf-press]", "exec"), ns)
    check(ns["out"].shape[1] > P, "INTEGRATION.md hf-press: generated %d tokens"
          % (ns["out"].shape[1] - P))


def main():
    torch.set_num_threads(1)
    model = tiny_qwen3()
    torch.manual_seed(3)
    ids = torch.randint(1, 128, (1, P))
    stats = calibrate_triattention(model, torch.randint(1, 128, (1, 32)))
    alone("qwen3", model, ids, stats)
    llama = kvpress_tiny.model()
    alone("llama", llama, torch.randint(1, 128, (1, P)), calibrate_triattention(
        llama, torch.randint(1, 128, (1, 32))))
    composed(model, ids)
    registry(model, ids)
    refusals(model)
    docs()
    with tempfile.TemporaryDirectory() as tmp:
        kvpress_tiny.save(tmp)
        in_pipeline(pipeline("kv-press-text-generation", model=tmp, device="cpu"))
    if FAILS:
        print("%d failures" % len(FAILS))
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
