#include "autoshard/model.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <sstream>

#include "autoshard/array_split.h"
#include "autoshard/autodiff.h"
#include "autoshard/error.h"

namespace autoshard {

struct Model::Compiled {
  Graph graph;
  std::unique_ptr<Executor> exec;
  int x = -1, y = -1, result = -1;
};

Model::Model(std::vector<SymbolicTensor> inputs, SymbolicTensor output, std::string name)
    : name_(std::move(name)), symbolic_inputs_(std::move(inputs)), symbolic_output_(std::move(output)) {
  check(symbolic_inputs_.size() == 1, "Model ", name_, ": exactly one input is supported, got ",
        symbolic_inputs_.size());
  for (const SymbolicTensor& s : symbolic_inputs_) {
    check(s.get() && !s.node().layer, "Model ", name_, ": inputs must come from Input()");
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
    check(s.node().layer != nullptr, "Model ", name_, ": input '", s.node().name,
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
  cache_.clear();
}

Value Model::trace_forward(Graph& graph, int64_t batch_size, bool training) {
  Trace trace(graph, training, seed);
  Shape shape = input_specs_[0].shape;
  shape.insert(shape.begin(), batch_size);
  Value out = call(trace, {graph.input("x", shape, input_specs_[0].dtype)});
  materialize(graph, trace);
  return out;
}

void Model::materialize(const Graph& graph, const Trace& trace) {
  for (int id : graph.parameters()) {
    const Node& n = graph.node(id);
    if (state_.count(n.attrs.text)) continue;
    auto init = trace.initializers().find(n.attrs.text);
    if (init != trace.initializers().end()) {
      state_[n.attrs.text] = init->second.make(n.attrs.text, n.shape, seed);
      weight_order_.push_back(n.attrs.text);
    } else {
      state_[n.attrs.text] = Tensor(n.shape);  // optimizer slots start at zero
    }
  }
}

Model::Compiled& Model::compiled(Mode mode, const Tensor& x, const Tensor* y_value) {
  const Shape& x_shape = x.shape();
  std::string key = std::to_string(int(mode)) + shape_str(x_shape);
  if (y_value) key += shape_str(y_value->shape()) + dtype_name(y_value->dtype());
  auto& slot = cache_[key];
  if (slot) return *slot;
  check(x.dtype() == input_specs_[0].dtype, "Model ", name_, ": input must be ",
        dtype_name(input_specs_[0].dtype), ", got ", dtype_name(x.dtype()));
  check(mode == Mode::Predict || (optimizer_ && loss_), "Model ", name_,
        ": call compile(optimizer, loss) before training or evaluating");
  check(x_shape.size() == input_specs_[0].shape.size() + 1 &&
            std::equal(x_shape.begin() + 1, x_shape.end(), input_specs_[0].shape.begin()),
        "Model ", name_, ": input of shape ", shape_str(x_shape), " does not match the model's ",
        "input shape [batch] + ", shape_str(input_specs_[0].shape));
  auto c = std::make_unique<Compiled>();
  Graph& g = c->graph;
  Value out = trace_forward(g, x_shape[0], mode == Mode::Train);
  c->x = g.find_input("x");
  Value result = out;
  if (mode != Mode::Predict) {
    Value y = g.input("y", y_value->shape(), y_value->dtype());
    c->y = y.id;
    result = loss_(out, y);
    check(result.shape().empty(), "Model ", name_, ": the loss must be a scalar");
  }
  if (mode == Mode::Train) {
    std::vector<Value> params, grads;
    for (int id : g.parameters()) params.push_back(g.value(id));
    grads = gradients(result, params);
    optimizer_->append_update(g, params, grads);
    for (int id : g.parameters())
      if (!state_.count(g.node(id).attrs.text)) state_[g.node(id).attrs.text] = Tensor(g.node(id).shape);
  }
  c->result = result.id;
  c->exec = std::make_unique<Executor>(g, std::vector<int>{result.id});
  for (int id : g.parameters()) c->exec->bind(id, state_.at(g.node(id).attrs.text));
  slot = std::move(c);
  return *slot;
}

double Model::train_on_batch(const Tensor& x, const Tensor& y) {
  Compiled& c = compiled(Mode::Train, x, &y);
  c.exec->bind(c.x, x);
  c.exec->bind(c.y, y);
  c.exec->set_profile(profile);
  c.exec->run({iterations_ + 1, optimizer_->learning_rate});
  ++iterations_;
  return c.exec->value(c.result).item();
}

double Model::test_on_batch(const Tensor& x, const Tensor& y) {
  Compiled& c = compiled(Mode::Test, x, &y);
  c.exec->bind(c.x, x);
  c.exec->bind(c.y, y);
  c.exec->run({iterations_ + 1, 0});
  return c.exec->value(c.result).item();
}

Tensor Model::predict_on_batch(const Tensor& x) {
  Compiled& c = compiled(Mode::Predict, x, nullptr);
  c.exec->bind(c.x, x);
  c.exec->run({iterations_ + 1, 0});
  return c.exec->value(c.result).clone();
}

namespace {
int64_t batch_count(int64_t n, int64_t batch_size) {
  check(batch_size > 0, "batch_size must be positive, got ", batch_size);
  return (n + batch_size - 1) / batch_size;
}
Tensor rows(const Tensor& t, int64_t begin, int64_t end) { return slice_axis(t, 0, begin, end - begin); }
}  // namespace

History Model::fit(const Tensor& x, const Tensor& y, FitOptions o) {
  check(x.rank() >= 1 && y.rank() >= 1 && x.dim(0) == y.dim(0), "fit: x and y must have the same ",
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

Tensor& Model::weight(const std::string& path) {
  ensure_built();
  auto it = state_.find(path);
  check(it != state_.end(), "Model ", name_, " has no weight '", path, "'");
  return it->second;
}

void Model::set_weight(const std::string& path, const Tensor& value) {
  Tensor& w = weight(path);
  check(w.shape() == value.shape() && value.dtype() == DType::F32, "weight '", path, "' is ",
        shape_str(w.shape()), ", cannot set it from ", dtype_name(value.dtype()),
        shape_str(value.shape()));
  std::memcpy(w.raw(), value.raw(), w.nbytes());
}

int64_t Model::count_params() {
  int64_t total = 0;
  for (const std::string& p : weight_paths()) total += state_.at(p).numel();
  return total;
}

std::string Model::summary() {
  std::ostringstream out;
  out << "Model: " << name_ << "\n";
  for (const std::string& p : weight_paths())
    out << "  " << p << "  " << shape_str(state_.at(p).shape()) << "  " << state_.at(p).numel() << "\n";
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
