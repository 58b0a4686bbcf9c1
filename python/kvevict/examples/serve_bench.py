#!/usr/bin/python3
"""End-to-end decode benchmark: the eviction arms through one batched engine.

The paper's headline (its Table 4) is a serving number: output tokens/s of
vLLM on one H200 at the same KV memory. This runs the same comparison
through kvevict: a Qwen3-style transformer (serve_model.py; seeded random
weights at a preset's shape, or --model DIR, a Hugging Face Qwen3
checkpoint) decoding a continuous batch over a paged NHD cache that a
kvevict cache state manages (serve_engine.py), once per arm, all at one KV
memory budget in bytes:

  full          nothing evicted (a budget no sequence reaches)
  random        random eviction, the prompt pinned
  random-p0     random eviction, the prompt unpinned
  triattention  kvevict's TriAttention scorer (statistics from the model's
                own queries) choosing each round
  knorm         the K-norm scorer choosing each round

Steady state, so that a GPU run takes minutes: the batch is filled with
sequences spread over their generation (their state built by appends,
their K/V pages noise), then --steps decode steps are timed after
--warmup; finished sequences retire and queued ones are admitted with
chunked prefill meanwhile. The arms interleave: every arm is built and
filled, warms up round robin, then runs its timed steps in blocks of
--block, round robin over the arms (one after another only where their
KV memory does not fit at once), and the spread of its blocks' tokens/s
is reported. Per arm: output tokens/s, step latency p50 /
p95 / max, peak KV bytes, sequences in flight, the share of step time in
eviction (scoring and state appends) and in cache writes. --json and
--html write the figures and a self-contained figure (tokens/s per arm,
KV memory and batch over the run). --prompts FILE.jsonl with --model DIR
decodes your prompts instead and reports each arm's exact-match accuracy.

Run: python3 -m kvevict.examples.serve_bench --preset tiny
"""
import argparse
import gc
import html
import json
import platform
import sys
import time
from collections import defaultdict

import numpy as np
import torch

import kvevict

from .serve_engine import ARMS, Engine, Request
from .serve_model import PRESETS, Model, dense_forward

# The paper's Table 4: vLLM on one H200, K = 2048, 1K-token prompts, long
# outputs, output tokens/s. Printed beside ours, as the paper's.
PAPER_TABLE4 = {"qwen3-4b": {"full": 1296, "triattention": 1494, "random": 2046},
                "qwen3-32b": {"full": 346, "triattention": 700, "random": 923}}

# Per preset: prompt, outputs, budget B, window W, interval r, page size,
# KV bytes, rows, prefill chunk, warm-up and timed steps.
DEFAULTS = {
    "tiny": dict(prompt=32, max_new=96, budget=48, window=8, interval=8, page_size=16,
                 kv_bytes=512 << 10, max_seqs=16, chunk=64, warmup=4, steps=24),
    "small": dict(prompt=128, max_new=512, budget=256, window=16, interval=16, page_size=16,
                  kv_bytes=32 << 20, max_seqs=32, chunk=128, warmup=4, steps=40),
    "qwen3-4b": dict(prompt=1024, max_new=8192, budget=2048, window=64, interval=64,
                     page_size=128, kv_bytes=32 << 30, max_seqs=256, chunk=512, warmup=10,
                     steps=100),
    "qwen3-32b": dict(prompt=1024, max_new=8192, budget=2048, window=64, interval=64,
                      page_size=128, kv_bytes=48 << 30, max_seqs=256, chunk=512, warmup=10,
                      steps=100),
}
GOALS = "random >= 1.5x full tokens/s; random >= triattention; evict + writes <= 3% of random's step"


def calibrate(model, n_tokens=256, seed=11):
    """TriAttention's statistics from the model's own pre-RoPE queries over
    random tokens, as device tensors (q_mean [L, HQ, D/2, 2], q_abs [L, HQ, D/2])."""
    g = torch.Generator().manual_seed(seed)
    toks = torch.randint(0, model.cfg.vocab, (n_tokens,), generator=g)
    qs = []
    dense_forward(model, toks, queries=qs)
    q_mean, q_abs = kvevict.triattention_stats(torch.stack([q.transpose(0, 1) for q in qs]))
    dev = model.device
    return torch.from_numpy(q_mean).to(dev), torch.from_numpy(q_abs).to(dev)


def spread(n, max_new, seed):
    """n progress points spread over a generation of max_new tokens (golden-ratio
    sequence from a seeded offset): steady state's sequences."""
    off = np.random.default_rng(seed).random()
    return [int(((off + i * 0.6180339887) % 1.0) * (max_new - 1)) for i in range(n)]


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class ArmRun:
    """One arm's engine in steady state (built and filled here), stepped by
    run_arms: step() runs one decode step, timed or not."""

    def __init__(self, model, arm, a, stats=None):
        self.arm, self.a = arm, a
        eng = self.eng = Engine(model, arm, kv_bytes=a.kv_bytes, prompt_len=a.prompt,
                                max_new=a.max_new, budget=a.budget, window=a.window,
                                interval=a.interval, page_size=a.page_size,
                                max_seqs=a.max_seqs, chunk=a.chunk, seed=a.seed, attn=a.attn,
                                stats=stats, check=a.check)
        self.rng = np.random.default_rng(a.seed)
        self.vocab, self.rid = model.cfg.vocab, 0
        t0 = time.perf_counter()
        fill = [self.new_req() for _ in range(a.max_seqs)]
        self.filled = eng.fill(fill, spread(a.max_seqs, a.max_new, a.seed))
        for _ in range(a.max_seqs):
            eng.submit(self.new_req())  # waiting for rows and pages
        _sync(eng.device)
        self.fill_s = time.perf_counter() - t0
        self.steps, self.series, self.blocks = [], [], []

    def new_req(self):
        self.rid += 1
        return Request(self.rid, self.rng.integers(0, self.vocab, self.a.prompt).tolist(),
                       self.a.max_new)

    def step(self, timed):
        eng = self.eng
        with torch.no_grad():
            _sync(eng.device)
            t1 = time.perf_counter()
            made = eng.step()
            _sync(eng.device)
            dt = time.perf_counter() - t1
        regions = eng.timer.collect()
        self.series.append((len(eng.rows), eng.pages_used * eng.page_bytes))
        while len(eng.queue) < self.a.max_seqs:
            eng.submit(self.new_req())
        if timed:
            self.steps.append((dt, made, regions.get("evict", 0.0), regions.get("write", 0.0),
                               len(eng.rows)))
        return dt, made

    def block(self, n):
        """n timed steps; their tokens/s is one block's."""
        got = [self.step(True) for _ in range(n)]
        wall = sum(g[0] for g in got)
        self.blocks.append(sum(g[1] for g in got) / wall if wall else 0.0)

    def result(self):
        eng, steps = self.eng, self.steps
        wall = sum(s[0] for s in steps)
        lat = np.array([s[0] for s in steps]) * 1e3
        b = np.array(self.blocks or [0.0])
        return dict(
            arm=self.arm, attention=eng.attn_kind, capacity=eng.cap, budget=eng.budget,
            pinned=eng.pinned, kv_bytes=eng.kv_bytes, page_bytes=eng.page_bytes,
            tokens_per_s=sum(s[1] for s in steps) / wall if wall else 0.0,
            block_tokens_per_s=[float(x) for x in b], tokens_per_s_min=float(b.min()),
            tokens_per_s_max=float(b.max()),
            spread=float((b.max() - b.min()) / np.median(b)) if np.median(b) > 0 else 0.0,
            step_ms_p50=float(np.percentile(lat, 50)), step_ms_p95=float(np.percentile(lat, 95)),
            step_ms_max=float(lat.max()), peak_kv_bytes=eng.peak_pages * eng.page_bytes,
            seqs_mean=float(np.mean([s[4] for s in steps])),
            seqs_min=int(min(s[4] for s in steps)), seqs_max=int(max(s[4] for s in steps)),
            filled=self.filled, evict_share=sum(s[2] for s in steps) / wall if wall else 0.0,
            write_share=sum(s[3] for s in steps) / wall if wall else 0.0,
            preempted=eng.preempted, finished=len(eng.finished), timed_steps=len(steps),
            fill_s=self.fill_s, kv_series=[s[1] for s in self.series],
            batch_series=[s[0] for s in self.series])


def interleave_fits(model, a, n_arms):
    """Whether every arm's KV memory fits at once (the arms interleave)."""
    if a.device.type != "cuda":
        return True
    free, _ = torch.cuda.mem_get_info(a.device)
    return n_arms * a.kv_bytes <= 0.8 * free


def run_arms(model, arms, a, stats=None, log=print):
    """The arms' figures, fairly: all arms built and filled, a common
    warm-up (--warmup steps each, round robin), then --steps timed steps
    each in blocks of --block steps, round robin over the arms, so a noisy
    stretch or the order hits every arm alike; each arm's spread is
    (max - min) / median of its blocks' tokens/s. Where the arms' KV
    memory does not fit at once (a GPU preset), they run one after another,
    still in blocks."""
    blocks = [a.block] * (a.steps // a.block) + ([a.steps % a.block] if a.steps % a.block else [])
    together = interleave_fits(model, a, len(arms))
    res = {}
    groups = [arms] if together else [[arm] for arm in arms]
    if not together:
        log("  (the arms' KV memory does not fit at once: they run one after another)")
    for group in groups:
        runs = [ArmRun(model, arm, a, stats) for arm in group]
        for _ in range(a.warmup):
            for r in runs:
                r.step(False)
        for n in blocks:
            for r in runs:
                r.block(n)
        for r in runs:
            res[r.arm] = r.result()
            x = res[r.arm]
            log("  %-13s %8.1f tok/s (blocks %.1f..%.1f, spread %.0f%%)  batch %5.1f  "
                "(%s attention, filled in %.1f s)"
                % (r.arm, x["tokens_per_s"], x["tokens_per_s_min"], x["tokens_per_s_max"],
                   100 * x["spread"], x["seqs_mean"], x["attention"], r.fill_s))
        del runs
        gc.collect()  # the arms' caches (an engine and its flex kernel refer to each other)
        if a.device.type == "cuda":
            torch.cuda.empty_cache()
    return {arm: res[arm] for arm in arms}


def run_arm(model, arm, a, stats=None, log=print):
    """One arm alone (run_arms of one arm)."""
    return run_arms(model, [arm], a, stats, log)[arm]


def goals(res):
    """The H200 goals at the qwen3-4b shape, as (name, value, met) rows."""
    out = []
    if "random" in res and "full" in res and res["full"]["tokens_per_s"]:
        x = res["random"]["tokens_per_s"] / res["full"]["tokens_per_s"]
        out.append(("random / full tokens/s", x, x >= 1.5))
    if "random" in res and "triattention" in res:
        x = res["random"]["tokens_per_s"] / max(res["triattention"]["tokens_per_s"], 1e-12)
        out.append(("random / triattention tokens/s", x, x >= 1.0))
    if "random" in res:
        x = 100 * (res["random"]["evict_share"] + res["random"]["write_share"])
        out.append(("random: evict + writes, % of step", x, x <= 3.0))
    return out


def print_table(res, preset):
    paper = PAPER_TABLE4.get(preset, {})
    print("%-13s %10s %8s %8s %8s %8s %12s %7s %8s %8s %9s  %s" % (
        "arm", "tok/s", "spread", "p50 ms", "p95 ms", "max ms", "peak KV MiB", "seqs", "evict %",
        "write %", "preempted", "paper's Table 4 (vLLM, H200)"))
    for name, r in res.items():
        print("%-13s %10.1f %7.0f%% %8.2f %8.2f %8.2f %12.1f %7.1f %8.2f %8.2f %9d  %s" % (
            name, r["tokens_per_s"], 100 * r["spread"], r["step_ms_p50"], r["step_ms_p95"],
            r["step_ms_max"],
            r["peak_kv_bytes"] / 2**20, r["seqs_mean"], 100 * r["evict_share"],
            100 * r["write_share"], r["preempted"], paper.get(name, "-")))
    for name, x, ok in goals(res):
        print("goal %-36s %8.3f  %s" % (name, x, "met" if ok else "not met"))
    if not paper:
        print("(the paper's Table 4 has Qwen3-4B and Qwen3-32B only)")


def print_results(res):
    """RESULT lines for bench/gpu_check.sh."""
    for name, r in res.items():
        key = name.replace("-", "_")
        print("RESULT serve_%s_tok_s %.1f" % (key, r["tokens_per_s"]))
        print("RESULT serve_%s_p95_ms %.3f" % (key, r["step_ms_p95"]))
    for name, x, _ in goals(res):
        key = {"random / full tokens/s": "random_over_full",
               "random / triattention tokens/s": "random_over_triattention",
               "random: evict + writes, % of step": "random_evict_write_pct"}[name]
        print("RESULT serve_%s %.4f" % (key, x))
    if res:
        print("RESULT serve_attention %s" % next(iter(res.values()))["attention"])


# ---- the figure ------------------------------------------------------------------------------
COLORS = {"full": "#555555", "random": "#1b7837", "random-p0": "#7fbf7b",
          "triattention": "#762a83", "knorm": "#c2a5cf"}


def _bars(res, w=520, h=240):
    top = max([r["tokens_per_s"] for r in res.values()] + [1e-9])
    bw = (w - 80) / max(len(res), 1)
    parts = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d">' % (w, h),
             '<text x="10" y="16" font-size="13">output tokens/s per arm</text>']
    for i, (name, r) in enumerate(res.items()):
        bh = (h - 60) * r["tokens_per_s"] / top
        x = 60 + i * bw
        parts.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>'
                     % (x, h - 30 - bh, bw * 0.7, bh, COLORS.get(name, "#888")))
        parts.append('<text x="%.1f" y="%.1f" font-size="11">%.0f</text>'
                     % (x, h - 34 - bh, r["tokens_per_s"]))
        parts.append('<text x="%.1f" y="%d" font-size="11">%s</text>' % (x, h - 14, html.escape(name)))
    parts.append("</svg>")
    return "\n".join(parts)


def _lines(res, key, title, scale=1.0, unit="", w=520, h=240):
    series = {n: [v * scale for v in r[key]] for n, r in res.items()}
    top = max([max(s) for s in series.values() if s] + [1e-9])
    n = max([len(s) for s in series.values()] + [2])
    parts = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d">' % (w, h),
             '<text x="10" y="16" font-size="13">%s (max %.1f%s)</text>' % (html.escape(title), top, unit)]
    for i, (name, s) in enumerate(series.items()):
        pts = " ".join("%.1f,%.1f" % (50 + (w - 70) * j / (n - 1), h - 30 - (h - 60) * v / top)
                       for j, v in enumerate(s))
        parts.append('<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>'
                     % (COLORS.get(name, "#888"), pts))
        parts.append('<text x="%d" y="%d" font-size="11" fill="%s">%s</text>'
                     % (50 + 90 * i, h - 10, COLORS.get(name, "#888"), html.escape(name)))
    parts.append("</svg>")
    return "\n".join(parts)


def write_html(path, res, meta):
    rows = "".join("<tr><td>%s</td><td>%.1f</td><td>%.2f</td><td>%.2f</td><td>%.1f</td>"
                   "<td>%.1f</td><td>%.2f</td><td>%s</td></tr>"
                   % (html.escape(n), r["tokens_per_s"], r["step_ms_p50"], r["step_ms_p95"],
                      r["peak_kv_bytes"] / 2**20, r["seqs_mean"],
                      100 * (r["evict_share"] + r["write_share"]),
                      PAPER_TABLE4.get(meta["preset"], {}).get(n, "-")) for n, r in res.items())
    doc = """<!DOCTYPE html><html><head><meta charset="utf-8"><title>kvevict serve_bench</title>
<style>body{font-family:sans-serif}td,th{padding:2px 8px;text-align:right}</style></head><body>
<h2>kvevict serve_bench: %s</h2><p>%s</p>
<table><tr><th>arm</th><th>tok/s</th><th>p50 ms</th><th>p95 ms</th><th>peak KV MiB</th>
<th>seqs</th><th>evict+write %%</th><th>paper's Table 4 (vLLM, H200)</th></tr>%s</table>
%s%s%s</body></html>""" % (
        html.escape(meta["preset"]), html.escape(meta["describe"]), rows, _bars(res),
        _lines(res, "kv_series", "KV memory in use over the run", 1 / 2**20, " MiB"),
        _lines(res, "batch_series", "sequences in flight over the run"))
    with open(path, "w") as f:
        f.write(doc)


# ---- your prompts ---------------------------------------------------------------------------------
def read_prompts(path):
    out = []
    with open(path) as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
                out.append((str(d["prompt"]), str(d["answer"]), str(d.get("bucket", "all"))))
            except (ValueError, KeyError, TypeError) as e:
                raise ValueError("%s line %d: expected {\"prompt\", \"answer\", \"bucket\"}: %s"
                                 % (path, i, e))
    if not out:
        raise ValueError("%s: no prompts" % path)
    return out


def run_prompts(model, tok, prompts, arm, a, stats=None):
    """Decode every prompt through one arm (greedy, to EOS or --max-new);
    exact match of the first output line against the answer, per bucket."""
    ids = [tok(p)["input_ids"] for p, _, _ in prompts]
    longest = max(len(x) for x in ids)
    eng = Engine(model, arm, kv_bytes=a.kv_bytes, prompt_len=longest, max_new=a.max_new,
                 budget=a.budget, window=a.window, interval=a.interval, page_size=a.page_size,
                 max_seqs=a.max_seqs, chunk=a.chunk, seed=a.seed, attn=a.attn, stats=stats)
    reqs = [Request(i + 1, x, a.max_new, eos=tok.eos_token_id) for i, x in enumerate(ids)]
    for r in reqs:
        eng.submit(r)
    with torch.no_grad():
        while eng.queue or eng.rows:
            eng.step()
    by = defaultdict(lambda: [0, 0, 0])
    fails = []
    for r, (p, ans, b) in zip(reqs, prompts):
        text = tok.decode(r.done_tokens, skip_special_tokens=True).strip()
        ok = (text.splitlines() or [""])[0].strip() == ans.strip()
        by[b][0] += ok
        by[b][1] += 1
        by[b][2] += len(r.done_tokens)
        if not ok and len(fails) < 3:
            fails.append(dict(prompt=p[-200:], answer=ans, output=text[:200]))
    return dict(buckets={b: dict(accuracy=v[0] / v[1], n=v[1], mean_output_tokens=v[2] / v[1])
                         for b, v in sorted(by.items())}, failing=fails)


# ---- the command ----------------------------------------------------------------------------------
def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m kvevict.examples.serve_bench",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="tiny", choices=sorted(PRESETS))
    ap.add_argument("--model", help="a Hugging Face Qwen3 checkpoint directory (needs transformers)")
    ap.add_argument("--prompts", help="JSONL of {prompt, answer, bucket}: accuracy per arm (needs --model)")
    ap.add_argument("--arms", default=",".join(ARMS), help="comma-separated, of %s" % ", ".join(ARMS))
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", choices=("float32", "bfloat16", "float16"),
                    help="default: bfloat16 on a GPU, float32 on the CPU")
    ap.add_argument("--attn", default="auto", choices=("auto", "flex", "gather"))
    ap.add_argument("--kv-gib", type=float, help="the KV memory budget in GiB (every arm's)")
    for k in ("prompt", "max_new", "budget", "window", "interval", "page_size", "max_seqs",
              "chunk", "warmup", "steps"):
        ap.add_argument("--" + k.replace("_", "-"), type=int, dest=k)
    ap.add_argument("--block", type=int, default=4,
                    help="timed steps an arm runs before the next arm's turn (round robin)")
    ap.add_argument("--seed", type=int, default=2609)
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    ap.add_argument("--check", action="store_true", help="check the engine's invariants every step")
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--html", help="write the figure (self-contained HTML/SVG) here")
    ap.add_argument("--results", action="store_true", help="print RESULT lines (gpu_check.sh)")
    a = ap.parse_args(argv)
    d = DEFAULTS[a.preset]
    for k, v in d.items():
        if getattr(a, k, None) is None:
            setattr(a, k, v)
    if a.kv_gib is not None:
        if not a.kv_gib > 0:
            ap.error("--kv-gib %r: expected a positive number" % a.kv_gib)
        a.kv_bytes = int(a.kv_gib * 2**30)
    arms = [x.strip() for x in a.arms.split(",") if x.strip()]
    bad = [x for x in arms if x not in ARMS]
    if bad or not arms:
        ap.error("--arms %r: %s; expected some of %s" % (a.arms, "unknown %s" % ", ".join(bad)
                                                        if bad else "none given", ", ".join(ARMS)))
    a.arms = arms
    for k in ("prompt", "max_new", "budget", "interval", "page_size", "max_seqs", "chunk", "steps",
              "block"):
        if getattr(a, k) < 1:
            ap.error("--%s %d: expected a positive integer" % (k.replace("_", "-"), getattr(a, k)))
    if a.warmup < 0 or a.window < 0:
        ap.error("--warmup / --window: expected integers >= 0")
    if a.prompts and not a.model:
        ap.error("--prompts needs --model DIR (its tokenizer)")
    device_and_dtype(ap, a)
    return a


def device_and_dtype(ap, a):
    """a.device and a.dtype (None: bfloat16 on CUDA, else float32) as torch
    objects, a bad or absent device a usage error; serve_bench and hf_bench."""
    try:
        a.device = torch.device(a.device)
    except RuntimeError as e:
        ap.error("--device %r: %s" % (a.device, e))
    if a.device.type == "cuda" and not torch.cuda.is_available():
        ap.error("--device %s: torch sees no CUDA device" % a.device)
    a.dtype = getattr(torch, a.dtype) if a.dtype else (
        torch.bfloat16 if a.device.type == "cuda" else torch.float32)


def main(argv=None):
    a = parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    if a.model:
        try:
            model = Model.from_hf(a.model, a.device, a.dtype)
        except ImportError:
            print("serve_bench: --model needs the transformers package", file=sys.stderr)
            return 2
    else:
        model = Model(PRESETS[a.preset], a.device, a.dtype, seed=a.seed)
    c = model.cfg
    describe = ("%s: %d layers, hidden %d, %d q / %d KV heads, head_dim %d, ffn %d, vocab %d, %s "
                "on %s; P=%d, outputs spread over %d, B=%d W=%d r=%d, page %d, KV budget %.3f GiB, "
                "%d rows, chunk %d, %d+%d steps; torch %s, %s" % (
                    c.name, c.layers, c.hidden, c.q_heads, c.kv_heads, c.head_dim, c.ffn, c.vocab,
                    str(a.dtype).replace("torch.", ""), a.device, a.prompt, a.max_new, a.budget,
                    a.window, a.interval, a.page_size, a.kv_bytes / 2**30, a.max_seqs, a.chunk,
                    a.warmup, a.steps, torch.__version__, platform.processor() or platform.machine()))
    print("serve_bench " + describe)
    stats = calibrate(model) if "triattention" in a.arms else None
    res, acc = {}, {}
    if a.prompts:
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(a.model)
        for arm in a.arms:
            acc[arm] = run_prompts(model, tok, read_prompts(a.prompts), arm, a, stats)
            print(arm, json.dumps(acc[arm]["buckets"]))
            gc.collect()
    else:
        res = run_arms(model, a.arms, a, stats)
    if res:
        print_table(res, a.preset)
        if a.results:
            print_results(res)
    meta = dict(preset=a.preset, describe=describe, goals=GOALS, model=c.as_dict(),
                paper_table4=PAPER_TABLE4.get(a.preset),
                paper_note="the paper's Table 4: vLLM on one H200, not measured here")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(meta=meta, arms=res, accuracy=acc), f, indent=1)
    if a.html and res:
        write_html(a.html, res, meta)
    return 0


if __name__ == "__main__":
    sys.exit(main())
