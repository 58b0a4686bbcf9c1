#!/usr/bin/python3
"""kvevict.hf.KvevictCache on a device (label gpu with --device cuda: exit
77, skipped, without CUDA or transformers; label hf with --device cpu, the
same program on the host): tiny seeded models generate on the device with
every arm, fp32 and bf16, batch 1 and a batch of two rows, and a hybrid
model (sliding and full layers). Every cache update is recorded (its
inputs and what it returned, copied to the host by this test) and replayed
into a KvevictCache on the CPU: what each update returned, and the
keep-sets and digests at the end, equal the CPU's bit for bit, the scored
arms' CPU replay choosing from the recorded run's scores, which must agree
with the CPU scorer's within SCORE_TOL (rounding: docs/SCORERS.md). The scored
arms' state lives on the cache's device (device scoring: the scorer reads
the keys where they are, no host copy of them); the random arms' on the
host; with KVE_BACKEND=cpu (a library without a GPU backend) a scored
arm's too, the keys copied to it each round."""
import argparse
import os
import sys

import torch

try:
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM
except ImportError as e:
    print("skipped: transformers is not installed (%s)" % e)
    sys.exit(1 if os.environ.get("KVE_HF_REQUIRED") else 77)

from kvevict.hf import KvevictCache, calibrate_triattention  # noqa: E402

B, W, R, NEW = 24, 4, 8, 40
# the scored arms' z-scores, GPU against CPU: docs/SCORERS.md bounds them by
# (2 + |z|) x rho / (sd - rho), rho = 2e-5 x S; far below this on these keys
SCORE_TOL = 5e-3
FAILS = []


def check(ok, what):
    if not ok:
        FAILS.append(what)
        print("FAIL:", what)


class Recording(KvevictCache):
    """A KvevictCache that records each update's inputs and outputs, and
    each round's scores, on the host."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls, self.scored = [], []

    def update(self, key_states, value_states, layer_idx, cache_kwargs=None):
        k, v = super().update(key_states, value_states, layer_idx, cache_kwargs)
        self.calls.append((layer_idx, key_states.cpu(), value_states.cpu(), k.cpu(), v.cpu()))
        return k, v

    def _score(self, q):
        out = super()._score(q)
        self.scored.append(out.detach().cpu().clone())
        return out


class Replay(KvevictCache):
    """The CPU's KvevictCache, given the recorded run's scores: the CPU
    scorer's own must agree with them within SCORE_TOL (a GPU's differ from
    the CPU's by rounding, docs/SCORERS.md), and the choice is then made
    from the recorded ones (selection given the scores is exact on every
    backend), so every update must return what the recorded run's did."""

    def __init__(self, scored, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.feed, self.worst = list(scored), 0.0

    def _score(self, q):
        mine, theirs = super()._score(q), self.feed.pop(0)
        err = (mine - theirs).abs() / (1 + theirs.abs())
        self.worst = max(self.worst, float(err.max()))
        return theirs


def model_of(kind):
    torch.manual_seed(1234)
    common = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                  tie_word_embeddings=False)
    if kind == "hybrid":
        types = ["full_attention", "sliding_attention"] * 2
        return Qwen3ForCausalLM(Qwen3Config(head_dim=32, layer_types=types,
                                            use_sliding_window=True, sliding_window=6,
                                            max_window_layers=0, **common)).eval()
    return LlamaForCausalLM(LlamaConfig(**common)).eval()


def run(kind, arm, dtype, rows, device, gpu_backend=True):
    model = model_of(kind)
    stats = calibrate_triattention(model, torch.randint(1, 128, (1, 32)))
    model = model.to(device=device, dtype=dtype)
    scorer = {"random": None, "random-p0": None}.get(arm, arm)
    kw = dict(budget=B, window=W, interval=R, seed=5, seq_id=70, pin_prompt=arm != "random-p0",
              scorer=scorer, stats=stats, rows_unpadded=rows > 1)
    cache = Recording(model.config, **kw)
    g = torch.Generator().manual_seed(21)
    ids = torch.stack([torch.randperm(127, generator=g)[:12] + 1 for _ in range(rows)])
    with torch.no_grad():
        out = model.generate(ids.to(device), past_key_values=cache, do_sample=False,
                             max_new_tokens=NEW, min_new_tokens=NEW, pad_token_id=0)
        # a second turn: an append of more than r tokens after eviction
        turn = torch.randperm(127, generator=g)[:11].repeat(rows, 1).to(device) + 1
        model.generate(torch.cat([out, turn], 1), attention_mask=torch.ones_like(
            torch.cat([out, turn], 1)), past_key_values=cache, do_sample=False,
            max_new_tokens=8, min_new_tokens=8, pad_token_id=0)
    what = "%s %s %s batch %d on %s" % (kind, arm, str(dtype)[6:], rows, device)
    where = cache.state.ctx
    on_device = where.backend != "cpu"
    check(on_device == (scorer is not None and device.type != "cpu" and gpu_backend),
          "%s: the state is on %s" % (what, where.backend))
    replay = Replay(cache.scored, model.config, **kw)
    same = True
    for layer, k, v, want_k, want_v in cache.calls:
        got_k, got_v = replay.update(k, v, layer)
        same = same and torch.equal(got_k, want_k) and torch.equal(got_v, want_v)
    check(same, "%s: an update returned other entries than the CPU's" % what)
    check(replay.worst <= SCORE_TOL and not replay.feed, "%s: scores differ from the CPU's by "
          "%.2e x (1 + |score|) (%d rounds left unread)" % (what, replay.worst, len(replay.feed)))
    for b in range(rows):
        check(cache.kept_positions(b) == replay.kept_positions(b) and
              cache.digest(b) == replay.digest(b) == cache.state.keepset_digest(b),
              "%s: row %d's keep-sets differ from the CPU's" % (what, b))
    cap = max(B, (12 if kw["pin_prompt"] else 0) + W) + R
    rounds = cache.state.seq(0).round
    check(rounds >= 3 and cache.held() <= cap, "%s: %d rounds, held %d (C %d)"
          % (what, rounds, cache.held(), cap))
    print("%-44s %d updates = the CPU's, %d rounds, state on %s, scores within %.1e, "
          "digest %016x" % (what, len(cache.calls), rounds, where.backend, replay.worst,
                            cache.digest()))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("skipped: no CUDA device for torch")
        return 77
    torch.set_num_threads(1)
    print("transformers %s, torch %s, device %s" % (transformers.__version__, torch.__version__,
                                                     device))
    for arm in ("random", "random-p0", "knorm", "triattention"):
        run("llama", arm, torch.float32, 1, device)
    for arm in ("knorm", "triattention"):
        run("llama", arm, torch.bfloat16, 1, device)
        run("llama", arm, torch.float32, 2, device)
        run("hybrid", arm, torch.float32, 1, device)
    run("hybrid", "random", torch.bfloat16, 2, device)
    if device.type != "cpu":  # a library without a GPU backend: the scorer on the host
        import kvevict.ops
        os.environ["KVE_BACKEND"] = "cpu"
        kvevict.ops._local.contexts = {}
        try:
            run("llama", "knorm", torch.float32, 2, device, gpu_backend=False)
        finally:
            os.environ["KVE_BACKEND"] = ""
            kvevict.ops._local.contexts = {}
    if FAILS:
        print("%d failures" % len(FAILS))
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
