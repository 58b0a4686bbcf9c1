#!/usr/bin/python3
"""serve_bench's engine (python/kvevict/examples/serve_engine.py) on the CPU,
tiny preset, checked every step (Engine.check: the state's n_valid and
n_tokens are the engine's, every row's slots lie in its own pages, no page
has two owners, the pages in use fit the KV budget).

1. No eviction (the full arm, and the random arm with a budget no sequence
   reaches), continuous batching with chunked prefill and a queue: every
   generated token's logits equal plain causal attention over the sequence.
2. The random arm with rounds: at every step each row's keep-sets (the
   state's tables) have the state's keep-set digest (docs/SPEC.md
   "Digest", tests/oracle), the same as a fresh state fed one token at a
   time, and layer 0's cache holds, at each valid slot of each head, the
   K and V of the position the table names there (the moves and writes
   through torch.ops.kvevict.cache_write).
3. Every arm, in steady state, stays within its KV budget and generates.
4. Bad arguments get clear errors; --json and --html write their files.
"""
import contextlib
import io
import json
import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "oracle"))
import kve_oracle  # noqa: E402
import kvevict  # noqa: E402
from kvevict.examples import serve_bench as sb  # noqa: E402
from kvevict.examples.serve_engine import ARMS, Engine, Request  # noqa: E402
from kvevict.examples.serve_model import PRESETS, Model, dense_forward  # noqa: E402

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def requests(model, n, seed=5, prompt=20, new=12):
    g = torch.Generator().manual_seed(seed)
    return [Request(i + 1, torch.randint(0, model.cfg.vocab, (prompt + 7 * i,),
                                         generator=g).tolist(), new + 3 * i) for i in range(n)]


def serve(eng, reqs, each_step=None):
    for r in reqs:
        eng.submit(r)
    with torch.no_grad():
        while eng.queue or eng.rows:
            eng.step()
            if each_step:
                each_step(eng)


def no_eviction(model):
    for arm, budget in (("full", 48), ("random", 200)):
        eng = Engine(model, arm, kv_bytes=160 * eng_token_bytes(model), prompt_len=48, max_new=30,
                     budget=budget, window=8, interval=8, page_size=8, max_seqs=3, chunk=16,
                     record=True, check=True)
        reqs = requests(model, 5)
        serve(eng, reqs)
        check(len(eng.finished) == 5, "%s: %d of 5 requests finished" % (arm, len(eng.finished)))
        worst = 0.0
        for r in reqs:
            seq = r.prompt + r.done_tokens[:-1]
            ref = dense_forward(model, seq)[len(r.prompt) - 1:]
            got = torch.stack(r.logits)
            check(got.shape == ref.shape, "%s: request %d logits %s, dense %s"
                  % (arm, r.rid, tuple(got.shape), tuple(ref.shape)))
            if got.shape == ref.shape:
                worst = max(worst, float((got - ref).abs().max()))
            check(r.done_tokens == ref.argmax(-1).tolist(),
                  "%s: request %d's greedy tokens differ from the dense model's" % (arm, r.rid))
        check(worst <= 1e-4, "%s: engine logits vs dense attention: max abs error %g" % (arm, worst))
        print("no eviction, %s arm: 5 requests, max |logit - dense| %.3g, %d preempted"
              % (arm, worst, eng.preempted))


def eng_token_bytes(model):
    c = model.cfg
    return c.layers * 2 * c.kv_heads * c.head_dim * 4


def keepsets(model):
    eng = Engine(model, "random", kv_bytes=200 * eng_token_bytes(model), prompt_len=48,
                 max_new=60, budget=24, window=8, interval=8, page_size=8, max_seqs=3, chunk=16,
                 check=True)
    seen = {"rows": 0, "rounds": 0, "slots": 0}

    def each_step(e):
        c = model.cfg
        for r, row in e.rows.items():
            if row.pos == 0:
                continue  # admitted, its first chunk not yet run
            info = e.state.seq(r)
            t = e.state.slots(r)[:, :, :info.n_valid]          # [L, HKV, n_valid] positions
            heads = [(row.req.rid, l, h, t[l, h].tolist()) for l in range(c.layers)
                     for h in range(c.kv_heads)]
            dg = e.state.keepset_digest(r)
            check(kve_oracle.digest(heads) == dg,
                  "row %d: the spec's digest of the state's tables != keepset_digest" % r)
            fresh = kvevict.State(kvevict.Context("cpu"), max_seqs=1, n_layers=c.layers,
                                  n_heads=c.kv_heads, budget=24, window=8, interval=8,
                                  max_slots=e.cap, seed=2609)
            fresh.admit(0, row.req.rid, len(row.req.prompt))
            for _ in range(row.pos):
                fresh.append([0], [1], outputs=False)
            check(fresh.keepset_digest(0) == dg,
                  "row %d: keep-sets differ from a state fed one token at a time" % r)
            seq = (row.req.prompt + row.req.done_tokens)[:row.pos]
            kv = []
            dense_forward(model, seq, keys=kv)
            k0, v0 = kv[0]                                        # layer 0: no attention before it
            flat = torch.tensor(row.pages)[torch.arange(info.n_valid) // e.page_size] * \
                e.page_size + torch.arange(info.n_valid) % e.page_size
            kc = e.k[0].view(-1, c.kv_heads, c.head_dim)[flat]    # [n_valid, HKV, D]
            vc = e.v[0].view(-1, c.kv_heads, c.head_dim)[flat]
            for h in range(c.kv_heads):
                pos = torch.as_tensor(t[0, h]).long()
                err = max(float((kc[:, h] - k0[pos, h]).abs().max()),
                          float((vc[:, h] - v0[pos, h]).abs().max()))
                check(err <= 1e-5, "row %d head %d: cached K/V vs the positions' K/V: %g"
                      % (r, h, err))
            seen["rows"] += 1
            seen["rounds"] += info.round > 0
            seen["slots"] += info.n_valid

    serve(eng, requests(model, 4, seed=9, prompt=12, new=40), each_step)
    check(seen["rounds"] > 10, "the random arm ran too few rounds to test (%s)" % seen)
    print("random arm: keep-sets and layer-0 cache checked at %(rows)d row-steps "
          "(%(rounds)d after a round)" % seen)


def budgets(model):
    a = sb.parse_args(["--preset", "tiny", "--steps", "30", "--warmup", "2", "--check"])
    stats = sb.calibrate(model)
    res = {}
    for arm in ARMS:
        r = res[arm] = sb.run_arm(model, arm, a, stats, log=lambda m: None)
        check(r["peak_kv_bytes"] <= a.kv_bytes and max(r["kv_series"]) <= a.kv_bytes,
              "%s: peak KV %d bytes over the budget %d" % (arm, r["peak_kv_bytes"], a.kv_bytes))
        check(r["tokens_per_s"] > 0 and r["filled"] > 0 and r["seqs_min"] > 0,
              "%s: nothing ran (%s)" % (arm, {k: r[k] for k in ("tokens_per_s", "filled")}))
    full, rnd = res["full"], res["random"]
    check(rnd["capacity"] < full["capacity"] and rnd["seqs_mean"] > full["seqs_mean"],
          "the random arm holds no more sequences than the full one at the same memory "
          "(%.1f vs %.1f)" % (rnd["seqs_mean"], full["seqs_mean"]))
    sb.print_table(res, "tiny")


def interleaving(model):
    """run_arms: every arm built first, a common warm-up round robin, then
    blocks of --block timed steps round robin; each arm's spread reported."""
    a = sb.parse_args(["--preset", "tiny", "--steps", "5", "--warmup", "2", "--block", "2"])
    order = []
    step = sb.ArmRun.step

    def spy(self, timed):
        order.append((self.arm, timed))
        return step(self, timed)

    sb.ArmRun.step = spy
    try:
        res = sb.run_arms(model, ["full", "random", "knorm"], a, log=lambda m: None)
    finally:
        sb.ArmRun.step = step
    arms = ["full", "random", "knorm"]
    want = [(x, False) for _ in range(2) for x in arms] + \
        [(x, True) for n in (2, 2, 1) for x in arms for _ in range(n)]
    check(order == want, "run_arms' step order %s, expected %s" % (order, want))
    for arm in arms:
        r = res[arm]
        check(r["timed_steps"] == 5 and len(r["block_tokens_per_s"]) == 3
              and r["tokens_per_s_min"] <= r["tokens_per_s_max"] and r["spread"] >= 0,
              "%s: blocks %s, spread %s" % (arm, r["block_tokens_per_s"], r["spread"]))


def expect_error(fn, kind, *words):
    try:
        fn()
    except SystemExit as e:
        msg = getattr(e, "msg", "")
        check(e.code == 2 and all(w in msg for w in words),
              "exit %r, %r does not name %s" % (e.code, msg, words))
        return
    except kind as e:
        msg = str(e)
        check(all(w in msg for w in words), "error %r does not name %s" % (msg, words))
        return
    check(False, "no error for %s" % (words,))


def parse_err(argv):
    buf = io.StringIO()
    with contextlib.redirect_stderr(buf):
        try:
            sb.parse_args(argv)
        except SystemExit as e:
            e.msg = buf.getvalue()
            raise


def bad_arguments(model):
    tb = eng_token_bytes(model)
    expect_error(lambda: parse_err(["--arms", "random,lru"]), SystemExit, "--arms", "lru")
    expect_error(lambda: parse_err(["--steps", "0"]), SystemExit, "--steps", "0")
    expect_error(lambda: parse_err(["--kv-gib", "-1"]), SystemExit, "--kv-gib", "-1")
    expect_error(lambda: parse_err(["--prompts", "x.jsonl"]), SystemExit, "--prompts", "--model")
    expect_error(lambda: parse_err(["--preset", "qwen3-1b"]), SystemExit, "--preset", "qwen3-1b")
    expect_error(lambda: Engine(model, "lru", kv_bytes=1 << 20, prompt_len=8, max_new=8),
                 ValueError, "arm", "lru")
    expect_error(lambda: Engine(model, "random", kv_bytes=8 * tb, prompt_len=32, max_new=8),
                 ValueError, "kv_bytes", str(8 * tb))
    expect_error(lambda: Engine(model, "random", kv_bytes=1 << 20, prompt_len=8, max_new=8,
                                page_size=0), ValueError, "page_size", "0")
    expect_error(lambda: Engine(model, "random", kv_bytes=1 << 20, prompt_len=8, max_new=8,
                                attn="paged"), ValueError, "attn", "paged")
    expect_error(lambda: Engine(model, "triattention", kv_bytes=1 << 20, prompt_len=8,
                                max_new=8), ValueError, "triattention", "stats")
    eng = Engine(model, "random", kv_bytes=1 << 20, prompt_len=8, max_new=8)
    expect_error(lambda: eng.submit(Request(1, [1] * 9, 8)), ValueError, "request 1", "9")
    bad = PRESETS["tiny"].__class__("odd", 1, 8, 3, 2, 4, 8, 8)
    expect_error(lambda: Model(bad), ValueError, "q_heads = 3", "kv_heads = 2")
    with tempfile.TemporaryDirectory() as tmp:
        p = os.path.join(tmp, "p.jsonl")
        with open(p, "w") as f:
            f.write('{"prompt": "a", "answer": "b", "bucket": "x"}\n{"prompt": "c"}\n')
        expect_error(lambda: sb.read_prompts(p), ValueError, "line 2", "answer")


def outputs():
    with tempfile.TemporaryDirectory() as tmp:
        js, ht = os.path.join(tmp, "r.json"), os.path.join(tmp, "r.html")
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = sb.main(["--preset", "tiny", "--arms", "full,random", "--steps", "6",
                          "--warmup", "1", "--json", js, "--html", ht, "--results"])
        check(rc == 0, "main returned %r" % rc)
        with open(js) as f:
            d = json.load(f)
        check(sorted(d["arms"]) == ["full", "random"] and "paper" in d["meta"]["paper_note"],
              "JSON: %s" % sorted(d))
        with open(ht) as f:
            page = f.read()
        check(page.count("<svg") == 3 and "paper's Table 4" in page, "HTML lacks its figures")
        text = out.getvalue()
        check("spread" in text, "the table has no spread column:\n" + text)
        check("RESULT serve_random_tok_s " in text and "RESULT serve_random_over_full " in text,
              "no RESULT lines:\n" + text)


def main():
    torch.manual_seed(0)
    model = Model(PRESETS["tiny"], seed=3)
    no_eviction(model)
    keepsets(model)
    budgets(model)
    interleaving(model)
    bad_arguments(model)
    outputs()
    print("%d failures" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
