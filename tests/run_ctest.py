#!/usr/bin/env python3
"""ctest with a heartbeat and the skipped tests' reasons (./run.sh test, sanitize, tsan).

Runs `ctest ARGS... --output-junit FILE`, passing its output through; when
nothing was printed for 60 s it says which tests are still running and for
how long, so a long suite never looks hung. At the end it lists every
skipped test with the last line it printed (a GPU test's "no GPU ...").
The exit status is ctest's.
"""
import os
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET

QUIET_S = 60


def reasons(junit):
    """(name, reason) of each skipped test of a ctest JUnit file."""
    try:
        root = ET.parse(junit).getroot()
    except (OSError, ET.ParseError):
        return []
    out = []
    for case in root.iter("testcase"):
        if case.get("status") != "notrun" and case.find("skipped") is None:
            continue
        text = (case.findtext("system-out") or "").strip().splitlines()
        why = next((l.strip() for l in reversed(text) if l.strip()), "(it printed nothing)")
        out.append((case.get("name"), why[:200]))
    return out


def main(args):
    fd, junit = tempfile.mkstemp(prefix="kve-ctest-", suffix=".xml")
    os.close(fd)
    proc = subprocess.Popen(["ctest", *args, "--output-junit", junit], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, bufsize=1)
    start = time.monotonic()
    state = {"last": start, "running": {}}
    lock = threading.Lock()

    def beat():
        while proc.poll() is None:
            time.sleep(5)
            with lock:
                now = time.monotonic()
                if now - state["last"] < QUIET_S:
                    continue
                state["last"] = now
                run = ", ".join("%s (%ds)" % (n, now - t)
                                for n, t in sorted(state["running"].items(), key=lambda x: x[1]))
            print("run_ctest: %dm%02ds in, still running: %s" % ((now - start) // 60,
                  (now - start) % 60, run or "(between tests)"), flush=True)

    threading.Thread(target=beat, daemon=True).start()
    for line in proc.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        words = line.split()
        with lock:
            state["last"] = time.monotonic()
            if len(words) >= 2 and words[0] == "Start":
                state["running"][words[-1]] = time.monotonic()
            elif "Test" in words and len(words) > 3:
                i = words.index("Test")
                if i + 2 < len(words):
                    state["running"].pop(words[i + 2], None)
    rc = proc.wait()
    skipped = reasons(junit)
    os.unlink(junit)
    if skipped:
        print("\nSkipped, and why (not counted as passed):")
        for name, why in skipped:
            print("  %-36s %s" % (name, why))
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
