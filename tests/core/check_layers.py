#!/usr/bin/env python3
"""check_layers.py ROOT — the library's folders include only downwards
(docs/ARCHITECTURE.md, "Where code lives").

Floors, lowest first: common/ (the rules every target shares);
kernels_cpu/ and kernels_cuda/ (each target's own code, neither including
the other); kernels_hip/; backends/ (the drivers); frontend/ (the public
entry points). include/kvevict.h, the public API, may be included from any
floor. A quoted include is matched to the project file of that name; a file
may include its own folder or a lower floor, never a higher one or a
sibling. Exit status 1 and one line per include that points up or sideways,
or whose name two folders share (the include would depend on the search
path), and one per file below the drivers' floor whose code (comments
aside) names the context or the table of operations: kernels and shared
rules take plain data, never a kve_context.
"""
import os
import re
import sys

FLOORS = {
    "common": 0,
    "kernels_cpu": 1,
    "kernels_cuda": 1,
    "kernels_hip": 2,
    "backends": 3,
    "frontend": 4,
}
SOURCES = (".c", ".h", ".cu", ".cuh", ".hip")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
# The drivers' own types: the context every public call receives and the
# table a backend fills (backends/kve_backend.h).
DRIVERS = FLOORS["backends"]
DRIVER_TYPES = re.compile(r"\b(kve_context|kve_backend_ops)\b")
COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    where = {}  # file name -> folders holding it
    files = []
    for folder in FLOORS:
        for name in sorted(os.listdir(os.path.join(root, folder))):
            if name.endswith(SOURCES):
                where.setdefault(name, []).append(folder)
                files.append((folder, name))
    public = set(os.listdir(os.path.join(root, "include")))
    bad = []
    for folder, name in files:
        with open(os.path.join(root, folder, name), encoding="utf-8") as f:
            text = f.read()
        for inc in INCLUDE.findall(text):
            base = os.path.basename(inc)
            homes = where.get(base, [])
            if not homes:
                if base not in public:
                    bad.append(f"{folder}/{name}: includes \"{inc}\", no file of the library")
                continue
            if len(homes) > 1:
                bad.append(f"{folder}/{name}: includes \"{inc}\", found in {' and '.join(homes)}")
                continue
            home = homes[0]
            if home == folder:
                continue
            if FLOORS[home] >= FLOORS[folder]:
                way = "up" if FLOORS[home] > FLOORS[folder] else "sideways"
                bad.append(f"{folder}/{name}: includes {home}/{base} ({way})")
        if FLOORS[folder] < DRIVERS:
            for m in DRIVER_TYPES.finditer(COMMENT.sub("", text)):
                bad.append(f"{folder}/{name}: names {m.group(1)}, a driver's type (backends/)")
                break
    for line in bad:
        print(line)
    print(f"{len(files)} files of {len(FLOORS)} folders, {len(bad)} problem(s) against the floors")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
