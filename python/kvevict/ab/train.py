"""Train the tiny model kvevict.ab ships (data/tiny-model) on the synthetic
tasks of kvevict.ab.tiny, deterministically: seeded, one thread,
torch.use_deterministic_algorithms. The loss is the cross-entropy of the
answer tokens (the prompt's filler is unpredictable by design).

Run: python -m kvevict.ab.train [--out DIR] [--steps N]   (the hf venv;
about 14 minutes of two loaded CPU cores for the shipped 5000 steps).
training.json beside the weights records the settings, the final loss,
the torch version, a SHA-256 of this file and of tiny.py, and the SHA-256
of the weights after --check-step steps, so a short rerun can show whether
this torch reproduces the run bit for bit.
"""
import argparse
import hashlib
import json
import math
import os
import random
import sys
import time

# rag (a copy keyed by content, the slowest to learn) drawn twice as often
MIX = ("rag", "rag", "chat", "log", "math")
DEFAULTS = dict(steps=5000, batch=48, lr=4e-3, warmup=100, weight_decay=0.01, seed=59,
                check_step=20)


def code_hash(root: str = None) -> str:
    """SHA-256 of the training code (this file and tiny.py, in root or this
    package): their syntax trees without docstrings, so an edit of a
    comment or a docstring keeps the hash."""
    import ast

    h = hashlib.sha256()
    here = root or os.path.dirname(os.path.abspath(__file__))
    for name in ("train.py", "tiny.py"):
        with open(os.path.join(here, name)) as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and \
                    isinstance(getattr(body[0], "value", None), ast.Constant) and \
                    isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
        h.update(ast.dump(tree).encode())
    return h.hexdigest()


def weights_hash(model) -> str:
    """SHA-256 of the model's parameters (names and float32 bytes, in order)."""
    h = hashlib.sha256()
    for name, p in model.state_dict().items():
        h.update(name.encode())
        h.update(p.detach().float().contiguous().numpy().tobytes())
    return h.hexdigest()


def batch(rng, tok, n, cap=1.0):
    """(input ids, labels) of n examples, buckets drawn from MIX, prompts
    scaled by fill = min(1, cap * U(0.6, 1.25)) (the curriculum: cap grows
    from 0.2 to 1 over the first half of the steps); labels are -100 but on
    the answer and its <eos>."""
    import torch

    from .tiny import example

    seqs = []
    for _ in range(n):
        fill = min(1.0, cap * rng.uniform(0.6, 1.25))
        task, answer = example(rng, rng.choice(MIX), fill)
        text = tok.chat_text(task["messages"]) if "messages" in task else task["prompt"]
        p = tok.encode(text)
        a = tok.encode(answer, bos=False) + [tok.eos_token_id]
        seqs.append((p + a, [-100] * len(p) + a))
    L = max(len(s) for s, _ in seqs)
    ids = torch.full((n, L), tok.pad_token_id, dtype=torch.long)
    lab = torch.full((n, L), -100, dtype=torch.long)
    for i, (s, l) in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s)
        lab[i, :len(l)] = torch.tensor(l)
    return ids, lab


def train(steps, batch_size, lr, warmup, weight_decay, seed, check_step, log=None, stop=None):
    """The trained model and its record (a dict for training.json); stop:
    end after that many of the `steps` (the schedule still that of `steps`:
    a short rerun of a long training's first steps)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from .tiny import MODEL_CONFIG, WordTokenizer

    torch.set_num_threads(1)
    torch.set_flush_denormal(True)  # denormal weights and grads slow the CPU tenfold
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(seed)
    rng = random.Random(seed)
    tok = WordTokenizer()
    model = LlamaForCausalLM(LlamaConfig(**MODEL_CONFIG)).float()
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay,
                            betas=(0.9, 0.98))
    record = dict(code_sha256=code_hash(), torch=torch.__version__, steps=steps,
                  batch=batch_size, lr=lr, warmup=warmup, weight_decay=weight_decay, seed=seed,
                  check_step=check_step)
    t0, avg = time.time(), None
    for step in range(1, steps + 1):
        f = step / warmup if step <= warmup else \
            0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))
        for g in opt.param_groups:
            g["lr"] = lr * max(f, 0.02)
        ids, lab = batch(rng, tok, batch_size, min(1.0, 0.2 + 1.6 * step / steps))
        loss = model(input_ids=ids, labels=lab).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        avg = loss.item() if avg is None else 0.95 * avg + 0.05 * loss.item()
        if step == check_step:
            record["check_sha256"] = weights_hash(model)
        if stop is not None and step >= stop:
            break
        if log and (step % 50 == 0 or step == steps):
            log("step %d/%d  loss %.4f  %.0f s" % (step, steps, avg, time.time() - t0))
    record["final_loss"] = round(avg, 6)
    record["seconds"] = round(time.time() - t0, 1)
    model.eval()
    return model, record


def save(model, record, out):
    """The weights (safetensors), config, vocab.json and training.json in out."""
    from .tiny import WordTokenizer

    os.makedirs(out, exist_ok=True)
    model.save_pretrained(out)
    WordTokenizer().save(out)
    record = dict(record, weights_sha256=weights_hash(model))
    with open(os.path.join(out, "training.json"), "w") as f:
        json.dump(record, f, indent=1, sort_keys=True)
        f.write("\n")
    for extra in ("generation_config.json",):  # not needed: the harness decodes itself
        p = os.path.join(out, extra)
        if os.path.exists(p):
            os.remove(p)


def main(argv=None):
    from .tiny import MODEL_DIR

    ap = argparse.ArgumentParser(prog="python -m kvevict.ab.train",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=MODEL_DIR, help="the model directory (default: %(default)s)")
    for k, v in DEFAULTS.items():
        ap.add_argument("--" + k.replace("_", "-"), type=type(v), default=v)
    a = ap.parse_args(argv)
    for k in ("steps", "batch", "warmup", "check_step"):
        if getattr(a, k) < 1:
            ap.error("--%s %d: expected a positive integer" % (k.replace("_", "-"), getattr(a, k)))
    if not a.lr > 0:
        ap.error("--lr %r: expected a positive number" % a.lr)
    model, record = train(a.steps, a.batch, a.lr, a.warmup, a.weight_decay, a.seed,
                          a.check_step, log=lambda s: print(s, file=sys.stderr, flush=True))
    save(model, record, a.out)
    print("wrote %s (final loss %.4f, %.0f s)" % (a.out, record["final_loss"], record["seconds"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
