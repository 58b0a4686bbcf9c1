#!/usr/bin/env python3
"""check_doc_paths.py ROOT — every path of this tree that README.md and
docs/*.md name exists.

A path is a word with a slash whose first part is a folder of the tree
(`backends/gpu.cu`, kernels_cuda/round_body.h, `tests/lib`, `docs/`); a
`*` in it must match at least one file. Build outputs (build/, build-*/)
are not checked. A word in backticks with a source file's ending and no
slash (`round_body.h`) must name a file somewhere in the tree. Exit status
1 and one line per path that does not exist: a file that moved leaves its
old path in the docs.
"""
import glob
import os
import re
import sys

PATH = re.compile(r"(?<![\w./$-])((?:[A-Za-z0-9_.-]+/)+[A-Za-z0-9_.*-]*)")
BARE = re.compile(r"`([A-Za-z0-9_-][A-Za-z0-9_.-]*\.(?:c|h|cu|cuh|hip|py|sh|cmake))`")
SKIP = ("build", ".git")


def tree(root):
    names = set()
    for folder, dirs, files in os.walk(root):
        rel = os.path.relpath(folder, root)
        if rel == ".":
            dirs[:] = [d for d in dirs if not d.startswith(SKIP)]
        names.update(files)
    return names


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    tops = {d for d in os.listdir(root)
            if os.path.isdir(os.path.join(root, d)) and not d.startswith(SKIP)}
    names = tree(root)
    docs = ["README.md"] + sorted(os.path.relpath(p, root)
                                  for p in glob.glob(os.path.join(root, "docs", "*.md")))
    problems = []
    for doc in docs:
        with open(os.path.join(root, doc), encoding="utf-8") as f:
            lines = f.read().split("\n")
        for n, line in enumerate(lines, 1):
            for m in PATH.finditer(line):
                path = m.group(1).rstrip(".,:;")
                if path.split("/")[0] not in tops:
                    continue  # another project's path, a URL, a build output
                full = os.path.join(root, path)
                found = glob.glob(full) if "*" in path else os.path.exists(full)
                if not found:
                    problems.append("%s:%d: %s does not exist" % (doc, n, path))
            for m in BARE.finditer(line):
                if m.group(1) not in names:
                    problems.append("%s:%d: %s is no file of the tree" % (doc, n, m.group(1)))
    for p in problems:
        print(p)
    if problems:
        print("%d path(s) the docs name do not exist" % len(problems))
        return 1
    print("every path named in README.md and docs/*.md exists (%d files read)" % len(docs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
