#!/usr/bin/python3
"""What the binding takes and what it says (issue 37, item 7):
- a read-only or broadcast numpy array is taken where the library only
  reads the argument (a const pointer in C), with the results of a writable,
  dense copy; a read-only array the library would write into is refused;
- an array of a layout the library cannot read is refused with a message
  that says it is not contiguous and how to pass a copy
  (np.ascontiguousarray, or .contiguous() for a tensor);
- None, or another wrong type, where a Context, State or array is needed is
  the package's own error (kvevict.KvevictError, and a TypeError) naming the
  argument, KVE_ERR_NULL for None as the library says of a NULL pointer."""

import unittest

import numpy as np
import torch

import kvevict


def frozen(a):
    """A read-only copy of @a."""
    a = np.array(a)
    a.flags.writeable = False
    return a


class ConstArrays(unittest.TestCase):
    def setUp(self):
        self.ctx = kvevict.Context("cpu", threads=1)
        self.rng = np.random.default_rng(37)

    def evict(self, slot_pos):
        return kvevict.evict(self.ctx, slot_pos, [(5, 2, 1)], seed=9, budget=6, window=2)

    def test_evict_read_only_and_broadcast(self):
        row = self.rng.permutation(10).astype(np.int32)
        dense = np.ascontiguousarray(np.broadcast_to(row, (1, 2, 3, 10)))
        want = self.evict(dense.copy())
        for sp in (frozen(dense), np.broadcast_to(row, (1, 2, 3, 10))):
            got = self.evict(sp)
            np.testing.assert_array_equal(got[0], want[0])
            np.testing.assert_array_equal(got[1], want[1])
        self.assertTrue(want[1].min() == 4)  # 10 slots down to 6: it evicted

    def test_compact_read_only_lists(self):
        sp = self.rng.permutation(12).astype(np.int32).reshape(1, 1, 1, 12)
        ev, n_ev = kvevict.evict(self.ctx, sp, [(1, 0, 0)], seed=3, budget=8, window=2)
        caches = [np.arange(12 * 4, dtype=np.float32).reshape(1, 1, 1, 12, 4) for _ in range(2)]
        table = [sp.copy(), sp.copy()]
        kvevict.compact(self.ctx, table[0], ev, n_ev, [caches[0]])
        kvevict.compact(self.ctx, table[1], frozen(ev), frozen(n_ev), [caches[1]])
        np.testing.assert_array_equal(table[1], table[0])
        np.testing.assert_array_equal(caches[1], caches[0])
        self.assertFalse(np.array_equal(table[0], sp))

    def test_cache_write_read_only_and_broadcast(self):
        src = self.rng.standard_normal((1, 2, 4)).astype(np.float32)
        slots = np.array([[1, 6], [3, 0], [7, 5]], np.int64)
        rows = np.zeros(3, np.int32)
        want = np.zeros((1, 8, 2, 4), np.float32)
        kvevict.cache_write(self.ctx, [np.repeat(src, 3, 0)], [want], slots, rows)
        self.assertEqual(np.count_nonzero(want.any(axis=3)), 6)
        got = np.zeros_like(want)
        kvevict.cache_write(self.ctx, [np.broadcast_to(src, (3, 2, 4))], [got], frozen(slots),
                            frozen(rows), block_table=frozen(np.zeros((1, 1), np.int32)))
        np.testing.assert_array_equal(got, want)
        # fp8 with a broadcast scale, against a dense one
        fp8 = [np.zeros((1, 8, 2, 4), np.uint8) for _ in range(2)]
        for cache, scale in zip(fp8, (np.full(2, 0.5, np.float32),
                                      np.broadcast_to(np.float32(0.5), (2,)))):
            kvevict.cache_write(self.ctx, [np.repeat(src, 3, 0)], [cache], slots, rows,
                                kv_cache_dtype="fp8", scales=[scale])
        np.testing.assert_array_equal(fp8[1], fp8[0])
        self.assertTrue(fp8[0].any())

    def test_score_read_only_and_broadcast(self):
        keys = self.rng.standard_normal((1, 1, 16, 8)).astype(np.float32)
        sp = np.arange(16, dtype=np.int32).reshape(1, 1, 16)
        kw = dict(prompt_len=2, window=2, scorer="knorm", layout="contiguous")
        want = kvevict.score(self.ctx, np.repeat(keys, 3, 1), np.repeat(sp, 3, 1), **kw)
        got = kvevict.score(self.ctx, np.broadcast_to(keys, (1, 3, 16, 8)),
                            frozen(np.repeat(sp, 3, 1)), **kw)
        np.testing.assert_array_equal(got, want)
        self.assertTrue(np.count_nonzero(want) == 3 * 12)

    def test_written_read_only_refused(self):
        src = np.ones((1, 1, 4), np.float32)
        cache = frozen(np.zeros((1, 4, 1, 4), np.float32))
        with self.assertRaises(ValueError) as e:
            kvevict.cache_write(self.ctx, [src], [cache], np.zeros(1, np.int64))
        self.assertIn("dsts[0]: a read-only numpy array, but the library writes into it",
                      str(e.exception))
        self.assertFalse(cache.any())
        sp = frozen(np.arange(8, dtype=np.int32).reshape(1, 1, 1, 8))
        ev, n_ev = kvevict.evict(self.ctx, sp, [(1, 0, 0)], seed=3, budget=4, window=1)
        with self.assertRaises(ValueError) as e:
            kvevict.compact(self.ctx, sp, ev, n_ev, [np.zeros((1, 1, 1, 8, 2), np.float32)])
        self.assertIn("slot_pos: a read-only numpy array", str(e.exception))


class Contiguity(unittest.TestCase):
    def setUp(self):
        self.ctx = kvevict.Context("cpu", threads=1)

    def assert_says(self, call, *parts):
        with self.assertRaises(ValueError) as e:
            call()
        for p in parts:
            self.assertIn(p, str(e.exception))

    def test_messages(self):
        ev = lambda sp: kvevict.evict(self.ctx, sp, [(1, 0, 0)], seed=1, budget=4, window=1)
        strided = np.arange(16, dtype=np.int32).reshape(1, 1, 1, 16)[..., ::2]
        self.assert_says(lambda: ev(strided), "slot_pos: not contiguous",
                         "pass np.ascontiguousarray(slot_pos)")
        self.assert_says(lambda: ev(torch.from_numpy(np.arange(16, dtype=np.int32))
                                    .reshape(1, 1, 1, 16)[..., ::2]),
                         "slot_pos: not contiguous", "pass slot_pos.contiguous()")
        src = np.ones((1, 1, 8), np.float32)[..., ::2]
        cache = np.zeros((1, 4, 1, 4), np.float32)
        self.assert_says(lambda: kvevict.cache_write(self.ctx, [src], [cache],
                                                     np.zeros(1, np.int64)),
                         "srcs[0]: not contiguous: dims 2.. must be dense, but dim 2 has stride "
                         "8 bytes, not 4", "pass np.ascontiguousarray(srcs[0])")
        # a destination whose entry spans two strided dims: a copy takes the results
        wide = np.zeros((1, 4, 1, 2, 8), np.float32)
        self.assert_says(lambda: kvevict.cache_write(self.ctx, [np.ones((1, 1, 8), np.float32)],
                                                     [wide[..., ::2]], np.zeros(1, np.int64)),
                         "dsts[0]: not contiguous", "pass np.ascontiguousarray(dsts[0]) "
                         "(the library writes into it: read the results from the copy)")
        self.assertFalse(wide.any())
        # one strided element dim is an entry (vLLM's CPU K): written in place
        wide = np.zeros((1, 4, 1, 8), np.float32)
        kvevict.cache_write(self.ctx, [np.arange(1, 5, dtype=np.float32).reshape(1, 1, 4)],
                            [wide[..., ::2]], np.full(1, 2, np.int64))
        self.assertEqual(wide[0, 2, 0].tolist(), [1, 0, 2, 0, 3, 0, 4, 0])
        self.assertEqual(np.count_nonzero(wide), 4)
        keys = np.ones((1, 1, 16, 8), np.float32)
        sp = np.arange(32, dtype=np.int32).reshape(1, 1, 32)[..., ::2]
        self.assert_says(lambda: kvevict.score(self.ctx, keys, sp, prompt_len=0, window=0,
                                               scorer="knorm", layout="contiguous"),
                         "slot_pos: not contiguous", "pass np.ascontiguousarray(slot_pos)")


class WrongTypes(unittest.TestCase):
    def setUp(self):
        self.ctx = kvevict.Context("cpu", threads=1)

    def assert_names(self, call, text, status="KVE_ERR_NULL", where=None):
        with self.assertRaises(kvevict.KvevictError) as e:
            call()
        self.assertIsInstance(e.exception, TypeError)
        self.assertEqual(e.exception.name, status)
        self.assertIn(text, str(e.exception))
        if where:
            self.assertTrue(str(e.exception).startswith(where + ": "), str(e.exception))

    def test_none_context(self):
        sp = np.arange(8, dtype=np.int32).reshape(1, 1, 1, 8)
        ev = dict(seed=1, budget=4, window=1)
        self.assert_names(lambda: kvevict.evict(None, sp, [(1, 0, 0)], **ev),
                          "ctx: expected a kvevict.Context, got None", where="evict")
        self.assert_names(lambda: kvevict.evict("cpu", sp, [(1, 0, 0)], **ev),
                          "ctx: expected a kvevict.Context, got str", "KVE_ERR_INVALID")
        e, n = kvevict.evict(self.ctx, sp, [(1, 0, 0)], **ev)
        caches = [np.zeros((1, 1, 1, 8, 2), np.float32)]
        self.assert_names(lambda: kvevict.compact(None, sp, e, n, caches), "ctx:",
                          where="compact")
        self.assert_names(lambda: kvevict.cache_write(None, [np.ones((1, 1, 4), np.float32)],
                                                      [np.zeros((1, 4, 1, 4), np.float32)],
                                                      np.zeros(1, np.int64)),
                          "ctx:", where="cache_write")
        self.assert_names(lambda: kvevict.score(None, np.ones((1, 1, 8, 4), np.float32),
                                                sp[0], prompt_len=0, window=0, scorer="knorm",
                                                layout="contiguous"), "ctx:", where="score")
        self.assert_names(lambda: kvevict.State(None, max_seqs=1, n_layers=1, n_heads=1,
                                                budget=8, max_slots=16), "ctx:", where="State")
        self.assert_names(lambda: kvevict.state_score(None, [0], [1], 0, np.ones((1, 1, 8, 4)),
                                                      np.zeros((1, 1, 8), np.float32)),
                          "state: expected a kvevict.State, got None", where="state_score")

    def test_none_arguments(self):
        sp = np.arange(8, dtype=np.int32).reshape(1, 1, 1, 8)
        ev = dict(seed=1, budget=4, window=1)
        self.assert_names(lambda: kvevict.evict(self.ctx, None, [(1, 0, 0)], **ev),
                          "slot_pos: expected a numpy array or a torch tensor, got NoneType")
        self.assert_names(lambda: kvevict.evict(self.ctx, sp, None, **ev),
                          "seqs: expected (seq_id, prompt_len, round)", where="evict")
        self.assert_names(lambda: kvevict.evict(self.ctx, sp, [(1, 0, 0)], seed=None,
                                                budget=4, window=1),
                          "seed = None: expected an integer")
        self.assert_names(lambda: kvevict.evict(self.ctx, sp, [(1, 0, 0)], seed=1,
                                                budget="4", window=1),
                          "budget = '4': expected an integer", "KVE_ERR_INVALID")


if __name__ == "__main__":
    unittest.main()
