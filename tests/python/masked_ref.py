"""The dense reference of the kvevict.hf and vLLM plugin tests: a model's
forward in fp32 with each layer's KV head attending only where a mask says
(transformers' own modules, the attention written out)."""
import numpy as np
import torch


def masked_logprobs(model, ids, masks, keys=None):
    """log_softmax [T, vocab] of a dense forward of a Qwen3 / Llama model over
    ids, layer l's KV head h attending where masks[l][h] [T, T] is True
    (a bool tensor [layers, kv_heads, T, T] or nested lists / arrays);
    keys: a list that gets each layer's post-RoPE keys [kv_heads, T, D]."""
    from transformers.models.qwen3.modeling_qwen3 import apply_rotary_pos_emb

    m, T = model.model, len(ids)
    x = m.embed_tokens(torch.tensor(ids)[None])
    cos, sin = m.rotary_emb(x, torch.arange(T)[None])
    for l, layer in enumerate(m.layers):
        a, h = layer.self_attn, layer.input_layernorm(x)
        d = a.head_dim
        q, k = a.q_proj(h).view(1, T, -1, d), a.k_proj(h).view(1, T, -1, d)
        if hasattr(a, "q_norm"):  # Qwen3's per-head norms
            q, k = a.q_norm(q), a.k_norm(k)
        q, k = apply_rotary_pos_emb(q.transpose(1, 2), k.transpose(1, 2), cos, sin)
        if keys is not None:
            keys.append(k[0])
        v = a.v_proj(h).view(1, T, -1, d).transpose(1, 2)
        g = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
        s = (q @ k.transpose(-1, -2)) * a.scaling
        mask = masks[l] if isinstance(masks[l], torch.Tensor) else \
            torch.from_numpy(np.array(masks[l]))
        s = s.masked_fill(~mask.repeat_interleave(g, 0)[None], float("-inf"))
        x = x + a.o_proj((s.softmax(-1) @ v).transpose(1, 2).reshape(1, T, -1))
        x = x + layer.mlp(layer.post_attention_layernorm(x))
    return model.lm_head(m.norm(x))[0].log_softmax(-1)
