#!/usr/bin/python3
"""README.md says what a user reads first, and what it says holds:
- the first paragraph after the two ./run.sh commands says what the library
  does in plain words: no XXH3 or dieharder before it ends;
- its C example (the one ```c block) compiles as shown, with -std=c11
  -Wall -Wextra -Werror -pedantic, against this build's header and library,
  and runs: one head's counts are the budget's and the first evicted slot
  lies between the prompt and the window;
- the command line tool is where it says (build/tools/kvevict), and the
  files `cmake --install` lays down are the ones it lists: every installed
  file under one of its entries, every entry there (but those "when built");
- the test-registration internals live in docs/CONTRIBUTING.md, which it
  links.
Usage: test_readme_c.py --cc CC --include DIR --library FILE --build-dir DIR
       --cmake CMAKE --cli FILE"""

import argparse
import fnmatch
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
    return cond


def first_paragraph(text):
    """The first paragraph of prose after the title and the indented commands."""
    paras = [p for p in re.split(r"\n\s*\n", text) if p.strip()]
    for p in paras[1:]:
        if not p.startswith("    ") and not p.startswith("#"):
            return p
    return ""


def check_prose(text):
    lines = text.splitlines()
    check(lines[2].startswith("    ./run.sh demo ") and lines[3].startswith("    ./run.sh test "),
          "README's first lines are not the two ./run.sh commands: %r" % lines[:4])
    first = first_paragraph(text)
    check(first.startswith("kvevict ") and "KV cache" in first and "tokens" in first,
          "the first paragraph does not say what the library does: %r" % first)
    for word in ("XXH3", "dieharder", "xxhash"):
        check(word.lower() not in first.lower() and text.find(word) > text.find(first) + len(first),
              "%s appears before the first paragraph ends" % word)
    check("docs/CONTRIBUTING.md" in text, "README does not link docs/CONTRIBUTING.md")
    check("KVE_TEST(" not in text and "kve_add_check_suite" not in text,
          "the test-registration internals are still in README")
    contributing = (ROOT / "docs" / "CONTRIBUTING.md").read_text()
    check("KVE_TEST(group, name)" in contributing and "kve_add_check_suite()" in contributing,
          "docs/CONTRIBUTING.md does not describe the test registration")


def check_example(text, args):
    blocks = re.findall(r"^```c\n(.*?)^```", text, re.S | re.M)
    if not check(len(blocks) == 1, "README has %d ```c blocks, expected 1" % len(blocks)):
        return
    consts = dict(re.findall(r"(\w+) = (\d+)", blocks[0].split("int main")[0]))
    libdir = os.path.dirname(os.path.abspath(args.library))
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = os.path.join(tmp, "evict.c"), os.path.join(tmp, "evict")
        Path(src).write_text(blocks[0])
        cc = subprocess.run([args.cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic",
                             "-I", args.include, src, "-o", exe, "-L", libdir, "-lkvevict",
                             "-Wl,-rpath," + libdir], capture_output=True, text=True)
        if not check(cc.returncode == 0, "the README's C example does not compile:\n" + cc.stderr):
            return
        run = subprocess.run([exe], capture_output=True, text=True, timeout=120,
                             env=dict(os.environ, KVE_BACKEND="", KVE_CPU_ISA=""))
    m = re.fullmatch(r"head 0: (\d+) slots evicted, (\d+) kept; the first evicted is slot (\d+)\n",
                     run.stdout)
    if not check(run.returncode == 0 and m, "the example: exit %d, %r %r" % (
            run.returncode, run.stdout, run.stderr)):
        return
    n_ev, kept, first = map(int, m.groups())
    slots, budget = int(consts["SLOTS"]), int(consts["BUDGET"])
    check(n_ev == slots - budget and kept == budget,
          "the example evicted %d and kept %d of %d slots, budget %d" % (n_ev, kept, slots, budget))
    check(int(consts["PROMPT"]) <= first < slots - int(consts["WINDOW"]),
          "the example's first evicted slot %d is pinned or in the window" % first)


def install_entries(text):
    """(pattern, when built) per entry of the README's install list."""
    parts = text.split("installs, under the prefix:", 1)[-1].split("\n\n", 2)
    block = parts[1] if len(parts) == 3 else ""
    return [(line.split()[0], "when built" in line) for line in block.splitlines()
            if line.startswith("    ") and not line.startswith("     ")]


def check_install(text, args):
    cli = os.path.relpath(args.cli, args.build_dir)
    check(cli == "tools/kvevict" and "`build/tools/kvevict`" in text,
          "the CLI is at %s, README says build/tools/kvevict" % cli)
    entries = install_entries(text)
    check(len(entries) >= 7, "README's install list: %s" % entries)
    with tempfile.TemporaryDirectory() as prefix:
        r = subprocess.run([args.cmake, "--install", args.build_dir, "--prefix", prefix],
                           capture_output=True, text=True)
        if not check(r.returncode == 0, "cmake --install: %s" % r.stderr):
            return
        files = sorted(str(p.relative_to(prefix)) for p in Path(prefix).rglob("*")
                       if not p.is_dir() and "__pycache__" not in p.parts)

    def covers(pattern, f):
        return f.startswith(pattern) if pattern.endswith("/") else fnmatch.fnmatch(f, pattern)

    for f in files:
        check(any(covers(p, f) for p, _ in entries), "installed %s, not in README's list" % f)
    for p, optional in entries:
        check(optional or any(covers(p, f) for f in files),
              "README lists %s, the install has none" % p)


def main():
    ap = argparse.ArgumentParser()
    for name in ("--cc", "--include", "--library", "--build-dir", "--cmake", "--cli"):
        ap.add_argument(name, required=True)
    args = ap.parse_args()
    text = README.read_text()
    check_prose(text)
    check_example(text, args)
    check_install(text, args)
    print("\n".join("FAIL: " + f for f in failures) or
          "ok: README's first paragraph, C example (compiled and run), CLI path, install list")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
