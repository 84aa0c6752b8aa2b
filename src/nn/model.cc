#include "autoshard/nn/model.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <sstream>

#include "autoshard/tensor/array_split.h"
#include "autoshard/ir/autodiff.h"
#include "autoshard/error.h"
#include "autoshard/comm/world.h"

namespace autoshard {

struct Model::Compiled {
  Graph graph;
  std::unique_ptr<Executor> exec;            // one device
  std::unique_ptr<ShardedExecutor> sharded;  // a mesh
  int x = -1, y = -1, result = -1;
};

Model::Model(std::vector<SymbolicTensor> inputs, SymbolicTensor output, std::string name)
    : name_(std::move(name)),
      symbolic_inputs_(std::move(inputs)),
      symbolic_output_(std::move(output)) {
  AS_CHECK(symbolic_inputs_.size() == 1, "Model ", name_, ": exactly one input is supported, got ",
        symbolic_inputs_.size());
  for (const SymbolicTensor& s : symbolic_inputs_) {
    AS_CHECK(s.get() && !s.node().layer, "Model ", name_, ": inputs must come from Input()");
    input_specs_.push_back({s.node().shape, s.node().dtype});
  }
}

Model::Model(std::vector<InputSpec> inputs, std::string name)
    : name_(std::move(name)), input_specs_(std::move(inputs)) {}

Model::~Model() = default;

Value Model::call(Trace& trace, const std::vector<Value>& inputs) {
  // Replay the recorded functional graph on traced values.
  std::map<const SymbolicTensor::Node*, Value> done;
  for (size_t i = 0; i < symbolic_inputs_.size(); ++i) done[symbolic_inputs_[i].get()] = inputs[i];
  std::function<Value(const SymbolicTensor&)> eval = [&](const SymbolicTensor& s) -> Value {
    if (auto it = done.find(s.get()); it != done.end()) return it->second;
    AS_CHECK(s.node().layer != nullptr, "Model ", name_, ": input '", s.node().name,
          "' is not one of the model's inputs");
    std::vector<Value> args;
    for (const SymbolicTensor& in : s.node().inputs) args.push_back(eval(in));
    return done[s.get()] = (*s.node().layer)(trace, args);
  };
  return eval(symbolic_output_);
}

void Model::compile(std::shared_ptr<Optimizer> optimizer, Loss loss) {
  optimizer_ = std::move(optimizer);
  loss_ = std::move(loss);
  if (!dist_) dist_ = autoshard::distribution();
  cache_.clear();
}

void Model::set_distribution(std::shared_ptr<Distribution> d) {
  AS_CHECK(shards_.empty() || (d && dist_ && d->mesh().to_string() == dist_->mesh().to_string()),
        "Model ", name_, ": its weights are already sharded over ",
        dist_ ? dist_->mesh().to_string() : "",
        "; build a new model (or save and load its weights) to change the mesh");
  dist_ = std::move(d);
  cache_.clear();
}

bool Model::sharded() const {
  return dist_ && dist_->mesh().size() > 1;
}

Value Model::trace_forward(Graph& graph, int64_t batch_size, bool training) {
  Trace trace(graph, training, seed);
  Shape shape = input_specs_[0].shape;
  shape.insert(shape.begin(), batch_size);
  Value out = call(trace, {graph.input("x", shape, input_specs_[0].dtype)});
  note_weights(graph, trace);
  return out;
}

void Model::note_weights(const Graph& graph, const Trace& trace) {
  for (int id : graph.parameters()) {
    const Node& n = graph.node(id);
    const std::string key = n.leaf().key();
    if (shapes_.emplace(key, n.shape).second) {
      auto init = trace.initializers().find(key);
      if (init != trace.initializers().end()) {
        inits_.emplace(key, init->second);
        weight_order_.push_back(key);
      }
    }
  }
}

// The whole tensor of a path on one device, made on first use.
Tensor& Model::whole(const std::string& path) {
  auto it = state_.find(path);
  if (it != state_.end()) return it->second;
  const Shape& shape = shapes_.at(path);
  if (auto src = sources_.find(path); src != sources_.end()) {
    Tensor t = src->second.read(shape, Sharding::replicated(shape.size()), DeviceMesh(), 0);
    sources_.erase(src);
    return state_[path] = t;
  }
  auto init = inits_.find(path);
  return state_[path] = init != inits_.end() ? init->second.make(path, shape, seed) : Tensor(shape);
}

// One device's block, drawn straight from the initializer (no whole tensor):
// counter-based draws make it equal to the same block of a whole draw.
Tensor Model::initial_block(const std::string& path, const Sharding& layout, int device) {
  if (auto it = state_.find(path); it != state_.end())
    return block_of(it->second, layout, dist_->mesh(), device);
  const Shape& shape = shapes_.at(path);
  if (auto src = sources_.find(path); src != sources_.end()) {
    return src->second.read(shape, layout, dist_->mesh(), device);
  }
  const Shape local = layout.local_shape(shape, dist_->mesh(), device);
  Tensor block(local);
  auto init = inits_.find(path);
  if (init == inits_.end()) return block;  // optimizer slots start at zero
  const std::vector<int64_t> off = layout.offsets(shape, dist_->mesh(), device);
  const std::vector<int64_t> gs = strides_of(shape);
  std::vector<int64_t> idx(local.size(), 0);
  for (int64_t e = 0; e < block.numel(); ++e) {
    int64_t g = 0;
    for (size_t d = 0; d < local.size(); ++d) g += (idx[d] + off[d]) * gs[d];
    block.f32()[e] = init->second.value(path, shape, seed, g);
    for (size_t d = local.size(); d-- > 0;) {
      if (++idx[d] < local[d]) break;
      idx[d] = 0;
    }
  }
  return block;
}

void Model::trace_step(Compiled& c, Mode mode, const Shape& x_shape, DType x_dtype,
                       const Shape* y_shape, DType y_dtype) {
  AS_CHECK(x_dtype == input_specs_[0].dtype, "Model ", name_, ": input must be ",
        dtype_name(input_specs_[0].dtype), ", got ", dtype_name(x_dtype));
  AS_CHECK(mode == Mode::Predict || (optimizer_ && loss_), "Model ", name_,
        ": call compile(optimizer, loss) before training or evaluating");
  AS_CHECK(x_shape.size() == input_specs_[0].shape.size() + 1 &&
            std::equal(x_shape.begin() + 1, x_shape.end(), input_specs_[0].shape.begin()),
        "Model ", name_, ": input of shape ", shape_str(x_shape), " does not match the model's ",
        "input shape [batch] + ", shape_str(input_specs_[0].shape));
  Graph& g = c.graph;
  Value out = trace_forward(g, x_shape[0], mode == Mode::Train);
  c.x = g.find_input("x");
  Value result = out;
  if (mode != Mode::Predict) {
    Value y = g.input("y", *y_shape, y_dtype);
    c.y = y.id;
    result = loss_(out, y);
    AS_CHECK(result.shape().empty(), "Model ", name_, ": the loss must be a scalar");
  }
  if (mode == Mode::Train) {
    std::vector<Value> params, grads;
    for (int id : g.parameters()) params.push_back(g.value(id));
    grads = gradients(result, params);
    optimizer_->append_update(g, params, grads);
    for (int id : g.parameters()) shapes_.emplace(g.node(id).leaf().key(), g.node(id).shape);
  }
  c.result = result.id;
}

Model::Compiled& Model::compiled(Mode mode, const Tensor& x, const Tensor* y) {
  std::string key = std::to_string(int(mode)) + shape_str(x.shape());
  if (y) key += shape_str(y->shape()) + dtype_name(y->dtype());
  auto& slot = cache_[key];
  if (slot) return *slot;
  auto c = std::make_unique<Compiled>();
  trace_step(*c, mode, x.shape(), x.dtype(), y ? &y->shape() : nullptr,
             y ? y->dtype() : DType::F32);
  if (sharded()) {
    bind_sharded(*c);
  } else {
    c->exec = std::make_unique<Executor>(c->graph, std::vector<int>{c->result});
    for (int id : c->graph.parameters()) c->exec->bind(id, whole(c->graph.node(id).leaf().key()));
  }
  slot = std::move(c);
  return *slot;
}

// The layout of every leaf of a step: weights as the distribution says,
// optimizer state as its weight (or ZeRO's), inputs split on the batch.
std::map<int, Sharding> Model::leaf_layouts(const Graph& g) {
  dist_->prepare(g);
  std::map<int, Sharding> leaves;
  for (int id : g.parameters()) {
    const Node& n = g.node(id);
    const std::string path = n.leaf().key();
    Sharding layout;
    if (n.leaf().is_slot()) {
      const std::string& weight = n.leaf().name;
      layout = dist_->state_layout(dist_->weight_layout(weight, shapes_.at(weight)), n.shape);
    } else {
      layout = dist_->weight_layout(path, n.shape);
    }
    if (auto it = layouts_.find(path); it != layouts_.end())
      AS_CHECK(it->second == layout, "internal: weight '", path, "' laid out two ways");
    layouts_[path] = layout;
    leaves[id] = layout;
  }
  for (int id : g.inputs()) leaves[id] = dist_->input_layout(g.node(id).shape);
  return leaves;
}

// Partitions the step and binds each device's blocks.
void Model::bind_sharded(Compiled& c) {
  const Graph& g = c.graph;
  const DeviceMesh& mesh = dist_->mesh();
  c.sharded =
      std::make_unique<ShardedExecutor>(g, mesh, leaf_layouts(g), std::vector<int>{c.result});
  if (shards_.empty()) shards_.resize(mesh.size());
  const std::vector<int>& devices = c.sharded->devices();
  for (int id : g.parameters()) {
    const std::string path = g.node(id).leaf().key();
    for (int d : devices) {
      if (!shards_[d].count(path)) shards_[d][path] = initial_block(path, layouts_.at(path), d);
      c.sharded->bind(d, id, shards_[d].at(path));
    }
    if (sources_.count(path)) sources_.erase(path);  // every device here has read its block
    state_.erase(path);                              // the blocks are the value now
  }
  c.sharded->set_profile(profile);
}

Partition Model::plan_training(const Shape& x_shape, const Shape& y_shape, DType y_dtype) {
  AS_CHECK(dist_ != nullptr, "Model ", name_, ": plan_training needs a distribution");
  Compiled c;
  trace_step(c, Mode::Train, x_shape, input_specs_[0].dtype, &y_shape, y_dtype);
  return partition(c.graph, dist_->mesh(), leaf_layouts(c.graph), {c.result});
}

double Model::run(Compiled& c, const Tensor& x, const Tensor* y, const StepContext& ctx) {
  if (!c.sharded) {
    c.exec->bind(c.x, x);
    if (y) c.exec->bind(c.y, *y);
    c.exec->set_profile(profile);
    c.exec->run(ctx);
    return c.exec->value(c.result).numel() == 1 ? c.exec->value(c.result).item() : 0.0;
  }
  const DeviceMesh& mesh = dist_->mesh();
  for (int d : c.sharded->devices()) {
    c.sharded->bind(d, c.x, block_of(x, c.sharded->layout(c.x), mesh, d));
    if (y) c.sharded->bind(d, c.y, block_of(*y, c.sharded->layout(c.y), mesh, d));
  }
  c.sharded->set_profile(profile);
  c.sharded->run(ctx);
  return c.sharded->output(0).numel() == 1 ? c.sharded->output(0).item() : 0.0;
}

double Model::train_on_batch(const Tensor& x, const Tensor& y) {
  Compiled& c = compiled(Mode::Train, x, &y);
  double loss = run(c, x, &y, {iterations_ + 1, optimizer_->learning_rate});
  ++iterations_;
  return loss;
}

double Model::test_on_batch(const Tensor& x, const Tensor& y) {
  return run(compiled(Mode::Test, x, &y), x, &y, {iterations_ + 1, 0});
}

Tensor Model::predict_on_batch(const Tensor& x) {
  Compiled& c = compiled(Mode::Predict, x, nullptr);
  run(c, x, nullptr, {iterations_ + 1, 0});
  return (c.sharded ? c.sharded->output(0) : c.exec->value(c.result)).clone();
}

namespace {
int64_t batch_count(int64_t n, int64_t batch_size) {
  AS_CHECK(batch_size > 0, "batch_size must be positive, got ", batch_size);
  return (n + batch_size - 1) / batch_size;
}
Tensor rows(const Tensor& t, int64_t begin, int64_t end) {
  return slice_axis(t, 0, begin, end - begin);
}
}  // namespace

History Model::fit(const Tensor& x, const Tensor& y, FitOptions o) {
  AS_CHECK(x.rank() >= 1 && y.rank() >= 1 && x.dim(0) == y.dim(0), "fit: x and y must have the same ",
        "number of examples, got ", shape_str(x.shape()), " and ", shape_str(y.shape()));
  const int64_t n = x.dim(0), steps = batch_count(n, o.batch_size);
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
    for (int64_t b = 0; b < steps; ++b) {
      int64_t begin = b * o.batch_size, end = std::min(n, begin + o.batch_size);
      total += train_on_batch(rows(x, begin, end), rows(y, begin, end));
      Logs logs{{"loss", total / double(b + 1)}};
      for (auto& cb : callbacks) cb->on_train_batch_end(b, logs);
    }
    history.loss.push_back(total / double(steps));
    for (auto& cb : callbacks) cb->on_epoch_end(epoch, {{"loss", history.loss.back()}});
  }
  for (auto& cb : callbacks) cb->on_train_end();
  return history;
}

double Model::evaluate(const Tensor& x, const Tensor& y, int64_t batch_size) {
  const int64_t n = x.dim(0), steps = batch_count(n, batch_size);
  double total = 0;
  for (int64_t b = 0; b < steps; ++b) {
    int64_t begin = b * batch_size, end = std::min(n, begin + batch_size);
    total += test_on_batch(rows(x, begin, end), rows(y, begin, end)) * double(end - begin);
  }
  return total / double(n);
}

Tensor Model::predict(const Tensor& x, int64_t batch_size) {
  const int64_t n = x.dim(0), steps = batch_count(n, batch_size);
  std::vector<Tensor> parts;
  for (int64_t b = 0; b < steps; ++b)
    parts.push_back(predict_on_batch(rows(x, b * batch_size, std::min(n, (b + 1) * batch_size))));
  return concatenate(parts, 0);
}

void Model::ensure_built() {
  if (!weight_order_.empty()) return;
  Graph g;
  trace_forward(g, 1, false);
}

std::vector<std::string> Model::weight_paths() {
  ensure_built();
  return weight_order_;
}

std::vector<std::string> Model::slot_paths() const {
  std::vector<std::string> paths;
  for (const auto& [path, shape] : shapes_)
    if (path.rfind("optimizer.", 0) == 0) paths.push_back(path);
  return paths;
}

Tensor Model::gather_weight(const std::string& path) {
  ensure_built();
  AS_CHECK(shapes_.count(path), "Model ", name_, " has no weight '", path, "'");
  const int first = first_local_shard(path);
  if (first < 0) return whole(path);
  Tensor t(shapes_.at(path));
  if (!World::process().distributed()) {
    for (int d = 0; d < dist_->mesh().size(); ++d)
      write_block(t, shards_[d].at(path), layouts_.at(path), dist_->mesh(), d);
    return t;
  }
  // Each rank holds one block: the writer of each block adds it, and a sum
  // over the ranks assembles the whole.
  if (writes_block(layouts_.at(path), first))
    write_block(t, shards_[first].at(path), layouts_.at(path), dist_->mesh(), first);
  World::process().sum(t.f32(), t.numel());
  return t;
}

void Model::set_weight(const std::string& path, const Tensor& value) {
  ensure_built();
  AS_CHECK(shapes_.count(path), "Model ", name_, " has no weight '", path, "'");
  AS_CHECK(shapes_.at(path) == value.shape() && value.dtype() == DType::F32, "weight '", path, "' is ",
        shape_str(shapes_.at(path)), ", cannot set it from ", dtype_name(value.dtype()),
        shape_str(value.shape()));
  if (first_local_shard(path) < 0) {
    std::memcpy(whole(path).raw(), value.raw(), value.nbytes());
    return;
  }
  for (int d = 0; d < dist_->mesh().size(); ++d) {
    if (!shards_[d].count(path)) continue;  // another process's device
    Tensor block = block_of(value, layouts_.at(path), dist_->mesh(), d);
    std::memcpy(shards_[d].at(path).raw(), block.raw(), block.nbytes());
  }
}

void Model::load_weights(const std::map<std::string, WeightSource>& sources) {
  ensure_built();
  for (const auto& [path, src] : sources) {
    // Optimizer slots have their weight's shape, known before the optimizer made them.
    if (!shapes_.count(path) && path.rfind("optimizer.", 0) == 0 &&
        path.find('.', 10) != std::string::npos) {
      const std::string weight = path.substr(path.find('.', 10) + 1);
      if (shapes_.count(weight)) shapes_[path] = shapes_.at(weight);
    }
    AS_CHECK(shapes_.count(path), "Model ", name_, " has no weight '", path,
          "' (the checkpoint has it)");
    src.check(path, shapes_.at(path));
  }
  // Read what is already materialised now (into staging), then commit all.
  std::map<std::string, Tensor> staged;
  for (const auto& [path, src] : sources) {
    const Shape& shape = shapes_.at(path);
    if (state_.count(path) || first_local_shard(path) >= 0)
      staged[path] = src.read(shape, Sharding::replicated(shape.size()), DeviceMesh(), 0);
  }
  for (const auto& [path, src] : sources)
    if (!staged.count(path)) sources_[path] = src;
  for (const auto& [path, t] : staged) set_weight(path, t);
}

Model::Snapshot Model::snapshot(bool include_slots) {
  ensure_built();
  Snapshot snap;
  snap.mesh = sharded() ? dist_->mesh() : DeviceMesh();
  for (const auto& [path, shape] : shapes_) {
    const bool slot = path.rfind("optimizer.", 0) == 0;
    if (slot && !include_slots) continue;
    Snapshot::Entry e;
    e.shape = shape;
    if (first_local_shard(path) >= 0) {
      e.layout = layouts_.at(path);
      for (int d = 0; d < snap.mesh.size(); ++d)
        e.blocks.push_back(shards_[d].count(path) && writes_block(e.layout, d)
                               ? shards_[d].at(path).clone()
                               : Tensor());
    } else {
      e.layout = Sharding::replicated(shape.size());
      Tensor w = gather_weight(path).clone();
      e.blocks.push_back(w);
      for (int d = 1; d < snap.mesh.size(); ++d) e.blocks.push_back(Tensor());
    }
    snap.entries[path] = std::move(e);
  }
  return snap;
}

int Model::first_local_shard(const std::string& path) const {
  for (size_t d = 0; d < shards_.size(); ++d)
    if (shards_[d].count(path)) return static_cast<int>(d);
  return -1;
}

// Of the devices holding the same block of a value, the one at coordinate 0
// of every axis that does not split it writes (saves, assembly).
bool Model::writes_block(const Sharding& layout, int device) const {
  const std::vector<int> c = dist_->mesh().coordinates(device);
  for (int a = 0; a < dist_->mesh().rank(); ++a)
    if (layout.dim_of(a) < 0 && c[a] != 0) return false;
  return true;
}

int64_t Model::count_params() {
  int64_t total = 0;
  for (const std::string& p : weight_paths()) total += numel(shapes_.at(p));
  return total;
}

std::string Model::summary() {
  std::ostringstream out;
  out << "Model: " << name_ << "\n";
  for (const std::string& p : weight_paths())
    out << "  " << p << "  " << shape_str(shapes_.at(p)) << "  " << numel(shapes_.at(p)) << "\n";
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
