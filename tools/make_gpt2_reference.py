#!/usr/bin/env python3
"""Writes tests/data/gpt2_reference.safetensors: a small GPT-2 computed by
PyTorch, written independently of autoshard's code, for the reference test.

The model uses autoshard's weight layout (see include/autoshard/models/gpt2.h)
and the "test" preset (2 layers, 3 heads, width 24, vocabulary 67). Stored:
  w.<path>         the weights
  x, y             a token batch [B, T] and its targets
  logits, loss     the forward pass
  grad.<path>      d loss / d weight
  adamw_losses     the losses of 10 AdamW steps (clip 1.0) on the batch
  after.<path>     the weights after those 10 steps

Run with Debian's python3-torch:  /usr/bin/python3 tools/make_gpt2_reference.py
"""
import math
import sys

import torch
import torch.nn.functional as F

from safetensors_io import save_safetensors

L, H, C, V, P = 2, 3, 24, 67, 16
D = C // H
B, T = 2, 12
EPS = 1e-5
STEPS, LR, BETAS, WD, CLIP = 10, 3e-3, (0.9, 0.95), 0.1, 1.0


def make_weights(gen):
    def normal(*shape, std=0.1, mean=0.0):
        return (torch.randn(*shape, generator=gen) * std + mean).float()

    w = {"wte.embeddings": normal(V, C, std=0.3), "wpe.embeddings": normal(P, C, std=0.1)}
    for b in range(L):
        p = f"h.{b}."
        for ln in ("ln_1", "ln_2"):
            w[p + ln + ".gamma"] = normal(C, std=0.1, mean=1.0)
            w[p + ln + ".beta"] = normal(C, std=0.05)
        for name in ("query", "key", "value"):
            w[p + f"attn.{name}.kernel"] = normal(C, H, D, std=0.2)
            w[p + f"attn.{name}.bias"] = normal(H, D, std=0.05)
        w[p + "attn.attention_output.kernel"] = normal(H, D, C, std=0.1)
        w[p + "attn.attention_output.bias"] = normal(C, std=0.05)
        w[p + "mlp.c_fc.kernel"] = normal(C, 4 * C, std=0.2)
        w[p + "mlp.c_fc.bias"] = normal(4 * C, std=0.05)
        w[p + "mlp.c_proj.kernel"] = normal(4 * C, C, std=0.1)
        w[p + "mlp.c_proj.bias"] = normal(C, std=0.05)
    w["ln_f.gamma"] = normal(C, std=0.1, mean=1.0)
    w["ln_f.beta"] = normal(C, std=0.05)
    return w


def forward(w, x):
    h = w["wte.embeddings"][x] + w["wpe.embeddings"][: x.shape[1]]
    causal = torch.tril(torch.ones(x.shape[1], x.shape[1], dtype=torch.bool))
    for b in range(L):
        p = f"h.{b}."
        a = F.layer_norm(h, (C,), w[p + "ln_1.gamma"], w[p + "ln_1.beta"], EPS)
        q, k, v = (torch.einsum("btc,chd->bthd", a, w[p + f"attn.{n}.kernel"]) + w[p + f"attn.{n}.bias"]
                   for n in ("query", "key", "value"))
        att = torch.einsum("bqhd,bkhd->bhqk", q, k) * (1.0 / math.sqrt(D))
        att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        ctx = torch.einsum("bhqk,bkhd->bqhd", att, v)
        h = h + torch.einsum("bqhd,hdc->bqc", ctx, w[p + "attn.attention_output.kernel"]) \
            + w[p + "attn.attention_output.bias"]
        m = F.layer_norm(h, (C,), w[p + "ln_2.gamma"], w[p + "ln_2.beta"], EPS)
        m = F.gelu(m @ w[p + "mlp.c_fc.kernel"] + w[p + "mlp.c_fc.bias"], approximate="tanh")
        h = h + m @ w[p + "mlp.c_proj.kernel"] + w[p + "mlp.c_proj.bias"]
    h = F.layer_norm(h, (C,), w["ln_f.gamma"], w["ln_f.beta"], EPS)
    return h @ w["wte.embeddings"].T


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/data/gpt2_reference.safetensors"
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(1234)
    w = make_weights(gen)
    x = torch.randint(0, V, (B, T), generator=gen, dtype=torch.int64)
    y = torch.randint(0, V, (B, T), generator=gen, dtype=torch.int64)

    params = {k: v.clone().requires_grad_(True) for k, v in w.items()}
    logits = forward(params, x)
    loss = F.cross_entropy(logits.reshape(-1, V), y.reshape(-1))
    loss.backward()
    result = {f"w.{k}": v for k, v in w.items()}
    result["x"] = x.int()
    result["y"] = y.int()
    result["logits"] = logits
    result["loss"] = loss.reshape(())
    for k, v in params.items():
        result[f"grad.{k}"] = v.grad

    params = {k: v.clone().requires_grad_(True) for k, v in w.items()}
    opt = torch.optim.AdamW(params.values(), lr=LR, betas=BETAS, eps=1e-8, weight_decay=WD)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = F.cross_entropy(forward(params, x).reshape(-1, V), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params.values(), CLIP)
        opt.step()
        losses.append(loss.item())
    result["adamw_losses"] = torch.tensor(losses, dtype=torch.float32)
    for k, v in params.items():
        result[f"after.{k}"] = v
    save_safetensors(out, result)
    print(f"wrote {out}: loss {result['loss'].item():.6f}, AdamW losses {losses[0]:.4f} -> {losses[-1]:.4f}")


if __name__ == "__main__":
    main()
