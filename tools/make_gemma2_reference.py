#!/usr/bin/env python3
"""Writes a small Gemma 2 model in Hugging Face's layout, with random weights,
and PyTorch's numbers for it, for tests/gemma2_test.cc. Nothing is
downloaded, and transformers is not needed: the forward pass is written here
from the published definition (Hugging Face's modeling_gemma2, which KerasHub's
GemmaBackbone with use_post_ffw_norm, use_post_attention_norm,
attention/final logit soft-capping and use_sliding_window_attention also
computes):

  - RMSNorm scaled by 1 + weight; embeddings times sqrt(hidden_size);
  - per layer: x + post_attention_layernorm(attn(input_layernorm(x))), then
    x + post_feedforward_layernorm(mlp(pre_feedforward_layernorm(x)));
  - scores q . k * query_pre_attn_scalar^-1/2, then
    attn_logit_softcapping * tanh(scores / attn_logit_softcapping), then the
    causal mask; layers 0, 2, ... see only their last sliding_window keys
    (query i sees keys j with i - sliding_window < j <= i);
  - a tanh-GELU GeGLU MLP; the head tied to the embeddings; logits
    final_logit_softcapping * tanh(logits / final_logit_softcapping).

  tests/data/hf_gemma2/    model_type gemma2: 3 layers (sliding, full,
                           sliding), 4 heads over 2 kv heads, head_dim 8,
                           query_pre_attn_scalar 12 (not head_dim), a window
                           of 4 keys over sequences of 11 (17 when
                           generating), caps small enough to bite; F32.
                           With seed 44 the greedy ids change when the window
                           or the attention cap is left out, and no step's
                           top two logits lie closer than 0.02.
  tests/data/gemma2_reference.safetensors: as make_llama_reference.py's
                           (x, y, logits, loss, grad.*, adamw_losses,
                           after.*, generate.prompt, generate.greedy)

Run with Debian's python3-torch:  /usr/bin/python3 tools/make_gemma2_reference.py
"""
import math

import torch
import torch.nn.functional as F

from make_llama_reference import inverse_frequencies, reference, rotate_half

GEMMA2 = {"model_type": "gemma2", "architectures": ["Gemma2ForCausalLM"], "vocab_size": 83,
          "hidden_size": 24, "intermediate_size": 30, "num_hidden_layers": 3,
          "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
          "query_pre_attn_scalar": 12, "sliding_window": 4, "attn_logit_softcapping": 2.5,
          "final_logit_softcapping": 3.0, "hidden_activation": "gelu_pytorch_tanh",
          "max_position_embeddings": 48, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
          "attention_bias": False, "attention_dropout": 0.0, "tie_word_embeddings": True,
          "cache_implementation": "hybrid", "torch_dtype": "float32"}

NORMS = ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
         "post_feedforward_layernorm")


def make_weights(c, gen):
    C, I, V, D = c["hidden_size"], c["intermediate_size"], c["vocab_size"], c["head_dim"]
    Q, KV = c["num_attention_heads"] * D, c["num_key_value_heads"] * D
    r = lambda *s, scale: scale * torch.randn(*s, generator=gen)
    # RMSNorm scales are stored as offsets from 1.
    # Embeddings small enough that the blocks, not the token itself, decide
    # the next token (greedy generation then varies).
    w = {"model.embed_tokens.weight": r(V, C, scale=0.2), "model.norm.weight": r(C, scale=0.1)}
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        for norm in NORMS:
            w[p + norm + ".weight"] = r(C, scale=0.1)
        for n, out in (("q", Q), ("k", KV), ("v", KV)):
            w[p + f"self_attn.{n}_proj.weight"] = r(out, C, scale=0.3)
        w[p + "self_attn.o_proj.weight"] = r(C, Q, scale=0.2)
        w[p + "mlp.gate_proj.weight"] = r(I, C, scale=0.3)
        w[p + "mlp.up_proj.weight"] = r(I, C, scale=0.3)
        w[p + "mlp.down_proj.weight"] = r(C, I, scale=0.2)
    return w


def rms_norm(c, x, weight):
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + c["rms_norm_eps"])
    return x * (1.0 + weight)


def soft_cap(x, cap):
    return cap * torch.tanh(x / cap) if cap else x


def forward(c, w, x):
    B, T = x.shape
    H, K, D = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    freqs = torch.arange(T).float()[:, None] * inverse_frequencies(c)[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()  # [T, D]
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    causal = j <= i
    sliding = causal & (j > i - c["sliding_window"])
    h = w["model.embed_tokens.weight"][x]
    h = h * torch.tensor(c["hidden_size"] ** 0.5, dtype=h.dtype)
    for layer in range(c["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        a = rms_norm(c, h, w[p + "input_layernorm.weight"])

        def proj(n, heads):
            y = a @ w[p + f"self_attn.{n}_proj.weight"].T
            return y.view(B, T, heads, D).transpose(1, 2)  # [B, heads, T, D]

        q, k, v = proj("q", H), proj("k", K), proj("v", K)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(H // K, dim=1)  # query head j reads kv head j // (H / K)
        v = v.repeat_interleave(H // K, dim=1)
        att = (q @ k.transpose(-2, -1)) * c["query_pre_attn_scalar"] ** -0.5
        att = soft_cap(att, c["attn_logit_softcapping"])
        mask = sliding if layer % 2 == 0 else causal  # the even layers slide
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        o = (att @ v).transpose(1, 2).reshape(B, T, H * D) @ w[p + "self_attn.o_proj.weight"].T
        h = h + rms_norm(c, o, w[p + "post_attention_layernorm.weight"])
        m = rms_norm(c, h, w[p + "pre_feedforward_layernorm.weight"])
        g = F.gelu(m @ w[p + "mlp.gate_proj.weight"].T, approximate="tanh")
        m = (g * (m @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
        h = h + rms_norm(c, m, w[p + "post_feedforward_layernorm.weight"])
    h = rms_norm(c, h, w["model.norm.weight"])
    return soft_cap(h @ w["model.embed_tokens.weight"].T, c["final_logit_softcapping"])


def main():
    torch.set_num_threads(1)
    reference(GEMMA2, "gemma2", torch.float32, shards=1, seed=44, make=make_weights,
              forward=forward)


if __name__ == "__main__":
    main()
