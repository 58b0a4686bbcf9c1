#!/usr/bin/env python3
"""The CLI's reproducers of issues 9, 36 and 37: each command must exit with
status 2 and print the status and message named here on stderr (never
crash, never succeed), having printed nothing on stdout (but for the demo
that runs out of memory, after its header); `kvevict diff` must call records
that lack what the other side has different (exit 1), and refuse a position
or a field given twice (exit 2). Usage: check_cli_errors.py KVEVICT"""
import os
import re
import subprocess
import sys
import tempfile


def wrap32(v):
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >= 1 << 31 else v


# (name, arguments, stdin, stderr pattern)
CASES = [
    ("select: a run of positions crossing INT32_MAX",
     ["select", "--budget", "1", "--window", "0", "--slots-stdin"],
     "[" + ",".join(str(wrap32(0x7FFFFFFD + t)) for t in range(32)) + "]",
     r"KVE_ERR_RANGE: batch\.slot_pos\[head 0\]\[slot 3\] = -2147483648"),
    ("select --isa scalar: the same table",
     ["select", "--budget", "1", "--window", "0", "--isa", "scalar", "--slots-stdin"],
     "[" + ",".join(str(wrap32(0x7FFFFFFD + t)) for t in range(32)) + "]",
     r"KVE_ERR_RANGE: batch\.slot_pos\[head 0\]\[slot 3\] = -2147483648"),
    # Issue 37: stray arguments and repeated options, refused by every command.
    *[(f"{cmd}: a stray argument", [cmd] + args + ["stray"], "",
       rf"kvevict: {cmd}: unexpected argument \"stray\"")
      for cmd, args in (("select", []), ("key", ["--pos", "1"]), ("digest", []),
                        ("vectors", []), ("replay", []), ("demo", ["--no-report"]))],
    ("version: a stray option", ["version", "--bogus"], "",
     r"kvevict: version: unexpected argument \"--bogus\" \(it takes none\)"),
    ("diff: a third file", ["diff", "a", "b", "c"], "", r"usage: kvevict diff"),
    *[(f"{args[0]}: {args[1]} twice", args, "", rf"kvevict: {args[0]}: {args[1]} given twice")
      for args in (["select", "--budget", "8", "--budget", "9"],
                   ["select", "--persistent", "--persistent"],
                   ["select", "--threads", "1", "--threads", "2"],
                   ["digest", "--cached", "10", "--cached", "20"],
                   ["key", "--seed", "1", "--seed", "2", "--pos", "1"],
                   ["vectors", "--backend", "cpu", "--backend", "cpu"],
                   ["replay", "--seed", "1", "--seed", "2"],
                   ["demo", "--steps", "1", "--steps", "2"])],
    ("demo: --report and --no-report", ["demo", "--report", "x.html", "--no-report"], "",
     r"kvevict: demo: --report given twice"),
    *[(f"{args[0]}: --threads 0", args, "",
       r"--threads 0: expected 1 to 1024 \(leave --threads out for OpenMP's default\)")
      for args in (["select", "--threads", "0"], ["digest", "--threads", "0"],
                   ["replay", "--threads", "0"], ["demo", "--threads", "0"])],
    # Checked before the run: nothing printed on stdout, no minutes of work lost.
    ("demo --report in a missing folder", ["demo", "--report", "/nonexistent-kve/r.html"], "",
     r"kvevict: demo: --report /nonexistent-kve/r\.html: cannot write the file: No such file"),
    ("demo --json in a missing folder", ["demo", "--no-report", "--json", "/nonexistent-kve/r.json"],
     "", r"kvevict: demo: --json /nonexistent-kve/r\.json: cannot write the file: No such file"),
    # Bad JSON on stdin: the byte offset, the token there, what was expected.
    *[(f"select: bad JSON {text!r}", ["select", "--layers", "1", "--heads", "2", "--slots-stdin"],
       text, pattern)
      for text, pattern in (
          ("[[1,2],[3,x]]", r"stdin: bad JSON at byte 10: \"x\" where an integer position was expected"),
          ("[[1,2],[3,4]] junk", r"at byte 14: \"junk\" where the end of the input was expected"),
          ("[[1,2],[3]]", r"at byte 7: \"\[\" where a table of 2 slots like the first \(this one has 1\)"),
          ("[[1,2],[3,4", r"at byte 11: the end of the input where ',' or '\]' was expected"),
          ("[[1,2],[3,99999999999]]", r"at byte 10: \"99999999999\" where a position that fits in int32"),
          ("", r"at byte 0: the end of the input where '\[' \(a slot table\) was expected"))],
    ("demo: buffers larger than memory",
     ["demo", "--layers", "4096", "--heads", "4096", "--entry-bytes", "65536", "--steps", "1",
      "--no-progress"],
     "",
     r"KVE_ERR_NOMEM: cannot allocate [0-9]+ bytes of host memory for "),
    # Issue 47: an empty item in any comma-separated list is a usage error.
    *[(f"{args[0]} {args[-2]} {args[-1]!r}: an empty item", args, "",
       rf'kvevict: {args[0]}: {args[-2]} "{re.escape(args[-1])}": empty item {item} \(a '
       r'comma-separated list has none\)')
      for args, item in ((["key", "--pos", "1,,2"], 2), (["key", "--pos", "1,"], 2),
                         (["key", "--pos", ",1"], 1), (["key", "--pos", ","], 1),
                         (["key", "--pos", ""], 1), (["key", "--pos", "1", "--pos", "2,"], 2),
                         (["digest", "--require", "cpu,,cpu"], 2),
                         (["digest", "--require", ""], 1), (["digest", "--require", "cpu,"], 2),
                         (["demo", "--arms", "full,"], 2), (["demo", "--arms", ""], 1),
                         (["demo", "--arms", ",random"], 1))],
    ("replay: --tokens 2^31, positions past the library's 2^31-1 (issue 36)",
     ["replay", "--tokens", "2147483648"],
     "",
     r'--tokens "2147483648": expected an unsigned integer <= 2147483647'),
]

FULL = ('{"seq_id":7,"round":1,"round_digest":"0x0000000000000011",'
        '"running_digest":"0x0000000000000022","heads":[{"layer":0,"head":0,"evicted":[3,5]},'
        '{"layer":0,"head":1,"evicted":[4]}]}')

SUMMARY = '{"seq_id":7,"rounds":%d,"running_digest":"0x0000000000000022"}'

# Issue 36's diff cases: (name, A, B, exit status, stream, pattern)
DIFF_CASES = [
    ("diff: running_digest on one side only",
     '{"seq_id":7}', '{"seq_id":7,"running_digest":"0x0000000000000001"}', 2, "stderr",
     r'diff: .*:1: nothing to compare'),
    ("diff: a digest on one side only",
     '{"seq_id":7,"round_digest":"0x0000000000000001"}',
     '{"seq_id":7,"round_digest":"0x0000000000000001","running_digest":"0x0000000000000002"}',
     1, "stdout", r'^differ: request seq_id=7: "running_digest" only in B \(the other record '
                  r'lacks it\)$'),
    ("diff: seq_id and round against a full replay record",
     '{"seq_id":7,"round":1,"round_digest":"0x0000000000000011"}', FULL, 1, "stdout",
     r'^differ: request seq_id=7 round=1: "heads" only in B'),
    ("diff: heads on both sides, one head only in A",
     FULL, FULL.replace(',{"layer":0,"head":1,"evicted":[4]}', ''), 1, "stdout",
     r'^differ: request seq_id=7 round=1 layer=0 head=1: only in A \(1 positions\)$'),
    ("diff: a position twice in an evicted list",
     FULL.replace('[3,5]', '[3,5,3]'), FULL, 2, "stderr",
     r'diff: .*:1: layer 0 head 0: position 3 listed twice in "evicted"'),
    ("diff: the same position twice on both sides",
     FULL.replace('[3,5]', '[3,5,5]'), FULL.replace('[3,5]', '[3,5,5]'), 2, "stderr",
     r'position 5 listed twice'),
    ("diff: a head twice",
     FULL.replace('"head":1', '"head":0'), FULL, 2, "stderr",
     r'diff: .*:1: layer 0 head 0 listed twice in "heads"'),
    ("diff: a field twice",
     FULL.replace('{"seq_id":7,', '{"seq_id":7,"running_digest":"0x0000000000000023",'), FULL, 2,
     "stderr", r'diff: .*:1: "running_digest" given twice in one object'),
    ("diff: equal records still equal",
     FULL, FULL.replace('[3,5]', '[5,3]'), 0, "stdout", r'^equal: 1 records$'),
    # Issue 60 item 4: every field is compared or refused, never ignored.
    # `replay --summary` lines differing only in "rounds", both ways:
    ("diff: summaries differing only in rounds (A 3, B 4)",
     SUMMARY % 3, SUMMARY % 4, 1, "stdout",
     r'^differ: request seq_id=7: rounds 3 in A, 4 in B$'),
    ("diff: summaries differing only in rounds (A 4, B 3)",
     SUMMARY % 4, SUMMARY % 3, 1, "stdout",
     r'^differ: request seq_id=7: rounds 4 in A, 3 in B$'),
    ("diff: rounds on one side only",
     SUMMARY % 3, '{"seq_id":7,"running_digest":"0x0000000000000022"}', 1, "stdout",
     r'^differ: request seq_id=7: "rounds" only in A \(the other record lacks it\)$'),
    ("diff: equal summaries", SUMMARY % 3, SUMMARY % 3, 0, "stdout", r'^equal: 1 records$'),
    ("diff: rounds not an integer",
     SUMMARY.replace('%d', '"3"') % (), SUMMARY % 3, 2, "stderr",
     r'diff: .*:1: "rounds" is not an unsigned 32-bit integer'),
    ("diff: an unknown field in A",
     FULL.replace('{"seq_id":7,', '{"seq_id":7,"tokens":9,'), FULL, 2, "stderr",
     r'diff: .*:1: unknown field "tokens": diff compares seq_id, round, rounds, round_digest, '
     r'running_digest and heads'),
    ("diff: an unknown field in B",
     FULL, FULL.replace('{"seq_id":7,', '{"seq_id":7,"tokens":9,'), 2, "stderr",
     r'diff: .*:1: unknown field "tokens"'),
    ("diff: an unknown field in a head",
     FULL.replace('"evicted":[4]', '"evicted":[4],"kept":[1]'), FULL, 2, "stderr",
     r'diff: .*:1: unknown field "kept" in a head: a head has layer, head and evicted'),
]


def run_diff_case(kvevict, a, b):
    paths = []
    for text in (a, b):
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
            f.write(text + "\n")
            paths.append(f.name)
    try:
        return subprocess.run([kvevict, "diff"] + paths, capture_output=True, text=True,
                              timeout=300)
    finally:
        for path in paths:
            os.unlink(path)


def dir_cases(kvevict):
    """Issue 47: a directory is unreadable input (exit 2), never an empty log."""
    with tempfile.TemporaryDirectory() as folder:
        log = os.path.join(folder, "a.jsonl")
        with open(log, "w") as f:
            f.write(FULL + "\n")
        pattern = r"kvevict: diff: cannot read .*: Is a directory"
        for name, args in (("diff DIR DIR", [folder, folder]), ("diff DIR LOG", [folder, log]),
                           ("diff LOG DIR", [log, folder])):
            p = subprocess.run([kvevict, "diff"] + args, capture_output=True, text=True,
                               timeout=300)
            ok = bool(p.returncode == 2 and re.search(pattern, p.stderr) and p.stdout == "")
            print(f"{'ok  ' if ok else 'FAIL'} {name}: exit {p.returncode}, stdout "
                  f"{p.stdout.strip()!r}, stderr {p.stderr.strip()!r}")
            yield ok


def main():
    kvevict = sys.argv[1]
    failed = 0
    dirs = list(dir_cases(kvevict))
    failed += dirs.count(False)
    for name, args, stdin, pattern in CASES:
        p = subprocess.run([kvevict] + args, input=stdin, capture_output=True, text=True,
                           timeout=300)
        ok = p.returncode == 2 and re.search(pattern, p.stderr)
        # A command refused for its arguments has done nothing yet.
        ok = ok and (args[0] == "demo" and "NOMEM" in pattern or p.stdout == "")
        print(f"{'ok  ' if ok else 'FAIL'} {name}: exit {p.returncode}, stderr {p.stderr.strip()!r}")
        failed += not ok
    for name, a, b, status, stream, pattern in DIFF_CASES:
        p = run_diff_case(kvevict, a, b)
        text = p.stdout if stream == "stdout" else p.stderr
        ok = p.returncode == status and re.search(pattern, text.strip())
        print(f"{'ok  ' if ok else 'FAIL'} {name}: exit {p.returncode}, stdout "
              f"{p.stdout.strip()!r}, stderr {p.stderr.strip()!r}")
        failed += not ok
    total = len(CASES) + len(DIFF_CASES) + len(dirs)
    print(f"{total - failed} of {total} passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
