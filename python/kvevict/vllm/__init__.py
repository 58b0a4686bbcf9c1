"""kvevict inside vLLM, through vLLM's own doors (no fork, no patching).

- ``register()``: the ``vllm.general_plugins`` entry point. It registers
  the plugin's attention backends over CPU_ATTN, FLASH_ATTN and FLASHINFER
  (vLLM's backend registry); with no kvevict step planned each is vLLM's.
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
GPU_WORKER_CLS = "kvevict.vllm.runner.KvevictGPUWorker"
SCHEDULER_CLS = "kvevict.vllm.scheduler.KvevictScheduler"
BACKEND_CLS = "kvevict.vllm.attention.KvevictCPUAttentionBackend"
GPU_BACKEND_CLS = "kvevict.vllm.attention.KvevictFlashAttentionBackend"
FLASHINFER_BACKEND_CLS = "kvevict.vllm.attention_flashinfer.KvevictFlashInferBackend"


def register() -> None:
    """vLLM's general plugin hook: put the plugin's backends in the registry
    (each is vLLM's own while no kvevict step is planned)."""
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend
    register_backend(AttentionBackendEnum.CPU_ATTN, BACKEND_CLS)
    register_backend(AttentionBackendEnum.FLASH_ATTN, GPU_BACKEND_CLS)
    register_backend(AttentionBackendEnum.FLASHINFER, FLASHINFER_BACKEND_CLS)


def engine_args(arm: str = "random", device: str = "cpu", **settings: Any) -> Dict[str, Any]:
    """vllm.LLM keyword arguments running the plugin with @arm and settings
    (budget, window, interval, seed, ...), checked here first; device "cpu"
    or "cuda" (FlashAttention: written, not yet run on a GPU)."""
    from . import config
    conf = {"arm": arm, **settings}
    config.parse({"kvevict": conf})
    if device not in ("cpu", "cuda"):
        raise config.ConfigError("device = %r: expected 'cpu' or 'cuda'" % (device,))
    return {"worker_cls": WORKER_CLS if device == "cpu" else GPU_WORKER_CLS, "scheduler_cls": SCHEDULER_CLS, "additional_config": {"kvevict": conf},
            "enable_prefix_caching": False, "async_scheduling": False}
