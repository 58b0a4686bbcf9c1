#!/usr/bin/env python3
"""check_decls.py ROOT — a kernels folder's headers declare only what that
folder defines (docs/ARCHITECTURE.md, "The layers"): a function declared in
kernels_cpu/kve_cpu_kernels.h is a CPU kernel, not a driver's op of
backends/. Each prototype at the top level of a header of kernels_cpu/,
kernels_cuda/ or kernels_hip/ is looked for among the definitions of the
library's sources (every floor); one defined only in another folder is
reported. Exit status 1 and one line per such declaration.
"""
import os
import re
import sys

FOLDERS = ("common", "kernels_cpu", "kernels_cuda", "kernels_hip", "backends", "frontend")
CHECKED = ("kernels_cpu", "kernels_cuda", "kernels_hip")
HEADERS = (".h", ".cuh")
SOURCES = (".c", ".h", ".cu", ".cuh", ".hip")
# A prototype at the start of a line: return type, name, arguments, ';'.
PROTO = re.compile(r"^(?!static\b|typedef\b|#|return\b|extern\b)[A-Za-z_][\w \t\*]*?\b(\w+)\s*\([^;{}()]*(?:\([^()]*\)[^;{}()]*)*\)\s*;",
                   re.M)
# A definition: the same, followed by a body.
DEF = r"^(?!static\b)[A-Za-z_][\w \t\*]*?\b%s\s*\([^;{}]*\)\s*\{"


def strip(text):
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    texts = {}
    for folder in FOLDERS:
        for name in sorted(os.listdir(os.path.join(root, folder))):
            if name.endswith(SOURCES):
                path = folder + "/" + name
                with open(os.path.join(root, path), encoding="utf-8") as f:
                    texts[path] = strip(f.read())
    problems = []
    for path, text in texts.items():
        folder = path.split("/")[0]
        if not path.endswith(HEADERS) or folder not in CHECKED:
            continue
        for m in PROTO.finditer(text):
            name = m.group(1)
            homes = [p for p, t in texts.items() if re.search(DEF % re.escape(name), t, re.M)]
            if homes and not any(p.split("/")[0] == folder for p in homes):
                problems.append("%s declares %s, defined in %s: declare it in a header of %s/"
                                % (path, name, ", ".join(homes), homes[0].split("/")[0]))
    for p in problems:
        print(p)
    if problems:
        print("%d declaration(s) away from their definitions" % len(problems))
        return 1
    print("every declaration sits in its definition's folder")
    return 0


if __name__ == "__main__":
    sys.exit(main())
