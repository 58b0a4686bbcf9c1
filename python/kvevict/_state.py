"""State, the paper's schedule for a batch of sequences (``kve_state``), and
its SeqInfo rows and Step buffers."""

import ctypes
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Tuple

import numpy as np

from . import _arrays, _lib
from ._context import Context, _Handle, as_context
from ._lib import (PERSISTENT, SCORED, SHARED_HEADS, SHARED_LAYERS, ArgumentError, KvevictError,
                   check, lib)
from ._score import state_score, state_score_device


@dataclass
class SeqInfo:
    """One row of a state (see kve_state_seq_info in include/kvevict.h)."""

    active: bool
    seq_id: int
    prompt_len: int
    capacity: int   #: C = max(B, P + W) + r slots per head
    n_tokens: int   #: positions 0 .. n_tokens-1 appended
    round: int      #: eviction rounds so far
    n_valid: int    #: valid slots, the same in every head: slots 0 .. n_valid-1
    n_used: int     #: = n_valid, the KV length to give attention
    table_offset: int = 0  #: the row's tables in the pool (elements)
    draft_first: int = 0   #: = capacity: the row's draft token i lives at slot draft_first + i
    max_draft: int = 0     #: draft slots a row has (the state's max_draft)


@dataclass
class Step:
    """Step buffers of a state (kve_step_buffers), reusable from step to step.

    mapping: int64 [table_layers, max_tokens, table_heads]; moves: int32
    [table_layers, max_rows, table_heads, max_moves, 2] pairs (src, dst);
    n_moves: int32 [table_layers, max_rows, table_heads]. After an append,
    the first n_tokens tokens and n_rows rows are the call's.
    """

    mapping: Any
    moves: Any
    n_moves: Any
    n_tokens: int = 0
    n_rows: int = 0


I32_MAX, ERR_RANGE = 2 ** 31 - 1, 2


def _need_step(step: Any, call: str, mapping: bool = False) -> None:
    """A Step for @call (or, with @mapping, a mapping array): None and other
    types are named (an append with outputs=False returns None)."""
    if step is None or (not mapping and not isinstance(step, Step)):
        raise ArgumentError("step = %s: expected a kvevict.Step (State.step_buffers or an "
                            "append's)%s" % ("None" if step is None else type(step).__name__,
                                              " or a mapping array" if mapping else ""),
                            step, call)


class State(_Handle):
    """The paper's schedule for a batch of sequences (``kve_state``).

    Each head's slot table lives in the backend's memory; ``append`` returns,
    for new tokens, the slot every head writes them to (slot reuse), evicting
    a round whenever a sequence's heads are full. ``tensors`` picks what the
    CPU backend returns: "numpy" arrays or "torch" tensors (GPU backends
    always return torch tensors on the device).
    ``score_group`` is the largest query-head group (TriAttention's) that
    ``score_device`` will score with (``kve_state_desc.score_group``; 0: 1
    for a scored state): its scratch is sized at creation.
    """

    _destroy = lib.kve_state_destroy

    def __init__(self, ctx: Context, *, max_seqs: int, n_layers: int, n_heads: int,
                 budget: int, max_slots: int, window: int = 64, interval: int = 64,
                 seed: int = 0, persistent: bool = False, shared_heads: bool = False,
                 shared_layers: bool = False, layer_offset: int = 0, head_offset: int = 0,
                 pool_slots: int = 0, tensors: str = "numpy", scored: bool = False,
                 max_draft: int = 0, score_group: int = 0):
        if tensors not in ("numpy", "torch"):
            raise ValueError("tensors = %r: expected 'numpy' or 'torch'" % (tensors,))
        as_context(ctx, "State")
        u32 = _arrays.u32
        max_seqs, n_layers, n_heads = (u32("max_seqs", max_seqs), u32("n_layers", n_layers),
                                       u32("n_heads", n_heads))
        budget, window, interval = (u32("budget", budget), u32("window", window),
                                    u32("interval", interval))
        seed, pool_slots = _arrays.u64("seed", seed), _arrays.u64("pool_slots", pool_slots)
        layer_offset, head_offset = (u32("layer_offset", layer_offset),
                                     u32("head_offset", head_offset))
        max_slots, max_draft = u32("max_slots", max_slots), u32("max_draft", max_draft)
        score_group = u32("score_group", score_group)
        self.max_draft: int = max_draft  #: D: draft slots after each row's capacity
        self.score_group: int = score_group  #: the largest group score_device scores with
        self.ctx = ctx
        self.flags = ((PERSISTENT if persistent else 0) | (SHARED_HEADS if shared_heads else 0)
                      | (SHARED_LAYERS if shared_layers else 0) | (SCORED if scored else 0))
        self.budget, self.window, self.interval, self.seed = budget, window, interval, seed
        self.n_layers, self.n_heads = n_layers, n_heads
        self.layer_offset, self.head_offset = layer_offset, head_offset
        self._torch = tensors == "torch"
        desc = _lib.StateDesc(_lib.Schedule(seed, self.flags, budget, window, interval),
                              max_seqs, n_layers, n_heads, layer_offset, head_offset, max_slots,
                              pool_slots, max_draft, score_group)
        h = ctypes.c_void_p()
        check(lib.kve_state_create(ctx.handle, ctypes.byref(desc), None, 0, ctypes.byref(h)),
              "kve_state_create")
        # the state's owner holds the context's: the context goes after the state
        self._own(h, ctx._owner)
        ctx._children.add(self)
        lay = _lib.StateLayout()
        check(lib.kve_state_get_layout(h, ctypes.byref(lay)), "kve_state_get_layout")
        self.table_layers: int = lay.table_layers  #: 1 with shared layers, else n_layers
        self.table_heads: int = lay.table_heads    #: 1 with shared heads, else n_heads
        self.max_slots: int = lay.max_slots
        self.max_seqs: int = lay.max_seqs
        self.pool_slots: int = lay.pool_slots
        self._table_ptr = lay.slot_pos

    def _close(self, why: str) -> None:
        self._closed_why = why
        self.close()

    def close(self) -> None:
        """Close the state (its tables go once no row_table array views them)."""
        children = getattr(getattr(self, "ctx", None), "_children", None)
        if children is not None:
            children.discard(self)
        super().close()

    def _read_handle(self) -> ctypes.c_void_p:
        """The handle, for a call that reads the state back: on torch's
        current stream, so after the work queued there (a replayed graph's)."""
        h = self.handle
        self.ctx._stream()
        return h

    def admit(self, row: int, seq_id: int, prompt_len: int) -> None:
        """Admit a sequence into a free row; its prompt is then appended like any token."""
        h = self.handle
        row, seq_id = _arrays.u32("row", row), _arrays.u64("seq_id", seq_id)
        prompt_len = _arrays.u32("prompt_len", prompt_len)
        self.ctx._stream()
        check(lib.kve_state_admit(h, row, seq_id, prompt_len), "kve_state_admit")

    def retire(self, row: int) -> None:
        """Free a row."""
        h = self.handle
        row = _arrays.u32("row", row)
        self.ctx._stream()
        check(lib.kve_state_retire(h, row), "kve_state_retire")

    def _mapping(self, n_tokens: int, out: Any) -> Tuple[Any, int, int]:
        n_tokens = _arrays.u32("n_tokens", n_tokens)
        shape = (self.table_layers, n_tokens, self.table_heads)
        if out is None:
            out = self.ctx._empty(shape, "int64", self._torch)
        v = _arrays.View(out, "out", "int64")
        if v.shape != shape:
            raise ValueError("out: shape %s, expected %s" % (v.shape, shape))
        self.ctx._prepare([v])
        if not v.is_dense():  # a strided out (a persistent buffer's slice): through a dense one
            self._strided_out = out
            out = self.ctx._empty(shape, "int64", v.torch)
            v = _arrays.View(out, "out", "int64")
        return out, v.ptr, int(np.prod(shape))

    def max_moves(self, max_new: int) -> int:
        """Pairs a move list needs for appends of up to max_new tokens a row."""
        out = ctypes.c_uint32()
        h, max_new = self.handle, _arrays.u32("max_new", max_new)
        check(lib.kve_state_max_moves(h, max_new, ctypes.byref(out)),
              "kve_state_max_moves")
        return out.value

    def step_buffers(self, max_tokens: int, max_rows: int, max_new: int) -> Step:
        """Buffers for appends of up to max_tokens tokens over max_rows rows,
        max_new tokens a row: allocate once, pass to every append."""
        m = self.max_moves(max_new)
        max_tokens, max_rows = _arrays.u32("max_tokens", max_tokens), _arrays.u32("max_rows", max_rows)
        tl, th = self.table_layers, self.table_heads
        return Step(self.ctx._empty((tl, max_tokens, th), "int64", self._torch),
                    self.ctx._empty((tl, max_rows, th, m, 2), "int32", self._torch),
                    self.ctx._empty((tl, max_rows, th), "int32", self._torch))

    def rounds_due(self, rows: Sequence[int], n_new: Sequence[int]) -> list:
        """Rounds each row would run if it received n_new[i] tokens
        (kve_state_rounds_due): in a scored state, the rows that need scores."""
        if len(rows) != len(n_new):
            raise ValueError("rows and n_new differ in length (%d, %d)" % (len(rows), len(n_new)))
        out = (ctypes.c_uint32 * max(len(rows), 1))()
        h = self._read_handle()
        check(lib.kve_state_rounds_due(h, len(rows), _arrays.u32_array(rows, "rows"),
                                       _arrays.u32_array(n_new, "n_new"), out),
              "kve_state_rounds_due")
        return list(out[:len(rows)])

    def _scores(self, b: Any, scores: Any, n_rows: int, rows: Optional[Sequence[int]]) -> Any:
        """scores float32 [n_rows, table_layers, table_heads, >= capacity] (or
        [n_rows, tables, >= capacity]) into b; rows None: a call planned on
        the device, where any row may be due (>= max_slots)."""
        tl, th = self.table_layers, self.table_heads
        if len(getattr(scores, "shape", ())) == 3:
            scores = scores.reshape(scores.shape[0], tl, th, scores.shape[2])
        v = _arrays.View(scores, "scores", "float32", 4, const=True)
        if v.shape[0] < n_rows or v.shape[1:3] != (tl, th):
            raise ValueError("scores: shape %s, expected (%d, %d, %d, slots)" % (v.shape, n_rows, tl, th))
        st = v.strides
        if st[3] != 4 or st[1] != th * st[2]:
            raise ValueError("scores: not contiguous: a row's tables must be evenly spaced "
                             "(strides %s)%s" % (st, v.copy_hint()))
        v.no_broadcast()
        if v.shape[3] < st[2] // 4:
            # a slice narrower than its stride: the library checks the stride
            # against each row's capacity, this the slice's own width
            if rows is None:
                need, why = self.max_slots, "a planned call's row may be due: max_slots %d"
            else:
                need = max([self.seq(r).capacity for r in rows] + [0])
                why = "the rows' largest capacity is %d slots"
            v.expect((_arrays.at_least(n_rows), tl, th, _arrays.at_least(need)), why=why % need)
        self.ctx._prepare([v])
        b.scores, b.scores_stride_row, b.scores_stride_table = v.ptr, st[0] // 4, st[2] // 4
        return v

    def _step_views(self, out: Step) -> Tuple[list, Any]:
        """out's arrays checked against the state's tables; the views and
        their StepBuffers (scores unset)."""
        views = [_arrays.View(out.mapping, "out.mapping", "int64", 3),
                 _arrays.View(out.moves, "out.moves", "int32", 5),
                 _arrays.View(out.n_moves, "out.n_moves", "int32", 3)]
        for v in views:
            v.contiguous()
        tl, th = self.table_layers, self.table_heads
        mt, mr, mm = views[0].shape[1], views[1].shape[1], views[1].shape[3]
        if (views[0].shape != (tl, mt, th) or views[1].shape != (tl, mr, th, mm, 2)
                or views[2].shape != (tl, mr, th)):
            raise ValueError("out: shapes %s, %s, %s do not match the state's tables (%d, %d)"
                             % (views[0].shape, views[1].shape, views[2].shape, tl, th))
        self.ctx._prepare(views)
        return views, _lib.StepBuffers(views[0].ptr, mt, views[1].ptr, views[2].ptr, mr, mm)

    def draft(self, rows: Sequence[int], n_draft: Sequence[int], max_draft: Optional[int] = None,
              out: Optional[Step] = None) -> Step:
        """A speculative step's drafts (kve_state_draft): row rows[i] carries
        n_draft[i] tentative tokens, mapped to its draft slots capacity + k
        (outside its tables; the state does not change). Returns the Step
        with their mapping (tokens numbered row by row) and emptied move
        lists. Commit the accepted ones with append(rows, n_accept) and copy
        their entries with cache_write(..., src_slots=...) from the draft
        slots. rows and n_draft go to backend memory (the call is planned
        there) and out is allocated when not given, so this form is eager:
        draft_device is the one a CUDA graph captures. max_draft defaults
        to the state's."""
        if len(rows) != len(n_draft):
            raise ValueError("rows and n_draft differ in length (%d, %d)"
                             % (len(rows), len(n_draft)))
        d = self.max_draft if max_draft is None else _arrays.u32("max_draft", max_draft)
        n = len(rows)
        call = np.array([_arrays.u32("rows[%d]" % i, r) for i, r in enumerate(rows)]
                        + [_arrays.u32("n_draft[%d]" % i, k) for i, k in enumerate(n_draft)]
                        + [0], dtype=np.int64)
        if (call > 0x7fffffff).any():
            raise ValueError("rows, n_draft: values past 2^31-1")
        call = call.astype(np.int32)
        if self.ctx.backend != "cpu":
            import torch

            call = torch.from_numpy(call).to("cuda:%d" % self.ctx.device)
        if out is None:
            out = self.step_buffers(max(int(sum(n_draft)), 1), max(n, 1), 1)
        views, b = self._step_views(out)
        cv = _arrays.View(call, "rows", "int32", 1, const=True)
        self.ctx._prepare(views + [cv])
        check(lib.kve_state_draft(self.handle, n, cv.ptr, cv.ptr + 4 * n if n else None, d,
                                  ctypes.byref(b)), "kve_state_draft")
        out.n_tokens, out.n_rows = int(sum(n_draft)), n
        return out

    def draft_device(self, rows: Any, n_draft: Any, max_draft: int, out: Step) -> Step:
        """draft with its rows in backend memory, for a speculative step
        captured in a CUDA graph (kve_state_draft), as append_device is
        append's: rows and n_draft are int32 or uint32 [n_rows] arrays on
        the context's device (CUDA tensors; numpy arrays or CPU tensors with
        the CPU backend) that the engine rewrites before each replay; call
        row i carries n_draft[i] <= max_draft drafts of row rows[i], and
        n_draft[i] = 0 makes it padding (rows[i] not read). max_draft (<=
        the state's) is the captured shape: every launch depends on n_rows,
        max_draft and the state's shape only. Nothing is uploaded, allocated
        or read back: the refusals that need the data (an inactive or
        repeated row, n_draft[i] > max_draft, ...) map the call's tokens to
        -1 and are raised by ctx.synchronize() (on the CPU, by this call).
        ``out`` (step_buffers, max_tokens >= n_rows * max_draft) gets the
        drafts' mapping (tokens numbered row by row) and emptied move lists;
        out.n_tokens and out.n_rows are set to the padded shape, n_rows *
        max_draft tokens and n_rows rows, as append_device sets them. Like
        every call, it runs on torch's current stream (inside
        ``torch.cuda.graph``, the capture stream)."""
        h = self.handle
        max_draft = _arrays.u32("max_draft", max_draft)
        if not isinstance(out, Step):
            raise ArgumentError("out: expected a kvevict.Step (State.step_buffers), got %s"
                                % type(out).__name__, out, "draft_device")
        call = _arrays.call_rows(rows, n_draft, "n_draft")
        n_rows = call[0].shape[0]
        views, b = self._step_views(out)
        self.ctx._prepare(views + list(call))
        check(lib.kve_state_draft(h, n_rows, call[0].ptr, call[1].ptr, max_draft,
                                  ctypes.byref(b)), "kve_state_draft")
        out.n_tokens, out.n_rows = min(n_rows * max_draft, b.max_tokens), n_rows
        return out

    def append(self, rows: Sequence[int], n_new: Sequence[int], out: Optional[Step] = None,
               outputs: bool = True, scores: Any = None) -> Optional[Step]:
        """Append n_new[i] tokens to row rows[i]; return the Step holding the
        slot mapping (the slot, within the token's row, where each head
        writes each token, -1 to skip; tokens numbered row by row in the
        order given) and the move lists a round left. ``out``: buffers from
        step_buffers (else new ones, sized for this call). outputs=False
        advances the state alone and returns None. ``scores`` (scored states):
        float32 [len(rows), table_layers, table_heads, >= capacity] or
        [len(rows), tables, >= capacity] (scores_buffer's layout, which
        State.score fills), the scores of each row's slots as they are before
        the call (read for the rows whose round is due, see rounds_due, at
        candidates only)."""
        if len(rows) != len(n_new):
            raise ValueError("rows and n_new differ in length (%d, %d)" % (len(rows), len(n_new)))
        h = self.handle
        r, k = _arrays.u32_array(rows, "rows"), _arrays.u32_array(n_new, "n_new")
        if not outputs:
            self.ctx._stream()  # the call launches on torch's current stream, as every other
            b = _lib.StepBuffers()
            if scores is not None:
                self._scores(b, scores, len(rows), rows)
            check(lib.kve_state_append(h, len(rows), r, k,
                                       ctypes.byref(b) if scores is not None else None),
                  "kve_state_append")
            return None
        total = int(sum(n_new))
        if out is None and total > I32_MAX:  # the library's refusal, before allocating for it
            raise KvevictError(ERR_RANGE, "KVE_ERR_RANGE", "n_new sums to %d tokens: at most "
                               "2^31-1 per call" % total, "kve_state_append")
        if out is None:
            out = self.step_buffers(max(total, 1), max(len(rows), 1), max(list(n_new) + [1]))
        views, b = self._step_views(out)
        if scores is not None:
            self._scores(b, scores, len(rows), rows)
        check(lib.kve_state_append(self.handle, len(rows), r, k, ctypes.byref(b)),
              "kve_state_append")
        out.n_tokens, out.n_rows = total, len(rows)
        return out

    def append_device(self, rows: Any, n_new: Any, max_new: int, out: Step,
                      scores: Any = None) -> Step:
        """append with its rows in backend memory, for a step captured in a
        CUDA graph (kve_state_append_device): rows and n_new are int32 or
        uint32 [n_rows] arrays on the context's device (CUDA tensors; numpy
        arrays or CPU tensors with the CPU backend) that the engine rewrites
        before each replay; call row i appends n_new[i] <= max_new tokens to
        row rows[i], and n_new[i] = 0 makes it padding (rows[i] not read).
        Every launch depends on n_rows, max_new and the state's shape only.
        Nothing is read back: the refusals that need the data (an inactive
        or repeated row, n_new[i] > max_new, ...) change nothing, map the
        call's tokens to -1 and are raised by ctx.synchronize() (on the CPU,
        by this call). ``out`` (step_buffers, with max_new at least this
        max_new) gets the mapping of the padded shape, n_rows * max_new
        tokens: the call's tokens numbered row by row (prefix sums of n_new,
        padding rows take none), then -1 up to the shape's end; and the move
        lists of call row i (empty for padding). out.n_tokens and out.n_rows
        are set to that shape, so layer_slots and layer_moves give every
        layer's write its fixed shape (token_row: each token's row, packed
        the same way; move_row = rows).
        ``scores`` (scored states, required there): as append's, for call
        row i at scores[i], >= max_slots wide (any row may be due), written
        by score_device from the same rows and n_new for every layer first;
        a row that would run two rounds, or take more than W tokens before
        its round, refuses the call.
        Like every call, it runs on torch's current stream, which inside
        ``torch.cuda.graph`` is the capture stream. Host calls (admit,
        retire, append, seq, slots, digest) wait for the device first: make
        them outside the captured region."""
        h = self.handle
        max_new = _arrays.u32("max_new", max_new)
        if not isinstance(out, Step):
            raise ArgumentError("out: expected a kvevict.Step (State.step_buffers), got %s"
                                % type(out).__name__, out, "append_device")
        call = _arrays.call_rows(rows, n_new)
        n_rows = call[0].shape[0]
        views, b = self._step_views(out)
        if scores is not None:
            views.append(self._scores(b, scores, n_rows, None))
        self.ctx._prepare(views + list(call))
        check(lib.kve_state_append_device(h, n_rows, call[0].ptr, call[1].ptr, max_new,
                                          ctypes.byref(b)), "kve_state_append_device")
        out.n_tokens, out.n_rows = min(n_rows * max_new, b.max_tokens), n_rows
        return out

    def rebuild(self, row: int, seq_id: int, prompt_len: int, n_tokens: int,
                mapping: bool = False, steps: Optional[Sequence[int]] = None) -> Any:
        """Recompute a row from the ids alone (after preemption). steps: the
        sizes of its appends since admission (default: the prompt, then one
        token per append). With mapping=True, return where each head holds
        each position 0..n_tokens-1 ([table_layers, n_tokens, table_heads],
        -1 = evicted): every valid slot is named once."""
        h = self.handle
        row, seq_id = _arrays.u32("row", row), _arrays.u64("seq_id", seq_id)
        prompt_len, n_tokens = _arrays.u32("prompt_len", prompt_len), _arrays.u32("n_tokens", n_tokens)
        ptr, n, out = None, 0, None
        if mapping:
            out, ptr, n = self._mapping(n_tokens, None)
        else:
            self.ctx._stream()
        st = _arrays.u32_array(list(steps), "steps") if steps is not None else None
        check(lib.kve_state_rebuild(h, row, seq_id, prompt_len, n_tokens, st,
                                    len(steps) if steps is not None else 0, ptr, n),
              "kve_state_rebuild")
        return out

    def seq(self, row: int) -> SeqInfo:
        """Host bookkeeping of one row."""
        i = _lib.SeqInfo()
        h = self._read_handle()
        check(lib.kve_state_get_seq(h, _arrays.u32("row", row), ctypes.byref(i)),
              "kve_state_get_seq")
        return SeqInfo(bool(i.active), i.seq_id, i.prompt_len, i.capacity, i.n_tokens, i.round,
                       i.n_valid, i.n_used, i.table_offset, i.draft_first, i.max_draft)

    def digest(self, row: int) -> int:
        """The row's running digest (docs/SPEC.md section 11), an int: log it at retire.
        Waits for the backend, so not for the decode loop."""
        out = ctypes.c_uint64(0)
        h = self._read_handle()
        check(lib.kve_state_read_digest(h, _arrays.u32("row", row), ctypes.byref(out)),
              "kve_state_read_digest")
        return out.value

    def keepset_digest(self, row: int) -> int:
        """docs/SPEC.md "Digest" of the row's keep-sets now (kve_digest of its
        tables, one per head, on the CPU): equal across engines, backends and
        placements that kept the same positions. Not for the decode loop."""
        info, t = self.seq(row), self.slots(row)
        heads = np.ascontiguousarray(np.broadcast_to(t, (self.n_layers, self.n_heads, t.shape[2])))
        seq = np.zeros(1, dtype=[("seq_id", "<u8"), ("prompt_len", "<u4"), ("round", "<u4")])
        seq[0] = (info.seq_id, info.prompt_len, info.round)
        b = _lib.Batch(self.seed, 0, 1, seq.ctypes.data, self.n_layers, self.n_heads,
                       self.layer_offset, self.head_offset, t.shape[2], self.budget, self.window,
                       heads.ctypes.data, t.shape[2], None, 0)
        out = ctypes.c_uint64(0)
        with Context("cpu") as host:
            check(lib.kve_digest(host.handle, ctypes.byref(b), None, ctypes.byref(out)),
                  "kve_digest")
        return out.value

    def slots(self, row: int) -> np.ndarray:
        """A host copy of a row's tables, int32 [table_layers, table_heads, max_slots]."""
        out = np.empty((self.table_layers, self.table_heads, self.max_slots), dtype=np.int32)
        h = self._read_handle()
        check(lib.kve_state_read_slots(
            h, _arrays.u32("row", row), out.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)), out.size),
            "kve_state_read_slots")
        return out

    def row_table(self, row: int) -> Any:
        """Row @row's live tables, no copy: int32 [table_layers, table_heads,
        capacity] in backend memory (-1 = empty), valid while the row holds
        its sequence. numpy (or torch, per ``tensors``) on the CPU; a torch
        tensor on a GPU. The array keeps the state's memory alive: after
        close() (the state's or its context's) it still reads the tables as
        they were, never freed memory."""
        info = self.seq(row)
        if not info.active:
            raise ValueError("row %d holds no sequence" % row)
        shape = (self.table_layers, self.table_heads, info.capacity)
        ptr = self._table_ptr + 4 * info.table_offset
        owner = self._owner  # the array holds it: the tables live as long as the array
        if self.ctx.backend == "cpu":
            a = np.asarray(_arrays.HostArray(ptr, shape, "<i4", owner))
            if self._torch:
                import torch

                return torch.from_numpy(a)
            return a
        import torch

        return torch.as_tensor(_arrays.CudaArray(ptr, shape, "<i4", owner),
                               device="cuda:%d" % self.ctx.device)

    def _table_layer(self, layer: int) -> int:
        """The table layer of local layer @layer (0..n_layers-1; 0 when shared)."""
        layer = _arrays.u32("layer", layer)
        if layer >= self.n_layers:
            raise ValueError("layer = %d: must be 0..%d (a local index; the state has %d layers)"
                             % (layer, self.n_layers - 1, self.n_layers))
        return layer if self.table_layers > 1 else 0

    def layer_slots(self, step: Any, layer: int) -> Any:
        """The [tokens, table_heads] slots of @layer (a local index) in a Step
        (its call's tokens) or in a mapping array."""
        tl = self._table_layer(layer)
        if isinstance(step, Step):
            return step.mapping[tl, :step.n_tokens]
        _need_step(step, "layer_slots", mapping=True)
        return step[tl]

    def scores_buffer(self, max_rows: int) -> Any:
        """Zeroed float32 [max_rows, table_layers * table_heads, max_slots]: the
        scores layout kve_step_buffers.scores reads (State.score fills it)."""
        out = self.ctx._empty((max_rows, self.table_layers * self.table_heads, self.max_slots),
                              "float32", self._torch)
        out[...] = 0
        return out

    def score(self, rows: Sequence[int], n_new: Sequence[int], layer: int, keys: Any,
              out: Any, **kwargs: Any) -> Any:
        """Scores for the next append(rows, n_new) from @layer's K cache into
        out (scores_buffer's layout), kve_state_score; kwargs as kvevict.score
        (scorer, layout, block_table, ..., q_mean, q_abs_mean, group,
        rope_theta, znorm, accumulate, weight, cache_row)."""
        tl = self._table_layer(layer)
        return state_score(self, rows, n_new, tl, keys, out, **kwargs)

    def score_device(self, rows: Any, n_new: Any, layer: int, keys: Any, out: Any,
                     **kwargs: Any) -> Any:
        """score for a step planned on the device (kve_state_score_device):
        rows and n_new as append_device takes them (backend memory, the same
        buffers), the rows that are due decided on the device, one launch a
        layer, nothing read back (a CUDA graph can capture it: score every
        layer, then append_device(..., scores=out)). out: scores_buffer's
        layout, >= max_slots wide; padding rows and rows not due are left as
        they are. Call row i reads row i of the key cache's page table (no
        cache_row). Its scratch is the state's, sized at creation by
        State(score_group=): a larger TriAttention group is refused
        (KVE_ERR_RANGE). kwargs as score, less cache_row."""
        tl = self._table_layer(layer)
        return state_score_device(self, rows, n_new, tl, keys, out, **kwargs)

    def layer_moves(self, step: Step, layer: int) -> dict:
        """cache_write's keyword arguments for the moves of @layer in a Step:
        its call's rows in order (give move_row= when the cache's page-table
        row of call row i is not i)."""
        tl = self._table_layer(layer)
        _need_step(step, "layer_moves")
        return dict(moves=step.moves[tl, :step.n_rows], n_moves=step.n_moves[tl, :step.n_rows])

