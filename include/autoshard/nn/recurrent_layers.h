// Keras's recurrent layers: LSTM, GRU, SimpleRNN and the Bidirectional
// wrapper, with Keras 3's names, options, defaults and weights, so that
// Keras or TensorFlow.js weights load by path:
//
//   LSTM       kernel [in, 4 units], recurrent_kernel [units, 4 units],
//              bias [4 units]; gate columns in Keras's order i, f, c, o.
//   GRU        kernel [in, 3 units], recurrent_kernel [units, 3 units], gate
//              columns z, r, h; bias [2, 3 units] (input bias, recurrent
//              bias) with reset_after (the default), [3 units] without.
//   SimpleRNN  kernel [in, units], recurrent_kernel [units, units], bias [units].
//   Bidirectional: "<name>.forward_<layer>.*" and "<name>.backward_<layer>.*".
//
// Inputs are [batch, time, features]. The input projection of every time
// step is ONE einsum, then the recurrence is unrolled in the graph: per step
// one einsum (all gates at once) and the gates' arithmetic, one fused op for
// Keras's default LSTM and GRU (ops::lstm_cell, ops::gru_cell) and a few
// elementwise ops otherwise. So the planner can split it like any other op
// sequence: over the batch (no communication) or over the units (the
// recurrent kernel's columns split, the state gathered every step).
//
// Masks (autoshard/nn/masking.h): a masked step keeps the states, as
// Keras's. Differences from Keras, documented in docs/layers.md: no
// `stateful`. As in Keras, `recurrent_initializer`
// defaults to orthogonal and LSTM's `unit_forget_bias` starts the forget
// gate's bias at one.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "autoshard/nn/layers.h"

namespace autoshard {

// An option every recurrent layer has: its setter returns the layer's own
// options type (`Self`), so that LSTMOptions().dropout(0.1).unit_forget_bias(false)
// chains the shared and the layer's own options in any order.
#define AUTOSHARD_RNN_OPTION(Type, field, init) \
  Type field##_ = init;                         \
  Self& field(Type v) {                         \
    field##_ = std::move(v);                    \
    return static_cast<Self&>(*this);           \
  }

// The options LSTM, GRU and SimpleRNN share, written once (Keras 3's RNN
// arguments; keras/src/layers/rnn/lstm.py, gru.py, simple_rnn.py). The
// Keras layer table reads them from a config (src/io/keras/layers/recurrent.cc)
// and the layers read them into their one record (src/nn/recurrent_layers.cc).
template <typename Self>
struct RecurrentOptions {
  AUTOSHARD_RNN_OPTION(std::string, activation, "tanh")
  AUTOSHARD_RNN_OPTION(bool, use_bias, true)
  AUTOSHARD_RNN_OPTION(Initializer, kernel_initializer, Initializer::glorot_uniform())
  AUTOSHARD_RNN_OPTION(Initializer, recurrent_initializer, Initializer::orthogonal())
  AUTOSHARD_RNN_OPTION(Initializer, bias_initializer, Initializer::zeros())
  // Fraction of the inputs (one mask over features, the same at every time
  // step, as Keras draws it) and of the state fed to the recurrent product
  // dropped while training.
  AUTOSHARD_RNN_OPTION(double, dropout, 0.0)
  AUTOSHARD_RNN_OPTION(double, recurrent_dropout, 0.0)
  AUTOSHARD_RNN_OPTION(uint64_t, seed, 0)
  // The whole output sequence [batch, time, units] instead of the last step.
  AUTOSHARD_RNN_OPTION(bool, return_sequences, false)
  // call_with_states also returns the final states (LSTM: h, c; the others:
  // h); operator() always returns the output only.
  AUTOSHARD_RNN_OPTION(bool, return_state, false)
  // Process time backwards; a returned sequence stays in processed
  // (reversed) order, as Keras returns it.
  AUTOSHARD_RNN_OPTION(bool, go_backwards, false)
  // Masked steps (Trace::mask) output zeros instead of the previous h
  // (Keras's zero_output_for_mask; Bidirectional sets it with
  // return_sequences).
  AUTOSHARD_RNN_OPTION(bool, zero_output_for_mask, false)
  AUTOSHARD_RNN_OPTION(std::string, name, "")
};

#undef AUTOSHARD_RNN_OPTION

struct LSTMOptions : RecurrentOptions<LSTMOptions> {
  AUTOSHARD_OPTION(std::string, recurrent_activation, "sigmoid")
  // Keras's: the forget gate's initial bias is one, the other gates' come
  // from bias_initializer (Initializer::unit_forget_bias); a loaded or set
  // bias is used as given either way.
  AUTOSHARD_OPTION(bool, unit_forget_bias, true)
};

struct GRUOptions : RecurrentOptions<GRUOptions> {
  AUTOSHARD_OPTION(std::string, recurrent_activation, "sigmoid")
  // true (Keras 3's default, cuDNN's form): hh = tanh(x_h + r * (h U_h + b_rh))
  // with separate input and recurrent biases; false: hh = tanh(x_h + (r * h) U_h).
  AUTOSHARD_OPTION(bool, reset_after, true)
};

struct SimpleRNNOptions : RecurrentOptions<SimpleRNNOptions> {};

// What LSTM, GRU and SimpleRNN share. As a Layer it takes [x] or, as Keras's
// list form, [x, initial states...] and returns the output (the last step's
// h, or the sequence with return_sequences).
class RecurrentLayer : public Layer {
 public:
  struct Impl;
  // Keras's call with return_state: the output followed by the final states
  // (LSTM: h, c; GRU and SimpleRNN: h), starting from `initial_state` (zeros
  // when empty). Traced under the layer's name scope, like operator().
  std::vector<Value> call_with_states(Trace& trace, Value x,
                                      const std::vector<Value>& initial_state = {}) const;
  int64_t units() const;
  // 2 for LSTM (h, c), 1 otherwise.
  int state_count() const;
  const Impl& impl() const { return *rnn_; }

 protected:
  explicit RecurrentLayer(std::shared_ptr<Impl> impl);

 private:
  std::shared_ptr<Impl> rnn_;
};

// Long short-term memory (Hochreiter & Schmidhuber 1997) as Keras computes it:
// z = x W + h U + b split into i, f, c, o; c' = sig(f) c + sig(i) tanh(c_z);
// h' = sig(o) tanh(c').
class LSTM : public RecurrentLayer {
 public:
  explicit LSTM(int64_t units, LSTMOptions options = {});
};

// Gated recurrent unit (Cho et al. 2014) as Keras computes it:
// h' = z h + (1 - z) hh.
class GRU : public RecurrentLayer {
 public:
  explicit GRU(int64_t units, GRUOptions options = {});
};

// h' = activation(x W + h U + b).
class SimpleRNN : public RecurrentLayer {
 public:
  explicit SimpleRNN(int64_t units, SimpleRNNOptions options = {});
};

struct BidirectionalOptions {
  // "concat" (forward then backward along the last axis), "sum", "mul",
  // "ave", or "none" (two outputs, unmerged: Layer::outputs or call_with_states).
  AUTOSHARD_OPTION(std::string, merge_mode, "concat")
  AUTOSHARD_OPTION(std::string, name, "")
};

// Runs a copy of `layer` forwards ("forward_<name>") and one with
// go_backwards flipped ("backward_<name>") over the same input, reverses the
// backward sequence back into time order, and merges the two outputs. With
// return_state, call_with_states returns the output(s), then the forward
// layer's states, then the backward layer's; initial states are given in the
// same order (the first half to the forward layer).
class Bidirectional : public Layer {
 public:
  struct Impl;
  explicit Bidirectional(const RecurrentLayer& layer, BidirectionalOptions options = {});
  // A given backward layer (its own name and options; its go_backwards must
  // differ from the forward layer's, return_sequences and return_state match).
  Bidirectional(const RecurrentLayer& layer, const RecurrentLayer& backward_layer,
                BidirectionalOptions options = {});
  std::vector<Value> call_with_states(Trace& trace, Value x,
                                      const std::vector<Value>& initial_state = {}) const;

 private:
  explicit Bidirectional(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> bi_;
};

}  // namespace autoshard
