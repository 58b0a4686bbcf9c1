#!/usr/bin/python3
"""The code of docs/INTEGRATION.md "The engines' own write calls", run as
written: vLLM's do_kv_cache_update and FlashInfer's append_paged_kv_cache,
fed an engine's tensors, every cache byte checked against each engine's
documented write (vLLM: slot // block_size, slot % block_size, -1 skipped,
fp8 = saturate(round(x / scale)); FlashInfer: page indices[indptr[b] +
pos // page_size], offset pos % page_size)."""

import re
import sys
import unittest
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_torch_ops import fp8_ref  # noqa: E402  (the numpy reference of fp8)

DOC = Path(__file__).resolve().parents[2] / "docs" / "INTEGRATION.md"


def doc_block(name):
    """The namespace after running the ```python block tagged '# doc-test: name'."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    code = [b for b in blocks if b.startswith("# doc-test: %s\n" % name)]
    if len(code) != 1:
        raise AssertionError("%s: %d blocks tagged %r, expected 1" % (DOC, len(code), name))
    ns = {}
    exec(compile(code[0], "%s[%s]" % (DOC.name, name), "exec"), ns)
    return ns


class Layer:  # what vLLM's Attention layer carries for the write
    def __init__(self, k_scale, v_scale):
        self._k_scale, self._v_scale = k_scale, v_scale


class Vllm(unittest.TestCase):
    T, H, D, NB, BS = 10, 4, 16, 8, 4

    def run_update(self, kv_cache_dtype, cache_dtype, k_scale, v_scale):
        impl = doc_block("vllm")["KvevictFlashAttentionImpl"](kv_cache_dtype)
        g = torch.Generator().manual_seed(11)
        key = (torch.randn(self.T, self.H, self.D, generator=g) * 100).bfloat16()
        value = (torch.randn(self.T, self.H, self.D, generator=g) * 100).bfloat16()
        kv_cache = torch.randint(0, 255, (2, self.NB, self.BS, self.H, self.D),
                                 dtype=torch.uint8, generator=g)
        if cache_dtype != torch.uint8:
            kv_cache = kv_cache.to(cache_dtype)
        slot_mapping = torch.tensor([5, 0, 31, -1, 12, 13, -1, 7, 20, 1])  # -1: padding
        want = kv_cache.clone()
        for t, s in enumerate(slot_mapping.tolist()):
            if s < 0:
                continue
            for c, (x, scale) in enumerate(((key, k_scale), (value, v_scale))):
                if kv_cache_dtype == "auto":
                    want[c, s // self.BS, s % self.BS] = x[t]
                else:
                    row = x[t].float() / scale.float().reshape(-1, 1)
                    want[c, s // self.BS, s % self.BS] = torch.from_numpy(
                        fp8_ref(row.numpy(), "fp8_e4m3" if kv_cache_dtype == "fp8"
                                else kv_cache_dtype))
        impl.do_kv_cache_update(Layer(k_scale, v_scale), key, value, kv_cache, slot_mapping)
        self.assertTrue(torch.equal(kv_cache, want), kv_cache_dtype)

    def test_bf16_cache(self):
        self.run_update("auto", torch.bfloat16, torch.tensor([1.0]), torch.tensor([1.0]))

    def test_fp8_caches(self):
        self.run_update("fp8", torch.uint8, torch.tensor([0.5]), torch.tensor([4.0]))
        self.run_update("fp8_e5m2", torch.uint8, torch.tensor([0.25, 1, 2, 8]),
                        torch.tensor([3.0]))


class FlashInfer(unittest.TestCase):
    H, D, PS, PAGES = 2, 8, 4, 9

    def test_append(self):
        append = doc_block("flashinfer")["append_paged_kv_cache"]
        # two requests: 5 then 2 tokens appended onto 3 and 6 cached ones
        kv_indptr = torch.tensor([0, 2, 4], dtype=torch.int32)
        kv_indices = torch.tensor([6, 2, 0, 7], dtype=torch.int32)
        kv_last_page_len = torch.tensor([4, 4], dtype=torch.int32)  # lengths 8 and 8
        batch_indices = torch.tensor([0, 0, 0, 0, 0, 1, 1], dtype=torch.int32)
        positions = torch.tensor([3, 4, 5, 6, 7, 6, 7], dtype=torch.int32)
        g = torch.Generator().manual_seed(3)
        for layout in ("NHD", "HND"):
            for one_tensor in (True, False):
                k = torch.randn(7, self.H, self.D, generator=g).half()
                v = torch.randn(7, self.H, self.D, generator=g).half()
                shape = (self.PAGES, 2, self.PS, self.H, self.D) if layout == "NHD" else \
                    (self.PAGES, 2, self.H, self.PS, self.D)
                cache = torch.randn(*shape, generator=g).half()
                want = cache.clone()
                for i in range(7):
                    b, p = int(batch_indices[i]), int(positions[i])
                    page = int(kv_indices[int(kv_indptr[b]) + p // self.PS])
                    for c, x in enumerate((k, v)):
                        if layout == "NHD":
                            want[page, c, p % self.PS] = x[i]
                        else:
                            want[page, c, :, p % self.PS] = x[i]
                paged = cache if one_tensor else (cache[:, 0], cache[:, 1])
                append(k, v, batch_indices, positions, paged, kv_indices, kv_indptr,
                       kv_last_page_len, kv_layout=layout)
                self.assertTrue(torch.equal(cache, want), (layout, one_tensor))


if __name__ == "__main__":
    unittest.main()
