"""kvevict in Hugging Face transformers (5.x): ``KvevictCache``, a
``transformers.Cache`` whose layers evict with kvevict's schedule.

    from kvevict.hf import KvevictCache
    cache = KvevictCache(model.config, budget=256, window=32, interval=32)
    out = model.generate(input_ids, past_key_values=cache, max_new_tokens=512)

Per KV head: the prompt pinned (``pin_prompt=False``: the random-p0 arm),
the last ``window`` tokens kept, and a round of ``interval`` (r) evictions
each time a head holds C = max(B, P + W) + r entries, chosen by kvevict's
random keep-set (``scorer=None``) or its K-norm / TriAttention scorer. The
choice is a ``kvevict.State``'s (one row, the CPU backend), so the keep-sets
equal kvevict's for the same (seed, seq_id, layer, head, position, round):
``cache.digest()`` is docs/SPEC.md's digest, checkable on any machine.
Evicted entries leave the tensors: every head of a layer keeps the same
count, so each layer is a rectangular [1, kv_heads, n, head_dim] that
shrinks at each round; at most C entries a head are ever held.

A step runs its round first (docs/SPEC.md "Schedule": the order of a step),
then its tokens take the freed slots, and its attention reads the held set
after the round, the step's tokens included: the same order as the C state,
so a request gives the same tokens here and in an engine (kvevict.vllm).
Runs on transformers 5.2 (get_mask_sizes(cache_position)) and 5.19
(get_mask_sizes(query_length), get_max_length).

One sequence per cache (batch 1): a padded batch would pin its pad tokens
as prompt, so batch > 1 is refused. Models it cannot serve (sliding-window
or chunked layers, multi-head latent attention, encoder-decoder) are refused
at construction, naming why.
"""

from typing import Any, Optional, Sequence, Tuple

import numpy as np
import torch
from transformers.cache_utils import Cache, CacheLayerMixin

from . import _arrays
from ._context import Context
from ._state import State

SCORERS = (None, "random", "knorm", "triattention")


def _text_config(config: Any) -> Any:
    get = getattr(config, "get_text_config", None)
    return get(decoder=True) if get is not None else config


def check_config(config: Any) -> Tuple[int, int, int, int]:
    """(layers, kv_heads, q_heads, head_dim) of a decoder the cache can serve;
    ValueError naming why otherwise."""
    if getattr(config, "is_encoder_decoder", False):
        raise ValueError("%s: an encoder-decoder model (is_encoder_decoder=True): KvevictCache "
                         "serves decoder-only models (its cross-attention cache has no decode "
                         "schedule to evict on)" % type(config).__name__)
    c = _text_config(config)
    name = type(c).__name__
    for attr in ("kv_lora_rank", "q_lora_rank"):
        if getattr(c, attr, None):
            raise ValueError("%s: multi-head latent attention (%s=%s): its cache holds one "
                             "latent per token, not per-KV-head keys, so there are no heads to "
                             "evict per head" % (name, attr, getattr(c, attr)))
    types = getattr(c, "layer_types", None)
    if types is not None:
        other = sorted(set(t for t in types if t != "full_attention"))
        if other:
            raise ValueError("%s: layer_types has %s layers: a sliding-window or chunked layer "
                             "already drops tokens by position, so a per-head budget does not "
                             "apply to it" % (name, ", ".join(other)))
    elif getattr(c, "sliding_window", None) and getattr(c, "use_sliding_window", True):
        raise ValueError("%s: sliding_window=%s: sliding-window layers drop tokens by position "
                         "already" % (name, c.sliding_window))
    if getattr(c, "attention_chunk_size", None):
        raise ValueError("%s: attention_chunk_size=%s: chunked attention layers are not served"
                         % (name, c.attention_chunk_size))
    layers = getattr(c, "num_hidden_layers", None)
    q_heads = getattr(c, "num_attention_heads", None)
    if not layers or not q_heads:
        raise ValueError("%s: no num_hidden_layers / num_attention_heads: not a decoder config"
                         % name)
    kv_heads = getattr(c, "num_key_value_heads", None) or q_heads
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // q_heads
    return layers, kv_heads, q_heads, head_dim


def positions_digest(seq_id: int, positions: Sequence[Sequence[Sequence[int]]],
                     layer_offset: int = 0, head_offset: int = 0) -> int:
    """docs/SPEC.md section 6's digest of one sequence's kept positions
    ``positions[layer][head]`` (any order): XXH3-64 of, per head, LE64
    seq_id, LE32 layer, LE32 head, LE32 count and the ascending positions."""
    import xxhash

    h = xxhash.xxh3_64()
    for l, heads in enumerate(positions):
        for hd, pos in enumerate(heads):
            p = np.sort(np.asarray(pos, dtype=np.int64))
            h.update(np.array([seq_id], "<u8").tobytes())
            h.update(np.array([layer_offset + l, head_offset + hd, p.size], "<u4").tobytes())
            h.update(p.astype("<u4").tobytes())
    return h.intdigest()


def calibrate_triattention(model: Any, input_ids: torch.Tensor) -> Tuple[np.ndarray, np.ndarray]:
    """TriAttention's statistics (kvevict.triattention_stats) from the
    pre-RoPE queries of a forward pass over input_ids: each layer's q_norm
    output where the model has one (Qwen3), else its q_proj output."""
    layers, _, q_heads, head_dim = check_config(model.config)
    inner = getattr(model, "model", model)
    inner = getattr(inner, "language_model", inner)
    got = [None] * layers
    hooks = []
    for i, layer in enumerate(inner.layers):
        attn = layer.self_attn
        mod = getattr(attn, "q_norm", None) or attn.q_proj

        def hook(_m, _inp, out, i=i):
            q = out.detach().float()
            got[i] = q.reshape(q.shape[0], q.shape[1], q_heads, head_dim)[0].transpose(0, 1)
        hooks.append(mod.register_forward_hook(hook))
    try:
        with torch.no_grad():
            model(input_ids)
    finally:
        for h in hooks:
            h.remove()
    from ._score import triattention_stats

    return triattention_stats(torch.stack(got))


class KvevictLayer(CacheLayerMixin):
    """One layer's entries, in the state's slot order: keys / values
    [1, kv_heads, n, head_dim] hold, in slot s of head h, the position
    ``positions[h, s]``."""

    is_sliding = False
    is_compileable = False

    def __init__(self, cache: "KvevictCache", index: int):
        super().__init__()
        self.cache, self.index = cache, index
        self.positions: Optional[torch.Tensor] = None  # int64 [kv_heads, n]

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        shape = key_states.shape[:2] + (0,) + key_states.shape[3:]
        self.keys = key_states.new_empty(shape)
        self.values = value_states.new_empty(value_states.shape[:2] + (0,) + value_states.shape[3:])
        self.positions = torch.empty((key_states.shape[1], 0), dtype=torch.int64)
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor,
               cache_kwargs: Optional[dict] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        keys = torch.cat([self.keys, key_states], dim=-2)
        values = torch.cat([self.values, value_states], dim=-2)
        self.cache._store(self, keys, values)
        if self.cache._late:  # a long unpinned prompt's prefill: its rounds after attention
            return keys, values
        return self.keys, self.values  # the keep-set after the step's round

    def get_seq_length(self) -> int:
        return self.cache.n_tokens if self.is_initialized else 0

    def get_mask_sizes(self, query: Any) -> Tuple[int, int]:
        """(kv length, 0): the entries the step's attention reads, after its
        round. query: the step's cache_position (transformers 5.2) or its
        length (5.19)."""
        q = query if isinstance(query, int) else int(query.shape[0])
        return self.cache.held_after(q), 0

    def get_max_cache_shape(self) -> int:
        return -1

    def get_max_length(self) -> int:
        return -1

    def reset(self) -> None:
        raise ValueError("KvevictCache.reset: a cache holds one sequence's keep-sets; make a new "
                         "KvevictCache for the next sequence")

    def crop(self, max_length: int) -> None:
        raise ValueError("KvevictCache.crop(%d): a cache that evicts cannot be cropped back "
                         "(assisted and speculative decoding are not served)" % max_length)

    def _refuse_batch(self, what: str) -> None:
        raise ValueError("KvevictCache.%s: beam search and batch expansion are not served (one "
                         "sequence per cache)" % what)

    def batch_repeat_interleave(self, repeats: int) -> None:
        if repeats != 1:
            self._refuse_batch("batch_repeat_interleave(%d)" % repeats)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self._refuse_batch("batch_select_indices")

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        self._refuse_batch("reorder_cache")


class KvevictCache(Cache):
    """A transformers cache that evicts per KV head with kvevict.

    config: the model's config (checked: see check_config). budget (B),
    window (W), interval (r): the schedule (docs/SPEC.md). seed, seq_id: the
    keep-sets' keys. pin_prompt=False: the random-p0 arm (the prompt is
    evicted like any token). scorer: None / "random" (kvevict's random
    keep-set), "knorm" or "triattention" (kvevict's scorers; triattention
    needs ``stats`` = calibrate_triattention(model, ids) and uses the
    config's rope_theta). budget=None: nothing is ever evicted.
    """

    def __init__(self, config: Any, budget: Optional[int] = 256, window: int = 32,
                 interval: int = 32, seed: int = 0, seq_id: int = 0, pin_prompt: bool = True,
                 scorer: Optional[str] = None, stats: Optional[Tuple[Any, Any]] = None):
        self.n_layers, self.kv_heads, self.q_heads, self.head_dim = check_config(config)
        if scorer not in SCORERS:
            raise ValueError("scorer = %r: expected None, 'random', 'knorm' or 'triattention'"
                             % (scorer,))
        self.scorer = None if scorer == "random" else scorer
        if budget is not None:
            for name, v in (("budget", budget), ("window", window), ("interval", interval)):
                if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                    raise ValueError("%s = %r: expected an int >= 1" % (name, v))
        if self.scorer == "triattention":
            if stats is None:
                raise ValueError("scorer='triattention' needs stats= (q_mean, q_abs_mean): "
                                 "kvevict.hf.calibrate_triattention(model, input_ids)")
            c = _text_config(config)
            theta = getattr(c, "rope_theta", None) or \
                (getattr(c, "rope_parameters", None) or {}).get("rope_theta")
            if not theta:
                raise ValueError("scorer='triattention': the config has no rope_theta")
            self.rope_theta = float(theta)
            qm = np.ascontiguousarray(stats[0], dtype=np.float32)
            qa = np.ascontiguousarray(stats[1], dtype=np.float32)
            want = (self.n_layers, self.q_heads, self.head_dim // 2)
            if qm.shape != want + (2,) or qa.shape != want:
                raise ValueError("stats: shapes %s, %s; expected %s and %s (layers, q heads, "
                                 "head_dim/2)" % (qm.shape, qa.shape, want + (2,), want))
            self.stats = (qm, qa)
        self.budget, self.window, self.interval = budget, window, interval
        # checked here, as the state would check them at the first forward
        # (with budget=None there is none, and digest() reads seq_id)
        seed, seq_id = _arrays.u64("seed", seed), _arrays.u64("seq_id", seq_id)
        self.seed, self.seq_id, self.pin_prompt = seed, seq_id, pin_prompt
        self.state: Optional[State] = None
        self.n_tokens = 0          # positions seen
        self.prompt_len = 0
        self.peak_bytes = 0        # the most bytes keys + values ever held after a step
        self.evict_seconds = 0.0   # time spent choosing (state, scores) and compacting
        self._table: Optional[np.ndarray] = None  # the state's positions after this step
        self._moved = False        # this step ran a round: layers gather
        self._late = False         # this step's rounds run after its attention
        super().__init__(layers=[KvevictLayer(self, i) for i in range(self.n_layers)])

    # ---- the schedule ---------------------------------------------------------------------------
    def held_after(self, q: int) -> int:
        """Entries a head holds once a step of q tokens is appended: held +
        q, or, when the step runs a round (the heads full), C - r + q, the
        count a round leaves (max(B, P + W)) plus the step's tokens."""
        held = self.layers[0].keys.shape[-2] if self.layers[0].is_initialized else 0
        if self.state is None:
            return held + q
        info = self.state.seq(0)
        if info.n_valid + q <= info.capacity:
            return info.n_valid + q
        return info.capacity - self.interval + q

    def _begin(self, q: int) -> None:
        """The first layer's update of a step: the state appends its q tokens."""
        import time

        t0 = time.perf_counter()
        first = self.state is None
        if first:
            self.prompt_len = q
            if self.budget is not None:
                pinned = q if self.pin_prompt else 0
                cap = max(self.budget, pinned + self.window) + self.interval
                if self.scorer and q > cap:
                    raise ValueError("a prompt of %d tokens with scorer=%r and pin_prompt=False "
                                     "would run rounds inside the prefill (capacity %d): pin "
                                     "the prompt or use the random scorer"
                                     % (q, self.scorer, cap))
                # an unpinned prompt longer than C: its rounds run after the
                # prefill's attention (vLLM prefills it in chunks that end on
                # round boundaries instead)
                self._late = q > cap
                # the scorer and compaction run with the model's threads
                # (torch's setting), as kvpress's presses do
                self._ctx = Context("cpu", threads=torch.get_num_threads())
                self.state = State(self._ctx, max_seqs=1, n_layers=self.n_layers,
                                   n_heads=self.kv_heads, budget=self.budget, window=self.window,
                                   interval=self.interval, max_slots=cap, seed=self.seed,
                                   scored=self.scorer is not None)
                self.state.admit(0, self.seq_id, pinned)
                self._scores = self.state.scores_buffer(1) if self.scorer else None
        else:
            self._late = False
        if not first and q != 1 and self.layers[0].keys.shape[-2] != self.n_tokens:
            raise ValueError("KvevictCache: an append of %d tokens after eviction began: the "
                             "causal mask would be wrong (assisted / speculative decoding and "
                             "chunked prefill are not served)" % q)
        if not first and self.state is not None and q > 1 and \
                self.state.rounds_due([0], [q])[0]:
            raise ValueError("KvevictCache: a step of %d tokens that runs a round (capacity %d): "
                             "the round would evict the step's own tokens before its attention "
                             "(pin the prompt, or give a larger budget)"
                             % (q, self.state.seq(0).capacity))
        self._moved = False
        if self.state is not None:
            before = self.state.seq(0)
            scores = None
            if self.scorer and self.state.rounds_due([0], [q])[0]:
                scores = self._score(q)
            want = self.held_after(q)
            self.state.append([0], [q], scores=scores)
            after = self.state.seq(0)
            if after.n_valid != want and not self._late:
                raise RuntimeError("KvevictCache: the state holds %d entries after the step, "
                                   "the mask was sized for %d" % (after.n_valid, want))
            self._moved = after.round != before.round or after.n_valid != before.n_valid + q
            if self._moved:  # else the new tokens took the next slots: the layers append
                table = self.state.row_table(0)[:, :, :after.n_valid]
                self._table = torch.from_numpy(np.array(table, dtype=np.int64))
        self.n_tokens += q
        self.evict_seconds += time.perf_counter() - t0

    def _score(self, q: int) -> Any:
        kw = {}
        if self.scorer == "triattention":
            kw = dict(group=self.q_heads // self.kv_heads, rope_theta=self.rope_theta)
        for l, layer in enumerate(self.layers):
            if self.scorer == "triattention":
                kw.update(q_mean=self.stats[0][l], q_abs_mean=self.stats[1][l])
            # the scorer reads the cache's keys where they are (float32,
            # float16 or bfloat16 on the CPU: no copy); keys on a GPU are
            # copied to the host once a round (device scoring not wired here)
            keys = layer.keys.detach()
            if keys.device.type != "cpu":
                keys = keys.to("cpu")
            keys = keys.contiguous()
            self.state.score([0], [q], l, keys, self._scores, scorer=self.scorer,
                             layout="hnd", cache_row=[0], **kw)
        return self._scores[:1]

    def _store(self, layer: KvevictLayer, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Keep, of a step's keys / values (the held entries, then the new
        ones), the state's keep-set, in slot order."""
        import time

        q = keys.shape[-2] - layer.keys.shape[-2]
        new_pos = torch.arange(self.n_tokens - q, self.n_tokens, dtype=torch.int64)
        dense_pos = torch.cat([layer.positions, new_pos.expand(self.kv_heads, q)], dim=1)
        if not self._moved or self._table is None:
            layer.keys, layer.values, layer.positions = keys, values, dense_pos
        else:
            t0 = time.perf_counter()
            table = self._table[layer.index]  # [kv_heads, n_valid] positions
            inv = torch.full((self.kv_heads, self.n_tokens), -1, dtype=torch.int64)
            inv.scatter_(1, dense_pos, torch.arange(dense_pos.shape[1]).expand_as(dense_pos))
            idx = inv.gather(1, table)
            if bool((idx < 0).any()):
                raise RuntimeError("KvevictCache: layer %d: the state keeps a position the "
                                   "cache does not hold" % layer.index)
            g = idx.to(keys.device)[None, :, :, None]
            layer.keys = keys.gather(2, g.expand(keys.shape[0], -1, -1, keys.shape[3]))
            layer.values = values.gather(2, g.expand(values.shape[0], -1, -1, values.shape[3]))
            layer.positions = table
            self.evict_seconds += time.perf_counter() - t0
        if layer.index == self.n_layers - 1:
            self.peak_bytes = max(self.peak_bytes, self.kv_bytes())

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int,
               cache_kwargs: Optional[dict] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        if key_states.shape[0] != 1:
            raise ValueError("KvevictCache: batch size %d: one sequence per cache (a padded "
                             "batch would pin its pad tokens as prompt); make one cache per "
                             "sequence" % key_states.shape[0])
        if key_states.shape[1] != self.kv_heads:
            raise ValueError("KvevictCache: key_states has %d heads, the config %d KV heads"
                             % (key_states.shape[1], self.kv_heads))
        if layer_idx == 0:
            self._begin(key_states.shape[-2])
        return self.layers[layer_idx].update(key_states, value_states, cache_kwargs)

    # ---- reading it back ------------------------------------------------------------------------
    def kv_bytes(self) -> int:
        """Bytes the layers' keys and values hold now."""
        return sum(x.numel() * x.element_size() for l in self.layers if l.is_initialized
                   for x in (l.keys, l.values))

    def held(self) -> int:
        """Entries a head holds now (the same in every head and layer)."""
        return self.layers[0].keys.shape[-2] if self.layers[0].is_initialized else 0

    def kept_positions(self) -> list:
        """positions[layer][head]: the positions each head holds, ascending."""
        return [[sorted(p.tolist()) for p in l.positions] if l.positions is not None
                else [[] for _ in range(self.kv_heads)] for l in self.layers]

    def digest(self) -> int:
        """docs/SPEC.md's digest of the positions the cache holds."""
        return positions_digest(self.seq_id, self.kept_positions())
