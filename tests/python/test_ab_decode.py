#!/usr/bin/python3
"""The four-arm decode example (python/kvevict/examples/ab_decode.py): every
arm through the same state, cache writes and stock attention.

Checks, on a short run: the full arm's logits equal plain causal attention
over every token (so the engine path itself moves nothing); the evicting
arms run the schedule's rounds and hold its slots; the pinned arms keep the
whole prompt in every head and the unpinned one does not; the keep-set
digests equal the spec's digest of the final tables (tests/oracle), differ
between arms, and the TriAttention arm's is the same on a second run; the
logits of the evicting arms move from the full cache's, the full arm's not.
"""
import math
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "oracle"))
import kve_oracle  # noqa: E402
from kvevict.examples import ab_decode as ex  # noqa: E402

STEPS, P, B, W, R = 300, 64, 160, 16, 16
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


def main():
    res = ex.run(STEPS, P, B, W, R, log=lambda m: None)
    ex.print_table(res)
    dense = ex.dense_logits(STEPS, P)
    full = res["full"]
    err = float((full["logits"] - dense).abs().max())
    check(err <= 1e-4, "full arm vs plain causal attention: max abs error %g" % err)
    check(full["rounds"] == 0 and full["max_dlogit"] == 0 and full["held"] == P + STEPS,
          "the full arm evicted or moved: %s" % {k: full[k] for k in ("rounds", "held")})
    n = P + STEPS
    for name in ("triattention", "random", "random-p0"):
        r = res[name]
        p = r["prompt_len"]
        cap = max(B, p + W) + R
        rounds = max(0, math.ceil((n - cap) / R))
        valid = n if n <= cap else cap - R + (n - cap - 1) % R + 1
        check(r["rounds"] == rounds and r["held"] == valid and r["peak"] == cap,
              "%s: rounds %d held %d peak %d, the schedule says %d, %d, %d"
              % (name, r["rounds"], r["held"], r["peak"], rounds, valid, cap))
        t = r["tables"]  # [layers, heads, n_valid]
        heads = [(11, l, h, t[l, h].tolist()) for l in range(ex.L) for h in range(ex.HKV)]
        check(kve_oracle.digest(heads) == int(r["digest"], 16),
              "%s: keep-set digest %s != the spec's digest of its tables" % (name, r["digest"]))
        prompt_kept = all(set(range(P)) <= set(x[3]) for x in heads)
        check(prompt_kept == (name != "random-p0"),
              "%s: the prompt is %s in every head" % (name, "kept" if prompt_kept else "not kept"))
        check(r["max_dlogit"] > 0 and 0 < r["top1"] <= 1,
              "%s: logits did not move (max %g)" % (name, r["max_dlogit"]))
    digests = [res[a]["digest"] for a in ex.ARMS]
    check(len(set(digests)) == len(digests), "arms share a keep-set digest: %s" % digests)
    again = ex.run(STEPS, P, B, W, R, arms=("triattention",), log=lambda m: None)
    check(again["triattention"]["digest"] == res["triattention"]["digest"] and
          torch.equal(again["triattention"]["logits"], res["triattention"]["logits"]),
          "the TriAttention arm differs between two runs")
    for f in failures:
        print("FAIL:", f)
    print("%d failures" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
