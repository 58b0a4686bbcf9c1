# gpu_torch_peer.py — the PyTorch peer of bench/gpu_check.sh on the same GPU:
# the paper's selector (rand + topk + sort, then gather) at the G2 and G3
# shapes, and a gather of the kept K and V entries (compaction's peer).
# Prints RESULT lines; a python3 without a CUDA torch prints why, exit 0.
import sys
try:
    import torch
except Exception as e:  # no torch: no peer
    print(f"# torch unavailable: {e}")
    sys.exit(0)
if not torch.cuda.is_available():  # ROCm builds of torch answer here too
    print("# torch has no GPU here")
    sys.exit(0)
dev = "cuda"
P, B, W, S, D = 1024, 2048, 64, 2112, 128  # the paper's shape, head_dim 128
cand, keep = S - P - W, B - P - W


def timed_us(fn, iters):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) * 1000.0 / iters


def selector(heads):
    slots = torch.arange(P, P + cand, device=dev, dtype=torch.int32).expand(heads, cand)

    def one_round():  # the paper's selector: kept candidates, ascending
        scores = torch.rand(heads, cand, device=dev)
        idx = scores.topk(keep, dim=1).indices.sort(dim=1).values
        return slots.gather(1, idx)

    return one_round


print(f"# torch {torch.__version__} on {torch.cuda.get_device_name(0)}")
for name, heads, iters in (("g2", 64 * 8, 200), ("g3", 128 * 36 * 8, 10)):
    us = timed_us(selector(heads), iters)
    print(f"RESULT torch_{name}_us {us:.3f}")
    print(f"RESULT torch_{name}_keys_per_s {heads * cand / (us * 1e-6):.6g}")

# compaction peer: gather the kept entries of K and V (G2 round, bf16)
heads = 64 * 8
k = torch.randn(heads, S, D, device=dev, dtype=torch.bfloat16)
v = torch.randn_like(k)
kept = torch.rand(heads, S, device=dev).argsort(dim=1)[:, : S - 64].sort(dim=1).values
idx = kept.unsqueeze(-1).expand(-1, -1, D)
k2 = torch.empty(heads, S - 64, D, device=dev, dtype=torch.bfloat16)
v2 = torch.empty_like(k2)


def gather():
    torch.gather(k, 1, idx, out=k2)
    torch.gather(v, 1, idx, out=v2)


us = timed_us(gather, 30)
print(f"RESULT torch_compact_gbs {2 * k2.numel() * 2 / (us * 1e3):.1f}")
