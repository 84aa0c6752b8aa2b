#!/usr/bin/env python3
"""Writes small BERT and RoBERTa sequence classifiers in Hugging Face's layout,
with random weights, and PyTorch's numbers for them, for
tests/bert_reference_test.cc. The forward pass is written here from the
published definitions (Hugging Face's modeling_bert and modeling_roberta):
embeddings (word + position + token type, RoBERTa's positions from
pad_token_id + 1) then LayerNorm; post-LayerNorm blocks with an additive
padding mask on the scores and erf GELU; the first token through BERT's
pooler + classifier or RoBERTa's classification head.

  tests/data/hf_bert/      6 heads of 4, intermediate 37, vocabulary 97, 3
                           labels, F32; sequences of 9 with 0, 2 and 4 pads
  tests/data/hf_roberta/   pad_token_id 1 (positions 2..), one token type, 2
                           labels, F16
  tests/data/hf_bert_mlm/  BertForMaskedLM: the masked-LM head (dense, GELU,
                           LayerNorm, tied word embeddings plus a bias), a
                           target token at every position
  tests/data/hf_roberta_mlm/  RobertaForMaskedLM: `lm_head` (dense, GELU,
                           layer_norm, tied word embeddings plus a bias)
  tests/data/<name>_reference.safetensors:
    token_ids, segment_ids [B, S] i32, padding_mask [B, S] f32, labels [B]
    (masked LM: [B, S]) i32, logits [B, labels] (masked LM: [B, S, vocab]), loss, grad.<tensor>, adamw_losses (5 AdamW steps,
    clip 1.0) and after.<tensor>

The key projection's bias adds the same q.b to every score of a query, which
softmax ignores: its gradient is written as exactly zero and zeroed before
each AdamW step, as autoshard's is.

Run with Debian's python3-torch:  /usr/bin/python3 tools/make_bert_reference.py
"""
import json
import math
import os

import torch
import torch.nn.functional as F

from make_llama_reference import gradients_and_adamw, logits_and_loss
from safetensors_io import save_safetensors

B, S = 4, 9
LENGTHS = [9, 7, 5, 9]

BERT = {"model_type": "bert", "architectures": ["BertForSequenceClassification"],
        "vocab_size": 97, "hidden_size": 24, "intermediate_size": 37, "num_hidden_layers": 2,
        "num_attention_heads": 6, "max_position_embeddings": 20, "type_vocab_size": 2,
        "layer_norm_eps": 1e-12, "hidden_act": "gelu", "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0, "position_embedding_type": "absolute",
        "pad_token_id": 0, "id2label": {"0": "a", "1": "b", "2": "c"}, "torch_dtype": "float32"}
BERT_MLM = dict(BERT, architectures=["BertForMaskedLM"], vocab_size=83, num_attention_heads=4)
del BERT_MLM["id2label"]
ROBERTA = {"model_type": "roberta", "architectures": ["RobertaForSequenceClassification"],
           "vocab_size": 89, "hidden_size": 24, "intermediate_size": 31, "num_hidden_layers": 2,
           "num_attention_heads": 4, "max_position_embeddings": 16, "type_vocab_size": 1,
           "layer_norm_eps": 1e-5, "hidden_act": "gelu", "hidden_dropout_prob": 0.0,
           "attention_probs_dropout_prob": 0.0, "pad_token_id": 1, "bos_token_id": 0,
           "eos_token_id": 2, "num_labels": 2, "torch_dtype": "float16"}


ROBERTA_MLM = dict(ROBERTA, architectures=["RobertaForMaskedLM"], vocab_size=79,
                   torch_dtype="float32")
del ROBERTA_MLM["num_labels"]


def masked_lm(c):
    return c["architectures"][0].endswith("ForMaskedLM")


def mlm_names(c):
    """The masked-LM head's prefix and its transform's."""
    if c["model_type"] == "roberta":
        return "lm_head.", "lm_head."
    return "cls.predictions.", "cls.predictions.transform."


def labels_of(c):
    return len(c["id2label"]) if "id2label" in c else c.get("num_labels", 2)


def make_weights(c, gen):
    C, I, V = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    L, base = labels_of(c), c["model_type"] + "."
    r = lambda *s, scale: scale * torch.randn(*s, generator=gen)
    w = {base + "embeddings.word_embeddings.weight": r(V, C, scale=0.5),
         base + "embeddings.position_embeddings.weight": r(c["max_position_embeddings"], C, scale=0.5),
         base + "embeddings.token_type_embeddings.weight": r(c["type_vocab_size"], C, scale=0.5)}

    def module(name, out, inp, norm=False):
        w[name + ".weight"] = 1 + r(out, scale=0.1) if norm else r(out, inp, scale=0.3)
        w[name + ".bias"] = r(out, scale=0.1)

    module(base + "embeddings.LayerNorm", C, None, norm=True)
    for i in range(c["num_hidden_layers"]):
        p = f"{base}encoder.layer.{i}."
        for n in ("query", "key", "value"):
            module(p + "attention.self." + n, C, C)
        module(p + "attention.output.dense", C, C)
        module(p + "attention.output.LayerNorm", C, None, norm=True)
        module(p + "intermediate.dense", I, C)
        module(p + "output.dense", C, I)
        module(p + "output.LayerNorm", C, None, norm=True)
    if masked_lm(c):
        head, transform = mlm_names(c)
        module(transform + "dense", C, C)
        module(transform + ("layer_norm" if c["model_type"] == "roberta" else "LayerNorm"), C,
               None, norm=True)
        w[head + "bias"] = r(V, scale=0.1)
    elif c["model_type"] == "roberta":
        module("classifier.dense", C, C)
        module("classifier.out_proj", L, C)
    else:
        module(base + "pooler.dense", C, C)
        module("classifier", L, C)
    return w


def forward(c, w, ids, seg, mask):
    C, H = c["hidden_size"], c["num_attention_heads"]
    D, base, eps = C // H, c["model_type"] + ".", c["layer_norm_eps"]
    linear = lambda a, n: a @ w[n + ".weight"].T + w[n + ".bias"]
    norm = lambda a, n: F.layer_norm(a, (C,), w[n + ".weight"], w[n + ".bias"], eps)
    if c["model_type"] == "roberta":  # create_position_ids_from_input_ids
        keep = ids.ne(c["pad_token_id"]).int()
        positions = torch.cumsum(keep, dim=1) * keep + c["pad_token_id"]
    else:
        positions = torch.arange(S)[None, :].expand(B, S)
    e = base + "embeddings."
    h = (w[e + "word_embeddings.weight"][ids] + w[e + "position_embeddings.weight"][positions] +
         w[e + "token_type_embeddings.weight"][seg])
    h = norm(h, e + "LayerNorm")
    extended = (1.0 - mask)[:, None, None, :] * torch.finfo(torch.float32).min
    heads = lambda y: y.view(B, S, H, D).transpose(1, 2)
    for i in range(c["num_hidden_layers"]):
        p = f"{base}encoder.layer.{i}."
        q, k, v = (heads(linear(h, p + "attention.self." + n)) for n in ("query", "key", "value"))
        att = ((q @ k.transpose(-2, -1)) / math.sqrt(D) + extended).softmax(-1)
        ctx = (att @ v).transpose(1, 2).reshape(B, S, C)
        h = norm(h + linear(ctx, p + "attention.output.dense"), p + "attention.output.LayerNorm")
        m = F.gelu(linear(h, p + "intermediate.dense"))
        h = norm(h + linear(m, p + "output.dense"), p + "output.LayerNorm")
    if masked_lm(c):
        head, t = mlm_names(c)
        ln = "layer_norm" if c["model_type"] == "roberta" else "LayerNorm"
        m = norm(F.gelu(linear(h, t + "dense")), t + ln)
        return m @ w[e + "word_embeddings.weight"].T + w[head + "bias"]
    first = h[:, 0]
    if c["model_type"] == "roberta":
        return linear(torch.tanh(linear(first, "classifier.dense")), "classifier.out_proj")
    return linear(torch.tanh(linear(first, base + "pooler.dense")), "classifier")


def reference(c, name, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    w = {k: v.to(dtype).float() for k, v in make_weights(c, gen).items()}
    pad = c["pad_token_id"]
    ids = torch.randint(0, c["vocab_size"], (B, S), generator=gen)
    ids[ids == pad] = (pad + 3) % c["vocab_size"]  # no accidental padding ids
    mask = torch.zeros(B, S)
    for b, n in enumerate(LENGTHS):
        mask[b, :n] = 1
        ids[b, n:] = pad
    seg = torch.zeros(B, S, dtype=torch.int64)
    if c["type_vocab_size"] > 1:
        for b, n in enumerate(LENGTHS):
            seg[b, n // 2:n] = 1
    if masked_lm(c):
        labels = torch.randint(0, c["vocab_size"], (B, S), generator=gen)
    else:
        labels = torch.randint(0, labels_of(c), (B,), generator=gen)

    d = f"tests/data/hf_{name}"
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
    save_safetensors(os.path.join(d, "model.safetensors"), {n: w[n].to(dtype) for n in sorted(w)},
                     {"format": "pt"})

    numbers, loss, losses = gradients_and_adamw(
        w, lambda p: logits_and_loss(forward(c, p, ids, seg, mask), labels),
        lambda k: k.endswith("attention.self.key.bias"))
    out = {"token_ids": ids.int(), "segment_ids": seg.int(), "padding_mask": mask,
           "labels": labels.int(), **numbers}
    path = f"tests/data/{name}_reference.safetensors"
    save_safetensors(path, out)
    print(f"wrote {path}: loss {loss.item():.6f}, AdamW {losses[0]:.4f} -> {losses[-1]:.4f}")


def main():
    torch.set_num_threads(1)
    reference(BERT, "bert", torch.float32, seed=3)
    reference(ROBERTA, "roberta", torch.float16, seed=4)
    reference(BERT_MLM, "bert_mlm", torch.float32, seed=5)
    reference(ROBERTA_MLM, "roberta_mlm", torch.float32, seed=6)


if __name__ == "__main__":
    main()
