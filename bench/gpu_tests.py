#!/usr/bin/env python3
"""gpu_tests.py — bench/gpu_check.sh's view of the GPU tests, taken from ctest
(the tests labelled exactly "gpu"), never from a hand list:

  gpu_tests.py targets BUILD
      the build targets the tests labelled gpu or gpu-load run, one a line, as
      configure wrote them (BUILD/kve_gpu_test_targets.txt, tests/lib/kve_tests.cmake):
      ctest itself gives no command for an executable not yet built
  gpu_tests.py verdict BUILD CTEST_OUTPUT VENDOR [--label L | --without L]
      "yes" when every GPU test of VENDOR (cuda: every one whose name does
      not say hip; hip: those that do) shows "Passed" in CTEST_OUTPUT; else
      "NO (name: status; ...)" naming each test not run, skipped or failed;
      --label L: only those also labelled L, --without L: none of those
      (gpu_check.sh runs the tests labelled graph in a step of their own)
  gpu_tests.py memcheck BUILD SANITIZER OUTDIR SECONDS
      each CUDA GPU test's command under SANITIZER (compute-sanitizer) --tool
      memcheck, with its ctest environment and smaller case counts, within
      SECONDS in all; prints "MEMCHECK name: N errors" (or why it gave no
      count) a line, then "RESULT memcheck_clean 1|0"; logs in OUTDIR

Exit 0, or 2 on bad arguments, when ctest cannot list the tests or when
BUILD/kve_gpu_test_targets.txt is missing or empty.
"""

import json
import os
import re
import subprocess
import sys
import time

# Smaller runs under memcheck (tens of times slower): the same code paths.
MEMCHECK_ENV = {"KVE_GPU_CASES": "300", "KVE_GPU_SCORE_CASES": "80", "KVE_DECODE_STEPS": "60",
                "KVE_GRAPH_STEPS": "40"}


def gpu_tests(build):
    """[(name, command, environment dict, labels)] of the tests labelled "gpu"."""
    out = subprocess.run(["ctest", "--test-dir", build, "--show-only=json-v1"],
                         capture_output=True, text=True, check=True).stdout
    tests = []
    for t in json.loads(out).get("tests", []):
        props = {p["name"]: p["value"] for p in t.get("properties", [])}
        labels = props.get("LABELS", [])
        if "gpu" not in labels:
            continue
        env = dict(e.split("=", 1) for e in props.get("ENVIRONMENT", []) if "=" in e)
        tests.append((t["name"], t.get("command", []), env, labels))
    return tests


def vendor_of(name):
    return "hip" if "hip" in name else "cuda"


def targets(build):
    path = os.path.join(build, "kve_gpu_test_targets.txt")
    with open(path, encoding="utf-8") as f:  # OSError: not configured with tests
        names = [line.strip() for line in f if line.strip()]
    if not names:
        raise ValueError("%s lists no target" % path)
    print("\n".join(names))


def verdict(build, ctest_output, vendor, only=None, without=None):
    try:
        text = open(ctest_output, encoding="utf-8", errors="replace").read()
    except OSError:
        text = ""
    bad = []
    seen = 0
    for name, _, _, labels in gpu_tests(build):
        if vendor_of(name) != vendor or (only and only not in labels) or \
                (without and without in labels):
            continue
        seen += 1
        m = re.search(r"Test +#\d+: %s \.+ *(\*{3})?([A-Za-z ]+?)(?: +[0-9.]+ sec|$)"
                      % re.escape(name), text, re.M)
        status = m.group(2).strip() if m else "did not run"
        if status != "Passed":
            bad.append("%s: %s" % (name, status))
    if not seen:  # nothing to pass is no pass
        bad.append("no %s test labelled gpu%s" % (vendor, " and " + only if only else ""))
    print("yes" if not bad else "NO (%s)" % "; ".join(bad))


def memcheck(build, sanitizer, outdir, seconds):
    deadline = time.time() + seconds
    clean = True
    for name, cmd, env, labels in gpu_tests(build):
        if vendor_of(name) != "cuda":
            continue
        if "nomemcheck" in labels:  # torch + transformers under the sanitizer outrun the step
            print("MEMCHECK %s: left out (label nomemcheck)" % name)
            continue
        left = deadline - time.time()
        if left < 5:
            print("MEMCHECK %s: not run (no time left of %d s)" % (name, seconds))
            clean = False
            continue
        run_env = dict(os.environ, **env, **MEMCHECK_ENV)
        log = os.path.join(outdir, "memcheck_%s.txt" % name)
        argv = [sanitizer, "--tool", "memcheck", "--print-limit", "20", "--error-exitcode", "99"]
        try:
            p = subprocess.run(argv + cmd, env=run_env, capture_output=True, text=True,
                               timeout=left)
            output, rc = p.stdout + p.stderr, p.returncode
        except subprocess.TimeoutExpired as e:
            # what it printed so far (bytes on some Pythons even with text=True)
            got = e.stdout or ""
            output = got.decode(errors="replace") if isinstance(got, bytes) else got
            rc = "timeout"
        with open(log, "w", encoding="utf-8") as f:
            f.write(output)
        m = re.search(r"ERROR SUMMARY: (\d+) error", output)
        if rc == "timeout":
            print("MEMCHECK %s: timed out (%d s left of %d)" % (name, left, seconds))
            clean = False
        elif rc == 77:
            print("MEMCHECK %s: skipped by the test (exit 77)" % name)
            clean = False
        elif not m:
            print("MEMCHECK %s: no error summary (exit %s)" % (name, rc))
            clean = False
        else:
            errors = int(m.group(1))
            print("MEMCHECK %s: %d errors, test exit %s" % (name, errors, rc))
            clean = clean and errors == 0 and rc == 0
    print("RESULT memcheck_clean %d" % (1 if clean else 0))


def main(argv):
    try:
        if len(argv) == 3 and argv[1] == "targets":
            targets(argv[2])
        elif len(argv) == 5 and argv[1] == "verdict":
            verdict(argv[2], argv[3], argv[4])
        elif len(argv) == 7 and argv[1] == "verdict" and argv[5] in ("--label", "--without"):
            only, without = (argv[6], None) if argv[5] == "--label" else (None, argv[6])
            verdict(argv[2], argv[3], argv[4], only, without)
        elif len(argv) == 6 and argv[1] == "memcheck":
            memcheck(argv[2], argv[3], argv[4], int(argv[5]))
        else:
            print(__doc__.strip(), file=sys.stderr)
            return 2
    except (subprocess.CalledProcessError, OSError, ValueError) as e:
        print("gpu_tests.py: %s" % e, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
