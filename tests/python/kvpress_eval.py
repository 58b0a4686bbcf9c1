"""kvpress 0.5.5's evaluation/evaluate.py with kvevict registered as
docs/INTEGRATION.md shows (its '# doc-test: kvpress-registry' block, run
in evaluate_registry's namespace): ``--press_name kvevict_random`` (and the
other entries) on the decoding benchmarks aime25 and math500, end to end
through EvaluationRunner.run_evaluation() (press setup, pipeline,
inference, the benchmark's own scorer, the result files).

Run by kvpress_suite.py from the sdist's evaluation/ folder (argv: the tiny
checkpoint's directory, an output directory). Without the data and the
scorers' packages: load_dataset gives two rows in each benchmark's columns
(context, question, answer_prefix, answer, max_new_tokens), and the modules
that only the other benchmarks' scorers import (jieba, rouge, nltk, ...)
are stand-ins that raise if called."""

import importlib.util
import json
import re
import sys
import types
from pathlib import Path

T, I = 24, 4
DOC = Path(__file__).resolve().parents[2] / "docs" / "INTEGRATION.md"


class StandIn:
    """Any attribute is itself; constructed without arguments (Rouge() at
    import) it is itself; called with arguments (a scorer used) it raises."""

    def __getattr__(self, attr):
        return self

    def __call__(self, *a, **k):
        if a or k:
            raise RuntimeError("a stand-in of a package that aime25 / math500 do not use")
        return self


def _attr(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return StandIn()


def stand_ins():
    for name in ("jieba", "fuzzywuzzy", "rouge", "nltk", "bert_score"):
        if importlib.util.find_spec(name) is None:
            for sub in ("", ".translate", ".translate.bleu_score", ".translate.meteor_score"):
                m = types.ModuleType(name + sub)
                m.__getattr__ = _attr
                m.__path__ = []
                sys.modules[name + sub] = m


def main(model_dir, out_dir):
    sys.path.insert(0, str(Path.cwd()))
    stand_ins()
    import datasets
    import evaluate_registry

    code = [b for b in re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
            if b.startswith("# doc-test: kvpress-registry\n")]
    if len(code) != 1:
        print("FAIL: INTEGRATION.md: %d blocks tagged kvpress-registry" % len(code))
        return 1
    exec(compile(code[0], "INTEGRATION.md[kvpress-registry]", "exec"), vars(evaluate_registry))
    import evaluate

    rows = {"context": ["", ""], "question": ["What is 1 + 1 ? Answer in a box .",
                                              "The quick brown fox jumps over the lazy dog ."],
            "answer_prefix": ["", ""], "answer": ["2", "3"], "max_new_tokens": [40, 40]}
    evaluate.load_dataset = lambda *a, **k: datasets.Dataset.from_dict(rows)
    fails = []
    for name in ("kvevict_random", "kvevict_random_p0", "kvevict_knorm"):
        for dataset in ("aime25", "math500"):
            cfg = evaluate.EvaluationConfig(dataset=dataset, press_name=name, model=model_dir,
                                            device="cpu", target_size=T, compression_interval=I,
                                            output_dir=str(Path(out_dir) / name / dataset),
                                            log_level="WARNING")
            runner = evaluate.EvaluationRunner(cfg)
            runner.run_evaluation()
            press = evaluate_registry.PRESS_REGISTRY[name]
            res = [p.parent for p in Path(cfg.output_dir).rglob("metrics.json")]
            metrics = json.loads((res[0] / "metrics.json").read_text()) if len(res) == 1 else {}
            s = press.schedule
            ok = (metrics.get("total") == 2 and (res[0] / "predictions.csv").is_file()
                  and press.target_size == T and press.compression_interval == I
                  and s is not None and s.budget == T - 1 and s.interval == I
                  and s.n_tokens > T + I and s.state.seq(0).round > 0
                  and s.held() <= max(T - 1, s.prompt_len * press.pin_prompt + s.window) + I)
            print("%-18s %-8s metrics %s, budget %s, tokens %s, held %s" % (
                name, dataset, metrics, s and s.budget, s and s.n_tokens, s and s.held()))
            if not ok:
                fails.append("%s on %s" % (name, dataset))
    for f in fails:
        print("FAIL: evaluate.py --press_name", f)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
