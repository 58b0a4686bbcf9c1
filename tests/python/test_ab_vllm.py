#!/usr/bin/python3
"""python -m kvevict.ab --engine vllm on the shipped tiny model (label vllm;
exit 77, skipped, without vLLM): two tasks a bucket through kvevict's vLLM
plugin (arms full, random, random-p0 in one engine), the table printed
and the JSON written; full's and random's outputs equal those of the
transformers engine (kvevict.hf) run on the same tasks in the same venv:
greedy, float32, the same keep-sets (random-p0 is not compared: vLLM
prefills an unpinned prompt in chunks that end on round boundaries, so
its first rounds are not the transformers cache's)."""
import json
import os
import subprocess
import sys
import tempfile

try:
    import vllm  # noqa: F401
except ImportError as e:
    print("skipped: vLLM is not installed (%s)" % e)
    sys.exit(1 if os.environ.get("KVE_VLLM_REQUIRED") else 77)

FAILS = []


def check(ok, what):
    if not ok:
        FAILS.append(what)
        print("FAIL:", what)


def run(engine, arms, out):
    r = subprocess.run([sys.executable, "-m", "kvevict.ab", "--engine", engine, "--arms", arms,
                        "--limit", "2", "--warmup", "0", "--json", out], capture_output=True,
                       text=True, env=dict(os.environ, PYTHONPATH=os.path.join(
                           os.path.dirname(os.path.abspath(__file__)), "..", "..", "python")))
    print(r.stdout)
    check(r.returncode == 0, "%s engine: exit %d: %s" % (engine, r.returncode, r.stderr[-3000:]))
    return r


def main():
    with tempfile.TemporaryDirectory() as tmp:
        v, h = os.path.join(tmp, "v.json"), os.path.join(tmp, "h.json")
        r = run("vllm", "full,random,random-p0", v)
        if r.returncode:
            return 1
        check("random-p0" in r.stdout and "p95 ms" in r.stdout, "the vllm run's table")
        run("transformers", "full,random", h)
        if FAILS:
            return 1
        dv, dh = json.load(open(v)), json.load(open(h))
        check(len(dv["items"]["full"]) == 8, "8 tasks")
        for arm in ("full", "random"):
            a = [x["output"] for x in dv["items"][arm]]
            b = [x["output"] for x in dh["items"][arm]]
            check(a == b, "%s: vllm %r, transformers %r" % (arm, a, b))
        check(dv["summary"]["full"]["all"]["accuracy"] >= 0.75,
              "full answers on vLLM (%.2f)" % dv["summary"]["full"]["all"]["accuracy"])
    if FAILS:
        print("%d failures" % len(FAILS))
        return 1
    print("ok: kvevict.ab through vLLM")
    return 0


if __name__ == "__main__":
    sys.exit(main())
