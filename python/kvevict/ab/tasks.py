"""Task files and answer checkers of kvevict.ab.

A task file is JSONL, one task an object a line (blank lines and lines
starting with # are skipped):

  id              a unique non-empty string
  bucket          a non-empty string (rag, math, code, log, tools, chat, ...)
  prompt          the prompt text, or
  messages        chat messages [{"role": ..., "content": ...}, ...] (one of the two)
  reference       the reference answer (a string; for json any JSON value)
  checker         exact | contains | number | regex | json | "module:function"
  max_new_tokens  an int >= 1

A checker returns (correct, parsed): parsed is False when the output holds
no answer it can read (no number for "number", no JSON for "json", an
empty output), which the report counts as a retry. The callable form gets
(output, reference, task) and returns a bool or a (correct, parsed) pair.
"""
import importlib
import json
import math
import re
from typing import Any, Callable, Dict, List, Tuple

FIELDS = ("id", "bucket", "prompt", "messages", "reference", "checker", "max_new_tokens")
CHECKERS = ("exact", "contains", "number", "regex", "json")

_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


class TaskFileError(ValueError):
    """A task file that cannot be read: the message names the file, the line
    and the field."""


def _norm(s: str) -> str:
    return " ".join(s.split())


def check_exact(output: str, reference: Any) -> Tuple[bool, bool]:
    """Equal after collapsing whitespace."""
    out = _norm(output)
    return out == _norm(str(reference)), bool(out)


def check_contains(output: str, reference: Any) -> Tuple[bool, bool]:
    """The reference (whitespace collapsed) occurs in the output."""
    out = _norm(output)
    return _norm(str(reference)) in out, bool(out)


def parse_number(output: str):
    """The last number in output (commas between digits ignored), or None."""
    found = _NUMBER.findall(re.sub(r"(?<=\d),(?=\d{3}\b)", "", output))
    return float(found[-1]) if found else None


def check_number(output: str, reference: Any) -> Tuple[bool, bool]:
    """The output's last number equals the reference's (relative 1e-6)."""
    got = parse_number(output)
    if got is None:
        return False, False
    want = float(reference) if not isinstance(reference, str) else parse_number(reference)
    return want is not None and math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-9), True


def check_regex(output: str, reference: Any) -> Tuple[bool, bool]:
    """The reference is a regular expression that re.search finds in the
    output (whitespace collapsed)."""
    out = _norm(output)
    return re.search(str(reference), out) is not None, bool(out)


def parse_json(output: str):
    """(True, value) of the first JSON value in output (the whole output, or
    its first {...} / [...] span), else (False, None)."""
    dec = json.JSONDecoder()
    s = output.strip()
    starts = [0] + [i for i, c in enumerate(s) if c in "{["]
    for i in starts:
        try:
            return True, dec.raw_decode(s, i)[0]
        except ValueError:
            continue
    return False, None


def check_json(output: str, reference: Any) -> Tuple[bool, bool]:
    """The output's first JSON value equals the reference (a JSON value, or
    a string holding one)."""
    ok, got = parse_json(output)
    if not ok:
        return False, False
    want = reference
    if isinstance(reference, str):
        rok, rv = parse_json(reference)
        want = rv if rok else reference
    return got == want, True


BUILTIN: Dict[str, Callable[[str, Any], Tuple[bool, bool]]] = {
    "exact": check_exact, "contains": check_contains, "number": check_number,
    "regex": check_regex, "json": check_json}


def resolve_checker(name: str) -> Callable[[str, Any, dict], Tuple[bool, bool]]:
    """A function (output, reference, task) -> (correct, parsed) for a
    checker name; ValueError naming the name otherwise."""
    if name in BUILTIN:
        f = BUILTIN[name]
        return lambda out, ref, task: f(out, ref)
    if ":" not in name:
        raise ValueError("%r is not a checker: expected one of %s, or \"module:function\""
                         % (name, ", ".join(CHECKERS)))
    mod, _, fn = name.partition(":")
    try:
        f = getattr(importlib.import_module(mod), fn)
    except ImportError as e:
        raise ValueError("%r: module %r does not import (%s)" % (name, mod, e))
    except AttributeError:
        raise ValueError("%r: module %r has no %r" % (name, mod, fn))
    if not callable(f):
        raise ValueError("%r: %s.%s is not callable" % (name, mod, fn))

    def call(out, ref, task):
        r = f(out, ref, task)
        if isinstance(r, tuple) and len(r) == 2:
            return bool(r[0]), bool(r[1])
        if isinstance(r, bool):
            return r, True
        raise ValueError("checker %r returned %r: expected a bool or (correct, parsed)"
                         % (name, r))
    return call


def validate(task: Any, where: str) -> dict:
    """task (a parsed line) checked field by field; TaskFileError naming
    where ("file:line") and the field otherwise. Adds "_check" (the checker
    function)."""
    def bad(field, msg):
        raise TaskFileError("%s: field %r: %s" % (where, field, msg))

    if not isinstance(task, dict):
        raise TaskFileError("%s: a task is a JSON object, got %s" % (where, type(task).__name__))
    unknown = sorted(set(task) - set(FIELDS))
    if unknown:
        bad(unknown[0], "unknown field (a task has %s)" % ", ".join(FIELDS))
    for f in ("id", "bucket"):
        if f not in task:
            bad(f, "missing")
        if not isinstance(task[f], str) or not task[f].strip():
            bad(f, "%r: expected a non-empty string" % (task[f],))
    has_p, has_m = "prompt" in task, "messages" in task
    if has_p == has_m:
        bad("prompt", "give exactly one of prompt and messages (%s)"
            % ("both given" if has_p else "neither given"))
    if has_p and (not isinstance(task["prompt"], str) or not task["prompt"]):
        bad("prompt", "%r: expected a non-empty string" % (task["prompt"],))
    if has_m:
        m = task["messages"]
        if not isinstance(m, list) or not m:
            bad("messages", "expected a non-empty list of {\"role\", \"content\"} objects")
        for i, msg in enumerate(m):
            if not isinstance(msg, dict) or not isinstance(msg.get("role"), str) or \
                    not isinstance(msg.get("content"), str):
                bad("messages", "item %d = %s: expected {\"role\": str, \"content\": str}"
                    % (i, json.dumps(msg)[:80]))
    if "reference" not in task:
        bad("reference", "missing")
    if "checker" not in task:
        bad("checker", "missing")
    if not isinstance(task["checker"], str):
        bad("checker", "%r: expected a string" % (task["checker"],))
    try:
        check = resolve_checker(task["checker"])
    except ValueError as e:
        bad("checker", str(e))
    ref = task["reference"]
    if task["checker"] != "json" and (isinstance(ref, bool) or
                                      not isinstance(ref, (str, int, float))):
        bad("reference", "%r: expected a string (a number for checker number; any JSON value "
            "for checker json)" % (task["reference"],))
    if task["checker"] == "regex":
        try:
            re.compile(str(task["reference"]))
        except re.error as e:
            bad("reference", "%r is not a regular expression (%s)" % (task["reference"], e))
    if task["checker"] == "number" and (isinstance(task["reference"], str) and
                                        parse_number(task["reference"]) is None):
        bad("reference", "%r: checker number needs a number" % task["reference"])
    if "max_new_tokens" not in task:
        bad("max_new_tokens", "missing")
    n = task["max_new_tokens"]
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        bad("max_new_tokens", "%r: expected an int >= 1" % (n,))
    return dict(task, _check=check)


def load(path: str) -> List[dict]:
    """The tasks of a JSONL task file, validated; TaskFileError naming the
    line (and field) of the first bad one."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise TaskFileError("%s: cannot read the task file (%s)" % (path, e.strerror or e))
    except UnicodeDecodeError as e:
        raise TaskFileError("%s: not UTF-8 text (%s)" % (path, e))
    tasks, seen = [], {}
    for no, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        where = "%s:%d" % (path, no)
        try:
            obj = json.loads(line)
        except ValueError as e:
            raise TaskFileError("%s: not a JSON object (%s)" % (where, e))
        t = validate(obj, where)
        if t["id"] in seen:
            raise TaskFileError("%s: field 'id': %r already used on line %d"
                                % (where, t["id"], seen[t["id"]]))
        seen[t["id"]] = no
        tasks.append(t)
    if not tasks:
        raise TaskFileError("%s: no tasks (one JSON object a line)" % path)
    return tasks


def check(task: dict, output: str) -> Tuple[bool, bool]:
    """(correct, parsed) of an output for a loaded task."""
    return task["_check"](output, task["reference"], task)
