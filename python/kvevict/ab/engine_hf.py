"""kvevict.ab's transformers engine: every arm decodes every task with the
model's own forward, one request at a time (batch 1), its KV cache the
arm's:

  full            transformers' DynamicCache, nothing evicted
  random          kvevict.hf.KvevictCache, random keep-set, prompt pinned
  random-p0       the same, prompt unpinned (evicted like any token)
  knorm           KvevictCache with kvevict's K-norm scorer, prompt pinned
  triattention    KvevictCache with kvevict's TriAttention scorer (statistics
                  calibrated on the first prompts), prompt pinned
  kvpress-knorm   kvpress's KnormPress over the prompt (keeping B tokens a
                  head) and under DecodingPress (every r steps back to B)
  kvpress-random  the same with kvpress's RandomPress

Greedy decoding by default; with a temperature, each task's sampling
generator is seeded from (seed, task index), the same in every arm. The
arms interleave task by task, so a noisy stretch of the machine hits
every arm alike.
"""
import time
from typing import Any, Dict, List, Optional, Sequence

import torch

KVEVICT_ARMS = ("full", "random", "random-p0", "knorm", "triattention")
KVPRESS_ARMS = ("kvpress-knorm", "kvpress-random")
ARMS = KVEVICT_ARMS + KVPRESS_ARMS


class Tokens:
    """The prompt ids, output text and token strings of a tokenizer: the
    tiny model's WordTokenizer or a transformers tokenizer."""

    def __init__(self, tok: Any, model: Any):
        self.tok = tok
        self.words = hasattr(tok, "chat_text")
        eos = getattr(tok, "eos_token_id", None)
        gen = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        ids = set()
        for e in (eos, gen):
            if isinstance(e, int):
                ids.add(e)
            elif e:
                ids.update(int(x) for x in e)
        self.eos = ids

    def prompt_ids(self, task: dict) -> List[int]:
        """The task's prompt as ids (chat messages through the chat template)."""
        if self.words:
            text = self.tok.chat_text(task["messages"]) if "messages" in task else task["prompt"]
            return self.tok.encode(text)
        if "messages" in task:
            if not getattr(self.tok, "chat_template", None):
                raise ValueError("task %r: chat messages, but the tokenizer has no chat template"
                                 % task["id"])
            out = self.tok.apply_chat_template(task["messages"], add_generation_prompt=True,
                                               tokenize=True)
            if hasattr(out, "keys") and "input_ids" in out:
                out = out["input_ids"]
            return list(out)
        return list(self.tok(task["prompt"])["input_ids"])

    def text(self, ids: Sequence[int]) -> str:
        if self.words:
            return self.tok.decode(ids)
        return self.tok.decode(ids, skip_special_tokens=True)

    def strings(self, ids: Sequence[int]) -> List[str]:
        if self.words:
            return self.tok.token_strings(ids)
        return [str(t) for t in self.tok.convert_ids_to_tokens(list(ids))]


def kv_bytes(cache: Any) -> int:
    """Bytes of keys and values a cache's layers hold."""
    return sum(x.numel() * x.element_size() for l in cache.layers
               if getattr(l, "is_initialized", False) and getattr(l, "keys", None) is not None
               for x in (l.keys, l.values))


def bytes_per_token(config: Any, dtype: torch.dtype) -> int:
    """KV bytes one token takes in every layer and KV head (keys + values)."""
    from kvevict.hf import check_config

    layers, kv_heads, _, head_dim = check_config(config)
    return 2 * layers * kv_heads * head_dim * torch.empty(0, dtype=dtype).element_size()


class Arm:
    """One arm: a fresh cache (and press) per request."""

    def __init__(self, name: str, model: Any, budget: int, window: int, interval: int,
                 seed: int, stats: Any = None):
        self.name, self.model = name, model
        self.budget, self.window, self.interval, self.seed = budget, window, interval, seed
        self.stats = stats

    def cache_and_press(self, seq_id: int, prompt_len: int):
        from transformers import DynamicCache

        if self.name == "full":
            return DynamicCache(), None
        if self.name in KVPRESS_ARMS:
            from kvpress import (DecodingPress, KnormPress, PrefillDecodingPress,
                                 RandomPress)

            def base(ratio=0.0):
                if self.name == "kvpress-knorm":
                    return KnormPress(compression_ratio=ratio)
                return RandomPress(compression_ratio=ratio, seed=self.seed + seq_id)
            ratio = max(0.0, 1.0 - self.budget / prompt_len)
            press = PrefillDecodingPress(
                prefilling_press=base(ratio) if ratio > 0 else None,
                decoding_press=DecodingPress(base_press=base(), compression_interval=self.interval,
                                             target_size=self.budget))
            return DynamicCache(), press
        from kvevict.hf import KvevictCache

        scorer = {"knorm": "knorm", "triattention": "triattention"}.get(self.name)
        cache = KvevictCache(self.model.config, budget=self.budget, window=self.window,
                             interval=self.interval, seed=self.seed, seq_id=seq_id,
                             pin_prompt=self.name != "random-p0", scorer=scorer,
                             stats=self.stats if scorer == "triattention" else None)
        return cache, None


def _forward(model, ids, pos, cache):
    cp = torch.arange(pos, pos + ids.shape[1], device=ids.device)
    with torch.no_grad():
        out = model(input_ids=ids, past_key_values=cache, cache_position=cp, use_cache=True)
    return out.logits[0, -1].float()


def generate(model: Any, arm: Arm, prompt: List[int], max_new: int, eos: set, seq_id: int,
             temperature: float = 0.0, sample_seed: int = 0, device: str = "cpu") -> dict:
    """One request through one arm: its output ids, whether it stopped at
    an end token, its wall time and the most KV bytes held after a step."""
    cache, press = arm.cache_and_press(seq_id, len(prompt))
    gen = torch.Generator().manual_seed(sample_seed) if temperature > 0 else None

    def pick(logits):
        if gen is None:
            return int(logits.argmax())
        p = torch.softmax(logits.cpu() / temperature, dim=-1)
        return int(torch.multinomial(p, 1, generator=gen))

    out, stopped, peak = [], False, 0
    ctx = press(model) if press is not None else None
    t0 = time.perf_counter()
    if ctx is not None:
        ctx.__enter__()
    try:
        ids = torch.tensor([prompt], device=device)
        logits = _forward(model, ids, 0, cache)
        peak = kv_bytes(cache)
        pos = len(prompt)
        while True:
            t = pick(logits)
            if t in eos:
                stopped = True
                break
            out.append(t)
            if len(out) >= max_new:
                break
            logits = _forward(model, torch.tensor([[t]], device=device), pos, cache)
            pos += 1
            peak = max(peak, kv_bytes(cache))
    finally:
        if ctx is not None:
            ctx.__exit__(None, None, None)
    if device != "cpu" and torch.cuda.is_available():
        torch.cuda.synchronize()
    return dict(ids=out, stopped=stopped, seconds=time.perf_counter() - t0, peak_kv_bytes=peak)


def calibrate(model: Any, prompts: Sequence[List[int]], device: str, limit: int = 512):
    """TriAttention statistics from the first prompts (up to limit tokens)."""
    from kvevict.hf import calibrate_triattention

    ids = []
    for p in prompts:
        ids.extend(p)
        if len(ids) >= limit:
            break
    return calibrate_triattention(model, torch.tensor([ids[:limit]], device=device))


def run(model: Any, tok: Any, tasks: List[dict], arms: Sequence[str], budget: int, window: int,
        interval: int, seed: int, temperature: float = 0.0, warmup: int = 1,
        device: str = "cpu", progress: Optional[Any] = None) -> Dict[str, List[dict]]:
    """Every arm over every task: {arm: [one record per task, in task order]}
    with the output ids, text and token strings, stopped, seconds and
    peak_kv_bytes."""
    T = Tokens(tok, model)
    prompts = [T.prompt_ids(t) for t in tasks]
    stats = calibrate(model, prompts, device) if "triattention" in arms else None
    objs = [Arm(a, model, budget, window, interval, seed, stats) for a in arms]
    for _ in range(warmup):  # untimed: first-call costs out of the figures
        for arm in objs:
            generate(model, arm, prompts[0], tasks[0]["max_new_tokens"], T.eos, 0, temperature,
                     seed, device)
    res: Dict[str, List[dict]] = {a: [] for a in arms}
    for i, (task, prompt) in enumerate(zip(tasks, prompts)):
        for arm in objs:
            r = generate(model, arm, prompt, task["max_new_tokens"], T.eos, seq_id=i,
                         temperature=temperature, sample_seed=seed * 1000003 + i, device=device)
            r.update(text=T.text(r["ids"]), tokens=T.strings(r["ids"]), prompt_tokens=len(prompt))
            res[arm.name].append(r)
            if progress is not None:
                progress.tick(arm.name)
    return res
