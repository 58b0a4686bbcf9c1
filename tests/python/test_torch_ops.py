#!/usr/bin/python3
"""The binding as PyTorch users meet it: cache writes converting element
types (against a numpy reference of the formats written from their
definitions, and torch's own conversions), fp8 caches with vLLM's scales,
flat slots with padding, FlashInfer's one K/V tensor, the torch.library
operators (CPU kernels, Meta kernels, tracing), the context's device, tensors
refused with both sides named, strided outputs; kvevict.ops.warm_up and the
error of a thread's first op while its stream captures a CUDA graph."""

import unittest

import numpy as np
import torch

import kvevict
import kvevict.ops  # noqa: F401  (registers torch.ops.kvevict.*)
from kvevict import _arrays

FP8 = {"fp8_e4m3": (4, 3, True), "fp8_e5m2": (5, 2, False)}


def fp8_values(name):
    """The positive finite values of an fp8 format, code by code, from its definition."""
    e_bits, m_bits, no_inf = FP8[name]
    bias = (1 << (e_bits - 1)) - 1
    codes = (1 << (e_bits + m_bits)) - 1 if no_inf else ((1 << e_bits) - 1) << m_bits
    vals = []
    for c in range(codes):
        e, m = c >> m_bits, c & ((1 << m_bits) - 1)
        vals.append(m * 2.0 ** (1 - bias - m_bits) if e == 0
                    else (m + (1 << m_bits)) * 2.0 ** (e - bias - m_bits))
    return np.array(vals)


def fp8_ref(x, name):
    """float32 -> fp8 codes: nearest, ties to even, saturating (vLLM), NaN -> 0x7F."""
    vals = fp8_values(name)
    x = np.asarray(x, np.float32).astype(np.float64)
    a = np.abs(x)
    lo = np.clip(np.searchsorted(vals, a, side="right") - 1, 0, len(vals) - 1)
    hi = np.minimum(lo + 1, len(vals) - 1)
    below, above = a - vals[lo], vals[hi] - a
    up = (above < below) | ((above == below) & (lo % 2 == 1))
    code = np.where(a >= vals[-1], len(vals) - 1, np.where(up, hi, lo))
    sign = np.signbit(x).astype(np.int64) << 7
    return np.where(np.isnan(x), 0x7F, sign | code).astype(np.uint8)


def vllm_reference(key, cache, slot_mapping, fmt=None, scale=None):
    """reshape_and_cache_flash by its documentation: token t's [H, D] rows to
    block slot // block_size, offset slot % block_size; -1 skipped."""
    out = cache.clone()
    bs = cache.shape[1]
    for t, s in enumerate(slot_mapping.tolist()):
        if s < 0:
            continue
        row = key[t].float()
        if fmt is None:
            out[s // bs, s % bs] = key[t]
        else:
            sc = scale.float().reshape(-1, 1) if scale is not None else 1.0
            out[s // bs, s % bs] = torch.from_numpy(fp8_ref((row / sc).numpy(), fmt))
    return out


class Conversions(unittest.TestCase):
    T, H, D, BLOCKS, BS = 9, 2, 8, 6, 4

    def setUp(self):
        self.ctx = kvevict.Context("cpu", threads=1)
        g = torch.Generator().manual_seed(5)
        self.slots = torch.tensor([3, -1, 0, 17, 22, -1, 5, 9, 12], dtype=torch.int64)
        self.k = (torch.randn(self.T, self.H, self.D, generator=g) * 300)
        self.k[0, 0, :4] = torch.tensor([float("nan"), float("inf"), -1e6, 1e-9])

    def test_float_types_like_torch(self):
        for src, dst in ((torch.float32, torch.float16), (torch.float32, torch.bfloat16),
                         (torch.float16, torch.bfloat16), (torch.bfloat16, torch.float32)):
            k = self.k.to(src)
            k[0, 0, 0] = 0  # NaN payloads: torch keeps them, kvevict writes one NaN
            cache = torch.zeros(self.BLOCKS, self.BS, self.H, self.D, dtype=dst)
            with self.assertRaises(TypeError) as e:
                kvevict.cache_write(self.ctx, [k], [cache], self.slots)
            self.assertIn("%s" % str(src).replace("torch.", ""), str(e.exception))
            self.assertIn("%s" % str(dst).replace("torch.", ""), str(e.exception))
            kvevict.cache_write(self.ctx, [k], [cache], self.slots, convert=True)
            want = vllm_reference(k.to(dst), torch.zeros_like(cache), self.slots)
            self.assertTrue(torch.equal(cache.view(torch.int16 if dst != torch.float32
                                                   else torch.int32),
                                        want.view(torch.int16 if dst != torch.float32
                                                  else torch.int32)), (src, dst))

    def test_fp8_scales(self):
        for fmt in FP8:
            for scale in (None, torch.tensor([0.5]), torch.tensor([2.0, 0.125])):
                k = self.k.half()
                cache = torch.zeros(self.BLOCKS, self.BS, self.H, self.D, dtype=torch.uint8)
                kvevict.cache_write(self.ctx, [k], [cache], self.slots, kv_cache_dtype=fmt,
                                    scales=[scale])
                want = vllm_reference(k, torch.zeros_like(cache), self.slots, fmt, scale)
                self.assertTrue(torch.equal(cache, want), (fmt, scale))
        with self.assertRaises(TypeError) as e:
            kvevict.cache_write(self.ctx, [k], [cache.half()], self.slots, kv_cache_dtype="fp8")
        self.assertIn("float16", str(e.exception))
        with self.assertRaises(ValueError) as e:
            kvevict.cache_write(self.ctx, [k], [cache], self.slots, kv_cache_dtype="fp8",
                                scales=[torch.ones(3)])
        self.assertIn("scales[0]: 3 values, expected 1 or 2", str(e.exception))

    def test_reference_edges(self):
        """The numpy reference itself, on values fixed by the formats' definitions."""
        got = fp8_ref([448, 464, 1e9, float("inf"), -float("inf"), float("nan"), 2 ** -10,
                       1.5 * 2 ** -10, -0.0], "fp8_e4m3")
        self.assertEqual(got.tolist(), [0x7E, 0x7E, 0x7E, 0x7E, 0xFE, 0x7F, 0, 1, 0x80])
        got = fp8_ref([57344, 61440, float("inf"), 2 ** -16, 2 ** -17, 1.0], "fp8_e5m2")
        self.assertEqual(got.tolist(), [0x7B, 0x7B, 0x7B, 1, 0, 0x3C])


class Ops(unittest.TestCase):
    def test_registered(self):
        for name in ("reshape_and_cache_flash", "append_paged_kv_cache", "cache_write"):
            self.assertTrue(hasattr(torch.ops.kvevict, name), name)

    def test_reshape_and_cache_flash(self):
        T, H, D, NB, BS = 7, 2, 8, 5, 4
        key, value = torch.randn(T, H, D).half(), torch.randn(T, H, D).half()
        kv_cache = torch.zeros(2, NB, BS, H, D, dtype=torch.uint8)
        slots = torch.tensor([0, 5, -1, 19, 7, -1, 12])
        k_scale, v_scale = torch.tensor([0.25]), torch.tensor([0.5, 2.0])
        kc, vc = kv_cache.unbind(0)
        torch.ops.kvevict.reshape_and_cache_flash(key, value, kc, vc, slots, "fp8", k_scale,
                                                  v_scale)
        self.assertTrue(torch.equal(kc, vllm_reference(key, torch.zeros_like(kc), slots,
                                                       "fp8_e4m3", k_scale)))
        self.assertTrue(torch.equal(vc, vllm_reference(value, torch.zeros_like(vc), slots,
                                                       "fp8_e4m3", v_scale)))
        # "auto": a plain copy, the scales ignored (vLLM passes them regardless)
        cache = torch.zeros(2, NB, BS, H, D).half()
        kc, vc = cache.unbind(0)
        torch.ops.kvevict.reshape_and_cache_flash(key, value, kc, vc, slots, "auto", k_scale,
                                                  v_scale)
        self.assertTrue(torch.equal(kc, vllm_reference(key, torch.zeros_like(kc), slots)))

    def test_append_one_tensor(self):
        """FlashInfer's paged_kv_cache [pages, 2, page_size, heads, D] in one tensor."""
        H, D, PS = 2, 4, 3
        cache = torch.zeros(6, 2, PS, H, D)
        indptr = torch.tensor([0, 2, 3], dtype=torch.int32)
        indices = torch.tensor([4, 1, 5], dtype=torch.int32)
        last = torch.tensor([2, 3], dtype=torch.int32)
        batch = torch.tensor([0, 0, 1, 1, 0], dtype=torch.int32)
        pos = torch.tensor([3, 4, 1, 2, 0], dtype=torch.int32)
        k, v = torch.randn(5, H, D), torch.randn(5, H, D)
        want = cache.clone()
        for i in range(5):
            r, p = int(batch[i]), int(pos[i])
            page = int(indices[int(indptr[r]) + p // PS])
            want[page, 0, p % PS], want[page, 1, p % PS] = k[i], v[i]
        torch.ops.kvevict.append_paged_kv_cache(k, v, batch, pos, cache[:, 0], cache[:, 1],
                                                indices, indptr, last, "NHD")
        self.assertTrue(torch.equal(cache, want))

    def test_meta_and_tracing(self):
        T, H, D = 3, 2, 4
        m = lambda *s: torch.empty(*s, device="meta")  # noqa: E731
        out = torch.ops.kvevict.reshape_and_cache_flash(
            m(T, H, D), m(T, H, D), m(4, 4, H, D), m(4, 4, H, D),
            torch.empty(T, dtype=torch.int64, device="meta"), "auto", None, None)
        self.assertIsNone(out)

        def step(key, value, kc, vc, slots):
            torch.ops.kvevict.reshape_and_cache_flash(key, value, kc, vc, slots, "auto", None,
                                                      None)
            return kc
        args = (torch.randn(T, H, D), torch.randn(T, H, D), torch.zeros(4, 4, H, D),
                torch.zeros(4, 4, H, D), torch.tensor([0, 5, -1]))
        self.assertIn("kvevict::reshape_and_cache_flash",
                      str(torch.jit.trace(step, args, check_trace=False).graph))
        from torch.fx.experimental.proxy_tensor import make_fx
        for mode in ("real", "fake"):
            code = make_fx(step, tracing_mode=mode)(*args).code
            self.assertIn("torch.ops.kvevict.reshape_and_cache_flash", code, mode)


class Context(unittest.TestCase):
    def test_device_passed_to_library(self):
        with self.assertRaises(kvevict.KvevictError) as e:
            kvevict.Context("cpu", device=1)
        self.assertIn("device", str(e.exception))
        self.assertIn("1", e.exception.message)

    def test_tensor_elsewhere_named(self):
        ctx = kvevict.Context("cpu")
        v = _arrays.View(np.zeros(2, np.int64), "slots")
        v.cuda, v.device = True, 1  # what a cuda:1 tensor looks like to the binding
        with self.assertRaises(ValueError) as e:
            ctx._prepare([v])
        self.assertIn("slots: cuda:1 memory, but the context is on the host (cpu)",
                      str(e.exception))
        with self.assertRaises(TypeError) as e:
            kvevict.cache_write(ctx, [np.zeros((1, 1, 2), np.float32)],
                                [np.zeros((1, 1, 1, 2), np.float32)],
                                np.zeros((1, 1), np.int32))
        self.assertIn("slots: dtype int32, expected int64", str(e.exception))

    def test_strided_out(self):
        """append(out=) into persistent step buffers sized once for the largest step
        (the mapping padded to max_tokens): only the step's own tokens are written."""
        ctx = kvevict.Context("cpu")
        kw = dict(max_seqs=2, n_layers=2, n_heads=3, budget=8, window=2, interval=2,
                  max_slots=16, tensors="torch")
        a, b = kvevict.State(ctx, **kw), kvevict.State(ctx, **kw)
        for st in (a, b):
            st.admit(0, 7, 3)
            st.admit(1, 8, 0)
        persistent = b.step_buffers(32, 2, 3)
        persistent.mapping.fill_(-5)
        ptr = persistent.mapping.data_ptr()
        for step in range(12):
            n_new = [3, 1] if step == 0 else [1, 2]
            n = sum(n_new)
            want = a.append([0, 1], n_new)
            got = b.append([0, 1], n_new, out=persistent)
            self.assertIs(got, persistent)
            self.assertEqual(got.mapping.data_ptr(), ptr)
            self.assertTrue(torch.equal(got.mapping[:, :n], want.mapping[:, :n]))
            rest = persistent.mapping[:, 4:]  # past the longest step: never written
            self.assertTrue(torch.equal(rest, torch.full_like(rest, -5)))


def in_thread(fn):
    """fn() on a new thread (no ops Context yet); its result or exception."""
    import threading
    out = {}

    def body():
        try:
            out["value"] = fn()
        except Exception as e:  # noqa: BLE001  (handed back to the test)
            out["error"] = e
    t = threading.Thread(target=body)
    t.start()
    t.join()
    return out


class WarmUp(unittest.TestCase):
    """kvevict.ops makes a Context per thread at its first op (an allocation
    and a synchronize on a GPU): warm_up makes it outside a capture, and a
    first op while the stream captures raises (the capturing check
    monkeypatched: the CPU has no CUDA stream)."""

    def write(self):
        k = torch.randn(2, 1, 4)
        cache = torch.zeros(2, 2, 1, 4)
        torch.ops.kvevict.reshape_and_cache_flash(k, k, cache, cache.clone(),
                                                  torch.tensor([0, 3]), "auto", None, None)
        return cache

    def test_warm_up_is_the_threads_context(self):
        def body():
            ctx = kvevict.ops.warm_up("cpu")
            same = kvevict.ops.context_for(torch.device("cpu")) is ctx
            return ctx, same, kvevict.ops.warm_up(torch.device("cpu")) is ctx
        a, b = in_thread(body), in_thread(body)
        self.assertNotIn("error", a)
        self.assertEqual(a["value"][1:], (True, True))
        self.assertIsNot(a["value"][0], b["value"][0])  # one per thread

    def test_first_op_while_capturing(self):
        real = kvevict.ops._capturing
        try:
            kvevict.ops._capturing = lambda device: True
            got = in_thread(self.write)
            self.assertIsInstance(got.get("error"), RuntimeError, got)
            msg = str(got["error"])
            self.assertIn('kvevict.ops.warm_up("cpu")', msg)
            self.assertIn("captures a CUDA graph", msg)
            # warmed up first (outside the capture), the op runs while capturing

            def warmed():
                kvevict.ops._capturing = real
                kvevict.ops.warm_up("cpu")
                kvevict.ops._capturing = lambda device: True
                return self.write()
            got = in_thread(warmed)
            self.assertNotIn("error", got)
            self.assertEqual(int((got["value"] != 0).sum()), 2 * 4)
        finally:
            kvevict.ops._capturing = real


if __name__ == "__main__":
    unittest.main()
