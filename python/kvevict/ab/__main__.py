"""python -m kvevict.ab: an A/B of KV-eviction arms on a task file, judged on
accuracy by bucket next to throughput, latency, KV memory, output length,
retries and failures.

Every arm answers every task of the file (same prompts, same sampling
seeds), through transformers (kvevict.hf; kvpress's presses as peers) or
vLLM (the kvevict plugin). Per arm and bucket: accuracy with its 95%
Wilson interval, the paired difference against `full` with the exact
McNemar p-value, retry rate (no parsable answer, or the token limit hit),
output length against full's, tokens/s, p50 / p95 latency per request,
peak KV bytes, and the failures (full right, the arm wrong) side by side
from the first token where the outputs part. --html writes a
self-contained report, --json every number; the run ends with a table.

Run: python -m kvevict.ab [--tasks FILE] [--model DIR]   (default: the tiny
model kvevict trains itself and its task suite, kvevict/ab/data/; the
budget defaults fit it). docs/AB.md describes the task file and report.
"""
import argparse
import json
import os
import platform
import sys
import time

from . import report, tasks as taskfile
from .tiny import MODEL_DIR, SUITE

HF_ARMS = ("full", "random", "random-p0", "knorm", "triattention", "kvpress-knorm",
           "kvpress-random")
VLLM_ARMS = ("full", "random", "random-p0", "knorm")
DEFAULT_ARMS = "full,random,random-p0,knorm,triattention,kvpress-knorm"


class Progress:
    """A progress bar on stderr: [#####.....] done/total and the last item."""

    def __init__(self, total, out=None):
        self.total, self.done, self.out = max(1, total), 0, out or sys.stderr
        self.t0 = time.time()

    def tick(self, what):
        self.done += 1
        n = 30 * self.done // self.total
        self.out.write("\r[%s%s] %d/%d %4.0fs %-16s" % ("#" * n, "." * (30 - n), self.done,
                                                       self.total, time.time() - self.t0,
                                                       what[:16]))
        if self.done >= self.total:
            self.out.write("\n")
        self.out.flush()


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="python -m kvevict.ab",
                                 description=" ".join(__doc__.split("\n\n")[0].split()),
                                 epilog="docs/AB.md: the task file, the checkers and the report")
    ap.add_argument("--tasks", default=SUITE, help="a JSONL task file (default: the tiny "
                    "model's suite, %(default)s)")
    ap.add_argument("--model", default=MODEL_DIR, help="a local Hugging Face checkpoint "
                    "directory (default: kvevict's tiny model, %(default)s)")
    ap.add_argument("--engine", choices=("transformers", "vllm"), default="transformers")
    ap.add_argument("--arms", default=DEFAULT_ARMS, help="comma-separated: transformers: %s; "
                    "vllm: %s (default: %%(default)s; kvpress arms left out under vllm)"
                    % (", ".join(HF_ARMS), ", ".join(VLLM_ARMS)))
    ap.add_argument("--budget", type=int, default=16, help="B: KV tokens a head keeps "
                    "after a round (default %(default)s)")
    ap.add_argument("--budget-bytes", type=int, help="the budget in KV bytes of all layers "
                    "and heads instead (converted to tokens with the model's shape and dtype)")
    for k, v, h in (("window", 4, "W: the most recent tokens, never evicted"),
                    ("interval", 4, "r: tokens between eviction rounds"),
                    ("seed", 0, "keep-set and sampling seed"),
                    ("warmup", 1, "untimed runs of the first task per arm"),
                    ("examples", 5, "failure examples shown per arm"),
                    ("limit", 0, "the first N tasks of each bucket (0: all)"),
                    ("threads", 0, "torch CPU threads (0: torch's default)")):
        ap.add_argument("--" + k, type=int, default=v, help="%s (default %%(default)s)" % h)
    ap.add_argument("--temperature", type=float, default=0.0, help="0: greedy (default); "
                    "else sampling, each task's seed the same in every arm")
    ap.add_argument("--device", default="cpu", help="torch device (transformers; default cpu)")
    ap.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default="float32")
    ap.add_argument("--json", help="write every number (and every output) here")
    ap.add_argument("--html", help="write the report (one self-contained HTML file) here")
    a = ap.parse_args(argv)
    a.arms = [x.strip() for x in a.arms.split(",") if x.strip()]
    allowed = HF_ARMS if a.engine == "transformers" else VLLM_ARMS
    if a.engine == "vllm":
        a.arms = [x for x in a.arms if not x.startswith("kvpress-")]
        if "triattention" in a.arms:
            print("kvevict.ab: triattention under vllm needs a calibration file: left out",
                  file=sys.stderr)
            a.arms.remove("triattention")
    bad = [x for x in a.arms if x not in allowed]
    if bad or not a.arms:
        ap.error("--arms %s: expected some of %s (engine %s)"
                 % (",".join(bad) or "(none)", ", ".join(allowed), a.engine))
    if len(set(a.arms)) != len(a.arms):
        ap.error("--arms: an arm named twice (%s)" % ",".join(a.arms))
    for k in ("budget", "window", "interval"):
        if getattr(a, k) < 1:
            ap.error("--%s %d: expected an integer >= 1" % (k, getattr(a, k)))
    if a.budget_bytes is not None and a.budget_bytes < 1:
        ap.error("--budget-bytes %d: expected an integer >= 1" % a.budget_bytes)
    for k in ("warmup", "examples", "limit", "threads", "seed"):
        if getattr(a, k) < 0:
            ap.error("--%s %d: expected an integer >= 0" % (k, getattr(a, k)))
    if not a.temperature >= 0:
        ap.error("--temperature %r: expected a number >= 0" % a.temperature)
    if not os.path.isdir(a.model):
        ap.error("--model %s: not a directory (a local checkpoint: nothing is downloaded)"
                 % a.model)
    return a


def load_transformers(a):
    """(model, tokenizer, name) of --model on --device."""
    import torch
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # the run's own bar is the one on stderr
    dtype = getattr(torch, a.dtype)
    if os.path.exists(os.path.join(a.model, "vocab.json")) and \
            "kvevict_word_vocab" in open(os.path.join(a.model, "vocab.json")).read(200):
        from .tiny import load_model

        model, tok = load_model(a.model, dtype)
        same = os.path.realpath(a.model) == os.path.realpath(MODEL_DIR)
        name = "kvevict's tiny model" if same else a.model
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model = AutoModelForCausalLM.from_pretrained(a.model, dtype=dtype,
                                                     local_files_only=True).eval()
        tok = AutoTokenizer.from_pretrained(a.model, local_files_only=True)
        name = a.model
    return model.to(a.device), tok, name


def budget_tokens(a, config, dtype_bytes):
    """--budget, or --budget-bytes in tokens of this model."""
    if a.budget_bytes is None:
        return a.budget
    from kvevict.hf import check_config

    layers, kv_heads, _, head_dim = check_config(config)
    per = 2 * layers * kv_heads * head_dim * dtype_bytes
    b = a.budget_bytes // per
    if b < 1:
        raise ValueError("--budget-bytes %d: less than one token (%d bytes a token: %d layers x "
                         "%d KV heads x %d head_dim x 2 x %d bytes)"
                         % (a.budget_bytes, per, layers, kv_heads, head_dim, dtype_bytes))
    return int(b)


def select(tasks, limit):
    if not limit:
        return tasks
    seen, out = {}, []
    for t in tasks:
        seen[t["bucket"]] = seen.get(t["bucket"], 0) + 1
        if seen[t["bucket"]] <= limit:
            out.append(t)
    return out


def main(argv=None):
    a = parse_args(argv)
    try:
        tasks = select(taskfile.load(a.tasks), a.limit)
    except taskfile.TaskFileError as e:
        print("kvevict.ab: %s" % e, file=sys.stderr)
        return 2
    if a.engine == "transformers":
        try:
            import torch
            import transformers
        except ImportError as e:
            print("kvevict.ab: the transformers engine needs transformers and torch (%s): "
                  "python/requirements-hf.txt" % e, file=sys.stderr)
            return 2
        if any(x.startswith("kvpress-") for x in a.arms):
            try:
                import kvpress  # noqa: F401
            except ImportError:
                print("kvevict.ab: kvpress is not installed: its arms are left out",
                      file=sys.stderr)
                a.arms = [x for x in a.arms if not x.startswith("kvpress-")]
        if a.threads:
            torch.set_num_threads(a.threads)
        from . import engine_hf

        model, tok, name = load_transformers(a)
        dbytes = torch.empty(0, dtype=getattr(torch, a.dtype)).element_size()
        try:
            budget = budget_tokens(a, model.config, dbytes)
        except ValueError as e:
            print("kvevict.ab: %s" % e, file=sys.stderr)
            return 2
        versions = "torch %s, transformers %s" % (torch.__version__, transformers.__version__)
        run = lambda bar: engine_hf.run(model, tok, tasks, a.arms, budget, a.window, a.interval,
                                        a.seed, a.temperature, a.warmup, a.device, bar)
        total = len(tasks) * len(a.arms)
    else:
        from . import engine_vllm

        try:
            eng = engine_vllm.Engines(a)
        except (ImportError, ValueError) as e:
            print("kvevict.ab: the vllm engine: %s" % e, file=sys.stderr)
            return 2
        name, budget, versions = eng.name, eng.budget, eng.versions
        run = lambda bar: eng.run(tasks, bar)
        total = len(tasks) * len(a.arms)
    describe = ("%s on %s (%s), engine %s; %d tasks (%s) from %s; B=%d tokens W=%d r=%d seed %d, "
                "%s; %s; %s" % (
                    name, a.device if a.engine == "transformers" else "cpu", a.dtype, a.engine,
                    len(tasks), ", ".join(sorted(set(t["bucket"] for t in tasks))),
                    os.path.basename(a.tasks), budget, a.window, a.interval, a.seed,
                    "greedy" if a.temperature == 0 else "temperature %g" % a.temperature,
                    versions, platform.processor() or platform.machine()))
    print("kvevict.ab " + describe, flush=True)
    bar = Progress(total)
    t0 = time.time()
    try:
        res = run(bar)
    except ValueError as e:  # a prompt the tokenizer or the arm refuses
        print("\nkvevict.ab: %s" % e, file=sys.stderr)
        return 2
    for arm, recs in res.items():
        for t, r in zip(tasks, recs):
            r["correct"], r["parsed"] = taskfile.check(t, r["text"])
    summary = report.summarize(tasks, res, ref="full", examples=a.examples)
    print("\n".join(report.table(summary)))
    if a.json:
        items = {arm: [dict(id=t["id"], bucket=t["bucket"], correct=r["correct"],
                            parsed=r["parsed"], stopped=r["stopped"], new_tokens=len(r["ids"]),
                            prompt_tokens=r["prompt_tokens"], seconds=r["seconds"],
                            peak_kv_bytes=r["peak_kv_bytes"], output=r["text"])
                       for t, r in zip(tasks, recs)] for arm, recs in res.items()}
        settings = dict(tasks=a.tasks, model=a.model, engine=a.engine, arms=a.arms,
                        budget=budget, budget_bytes=a.budget_bytes, window=a.window,
                        interval=a.interval, seed=a.seed, temperature=a.temperature,
                        device=a.device, dtype=a.dtype, describe=describe,
                        wall_seconds=time.time() - t0)
        with open(a.json, "w") as f:
            json.dump(dict(settings=settings, items=items, **summary), f, indent=1)
            f.write("\n")
        print("wrote", a.json)
    if a.html:
        report.write_html(a.html, tasks, res, summary, describe)
        print("wrote", a.html)
    return 0


if __name__ == "__main__":
    sys.exit(main())
