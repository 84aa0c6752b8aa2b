// LSTM, GRU, SimpleRNN and Bidirectional, composed from einsum, gather and
// elementwise ops (see recurrent_layers.h).
//
// The graph has no slice or concatenation primitive, so the time steps are
// taken apart and put together with what it has:
// - a step (or gate) is a run of rows of a time-major (gate-major) value:
//   gather with ids 0..n-1 offset by the first row. A gather's gradient is a
//   scatter-add as large as its table, so the T steps are split off by a
//   binary tree of such slices: every level of the tree moves the sequence
//   once, T log T in all instead of T^2 for T slices of the whole sequence;
// - the output sequence is stacked by the same tree the other way: two runs
//   of rows are placed into one by an einsum with a 0/1 placement matrix.
// Sigmoid gates are tanh's: sigmoid(x) = 0.5 + 0.5 tanh(x / 2), exactly; the
// halving is folded into the kernels once per step of training, so the
// default LSTM applies one tanh to all four gates at once.
#include "autoshard/nn/recurrent_layers.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "autoshard/error.h"
#include "autoshard/ir/ops.h"
#include "tensor/rng.h"

namespace autoshard {

namespace {

enum class CellKind { SimpleRNN, LSTM, GRU };

// One options record for the three cells (each public options struct maps to it).
struct RnnConfig {
  CellKind kind = CellKind::LSTM;
  int64_t units = 0;
  std::string activation = "tanh", recurrent_activation = "sigmoid";
  bool use_bias = true;
  Initializer kernel_init, recurrent_init, bias_init = Initializer::zeros();
  bool unit_forget_bias = true;
  bool reset_after = true;
  double dropout = 0, recurrent_dropout = 0;
  uint64_t seed = 0;
  bool return_sequences = false, return_state = false, go_backwards = false;
  std::string name;

  int gates() const { return kind == CellKind::LSTM ? 4 : kind == CellKind::GRU ? 3 : 1; }
  int states() const { return kind == CellKind::LSTM ? 2 : 1; }
  const char* type() const {
    return kind == CellKind::LSTM ? "LSTM" : kind == CellKind::GRU ? "GRU" : "SimpleRNN";
  }
};

std::string name_or(const std::string& given, const std::string& base) {
  return given.empty() ? default_layer_name(base) : given;
}

void check_rnn_activation(const std::string& a, const char* layer, const char* option) {
  if (a == "sigmoid") return;  // composed here when the op set has none
  try {
    check_activation(a);
  } catch (const Error& e) {
    fail(layer, " ", option, ": ", e.what());
  }
}

void check_config(const RnnConfig& c) {
  AS_CHECK(c.units > 0, c.type(), ": units must be positive, got ", c.units);
  AS_CHECK(c.dropout >= 0 && c.dropout < 1, c.type(), ": dropout must be in [0, 1), got ",
           c.dropout);
  AS_CHECK(c.recurrent_dropout >= 0 && c.recurrent_dropout < 1, c.type(),
           ": recurrent_dropout must be in [0, 1), got ", c.recurrent_dropout);
  check_rnn_activation(c.activation, c.type(), "activation");
  if (c.kind != CellKind::SimpleRNN)
    check_rnn_activation(c.recurrent_activation, c.type(), "recurrent_activation");
}

// ---- taking sequences apart and putting them together ----

// Rows [begin, begin + n) of x along its first axis.
Value rows(Value x, int64_t begin, int64_t n) {
  return ops::gather(x, ops::iota(*x.graph, {n}), begin);
}

// Row i of x without its first axis.
Value row(Value x, int64_t i) {
  Shape rest(x.shape().begin() + 1, x.shape().end());
  return ops::reshape(rows(x, i, 1), rest);
}

// Every row of x [n, ...] as its own value [...], by halving (see the top).
void split_rows(Value x, std::vector<Value>& out) {
  const int64_t n = x.dim(0);
  if (n == 1) {
    Shape rest(x.shape().begin() + 1, x.shape().end());
    out.push_back(ops::reshape(x, rest));
    return;
  }
  const int64_t half = (n + 1) / 2;
  split_rows(rows(x, 0, half), out);
  split_rows(rows(x, half, n - half), out);
}

// [n] with 1 at k, 0 elsewhere: a scatter-add of a one into zeros (a
// constant, so never differentiated).
Value one_hot(Graph& g, int64_t n, int64_t k) {
  return g.add(Op::ScatterAdd, {ops::iota(g, {1}), ops::constant(g, {1}, 1.0)},
               ScatterAddAttrs{{n}, {}, k});
}

// The 0/1 matrix [m, n] with ones at (j, j + k): multiplied in, it places m
// rows at rows k .. k + m - 1 of n. Built from a matrix [m, n + 1] whose
// column k is ones: its first m * n elements, read as [m, n], put element
// (j, k) at j (n + 1) + k = j n + (j + k).
Value placement(Graph& g, int64_t m, int64_t n, int64_t k) {
  Value row_k = g.add(Op::ScatterAdd, {ops::iota(g, {1}), ops::constant(g, {1, m}, 1.0)},
                      ScatterAddAttrs{{n + 1, m}, {}, k});
  Value flat = ops::reshape(ops::transpose(row_k, {1, 0}), {m * (n + 1), 1});
  return ops::reshape(rows(flat, 0, m * n), {m, n});
}

const std::string kLetters = "bcdefghjklmnopqrstuvwxyz";  // never 'i' (placement) or 'a' (rows)

// a [n1, ...] then b [n2, ...] along the first axis.
Value concat_rows(Value a, Value b) {
  Graph& g = *a.graph;
  const int64_t n = a.dim(0) + b.dim(0);
  const std::string rest = kLetters.substr(0, a.rank() - 1);
  const std::string eq = "ai,a" + rest + "->i" + rest;
  return ops::einsum(eq, placement(g, a.dim(0), n, 0), a) +
         ops::einsum(eq, placement(g, b.dim(0), n, a.dim(0)), b);
}

// The values [...] stacked along a new first axis, by halving.
Value stack_rows(const std::vector<Value>& v, size_t lo, size_t hi) {
  if (hi - lo == 1) {
    Shape s = v[lo].shape();
    s.insert(s.begin(), 1);
    return ops::reshape(v[lo], s);
  }
  const size_t mid = lo + (hi - lo + 1) / 2;
  return concat_rows(stack_rows(v, lo, mid), stack_rows(v, mid, hi));
}

// a [..., n1] then b [..., n2] along the last axis. Equal widths interleave
// through a gate axis of two (a broadcast multiply each, no contraction).
Value concat_last(Value a, Value b) {
  Graph& g = *a.graph;
  const int64_t n1 = a.dim(-1), n2 = b.dim(-1);
  Shape lead(a.shape().begin(), a.shape().end() - 1);
  Shape out = lead;
  out.push_back(n1 + n2);
  if (n1 == n2) {
    Shape pair = lead;
    pair.insert(pair.end(), {1, n1});
    Value first = ops::reshape(one_hot(g, 2, 0), {2, 1});
    Value second = ops::reshape(one_hot(g, 2, 1), {2, 1});
    return ops::reshape(ops::reshape(a, pair) * first + ops::reshape(b, pair) * second, out);
  }
  const std::string lead_letters = kLetters.substr(0, a.rank() - 1);
  const std::string eq_a = lead_letters + "a,ai->" + lead_letters + "i";
  return ops::einsum(eq_a, a, placement(g, n1, n1 + n2, 0)) +
         ops::einsum(eq_a, b, placement(g, n2, n1 + n2, n1));
}

// ---- activations ----

Value affine(Value x, double a, double b) {
  return ops::scale(x, a) + ops::constant(*x.graph, {}, b);
}

// Keras's activations by name; sigmoid as 0.5 + 0.5 tanh(x / 2).
Value activate(Value x, const std::string& name) {
  if (name == "sigmoid") return affine(ops::tanh(ops::scale(x, 0.5)), 0.5, 0.5);
  return apply_activation(x, name);
}

// Gate g's factor folded into the kernels: 1/2 for a sigmoid gate when the
// recurrent activation is sigmoid, so that tanh of the folded
// pre-activation gives the gate as 0.5 + 0.5 tanh.
bool folds_sigmoid(const RnnConfig& c) {
  return c.kind != CellKind::SimpleRNN && c.recurrent_activation == "sigmoid";
}
// Which gates take the recurrent activation: LSTM i, f, o; GRU z, r.
bool recurrent_gate(const RnnConfig& c, int gate) {
  if (c.kind == CellKind::LSTM) return gate != 2;
  if (c.kind == CellKind::GRU) return gate != 2;
  return false;
}
// The per-gate factors [G] (1 where nothing is folded).
Value gate_factors(Graph& g, const RnnConfig& c) {
  Value f = ops::constant(g, {c.gates()}, 1.0);
  if (!folds_sigmoid(c)) return f;
  for (int k = 0; k < c.gates(); ++k)
    if (recurrent_gate(c, k)) f = f - ops::scale(one_hot(g, c.gates(), k), 0.5);
  return f;
}
// The gate's activation from its folded pre-activation.
Value gate_activation(const RnnConfig& c, int gate, Value folded) {
  if (recurrent_gate(c, gate))
    return folds_sigmoid(c) ? affine(ops::tanh(folded), 0.5, 0.5)
                            : activate(folded, c.recurrent_activation);
  return activate(folded, c.activation);
}

}  // namespace

// ---- the cells ----

struct RecurrentLayer::Impl : LayerImpl {
  explicit Impl(RnnConfig config) : LayerImpl(config.name), c(std::move(config)) {
    check_config(c);
  }

  Value call(Trace& t, const std::vector<Value>& inputs) override {
    AS_CHECK(!inputs.empty(), c.type(), " ", name(), " needs an input");
    std::vector<Value> init(inputs.begin() + 1, inputs.end());
    return run(t, inputs[0], init, false).front();
  }

  // The output, then the final states. `reverse_sequence`: stack a returned
  // sequence in time order even when going backwards (Bidirectional's).
  std::vector<Value> run(Trace& t, Value x, const std::vector<Value>& initial_state,
                         bool reverse_sequence) const;

  RnnConfig c;

 private:
  struct Weights {
    Value kernel;          // [in, G, U], gate factors folded in
    Value recurrent;       // [U, G, U], likewise
    Value bias;            // [G, 1, U] added to the input projection (or invalid)
    Value recurrent_bias;  // GRU reset_after: [G, 1, U] (or invalid)
    // GRU without reset_after: the z and r gates' [2, U, U] and the h gate's
    // [U, U] (its product comes after the reset gate).
    Value recurrent_zr, recurrent_h;
  };
  Weights weights(Trace& t, int64_t in) const;
  std::vector<Value> initial(Trace& t, const std::vector<Value>& given, int64_t batch) const;
  // One step: from the input projection [G, B, U] and the states, the new states.
  std::vector<Value> step(const Weights& w, Value xp, const std::vector<Value>& states,
                          Value recurrent_mask) const;
  std::vector<Value> lstm_step(const Weights& w, Value xp, Value c, Value h_in) const;
  Value gru_step(const Weights& w, Value xp, Value h, Value h_in) const;
  uint64_t mask_key(Trace& t, const char* what) const {
    return stable_hash(t.path(what).c_str()) ^ (c.seed + t.seed() * 0x9E3779B97F4A7C15ull);
  }
};

RecurrentLayer::Impl::Weights RecurrentLayer::Impl::weights(Trace& t, int64_t in) const {
  Graph& g = t.graph();
  const int64_t G = c.gates(), U = c.units;
  Value factors = gate_factors(g, c);
  const bool fold = folds_sigmoid(c);
  // Reshaped to `shape` (gates on axis `gate_axis`), the factors folded in.
  auto folded = [&](Value v, Shape shape, size_t gate_axis) {
    Value r = ops::reshape(v, shape);
    if (!fold) return r;
    Shape f(shape.size(), 1);
    f[gate_axis] = G;
    return r * ops::reshape(factors, f);
  };
  Weights w;
  w.kernel = folded(t.weight("kernel", {in, G * U}, c.kernel_init), {in, G, U}, 1);
  w.recurrent = folded(t.weight("recurrent_kernel", {U, G * U}, c.recurrent_init), {U, G, U}, 1);
  if (c.kind == CellKind::GRU && !c.reset_after) {
    Value gate_major = ops::transpose(w.recurrent, {1, 0, 2});  // [G, U, U]
    w.recurrent_zr = rows(gate_major, 0, 2);
    w.recurrent_h = row(gate_major, 2);
  }
  if (!c.use_bias) return w;
  if (c.kind == CellKind::GRU && c.reset_after) {
    Value both = t.weight("bias", {2, G * U}, c.bias_init);
    w.bias = folded(row(both, 0), {G, 1, U}, 0);
    w.recurrent_bias = folded(row(both, 1), {G, 1, U}, 0);
  } else {
    w.bias = folded(t.weight("bias", {G * U}, c.bias_init), {G, 1, U}, 0);
  }
  return w;
}

std::vector<Value> RecurrentLayer::Impl::initial(Trace& t, const std::vector<Value>& given,
                                                 int64_t batch) const {
  const Shape want{batch, c.units};
  if (given.empty()) return std::vector<Value>(c.states(), ops::constant(t.graph(), want, 0.0));
  AS_CHECK(static_cast<int>(given.size()) == c.states(), c.type(), " ", name(), " takes ",
           c.states(), " initial state(s), got ", given.size());
  for (const Value& s : given)
    AS_CHECK(s.shape() == want, c.type(), " ", name(), ": an initial state must be ",
             shape_str(want), " (batch, units), got ", shape_str(s.shape()));
  return given;
}

std::vector<Value> RecurrentLayer::Impl::run(Trace& t, Value x,
                                             const std::vector<Value>& initial_state,
                                             bool reverse_sequence) const {
  AS_CHECK(x.rank() == 3 && x.dtype() == DType::F32, c.type(), " ", name(),
           " needs an f32 input [batch, time, features], got ", shape_str(x.shape()));
  Graph& g = t.graph();
  const int64_t B = x.dim(0), T = x.dim(1), in = x.dim(2), U = c.units;
  AS_CHECK(T >= 1 && in >= 1, c.type(), " ", name(), " needs at least one time step and feature");
  std::vector<Value> states = initial(t, initial_state, B);

  const bool training = t.training();
  if (training && c.dropout > 0)  // one mask over [batch, features], every step alike
    x = x * ops::dropout(ops::constant(g, {B, 1, in}, 1.0), c.dropout, mask_key(t, "dropout"));
  Value recurrent_mask;
  if (training && c.recurrent_dropout > 0)
    recurrent_mask = ops::dropout(ops::constant(g, {B, U}, 1.0), c.recurrent_dropout,
                                  mask_key(t, "recurrent_dropout"));

  const Weights w = weights(t, in);
  // Every step's input projection in one einsum, time- and gate-major so
  // that steps and gates are runs of rows.
  Value xp = ops::einsum("btk,kgu->tgbu", x, w.kernel);
  if (w.bias.valid()) xp = xp + w.bias;
  std::vector<Value> steps;
  split_rows(xp, steps);

  std::vector<Value> outputs;
  for (int64_t s = 0; s < T; ++s) {
    const int64_t time = c.go_backwards ? T - 1 - s : s;
    states = step(w, steps[time], states, recurrent_mask);
    outputs.push_back(states[0]);
  }

  std::vector<Value> result;
  if (c.return_sequences) {
    if (reverse_sequence) std::reverse(outputs.begin(), outputs.end());
    result.push_back(ops::transpose(stack_rows(outputs, 0, outputs.size()), {1, 0, 2}));
  } else {
    result.push_back(states[0]);
  }
  result.insert(result.end(), states.begin(), states.end());
  return result;
}

std::vector<Value> RecurrentLayer::Impl::step(const Weights& w, Value xp,
                                              const std::vector<Value>& states,
                                              Value recurrent_mask) const {
  Value h = states[0];
  Value h_in = recurrent_mask.valid() ? h * recurrent_mask : h;
  switch (c.kind) {
    case CellKind::LSTM:
      return lstm_step(w, xp, states[1], h_in);
    case CellKind::GRU:
      return {gru_step(w, xp, h, h_in)};
    case CellKind::SimpleRNN: {
      Value z =
          ops::reshape(xp, {xp.dim(1), xp.dim(2)}) + ops::einsum("bu,ugv->bv", h_in, w.recurrent);
      return {activate(z, c.activation)};
    }
  }
  return {};
}

std::vector<Value> RecurrentLayer::Impl::lstm_step(const Weights& w, Value xp, Value cs,
                                                   Value h_in) const {
  Value z = xp + ops::einsum("bu,ugv->gbv", h_in, w.recurrent);  // [4, B, U], folded
  Value i, f, g, o;
  if (folds_sigmoid(c) && c.activation == "tanh") {
    // One tanh for all four gates: sigmoid gates are 0.5 + 0.5 tanh of their
    // halved pre-activations, the cell gate tanh itself.
    Graph& gr = *z.graph;
    Value scale = ops::reshape(gate_factors(gr, c), {4, 1, 1});  // 1/2, 1/2, 1, 1/2
    Value shift = ops::reshape(ops::constant(gr, {4}, 0.5) - ops::scale(one_hot(gr, 4, 2), 0.5),
                               {4, 1, 1});  // 1/2, 1/2, 0, 1/2
    Value act = ops::tanh(z) * scale + shift;
    i = row(act, 0), f = row(act, 1), g = row(act, 2), o = row(act, 3);
  } else {
    i = gate_activation(c, 0, row(z, 0));
    f = gate_activation(c, 1, row(z, 1));
    g = gate_activation(c, 2, row(z, 2));
    o = gate_activation(c, 3, row(z, 3));
  }
  Value c_new = f * cs + i * g;
  return {o * activate(c_new, c.activation), c_new};
}

Value RecurrentLayer::Impl::gru_step(const Weights& w, Value xp, Value h, Value h_in) const {
  Value zr, h_x = row(xp, 2), hh;
  if (c.reset_after) {  // hh = tanh(x_h + r * (h U_h + b_rh))
    Value rec = ops::einsum("bu,ugv->gbv", h_in, w.recurrent);  // [3, B, U]
    if (w.recurrent_bias.valid()) rec = rec + w.recurrent_bias;
    zr = rows(xp, 0, 2) + rows(rec, 0, 2);
    Value r = gate_activation(c, 1, row(zr, 1));
    hh = gate_activation(c, 2, h_x + r * row(rec, 2));
  } else {  // hh = tanh(x_h + (r * h) U_h)
    zr = rows(xp, 0, 2) + ops::einsum("bu,guv->gbv", h_in, w.recurrent_zr);
    Value r = gate_activation(c, 1, row(zr, 1));
    hh = gate_activation(c, 2, h_x + ops::einsum("bu,uv->bv", r * h_in, w.recurrent_h));
  }
  Value z = gate_activation(c, 0, row(zr, 0));
  return hh + z * (h - hh);  // z h + (1 - z) hh
}

RecurrentLayer::RecurrentLayer(std::shared_ptr<Impl> impl) : Layer(impl), rnn_(std::move(impl)) {}

std::vector<Value> RecurrentLayer::call_with_states(Trace& trace, Value x,
                                                    const std::vector<Value>& initial_state) const {
  Trace::Scope scope(trace, rnn_->name());
  std::vector<Value> all = rnn_->run(trace, x, initial_state, false);
  if (!rnn_->c.return_state) all.resize(1);
  return all;
}

int64_t RecurrentLayer::units() const {
  return rnn_->c.units;
}
int RecurrentLayer::state_count() const {
  return rnn_->c.states();
}

namespace {

RnnConfig lstm_config(int64_t units, const LSTMOptions& o) {
  RnnConfig c;
  c.kind = CellKind::LSTM;
  c.units = units;
  c.activation = o.activation_.empty() ? "linear" : o.activation_;
  c.recurrent_activation = o.recurrent_activation_.empty() ? "linear" : o.recurrent_activation_;
  c.use_bias = o.use_bias_;
  c.kernel_init = o.kernel_initializer_;
  c.recurrent_init = o.recurrent_initializer_;
  c.bias_init = o.bias_initializer_;
  c.unit_forget_bias = o.unit_forget_bias_;
  c.dropout = o.dropout_;
  c.recurrent_dropout = o.recurrent_dropout_;
  c.seed = o.seed_;
  c.return_sequences = o.return_sequences_;
  c.return_state = o.return_state_;
  c.go_backwards = o.go_backwards_;
  c.name = name_or(o.name_, "lstm");
  return c;
}

RnnConfig gru_config(int64_t units, const GRUOptions& o) {
  RnnConfig c;
  c.kind = CellKind::GRU;
  c.units = units;
  c.activation = o.activation_.empty() ? "linear" : o.activation_;
  c.recurrent_activation = o.recurrent_activation_.empty() ? "linear" : o.recurrent_activation_;
  c.use_bias = o.use_bias_;
  c.kernel_init = o.kernel_initializer_;
  c.recurrent_init = o.recurrent_initializer_;
  c.bias_init = o.bias_initializer_;
  c.reset_after = o.reset_after_;
  c.dropout = o.dropout_;
  c.recurrent_dropout = o.recurrent_dropout_;
  c.seed = o.seed_;
  c.return_sequences = o.return_sequences_;
  c.return_state = o.return_state_;
  c.go_backwards = o.go_backwards_;
  c.name = name_or(o.name_, "gru");
  return c;
}

RnnConfig simple_rnn_config(int64_t units, const SimpleRNNOptions& o) {
  RnnConfig c;
  c.kind = CellKind::SimpleRNN;
  c.units = units;
  c.activation = o.activation_.empty() ? "linear" : o.activation_;
  c.use_bias = o.use_bias_;
  c.kernel_init = o.kernel_initializer_;
  c.recurrent_init = o.recurrent_initializer_;
  c.bias_init = o.bias_initializer_;
  c.dropout = o.dropout_;
  c.recurrent_dropout = o.recurrent_dropout_;
  c.seed = o.seed_;
  c.return_sequences = o.return_sequences_;
  c.return_state = o.return_state_;
  c.go_backwards = o.go_backwards_;
  c.name = name_or(o.name_, "simple_rnn");
  return c;
}

}  // namespace

LSTM::LSTM(int64_t units, LSTMOptions o)
    : RecurrentLayer(std::make_shared<Impl>(lstm_config(units, o))) {}
GRU::GRU(int64_t units, GRUOptions o)
    : RecurrentLayer(std::make_shared<Impl>(gru_config(units, o))) {}
SimpleRNN::SimpleRNN(int64_t units, SimpleRNNOptions o)
    : RecurrentLayer(std::make_shared<Impl>(simple_rnn_config(units, o))) {}

// ---- Bidirectional ----

namespace {
std::string without_prefix(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0 ? s.substr(prefix.size()) : s;
}
}  // namespace

struct Bidirectional::Impl : LayerImpl {
  Impl(const RecurrentLayer::Impl& layer, const RecurrentLayer::Impl* backward,
       BidirectionalOptions o)
      : LayerImpl(name_or(o.name_, "bidirectional")), merge(o.merge_mode_) {
    AS_CHECK(
        merge == "concat" || merge == "sum" || merge == "mul" || merge == "ave" || merge == "none",
        "Bidirectional: unknown merge_mode '", merge, "' (known: concat, sum, mul, ave, none)");
    RnnConfig f = layer.c;
    f.name = "forward_" + without_prefix(layer.c.name, "forward_");
    forward = std::make_shared<RecurrentLayer::Impl>(f);
    if (backward == nullptr) {
      RnnConfig b = layer.c;
      b.go_backwards = !b.go_backwards;
      b.name = "backward_" + without_prefix(layer.c.name, "backward_");
      this->backward = std::make_shared<RecurrentLayer::Impl>(b);
    } else {
      const RnnConfig& b = backward->c;
      AS_CHECK(b.go_backwards != f.go_backwards, "Bidirectional ", name(),
               ": the forward and backward layers must differ in go_backwards");
      AS_CHECK(b.return_sequences == f.return_sequences && b.return_state == f.return_state,
               "Bidirectional ", name(),
               ": the forward and backward layers must agree on return_sequences and "
               "return_state");
      this->backward = std::make_shared<RecurrentLayer::Impl>(b);
    }
  }

  Value call(Trace& t, const std::vector<Value>& inputs) override {
    AS_CHECK(merge != "none", "Bidirectional ", name(),
             ": merge_mode none gives two outputs; call call_with_states instead");
    AS_CHECK(!inputs.empty(), "Bidirectional ", name(), " needs an input");
    std::vector<Value> init(inputs.begin() + 1, inputs.end());
    return run(t, inputs[0], init).front();
  }

  std::vector<Value> run(Trace& t, Value x, const std::vector<Value>& init) {
    const int nf = forward->c.states(), nb = backward->c.states();
    AS_CHECK(init.empty() || static_cast<int>(init.size()) == nf + nb, "Bidirectional ", name(),
             " takes ", nf + nb, " initial states (forward then backward), got ", init.size());
    std::vector<Value> init_f, init_b;
    if (!init.empty()) {
      init_f.assign(init.begin(), init.begin() + nf);
      init_b.assign(init.begin() + nf, init.end());
    }
    std::vector<Value> yf, yb;
    {
      Trace::Scope scope(t, forward->name());
      yf = forward->run(t, x, init_f, false);
    }
    {
      Trace::Scope scope(t, backward->name());
      // A returned sequence comes back in time order (Keras flips it).
      yb = backward->run(t, x, init_b, true);
    }
    std::vector<Value> out;
    Value a = yf[0], b = yb[0];
    if (merge == "none") {
      out = {a, b};
    } else if (merge == "concat") {
      out = {concat_last(a, b)};
    } else {
      AS_CHECK(a.shape() == b.shape(), "Bidirectional ", name(), ": merge_mode ", merge,
               " needs outputs of one shape, got ", shape_str(a.shape()), " and ",
               shape_str(b.shape()));
      if (merge == "sum") out = {a + b};
      if (merge == "mul") out = {a * b};
      if (merge == "ave") out = {ops::scale(a + b, 0.5)};
    }
    if (forward->c.return_state) {
      out.insert(out.end(), yf.begin() + 1, yf.end());
      out.insert(out.end(), yb.begin() + 1, yb.end());
    }
    return out;
  }

  std::string merge;
  std::shared_ptr<RecurrentLayer::Impl> forward, backward;
};

Bidirectional::Bidirectional(std::shared_ptr<Impl> impl) : Layer(impl), bi_(std::move(impl)) {}
Bidirectional::Bidirectional(const RecurrentLayer& layer, BidirectionalOptions o)
    : Bidirectional(std::make_shared<Impl>(layer.impl(), nullptr, std::move(o))) {}
Bidirectional::Bidirectional(const RecurrentLayer& layer, const RecurrentLayer& backward_layer,
                             BidirectionalOptions o)
    : Bidirectional(std::make_shared<Impl>(layer.impl(), &backward_layer.impl(), std::move(o))) {}

std::vector<Value> Bidirectional::call_with_states(Trace& trace, Value x,
                                                   const std::vector<Value>& initial_state) const {
  Trace::Scope scope(trace, bi_->name());
  return bi_->run(trace, x, initial_state);
}

}  // namespace autoshard
