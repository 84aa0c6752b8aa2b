// Typed attributes of the primitives: each op reads exactly one of these
// structs (see the Op enum in graph.h for which), so a field always means one
// thing. Node::attr<T>() returns it.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "autoshard/shared_list.h"
#include "autoshard/tensor/reduce_op.h"
#include "autoshard/tensor/tensor.h"
#include "autoshard/tensor/weights_dtype.h"

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
  // A weight held for decoding in bf16 or int8 besides its f32 values
  // (nn/generation.h's quantize_weights; Graph::hold_weights): the products
  // that read it are QuantizedEinsum ops. F32 for everything else.
  WeightsDType format = WeightsDType::F32;
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
  // QuantizedEinsum only: the operand (0: a, 1: b) that is a weight held in
  // `compact_format` (LeafAttrs::format); -1 and F32 for an Einsum.
  int compact_operand = -1;
  WeightsDType compact_format = WeightsDType::F32;
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
  int wrt = -1;  // AttentionGrad: the input differentiated (0 q, 1 k, 2 v), 3: statistics, 4: all
  // Sliding window (causal only): a query sees at most the last `window`
  // keys up to its own (Mistral's sliding_window); 0: all of them.
  int64_t window = 0;
  // Soft-capping (Gemma 2's attn_logit_softcapping): each score becomes
  // softcap * tanh(score / softcap) before the mask and softmax; 0: none.
  double softcap = 0;
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

// Conv, ConvGradInput, ConvGradFilter: channels last, 1 or 2 spatial dims.
// y[b, o, co] = sum over taps k and the input channels ci of co's group of
//   x[b, o * stride - pad_lo + k * dilation, ci] * w[k, ci, co],
// reading zeros outside x. The output's extent along a spatial dim is
// (in + pad_lo + pad_hi - dilation * (k - 1) - 1) / stride + 1.
struct ConvAttrs {
  std::vector<int64_t> strides, dilations;  // per spatial dim
  // Zeros before and after x along each spatial dim (TensorFlow's 'same'
  // puts the odd one after). Negative in a device's copy whose band of x
  // starts before (or ends after) what its band of y reads.
  std::vector<int64_t> pad_lo, pad_hi;
  int64_t groups = 1;  // cin and cout split in `groups` independent blocks
  Shape shape;         // ConvGradInput: x's shape; ConvGradFilter: w's (the output's)
  // A grouped convolution whose channels are split (a device's copy): the
  // global index of its first channel (output channels; ConvGradInput's
  // input channels) and the global count of output channels (0: whole).
  int64_t channel_offset = 0, channels = 0;
};
// Pool, PoolGrad: max or average over windows of the spatial dims, channels
// last. Positions outside x are skipped (an average divides by the count of
// positions inside x, Keras's 'same').
struct PoolAttrs {
  bool max = true;
  std::vector<int64_t> window, strides, pad_lo, pad_hi;  // per spatial dim, as ConvAttrs
};
// Unary, UnaryGrad: the function, Keras's definitions.
enum class UnaryFn : uint8_t {
  Sigmoid,
  HardSigmoid,  // relu6(x + 3) / 6
  HardSilu,     // x * hard_sigmoid(x)
  Relu6,
  LeakyRelu,  // x < 0: alpha * x
  Elu,        // x < 0: alpha * (exp(x) - 1)
  Selu,
  Softplus,
  Softsign,
  Mish,  // x * tanh(softplus(x))
  Exp,
  Log,
  Sqrt,
  Rsqrt,
  Square,
  Abs,
  SoftCap,  // alpha * tanh(x / alpha) (Gemma 2's final logits)
};
struct UnaryAttrs {
  UnaryFn fn = UnaryFn::Sigmoid;
  double alpha = 0;  // LeakyRelu's negative slope, Elu's alpha, SoftCap's cap
};
const char* unary_name(UnaryFn fn);
// Pad: `lo[d]` zeros before and `hi[d]` after dim d; negative values crop.
struct PadAttrs {
  std::vector<int64_t> lo, hi;
};
// Concat: the inputs (equal off `axis`) one after another along `axis`.
struct ConcatAttrs {
  int64_t axis = 0;
};
// Resize: image resampling along `dim` to `size` positions with half-pixel
// centres and no antialiasing (tf.image.resize, jax.image.resize; Keras's
// Resizing): bilinear (two taps, clamped at the edges) or nearest. With
// `adjoint`, the transposed map (the gradient): from `size` positions back.
struct ResizeAttrs {
  int dim = 1;
  int64_t size = 1;
  bool nearest = false;
  bool adjoint = false;
};
// HaloExchange (partitioned programs only): a value split along `dim` over
// mesh `axis` (every member's block size in `sizes`) becomes, on member i,
// the rows [begins[i], ends[i]) of the whole: its band plus the rows its
// neighbours hold that a window reads (a convolution's halo).
struct HaloAttrs {
  int axis = -1;
  int dim = 0;
  std::vector<int64_t> sizes, begins, ends;
  int index = 0;  // this member's position on the axis
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
  // Keras 2 and 3: epsilon is added to sqrt(v) before the bias correction
  // (Kingma and Ba's "epsilon hat"); else after it (PyTorch, TensorFlow.js).
  bool epsilon_hat = false;
};
struct SgdAttrs {
  double momentum = 0, weight_decay = 0;
  bool nesterov = false;
};

// Every member's block size along one dimension over a mesh axis (a
// collective's), immutable and shared: the copies of a partitioned
// program's attributes share one list. On a mesh of 1,024 devices each
// list has 1,024 entries, and device 0's program holds tens of thousands of
// collectives over a few distinct (extent, axis) pairs; holding a list per
// collective made the partition mostly malloc and page faults. Reads as a
// const std::vector<int64_t>.
using BlockSizes = SharedList<int64_t>;

// Collectives over one mesh axis (partitioned programs only).
struct AllReduceAttrs {
  int axis = -1;
  ReduceOp op = ReduceOp::Sum;
};
struct SplitAttrs {  // AllGather, ReduceScatter along `dim`
  int axis = -1;
  int dim = 0;
  BlockSizes sizes;  // every member's block size along dim
  int index = 0;     // this member's position on the axis
};
// Moves a split over one mesh axis from dimension `gather_dim` (whole
// afterwards) to `split_dim` (whole before): each member sends every other
// the part of its block that lands in the other's new block.
struct AllToAllAttrs {
  int axis = -1;
  int gather_dim = 0, split_dim = 0;
  BlockSizes gather_sizes;  // every member's block size along gather_dim now
  BlockSizes split_sizes;   // and along split_dim afterwards
  int index = 0;            // this member's position on the axis
};
struct SliceAttrs {
  int dim = 0;
  int64_t begin = 0, size = 0;
};

using OpAttrs =
    std::variant<NoAttrs, LeafAttrs, FillAttrs, IotaAttrs, EinsumAttrs, ScaleAttrs, GeluAttrs,
                 AxesAttrs, ShapeAttrs, PermAttrs, SoftmaxAttrs, AttentionAttrs, RotaryAttrs,
                 EpsilonAttrs, ClassShardAttrs, GatherAttrs, ScatterAddAttrs, DropoutAttrs,
                 ClipAttrs, AdamAttrs, SgdAttrs, AllReduceAttrs, SplitAttrs, SliceAttrs, ConvAttrs,
                 PoolAttrs, UnaryAttrs, PadAttrs, ConcatAttrs, ResizeAttrs, HaloAttrs,
                 AllToAllAttrs>;

}  // namespace autoshard
