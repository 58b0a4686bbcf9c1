"""The tiny model's world: a word vocabulary, its tokenizer and the
synthetic tasks it is trained and judged on (four buckets).

  rag    facts stated in the prompt ("ann red ; bob blue ; ..."), filler,
         then a question; the answer restates the key: "bob blue".
  chat   a fact said in the first user turn ("i like gold"), turns of
         filler, asked at the last turn (chat messages); "you like gold".
  log    a log of "level at host" lines with one "err"; the answer "err at h4".
  math   a start digit and 3-5 steps of +1 or +2, mod 10 ("x1 = 3 ; x2 = 2 ;
         ..."); the trace restates the running state at each step ("x1 3 x2
         5 ...") and ends "ans 7".

In every bucket the facts the answer needs sit in the prompt, and the
answer's deciding token comes at the second decode step or later, so an
arm that evicts prompt tokens (random-p0) can lose them, and one that
pins the prompt (random) cannot. The model is a transformers
LlamaForCausalLM (RoPE, grouped-query attention), which kvevict.hf serves.
"""
import json
import os
import random
from typing import Dict, List, Sequence, Tuple

SPECIALS = ("<pad>", "<bos>", "<eos>")
PUNCT = ("=", ";", ".", "?", ":")
WORDS = ("facts", "q", "user", "bot", "ok", "i", "you", "what", "do", "like", "log", "err",
         "info", "at", "calc", "sum", "ans")
KEYS = ("ann", "bob", "cid", "dan", "eve", "fay", "gus", "hal", "ivy", "jon", "kim", "lee")
VALUES = ("red", "blue", "green", "gold", "pink", "gray", "teal", "navy", "lime", "rust",
          "plum", "jade")
HOSTS = tuple("h%d" % i for i in range(12))
DIGITS = tuple(str(i) for i in range(10))
INDEX = tuple("x%d" % i for i in range(1, 7))
FILLER = ("the", "a", "of", "and", "to", "in", "is", "it", "was", "for", "on", "are", "as",
          "with", "his", "they")
VOCAB = SPECIALS + PUNCT + WORDS + KEYS + VALUES + HOSTS + DIGITS + INDEX + FILLER
BUCKETS = ("rag", "chat", "log", "math")

# The model's shape: small enough to ship (float32 safetensors, < 1 MB) and
# to train in minutes on two CPU cores.
MODEL_CONFIG = dict(vocab_size=len(VOCAB), hidden_size=96, intermediate_size=256,
                    num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                    head_dim=32, max_position_embeddings=256, rope_theta=10000.0,
                    tie_word_embeddings=True, pad_token_id=0, bos_token_id=1, eos_token_id=2)

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL_DIR = os.path.join(HERE, "data", "tiny-model")
SUITE = os.path.join(HERE, "data", "tiny-tasks.jsonl")
SUITE_SEED, SUITE_PER_BUCKET = 20261207, 40


class WordTokenizer:
    """Whitespace-split words of VOCAB, one token each. encode() refuses a
    word outside the vocabulary, naming it."""

    def __init__(self, vocab: Sequence[str] = VOCAB):
        self.vocab = list(vocab)
        self.index = {w: i for i, w in enumerate(self.vocab)}
        self.pad_token_id, self.bos_token_id, self.eos_token_id = 0, 1, 2

    def encode(self, text: str, bos: bool = True) -> List[int]:
        """Token ids of text (words split on whitespace), <bos> first."""
        ids = [self.bos_token_id] if bos else []
        for w in text.split():
            if w not in self.index:
                raise ValueError("word %r is not in the tiny model's vocabulary (%d words: "
                                 "kvevict.ab.tiny.VOCAB)" % (w, len(self.vocab)))
            ids.append(self.index[w])
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        """The words of ids, specials left out, joined by spaces."""
        return " ".join(self.vocab[i] for i in ids if i >= len(SPECIALS))

    def token_strings(self, ids: Sequence[int]) -> List[str]:
        """One string per id (specials included), for side-by-side outputs."""
        return [self.vocab[i] for i in ids]

    def chat_text(self, messages: Sequence[Dict[str, str]]) -> str:
        """The prompt text of chat messages: "user : ... bot : ..." and the
        reply's cue "bot :"."""
        parts = []
        for m in messages:
            parts.append(("user :" if m["role"] == "user" else "bot :") + " " + m["content"])
        return " ".join(parts + ["bot :"])

    def save(self, path: str) -> None:
        """Write the vocabulary (vocab.json) into directory path."""
        with open(os.path.join(path, "vocab.json"), "w") as f:
            json.dump({"kvevict_word_vocab": self.vocab}, f, indent=0)
            f.write("\n")

    @classmethod
    def load(cls, path: str) -> "WordTokenizer":
        """The tokenizer saved in directory path (vocab.json)."""
        with open(os.path.join(path, "vocab.json")) as f:
            return cls(json.load(f)["kvevict_word_vocab"])


def _filler(rng: random.Random, lo: int, hi: int, fill: float = 1.0) -> List[str]:
    """lo..hi filler words; fill < 1 (the training's curriculum) scales both down."""
    lo, hi = int(lo * fill), max(int(lo * fill), int(hi * fill))
    return [rng.choice(FILLER) for _ in range(rng.randint(lo, hi))]


def make_rag(rng: random.Random, fill: float = 1.0) -> Tuple[dict, str]:
    keys = rng.sample(KEYS, 6)
    vals = [rng.choice(VALUES) for _ in keys]
    facts = " ; ".join("%s %s" % kv for kv in zip(keys, vals))
    k = rng.randrange(6)
    filler = " ".join(_filler(rng, 20, 40, fill))
    prompt = "facts : %s . %s . q : %s ?" % (facts, filler, keys[k])
    answer = "%s %s" % (keys[k], vals[k])
    return dict(bucket="rag", prompt=prompt, reference=answer, checker="exact",
                max_new_tokens=8), answer


def make_chat(rng: random.Random, fill: float = 1.0) -> Tuple[dict, str]:
    val = rng.choice(VALUES)
    msgs = [dict(role="user", content="i like %s ." % val), dict(role="assistant", content="ok .")]
    for _ in range(rng.randint(max(1, int(2 * fill)), 1 + int(3 * fill))):
        msgs.append(dict(role="user", content=" ".join(_filler(rng, 5, 10, fill)) + " ."))
        msgs.append(dict(role="assistant", content="ok ."))
    msgs.append(dict(role="user", content="what do i like ?"))
    answer = "you like %s" % val
    return dict(bucket="chat", messages=msgs, reference=answer, checker="contains",
                max_new_tokens=8), answer


def make_log(rng: random.Random, fill: float = 1.0) -> Tuple[dict, str]:
    n = rng.randint(10, 14) if fill >= 1.0 else rng.randint(3, 3 + int(11 * fill))
    bad = rng.choice(HOSTS)  # named on one line only: one right answer
    others = [h for h in HOSTS if h != bad]
    hosts = [rng.choice(others) for _ in range(n)]
    e = rng.randrange(n)
    hosts[e] = bad
    lines = " ; ".join("%s at %s" % ("err" if i == e else "info", h) for i, h in enumerate(hosts))
    prompt = "log : %s . q : err ?" % lines
    answer = "err at %s" % hosts[e]
    return dict(bucket="log", prompt=prompt, reference="^err at %s$" % hosts[e],
                checker="regex", max_new_tokens=8), answer


def make_math(rng: random.Random, fill: float = 1.0) -> Tuple[dict, str]:
    n = rng.randint(4, 6)
    xs = [rng.randrange(10)] + [rng.randint(1, 2) for _ in range(n - 1)]
    terms = " ; ".join("%s = %d" % (INDEX[i], x) for i, x in enumerate(xs))
    prompt = "calc : %s . %s . q : sum ?" % (terms, " ".join(_filler(rng, 10, 20, fill)))
    s, trace = 0, []
    for i, x in enumerate(xs):
        s = (s + x) % 10
        trace.append("%s %d" % (INDEX[i], s))
    answer = "%s ans %d" % (" ".join(trace), s)
    return dict(bucket="math", prompt=prompt, reference=str(s), checker="number",
                max_new_tokens=24), answer


MAKERS = {"rag": make_rag, "chat": make_chat, "log": make_log, "math": make_math}


def example(rng: random.Random, bucket: str, fill: float = 1.0) -> Tuple[dict, str]:
    """(task, the model's whole target output) for one bucket; fill < 1:
    shorter prompts (less filler, fewer lines and turns), the training's
    curriculum."""
    return MAKERS[bucket](rng, fill)


def suite(seed: int = SUITE_SEED, per_bucket: int = SUITE_PER_BUCKET) -> List[dict]:
    """The shipped task suite (data/tiny-tasks.jsonl): per_bucket tasks of
    each bucket, ids "<bucket>-NNN", from seed."""
    rng = random.Random(seed)
    out = []
    for b in BUCKETS:
        for i in range(per_bucket):
            t, _ = example(rng, b)
            out.append(dict(id="%s-%03d" % (b, i), **t))
    return out


def suite_text(tasks: Sequence[dict]) -> str:
    """The JSONL text of tasks, one per line, keys in the task-file order."""
    order = ("id", "bucket", "prompt", "messages", "reference", "checker", "max_new_tokens")
    return "".join(json.dumps({k: t[k] for k in order if k in t}) + "\n" for t in tasks)


def load_model(path: str = MODEL_DIR, dtype=None):
    """(model, WordTokenizer) of a tiny model directory (default: the shipped
    one), eval mode, float32 on the CPU."""
    import torch
    from transformers import LlamaForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    model = LlamaForCausalLM.from_pretrained(path, dtype=dtype or torch.float32,
                                             local_files_only=True)
    return model.eval(), WordTokenizer.load(path)


if __name__ == "__main__":  # rewrite the shipped suite
    with open(SUITE, "w") as f:
        f.write(suite_text(suite()))
    print("wrote", SUITE)
