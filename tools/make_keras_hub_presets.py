#!/usr/bin/env python3
"""Writes small KerasHub presets holding the weights of the Hugging Face
fixtures (tests/data/hf_*), for tests/keras_hub_test.cc. Nothing is
downloaded and neither Keras nor KerasHub is needed: the layout follows
keras-hub's source (models/<family>/*_backbone.py and their layers,
layers/modeling/transformer_{encoder,decoder}.py, and the Hugging Face
converters utils/transformers/convert_<family>.py, which give each Keras
variable from its Hugging Face tensor) and Keras 3's saving_lib (the
datasets of model.weights.h5: a functional model's layers under
layers/<class in snake case>[_k], nested layers by attribute, a layer's
variables as vars/0, vars/1, ...). See docs/keras-hub.md.

  tests/data/keras_hub/<name>/   config.json, metadata.json, model.weights.h5
                                 (llama: model.weights.json over two
                                 model_0000k.weights.h5 shards); bert and
                                 roberta also task.json + task.weights.h5
                                 (TextClassifier); gpt2 a GPT2CausalLM task.json
  tests/data/keras_hub/tokenizers/ tokenizer-only presets: sentencepiece,
                                 gpt2, wordpiece over tests/data/tokenizers'
                                 files; llama3 (Llama3Tokenizer) and qwen2
                                 (QwenTokenizer) converted from
                                 tests/data/tokenizers/{llama3,qwen2}_hub
  tests/data/keras_hub/gemma_bf16/ the gemma preset saved in bfloat16, as
                                 Keras saves a bfloat16 model (opaque 2-byte
                                 datasets tagged dtype="bfloat16")
  tests/data/keras_hub/hf_gemma2/ likewise a Gemma 2 with the sizes of
                                 tests/data/hf_gemma2 but queries scaled by
                                 head_dim (KerasHub's query_head_dim_normalize
                                 allows head_dim or hidden / heads, not 12)
  tests/data/keras_hub/hf_llama/ KerasHub's Llama has head_dim = hidden /
                                 heads, which tests/data/hf_llama (head_dim 6
                                 with hidden 24 and 6 heads) is not: a Llama
                                 of the same sizes and rope scaling with head
                                 dim 4, random weights, as a Hugging Face
                                 directory beside its preset
  tests/data/keras_hub/phi3/     Phi3Backbone from tests/data/hf_phi3 (its fused
                                 qkv_proj and gate_up_proj sliced); `--only
                                 phi3` writes it alone

MultiHeadAttention's sublayers (GPT-2, OPT, BERT, RoBERTa): saving_lib
walks a layer's public attributes before its private ones (saving_lib.py
`_name_key`: private attributes are visited last), and since Keras 3.3
MultiHeadAttention has the properties query_dense, key_dense, value_dense
and output_dense (keras/src/layers/attention/multi_head_attention.py), so
current Keras writes ".../_self_attention_layer/query_dense/vars/0" where
Keras 3.0-3.2 wrote "_query_dense". `--keras-layout 3.3` (the default)
writes the former, `--keras-layout 3.0` the latter; the committed fixtures
were written with 3.0, and tests/keras_hub_test.cc renames their groups to
read the 3.3 form too. KerasHub's own attention layers (Llama, Mistral,
Qwen, Gemma) keep "_query_dense" in every version.

RoBERTa: KerasHub's RobertaBackbone has no token-type embedding; Hugging
Face adds its single row to every token, so the preset's positions hold
position row s + 2 plus that row (exact for every token that is not padding).

Run with Debian's python3-h5py and python3-torch:
    /usr/bin/python3 tools/make_keras_hub_presets.py
"""
import argparse
import json
import os
import re
import shutil
import struct
import sys

import h5py
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_io import save_safetensors  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data")
OUT = os.path.join(ROOT, "keras_hub")


def load_hf(directory):
    """Every tensor of a Hugging Face directory as float32 numpy."""
    tensors = {}
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".safetensors"):
            continue
        with open(os.path.join(directory, name), "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(n))
            data = f.read()
        for key, t in header.items():
            if key == "__metadata__":
                continue
            a, b = t["data_offsets"]
            raw = data[a:b]
            if t["dtype"] == "BF16":
                bits = np.frombuffer(raw, np.uint16).astype(np.uint32) << 16
                value = bits.view(np.float32)
            else:
                value = np.frombuffer(raw, {"F32": np.float32, "F16": np.float16}[t["dtype"]])
            tensors[key] = value.astype(np.float32).reshape(t["shape"])
    return tensors


def snake(name):
    """Keras's naming.to_snake_case of a class name."""
    name = re.sub(r"\W+", "", name)
    name = re.sub("(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub("([a-z])([A-Z])", r"\1_\2", name).lower()


class Layers:
    """The groups of a weights file: layers/<class>[_k] numbered per class."""

    def __init__(self):
        self.groups = {}  # group path -> [arrays]
        self.count = {}

    def layer(self, cls):
        k = self.count.get(cls, 0)
        self.count[cls] = k + 1
        name = snake(cls)
        return "layers/" + (name if k == 0 else f"{name}_{k}")

    def put(self, group, *arrays):
        self.groups[group] = [np.ascontiguousarray(a, np.float32) for a in arrays]


def to_bfloat16(a):
    """float32 to bfloat16 bits, rounding to nearest even (as ml_dtypes does)."""
    bits = np.ascontiguousarray(a, np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2")


def write_h5(path, groups, bf16=False):
    with h5py.File(path, "w") as f:
        f.create_group("vars")  # the model's own (none)
        for group, arrays in groups.items():
            vars_ = f.require_group(group + "/vars")
            for i, a in enumerate(arrays):
                if bf16:
                    # Keras's H5IOStore: h5py stores ml_dtypes' bfloat16 (a
                    # 2-byte NumPy void type) as HDF5 opaque data, and Keras
                    # tags the dataset with attrs["dtype"] = "bfloat16".
                    ds = vars_.create_dataset(str(i), data=to_bfloat16(a).view("V2"))
                    ds.attrs["dtype"] = "bfloat16"
                else:
                    vars_.create_dataset(str(i), data=a)


def layer_config(module, cls, config, name):
    return {"module": module, "class_name": cls,
            "config": dict(name=name, trainable=True, dtype="float32", **config),
            "registered_name": f"keras_hub>{cls}"}


def write_preset(name, family, cls, config, layers, task=None, task_layers=None, shards=1,
                 bf16=False):
    d = os.path.join(OUT, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    module = f"keras_hub.src.models.{family}.{family}_backbone"
    backbone = layer_config(module, cls, config, snake(cls))
    if bf16:
        backbone["config"]["dtype"] = "bfloat16"
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(backbone, f, indent=2)
    count = sum(a.size for arrays in layers.groups.values() for a in arrays)
    with open(os.path.join(d, "metadata.json"), "w") as f:
        json.dump({"keras_version": "3.8.0", "keras_hub_version": "0.19.0",
                   "parameter_count": int(count), "date_saved": "2026-11-25@00:00:00"}, f, indent=2)
    if shards == 1:
        write_h5(os.path.join(d, "model.weights.h5"), layers.groups, bf16)
    else:
        # Keras's sharded store: groups spread over files, and an index.
        items = list(layers.groups.items())
        per = (len(items) + shards - 1) // shards
        weight_map = {}
        for k in range(shards):
            file = f"model_{k:05d}.weights.h5"
            part = dict(items[k * per:(k + 1) * per])
            write_h5(os.path.join(d, file), part)
            for group in part:
                weight_map["/" + group + "/vars"] = file
        with open(os.path.join(d, "model.weights.json"), "w") as f:
            json.dump({"metadata": {"total_size": int(count * 4)}, "weight_map": weight_map}, f,
                      indent=2)
    if task:
        task_cls, task_config = task
        task_module = f"keras_hub.src.models.{family}.{snake(task_cls)}"
        t = layer_config(task_module, task_cls, dict(backbone=backbone, preprocessor=None,
                                                     **task_config), snake(task_cls))
        with open(os.path.join(d, "task.json"), "w") as f:
            json.dump(t, f, indent=2)
    if task_layers:
        write_h5(os.path.join(d, "task.weights.h5"), task_layers.groups)
    return d


def gpt2():
    c = json.load(open(os.path.join(ROOT, "hf_gpt2", "config.json")))
    w = {k.removeprefix("transformer."): v for k, v in load_hf(os.path.join(ROOT, "hf_gpt2")).items()}
    C, H = c["n_embd"], c["n_head"]
    D = C // H
    L = Layers()
    L.put(L.layer("ReversibleEmbedding"), w["wte.weight"])
    L.put(L.layer("PositionEmbedding"), w["wpe.weight"])
    for i in range(c["n_layer"]):
        g, p = L.layer("TransformerDecoder"), f"h.{i}."
        L.put(g + "/_self_attention_layer_norm", w[p + "ln_1.weight"], w[p + "ln_1.bias"])
        qkv, qkv_b = w[p + "attn.c_attn.weight"], w[p + "attn.c_attn.bias"]
        for j, attr in enumerate(["_query_dense", "_key_dense", "_value_dense"]):
            L.put(g + "/_self_attention_layer/" + mha(attr), qkv[:, j * C:(j + 1) * C].reshape(C, H, D),
                  qkv_b[j * C:(j + 1) * C].reshape(H, D))
        L.put(g + "/_self_attention_layer/" + mha("_output_dense"),
              w[p + "attn.c_proj.weight"].reshape(H, D, C), w[p + "attn.c_proj.bias"])
        L.put(g + "/_feedforward_layer_norm", w[p + "ln_2.weight"], w[p + "ln_2.bias"])
        L.put(g + "/_feedforward_intermediate_dense", w[p + "mlp.c_fc.weight"], w[p + "mlp.c_fc.bias"])
        L.put(g + "/_feedforward_output_dense", w[p + "mlp.c_proj.weight"], w[p + "mlp.c_proj.bias"])
    L.put(L.layer("LayerNormalization"), w["ln_f.weight"], w["ln_f.bias"])
    config = dict(vocabulary_size=c["vocab_size"], num_layers=c["n_layer"], num_heads=H,
                  hidden_dim=C, intermediate_dim=4 * C, dropout=0.0,
                  max_sequence_length=c["n_positions"])
    write_preset("gpt2", "gpt2", "GPT2Backbone", config, L, task=("GPT2CausalLM", {}))


def opt():
    c = json.load(open(os.path.join(ROOT, "hf_opt", "config.json")))
    w = {k.removeprefix("model.decoder."): v for k, v in load_hf(os.path.join(ROOT, "hf_opt")).items()}
    C, H = c["hidden_size"], c["num_attention_heads"]
    D = C // H
    L = Layers()
    e = L.layer("TokenAndPositionEmbedding")
    L.put(e + "/position_embedding", w["embed_positions.weight"][2:])  # Hugging Face's offset 2
    L.put(e + "/token_embedding", w["embed_tokens.weight"])
    for i in range(c["num_hidden_layers"]):
        g, p = L.layer("TransformerDecoder"), f"layers.{i}."
        L.put(g + "/_self_attention_layer_norm", w[p + "self_attn_layer_norm.weight"],
              w[p + "self_attn_layer_norm.bias"])
        for attr, t in [("_query_dense", "q_proj"), ("_key_dense", "k_proj"), ("_value_dense", "v_proj")]:
            L.put(g + "/_self_attention_layer/" + mha(attr),
                  w[p + f"self_attn.{t}.weight"].T.reshape(C, H, D),
                  w[p + f"self_attn.{t}.bias"].reshape(H, D))
        L.put(g + "/_self_attention_layer/" + mha("_output_dense"),
              w[p + "self_attn.out_proj.weight"].T.reshape(H, D, C), w[p + "self_attn.out_proj.bias"])
        L.put(g + "/_feedforward_layer_norm", w[p + "final_layer_norm.weight"],
              w[p + "final_layer_norm.bias"])
        L.put(g + "/_feedforward_intermediate_dense", w[p + "fc1.weight"].T, w[p + "fc1.bias"])
        L.put(g + "/_feedforward_output_dense", w[p + "fc2.weight"].T, w[p + "fc2.bias"])
    L.put(L.layer("LayerNormalization"), w["final_layer_norm.weight"], w["final_layer_norm.bias"])
    config = dict(vocabulary_size=c["vocab_size"], num_layers=c["num_hidden_layers"], num_heads=H,
                  hidden_dim=C, intermediate_dim=c["ffn_dim"], dropout=0.0,
                  max_sequence_length=c["max_position_embeddings"])
    write_preset("opt", "opt", "OPTBackbone", config, L)


def encoder(name):
    c = json.load(open(os.path.join(ROOT, "hf_" + name, "config.json")))
    w = load_hf(os.path.join(ROOT, "hf_" + name))
    roberta = name == "roberta"
    C, H = c["hidden_size"], c["num_attention_heads"]
    D = C // H
    b = name + "."
    L = Layers()
    if roberta:
        e = L.layer("TokenAndPositionEmbedding")
        positions = w[b + "embeddings.position_embeddings.weight"][2:]
        L.put(e + "/position_embedding", positions + w[b + "embeddings.token_type_embeddings.weight"][0])
        L.put(e + "/token_embedding", w[b + "embeddings.word_embeddings.weight"])
    else:
        L.put(L.layer("ReversibleEmbedding"), w[b + "embeddings.word_embeddings.weight"])
        L.put(L.layer("PositionEmbedding"), w[b + "embeddings.position_embeddings.weight"])
        L.put(L.layer("Embedding"), w[b + "embeddings.token_type_embeddings.weight"])
    L.put(L.layer("LayerNormalization"), w[b + "embeddings.LayerNorm.weight"],
          w[b + "embeddings.LayerNorm.bias"])
    for i in range(c["num_hidden_layers"]):
        g, p = L.layer("TransformerEncoder"), f"{b}encoder.layer.{i}."
        for attr, t in [("_query_dense", "query"), ("_key_dense", "key"), ("_value_dense", "value")]:
            L.put(g + "/_self_attention_layer/" + mha(attr),
                  w[p + f"attention.self.{t}.weight"].T.reshape(C, H, D),
                  w[p + f"attention.self.{t}.bias"].reshape(H, D))
        L.put(g + "/_self_attention_layer/" + mha("_output_dense"),
              w[p + "attention.output.dense.weight"].T.reshape(H, D, C),
              w[p + "attention.output.dense.bias"])
        L.put(g + "/_self_attention_layer_norm", w[p + "attention.output.LayerNorm.weight"],
              w[p + "attention.output.LayerNorm.bias"])
        L.put(g + "/_feedforward_intermediate_dense", w[p + "intermediate.dense.weight"].T,
              w[p + "intermediate.dense.bias"])
        L.put(g + "/_feedforward_output_dense", w[p + "output.dense.weight"].T, w[p + "output.dense.bias"])
        L.put(g + "/_feedforward_layer_norm", w[p + "output.LayerNorm.weight"],
              w[p + "output.LayerNorm.bias"])
    T = Layers()  # the task, saved without its backbone
    if roberta:
        T.put(T.layer("Dense"), w["classifier.dense.weight"].T, w["classifier.dense.bias"])
        T.put(T.layer("Dense"), w["classifier.out_proj.weight"].T, w["classifier.out_proj.bias"])
    else:
        L.put(L.layer("Dense"), w[b + "pooler.dense.weight"].T, w[b + "pooler.dense.bias"])
        T.put(T.layer("Dense"), w["classifier.weight"].T, w["classifier.bias"])
    labels = c.get("num_labels", len(c.get("id2label", {})) or 2)
    config = dict(vocabulary_size=c["vocab_size"], num_layers=c["num_hidden_layers"], num_heads=H,
                  hidden_dim=C, intermediate_dim=c["intermediate_size"], dropout=0.0)
    if roberta:
        config["max_sequence_length"] = c["max_position_embeddings"] - 2
    else:
        config.update(max_sequence_length=c["max_position_embeddings"],
                      num_segments=c["type_vocab_size"])
    cls = "Roberta" if roberta else "Bert"
    task = dict(num_classes=labels, activation=None, dropout=0.0)
    if roberta:
        task["hidden_dim"] = C
    write_preset(name, name, cls + "Backbone", config, L, task=(cls + "TextClassifier", task),
                 task_layers=T)


LLAMA_STYLE = {  # family: backbone, decoder class, final norm class
    "llama": ("LlamaBackbone", "LlamaTransformerDecoder", "LlamaLayerNorm"),
    "mistral": ("MistralBackbone", "MistralTransformerDecoder", "MistralLayerNormalization"),
    "qwen2": ("QwenBackbone", "QwenTransformerDecoder", "QwenLayerNorm"),
}


def decoder(name, hf_dir, shards=1, bf16=False):
    c = json.load(open(os.path.join(hf_dir, "config.json")))
    w = {k.removeprefix("model."): v for k, v in load_hf(hf_dir).items()}
    C, H, K = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
    D = c.get("head_dim", C // H)
    gemma2 = name == "gemma2"
    gemma = name in ("gemma", "gemma2")
    tied = c.get("tie_word_embeddings", gemma)
    L = Layers()
    embed = [w["embed_tokens.weight"]] + ([] if tied else [w["lm_head.weight"].T])
    L.put(L.layer("ReversibleEmbedding"), *embed)
    style = None if gemma else LLAMA_STYLE[name]
    for i in range(c["num_hidden_layers"]):
        p = f"layers.{i}."
        q, k, v, o = (w[p + f"self_attn.{t}_proj.weight"] for t in "qkvo")
        gate, up, down = (w[p + f"mlp.{t}_proj.weight"].T for t in ("gate", "up", "down"))
        if gemma:
            g = L.layer("GemmaDecoderBlock")
            L.put(g + "/pre_attention_norm", w[p + "input_layernorm.weight"])
            if gemma2:  # convert_gemma.py's gemma2 branch
                L.put(g + "/post_attention_norm", w[p + "post_attention_layernorm.weight"])
                L.put(g + "/pre_ffw_norm", w[p + "pre_feedforward_layernorm.weight"])
                L.put(g + "/post_ffw_norm", w[p + "post_feedforward_layernorm.weight"])
            else:
                L.put(g + "/pre_ffw_norm", w[p + "post_attention_layernorm.weight"])
            L.put(g + "/attention/query_dense", q.reshape(H, D, C).transpose(0, 2, 1))
            L.put(g + "/attention/key_dense", k.reshape(K, D, C).transpose(0, 2, 1))
            L.put(g + "/attention/value_dense", v.reshape(K, D, C).transpose(0, 2, 1))
            L.put(g + "/attention/output_dense", o.reshape(C, H, D).transpose(1, 2, 0))
            L.put(g + "/gating_ffw", gate)
            L.put(g + "/gating_ffw_2", up)
            L.put(g + "/ffw_linear", down)
            continue
        g = L.layer(style[1])
        a = g + "/_self_attention_layer/"
        L.put(g + "/_self_attention_layernorm", w[p + "input_layernorm.weight"])
        bias = c.get("attention_bias", name == "qwen2")
        for attr, t, heads in [("_query_dense", "q", H), ("_key_dense", "k", K), ("_value_dense", "v", K)]:
            kernel = w[p + f"self_attn.{t}_proj.weight"].T.reshape(C, heads, D)
            extra = [w[p + f"self_attn.{t}_proj.bias"].reshape(heads, D)] if bias else []
            L.put(a + attr, kernel, *extra)
        L.put(a + "_output_dense", o.T.reshape(H, D, C))
        L.put(g + "/_feedforward_intermediate_dense", up)
        L.put(g + "/_feedforward_gate_dense", gate)
        L.put(g + "/_feedforward_output_dense", down)
        L.put(g + "/_feedforward_layernorm", w[p + "post_attention_layernorm.weight"])
    L.put(L.layer("RMSNormalization" if gemma else style[2]), w["norm.weight"])
    config = dict(vocabulary_size=c["vocab_size"], num_layers=c["num_hidden_layers"],
                  num_query_heads=H, num_key_value_heads=K, hidden_dim=C,
                  layer_norm_epsilon=c["rms_norm_eps"], dropout=0.0)
    if gemma:
        config.update(intermediate_dim=2 * c["intermediate_size"], head_dim=D,
                      query_head_dim_normalize=True, use_post_ffw_norm=gemma2,
                      use_post_attention_norm=gemma2,
                      final_logit_soft_cap=c.get("final_logit_softcapping") if gemma2 else None,
                      attention_logit_soft_cap=c.get("attn_logit_softcapping") if gemma2 else None,
                      sliding_window_size=c.get("sliding_window", 4096) if gemma2 else 4096,
                      use_sliding_window_attention=gemma2)
        cls = "GemmaBackbone"
    else:
        config.update(intermediate_dim=c["intermediate_size"], rope_max_wavelength=c["rope_theta"])
        cls = style[0]
    if name == "llama":
        r = c["rope_scaling"]
        config.update(rope_position_scaling_factor=1.0, rope_frequency_adjustment_factor=r["factor"],
                      rope_low_freq_factor=r["low_freq_factor"],
                      rope_high_freq_factor=r["high_freq_factor"],
                      rope_pretraining_sequence_length=r["original_max_position_embeddings"],
                      tie_word_embeddings=tied)
    if name == "mistral":
        config.update(rope_scaling_factor=1.0, sliding_window=c["sliding_window"])
    if name == "qwen2":
        config.update(rope_scaling_factor=1.0, tie_word_embeddings=tied,
                      use_sliding_window_attention=c["use_sliding_window"],
                      sliding_window_size=c["sliding_window"])
    family = {"qwen2": "qwen", "gemma2": "gemma"}.get(name, name)
    write_preset(name + ("_bf16" if bf16 else ""), family, cls, config, L, shards=shards,
                 bf16=bf16)


def phi3():
    """KerasHub's Phi3Backbone (keras-hub's models/phi3/phi3_backbone.py,
    phi3_decoder.py, phi3_attention.py) from tests/data/hf_phi3: the fused
    qkv_proj sliced into query, key and value (heads x head_dim, then kv
    heads x head_dim twice) and gate_up_proj into gate and up, as keras-hub's
    utils/transformers/convert_phi3.py does."""
    hf_dir = os.path.join(ROOT, "hf_phi3")
    c = json.load(open(os.path.join(hf_dir, "config.json")))
    w = {k.removeprefix("model."): v for k, v in load_hf(hf_dir).items()}
    C, H, K, I = (c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"],
                  c["intermediate_size"])
    D = C // H
    L = Layers()
    L.put(L.layer("ReversibleEmbedding"), w["embed_tokens.weight"], w["lm_head.weight"].T)
    for i in range(c["num_hidden_layers"]):
        p = f"layers.{i}."
        qkv = w[p + "self_attn.qkv_proj.weight"]
        q, k, v = qkv[:H * D], qkv[H * D:(H + K) * D], qkv[(H + K) * D:]
        gate, up = w[p + "mlp.gate_up_proj.weight"][:I], w[p + "mlp.gate_up_proj.weight"][I:]
        g = L.layer("Phi3Decoder")
        L.put(g + "/pre_attention_layernorm", w[p + "input_layernorm.weight"])
        L.put(g + "/attention/query_dense", q.T.reshape(C, H, D))
        L.put(g + "/attention/key_dense", k.T.reshape(C, K, D))
        L.put(g + "/attention/value_dense", v.T.reshape(C, K, D))
        L.put(g + "/attention/output_dense", w[p + "self_attn.o_proj.weight"].T.reshape(H, D, C))
        L.put(g + "/post_attention_layernorm", w[p + "post_attention_layernorm.weight"])
        L.put(g + "/feedforward_intermediate_dense", up.T)
        L.put(g + "/feedforward_gate_dense", gate.T)
        L.put(g + "/feedforward_output_dense", w[p + "mlp.down_proj.weight"].T)
    L.put(L.layer("Phi3LayerNorm"), w["norm.weight"])
    config = dict(vocabulary_size=c["vocab_size"], num_layers=c["num_hidden_layers"],
                  hidden_dim=C, intermediate_dim=I, num_query_heads=H, num_key_value_heads=K,
                  layer_norm_epsilon=c["rms_norm_eps"], dropout=0.0,
                  max_sequence_length=c["max_position_embeddings"],
                  pretraining_sequence_length=c["original_max_position_embeddings"],
                  rope_max_wavelength=c["rope_theta"], rope_scaling_type=None,
                  rope_scaling_short_factor=None, rope_scaling_long_factor=None)
    write_preset("phi3", "phi3", "Phi3Backbone", config, L)


def llama_hf():
    """A Llama with head_dim = hidden / heads, as a Hugging Face directory."""
    src = json.load(open(os.path.join(ROOT, "hf_llama", "config.json")))
    c = dict(src, head_dim=src["hidden_size"] // src["num_attention_heads"], torch_dtype="float32")
    C, H, K, D, I, V = (c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"],
                        c["head_dim"], c["intermediate_size"], c["vocab_size"])
    g = torch.Generator().manual_seed(37)
    r = lambda *s: torch.randn(*s, generator=g) * 0.2  # noqa: E731
    t = {"model.embed_tokens.weight": r(V, C), "model.norm.weight": 1 + r(C), "lm_head.weight": r(V, C)}
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        t.update({p + "input_layernorm.weight": 1 + r(C), p + "post_attention_layernorm.weight": 1 + r(C),
                  p + "self_attn.q_proj.weight": r(H * D, C), p + "self_attn.k_proj.weight": r(K * D, C),
                  p + "self_attn.v_proj.weight": r(K * D, C), p + "self_attn.o_proj.weight": r(C, H * D),
                  p + "mlp.gate_proj.weight": r(I, C), p + "mlp.up_proj.weight": r(I, C),
                  p + "mlp.down_proj.weight": r(C, I)})
    d = os.path.join(OUT, "hf_llama")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
    save_safetensors(os.path.join(d, "model.safetensors"), t, {"format": "pt"})
    return d


def tokenizers():
    """Tokenizer-only presets over the vocabularies of tests/data/tokenizers:
    tokenizer.json (KerasHub's layer config) and assets/tokenizer/."""
    src = os.path.join(ROOT, "tokenizers")
    for name, family, cls, files, config in [
        ("sentencepiece", "llama", "LlamaTokenizer",
         {"vocabulary.spm": "sentencepiece/tokenizer.model"}, {}),
        ("gpt2", "gpt2", "GPT2Tokenizer",
         {"vocabulary.json": "gpt2_files/vocab.json", "merges.txt": "gpt2_files/merges.txt"},
         {"add_prefix_space": False}),
        ("wordpiece", "bert", "BertTokenizer", {"vocabulary.txt": "wordpiece_files/vocab.txt"},
         {"lowercase": True}),
    ]:
        d = os.path.join(OUT, "tokenizers", name)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(os.path.join(d, "assets", "tokenizer"))
        for dst, s in files.items():
            shutil.copy(os.path.join(src, s), os.path.join(d, "assets", "tokenizer", dst))
        t = layer_config(f"keras_hub.src.models.{family}.{snake(cls)}", cls,
                         dict(config_file="tokenizer.json", sequence_length=None, **config), snake(cls))
        with open(os.path.join(d, "tokenizer.json"), "w") as f:
            json.dump(t, f, indent=2)
        write_preprocessor(d, family)
    # Llama 3 and Qwen2 from their Hugging Face tokenizer.json, as KerasHub's
    # converters (utils/transformers/convert_llama3.py, convert_qwen.py) take
    # them: the model's vocabulary with the added tokens in it, the merges as
    # "left right" lines. The qwen2 config lists its unsplittable_tokens (as
    # BytePairTokenizer.get_config saves them; the converter passes every
    # added token); the llama3 one leaves them to Llama3Tokenizer's defaults.
    for name, family, cls, unsplittable in [("llama3", "llama3", "Llama3Tokenizer", False),
                                            ("qwen2", "qwen", "QwenTokenizer", True)]:
        hf = json.load(open(os.path.join(src, name + "_hub", "tokenizer.json"), encoding="utf-8"))
        vocab = dict(hf["model"]["vocab"])
        for t in hf["added_tokens"]:
            vocab[t["content"]] = t["id"]
        d = os.path.join(OUT, "tokenizers", name)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(os.path.join(d, "assets", "tokenizer"))
        with open(os.path.join(d, "assets", "tokenizer", "vocabulary.json"), "w",
                  encoding="utf-8") as f:
            json.dump(vocab, f, ensure_ascii=False)
        with open(os.path.join(d, "assets", "tokenizer", "merges.txt"), "w", encoding="utf-8") as f:
            for m in hf["model"]["merges"]:
                f.write((m if isinstance(m, str) else " ".join(m)) + "\n")
        config = dict(config_file="tokenizer.json", sequence_length=None, add_prefix_space=False)
        if unsplittable:
            config["unsplittable_tokens"] = [t["content"] for t in hf["added_tokens"]]
        t = layer_config(f"keras_hub.src.models.{family}.{snake(cls)}", cls, config, snake(cls))
        with open(os.path.join(d, "tokenizer.json"), "w") as f:
            json.dump(t, f, indent=2)
        write_preprocessor(d, family)


def write_preprocessor(d, family):
    """A CausalLM preprocessor.json (none for BERT's classifier)."""
    if family == "bert":
        return
    p = layer_config(f"keras_hub.src.models.{family}.{family}_causal_lm_preprocessor",
                     family.capitalize() + "CausalLMPreprocessor",
                     dict(sequence_length=1024, add_start_token=True, add_end_token=True),
                     "preprocessor")
    with open(os.path.join(d, "preprocessor.json"), "w") as f:
        json.dump(p, f, indent=2)


def gemma2_hf():
    """Gemma 2 as KerasHub has it (queries scaled by head_dim, the window on
    the even layers) with the sizes of tests/data/hf_gemma2, random weights,
    as a Hugging Face directory."""
    src = json.load(open(os.path.join(ROOT, "hf_gemma2", "config.json")))
    c = dict(src, query_pre_attn_scalar=src["head_dim"])
    C, H, K, D, I, V = (c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"],
                        c["head_dim"], c["intermediate_size"], c["vocab_size"])
    g = torch.Generator().manual_seed(41)
    r = lambda *s: torch.randn(*s, generator=g) * 0.3  # noqa: E731
    t = {"model.embed_tokens.weight": r(V, C), "model.norm.weight": r(C)}
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        for n in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                  "post_feedforward_layernorm"):
            t[p + n + ".weight"] = r(C)
        t.update({p + "self_attn.q_proj.weight": r(H * D, C), p + "self_attn.k_proj.weight": r(K * D, C),
                  p + "self_attn.v_proj.weight": r(K * D, C), p + "self_attn.o_proj.weight": r(C, H * D),
                  p + "mlp.gate_proj.weight": r(I, C), p + "mlp.up_proj.weight": r(I, C),
                  p + "mlp.down_proj.weight": r(C, I)})
    d = os.path.join(OUT, "hf_gemma2")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
    save_safetensors(os.path.join(d, "model.safetensors"), t, {"format": "pt"})
    return d


# Where MultiHeadAttention's sublayers go: "3.3" (public names) or "3.0".
KERAS_LAYOUT = "3.3"


def mha(attr):
    """A MultiHeadAttention sublayer's group name ("_query_dense") in KERAS_LAYOUT."""
    return attr.lstrip("_") if KERAS_LAYOUT == "3.3" else attr


def main():
    global KERAS_LAYOUT
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keras-layout", choices=["3.0", "3.3"], default="3.3",
                        help="the Keras version whose model.weights.h5 layout to write")
    parser.add_argument("--only", choices=["phi3"],
                        help="write this preset alone (the others stay as committed)")
    args = parser.parse_args()
    KERAS_LAYOUT = args.keras_layout
    os.makedirs(OUT, exist_ok=True)
    if args.only:
        return {"phi3": phi3}[args.only]()
    tokenizers()
    gpt2()
    opt()
    encoder("bert")
    encoder("roberta")
    decoder("llama", llama_hf(), shards=2)
    for name in ("mistral", "qwen2", "gemma"):
        decoder(name, os.path.join(ROOT, "hf_" + name))
    decoder("gemma2", gemma2_hf())
    decoder("gemma", os.path.join(ROOT, "hf_gemma"), bf16=True)
    phi3()


if __name__ == "__main__":
    main()
