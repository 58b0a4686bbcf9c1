"""kvevict: random per-head KV-cache eviction (the Random Attention paper),
with keep-sets bit-identical on every backend.

A ctypes binding of ``libkvevict`` (see ``_lib`` for how the library is
found), taking numpy arrays and PyTorch tensors: CPU arrays with the CPU
backend, CUDA tensors (on PyTorch's current stream) with a GPU backend.

The engine-facing pieces::

    ctx = kvevict.Context("cpu")
    state = kvevict.State(ctx, max_seqs=8, n_layers=4, n_heads=4, budget=48,
                          window=8, interval=8, max_slots=64)
    state.admit(row=0, seq_id=1234, prompt_len=16)
    step = state.step_buffers(max_tokens=256, max_rows=8, max_new=16)  # kept for the run
    state.append([0], [16], out=step)           # mapping, move lists into step
    kvevict.cache_write(ctx, [k, v], [k_cache, v_cache], state.layer_slots(step, 0),
                        token_row, block_table=block_table, **state.layer_moves(step, 0))

``State.append_device(rows, n_new, max_new, out=step)`` is the append of a
step captured in a CUDA graph (rows and n_new on the device; see
docs/INTEGRATION.md "CUDA graphs"); a scored state's step scores its due
rows first with ``State.score_device(rows, n_new, layer, keys, scores)``
(``state_score_device``) per layer, then passes ``scores=`` to it.
``cache_write`` converts element types (float32 / float16 / bfloat16, fp8
caches with vLLM's scales) and takes flat slots too; ``import kvevict.ops`` registers the writes as torch.library
operators (``torch.ops.kvevict.*``).
``evict`` and ``compact`` are the low-level calls of engines that compact
instead of reusing slots. docs/INTEGRATION.md has the whole worked example.
"""

# The package is split into modules (each re-exported here): _errors
# (KvevictError, ArgumentError), _lib (loading the library, its C types),
# _arrays (argument and shape checks), _context (handles, Context), _state
# (State, SeqInfo, Step), _evict (capacity, evict, compact), _write
# (cache_write), _score (scoring).

from ._lib import (VERSION, KvevictError, ArgumentError, LIBRARY_PATH, PERSISTENT, SHARED_HEADS,
                   SHARED_LAYERS, SCORED)
from ._write import cache_write
from ._score import (score, state_score, state_score_device, triattention_stats,
                     write_triattention_stats, read_triattention_stats, load_triattention_stats,
                     default_offsets)
from ._context import _Owner, Context  # noqa: F401  (_Owner: tests check handle ownership)
from ._state import SeqInfo, Step, State
from ._evict import capacity, evict, compact

__all__ = ["Context", "State", "SeqInfo", "Step", "KvevictError", "ArgumentError", "cache_write",
           "capacity", "evict", "compact", "PERSISTENT", "SHARED_HEADS", "SHARED_LAYERS", "SCORED",
           "VERSION", "LIBRARY_PATH", "score", "state_score", "state_score_device",
           "triattention_stats", "write_triattention_stats",
           "read_triattention_stats", "load_triattention_stats", "default_offsets"]
