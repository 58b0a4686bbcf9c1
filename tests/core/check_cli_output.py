#!/usr/bin/env python3
"""What the CLI prints for a user (issue 37): keys as exact JSON strings, a
digest's defaults (G1 of docs/GPU.md) and the configuration it states, the
warning for a digest over tables that evict nothing, the demo table's
legend, the documented --threads range. Usage: check_cli_output.py KVEVICT"""
import json
import re
import subprocess
import sys

KVEVICT = sys.argv[1]
G1 = ("configuration: --seed 2609 --seq-id 0 --layers 36 --heads 8 --layer-offset 0 "
      "--head-offset 0 --prompt 1024 --window 64 --budget 2048 --round 0 --cached 2112")
failed = []


def run(*args, stdin=""):
    p = subprocess.run([KVEVICT, *args], input=stdin, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        failed.append(f"kvevict {' '.join(args)}: exit {p.returncode}: {p.stderr.strip()}")
    return p.stdout


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failed.append(what)


# A key past 2^53 survives any JSON reader: it is a "0x" string.
rec = json.loads(run("key", "--seed", "7", "--pos", "2147483648", "--backend", "cpu"))
check(re.fullmatch(r"0x[0-9a-f]{16}", rec["key"]) is not None and rec["pos"] == 2147483648,
      f"key: the key is a 0x string: {rec}")

# digest with no option hashes G1, says so, and evicts 64 of each head's 1024 candidates.
out = run("digest", "--backend", "cpu").splitlines()
check(out[0] == G1, f"digest: first line states G1: {out[0]!r}")
check(out[-2] == "evicted 18432 and kept 589824 slots over 288 heads",
      f"digest: the counts of G1: {out[-2]!r}")
check(re.fullmatch(r"digest=0x[0-9a-f]{16}", out[-1]) is not None, f"digest: {out[-1]!r}")
d1 = run("digest", "--backend", "cpu", "--seed", "1").splitlines()[-1]
d2 = run("digest", "--backend", "cpu", "--seed", "2").splitlines()[-1]
check(d1 != d2 != out[-1], f"digest: the seed changes the digest ({d1}, {d2}, {out[-1]})")
sel = [json.loads(line) for line in run("select", "--backend", "cpu").splitlines()]
check(len(sel) == 288 and all(len(r["evict"]) == 64 and len(r["keep"]) == 2048 for r in sel),
      "select with no option: 288 heads, 64 evicted and 2048 kept each")

# Tables that evict nothing: said on stdout, before the digest line.
out = run("digest", "--backend", "all", "--cached", "100", "--threads", "1").splitlines()
check(out[0] == G1.replace("--cached 2112", "--cached 100"), f"digest --cached 100: {out[0]!r}")
check(out[-3] == "evicted 0 and kept 28800 slots over 288 heads" and
      out[-2].startswith("nothing was evicted: no head holds more than --budget 2048 tokens"),
      f"digest --cached 100 says nothing was evicted: {out[-3:-1]}")
out = run("digest", "--backend", "cpu", "--layers", "1", "--heads", "1", "--slots-stdin",
          stdin="[]")
check(out.startswith(G1.replace("--layers 36 --heads 8", "--layers 1 --heads 1")
                     .replace("--cached 2112", "--slots-stdin (0 slots a head)")),
      f"digest --slots-stdin states its tables: {out.splitlines()[0]!r}")

# The demo's table comes with its legend.
out = run("demo", "--steps", "200", "--layers", "2", "--heads", "2", "--prompt", "32",
          "--budget", "64", "--window", "8", "--interval", "16", "--no-progress", "--no-report",
          "--arms", "full,random")
for words in ("pinned: prompt tokens the arm never evicts", "held/head: tokens a",
              "of full: the peak against the full", "choose ms:", "P: prompt",
              "B: budget (tokens a head keeps), W: recent tokens never evicted",
              "r: tokens\nbetween evictions."):
    check(words in out, f"demo legend has {words!r}")

# --threads: its range in every command's help.
for cmd in ("select", "digest", "replay", "demo"):
    check("CPU threads, 1 to 1024" in run(cmd, "--help"), f"{cmd} --help documents --threads")
check(run("version", "--help").startswith("usage: kvevict version"), "version --help")

print(f"{len(failed)} failed" if failed else "all passed")
sys.exit(1 if failed else 0)
