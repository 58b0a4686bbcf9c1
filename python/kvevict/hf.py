"""kvevict in Hugging Face transformers (5.x): ``KvevictCache``, a
``transformers.Cache`` whose layers evict with kvevict's schedule.

    from kvevict.hf import KvevictCache
    cache = KvevictCache(model.config, budget=256, window=32, interval=32)
    out = model.generate(input_ids, past_key_values=cache, max_new_tokens=512)

Per KV head: the prompt pinned (``pin_prompt=False``: the random-p0 arm),
the last ``window`` tokens kept, and a round of ``interval`` (r) evictions
each time a head holds C = max(B, P + W) + r entries, chosen by kvevict's
random keep-set (``scorer=None``) or its K-norm / TriAttention scorer. The
choice is a ``kvevict.State``'s (one row a sequence, the CPU backend), so
the keep-sets equal kvevict's for the same (seed, seq_id, layer, head,
position, round): ``cache.digest(row)`` is docs/SPEC.md's digest, checkable
on any machine. Evicted entries leave the tensors: every head of a layer
keeps the same count, so each layer is a rectangular [batch, kv_heads, n,
head_dim] that shrinks at each round; at most C entries a head are held
between steps.

The order of a step (docs/SPEC.md section 5): a step whose heads are full
runs its round first, then its tokens take the freed slots; its attention
reads the entries held after that round and the step's own tokens,
causally. A step of many tokens (a second chat turn, a chunked prefill, a
second question on one context) is appended as one kvevict.State append of
n tokens: any further rounds its tokens trigger run after its attention, so
its keep-set is the State's for the same appends, and each of its queries
attends to every entry held when the step began (after its first round)
plus the step's tokens up to itself. The first step (the prompt) is no
exception: an unpinned prompt longer than C is attended whole. The scored
arms score those later rounds on the keys the step computed: the step's
tokens are appended once every layer has them, in pieces of at most one
round each.

Batches: row b of a batch is sequence ``seq_id + b`` (or ``seq_id[b]``
given a list), its keep-sets those of that row run alone. Rows must be of
equal length, unpadded (the cache never sees the padding mask): a padded
batch, which transformers 5.2 shows the cache through the rows' rotary
positions, is refused; where the cache sees no positions (5.19) a batch is
refused unless the caller says its rows are unpadded, ``rows_unpadded=True``.
``num_return_sequences`` (rows expanded before the prefill) is
served; beam search's ``reorder_cache`` is served for the random arms (a
row's history and seq_id move with the beam: the State rebuilds it). The
scored arms score each row from its own keys.

Hybrid models (``layer_types`` mixing "sliding_attention" and
"full_attention": Gemma 2/3, Qwen3 / Mistral-style configs): the
full-attention layers are evicted (the State's layers 0.. F-1, in model
order), the sliding layers are transformers' own DynamicSlidingWindowLayer.
Every arm (the scored ones score full layer i from its keys, TriAttention
with model layer i's statistics).

On a GPU the layers stay on the model's device. The random arms' State is
on the host (the keep-set reads no keys); the scored arms' on the cache's
GPU (kvevict.ops.context_for), its scorer reading each layer's keys in
place (device scoring). Only slot tables (positions) cross to the host, to
gather the kept entries. A library built without a GPU backend (or run with
KVE_BACKEND=cpu), or a device that is not CUDA (MPS), scores on the host,
each round copying the keys there; ``cache.state.ctx.backend`` says which.

Runs on transformers 5.2 (get_mask_sizes(cache_position)) and 5.19
(get_mask_sizes(query_length), get_max_length). Models it cannot serve
(only sliding or chunked layers, multi-head latent attention,
encoder-decoder) are refused at construction, naming why.
"""

from typing import Any, Optional, Sequence, Tuple

import numpy as np
import torch
from transformers.cache_utils import Cache, CacheLayerMixin, DynamicSlidingWindowLayer

from . import _arrays
from ._context import Context
from ._state import State

SCORERS = (None, "random", "knorm", "triattention")


def _text_config(config: Any) -> Any:
    get = getattr(config, "get_text_config", None)
    return get(decoder=True) if get is not None else config


def layer_windows(config: Any) -> list:
    """Per layer of the decoder: None for a full-attention layer, its
    sliding window for a sliding-window one (transformers' own rule:
    ``layer_types``, else every layer sliding when ``sliding_window`` is set
    and ``use_sliding_window`` is not False)."""
    c = _text_config(config)
    n = getattr(c, "num_hidden_layers", None) or 0
    types = getattr(c, "layer_types", None)
    window = getattr(c, "sliding_window", None)
    if types is None:
        sliding = bool(window) and getattr(c, "use_sliding_window", True) is not False
        types = ["sliding_attention" if sliding else "full_attention"] * n
    return [None if t == "full_attention" else window for t in types]


def rope_score_args(config: Any, theta: Optional[float] = None) -> dict:
    """TriAttention's RoPE arguments (kvevict.score's) for the full-attention
    layers of a decoder config: ``rope_theta`` for plain RoPE (@theta where
    given: a calibration file's, else the config's); for scaled
    RoPE (linear, dynamic, yarn, llama3, longrope, ...) ``omega``, the
    frequencies transformers' own rope initialisation gives (float32
    [head_dim/2]). rope_parameters keyed by layer type (Gemma 3) are read
    for "full_attention". ValueError naming why for partial rotary
    embeddings or a rope_type transformers does not know."""
    c = _text_config(config)
    name = type(c).__name__
    rp = dict(getattr(c, "rope_parameters", None) or getattr(c, "rope_scaling", None) or {})
    keyed = isinstance(rp.get("full_attention"), dict)
    if keyed:
        rp = rp["full_attention"]
    rope_type = rp.get("rope_type") or rp.get("type") or "default"
    theta = theta or rp.get("rope_theta") or getattr(c, "rope_theta", None)
    partial = rp.get("partial_rotary_factor") or getattr(c, "partial_rotary_factor", None) or 1.0
    if partial != 1.0:
        raise ValueError("%s: partial_rotary_factor = %s: TriAttention inverts RoPE over the "
                         "whole head_dim; partial rotary embeddings are not served"
                         % (name, partial))
    if rope_type == "default":
        if not theta:
            raise ValueError("scorer='triattention': %s has no rope_theta" % name)
        return {"rope_theta": float(theta)}
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    init = ROPE_INIT_FUNCTIONS.get(rope_type)
    if init is None:
        raise ValueError("scorer='triattention': %s's rope_type %r is not one transformers "
                         "computes (%s)" % (name, rope_type, ", ".join(sorted(ROPE_INIT_FUNCTIONS))))
    inv_freq = (init(c, "cpu", layer_type="full_attention") if keyed else init(c, "cpu"))[0]
    omega = np.ascontiguousarray(inv_freq.detach().cpu().numpy(), dtype=np.float32)
    head_dim = check_config(config, hybrid=True)[3]
    if omega.shape != (head_dim // 2,):
        raise ValueError("scorer='triattention': %s's %s RoPE has %d frequencies, head_dim %d "
                         "needs %d" % (name, rope_type, omega.size, head_dim, head_dim // 2))
    return {"omega": omega}


def check_config(config: Any, hybrid: bool = False) -> Tuple[int, int, int, int]:
    """(layers, kv_heads, q_heads, head_dim) of a decoder the cache can serve;
    ValueError naming why otherwise. hybrid=True (KvevictCache) accepts
    sliding-window layers beside full-attention ones (layer_windows says
    which); hybrid=False (the kvpress press) refuses them."""
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
    if getattr(c, "num_kv_shared_layers", None):
        raise ValueError("%s: num_kv_shared_layers=%s: layers sharing another layer's cache are "
                         "not served" % (name, c.num_kv_shared_layers))
    types = getattr(c, "layer_types", None)
    if types is not None:
        other = sorted(set(t for t in types if t not in ("full_attention", "sliding_attention")))
        if other:
            raise ValueError("%s: layer_types has %s layers: only full-attention and "
                             "sliding-window layers are served" % (name, ", ".join(other)))
        if "sliding_attention" in types and not hybrid:
            raise ValueError("%s: layer_types has sliding_attention layers: a sliding-window "
                             "layer already drops tokens by position, so a per-head budget does "
                             "not apply to it (kvevict.hf.KvevictCache evicts the full layers "
                             "of such a model)" % name)
        if "sliding_attention" in types and not getattr(c, "sliding_window", None):
            raise ValueError("%s: layer_types has sliding_attention layers but sliding_window "
                             "= %r" % (name, getattr(c, "sliding_window", None)))
    windows = layer_windows(c)
    if windows and all(w is not None for w in windows):
        raise ValueError("%s: sliding_window=%s on every layer: sliding-window layers drop "
                         "tokens by position already, and no full-attention layer is left to "
                         "evict" % (name, c.sliding_window))
    if getattr(c, "attention_chunk_size", None):
        raise ValueError("%s: attention_chunk_size=%s: chunked attention layers are not served"
                         % (name, c.attention_chunk_size))
    layers = getattr(c, "num_hidden_layers", None)
    q_heads = getattr(c, "num_attention_heads", None)
    if not layers or not q_heads:
        raise ValueError("%s: no num_hidden_layers / num_attention_heads: not a decoder config"
                         % name)
    if len(windows) != layers:
        raise ValueError("%s: layer_types names %d layers, num_hidden_layers is %d"
                         % (name, len(windows), layers))
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
    layers, _, q_heads, head_dim = check_config(model.config, hybrid=True)
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
    """One full-attention layer's entries, in the state's slot order: keys /
    values [batch, kv_heads, n, head_dim] hold, in slot s of head h of row
    b, the position ``row_positions[b, h, s]``. ``table_layer``: the
    State's layer (the full layers' rank)."""

    is_sliding = False
    is_compileable = False

    def __init__(self, cache: "KvevictCache", index: int, table_layer: int = 0):
        super().__init__()
        self.cache, self.index, self.table_layer = cache, index, table_layer
        self.row_positions: Optional[torch.Tensor] = None  # int64 [batch, kv_heads, n]

    @property
    def positions(self) -> Optional[torch.Tensor]:
        """int64 [kv_heads, n]: row 0's positions (the one sequence of batch 1)."""
        return None if self.row_positions is None else self.row_positions[0]

    @positions.setter
    def positions(self, value: torch.Tensor) -> None:
        self.row_positions = value[None]

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        shape = key_states.shape[:2] + (0,) + key_states.shape[3:]
        self.keys = key_states.new_empty(shape)
        self.values = value_states.new_empty(value_states.shape[:2] + (0,) + value_states.shape[3:])
        self.row_positions = torch.empty(tuple(key_states.shape[:2]) + (0,), dtype=torch.int64)
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor,
               cache_kwargs: Optional[dict] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        """Store the step's keep-set; return the entries its attention reads
        (held after the step's first round, then the step's tokens)."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        keys = torch.cat([self.keys, key_states], dim=-2)
        values = torch.cat([self.values, value_states], dim=-2)
        return self.cache._store(self, keys, values)

    def get_seq_length(self) -> int:
        return self.cache.n_tokens if self.is_initialized else 0

    def get_mask_sizes(self, query: Any) -> Tuple[int, int]:
        """(kv length, kv offset) of the step's attention (KvevictCache.mask_sizes).
        query: the step's cache_position (transformers 5.2) or its length (5.19)."""
        q = query if isinstance(query, int) else int(query.shape[0])
        return self.cache.mask_sizes(q)

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

    def batch_repeat_interleave(self, repeats: int) -> None:
        self.cache.batch_repeat_interleave(repeats)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self.cache.batch_select_indices(indices)

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        self.cache.reorder_cache(beam_idx)


class KvevictCache(Cache):
    """A transformers cache that evicts per KV head with kvevict.

    config: the model's config (checked: see check_config; sliding-window
    layers are left to transformers' DynamicSlidingWindowLayer). budget (B),
    window (W), interval (r): the schedule (docs/SPEC.md). seed: the
    keep-sets' key. seq_id: an int (row b of a batch is sequence seq_id + b)
    or a list of one per row. pin_prompt=False: the random-p0 arm (the
    prompt is evicted like any token). scorer: None / "random" (kvevict's
    random keep-set), "knorm" or "triattention" (kvevict's scorers, on the
    cache's device; triattention needs ``stats`` = calibrate_triattention(
    model, ids) and takes the config's RoPE: rope_score_args).
    budget=None: nothing is ever evicted. rows_unpadded=True: the caller's
    word that a batch's rows are of equal length, unpadded, needed for a
    batch where the cache sees no positions (transformers 5.19).
    """

    def __init__(self, config: Any, budget: Optional[int] = 256, window: int = 32,
                 interval: int = 32, seed: int = 0, seq_id: Any = 0, pin_prompt: bool = True,
                 scorer: Optional[str] = None, stats: Optional[Tuple[Any, Any]] = None,
                 rows_unpadded: bool = False):
        self.n_layers, self.kv_heads, self.q_heads, self.head_dim = check_config(config,
                                                                                 hybrid=True)
        if not isinstance(rows_unpadded, bool):
            raise ValueError("rows_unpadded = %r: expected True or False" % (rows_unpadded,))
        self.rows_unpadded = rows_unpadded
        windows = layer_windows(config)
        self._full = [i for i, w in enumerate(windows) if w is None]
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
            self.rope = rope_score_args(config)  # rope_theta, or omega for scaled RoPE
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
        seed = _arrays.u64("seed", seed)
        if isinstance(seq_id, (list, tuple)):
            if not seq_id:
                raise ValueError("seq_id = []: expected an int or one per row of the batch")
            seq_id = tuple(_arrays.u64("seq_id[%d]" % i, v) for i, v in enumerate(seq_id))
        else:
            seq_id = _arrays.u64("seq_id", seq_id)
        self.seed, self.seq_id, self.pin_prompt = seed, seq_id, pin_prompt
        self.state: Optional[State] = None
        self.batch = 0             # rows, fixed by the first forward
        self.seq_ids: list = []    # each row's seq_id (beam search moves them with the rows)
        self.n_tokens = 0          # positions seen
        self.prompt_len = 0
        self.peak_bytes = 0        # the most bytes keys + values ever held after a step
        self.evict_seconds = 0.0   # time spent choosing (state, scores) and compacting
        self._steps: list = []     # the tokens of each append so far
        self._tables: Optional[torch.Tensor] = None  # [batch, F, H, n]: positions after the step
        self._table: Optional[torch.Tensor] = None   # row 0's [F, H, n]
        self._att: Optional[torch.Tensor] = None     # [batch, F, H, n]: held before the step's tokens
        self._att_len = 0          # the kv length the step's mask was sized for
        self._moved = False        # this step ran a round: layers gather
        self._deferred = 0         # a scored step's tokens appended after its attention
        self._score_kw: dict = {}  # full layer -> State.score's scorer arguments, by the state
        layers = [KvevictLayer(self, i, self._full.index(i)) if w is None
                  else DynamicSlidingWindowLayer(sliding_window=w) for i, w in enumerate(windows)]
        super().__init__(layers=layers)

    # ---- the schedule ---------------------------------------------------------------------------
    def row_seq_id(self, row: int) -> int:
        """The seq_id of row ``row`` (after beam search's reorders, the one its history carries)."""
        if self.seq_ids:
            return self.seq_ids[row]
        if isinstance(self.seq_id, tuple):
            return self.seq_id[row]
        return self.seq_id + row

    def _held_before(self) -> int:
        """Entries a head holds when a step begins, after its first round (the heads full)."""
        held = self.held()
        if self.state is not None and held and held == self.state.seq(0).capacity:
            return held - self.interval
        return held

    def mask_sizes(self, q: int) -> Tuple[int, int]:
        """(kv length, kv offset) for a step of q tokens: the entries held
        after its first round, then its q tokens, the offset placing those at
        their positions so that transformers' causal mask reads every held
        entry and the step's tokens causally."""
        n = self._held_before()
        return n + q, self.n_tokens - n

    def held_after(self, q: int) -> int:
        """Entries each head's attention reads in a step of q tokens."""
        return self.mask_sizes(q)[0]

    def _open(self, q: int, batch: int, device: torch.device) -> None:
        """The first step: the rows, their seq_ids and the state (on the
        host; a scored arm's on the cache's device, where its scorer reads
        the keys)."""
        if isinstance(self.seq_id, tuple):
            if len(self.seq_id) != batch:
                raise ValueError("seq_id: %d ids for a batch of %d rows" % (len(self.seq_id), batch))
            self.seq_ids = list(self.seq_id)
        else:
            if self.seq_id + batch - 1 > 2 ** 64 - 1:
                raise ValueError("seq_id = %d: rows 0..%d take seq_id + row, past 2^64-1"
                                 % (self.seq_id, batch - 1))
            self.seq_ids = [self.seq_id + b for b in range(batch)]
        self.batch, self.prompt_len = batch, q
        if self.budget is None:
            return
        pinned = q if self.pin_prompt else 0
        cap = max(self.budget, pinned + self.window) + self.interval
        self._ctx = None
        if self.scorer and device.type == "cuda":
            # device scoring: the state on the keys' GPU (CUDA or HIP, as
            # torch's "cuda" is), its scorer reading them in place
            from ._lib import KvevictError
            from .ops import context_for
            try:
                ctx = context_for(device)
            except KvevictError:  # a library without a GPU backend, asked for cuda:N > 0
                ctx = None
            if ctx is not None and ctx.backend != "cpu":  # else no GPU backend
                self._ctx = ctx
        if self._ctx is None:
            # the scorer and compaction run with the model's threads (torch's
            # setting), as kvpress's presses do
            self._ctx = Context("cpu", threads=torch.get_num_threads())
        group = self.q_heads // self.kv_heads if self.scorer == "triattention" else 0
        self.state = State(self._ctx, max_seqs=batch, n_layers=len(self._full),
                           n_heads=self.kv_heads, budget=self.budget, window=self.window,
                           interval=self.interval, max_slots=cap, seed=self.seed,
                           tensors="torch", scored=self.scorer is not None, score_group=group)
        for b in range(batch):
            self.state.admit(b, self.seq_ids[b], pinned)
        self._scores = self.state.scores_buffer(batch) if self.scorer else None
        if self.scorer:  # each full layer's scorer arguments, arrays where the state is
            where = self._scores.device
            for i in self._full:
                kw = dict(scorer=self.scorer)
                if self.scorer == "triattention":  # model layer i's statistics
                    kw.update(group=self.q_heads // self.kv_heads, q_mean=self.stats[0][i],
                              q_abs_mean=self.stats[1][i], **self.rope)
                self._score_kw[i] = {k: torch.from_numpy(v).to(where)
                                     if isinstance(v, np.ndarray) else v for k, v in kw.items()}

    def _row_tables(self, n: int, rows: Optional[Sequence[int]] = None) -> torch.Tensor:
        """The state's positions, slots 0..n-1 of @rows (default every row),
        on the host: int64 [rows, F, H, n] (a device state's tables copied
        back: n x F x H positions a row, not its keys)."""
        rows = range(self.batch) if rows is None else rows
        return torch.stack([self.state.row_table(b)[:, :, :n] for b in rows]).to(
            device="cpu", dtype=torch.int64)

    def _begin(self, q: int, batch: int = 1, device: Optional[torch.device] = None) -> None:
        """The first full layer's update of a step: the state appends its q
        tokens to every row, its first round (the heads full) apart: the
        attention reads what that round left, later rounds run after it."""
        import time

        t0 = time.perf_counter()
        first = self.state is None and self.batch == 0
        if first:
            self._open(q, batch, device if device is not None else torch.device("cpu"))
        elif batch != self.batch:
            raise ValueError("KvevictCache: a step of batch size %d after steps of %d rows: the "
                             "rows are fixed by the first forward" % (batch, self.batch))
        self._att_len = self.mask_sizes(q)[0]
        self._moved, self._att = False, None
        if self.state is not None:
            rows = list(range(self.batch))
            before = self.state.seq(0)
            rest = q
            if not first and before.n_valid == before.capacity:  # the round first
                scores = self._score(1) if self.scorer else None
                self.state.append(rows, [1] * self.batch, scores=scores, outputs=False)
                self._att = self._row_tables(self.state.seq(0).n_valid - 1)
                rest = q - 1
            if rest and self.scorer and self.state.rounds_due(rows, [rest] * self.batch)[0]:
                # its rounds score keys this step computes: appended after every
                # layer has them (_run_deferred), the layers holding them meanwhile
                self._deferred = rest
            elif rest:
                self.state.append(rows, [rest] * self.batch, outputs=False)
            after = self.state.seq(0)
            self._moved = after.round != before.round or after.n_valid != before.n_valid + q
            if self._moved and not self._deferred:  # else the layers append (or wait)
                self._tables = self._row_tables(after.n_valid)
                self._table = self._tables[0]
        self._steps.append(q)
        self.n_tokens += q
        self.evict_seconds += time.perf_counter() - t0

    def _score(self, q: int) -> Any:
        """Every row's scores for an append of q tokens, from the keys each
        full layer holds (in the state's slot order), read where they are:
        float32, float16 or bfloat16, on the host or, a device state's, on
        its GPU (copied only where the state is not on the keys' device)."""
        rows = list(range(self.batch))
        for i in self._full:
            layer = self.layers[i]
            keys = layer.keys.detach()  # head_dim dense is all the scorer needs
            if keys.device != self._scores.device:  # a GPU cache, a library with no GPU backend
                keys = keys.to(self._scores.device)
            self.state.score(rows, [q] * self.batch, layer.table_layer, keys, self._scores,
                             layout="hnd", cache_row=rows, **self._score_kw[i])
        return self._scores[:self.batch]

    def _gather(self, keys: torch.Tensor, values: torch.Tensor, dense_pos: torch.Tensor,
                table: torch.Tensor, layer: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """keys / values [batch, H, n, D] whose slots hold dense_pos [batch, H,
        n], gathered to the positions table [batch, H, m] names."""
        inv = torch.full(dense_pos.shape[:2] + (self.n_tokens,), -1, dtype=torch.int64)
        inv.scatter_(2, dense_pos, torch.arange(dense_pos.shape[2]).expand_as(dense_pos))
        idx = inv.gather(2, table)
        if bool((idx < 0).any()):
            raise RuntimeError("KvevictCache: layer %d: the state keeps a position the cache "
                               "does not hold" % layer)
        g = idx.to(keys.device)[..., None]
        return (keys.gather(2, g.expand(-1, -1, -1, keys.shape[3])),
                values.gather(2, g.expand(-1, -1, -1, values.shape[3])))

    def _store(self, layer: KvevictLayer, keys: torch.Tensor,
               values: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Keep, of a step's keys / values (the held entries, then the new
        ones), the state's keep-set, in slot order; return the entries the
        step's attention reads: those held after its first round, then its
        tokens in order."""
        import time

        t0 = time.perf_counter()
        b, q = keys.shape[0], keys.shape[-2] - layer.keys.shape[-2]
        new_pos = torch.arange(self.n_tokens - q, self.n_tokens, dtype=torch.int64)
        new_pos = new_pos.expand(b, self.kv_heads, q)
        dense_pos = torch.cat([layer.row_positions, new_pos], dim=2)
        att_k, att_v = keys, values
        if self._att is not None:
            att = torch.cat([self._att[:, layer.table_layer], new_pos], dim=2)
            att_k, att_v = self._gather(keys, values, dense_pos, att, layer.index)
        if att_k.shape[-2] != self._att_len:
            raise RuntimeError("KvevictCache: layer %d attends to %d entries, the mask was sized "
                               "for %d" % (layer.index, att_k.shape[-2], self._att_len))
        if self._deferred:  # the attention's entries, until _run_deferred
            layer.keys, layer.values = att_k, att_v
            layer.row_positions = dense_pos if self._att is None else att
            if layer.index == self._full[-1]:
                self._run_deferred()
        elif not self._moved or self._tables is None:
            layer.keys, layer.values, layer.row_positions = keys, values, dense_pos
        else:
            table = self._tables[:, layer.table_layer]  # [batch, kv_heads, n_valid] positions
            layer.keys, layer.values = self._gather(keys, values, dense_pos, table, layer.index)
            layer.row_positions = table
        if self._moved or self._att is not None:
            self.evict_seconds += time.perf_counter() - t0
        if layer.index == self._full[-1]:
            self.peak_bytes = max(self.peak_bytes, self.kv_bytes())
        return att_k, att_v

    def _run_deferred(self) -> None:
        """A scored step's tokens whose rounds run after its attention:
        appended in pieces that fill the heads, then r at a time each after
        a round scored on the keys its heads hold; every full layer gathered
        after each piece to the state's slots, the tokens still to append
        after them."""
        rest, self._deferred = self._deferred, 0
        full = [self.layers[i] for i in self._full]
        while rest:
            info = self.state.seq(0)
            scores = None
            if info.n_valid < info.capacity:
                k = min(rest, info.capacity - info.n_valid)
            else:
                k = min(rest, self.interval)
                whole = [(l.keys, l.values) for l in full]
                for l in full:  # the scorer reads the slots the state holds, in its order
                    l.keys, l.values = l.keys[:, :, :info.n_valid], l.values[:, :, :info.n_valid]
                try:
                    scores = self._score(k)
                finally:
                    for l, (kk, vv) in zip(full, whole):
                        l.keys, l.values = kk, vv
            self.state.append(list(range(self.batch)), [k] * self.batch, scores=scores,
                              outputs=False)
            rest -= k
            n = self.state.seq(0).n_valid
            tables = self._row_tables(n)
            pending = torch.arange(self.n_tokens - rest, self.n_tokens, dtype=torch.int64)
            pending = pending.expand(self.batch, self.kv_heads, rest)
            for l in full:
                target = torch.cat([tables[:, l.table_layer], pending], dim=2)
                l.keys, l.values = self._gather(l.keys, l.values, l.row_positions, target,
                                                l.index)
                l.row_positions = target
        self._tables = tables
        self._table = tables[0]

    def _check_rows(self, batch: int, cache_kwargs: Optional[dict]) -> None:
        """Refuse a batch whose rows sit at different positions (left
        padding): transformers 5.2 hands the cache the rows' rotary cos;
        where the cache sees no positions (5.19), a batch needs the caller's
        word that its rows are unpadded (rows_unpadded=True)."""
        cos = (cache_kwargs or {}).get("cos")
        if batch > 1 and not isinstance(cos, torch.Tensor) and not self.rows_unpadded:
            import transformers
            raise ValueError("KvevictCache: a batch of %d rows on transformers %s, whose cache "
                             "updates carry no positions: the cache cannot see padding (a "
                             "padded row would pin its pad tokens and attend to them); give "
                             "rows of equal length, unpadded, and say so with "
                             "KvevictCache(..., rows_unpadded=True), or use one cache per "
                             "sequence" % (batch, transformers.__version__))
        if batch > 1 and isinstance(cos, torch.Tensor) and cos.dim() >= 2 and cos.shape[0] == batch:
            if not bool((cos == cos[:1]).all()):
                raise ValueError("KvevictCache: the %d rows of the batch sit at different "
                                 "positions (a padded batch): a row's keep-set would count its "
                                 "pad tokens as prompt, and after eviction the rows hold "
                                 "different counts, which transformers' padding mask cannot "
                                 "express; give rows of equal length or one cache per sequence"
                                 % batch)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int,
               cache_kwargs: Optional[dict] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        if key_states.shape[1] != self.kv_heads:
            raise ValueError("KvevictCache: key_states has %d heads, the config %d KV heads"
                             % (key_states.shape[1], self.kv_heads))
        layer = self.layers[layer_idx]
        if layer.is_sliding:  # transformers' own sliding-window layer
            return layer.update(key_states, value_states, cache_kwargs)
        if layer_idx == self._full[0]:
            self._check_rows(key_states.shape[0], cache_kwargs)
            self._begin(key_states.shape[-2], key_states.shape[0], key_states.device)
        return layer.update(key_states, value_states, cache_kwargs)

    # ---- batches and beams ----------------------------------------------------------------------
    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        """Beam search: row i takes row beam_idx[i]'s history, its entries,
        positions and seq_id (the State rebuilds row i for that seq_id and
        the appends so far). The random arms only: a scored keep-set depends
        on keys the State cannot replay."""
        idx = [int(i) for i in torch.as_tensor(beam_idx).reshape(-1).tolist()]
        if not self.batch:  # nothing held yet
            return
        if len(idx) != self.batch or any(not 0 <= i < self.batch for i in idx):
            raise ValueError("KvevictCache.reorder_cache: beam_idx = %s: expected %d row "
                             "indices in 0..%d" % (idx, self.batch, self.batch - 1))
        if idx == list(range(self.batch)):
            return
        if self.scorer:
            raise ValueError("KvevictCache.reorder_cache: beam search with scorer=%r: a beam "
                             "that takes another's history needs that history's scored "
                             "keep-sets, which depend on its keys; beam search is served by "
                             "the random arms (scorer=None)" % (self.scorer,))
        ids = [self.seq_ids[j] for j in idx]
        if self.state is not None:
            pinned = self.prompt_len if self.pin_prompt else 0
            for i, j in enumerate(idx):
                if j != i:
                    self.state.rebuild(i, ids[i], pinned, self.n_tokens, steps=self._steps)
        self.seq_ids = ids
        sel = torch.tensor(idx)
        for layer in self.layers:
            if not layer.is_initialized:
                continue
            if layer.is_sliding:
                layer.reorder_cache(sel.to(layer.keys.device))
                continue
            dev = layer.keys.device
            layer.keys = layer.keys.index_select(0, sel.to(dev))
            layer.values = layer.values.index_select(0, sel.to(dev))
            layer.row_positions = layer.row_positions.index_select(0, sel)
        if self.state is not None:  # the rebuilt rows hold what their tensors hold
            layer = self.layers[self._full[0]]
            n = layer.keys.shape[-2]
            for i in set(idx):
                t = self._row_tables(n, [i])[0, 0]
                if not torch.equal(t.sort(1).values, layer.row_positions[i].sort(1).values):
                    raise RuntimeError("KvevictCache.reorder_cache: row %d rebuilt to other "
                                       "positions than its history's" % i)

    def batch_repeat_interleave(self, repeats: int) -> None:
        """Refused once a step ran (copies of a row would share its seq_id's
        keep-sets); num_return_sequences expands the prompt before its prefill,
        which is served."""
        if repeats != 1 and self.batch:
            raise ValueError("KvevictCache.batch_repeat_interleave(%d): copying rows after "
                             "their prefill is not served (the copies would share one seq_id); "
                             "expand the inputs before the prefill (num_return_sequences does)"
                             % repeats)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Refused once a step ran: rows are dropped or reordered only by
        reorder_cache (beam search)."""
        if self.batch:
            raise ValueError("KvevictCache.batch_select_indices: selecting rows after the "
                             "prefill is not served (beam search's reorder_cache is)")

    # ---- reading it back ------------------------------------------------------------------------
    def kv_bytes(self) -> int:
        """Bytes the layers' keys and values hold now (sliding layers included)."""
        return sum(x.numel() * x.element_size() for l in self.layers if l.is_initialized
                   for x in (l.keys, l.values))

    def held(self) -> int:
        """Entries a head of a full-attention layer holds now (the same in
        every such head, layer and row)."""
        layer = self.layers[self._full[0]]
        return layer.keys.shape[-2] if layer.is_initialized else 0

    def kept_positions(self, row: int = 0) -> list:
        """positions[layer][head] of row ``row``: the positions each head of
        each full-attention layer holds, ascending."""
        out = []
        for i in self._full:
            l = self.layers[i]
            if l.row_positions is None:
                out.append([[] for _ in range(self.kv_heads)])
            else:
                out.append([sorted(p.tolist()) for p in l.row_positions[row]])
        return out

    def digest(self, row: int = 0) -> int:
        """docs/SPEC.md's digest of the positions row ``row`` holds (its
        seq_id, the full-attention layers numbered 0..F-1)."""
        return positions_digest(self.row_seq_id(row), self.kept_positions(row))
