#!/usr/bin/python3
"""The binding on a GPU (label gpu; exit 77, skipped, without one): the
torch.library operators' CUDA kernels write the same bytes as the CPU's for
every conversion, on PyTorch's current stream (a side stream's work is
ordered), on the context's device; tensors on another device or on the host
are refused naming both."""

import sys
import unittest

import torch

if not torch.cuda.is_available():
    print("no CUDA device for torch: skipped")
    sys.exit(77)

import kvevict  # noqa: E402
import kvevict.ops  # noqa: E402,F401

T, H, D, NB, BS = 33, 4, 64, 16, 8


def inputs(seed):
    g = torch.Generator().manual_seed(seed)
    key = torch.randn(T, H, D, generator=g) * 500
    key[0, 0, :3] = torch.tensor([float("inf"), -1e9, 1e-30])
    slots = torch.randperm(NB * BS, generator=g)[:T].to(torch.int64)
    slots[::7] = -1  # padding
    return key, slots


class Gpu(unittest.TestCase):
    def test_ops_match_cpu(self):
        dev = torch.device("cuda", torch.cuda.device_count() - 1)  # not always device 0
        for src, cache_dtype, kv in ((torch.float16, torch.uint8, "fp8"),
                                     (torch.bfloat16, torch.uint8, "fp8_e5m2"),
                                     (torch.float16, torch.float16, "auto")):
            key, slots = inputs(7)
            key = key.to(src)
            scale = torch.tensor([0.5, 1.0, 2.0, 4.0])
            out = {}
            for where in ("cpu", dev):
                kc = torch.zeros(NB, BS, H, D, dtype=cache_dtype, device=where)
                vc = torch.zeros_like(kc)
                side = torch.cuda.Stream(dev) if where != "cpu" else None
                with torch.cuda.stream(side) if side else torch.no_grad():
                    torch.ops.kvevict.reshape_and_cache_flash(
                        key.to(where), key.to(where), kc, vc, slots.to(where), kv,
                        scale.to(where), scale.to(where))
                    out[str(where)] = kc.cpu()  # ordered on the same (side) stream
            self.assertTrue(torch.equal(out["cpu"], out[str(dev)]), (src, kv))

    def test_device_and_host_refused(self):
        ctx = kvevict.Context("auto", device=0)
        key, slots = inputs(1)
        cache = torch.zeros(NB, BS, H, D, device="cuda:0")
        with self.assertRaises(ValueError) as e:
            kvevict.cache_write(ctx, [key], [cache], slots.cuda())
        self.assertIn("srcs[0]: host memory, but the context is cuda:0", str(e.exception))
        if torch.cuda.device_count() > 1:
            with self.assertRaises(ValueError) as e:
                kvevict.cache_write(ctx, [key.to("cuda:1")], [cache], slots.cuda())
            self.assertIn("srcs[0]: cuda:1 memory, but the context is cuda:0",
                          str(e.exception))

    def test_state_tables_as_tensors(self):
        """A state on CUDA hands its tables to PyTorch (the H200 run of
        2026-12-04: TypeError, the interface said read-only), equal to the
        CPU state's after the same appends, rounds included."""
        tables = {}
        for where in ("cpu", "cuda"):
            ctx = kvevict.Context(where, device=0) if where == "cuda" else kvevict.Context("cpu")
            st = kvevict.State(ctx, max_seqs=2, n_layers=2, n_heads=3, budget=24, window=4,
                               interval=4, max_slots=64, seed=9)
            st.admit(1, 77, 10)
            for n in (12, 1, 3, 9, 2, 8, 1, 5):
                st.append([1], [n])
            t = st.row_table(1)
            if where == "cuda":
                self.assertIsInstance(t, torch.Tensor)
                self.assertEqual(t.device.type, "cuda")
                torch.cuda.synchronize()
            tables[where] = torch.as_tensor(t).cpu().clone()
            self.assertGreater(st.seq(1).round, 0)
        self.assertTrue(torch.equal(tables["cpu"], tables["cuda"]))


if __name__ == "__main__":
    unittest.main()
