#!/usr/bin/env python3
"""PyTorch's own decode loop for a Llama-shaped config, for bench/decode.sh:
random f32 weights, a prefill pass, then greedy tokens one at a time with a
key-value cache (preallocated, written in place), on the given threads.
Written from Hugging Face's published Llama definition (RMSNorm, rotate-half
rotary embeddings, grouped-query attention, SwiGLU); prints one JSON object.

  /usr/bin/python3 bench/pytorch_decode.py CONFIG.json [--prompt 16] [--tokens 32] [--threads N]
"""
import argparse
import json
import os
import math
import time

import torch
import torch.nn.functional as F


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("config")
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    c = json.load(open(a.config))
    C, I, V, L = c["hidden_size"], c["intermediate_size"], c["vocab_size"], c["num_hidden_layers"]
    H, K = c["num_attention_heads"], c.get("num_key_value_heads", c["num_attention_heads"])
    D = c.get("head_dim", C // H)
    eps, theta = c.get("rms_norm_eps", 1e-6), c.get("rope_theta", 10000.0)
    S = a.prompt + a.tokens + 1
    g = torch.Generator().manual_seed(0)
    r = lambda *s: 0.02 * torch.randn(*s, generator=g)
    embed = r(V, C)
    head = embed if c.get("tie_word_embeddings") else r(V, C)
    layers = [dict(q=r(H * D, C), k=r(K * D, C), v=r(K * D, C), o=r(C, H * D), gate=r(I, C),
                   up=r(I, C), down=r(C, I), n1=torch.ones(C), n2=torch.ones(C)) for _ in range(L)]
    norm = torch.ones(C)
    inv = 1.0 / theta ** (torch.arange(0, D, 2).float() / D)
    kcache = [torch.zeros(1, K, S, D) for _ in range(L)]
    vcache = [torch.zeros(1, K, S, D) for _ in range(L)]

    def rms(x, w):
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    def rot(x, pos):  # x [1, heads, T, D]
        f = pos.float()[:, None] * inv[None, :]
        e = torch.cat((f, f), -1)
        x1, x2 = x[..., : D // 2], x[..., D // 2:]
        return x * e.cos() + torch.cat((-x2, x1), -1) * e.sin()

    def step(tokens, start):  # tokens [T] -> logits of the last position
        T = tokens.numel()
        pos = torch.arange(start, start + T)
        h = embed[tokens][None]
        for i, w in enumerate(layers):
            x = rms(h, w["n1"])
            q = rot((x @ w["q"].T).view(1, T, H, D).transpose(1, 2), pos)
            k = rot((x @ w["k"].T).view(1, T, K, D).transpose(1, 2), pos)
            v = (x @ w["v"].T).view(1, T, K, D).transpose(1, 2)
            kcache[i][:, :, start:start + T] = k
            vcache[i][:, :, start:start + T] = v
            keys = kcache[i][:, :, : start + T].repeat_interleave(H // K, dim=1)
            vals = vcache[i][:, :, : start + T].repeat_interleave(H // K, dim=1)
            att = (q @ keys.transpose(-2, -1)) / math.sqrt(D)
            mask = torch.arange(start + T)[None, :] > pos[:, None]
            att = att.masked_fill(mask, float("-inf")).softmax(-1)
            h = h + (att @ vals).transpose(1, 2).reshape(1, T, H * D) @ w["o"].T
            x = rms(h, w["n2"])
            h = h + (F.silu(x @ w["gate"].T) * (x @ w["up"].T)) @ w["down"].T
        return rms(h[:, -1], norm) @ head.T

    prompt = torch.tensor([(i * 7919) % V for i in range(a.prompt)])
    with torch.no_grad():
        step(prompt, 0)  # warm-up
        t0 = time.perf_counter()
        token = int(step(prompt, 0).argmax())
        prefill = time.perf_counter() - t0
        t0 = time.perf_counter()
        for i in range(a.tokens):
            token = int(step(torch.tensor([token]), a.prompt + i).argmax())
        decode = time.perf_counter() - t0
    print(json.dumps({"engine": f"pytorch {torch.__version__}", "threads": a.threads,
                      "decode_tokens_per_s": a.tokens / decode,
                      "prefill_tokens_per_s": a.prompt / prefill,
                      "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE")}))


if __name__ == "__main__":
    main()
