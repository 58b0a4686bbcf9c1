"""A pytest plugin (-p kvpress_plugin) that adds kvevict's press to the
parameter lists of kvpress 0.5.5's own tests, test bodies untouched, with
kvpress's RandomPress / DecodingPress(RandomPress) as controls, and records
every test's outcome (JSON at $KVE_SUITE_REPORT) for kvpress_suite.py.

- tests/default_presses.py's default_presses: KvevictPress appended (the
  pinned arm at compression_ratio 0.2, the p0 arm at 0.8);
- test_decoding_compression.py's press_factory lists: DecodingPress with
  RandomPress(seed=0) (seeded: test_decoding_press_equivalence compares two
  runs), KvevictPress and KvevictPress(pin_prompt=False) appended
  (target_size and compression_interval as the test gives them, W = 4; the
  test's base press is kvpress's and is not used: kvevict chooses with its
  own keep-set); its reuse factories: the same three;
- test_pipeline.py's press_cls list: RandomPress and KvevictPress appended.

Of test_presses_run and test_all_presses_work_with_decoding_press, which run
every kvpress press, only the rows of RandomPress, KnormPress (the base press
the decoding tests use) and KvevictPress are kept: the others test kvpress's
presses, not kvevict's, and take minutes.
"""

import json
import os

import pytest

WINDOW = 4
KEEP = ("RandomPress", "KnormPress", "KvevictPress")
OUTCOMES = {}  # test id -> (outcome, first line of the failure)


def _factories():
    from kvpress import DecodingPress, RandomPress
    from kvevict.press import KvevictPress

    def decoding_random(target_size, compression_interval, base_press):
        return DecodingPress(base_press=RandomPress(seed=0), target_size=target_size,
                             compression_interval=compression_interval)

    def kvevict(target_size, compression_interval, base_press):
        return KvevictPress(target_size=target_size, compression_interval=compression_interval,
                            window=WINDOW)

    def kvevict_p0(target_size, compression_interval, base_press):
        return KvevictPress(target_size=target_size, compression_interval=compression_interval,
                            window=WINDOW, pin_prompt=False)

    return [(decoding_random, "DecodingPressRandom"), (kvevict, "KvevictPress"),
            (kvevict_p0, "KvevictPressP0")]


def pytest_configure(config):
    from kvevict.press import KvevictPress
    from tests.default_presses import default_presses

    if not any(d["cls"] is KvevictPress for d in default_presses):
        default_presses.append({"cls": KvevictPress, "kwargs": [
            {"compression_ratio": 0.2, "window": WINDOW},
            {"compression_ratio": 0.8, "window": WINDOW, "pin_prompt": False}]})
    OUTCOMES.clear()


def _extend(obj):
    """obj's parametrize marks with kvevict's rows added (a new list each)."""
    from kvpress import DecodingPress, RandomPress
    from kvevict.press import KvevictPress

    marks = getattr(obj, "pytestmark", None)
    if not marks:
        return
    out = []
    for m in marks:
        if m.name == "parametrize" and m.args[0] == "press_factory" and \
                obj.__name__ != "test_decoding_press_reuse_across_sequences":
            fs, ids = list(m.args[1]), list(m.kwargs.get("ids") or [f.__name__ for f in m.args[1]])
            for f, i in _factories():
                fs.append(f)
                ids.append(i)
            m = pytest.mark.parametrize("press_factory", fs, ids=ids).mark
        elif m.name == "parametrize" and m.args[0] == "press_factory":
            ps = list(m.args[1]) + [
                pytest.param(lambda: DecodingPress(base_press=RandomPress(seed=0),
                                                   compression_interval=3, target_size=32),
                             id="decoding_random"),
                pytest.param(lambda: KvevictPress(compression_interval=3, target_size=32,
                                                  window=WINDOW), id="kvevict"),
                pytest.param(lambda: KvevictPress(compression_interval=3, target_size=32,
                                                  window=WINDOW, pin_prompt=False),
                             id="kvevict_p0")]
            m = pytest.mark.parametrize("press_factory", ps).mark
        elif m.name == "parametrize" and m.args[0] == "press_cls":
            cs = list(m.args[1]) + [RandomPress, KvevictPress]
            m = pytest.mark.parametrize("press_cls", cs, ids=[c.__name__ for c in cs]).mark
        elif m.name == "parametrize" and m.args[0] in ("press_dict", "press_config"):
            ds = list(m.args[1])
            m = pytest.mark.parametrize(m.args[0], ds, ids=[d["cls"].__name__ for d in ds]).mark
        out.append(m)
    obj.pytestmark = out


@pytest.hookimpl(hookwrapper=True)
def pytest_pycollect_makeitem(collector, name, obj):
    if name.startswith("test_") and callable(obj):
        _extend(obj)
    yield


def pytest_collection_modifyitems(session, config, items):
    keep, drop = [], []
    for it in items:
        cs = getattr(it, "callspec", None)
        d = cs.params.get("press_dict", cs.params.get("press_config")) if cs else None
        (drop if d is not None and d["cls"].__name__ not in KEEP else keep).append(it)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_runtest_logreport(report):
    if report.failed:
        crash = getattr(report.longrepr, "reprcrash", None)
        msg = crash.message if crash is not None else str(report.longrepr)
        OUTCOMES[report.nodeid] = ("failed", msg.splitlines()[0][:300] if msg else "")
    elif report.nodeid not in OUTCOMES and (report.when == "call" or report.skipped):
        OUTCOMES[report.nodeid] = (report.outcome, "")


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get("KVE_SUITE_REPORT")
    if path:
        with open(path, "w") as f:
            json.dump({"exitstatus": int(exitstatus), "outcomes": OUTCOMES},
                      f, indent=1, sort_keys=True)
