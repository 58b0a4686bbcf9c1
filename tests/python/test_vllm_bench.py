"""Smoke test of python -m kvevict.examples.vllm_bench (the vLLM plugin's
bench): a --quick generate run of stock vLLM and the plugin's random arm on
the tiny seeded Qwen3, its table holding a row of figures for each, and a
plugin arm that is not an arm refused as a row of the table, not a crash.
Skips (77) without vLLM, unless KVE_VLLM_REQUIRED is set."""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "..", "python")
try:
    import vllm  # noqa: F401
    import torch  # noqa: F401
    import transformers  # noqa: F401
except ImportError as e:
    print("skipped: vLLM is not installed here (%s)" % e)
    sys.exit(1 if os.environ.get("KVE_VLLM_REQUIRED") else 77)


def main():
    out = os.path.join(tempfile.mkdtemp(prefix="vllmbench-test-"), "bench.json")
    env = dict(os.environ, PYTHONPATH=os.path.abspath(SRC) + os.pathsep +
               os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-m", "kvevict.examples.vllm_bench", "--quick",
                        "--mode", "generate", "--arms", "stock,random,no-such-arm",
                        "--json", out], env=env, capture_output=True, text=True, timeout=1800)
    print(p.stdout)
    fails = []
    if p.returncode != 0:
        print(p.stderr[-6000:])
        fails.append("the bench exits 0 (rc %d)" % p.returncode)
    rows = {l.split("|")[1].strip(): l for l in p.stdout.splitlines() if l.startswith("| ")}
    for arm in ("stock", "random"):
        cells = [c.strip() for c in rows.get(arm, "").split("|")[1:-1]]
        if len(cells) < 9 or not cells[1].replace(".", "").isdigit():
            fails.append("a row of figures for %s: %r" % (arm, rows.get(arm)))
    if "refused: " not in rows.get("no-such-arm", ""):
        fails.append("an unknown arm is a refused row: %r" % rows.get("no-such-arm"))
    try:
        with open(out) as f:
            res = json.load(f)["results"]["generate"]
        r = res["random"]["runs"][0]
        if r["finished"] != 8 or r["tokens"] != 8 * 64:
            fails.append("random: 8 requests of 64 tokens, got %d / %d"
                         % (r["finished"], r["tokens"]))
        # the last step's requests are retired (recorded) at the engine's next step
        if not 1 <= r.get("digests", 0) <= 8 or r.get("rounds", 0) < 1:
            fails.append("random: digest records with rounds: %r" % r)
    except (OSError, KeyError, IndexError, ValueError) as e:
        fails.append("the --json file holds the random arm's round: %s" % e)
    for f in fails:
        print("FAIL " + f)
    print("ok" if not fails else "%d failure(s)" % len(fails))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
