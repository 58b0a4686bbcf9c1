#!/usr/bin/python3
"""kvpress 0.5.5's own tests (the PyPI sdist's tests/, which ./run.sh test
fetches once into ~/.cache/kvevict/, sha256 checked; KVE_KVPRESS_SDIST=FILE
names another copy) with kvevict's press added to their parameter lists by
kvpress_plugin.py, their hub model (MaxJeblick/llama2-0b-unit-test) replaced
by kvpress_tiny's offline checkpoint through a Hugging Face cache in a
temporary HF_HOME: kvpress's code, kvevict's and the test bodies as they are.

Run: tests/presses/test_presses.py::test_presses_run, tests/
test_decoding_compression.py and tests/test_pipeline.py::
test_pipeline_only_computes_the_logits_it_needs (the tests that take a
press from a list; the rest of kvpress's suite tests kvpress's own presses),
then kvpress_eval.py: the sdist's evaluation/evaluate.py with the registry
lines of docs/INTEGRATION.md, on aime25 and math500.
The failures must be exactly those docs/INTEGRATION.md lists under "kvpress's
own tests" with their reasons: a new failure, or a listed one that passes,
fails this test. Exit 77 (skipped) without kvpress / pytest / the sdist,
1 with KVE_HF_REQUIRED=1 (run.sh's venv)."""

import hashlib
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

SDIST_SHA256 = "0a5aa714c59c63a0f26588378e3bc9890a55f761a30efd1ad1b6623adb8b5296"
SDIST = Path.home() / ".cache" / "kvevict" / "kvpress-0.5.5.tar.gz"
HUB_IDS = ("MaxJeblick/llama2-0b-unit-test", "maxjeblick/llama2-0b-unit-test")
SELECT = ("tests/presses/test_presses.py::test_presses_run",
          "tests/test_decoding_compression.py",
          "tests/test_pipeline.py::test_pipeline_only_computes_the_logits_it_needs")
HERE = Path(__file__).resolve().parent
DOC = HERE.parents[1] / "docs" / "INTEGRATION.md"


def skip(why):
    print("skipped:", why)
    sys.exit(1 if os.environ.get("KVE_HF_REQUIRED") else 77)


def expected_failures():
    """{test id: reason} from INTEGRATION.md's table under 'kvpress's own tests'."""
    text = DOC.read_text()
    m = re.search(r"<!-- kvpress-suite-failures -->\n(.*?)<!-- /kvpress-suite-failures -->",
                  text, re.S)
    if not m:
        raise SystemExit("%s: no kvpress-suite-failures table" % DOC)
    rows = re.findall(r"^\| `kvpress-0\.5\.5/([^`]+)` \| (.+?) \|$", m.group(1), re.M)
    return {k: v for k, v in rows}


def main():
    try:
        import kvpress  # noqa: F401
        import pytest  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        skip("kvpress / pytest / transformers are not installed (%s)" % e)
    sdist = Path(os.environ.get("KVE_KVPRESS_SDIST") or SDIST)
    if not sdist.is_file():
        skip("%s is missing (./run.sh test fetches it)" % sdist)
    digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
    if digest != SDIST_SHA256:
        print("FAIL: %s: sha256 %s, expected %s" % (sdist, digest, SDIST_SHA256))
        return 1
    want = expected_failures()
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(sdist) as t:
            members = [m for m in t.getmembers()
                       if m.name.split("/")[1:2] in (["tests"], ["evaluation"])
                       and (m.isfile() or m.isdir()) and ".." not in m.name.split("/")]
            t.extractall(tmp, members=members)
        root = Path(tmp) / "kvpress-0.5.5"
        env = dict(os.environ, HF_HOME=str(Path(tmp) / "hf"), HF_HUB_OFFLINE="1",
                   TRANSFORMERS_OFFLINE="1", HF_HUB_DISABLE_PROGRESS_BARS="1",
                   KVE_SUITE_REPORT=str(Path(tmp) / "report.json"), OMP_NUM_THREADS="1",
                   TOKENIZERS_PARALLELISM="false",
                   PYTHONPATH=os.pathsep.join([str(HERE), str(HERE.parents[1] / "python"),
                                               os.environ.get("PYTHONPATH", "")]))
        model_dir = str(Path(tmp) / "model")
        build = ("import kvpress_tiny; kvpress_tiny.hub_cache(%r, %r); kvpress_tiny.save(%r)"
                 % (env["HF_HOME"], HUB_IDS, model_dir))
        subprocess.run([sys.executable, "-c", build], env=env, check=True,
                       stdout=subprocess.DEVNULL)
        cmd = [sys.executable, "-m", "pytest", "-p", "kvpress_plugin", "-q", "-rN", "--tb=line",
               "--no-header", "-p", "no:cacheprovider", "-W", "ignore", *SELECT]
        rc = subprocess.run(cmd, cwd=root, env=env).returncode
        report = json.loads((Path(tmp) / "report.json").read_text())
        print("evaluation/evaluate.py with kvevict's registry lines (kvpress_eval.py):")
        rc_eval = subprocess.run([sys.executable, str(HERE / "kvpress_eval.py"), model_dir,
                                  str(Path(tmp) / "results")], cwd=root / "evaluation",
                                 env=env).returncode
    if rc not in (0, 1):
        print("FAIL: pytest exited %d (not a test failure: collection or usage)" % rc)
        return 1
    got = {k: v[1] for k, v in report["outcomes"].items() if v[0] == "failed"}
    ran = set(report["outcomes"])
    fails = []
    for k in sorted(set(got) - set(want)):
        fails.append("new failure, not in INTEGRATION.md: %s: %s" % (k, got[k]))
    for k in sorted(set(want) - set(got)):
        fails.append("listed in INTEGRATION.md but %s: %s" % (
            "passed" if k in ran else "did not run", k))
    for name in ("KvevictPress", "KvevictPressP0", "kvevict", "DecodingPressRandom",
                 "RandomPress"):
        n = sum(1 for k, v in report["outcomes"].items()
                if re.search(r"[\[-]%s[\]-]" % name, k) and v[0] == "passed")
        print("%-20s %d passed" % (name, n))
        if n == 0:
            fails.append("no test of %s passed: the rows were not added" % name)
    if rc_eval != 0:
        fails.append("kvpress_eval.py: evaluate.py with kvevict's presses failed (exit %d)"
                     % rc_eval)
    print("%d tests, %d failed (all listed in INTEGRATION.md: %s)"
          % (len(ran), len(got), "yes" if not fails else "no"))
    for f in fails:
        print("FAIL:", f)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
