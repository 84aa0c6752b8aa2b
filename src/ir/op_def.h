// OpDef: everything about one primitive in one place: its shape rule, CPU
// kernel, gradient (as IR ops), sharding rule, and the planner's view of it
// (a LoopNest). The table is filled by the files under src/ir/ops/, one per
// family of ops; graph.cc checks at start-up that no entry is missing.
#pragma once

#include <span>
#include <utility>
#include <vector>

#include "autoshard/ir/graph.h"
#include "autoshard/tensor/tensor.h"
#include "ir/loop_nest.h"
#include "ir/shard_rule.h"

namespace autoshard {

class Communicator;
struct CommGroup;

// What a kernel may know beyond its inputs.
struct KernelContext {
  int64_t step = 1;  // 1-based optimizer step (Adam bias correction, dropout keys)
  double lr = 0;     // learning rate of this step
  // Collective ops only (partitioned programs): this device's communicator
  // and its group of each mesh axis.
  Communicator* comm = nullptr;
  const std::vector<CommGroup>* groups = nullptr;
  // The micro-batch of a step that accumulates gradients (StepContext).
  int64_t microbatch = 0;
  // Set by the executor for a product or scatter whose output is the sum an
  // accumulate op adds it into (fused; not on a step's first micro-batch),
  // or whose output is folded into a sum (BufferPlan::adds_into): the kernel
  // adds its result to what `out` holds instead of writing it.
  bool accumulate = false;
  const CommGroup& group(int axis) const;
};

struct ShapeAndType {
  Shape shape;
  DType dtype = DType::F32;
};

// The work of one node at given (local) shapes: floating-point operations,
// and bytes read and written (4-byte elements). The cost model turns these
// into time; `gemm` marks matrix products (timed against the GEMM curve,
// the rest against memory bandwidth).
struct OpCost {
  double flops = 0;
  double bytes = 0;
  bool gemm = false;
  bool fp32_state = false;  // works on fp32 optimizer state even in mixed precision
  // A GEMM's operand bytes that BLAS copies into its blocked panels once per
  // product: a product over few rows amortises that copy over few FLOPs.
  double packed_bytes = 0;
};

// What a collective moves, for the communication model: its kind, the mesh
// axis, the bytes of the whole buffer (all-reduce input, all-gather output,
// reduce-scatter input) and of the largest member's block.
struct CommCost {
  enum class Kind { None, AllReduce, AllGather, ReduceScatter, AllToAll };
  Kind kind = Kind::None;
  int axis = -1;
  double bytes = 0;
  double largest_block = 0;
};

// The shapes a cost is asked for: the inputs' and the output's.
struct CostShapes {
  std::span<const Shape> inputs;
  const Shape& output;
};

struct OpDef {
  const char* name = nullptr;
  // Checks the inputs and returns the output's shape and dtype.
  ShapeAndType (*infer)(const Graph& g, const Node& n) = nullptr;
  // Computes `out` (already allocated with the node's shape; contents undefined).
  void (*kernel)(const Node& n, std::span<Tensor* const> in, Tensor& out,
                 const KernelContext& ctx) = nullptr;
  // Given dL/d(out), returns dL/d(input) for each input (invalid Value where
  // the input takes no gradient). Null for ops that are never differentiated.
  std::vector<Value> (*vjp)(Graph& g, int node, Value grad_out) = nullptr;
  // True for ops that write their inputs (optimizer updates): always run.
  bool side_effect = false;
  // True when the output shares its input's storage: a view (reshape, no
  // kernel run), or, when the op also writes input 0 (mutates bit 0), an
  // update in place whose kernel runs on that storage (a cache write).
  bool aliases_input = false;
  // How the op runs on inputs of any sharding (see shard_rule.h); null:
  // replicate everything.
  ShardDecision (*shard)(const ShardQuery& q) = nullptr;
  // Rewrites the attributes of one device's copy of the op (local shapes,
  // shard origins); null: nothing to rewrite.
  void (*localize)(OpAttrs& local, const LocalizeInfo& info) = nullptr;
  // The planner's view: the op's loops (see loop_nest.h). Every op of a
  // global graph has one; null only for ops of partitioned programs.
  LoopNest (*loops)(const Graph& g, const Node& n) = nullptr;
  // How the op is linear, if at all (add, sub and concat in all inputs together,
  // scale, sums, dropout and views in their one input, mul in either input,
  // div in its numerator): it runs on partial sums in those inputs as well,
  // giving a partial output, so the planner may combine partial sums once
  // after it rather than before it.
  Linearity linearity = Linearity::None;
  // Its work at given shapes (see OpCost). Every op has one.
  OpCost (*cost)(const Node& n, const CostShapes& shapes) = nullptr;
  // Collectives: what they move (null for every other op).
  CommCost (*comm)(const Node& n, const CostShapes& shapes) = nullptr;
  // Ops with halo dims (LoopNest::halos): the rows [first, second) of input
  // `input`'s dim `dim` that positions [begin, end) of its loop read (not
  // clipped to the input's extent).
  std::pair<int64_t, int64_t> (*window)(const Graph& g, const Node& n, int input, int dim,
                                        int64_t begin, int64_t end) = nullptr;
  // Inputs the op writes (optimizer state): bit i set for input i.
  unsigned mutates = 0;
  // Inputs the op may read in bf16 (bit i for input i): a frozen weight held
  // in half the bytes (Graph::hold_in_bf16). The output's shape and dtype
  // do not depend on it (products and gathers widen what they read to f32;
  // slices and gathers of blocks keep bf16). Graph::add refuses a bf16
  // input anywhere else.
  unsigned reads_bf16 = 0;
  // The kernel honours KernelContext::accumulate (adds into its output), so
  // an accumulate op that alone reads this op's output runs fused into it.
  bool accumulates = false;
  // The value is the sum of the op's two inputs when all three share one
  // shape (add): the executor may have the later input's producer add
  // itself into the earlier input's storage and skip the op (BufferPlan).
  bool sums_inputs = false;
  // Ops that only partitioned programs hold (collectives, slices): they have
  // no gradient, sharding rule or loops.
  bool local_only = false;

  // ---- What passes outside src/ir/ops need to know, as data ----
  // An optimizer update (input 0 the weight, the others its state and the
  // gradient): the input that holds the gradient; -1 for every other op.
  int gradient_input = -1;
  // Writes a weight that the next step reads (optimizer updates; assign in
  // partitioned programs): a program holding one updates the model.
  bool writes_weight = false;
  // Can make a weight's gradient out of activations (a product, a sum over
  // the batch, a scatter of rows, a filter gradient): the profiler's walk
  // back from an update names the ops up to here after the weight.
  bool makes_weight_gradient = false;
  // Adds input 1 into input 0's storage (gradient accumulation): the
  // executor may have input 1's producer add straight into the sum.
  bool adds_into_input = false;
  // The collective the op is (ops of partitioned programs), or None.
  CommCost::Kind collective = CommCost::Kind::None;
  // Tells the op that its output is the block `block` of a larger output
  // (a device's shard, a micro-batch's rows), for ops whose values depend on
  // where they sit (dropout draws each element's mask from its global
  // position). Null: the position does not matter.
  void (*place_block)(OpAttrs& attrs, const ShardOrigin& block) = nullptr;

  // Whether the op writes input k, or may read it in bf16 (the masks above;
  // any k: a concat has as many inputs as a sequence has steps, and a shift
  // by 32 or more is undefined).
  bool mutates_input(size_t k) const { return k < 32 && (mutates >> k & 1u); }
  bool reads_bf16_input(size_t k) const { return k < 32 && (reads_bf16 >> k & 1u); }
  // A view of input 0: no kernel runs, the output shares its storage.
  bool is_view() const { return aliases_input && !(mutates & 1); }
  // Writes into input 0's storage and returns it (a cache write, a sum).
  bool writes_in_place() const { return aliases_input && (mutates & 1); }
};

const OpDef& op_def(Op op);

// Registration hooks, one per file under src/ir/ops/.
void register_basic_ops(std::vector<OpDef>& table);
void register_elementwise_ops(std::vector<OpDef>& table);
void register_einsum_op(std::vector<OpDef>& table);
void register_reduce_ops(std::vector<OpDef>& table);
void register_nn_ops(std::vector<OpDef>& table);
void register_attention_ops(std::vector<OpDef>& table);
void register_rotary_op(std::vector<OpDef>& table);
void register_cache_ops(std::vector<OpDef>& table);
void register_shape_ops(std::vector<OpDef>& table);
void register_optimizer_ops(std::vector<OpDef>& table);
void register_collective_ops(std::vector<OpDef>& table);
void register_unary_ops(std::vector<OpDef>& table);
void register_vision_ops(std::vector<OpDef>& table);
void register_resize_op(std::vector<OpDef>& table);
void register_recurrent_ops(std::vector<OpDef>& table);

// Helpers shared by the op files.
const Shape& input_shape(const Graph& g, const Node& n, int i);
DType input_dtype(const Graph& g, const Node& n, int i);
void expect_inputs(const Node& n, size_t count);
Shape broadcast_shapes(const Shape& a, const Shape& b);
// Loops of an op whose output dims are all parallel and whose inputs
// broadcast to the output (numpy rules, aligned from the right).
LoopNest broadcast_loops(const Graph& g, const Node& n);
// The cost of a kernel that streams its inputs and output once, doing
// `flops_per_element` operations per output element.
OpCost streaming_cost(const CostShapes& shapes, double flops_per_element);
// Element count of a shape as a double (no overflow check: costs only).
double elements(const Shape& s);

}  // namespace autoshard
