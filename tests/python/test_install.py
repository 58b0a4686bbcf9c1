#!/usr/bin/python3
"""cmake --install into a scratch prefix, then import the installed package
with no KVEVICT_LIBRARY and away from the source tree: it must find the
installed library next to itself and work."""

import argparse
import os
import subprocess
import sys
import tempfile

CHECK = """
import kvevict, sys
prefix = sys.argv[1]
assert kvevict.LIBRARY_PATH.startswith(prefix), kvevict.LIBRARY_PATH
assert kvevict.__file__.startswith(prefix), kvevict.__file__
ctx = kvevict.Context("cpu")
st = kvevict.State(ctx, max_seqs=1, n_layers=2, n_heads=2, budget=16, window=2, interval=4,
                   max_slots=24)
st.admit(0, 1, 3)
for _ in range(40):
    st.append([0], [1])
assert st.seq(0).round > 0
print("installed package OK:", kvevict.__file__, kvevict.LIBRARY_PATH)
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cmake", required=True)
    ap.add_argument("--build-dir", required=True)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        prefix = os.path.join(tmp, "stage", "usr")
        subprocess.run([a.cmake, "--install", a.build_dir, "--prefix", prefix], check=True,
                       stdout=subprocess.DEVNULL)
        # Wherever KVE_PYTHON_INSTALL_DIR put it (relative to the prefix).
        found = [d for d, _, files in os.walk(prefix)
                 if os.path.basename(d) == "kvevict" and "__init__.py" in files]
        if len(found) != 1:
            print("installed kvevict packages under %s: %s" % (prefix, found))
            return 1
        pkg = os.path.dirname(found[0])
        env = {k: v for k, v in os.environ.items()
               if k not in ("KVEVICT_LIBRARY", "PYTHONPATH", "LD_LIBRARY_PATH")}
        env["PYTHONPATH"] = pkg
        r = subprocess.run([sys.executable, "-c", CHECK, os.path.realpath(prefix)], env=env,
                           cwd=tmp)
        return r.returncode


if __name__ == "__main__":
    sys.exit(main())
