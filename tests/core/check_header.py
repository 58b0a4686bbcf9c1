#!/usr/bin/env python3
"""include/kvevict.h reads as a reference (issue 49): its sections, its
comments and where they point.

- Sections 0 to 6 open with a banner "/* N. Title */" in that order, each
  followed by a paragraph comment of 2 to 4 lines saying what it is for.
- Section 6, the experimental API, lies after the include guard's #endif and
  under "#if defined(KVE_EXPERIMENTAL)"; it declares exactly EXPERIMENTAL,
  and no other section declares any of them.
- Every KVE_API function, typedef and #define has a comment: "/** ... */"
  just above, or "/**< ... */" on its line; a function's is at most
  MAX_LINES lines between its "/**" and "*/".
- Every 'docs/NAME.md "Section"' the header names is a heading of that doc.

Usage: check_header.py SOURCE_DIR"""
import os
import re
import sys

EXPERIMENTAL = {"kve_state_draft", "kve_state_score_device"}
MAX_LINES = 9
BANNER = re.compile(r"^/\* ([0-9])\. (.+?)\s*\*/$")
FUNCTION = re.compile(r"^KVE_API\b.*?\b(kve_[a-z0-9_]+)\(")
TYPEDEF = re.compile(r"^typedef (?:struct|enum) (kve_[a-z0-9_]+)")
DEFINE = re.compile(r"^#define (KVE_[A-Z0-9_]+)")
POINTER = re.compile(r'docs/([A-Z]+)\.md "([^"]+)"')


def comment_above(lines, i):
    """(first, last) line indexes of the comment ending just above line i, or None."""
    j = i - 1
    if j < 0 or not lines[j].rstrip().endswith("*/"):
        return None
    k = j
    while k >= 0 and "/*" not in lines[k]:
        k -= 1
    return (k, j) if k >= 0 and lines[k].lstrip().startswith("/**") else None


def main():
    src = sys.argv[1]
    with open(os.path.join(src, "include", "kvevict.h"), encoding="utf-8") as f:
        lines = f.read().split("\n")
    problems = []

    # Sections, in order, each with its paragraph.
    banners = []
    for i, line in enumerate(lines):
        m = BANNER.match(line)
        if m:
            banners.append((int(m.group(1)), i))
            k = i + 1
            while k < len(lines) and lines[k].startswith("/* ="):
                k += 1
            end = k
            while end < len(lines) and "*/" not in lines[end]:
                end += 1
            body = end - k - 1
            if lines[k] != "/*" or not 2 <= body <= 4:
                problems.append(f"line {i + 1}: section {m.group(1)}'s paragraph is not a "
                                f"2-4 line comment ({body} lines)")
    if [n for n, _ in banners] != list(range(7)):
        problems.append(f"sections {[n for n, _ in banners]}, not 0 to 6 in order")
    guard_end = lines.index("#endif /* KVEVICT_H */") if "#endif /* KVEVICT_H */" in lines else -1
    opt_in = next((i for i, l in enumerate(lines) if l.startswith("#if defined(KVE_EXPERIMENTAL)")), -1)
    six = dict(banners).get(6, -1)
    if not 0 <= guard_end < six < opt_in:
        problems.append("section 6 is not after the include guard's #endif, opened by "
                        "#if defined(KVE_EXPERIMENTAL)")

    # Declarations: documented, short, and the experimental ones only in section 6.
    declared_late = set()
    for i, line in enumerate(lines):
        f, t, d = FUNCTION.match(line), TYPEDEF.match(line), DEFINE.match(line)
        m = f or t or d
        if not m or (d and m.group(1) in ("KVE_API",)):
            continue
        name = m.group(1)
        if d and name in ("KVE_EXPERIMENTAL",):
            continue
        above = comment_above(lines, i)
        trailing = "/**<" in line
        grouped = d and i > 0 and DEFINE.match(lines[i - 1]) is not None
        if not (above or trailing or grouped):
            problems.append(f"line {i + 1}: {name} has no comment")
        if f:
            if above and above[1] - above[0] - 1 > MAX_LINES:
                problems.append(f"line {i + 1}: {name}'s comment has "
                                f"{above[1] - above[0] - 1} lines (at most {MAX_LINES})")
            if i > opt_in >= 0:
                declared_late.add(name)
            elif name in EXPERIMENTAL:
                problems.append(f"line {i + 1}: {name} is declared outside section 6")
    if declared_late != EXPERIMENTAL:
        problems.append(f"section 6 declares {sorted(declared_late)}, not {sorted(EXPERIMENTAL)}")

    # Pointers into docs/.
    text = re.sub(r"\n\s*/?\*+/?[ ]?", " ", "\n".join(lines))
    pointers = 0
    for m in POINTER.finditer(text):
        doc = os.path.join(src, "docs", m.group(1) + ".md")
        if not os.path.exists(doc):
            problems.append(f"docs/{m.group(1)}.md does not exist")
            continue
        with open(doc, encoding="utf-8") as f:
            heads = [re.sub(r"^[0-9]+\. ", "", l.lstrip("#").strip())
                     for l in f if l.startswith("#")]
        name = re.sub(r"\s+", " ", m.group(2))
        pointers += 1
        if not any(h == name or h.startswith(name + " ") for h in heads):
            problems.append(f'docs/{m.group(1)}.md has no heading "{name}"')

    for p in problems:
        print("FAIL " + p)
    print(f"{len(banners)} sections, {pointers} pointers into docs/, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
