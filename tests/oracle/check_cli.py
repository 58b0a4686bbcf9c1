#!/usr/bin/python3
"""Check the `kvevict` command line against the Python oracle.

    /usr/bin/python3 tests/oracle/check_cli.py --kvevict build/tools/kvevict \
        [--cases 2000] [--seed 1] [--backend cpu] [--extra-arg ARG ...] [--jobs J]

Runs, and compares with tests/oracle/kve_oracle.py:
  * `kvevict select` on --cases random configurations (deterministic from
    --seed), on every golden keep-set case, on a few fixed edge cases, and on
    bad inputs (which must fail with a non-zero exit and a message);
  * `kvevict key` on the golden keys and on >= 200 random coordinates;
  * `kvevict digest` on the golden digest batch and on random configurations.
Every one of these runs counts as one configuration. Failures are listed (the
first 10 in detail); the last line is exactly "N passed, M failed", and the
exit status is 0 only when M == 0.

--backend NAME is passed to `select` and `digest`; each --extra-arg is
appended to the `select` and `digest` command lines (e.g. --extra-arg=--threads
--extra-arg=1).  `key` gets neither.
"""

import argparse
import concurrent.futures
import json
import os
import random
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import kve_oracle as kve  # noqa: E402
import gen_golden  # noqa: E402

U32_MAX, U64_MAX, I32_MAX = kve.U32_MAX, kve.U64_MAX, kve.I32_MAX
TIMEOUT_S = 60

# CLI option name for each config field, in the order they are printed.
OPTIONS = (("seed", "--seed"), ("seq_id", "--seq-id"), ("layers", "--layers"),
           ("heads", "--heads"), ("layer_offset", "--layer-offset"),
           ("head_offset", "--head-offset"), ("prompt", "--prompt"), ("window", "--window"),
           ("budget", "--budget"), ("round", "--round"), ("cached", "--cached"))
SWITCHES = (("persistent", "--persistent"), ("shared_heads", "--shared-heads"),
            ("shared_layers", "--shared-layers"))
# What `select` and `digest` use for an option left out: G1 of docs/GPU.md
# (issue 37), not the oracle's CONFIG_DEFAULTS; omit_defaults leaves out
# exactly the options whose value is this.
G1 = dict(seed=2609, layers=36, heads=8, prompt=1024, window=64, budget=2048, cached=2112)
CLI_DEFAULTS = dict(kve.CONFIG_DEFAULTS, **G1)


# ---------------------------------------------------------------------------
# Configurations
# ---------------------------------------------------------------------------

class Check:
    """One CLI run and what it must produce."""

    def __init__(self, name, kind, argv, stdin=None, expect=None, expect_error=False, config=None):
        self.name = name          # label in reports
        self.kind = kind          # "select", "key" or "digest"
        self.argv = argv          # arguments after the kvevict path
        self.stdin = stdin        # text or None
        self.expect = expect      # kind-specific expected result
        self.expect_error = expect_error
        self.config = config


def config_argv(config, rng=None, hexa=False, omit_defaults=False):
    """Command-line options for an oracle configuration."""
    c = dict(kve.CONFIG_DEFAULTS, **config)
    argv = []
    for field, opt in OPTIONS:
        v = c[field]
        if field == "cached" and c["slots"] is not None and "cached" not in config:
            continue
        if omit_defaults and v == CLI_DEFAULTS[field]:
            continue
        if hexa and field in ("seed", "seq_id"):
            argv += [opt, "0x%x" % v]
        else:
            argv += [opt, str(v)]
    for field, opt in SWITCHES:
        if c[field]:
            argv.append(opt)
    if c["slots"] is not None:
        argv.append("--slots-stdin")
    if rng is not None and len(argv) > 2:
        # Options may come in any order: shuffle the option/value pairs.
        pairs, i = [], 0
        while i < len(argv):
            if argv[i] in dict(SWITCHES).values() or argv[i] == "--slots-stdin":
                pairs.append(argv[i:i + 1])
                i += 1
            else:
                pairs.append(argv[i:i + 2])
                i += 2
        rng.shuffle(pairs)
        argv = [a for p in pairs for a in p]
    return argv


def stdin_text(config):
    slots = config.get("slots")
    return None if slots is None else json.dumps(slots)


def random_table(rng, n_slots):
    """A slot table with holes and (often) positions out of slot order."""
    if n_slots == 0:
        return []
    hole_p = rng.choice([0.0, 0.05, 0.2, 0.5, 0.9])
    n_valid = sum(1 for _ in range(n_slots) if rng.random() >= hole_p)
    spread = n_valid + rng.randint(0, 60)
    base = 0
    if rng.random() < 0.05:
        base = I32_MAX - spread + 1           # positions up to 2^31-1
    elif rng.random() < 0.1:
        base = rng.randint(0, 1 << 20)
    positions = [base + p for p in rng.sample(range(spread), n_valid)]
    if rng.random() < 0.3:
        positions.sort()                      # a plain, in-order cache
    table = positions + [-1] * (n_slots - n_valid)
    if rng.random() < 0.7:
        rng.shuffle(table)
    return table


def schedule_tables(rng, c):
    """Per-head tables produced by running the spec's schedule (slot reuse)."""
    r = rng.randint(1, 8)
    P, W, B = c["prompt"], c["window"], c["budget"]
    cap = max(B, P + W) + r
    if cap > 120:
        return None
    n_tokens = rng.randint(0, cap + 4 * r)
    tables, rounds = [], None
    for l in range(c["layers"]):
        for h in range(c["heads"]):
            t, rd, _ = kve.schedule(P, W, B, r, n_tokens, c["seed"], c["seq_id"],
                                    c["layer_offset"] + l, c["head_offset"] + h,
                                    kve.config_flags(c))
            tables.append(t)
            rounds = rd
    if n_tokens >= cap and rng.random() < 0.5:
        # Top the heads up to full with the next token, as the engine would.
        for t in tables:
            if -1 in t:
                t[t.index(-1)] = n_tokens
    c["round"] = rounds
    return tables


def random_config(rng):
    c = {}
    c["seed"] = rng.getrandbits(64) if rng.random() < 0.8 else rng.randint(0, 10)
    c["seq_id"] = rng.getrandbits(64) if rng.random() < 0.8 else rng.randint(0, 10)
    c["layers"] = rng.randint(1, 3)
    c["heads"] = rng.randint(1, 4)
    for field, n in (("layer_offset", c["layers"]), ("head_offset", c["heads"])):
        if rng.random() < 0.1:
            c[field] = U32_MAX - (n - 1) - rng.randint(0, 3)
        else:
            c[field] = rng.randint(0, 100000)
    c["prompt"] = rng.randint(0, 40)
    c["window"] = rng.randint(0, 20)
    c["budget"] = rng.randint(0, 60)
    r = rng.random()
    c["round"] = rng.randint(0, 5) if r < 0.9 else (U32_MAX if r < 0.95 else rng.getrandbits(32))
    flags = rng.randint(0, 7)
    c["persistent"] = bool(flags & kve.PERSISTENT)
    c["shared_heads"] = bool(flags & kve.SHARED_HEADS)
    c["shared_layers"] = bool(flags & kve.SHARED_LAYERS)
    c["cached"] = rng.randint(0, 120)
    u = rng.random()
    if u < 0.5:
        pass                                   # slot i holds position i
    elif u < 0.8:
        c["slots"] = random_table(rng, rng.randint(0, 120))
    elif u < 0.92:
        n = rng.randint(1, 100)
        c["slots"] = [random_table(rng, n) for _ in range(c["layers"] * c["heads"])]
    else:
        tables = schedule_tables(rng, c)
        if tables is not None:
            c["slots"] = tables
    if "slots" in c and rng.random() < 0.5:
        del c["cached"]                        # --cached is ignored with --slots-stdin
    return c


def select_check(name, config, rng=None, hexa=False, omit_defaults=False):
    argv = ["select"] + config_argv(config, rng, hexa, omit_defaults)
    try:
        expect = kve.select(config)
        return Check(name, "select", argv, stdin_text(config), expect=expect, config=config)
    except ValueError as e:
        return Check(name, "select", argv, stdin_text(config), expect=str(e), expect_error=True,
                     config=config)


def golden_case_config(g):
    return dict(seed=g["seed"], seq_id=g["seq_id"], layers=1, heads=1, layer_offset=g["layer"],
                head_offset=g["head"], prompt=g["prompt"], window=g["window"],
                budget=g["budget"], round=g["round"],
                persistent=bool(g["flags"] & kve.PERSISTENT),
                shared_heads=bool(g["flags"] & kve.SHARED_HEADS),
                shared_layers=bool(g["flags"] & kve.SHARED_LAYERS), slots=g["slot_pos"])


def digest_golden_config(dg):
    return dict(seed=dg["seed"], seq_id=dg["seq_id"], layers=dg["n_layers"], heads=dg["n_heads"],
                layer_offset=dg["layer_offset"], head_offset=dg["head_offset"],
                prompt=dg["prompt"], window=dg["window"], budget=dg["budget"], round=dg["round"],
                cached=len(dg["slot_pos"]))


def edge_configs():
    """Fixed select configurations beyond the golden cases."""
    e = []
    e.append(("defaults_only", {}, True))                              # cached 0: empty heads
    e.append(("defaults_cached_3000", dict(cached=3000), True))        # W=64, B=2048 defaults
    e.append(("cli_defaults_g1", G1, True))                            # `select` alone
    e.append(("cached_zero_many_heads", dict(layers=3, heads=4, cached=0), False))
    e.append(("empty_table_stdin", dict(slots=[], layers=2, heads=2, budget=0), False))
    e.append(("offsets_at_max", dict(layers=3, heads=4, layer_offset=U32_MAX - 2,
                                     head_offset=U32_MAX - 3, prompt=3, window=2, budget=5,
                                     cached=20, seed=U64_MAX, seq_id=U64_MAX), False))
    e.append(("budget_equals_cached", dict(cached=40, budget=40, prompt=50, window=3), False))
    # The C API caps B and W at 2^31-1 (SPEC section 3); P is a full u32.
    e.append(("big_budget_big_window", dict(cached=120, budget=I32_MAX, window=I32_MAX,
                                            prompt=U32_MAX), False))
    e.append(("window_max", dict(cached=50, budget=10, window=I32_MAX, prompt=2), False))
    e.append(("round_max", dict(cached=50, budget=10, window=3, prompt=2, round=U32_MAX), False))
    e.append(("all_switches_grid", dict(layers=3, heads=4, cached=60, budget=20, window=5,
                                        prompt=6, persistent=True, shared_heads=True,
                                        shared_layers=True, round=9), False))
    e.append(("max_positions", dict(slots=[I32_MAX, I32_MAX - 1, -1, 0, 1, I32_MAX - 5],
                                    budget=2, window=1, prompt=1), False))
    return e


def error_checks():
    """Bad inputs: the CLI must exit non-zero with a message on stderr."""
    bad = [
        ("err_duplicate", dict(slots=[0, 1, 2, 1], budget=1), None),
        ("err_below_minus_one", dict(slots=[0, -2, 3], budget=1), None),
        ("err_duplicate_one_head", dict(layers=1, heads=2, slots=[[0, 1, 2], [3, 3, -1]]), None),
        ("err_too_few_tables", dict(layers=2, heads=2, slots=[[0], [1], [2]]), None),
        ("err_ragged_tables", dict(layers=1, heads=2, slots=[[0, 1], [0]]), None),
        ("err_position_over_int32", dict(slots=[0, I32_MAX + 1], budget=0), None),
        ("err_layer_offset_overflow", dict(layers=2, layer_offset=U32_MAX, cached=4), None),
        ("err_head_offset_overflow", dict(heads=3, head_offset=U32_MAX - 1, cached=4), None),
        ("err_bad_json", dict(slots=[0]), "[0, 1,"),
        ("err_not_integer", dict(slots=[0]), "[0, 1.5, 2]"),
        ("err_string_value", dict(slots=[0]), '[0, "a"]'),
    ]
    checks = []
    for name, cfg, raw in bad:
        ch = select_check(name, cfg)
        if raw is not None:
            ch.stdin = raw
            ch.expect, ch.expect_error = "bad JSON", True
        assert ch.expect_error, name
        checks.append(ch)
    checks.append(Check("err_unknown_option", "select", ["select", "--no-such-option"],
                        expect="unknown option", expect_error=True))
    checks.append(Check("err_bad_number", "select", ["select", "--budget", "12x"],
                        expect="bad number", expect_error=True))
    return checks


def key_checks(rng, n_random_groups=25, per_group=10):
    checks = []
    for i, (seed, sq, l, h, p, r, f, k) in enumerate(gen_golden.key_vectors()):
        argv = key_argv(seed, sq, l, h, r, f, [p])
        checks.append(Check("key_golden_%d" % i, "key", argv,
                            expect=[dict(seq_id=sq, layer=l, head=h, pos=p, round=r, key=k)]))
    for g in range(n_random_groups):
        seed, sq = rng.getrandbits(64), rng.getrandbits(64)
        l, h = rng.getrandbits(32), rng.getrandbits(32)
        if rng.random() < 0.5:
            l, h = rng.randint(0, 100), rng.randint(0, 16)
        r = rng.choice([0, 1, 2, rng.getrandbits(32), U32_MAX])
        f = rng.randint(0, 7)
        ps = [rng.getrandbits(32) if rng.random() < 0.3 else rng.randint(0, 5000)
              for _ in range(per_group)]
        ps = list(dict.fromkeys(ps))
        exp = [dict(seq_id=sq, layer=l, head=h, pos=p, round=r, key=kve.key(seed, sq, l, h, p, r, f))
               for p in ps]
        checks.append(Check("key_random_%d" % g, "key", key_argv(seed, sq, l, h, r, f, ps), expect=exp))
    return checks


def key_argv(seed, sq, l, h, r, f, ps):
    argv = ["key", "--seed", str(seed), "--seq-id", str(sq), "--layer", str(l), "--head", str(h),
            "--round", str(r)]
    for bit, opt in ((kve.PERSISTENT, "--persistent"), (kve.SHARED_HEADS, "--shared-heads"),
                     (kve.SHARED_LAYERS, "--shared-layers")):
        if f & bit:
            argv.append(opt)
    for p in ps:
        argv += ["--pos", str(p)]
    return argv


def digest_checks(rng, n_random=24):
    # `digest` with no option: G1, whose heads each evict 64 slots.
    checks = [Check("digest_cli_defaults_g1", "digest", ["digest"], expect=kve.select_digest(G1),
                    config=G1)]
    dg = gen_golden.digest_batch()
    cfg = digest_golden_config(dg)
    checks.append(Check("digest_golden_" + dg["name"], "digest", ["digest"] + config_argv(cfg),
                        expect=dg["digest"], config=cfg))
    for g in gen_golden.cases()[:4]:
        cfg = golden_case_config(g)
        checks.append(Check("digest_golden_case_" + g["name"], "digest",
                            ["digest"] + config_argv(cfg), stdin_text(cfg),
                            expect=kve.select_digest(cfg), config=cfg))
    for i in range(n_random):
        cfg = random_config(rng)
        checks.append(Check("digest_random_%d" % i, "digest", ["digest"] + config_argv(cfg, rng),
                            stdin_text(cfg), expect=kve.select_digest(cfg), config=cfg))
    return checks


def build_checks(n_cases, seed):
    rng = random.Random(seed)
    checks = []
    for i in range(n_cases):
        cfg = random_config(rng)
        checks.append(select_check("random_%d" % i, cfg, rng=rng, hexa=rng.random() < 0.2,
                                   omit_defaults=rng.random() < 0.25))
    for g in gen_golden.cases():
        checks.append(select_check("golden_" + g["name"], golden_case_config(g)))
    dg = gen_golden.digest_batch()
    checks.append(select_check("golden_digest_batch_select", digest_golden_config(dg)))
    for name, cfg, omit in edge_configs():
        checks.append(select_check("edge_" + name, cfg, omit_defaults=omit))
    checks += error_checks()
    checks += key_checks(rng)
    checks += digest_checks(rng)
    return checks


# ---------------------------------------------------------------------------
# Running and comparing
# ---------------------------------------------------------------------------

def run_cli(kvevict, check, backend, extra):
    argv = [kvevict] + check.argv
    if check.kind in ("select", "digest"):
        if backend:
            argv += ["--backend", backend]
        argv += extra
    try:
        p = subprocess.run(argv, input=check.stdin if check.stdin is not None else "",
                           capture_output=True, text=True, timeout=TIMEOUT_S)
        return argv, p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        return argv, None, "", "timed out after %d s" % TIMEOUT_S
    except OSError as e:
        return argv, None, "", "cannot run: %s" % e


def parse_lines(out):
    recs = []
    for n, line in enumerate(out.splitlines()):
        if not line.strip():
            continue
        try:
            recs.append(json.loads(line))
        except ValueError:
            raise ValueError("line %d is not JSON: %r" % (n + 1, line[:200]))
    return recs


def short(v, limit=300):
    s = json.dumps(v) if not isinstance(v, str) else v
    return s if len(s) <= limit else s[:limit] + "..."


def compare_select(expect, out):
    """Return None when equal, else a list of lines explaining the first difference."""
    try:
        got = parse_lines(out)
    except ValueError as e:
        return [str(e)]
    if len(got) != len(expect):
        return ["%d heads printed, %d expected" % (len(got), len(expect))]
    for i, (e, g) in enumerate(zip(expect, got)):
        if not isinstance(g, dict):
            return ["head %d: not a JSON object: %s" % (i, short(g))]
        for field in ("seq_id", "layer", "head", "evict", "keep"):
            if field not in g:
                return ["head %d: field %r missing: %s" % (i, field, short(g))]
            if g[field] != e[field] or type(g[field]) is not type(e[field]):
                return ["head %d (layer %d, head %d): %s differs" % (i, e["layer"], e["head"], field),
                        "  expected %s" % short(e[field]), "  got      %s" % short(g[field])]
        if "over_budget" in g and g["over_budget"] is not e["over_budget"]:
            return ["head %d (layer %d, head %d): over_budget is %s, expected %s"
                    % (i, e["layer"], e["head"], short(g["over_budget"]),
                       json.dumps(e["over_budget"]))]
    return None


def compare_key(expect, out):
    try:
        got = parse_lines(out)
    except ValueError as e:
        return [str(e)]
    if len(got) != len(expect):
        return ["%d lines printed, %d expected" % (len(got), len(expect))]
    for i, (e, g) in enumerate(zip(expect, got)):
        # The key is a "0x" + 16 hex digits string (exact in any JSON reader).
        e = dict(e, key="0x%016x" % e["key"])
        for field in ("seq_id", "layer", "head", "pos", "round", "key"):
            if not isinstance(g, dict) or g.get(field) != e[field]:
                return ["line %d: %s differs" % (i + 1, field), "  expected %s" % json.dumps(e),
                        "  got      %s" % short(g)]
    return None


def compare_digest(expect, out):
    lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
    want = "digest=0x%016x" % expect
    if not lines:
        return ["no output, expected %s" % want]
    if lines[-1] != want:
        return ["last line %r, expected %r" % (lines[-1][:200], want)]
    return None


def evaluate(kvevict, check, backend, extra):
    argv, rc, out, err = run_cli(kvevict, check, backend, extra)
    problem = None
    if check.expect_error:
        if rc == 0 or rc is None:
            problem = ["accepted bad input (%s): exit %s" % (check.expect, rc),
                       "  stdout: %s" % short(out.strip())]
        elif rc < 0:
            problem = ["killed by signal %d instead of failing cleanly" % -rc]
        elif not err.strip():
            problem = ["exit %d but nothing on stderr" % rc]
    elif rc != 0:
        problem = ["exit %s" % rc, "  stderr: %s" % short(err.strip())]
        if check.kind == "digest" and rc == 1 and out.strip().endswith("MISMATCH"):
            problem = ["backends disagree (MISMATCH)", "  stdout: %s" % short(out.strip(), 600)]
    elif check.kind == "select":
        problem = compare_select(check.expect, out)
    elif check.kind == "key":
        problem = compare_key(check.expect, out)
    else:
        problem = compare_digest(check.expect, out)
    return argv, problem


def quote(a):
    return a if a and all(ch.isalnum() or ch in "-_./=:+" for ch in a) else "'%s'" % a


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kvevict", required=True, help="path of the kvevict executable")
    ap.add_argument("--cases", type=int, default=2000, help="random select configurations")
    ap.add_argument("--seed", type=int, default=1, help="seed of the random configurations")
    ap.add_argument("--backend", default=None, help="passed as --backend to select and digest")
    ap.add_argument("--extra-arg", action="append", default=[], metavar="ARG",
                    help="appended to select and digest command lines (repeatable)")
    ap.add_argument("--jobs", type=int, default=max(2, os.cpu_count() or 2),
                    help="CLI runs in flight at once")
    args = ap.parse_args(argv)

    if not os.path.exists(args.kvevict):
        print("check_cli: %s does not exist" % args.kvevict, file=sys.stderr)
        return 2
    kvevict = os.path.abspath(args.kvevict) if os.sep in args.kvevict else args.kvevict

    t0 = time.time()
    checks = build_checks(args.cases, args.seed)
    t1 = time.time()
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(lambda c: evaluate(kvevict, c, args.backend, args.extra_arg),
                                checks))
    t2 = time.time()

    failed = [(c, a, p) for c, (a, p) in zip(checks, results) if p]
    for i, (c, a, p) in enumerate(failed[:10]):
        print("FAIL %s (%s)" % (c.name, c.kind))
        print("  command: %s" % " ".join(quote(x) for x in a))
        if c.stdin is not None:
            print("  stdin:   %s" % short(c.stdin, 600))
        for line in p:
            print("  " + line)
    if len(failed) > 10:
        names = [c.name for c, _, _ in failed[10:]]
        print("also failed: %s%s" % (", ".join(names[:60]),
                                     " ... (%d more)" % (len(names) - 60) if len(names) > 60 else ""))
    kinds = {}
    for c in checks:
        kinds[c.kind] = kinds.get(c.kind, 0) + 1
    print("checked %s in %.1f s (oracle %.1f s, CLI %.1f s)"
          % (", ".join("%d %s" % (n, k) for k, n in sorted(kinds.items())), t2 - t0, t1 - t0,
             t2 - t1))
    print("%d passed, %d failed" % (len(checks) - len(failed), len(failed)))
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
