"""vLLM's FlashInfer backend with the cache write replaced (a GPU), apart
from attention.py because vLLM's FlashInfer module imports the flashinfer
package, which a CPU install has not: vLLM imports this module only when it
resolves the FLASHINFER backend, registered by path in register()."""
from vllm.v1.attention.backends.flashinfer import FlashInferBackend, FlashInferImpl

from . import step as _step
from .attention import KvevictWrites, device_write


class KvevictFlashInferImpl(KvevictWrites, FlashInferImpl):
    """FlashInfer (a GPU): the layer cache as FlashAttention's, [blocks,
    heads, block_size, 2 * head_size] as vLLM views it (HND or NHD pages),
    written through device_write (not yet run on a GPU). A layer sharing an
    earlier layer's cache writes nothing, as vLLM's own write."""

    def do_kv_cache_update(self, layer, key, value, kv_cache, slot_mapping) -> None:
        st = _step.current
        if st is None or self.attn_type != "decoder":
            return super().do_kv_cache_update(layer, key, value, kv_cache, slot_mapping)
        if self.kv_sharing_target_layer_name is not None:
            return None
        if getattr(self, "nvfp4_fa2", False) or getattr(self, "is_kvcache_nvfp4", False):
            raise RuntimeError("kvevict: FlashInfer's NVFP4 KV cache is not addressed by the "
                               "plugin (kv_cache_dtype 'auto' only)")
        device_write(st, layer, key, value, kv_cache, self.head_size)


class KvevictFlashInferBackend(FlashInferBackend):
    @staticmethod
    def get_impl_cls():
        return KvevictFlashInferImpl
