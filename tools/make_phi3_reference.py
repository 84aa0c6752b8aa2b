#!/usr/bin/env python3
"""Writes a small Phi-3 model in Hugging Face's layout, with random weights,
and PyTorch's numbers for it, for tests/phi3_reference_test.cc. Nothing is
downloaded, and transformers is not needed: Phi-3's forward pass is Llama's
(tools/make_llama_reference.py: RMSNorm, rotate-half rotary embeddings,
grouped-query attention, SwiGLU) on the tensors Hugging Face's Phi-3 fuses
(transformers' models/phi3/modeling_phi3.py): Phi3Attention slices
`qkv_proj`'s output into query (heads x head_dim), key and value (kv heads x
head_dim each), and Phi3MLP chunks `gate_up_proj`'s output in two, gate
first.

  tests/data/hf_phi3/      model_type phi3: 4 heads over 2 kv heads, head_dim
                           6, MLP width 19, vocabulary 83, untied head, F32
  tests/data/phi3_reference.safetensors: as make_llama_reference.py's
                           (logits, loss, grad.<tensor> of the fused tensors,
                           AdamW steps, greedy generation)

Run with Debian's python3-torch:  /usr/bin/python3 tools/make_phi3_reference.py
"""
import torch

import make_llama_reference as llama

PHI3 = {"model_type": "phi3", "architectures": ["Phi3ForCausalLM"], "vocab_size": 83,
        "hidden_size": 24, "intermediate_size": 19, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
        "original_max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "rope_scaling": None, "partial_rotary_factor": 1.0, "sliding_window": None,
        "hidden_act": "silu", "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attention_dropout": 0.0,
        "tie_word_embeddings": False, "torch_dtype": "float32", "bos_token_id": 1,
        "eos_token_id": 32000}


def fused_weights(c, gen):
    """Llama's random tensors, with each layer's q, k, v and gate, up fused
    as Phi-3 stores them."""
    w = llama.make_weights(dict(c, model_type="llama"), gen)
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "self_attn.qkv_proj.weight"] = torch.cat(
            [w.pop(p + f"self_attn.{n}_proj.weight") for n in "qkv"])
        w[p + "mlp.gate_up_proj.weight"] = torch.cat(
            [w.pop(p + "mlp.gate_proj.weight"), w.pop(p + "mlp.up_proj.weight")])
    return w


def unfused(c, w):
    """The same weights under Llama's names: the fused tensors sliced."""
    H, K, I = c["num_attention_heads"], c["num_key_value_heads"], c["intermediate_size"]
    D = c["hidden_size"] // H
    out = dict(w)
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        qkv = out.pop(p + "self_attn.qkv_proj.weight")
        q, k, v = torch.split(qkv, [H * D, K * D, K * D])
        out.update({p + "self_attn.q_proj.weight": q, p + "self_attn.k_proj.weight": k,
                    p + "self_attn.v_proj.weight": v})
        gate, up = out.pop(p + "mlp.gate_up_proj.weight").chunk(2)
        assert gate.shape[0] == I
        out.update({p + "mlp.gate_proj.weight": gate, p + "mlp.up_proj.weight": up})
    return out


def forward(c, w, x):
    return llama.forward(dict(c, model_type="llama"), unfused(c, w), x)


def main():
    torch.set_num_threads(1)
    llama.reference(PHI3, "phi3", torch.float32, shards=1, seed=31, make=fused_weights,
                    forward=forward)


if __name__ == "__main__":
    main()
