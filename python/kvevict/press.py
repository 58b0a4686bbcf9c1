"""kvevict as a kvpress press (kvpress 0.5.x): ``KvevictPress``.

    from kvevict.press import KvevictPress
    with KvevictPress(budget=256, window=32, interval=32)(model):
        out = model.generate(input_ids, max_new_tokens=512)

During decoding (and over the prompt), each attention layer's forward hook
keeps, per KV head, kvevict's keep-set (kvevict.hf.KvevictCache's schedule:
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

    def forward_hook(self, module: Any, input: Any, kwargs: dict, output: Any) -> Any:
        cache = kwargs["past_key_values"]
        q = kwargs["hidden_states"].shape[1]
        l = module.layer_idx
        layer = cache.layers[l]
        keys, values = layer.keys, layer.values
        if keys.shape[0] != 1:
            raise ValueError("KvevictPress: batch size %d: one sequence at a time (a padded "
                             "batch would pin its pad tokens as prompt)" % keys.shape[0])
        s = self.schedule
        if l == 0 and s.state is not None and keys.shape[-2] == q:
            s = self.schedule = self._new_schedule()  # a new sequence in the same context
        mine = s.layers[l]
        if not mine.is_initialized:
            mine.lazy_initialization(keys[:, :, :0], values[:, :, :0])
        if keys.shape[-2] != mine.keys.shape[-2] + q:
            raise ValueError("KvevictPress: layer %d holds %d entries, the press kept %d and "
                             "the step adds %d: another press or cache changed it"
                             % (l, keys.shape[-2], mine.keys.shape[-2], q))
        if l == 0:
            s._begin(q)
        s._store(mine, keys, values)
        layer.keys, layer.values = mine.keys, mine.values  # the same tensors: no copy held
        return output

    def digest(self) -> int:
        """docs/SPEC.md's digest of the positions the model's cache holds."""
        return self.schedule.digest()

    @contextmanager
    def __call__(self, model: Any):
        with super().__call__(model):
            yield
