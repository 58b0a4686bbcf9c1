"""The free functions: capacity (the schedule's slots per head), and evict and
compact, the low-level calls of engines that compact instead of reusing slots."""

import ctypes
from typing import Any, Optional, Sequence, Tuple

import numpy as np

from . import _arrays, _lib
from ._context import Context, as_context
from ._lib import MAX_CACHES, SCORED, check, lib


def capacity(prompt_len: int, *, budget: int, window: int = 64, interval: int = 64) -> int:
    """Slots per head a sequence uses under the schedule: max(B, P + W) + r."""
    u32 = _arrays.u32
    s = _lib.Schedule(0, 0, u32("budget", budget), u32("window", window),
                      u32("interval", interval))
    out = ctypes.c_uint32()
    check(lib.kve_schedule_capacity(ctypes.byref(s), u32("prompt_len", prompt_len),
                                    ctypes.byref(out)),
          "kve_schedule_capacity")
    return out.value


def _rows_view(x: Any, name: str, dtype: str, const: bool) -> _arrays.View:
    """A 4-D [seqs, layers, heads, width] array whose head rows are evenly
    spaced (one row stride, what the library takes), none broadcast (const:
    the library only reads it, see View)."""
    v = _arrays.View(x, name, dtype, 4, const)
    s, l, h, width = v.shape
    st = v.strides
    if min(v.shape) == 0:
        return v  # nothing to index: the library returns at once
    if (width > 1 and st[3] != v.itemsize) or st[1] != h * st[2] or st[0] != l * st[1]:
        raise ValueError("%s: not contiguous: rows must be evenly spaced (strides %s, shape %s)%s"
                         % (name, st, v.shape, v.copy_hint()))
    v.no_broadcast()
    return v


def _batch_views(ctx: Context, slot_pos: Any, n_slots: Optional[int], const: bool):
    v = _rows_view(slot_pos, "slot_pos", "int32", const)
    s, l, h, width = v.shape
    if n_slots is None:
        n_slots = width
    n_slots = _arrays.u32("n_slots", n_slots)
    if n_slots > width:
        raise ValueError("n_slots = %d: slot_pos holds %d slots a head (shape %s)"
                         % (n_slots, width, v.shape))
    stride = v.strides[2] // 4 if h > 1 or l > 1 or s > 1 else width
    return v, s, l, h, n_slots, stride


def evict(ctx: Context, slot_pos: Any, seqs: Sequence[Tuple[int, int, int]], *, seed: int,
          budget: int, window: int, flags: int = 0, layer_offset: int = 0,
          head_offset: int = 0, n_slots: Optional[int] = None,
          scores: Any = None) -> Tuple[Any, Any]:
    """One eviction (kve_evict) of slot_pos int32 [seqs, layers, heads, slots].

    scores: float32 [seqs, layers, heads, >= n_slots] selects by score
    instead of keys (sets SCORED; docs/SPEC.md "Scored selection").

    seqs: (seq_id, prompt_len, round) per sequence. Returns (evicted, n_evicted):
    evicted int32 [seqs, layers, heads, max(1, n_slots - budget)], ascending
    slots; n_evicted int32 [seqs, layers, heads].
    """
    as_context(ctx, "evict")
    u32 = _arrays.u32
    seed, budget, window = _arrays.u64("seed", seed), u32("budget", budget), u32("window", window)
    flags, layer_offset = u32("flags", flags), u32("layer_offset", layer_offset)
    head_offset = u32("head_offset", head_offset)
    v, s, l, h, n, stride = _batch_views(ctx, slot_pos, n_slots, True)
    like = v.torch
    if seqs is None:
        raise _lib.ArgumentError("seqs: expected (seq_id, prompt_len, round) for each of %d "
                                 "sequences, got None" % s, None, "evict")
    if len(seqs) != s:
        raise ValueError("seqs: %d tuples (seq_id, prompt_len, round) for %d sequences "
                         "(slot_pos shape %s)" % (len(seqs), s, v.shape))
    seq_arr = np.zeros(s, dtype=[("seq_id", "<u8"), ("prompt_len", "<u4"), ("round", "<u4")])
    for i, t in enumerate(seqs):
        if len(t) != 3:
            raise ValueError("seqs[%d] = %r: expected (seq_id, prompt_len, round)" % (i, t))
        seq_arr[i] = (_arrays.u64("seqs[%d].seq_id" % i, t[0]),
                      u32("seqs[%d].prompt_len" % i, t[1]), u32("seqs[%d].round" % i, t[2]))
    dev_seqs = _arrays.to_device(seq_arr, ctx.backend, ctx.device)
    ev_stride = max(1, n - budget)
    evicted = ctx._empty((s, l, h, ev_stride), "int32", like)
    counts = ctx._empty((2, s, l, h), "int32", like)
    ctx._prepare([v, _arrays.View(evicted, "evicted"), _arrays.View(counts, "counts")])
    sv = _arrays.View(dev_seqs, "seqs") if ctx.backend != "cpu" else None
    b = _lib.Batch(seed, flags, s, sv.ptr if sv else dev_seqs.ctypes.data, l, h, layer_offset,
                   head_offset, n, budget, window, v.ptr, stride)
    if scores is not None:
        sc = _arrays.View(scores, "scores", "float32", 4, const=True)
        sst = sc.strides
        if sc.shape[:3] != (s, l, h) or sst[3] != 4 or sst[1] != h * sst[2] or sst[0] != l * sst[1]:
            raise ValueError("scores: shape %s / strides %s: expected evenly spaced, contiguous "
                             "rows of (%d, %d, %d, >= n_slots)%s"
                             % (sc.shape, sst, s, l, h, sc.copy_hint()))
        sc.no_broadcast()
        sc.expect((s, l, h, _arrays.at_least(n)), why="n_slots = %d" % n)
        ctx._prepare([sc])
        b.flags |= SCORED
        b.scores, b.scores_stride = sc.ptr, sst[2] // 4
    cv = _arrays.View(counts, "counts")
    o = _lib.EvictOut(_arrays.View(evicted, "evicted").ptr, ev_stride, cv.ptr,
                      cv.ptr + s * l * h * 4, None, None, 0)
    check(lib.kve_evict(ctx.handle, ctypes.byref(b), ctypes.byref(o), None, 0), "kve_evict")
    return evicted, counts[0]


def compact(ctx: Context, slot_pos: Any, evicted: Any, n_evicted: Any, caches: Sequence[Any],
            n_slots: Optional[int] = None) -> None:
    """Move kept entries to the front of each head, in place (kve_compact).

    slot_pos as for evict (updated); evicted, n_evicted from evict; caches:
    [seqs, layers, heads, >= n_slots, *entry] each, any non-zero strides, entry
    contiguous, every cache of one entry size (kve_compact_desc has one:
    compact caches of other sizes in calls of their own).
    """
    as_context(ctx, "compact")
    v, s, l, h, n, stride = _batch_views(ctx, slot_pos, n_slots, False)
    at_least = _arrays.at_least
    ev = _rows_view(evicted, "evicted", "int32", True)
    ev.expect((s, l, h, None), why="one row per head of slot_pos %s" % (v.shape,))
    ne = _arrays.View(n_evicted, "n_evicted", "int32", 3, const=True)
    ne.contiguous()
    ne.expect((s, l, h), why="one count per head of slot_pos %s" % (v.shape,))
    if caches is None or not 1 <= len(caches) <= MAX_CACHES:
        raise ValueError("caches: 1..%d, got %s" % (MAX_CACHES, None if caches is None
                                                    else len(caches)))
    cv = [_arrays.View(c, "caches[%d]" % i) for i, c in enumerate(caches)]
    entry = None
    for c in cv:
        if len(c.shape) < 4:
            raise ValueError("%s: %d dimensions %s, expected [seqs, layers, heads, slots, *entry]"
                             % (c.name, len(c.shape), c.shape))
        c.expect((s, l, h, at_least(n)) + (None,) * (len(c.shape) - 4),
                 why="[seqs, layers, heads, >= n_slots = %d, *entry] of slot_pos %s"
                 % (n, v.shape))
        c.no_broadcast()
        size = c.dense_tail(4)
        if entry is not None and size != entry:
            # kve_compact_desc has one entry size for every cache
            raise ValueError("%s: entry of %d bytes (shape %s), caches[0]'s is %d: compact "
                             "caches of one entry size per call" % (c.name, size, c.shape, entry))
        entry = size
    ctx._prepare([v, ev, ne] + cv)
    if not ev.cuda and ev.shape[3] < n:
        # each head reads n_evicted of its row's entries: they must lie in the row
        counts = np.array(_arrays.carray_view(ne.ptr, s * l * h, ctypes.c_int32))
        worst = int(counts.max())
        if worst > ev.shape[3]:
            raise ValueError("evicted: shape %s, but n_evicted names up to %d slots a head"
                             % (ev.shape, worst))
    d = _lib.CompactDesc()
    d.n_seqs, d.n_layers, d.n_heads, d.n_slots = s, l, h, n
    d.slot_pos, d.slot_pos_stride = v.ptr, stride
    ev_stride = ev.strides[2] // 4 if h > 1 or l > 1 or s > 1 else ev.shape[3]
    d.evicted, d.evicted_stride, d.n_evicted = ev.ptr, ev_stride, ne.ptr
    d.entry_bytes, d.n_caches = entry, len(cv)
    for i, c in enumerate(cv):
        d.src[i] = _lib.CacheView(c.ptr, *c.strides[:4])
    check(lib.kve_compact(ctx.handle, ctypes.byref(d)), "kve_compact")
