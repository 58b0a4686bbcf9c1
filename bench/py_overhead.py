#!/usr/bin/python3
"""Per-call overhead of the Python binding on the CPU backend: tiny decode-step
calls (8 tokens, 8 heads, head_dim 128, f16), so the time is the binding's,
not the copy's. Prints CPU microseconds per call and each call's ratio to one
bare ctypes call into the library (kve_version), measured in the same run.

    PYTHONPATH=python KVEVICT_LIBRARY=build/libkvevict.so bench/py_overhead.py

Runs against any version of the package that has cache_write(ctx, srcs,
dsts, slots, token_row, block_table=) and State.append (to compare before
and after a change, point PYTHONPATH and KVEVICT_LIBRARY at the old tree).
``py_overhead.py convert`` times a prefill-sized write (512 tokens x 8 heads x
128) copying bf16 and converting it (to f16, to fp8 with and without a
per-head scale), as ratios to the copy in the same run.
``py_overhead.py N`` makes N torch cache_write calls and prints nothing, for
whole-process timings: (time(N) - time(0)) / N is the per-call cost with
the start-up (torch's import) taken out.
"""

import ctypes
import importlib
import sys
import time

import numpy as np
import torch

import kvevict
from kvevict import _lib

T, H, D, PS, BLOCKS = 8, 8, 128, 16, 64


def per_call(fn, n=20000):
    """Best of 5 runs of n calls, in CPU microseconds per call (the process's
    CPU time: on a shared machine, wall time also counts waiting for a core)."""
    best = float("inf")
    for _ in range(5):
        t0 = time.process_time()
        for _ in range(n):
            fn()
        best = min(best, (time.process_time() - t0) / n * 1e6)
    return best


def calls_only(n):
    ctx = kvevict.Context("cpu", threads=1)
    k = torch.ones((T, H, D), dtype=torch.float16)
    cache = torch.zeros((BLOCKS, PS, H, D), dtype=torch.float16)
    slots = torch.arange(T * H, dtype=torch.int64).reshape(T, H) % PS
    token_row = torch.arange(T, dtype=torch.int32)
    bt = torch.arange(T * 4, dtype=torch.int32).reshape(T, 4)
    for _ in range(n):
        kvevict.cache_write(ctx, [k], [cache], slots, token_row, block_table=bt)


def conversions():
    ctx = kvevict.Context("cpu", threads=1)
    n_tok, blocks = 512, 256
    g = torch.Generator().manual_seed(1)
    k = torch.randn(n_tok, H, D, generator=g).bfloat16()
    slots = torch.randperm(blocks * PS, generator=g)[:n_tok]
    scale = [torch.rand(H, generator=g) + 0.5]

    def cache(dtype):
        return torch.zeros(blocks, PS, H, D, dtype=dtype)
    cases = [("bf16 copy", cache(torch.bfloat16), {}),
             ("bf16 -> f16", cache(torch.float16), dict(convert=True)),
             ("bf16 -> fp8 e4m3", cache(torch.uint8), dict(kv_cache_dtype="fp8")),
             ("bf16 -> fp8 e4m3, scale per head", cache(torch.uint8),
              dict(kv_cache_dtype="fp8", scales=scale))]
    copy = None
    for name, c, kw in cases:
        us = per_call(lambda: kvevict.cache_write(ctx, [k], [c], slots, **kw), 20)
        copy = copy or us
        print("%-34s %9.1f us  %6.2f G elements/s  %6.1fx the copy"
              % (name, us, n_tok * H * D / us / 1e3, us / copy))


def main():
    if len(sys.argv) > 1:
        if sys.argv[1] == "convert":
            return conversions()
        return calls_only(int(sys.argv[1]))
    ctx = kvevict.Context("cpu", threads=1)
    v = ctypes.c_uint32()
    floor = per_call(lambda: _lib.lib.kve_version(ctypes.byref(v)), 200000)
    rows = {}
    for kind in ("numpy", "torch"):
        conv = (lambda a: a) if kind == "numpy" else torch.from_numpy
        k = conv(np.ones((T, H, D), np.float16))
        cache = conv(np.zeros((BLOCKS, PS, H, D), np.float16))
        slots = conv(np.arange(T * H, dtype=np.int64).reshape(T, H) % PS)
        token_row = conv(np.arange(T, dtype=np.int32))
        bt = conv(np.arange(T * 4, dtype=np.int32).reshape(T, 4))
        rows["cache_write (%s, 1 cache)" % kind] = per_call(
            lambda: kvevict.cache_write(ctx, [k], [cache], slots, token_row, block_table=bt))
    try:  # the torch.library operator (K and V: two caches), where the package has it
        importlib.import_module("kvevict.ops")
        op = torch.ops.kvevict.cache_write
        v_cache = torch.zeros_like(cache)
        rows["torch.ops.kvevict.cache_write (K+V)"] = per_call(
            lambda: op(k, k, cache, v_cache, slots, token_row, bt, "nhd", "auto", None, None))
        rows["cache_write (torch, K+V)"] = per_call(
            lambda: kvevict.cache_write(ctx, [k, k], [cache, v_cache], slots, token_row,
                                        block_table=bt))
    except ImportError:
        pass
    # room for every appended token: no eviction round in the timing
    st = kvevict.State(ctx, max_seqs=T, n_layers=1, n_heads=H, budget=1 << 15, window=0,
                       interval=1, max_slots=(1 << 15) + 1)
    for r in range(T):
        st.admit(r, r, 0)
    rows_list, ones = list(range(T)), [1] * T
    rows["State.append (8 rows, 1 token)"] = per_call(lambda: st.append(rows_list, ones), 5000)
    print("bare ctypes call (kve_version): %.2f us" % floor)
    for name, us in rows.items():
        print("%-34s %7.2f us  %5.1fx the bare call" % (name, us, us / floor))


if __name__ == "__main__":
    main()
