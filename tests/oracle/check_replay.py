#!/usr/bin/python3
"""Check `kvevict replay` and `kvevict diff` against the Python oracle.

    /usr/bin/python3 tests/oracle/check_replay.py --kvevict build/tools/kvevict \
        [--cases 300] [--seed 1] [--extra-arg ARG ...]

  * replay on --cases random requests (every key mode, shard offsets): each
    round's evicted positions, round digest and running digest equal
    kve_oracle.replay (docs/SPEC.md sections 5 and 11);
  * shards: the running digests of 1, 2, 4 and 8 shards over heads and over
    layers sum (mod 2^64) to the unsharded one, in every mode;
  * single-input flips (seed, seq_id, one position, the round) change it;
  * diff: equal logs exit 0; a planted divergence is named at its request,
    round, layer and head with the positions that differ (exit 1); per-request
    digest lists; unreadable input exits 2.
The last line is "N passed, M failed"; exit status 0 only when M == 0.
"""

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import kve_oracle as kve  # noqa: E402

MODES = (0, kve.PERSISTENT, kve.SHARED_HEADS, kve.SHARED_LAYERS,
         kve.SHARED_HEADS | kve.SHARED_LAYERS, kve.PERSISTENT | kve.SHARED_HEADS)


class Runner:
    def __init__(self, exe, extra):
        self.exe, self.extra = exe, extra
        self.passed, self.failed = 0, []

    def check(self, name, ok, detail=""):
        if ok:
            self.passed += 1
        else:
            self.failed.append("%s: %s" % (name, detail))

    def run(self, args, extra=True):
        argv = [self.exe] + args + (self.extra if extra and args[0] == "replay" else [])
        return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def replay_args(c, summary=False):
    a = ["replay", "--seed", str(c["seed"]), "--seq-id", str(c["seq_id"]),
         "--prompt", str(c["prompt"]), "--tokens", str(c["tokens"]),
         "--budget", str(c["budget"]), "--window", str(c["window"]),
         "--interval", str(c["r"]), "--layers", str(c["layers"]), "--heads", str(c["heads"]),
         "--layer-offset", str(c["loff"]), "--head-offset", str(c["hoff"])]
    f = c["flags"]
    a += (["--persistent"] if f & kve.PERSISTENT else []) + \
         (["--shared-heads"] if f & kve.SHARED_HEADS else []) + \
         (["--shared-layers"] if f & kve.SHARED_LAYERS else [])
    return a + (["--summary"] if summary else [])


def oracle_rounds(c):
    return kve.replay(c["seed"], c["seq_id"], c["prompt"], c["window"], c["budget"], c["r"],
                      c["tokens"], c["layers"], c["heads"], c["loff"], c["hoff"], c["flags"])


def random_config(rng):
    r = rng.randint(1, 6)
    budget = rng.randint(0, 24)
    prompt = rng.randint(0, 12)
    window = rng.randint(0, 6)
    cap = max(budget, prompt + window) + r
    return dict(seed=rng.getrandbits(64), seq_id=rng.getrandbits(64), prompt=prompt,
                tokens=prompt + rng.randint(0, cap + 6 * r), budget=budget, window=window, r=r,
                layers=rng.randint(1, 3), heads=rng.randint(1, 3),
                loff=rng.choice((0, rng.randint(0, 40))), hoff=rng.choice((0, rng.randint(0, 9))),
                flags=rng.choice(MODES))


def golden_configs():
    import golden_markdown
    e = golden_markdown.RUN_EXAMPLE
    return [dict(seed=e["seed"], seq_id=e["seq_id"], prompt=e["prompt"], tokens=e["tokens"],
                 budget=e["budget"], window=e["window"], r=e["r"], layers=e["layers"],
                 heads=e["heads"], loff=e["loff"], hoff=e["hoff"], flags=f)
            for f in (0, kve.SHARED_HEADS)]


def check_replay(R, rng, n):
    golden = golden_configs()
    for i in range(n + len(golden)):
        c = golden[i] if i < len(golden) else random_config(rng)
        p = R.run(replay_args(c))
        if p.returncode:
            R.check("replay %d" % i, False, "exit %d: %s" % (p.returncode, p.stderr.strip()))
            continue
        got = [json.loads(l) for l in p.stdout.splitlines()]
        want = oracle_rounds(c)
        ok = len(got) == len(want)
        for g, (k, tables, rd, run) in zip(got, want):
            ok = ok and g["round"] == k and int(g["round_digest"], 16) == rd \
                and int(g["running_digest"], 16) == run and g["seq_id"] == c["seq_id"] \
                and [(h["layer"], h["head"], h["evicted"]) for h in g["heads"]] == tables
        R.check("replay %d" % i, ok, "config %r: %d rounds, oracle %d" % (c, len(got), len(want)))


def summary_digest(R, c):
    p = R.run(replay_args(c, summary=True))
    if p.returncode:
        return None
    return int(json.loads(p.stdout)["running_digest"], 16)


def check_shards(R, rng):
    for flags in MODES:
        base = dict(seed=rng.getrandbits(64), seq_id=rng.getrandbits(64), prompt=5, tokens=90,
                    budget=20, window=3, r=4, layers=8, heads=8, loff=0, hoff=0, flags=flags)
        whole = summary_digest(R, base)
        R.check("shards flags=%d whole" % flags, whole is not None, "replay failed")
        for axis in ("heads", "layers"):
            for n in (1, 2, 4, 8):
                total = 0
                for s in range(n):
                    c = dict(base)
                    c[axis] = 8 // n
                    c["hoff" if axis == "heads" else "loff"] = s * (8 // n)
                    d = summary_digest(R, c)
                    total = (total + (d or 0)) % (1 << 64)
                R.check("shards flags=%d %s x%d" % (flags, axis, n), total == whole,
                        "sum 0x%016x, unsharded 0x%016x" % (total, whole or 0))


def check_flips(R, rng):
    base = dict(seed=11, seq_id=12, prompt=4, tokens=60, budget=10, window=3, r=4, layers=2,
                heads=2, loff=0, hoff=0, flags=0)
    ref = summary_digest(R, base)
    for field, value in (("seed", 10), ("seq_id", 13)):
        c = dict(base, **{field: value})
        R.check("flip %s" % field, summary_digest(R, c) not in (None, ref), "digest unchanged")
    (k, tables, rd, _), = oracle_rounds(base)[:1]
    layer, head, pos = tables[0]
    moved = [(layer, head, [pos[0] + 1000] + pos[1:])] + tables[1:]
    R.check("flip one position",
            kve.round_digest(11, 12, k, moved) != rd, "round digest unchanged")
    R.check("flip the round", kve.round_digest(11, 12, k + 1, tables) != rd,
            "round digest unchanged")


def write(lines):
    f = tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False)
    f.write("".join(l + "\n" for l in lines))
    f.close()
    return f.name


def check_diff(R, rng):
    c = dict(seed=5, seq_id=99, prompt=6, tokens=120, budget=16, window=4, r=4, layers=3,
             heads=2, loff=4, hoff=2, flags=0)
    p = R.run(replay_args(c))
    lines = p.stdout.splitlines()
    a = write(lines)
    files = [a]
    q = R.run(["diff", a, a], extra=False)
    R.check("diff equal", q.returncode == 0 and q.stdout.strip() == "equal: %d records"
            % len(lines), "exit %d: %s" % (q.returncode, q.stdout))
    for trial in range(20):
        k = rng.randrange(len(lines))
        rec = json.loads(lines[k])
        h = rng.randrange(len(rec["heads"]))
        head = rec["heads"][h]
        old = head["evicted"][rng.randrange(len(head["evicted"]))]
        new = old + 100000
        head["evicted"] = sorted([x for x in head["evicted"] if x != old] + [new])
        planted = lines[:k] + [json.dumps(rec, separators=(",", ":"))] + lines[k + 1:]
        b = write(planted)
        files.append(b)
        q = R.run(["diff", a, b], extra=False)
        want = ("differ: request seq_id=99 round=%d layer=%d head=%d: only in A: [%d] "
                "only in B: [%d]" % (rec["round"], head["layer"], head["head"], old, new))
        R.check("diff planted %d" % trial, q.returncode == 1 and q.stdout.strip() == want,
                "exit %d: %r, want %r" % (q.returncode, q.stdout.strip(), want))
    # Per-request digest lists, as an engine logs them at retire.
    reqs = ['{"seq_id":%d,"running_digest":"0x%016x"}' % (i, rng.getrandbits(64))
            for i in range(10)]
    x = write(reqs)
    bad = list(reqs)
    bad[6] = '{"seq_id":6,"running_digest":"0x0000000000000001"}'
    y = write(bad)
    z = write(reqs[:9])
    files += [x, y, z]
    q = R.run(["diff", x, y], extra=False)
    R.check("diff digest list", q.returncode == 1 and q.stdout.startswith(
        "differ: request seq_id=6: running_digest"), "exit %d: %s" % (q.returncode, q.stdout))
    q = R.run(["diff", x, z], extra=False)
    R.check("diff missing request", q.returncode == 1 and "seq_id=9: only in A" in q.stdout,
            "exit %d: %s" % (q.returncode, q.stdout))
    for text in ('{"seq_id":1', '[1,2]', '{"round":3}', '{"seq_id":-1}',
                 '{"seq_id":1,"running_digest":"12"}', '{"seq_id":1}\n{"seq_id":1}',
                 '{"seq_id":1,"heads":[{"layer":0}]}'):
        w = write([text])
        files.append(w)
        q = R.run(["diff", w, x], extra=False)
        R.check("diff bad input %r" % text, q.returncode == 2 and "diff:" in q.stderr,
                "exit %d: %s" % (q.returncode, q.stderr))
    for f in files:
        os.unlink(f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvevict", required=True)
    ap.add_argument("--cases", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--extra-arg", action="append", default=[])
    a = ap.parse_args()
    R = Runner(a.kvevict, a.extra_arg)
    rng = random.Random(a.seed)
    check_replay(R, rng, a.cases)
    check_shards(R, rng)
    check_flips(R, rng)
    check_diff(R, rng)
    for f in R.failed[:10]:
        print("FAIL", f)
    print("%d passed, %d failed" % (R.passed, len(R.failed)))
    return 1 if R.failed else 0


if __name__ == "__main__":
    sys.exit(main())
