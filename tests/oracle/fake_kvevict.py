#!/usr/bin/python3
"""A stand-in for the `kvevict` CLI, built on the oracle, to test check_cli.py.

    /usr/bin/python3 tests/oracle/check_cli.py --kvevict tests/oracle/fake_kvevict.py

must report no failures.  KVE_FAKE_BUG=<name> plants one deliberate bug so
that the driver can be seen to catch it (see BUGS below).  This is not a
second implementation to trust: it calls kve_oracle for every answer.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kve_oracle as kve  # noqa: E402

BUGS = ("order", "overbudget", "offset", "digest", "key", "accept_dup", "round")
BUG = os.environ.get("KVE_FAKE_BUG", "")

INT_OPTS = {"--seed": "seed", "--seq-id": "seq_id", "--layers": "layers", "--heads": "heads",
            "--layer-offset": "layer_offset", "--head-offset": "head_offset",
            "--prompt": "prompt", "--window": "window", "--budget": "budget",
            "--round": "round", "--cached": "cached", "--layer": "layer", "--head": "head"}
FLAG_OPTS = {"--persistent": "persistent", "--shared-heads": "shared_heads",
             "--shared-layers": "shared_layers", "--slots-stdin": "slots_stdin"}


def die(msg):
    print("kvevict: " + msg, file=sys.stderr)
    sys.exit(2)


def number(opt, text):
    try:
        return int(text, 16) if text.lower().startswith("0x") else int(text, 10)
    except ValueError:
        die("%s: bad number %r" % (opt, text))


def parse(args):
    c, pos, backend = {}, [], None
    i = 0
    while i < len(args):
        a = args[i]
        if a in FLAG_OPTS:
            c[FLAG_OPTS[a]] = True
            i += 1
        elif a in INT_OPTS or a in ("--pos", "--backend"):
            if i + 1 >= len(args):
                die("%s needs a value" % a)
            if a == "--pos":
                pos.append(number(a, args[i + 1]))
            elif a == "--backend":
                backend = args[i + 1]
            else:
                c[INT_OPTS[a]] = number(a, args[i + 1])
            i += 2
        else:
            die("unknown option %r" % a)
    return c, pos, backend


def read_slots():
    try:
        data = json.loads(sys.stdin.read())
    except ValueError as e:
        die("stdin: bad JSON: %s" % e)
    if not isinstance(data, list):
        die("stdin: not an array")
    return data


def main():
    if len(sys.argv) < 2:
        die("usage: kvevict select|key|digest ...")
    cmd = sys.argv[1]
    c, pos, backend = parse(sys.argv[2:])
    if cmd == "key":
        flags = kve.config_flags(c)
        for p in pos:
            r = c.get("round", 0)
            k = kve.key(c.get("seed", 0), c.get("seq_id", 0), c.get("layer", 0), c.get("head", 0),
                        p, r, flags)
            if BUG == "key" and p == 0:
                k ^= 1
            print(json.dumps(dict(seq_id=c.get("seq_id", 0), layer=c.get("layer", 0),
                                  head=c.get("head", 0), pos=p, round=r, key="0x%016x" % k),
                             separators=(",", ":")))
        return 0
    if cmd not in ("select", "digest"):
        die("unknown command %r" % cmd)
    # The CLI's defaults for select and digest: G1 (docs/GPU.md).
    c = dict(dict(seed=2609, layers=36, heads=8, prompt=1024, window=64, budget=2048,
                  cached=2112), **c)
    if c.pop("slots_stdin", False):
        c["slots"] = read_slots()
    if BUG == "round":
        c["round"] = 0
    try:
        if BUG == "accept_dup":
            kve.check_slot_table = lambda t: None
        recs = kve.select(c)
        tables = kve.head_tables(c)
    except ValueError as e:
        die(str(e))
    if cmd == "digest":
        heads = [(r["seq_id"], r["layer"], r["head"], [tables[i][s] for s in r["keep"]])
                 for i, r in enumerate(recs)]
        d = kve.digest(heads)
        if BUG == "digest":
            d ^= 1 << 63
        print("cpu scalar: 0x%016x" % d)
        print("digest=0x%016x" % d)
        return 0
    for r in recs:
        if BUG == "order" and len(r["evict"]) > 1:
            r["evict"] = r["evict"][::-1]
        if BUG == "overbudget":
            r["over_budget"] = not r["over_budget"] if r["evict"] == [] else r["over_budget"]
        if BUG == "offset":
            r["layer"] -= c.get("layer_offset", 0)
        print(json.dumps(r, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
