#!/usr/bin/python3
"""kvevict.hf's scored arms at kvpress's cost (label hf; exit 77 without
transformers): the library's scorer reads the cache's keys where they are
(a bfloat16 cache scored in place, no float32 copy; the keep-sets equal
those of scoring float32 copies, the conversion being exact), and the
library's CPU calls run with the model's threads (torch's setting), as
kvpress's presses do. The time share itself is hf_bench's figure
(docs/BENCHMARKS.md), not asserted here."""
import os
import sys

import torch

try:
    from transformers import Qwen3Config, Qwen3ForCausalLM
except ImportError as e:
    print("skipped: transformers is not installed (%s)" % e)
    sys.exit(1 if os.environ.get("KVE_HF_REQUIRED") else 77)

import kvevict._state  # noqa: E402
from kvevict.hf import KvevictCache  # noqa: E402

FAILS = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        FAILS.append(what)


def tiny(dtype):
    torch.manual_seed(7)
    cfg = Qwen3Config(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                      max_position_embeddings=512, tie_word_embeddings=False)
    return Qwen3ForCausalLM(cfg).to(dtype).eval()


def decode(model, scorer, steps=60):
    cache = KvevictCache(model.config, budget=24, window=4, interval=8, seed=5, seq_id=9,
                         scorer=scorer)
    ids = torch.arange(3, 15)[None]
    with torch.no_grad():
        for _ in range(steps):
            ids = model(input_ids=ids, past_key_values=cache, use_cache=True).logits[:, -1:] \
                .argmax(-1)
    return cache


def main():
    model = tiny(torch.bfloat16)
    seen = []
    real = kvevict._state.State.score

    def spy(self, rows, n_new, layer, keys, out, **kw):
        held = cache_of[0].layers[layer].keys
        seen.append((keys.data_ptr() == held.data_ptr(), keys.dtype))
        return real(self, rows, n_new, layer, keys, out, **kw)

    def as_f32(self, rows, n_new, layer, keys, out, **kw):
        return real(self, rows, n_new, layer, keys.float(), out, **kw)

    cache_of = [None]
    try:
        kvevict._state.State.score = spy
        c = cache_of[0] = KvevictCache(model.config, budget=24, window=4, interval=8, seed=5,
                                       seq_id=9, scorer="knorm")
        ids = torch.arange(3, 15)[None]
        with torch.no_grad():
            for _ in range(60):
                ids = model(input_ids=ids, past_key_values=c, use_cache=True).logits[:, -1:] \
                    .argmax(-1)
        kvevict._state.State.score = as_f32
        ref = decode(model, "knorm")
    finally:
        kvevict._state.State.score = real
    check(len(seen) >= 8 and all(same and dt == torch.bfloat16 for same, dt in seen),
          "a bfloat16 cache's keys scored in place: %d layer scorings, all on the cache's own "
          "bfloat16 tensor" % len(seen))
    check(c.state.seq(0).round >= 4 and c.digest() == ref.digest(),
          "the same keep-sets as scoring float32 copies (%d rounds, digest %016x)"
          % (c.state.seq(0).round, c.digest()))

    for n in (1, 2):
        torch.set_num_threads(n)
        cache = decode(tiny(torch.float32), "knorm", steps=2)
        check(cache._ctx.threads == n, "torch.set_num_threads(%d): the library's context runs "
              "%d thread(s)" % (n, cache._ctx.threads))
    if FAILS:
        print("%d failed" % len(FAILS))
        return 1
    print("all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
