#!/usr/bin/env python3
"""Writes a small OPT model in Hugging Face's layout, with random weights, and
PyTorch's numbers for it (the same set as tools/make_llama_reference.py
writes, read by tests/decoder_reference_test.cc). The forward pass is written
here from the published definition (Hugging Face's modeling_opt, OPT-125m's
kind of config): pre-LayerNorm blocks, learned positions read at position + 2
(OPTLearnedPositionalEmbedding's offset), q scaled by head_dim^-0.5, ReLU MLP,
biases everywhere, a final LayerNorm, the head tied to the embedding.

The key projection's bias adds the same q.b to every score of a query, which
softmax ignores: its exact gradient is zero, and PyTorch's rounding noise
there would become full-size Adam steps. Its gradient is written as zero and
zeroed before each AdamW step (weight decay still moves it), as autoshard's
exact zero does.

  tests/data/hf_opt/   model_type opt: hidden 24 over 6 heads (head_dim 4),
                       ffn_dim 37, vocabulary 113, 32 positions (34 rows),
                       F16 weights in one model.safetensors
  tests/data/opt_reference.safetensors: as the Llama family's

Run with Debian's python3-torch:  /usr/bin/python3 tools/make_opt_reference.py
"""
import torch
import torch.nn.functional as F

from make_llama_reference import reference

OPT = {"model_type": "opt", "architectures": ["OPTForCausalLM"], "vocab_size": 113,
       "hidden_size": 24, "word_embed_proj_dim": 24, "ffn_dim": 37, "num_hidden_layers": 2,
       "num_attention_heads": 6, "max_position_embeddings": 32, "do_layer_norm_before": True,
       "activation_function": "relu", "enable_bias": True, "dropout": 0.0,
       "attention_dropout": 0.0, "layer_norm_elementwise_affine": True,
       "tie_word_embeddings": True, "pad_token_id": 1, "bos_token_id": 2, "eos_token_id": 2,
       "torch_dtype": "float16"}
OFFSET = 2


def make_weights(c, gen):
    C, Fd, V = c["hidden_size"], c["ffn_dim"], c["vocab_size"]
    P = c["max_position_embeddings"] + OFFSET
    r = lambda *s, scale: scale * torch.randn(*s, generator=gen)
    d = "model.decoder."
    w = {d + "embed_tokens.weight": r(V, C, scale=0.5), d + "embed_positions.weight": r(P, C, scale=0.5),
         d + "final_layer_norm.weight": 1 + r(C, scale=0.1),
         d + "final_layer_norm.bias": r(C, scale=0.1)}
    for i in range(c["num_hidden_layers"]):
        p = f"{d}layers.{i}."
        for norm in ("self_attn_layer_norm", "final_layer_norm"):
            w[p + norm + ".weight"] = 1 + r(C, scale=0.1)
            w[p + norm + ".bias"] = r(C, scale=0.1)
        for n in ("q_proj", "k_proj", "v_proj", "out_proj"):
            w[p + f"self_attn.{n}.weight"] = r(C, C, scale=0.3)
            w[p + f"self_attn.{n}.bias"] = r(C, scale=0.1)
        w[p + "fc1.weight"] = r(Fd, C, scale=0.3)
        w[p + "fc1.bias"] = r(Fd, scale=0.1)
        w[p + "fc2.weight"] = r(C, Fd, scale=0.2)
        w[p + "fc2.bias"] = r(C, scale=0.1)
    return w


def forward(c, w, x):
    B, T = x.shape
    C, H = c["hidden_size"], c["num_attention_heads"]
    D = C // H
    d = "model.decoder."
    linear = lambda a, name: a @ w[name + ".weight"].T + w[name + ".bias"]
    norm = lambda a, name: F.layer_norm(a, (C,), w[name + ".weight"], w[name + ".bias"], 1e-5)
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    positions = torch.arange(T) + OFFSET
    h = w[d + "embed_tokens.weight"][x] + w[d + "embed_positions.weight"][positions]
    for i in range(c["num_hidden_layers"]):
        p = f"{d}layers.{i}."
        a = norm(h, p + "self_attn_layer_norm")
        heads = lambda y: y.view(B, T, H, D).transpose(1, 2)  # [B, H, T, D]
        q = heads(linear(a, p + "self_attn.q_proj") * D ** -0.5)
        k, v = heads(linear(a, p + "self_attn.k_proj")), heads(linear(a, p + "self_attn.v_proj"))
        att = (q @ k.transpose(-2, -1)).masked_fill(~causal, float("-inf")).softmax(-1)
        o = (att @ v).transpose(1, 2).reshape(B, T, C)
        h = h + linear(o, p + "self_attn.out_proj")
        m = norm(h, p + "final_layer_norm")
        h = h + linear(F.relu(linear(m, p + "fc1")), p + "fc2")
    h = norm(h, d + "final_layer_norm")
    return h @ w[d + "embed_tokens.weight"].T


def main():
    torch.set_num_threads(1)
    reference(OPT, "opt", torch.float16, shards=1, seed=5, make=make_weights, forward=forward,
              zero_grad=lambda name: name.endswith("self_attn.k_proj.bias"))


if __name__ == "__main__":
    main()
