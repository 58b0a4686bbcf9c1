"""The plugin's workers and model runners, handed to vLLM by its own option
(``worker_cls``): vLLM's CPU worker (or GPU worker) building a subclass of
vLLM's CPU (or GPU) model runner with the plugin's step (KvevictRunner). The runner keeps one kvevict.State row per running
request and, each step, after vLLM has prepared its inputs (true positions
for RoPE, the stock slot mapping), appends the step's tokens to the state:
the per-head slots and the round's moves go to the attention backend
(attention.py), and each request's ``seq_lens`` becomes its held count
``n_valid``, the same in every head, so vLLM's own attention kernel runs
unchanged on slots 0 .. n_valid - 1 (docs/INTEGRATION.md "vLLM plugin")."""
from typing import Any, Optional

import collections
import json
import weakref

import numpy as np
import torch
import xxhash

from vllm.model_executor.models.utils import extract_layer_index
from vllm.v1.kv_cache_interface import FullAttentionSpec
from vllm.v1.worker.cpu_model_runner import CPUModelRunner
from vllm.v1.worker.cpu_worker import CPUWorker
from vllm.v1.worker.gpu_model_runner import GPUModelRunner
from vllm.v1.worker.gpu_worker import Worker

import kvevict
import kvevict.ops

from . import config as _config
from . import step as _step


def seq_id_of(req: Any) -> int:
    """A request's keep-set seq_id: SamplingParams.extra_args["kvevict_seq_id"]
    when given, else XXH3-64 of its prompt's token ids (vLLM's request ids
    carry a random suffix, so they cannot name a reproducible draw)."""
    sp = getattr(req, "sampling_params", None)
    extra = getattr(sp, "extra_args", None) or {}
    if "kvevict_seq_id" in extra:
        v = extra["kvevict_seq_id"]
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 1 << 64:
            raise _config.ConfigError("extra_args['kvevict_seq_id'] = %r: expected an integer "
                                      "0..2^64-1" % (v,))
        return v
    ids = np.asarray(req.prompt_token_ids, dtype="<i8")
    return xxhash.xxh3_64_intdigest(ids.tobytes())


#: the runners of this process (tests look into an in-process engine's state)
live_runners: "weakref.WeakSet" = weakref.WeakSet()


class KvevictState:
    """The runner's kvevict state: rows of the running requests, the step
    buffers, and the requests' digests as they finish."""

    def __init__(self, cfg: _config.PluginConfig, vllm_config: Any, kv_cache_config: Any,
                 device: torch.device, k_view: Any):
        self.cfg, self.device, self.k_view = cfg, device, k_view
        groups = kv_cache_config.kv_cache_groups
        if len(groups) != 1 or not isinstance(groups[0].kv_cache_spec, FullAttentionSpec):
            raise _config.ConfigError(
                "kvevict (arm %s): the model's KV cache has %d group(s) (%s); the plugin "
                "evicts models whose every layer is full attention"
                % (cfg.arm, len(groups),
                   ", ".join(type(g.kv_cache_spec).__name__ for g in groups)))
        names = list(groups[0].layer_names)
        self.layer_index = {n: extract_layer_index(n) for n in names}
        n_layers = max(self.layer_index.values()) + 1
        mc, sc = vllm_config.model_config, vllm_config.scheduler_config
        n_heads = mc.get_num_kv_heads(vllm_config.parallel_config)
        self.block_size = groups[0].kv_cache_spec.block_size
        self.max_model_len = mc.max_model_len
        # a row's slots: a request may pin up to max_model_len (its arm "full")
        cap = kvevict.capacity(self.max_model_len, budget=cfg.budget, window=cfg.window,
                               interval=cfg.interval)
        self.ctx = kvevict.ops.context_for(device)
        self.n_layers, self.n_heads = n_layers, n_heads
        self.group = mc.get_num_attention_heads(vllm_config.parallel_config) // n_heads
        self.score_kw = self._scorer(cfg, mc, n_layers) if cfg.scored else None
        self.state = kvevict.State(self.ctx, max_seqs=sc.max_num_seqs, n_layers=n_layers,
                                   n_heads=n_heads, budget=cfg.budget, window=cfg.window,
                                   interval=cfg.interval, max_slots=cap, seed=cfg.seed,
                                   tensors="torch", scored=cfg.scored,
                                   score_group=self.group if cfg.arm == "triattention" else 0)
        self.scores = self.state.scores_buffer(sc.max_num_seqs) if cfg.scored else None
        self.buf = self.state.step_buffers(max_tokens=sc.max_num_batched_tokens,
                                           max_rows=sc.max_num_seqs,
                                           max_new=sc.max_num_batched_tokens)
        self.rows: dict = {}            # request id -> state row
        self.free = list(range(sc.max_num_seqs - 1, -1, -1))
        # per state row, kept here so a step reads no row back from the state:
        # tokens appended, capacity C, the most blocks held in a step
        self.n_tokens = np.zeros(sc.max_num_seqs, dtype=np.int64)
        self.capacity = np.zeros(sc.max_num_seqs, dtype=np.int64)
        self.peak = np.zeros(sc.max_num_seqs, dtype=np.int64)
        # request id -> its digest record when it left: the last digest_history
        self.digests: "collections.OrderedDict" = collections.OrderedDict()
        self.preemptions = 0
        self.writers: dict = {}  # layer -> its cache write's descriptor (attention.py)
        #: called as observer(req_id, state, row) after each step in which the
        #: request's row ran a round (an audit hook: tests read keep-sets here)
        self.observer = None

    def _scorer(self, cfg: _config.PluginConfig, mc: Any, n_layers: int) -> list:
        """Each layer's keyword arguments of State.score for the arm."""
        if cfg.arm == "knorm":
            return [dict(scorer="knorm")] * n_layers
        qm, qa, theta = kvevict.load_triattention_stats(cfg.stats_file)
        want = (n_layers, self.group * self.n_heads, mc.get_head_size() // 2)
        if qa.shape != want:
            raise _config.ConfigError(
                "kvevict.stats_file = %r: statistics of [layers %d, q_heads %d, head_dim/2 %d], "
                "the model has %d, %d, %d" % ((cfg.stats_file,) + qa.shape + want))
        from ..hf import rope_score_args
        try:  # the model's RoPE: the file's rope_theta, or omega where the RoPE is scaled
            rope = rope_score_args(mc.hf_config, theta=theta or None)
        except ValueError as e:
            raise _config.ConfigError("kvevict.stats_file = %r: %s" % (cfg.stats_file, e))

        def here(a: Any) -> Any:  # the state's memory: the GPU's for a GPU state
            return torch.from_numpy(np.ascontiguousarray(a)).to(self.device) \
                if isinstance(a, np.ndarray) else a
        rope = {k: here(v) for k, v in rope.items()}
        return [dict(scorer="triattention", group=self.group, q_mean=here(qm[l]),
                     q_abs_mean=here(qa[l]), **rope) for l in range(n_layers)]

    def score(self, rows: list, n_new: list, block_table: Any, caches: list) -> Any:
        """Scores for this step's append: the rows whose round is due scored
        from their keys in the engine's caches (gathered from vLLM's CPU
        layout, K transposed in a block, into one dense [rows, heads, slots,
        head_size] tensor a layer: the library's scorers read dense keys);
        None when no round is due."""
        due = [i for i, d in enumerate(self.state.rounds_due(rows, n_new)) if d]
        if not due:
            return None
        out = self.scores[:len(rows)]
        sub = self.scores.new_zeros((len(due),) + tuple(self.scores.shape[1:]))
        caps = [self.state.seq(rows[i]).capacity for i in due]
        nblk = -(-max(caps) // self.block_size)
        pages = block_table[due, :nblk].long()
        for l in range(self.n_layers):
            k = self.k_view(caches[l])[pages]                  # [due, nblk, H, bs, D]
            keys = k.permute(0, 2, 1, 3, 4).reshape(len(due), self.n_heads, -1, k.shape[-1])
            self.state.score([rows[i] for i in due], [n_new[i] for i in due], l, keys, sub,
                             layout="contiguous", **self.score_kw[l])
        out[torch.tensor(due, device=out.device)] = sub
        return out

    def retire(self, req_id: str, left: bool = True) -> None:
        """Give a request's row back; @left: it finished or was aborted (its
        digest recorded), else it was preempted (it comes back from token 0,
        replayed in chunks that end on its round boundaries)."""
        r = self.rows.pop(req_id, None)
        if r is None:
            return
        if not left:
            self.preemptions += 1
            self.state.retire(r)
            self.free.append(r)
            return
        info = self.state.seq(r)
        rec = self.digests[req_id] = {
            "request_id": req_id, "seq_id": info.seq_id, "prompt_len": info.prompt_len,
            "n_tokens": info.n_tokens, "round": info.round, "capacity": info.capacity,
            "peak_blocks": int(self.peak[r]),
            "digest": "%016x" % self.state.keepset_digest(r)}
        while len(self.digests) > self.cfg.digest_history:
            self.digests.popitem(last=False)
        if self.cfg.digest_file:
            with open(self.cfg.digest_file, "a") as f:
                f.write(json.dumps(rec) + "\n")
        self.state.retire(r)
        self.free.append(r)

    def admit(self, req_id: str, req: Any) -> int:
        r = self.free.pop()
        pinned = _config.pinned_prompt(self.cfg, getattr(req, "sampling_params", None),
                                       len(req.prompt_token_ids), self.max_model_len)
        self.state.admit(r, seq_id_of(req), pinned)
        self.rows[req_id] = r
        self.n_tokens[r], self.peak[r] = 0, 0
        self.capacity[r] = self.state.seq(r).capacity
        return r

    def held(self, rows: np.ndarray) -> np.ndarray:
        """n_valid of @rows from their token counts (docs/SPEC.md "Schedule"):
        n up to C, then C - r plus the tokens since the last round."""
        n, c, r = self.n_tokens[rows], self.capacity[rows], self.cfg.interval
        return np.where(n <= c, n, c - r + (n - c - 1) % r + 1)

    def rounds(self, rows: np.ndarray) -> np.ndarray:
        n, c = self.n_tokens[rows], self.capacity[rows]
        return np.where(n <= c, 0, (n - c - 1) // self.cfg.interval + 1)


class KvevictRunner:
    """The plugin's step, mixed into vLLM's model runner (CPU or GPU): one
    state row per running request, appended after vLLM prepared its inputs;
    seq_lens become the held counts. ``k_view(kv_cache)``: a layer's K as
    [blocks, heads, block_size, head_size] (the attention backend's layout),
    for the scored arms."""

    k_view: Any = None

    def __init__(self, vllm_config: Any, device: torch.device):
        from . import register
        register()  # the backends, also where the entry point is not installed (before the model)
        super().__init__(vllm_config, device)
        self.kve_cfg = _config.parse(vllm_config.additional_config)
        _config.check_engine(self.kve_cfg, vllm_config)
        self.kve: Optional[KvevictState] = None
        live_runners.add(self)

    def initialize_kv_cache(self, kv_cache_config: Any, *args: Any, **kwargs: Any) -> None:
        super().initialize_kv_cache(kv_cache_config, *args, **kwargs)
        profiling = kwargs.get("is_profiling", args[0] if args else False)
        if self.kve_cfg.evicts and not profiling:
            from .attention import KvevictWrites
            ctx = self.compilation_config.static_forward_context
            for name in kv_cache_config.kv_cache_groups[0].layer_names:
                impl = getattr(ctx.get(name), "impl", None)
                if not isinstance(impl, KvevictWrites):
                    raise _config.ConfigError(
                        "kvevict: layer %s attends with %s, not the plugin's backend: the "
                        "plugin serves vLLM's CPU attention, FlashAttention and FlashInfer"
                        % (name, type(impl).__name__))
            self.kve = KvevictState(self.kve_cfg, self.vllm_config, self.kv_cache_config,
                                    self.device, type(self).k_view)

    def _update_states(self, scheduler_output: Any):
        out = super()._update_states(scheduler_output)
        if self.kve is not None:
            for req_id in scheduler_output.finished_req_ids:
                self.kve.retire(req_id)
            for req_id in scheduler_output.preempted_req_ids or ():
                self.kve.retire(req_id, left=False)
        return out

    def _prepare_inputs(self, scheduler_output: Any, num_scheduled_tokens: np.ndarray):
        out = super()._prepare_inputs(scheduler_output, num_scheduled_tokens)
        if self.kve is None:
            return out
        kve, n = self.kve, self.input_batch.num_reqs
        req_ids = self.input_batch.req_ids[:n]
        rows = np.empty(n, dtype=np.int64)
        for i, req_id in enumerate(req_ids):
            r = kve.rows.get(req_id)
            rows[i] = kve.admit(req_id, self.requests[req_id]) if r is None else r
        n_new = num_scheduled_tokens[:n].astype(np.int64)
        want = self.input_batch.num_computed_tokens_cpu[:n]
        bad = np.nonzero(kve.n_tokens[rows] != want)[0]
        if bad.size:  # the state and vLLM count the same tokens
            i = int(bad[0])
            raise RuntimeError("kvevict: request %s has %d tokens in its state row but vLLM "
                               "computed %d (a schedule the plugin did not follow)"
                               % (req_ids[i], kve.n_tokens[rows[i]], want[i]))
        blocks = self.input_batch.block_table[0].num_blocks_per_row[:n]
        kve.peak[rows] = np.maximum(kve.peak[rows], blocks)
        bt = self.input_batch.block_table[0].get_device_tensor(n)
        row_list, new_list = rows.tolist(), n_new.tolist()
        scores = None
        if kve.score_kw is not None:
            ctx = self.compilation_config.static_forward_context
            caches = [None] * kve.n_layers
            for name, l in kve.layer_index.items():
                caches[l] = ctx[name].kv_cache
            scores = kve.score(row_list, new_list, bt, caches)
        before = kve.rounds(rows)
        kve.state.append(row_list, new_list, out=kve.buf, scores=scores)
        kve.n_tokens[rows] += n_new
        self.seq_lens[:n].copy_(torch.from_numpy(kve.held(rows)))
        if kve.observer is not None:
            for i in np.nonzero(kve.rounds(rows) != before)[0]:
                kve.observer(req_ids[i], kve.state, int(rows[i]))
        token_row = torch.from_numpy(
            np.repeat(np.arange(n, dtype=np.int32), num_scheduled_tokens[:n])).to(self.device)
        _step.current = _step.PlannedStep(kve.state, kve.buf, int(n_new.sum()), token_row, bt,
                                          kve.layer_index, n, kve.writers)
        return out

    def execute_model(self, *args: Any, **kwargs: Any):
        try:
            return super().execute_model(*args, **kwargs)
        finally:
            _step.current = None


def _cpu_k(kv_cache: torch.Tensor) -> torch.Tensor:
    from .attention import kv_views
    return kv_views(kv_cache)[0]


def _flash_k(kv_cache: torch.Tensor) -> torch.Tensor:
    """FlashAttention's and FlashInfer's layer cache [blocks, heads,
    block_size, 2 * head_size] (K, then V, in the last dim): K as [blocks,
    heads, block_size, head_size]."""
    return kv_cache[..., :kv_cache.shape[-1] // 2]


class KvevictCPUModelRunner(KvevictRunner, CPUModelRunner):
    k_view = staticmethod(_cpu_k)


class KvevictCPUWorker(CPUWorker):
    """vLLM's CPU worker with the plugin's model runner."""

    def init_device(self) -> None:
        super().init_device()
        if getattr(self, "use_v2_model_runner", False):
            raise _config.ConfigError("kvevict: vLLM's V2 model runner is not supported; set "
                                      "VLLM_USE_V2_MODEL_RUNNER=0")
        self.model_runner = KvevictCPUModelRunner(self.vllm_config, torch.device("cpu"))


class KvevictGPUModelRunner(KvevictRunner, GPUModelRunner):
    k_view = staticmethod(_flash_k)


class KvevictGPUWorker(Worker):
    """vLLM's GPU worker with the plugin's model runner, through the worker's
    own factory (_make_model_runner)."""

    def _make_model_runner(self):
        if self.use_v2_model_runner:
            raise _config.ConfigError("kvevict: vLLM's V2 model runner is not supported; set "
                                      "VLLM_USE_V2_MODEL_RUNNER=0")
        return KvevictGPUModelRunner(self.vllm_config, self.device)
