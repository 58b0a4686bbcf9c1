"""The attention backends of the plugin: vLLM's CPU attention and its
FlashAttention with the cache write replaced, registered over CPU_ATTN and
FLASH_ATTN through vLLM's own registry (``register_backend``); FlashInfer's
lives in attention_flashinfer.py (it imports the flashinfer package). With
no planned step (the full arm, warm-up and profiling runs) each is vLLM's
backend unchanged; with one, a layer's new K/V go to the per-head slots the
kvevict state chose, after the round's moves: on the CPU through a
kve_cache_write descriptor kept per layer (_write; K transposed inside a
block, then V), on a GPU through torch.ops.kvevict.cache_write
(device_write)."""
import ctypes

import torch

from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend, CPUAttentionBackendImpl
from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend, FlashAttentionImpl

from .. import ops as kvevict_ops  # registers torch.ops.kvevict; a context per device
from .._lib import check, lib
from .._write import _describe_write
from . import step as _step


def kv_views(kv_cache: torch.Tensor):
    """K and V views [blocks, heads, block_size, head_size] of one layer's
    CPU cache [blocks, heads, block_size, 2 * head_size]: in each (block,
    head), K transposed ([head_size][block_size]), then V."""
    nb, h, bs, two_d = kv_cache.shape
    d = two_d // 2
    per_head, per_block = bs * two_d, h * bs * two_d
    off = kv_cache.storage_offset()
    k = kv_cache.as_strided((nb, h, bs, d), (per_block, per_head, 1, bs), off)
    v = kv_cache.as_strided((nb, h, bs, d), (per_block, per_head, d, 1), off + bs * d)
    return k, v


class _Writer:
    """One layer's kve_cache_write descriptor, described once through
    kvevict.cache_write's own checks and then patched per call: of a step,
    only the sources (this call's key and value), the token and row counts
    and the token rows change; the caches, the state's mapping and move
    buffers and the block table are the engine's persistent tensors."""

    def __init__(self, sig, d, views):
        self.sig, self.d, self.views = sig, d, views


def _write(st, l, key, value, k_cache, v_cache) -> None:
    """A layer's cache write (the CPU): its descriptor kept in st.writers,
    rebuilt when a tensor it points into changes."""
    n = st.n_tokens
    sig = (k_cache.data_ptr(), key.stride(), value.stride(), key.dtype, st.block_table.data_ptr(),
           st.block_table.stride(0))
    w = st.writers.get(l)
    mv = None
    if w is None or w.sig != sig:
        mv = st.state.layer_moves(st.buf, l)
        d, views = _describe_write(kvevict_ops.context_for(key.device), [key[:n], value[:n]],
                                   [k_cache, v_cache], st.state.layer_slots(st.buf, l),
                                   st.token_row, "hnd", st.block_table, None, None, None,
                                   "auto", None, False, mv["moves"], mv["n_moves"], None, None)
        w = st.writers[l] = _Writer(sig, d, views)
    d = w.d
    d.n_tokens, d.pages.n_rows, d.n_move_rows = n, st.n_rows, st.n_rows
    d.src[0], d.src[1] = key.data_ptr(), value.data_ptr()
    d.token_row = st.token_row.data_ptr()
    check(lib.kve_cache_write(kvevict_ops.context_for(key.device).handle, ctypes.byref(d)),
          "kve_cache_write")


class KvevictWrites:
    """The mark of the plugin's attention impls (the runner refuses a layer
    whose impl does not write through kvevict)."""


def device_write(st, layer, key, value, kv_cache, head_size: int) -> None:
    """A layer's write on a GPU: vLLM 0.32's FlashAttention and FlashInfer
    layer cache [blocks, heads, block_size, 2 * head_size] (as vLLM views it;
    its physical order HND or NHD, the strides say which) holds K then V in
    the last dim; the round's moves and the new tokens go through
    torch.ops.kvevict.cache_write on the cache's device."""
    l = st.layer_index[layer.layer_name]
    n = st.n_tokens
    mv = st.state.layer_moves(st.buf, l)
    torch.ops.kvevict.cache_write(key[:n], value[:n], kv_cache[..., :head_size],
                                  kv_cache[..., head_size:], st.state.layer_slots(st.buf, l),
                                  st.token_row, st.block_table, "hnd", "auto", None, None,
                                  moves=mv["moves"], n_moves=mv["n_moves"])


class KvevictCPUAttentionImpl(KvevictWrites, CPUAttentionBackendImpl):
    def do_kv_cache_update(self, layer, key, value, kv_cache, slot_mapping) -> None:
        st = _step.current
        if st is None or self.attn_type != "decoder":
            return super().do_kv_cache_update(layer, key, value, kv_cache, slot_mapping)
        isa = getattr(layer, "isa", "vec")
        if isa not in ("vec", "vec16"):
            raise RuntimeError("kvevict: vLLM's CPU attention chose ISA %r, whose K block "
                               "layout the plugin does not address (vec and vec16 only; "
                               "AMX packs bf16 K its own way: use float32 or float16)" % isa)
        k_cache, v_cache = kv_views(kv_cache)
        _write(st, st.layer_index[layer.layer_name], key, value, k_cache, v_cache)


class KvevictCPUAttentionBackend(CPUAttentionBackend):
    @staticmethod
    def get_impl_cls():
        return KvevictCPUAttentionImpl


class KvevictFlashAttentionImpl(KvevictWrites, FlashAttentionImpl):
    """FlashAttention (a GPU): the write through device_write (written for
    the GPU and checked on CPU tensors, not yet run on one)."""

    def do_kv_cache_update(self, layer, key, value, kv_cache, slot_mapping) -> None:
        st = _step.current
        if st is None or self.attn_type != "decoder":
            return super().do_kv_cache_update(layer, key, value, kv_cache, slot_mapping)
        device_write(st, layer, key, value, kv_cache, self.head_size)


class KvevictFlashAttentionBackend(FlashAttentionBackend):
    @staticmethod
    def get_impl_cls():
        return KvevictFlashAttentionImpl
