#!/usr/bin/python3
"""The binding's guards, from the caller's side (docs of each check are in
python/kvevict): handle lifetimes (a Context outlives its States whatever
the order of close, gc and exit; row_table arrays keep their memory), the
length of every array the library indexes by a size taken from another
argument, zero strides, per-cache entry sizes in compact, and integers that
ctypes would truncate. Arrays are sized exactly: a guard that let a call
through would let the library read or write past them."""

import gc
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

import numpy as np
import torch

import kvevict
import kvevict.ops  # noqa: F401  (registers torch.ops.kvevict.*)
from kvevict import _arrays


def small_state(ctx, **kw):
    args = dict(max_seqs=2, n_layers=1, n_heads=1, budget=8, window=2, interval=2,
                max_slots=16)
    args.update(kw)
    return kvevict.State(ctx, **args)


class Lifetimes(unittest.TestCase):
    """F1-F3: no order of close(), gc or exit destroys a context before its
    states, and a row_table array never views freed memory."""

    def run_script(self, body):
        r = subprocess.run([sys.executable, "-c", textwrap.dedent(body)], env=os.environ,
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, "rc %d\n%s%s" % (r.returncode, r.stdout, r.stderr))
        self.assertIn("done", r.stdout)

    def test_exit_with_module_level_state(self):
        # module globals referenced by a function: freed by the gc at exit, in any order
        self.run_script("""
            import kvevict
            ctx = kvevict.Context("cpu", threads=1)
            def make_state():
                return kvevict.State(ctx, max_seqs=1, n_layers=1, n_heads=1, budget=8,
                                     window=2, interval=2, max_slots=16)
            st = make_state()
            st.admit(0, 1, 4)
            t = st.row_table(0)
            print("done")
        """)

    def test_gc_cycle(self):
        class Engine:
            def __init__(self):
                self.ctx = kvevict.Context("cpu", threads=1)
                self.state = small_state(self.ctx)
                self.state.admit(0, 1, 4)
                self.me = self  # only the cyclic gc frees it
        for _ in range(20):
            e = Engine()
            del e
            gc.collect()

    def test_destroy_order_recorded(self):
        calls = []
        real = (kvevict.Context._destroy, kvevict.State._destroy)

        def tracer(name, fn):
            return lambda h: (calls.append(name), fn(h))[1]
        try:
            kvevict.Context._destroy = tracer("context", real[0])
            kvevict.State._destroy = tracer("state", real[1])

            class Engine:
                def __init__(self):
                    self.ctx = kvevict.Context("cpu", threads=1)
                    self.states = [small_state(self.ctx), small_state(self.ctx)]
                    self.me = self
            for _ in range(10):
                Engine()
                gc.collect()
        finally:
            kvevict.Context._destroy, kvevict.State._destroy = real
        self.assertEqual(calls, ["state", "state", "context"] * 10)

    def test_parent_finalized_first(self):
        # the gc runs the finalizers of garbage in any order: a context's owner
        # finalized before its state's must wait for the state
        calls = []
        parent = kvevict._Owner("ctx", lambda h: calls.append(h))
        child = kvevict._Owner("state", lambda h: calls.append(h), parent)
        parent.__del__()
        self.assertEqual(calls, [])
        child.__del__()
        self.assertEqual(calls, ["state", "ctx"])

    def test_context_closed_under_state(self):
        with kvevict.Context("cpu", threads=1) as ctx:
            st = small_state(ctx)
            st.admit(0, 1, 4)
        for fn in (lambda: st.admit(1, 1, 4), lambda: st.append([0], [1]),
                   lambda: st.slots(0), lambda: st.digest(0), lambda: st.seq(0),
                   lambda: st.rebuild(0, 1, 4, 8, mapping=True), lambda: st.rounds_due([0], [1]),
                   lambda: st.max_moves(1), lambda: st.row_table(0)):
            with self.assertRaises(ValueError) as e:
                fn()
            self.assertIn("State is closed (its Context was closed)", str(e.exception))
        with self.assertRaises(ValueError) as e:
            small_state(ctx)
        self.assertIn("Context is closed", str(e.exception))
        st.close()  # again: a no-op

    def table(self, ctx, tensors="numpy"):
        st = small_state(ctx, tensors=tensors)
        st.admit(0, 1, 4)
        st.append([0], [4], outputs=False)
        return st, st.row_table(0)

    def test_row_table_outlives_state(self):
        ctx = kvevict.Context("cpu", threads=1)
        for tensors in ("numpy", "torch"):
            st, t = self.table(ctx, tensors)
            want = np.array(t).copy()
            self.assertEqual(want.ravel()[:4].tolist(), [0, 1, 2, 3])
            del st
            gc.collect()
            junk = [np.full(4096, 12345, np.int32) for _ in range(64)]  # reuse freed heap
            np.testing.assert_array_equal(np.array(t), want)
            t[...] = 7  # the state's memory, still owned by the array
            del junk

    def test_row_table_after_close(self):
        for close_ctx in (False, True):
            ctx = kvevict.Context("cpu", threads=1)
            st, t = self.table(ctx)
            want = t.copy()
            (ctx if close_ctx else st).close()
            with self.assertRaises(ValueError):
                st.seq(0)
            junk = [np.full(4096, 12345, np.int32) for _ in range(64)]
            np.testing.assert_array_equal(t, want)
            t[...] = 7
            del junk, t
            gc.collect()


class Lengths(unittest.TestCase):
    """F4-F6, F8, F10-F12: lengths the library takes from other arguments."""

    def setUp(self):
        self.ctx = kvevict.Context("cpu", threads=1)

    def assert_refused(self, fn, *words, exc=ValueError):
        with self.assertRaises(exc) as e:
            fn()
        for w in words:
            self.assertIn(w, str(e.exception))

    # --- cache_write -----------------------------------------------------
    def test_token_row_length(self):
        src = np.ones((64, 1, 4), np.float32)
        cache = np.zeros((2, 4, 1, 4), np.float32)
        slots = np.zeros(64, np.int64)
        bt = np.zeros((2, 1), np.int32)
        self.assert_refused(lambda: kvevict.cache_write(self.ctx, [src], [cache], slots,
                                                        np.zeros(1, np.int32), block_table=bt),
                            "token_row: shape (1,), expected shape (64,)")

    def test_append_paged_batch_indices(self):
        T, D, PS = 64, 4, 4
        k, v = torch.ones(T, 1, D), torch.ones(T, 1, D)
        kc, vc = torch.zeros(8, PS, 1, D), torch.zeros(8, PS, 1, D)
        one = torch.tensor([0], dtype=torch.int32)
        self.assert_refused(lambda: torch.ops.kvevict.append_paged_kv_cache(
            k, v, one, torch.zeros(T, dtype=torch.int32), kc, vc, one,
            torch.tensor([0, 1], dtype=torch.int32), torch.tensor([1], dtype=torch.int32), "NHD"),
            "token_row: shape (1,), expected shape (64,)")

    def flashinfer(self, rows, indices, last):
        src = np.ones((4, 1, 4), np.float32)
        cache = np.zeros((8, 1, 4, 4), np.float32)
        kvevict.cache_write(self.ctx, [src], [cache], np.zeros((4, 1), np.int64),
                            np.full(4, rows - 1, np.int32), layout="hnd",
                            indptr=np.arange(rows + 1, dtype=np.int32), indices=indices,
                            last_page_len=last)

    def test_last_page_len_and_indices(self):
        R = 64
        self.assert_refused(lambda: self.flashinfer(R, np.zeros(R, np.int32), np.ones(1, np.int32)),
                            "last_page_len: shape (1,), expected shape (64,)")
        self.assert_refused(lambda: self.flashinfer(R, np.zeros(1, np.int32), np.ones(R, np.int32)),
                            "indices: shape (1,), expected shape (>= 64,)", "indptr[64] = 64")
        self.assert_refused(lambda: self.flashinfer(R, np.zeros(R, np.int32),
                                                    np.ones((R, 1), np.int32)),
                            "last_page_len: 2 dimensions")
        self.flashinfer(R, np.zeros(R, np.int32), np.ones(R, np.int32))  # exact sizes pass

    def moves_write(self, moves, n_moves, move_row=None):
        src = np.ones((1, 1, 4), np.float32)
        cache = np.zeros((4, 4, 1, 4), np.float32)
        kvevict.cache_write(self.ctx, [src], [cache], np.zeros((1, 1), np.int64),
                            np.zeros(1, np.int32), block_table=np.arange(4, dtype=np.int32)[:, None],
                            moves=moves, n_moves=n_moves, move_row=move_row)

    def test_moves_shapes(self):
        self.assert_refused(lambda: self.moves_write(np.zeros((1, 1, 16, 1), np.int32),
                                                     np.full((1, 1), 16, np.int32)),
                            "moves: shape (1, 1, 16, 1), expected shape (*, *, *, 2)")
        self.assert_refused(lambda: self.moves_write(np.zeros((4, 1, 1, 2), np.int32),
                                                     np.zeros((4, 1), np.int32),
                                                     np.zeros(1, np.int32)),
                            "move_row: shape (1,), expected shape (4,)")
        self.moves_write(np.zeros((4, 1, 1, 2), np.int32), np.zeros((4, 1), np.int32),
                         np.zeros(4, np.int32))

    # --- compact ---------------------------------------------------------
    def evicted(self, heads=1, slots=16):
        sp = np.tile(np.arange(slots, dtype=np.int32), (1, 1, heads, 1))
        ev, ne = kvevict.evict(self.ctx, sp, [(1, 0, 0)], seed=1, budget=4, window=2)
        return sp, ev, ne

    def test_compact_cache_shape(self):
        sp, ev, ne = self.evicted()
        self.assert_refused(lambda: kvevict.compact(self.ctx, sp, ev, ne,
                                                    [np.zeros((1, 1, 1, 8, 4), np.float32)]),
                            "caches[0]: shape (1, 1, 1, 8, 4), expected shape (1, 1, 1, >= 16, *)")
        self.assert_refused(lambda: kvevict.compact(self.ctx, sp, ev, ne,
                                                    [np.zeros((16, 4), np.float32)]),
                            "caches[0]: 2 dimensions")
        kvevict.compact(self.ctx, sp, ev, ne, [np.zeros((1, 1, 1, 16, 4), np.float32)])

    def test_compact_evicted_shapes(self):
        sp, ev, ne = self.evicted(heads=8)
        cache = np.zeros((1, 1, 8, 16, 2), np.float32)
        self.assert_refused(lambda: kvevict.compact(self.ctx, sp, ev[:, :, :1].copy(), ne, [cache]),
                            "evicted: shape (1, 1, 1, 12), expected shape (1, 1, 8, *)")
        self.assert_refused(lambda: kvevict.compact(self.ctx, sp, ev, ne[:, :, :1].copy(), [cache]),
                            "n_evicted: shape (1, 1, 1), expected shape (1, 1, 8)")
        self.assert_refused(lambda: kvevict.compact(self.ctx, sp, ev[..., :2].copy(), ne, [cache]),
                            "evicted: shape (1, 1, 8, 2), but n_evicted names up to 12")

    def test_compact_entry_sizes(self):
        # F9: one entry size per kve_compact call
        sp, ev, ne = self.evicted()
        k = np.zeros((1, 1, 1, 16, 1), np.float32)
        v = np.zeros((1, 1, 1, 16, 4), np.float32)
        self.assert_refused(lambda: kvevict.compact(self.ctx, sp, ev, ne, [k, v]),
                            "caches[1]: entry of 16 bytes", "caches[0]'s is 4")

    # --- score -----------------------------------------------------------
    def test_score_tables(self):
        keys = np.ones((1, 8, 16, 8), np.float32)
        sp = np.tile(np.arange(16, dtype=np.int32), (1, 1, 1))
        self.assert_refused(lambda: kvevict.score(self.ctx, keys, sp, prompt_len=0, window=0,
                                                  scorer="knorm", layout="contiguous"),
                            "slot_pos: shape (1, 1, 16), expected shape (*, 8, *)")
        kvevict.score(self.ctx, keys, sp, prompt_len=0, window=0, scorer="knorm",
                      layout="contiguous", shared_heads=True)

    def test_score_indptr(self):
        keys = np.ones((4, 4, 1, 8), np.float32)  # nhd pages
        sp = np.tile(np.arange(4, dtype=np.int32), (2, 1, 1))

        def run(indices, last):
            kvevict.score(self.ctx, keys, sp, prompt_len=0, window=0, scorer="knorm",
                          indptr=np.array([0, 1, 2], np.int32), indices=indices,
                          last_page_len=last)
        self.assert_refused(lambda: run(np.zeros(1, np.int32), np.full(2, 4, np.int32)),
                            "indices: shape (1,), expected shape (>= 2,)")
        self.assert_refused(lambda: run(np.zeros(2, np.int32), np.full(1, 4, np.int32)),
                            "last_page_len: shape (1,), expected shape (2,)")
        run(np.array([0, 1], np.int32), np.full(2, 4, np.int32))

    def test_score_triattention_sizes(self):
        H, N, D = 2, 16, 8
        keys = np.ones((1, H, N, D), np.float32)
        sp = np.tile(np.arange(N, dtype=np.int32), (1, H, 1))
        good = dict(q_mean=np.ones((H, D // 2, 2), np.float32),
                    q_abs_mean=np.ones((H, D // 2), np.float32),
                    omega=np.ones(D // 2, np.float32), freq_scale_sq=np.ones(D // 2, np.float32))

        def run(**kw):
            args = dict(good)
            args.update(kw)
            kvevict.score(self.ctx, keys, sp, prompt_len=0, window=0, scorer="triattention",
                          layout="contiguous", **args)
        run()
        self.assert_refused(lambda: run(q_mean=np.ones(1, np.float32)),
                            "q_mean: shape (1,) (1 elements), expected 16 elements")
        self.assert_refused(lambda: run(q_abs_mean=np.ones(1, np.float32)),
                            "q_abs_mean: shape (1,) (1 elements), expected 8 elements")
        self.assert_refused(lambda: run(omega=np.ones(1, np.float32)),
                            "omega: shape (1,), expected shape (4,)")
        self.assert_refused(lambda: run(freq_scale_sq=np.ones(1, np.float32)),
                            "freq_scale_sq: shape (1,), expected shape (4,)")
        self.assert_refused(lambda: run(q_mean=np.ones((H, D // 2, 2), np.float32), group=2),
                            "q_mean", "expected 32 elements")

    def test_state_score_out(self):
        st = small_state(self.ctx, max_seqs=4)
        rows = [0, 1, 2, 3]
        for r in rows:
            st.admit(r, 10 + r, 0)
        for _ in range(10):
            st.append(rows, [1] * 4, outputs=False)
        cap = st.seq(0).capacity
        keys = np.ones((4, 1, cap, 8), np.float32)
        self.assert_refused(lambda: st.score(rows, [1] * 4, 0, keys,
                                             np.zeros((1, 1, cap), np.float32),
                                             scorer="knorm", layout="contiguous"),
                            "out: shape (1, 1, %d), expected shape (>= 4, 1, *)" % cap)
        self.assert_refused(lambda: st.score(rows, [1] * 4, 0, keys,
                                             np.zeros((4, 2, cap), np.float32),
                                             scorer="knorm", layout="contiguous"),
                            "expected shape (>= 4, 1, *)")
        st.score(rows, [1] * 4, 0, keys, np.zeros((4, 1, cap), np.float32), scorer="knorm",
                 layout="contiguous")


class Strides(unittest.TestCase):
    """F7: a zero stride is the library's dense default, so broadcast views
    (torch expand) are refused where it reads or writes through them."""

    def setUp(self):
        self.ctx = kvevict.Context("cpu", threads=1)

    def test_expanded_cache(self):
        base = torch.zeros(1, 4, 1, 4)
        with self.assertRaises(ValueError) as e:
            kvevict.cache_write(self.ctx, [torch.ones(2, 1, 4)], [base.expand(4, 4, 1, 4)],
                                torch.tensor([0, 5]))
        self.assertIn("dsts[0]: stride 0 on dim 0", str(e.exception))
        self.assertEqual(float(base.abs().sum()), 0.0)

    def test_expanded_source(self):
        cache = torch.zeros(4, 4, 1, 4)
        with self.assertRaises(ValueError) as e:
            kvevict.cache_write(self.ctx, [torch.ones(1, 1, 4).expand(16, 1, 4)], [cache],
                                torch.arange(16))
        self.assertIn("srcs[0]: stride 0 on dim 0", str(e.exception))

    def test_expanded_keys(self):
        keys = torch.ones(1, 1, 16, 8).expand(1, 4, 16, 8)
        sp = np.tile(np.arange(16, dtype=np.int32), (1, 4, 1))
        with self.assertRaises(ValueError) as e:
            kvevict.score(self.ctx, keys, sp, prompt_len=0, window=0, scorer="knorm",
                          layout="contiguous")
        self.assertIn("keys: stride 0 on dim 1", str(e.exception))

    def test_expanded_scale(self):
        src = np.ones((1, 2, 4), np.float32)
        cache = np.zeros((1, 4, 2, 4), np.uint8)
        scale = torch.ones(1).expand(2)
        with self.assertRaises(ValueError) as e:
            kvevict.cache_write(self.ctx, [src], [cache], np.zeros(1, np.int64),
                                kv_cache_dtype="fp8", scales=[scale])
        self.assertIn("scales[0]: not contiguous: dims 0.. must be dense", str(e.exception))


class Counts(unittest.TestCase):
    """F13-F15: counts given beside arrays must match them."""

    def setUp(self):
        self.ctx = kvevict.Context("cpu", threads=1)

    def test_evict_seqs(self):
        sp = np.tile(np.arange(16, dtype=np.int32), (2, 1, 1, 1))
        for seqs in ([(1, 0, 0)], [(1, 0, 0)] * 3):
            with self.assertRaises(ValueError) as e:
                kvevict.evict(self.ctx, sp, seqs, seed=1, budget=8, window=2)
            self.assertIn("seqs: %d tuples (seq_id, prompt_len, round) for 2 sequences"
                          % len(seqs), str(e.exception))

    def test_n_slots(self):
        parent = np.tile(np.arange(16, dtype=np.int32), (1, 1, 1, 1))
        with self.assertRaises(ValueError) as e:
            kvevict.evict(self.ctx, parent[..., :8], [(1, 0, 0)], seed=1, budget=4, window=2,
                          n_slots=16)
        self.assertIn("n_slots = 16: slot_pos holds 8 slots a head", str(e.exception))

    def test_append_scores_width(self):
        st = small_state(self.ctx, max_seqs=1, scored=True)
        st.admit(0, 1, 0)
        cap = st.seq(0).capacity
        st.append([0], [cap], outputs=False)
        parent = np.arange(cap, dtype=np.float32)[None, None, None, :].copy()
        with self.assertRaises(ValueError) as e:
            st.append([0], [1], outputs=False, scores=parent[..., :2])
        self.assertIn("scores: shape (1, 1, 1, 2), expected shape (>= 1, 1, 1, >= %d)" % cap,
                      str(e.exception))
        st.append([0], [1], outputs=False, scores=parent)


class Integers(unittest.TestCase):
    """F16: every integer is range-checked before ctypes would truncate it."""

    def setUp(self):
        self.ctx = kvevict.Context("cpu", threads=1)
        self.st = small_state(self.ctx)

    def assert_range(self, fn, fragment):
        with self.assertRaises(ValueError) as e:
            fn()
        self.assertIn(fragment, str(e.exception))
        self.assertIn("out of range", str(e.exception))

    def test_helper(self):
        self.assertEqual(_arrays.u32("x", np.int64(7)), 7)
        self.assertEqual(_arrays.u64("x", 2 ** 64 - 1), 2 ** 64 - 1)
        self.assert_range(lambda: _arrays.u32("x", 2 ** 32), "x = 4294967296")
        self.assert_range(lambda: _arrays.i32("x", -2 ** 31 - 1), "x = -2147483649")
        with self.assertRaises(TypeError) as e:
            _arrays.u32("budget", 1.5)
        self.assertIn("budget = 1.5: expected an integer", str(e.exception))

    def test_state_calls(self):
        st = self.st
        self.assert_range(lambda: st.admit(2 ** 32, 5, 3), "row = 4294967296")
        self.assertFalse(st.seq(0).active)
        self.assert_range(lambda: st.admit(1, -1, 0), "seq_id = -1")
        self.assert_range(lambda: st.admit(-1, 1, 0), "row = -1")
        self.assert_range(lambda: st.seq(2 ** 32 + 1), "row = 4294967297")
        st.admit(0, 1, 4)
        step = st.step_buffers(8, 1, 4)
        self.assert_range(lambda: st.append([0], [2 ** 32 + 1], out=step), "n_new[0] = 4294967297")
        self.assert_range(lambda: st.append([2 ** 32], [1], out=step), "rows[0] = 4294967296")
        self.assert_range(lambda: st.rounds_due([2 ** 32], [1]), "rows[0] = 4294967296")
        self.assert_range(lambda: st.max_moves(-1), "max_new = -1")
        self.assert_range(lambda: st.max_moves(2 ** 32 + 3), "max_new = 4294967299")
        self.assert_range(lambda: st.rebuild(0, 1, 4, -1), "n_tokens = -1")
        self.assert_range(lambda: st.retire(2 ** 32), "row = 4294967296")
        self.assert_range(lambda: st.digest(-1), "row = -1")
        self.assert_range(lambda: st.layer_slots(step, -1), "layer = -1")
        with self.assertRaises(ValueError) as e:
            st.layer_moves(step, 1)
        self.assertIn("layer = 1: must be 0..0", str(e.exception))
        # issue 60 item 4: a Step that is None (an append with outputs=False
        # returns None) is named, not an AttributeError
        for fn in (st.layer_moves, st.layer_slots):
            with self.assertRaises(TypeError) as e:
                fn(None, 0)
            self.assertIn("step = None: expected a kvevict.Step", str(e.exception))
            self.assertEqual(e.exception.name, "KVE_ERR_NULL")
        # n_new past 2^31-1 in all: refused before the outputs are allocated
        # (2^31 tokens of int64 mapping entries: MemoryError before)
        for n_new in ([2 ** 31], [2 ** 30, 2 ** 30]):
            rows = [0] if len(n_new) == 1 else [0, 1]
            with self.assertRaises(kvevict.KvevictError) as e:
                st.append(rows, n_new)
            self.assertEqual(e.exception.name, "KVE_ERR_RANGE")
            self.assertIn("kve_state_append: KVE_ERR_RANGE: n_new sums to %d tokens: at most "
                          "2^31-1 per call" % sum(n_new), str(e.exception))
        self.assertEqual(st.seq(0).n_tokens, 0)  # admitted, nothing appended

    def test_constructors_and_free_functions(self):
        self.assert_range(lambda: kvevict.capacity(2 ** 32 + 3, budget=8, window=2, interval=2),
                          "prompt_len = 4294967299")
        self.assert_range(lambda: kvevict.capacity(3, budget=2 ** 32 + 8, window=2, interval=2),
                          "budget = 4294967304")
        self.assert_range(lambda: small_state(self.ctx, max_seqs=2 ** 32 + 1), "max_seqs")
        self.assert_range(lambda: small_state(self.ctx, budget=2 ** 32 + 8), "budget")
        self.assert_range(lambda: small_state(self.ctx, seed=2 ** 64), "seed = 18446744073709551616")
        self.assert_range(lambda: small_state(self.ctx, seed=-1), "seed = -1")
        self.assert_range(lambda: kvevict.Context("cpu", threads=2 ** 32 + 1), "threads")
        sp = np.tile(np.arange(16, dtype=np.int32), (1, 1, 1, 1))
        ev = lambda **kw: kvevict.evict(self.ctx, sp, kw.pop("seqs", [(1, 0, 0)]),  # noqa: E731
                                        **dict(dict(seed=1, budget=8, window=2), **kw))
        self.assert_range(lambda: ev(seed=-1), "seed = -1")
        self.assert_range(lambda: ev(budget=-1), "budget = -1")
        self.assert_range(lambda: ev(seqs=[(1, -1, 0)]), "seqs[0].prompt_len = -1")
        self.assert_range(lambda: ev(seqs=[(2 ** 64 + 9, 0, 0)]), "seqs[0].seq_id")
        keys = np.ones((1, 1, 16, 8), np.float32)
        self.assert_range(lambda: kvevict.score(self.ctx, keys, sp[0], prompt_len=-1, window=0,
                                                scorer="knorm", layout="contiguous"),
                          "prompt_len = -1")
        self.assert_range(lambda: kvevict.score(self.ctx, keys, sp[0], prompt_len=0, window=0,
                                                scorer="knorm", layout="contiguous",
                                                cache_row=[2 ** 31]), "cache_row[0] = 2147483648")


class Arguments(unittest.TestCase):
    """F17: None and wrong types name the argument."""

    def test_messages(self):
        ctx = kvevict.Context("cpu", threads=1)
        with self.assertRaises(TypeError) as e:
            kvevict.Context(None)
        self.assertIn("backend = None", str(e.exception))
        with self.assertRaises(TypeError) as e:
            kvevict.State(None, max_seqs=1, n_layers=1, n_heads=1, budget=8, max_slots=16)
        self.assertIn("ctx: expected a kvevict.Context", str(e.exception))
        src, cache = np.ones((1, 1, 4), np.float32), np.zeros((1, 4, 1, 4), np.float32)
        with self.assertRaises(TypeError) as e:
            kvevict.cache_write(None, [src], [cache], np.zeros(1, np.int64))
        self.assertIn("ctx: expected a kvevict.Context", str(e.exception))
        for dt in (None, ["auto", "auto"]):
            with self.assertRaises(ValueError) as e:
                kvevict.cache_write(ctx, [src], [cache], np.zeros(1, np.int64), kv_cache_dtype=dt)
            self.assertIn("a name, or one per cache (1)", str(e.exception))
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "empty.bin")
            open(path, "wb").close()
            with self.assertRaises(ValueError) as e:
                kvevict.read_triattention_stats(path)
            self.assertIn("not a version-1 calibration file", str(e.exception))


if __name__ == "__main__":
    unittest.main()
