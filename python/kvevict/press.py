"""kvevict as a kvpress press (kvpress 0.5.x): ``KvevictPress``.

    from kvevict.press import KvevictPress
    with KvevictPress(budget=256, window=32, interval=32)(model):
        out = model.generate(input_ids, max_new_tokens=512)

During decoding (and over the prompt), each attention layer's hooks keep
(a round before the step's attention, as kvevict.hf.KvevictCache orders a
step), per KV head, kvevict's keep-set (kvevict.hf.KvevictCache's schedule:
the prompt pinned or not, the last W, a round of r evictions when a head
holds C = max(B, P + W) + r, random or K-norm / TriAttention scored), and
writes the compacted keys and values back into the model's DynamicCache:
the evicted entries leave its tensors, so the memory held follows the
budget (kvpress's per-head AdaKV masks entries and frees none). The
keep-sets are kvevict's for the same (seed, seq_id, layer, head, position,
round): ``press.digest()`` after a run is docs/SPEC.md's digest.
"""

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Optional, Tuple

import torch
from kvpress.presses.base_press import BasePress

from .hf import KvevictCache, check_config


@dataclass
class KvevictPress(BasePress):
    """budget (B), window (W), interval (r), seed, seq_id, pin_prompt,
    scorer (None / "random", "knorm", "triattention") and stats: as
    kvevict.hf.KvevictCache takes them. One sequence at a time (batch 1)."""

    budget: int = 256
    window: int = 32
    interval: int = 32
    seed: int = 0
    seq_id: int = 0
    pin_prompt: bool = True
    scorer: Optional[str] = None
    stats: Optional[Tuple[Any, Any]] = None
    schedule: Optional[KvevictCache] = field(default=None, init=False, repr=False)

    def post_init_from_model(self, model: Any) -> None:
        check_config(model.config)
        self._config = model.config
        self.schedule = self._new_schedule()

    def _new_schedule(self) -> KvevictCache:
        return KvevictCache(self._config, budget=self.budget, window=self.window,
                            interval=self.interval, seed=self.seed, seq_id=self.seq_id,
                            pin_prompt=self.pin_prompt, scorer=self.scorer, stats=self.stats)

    def _held(self, cache: Any, l: int) -> Tuple[Any, Any]:
        layer = cache.layers[l] if l < len(cache.layers) else None
        if layer is None or not getattr(layer, "is_initialized", False) or layer.keys is None:
            return None, None
        return layer.keys, layer.values

    def pre_hook(self, module: Any, args: Any, kwargs: dict) -> None:
        """Before a layer's attention: at layer 0 the step's append (its round
        first, as the C state orders a step); at every layer, when a round ran,
        the entries it evicted leave the cache, so the step's attention reads
        the held set after the round plus the step's tokens."""
        cache = kwargs.get("past_key_values")
        if cache is None:
            return
        q = kwargs["hidden_states"].shape[1]
        l = module.layer_idx
        keys, values = self._held(cache, l)
        held = 0 if keys is None else keys.shape[-2]
        if keys is not None and keys.shape[0] != 1:
            raise ValueError("KvevictPress: batch size %d: one sequence at a time (a padded "
                             "batch would pin its pad tokens as prompt)" % keys.shape[0])
        s = self.schedule
        if l == 0 and s.state is not None and held == 0:
            s = self.schedule = self._new_schedule()  # a new sequence in the same context
        mine = s.layers[l]
        if held != (mine.keys.shape[-2] if mine.is_initialized else 0):
            raise ValueError("KvevictPress: layer %d holds %d entries, the press kept %d: "
                             "another press or cache changed it"
                             % (l, held, mine.keys.shape[-2] if mine.is_initialized else 0))
        if l == 0:
            s._begin(q)
        if s._moved and s._table is not None and keys is not None:
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
        slot order (kvevict.hf.KvevictCache._store), written back to the cache."""
        cache = kwargs["past_key_values"]
        q = kwargs["hidden_states"].shape[1]
        l = module.layer_idx
        layer = cache.layers[l]
        keys, values = layer.keys, layer.values
        mine = self.schedule.layers[l]
        if not mine.is_initialized:
            mine.lazy_initialization(keys[:, :, :0], values[:, :, :0])
        if keys.shape[-2] != mine.keys.shape[-2] + q:
            raise ValueError("KvevictPress: layer %d holds %d entries, the press kept %d and "
                             "the step adds %d: another press or cache changed it"
                             % (l, keys.shape[-2], mine.keys.shape[-2], q))
        self.schedule._store(mine, keys, values)
        layer.keys, layer.values = mine.keys, mine.values  # the same tensors: no copy held
        return output

    def digest(self) -> int:
        """docs/SPEC.md's digest of the positions the model's cache holds."""
        return self.schedule.digest()

    @contextmanager
    def __call__(self, model: Any):
        hooks = [layer.self_attn.register_forward_pre_hook(self.pre_hook, with_kwargs=True)
                 for layer in model.model.layers]
        try:
            with super().__call__(model):
                yield
        finally:
            for h in hooks:
                h.remove()
