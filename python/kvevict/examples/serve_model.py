"""The model serve_bench decodes: a Qwen3-style transformer (RMSNorm, RoPE,
GQA attention with per-head q/k RMSNorm, SwiGLU), with seeded random
weights at a preset's shape or a Hugging Face Qwen3 checkpoint's weights.

The attention is not here: forward() calls attend(layer, q, k, v) with the
step's post-RoPE queries and keys, and the engine (serve_bench.Engine)
writes the cache and reads it back. Weights are [out, in] as in
torch.nn.Linear, so a checkpoint's tensors are used as they are.
"""
import json
import math
import os
from dataclasses import dataclass, asdict

import torch
import torch.nn.functional as F


@dataclass
class Config:
    """A Qwen3-architecture shape (config.json's fields, renamed)."""

    name: str
    layers: int
    hidden: int
    q_heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    rope_theta: float = 1000000.0
    eps: float = 1e-6
    tied: bool = False

    def check(self):
        for k in ("layers", "hidden", "q_heads", "kv_heads", "head_dim", "ffn", "vocab"):
            v = getattr(self, k)
            if not isinstance(v, int) or v < 1:
                raise ValueError("model %s: %s = %r, expected a positive integer" % (self.name, k, v))
        if self.q_heads % self.kv_heads:
            raise ValueError("model %s: q_heads = %d is not a multiple of kv_heads = %d"
                             % (self.name, self.q_heads, self.kv_heads))
        if self.head_dim % 2:
            raise ValueError("model %s: head_dim = %d, RoPE needs an even one"
                             % (self.name, self.head_dim))
        return self

    @property
    def group(self):
        return self.q_heads // self.kv_heads

    def as_dict(self):
        return asdict(self)


# Qwen3-4B and Qwen3-32B as their config.json describe them; tiny and small
# are for the CPU (CI and a quick run of the arms).
PRESETS = {
    "tiny": Config("tiny", 2, 64, 4, 2, 32, 128, 256, tied=True),
    "small": Config("small", 4, 256, 8, 4, 64, 512, 1024),
    "qwen3-4b": Config("qwen3-4b", 36, 2560, 32, 8, 128, 9728, 151936, tied=True),
    "qwen3-32b": Config("qwen3-32b", 64, 5120, 64, 8, 128, 25600, 151936),
}


def rms_norm(x, w, eps):
    """Qwen3's RMSNorm: in float32, the weight applied in the input's type."""
    dt = x.dtype
    x = x.float()
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return w * x.to(dt)


def rotate_half(x):
    a, b = x[..., :x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-b, a), dim=-1)


class Model:
    """Weights and the forward pass; see the module's docstring."""

    def __init__(self, cfg, device="cpu", dtype=torch.float32, seed=0, weights=None):
        self.cfg = cfg.check()
        self.device, self.dtype = torch.device(device), dtype
        if weights is None:
            weights = self._random(seed)
        self.w = weights
        d = cfg.head_dim
        self.inv_freq = 1.0 / (cfg.rope_theta ** (
            torch.arange(0, d, 2, dtype=torch.int64).float().to(self.device) / d))

    def _random(self, seed):
        """Seeded weights, generated on the device (a 4B model in seconds on
        a GPU): N(0, 1/in) for projections, 1 for the norms."""
        c, dev, dt = self.cfg, self.device, self.dtype
        g = torch.Generator(device=dev)
        g.manual_seed(seed)

        def lin(out, inp):
            return (torch.randn(out, inp, generator=g, device=dev, dtype=torch.float32)
                    / math.sqrt(inp)).to(dt)

        def ones(n):
            return torch.ones(n, device=dev, dtype=dt)

        w = {"embed": torch.randn(c.vocab, c.hidden, generator=g, device=dev).to(dt),
             "norm": ones(c.hidden), "layers": []}
        qd, kd = c.q_heads * c.head_dim, c.kv_heads * c.head_dim
        for _ in range(c.layers):
            w["layers"].append(dict(
                ln1=ones(c.hidden), q=lin(qd, c.hidden), k=lin(kd, c.hidden),
                v=lin(kd, c.hidden), o=lin(c.hidden, qd), q_norm=ones(c.head_dim),
                k_norm=ones(c.head_dim), ln2=ones(c.hidden), gate=lin(c.ffn, c.hidden),
                up=lin(c.ffn, c.hidden), down=lin(c.hidden, c.ffn)))
        w["lm_head"] = w["embed"] if c.tied else lin(c.vocab, c.hidden)
        return w

    @classmethod
    def from_hf(cls, path, device="cpu", dtype=torch.float32):
        """A Hugging Face Qwen3 checkpoint's weights (loaded by transformers)
        and shape; raises ImportError without transformers."""
        import transformers  # noqa: F401  (ImportError names the package)
        from transformers import AutoModelForCausalLM

        with open(os.path.join(path, "config.json")) as f:
            hc = json.load(f)
        if hc.get("model_type") not in ("qwen3", None):
            raise ValueError("%s: model_type %r, expected a Qwen3 checkpoint ('qwen3')"
                             % (path, hc.get("model_type")))
        heads = hc["num_attention_heads"]
        cfg = Config(os.path.basename(os.path.normpath(path)), hc["num_hidden_layers"],
                     hc["hidden_size"], heads, hc.get("num_key_value_heads", heads),
                     hc.get("head_dim", hc["hidden_size"] // heads), hc["intermediate_size"],
                     hc["vocab_size"], float(hc.get("rope_theta", 1000000.0)),
                     float(hc.get("rms_norm_eps", 1e-6)), bool(hc.get("tie_word_embeddings")))
        hf = AutoModelForCausalLM.from_pretrained(path, torch_dtype=dtype)
        sd = {k: v.to(device=device, dtype=dtype) for k, v in hf.state_dict().items()}
        del hf
        p = "model.layers.%d."
        w = {"embed": sd["model.embed_tokens.weight"], "norm": sd["model.norm.weight"],
             "layers": []}
        names = dict(ln1="input_layernorm", q="self_attn.q_proj", k="self_attn.k_proj",
                     v="self_attn.v_proj", o="self_attn.o_proj", q_norm="self_attn.q_norm",
                     k_norm="self_attn.k_norm", ln2="post_attention_layernorm",
                     gate="mlp.gate_proj", up="mlp.up_proj", down="mlp.down_proj")
        for l in range(cfg.layers):
            w["layers"].append({k: sd[(p % l) + n + ".weight"] for k, n in names.items()})
        w["lm_head"] = sd.get("lm_head.weight", w["embed"]) if not cfg.tied else w["embed"]
        return cls(cfg, device, dtype, weights=w)

    def rope(self, x, pos):
        """HF's rotate-half RoPE of x [T, heads, D] at positions pos [T]."""
        freqs = pos.to(self.device).float()[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().to(x.dtype)[:, None, :], emb.sin().to(x.dtype)[:, None, :]
        return x * cos + rotate_half(x) * sin

    def forward(self, tokens, pos, attend, last=None, queries=None):
        """Logits of tokens [T] at positions pos [T]; attend(layer, q [T, HQ,
        D], k [T, HKV, D], v [T, HKV, D]) -> [T, HQ, D] (q, k after RoPE).
        last: token indices whose logits to return (default all); queries:
        a list collecting each layer's pre-RoPE q (TriAttention's calibration)."""
        c, w = self.cfg, self.w
        h = w["embed"][tokens.to(self.device)]
        pos = pos.to(self.device)
        t = h.shape[0]
        for l, p in enumerate(w["layers"]):
            x = rms_norm(h, p["ln1"], c.eps)
            q = rms_norm(F.linear(x, p["q"]).view(t, c.q_heads, c.head_dim), p["q_norm"], c.eps)
            k = rms_norm(F.linear(x, p["k"]).view(t, c.kv_heads, c.head_dim), p["k_norm"], c.eps)
            v = F.linear(x, p["v"]).view(t, c.kv_heads, c.head_dim)
            if queries is not None:
                queries.append(q)
            o = attend(l, self.rope(q, pos), self.rope(k, pos), v)
            h = h + F.linear(o.reshape(t, -1), p["o"])
            x = rms_norm(h, p["ln2"], c.eps)
            h = h + F.linear(F.silu(F.linear(x, p["gate"])) * F.linear(x, p["up"]), p["down"])
        if last is not None:
            h = h[last]
        return F.linear(rms_norm(h, w["norm"], c.eps), w["lm_head"]).float()


def dense_attention(q, k, v, mask):
    """GQA attention of q [T, HQ, D] over k, v [S, HKV, D], mask [T, S] bool
    (or [HKV, T, S]), softmax in float32."""
    t, hq, d = q.shape
    hkv = k.shape[1]
    qg = q.float().view(t, hkv, hq // hkv, d)
    s = torch.einsum("thgd,shd->hgts", qg, k.float()) / math.sqrt(d)
    m = mask[:, None] if mask.dim() == 3 else mask[None, None]
    s = s.masked_fill(~m, float("-inf"))
    o = torch.einsum("hgts,shd->thgd", torch.softmax(s, -1), v.float())
    return o.reshape(t, hq, d).to(q.dtype)


def dense_forward(model, tokens, keys=None, queries=None):
    """Plain causal attention over every token (no cache): logits [T,
    vocab]; keys, a list, collects each layer's post-RoPE (k, v); queries
    each layer's pre-RoPE q."""
    pos = torch.arange(len(tokens))
    causal = (pos[None, :] <= pos[:, None]).to(model.device)

    def attend(l, q, k, v):
        if keys is not None:
            keys.append((k, v))
        return dense_attention(q, k, v, causal)

    with torch.no_grad():
        return model.forward(torch.as_tensor(tokens, dtype=torch.long), pos, attend, queries=queries)
