"""kve_cache_write from arrays: shapes, element types and strides of each
cache read off the tensors (numpy arrays or torch tensors), checked here
with messages naming both sides, then one library call."""

import ctypes
from typing import Any, Optional, Sequence, Tuple

from . import _arrays, _lib
from ._context import as_context
from ._lib import MAX_CACHES, check, lib

_LAYOUTS = {"nhd": 0, "hnd": 1, "contiguous": 1}
_TABLES = ("block_table", "indptr", "indices", "last_page_len")
_TABLE_DIMS = {"block_table": 2, "indptr": 1, "indices": 1, "last_page_len": 1}


def paged_rows(indptr: _arrays.View, indices: _arrays.View, last_page_len: _arrays.View) -> int:
    """n_rows of FlashInfer's page table (1-D, contiguous int32 views), with
    last_page_len one per row and, in host memory, indices holding the
    indptr[n_rows] pages the library reads (it checks every row against
    indptr[n_rows], not against the array; a GPU's tables are trusted)."""
    indptr.expect((_arrays.at_least(1),), why="n_rows + 1 offsets")
    n_rows = indptr.shape[0] - 1
    last_page_len.expect((n_rows,), why="one per row: indptr has %d rows" % n_rows)
    if not indptr.cuda:
        end = ctypes.c_int32.from_address(indptr.ptr + 4 * n_rows).value
        indices.expect((_arrays.at_least(max(end, 0)),),
                       why="indptr[%d] = %d pages" % (n_rows, end))
    return n_rows


def _page_view(layout: str, d: _arrays.View) -> Tuple[int, int, int, int, int, int]:
    """(pages, page_size, heads, stride_page, stride_slot, stride_head) of a cache."""
    if layout == "nhd":
        return d.shape[0], d.shape[1], d.shape[2], d.strides[0], d.strides[1], d.strides[2]
    return d.shape[0], d.shape[2], d.shape[1], d.strides[0], d.strides[2], d.strides[1]


def _types(s: _arrays.View, d: _arrays.View, cache_dtype: str,
           convert: bool) -> Tuple[int, int, int]:
    """(src kve_dtype, dst kve_dtype, convert) of one cache, or TypeError naming both."""
    st = _arrays.KVE_DTYPES.get(s.dtype, 0)
    dt = _arrays.KVE_DTYPES.get(d.dtype, 0)
    if cache_dtype in _arrays.FP8_CACHE_DTYPES:
        if d.itemsize != 1:
            raise TypeError("%s: dtype %s, but kv_cache_dtype %r needs a one-byte cache (uint8)"
                            % (d.name, d.dtype, cache_dtype))
        dt, convert = _arrays.FP8_CACHE_DTYPES[cache_dtype], True
    elif cache_dtype != "auto":
        raise ValueError("kv_cache_dtype = %r: expected 'auto', 'fp8', 'fp8_e4m3' or 'fp8_e5m2'"
                         % cache_dtype)
    if st == dt and (st or s.dtype == d.dtype):
        return st, dt, 0  # the same type: bytes copied
    if not st or not dt:
        raise TypeError("%s is %s and %s is %s: only float32, float16, bfloat16 and fp8 convert"
                        % (s.name, s.dtype, d.name, d.dtype if not dt or cache_dtype == "auto"
                           else cache_dtype))
    if not convert:
        raise TypeError("%s is %s but %s is %s: pass convert=True to convert in the kernel"
                        % (s.name, s.dtype, d.name, d.dtype))
    return st, dt, 1


def _check_args(ctx: Any, srcs: Sequence[Any], dsts: Sequence[Any], layout: str,
                kv_cache_dtype: Any, scales: Optional[Sequence[Any]]) -> int:
    """The number of caches, after checking the arguments that describe them
    as a whole (context, list lengths, layout, per-cache dtypes and scales)."""
    as_context(ctx, "cache_write")
    if srcs is None or dsts is None:
        raise TypeError("srcs and dsts: lists of arrays, got %s and %s"
                        % (type(srcs).__name__, type(dsts).__name__))
    n = len(srcs)
    if not 1 <= n == len(dsts) <= MAX_CACHES:
        raise ValueError("srcs and dsts: 1..%d caches each, got %d and %d"
                         % (MAX_CACHES, n, len(dsts)))
    if layout not in _LAYOUTS:
        raise ValueError("layout = %r: expected 'nhd', 'hnd' or 'contiguous'" % layout)
    if not isinstance(kv_cache_dtype, str) and (
            kv_cache_dtype is None or len(kv_cache_dtype) != n):
        raise ValueError("kv_cache_dtype = %r: a name, or one per cache (%d)"
                         % (kv_cache_dtype, n))
    if scales is not None and len(scales) != n:
        raise ValueError("scales: one per cache (or None), got %d for %d caches"
                         % (len(scales), n))
    return n


def _cache_views(src: Any, dst: Any, c: int) -> Tuple[_arrays.View, _arrays.View]:
    """Views of cache c's source and destination, with enough dimensions and
    no zero strides."""
    s, t = _arrays.View(src, "srcs[%d]" % c, const=True), _arrays.View(dst, "dsts[%d]" % c)
    if len(s.shape) < 3 or len(t.shape) < 4:
        raise ValueError("%s needs [tokens, heads, *entry], %s 4+ dimensions (got %s, %s)"
                         % (s.name, t.name, s.shape, t.shape))
    s.no_broadcast()  # the library takes a zero stride for the dense default
    t.no_broadcast()
    return s, t


def _describe_part(p: Any, s: _arrays.View, t: _arrays.View, layout: str, cache_dtype: str,
                   convert: bool, geometry: Optional[Tuple[int, int, int, int]]
                   ) -> Tuple[int, int, int, int]:
    """Fill one cache's part (types, entry size, strides) and return its
    (tokens, heads, pages, page_size), checked against cache 0's geometry."""
    p.src_dtype, p.dst_dtype, p.convert = _types(s, t, cache_dtype, convert)
    dims = s.dense_tail(2) // s.itemsize
    # One strided element dim is an entry too: vLLM's CPU cache keeps K
    # transposed in a block, a [pages, heads, page_size, head_dim] view of it
    # has head_dim's stride page_size elements (p.dst_stride_elem).
    elem = t.strides[3] if len(t.shape) == 4 and t.shape[3] > 1 else t.itemsize
    t_dims = t.shape[3] if elem != t.itemsize else t.dense_tail(3) // t.itemsize
    if elem % t.itemsize or elem <= 0:
        raise ValueError("%s: the entry's stride %d is not a positive multiple of %d bytes"
                         % (t.name, elem, t.itemsize))
    if t_dims != dims:
        raise ValueError("%s: entry of %d elements, %s has %d" % (t.name, t_dims, s.name, dims))
    p.dst_stride_elem = elem
    pages, page_size, heads, sp, ss, sh = _page_view(layout, t)
    here = (s.shape[0], heads, pages, page_size)
    if geometry is not None and here != geometry:
        raise ValueError("%s / %s: (tokens, heads, pages, page_size) %s, cache 0 has %s"
                         % (s.name, t.name, here, geometry))
    if s.shape[1] != heads:
        raise ValueError("%s has %d heads, %s %d" % (s.name, s.shape[1], t.name, heads))
    p.dim = dims
    p.src_stride_token, p.src_stride_head = s.strides[0], s.strides[1]
    p.dst_stride_page, p.dst_stride_slot, p.dst_stride_head = sp, ss, sh
    return here


def _scale_view(p: Any, scale: Any, c: int, heads: int) -> _arrays.View:
    """A view of cache c's fp8 scale (float32 [1] or [heads]), set in its part."""
    sv = _arrays.View(scale, "scales[%d]" % c, "float32", 1, const=True)
    sv.contiguous()
    if sv.shape[0] not in (1, heads):
        raise ValueError("%s: %d values, expected 1 or %d (heads)"
                         % (sv.name, sv.shape[0], heads))
    p.scale, p.scale_per_head = sv.ptr, int(sv.shape[0] > 1)
    return sv


def _describe_caches(d: Any, views: list, srcs: Sequence[Any], dsts: Sequence[Any],
                     layout: str, kv_cache_dtype: Any, scales: Optional[Sequence[Any]],
                     convert: bool) -> Tuple[int, int, int, int]:
    """Fill d's per-cache parts and pointers, appending each cache's views
    (its scale, then source and destination) to views; returns the shared
    (tokens, heads, pages, page_size)."""
    geometry = None
    for c in range(len(srcs)):
        s, t = _cache_views(srcs[c], dsts[c], c)
        p = d.part[c]
        cd = kv_cache_dtype if isinstance(kv_cache_dtype, str) else kv_cache_dtype[c]
        geometry = _describe_part(p, s, t, layout, cd, convert, geometry)
        if scales is not None and scales[c] is not None:
            views.append(_scale_view(p, scales[c], c, geometry[1]))
        d.src[c], d.dst[c] = s.ptr, t.ptr
        views += (s, t)
    return geometry


def _describe_slots(d: Any, views: list, slots: Any, n: int, layout: str,
                    geometry: Tuple[int, int, int, int]) -> None:
    """Check the slots against the caches' geometry and fill d's sizes and slots."""
    tokens, heads, pages, page_size = geometry
    slot_v = _arrays.View(slots, "slots", "int64", const=True)
    if len(slot_v.shape) not in (1, 2) or slot_v.shape[0] != tokens or (
            len(slot_v.shape) == 2 and slot_v.shape[1] not in (1, heads)):
        raise ValueError("slots: shape %s, expected (%d, %d), (%d, 1) or (%d,)"
                         % (slot_v.shape, tokens, heads, tokens, tokens))
    d.n_tokens, d.n_heads, d.n_caches = tokens, heads, n
    d.layout, d.pages.page_size, d.pages.n_pages = _LAYOUTS[layout], page_size, pages
    d.slots = slot_v.ptr
    d.slots_stride_token = slot_v.strides[0] // 8
    d.slots_stride_head = slot_v.strides[1] // 8 if len(slot_v.shape) == 2 and \
        slot_v.shape[1] > 1 else 0
    views.append(slot_v)


def _describe_page_table(d: Any, views: list, token_row: Any, arrays: Sequence[Any],
                         tokens: int, pages: int) -> None:
    """Fill d's page table: flat slots without token_row, else block_table,
    indptr / indices / last_page_len, or row = page. arrays: the tables in
    _TABLES' order, None where not given."""
    tables = {}
    for name, x in zip(_TABLES, arrays):
        if x is not None:
            tables[name] = _arrays.View(x, name, "int32", _TABLE_DIMS[name], const=True)
            tables[name].contiguous()
            views.append(tables[name])
    if token_row is None:
        if tables:
            raise ValueError("%s given without token_row: flat slots need no table"
                             % ", ".join(tables))
        d.pages.kind = 3  # KVE_PAGES_FLAT
        return
    row_v = _arrays.View(token_row, "token_row", "int32", 1, const=True)
    row_v.contiguous()
    row_v.expect((tokens,), why="one row per token")
    views.append(row_v)
    d.token_row = row_v.ptr
    if "block_table" in tables:
        bt = tables["block_table"]
        d.pages.kind, d.pages.block_table = 1, bt.ptr
        d.pages.n_rows, d.pages.blocks_per_row = bt.shape
    elif "indptr" in tables:
        if "indices" not in tables or "last_page_len" not in tables:
            raise ValueError("indptr needs indices and last_page_len")
        pt = d.pages
        pt.kind = 2
        pt.n_rows = paged_rows(tables["indptr"], tables["indices"], tables["last_page_len"])
        pt.indptr, pt.indices = tables["indptr"].ptr, tables["indices"].ptr
        pt.last_page_len = tables["last_page_len"].ptr
    else:
        d.pages.kind, d.pages.n_rows = 0, pages


def _describe_moves(d: Any, views: list, moves: Any, n_moves: Any, move_row: Any,
                    heads: int) -> None:
    """Check a layer's move lists (moves, n_moves, optional move_row) and
    fill d's move fields."""
    if n_moves is None:
        raise ValueError("moves needs n_moves")
    mv = [_arrays.View(moves, "moves", "int32", 4, const=True),
          _arrays.View(n_moves, "n_moves", "int32", 2, const=True)]
    if move_row is not None:
        mv.append(_arrays.View(move_row, "move_row", "int32", 1, const=True))
    for v in mv:
        v.contiguous()
    if mv[0].shape[1] not in (1, heads) or mv[1].shape != mv[0].shape[:2]:
        raise ValueError("moves %s / n_moves %s: [rows, 1 or %d heads, max_moves, 2]"
                         % (mv[0].shape, mv[1].shape, heads))
    mv[0].expect((None, None, None, 2), why="[rows, 1 or %d heads, max_moves, 2]: "
                 "(src, dst) pairs" % heads)
    if len(mv) > 2:
        mv[2].expect((mv[0].shape[0],), why="one page-table row per move list row")
    d.moves, d.n_moves, d.n_move_rows, d.max_moves = mv[0].ptr, mv[1].ptr, *mv[0].shape[::2]
    d.moves_stride_row, d.moves_stride_head = mv[0].shape[1], int(mv[0].shape[1] > 1)
    d.move_row = mv[2].ptr if len(mv) > 2 else None
    views += mv


def cache_write(ctx: Any, srcs: Sequence[Any], dsts: Sequence[Any], slots: Any,
                token_row: Any = None, *, layout: str = "nhd", block_table: Any = None,
                indptr: Any = None, indices: Any = None, last_page_len: Any = None,
                kv_cache_dtype: Any = "auto", scales: Optional[Sequence[Any]] = None,
                convert: bool = False, moves: Any = None, n_moves: Any = None,
                move_row: Any = None, src_slots: Any = None) -> None:
    """Write new K/V rows into caches (kve_cache_write), converting types.

    srcs: [tokens, heads, *entry] each (K, V, ...), entry dims contiguous.
    dsts: the caches, "nhd" [pages, page_size, heads, *entry] (vLLM),
    "hnd" [pages, heads, page_size, *entry] (FlashInfer) or "contiguous"
    [seqs, heads, slots, *entry]; any strides, so views of one tensor holding
    K and V ([pages, 2, ...][:, 0] and [:, 1]) work, but no zero strides
    (torch's expand: the library takes 0 for its dense default). Each cache may have its
    own entry size and type (head_dim_v != head_dim_k; MLA's parts).

    slots: int64 [tokens, heads], or [tokens, 1] / [tokens] (one slot for
    every head); -1 = skip (vLLM's padding: such a token's row is not read).
    Where they point: with token_row (int32 [tokens]) the slot is within the
    token's row, through block_table [rows, blocks_per_row] (vLLM), indptr /
    indices / last_page_len (FlashInfer) or, with neither, row = page
    ("contiguous"); without token_row the slots are flat, page * page_size +
    offset (vLLM's slot_mapping).

    Types: a cache of the source's dtype is copied byte for byte. Different
    float types (float32, float16, bfloat16) need convert=True;
    kv_cache_dtype "fp8" / "fp8_e4m3" / "fp8_e5m2" stores uint8 caches as
    fp8, saturating (a list gives each cache its own), with scales[c]
    (float32 [1] or [heads], or None) as vLLM's k_scale / v_scale:
    stored = fp8(src / scale).

    moves, n_moves: a state's move lists for this layer (State.layer_moves),
    int32 [rows, 1 or heads, max_moves, 2] and [rows, 1 or heads], run before
    the writes; move_row: int32 [rows], each list row's page-table row
    (default: list row i is row i). A round moves entries from slots up to a
    row's capacity, past its new n_valid: with indptr, describe every page
    reserved for each row here, not attention's n_valid pages. indices must
    hold indptr[n_rows] pages (checked in host memory; on a GPU the library
    trusts indptr's values).

    src_slots: int64, shaped and strided as slots (a copy of its layout):
    each entry is then copied from that slot of the same row in the cache
    itself, the stored bytes, instead of from srcs (which only give the
    shapes and are not read); -1 skips the entry. A speculative step's
    commit (State.draft): accepted drafts from their draft slots to the
    slots append mapped them to, with the append's moves in the same call.
    """
    d, views = _describe_write(ctx, srcs, dsts, slots, token_row, layout, block_table, indptr,
                               indices, last_page_len, kv_cache_dtype, scales, convert, moves,
                               n_moves, move_row, src_slots)
    ctx._prepare(views)
    check(lib.kve_cache_write(ctx.handle, ctypes.byref(d)), "kve_cache_write")


def _describe_write(ctx: Any, srcs: Sequence[Any], dsts: Sequence[Any], slots: Any,
                    token_row: Any, layout: str, block_table: Any, indptr: Any, indices: Any,
                    last_page_len: Any, kv_cache_dtype: Any, scales: Any, convert: bool,
                    moves: Any, n_moves: Any, move_row: Any, src_slots: Any) -> Tuple[Any, list]:
    """cache_write's kve_cache_write_desc and the views it points into
    (checked as cache_write checks them); kvevict.vllm keeps one a layer and
    patches its per-step fields."""
    n = _check_args(ctx, srcs, dsts, layout, kv_cache_dtype, scales)
    d = _lib.CacheWriteDesc()
    views = []
    geometry = _describe_caches(d, views, srcs, dsts, layout, kv_cache_dtype, scales, convert)
    _describe_slots(d, views, slots, n, layout, geometry)
    tokens, heads, pages, _ = geometry
    _describe_page_table(d, views, token_row, (block_table, indptr, indices, last_page_len),
                         tokens, pages)
    if moves is not None:
        _describe_moves(d, views, moves, n_moves, move_row, heads)
    if src_slots is not None:
        sv = _arrays.View(src_slots, "src_slots", "int64", const=True)
        sl = _arrays.View(slots, "slots", "int64", const=True)
        if sv.shape != sl.shape:
            raise ValueError("src_slots: shape %s, expected the shape of slots %s"
                             % (sv.shape, sl.shape))
        if (sv.shape[0] > 1 and sv.strides[0] // 8 != d.slots_stride_token) or (
                d.slots_stride_head and sv.shape[0] and sv.strides[1] // 8 != d.slots_stride_head):
            raise ValueError("src_slots: strides %s differ from slots' %s: give both one layout"
                             % (sv.strides, sl.strides))
        d.src_slots = sv.ptr
        views.append(sv)
    return d, views
