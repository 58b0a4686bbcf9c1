"""kvevict's cache writes as PyTorch operators: ``import kvevict.ops``
registers them in the ``kvevict`` namespace (torch.library), with CPU and
CUDA kernels and Meta implementations, so torch.jit.trace, make_fx and
fake-tensor tracing record ``torch.ops.kvevict.*`` calls rather than
opaque Python. Each call runs on a kvevict Context of the tensors' device
(one per thread and device, made on first use) and PyTorch's current stream.
Making a Context allocates and synchronizes, which a CUDA graph capture
cannot hold: call ``kvevict.ops.warm_up(device)`` on each thread that will
run the ops inside a capture, before it (an op whose thread has no Context
yet raises RuntimeError while its stream captures).

    torch.ops.kvevict.reshape_and_cache_flash(key, value, key_cache, value_cache,
                                               slot_mapping, kv_cache_dtype, k_scale, v_scale)
        vLLM's op: key/value [tokens, heads, head_size], caches [blocks,
        block_size, heads, head_size], slot_mapping int64 [tokens] (block *
        block_size + offset, -1 = padding), kv_cache_dtype "auto" or "fp8",
        "fp8_e4m3", "fp8_e5m2" (uint8 caches; stored = fp8(x / scale)),
        k_scale / v_scale float32 [1] or [heads].
    torch.ops.kvevict.append_paged_kv_cache(append_key, append_value, batch_indices,
                                             positions, k_cache, v_cache, kv_indices,
                                             kv_indptr, kv_last_page_len, kv_layout)
        FlashInfer's append: token i goes to request batch_indices[i] at
        position positions[i] (int32), through kv_indptr / kv_indices /
        kv_last_page_len; caches "NHD" [pages, page_size, heads, D] or "HND"
        [pages, heads, page_size, D] (views [:, 0] and [:, 1] of one
        [pages, 2, ...] tensor work).
    torch.ops.kvevict.cache_write(key, value, key_cache, value_cache, slots, token_row,
                                   block_table, layout, kv_cache_dtype, k_scale, v_scale,
                                   moves=None, n_moves=None, move_row=None)
        Slot reuse: per-head slots int64 [tokens, heads] from State.append,
        within each token's row of block_table; layout "nhd" or "hnd".
        Optional moves, n_moves, move_row (State.layer_moves, int32): a
        round's moves, run before the writes as in kvevict.cache_write.
"""

import threading
from typing import Optional

import torch

from . import Context
from ._write import cache_write as _cache_write

_local = threading.local()


def _capturing(device: torch.device) -> bool:
    """Whether torch's current stream of a GPU device captures a graph."""
    return device.type != "cpu" and torch.cuda.is_current_stream_capturing()


def _key(device: torch.device) -> tuple:
    if device.type != "cpu" and device.index is None:
        return (device.type, torch.cuda.current_device())
    return (device.type, device.index)


def context_for(device: torch.device) -> Context:
    """This thread's Context for a torch device (CPU, or a GPU by index)."""
    contexts = getattr(_local, "contexts", None)
    if contexts is None:
        contexts = _local.contexts = {}
    key = _key(device)
    ctx = contexts.get(key)
    if ctx is None:
        if _capturing(device):
            name = key[0] if key[1] is None else "%s:%d" % key
            raise RuntimeError(
                "kvevict.ops: the first op of this thread on %s runs while its stream captures "
                "a CUDA graph; making the thread's Context allocates and synchronizes, which "
                "breaks the capture: call kvevict.ops.warm_up(\"%s\") on this thread before "
                "capturing" % (name, name))
        if device.type == "cpu":
            ctx = Context("cpu")
        else:  # CUDA or HIP, whichever the library finds for torch's "cuda"
            ctx = Context("auto", device=key[1] or 0)
        contexts[key] = ctx
    return ctx


def warm_up(device) -> Context:
    """Make this thread's Context for @device (a torch.device or a string
    such as "cuda:0") now, outside any graph capture: its creation
    allocates and synchronizes. Call it on every thread that runs the ops
    inside a captured region, before capturing. Returns the Context."""
    return context_for(torch.device(device))


def _scales(kv_cache_dtype: str, k_scale: Optional[torch.Tensor],
            v_scale: Optional[torch.Tensor]):
    # vLLM passes scales with every dtype; only fp8 caches use them
    return [k_scale, v_scale] if kv_cache_dtype.startswith("fp8") else None


def _reshape_and_cache_flash(key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype,
                             k_scale, v_scale):
    _cache_write(context_for(key.device), [key, value], [key_cache, value_cache], slot_mapping,
                 layout="nhd", kv_cache_dtype=kv_cache_dtype,
                 scales=_scales(kv_cache_dtype, k_scale, v_scale))


def _append_paged_kv_cache(append_key, append_value, batch_indices, positions, k_cache,
                           v_cache, kv_indices, kv_indptr, kv_last_page_len, kv_layout):
    _cache_write(context_for(append_key.device), [append_key, append_value], [k_cache, v_cache],
                 positions.to(torch.int64), batch_indices, layout=kv_layout.lower(),
                 indptr=kv_indptr, indices=kv_indices, last_page_len=kv_last_page_len)


def _slot_reuse_write(key, value, key_cache, value_cache, slots, token_row, block_table, layout,
                      kv_cache_dtype, k_scale, v_scale, moves=None, n_moves=None, move_row=None):
    _cache_write(context_for(key.device), [key, value], [key_cache, value_cache], slots,
                 token_row, layout=layout, block_table=block_table,
                 kv_cache_dtype=kv_cache_dtype, scales=_scales(kv_cache_dtype, k_scale, v_scale),
                 moves=moves, n_moves=n_moves, move_row=move_row)


def _meta(*args):
    """The caches are written in place and nothing is returned: a traced
    graph needs only the call, so the Meta kernel checks ranks and stops."""
    for t in args[:4]:
        if t.dim() < 3:
            raise ValueError("kvevict op: tensors of 3+ dimensions expected, got %s"
                             % (tuple(t.shape),))


_SCHEMAS = {
    "reshape_and_cache_flash": (
        "reshape_and_cache_flash(Tensor key, Tensor value, Tensor(a!) key_cache, "
        "Tensor(b!) value_cache, Tensor slot_mapping, str kv_cache_dtype, Tensor? k_scale, "
        "Tensor? v_scale) -> ()", _reshape_and_cache_flash),
    "append_paged_kv_cache": (
        "append_paged_kv_cache(Tensor append_key, Tensor append_value, Tensor batch_indices, "
        "Tensor positions, Tensor(a!) k_cache, Tensor(b!) v_cache, Tensor kv_indices, "
        "Tensor kv_indptr, Tensor kv_last_page_len, str kv_layout) -> ()",
        _append_paged_kv_cache),
    "cache_write": (
        "cache_write(Tensor key, Tensor value, Tensor(a!) key_cache, Tensor(b!) value_cache, "
        "Tensor slots, Tensor token_row, Tensor block_table, str layout, str kv_cache_dtype, "
        "Tensor? k_scale, Tensor? v_scale, Tensor? moves=None, Tensor? n_moves=None, "
        "Tensor? move_row=None) -> ()", _slot_reuse_write),
}

# Kept for the process's life: the registrations live as long as the Library.
_LIB = torch.library.Library("kvevict", "DEF")
for _name, (_schema, _fn) in _SCHEMAS.items():
    _LIB.define(_schema)
    _LIB.impl(_name, _fn, "CPU")
    _LIB.impl(_name, _fn, "CUDA")
    _LIB.impl(_name, _meta, "Meta")
    # torch 1.13 has no autograd fallthrough for Meta: nothing here has a gradient
    _LIB.impl(_name, _meta, "AutogradMeta")

__all__ = ["context_for", "warm_up"]
