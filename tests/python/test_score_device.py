#!/usr/bin/python3
"""State.score_device (kve_state_score_device, issue 39) and a scored
state's State.append_device on the CPU backend, against eager twins: over
random steps (padding rows, a new call order each step, one to three
tokens a row, admissions with prefills, retirements), score_device of every
layer from rows and n_new in the state's memory writes, bit for bit, what
State.score writes for the call's rows with tokens (the same layout, both
buffers filled with the same values first; padding rows and rows not due
keep them), and append_device with those scores leaves the same tables,
sequence infos, digests, mappings and move lists as State.append with the
eager scores on a twin. K-norm and TriAttention, per-head, shared-heads and
shared-layers states. Last, the refusals, each named in its message."""

import sys
import unittest
from pathlib import Path

import numpy as np
import torch

import kvevict

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from test_append_device import PROMPT_MAX, ROWS, churn, state_of  # noqa: E402
from test_graph_step import moves_of  # noqa: E402

L, H, D, G = 2, 2, 8, 2          # layers, KV heads, head dim, query heads a KV head
BS, BPR = 8, 4                   # page size, pages a row: max_slots = 32
W, R = 3, 4
SHAPE = dict(max_seqs=ROWS, n_layers=L, n_heads=H, budget=10, window=W, interval=R,
             max_slots=BS * BPR, seed=39)


def key_cache(rng):
    """Per layer a paged NHD float16 K cache, and the rows' block table."""
    pages = rng.permutation(ROWS * BPR).astype(np.int32)
    keys = [rng.standard_normal((ROWS * BPR, BS, H, D)).astype(np.float16) for _ in range(L)]
    return keys, pages.reshape(ROWS, BPR)


def scorer_args(scorer, rng):
    """Per layer the scorer's keyword arguments (TriAttention: its statistics)."""
    if scorer == "knorm":
        return [dict(scorer="knorm") for _ in range(L)]
    return [dict(scorer="triattention", group=G, rope_theta=10000.0,
                 q_mean=rng.standard_normal((H * G, D // 2, 2)).astype(np.float32),
                 q_abs_mean=np.abs(rng.standard_normal((H * G, D // 2))).astype(np.float32) + 1)
            for _ in range(L)]


def bits(a):
    a = a.numpy() if isinstance(a, torch.Tensor) else a
    return np.ascontiguousarray(a).view(np.uint32)


class Random(unittest.TestCase):
    def program(self, scorer, max_new, as_torch=False, **flags):
        ctx = kvevict.Context("cpu")
        tensors = "torch" if as_torch else "numpy"
        dev, host = [kvevict.State(ctx, **SHAPE, **flags, scored=True, tensors=tensors,
                                   score_group=G) for _ in range(2)]
        rng = np.random.default_rng(max_new * 100 + len(flags) * 10 + len(scorer))
        keys, bt = key_cache(rng)
        args = scorer_args(scorer, rng)
        shared_layers = dev.table_layers == 1
        # with shared layers, every layer adds weight x its score into a zeroed buffer
        layer_kw = dict(accumulate=True, weight=1.0 / L) if shared_layers else {}
        sd = dev.step_buffers(ROWS * max_new, ROWS, max(max_new, PROMPT_MAX))
        sh = host.step_buffers(ROWS * max_new, ROWS, max(max_new, PROMPT_MAX))
        fill = dev.scores_buffer(ROWS)  # zeroed; else random values, every row alike
        if not shared_layers:
            v = rng.uniform(-9, 9, fill.shape[1:]).astype(np.float32)
            fill[...] = torch.from_numpy(v) if as_torch else v
        copy = torch.clone if as_torch else np.copy
        active, seq = [False] * ROWS, 1000
        counts = dict(due=0, padded=0, moves=0, written=0)
        for step in range(150):
            seq = churn(rng, (dev, host), active, seq, retire=60)  # prefills: no round
            order = rng.permutation(ROWS).astype(np.uint32)
            n_new = np.zeros(ROWS, np.uint32)
            for i, r in enumerate(order):
                if active[r]:
                    info = host.seq(int(r))
                    room = info.capacity - info.n_valid
                    k = int(rng.integers(max_new + 1))
                    # a scored row's round comes after at most W of its tokens
                    n_new[i] = room if k > room > W else k
            calls = [i for i in range(ROWS) if n_new[i]]
            call_rows = [int(order[i]) for i in calls]
            call_new = [int(n_new[i]) for i in calls]
            due = host.rounds_due(call_rows, call_new) if calls else []
            self.assertTrue(all(d <= 1 for d in due))
            # the device's call: rows, n_new and the page table in call order
            d_rows, d_new = ((torch.from_numpy(order.astype(np.int32)),
                              torch.from_numpy(n_new.astype(np.int32))) if as_torch
                             else (order, n_new))
            got, want, eager = copy(fill), copy(fill), copy(fill)  # eager: call rows packed
            for layer in range(L):
                dev.score_device(d_rows, d_new, layer, keys[layer], got, block_table=bt[order],
                                 **args[layer], **layer_kw)
                if calls:
                    host.score(call_rows, call_new, layer, keys[layer], eager, block_table=bt,
                               cache_row=call_rows, **args[layer], **layer_kw)
            want[calls] = eager[:len(calls)]
            what = "%s step %d" % (scorer, step)
            self.assertTrue(np.array_equal(bits(got), bits(want)), what)
            counts["due"] += sum(due)
            counts["written"] += int((bits(got) != bits(fill)).any(axis=(1, 2)).sum())
            dev.append_device(d_rows, d_new, max_new, sd, scores=got)
            if calls:
                host.append(call_rows, call_new, out=sh, scores=eager)
            self.assertEqual(state_of(dev), state_of(host), what)
            n = int(n_new.sum())
            self.assertTrue(np.array_equal(sd.mapping[:, :n], sh.mapping[:, :n]), what)
            self.assertTrue((sd.mapping[:, n:ROWS * max_new] == -1).all(), what)
            lists = [dict(n_moves=np.asarray(s.n_moves), moves=np.asarray(s.moves))
                     for s in (sd, sh)]
            nd, pd = moves_of(lists[0], calls)
            nh, ph = moves_of(lists[1], list(range(len(calls))))
            self.assertTrue(np.array_equal(nd, nh) and np.array_equal(pd, ph), what)
            counts["padded"] += len(calls) < ROWS
            counts["moves"] += int(nd.sum())
        # the program covered scored rounds (their scores written), moves and padding
        self.assertGreater(counts["due"], 20, counts)
        self.assertEqual(counts["written"], counts["due"], counts)
        self.assertGreater(counts["moves"], 0, counts)
        self.assertGreater(counts["padded"], 20, counts)
        print(scorer, flags, counts)

    def test_knorm(self):
        self.program("knorm", 1)

    def test_triattention(self):
        self.program("triattention", 3)

    def test_triattention_torch_shared_heads(self):
        self.program("triattention", 2, as_torch=True, shared_heads=True)

    def test_knorm_shared_layers(self):
        self.program("knorm", 2, shared_layers=True)


class Refusals(unittest.TestCase):
    def setUp(self):
        self.st = kvevict.State(kvevict.Context("cpu"), **SHAPE, scored=True)
        self.keys, self.bt = key_cache(np.random.default_rng(1))
        self.st.admit(0, 7, 2)
        self.st.admit(1, 8, 6)
        self.st.append([0, 1], [2, 6])
        self.rows, self.n_new = np.array([0, 1], np.uint32), np.array([1, 1], np.uint32)
        self.out = self.st.scores_buffer(2)
        self.step = self.st.step_buffers(4, 2, 2)

    def refused(self, call, error, text):
        before = state_of(self.st)
        with self.assertRaises(error) as e:
            call()
        self.assertIn(text, str(e.exception))
        self.assertEqual(state_of(self.st), before)
        return e.exception

    def score(self, out=None, layer=0, **kw):
        kw.setdefault("block_table", self.bt)
        return self.st.score_device(kw.pop("rows", self.rows), kw.pop("n_new", self.n_new),
                                    layer, self.keys[min(layer, L - 1)], self.out if out is None else out,
                                    scorer="knorm", **kw)

    def test_score_device(self):
        narrow = np.zeros((2, L * H, SHAPE["max_slots"] - 1), np.float32)
        e = self.refused(lambda: self.score(narrow), kvevict.KvevictError,
                         "scores_stride_table = 31: below max_slots = 32")
        self.assertEqual(e.name, "KVE_ERR_RANGE")
        self.refused(lambda: self.score(cache_row=[1, 0]), ValueError,
                     "cache_row: not taken by score_device")
        e = self.refused(lambda: self.score(block_table=self.bt[:1]), kvevict.KvevictError,
                         "desc.keys.pages.n_rows = 1: call row i reads row i of the page table")
        self.assertEqual(e.name, "KVE_ERR_RANGE")
        self.refused(lambda: self.score(rows=self.rows.astype(np.int64)), TypeError,
                     "rows: dtype int64, expected int32 or uint32")
        self.refused(lambda: self.score(n_new=np.ones(3, np.uint32)), ValueError,
                     "n_new: shape (3,), expected shape (2,)")
        self.refused(lambda: self.score(self.out[:1]), ValueError,
                     "out: shape (1, 4, 32), expected shape (>= 2, 4, *)")
        self.refused(lambda: self.score(layer=L), ValueError, "layer = 2: must be 0..1")
        self.refused(lambda: kvevict.state_score_device(None, self.rows, self.n_new, 0,
                                                        self.keys[0], self.out),
                     kvevict.ArgumentError, "state: expected a kvevict.State, got None")
        self.score()  # the control: accepted
        # a group past the state's score_group (1 by default): its scratch is
        # sized at creation, so the call is refused (issue 46 item 3)
        tri = scorer_args("triattention", np.random.default_rng(2))[0]
        e = self.refused(lambda: self.st.score_device(self.rows, self.n_new, 0, self.keys[0],
                                                      self.out, block_table=self.bt, **tri),
                         kvevict.KvevictError, "desc.score_group = 0")
        self.assertEqual(e.name, "KVE_ERR_RANGE")
        self.assertEqual(self.st.score_group, 0)

    def test_append_device(self):
        def append(scores, n_new=None, max_new=2, step=self.step):
            return lambda: self.st.append_device(self.rows, self.n_new if n_new is None
                                                 else n_new, max_new, step, scores=scores)

        e = self.refused(append(None), kvevict.KvevictError, "out->scores is NULL")
        self.assertEqual(e.name, "KVE_ERR_NULL")
        e = self.refused(append(np.zeros((2, L * H, 31), np.float32)), kvevict.KvevictError,
                         "out->scores_stride_table = 31: below the 32 slots")
        self.assertEqual(e.name, "KVE_ERR_RANGE")
        self.refused(append(self.out[:, :, :31]), ValueError,
                     "a planned call's row may be due: max_slots 32")
        # row 0 (prompt 2) has room for more than W tokens before its round
        room = self.st.seq(0).capacity - self.st.seq(0).n_valid
        self.assertGreater(room, W)
        far = np.array([room + 1, 0], np.uint32)
        self.score(n_new=far)  # not due under the scored rules: nothing written
        self.assertTrue((self.out == 0).all())
        e = self.refused(append(self.out, far, room + 1,
                                self.st.step_buffers(room + 1, 2, room + 1)),
                         kvevict.KvevictError, "rows[0] = 0 (n_new[0] = %d) would run two "
                         "rounds, or take more than the window W" % (room + 1))
        self.assertEqual(e.name, "KVE_ERR_INVALID")
        # the control: accepted, a row's tokens below its room need no round
        self.st.append_device(self.rows, self.n_new, 2, self.step, scores=self.out)
        self.assertEqual(self.st.seq(0).n_tokens, 3)


if __name__ == "__main__":
    unittest.main()
