"""Decode benchmark of KV eviction inside Hugging Face transformers, the
arms side by side on one model:

  none             transformers' DynamicCache, nothing evicted
  random           kvevict.hf.KvevictCache, random keep-set, prompt pinned
  random-p0        the same, prompt unpinned
  triattention     KvevictCache with kvevict's TriAttention scorer
  knorm            KvevictCache with kvevict's K-norm scorer
  kvpress-random   kvpress's RandomPress under DecodingPress, same budget
  kvpress-knorm    kvpress's KnormPress under DecodingPress, same budget

Every arm prefills the same prompt, then decodes greedily one token a step
(the model's forward with the arm's cache). The arms interleave: a common
warm-up (--warmup steps each, round robin), then --steps timed steps each
in blocks of --block, round robin, so the order and a noisy stretch hit
every arm alike. Per arm: tokens/s (and its blocks' spread, (max - min) /
median), peak KV bytes held, and the share of step time spent choosing and
compacting (kvevict: the state's appends, scoring and the gathers;
kvpress: its hooks). --html writes a figure like serve_bench's.

Run: python -m kvevict.examples.hf_bench [--model DIR]   (a local
checkpoint; default: a small Qwen3 with seeded random weights).
"""
import argparse
import html
import json
import platform
import sys
import time

import torch

ARMS = ("none", "random", "random-p0", "triattention", "knorm", "kvpress-random",
        "kvpress-knorm")
COLORS = {"none": "#555555", "random": "#1b7837", "random-p0": "#7fbf7b",
          "triattention": "#762a83", "knorm": "#c2a5cf", "kvpress-random": "#e08214",
          "kvpress-knorm": "#fdb863"}


def small_model(seed, dtype):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen3Config(vocab_size=2048, hidden_size=256, intermediate_size=512,
                      num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2,
                      head_dim=64, max_position_embeddings=4096, tie_word_embeddings=False)
    return Qwen3ForCausalLM(cfg).to(dtype).eval()


def kv_bytes(cache):
    return sum(l.keys.numel() * l.keys.element_size() + l.values.numel() * l.values.element_size()
               for l in cache.layers if getattr(l, "is_initialized", False))


class Arm:
    """One arm's cache and decode loop."""

    def __init__(self, name, model, a, stats, active):
        from transformers import DynamicCache

        from kvevict.hf import KvevictCache

        self.name, self.model, self.a = name, model, a
        self.press, self.hook_s = None, 0.0
        if name.startswith("kvpress-"):
            from kvpress import DecodingPress, KnormPress, RandomPress

            base = RandomPress() if name == "kvpress-random" else KnormPress()
            self.press = DecodingPress(base_press=base, compression_interval=a.interval,
                                       target_size=a.budget)
            self.press.post_init_from_model(model)
            self._hooks(active)
            self.cache = DynamicCache()
        elif name == "none":
            self.cache = DynamicCache()
        else:
            scorer = {"triattention": "triattention", "knorm": "knorm"}.get(name)
            self.cache = KvevictCache(model.config, budget=a.budget, window=a.window,
                                      interval=a.interval, seed=a.seed, scorer=scorer,
                                      pin_prompt=name != "random-p0", stats=stats)
        self.steps, self.blocks, self.series, self.peak = [], [], [], 0

    def _hooks(self, active):
        inner = getattr(self.model, "model", self.model)
        press, me = self.press, self

        def hook(module, args, kwargs, output):
            if active[0] is not me:
                return output
            t0 = time.perf_counter()
            out = press.forward_hook(module, args, kwargs, output)
            me.hook_s += time.perf_counter() - t0
            return out
        self.handles = [l.self_attn.register_forward_hook(hook, with_kwargs=True)
                        for l in inner.layers]

    def forward(self, ids, pos):
        n = ids.shape[1]
        cp = torch.arange(pos, pos + n, device=ids.device)
        with torch.no_grad():
            out = self.model(input_ids=ids, past_key_values=self.cache, cache_position=cp,
                             use_cache=True)
        return out.logits[:, -1].argmax(-1, keepdim=True)

    def prefill(self, prompt):
        self.pos = prompt.shape[1]
        self.tok = self.forward(prompt, 0)
        self.peak = kv_bytes(self.cache)

    def evict_s(self):
        return self.hook_s if self.press else getattr(self.cache, "evict_seconds", 0.0)

    def step(self, timed):
        sync(self.a.device)
        e0, t0 = self.evict_s(), time.perf_counter()
        self.tok = self.forward(self.tok, self.pos)
        sync(self.a.device)
        dt = time.perf_counter() - t0
        self.pos += 1
        b = kv_bytes(self.cache)
        self.peak = max(self.peak, b)
        self.series.append(b)
        if timed:
            self.steps.append((dt, self.evict_s() - e0))
        return dt

    def block(self, n):
        wall = sum(self.step(True) for _ in range(n))
        self.blocks.append(n / wall if wall else 0.0)

    def result(self):
        wall = sum(s[0] for s in self.steps)
        b = sorted(self.blocks) or [0.0]
        med = b[len(b) // 2] if len(b) % 2 else (b[len(b) // 2 - 1] + b[len(b) // 2]) / 2
        lat = sorted(s[0] for s in self.steps)
        return dict(arm=self.name, tokens_per_s=len(self.steps) / wall if wall else 0.0,
                    block_tokens_per_s=self.blocks, tokens_per_s_min=b[0], tokens_per_s_max=b[-1],
                    spread=(b[-1] - b[0]) / med if med else 0.0,
                    step_ms_p50=1e3 * lat[len(lat) // 2] if lat else 0.0,
                    peak_kv_bytes=self.peak, final_kv_bytes=self.series[-1] if self.series else 0,
                    evict_share=sum(s[1] for s in self.steps) / wall if wall else 0.0,
                    timed_steps=len(self.steps), kv_series=self.series)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Progress:
    def __init__(self, total, out=None):
        self.total, self.done, self.out = total, 0, out or sys.stderr

    def tick(self, what):
        self.done += 1
        n = 30 * self.done // self.total
        self.out.write("\r[%s%s] %3d%% %-16s" % ("#" * n, "." * (30 - n),
                                                 100 * self.done // self.total, what))
        if self.done == self.total:
            self.out.write("\n")
        self.out.flush()


def run(model, a, log=print):
    from kvevict.hf import calibrate_triattention

    g = torch.Generator().manual_seed(a.seed)
    vocab = model.config.get_text_config(decoder=True).vocab_size
    prompt = torch.randint(0, vocab, (1, a.prompt), generator=g).to(a.device)
    stats = None
    if "triattention" in a.arms:
        calib = torch.randint(0, vocab, (1, 256), generator=g).to(a.device)
        stats = calibrate_triattention(model, calib)
    active = [None]
    arms = [Arm(n, model, a, stats, active) for n in a.arms]
    blocks = [a.block] * (a.steps // a.block) + ([a.steps % a.block] if a.steps % a.block else [])
    bar = Progress(len(arms) * (1 + a.warmup + len(blocks)))
    for arm in arms:
        active[0] = arm
        arm.prefill(prompt)
        bar.tick("prefill " + arm.name)
    for _ in range(a.warmup):
        for arm in arms:
            active[0] = arm
            arm.step(False)
            bar.tick("warm-up " + arm.name)
    for n in blocks:
        for arm in arms:
            active[0] = arm
            arm.block(n)
            bar.tick(arm.name)
    for arm in arms:
        for h in getattr(arm, "handles", []):
            h.remove()
    return {arm.name: arm.result() for arm in arms}


def print_table(res, log=print):
    log("%-15s %9s %8s %8s %13s %13s %9s" % ("arm", "tok/s", "spread", "p50 ms",
                                             "peak KV KiB", "final KV KiB", "evict %"))
    for name, r in res.items():
        log("%-15s %9.1f %7.0f%% %8.2f %13.1f %13.1f %9.2f" % (
            name, r["tokens_per_s"], 100 * r["spread"], r["step_ms_p50"],
            r["peak_kv_bytes"] / 1024, r["final_kv_bytes"] / 1024, 100 * r["evict_share"]))


def write_html(path, res, describe):
    from .serve_bench import COLORS as SB

    SB.update(COLORS)
    from .serve_bench import _bars, _lines

    rows = "".join("<tr><td>%s</td><td>%.1f</td><td>%.0f%%</td><td>%.1f</td><td>%.2f</td></tr>"
                   % (html.escape(n), r["tokens_per_s"], 100 * r["spread"],
                      r["peak_kv_bytes"] / 1024, 100 * r["evict_share"]) for n, r in res.items())
    doc = """<!DOCTYPE html><html><head><meta charset="utf-8"><title>kvevict hf_bench</title>
<style>body{font-family:sans-serif}td,th{padding:2px 8px;text-align:right}</style></head><body>
<h2>kvevict hf_bench</h2><p>%s</p>
<table><tr><th>arm</th><th>tok/s</th><th>spread</th><th>peak KV KiB</th><th>evict %%</th></tr>%s
</table>%s%s</body></html>""" % (html.escape(describe), rows, _bars(res),
                                 _lines(res, "kv_series", "KV bytes held over the run",
                                        1 / 1024, " KiB"))
    with open(path, "w") as f:
        f.write(doc)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="python -m kvevict.examples.hf_bench",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="a local Hugging Face checkpoint directory (default: a small "
                    "Qwen3 with seeded random weights)")
    ap.add_argument("--arms", default=",".join(ARMS), help="comma-separated, of " + ", ".join(ARMS))
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", choices=("float32", "bfloat16", "float16"),
                    help="default: bfloat16 on a GPU, float32 on the CPU")
    for k, v in (("prompt", 128), ("budget", 128), ("window", 16), ("interval", 16),
                 ("warmup", 8), ("steps", 192), ("block", 8), ("seed", 7), ("threads", 0)):
        ap.add_argument("--" + k, type=int, default=v)
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--html", help="write the figure (self-contained HTML/SVG) here")
    ap.add_argument("--results", action="store_true", help="print RESULT lines (gpu_check.sh)")
    a = ap.parse_args(argv)
    a.arms = [x.strip() for x in a.arms.split(",") if x.strip()]
    bad = [x for x in a.arms if x not in ARMS]
    if bad or not a.arms:
        ap.error("--arms: %s; expected some of %s" % (", ".join(bad) or "none given",
                                                      ", ".join(ARMS)))
    for k in ("prompt", "budget", "window", "interval", "steps", "block"):
        if getattr(a, k) < 1:
            ap.error("--%s %d: expected a positive integer" % (k, getattr(a, k)))
    if a.warmup < 0:
        ap.error("--warmup %d: expected an integer >= 0" % a.warmup)
    from .serve_bench import device_and_dtype
    device_and_dtype(ap, a)
    return a


def main(argv=None):
    a = parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    try:
        import transformers
    except ImportError as e:
        print("hf_bench: needs transformers (%s): python/requirements-hf.txt" % e, file=sys.stderr)
        return 2
    try:
        import kvpress  # noqa: F401
    except ImportError:
        if any(x.startswith("kvpress-") for x in a.arms):
            print("hf_bench: kvpress is not installed: its arms are left out", file=sys.stderr)
        a.arms = [x for x in a.arms if not x.startswith("kvpress-")]
        if not a.arms:
            return 2
    if a.model:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(a.model, dtype=a.dtype, local_files_only=True)
        model = model.to(a.device).eval()
        name = a.model
    else:
        model = small_model(a.seed, a.dtype).to(a.device)
        name = "small Qwen3 (random weights)"
    c = model.config.get_text_config(decoder=True)
    describe = ("%s: %d layers, %d q / %d KV heads, %s on %s; prompt %d, B=%d W=%d r=%d, "
                "%d warm-up + %d timed steps in blocks of %d, round robin; torch %s, "
                "transformers %s, %s" % (
                    name, c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads,
                    str(a.dtype).replace("torch.", ""), a.device, a.prompt, a.budget, a.window,
                    a.interval, a.warmup, a.steps, a.block, torch.__version__,
                    transformers.__version__, platform.processor() or platform.machine()))
    print("hf_bench " + describe)
    res = run(model, a)
    print_table(res)
    if a.results:
        for n, r in res.items():
            print("RESULT hf_%s_tok_s %.1f" % (n.replace("-", "_"), r["tokens_per_s"]))
            print("RESULT hf_%s_peak_kv_bytes %d" % (n.replace("-", "_"), r["peak_kv_bytes"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(describe=describe, arms=res), f, indent=1)
    if a.html:
        write_html(a.html, res, describe)
    return 0


if __name__ == "__main__":
    sys.exit(main())
