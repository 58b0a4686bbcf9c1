#!/usr/bin/python3
"""kvevict.ab's statistics, checkers and task-file errors (plain Python: no
transformers needed).

- the Wilson interval and the exact McNemar p-value against values worked
  out by hand (in the comments) and known tables;
- percentiles, the paired summary, the first token where outputs part;
- each checker on right, wrong and unparsable outputs, the callable form;
- a task file's errors name the file, the line and the field.
"""
import json
import os
import sys
import tempfile

from kvevict.ab import report, stats, tasks

FAILS = []


def check(ok, what):
    if not ok:
        FAILS.append(what)
        print("FAIL:", what)


def close(a, b, tol=5e-4):
    return abs(a - b) <= tol


def test_wilson():
    # 8/10: centre (0.8 + z^2/20) / (1 + z^2/10) = 0.99207 / 1.38415 = 0.71675,
    # half z sqrt(0.016 + z^2/400) / 1.38415 = 1.95996 * 0.16001 / 1.38415 = 0.22658
    p, lo, hi = stats.wilson(8, 10)
    check(p == 0.8 and close(lo, 0.4902) and close(hi, 0.9433), "wilson(8, 10) = %r" % ((p, lo, hi),))
    # 0/10: high = z^2 / (n + z^2) = 3.84146 / 13.84146 = 0.27753
    p, lo, hi = stats.wilson(0, 10)
    check(lo == 0.0 and close(hi, 0.2775), "wilson(0, 10) = %r" % ((p, lo, hi),))
    # 40/40: low = n / (n + z^2) = 40 / 43.84146 = 0.91238
    p, lo, hi = stats.wilson(40, 40)
    check(close(lo, 0.9124) and hi == 1.0, "wilson(40, 40) = %r" % ((p, lo, hi),))
    check(stats.wilson(0, 0) == (0.0, 0.0, 1.0), "wilson(0, 0)")
    for bad in ((3, 2), (-1, 2), (1.5, 2)):
        try:
            stats.wilson(*bad)
            check(False, "wilson%r accepted" % (bad,))
        except ValueError as e:
            check("wilson(k=" in str(e), "wilson%r message: %s" % (bad, e))


def test_mcnemar():
    # b=0, c=5: 2 * C(5,0) / 2^5 = 2/32
    check(stats.mcnemar_exact(0, 5) == 0.0625, "mcnemar(0, 5) = %r" % stats.mcnemar_exact(0, 5))
    # b=2, c=10: 2 * (1 + 12 + 66) / 4096 = 158/4096
    check(close(stats.mcnemar_exact(2, 10), 158 / 4096, 1e-12), "mcnemar(2, 10)")
    check(stats.mcnemar_exact(10, 2) == stats.mcnemar_exact(2, 10), "mcnemar symmetric")
    # b=c=3: 2 * 42/64 > 1, capped
    check(stats.mcnemar_exact(3, 3) == 1.0, "mcnemar(3, 3)")
    check(stats.mcnemar_exact(0, 0) == 1.0, "mcnemar(0, 0)")
    # b=0, c=20: 2 / 2^20
    check(stats.mcnemar_exact(0, 20) == 2.0 / 2 ** 20, "mcnemar(0, 20)")
    try:
        stats.mcnemar_exact(-1, 2)
        check(False, "mcnemar(-1, 2) accepted")
    except ValueError as e:
        check("b=-1" in str(e), "mcnemar message: %s" % e)


def test_percentile_paired():
    check(stats.percentile([4, 1, 3, 2], 50) == 2.5, "p50 of 1..4")
    check(close(stats.percentile([1, 2, 3, 4], 95), 3.85, 1e-12), "p95 of 1..4")
    check(stats.percentile([7], 95) == 7 and stats.percentile([], 50) == 0.0, "p of 1 / 0 values")
    p = stats.paired([True, True, False, True, False], [True, False, False, False, True])
    check(p["ref_only"] == 2 and p["arm_only"] == 1 and close(p["diff"], -0.2, 1e-12) and
          p["p_mcnemar"] == 1.0, "paired: %r" % p)
    check(report.first_split(["a", "b", "c"], ["a", "b", "d"]) == 2, "first_split 2")
    check(report.first_split(["a"], ["a", "b"]) == 1, "first_split prefix")
    check(stats.histogram([0, 1, 1, 5, 9], [0, 2, 5, 9]) == [3, 0, 2], "histogram")


def test_checkers():
    c = tasks.BUILTIN
    check(c["exact"]("  bob =  blue ", "bob = blue") == (True, True), "exact right")
    check(c["exact"]("bob = gold", "bob = blue") == (False, True), "exact wrong")
    check(c["exact"]("", "bob") == (False, False), "exact empty: unparsed")
    check(c["contains"]("so bob likes gold .", "bob likes gold") == (True, True), "contains")
    check(c["contains"]("bob likes red", "bob likes gold") == (False, True), "contains wrong")
    check(c["number"]("x1 3 x2 7 ans 7", "7") == (True, True), "number: the last number")
    check(c["number"]("total: 1,234.0 units", 1234) == (True, True), "number: commas")
    check(c["number"]("ans 8", "7") == (False, True), "number wrong")
    check(c["number"]("no digits here", "7") == (False, False), "number: unparsed")
    check(c["regex"]("err at h4", "^err at h4$") == (True, True), "regex")
    check(c["regex"]("err at h41", "^err at h4$") == (False, True), "regex wrong")
    check(c["json"]('call: {"name": "f", "args": [1, 2]} done',
                    {"args": [1, 2], "name": "f"}) == (True, True), "json in text")
    check(c["json"]('[1, 2]', "[1, 2]") == (True, True), "json reference as a string")
    check(c["json"]('{"a": 1', {"a": 1}) == (False, False), "json unparsed")
    f = tasks.resolve_checker("kvevict.ab.tasks:check_exact")
    try:
        f("a", "a", {})
        check(False, "a two-argument callable accepted")
    except TypeError:
        pass
    mod = types_module()
    g = tasks.resolve_checker("ab_test_checkers:starts")
    check(g("bob = blue", "bob", {}) == (True, True), "callable returning a bool")
    g = tasks.resolve_checker("ab_test_checkers:pair")
    check(g("", "bob", {}) == (False, False), "callable returning a pair")
    del mod


def types_module():
    import types
    m = types.ModuleType("ab_test_checkers")
    m.starts = lambda out, ref, task: out.startswith(ref)
    m.pair = lambda out, ref, task: (out == ref, bool(out))
    sys.modules["ab_test_checkers"] = m
    return m


GOOD = dict(id="a-1", bucket="rag", prompt="facts : ann = red . q : ann ?", reference="ann = red",
            checker="exact", max_new_tokens=8)


def expect_error(lines, want, what):
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "tasks.jsonl")
        with open(p, "w") as f:
            f.write("\n".join(lines) + "\n")
        try:
            tasks.load(p)
            check(False, "%s: accepted" % what)
        except tasks.TaskFileError as e:
            msg = str(e)
            ok = all(w in msg for w in want) and msg.startswith(p)
            check(ok, "%s: message %r lacks %r" % (what, msg, want))


def test_task_file():
    good = json.dumps(GOOD)
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "t.jsonl")
        with open(p, "w") as f:
            chat = {k: v for k, v in GOOD.items() if k != "prompt"}
            chat.update(id="c-1", messages=[{"role": "user", "content": "hi"}])
            f.write("# a comment\n\n" + good + "\n" + json.dumps(chat) + "\n")
        t = tasks.load(p)
        check(len(t) == 2 and t[1]["messages"][0]["content"] == "hi", "a good file loads")
        check(tasks.check(t[0], "ann = red") == (True, True), "tasks.check")
    expect_error([good, "{not json"], [":2:", "not a JSON object"], "bad JSON")
    expect_error([good, "[1, 2]"], [":2:", "JSON object"], "not an object")
    expect_error([json.dumps({k: v for k, v in GOOD.items() if k != "id"})], [":1:", "'id'",
                                                                              "missing"], "no id")
    expect_error([json.dumps(dict(GOOD, checker="fuzzy"))], [":1:", "'checker'", "'fuzzy'",
                                                             "exact"], "unknown checker")
    expect_error([json.dumps(dict(GOOD, checker="no_such_mod_x:f"))],
                 [":1:", "'checker'", "no_such_mod_x"], "checker module missing")
    expect_error([json.dumps(dict(GOOD, checker="json:nothing_here"))],
                 [":1:", "'checker'", "nothing_here"], "checker function missing")
    expect_error([json.dumps(dict(GOOD, max_new_tokens=0))], [":1:", "'max_new_tokens'", "0"],
                 "max_new_tokens 0")
    expect_error([json.dumps(dict(GOOD, max_new_tokens="8"))], [":1:", "'max_new_tokens'"],
                 "max_new_tokens a string")
    expect_error([json.dumps(dict(GOOD, messages=[{"role": "user"}]))], [":1:", "'prompt'",
                                                                         "both"], "both given")
    expect_error([json.dumps({k: v for k, v in GOOD.items() if k != "prompt"})],
                 [":1:", "'prompt'", "neither"], "neither given")
    bad_msgs = {k: v for k, v in GOOD.items() if k != "prompt"}
    bad_msgs["messages"] = [{"role": "user", "content": 3}]
    expect_error([json.dumps(bad_msgs)], [":1:", "'messages'", "item 0"], "bad message")
    expect_error([json.dumps(dict(GOOD, checker="regex", reference="(unclosed"))],
                 [":1:", "'reference'", "regular expression"], "bad regex")
    expect_error([json.dumps(dict(GOOD, checker="number", reference="seven"))],
                 [":1:", "'reference'", "number"], "number without a number")
    expect_error([json.dumps(dict(GOOD, reference=[1]))], [":1:", "'reference'"],
                 "a list reference for exact")
    expect_error([json.dumps(dict(GOOD, colour="red"))], [":1:", "'colour'", "unknown"],
                 "unknown field")
    expect_error([good, good], [":2:", "'id'", "'a-1'", "line 1"], "duplicate id")
    expect_error([json.dumps(dict(GOOD, bucket=""))], [":1:", "'bucket'"], "empty bucket")
    expect_error(["# only a comment"], ["no tasks"], "empty file")
    try:
        tasks.load("/nonexistent/tasks.jsonl")
        check(False, "a missing file accepted")
    except tasks.TaskFileError as e:
        check("/nonexistent/tasks.jsonl" in str(e), "missing file: %s" % e)


def main():
    test_wilson()
    test_mcnemar()
    test_percentile_paired()
    test_checkers()
    test_task_file()
    if FAILS:
        print("%d failures" % len(FAILS))
        return 1
    print("ok: kvevict.ab statistics, checkers and task-file errors")
    return 0


if __name__ == "__main__":
    sys.exit(main())
