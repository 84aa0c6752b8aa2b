#!/usr/bin/env python3
"""Writes four small Llama-family models in Hugging Face's layout, with random
weights, and PyTorch's numbers for them, for tests/decoder_reference_test.cc.
Nothing is downloaded, and transformers is not needed: the forward pass is
written here from the published definition (Hugging Face's modeling_llama
modeling_qwen2 and modeling_gemma: RMSNorm, rotate-half rotary embeddings with Llama 3's
frequency scaling, grouped-query attention by repeating kv heads, SwiGLU).

  tests/data/hf_llama/     model_type llama: 6 heads over 2 kv heads, head_dim
                           6 (not hidden / heads), MLP width 37, vocabulary
                           131, rope_scaling llama3, untied head; BF16 weights
                           in two shards with model.safetensors.index.json
  tests/data/hf_qwen2/     model_type qwen2: q/k/v biases, 4 heads over 1 kv
                           head, tied head, F32 model.safetensors
  tests/data/hf_gemma/     model_type gemma: RMSNorm scaled by 1 + weight,
                           embeddings times sqrt(hidden), tanh-GELU GeGLU,
                           head_dim 10 with hidden 24 and 4 heads over 2 kv
                           heads, tied head, F16 model.safetensors
  tests/data/hf_mistral/   model_type mistral: a sliding window of 4 keys over
                           sequences of 11 (and 17 when generating), F32
  tests/data/<name>_reference.safetensors:
    x, y [B, T]            tokens and targets
    logits, loss           forward pass and mean cross-entropy
    grad.<tensor>          the loss's gradient of every checkpoint tensor
    adamw_losses           losses of 5 AdamW steps (clip 1.0)
    after.<tensor>         the weights after them
    generate.prompt        5 tokens, and generate.greedy: the 12 tokens a greedy
                           loop adds to them (the full forward pass each step)

Run with Debian's python3-torch:  /usr/bin/python3 tools/make_llama_reference.py
"""
import json
import math
import os

import torch
import torch.nn.functional as F

from safetensors_io import save_safetensors

B, T = 2, 11
STEPS, LR, BETAS, WD, CLIP = 5, 3e-3, (0.9, 0.95), 0.1, 1.0
GREEDY = 12

LLAMA = {"model_type": "llama", "vocab_size": 131, "hidden_size": 24, "intermediate_size": 37,
         "num_hidden_layers": 2, "num_attention_heads": 6, "num_key_value_heads": 2, "head_dim": 6,
         "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 500.0,
         "rope_scaling": {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                          "high_freq_factor": 4.0, "original_max_position_embeddings": 16},
         "tie_word_embeddings": False, "hidden_act": "silu", "attention_bias": False,
         "torch_dtype": "bfloat16", "bos_token_id": 1, "eos_token_id": 2}
QWEN2 = {"model_type": "qwen2", "vocab_size": 97, "hidden_size": 24, "intermediate_size": 29,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 1,
         "max_position_embeddings": 32, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
         "tie_word_embeddings": True, "hidden_act": "silu", "use_sliding_window": False,
         "sliding_window": 4, "torch_dtype": "float32"}

GEMMA = {"model_type": "gemma", "vocab_size": 89, "hidden_size": 24, "intermediate_size": 31,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
         "head_dim": 10, "max_position_embeddings": 48, "rms_norm_eps": 1e-6,
         "rope_theta": 10000.0, "hidden_act": "gelu", "hidden_activation": "gelu_pytorch_tanh",
         "tie_word_embeddings": True, "attention_bias": False, "torch_dtype": "float16"}


MISTRAL = {"model_type": "mistral", "vocab_size": 101, "hidden_size": 24, "intermediate_size": 40,
           "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
           "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
           "sliding_window": 4, "tie_word_embeddings": False, "hidden_act": "silu",
           "torch_dtype": "float32"}


def sliding_window(c):
    on = c.get("use_sliding_window", c["model_type"] == "mistral")
    return c.get("sliding_window") if on else None


def head_dim(c):
    return c.get("head_dim", c["hidden_size"] // c["num_attention_heads"])


def make_weights(c, gen):
    C, I, V = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    Q, KV = c["num_attention_heads"] * head_dim(c), c["num_key_value_heads"] * head_dim(c)
    r = lambda *s, scale: scale * torch.randn(*s, generator=gen)
    # Gemma stores its RMSNorm scales as offsets from 1.
    one = 0 if c["model_type"] == "gemma" else 1
    w = {"model.embed_tokens.weight": r(V, C, scale=0.5), "model.norm.weight": one + r(C, scale=0.1)}
    if not c["tie_word_embeddings"]:
        w["lm_head.weight"] = r(V, C, scale=0.2)
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = one + r(C, scale=0.1)
        w[p + "post_attention_layernorm.weight"] = one + r(C, scale=0.1)
        for n, out in (("q", Q), ("k", KV), ("v", KV)):
            w[p + f"self_attn.{n}_proj.weight"] = r(out, C, scale=0.3)
            if c["model_type"] == "qwen2":
                w[p + f"self_attn.{n}_proj.bias"] = r(out, scale=0.1)
        w[p + "self_attn.o_proj.weight"] = r(C, Q, scale=0.2)
        w[p + "mlp.gate_proj.weight"] = r(I, C, scale=0.3)
        w[p + "mlp.up_proj.weight"] = r(I, C, scale=0.3)
        w[p + "mlp.down_proj.weight"] = r(C, I, scale=0.2)
    return w


def inverse_frequencies(c):
    d = head_dim(c)
    inv = 1.0 / (c["rope_theta"] ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    s = c.get("rope_scaling")
    if not s:
        return inv
    factor, lo, hi = s["factor"], s["low_freq_factor"], s["high_freq_factor"]
    old = s["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > old / lo, inv / factor, inv)
    smooth = (old / wavelen - lo) / (hi - lo)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < old / hi) & ~(wavelen > old / lo)
    return torch.where(medium, blended, scaled)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rms_norm(c, x, weight, eps):
    if c["model_type"] == "gemma":  # GemmaRMSNorm: scaled by 1 + weight
        weight = 1.0 + weight
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def mlp_activation(c, x):
    act = c.get("hidden_activation") if c["model_type"] == "gemma" else c["hidden_act"]
    if act in (None, "gelu_pytorch_tanh"):
        return F.gelu(x, approximate="tanh")
    return F.gelu(x) if act == "gelu" else F.silu(x)


def forward(c, w, x):
    B, T = x.shape
    H, K, D = c["num_attention_heads"], c["num_key_value_heads"], head_dim(c)
    eps = c["rms_norm_eps"]
    freqs = torch.arange(T).float()[:, None] * inverse_frequencies(c)[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()  # [T, D]
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    window = sliding_window(c)
    if window:  # Mistral: query i sees keys j with i - j < window
        i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
        causal = causal & (i - j < window)
    h = w["model.embed_tokens.weight"][x]
    if c["model_type"] == "gemma":  # the normalizer, in the hidden states' dtype
        h = h * torch.tensor(c["hidden_size"] ** 0.5, dtype=h.dtype)
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        a = rms_norm(c, h, w[p + "input_layernorm.weight"], eps)

        def proj(n, heads):
            y = a @ w[p + f"self_attn.{n}_proj.weight"].T
            if p + f"self_attn.{n}_proj.bias" in w:
                y = y + w[p + f"self_attn.{n}_proj.bias"]
            return y.view(B, T, heads, D).transpose(1, 2)  # [B, heads, T, D]

        q, k, v = proj("q", H), proj("k", K), proj("v", K)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(H // K, dim=1)  # query head j reads kv head j // (H / K)
        v = v.repeat_interleave(H // K, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(D)
        att = att.masked_fill(~causal, float("-inf")).softmax(-1)
        o = (att @ v).transpose(1, 2).reshape(B, T, H * D)
        h = h + o @ w[p + "self_attn.o_proj.weight"].T
        m = rms_norm(c, h, w[p + "post_attention_layernorm.weight"], eps)
        g = mlp_activation(c, m @ w[p + "mlp.gate_proj.weight"].T) * (m @ w[p + "mlp.up_proj.weight"].T)
        h = h + g @ w[p + "mlp.down_proj.weight"].T
    h = rms_norm(c, h, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if c["tie_word_embeddings"] else w["lm_head.weight"]
    return h @ head.T


def write_checkpoint(c, w, directory, dtype, shards):
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
    names = sorted(w)
    if shards == 1:
        save_safetensors(os.path.join(directory, "model.safetensors"),
                         {n: w[n].to(dtype) for n in names}, {"format": "pt"})
        return
    weight_map = {}
    for s in range(shards):
        file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = names[s::shards]
        save_safetensors(os.path.join(directory, file), {n: w[n].to(dtype) for n in part},
                         {"format": "pt"})
        weight_map.update({n: file for n in part})
    total = sum(w[n].numel() * w[n].to(dtype).element_size() for n in names)
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


def logits_and_loss(logits, targets):
    """The logits and their mean cross-entropy against class ids."""
    return logits, F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def gradients_and_adamw(w, loss_of, zero_grad):
    """The reference numbers every test reads, for weights `w` and
    `loss_of(params) -> (logits, loss)`: logits, loss, the gradient of every
    tensor (exactly zero where `zero_grad(name)`), and the losses of STEPS
    AdamW steps with clipping and the weights after them."""
    def backward(params, loss):
        loss.backward()
        for k, v in params.items():
            if zero_grad(k):
                v.grad.zero_()

    params = {k: v.clone().requires_grad_(True) for k, v in w.items()}
    logits, loss = loss_of(params)
    backward(params, loss)
    out = {"logits": logits.detach(), "loss": loss.detach().reshape(())}
    out.update({f"grad.{k}": v.grad for k, v in params.items()})

    params = {k: v.clone().requires_grad_(True) for k, v in w.items()}
    opt = torch.optim.AdamW(params.values(), lr=LR, betas=BETAS, eps=1e-8, weight_decay=WD)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        step_loss = loss_of(params)[1]
        backward(params, step_loss)
        torch.nn.utils.clip_grad_norm_(params.values(), CLIP)
        opt.step()
        losses.append(step_loss.item())
    out["adamw_losses"] = torch.tensor(losses, dtype=torch.float32)
    out.update({f"after.{k}": v.detach() for k, v in params.items()})
    return out, loss, losses


def reference(c, name, dtype, shards, seed, make=make_weights, forward=forward,
              zero_grad=lambda name: False):
    """Writes tests/data/hf_<name> and tests/data/<name>_reference.safetensors
    for the architecture of `make` (its weights) and `forward` (its logits);
    the gradients of tensors for which `zero_grad` holds are exactly zero."""
    gen = torch.Generator().manual_seed(seed)
    # The numbers are those of the weights as stored (rounded to bf16 if so).
    w = {k: v.to(dtype).float() for k, v in make(c, gen).items()}
    V = c["vocab_size"]
    x = torch.randint(0, V, (B, T), generator=gen)
    y = torch.randint(0, V, (B, T), generator=gen)
    write_checkpoint(c, w, f"tests/data/hf_{name}", dtype, shards)

    numbers, loss, losses = gradients_and_adamw(
        w, lambda p: logits_and_loss(forward(c, p, x), y), zero_grad)
    out = {"x": x.int(), "y": y.int(), **numbers}

    prompt = x[0, :5].tolist()
    tokens = list(prompt)
    with torch.no_grad():
        for _ in range(GREEDY):
            tokens.append(int(forward(c, w, torch.tensor([tokens]))[0, -1].argmax()))
    out["generate.prompt"] = torch.tensor(prompt, dtype=torch.int32)
    out["generate.greedy"] = torch.tensor(tokens[len(prompt):], dtype=torch.int32)
    path = f"tests/data/{name}_reference.safetensors"
    save_safetensors(path, out)
    print(f"wrote {path}: loss {loss.item():.6f}, AdamW {losses[0]:.4f} -> {losses[-1]:.4f}")


def main():
    torch.set_num_threads(1)
    reference(LLAMA, "llama", torch.bfloat16, shards=2, seed=2024)
    reference(QWEN2, "qwen2", torch.float32, shards=1, seed=7)
    reference(GEMMA, "gemma", torch.float16, shards=1, seed=11)
    reference(MISTRAL, "mistral", torch.float32, shards=1, seed=17)


if __name__ == "__main__":
    main()
