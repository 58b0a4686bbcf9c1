"""The plugin's scheduler, handed to vLLM by its own option
(``scheduler_cls``): vLLM's scheduler whose block allocation stops at what
a request's kvevict capacity needs. A request never holds more than
ceil(C / block_size) blocks, C = max(B, P + W) + r its capacity (P its
pinned prompt): every slot the state uses is below C, so the blocks past it
would never be written. vLLM's own manager does the allocation; it is asked
for a request seen as holding at most C tokens (its computed tokens counted
down so that computed + new = C), so nothing of vLLM is changed."""
from typing import Any

from vllm.v1.core.sched.scheduler import Scheduler

import kvevict

from . import config as _config


class _Capped:
    """A request as the block allocator should see it: at most @cap tokens."""

    def __init__(self, request: Any, computed: int, cap: int):
        self._r, self.num_computed_tokens = request, computed
        self.num_tokens = min(request.num_tokens, cap)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._r, name)


class CappedBlocks:
    """vLLM's KV cache manager, its allocate_slots capped per request at the
    blocks of the request's capacity; everything else is the manager's."""

    def __init__(self, manager: Any, cfg: _config.PluginConfig, max_model_len: int):
        self._m, self._cfg, self._caps = manager, cfg, {}
        self._max_model_len = max_model_len

    def __getattr__(self, name: str) -> Any:
        return getattr(self._m, name)

    def capacity(self, request: Any) -> int:
        c = self._caps.get(request.request_id)
        if c is None:
            pinned = _config.pinned_prompt(self._cfg, request.sampling_params,
                                           request.num_prompt_tokens, self._max_model_len)
            c = self._caps[request.request_id] = kvevict.capacity(
                pinned, budget=self._cfg.budget, window=self._cfg.window,
                interval=self._cfg.interval)
        return c

    def allocate_slots(self, request: Any, num_new_tokens: int, *args: Any, **kwargs: Any):
        cap = self.capacity(request)
        ahead = kwargs.get("num_lookahead_tokens", 0)
        if request.num_computed_tokens + num_new_tokens + ahead > cap:
            new = min(num_new_tokens, max(cap - ahead, 1))
            request = _Capped(request, max(cap - new - ahead, 0), cap)
            num_new_tokens = new
        return self._m.allocate_slots(request, num_new_tokens, *args, **kwargs)

    def free(self, request: Any) -> None:
        self._caps.pop(request.request_id, None)
        return self._m.free(request)


def chunk_end(start: int, cap: int, interval: int) -> int:
    """Where a chunk of tokens starting at token @start must end at the
    latest: the next round boundary. Rounds fall on tokens C, C + r, C + 2r,
    ... (the token that finds the heads full); a chunk holding one only as
    its first token attends, token by token, to the same positions as one
    token a step did, so replaying a history in such chunks (a resumed
    request, a long unpinned prompt) reproduces every round and every
    attention exactly."""
    if start < cap:
        return cap
    return cap + ((start - cap) // interval + 1) * interval


class KvevictScheduler(Scheduler):
    def __init__(self, vllm_config: Any, *args: Any, **kwargs: Any):
        super().__init__(vllm_config, *args, **kwargs)
        cfg = _config.parse(vllm_config.additional_config)
        _config.check_engine(cfg, vllm_config)
        self.kve_cfg = cfg
        if cfg.evicts:
            self.kv_cache_manager = CappedBlocks(self.kv_cache_manager, cfg,
                                                 vllm_config.model_config.max_model_len)
            # vLLM's hook for clipping a prefill chunk (its Mamba alignment:
            # the model has no Mamba layers, check_engine refused them)
            self.need_mamba_block_aligned_split = True

    def add_request(self, request: Any) -> None:
        if self.kve_cfg.evicts:  # a bad per-request arm refused before it is scheduled
            _config.pinned_prompt(self.kve_cfg, request.sampling_params,
                                  request.num_prompt_tokens, 0)
        return super().add_request(request)

    def _mamba_block_aligned_split(self, request: Any, num_new_tokens: int,
                                   num_new_local_computed_tokens: int = 0,
                                   num_external_computed_tokens: int = 0) -> int:
        if not self.kve_cfg.evicts:
            return super()._mamba_block_aligned_split(
                request, num_new_tokens, num_new_local_computed_tokens,
                num_external_computed_tokens)
        start = (request.num_computed_tokens + num_new_local_computed_tokens +
                 num_external_computed_tokens)
        cap = self.kv_cache_manager.capacity(request)
        return max(1, min(num_new_tokens, chunk_end(start, cap, self.kve_cfg.interval) - start))
