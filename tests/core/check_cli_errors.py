#!/usr/bin/env python3
"""The CLI's reproducers of issues 9 and 37: each command must exit with
status 2 and print the status and message named here on stderr (never
crash, never succeed), having printed nothing on stdout (but for the demo
that runs out of memory, after its header). Usage: check_cli_errors.py KVEVICT"""
import re
import subprocess
import sys


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
]


def main():
    kvevict = sys.argv[1]
    failed = 0
    for name, args, stdin, pattern in CASES:
        p = subprocess.run([kvevict] + args, input=stdin, capture_output=True, text=True,
                           timeout=300)
        ok = p.returncode == 2 and re.search(pattern, p.stderr)
        # A command refused for its arguments has done nothing yet.
        ok = ok and (args[0] == "demo" and "NOMEM" in pattern or p.stdout == "")
        print(f"{'ok  ' if ok else 'FAIL'} {name}: exit {p.returncode}, stderr {p.stderr.strip()!r}")
        failed += not ok
    print(f"{len(CASES) - failed} of {len(CASES)} passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
