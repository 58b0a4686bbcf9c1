#!/usr/bin/env python3
"""check_one_loop.py ROOT — a rule with a serial and a block loop is written
once (docs/ARCHITECTURE.md, "Where code lives"): each loop calls the shared
per-slot or per-row steps of common/ and owns only its iteration.

For each pair of loops below: every step must be called by both loops, and
neither loop may name what only a step should (a rule's inner functions,
limits and comparisons), so that a loop that writes a step out again fails
here, not only when the emulator suites find the two loops differ. Exit
status 1 and one line per problem.
"""
import os
import re
import sys

PAIRS = [
    {
        "what": "a round's placement",
        "serial": ("common/placement_body.h", "kve_round_table"),
        "block": ("kernels_cuda/round_body.h", "kve_round_table_block"),
        "steps": ["kve_round_ev_bad", "kve_round_slot_old", "kve_round_split_of",
                  "kve_round_old_step", "kve_round_call_step", "kve_round_free_step"],
        # the old/call test, the freed slots' value, the steps' arithmetic
        "inner": [r"[<>]=?\s*pos0\b", r"=\s*-1\s*;", r"\bkve_slots_lower_by\b",
                  r"\bp\.holes\s*\+|-\s*p\.holes\b|\bC\s*-\s*r\b"],
    },
    {
        "what": "the planner's wave 0",
        "serial": ("common/state_body.h", "kve_state_plan_serial"),
        "block": ("kernels_cuda/state_grid.h", "kve_state_plan_block"),
        "steps": ["kve_plan_first", "kve_plan_twice", "kve_plan_settle", "kve_plan_base_of",
                  "kve_plan_row"],
        "inner": [r"\bkve_plan_check\b", r"\bkve_plan_start\b", r"\bKVE_PLAN_TOKENS\b",
                  r"\bmax_tokens\b", r"0xffffffff", r"\bmarks\s*\["],
    },
]


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def body(root, path, name):
    """The text of function @name's definition in @path, comments removed."""
    text = strip_comments(open(os.path.join(root, path), encoding="utf-8").read())
    m = re.search(r"^KVE_\w+\s+[^;{]*?\b%s\s*\(" % re.escape(name), text, re.M)
    if not m:
        return None
    start = text.index("{", m.end())
    depth = 0
    for i in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[start:i + 1]
    return None


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    problems = []
    for pair in PAIRS:
        for side in ("serial", "block"):
            path, name = pair[side]
            text = body(root, path, name)
            if text is None:
                problems.append("%s: no definition of %s (%s)" % (path, name, pair["what"]))
                continue
            for step in pair["steps"]:
                if not re.search(r"\b%s\s*\(" % step, text):
                    problems.append("%s: %s does not call the step %s (%s)"
                                    % (path, name, step, pair["what"]))
            for inner in pair["inner"]:
                m = re.search(inner, text)
                if m:
                    problems.append("%s: %s names `%s`, a step's business (%s)"
                                    % (path, name, m.group(0), pair["what"]))
    for p in problems:
        print(p)
    if problems:
        print("%d problem(s): write the step once in common/ and call it from both loops"
              % len(problems))
        return 1
    print("one loop per round shape: %d pairs of loops share their steps" % len(PAIRS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
