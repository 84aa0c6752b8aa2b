// Graph: the one IR of autoshard. A training step (forward, loss, backward,
// optimizer update) is a single Graph of primitive ops over values with static
// global shapes. Every later stage (autodiff, planning, partitioning,
// execution) reads or rewrites this structure.
//
// Each node produces exactly one value; a node's id is its value's id. Nodes
// are appended in topological order, so iterating by id is a valid schedule.
// Appending never moves existing nodes: a `const Node&` stays valid while
// more ops are added (autodiff rules read a node while appending its
// gradient).
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <vector>

#include "autoshard/ir/op_attrs.h"
#include "autoshard/tensor/tensor.h"

namespace autoshard {

// The primitives. Each is defined in one place under src/ir/ops/ with its
// shape rule, CPU kernel, gradient, sharding rule and planner view (see
// op_def.h). The attribute struct each op reads is named after it.
enum class Op : uint8_t {
  Parameter,  // LeafAttrs: persistent state (weights, optimizer slots)
  Input,      // LeafAttrs: fed per step (tokens, targets)
  Constant,   // FillAttrs: every element = value
  Iota,       // IotaAttrs: i32 0, 1, ... along the last axis
  Einsum,     // EinsumAttrs: two operands, "btc,cd->btd"
  // EinsumAttrs: an einsum one of whose operands (compact_operand) is a
  // weight held in bf16 or int8 (compact_format) besides its dequantized f32
  // values: one-row products (a decode step's) read the compact copy
  QuantizedEinsum,
  Add,
  Sub,
  Mul,
  Div,    // elementwise with numpy broadcasting
  Scale,  // ScaleAttrs: y = factor * x
  Gelu,
  GeluGrad,  // GeluAttrs; GeluGrad(x, dy)
  Relu,
  ReluGrad,  // ReluGrad(x, dy)
  Tanh,
  TanhGrad,       // TanhGrad(y, dy)
  Silu,           // x * sigmoid(x) (swish)
  SiluGrad,       // SiluGrad(x, dy)
  ReduceSum,      // AxesAttrs: sum over axes, dropping them
  BroadcastTo,    // ShapeAttrs: numpy rules; the adjoint of ReduceSum
  Softmax,        // SoftmaxAttrs: over the last axis
  SoftmaxGrad,    // (y, dy) -> dx
  Normalize,      // EpsilonAttrs: (x - mean) / sqrt(var + epsilon) over the last axis (or RMS)
  NormalizeGrad,  // EpsilonAttrs: (x, dy) -> dx
  // Softmax cross-entropy in three steps, so that a class axis split over
  // devices needs only collectives between them (never gathered logits):
  RowMax,                  // (x [..., V]) -> [...] max over the last axis
  CrossEntropyStats,       // ClassShardAttrs: (logits [..., V], targets [...] i32, max [...])
                           //   -> [..., 2]: sum_c exp(x_c - max), and the target's logit
  CrossEntropyFinish,      // (stats [..., 2], max [...]) -> loss [...] = log(s) + max - x_t
  CrossEntropyFinishGrad,  // (stats, dloss [...]) -> dstats [..., 2] = (dloss / s, -dloss)
  CrossEntropyStatsGrad,   // ClassShardAttrs: (logits, targets, max, dstats [..., 2]) -> dlogits
  Gather,                  // GatherAttrs: (table [V, ...], ids [...] i32) -> [..., ...]
  ScatterAdd,              // ScatterAddAttrs: (ids, dy) -> table-shaped sum of dy rows per id
  Reshape,                 // ShapeAttrs (shares storage)
  Transpose,               // PermAttrs
  Dropout,                 // DropoutAttrs: mask keyed by (seed, step, element index)
  SumSquares,              // sum of x^2 over all elements -> scalar
  ClipScale,               // ClipAttrs: (sumsq) -> min(1, max_norm / (sqrt(sumsq) + 1e-6))
  Attention,      // AttentionAttrs: (q [b,t,h,dk], k [b,s,h,dk], v [b,s,h,dv]) -> [b,t,h,dv]
  AttentionGrad,  // AttentionAttrs: (q, k, v, out, dout[, stats]) -> d(q, k or v: attrs.wrt),
                  // (wrt 3) the softmax statistics the gradients read, or (wrt 4) dq, dk and
                  // dv in one pass, stacked [3, b, max(t, s), heads..., max(dk, dv)]
  Rotary,         // RotaryAttrs: (x [b, t, ..., d], positions [t] i32) -> x's shape
  CacheWrite,     // (cache [b, s, ...], rows [b, t, ...], positions [t] i32) writes
                  //   rows[:, i] into cache[:, positions[i]] in place -> the cache
  // Keras's LSTM step, fused (ops::lstm_cell): (x [b, 4, u], r [b, 4, u], state [2, b, u][,
  // mask [b, 1]]) -> the next state; its gradients, of (x, r, state[, mask], dnext [2, b, u]):
  // dz [b, 4, u] (of x and r alike) and dstate [2, b, u]
  LstmCell,
  LstmCellGrad,
  LstmCellStateGrad,
  // Keras's GRU step (reset_after, tanh, sigmoid), fused (ops::gru_cell): (x [b, 3, u], r [b, 3,
  // u], h [b, u][, mask [b, 1]]) -> the next h; its gradients, of (x, r, h[, mask], dnext [b,
  // u]): dx [b, 3, u], dr [b, 3, u] (they differ in the candidate's row) and dh [b, u]
  GruCell,
  GruCellGradX,
  GruCellGradR,
  GruCellGradH,
  // Vision ops, channels last (x [b, *spatial, c], 1 or 2 spatial dims):
  Conv,            // ConvAttrs: (x [b, *s, cin], w [*k, cin/groups, cout]) -> [b, *o, cout]
  ConvGradInput,   // ConvAttrs: (dy [b, *o, cout], w) -> dx [b, *s, cin] (attrs.shape)
  ConvGradFilter,  // ConvAttrs: (x, dy) -> dw [*k, cin/groups, cout] (attrs.shape)
  Pool,            // PoolAttrs: max or average over windows -> [b, *o, c]
  PoolGrad,        // PoolAttrs: (x, dy) -> dx
  Unary,           // UnaryAttrs: one elementwise function of x (sigmoid, elu, exp, ...)
  UnaryGrad,       // UnaryAttrs: (x, dy) -> dy * f'(x)
  Pad,             // PadAttrs: zeros before and after each dim (negative: cropped)
  Concat,          // ConcatAttrs: the inputs one after another along `axis`
  Resize,          // ResizeAttrs: one dim resampled (bilinear, nearest), or the adjoint
  AdamUpdate,      // AdamAttrs: (p, g, m, v, scale) updates p, m, v in place
  SgdUpdate,       // SgdAttrs: (p, g, buf, scale) updates p, buf in place
  Accumulate,      // (sum, g) adds g into sum in place -> sum; a step's first micro-batch
                   //   (StepContext::microbatch 0) writes g (gradient accumulation)
  // Partitioned programs only (inserted by the partitioner, never differentiated):
  AllReduce,      // AllReduceAttrs
  AllGather,      // SplitAttrs
  ReduceScatter,  // SplitAttrs
  Slice,          // SliceAttrs: along dim, [begin, begin + size)
  Assign,         // (target, value) copies value into target's storage (a side effect)
  HaloExchange,   // HaloAttrs: a band split along dim -> this member's window of it
  AllToAll,       // AllToAllAttrs: a value split along one dim -> split along another
  kCount
};

const char* op_name(Op op);

struct Node {
  Op op;
  std::vector<int> inputs;
  Shape shape;
  DType dtype = DType::F32;
  OpAttrs attrs;
  // The region the node was traced in (a transformer block, say), or -1:
  // regions are what activation recomputation recomputes, and repeated
  // regions are what the planner solves once.
  int region = -1;
  // The repeated block the node is part of, for the planner: the region it
  // was traced in, or for the nodes that differentiate or update a region's
  // values (gradients, optimizer state and updates), that region. -1: none.
  int block = -1;

  // This op's attributes; an internal error if the op carries another kind.
  template <typename A>
  const A& attr() const {
    const A* a = std::get_if<A>(&attrs);
    if (a == nullptr) [[unlikely]]
      wrong_attrs();
    return *a;
  }
  template <typename A>
  A& attr() {
    A* a = std::get_if<A>(&attrs);
    if (a == nullptr) [[unlikely]]
      wrong_attrs();
    return *a;
  }
  // This op's attributes if it carries attributes of kind A, else null: a
  // pass that needs, say, an einsum's equation asks for the equation, not
  // for the op.
  template <typename A>
  const A* attr_if() const {
    return std::get_if<A>(&attrs);
  }
  // Parameters and inputs.
  bool is_leaf() const { return op == Op::Parameter || op == Op::Input; }
  // A parameter: a weight, optimizer state or a buffer.
  bool is_parameter() const { return op == Op::Parameter; }
  // An input: data fed at each step.
  bool is_input() const { return op == Op::Input; }
  // A weight (a Parameter that is not optimizer state).
  bool is_weight() const { return op == Op::Parameter && !leaf().is_slot() && !leaf().buffer; }
  // A generation's cache (LeafAttrs::buffer).
  bool is_buffer() const { return op == Op::Parameter && leaf().buffer; }
  const LeafAttrs& leaf() const { return attr<LeafAttrs>(); }

 private:
  [[noreturn]] void wrong_attrs() const;
};

class Graph;

// A handle to one value of a Graph while it is being built (a traced tensor).
struct Value {
  Graph* graph = nullptr;
  int id = -1;

  const Node& node() const;
  const Shape& shape() const { return node().shape; }
  int rank() const { return static_cast<int>(shape().size()); }
  int64_t dim(int axis) const;
  DType dtype() const { return node().dtype; }
  bool valid() const { return graph != nullptr && id >= 0; }
};

class Graph {
 public:
  // Appends a node; its shape and dtype come from the op's shape rule, which
  // throws autoshard::Error on inconsistent inputs.
  Value add(Op op, std::vector<Value> inputs, OpAttrs attrs = NoAttrs{});
  // Parameters are unique by key: asking again returns the same value.
  Value parameter(const std::string& path, Shape shape, DType dtype = DType::F32);
  // Optimizer state `slot` ("m", "v", ...) of the weight at `weight_path`.
  Value optimizer_slot(const std::string& slot, const std::string& weight_path, Shape shape);
  Value input(const std::string& name, Shape shape, DType dtype = DType::F32);
  // A buffer (LeafAttrs::buffer) at `path`; unique by path like parameters.
  Value buffer(const std::string& path, Shape shape);
  // Weights declared from now on at these paths are held in these formats
  // (LeafAttrs::format), and ops::einsum makes a QuantizedEinsum of a
  // product that reads one: a generation step's graph over weights that
  // quantize_weights (nn/generation.h) rounded says so.
  void hold_weights(std::unordered_map<std::string, WeightsDType> formats) {
    weight_formats_ = std::move(formats);
  }

  // A frozen weight held in bf16 (half the bytes) after it was traced:
  // whether every op that reads it so far reads bf16 at that input
  // (OpDef::reads_bf16: products and embedding gathers, which widen as they
  // read), and the change itself (an internal error where it cannot be).
  // Ops added later that read it must read bf16 too, or Graph::add throws
  // naming the weight. Model::hold_frozen_weights_in_bf16 uses these.
  bool can_hold_in_bf16(int id) const;
  void hold_in_bf16(int id);

  const Node& node(int id) const { return nodes_[id]; }
  int size() const { return static_cast<int>(nodes_.size()); }
  Value value(int id) { return Value{this, id}; }
  // Node id of the parameter with this key (LeafAttrs::key) or of the input
  // with this name, or -1.
  int find_parameter(const std::string& key) const;
  int find_input(const std::string& name) const;
  std::vector<int> parameters() const;  // ids in creation order
  std::vector<int> inputs() const;

  // A readable listing, one node per line (for debugging and docs).
  std::string to_string() const;

  // Nodes added while a region is open belong to it (see Node::region).
  int open_region();
  void close_region() { current_region_ = -1; }
  int regions() const { return regions_; }
  // Nodes added from now on belong to region `r` (-1: none), which need not
  // be open: for rewrites that copy a traced graph region by region.
  void set_region(int r) {
    current_region_ = r;
    regions_ = std::max(regions_, r + 1);
  }
  // Nodes added outside any region belong to block `b` (see Node::block)
  // until it is set back to -1; autodiff and the optimizer set it.
  void set_block(int b) { current_block_ = b; }

 private:
  std::string describe(int id) const;
  void check_reads_bf16(Op op, int id, size_t input) const;

  std::deque<Node> nodes_;  // a deque: references survive push_back
  std::unordered_map<std::string, int> parameter_ids_, input_ids_;
  std::unordered_map<std::string, WeightsDType> weight_formats_;  // hold_weights
  int current_region_ = -1, regions_ = 0, current_block_ = -1;
};

// The nodes `outputs` depend on, plus every op with a side effect and what it
// depends on: the part of a Graph that must run.
std::vector<bool> live_nodes(const Graph& graph, const std::vector<int>& outputs);

}  // namespace autoshard
