"""kvevict as a kvpress press (kvpress 0.5.x): ``KvevictPress``.

    from kvevict.press import KvevictPress
    press = KvevictPress(target_size=257, compression_interval=32, window=32)
    with press(model):
        out = model.generate(input_ids, max_new_tokens=512)

``KvevictPress`` is a kvpress ``DecodingPress``: kvpress's
``kv-press-text-generation`` pipeline and its ``evaluation/evaluate.py`` run
it during decoding, one question per context, as they run a DecodingPress.

kvpress's settings map onto kvevict's schedule (docs/SPEC.md) so that a head
holds, after every step, what DecodingPress holds:

- ``target_size`` T: the entries a head holds after the step that compressed,
  the step's own token included. kvevict's round runs before the step's
  tokens join, so the budget is B = T - 1 (a round keeps T - 1, the step's
  token makes T).
- ``compression_interval`` i: kvevict's r = i, the evictions of a round, one
  round every i decoding steps: a head holds T .. T + i - 1 entries after each
  step, as under DecodingPress, and never more than C = T - 1 + i.
- ``compression_ratio`` rho (kvpress's fraction removed; 0.0 by default):
  when > 0, the budget comes from the sequence's prompt of P tokens as
  kvpress's presses count it, B = max(1, int(P (1 - rho))), in place of
  ``target_size``.
- ``window`` W: kvevict's last-W window (DecodingPress has none).
- ``pin_prompt``: the prompt is never evicted (kvevict's random arm); with
  False it is (the random-p0 arm). A pinned prompt of P tokens makes the
  capacity max(B, P + W) + r: a head then holds more than T.
- ``scorer``: None / "random" (kvevict's hashed keep-set), "knorm" or
  "triattention" (with ``stats``): kvevict's own scorers. ``base_press``
  stays None: kvevict chooses without a kvpress ScorerPress.
- ``seed``, ``seq_id``: the keep-sets' keys; ``press.digest()`` after a run
  is docs/SPEC.md's digest, equal to kvevict.hf.KvevictCache's.
- ``hidden_states_buffer_size``: kept for kvpress's evaluate.py, unused.

Every step, each attention layer keeps, per KV head, kvevict's keep-set
(kvevict.hf.KvevictCache's schedule) and writes the compacted keys and
values back into the model's DynamicCache: evicted entries leave its
tensors, so the memory held follows the budget. Run alone (``with
press(model)``) a one-token step runs its round before its attention, as
KvevictCache and the C state order a step, so the tokens equal
KvevictCache's; a step of several tokens runs it after its attention (the
step's causal mask is the cache's own). The first step of a sequence adopts
what the cache holds as its prompt (kvpress's pipeline prefills the context
without a DecodingPress; a prefilling press may have compressed it): its
entries are numbered 0 .. n-1 in cache order.

Composition: ``PrefillDecodingPress(prefilling_press=X,
decoding_press=KvevictPress(...))`` compresses the prefill with X (X = None:
nothing) and then decodes under kvevict's schedule, starting at the first
decoding step as DecodingPress does; ``ComposedPress([..., KvevictPress(...)])``
runs the presses before it first (KvevictPress adopts what they left) and
must be last (a press after it would change what it holds: refused at the
next step, naming why). KvevictPress cannot be the ``base_press`` of
kvpress's wrappers (DecodingPress, AdaKVPress, ChunkPress, ...): they need a
ScorerPress's scores, and kvevict keeps its own state across steps.
One sequence at a time (batch 1).
"""

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Optional, Tuple
import weakref

import torch
from kvpress.presses.base_press import BasePress, is_prefilling
from kvpress.presses.composed_press import ComposedPress
from kvpress.presses.decoding_press import DecodingPress
from kvpress.presses.prefill_decoding_press import PrefillDecodingPress

from . import _arrays
from .hf import SCORERS, KvevictCache, check_config


def _int(name: str, v: Any, low: int) -> None:
    if not isinstance(v, int) or isinstance(v, bool) or v < low:
        raise ValueError("KvevictPress: %s = %r: expected an int >= %d" % (name, v, low))


def _holds(owner: Any, press: "KvevictPress", depth: int = 0) -> bool:
    """Whether owner is press or a press holding it (ComposedPress.presses,
    PrefillDecodingPress's two, a wrapper's press / base_press)."""
    if owner is press:
        return True
    if depth > 6 or not isinstance(owner, BasePress):
        return False
    for v in vars(owner).values():
        for x in (v if isinstance(v, (list, tuple)) else [v]):
            if isinstance(x, BasePress) and _holds(x, press, depth + 1):
                return True
    return False


@dataclass
class KvevictPress(DecodingPress):
    """kvevict's per-KV-head eviction as a kvpress DecodingPress (see the
    module's docstring for the mapping B = target_size - 1, r =
    compression_interval, W = window). One sequence at a time (batch 1)."""

    base_press: Optional[BasePress] = None
    compression_interval: int = 32
    target_size: int = 257
    hidden_states_buffer_size: int = 0
    compression_ratio: float = 0.0
    window: int = 32
    seed: int = 0
    seq_id: int = 0
    pin_prompt: bool = True
    scorer: Optional[str] = None
    stats: Optional[Tuple[Any, Any]] = None

    def __post_init__(self) -> None:
        if self.base_press is not None:
            raise ValueError("KvevictPress: base_press = %s: kvevict chooses with its own "
                             "scorers (scorer=None / 'random', 'knorm', 'triattention'); leave "
                             "base_press None" % type(self.base_press).__name__)
        _int("target_size", self.target_size, 2)
        _int("compression_interval", self.compression_interval, 1)
        _int("window", self.window, 1)
        r = self.compression_ratio
        if isinstance(r, bool) or not isinstance(r, (int, float)) or not 0 <= r < 1:
            raise ValueError("KvevictPress: compression_ratio = %r: expected a float in [0, 1)"
                             % (r,))
        if self.scorer not in SCORERS:
            raise ValueError("KvevictPress: scorer = %r: expected None, 'random', 'knorm' or "
                             "'triattention'" % (self.scorer,))
        if self.scorer == "triattention" and self.stats is None:
            raise ValueError("KvevictPress: scorer='triattention' needs stats= (q_mean, "
                             "q_abs_mean): kvevict.hf.calibrate_triattention(model, input_ids)")
        _arrays.u64("seed", self.seed)
        _arrays.u64("seq_id", self.seq_id)
        self.schedule: Optional[KvevictCache] = None  # the sequence's KvevictCache
        self._config = None
        self._hooks: dict = {}       # id(attention module) -> its pre-hook's handle
        self._cache = None           # weakref to the model's cache of the sequence
        self._step = None            # "pre", "post" or "fresh": how this step runs
        self._open: set = set()      # layers of the step begun whose forward hook is due
        self._adopt = 0              # entries a fresh sequence's first step adopts

    # ---- kvpress's interface ----------------------------------------------------------------
    def budget_for(self, prompt_len: int) -> int:
        """kvevict's B for a sequence whose prompt has prompt_len tokens:
        target_size - 1, or kvpress's kept count of the prompt when
        compression_ratio > 0."""
        if self.compression_ratio > 0:
            return max(1, int(prompt_len * (1 - self.compression_ratio)))
        return self.target_size - 1

    def post_init_from_model(self, model: Any) -> None:
        """Checks the model (kvevict.hf.check_config) and hooks each attention
        layer before its forward (the round of a one-token step runs there);
        wrappers (ComposedPress, PrefillDecodingPress) call this too."""
        check_config(model.config)
        self._config = model.config
        inner = model.model.language_model if hasattr(model.model, "language_model") \
            else model.model
        for layer in inner.layers:
            attn = layer.self_attn
            if id(attn) not in self._hooks:
                self._hooks[id(attn)] = attn.register_forward_pre_hook(self.pre_hook,
                                                                       with_kwargs=True)

    def reset(self) -> None:
        """Ends the sequence: the next step starts a new one (kvpress calls it
        when a DecodingPress or PrefillDecodingPress context ends), and the
        pre-hooks are removed. The ended sequence's schedule stays readable
        (``schedule``, ``digest()``) until the next one starts."""
        for h in self._hooks.values():
            h.remove()
        self._hooks.clear()
        self._cache, self._step, self._open = None, None, set()

    def compress(self, module: Any, hidden_states: Any, keys: Any, values: Any,
                 attentions: Any, kwargs: dict) -> Any:
        raise ValueError("KvevictPress.compress: kvevict keeps a schedule across steps, so it "
                         "evicts through its own hooks; it cannot serve as the base press of "
                         "a wrapper that calls compress() (DecodingPress, AdaKVPress, ...)")

    @contextmanager
    def __call__(self, model: Any):
        try:
            with BasePress.__call__(self, model):
                yield
        finally:
            self.reset()

    def digest(self) -> int:
        """docs/SPEC.md's digest of the positions the model's cache holds."""
        if self.schedule is None:
            raise ValueError("KvevictPress.digest: no sequence has run")
        return self.schedule.digest()

    # ---- the schedule ------------------------------------------------------------------------
    def _routes_here(self, owner: Any, kwargs: dict, q: int) -> bool:
        """Whether a forward hook of owner calls this press's forward hook for
        this step (PrefillDecodingPress picks one press by phase)."""
        if owner is self:
            return True
        if isinstance(owner, PrefillDecodingPress):
            # the prefill is prefilling_press's, even None's: KvevictPress as the
            # decoding press starts at the first decoding step, as DecodingPress
            pick = owner.decoding_press
            if is_prefilling(kwargs["cache_position"], q):
                pick = owner.prefilling_press
            return pick is not None and self._routes_here(pick, kwargs, q)
        if isinstance(owner, ComposedPress):
            return any(self._routes_here(p, kwargs, q) for p in owner.presses)
        return False

    def _new_sequence(self, cache: Any, held: int) -> bool:
        s = self.schedule
        if s is None or self._cache is None or self._cache() is not cache:
            return True
        if self._open and len(self._open) == s.n_layers:
            return True  # no forward hook saw the last step: another press had it
        if self._open:
            raise ValueError("KvevictPress: layers %s did not run the last step's hook"
                             % sorted(self._open))
        return held == 0 and s.state is not None

    def _check_batch(self, keys: Any) -> None:
        if keys is not None and keys.shape[0] != 1:
            raise ValueError("KvevictPress: batch size %d: one sequence at a time (a padded "
                             "batch would pin its pad tokens as prompt)" % keys.shape[0])

    def _held(self, cache: Any, l: int) -> Tuple[Any, Any]:
        layer = cache.layers[l] if l < len(cache.layers) else None
        if layer is None or not getattr(layer, "is_initialized", False) or layer.keys is None:
            return None, None
        return layer.keys, layer.values

    def _mine(self, l: int) -> int:
        mine = self.schedule.layers[l]
        return mine.keys.shape[-2] if mine.is_initialized else 0

    def _changed(self, l: int, held: int) -> ValueError:
        return ValueError("KvevictPress: layer %d holds %d entries, the press kept %d: another "
                          "press or the caller changed the cache after KvevictPress's hook (in "
                          "a ComposedPress, put KvevictPress last)" % (l, held, self._mine(l)))

    def pre_hook(self, module: Any, args: Any, kwargs: dict) -> None:
        """Before a layer's attention. At layer 0 the step starts: a new
        sequence waits for the forward hook (it adopts what the cache holds
        then); a one-token step appends now, and when its round ran, every
        layer's evicted entries leave the cache before its attention."""
        owners = [getattr(h, "__self__", None) for h in module._forward_hooks.values()]
        if not any(_holds(o, self) for o in owners):  # the press's context has ended
            h = self._hooks.pop(id(module), None)
            if h is not None:
                h.remove()
            return
        cache = kwargs.get("past_key_values")
        q = kwargs["hidden_states"].shape[1]
        if cache is None or not any(self._routes_here(o, kwargs, q) for o in owners):
            return
        l = module.layer_idx
        keys, values = self._held(cache, l)
        self._check_batch(keys)
        held = 0 if keys is None else keys.shape[-2]
        if l == 0:
            if self._new_sequence(cache, held):
                self._step = "fresh"
            elif q == 1:
                self._step = "pre"
                self._open = set(range(self.schedule.n_layers))
                self.schedule._begin(q)
            else:
                self._step = "post"  # several tokens: the round after the attention
        if self._step != "pre":
            return
        s, mine = self.schedule, self.schedule.layers[l]
        if held != self._mine(l):
            raise self._changed(l, held)
        if s._moved and not s._deferred and s._table is not None and keys is not None:
            table = s._table[l]                               # [kv_heads, n_valid]
            old = s.n_tokens - q                              # the step's positions start here
            keep = table[:, :table.shape[1] - q]              # held after the round (not new)
            if bool((table[:, table.shape[1] - q:] < old).any()):
                keep = torch.stack([t[t < old] for t in table])
            inv = torch.full((s.kv_heads, old), -1, dtype=torch.int64)
            inv.scatter_(1, mine.positions, torch.arange(held).expand_as(mine.positions))
            idx = inv.gather(1, keep)[None, :, :, None].to(keys.device)
            layer = cache.layers[l]
            layer.keys = keys.gather(2, idx.expand(1, -1, -1, keys.shape[3]))
            layer.values = values.gather(2, idx.expand(1, -1, -1, values.shape[3]))
            mine.keys, mine.values, mine.positions = layer.keys, layer.values, keep

    def forward_hook(self, module: Any, input: Any, kwargs: dict, output: Any) -> Any:
        """After a layer's attention: its step's entries stored in the keep-set's
        slot order (kvevict.hf.KvevictCache._store), written back to the cache;
        a step that did not run its round before the attention runs it here."""
        cache = kwargs["past_key_values"]
        q = kwargs["hidden_states"].shape[1]
        owners = [o for o in (getattr(h, "__self__", None)
                              for h in module._forward_hooks.values()) if _holds(o, self)]
        if owners and not any(self._routes_here(o, kwargs, q) for o in owners):
            return output  # PrefillDecodingPress's prefill, which it gives to this press
        l = module.layer_idx
        layer = cache.layers[l]
        keys, values = layer.keys, layer.values
        self._check_batch(keys)
        if l == 0:
            if self._step is None:  # no pre-hook ran (a wrapper's own hooks)
                self._step = "fresh" if self._new_sequence(cache, keys.shape[-2] - q) else "post"
            if self._step == "fresh":
                self._adopt = keys.shape[-2]
                if self._config is None:
                    raise ValueError("KvevictPress: post_init_from_model(model) was not called")
                self.schedule = KvevictCache(
                    self._config, budget=self.budget_for(self._adopt), window=self.window,
                    interval=self.compression_interval, seed=self.seed, seq_id=self.seq_id,
                    pin_prompt=self.pin_prompt, scorer=self.scorer, stats=self.stats)
                self._cache = weakref.ref(cache)
                self._open = set(range(self.schedule.n_layers))
                self.schedule._begin(self._adopt, 1, keys.device)
            elif self._step == "post":
                if keys.shape[-2] - q != self._mine(0):
                    raise self._changed(0, keys.shape[-2] - q)
                self._open = set(range(self.schedule.n_layers))
                self.schedule._begin(q)
        if self.schedule is None or l not in self._open:
            raise ValueError("KvevictPress: layer %d's hook ran outside a step (layer 0 runs "
                             "first)" % l)
        mine = self.schedule.layers[l]
        if not mine.is_initialized:
            mine.lazy_initialization(keys[:, :, :0], values[:, :, :0])
        step = self._adopt if self._step == "fresh" else q
        if keys.shape[-2] != mine.keys.shape[-2] + step:
            raise ValueError("KvevictPress: layer %d holds %d entries, the press kept %d and "
                             "the step adds %d: another press changed it (every layer must "
                             "hold the same count)" % (l, keys.shape[-2], mine.keys.shape[-2],
                                                       step))
        self.schedule._store(mine, keys, values)
        layer.keys, layer.values = mine.keys, mine.values  # the same tensors: no copy held
        self._open.discard(l)
        if not self._open:
            self._step = None
        return output


def kvpress_registry() -> dict:
    """Entries for kvpress's evaluation/evaluate_registry.py PRESS_REGISTRY
    (docs/INTEGRATION.md): evaluate.py sets their target_size and
    compression_interval from its --target_size / --compression_interval as
    for any DecodingPress."""
    return {
        "kvevict_random": KvevictPress(),
        "kvevict_random_p0": KvevictPress(pin_prompt=False),
        "kvevict_knorm": KvevictPress(scorer="knorm"),
    }
