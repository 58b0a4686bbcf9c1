"""The built-in scorers (kve_score, kve_state_score) and TriAttention's
calibration file (docs/SCORERS.md): statistics from pre-RoPE queries, the
writer, and readers in numpy and through the library."""

import ctypes
import struct
from typing import Any, Optional, Sequence, Tuple

import numpy as np

from . import _arrays, _lib, _write
from ._context import as_context
from ._lib import check, lib

SCORERS = {"knorm": 1, "triattention": 2}
ZNORM, ACCUMULATE = 1, 2
_LAYOUTS = {"nhd": 0, "hnd": 1, "contiguous": 1}
STATS_MAGIC = b"KVETRIST"
STATS_VERSION = 1
_HEADER = struct.Struct("<8sIIIId")  # magic, version, layers, q heads, head_dim, rope_theta


def default_offsets() -> np.ndarray:
    """TriAttention's offsets: 1, 2, 4, ..., 65536."""
    return (2.0 ** np.arange(17)).astype(np.float32)


def triattention_stats(queries: Any) -> Tuple[np.ndarray, np.ndarray]:
    """Calibration statistics from pre-RoPE queries [layers, q_heads, tokens,
    head_dim] (numpy or torch, any float type): q_mean float32 [layers,
    q_heads, head_dim/2, 2] (the mean of q_f = x[f] + i x[f + d/2]) and
    q_abs_mean float32 [layers, q_heads, head_dim/2] (the mean of |q_f|),
    accumulated in float64."""
    if _arrays.is_torch(queries):
        queries = queries.detach().cpu().double().numpy()
    q = np.asarray(queries, dtype=np.float64)
    if q.ndim != 4 or q.shape[3] % 2:
        raise ValueError("queries: shape %s, expected [layers, q_heads, tokens, even head_dim]"
                         % (q.shape,))
    nf = q.shape[3] // 2
    re, im = q[..., :nf], q[..., nf:]
    mean = np.stack([re.mean(axis=2), im.mean(axis=2)], axis=-1).astype(np.float32)
    absm = np.sqrt(re * re + im * im).mean(axis=2).astype(np.float32)
    return mean, absm


def write_triattention_stats(path: str, q_mean: np.ndarray, q_abs_mean: np.ndarray,
                             rope_theta: float = 0.0) -> None:
    """Write a calibration file (docs/SCORERS.md "Calibration file")."""
    qm = np.ascontiguousarray(q_mean, dtype="<f4")
    qa = np.ascontiguousarray(q_abs_mean, dtype="<f4")
    if qm.ndim != 4 or qm.shape[3] != 2 or qa.shape != qm.shape[:3]:
        raise ValueError("q_mean %s / q_abs_mean %s: expected [L, H, F, 2] and [L, H, F]"
                         % (qm.shape, qa.shape))
    layers, heads, nf = qa.shape
    with open(path, "wb") as f:
        f.write(_HEADER.pack(STATS_MAGIC, STATS_VERSION, layers, heads, 2 * nf,
                             float(rope_theta)))
        f.write(qm.tobytes())
        f.write(qa.tobytes())


def read_triattention_stats(path: str) -> Tuple[np.ndarray, np.ndarray, float]:
    """(q_mean, q_abs_mean, rope_theta) of a calibration file, read in numpy."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < _HEADER.size:
        raise ValueError("%s: not a version-%d calibration file (%d bytes, shorter than the "
                         "%d-byte header)" % (path, STATS_VERSION, len(data), _HEADER.size))
    magic, version, layers, heads, dim, theta = _HEADER.unpack_from(data)
    if magic != STATS_MAGIC or version != STATS_VERSION:
        raise ValueError("%s: not a version-%d calibration file" % (path, STATS_VERSION))
    n = layers * heads * (dim // 2)
    body = np.frombuffer(data, dtype="<f4", offset=_HEADER.size)
    if body.size != 3 * n:
        raise ValueError("%s: %d floats, the header promises %d" % (path, body.size, 3 * n))
    return (body[:2 * n].reshape(layers, heads, dim // 2, 2).copy(),
            body[2 * n:].reshape(layers, heads, dim // 2).copy(), theta)


def load_triattention_stats(path: str) -> Tuple[np.ndarray, np.ndarray, float]:
    """The same through the library's kve_triattention_stats_load (its checks)."""
    st = _lib.TriStats()
    check(lib.kve_triattention_stats_load(path.encode(), ctypes.byref(st)),
          "kve_triattention_stats_load")
    try:
        nf = st.head_dim // 2
        n = st.n_layers * st.n_q_heads * nf
        shape = (st.n_layers, st.n_q_heads, nf)
        qm = _arrays.carray_view(st.q_mean, 2 * n, ctypes.c_float).reshape(shape + (2,)).copy()
        qa = _arrays.carray_view(st.q_abs_mean, n, ctypes.c_float).reshape(shape).copy()
        return qm, qa, st.rope_theta
    finally:
        lib.kve_triattention_stats_free(ctypes.byref(st))


def _per_row(x: Any, n: int, name: str, kind: str = "u32") -> Sequence[int]:
    """An int or one per row, each in the range of C type @kind."""
    if np.isscalar(x):
        return [_arrays.as_int(name, x, kind)] * n
    if x is None:
        raise TypeError("%s: expected an int or one per row, got None" % name)
    vals = [_arrays.as_int("%s[%d]" % (name, i), v, kind) for i, v in enumerate(x)]
    if len(vals) != n:
        raise ValueError("%s: %d values for %d rows" % (name, len(vals), n))
    return vals


def _fill_desc(ctx: Any, d: "_lib.ScoreDesc", keys: Any, layout: str, scorer: str, *,
               block_table: Any, indptr: Any, indices: Any, last_page_len: Any, flat: bool,
               q_mean: Any, q_abs_mean: Any, group: int, rope_theta: Optional[float],
               omega: Any, freq_scale_sq: Any, offsets: Any, znorm: bool, accumulate: bool,
               weight: float) -> list:
    """The desc's scorer, key cache and TriAttention fields; the views to keep."""
    if scorer not in SCORERS:
        raise ValueError("scorer = %r: expected 'knorm' or 'triattention'" % scorer)
    if layout not in _LAYOUTS:
        raise ValueError("layout = %r: expected 'nhd', 'hnd' or 'contiguous'" % layout)
    kv = _arrays.View(keys, "keys", ndim=4, const=True)
    if kv.dtype not in ("float32", "float16", "bfloat16"):
        raise TypeError("keys: dtype %s, expected float32, float16 or bfloat16" % kv.dtype)
    kv.dense_tail(3)
    kv.no_broadcast()  # the library takes a zero stride for the dense default
    nhd = layout == "nhd"
    k, pt = d.keys, d.keys.pages
    k.base, k.dtype, k.head_dim = kv.ptr, _arrays.KVE_DTYPES[kv.dtype], kv.shape[3]
    pt.n_pages, k.layout = kv.shape[0], _LAYOUTS[layout]
    pt.page_size, k.n_heads = (kv.shape[1], kv.shape[2]) if nhd else (kv.shape[2], kv.shape[1])
    k.stride_page = kv.strides[0]
    k.stride_slot, k.stride_head = (kv.strides[1], kv.strides[2]) if nhd else \
        (kv.strides[2], kv.strides[1])
    views = [kv]
    if block_table is not None:
        bt = _arrays.View(block_table, "block_table", "int32", 2, const=True)
        bt.contiguous()
        pt.kind, pt.block_table = 1, bt.ptr
        pt.n_rows, pt.blocks_per_row = bt.shape
        views.append(bt)
    elif indptr is not None:
        ip = [_arrays.View(x, n, "int32", 1, const=True) for x, n in
              ((indptr, "indptr"), (indices, "indices"), (last_page_len, "last_page_len"))]
        for v in ip:
            v.contiguous()
        pt.kind, pt.n_rows = 2, _write.paged_rows(*ip)
        pt.indptr, pt.indices, pt.last_page_len = ip[0].ptr, ip[1].ptr, ip[2].ptr
        views += ip
    elif flat:
        pt.kind = 3
    else:
        pt.kind, pt.n_rows = 0, pt.n_pages
    d.scorer = SCORERS[scorer]
    d.flags = (ZNORM if znorm else 0) | (ACCUMULATE if accumulate else 0)
    d.weight = weight
    if scorer == "triattention":
        t = d.tri
        t.group = group = _arrays.u32("group", group)
        qm = _arrays.View(q_mean, "q_mean", "float32", const=True)
        qa = _arrays.View(q_abs_mean, "q_abs_mean", "float32", const=True)
        for v in (qm, qa):
            v.contiguous()
        # the library reads keys' heads x group query heads of dim/2 frequencies
        nq, nf = k.n_heads * group, k.head_dim // 2
        if group:  # group 0 is the library's to refuse
            qm.expect(size=nq * nf * 2, why="[heads %d * group %d, dim/2 %d, 2]"
                      % (k.n_heads, group, nf))
            qa.expect(size=nq * nf, why="[heads %d * group %d, dim/2 %d]"
                      % (k.n_heads, group, nf))
        t.q_mean, t.q_abs_mean = qm.ptr, qa.ptr
        views += [qm, qa]
        if omega is None and rope_theta is None:
            raise ValueError("triattention needs rope_theta or omega")
        t.rope_theta = float(rope_theta or 0.0)
        for name, x in (("omega", omega), ("freq_scale_sq", freq_scale_sq),
                        ("offsets", offsets)):
            if x is not None:
                v = _arrays.View(x, name, "float32", 1, const=True)
                v.contiguous()
                if name != "offsets":
                    v.expect((k.head_dim // 2,), why="dim/2 frequencies")
                setattr(t, name, v.ptr)
                views.append(v)
                if name == "offsets":
                    t.n_offsets = v.shape[0]
    ctx._prepare(views)
    return views


# The keyword arguments score() and _state_score() pass on to _fill_desc.
_DESC_OPTIONS = ("block_table", "indptr", "indices", "last_page_len", "flat", "q_mean",
                 "q_abs_mean", "group", "rope_theta", "omega", "freq_scale_sq", "offsets",
                 "znorm", "accumulate", "weight")


def _new_desc(ctx: Any, keys: Any, layout: str, scorer: str, args: dict) -> tuple:
    """A ScoreDesc filled from the caller's arguments (its locals()), and
    the views to keep alive through the call."""
    d = _lib.ScoreDesc()
    views = _fill_desc(ctx, d, keys, layout, scorer, **{k: args[k] for k in _DESC_OPTIONS})
    return d, views


def score(ctx: Any, keys: Any, slot_pos: Any, *, prompt_len: Any, window: Any,
          scorer: str = "triattention", round_start: Any = 0, cache_row: Any = None,
          layout: str = "nhd", block_table: Any = None, indptr: Any = None,
          indices: Any = None, last_page_len: Any = None, flat: bool = False,
          q_mean: Any = None, q_abs_mean: Any = None, group: int = 1,
          rope_theta: Optional[float] = None, omega: Any = None, freq_scale_sq: Any = None,
          offsets: Any = None, znorm: bool = True, shared_heads: bool = False,
          out: Any = None, accumulate: bool = False, weight: float = 1.0) -> Any:
    """Score every row's candidates (kve_score) from one layer's K cache.

    keys: "nhd" [pages, page_size, heads, dim] (vLLM), "hnd" [pages, heads,
    page_size, dim] (FlashInfer) or "contiguous" [rows, heads, slots, dim],
    float32 / float16 / bfloat16, post-RoPE. The page of a row's slot comes
    from block_table (int32 [rows, blocks]), indptr / indices /
    last_page_len, flat slots (row r's slot s is flat slot r * page_size +
    s) or, with none, page = cache_row.
    slot_pos: int32 [rows, tables, slots] (tables = heads, or 1 with
    shared_heads). prompt_len, window, round_start (t0), cache_row (default
    row i): an int or one per row.
    TriAttention: q_mean float32 [heads * group, dim/2, 2], q_abs_mean
    [heads * group, dim/2] (this layer's, e.g. triattention_stats(...)[l]),
    rope_theta or omega [dim/2], freq_scale_sq [dim/2] (s_f^2), offsets.
    Returns out, float32 [rows, tables, slots] (new, or the one given;
    accumulate=True adds weight x score into it).
    """
    as_context(ctx, "score")
    d, views = _new_desc(ctx, keys, layout, scorer, locals())
    sp = _arrays.View(slot_pos, "slot_pos", "int32", 3, const=True)
    sp.dense_tail(2)
    rows, tables, n_slots = sp.shape
    d.heads_per_table = d.keys.n_heads if shared_heads else 1
    sp.expect((None, 1 if shared_heads else d.keys.n_heads, None),
              why="one table per key head (keys have %d), 1 with shared_heads" % d.keys.n_heads)
    if out is None:
        out = ctx._empty((rows, tables, n_slots), "float32", sp.torch)
        out[...] = 0
    ov = _arrays.View(out, "out", "float32", 3)
    ov.dense_tail(2)
    if ov.shape != sp.shape:
        raise ValueError("out: shape %s, slot_pos has %s" % (ov.shape, sp.shape))
    ctx._prepare([sp, ov])
    P = _per_row(prompt_len, rows, "prompt_len")
    W = _per_row(window, rows, "window")
    T0 = _per_row(round_start, rows, "round_start")
    C = _per_row(cache_row if cache_row is not None else range(rows), rows, "cache_row", "i32")
    arr = (_lib.ScoreRow * max(rows, 1))()
    for i in range(rows):
        arr[i] = _lib.ScoreRow(i * sp.strides[0] // 4, i * ov.strides[0] // 4, n_slots, P[i],
                               W[i], T0[i], C[i], sp.strides[1] // 4)
    d.n_rows, d.rows, d.slot_pos = rows, ctypes.cast(arr, ctypes.c_void_p), sp.ptr
    d.slot_pos_stride_table = sp.strides[1] // 4
    d.scores, d.scores_stride_table = ov.ptr, ov.strides[1] // 4
    check(lib.kve_score(ctx.handle, ctypes.byref(d)), "kve_score")
    del views
    return out


def _state_score(device: bool, state: Any, rows: Any, n_new: Any, table_layer: int, keys: Any,
                 out: Any, *, scorer: str = "triattention", layout: str = "nhd",
                 cache_row: Any = None, block_table: Any = None, indptr: Any = None,
                 indices: Any = None, last_page_len: Any = None, flat: bool = False,
                 q_mean: Any = None, q_abs_mean: Any = None, group: int = 1,
                 rope_theta: Optional[float] = None, omega: Any = None,
                 freq_scale_sq: Any = None, offsets: Any = None, znorm: bool = True,
                 accumulate: bool = False, weight: float = 1.0) -> Any:
    """state_score (device False: rows and n_new host lists) and
    state_score_device (True: arrays in backend memory)."""
    who = "state_score_device" if device else "state_score"
    if not hasattr(state, "table_layers"):
        raise _lib.ArgumentError("state: expected a kvevict.State, got %s"
                                 % ("None" if state is None else type(state).__name__), state,
                                 who)
    ctx = state.ctx
    h = state.handle
    if device:
        if cache_row is not None:
            raise ValueError("cache_row: not taken by score_device (kve_state_score_device "
                             "reads call row i's keys from row i of the key cache's page "
                             "table): give the page table's rows in the call's order")
        call = _arrays.call_rows(rows, n_new)
        n = call[0].shape[0]
        ctx._prepare(list(call))
        ptrs = call[0].ptr, call[1].ptr
    else:
        n = len(rows)
        if len(n_new) != n:
            raise ValueError("rows and n_new differ in length (%d, %d)" % (n, len(n_new)))
        call = _arrays.u32_array(rows, "rows"), _arrays.u32_array(n_new, "n_new")
        ptrs = call
    table_layer = _arrays.u32("table_layer", table_layer)
    d, views = _new_desc(ctx, keys, layout, scorer, locals())
    ov = _arrays.View(out, "out", "float32", 3)
    ov.dense_tail(2)
    # row i of the call writes out[i]; the library checks the width (the stride)
    ov.expect((_arrays.at_least(n), state.table_layers * state.table_heads, None),
              why="[rows %d, table_layers * table_heads, >= %s]"
              % (n, "max_slots" if device else "capacity"))
    ctx._prepare([ov])
    cr = None
    if cache_row is not None:
        cr = (ctypes.c_int32 * max(n, 1))(*_per_row(cache_row, n, "cache_row", "i32"))
        d.cache_rows = ctypes.cast(cr, ctypes.c_void_p)
    fn = lib.kve_state_score_device if device else lib.kve_state_score
    check(fn(h, n, ptrs[0], ptrs[1], table_layer, ctypes.byref(d), ov.ptr, ov.strides[0] // 4,
             ov.strides[1] // 4), "kve_" + who)
    del views, cr, call
    return out


def state_score(state: Any, rows: Sequence[int], n_new: Sequence[int], table_layer: int,
                keys: Any, out: Any, **kwargs: Any) -> Any:
    """kve_state_score into out, float32 [rows, table_layers * table_heads,
    stride] (kve_step_buffers.scores' layout), for the next append of n_new;
    kwargs as score (scorer, layout, cache_row, block_table, ..., weight)."""
    return _state_score(False, state, rows, n_new, table_layer, keys, out, **kwargs)


def state_score_device(state: Any, rows: Any, n_new: Any, table_layer: int, keys: Any,
                       out: Any, **kwargs: Any) -> Any:
    """kve_state_score_device into out (state_score's layout, >= max_slots
    wide): rows and n_new int32 / uint32 [n_rows] in backend memory, as
    State.append_device takes them; which rows are due is decided on the
    device. kwargs as state_score's, but call row i reads row i of the key
    cache's page table: cache_row is refused (order block_table's rows as
    the call's)."""
    return _state_score(True, state, rows, n_new, table_layer, keys, out, **kwargs)
