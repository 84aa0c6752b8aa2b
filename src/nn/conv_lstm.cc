// ConvLSTM1D, ConvLSTM2D and ConvLSTM3D (see conv_lstm.h): the input
// transform of every step as one convolution, then per step the recurrent
// convolution and the gates. ConvLSTM1D is the 2-D layer over rows of
// height one: its inputs, kernels and outputs are reshaped around it (no
// copy of any weight); ConvLSTM3D's convolutions are nn/conv3d.h's.
#include "autoshard/nn/conv_lstm.h"

#include <algorithm>

#include "autoshard/error.h"
#include "autoshard/ir/ops.h"
#include "nn/conv3d.h"
#include "nn/sequence_steps.h"
#include "tensor/rng.h"

namespace autoshard {
namespace {

// A per-dimension option of one value or `rank` (rank 1: a height of one
// first, as the 2-D layer runs it).
std::vector<int64_t> conv_lstm_sizes(std::vector<int64_t> v, int rank, const std::string& who,
                                     const char* option) {
  if (v.size() == 1 && rank > 1) v.assign(size_t(rank), v[0]);
  AS_CHECK(v.size() == size_t(rank), who, ": ", option, " needs ",
           rank == 1 ? std::string("1 value") : "1 or " + std::to_string(rank) + " values",
           ", got ", v.size());
  for (int64_t d : v) AS_CHECK(d >= 1, who, ": ", option, " must be positive, got ", d);
  if (rank == 1) v.insert(v.begin(), 1);
  return v;
}

struct ConvLSTMImpl : LayerImpl {
  // rank: 1, 2 or 3 (ConvLSTM1D, 2D, 3D).
  ConvLSTMImpl(int rank, int64_t filters, std::vector<int64_t> kernel, ConvLSTM2DOptions o)
      : LayerImpl(layer_name_or_default(o.name_, "conv_lstm" + std::to_string(rank) + "d")),
        rank_(rank),
        filters_(filters),
        o_(std::move(o)) {
    const std::string who = kind() + " " + name();
    AS_CHECK(filters > 0, who, ": filters must be positive, got ", filters);
    kernel_ = conv_lstm_sizes(std::move(kernel), rank, who, "kernel_size");
    strides_ = conv_lstm_sizes(o_.strides_, rank, who, "strides");
    dilations_ = conv_lstm_sizes(o_.dilation_rate_, rank, who, "dilation_rate");
    AS_CHECK(o_.padding_ == "valid" || o_.padding_ == "same", who,
             ": padding must be 'valid' or 'same', got '", o_.padding_, "'");
    // Keras's ConvLSTMCell refuses any stride above 1 with any dilation above 1.
    AS_CHECK(*std::max_element(strides_.begin(), strides_.end()) == 1 ||
                 *std::max_element(dilations_.begin(), dilations_.end()) == 1,
             who, ": strides > 1 together with dilation_rate > 1 are not supported (as in Keras)");
    check_activation(o_.activation_);
    check_activation(o_.recurrent_activation_);
    AS_CHECK(o_.dropout_ >= 0 && o_.dropout_ < 1, who, ": dropout must be in [0, 1), got ",
             o_.dropout_);
    AS_CHECK(o_.recurrent_dropout_ >= 0 && o_.recurrent_dropout_ < 1, who,
             ": recurrent_dropout must be in [0, 1), got ", o_.recurrent_dropout_);
  }

  int output_count() const override { return o_.return_state_ ? 3 : 1; }
  Value call(Trace& t, const std::vector<Value>& inputs) override {
    return call_outputs(t, inputs).front();
  }
  Value compute_mask(Trace&, const std::vector<Value>&) override { return Value{}; }

  // [x] -> the output, then (return_state) h and c. ConvLSTM1D's
  // [batch, time, cols, channels] runs as rows of height one.
  std::vector<Value> call_outputs(Trace& t, const std::vector<Value>& inputs) override {
    const std::string who = kind() + " " + name();
    AS_CHECK(inputs.size() == 1, who, " takes one input (initial states are not supported), got ",
             inputs.size());
    AS_CHECK(inputs[0].rank() == rank_ + 3, who, " needs [batch, time, ",
             rank_ == 1   ? "steps"
             : rank_ == 2 ? "rows, cols"
                          : "depth, rows, cols",
             ", channels], got ", shape_str(inputs[0].shape()));
    AS_CHECK(!t.mask(inputs[0]).valid(), who,
             ": masked inputs are not supported (no Masking or mask_zero before it)");
    Shape in = inputs[0].shape();
    if (rank_ == 1) in.insert(in.begin() + 2, 1);
    const Value x = ops::reshape(inputs[0], in);
    const int64_t B = x.dim(0), T = x.dim(1), C = x.dim(-1), F = filters_;
    const Shape space(in.begin() + 2, in.end() - 1);  // [rows, cols] or [depth, rows, cols]
    // Keras's kernels [k..., in, 4F] (ConvLSTM1D's [k, in, 4F] is [1, k, in, 4F] here).
    const auto kernel_shape = [&](int64_t from, int64_t channels) {
      return joined({Shape(kernel_.begin() + from, kernel_.end()), {channels, 4 * F}});
    };
    const int64_t keras_from = rank_ == 1 ? 1 : 0;
    Value kernel =
        ops::reshape(t.weight("kernel", kernel_shape(keras_from, C), o_.kernel_initializer_),
                     kernel_shape(0, C));
    Value recurrent = ops::reshape(
        t.weight("recurrent_kernel", kernel_shape(keras_from, F), o_.recurrent_initializer_),
        kernel_shape(0, F));
    // Every step's input transform in one convolution: [B T, space', 4F]
    // (with dropout, one per gate, each over its own masked copy).
    const Shape steps_in = joined({{B * T}, space, {C}});
    std::vector<Value> xs;
    for (const Value& m : gate_masks(t, joined({{B, 1}, space, {C}}), o_.dropout_, "dropout"))
      xs.push_back(ops::reshape(x * m, steps_in));
    if (xs.empty()) xs.push_back(ops::reshape(x, steps_in));
    Value xp = gate_conv(xs, gates_of(kernel, xs.size()), input_attrs(space, who));
    if (o_.use_bias_) {
      const Initializer bias_init = o_.unit_forget_bias_
                                        ? Initializer::unit_forget_bias(F, o_.bias_initializer_)
                                        : o_.bias_initializer_;
      xp = xp + t.weight("bias", {4 * F}, bias_init);
    }
    const Shape out_space(xp.shape().begin() + 1, xp.shape().end() - 1);
    const Shape state_shape = joined({{B}, out_space, {F}});
    const int64_t N = B * numel(out_space);
    // The steps [B, space', 4F].
    const std::vector<Value> steps =
        sequence::split(ops::reshape(xp, joined({{B, T}, out_space, {4 * F}})), 1);
    Value h = ops::constant(t.graph(), state_shape, 0.0);
    Value c = ops::constant(t.graph(), state_shape, 0.0);
    const std::vector<Value> h_masks =
        gate_masks(t, state_shape, o_.recurrent_dropout_, "recurrent_dropout");
    const std::vector<Value> recurrent_gates =
        gates_of(recurrent, std::max<size_t>(1, h_masks.size()));
    std::vector<Value> outputs;
    for (int64_t s = 0; s < T; ++s) {
      const Value z_x = steps[o_.go_backwards_ ? T - 1 - s : s];
      std::vector<Value> hs;
      for (const Value& m : h_masks) hs.push_back(h * m);
      if (hs.empty()) hs.push_back(h);
      const Value z_h = gate_conv(hs, recurrent_gates, recurrent_attrs(out_space));
      if (fused()) {
        // LstmCell over the positions as rows: gates [N, 4, F], state [2, N, F].
        const Shape one{1, N, F};
        Value state = ops::concat({ops::reshape(h, one), ops::reshape(c, one)}, 0);
        state = ops::lstm_cell(ops::reshape(z_x, {N, 4, F}), ops::reshape(z_h, {N, 4, F}), state);
        h = ops::reshape(sequence::row(state, 0), state_shape);
        c = ops::reshape(sequence::row(state, 1), state_shape);
      } else {
        const Value z = z_x + z_h;
        const auto gate = [&](int k) { return sequence::slice(z, z.rank() - 1, k * F, F); };
        c = apply_activation(gate(1), o_.recurrent_activation_) * c +
            apply_activation(gate(0), o_.recurrent_activation_) *
                apply_activation(gate(2), o_.activation_);
        h = apply_activation(gate(3), o_.recurrent_activation_) *
            apply_activation(c, o_.activation_);
      }
      outputs.push_back(h);
    }
    std::vector<Value> result;
    if (o_.return_sequences_)
      result.push_back(sequence::stack(outputs, 1));
    else
      result.push_back(h);
    if (o_.return_state_) result.insert(result.end(), {h, c});
    if (rank_ == 1)  // the height of one dropped again
      for (Value& r : result) {
        Shape cols = r.shape();
        cols.erase(cols.end() - 3);
        r = ops::reshape(r, cols);
      }
    return result;
  }

 private:
  // keras/src/layers/rnn/conv_lstm.py, ConvLSTMCell: dropout_mask_count = 4,
  // so in training DropoutRNNCell.get_dropout_mask draws four masks (i, f,
  // c, o) at the first step and reuses them at every later one; gate k's
  // convolution reads its input times mask k. Empty when nothing is dropped.
  // Keyed like the LSTM's (nn/recurrent_layers.cc): by the layer's path,
  // its seed and the model's, so every mesh draws the same masks.
  std::vector<Value> gate_masks(Trace& t, const Shape& shape, double rate, const char* what) const {
    std::vector<Value> masks;
    if (!t.training() || rate <= 0) return masks;
    for (const char* gate : {"_i", "_f", "_c", "_o"}) {
      const std::string path = t.path(std::string(what) + gate);
      const uint64_t key =
          stable_hash(path.c_str()) ^ (o_.seed_ + t.seed() * 0x9E3779B97F4A7C15ull);
      masks.push_back(ops::dropout(ops::constant(t.graph(), shape, 1.0), rate, key));
    }
    return masks;
  }
  // A kernel [k..., in, 4F] whole (n == 1) or as its four gates' [k..., in, F].
  std::vector<Value> gates_of(Value w, size_t n) const {
    if (n == 1) return {w};
    std::vector<Value> gates;
    for (int64_t k = 0; k < 4; ++k)
      gates.push_back(sequence::slice(w, w.rank() - 1, k * filters_, filters_));
    return gates;
  }
  // conv(x, w) of one input and kernel, or the four gates' conv(x_k, w_k)
  // side by side: [.., 4F] either way.
  Value gate_conv(const std::vector<Value>& xs, const std::vector<Value>& ws,
                  const ConvAttrs& a) const {
    const auto conv = [&](const Value& x, const Value& w) {
      return kernel_.size() == 3 ? conv3d(x, w, a) : ops::conv(x, w, a);
    };
    if (xs.size() == 1) return conv(xs[0], ws[0]);
    std::vector<Value> z;
    for (size_t k = 0; k < 4; ++k) z.push_back(conv(xs[k], ws[k]));
    const int64_t last = z[0].rank() - 1;
    return ops::concat(z, last);
  }
  // The shapes' dims one after another.
  static Shape joined(std::initializer_list<Shape> parts) {
    Shape shape;
    for (const Shape& p : parts) shape.insert(shape.end(), p.begin(), p.end());
    return shape;
  }

  // Keras's default activations: each step's gates as one LstmCell op.
  bool fused() const { return o_.activation_ == "tanh" && o_.recurrent_activation_ == "sigmoid"; }

  ConvAttrs input_attrs(const Shape& in, const std::string& who) const {
    ConvAttrs a;
    a.strides = strides_;
    a.dilations = dilations_;
    for (size_t i = 0; i < in.size(); ++i) {
      if (o_.padding_ == "same") {
        auto [lo, hi] = ops::same_padding(in[i], kernel_[i], strides_[i], dilations_[i]);
        a.pad_lo.push_back(lo), a.pad_hi.push_back(hi);
      } else {
        const int64_t span = dilations_[i] * (kernel_[i] - 1) + 1;
        AS_CHECK(in[i] >= span, who, ": a kernel spanning ", span, " does not fit an input of ",
                 in[i], " with padding 'valid'");
        a.pad_lo.push_back(0), a.pad_hi.push_back(0);
      }
    }
    return a;
  }
  // keras/src/layers/rnn/conv_lstm.py, recurrent_conv: stride 1, 'same', no dilation.
  ConvAttrs recurrent_attrs(const Shape& in) const {
    ConvAttrs a;
    a.strides = a.dilations = std::vector<int64_t>(in.size(), 1);
    for (size_t i = 0; i < in.size(); ++i) {
      auto [lo, hi] = ops::same_padding(in[i], kernel_[i], 1, 1);
      a.pad_lo.push_back(lo), a.pad_hi.push_back(hi);
    }
    return a;
  }

  std::string kind() const { return "ConvLSTM" + std::to_string(rank_) + "D"; }

  int rank_;
  int64_t filters_;
  std::vector<int64_t> kernel_, strides_, dilations_;
  ConvLSTM2DOptions o_;
};

}  // namespace

ConvLSTM2D::ConvLSTM2D(int64_t filters, std::vector<int64_t> kernel_size, ConvLSTM2DOptions options)
    : Layer(
          std::make_shared<ConvLSTMImpl>(2, filters, std::move(kernel_size), std::move(options))) {}

ConvLSTM1D::ConvLSTM1D(int64_t filters, int64_t kernel_size, ConvLSTM2DOptions options)
    : Layer(std::make_shared<ConvLSTMImpl>(1, filters, std::vector<int64_t>{kernel_size},
                                           std::move(options))) {}

ConvLSTM3D::ConvLSTM3D(int64_t filters, std::vector<int64_t> kernel_size, ConvLSTM2DOptions options)
    : Layer(
          std::make_shared<ConvLSTMImpl>(3, filters, std::move(kernel_size), std::move(options))) {}

}  // namespace autoshard
