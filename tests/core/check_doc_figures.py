#!/usr/bin/env python3
"""Every 64-bit digest or key quoted in README.md and docs/*.md is true of
this build, or marked as a figure of an earlier spec version (issue 37).

A figure (0x + 16 hex digits) belongs to the block it is in: a paragraph, or
a fenced code block, with the marker comments on the lines just above it:

    <!-- checked: kvevict ARGS... -->
        the block's figures must all appear in what `kvevict ARGS...`
        prints with this build (run once per distinct command);
    <!-- historical: spec vN: 0x..., 0x... -->
        these figures are spec version N's, quoted as such;
    <!-- constant: NAME -->
        the block's figure is include/kvevict.h's #define NAME.

A figure in no marked block fails, as does a marker whose figures are not
in its block. docs/SPEC.md's generated regions (<!-- name:begin --> ..
<!-- name:end -->) are the oracle's, checked by core_golden_uptodate and
core_vectors_cli. Usage: check_doc_figures.py KVEVICT SOURCE_DIR"""
import glob
import os
import re
import shlex
import subprocess
import sys

FIGURE = re.compile(r"0x[0-9a-f]{16}\b")
CHECKED = re.compile(r"^<!-- checked: kvevict (.+?) -->$")
HISTORICAL = re.compile(r"^<!-- historical: spec v([0-9]+): (.+?) -->$")
CONSTANT = re.compile(r"^<!-- constant: ([A-Z0-9_]+) -->$")
GENERATED = re.compile(r"^<!-- ([a-z]+):(begin|end) -->$")


def blocks(lines):
    """(first line number, markers, text) of every block outside generated regions."""
    markers, text, start, fence, generated = [], [], 0, False, None
    for n, line in enumerate(lines, 1):
        s = line.strip()
        g = GENERATED.match(s)
        if g:
            generated = g.group(1) if g.group(2) == "begin" else None
            continue
        if generated:
            continue
        if not fence and (CHECKED.match(s) or HISTORICAL.match(s) or CONSTANT.match(s)):
            markers.append((n, s))
            continue
        if not fence and not s:
            if text:
                yield start, markers, "\n".join(text)
                markers, text = [], []
            continue
        if not text:
            start = n
        text.append(line)
        if s.startswith("```"):
            fence = not fence
    if text:
        yield start, markers, "\n".join(text)


def main():
    kvevict, src = sys.argv[1], sys.argv[2]
    outputs, problems, checked, historical = {}, [], 0, 0
    with open(os.path.join(src, "include", "kvevict.h"), encoding="utf-8") as f:
        defines = dict(re.findall(r"^#define (KVE_[A-Z0-9_]+) (0x[0-9a-f]{16})ull", f.read(), re.M))
    files = [os.path.join(src, "README.md")] + sorted(glob.glob(os.path.join(src, "docs", "*.md")))
    for path in files:
        rel = os.path.relpath(path, src)
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
        for start, markers, text in blocks(lines):
            figures = set(FIGURE.findall(text))
            covered = set()
            # Historical and constant figures first: a checked command answers for the rest.
            for n, m in sorted(markers, key=lambda nm: CHECKED.match(nm[1]) is not None):
                c, h, k = CHECKED.match(m), HISTORICAL.match(m), CONSTANT.match(m)
                if k:
                    value = defines.get(k.group(1))
                    if value not in figures:
                        problems.append(f"{rel}:{n}: {k.group(1)} = {value} is not in the block")
                    covered.add(value)
                    continue
                if h:
                    listed = set(FIGURE.findall(h.group(2)))
                    missing = listed - figures
                    if missing:
                        problems.append(f"{rel}:{n}: historical figures not in the block: {sorted(missing)}")
                    covered |= listed
                    historical += len(listed & figures)
                    continue
                args = c.group(1)
                if args not in outputs:
                    p = subprocess.run([kvevict] + shlex.split(args), capture_output=True, text=True,
                                       timeout=600)
                    outputs[args] = p.stdout
                    if p.returncode != 0:
                        problems.append(f"{rel}:{n}: kvevict {args}: exit {p.returncode}: {p.stderr.strip()}")
                printed = set(FIGURE.findall(outputs[args]))
                mine = figures - covered
                if not mine:
                    problems.append(f"{rel}:{n}: a checked marker over a block without figures")
                for fig in sorted(mine):
                    if fig in printed:
                        checked += 1
                    else:
                        problems.append(f"{rel}:{start}: {fig} is not what `kvevict {args}` prints "
                                        f"now ({sorted(printed)})")
                covered |= mine
            for fig in sorted(figures - covered):
                problems.append(f"{rel}:{start}: {fig} is neither checked nor marked historical "
                                "(see tests/core/check_doc_figures.py)")
    for p in problems:
        print("FAIL " + p)
    print(f"{checked} figures checked against this build, {historical} marked historical, "
          f"{len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
