#include "autoshard/nn/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <sstream>

#include "autoshard/comm/world.h"
#include "autoshard/error.h"
#include "autoshard/ir/autodiff.h"
#include "autoshard/ir/ops.h"
#include "autoshard/ir/recompute.h"
#include "autoshard/nn/sample_weights.h"
#include "autoshard/optim/composed_ops.h"
#include "autoshard/runtime/memory.h"
#include "autoshard/tensor/array_split.h"

namespace autoshard {

namespace {
// The input of a generation step that holds its tokens' positions [T].
constexpr const char* kPositions = "positions";

// The shape targets of `target` shape and dtype take against predictions of
// `predicted` shape, as Keras reshapes them before a loss or metric:
// numbers by squeeze_or_expand_to_same_rank (keras/src/losses/loss.py; ranks
// that differ by one where the longer one ends in 1: (n,) targets against
// (n, 1) predictions become (n, 1)), class ids (i32) by
// sparse_categorical_crossentropy (keras/src/backend/*/nn.py: ids [..., 1]
// lose their last axis). Any other shape is left for the loss to judge.
Shape keras_target_shape(const Shape& predicted, const Shape& target, DType dtype) {
  const auto same_but_last = [](const Shape& longer, const Shape& shorter) {
    return longer.size() == shorter.size() + 1 && longer.back() == 1 &&
           std::equal(shorter.begin(), shorter.end(), longer.begin());
  };
  if (dtype == DType::I32) {
    if (!target.empty() && target.size() == predicted.size() && target.back() == 1 &&
        predicted.back() != 1)
      return Shape(target.begin(), target.end() - 1);
    return target;
  }
  if (same_but_last(predicted, target) || same_but_last(target, predicted)) return predicted;
  return target;
}

// Input dimensions left unknown (keras.Input(shape=(None, 16)): -1) are
// fixed per batch: each distinct batch shape is traced and compiled once
// (the step cache is keyed by the concrete shapes) on the one WeightStore.
bool has_unknown_dims(const std::vector<InputSpec>& specs) {
  for (const InputSpec& s : specs)
    if (std::count(s.shape.begin(), s.shape.end(), -1) > 0) return true;
  return false;
}

bool fits_spec(const Shape& example, const Shape& spec) {
  return example.size() == spec.size() &&
         std::equal(example.begin(), example.end(), spec.begin(),
                    [](int64_t d, int64_t s) { return s == -1 || d == s; });
}

// The input specs with their unknown dimensions fixed while one trace runs
// (the trace reads the specs' shapes), restored afterwards.
class FixedInputShapes {
 public:
  FixedInputShapes(std::vector<InputSpec>& specs, const std::vector<Shape>& examples)
      : specs_(specs) {
    for (size_t i = 0; i < specs.size(); ++i) {
      saved_.push_back(specs[i].shape);
      specs[i].shape = examples[i];
    }
  }
  ~FixedInputShapes() {
    for (size_t i = 0; i < specs_.size(); ++i) specs_[i].shape = saved_[i];
  }
  FixedInputShapes(const FixedInputShapes&) = delete;
  FixedInputShapes& operator=(const FixedInputShapes&) = delete;

 private:
  std::vector<InputSpec>& specs_;
  std::vector<Shape> saved_;
};

// The specs' shapes with every unknown dimension `length`: what the weights
// are made from before data arrives (two lengths, so that a weight whose
// shape depends on one is found then).
std::vector<Shape> probe_shapes(const std::vector<InputSpec>& specs, int64_t length) {
  std::vector<Shape> out;
  for (const InputSpec& s : specs) {
    Shape shape = s.shape;
    std::replace(shape.begin(), shape.end(), int64_t{-1}, length);
    out.push_back(shape);
  }
  return out;
}
constexpr int64_t kProbeLengths[] = {64, 128};  // powers of 2: pooled and upsampled alike

// The layer a weight path belongs to ("encoder.dense.kernel" -> "encoder.dense").
std::string layer_of(const std::string& weight) {
  const size_t dot = weight.rfind('.');
  return dot == std::string::npos ? weight : weight.substr(0, dot);
}

// Whether a step's program reads leaf `id`: a partitioned program drops the
// leaves nothing it computes needs (a weight a layer declares but never
// uses, in a forward pass), and binds only what it reads; one device binds
// every leaf.
bool step_reads(const CompiledStep& step, int id) {
  const Partition* p = step.partition();
  return !p || p->local_of[step.devices().front()][id] >= 0;
}
}  // namespace

Model::Model(std::vector<SymbolicTensor> inputs, SymbolicTensor output, std::string name)
    : Model(std::move(inputs), std::vector<SymbolicTensor>{std::move(output)}, std::move(name)) {}

Model::Model(std::vector<SymbolicTensor> inputs, std::vector<SymbolicTensor> outputs,
             std::string name)
    : name_(std::move(name)),
      symbolic_inputs_(std::move(inputs)),
      symbolic_outputs_(std::move(outputs)) {
  AS_CHECK(!symbolic_inputs_.empty(), "Model ", name_, ": needs at least one input");
  AS_CHECK(!symbolic_outputs_.empty(), "Model ", name_, ": needs at least one output");
  for (const SymbolicTensor& s : symbolic_inputs_) {
    AS_CHECK(s.get() && !s.node().layer, "Model ", name_, ": inputs must come from Input()");
    input_specs_.push_back({s.node().shape, s.node().dtype, s.node().name});
  }
  for (const SymbolicTensor& s : symbolic_outputs_)
    AS_CHECK(s.get() != nullptr, "Model ", name_, ": an output is empty");
  const std::vector<std::string> names = output_names();
  for (size_t i = 0; i < names.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      AS_CHECK(names[i] != names[j], "Model ", name_, ": two outputs are named '", names[i],
               "'; give the layers that make them distinct names");
}

std::vector<std::string> Model::output_names() const {
  if (symbolic_outputs_.empty()) return {"output"};
  std::vector<std::string> names;
  // Keras names an output by the layer making it; another output of a layer
  // of several (an LSTM's states) adds its index, as names must differ here.
  for (const SymbolicTensor& s : symbolic_outputs_)
    names.push_back(!s.node().layer   ? s.node().name
                    : s.node().output ? cat(s.node().layer->name(), "_", s.node().output)
                                      : s.node().layer->name());
  return names;
}

Model::Model(std::vector<InputSpec> inputs, std::string name)
    : name_(std::move(name)), input_specs_(std::move(inputs)) {}

Model::~Model() = default;

void Model::set_recompute(bool on) {
  recompute_ = on;
  cache_.clear();
}

void Model::set_seed(uint64_t seed) {
  seed_ = seed;
  store_.set_seed(seed);
}

Value Model::call(Trace& trace, const std::vector<Value>& inputs) {
  return replay(trace, inputs).at(0);
}

// Replays the recorded functional graph on traced values: every layer call
// once, however many outputs read it. Depth-first with a stack of its own,
// inputs left to right (the order a recursion would take): a chain of
// 50,000 layers must not take 50,000 frames of the thread's stack.
std::vector<Value> Model::replay(Trace& trace, const std::vector<Value>& inputs) {
  AS_CHECK(!symbolic_outputs_.empty(), "Model ", name_,
           ": a model built without Input() must override call()");
  std::map<const SymbolicTensor::Node*, Value> done;
  // Every output of the calls of layers of several outputs, by the call's node.
  std::map<const SymbolicTensor::Node*, std::vector<Value>> made;
  for (size_t i = 0; i < symbolic_inputs_.size(); ++i) done[symbolic_inputs_[i].get()] = inputs[i];
  struct Pending {
    const SymbolicTensor* tensor;
    size_t next_input = 0;  // the inputs before it are done
  };
  std::vector<Pending> stack;
  auto eval = [&](const SymbolicTensor& root) -> Value {
    stack.push_back({&root});
    while (!stack.empty()) {
      Pending& p = stack.back();
      const SymbolicTensor::Node& node = p.tensor->node();
      if (done.count(p.tensor->get())) {
        stack.pop_back();
        continue;
      }
      AS_CHECK(node.layer != nullptr, "Model ", name_, ": input '", node.name,
               "' is not one of the model's inputs");
      if (p.next_input < node.inputs.size()) {
        const SymbolicTensor* in = &node.inputs[p.next_input++];
        if (!done.count(in->get())) stack.push_back({in});  // p is stale from here
        continue;
      }
      if (node.output > 0) {  // another output of the call its one input made
        done[p.tensor->get()] = made.at(node.inputs[0].get()).at(node.output);
        stack.pop_back();
        continue;
      }
      std::vector<Value> args;
      for (const SymbolicTensor& in : node.inputs) args.push_back(done.at(in.get()));
      std::vector<Value> outs = node.layer->outputs(trace, args);
      done[p.tensor->get()] = outs[0];
      if (outs.size() > 1) made[p.tensor->get()] = std::move(outs);
      stack.pop_back();
    }
    return done.at(root.get());
  };
  std::vector<Value> outs;
  for (const SymbolicTensor& s : symbolic_outputs_) outs.push_back(eval(s));
  return outs;
}

void Model::compile(std::shared_ptr<Optimizer> optimizer, Loss loss, std::vector<Metric> metrics) {
  compile(std::move(optimizer), std::vector<Loss>{std::move(loss)}, {}, std::move(metrics));
}

void Model::compile(std::shared_ptr<Optimizer> optimizer, std::vector<Loss> losses,
                    std::vector<double> loss_weights, std::vector<Metric> metrics) {
  const size_t outputs = output_names().size();
  AS_CHECK(losses.size() == 1 || losses.size() == outputs, "Model ", name_, ": ", losses.size(),
           " losses for ", outputs, " outputs (give one loss, or one per output)");
  for (const Loss& l : losses) AS_CHECK(bool(l), "Model ", name_, ": a loss is empty");
  AS_CHECK(loss_weights.empty() || loss_weights.size() == outputs, "Model ", name_, ": ",
           loss_weights.size(), " loss_weights for ", outputs, " outputs");
  for (double w : loss_weights)
    AS_CHECK(std::isfinite(w) && w >= 0, "Model ", name_,
             ": loss_weights must be finite and at least 0, got ", w);
  optimizer_ = std::move(optimizer);
  losses_ = std::move(losses);
  loss_weights_ = std::move(loss_weights);
  metrics_ = std::move(metrics);
  if (!dist_) set_distribution(autoshard::distribution());
  cache_.clear();
}

void Model::set_distribution(std::shared_ptr<Distribution> d) {
  dist_ = std::move(d);
  cache_.clear();
}

// The weights move onto the mesh when a step first runs there (planning
// alone places nothing, so any mesh can be planned for).
void Model::place_state() {
  // One device (no distribution) is this process's own, even under mpirun.
  const DeviceMesh mesh = dist_ ? dist_->mesh() : DeviceMesh();
  // Placed already (a pipeline's rank places its own device of the stages' mesh).
  if (store_.mesh().to_string() == mesh.to_string()) return;
  store_.place_on(mesh, dist_ ? World::process().local_devices(mesh) : std::vector<int>{0});
}

bool Model::sharded() const {
  return dist_ && dist_->mesh().size() > 1;
}

namespace {
// The step graph's name of input i: "x" for the first (what planners and
// generation look up), "x1", "x2", ... for the others.
std::string graph_input(size_t i) {
  return i == 0 ? std::string("x") : cat("x", i);
}
// Likewise for targets: "y", "y1", ...
std::string target_input(size_t i) {
  return i == 0 ? std::string("y") : cat("y", i);
}
}  // namespace

Value Model::trace_forward(Graph& graph, int64_t batch_size, bool training) {
  return trace_outputs(graph, batch_size, training).at(0);
}

std::vector<Value> Model::trace_outputs(Graph& graph, int64_t batch_size, bool training,
                                        std::vector<Value>* penalties, std::vector<Value>* masks) {
  for (const InputSpec& spec : input_specs_)  // fixed by the batch when it is traced
    AS_CHECK(!has_unknown_dims({spec}), "Model ", name_, ": input '", spec.name, "' is ",
             shape_str(spec.shape),
             " per example (-1: a size known only from data); this needs every size: give "
             "data, or an Input of known shape");
  Trace trace(graph, training, seed_);
  trace.freeze(frozen_);
  if (penalties) trace.penalize(weight_penalties_, activity_penalties_);
  std::vector<Value> inputs;
  for (size_t i = 0; i < input_specs_.size(); ++i) {
    Shape shape = input_specs_[i].shape;
    shape.insert(shape.begin(), batch_size);
    inputs.push_back(graph.input(graph_input(i), shape, input_specs_[i].dtype));
  }
  std::vector<Value> outs =
      symbolic_outputs_.empty() ? std::vector<Value>{call(trace, inputs)} : replay(trace, inputs);
  non_trainable_.insert(trace.non_trainable().begin(), trace.non_trainable().end());
  hold_frozen(graph, trace);
  declare_state(graph, trace.initializers());
  if (penalties) *penalties = trace.losses();
  if (masks)
    for (const Value& o : outs) masks->push_back(trace.mask(o));
  return outs;
}

void Model::set_frozen(std::set<std::string> scopes) {
  frozen_ = std::move(scopes);
  cache_.clear();
  // The moving statistics and the frozen weights, traced again.
  non_trainable_.clear();
  if (!store_.weight_paths().empty()) {
    Graph g;
    trace_forward(g, 1, false);
  }
}

void Model::hold_frozen_weights_in_bf16(bool on) {
  if (bf16_frozen_ == on) return;
  bf16_frozen_ = on;
  cache_.clear();
  // Traced again: the store holds each weight as the trace says.
  if (!store_.weight_paths().empty()) {
    Graph g;
    trace_forward(g, 1, false);
  }
}

void Model::hold_frozen(Graph& graph, const Trace& trace) const {
  if (!bf16_frozen_) return;
  for (int id : graph.parameters()) {
    const Node& n = graph.node(id);
    if (!n.is_weight()) continue;
    const std::string& path = n.leaf().name;
    const bool frozen = non_trainable_.count(path) || trace.non_trainable().count(path);
    if (frozen && graph.can_hold_in_bf16(id)) graph.hold_in_bf16(id);
  }
}

DType Model::weight_dtype(const std::string& path) {
  ensure_built();
  return store_.dtype({path, ""});
}

int64_t Model::weight_bytes() {
  int64_t bytes = 0;
  for (const std::string& p : weight_paths()) bytes += store_.bytes_held({p, ""});
  return bytes;
}

void Model::set_regularizers(std::map<std::string, Trace::Penalty> weights,
                             std::map<std::string, Trace::Penalty> activities) {
  weight_penalties_ = std::move(weights);
  activity_penalties_ = std::move(activities);
  cache_.clear();
}

void Model::set_constraints(std::map<std::string, Trace::Penalty> weights) {
  constraints_ = std::move(weights);
  cache_.clear();
}

// sum_k weight_k * loss_k(output_k, target_k).
Value Model::total_loss(const std::vector<Value>& outputs, const std::vector<Value>& targets,
                        const std::vector<Value>& masks) {
  Value total;
  for (size_t k = 0; k < outputs.size(); ++k) {
    const Loss& loss = losses_.size() == 1 ? losses_[0] : losses_[k];
    const bool masked = k < masks.size() && masks[k].valid();
    Value l = masked ? losses::masked(loss, outputs[k], targets[k], masks[k])
                     : loss(outputs[k], targets[k]);
    AS_CHECK(l.shape().empty(), "Model ", name_, ": the loss must be a scalar");
    if (!loss_weights_.empty() && loss_weights_[k] != 1.0) l = ops::scale(l, loss_weights_[k]);
    total = total.valid() ? total + l : l;
  }
  return total;
}

// Declares the weights a trace met (with their initializers) and the slots.
void Model::declare_state(const Graph& graph, const std::map<std::string, Initializer>& inits) {
  for (int id : graph.parameters()) {
    const LeafAttrs& leaf = graph.node(id).leaf();
    if (leaf.buffer) continue;  // made by bind_state, kept apart from the weights
    std::optional<Initializer> init;
    if (auto it = inits.find(leaf.name); it != inits.end() && !leaf.is_slot()) init = it->second;
    if (leaf.is_slot() && optimizer_)
      if (const double v = optimizer_->slot_initial_value(leaf.slot); v != 0)
        init = Initializer::constant(v);
    if (!leaf.is_slot() && store_.contains({leaf.name, ""}))
      AS_CHECK(store_.shape({leaf.name, ""}) == leaf.shape, "Model ", name_, ": weight '",
               leaf.name, "' is ", shape_str(store_.shape({leaf.name, ""})),
               " for one input shape and ", shape_str(leaf.shape), " for another: layer '",
               layer_of(leaf.name),
               "' needs an input dimension that keras.Input leaves unknown (None); give the "
               "Input that dimension, or reduce it before the layer (GlobalAveragePooling "
               "instead of Flatten)");
    // A weight held anew in another dtype (frozen or unfrozen since the
    // steps compiled so far were bound): they are bound again when next made.
    if (store_.declare({leaf.name, leaf.slot}, leaf.shape, init, graph.node(id).dtype))
      cache_.clear();
  }
}

Model::Traced Model::trace_step(Mode mode, const std::vector<Shape>& x_shapes,
                                const std::vector<DType>& x_dtypes,
                                const std::vector<Shape>& y_shapes,
                                const std::vector<DType>& y_dtypes) {
  AS_CHECK(x_shapes.size() == input_specs_.size(), "Model ", name_, ": has ", input_specs_.size(),
           " inputs, got ", x_shapes.size());
  AS_CHECK(mode == Mode::Predict || (optimizer_ && !losses_.empty()), "Model ", name_,
           ": call compile(optimizer, loss) before training or evaluating");
  for (size_t i = 0; i < x_shapes.size(); ++i) {
    const InputSpec& spec = input_specs_[i];
    const std::string which = spec.name.empty() ? "input" : "input '" + spec.name + "'";
    AS_CHECK(x_dtypes[i] == spec.dtype, "Model ", name_, ": ", which, " must be ",
             dtype_name(spec.dtype), ", got ", dtype_name(x_dtypes[i]));
    const Shape& x_shape = x_shapes[i];
    AS_CHECK(!x_shape.empty() && fits_spec(Shape(x_shape.begin() + 1, x_shape.end()), spec.shape),
             "Model ", name_, ": ", which, " of shape ", shape_str(x_shape),
             " does not match the model's input shape [batch] + ", shape_str(spec.shape),
             has_unknown_dims(input_specs_) ? " (-1: any size)" : "");
    AS_CHECK(x_shape[0] == x_shapes[0][0], "Model ", name_, ": inputs of ", x_shapes[0][0], " and ",
             x_shape[0], " examples in one batch");
  }
  std::vector<Shape> examples;  // each input's shape without the batch dimension
  for (const Shape& x : x_shapes) examples.emplace_back(x.begin() + 1, x.end());
  const FixedInputShapes fixed(input_specs_, examples);
  Traced t;
  Graph& g = t.graph;
  std::vector<Value> penalties, masks;
  const std::vector<Value> outs = trace_outputs(
      g, x_shapes[0][0], mode == Mode::Train, mode == Mode::Predict ? nullptr : &penalties, &masks);
  Value result = outs[0];
  if (mode != Mode::Predict) {
    AS_CHECK(y_shapes.size() == outs.size(), "Model ", name_, ": ", y_shapes.size(),
             " targets for ", outs.size(), " outputs");
    std::vector<Value> ys;
    for (size_t k = 0; k < y_shapes.size(); ++k) {
      const Value y = g.input(target_input(k), y_shapes[k], y_dtypes[k]);
      ys.push_back(ops::reshape(y, keras_target_shape(outs[k].shape(), y_shapes[k], y_dtypes[k])));
    }
    result = total_loss(outs, ys, masks);
    // Keras's compute_loss adds the model's losses (regularizers) in
    // training and evaluation alike.
    for (const Value& p : penalties) result = result + p;
  }
  // Read after the step: every output for metrics; when predicting, the
  // outputs after the first (the result).
  if (mode != Mode::Predict && !metrics_.empty()) {
    for (const Value& o : outs) t.predictions.push_back(o.id);
    // Then the masks, for the mean metrics (Keras's MeanMetricWrapper).
    metric_masks_.assign(outs.size(), -1);
    for (size_t k = 0; k < outs.size(); ++k)
      if (masks[k].valid()) {
        metric_masks_[k] = int(t.predictions.size()) + 1;  // output 0 is the result
        t.predictions.push_back(masks[k].id);
      }
  }
  if (mode == Mode::Predict)
    for (size_t k = 1; k < outs.size(); ++k) t.predictions.push_back(outs[k].id);
  if (mode == Mode::Train) {
    std::vector<Value> params;
    for (int id : g.parameters())
      if (!non_trainable_.count(g.node(id).leaf().name)) params.push_back(g.value(id));
    optimizer_->append_update(g, params, gradients(result, params));
    // Keras's optimizer.apply: each constrained weight becomes
    // constraint(weight) after its update (traced after it, so it reads
    // the updated value).
    for (const Value& p : params)
      if (auto c = constraints_.find(p.node().leaf().name); c != constraints_.end())
        composed::assign(p, c->second(p));
    declare_state(g, {});  // the optimizer's slots
    if (recompute_) {
      Recomputed r = recompute_regions(g, result.id);
      t.graph = std::move(r.graph);
      t.result = r.id_of[result.id];
      for (int& p : t.predictions) p = r.id_of[p];
      return t;
    }
  }
  t.result = result.id;
  return t;
}

// The layout of every leaf of a step: weights as the distribution says,
// optimizer state as its weight (or ZeRO's), inputs split on the batch.
PartitionRequest Model::leaf_layouts(const Graph& g) {
  dist_->prepare(g);
  PartitionRequest r;
  for (int id : g.parameters()) {
    const LeafAttrs& leaf = g.node(id).leaf();
    if (leaf.buffer) {
      r.leaves[id] = dist_->buffer_layout(leaf.name, leaf.shape);
      continue;
    }
    const Sharding weight = dist_->weight_layout(leaf.name, store_.shape({leaf.name, ""}));
    r.leaves[id] =
        leaf.is_slot() ? dist_->slot_layout(leaf.name, leaf.slot, weight, leaf.shape) : weight;
  }
  for (int id : g.inputs()) {
    const Node& n = g.node(id);
    r.leaves[id] =
        n.leaf().name == kPositions ? Sharding::replicated(1) : dist_->input_layout(n.shape);
  }
  r.decisions = dist_->decisions(g, r.leaves);
  // An in-place write of non-trained state goes through a view that must
  // stay the parameter's own storage: it follows the parameter's layout.
  for (int view : composed::assign_views(g)) r.decisions.erase(view);
  if (!dist_->sequence_parallel_axis.empty())
    r.sequence_parallel_axis = dist_->mesh().axis_index(dist_->sequence_parallel_axis);
  return r;
}

// Buffers are kept by key and shape: a cache of another length is another buffer.
std::string Model::buffer_key(const LeafAttrs& leaf) {
  return leaf.key() + shape_str(leaf.shape);
}

Tensor& Model::buffer_block(const LeafAttrs& leaf, const Sharding& layout, int device) {
  std::map<int, Tensor>& blocks = buffers_[buffer_key(leaf)];
  auto it = blocks.find(device);
  if (it == blocks.end()) {
    const Shape local = layout.local_shape(leaf.shape, store_.mesh(), device);
    it = blocks.emplace(device, Tensor::zeros(local)).first;
  }
  return it->second;
}

// Binds every parameter of the step to this process's blocks of it.
void Model::bind_state(CompiledStep& step) {
  for (int id : step.graph().parameters()) {
    if (!step_reads(step, id)) continue;
    const LeafAttrs& leaf = step.graph().node(id).leaf();
    for (int d : step.devices())
      step.bind(d, id,
                leaf.buffer ? buffer_block(leaf, step.layout(id), d)
                            : store_.block({leaf.name, leaf.slot}, step.layout(id), d));
  }
  step.set_profile(profile);
}

CompiledStep& Model::compiled(Mode mode, const Batch& x, const Batch* y) {
  std::ostringstream key;  // the mode and every shape and dtype
  key << int(mode);
  std::vector<Shape> shapes;
  std::vector<DType> dtypes;
  for (const Tensor& t : x) {
    key << shape_str(t.shape()) << dtype_name(t.dtype());
    shapes.push_back(t.shape());
    dtypes.push_back(t.dtype());
  }
  std::vector<Shape> y_shapes;
  std::vector<DType> y_dtypes;
  if (y)
    for (const Tensor& t : *y) {
      key << "y" << shape_str(t.shape()) << dtype_name(t.dtype());
      y_shapes.push_back(t.shape());
      y_dtypes.push_back(t.dtype());
    }
  if (CompiledStep* step = cache_.find(key.str())) return *step;
  // Weights come from the probe shapes first, whatever the first batch's
  // shape: a layer that needs an unknown dimension fails at once.
  if (has_unknown_dims(input_specs_)) ensure_built();
  return compile(key.str(), trace_step(mode, shapes, dtypes, y_shapes, y_dtypes));
}

Model::Batch Model::ordered(const ModelInputs& x) const {
  const auto& given = x.tensors();
  if (given.size() == 1 && given.begin()->first.empty()) {
    AS_CHECK(input_specs_.size() == 1, "Model ", name_, " has ", input_specs_.size(),
             " inputs: give them by name, {{\"", input_specs_[0].name, "\", tensor}, ...}");
    return {given.begin()->second};
  }
  std::string names;  // for the errors
  for (const InputSpec& spec : input_specs_) names += (names.empty() ? "" : ", ") + spec.name;
  Batch out;
  for (const InputSpec& spec : input_specs_) {
    auto it = given.find(spec.name);
    AS_CHECK(it != given.end(), "Model ", name_, ": input '", spec.name,
             "' is missing (its inputs: ", names, ")");
    out.push_back(it->second);
  }
  for (const auto& [name, t] : given)
    AS_CHECK(std::any_of(input_specs_.begin(), input_specs_.end(),
                         [&](const InputSpec& spec) { return spec.name == name; }),
             "Model ", name_, ": it has no input named '", name, "' (its inputs: ", names, ")");
  return out;
}

Model::Batch Model::ordered_targets(const ModelTargets& y) const {
  const auto& given = y.tensors();
  const std::vector<std::string> names = output_names();
  if (given.size() == 1 && given.begin()->first.empty()) {
    AS_CHECK(names.size() == 1, "Model ", name_, " has ", names.size(),
             " outputs: give their targets by name, {{\"", names[0], "\", tensor}, ...}");
    return {given.begin()->second};
  }
  std::string list;  // for the errors
  for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
  Batch out;
  for (const std::string& n : names) {
    auto it = given.find(n);
    AS_CHECK(it != given.end(), "Model ", name_, ": the target of output '", n,
             "' is missing (its outputs: ", list, ")");
    out.push_back(it->second);
  }
  for (const auto& [n, t] : given)
    AS_CHECK(std::find(names.begin(), names.end(), n) != names.end(), "Model ", name_,
             ": it has no output named '", n, "' (its outputs: ", list, ")");
  return out;
}

// The examples in a batch: the first dimension, the same for every input
// and the targets.
int64_t Model::examples(const Batch& x, const Batch* y, const char* what) const {
  AS_CHECK(!x.empty() && x[0].rank() >= 1, what, ": inputs need a batch dimension");
  for (const Tensor& t : x)
    AS_CHECK(t.rank() >= 1 && t.dim(0) == x[0].dim(0), what,
             ": every input needs the same number of examples, got ", shape_str(x[0].shape()),
             " and ", shape_str(t.shape()));
  if (y)
    for (const Tensor& t : *y)
      AS_CHECK(t.rank() >= 1 && t.dim(0) == x[0].dim(0), what,
               ": x and y must have the same number of examples, got ", shape_str(x[0].shape()),
               " and ", shape_str(t.shape()));
  return x[0].dim(0);
}

CompiledStep& Model::compile(const std::string& key, Traced t) {
  place_state();
  std::unique_ptr<CompiledStep> step;
  std::vector<int> outputs{t.result};
  outputs.insert(outputs.end(), t.predictions.begin(), t.predictions.end());
  if (sharded()) {
    const PartitionRequest request = leaf_layouts(t.graph);
    step = std::make_unique<CompiledStep>(std::move(t.graph), outputs, dist_->mesh(), request);
  } else {
    step = std::make_unique<CompiledStep>(std::move(t.graph), outputs);
  }
  check_memory(*step);
  CompiledStep& s = cache_.insert(key, std::move(step));
  bind_state(s);
  return s;
}

// Before anything of a new step is allocated: the state it adds and its
// buffers must fit in the memory the machine has.
void Model::check_memory(const CompiledStep& step) const {
  const std::optional<int64_t> available = available_memory_bytes();
  if (!available) return;
  int64_t weights = 0, slots = 0, caches = 0, largest = 0;
  std::string largest_name;
  for (int id : step.graph().parameters()) {
    const LeafAttrs& leaf = step.graph().node(id).leaf();
    if (leaf.buffer) {
      if (!buffers_.count(buffer_key(leaf)))
        for (int d : step.devices())
          caches += numel(step.layout(id).local_shape(leaf.shape, store_.mesh(), d)) * 4;
      continue;
    }
    const int64_t bytes =
        store_.bytes_to_make({leaf.name, leaf.slot}, step.layout(id), step.devices());
    (leaf.is_slot() ? slots : weights) += bytes;
    if (!leaf.is_slot() && numel(leaf.shape) * 4 > largest)
      largest = numel(leaf.shape) * 4, largest_name = leaf.name + " " + shape_str(leaf.shape);
  }
  const int64_t buffers = static_cast<int64_t>(step.planned_bytes());
  const int64_t need = weights + slots + caches + buffers;
  AS_CHECK(need <= *available, "Model ", name_, " does not fit in memory: this step needs ",
           format_bytes(double(need)), " (weights ", format_bytes(double(weights)),
           caches ? ", key-value caches " + format_bytes(double(caches)) : std::string(),
           ", optimizer state ", format_bytes(double(slots)), ", activations and gradients ",
           format_bytes(double(buffers)), "; largest weight ", largest_name, ") but ",
           format_bytes(double(*available)),
           " is available; use a smaller model or batch, or more devices (mpirun)");
}

Model::Traced Model::trace_generation(int64_t batch, int64_t T, int64_t cache_length) {
  AS_CHECK(input_specs_.size() == 1 && input_specs_[0].shape.size() == 1 &&
               input_specs_[0].dtype == DType::I32,
           "Model ", name_, ": only a model of token ids [batch, time] can generate");
  AS_CHECK(batch > 0 && T > 0 && T <= cache_length, "Model ", name_, ": cannot run ", T,
           " tokens of ", batch, " sequences over a key-value cache of ", cache_length,
           " positions");
  Traced t;
  Graph& g = t.graph;
  g.hold_weights({held_->formats().begin(), held_->formats().end()});
  Trace trace(g, /*training=*/false, seed_);
  Value x = g.input("x", {batch, T}, DType::I32);
  trace.use_cache(g.input(kPositions, {T}, DType::I32), cache_length);
  Value out = call(trace, {x});
  hold_frozen(g, trace);
  declare_state(g, trace.initializers());
  bool cached = false;
  for (int id : g.parameters()) cached |= g.node(id).is_buffer();
  AS_CHECK(cached, "Model ", name_,
           ": its attention keeps no key-value cache (Trace::causal_attention), so it cannot "
           "generate");
  t.result = out.id;
  return t;
}

Tensor Model::predict_cached(const Tensor& tokens, int64_t start, int64_t cache_length) {
  AS_CHECK(tokens.rank() == 2 && tokens.dtype() == DType::I32,
           "predict_cached: tokens must be i32 [batch, time], got ", dtype_name(tokens.dtype()),
           shape_str(tokens.shape()));
  const int64_t T = tokens.dim(1);
  AS_CHECK(start >= 0 && start + T <= cache_length, "predict_cached: positions ", start, " to ",
           start + T - 1, " do not fit a key-value cache of ", cache_length, " positions");
  CompiledStep* step = &generation_step(tokens.dim(0), T, cache_length);
  Tensor positions({T}, DType::I32);
  for (int64_t i = 0; i < T; ++i) positions.i32()[i] = static_cast<int32_t>(start + i);
  step->bind_input(step->graph().find_input("x"), tokens);
  step->bind_input(step->graph().find_input(kPositions), positions);
  step->set_profile(profile);
  step->run({iterations_ + 1, 0});
  return step->result().clone();
}

CompiledStep& Model::generation_step(int64_t batch, int64_t T, int64_t cache_length) {
  const std::string key =
      "generate" + shape_str({batch, T}) + std::to_string(cache_length) + held_->signature();
  if (CompiledStep* step = cache_.find(key)) return *step;
  return compile(key, trace_generation(batch, T, cache_length));
}

void Model::prepare_generation(int64_t batch, int64_t T, int64_t cache_length) {
  generation_step(batch, T, cache_length);
}

Graph Model::generation_graph(int64_t batch, int64_t T, int64_t cache_length) {
  return trace_generation(batch, T, cache_length).graph;
}

void Model::HeldWeights::hold(const std::string& path, WeightsDType format) {
  formats_[path] = format;
  update();
}

void Model::HeldWeights::release(const std::string& path, WeightsDType format) {
  if (auto it = formats_.find(path); it != formats_.end() && it->second == format) {
    formats_.erase(it);
    update();
  }
}

// A hash of every (path, format): generation keys stay short however many
// weights are held.
void Model::HeldWeights::update() {
  std::string all;
  for (const auto& [path, format] : formats_) all += path + "=" + weights_dtype_name(format) + ";";
  signature_ = formats_.empty() ? "" : " held " + std::to_string(std::hash<std::string>{}(all));
}

std::vector<std::string> Model::buffer_paths() {
  Graph g;
  try {
    g = generation_graph(1, 1, 1);
  } catch (const Error&) {
    return {};  // a model that cannot generate keeps no buffers
  }
  std::vector<std::string> paths;
  for (int id : g.parameters())
    if (g.node(id).is_buffer()) paths.push_back(g.node(id).leaf().name);
  return paths;
}

Graph Model::training_graph(const Shape& x_shape, const Shape& y_shape, DType y_dtype) {
  return trace_step(Mode::Train, {x_shape}, {input_specs_[0].dtype}, {y_shape}, {y_dtype}).graph;
}

Partition Model::plan_training(const Shape& x_shape, const Shape& y_shape, DType y_dtype,
                               const std::vector<int>& devices) {
  AS_CHECK(dist_ != nullptr, "Model ", name_, ": plan_training needs a distribution");
  Traced t = trace_step(Mode::Train, {x_shape}, {input_specs_[0].dtype}, {y_shape}, {y_dtype});
  return partition(t.graph, dist_->mesh(), leaf_layouts(t.graph), {t.result}, devices);
}

CompiledStep& Model::run(Mode mode, const Batch& x, const Batch* y, const StepContext& ctx,
                         MetricTotals* totals) {
  CompiledStep& step = compiled(mode, x, y);
  const Graph& g = step.graph();
  auto bind = [&](int id, const Tensor& whole) {
    if (step_reads(step, id)) step.bind_input(id, whole);
  };
  for (size_t i = 0; i < x.size(); ++i) bind(g.find_input(graph_input(i)), x[i]);
  if (y)
    for (size_t k = 0; k < y->size(); ++k) bind(g.find_input(target_input(k)), (*y)[k]);
  step.set_profile(profile);
  step.run(ctx);
  if (totals && y && !metrics_.empty()) {
    const std::vector<std::string> names = output_names();
    for (size_t k = 0; k < y->size(); ++k)
      for (const Metric& m : metrics_) {
        const Tensor& out = step.output(1 + k);
        const Tensor target =
            (*y)[k].reshaped(keras_target_shape(out.shape(), (*y)[k].shape(), (*y)[k].dtype()));
        const int mask = k < metric_masks_.size() ? metric_masks_[k] : -1;
        const Metric::Sums batch = mask >= 0 && m.mean
                                       ? metrics::masked_sums(m, out, target, step.output(mask))
                                       : m.accumulate(out, target);
        const std::string name = y->size() == 1 ? m.name : names[k] + "_" + m.name;
        MetricSums& running = (*totals)[name];
        if (running.sums.empty()) running = {Metric::Sums(batch.size(), 0.0), m.result};
        AS_CHECK(running.sums.size() == batch.size(), "metric ", name,
                 ": the batches' outputs differ in shape (", running.sums.size(), " and ",
                 batch.size(), " sums)");
        for (size_t i = 0; i < batch.size(); ++i) running.sums[i] += batch[i];
      }
  }
  return step;
}

double Model::train_batch(const Batch& x, const Batch& y, MetricTotals* totals) {
  AS_CHECK(optimizer_ && !losses_.empty(), "Model ", name_,
           ": call compile(optimizer, loss) before training or evaluating");
  double loss = run(Mode::Train, x, &y,
                    {iterations_ + 1, optimizer_->learning_rate_at(iterations_ + 1)}, totals)
                    .result()
                    .item();
  ++iterations_;
  return loss;
}

double Model::train_on_batch(const ModelInputs& x, const ModelTargets& y) {
  const Batch batch = ordered(x), targets = ordered_targets(y);
  examples(batch, &targets, "train_on_batch");
  return train_batch(batch, targets, nullptr);
}

Logs Model::means(double loss, const MetricTotals& totals) {
  Logs logs{{"loss", loss}};
  for (const auto& [name, t] : totals) logs[name] = t.result(t.sums);
  return logs;
}

double Model::test_on_batch(const ModelInputs& x, const ModelTargets& y) {
  const Batch batch = ordered(x), targets = ordered_targets(y);
  examples(batch, &targets, "test_on_batch");
  return run(Mode::Test, batch, &targets, {iterations_ + 1, 0}).result().item();
}

Tensor Model::predict_on_batch(const ModelInputs& x) {
  const Batch batch = ordered(x);
  examples(batch, nullptr, "predict_on_batch");
  return predict_batch(batch).at(0);
}

// Every output of the forward pass on one batch (copies).
std::vector<Tensor> Model::predict_batch(const Batch& x) {
  CompiledStep& step = run(Mode::Predict, x, nullptr, {iterations_ + 1, 0});
  const size_t outputs = output_names().size();
  if (outputs == 1) return {step.result().clone()};
  std::vector<Tensor> out;
  for (size_t k = 0; k < outputs; ++k) out.push_back(step.output(k).clone());
  return out;
}

namespace {
int64_t batch_count(int64_t n, int64_t batch_size) {
  AS_CHECK(batch_size > 0, "batch_size must be positive, got ", batch_size);
  return (n + batch_size - 1) / batch_size;
}
Tensor rows(const Tensor& t, int64_t begin, int64_t end) {
  return slice_axis(t, 0, begin, end - begin);
}
std::vector<Tensor> rows(const std::vector<Tensor>& ts, int64_t begin, int64_t end) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(rows(t, begin, end));
  return out;
}
}  // namespace

History Model::fit(const ModelInputs& inputs, const ModelTargets& targets, FitOptions o) {
  const Batch x = ordered(inputs), y = ordered_targets(targets);
  const int64_t n = examples(x, &y, "fit"), steps = batch_count(n, o.batch_size);
  std::vector<std::shared_ptr<Callback>> callbacks = o.callbacks;
  if (o.verbose) {
    auto bar = std::make_shared<ProgressBar>();
    bar->epochs = o.epochs;
    callbacks.push_back(bar);
  }
  History history;
  for (auto& cb : callbacks) cb->on_train_begin();
  for (int epoch = 0; epoch < o.epochs; ++epoch) {
    for (auto& cb : callbacks) cb->on_epoch_begin(epoch, steps);
    double total = 0;
    MetricTotals totals;
    for (int64_t b = 0; b < steps; ++b) {
      int64_t begin = b * o.batch_size, end = std::min(n, begin + o.batch_size);
      total += train_batch(rows(x, begin, end), rows(y, begin, end), &totals);
      const Logs logs = means(total / double(b + 1), totals);
      for (auto& cb : callbacks) cb->on_train_batch_end(b, logs);
    }
    const Logs logs = means(total / double(steps), totals);
    history.loss.push_back(logs.at("loss"));
    for (const auto& [name, t] : totals) history.metrics[name].push_back(logs.at(name));
    for (auto& cb : callbacks) cb->on_epoch_end(epoch, logs);
  }
  for (auto& cb : callbacks) cb->on_train_end();
  return history;
}

double Model::evaluate(const ModelInputs& x, const ModelTargets& y, int64_t batch_size) {
  return evaluate_with_metrics(x, y, batch_size).at("loss");
}

Logs Model::evaluate_with_metrics(const ModelInputs& inputs, const ModelTargets& targets,
                                  int64_t batch_size) {
  EvaluationSums sums;
  evaluate_part(inputs, targets, batch_size, sums);
  return evaluation_logs(sums);
}

void Model::evaluate_part(const ModelInputs& inputs, const ModelTargets& targets,
                          int64_t batch_size, EvaluationSums& sums) {
  const Batch x = ordered(inputs), y = ordered_targets(targets);
  const int64_t n = examples(x, &y, "evaluate"), steps = batch_count(n, batch_size);
  for (int64_t b = 0; b < steps; ++b) {
    int64_t begin = b * batch_size, end = std::min(n, begin + batch_size);
    const Batch batch_targets = rows(y, begin, end);
    sums.loss +=
        run(Mode::Test, rows(x, begin, end), &batch_targets, {iterations_ + 1, 0}, &sums.metrics)
            .result()
            .item() *
        double(end - begin);
  }
  sums.examples += n;
}

Logs Model::evaluation_logs(const EvaluationSums& sums) {
  return means(sums.examples ? sums.loss / double(sums.examples) : 0.0, sums.metrics);
}

Tensor Model::predict(const ModelInputs& inputs, int64_t batch_size) {
  return predict_outputs(inputs, batch_size).at(0);
}

std::vector<Tensor> Model::predict_outputs(const ModelInputs& inputs, int64_t batch_size) {
  const Batch x = ordered(inputs);
  const int64_t n = examples(x, nullptr, "predict"), steps = batch_count(n, batch_size);
  std::vector<std::vector<Tensor>> parts(output_names().size());
  for (int64_t b = 0; b < steps; ++b) {
    std::vector<Tensor> outs =
        predict_batch(rows(x, b * batch_size, std::min(n, (b + 1) * batch_size)));
    for (size_t k = 0; k < outs.size(); ++k) parts[k].push_back(std::move(outs[k]));
  }
  std::vector<Tensor> out;
  for (const std::vector<Tensor>& p : parts) out.push_back(concatenate(p, 0));
  return out;
}

void Model::ensure_built() {
  if (!store_.weight_paths().empty()) return;
  if (!has_unknown_dims(input_specs_)) {
    Graph g;
    trace_forward(g, 1, false);
    return;
  }
  for (int64_t length : kProbeLengths) {
    const FixedInputShapes fixed(input_specs_, probe_shapes(input_specs_, length));
    Graph g;
    trace_forward(g, 1, false);
  }
}

std::vector<std::string> Model::weight_paths() {
  ensure_built();
  return store_.weight_paths();
}

std::vector<std::string> Model::non_trainable_weight_paths() {
  std::vector<std::string> out;
  for (const std::string& p : weight_paths())
    if (non_trainable_.count(p)) out.push_back(p);
  return out;
}

std::vector<std::string> Model::slot_paths() {
  std::vector<std::string> out;
  for (const StateKey& k : store_.slots()) out.push_back(k.str());
  return out;
}

Tensor Model::gather_weight(const std::string& key) {
  ensure_built();
  place_state();
  return store_.gather(StateKey::parse(key));
}

void Model::set_weight(const std::string& key, const Tensor& value) {
  ensure_built();
  place_state();
  store_.set(StateKey::parse(key), value);
}

void Model::load_weights(const std::map<std::string, WeightSource>& sources) {
  ensure_built();
  std::map<StateKey, WeightSource> typed;
  for (const auto& [name, src] : sources) typed[StateKey::parse(name)] = src;
  store_.load(typed);
}

Model::Snapshot Model::snapshot(bool include_slots) {
  ensure_built();
  place_state();
  return store_.snapshot(include_slots);
}

int64_t Model::count_params() {
  int64_t total = 0;
  for (const std::string& p : weight_paths()) total += numel(store_.shape({p, ""}));
  return total;
}

std::string Model::summary() {
  std::ostringstream out;
  out << "Model: " << name_ << "\n";
  for (const std::string& p : weight_paths())
    out << "  " << p << "  " << shape_str(store_.shape({p, ""})) << "  "
        << numel(store_.shape({p, ""})) << "\n";
  out << "Total params: " << count_params() << "\n";
  return out.str();
}

Sequential::Sequential(SymbolicTensor input, std::vector<Layer> layers, std::string name)
    : Model({InputSpec{input.node().shape, input.node().dtype}}, std::move(name)),
      layers_(std::move(layers)) {}

Value Sequential::call(Trace& trace, const std::vector<Value>& inputs) {
  Value x = inputs.at(0);
  for (const Layer& layer : layers_) x = layer(trace, x);
  return x;
}

}  // namespace autoshard
