#!/usr/bin/python3
"""The Python binding: the cache state against the independent oracle
(tests/oracle/kve_oracle.py), rebuild, cache writes on every layout with
numpy and torch, evict + compact, errors, and the library lookup."""

import os
import random
import subprocess
import sys
import unittest
from pathlib import Path

import numpy as np
import torch

import kvevict

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "oracle"))
import kve_oracle  # noqa: E402

ALL_MODES = [m for m in range(8)]


def flag_kwargs(flags):
    return dict(persistent=bool(flags & 1), shared_heads=bool(flags & 2),
                shared_layers=bool(flags & 4))


class StateVsOracle(unittest.TestCase):
    """Each head's table equals the oracle's schedule, slot for slot."""

    B, W, R, L, H, LOFF, HOFF, SEED = 20, 3, 5, 2, 2, 3, 1, 2609

    def test_tables_match_oracle(self):
        ctx = kvevict.Context("cpu", threads=1)
        rng = random.Random(1)
        for flags in ALL_MODES:
            for prompt in (0, 5, 30):  # 30 + W > B: over budget
                st = kvevict.State(ctx, max_seqs=1, n_layers=self.L, n_heads=self.H,
                                   budget=self.B, window=self.W, interval=self.R,
                                   max_slots=64, seed=self.SEED, layer_offset=self.LOFF,
                                   head_offset=self.HOFF, **flag_kwargs(flags))
                seq_id = 1000 + flags
                st.admit(0, seq_id, prompt)
                C = kvevict.capacity(prompt, budget=self.B, window=self.W, interval=self.R)
                n = C + 7 * self.R + 2
                done, steps = 0, []
                while done < n:
                    k = min(n - done, rng.choice([1, 1, 1, 2, 4, 9]))
                    st.append([0], [k])
                    steps.append(k)
                    done += k
                tables = st.slots(0)
                for l in range(self.L):
                    for h in range(self.H):
                        want, rounds, _ = kve_oracle.schedule(
                            prompt, self.W, self.B, self.R, n, self.SEED, seq_id,
                            self.LOFF + l, self.HOFF + h, flags, steps=steps)
                        tl = l if st.table_layers > 1 else 0
                        th = h if st.table_heads > 1 else 0
                        got = tables[tl, th, :C].tolist()
                        self.assertEqual(got, want, "flags %d prompt %d layer %d head %d"
                                         % (flags, prompt, l, h))
                        self.assertTrue(all(v == -1 for v in tables[tl, th, C:]))
                        self.assertEqual(st.seq(0).round, rounds)
                # The running digest the kernels added up, against the oracle's.
                log = kve_oracle.replay(self.SEED, seq_id, prompt, self.W, self.B, self.R, n,
                                        self.L, self.H, self.LOFF, self.HOFF, flags)
                self.assertEqual(len(log), st.seq(0).round)
                self.assertEqual(st.digest(0), log[-1][3] if log else 0,
                                 "flags %d prompt %d" % (flags, prompt))
                st.close()

    def test_rebuild_and_mapping(self):
        ctx = kvevict.Context("cpu", threads=1)
        for flags in (0, kvevict.PERSISTENT, kvevict.SHARED_HEADS | kvevict.PERSISTENT):
            st = kvevict.State(ctx, max_seqs=2, n_layers=3, n_heads=2, budget=24, window=4,
                               interval=6, max_slots=40, seed=5, tensors="torch",
                               **flag_kwargs(flags))
            st.admit(0, 77, 7)
            for _ in range(200):
                st.append([0], [3])
            m = st.rebuild(1, 77, 7, 600, mapping=True, steps=[3] * 200)
            self.assertIsInstance(m, torch.Tensor)
            self.assertEqual(tuple(m.shape), (st.table_layers, 600, st.table_heads))
            live, rebuilt = st.slots(0), st.slots(1)
            np.testing.assert_array_equal(live, rebuilt)
            a, b = st.seq(0), st.seq(1)
            self.assertEqual((a.n_tokens, a.round, a.n_valid, a.capacity),
                             (b.n_tokens, b.round, b.n_valid, b.capacity))
            # The mapping is the table inverted: position -> slot, -1 when evicted.
            for tl in range(st.table_layers):
                for th in range(st.table_heads):
                    inv = np.full(600, -1)
                    for s, p in enumerate(live[tl, th]):
                        if p >= 0:
                            inv[p] = s
                    np.testing.assert_array_equal(m[tl, :, th].numpy(), inv)
            # The live table view is the same memory.
            view = st.row_table(0)
            np.testing.assert_array_equal(view.numpy(), live[:, :, :st.seq(0).capacity])


def reference_write(src, cache, slots, token_row, page_of, layout):
    """The plainest loop: src [T, H, D] -> cache at each head's slot."""
    ref = cache.copy()
    T, H = src.shape[:2]
    for t in range(T):
        for h in range(H):
            s = int(slots[t, h if slots.shape[1] > 1 else 0])
            if s < 0:
                continue
            page, off = page_of(int(token_row[t]), s)
            if layout == "nhd":
                ref[page, off, h] = src[t, h]
            else:
                ref[page, h, off] = src[t, h]
    return ref


class CacheWrite(unittest.TestCase):
    def test_layouts(self):
        ctx = kvevict.Context("cpu", threads=1)
        rng = np.random.default_rng(3)
        T, H, D, PS = 10, 3, 8, 4
        for lib_kind in ("numpy", "torch"):
            conv = (lambda a: a) if lib_kind == "numpy" else torch.from_numpy
            # vLLM: NHD + block table, each head with its own slots.
            bt = np.array([[5, 1, 7], [2, 0, 6]], dtype=np.int32)
            token_row = (np.arange(T) % 2).astype(np.int32)  # rows 0 and 1
            slots = np.empty((T, H), np.int64)  # distinct per (row, head), < 3 blocks
            for h in range(H):
                for r in (0, 1):
                    idx = np.where(token_row == r)[0]
                    slots[idx, h] = rng.permutation(3 * PS)[:len(idx)]
            slots[0, 1] = -1
            src = rng.standard_normal((T, H, D)).astype(np.float32)
            k = rng.standard_normal((8, PS, H, D)).astype(np.float32)
            want = reference_write(src, k, slots, token_row,
                                   lambda r, s: (bt[r, s // PS], s % PS), "nhd")
            kc = conv(k.copy())
            kvevict.cache_write(ctx, [conv(src)], [kc], conv(slots), conv(token_row),
                                block_table=conv(bt))
            np.testing.assert_array_equal(np.asarray(kc), want)
            # FlashInfer: HND + indptr/indices/last_page_len, shared-head slots [T, 1].
            indptr = np.array([0, 2, 5], dtype=np.int32)
            indices = np.array([3, 0, 7, 1, 4], dtype=np.int32)
            last = np.array([4, 2], dtype=np.int32)
            one = np.array([[s] for s in [0, 8, 1, 9, 2, 5, 3, 6, 4, 7]], dtype=np.int64)
            v = rng.standard_normal((8, H, PS, D)).astype(np.float32)
            want = reference_write(src, v, one, token_row,
                                   lambda r, s: (indices[indptr[r] + s // PS], s % PS), "hnd")
            vc = conv(v.copy())
            kvevict.cache_write(ctx, [conv(src)], [vc], conv(one), conv(token_row),
                                layout="hnd", indptr=conv(indptr), indices=conv(indices),
                                last_page_len=conv(last))
            np.testing.assert_array_equal(np.asarray(vc), want)

    def test_contiguous_strided_fp16(self):
        ctx = kvevict.Context("cpu", threads=1)
        S, L, H, N, D = 3, 2, 2, 16, 6
        cache = torch.randn(S, L, H, N, D).half()
        qkv = torch.randn(4, 3 * H, D).half()  # K is a strided view into a fused qkv
        key = qkv[:, H:2 * H]
        slots = torch.tensor([[3, 5], [0, 15], [7, -1], [2, 2]], dtype=torch.int64)
        token_row = torch.tensor([0, 2, 1, 1], dtype=torch.int32)
        want = cache.clone()
        for t in range(4):
            for h in range(H):
                if slots[t, h] >= 0:
                    want[token_row[t], 1, h, slots[t, h]] = key[t, h]
        kvevict.cache_write(ctx, [key], [cache[:, 1]], slots, token_row, layout="contiguous")
        self.assertTrue(torch.equal(cache, want))

    def test_errors(self):
        ctx = kvevict.Context("cpu")
        src = np.zeros((2, 2, 4), np.float32)
        cache = np.zeros((4, 4, 2, 4), np.float32)
        slots = np.array([[0, 1], [2, 99]], np.int64)
        rows = np.zeros(2, np.int32)
        bt = np.zeros((1, 1), np.int32)
        with self.assertRaises(kvevict.KvevictError) as e:
            kvevict.cache_write(ctx, [src], [cache], slots, rows, block_table=bt)
        self.assertEqual(e.exception.name, "KVE_ERR_RANGE")
        self.assertIn("desc.slots[token 1][head 1] = 99", str(e.exception))
        with self.assertRaises(TypeError):
            kvevict.cache_write(ctx, [src], [cache], slots.astype(np.int32), rows)
        st = kvevict.State(ctx, max_seqs=1, n_layers=1, n_heads=1, budget=8, window=2,
                           interval=2, max_slots=16)
        with self.assertRaises(kvevict.KvevictError) as e:
            st.append([0], [1])
        self.assertIn("rows[0] = 0: holds no sequence", str(e.exception))
        with self.assertRaises(kvevict.KvevictError) as e:
            st.admit(0, 1, 20)
        self.assertIn("prompt_len = 20", str(e.exception))


class EvictCompact(unittest.TestCase):
    def test_against_oracle(self):
        ctx = kvevict.Context("cpu", threads=1)
        rng = random.Random(9)
        S, L, H, N, D = 2, 2, 3, 20, 4
        table = np.full((S, L, H, N), -1, np.int32)
        for i in np.ndindex(S, L, H):
            table[i][:18] = rng.sample(range(40), 18)
        k = torch.randn(S, L, H, N, D)
        before = table.copy()
        seqs = [(5, 6, 2), (9, 0, 0)]
        ev, n_ev = kvevict.evict(ctx, table, seqs, seed=4, budget=10, window=2, layer_offset=1)
        k0 = k.clone()
        kvevict.compact(ctx, table, ev, n_ev, [k])
        for s, l, h in np.ndindex(S, L, H):
            want, kept, _ = kve_oracle.evict_head(before[s, l, h].tolist(), seqs[s][1], 2, 10,
                                                  4, seqs[s][0], 1 + l, h, seqs[s][2])
            self.assertEqual(ev[s, l, h, :n_ev[s, l, h]].tolist(), want)
            self.assertEqual(table[s, l, h, :len(kept)].tolist(),
                             [int(before[s, l, h, t]) for t in kept])
            for j, t in enumerate(kept):
                self.assertTrue(torch.equal(k[s, l, h, j], k0[s, l, h, t]))


class DeviceArrays(unittest.TestCase):
    def test_cuda_interface_is_writable(self):
        """PyTorch refuses a __cuda_array_interface__ whose read-only flag is
        set ("the read only flag is not supported, should always be False"):
        State.row_table failed so on the H200. The flag must be False."""
        a = kvevict._arrays.CudaArray(0x1000, (2, 3), "<i4", None)
        iface = a.__cuda_array_interface__
        self.assertEqual(iface["data"], (0x1000, False))
        self.assertEqual((iface["shape"], iface["typestr"]), ((2, 3), "<i4"))


class Lookup(unittest.TestCase):
    def test_bad_env_is_an_error(self):
        env = dict(os.environ, KVEVICT_LIBRARY="/nonexistent/libkvevict.so")
        r = subprocess.run([sys.executable, "-c", "import kvevict"], env=env,
                           capture_output=True, text=True)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("KVEVICT_LIBRARY='/nonexistent/libkvevict.so'", r.stderr)

    def test_found_library_is_the_env_one(self):
        self.assertEqual(kvevict.LIBRARY_PATH, os.environ["KVEVICT_LIBRARY"])


if __name__ == "__main__":
    unittest.main()
