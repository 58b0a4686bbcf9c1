#!/usr/bin/python3
"""serve_bench's --model path (label hf; exit 77, skipped, without the
transformers package): a tiny randomly initialized Qwen3 checkpoint saved
by transformers, loaded by serve_model.Model.from_hf, decoded by the
engine's full arm (chunked prefill, then one token a step), must give the
logits transformers' own forward gives for the same tokens."""
import os
import sys
import tempfile

import torch

try:
    import transformers
    from transformers import Qwen3Config, Qwen3ForCausalLM
except ImportError as e:
    print("skipped: transformers with Qwen3 is not installed (%s)" % e)
    sys.exit(1 if os.environ.get("KVE_HF_REQUIRED") else 77)  # run.sh's venv: required

from kvevict.examples.serve_engine import Engine, Request  # noqa: E402
from kvevict.examples.serve_model import Model  # noqa: E402


def main():
    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                      max_position_embeddings=256, rope_theta=1000000.0, rms_norm_eps=1e-6,
                      tie_word_embeddings=False, attn_implementation="eager")
    hf = Qwen3ForCausalLM(cfg).float().eval()
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        hf.save_pretrained(tmp)
        model = Model.from_hf(tmp)
        c = model.cfg
        if (c.layers, c.hidden, c.q_heads, c.kv_heads, c.head_dim, c.vocab) != (2, 64, 4, 2, 32, 128):
            print("FAIL: the loaded shape %s" % c)
            failures += 1
        prompt = torch.randint(0, 128, (23,)).tolist()
        eng = Engine(model, "full", kv_bytes=1 << 20, prompt_len=23, max_new=10, page_size=8,
                     max_seqs=2, chunk=8, record=True, check=True)
        req = Request(1, prompt, 10)
        eng.submit(req)
        with torch.no_grad():
            while eng.queue or eng.rows:
                eng.step()
            seq = torch.tensor([prompt + req.done_tokens[:-1]])
            ref = hf(seq).logits[0, len(prompt) - 1:].float()
        got = torch.stack(req.logits)
        err = float((got - ref).abs().max()) if got.shape == ref.shape else float("inf")
        print("transformers %s: full-arm logits vs Qwen3ForCausalLM: max abs error %g"
              % (transformers.__version__, err))
        if not err <= 1e-4:
            print("FAIL: logits differ (shapes %s, %s)" % (tuple(got.shape), tuple(ref.shape)))
            failures += 1
        if req.done_tokens != ref.argmax(-1).tolist():
            print("FAIL: greedy tokens differ from transformers'")
            failures += 1
    print("%d failures" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
