#!/usr/bin/python3
"""State.draft_device (kve_state_draft with its rows in backend memory and
preallocated outputs, issue 46) on the CPU backend: random speculative
steps (a new call order each step, padding rows, 0..D drafts a row, the
accepted prefix committed with append on both states) give the same
packed draft mapping as State.draft over the active rows on a twin state,
empty move lists and the state unchanged by the drafts; out is the Step
given, its n_tokens and n_rows the padded shape. Its argument checks name
the argument (out, rows, n_draft, max_draft, out.max_tokens) and a refused
call changes nothing. Last, test_graph_draft.py's program (the captured
speculative step) runs here eagerly (--device cpu)."""

import sys
import unittest
from pathlib import Path

import numpy as np
import torch

import kvevict

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import test_graph_draft  # noqa: E402

ROWS, D = 4, 3
SHAPE = dict(max_seqs=ROWS, n_layers=2, n_heads=2, budget=8, window=2, interval=4,
             max_slots=16, seed=46, max_draft=D)


def state_of(st):
    info = [st.seq(r) for r in range(ROWS)]
    return (info, [st.slots(r).tolist() if i.active else None for r, i in enumerate(info)],
            [st.digest(r) if i.active else None for r, i in enumerate(info)])


class Random(unittest.TestCase):
    def program(self, as_torch):
        ctx = kvevict.Context("cpu")
        dev, host = [kvevict.State(ctx, **SHAPE) for _ in range(2)]
        rng = np.random.default_rng(4600 + as_torch)
        out = dev.step_buffers(ROWS * D, ROWS, 1)
        active, seq, drafts, padded = [False] * ROWS, 1, 0, 0
        for step in range(120):
            for r in range(ROWS):
                if active[r] and rng.integers(20) == 0:
                    for st in (dev, host):
                        st.retire(r)
                    active[r] = False
                elif not active[r] and rng.integers(3) == 0:
                    p = int(rng.integers(7))
                    for st in (dev, host):
                        st.admit(r, seq, p)
                        if p:
                            st.append([r], [p])
                    seq, active[r] = seq + 1, True
            order = rng.permutation(ROWS).astype(np.uint32)
            n_draft = np.array([rng.integers(D + 1) if active[r] else 0 for r in order],
                               dtype=np.uint32)
            calls = [i for i in range(ROWS) if active[order[i]]]
            before = state_of(dev)
            if as_torch:
                got = dev.draft_device(torch.from_numpy(order.astype(np.int32)),
                                       torch.from_numpy(n_draft.astype(np.int32)), D, out)
            else:
                got = dev.draft_device(order, n_draft, D, out)
            self.assertIs(got, out)
            self.assertEqual((out.n_tokens, out.n_rows), (ROWS * D, ROWS))
            self.assertEqual(state_of(dev), before, "the drafts changed the state")
            n = int(n_draft.sum())
            if calls:
                want = host.draft([int(order[i]) for i in calls],
                                  [int(n_draft[i]) for i in calls])
                got_map = np.asarray(out.mapping)[:, :n]
                want_map = np.asarray(want.mapping)[:, :n]
                self.assertTrue(np.array_equal(got_map, want_map), (step, got_map, want_map))
            self.assertFalse(np.asarray(out.n_moves).any(), "move lists not emptied")
            drafts, padded = drafts + n, padded + (len(calls) < ROWS)
            # commit a random accepted prefix on both (the state moves on)
            acc = [int(rng.integers(int(n_draft[i]) + 1)) for i in calls]
            for st in (dev, host):
                st.append([int(order[i]) for i in calls], acc)
            self.assertEqual(state_of(dev), state_of(host))
        self.assertGreater(drafts, 100)
        self.assertGreater(padded, 10)

    def test_numpy(self):
        self.program(False)

    def test_torch(self):
        self.program(True)


class Arguments(unittest.TestCase):
    def setUp(self):
        self.ctx = kvevict.Context("cpu")
        self.st = kvevict.State(self.ctx, **SHAPE)
        self.st.admit(0, 5, 2)
        self.st.admit(1, 6, 0)
        self.out = self.st.step_buffers(2 * D, 2, 1)
        self.rows = np.array([0, 1], dtype=np.int32)

    def refused(self, exc, needle, rows, n_draft, max_draft=D, out=None):
        before = state_of(self.st)
        with self.assertRaises(exc) as cm:
            self.st.draft_device(rows, n_draft, max_draft, self.out if out is None else out)
        self.assertIn(needle, str(cm.exception))
        self.assertEqual(state_of(self.st), before)

    def test_checks_name_the_argument(self):
        k = np.array([1, 2], dtype=np.int32)
        self.refused(kvevict.ArgumentError, "out: expected a kvevict.Step", self.rows, k,
                     out=object())
        self.refused(TypeError, "rows: dtype float32", self.rows.astype(np.float32), k)
        self.refused(TypeError, "n_draft: dtype int64", self.rows, k.astype(np.int64))
        self.refused(ValueError, "n_draft", self.rows, np.array([1, 1, 1], dtype=np.int32))
        self.refused(ValueError, "max_draft", self.rows, k, max_draft=-1)
        self.refused(kvevict.KvevictError, "max_draft", self.rows, k, max_draft=D + 1)
        self.refused(kvevict.KvevictError, "n_draft", self.rows,
                     np.array([D + 1, 0], dtype=np.int32))
        self.refused(kvevict.KvevictError, "rows[1] = 2", np.array([0, 2], dtype=np.int32), k)
        small = self.st.step_buffers(2, 2, 1)  # max_tokens 2 < 2 rows x max_draft 3
        self.refused(kvevict.KvevictError, "max_tokens", self.rows, k, out=small)

    def test_padding_rows_are_not_read(self):
        rows = np.array([0, 99], dtype=np.uint32)  # call row 1 is padding
        got = self.st.draft_device(rows, np.array([2, 0], dtype=np.uint32), D, self.out)
        cap = self.st.seq(0).capacity
        want = [[[cap, cap], [cap + 1, cap + 1]]] * 2  # [table_layers][token][table_heads]
        self.assertEqual(np.asarray(got.mapping)[:, :2].tolist(), want)


class GraphProgram(unittest.TestCase):
    def test_captured_draft_program_on_cpu(self):
        counts = test_graph_draft.run("cpu", 150)
        self.assertGreater(counts["round_steps"], 10, counts)
        self.assertGreater(counts["rejected"], 20, counts)


if __name__ == "__main__":
    unittest.main()
