# gpu_python_check.py — the Python binding's CUDA path, for bench/gpu_check.sh:
# kvevict.evict and kvevict.compact on CUDA tensors (PyTorch's current
# stream) against the CPU backend on numpy arrays, bit for bit. Prints
# RESULT python_cuda_identical 1 or 0; exits 1 on a difference, 2 when
# the backend or a CUDA torch is missing (with the reason).
import sys

import numpy as np

try:
    import torch
except Exception as e:
    print(f"# torch unavailable: {e}")
    sys.exit(2)
if not torch.cuda.is_available():
    print("# torch sees no CUDA device")
    sys.exit(2)

import kvevict

try:
    gpu = kvevict.Context("cuda")
except kvevict.KvevictError as e:
    print(f"# kvevict's CUDA backend: {e}")
    sys.exit(2)
cpu = kvevict.Context("cpu")

S, L, H, N, P, B, W, D = 2, 4, 8, 2112, 1024, 2048, 64, 64
rng = np.random.default_rng(2609)
slots = np.tile(np.arange(N, dtype=np.int32), (S, L, H, 1))
slots[0, 1, 2, rng.choice(N, 100, replace=False)] = -1  # some empty slots
seqs = [(1234, P, 0), (99, P, 3)]
ev_c, n_c = kvevict.evict(cpu, slots, seqs, seed=2609, budget=B, window=W)
slots_g = torch.from_numpy(slots).cuda()
ev_g, n_g = kvevict.evict(gpu, slots_g, seqs, seed=2609, budget=B, window=W)
gpu.synchronize()
ev_g, n_g = ev_g.cpu().numpy(), n_g.cpu().numpy()
same = bool(np.array_equal(np.asarray(n_c), n_g))
if same:
    for idx in np.ndindex(S, L, H):
        k = int(n_c[idx])
        same &= bool(np.array_equal(np.asarray(ev_c)[idx][:k], ev_g[idx][:k]))

# compaction of one bf16 cache in place, on both backends
cache = rng.integers(0, 1 << 16, size=(S, L, H, N, D), dtype=np.uint16)
cache_c = cache.copy()
cache_g = torch.from_numpy(cache.view(np.int16)).cuda()
slots_c = slots.copy()
kvevict.compact(cpu, slots_c, ev_c, n_c, [cache_c])
kvevict.compact(gpu, slots_g, torch.from_numpy(np.asarray(ev_c)).cuda(),
                torch.from_numpy(np.asarray(n_c)).cuda(), [cache_g])
gpu.synchronize()
same &= bool(np.array_equal(slots_c, slots_g.cpu().numpy()))
same &= bool(np.array_equal(cache_c.view(np.int16), cache_g.cpu().numpy()))
print(f"# binding on {torch.cuda.get_device_name(0)}: evict + compact of {S * L * H} heads")
print(f"RESULT python_cuda_identical {int(same)}")
sys.exit(0 if same else 1)
