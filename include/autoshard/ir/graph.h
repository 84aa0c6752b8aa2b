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

#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <vector>

#include "autoshard/tensor/tensor.h"

namespace autoshard {

// The primitives. Each is defined in one place under src/ir/ops/ with its
// shape rule, CPU kernel and gradient (see op_def.h).
enum class Op : uint8_t {
  Parameter,  // persistent state (weights, optimizer slots); text = path
  Input,      // fed per step (tokens, targets); text = name
  Constant,   // every element = f
  Iota,       // i32 0, 1, ... along the last axis of shape `ints`
  Einsum,     // two operands; text = equation such as "btc,cd->btd"
  Add,
  Sub,
  Mul,
  Div,    // elementwise with numpy broadcasting
  Scale,  // y = f * x
  Gelu,
  GeluGrad,  // i = 1: tanh approximation (GPT-2), 0: exact erf; GeluGrad(x, dy)
  Relu,
  ReluGrad,  // ReluGrad(x, dy)
  Tanh,
  TanhGrad,          // TanhGrad(y, dy)
  ReduceSum,         // sum over axes `ints`, dropping them
  BroadcastTo,       // to shape `ints` (numpy rules); the adjoint of ReduceSum
  Softmax,           // over the last axis; i = 1: causal mask over the last two axes
  SoftmaxGrad,       // (y, dy) -> dx
  Normalize,         // (x - mean) / sqrt(var + f) over the last axis
  NormalizeGrad,     // (x, dy) -> dx, f = epsilon
  CrossEntropy,      // (logits [..., V], targets [...] i32) -> loss per row [...]
  CrossEntropyGrad,  // (logits, targets, dloss) -> dlogits
  Gather,            // (table [V, ...], ids [...] i32) -> [..., ...]
  ScatterAdd,        // (ids, dy) -> table-shaped [ints] sum of dy rows per id
  Reshape,           // to shape `ints` (shares storage)
  Transpose,         // permutation `ints`
  Dropout,           // rate f, seed i; mask keyed by (seed, step, element index)
  SumSquares,        // sum of x^2 over all elements -> scalar
  ClipScale,         // (sumsq) -> min(1, f / (sqrt(sumsq) + 1e-6)), PyTorch's rule
  AdamUpdate,        // (p, g, m, v, scale) updates p, m, v in place; fs = b1, b2, eps, wd;
                     // i = 1: decoupled weight decay (AdamW)
  SgdUpdate,         // (p, g, buf, scale) updates p, buf in place; fs = momentum, wd, nesterov
  // Partitioned programs only (inserted by the partitioner, never differentiated):
  AllReduce,      // over mesh axis comm_axis; i = 0 sum, 1 max
  AllGather,      // along dim ints[0] over comm_axis; ints[1..] = every member's size
  ReduceScatter,  // along dim ints[0] over comm_axis; ints[1..] = every member's size
  Slice,          // along dim ints[0]: [ints[1], ints[1] + ints[2])
  Assign,         // (target, value) copies value into target's storage (a side effect)
  kCount
};

const char* op_name(Op op);

// Attributes; each op documents which fields it reads.
struct Attrs {
  std::string text;
  std::vector<int64_t> ints;
  std::vector<double> fs;
  double f = 0;
  int64_t i = 0;
  // Set by the partitioner on ops whose kernels depend on where their shard
  // sits in the global value (dropout, gather, scatter_add, cross_entropy):
  // the global shape and this shard's offset in each dimension of the value
  // named by the op (see each op). Empty: unsharded.
  Shape global_shape;
  std::vector<int64_t> shard_offsets;
  int comm_axis = -1;  // the mesh axis a kernel reduces over, or -1
};

struct Node {
  Op op;
  std::vector<int> inputs;
  Shape shape;
  DType dtype = DType::F32;
  Attrs attrs;
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
  Value add(Op op, std::vector<Value> inputs, Attrs attrs = {});
  // Parameters are unique by path: asking again returns the same value.
  Value parameter(const std::string& path, Shape shape, DType dtype = DType::F32);
  Value input(const std::string& name, Shape shape, DType dtype = DType::F32);

  const Node& node(int id) const { return nodes_[id]; }
  int size() const { return static_cast<int>(nodes_.size()); }
  Value value(int id) { return Value{this, id}; }
  // Node id of the parameter or input with this path / name, or -1.
  int find_parameter(const std::string& path) const;
  int find_input(const std::string& name) const;
  std::vector<int> parameters() const;  // ids in creation order
  std::vector<int> inputs() const;

  // A readable listing, one node per line (for debugging and docs).
  std::string to_string() const;

 private:
  std::deque<Node> nodes_;  // a deque: references survive push_back
  std::unordered_map<std::string, int> parameter_ids_, input_ids_;
};

// The nodes `outputs` depend on, plus every op with a side effect and what it
// depends on: the part of a Graph that must run.
std::vector<bool> live_nodes(const Graph& graph, const std::vector<int>& outputs);

}  // namespace autoshard
