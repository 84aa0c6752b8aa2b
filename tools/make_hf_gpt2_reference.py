#!/usr/bin/env python3
"""Writes a small GPT-2 in Hugging Face's layout, and its logits, for the
import test. Nothing is downloaded: weights come from a seeded random init.

  tests/data/hf_gpt2/config.json         Hugging Face GPT-2 config
  tests/data/hf_gpt2/model.safetensors   "transformer."-prefixed names, Conv1D
                                         (in, out) weights, fused c_attn, a tied
                                         lm_head.weight, the attn.bias buffers
  tests/data/hf_gpt2_logits.safetensors  x [B, T] and the logits [B, T, V]

The forward pass below follows Hugging Face's GPT2LMHeadModel on those
tensors (x @ W + b for Conv1D, heads split from c_attn's columns). Run with
Debian's python3-torch:  /usr/bin/python3 tools/make_hf_gpt2_reference.py
"""
import json
import math
import os

import torch
import torch.nn.functional as F

from safetensors_io import save_safetensors

L, H, C, V, P = 2, 3, 24, 67, 16
B, T = 2, 10
EPS = 1e-5


def main():
    torch.manual_seed(77)
    p = "transformer."
    w = {p + "wte.weight": torch.randn(V, C) * 0.3, p + "wpe.weight": torch.randn(P, C) * 0.1}
    for i in range(L):
        h = f"{p}h.{i}."
        for ln in ("ln_1", "ln_2"):
            w[h + ln + ".weight"] = 1 + 0.1 * torch.randn(C)
            w[h + ln + ".bias"] = 0.05 * torch.randn(C)
        w[h + "attn.c_attn.weight"] = 0.2 * torch.randn(C, 3 * C)
        w[h + "attn.c_attn.bias"] = 0.1 * torch.randn(3 * C)  # key part included: softmax ignores it
        w[h + "attn.c_proj.weight"] = 0.1 * torch.randn(C, C)
        w[h + "attn.c_proj.bias"] = 0.05 * torch.randn(C)
        w[h + "mlp.c_fc.weight"] = 0.2 * torch.randn(C, 4 * C)
        w[h + "mlp.c_fc.bias"] = 0.05 * torch.randn(4 * C)
        w[h + "mlp.c_proj.weight"] = 0.1 * torch.randn(4 * C, C)
        w[h + "mlp.c_proj.bias"] = 0.05 * torch.randn(C)
        w[h + "attn.bias"] = torch.tril(torch.ones(P, P)).view(1, 1, P, P)  # the mask buffer old files carry
    w[p + "ln_f.weight"] = 1 + 0.1 * torch.randn(C)
    w[p + "ln_f.bias"] = 0.05 * torch.randn(C)
    w["lm_head.weight"] = w[p + "wte.weight"].clone()
    w = {k: v.float() for k, v in w.items()}

    x = torch.randint(0, V, (B, T))
    hs = w[p + "wte.weight"][x] + w[p + "wpe.weight"][:T]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for i in range(L):
        h = f"{p}h.{i}."
        a = F.layer_norm(hs, (C,), w[h + "ln_1.weight"], w[h + "ln_1.bias"], EPS)
        qkv = a @ w[h + "attn.c_attn.weight"] + w[h + "attn.c_attn.bias"]
        q, k, v = (z.view(B, T, H, C // H).transpose(1, 2) for z in qkv.split(C, dim=2))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // H)
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        hs = hs + y @ w[h + "attn.c_proj.weight"] + w[h + "attn.c_proj.bias"]
        m = F.layer_norm(hs, (C,), w[h + "ln_2.weight"], w[h + "ln_2.bias"], EPS)
        m = F.gelu(m @ w[h + "mlp.c_fc.weight"] + w[h + "mlp.c_fc.bias"], approximate="tanh")
        hs = hs + m @ w[h + "mlp.c_proj.weight"] + w[h + "mlp.c_proj.bias"]
    hs = F.layer_norm(hs, (C,), w[p + "ln_f.weight"], w[p + "ln_f.bias"], EPS)
    logits = hs @ w["lm_head.weight"].T

    os.makedirs("tests/data/hf_gpt2", exist_ok=True)
    save_safetensors("tests/data/hf_gpt2/model.safetensors", w, {"format": "pt"})
    with open("tests/data/hf_gpt2/config.json", "w") as f:
        json.dump({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_layer": L, "n_head": H,
                   "n_embd": C, "vocab_size": V, "n_positions": P, "n_ctx": P, "layer_norm_epsilon": EPS,
                   "activation_function": "gelu_new", "resid_pdrop": 0.0, "embd_pdrop": 0.0,
                   "attn_pdrop": 0.0}, f, indent=2)
    save_safetensors("tests/data/hf_gpt2_logits.safetensors", {"x": x.int(), "logits": logits})
    print("wrote tests/data/hf_gpt2 and tests/data/hf_gpt2_logits.safetensors")


if __name__ == "__main__":
    main()
