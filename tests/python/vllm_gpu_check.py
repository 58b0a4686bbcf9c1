"""The vLLM plugin on a GPU (FlashAttention, and FlashInfer where the
flashinfer package imports; bf16), for bench/gpu_check.sh:
stock vLLM against the random arm with a budget never reached (the same
tokens: the plugin's write copies the same bytes to the same places), and
an evicting run whose every request's keep-set digest equals an independent
kvevict.State's on the CPU. Exit 77 (not run) without CUDA or vLLM."""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
try:
    import torch
    import vllm  # noqa: F401
    if not torch.cuda.is_available():
        raise ImportError("no CUDA device for torch")
except ImportError as e:
    print("vllm plugin on the GPU: not run (%s)" % e)
    sys.exit(77)
sys.path.insert(0, HERE)
import test_vllm_plugin as t  # noqa: E402  (the tiny model, the engine runner, the replay)


def main():
    with tempfile.TemporaryDirectory(prefix="kve-vllm-gpu-") as tmp:
        model = os.path.join(tmp, "qwen3")
        t.make_model(model)
        import kvevict
        env = dict(os.environ, PYTHONPATH=os.path.abspath(t.SRC))
        prompts = [list(range(1, 30)), list(range(5, 17)), list(range(40, 101))]
        backends = ["FLASH_ATTN"]
        try:
            import flashinfer  # noqa: F401
            backends.append("FLASHINFER")
        except ImportError as e:
            print("FlashInfer: not run (%s)" % e)
        for be in backends:
            base = dict(model=model, device="cuda", prompts=prompts, max_tokens=[60, 75, 45],
                        backend=be)
            stock = t.engine(env, dict(base, arm="stock"))
            wide = t.engine(env, dict(base, arm="random", kvevict=dict(budget=400, seed=3)))
            t.check(stock["tokens"] == wide["tokens"],
                    "GPU %s, budget never reached: stock's tokens" % be)
            settings = dict(budget=40, window=8, interval=16, seed=7)
            ev = t.engine(env, dict(base, arm="random", kvevict=settings))
            for rec in ev["digests"]:
                i = rec["seq_id"] - 1000
                want, rnd, n_tok = t.replay_digest(kvevict, rec, settings, len(prompts[i]),
                                                   len(ev["tokens"][i]))
                t.check(rec["digest"] == want and rec["round"] == rnd,
                        "GPU %s request %d: digest %s, %d rounds; an independent State: %s, %d"
                        % (be, i, rec["digest"], rec["round"], want, rnd))
    print("%d failed" % len(t.FAILS) if t.FAILS else "all passed")
    return 1 if t.FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
