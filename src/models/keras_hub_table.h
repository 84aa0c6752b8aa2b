// Building a KerasHub variable table (autoshard/io/keras_hub.h): the
// helpers every family's keras_hub.cc uses, and the variables of the
// keras-hub layers several backbones share (MultiHeadAttention, the
// Transformer feed-forward).
#pragma once

#include <string>
#include <vector>

#include "autoshard/error.h"
#include "autoshard/io/keras_hub.h"

namespace autoshard::keras_hub {

// "name" for the first of its class, "name_k" for the k-th repetition.
std::string numbered(const std::string& name, int64_t k);

// Collects variables: `path` and `h5` prefixes joined to each variable's own
// name and index.
class Table {
 public:
  Variables out;

  // A variable stored as the weight is (same shape, same order).
  void same(const std::string& weight, const std::string& path, const std::string& h5,
            const Shape& shape, bool task = false) {
    std::vector<int> id(shape.size());
    for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<int>(i);
    add(weight, path, h5, shape, shape, id, task);
  }
  // A Keras (in, out) kernel of an (out, in) weight.
  void transposed(const std::string& weight, const std::string& path, const std::string& h5,
                  int64_t in, int64_t out, bool task = false) {
    add(weight, path, h5, {in, out}, {in, out}, {1, 0}, task);
  }
  void add(const std::string& weight, const std::string& path, const std::string& h5,
           const Shape& keras, const Shape& split, const std::vector<int>& perm, bool task = false,
           int64_t row_offset = 0) {
    out.variables.push_back({weight, path, h5, task, keras, split, perm, row_offset});
  }
  // A LayerNormalization's gamma and beta.
  void layer_norm(const std::string& weight, const std::string& path, const std::string& h5,
                  int64_t C) {
    same(weight + ".gamma", path + "/gamma", h5 + "/vars/0", {C});
    same(weight + ".beta", path + "/beta", h5 + "/vars/1", {C});
  }
};

// Keras's MultiHeadAttention (TransformerEncoder/Decoder): kernels
// (C, H, D) and (H, D, C), biases (H, D) and (C); autoshard's weight paths
// for query, key, value and output, and their layouts.
struct MhaNames {
  std::string q, k, v, o;  // autoshard prefixes ("" for a Keras-only variable)
  bool heads_first;        // autoshard q/k/v kernels [H, D, C] (else [C, H, D], GPT-2)
  bool key_bias;           // autoshard has the key's bias
};

void multi_head_attention(Table& t, const std::string& path, const std::string& h5, int64_t C,
                          int64_t H, int64_t D, const MhaNames& n);

// TransformerEncoder/Decoder's feed-forward: the intermediate (C -> F) and
// output (F -> C) Dense layers, under autoshard's prefixes `up` and `down`;
// autoshard's kernels are Keras's transposed, but GPT-2's (Conv1D's layout).
void feedforward(Table& t, const std::string& path, const std::string& h5, int64_t C, int64_t F,
                 const std::string& up, const std::string& down, bool transposed);

}  // namespace autoshard::keras_hub
