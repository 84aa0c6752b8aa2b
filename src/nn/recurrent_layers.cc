// LSTM, GRU, SimpleRNN and Bidirectional, composed from einsum, pad (which
// crops with negative counts), the fused cells and elementwise ops (see
// recurrent_layers.h).
//
// A time step is a crop of the input projection [B, T, G U]
// (nn/sequence_steps.h); in a composed step, a gate is a crop of its
// step's columns.
#include "autoshard/nn/recurrent_layers.h"

#include <algorithm>

#include "autoshard/error.h"
#include "autoshard/ir/ops.h"
#include "nn/sequence_steps.h"
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
  bool zero_output_for_mask = false;
  std::string name;

  int gates() const { return kind == CellKind::LSTM ? 4 : kind == CellKind::GRU ? 3 : 1; }
  int states() const { return kind == CellKind::LSTM ? 2 : 1; }
  const char* type() const {
    return kind == CellKind::LSTM ? "LSTM" : kind == CellKind::GRU ? "GRU" : "SimpleRNN";
  }
};

void check_rnn_activation(const std::string& a, const char* layer, const char* option) {
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

}  // namespace

// ---- the cells ----

struct RecurrentLayer::Impl : LayerImpl {
  explicit Impl(RnnConfig config) : LayerImpl(config.name), c(std::move(config)) {
    check_config(c);
  }

  Value call(Trace& t, const std::vector<Value>& inputs) override {
    return call_outputs(t, inputs).front();
  }
  // [x, initial states...] -> the output, then (return_state) the states.
  std::vector<Value> call_outputs(Trace& t, const std::vector<Value>& inputs) override {
    AS_CHECK(!inputs.empty(), c.type(), " ", name(), " needs an input");
    std::vector<Value> init(inputs.begin() + 1, inputs.end());
    std::vector<Value> all = run(t, inputs[0], init, false);
    all.resize(output_count());
    return all;
  }
  int output_count() const override { return c.return_state ? 1 + c.states() : 1; }
  // keras/src/layers/rnn/rnn.py, RNN.compute_mask: a returned sequence
  // keeps the input's mask; the last step and the states have none.
  Value compute_mask(Trace& t, const std::vector<Value>& inputs) override {
    return c.return_sequences ? mask_of_first(t, inputs) : Value{};
  }

  // The output, then the final states. `reverse_sequence`: stack a returned
  // sequence in time order even when going backwards (Bidirectional's).
  std::vector<Value> run(Trace& t, Value x, const std::vector<Value>& initial_state,
                         bool reverse_sequence) const;

  RnnConfig c;

 private:
  struct Weights {
    Value kernel;          // [in, G U]
    Value recurrent;       // [U, G U]
    Value bias;            // [G U] added to the input projection (or invalid)
    Value recurrent_bias;  // GRU reset_after: [G U] (or invalid)
    // GRU without reset_after: the z and r gates' [U, 2 U] and the h gate's
    // [U, U] (its product comes after the reset gate).
    Value recurrent_zr, recurrent_h;
  };
  Weights weights(Trace& t, int64_t in) const;
  std::vector<Value> initial(Trace& t, const std::vector<Value>& given, int64_t batch) const;
  // One step: from the step's input projection [B, G U] and the states, the
  // new states. `h_in` is h as the recurrent product sees it (after
  // recurrent dropout).
  std::vector<Value> lstm_step(const Weights& w, Value xp, Value c, Value h_in) const;
  // Keras's default LSTM (tanh, sigmoid) runs each step as one LstmCell op
  // (ops::lstm_cell); other activations compose lstm_step's ops.
  bool fused_lstm() const {
    return c.kind == CellKind::LSTM && c.activation == "tanh" &&
           c.recurrent_activation == "sigmoid";
  }
  // Keras's default GRU (reset_after, tanh, sigmoid) runs each step as one
  // GruCell op (ops::gru_cell); without reset_after the candidate's product
  // comes after the reset gate, so those steps stay composed.
  bool fused_gru() const {
    return c.kind == CellKind::GRU && c.reset_after && c.activation == "tanh" &&
           c.recurrent_activation == "sigmoid";
  }
  bool fused() const { return fused_lstm() || fused_gru(); }
  // The steps of a fused cell, in the order they run: the outputs; `states`
  // goes in as the initial states ((h, c) or h) and comes out as the final.
  std::vector<Value> fused_steps(const Weights& w, const std::vector<Value>& steps,
                                 const std::vector<Value>& step_masks, Value recurrent_mask,
                                 std::vector<Value>& states) const;
  Value gru_step(const Weights& w, Value xp, Value h, Value h_in) const;
  // Gate k's columns [k U, (k + 1) U) of z [B, G U].
  Value gate(Value z, int k, int n = 1) const {
    return sequence::slice(z, 1, k * c.units, n * c.units);
  }
  Value act(Value x) const { return apply_activation(x, c.activation); }
  Value recurrent_act(Value x) const { return apply_activation(x, c.recurrent_activation); }
  uint64_t mask_key(Trace& t, const char* what) const {
    return stable_hash(t.path(what).c_str()) ^ (c.seed + t.seed() * 0x9E3779B97F4A7C15ull);
  }
};

RecurrentLayer::Impl::Weights RecurrentLayer::Impl::weights(Trace& t, int64_t in) const {
  const int64_t G = c.gates(), U = c.units;
  Weights w;
  w.kernel = t.weight("kernel", {in, G * U}, c.kernel_init);
  w.recurrent = t.weight("recurrent_kernel", {U, G * U}, c.recurrent_init);
  if (c.kind == CellKind::GRU && !c.reset_after) {
    w.recurrent_zr = sequence::slice(w.recurrent, 1, 0, 2 * U);
    w.recurrent_h = sequence::slice(w.recurrent, 1, 2 * U, U);
  }
  if (!c.use_bias) return w;
  if (c.kind == CellKind::GRU && c.reset_after) {
    Value both = t.weight("bias", {2, G * U}, c.bias_init);
    w.bias = sequence::row(both, 0);
    w.recurrent_bias = sequence::row(both, 1);
  } else {
    const bool forget_one = c.kind == CellKind::LSTM && c.unit_forget_bias;
    w.bias = t.weight("bias", {G * U},
                      forget_one ? Initializer::unit_forget_bias(U, c.bias_init) : c.bias_init);
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
  // Every step's input projection in one einsum, batch-major as x is, so
  // that the product and both its gradients are plain matrix products
  // (time-major, each copied an operand into another layout:
  // docs/performance.md, "The LSTM step").
  Value xp = ops::einsum("btk,kv->btv", x, w.kernel);
  if (w.bias.valid()) xp = xp + w.bias;
  const std::vector<Value> steps = sequence::split(xp, 1);
  // Keras's masked steps (keras/src/backend/jax/rnn.py, rnn): each step's
  // mask [B, 1]; a masked step keeps the states it had, and its output is
  // the previous h (or zeros with zero_output_for_mask).
  std::vector<Value> step_masks;
  if (Value mask = t.mask(x); mask.valid()) {
    AS_CHECK(mask.shape() == (Shape{B, T}), c.type(), " ", name(), ": a mask of ",
             shape_str(mask.shape()), " for an input ", shape_str(x.shape()), " (one per step)");
    step_masks = sequence::split(ops::reshape(mask, {B, T, 1}), 1);
  }

  std::vector<Value> outputs;
  if (fused()) outputs = fused_steps(w, steps, step_masks, recurrent_mask, states);
  const int64_t composed_steps = fused() ? 0 : T;  // the other cells' steps
  for (int64_t s = 0; s < composed_steps; ++s) {
    const int64_t at = c.go_backwards ? T - 1 - s : s;
    const Value xs = steps[at];
    const Value h = states[0];
    const Value h_in = recurrent_mask.valid() ? h * recurrent_mask : h;
    std::vector<Value> next;
    switch (c.kind) {
      case CellKind::LSTM:
        next = lstm_step(w, xs, states[1], h_in);
        break;
      case CellKind::GRU:
        next = {gru_step(w, xs, h, h_in)};
        break;
      case CellKind::SimpleRNN:
        next = {act(xs + ops::einsum("bu,uv->bv", h_in, w.recurrent))};
        break;
    }
    if (step_masks.empty()) {
      states = next;
      outputs.push_back(states[0]);
      continue;
    }
    const Value m = step_masks[at];
    for (size_t i = 0; i < states.size(); ++i) states[i] = states[i] + m * (next[i] - states[i]);
    outputs.push_back(c.zero_output_for_mask ? next[0] * m : states[0]);
  }

  std::vector<Value> result;
  if (c.return_sequences) {
    if (reverse_sequence) std::reverse(outputs.begin(), outputs.end());
    result.push_back(sequence::stack(outputs, 1));
  } else {
    result.push_back(outputs.back());
  }
  result.insert(result.end(), states.begin(), states.end());
  return result;
}

std::vector<Value> RecurrentLayer::Impl::fused_steps(const Weights& w,
                                                     const std::vector<Value>& steps,
                                                     const std::vector<Value>& step_masks,
                                                     Value recurrent_mask,
                                                     std::vector<Value>& states) const {
  const int64_t T = static_cast<int64_t>(steps.size()), B = states[0].dim(0), U = c.units;
  const bool lstm = c.kind == CellKind::LSTM;
  const Shape rows{B, lstm ? 4 : 3, U}, one{1, B, U};
  // An LSTM's state [2, B, U]: h then c, one value from step to step.
  Value state =
      lstm ? ops::concat({ops::reshape(states[0], one), ops::reshape(states[1], one)}, 0) : Value{};
  Value h = states[0];
  std::vector<Value> outputs;
  for (int64_t s = 0; s < T; ++s) {
    const int64_t at = c.go_backwards ? T - 1 - s : s;
    const Value h_in = recurrent_mask.valid() ? h * recurrent_mask : h;
    Value r = ops::einsum("bu,uv->bv", h_in, w.recurrent);   // [B, G U], all gates at once
    if (w.recurrent_bias.valid()) r = r + w.recurrent_bias;  // a GRU's, with reset_after
    const Value m = step_masks.empty() ? Value{} : step_masks[at];
    const Value x = ops::reshape(steps[at], rows);
    if (lstm) {
      state = ops::lstm_cell(x, ops::reshape(r, rows), state, m);
      h = sequence::row(state, 0);
    } else {
      h = ops::gru_cell(x, ops::reshape(r, rows), h, m);
    }
    // A mask is 0 or 1, so h * m is the new h of a stepped row and 0 elsewhere.
    outputs.push_back(m.valid() && c.zero_output_for_mask ? h * m : h);
  }
  states = lstm ? std::vector<Value>{h, sequence::row(state, 1)} : std::vector<Value>{h};
  return outputs;
}

std::vector<Value> RecurrentLayer::Impl::lstm_step(const Weights& w, Value xp, Value cs,
                                                   Value h_in) const {
  // All four gates' recurrent product in one einsum, then each gate's columns.
  Value z = xp + ops::einsum("bu,uv->bv", h_in, w.recurrent);  // [B, 4 U]: i, f, c, o
  Value i = recurrent_act(gate(z, 0)), f = recurrent_act(gate(z, 1));
  Value c_new = f * cs + i * act(gate(z, 2));
  return {recurrent_act(gate(z, 3)) * act(c_new), c_new};
}

Value RecurrentLayer::Impl::gru_step(const Weights& w, Value xp, Value h, Value h_in) const {
  Value zr, hh;
  if (c.reset_after) {                                        // hh = tanh(x_h + r * (h U_h + b_rh))
    Value rec = ops::einsum("bu,uv->bv", h_in, w.recurrent);  // [B, 3 U]: z, r, h
    if (w.recurrent_bias.valid()) rec = rec + w.recurrent_bias;
    zr = recurrent_act(gate(xp, 0, 2) + gate(rec, 0, 2));
    hh = act(gate(xp, 2) + gate(zr, 1) * gate(rec, 2));
  } else {  // hh = tanh(x_h + (r * h) U_h)
    zr = recurrent_act(gate(xp, 0, 2) + ops::einsum("bu,uv->bv", h_in, w.recurrent_zr));
    hh = act(gate(xp, 2) + ops::einsum("bu,uv->bv", gate(zr, 1) * h_in, w.recurrent_h));
  }
  return hh + gate(zr, 0) * (h - hh);  // z h + (1 - z) hh
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

// The record of a cell of `kind` from the options every recurrent layer
// shares (RecurrentOptions); the callers add their layer's own.
template <typename Self>
RnnConfig rnn_config(CellKind kind, int64_t units, const RecurrentOptions<Self>& o,
                     const char* default_name) {
  RnnConfig c;
  c.kind = kind;
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
  c.zero_output_for_mask = o.zero_output_for_mask_;
  c.name = layer_name_or_default(o.name_, default_name);
  return c;
}

std::string gate_activation(const std::string& a) {
  return a.empty() ? "linear" : a;
}

RnnConfig lstm_config(int64_t units, const LSTMOptions& o) {
  RnnConfig c = rnn_config(CellKind::LSTM, units, o, "lstm");
  c.recurrent_activation = gate_activation(o.recurrent_activation_);
  c.unit_forget_bias = o.unit_forget_bias_;
  return c;
}

RnnConfig gru_config(int64_t units, const GRUOptions& o) {
  RnnConfig c = rnn_config(CellKind::GRU, units, o, "gru");
  c.recurrent_activation = gate_activation(o.recurrent_activation_);
  c.reset_after = o.reset_after_;
  return c;
}

}  // namespace

LSTM::LSTM(int64_t units, LSTMOptions o)
    : RecurrentLayer(std::make_shared<Impl>(lstm_config(units, o))) {}
GRU::GRU(int64_t units, GRUOptions o)
    : RecurrentLayer(std::make_shared<Impl>(gru_config(units, o))) {}
SimpleRNN::SimpleRNN(int64_t units, SimpleRNNOptions o)
    : RecurrentLayer(
          std::make_shared<Impl>(rnn_config(CellKind::SimpleRNN, units, o, "simple_rnn"))) {}

// ---- Bidirectional ----

namespace {
std::string without_prefix(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0 ? s.substr(prefix.size()) : s;
}
}  // namespace

struct Bidirectional::Impl : LayerImpl {
  Impl(const RecurrentLayer::Impl& layer, const RecurrentLayer::Impl* backward,
       BidirectionalOptions o)
      : LayerImpl(layer_name_or_default(o.name_, "bidirectional")), merge(o.merge_mode_) {
    AS_CHECK(
        merge == "concat" || merge == "sum" || merge == "mul" || merge == "ave" || merge == "none",
        "Bidirectional: unknown merge_mode '", merge, "' (known: concat, sum, mul, ave, none)");
    RnnConfig f = layer.c;
    f.name = "forward_" + without_prefix(layer.c.name, "forward_");
    // keras/src/layers/rnn/bidirectional.py: masked steps of a returned
    // sequence are zeros in both directions (force_zero_output_for_mask).
    f.zero_output_for_mask = f.return_sequences;
    forward = std::make_shared<RecurrentLayer::Impl>(f);
    if (backward == nullptr) {
      RnnConfig b = layer.c;
      b.go_backwards = !b.go_backwards;
      b.name = "backward_" + without_prefix(layer.c.name, "backward_");
      b.zero_output_for_mask = b.return_sequences;
      this->backward = std::make_shared<RecurrentLayer::Impl>(b);
    } else {
      RnnConfig b = backward->c;
      b.zero_output_for_mask = b.return_sequences;
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
    return call_outputs(t, inputs).front();
  }
  std::vector<Value> call_outputs(Trace& t, const std::vector<Value>& inputs) override {
    AS_CHECK(!inputs.empty(), "Bidirectional ", name(), " needs an input");
    std::vector<Value> init(inputs.begin() + 1, inputs.end());
    return run(t, inputs[0], init);
  }
  int output_count() const override {
    const int states = forward->c.states() + backward->c.states();
    return (merge == "none" ? 2 : 1) + (forward->c.return_state ? states : 0);
  }
  // Bidirectional.compute_mask: a returned sequence keeps the input's mask.
  Value compute_mask(Trace& t, const std::vector<Value>& inputs) override {
    return forward->c.return_sequences ? mask_of_first(t, inputs) : Value{};
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
      out = {ops::concat({a, b}, a.rank() - 1)};
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
