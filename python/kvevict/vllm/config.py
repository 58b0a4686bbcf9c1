"""The plugin's settings: ``additional_config={"kvevict": {...}}`` of vLLM's
engine arguments (``--additional-config`` of ``vllm serve``), checked once
when the engine starts, with the engine's own settings it depends on.

Arms (docs/INTEGRATION.md "vLLM plugin"):

- ``full``: no eviction; the attention backend runs vLLM's own cache write.
- ``random``: the prompt pinned (P = its length), the rest evicted uniformly
  at random in every KV head, keep-set spec v2.
- ``random-p0``: the same with nothing pinned (P = 0), the paper's ablation.

- ``knorm``: kvpress's K-norm score (the smallest key norms kept), from the
  engine's cached keys.
- ``triattention``: TriAttention's score with the calibration file
  ``stats_file`` (docs/SCORERS.md), from the engine's cached keys.
"""
from dataclasses import dataclass
from typing import Any, Mapping

ARMS = ("full", "random", "random-p0", "knorm", "triattention")
SCORED_ARMS = ("knorm", "triattention")
_KEYS = ("arm", "budget", "window", "interval", "seed", "digest_file", "digest_history",
         "stats_file")


class ConfigError(ValueError):
    """A kvevict plugin setting, or an engine setting it cannot serve, refused."""


@dataclass(frozen=True)
class PluginConfig:
    arm: str = "full"
    budget: int = 2048   #: B: slots each KV head keeps after a round, the prompt counted
    window: int = 64     #: W: the most recent generated tokens, never evicted
    interval: int = 64   #: r: tokens between rounds (slots past B)
    seed: int = 0
    #: a JSONL file each request's keep-set digest is appended to as it leaves
    #: the engine (finished or aborted; a preempted request is recorded when
    #: it leaves for good): request_id, seq_id, prompt_len (pinned),
    #: n_tokens, round, capacity, peak_blocks, digest (hex, docs/SPEC.md)
    digest_file: str = ""
    #: the most recent digest records each runner also keeps in memory (its
    #: ``KvevictState.digests``, for a caller in the engine's process); older
    #: ones live in digest_file only, so a server's memory stays flat
    digest_history: int = 1024
    stats_file: str = ""  #: triattention: its calibration file (docs/SCORERS.md)

    @property
    def scored(self) -> bool:
        return self.arm in SCORED_ARMS

    @property
    def evicts(self) -> bool:
        return self.arm != "full"

    @property
    def pins_prompt(self) -> bool:
        return self.arm != "random-p0"


def _int(name: str, v: Any, lo: int, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise ConfigError("kvevict.%s = %r: expected an integer %d..%d" % (name, v, lo, hi))
    return v


def parse(extra: Any) -> PluginConfig:
    """The plugin's settings from vLLM's additional_config (None or a dict
    holding a "kvevict" dict); unknown keys and bad values refused."""
    if extra is None:
        return PluginConfig()
    if not isinstance(extra, Mapping):
        raise ConfigError("additional_config = %r: expected a dict" % (extra,))
    raw = extra.get("kvevict", {})
    if not isinstance(raw, Mapping):
        raise ConfigError("additional_config['kvevict'] = %r: expected a dict of %s"
                          % (raw, ", ".join(_KEYS)))
    unknown = sorted(set(raw) - set(_KEYS))
    if unknown:
        raise ConfigError("additional_config['kvevict']: unknown key(s) %s (known: %s)"
                          % (", ".join(map(repr, unknown)), ", ".join(_KEYS)))
    arm = raw.get("arm", "full")
    if arm not in ARMS:
        raise ConfigError("kvevict.arm = %r: expected one of %s" % (arm, ", ".join(ARMS)))
    stats = raw.get("stats_file", "")
    if not isinstance(stats, str) or (arm == "triattention") != bool(stats):
        raise ConfigError("kvevict.stats_file = %r: the triattention arm needs its calibration "
                          "file (docs/SCORERS.md), and only it takes one (arm %s)"
                          % (stats, arm))
    c = PluginConfig(arm=arm, budget=_int("budget", raw.get("budget", 2048), 1, 1 << 24),
                     window=_int("window", raw.get("window", 64), 0, 1 << 24),
                     interval=_int("interval", raw.get("interval", 64), 1, 1 << 24),
                     seed=_int("seed", raw.get("seed", 0), 0, (1 << 64) - 1),
                     digest_file=raw.get("digest_file", ""), stats_file=stats,
                     digest_history=_int("digest_history", raw.get("digest_history", 1024), 0,
                                         1 << 24))
    if not isinstance(c.digest_file, str):
        raise ConfigError("kvevict.digest_file = %r: expected a path" % (c.digest_file,))
    return c


def check_engine(cfg: PluginConfig, vllm_config: Any) -> None:
    """Refuse, at engine start, the engine settings the evicting arms cannot
    serve yet, each with its reason. The full arm runs anything vLLM runs."""
    if not cfg.evicts:
        return
    why = []
    pc, cc, sc = vllm_config.parallel_config, vllm_config.cache_config, \
        vllm_config.scheduler_config
    if pc.tensor_parallel_size != 1 or pc.pipeline_parallel_size != 1:
        why.append("tensor/pipeline parallelism (tp %d, pp %d): each shard would need its "
                   "heads' offsets in the keep-set; run with tp = pp = 1"
                   % (pc.tensor_parallel_size, pc.pipeline_parallel_size))
    if cc.enable_prefix_caching:
        why.append("prefix caching: blocks past the prompt are rewritten by rounds and must not "
                   "be shared; start with enable_prefix_caching=False "
                   "(--no-enable-prefix-caching)")
    if cc.cache_dtype not in ("auto", None):
        why.append("kv_cache_dtype = %r: only the model's dtype ('auto') for now"
                   % cc.cache_dtype)
    if getattr(sc, "async_scheduling", False):
        why.append("async scheduling: a step's keep-set is planned from the step before; "
                   "start with async_scheduling=False (--no-async-scheduling)")
    if vllm_config.speculative_config is not None:
        why.append("speculative decoding: drafts need kve_state_draft, not wired here yet")
    if why:
        raise ConfigError("kvevict (arm %s) cannot serve this engine: %s"
                          % (cfg.arm, "; ".join(why)))


REQUEST_ARMS = ("full", "random", "random-p0")


def pinned_prompt(cfg: PluginConfig, params: Any, prompt_len: int, max_model_len: int) -> int:
    """The prompt length a request pins: its arm's (SamplingParams.extra_args
    ["kvevict_arm"], else the engine's). Per request: "full" (pins every
    position the request can reach, so it is never evicted), "random" (its
    prompt) or "random-p0" (nothing), in an engine whose arm evicts; a scored
    engine takes "full" or its own arm only."""
    extra = getattr(params, "extra_args", None) or {}
    arm = extra.get("kvevict_arm", cfg.arm)
    if arm not in REQUEST_ARMS + (cfg.arm,) or (cfg.scored and arm not in ("full", cfg.arm)):
        raise ConfigError("extra_args['kvevict_arm'] = %r: a request of this engine (arm %s) "
                          "takes %s" % (arm, cfg.arm, ", ".join(
                              ("full", cfg.arm) if cfg.scored else REQUEST_ARMS)))
    if arm == "full":
        return max_model_len
    return 0 if arm == "random-p0" else min(prompt_len, max_model_len)

