// KerasHub presets' variables: for each backbone autoshard has an
// architecture for (each model family's table, src/models/<family>/
// keras_hub.cc: GPT2Backbone, BertBackbone, RobertaBackbone, OPTBackbone,
// LlamaBackbone, MistralBackbone, QwenBackbone, GemmaBackbone, with the
// TextClassifier heads of BERT and RoBERTa), every Keras variable and the
// autoshard weight it holds.
//
// Each variable has two names. `path` is Keras 3's `variable.path`, the name
// scopes of the layers that built it ("transformer_layer_0/self_attention/
// query/kernel"), which a `keras.distribution.LayoutMap` key matches.
// `h5_path` is where saving_lib stores it in model.weights.h5 (task heads:
// task.weights.h5): the functional model's `layers` list names each layer's
// group after its class in snake case, numbered by repetition
// ("layers/llama_transformer_decoder_1"), nested layers go by the attribute
// that holds them, public attributes before private ones, so that a layer
// reachable by both is stored under its public name (saving_lib.py
// `_walk_saveable` and `_name_key`: "private attributes are visited last"),
// and a layer's own variables are "vars/0", "vars/1", ... in its variables'
// order. Keras's MultiHeadAttention (GPT-2, BERT, RoBERTa and OPT's
// attention, through KerasHub's TransformerEncoder/Decoder and
// CachedMultiHeadAttention) exposes its sublayers as the properties
// query_dense, key_dense, value_dense and output_dense since Keras 3.3
// (keras/src/layers/attention/multi_head_attention.py), so presets saved
// since then hold "_self_attention_layer/query_dense/vars/0" where Keras
// 3.0-3.2 wrote "_self_attention_layer/_query_dense/vars/0". The tables name
// what current Keras writes; the reader takes either (other_keras_layout).
// KerasHub's own attention classes (Llama, Mistral, Qwen, Gemma) have no
// such properties: "_query_dense" in every version.
//
// Keras stores kernels (in, out) and EinsumDense kernels with heads as their
// own dims (Llama's query (hidden, heads, head_dim), Gemma's
// (heads, hidden, head_dim)); autoshard keeps nn.Linear's (out, in) order
// with kv heads and their query group as separate dims. The weight is the
// Keras variable viewed as `split` (its dims factored, same element order)
// and transposed by `perm`. Followed: keras-hub's models/<family>/*.py and
// utils/transformers/convert_<family>.py (see docs/keras-hub.md).
#pragma once

#include <string>
#include <vector>

#include "autoshard/tensor/tensor.h"

namespace autoshard::keras_hub {

struct Variable {
  std::string weight;   // autoshard weight path; empty: none (GPT-2's key bias,
                        // which softmax ignores: skipped on read, zeros on write)
  std::string path;     // Keras variable.path
  std::string h5_path;  // dataset in the weights file
  bool task = false;    // in task.weights.h5 (a TextClassifier head)
  Shape keras_shape;
  // The weight's dim i is dim perm[i] of the variable viewed as `split`.
  Shape split;
  std::vector<int> perm;
  // Keras rows [0, R) are the weight's rows [row_offset, row_offset + R);
  // the weight's other rows are not stored (they are zeros): OPT's and
  // RoBERTa's positions, which Hugging Face offsets by 2.
  int64_t row_offset = 0;

  // The weight's shape (split permuted, rows plus row_offset).
  Shape weight_shape() const;
  // For each weight dim, the Keras dim it lies in (a LayoutMap's tuple names
  // Keras dims: a weight dim split over an axis splits that Keras dim).
  std::vector<int> keras_dims() const;
  // Whether the weight's dim `i` is the outer (major) part of its Keras dim,
  // so that splitting it splits the Keras dim into contiguous blocks.
  bool major_in_keras_dim(int i) const;
};

// A backbone's (and head's) variables, in saving order.
// `h5_path` in the other layout Keras has written for it: a
// MultiHeadAttention sublayer's public name ("query_dense", Keras >= 3.3)
// for its private one ("_query_dense", Keras 3.0-3.2) and back; "" for a
// path that has one layout only.
std::string other_keras_layout(const std::string& h5_path);

struct Variables {
  std::string class_name;       // "LlamaBackbone"
  std::string task_class_name;  // "LlamaCausalLM", "BertTextClassifier"
  std::vector<Variable> variables;
  // autoshard weights no Keras variable holds; zeros when read from a
  // preset (RoBERTa's one token-type row; written into the positions).
  std::vector<std::string> zero_weights;
};

}  // namespace autoshard::keras_hub
