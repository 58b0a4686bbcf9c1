#!/usr/bin/python3
"""State.append_device (kve_state_append_device, issue 38) on the CPU
backend: random steps with padding rows, a new call order each step, one
or several tokens a row, admissions (with prefills) and retirements give
the same slot tables, sequence infos, running digests, mappings and move
lists as State.append over the active rows on a twin state; the padded
shape's untaken mapping entries are -1 and the padding rows' move lists
empty. Refusals name the argument; the state is unchanged after each.
Reads of the state and synchronize follow torch's current stream. Last,
test_graph_step.py's program (the captured decode step of 64 layers) runs
here eagerly (--device cpu), and its scored variant (--scored)."""

import sys
import unittest
from pathlib import Path

import numpy as np
import torch

import kvevict

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import test_graph_step  # noqa: E402

ROWS, PROMPT_MAX = 5, 9
SHAPE = dict(max_seqs=ROWS, n_layers=3, n_heads=2, budget=10, window=3, interval=4,
             max_slots=32, seed=77)


def twins(**flags):
    ctx = kvevict.Context("cpu")
    return [kvevict.State(ctx, **SHAPE, **flags) for _ in range(2)]


def state_of(st):
    """(infos, slots, digests) of every row."""
    info = [st.seq(r) for r in range(ROWS)]
    return (info, [st.slots(r).tolist() if i.active else None for r, i in enumerate(info)],
            [st.digest(r) if i.active else None for r, i in enumerate(info)])


def churn(rng, states, active, seq, retire=25):
    """Rows retired (odds 1 in @retire) and admitted (1 in 3, a prefill of
    0..PROMPT_MAX tokens appended eagerly) at random, on every state alike;
    returns the next sequence id."""
    for r in range(ROWS):
        if active[r] and rng.integers(retire) == 0:
            for st in states:
                st.retire(r)
            active[r] = False
        elif not active[r] and rng.integers(3) == 0:
            p = int(rng.integers(PROMPT_MAX + 1))
            for st in states:
                st.admit(r, seq, p)
                if p:
                    st.append([r], [p])  # the prefill, eagerly
            seq, active[r] = seq + 1, True
    return seq


class Random(unittest.TestCase):
    def program(self, max_new, as_torch, **flags):
        dev, host = twins(**flags)
        rng = np.random.default_rng(max_new * 10 + len(flags))
        sd = dev.step_buffers(ROWS * max_new, ROWS, max(max_new, PROMPT_MAX))
        sh = host.step_buffers(ROWS * max_new, ROWS, max(max_new, PROMPT_MAX))
        active, seq, rounds, padded, moves = [False] * ROWS, 1000, 0, 0, 0
        for step in range(150):
            seq = churn(rng, (dev, host), active, seq)
            order = rng.permutation(ROWS).astype(np.uint32)
            n_new = np.array([rng.integers(max_new + 1) if active[r] else 0 for r in order],
                             dtype=np.uint32)
            calls = [i for i in range(ROWS) if n_new[i]]
            rounds_before = sum(dev.seq(r).round for r in range(ROWS))
            if as_torch:
                dev.append_device(torch.from_numpy(order.astype(np.int32)),
                                  torch.from_numpy(n_new.astype(np.int32)), max_new, sd)
            else:
                dev.append_device(order, n_new, max_new, sd)
            self.assertEqual((sd.n_tokens, sd.n_rows), (ROWS * max_new, ROWS))
            host.append([int(order[i]) for i in calls], [int(n_new[i]) for i in calls], out=sh)
            what = "step %d" % step
            self.assertEqual(state_of(dev), state_of(host), what)
            n = int(n_new.sum())  # the call's tokens, packed row by row, then -1
            self.assertTrue(np.array_equal(sd.mapping[:, :n], sh.mapping[:, :n]), what)
            self.assertTrue((sd.mapping[:, n:ROWS * max_new] == -1).all(), what)
            nd, pd = test_graph_step.moves_of(self.lists(sd), calls)
            nh, ph = test_graph_step.moves_of(self.lists(sh), list(range(len(calls))))
            self.assertTrue(np.array_equal(nd, nh) and np.array_equal(pd, ph), what)
            pad = [i for i in range(ROWS) if not n_new[i]]
            self.assertTrue((sd.n_moves[:, pad] == 0).all(), what)
            rounds += sum(i.round for i in state_of(dev)[0]) > rounds_before
            padded += bool(pad)
            moves += int(nd.sum())
        # steps with rounds: the program covered rounds, moves and padding
        self.assertGreater(rounds, 20)
        self.assertGreater(moves, 0)
        self.assertGreater(padded, 20)

    @staticmethod
    def lists(step):
        return dict(n_moves=step.n_moves, moves=step.moves)

    def test_one_token(self):
        self.program(1, False)

    def test_speculative_shape(self):  # up to k + 1 = 3 tokens a row, torch int32 inputs
        self.program(3, True)

    def test_persistent_shared_heads(self):
        self.program(2, False, persistent=True, shared_heads=True)

    def test_shared_layers(self):
        self.program(1, True, shared_layers=True)


class Refusals(unittest.TestCase):
    def setUp(self):
        self.st = twins()[0]
        self.st.admit(0, 7, 2)
        self.st.admit(1, 8, 6)
        self.st.append([0, 1], [2, 6])
        self.step = self.st.step_buffers(4, 2, 2)

    def refused(self, rows, n_new, max_new, status, text, step=None):
        before = state_of(self.st)
        with self.assertRaises(kvevict.KvevictError) as e:
            self.st.append_device(np.array(rows, np.uint32), np.array(n_new, np.uint32),
                                  max_new, step or self.step)
        self.assertEqual(e.exception.name, status)
        self.assertIn(text, str(e.exception))
        self.assertEqual(state_of(self.st), before)

    def test_planner(self):
        self.refused([0, 9], [1, 1], 1, "KVE_ERR_RANGE", "rows[1] = 9")
        self.refused([0, 2], [1, 1], 1, "KVE_ERR_INVALID", "rows[1] = 2 (n_new[1] = 1) holds no")
        self.refused([1, 1], [1, 1], 1, "KVE_ERR_INVALID", "listed twice")
        self.refused([0, 1], [1, 3], 2, "KVE_ERR_RANGE", "n_new[1] = 3) has n_new[i] > max_new")
        small = self.st.step_buffers(1, 2, 2)
        self.refused([0, 1], [1, 1], 1, "KVE_ERR_RANGE", "max_tokens", small)
        self.refused([0, 1], [1, 1], 8, "KVE_ERR_RANGE", "out->max_moves")
        # the controls: accepted, a padding row's index not read
        self.st.append_device(np.array([0, 1], np.uint32), np.array([2, 2], np.uint32), 2,
                              self.step)
        self.st.append_device(np.array([0, 99], np.uint32), np.array([1, 0], np.uint32), 1,
                              self.step)
        self.assertEqual(self.st.seq(0).n_tokens, 5)

    def test_arguments(self):
        rows, n_new = np.array([0], np.uint32), np.array([1], np.uint32)
        with self.assertRaises(TypeError) as e:
            self.st.append_device(rows.astype(np.int64), n_new, 1, self.step)
        self.assertIn("rows: dtype int64, expected int32 or uint32", str(e.exception))
        with self.assertRaises(ValueError) as e:
            self.st.append_device(rows, np.array([1, 1], np.uint32), 1, self.step)
        self.assertIn("n_new: shape (2,), expected shape (1,)", str(e.exception))
        with self.assertRaises(ValueError) as e:
            self.st.append_device(rows.reshape(1, 1), n_new, 1, self.step)
        self.assertIn("rows: 2 dimensions", str(e.exception))
        with self.assertRaises(ValueError) as e:
            self.st.append_device(np.array([0, 0, 1, 1], np.uint32)[::2], np.ones(2, np.uint32),
                                  1, self.step)
        self.assertIn("rows: not contiguous", str(e.exception))
        with self.assertRaises(ValueError) as e:
            self.st.append_device(rows, n_new, -1, self.step)
        self.assertIn("max_new = -1", str(e.exception))
        for out in (None, [self.step.mapping]):
            with self.assertRaises(kvevict.ArgumentError) as e:
                self.st.append_device(rows, n_new, 1, out)
            self.assertIn("out: expected a kvevict.Step", str(e.exception))
        with self.assertRaises(kvevict.ArgumentError) as e:
            self.st.append_device(None, n_new, 1, self.step)
        self.assertEqual(e.exception.name, "KVE_ERR_NULL")
        self.assertEqual(self.st.seq(0).n_tokens, 2)

    def test_scored_state_needs_scores(self):
        """Issue 39: a scored state's planned append reads out->scores (laid
        out for any row); a Step without them is refused, nothing changed."""
        st = kvevict.State(kvevict.Context("cpu"), **SHAPE, scored=True)
        st.admit(0, 7, 2)
        with self.assertRaises(kvevict.KvevictError) as e:
            st.append_device(np.array([0], np.uint32), np.array([1], np.uint32), 1,
                             st.step_buffers(1, 1, 1))
        self.assertEqual(e.exception.name, "KVE_ERR_NULL")
        self.assertIn("out->scores is NULL", str(e.exception))
        self.assertEqual(st.seq(0).n_tokens, 0)


class Streams(unittest.TestCase):
    def test_reads_follow_the_current_stream(self):
        """Every call that reads the state back, and synchronize, first puts
        the context on torch's current stream: after a graph's capture the
        context's stream is the capture's side stream, and a read on it would
        not wait for a replay on the current one."""
        st = twins()[0]
        st.admit(0, 7, 2)
        calls = []
        st.ctx._stream = lambda: calls.append(1)  # the CPU's is a no-op: count the calls
        for name, call in (("seq", lambda: st.seq(0)), ("slots", lambda: st.slots(0)),
                           ("digest", lambda: st.digest(0)),
                           ("rounds_due", lambda: st.rounds_due([0], [1])),
                           ("synchronize", st.ctx.synchronize)):
            del calls[:]
            call()
            self.assertTrue(calls, name)


class GraphProgram(unittest.TestCase):
    def test_graph_step_program_on_cpu(self):
        """test_graph_step.py's decode loop, without the capture."""
        counts = test_graph_step.run("cpu", 120)
        self.assertGreater(counts["round_steps"], 10)
        self.assertGreater(counts["admits"], ROWS)
        self.assertGreater(counts["retires"], 2)

    def test_graph_step_scored_program_on_cpu(self):
        """Its scored step (score_device of every layer, then append_device)."""
        counts = test_graph_step.run("cpu", 80, scored=True)
        self.assertGreater(counts["round_steps"], 10)
        self.assertGreater(counts["scored_rows"], 10)


if __name__ == "__main__":
    unittest.main()
