// Typed attributes of the primitives: each op reads exactly one of these
// structs (see the Op enum in graph.h for which), so a field always means one
// thing. Node::attr<T>() returns it.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "autoshard/tensor/reduce_op.h"
#include "autoshard/tensor/tensor.h"

namespace autoshard {

struct NoAttrs {};

// Parameter (a weight, or optimizer state of a weight) and Input (fed per
// step). Optimizer state is typed: `slot` names it and `name` is the weight's
// path, so no code parses a prefix out of a string.
struct LeafAttrs {
  std::string name;  // the weight's path ("h.3.attn.query.kernel") or the input's name
  std::string slot;  // "" for a weight; "m", "v", "momentum" for optimizer state of `name`
  Shape shape;
  DType dtype = DType::F32;
  // State a model keeps between runs but neither trains nor saves (the keys
  // and values of a generation's cache): "buffer.<path>".
  bool buffer = false;
  bool is_slot() const { return !slot.empty(); }
  // The key in state files: the path, or "optimizer.<slot>.<path>".
  std::string key() const {
    if (buffer) return "buffer." + name;
    return slot.empty() ? name : "optimizer." + slot + "." + name;
  }
};

struct FillAttrs {  // Constant
  Shape shape;
  double value = 0;
};
struct IotaAttrs {
  Shape shape;
};

// A parsed two-operand einsum "a,b->out" (each a string of letters).
struct EinsumAttrs {
  std::string a, b, out;
  std::string equation() const { return a + "," + b + "->" + out; }
};

struct ScaleAttrs {
  double factor = 1;
};
struct GeluAttrs {
  bool tanh_approximation = true;  // GPT-2's; false: exact erf
};
struct AxesAttrs {  // ReduceSum: the axes summed away, ascending
  std::vector<int64_t> axes;
};
struct ShapeAttrs {  // BroadcastTo, Reshape: the output shape
  Shape shape;
};
struct PermAttrs {  // Transpose: output dim i is input dim perm[i]
  std::vector<int64_t> perm;
};
struct SoftmaxAttrs {
  bool causal = false;  // mask over the last two axes (query, key)
};
// Attention, AttentionGrad. With a fourth input, positions [t] (i32, a
// generation's queries at their places in a key-value cache), query i sees
// keys 0 .. positions[i] instead.
struct AttentionAttrs {
  bool causal = false;  // query i sees keys up to i + (keys - queries)
  double scale = 1;     // scores = scale * q . k
  int wrt = -1;         // AttentionGrad: the input differentiated (0 q, 1 k, 2 v)
  // Sliding window (causal only): a query sees at most the last `window`
  // keys up to its own (Mistral's sliding_window); 0: all of them.
  int64_t window = 0;
};
// Rotary position embedding (RoFormer) in Hugging Face's rotate-half layout:
// element i < d/2 of each head pairs with element i + d/2, and the pair turns
// by position * inv_freq[i], inv_freq[i] = theta^(-2i/d).
struct RotaryAttrs {
  double theta = 10000;
  // Llama 3's frequency scaling (rope_scaling type "llama3"); factor 0: none.
  double factor = 0, low_freq_factor = 1, high_freq_factor = 4;
  double original_max_positions = 8192;
  bool inverse = false;  // turn by -angle (the gradient)
};
struct EpsilonAttrs {  // Normalize, NormalizeGrad
  double epsilon = 0;
  bool center = true;  // false: RMS normalisation, x / sqrt(mean(x^2) + epsilon)
};

// Where one device's block sits in the global value an op reads or writes,
// for kernels that depend on global positions (dropout's mask, a row-split
// embedding table, a class-split loss). Empty: the whole value.
struct ShardOrigin {
  Shape global_shape;
  std::vector<int64_t> offsets;
  bool whole() const { return global_shape.empty(); }
};

struct ClassShardAttrs {  // CrossEntropyStats, CrossEntropyStatsGrad: where the logits' block sits
  ShardOrigin logits;
};
struct GatherAttrs {
  ShardOrigin table;
  int64_t id_offset = 0;  // id i reads row i + id_offset (OPT's positions)
};
struct ScatterAddAttrs {
  Shape table_shape;  // the output
  ShardOrigin table;
  int64_t id_offset = 0;  // as the gather's
};
struct DropoutAttrs {
  double rate = 0;
  uint64_t seed = 0;
  ShardOrigin origin;  // of the output
};
struct ClipAttrs {  // ClipScale
  double max_norm = 0;
};
struct AdamAttrs {
  double beta_1 = 0.9, beta_2 = 0.999, epsilon = 1e-8, weight_decay = 0;
  bool decoupled = false;  // AdamW
};
struct SgdAttrs {
  double momentum = 0, weight_decay = 0;
  bool nesterov = false;
};

// Collectives over one mesh axis (partitioned programs only).
struct AllReduceAttrs {
  int axis = -1;
  ReduceOp op = ReduceOp::Sum;
};
struct SplitAttrs {  // AllGather, ReduceScatter along `dim`
  int axis = -1;
  int dim = 0;
  std::vector<int64_t> sizes;  // every member's block size along dim
  int index = 0;               // this member's position on the axis
};
struct SliceAttrs {
  int dim = 0;
  int64_t begin = 0, size = 0;
};

using OpAttrs =
    std::variant<NoAttrs, LeafAttrs, FillAttrs, IotaAttrs, EinsumAttrs, ScaleAttrs, GeluAttrs,
                 AxesAttrs, ShapeAttrs, PermAttrs, SoftmaxAttrs, AttentionAttrs, RotaryAttrs,
                 EpsilonAttrs, ClassShardAttrs, GatherAttrs, ScatterAddAttrs, DropoutAttrs,
                 ClipAttrs, AdamAttrs, SgdAttrs, AllReduceAttrs, SplitAttrs, SliceAttrs>;

}  // namespace autoshard
