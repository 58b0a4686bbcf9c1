"""kvevict inside vLLM, through vLLM's own doors (no fork, no patching).

- ``register()``: the ``vllm.general_plugins`` entry point. It registers
  the plugin's CPU attention backend over CPU_ATTN (vLLM's backend
  registry); with no kvevict step planned that backend is vLLM's.
- ``worker_cls="kvevict.vllm.runner.KvevictCPUWorker"``: vLLM's CPU worker
  with the runner that plans each step's per-head slots.
- ``scheduler_cls="kvevict.vllm.scheduler.KvevictScheduler"``: vLLM's
  scheduler whose block allocation stops at a request's capacity.
- ``additional_config={"kvevict": {"arm": "random", "budget": B, "window":
  W, "interval": r, "seed": s}}``: the arm (config.py).

``engine_args(arm=..., budget=...)`` gives those keyword arguments for
``vllm.LLM(...)``; docs/INTEGRATION.md "vLLM plugin" has ``vllm serve``'s.
"""
from typing import Any, Dict

WORKER_CLS = "kvevict.vllm.runner.KvevictCPUWorker"
SCHEDULER_CLS = "kvevict.vllm.scheduler.KvevictScheduler"
BACKEND_CLS = "kvevict.vllm.attention.KvevictCPUAttentionBackend"


def register() -> None:
    """vLLM's general plugin hook: put the plugin's backend in the registry."""
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend
    register_backend(AttentionBackendEnum.CPU_ATTN, BACKEND_CLS)


def engine_args(arm: str = "random", **settings: Any) -> Dict[str, Any]:
    """vllm.LLM keyword arguments running the plugin with @arm and settings
    (budget, window, interval, seed), checked here first."""
    from . import config
    conf = {"arm": arm, **settings}
    config.parse({"kvevict": conf})
    return {"worker_cls": WORKER_CLS, "scheduler_cls": SCHEDULER_CLS, "additional_config": {"kvevict": conf},
            "enable_prefix_caching": False, "async_scheduling": False}
