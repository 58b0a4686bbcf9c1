#!/usr/bin/env python3
"""check_tree.py ROOT — what is installed is built from the library's own
folders, and the tree tracks no test run's leftovers.

1. Every target a CMakeLists.txt outside tests/ installs (install(TARGETS
   ...)) is compiled from sources and include directories outside tests/:
   the installed `kvevict vectors` once compiled tests/golden's table.
2. In a git checkout, nothing under Testing/ (ctest's log of a run started
   in the source tree) is tracked, and .gitignore ignores Testing/.

Exit status 1 and one line per problem.
"""
import os
import re
import subprocess
import sys

COMMAND = re.compile(r"\b(add_executable|add_library|target_include_directories|target_sources"
                     r"|install)\s*\(([^()]*(?:\([^()]*\)[^()]*)*)\)", re.S)


def cmake_files(root):
    for folder, dirs, files in os.walk(root):
        rel = os.path.relpath(folder, root)
        top = rel.split(os.sep)[0]
        if top in ("tests", ".git") or top.startswith("build") or top.startswith("."):
            if rel != ".":
                dirs[:] = []
                continue
        if "CMakeLists.txt" in files:
            yield os.path.join(folder, "CMakeLists.txt")


def installed_from_tests(root):
    commands = []
    for path in cmake_files(root):
        text = re.sub(r"#[^\n]*", "", open(path, encoding="utf-8").read())
        for m in COMMAND.finditer(text):
            commands.append((os.path.relpath(path, root), m.group(1), m.group(2).split()))
    installed = set()
    for _, name, args in commands:
        if name == "install" and args[:1] == ["TARGETS"]:
            for a in args[1:]:
                if a.isupper():
                    break
                installed.add(a)
    problems = []
    for path, name, args in commands:
        if name == "install" or not args or args[0] not in installed:
            continue
        for a in args[1:]:
            if re.search(r"(^|/)tests/", a):
                problems.append("%s: %s(%s ...) names %s: an installed target built from tests/"
                                % (path, name, args[0], a))
    return problems


def testing_leftovers(root):
    if not os.path.isdir(os.path.join(root, ".git")) and not os.path.isfile(
            os.path.join(root, ".git")):
        return []
    problems = []
    try:
        tracked = subprocess.run(["git", "-C", root, "ls-files", "--", "Testing"],
                                 capture_output=True, text=True, check=True).stdout.split()
        ignored = subprocess.run(["git", "-C", root, "check-ignore", "-q", "--no-index",
                                  "Testing/Temporary/LastTest.log"]).returncode == 0
    except (OSError, subprocess.CalledProcessError):
        return []  # no git here: nothing to say about what it tracks
    problems += ["%s: a test run's leftover is tracked (git rm it)" % t for t in tracked]
    if not ignored:
        problems.append(".gitignore: Testing/ (ctest's logs) is not ignored")
    return problems


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    problems = installed_from_tests(root) + testing_leftovers(root)
    for p in problems:
        print(p)
    if problems:
        print("%d problem(s)" % len(problems))
        return 1
    print("installed targets build from the library's folders; no test leftovers tracked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
