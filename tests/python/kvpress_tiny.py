"""A tiny Llama checkpoint with a word-level tokenizer, built offline from a
seeded config (no download), for kvpress's pipeline in the tests: save(dir)
writes it as from_pretrained reads it; hub_cache(home, ids) lays it out as
the Hugging Face hub cache holds a downloaded repository, so that
``from_pretrained("org/name")`` with HF_HOME=home and HF_HUB_OFFLINE=1 loads
it in place of the hub's model, the caller's code unchanged."""

import os

# the words of kvpress's test prompts first, then filler words: a whitespace
# and punctuation split gives about one token a word, as Llama 2's tokenizer does
WORDS = ("The quick brown fox jumps over the lazy dog . What animal dog ? This is a test "
         "article It was written on 2022 - 01 , When this Repeat last sentence Answer "
         "question context").split()
VOCAB = 4096


def tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for w in WORDS:
        vocab.setdefault(w, len(vocab))
    for i in range(len(vocab), VOCAB):
        vocab["w%d" % i] = i
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>", model_max_length=4096)


def model():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(1234)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=4096, tie_word_embeddings=False,
                      bos_token_id=1, eos_token_id=2)
    return LlamaForCausalLM(cfg).eval()


def save(path):
    """The checkpoint (weights, config, tokenizer) in directory path."""
    model().save_pretrained(path)
    tokenizer().save_pretrained(path)


def hub_cache(home, repo_ids, revision="0" * 40):
    """HF_HOME=home holds the tiny checkpoint as each of repo_ids."""
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        save(tmp)
        for rid in repo_ids:
            repo = os.path.join(home, "hub", "models--" + rid.replace("/", "--"))
            snap = os.path.join(repo, "snapshots", revision)
            os.makedirs(os.path.join(repo, "refs"), exist_ok=True)
            shutil.copytree(tmp, snap, dirs_exist_ok=True)
            with open(os.path.join(repo, "refs", "main"), "w") as f:
                f.write(revision)
