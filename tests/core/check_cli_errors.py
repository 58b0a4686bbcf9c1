#!/usr/bin/env python3
"""The CLI's reproducers of issue 9: each command must exit with status 2
and print the status and message named here on stderr (never crash, never
succeed). Usage: check_cli_errors.py KVEVICT"""
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
    ("demo: buffers larger than memory",
     ["demo", "--layers", "4096", "--heads", "4096", "--entry-bytes", "65536", "--steps", "1",
      "--no-progress"],
     "",
     r"KVE_ERR_NOMEM: cannot allocate [0-9]+ bytes of host memory for the slot tables"),
]


def main():
    kvevict = sys.argv[1]
    failed = 0
    for name, args, stdin, pattern in CASES:
        p = subprocess.run([kvevict] + args, input=stdin, capture_output=True, text=True,
                           timeout=300)
        ok = p.returncode == 2 and re.search(pattern, p.stderr)
        print(f"{'ok  ' if ok else 'FAIL'} {name}: exit {p.returncode}, stderr {p.stderr.strip()!r}")
        failed += not ok
    print(f"{len(CASES) - failed} of {len(CASES)} passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
