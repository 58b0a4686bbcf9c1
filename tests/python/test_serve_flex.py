#!/usr/bin/python3
"""serve_bench's flex-attention decode path (serve_engine.FlexDecode) on the
CPU, with a torch >= 2.5 (label hf: run.sh's virtual environment; exit 77,
skipped, with an older torch): flex attention's eager implementation over
the paged cache, the block table padded to one column per page.

1. No eviction (full arm, continuous batching, chunked prefill): every
   generated token's logits equal plain causal attention over the sequence.
2. With rounds (random arm): the same tokens and logits as the gather path
   over the same keep-sets.
"""
import os
import sys

import torch

major, minor = (int(x) for x in torch.__version__.split(".")[:2])
if (major, minor) < (2, 5):
    print("skipped: torch %s has no flex attention with block masks (>= 2.5)" % torch.__version__)
    sys.exit(1 if os.environ.get("KVE_HF_REQUIRED") else 77)  # run.sh's venv: required

from kvevict.examples.serve_engine import Engine, Request  # noqa: E402
from kvevict.examples.serve_model import PRESETS, Model, dense_forward  # noqa: E402

FAILS = []


def check(ok, what):
    if not ok:
        FAILS.append(what)
        print("FAIL:", what)


def serve(model, arm, attn, budget):
    eng = Engine(model, arm, kv_bytes=1 << 20, prompt_len=48, max_new=24, budget=budget,
                 window=8, interval=8, page_size=8, max_seqs=3, chunk=16, record=True,
                 check=True, attn=attn)
    g = torch.Generator().manual_seed(5)
    reqs = [Request(i + 1, torch.randint(0, model.cfg.vocab, (20 + 7 * i,), generator=g).tolist(),
                    12 + 3 * i) for i in range(4)]
    for r in reqs:
        eng.submit(r)
    with torch.no_grad():
        while eng.queue or eng.rows:
            eng.step()
    check(eng.attn_kind == attn, "attention %s, asked for %s" % (eng.attn_kind, attn))
    return reqs


def main():
    torch.set_num_threads(1)  # a tiny model: threads only contend under ctest -j
    model = Model(PRESETS["tiny"], torch.device("cpu"), torch.float32, seed=1)
    worst = 0.0
    for r in serve(model, "full", "flex", 48):
        seq = r.prompt + r.done_tokens[:-1]
        ref = dense_forward(model, seq)[len(r.prompt) - 1:]
        worst = max(worst, float((torch.stack(r.logits) - ref).abs().max()))
        check(r.done_tokens == ref.argmax(-1).tolist(), "full: request %d's tokens differ" % r.rid)
    check(worst <= 1e-4, "full: flex logits vs dense attention: max abs error %g" % worst)
    print("full arm, flex: max |logit - dense| %.3g" % worst)
    a, b = serve(model, "random", "flex", 24), serve(model, "random", "gather", 24)
    worst = 0.0
    for x, y in zip(a, b):
        check(x.done_tokens == y.done_tokens, "random: request %d's tokens differ" % x.rid)
        worst = max(worst, float((torch.stack(x.logits) - torch.stack(y.logits)).abs().max()))
    check(worst <= 1e-4, "random: flex vs gather logits: max abs error %g" % worst)
    print("random arm (B=24), flex vs gather: max |logit difference| %.3g" % worst)
    if FAILS:
        print("%d failures" % len(FAILS))
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
