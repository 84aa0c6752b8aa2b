// ConvLSTM2D and ConvLSTM1D (see conv_lstm.h): the input transform of every
// step as one convolution, then per step the recurrent convolution and the
// gates. ConvLSTM1D is the 2-D layer over rows of height one: its inputs,
// kernels and outputs are reshaped around it (no copy of any weight).
#include "autoshard/nn/conv_lstm.h"

#include <algorithm>

#include "autoshard/error.h"
#include "autoshard/ir/ops.h"
#include "nn/sequence_steps.h"
#include "tensor/rng.h"

namespace autoshard {
namespace {

// A per-dimension option of one value or `rank`, as the two of the 2-D
// layer (rank 1: a height of one first).
std::vector<int64_t> conv_lstm_pair(std::vector<int64_t> v, int rank, const std::string& who,
                                    const char* option) {
  if (v.size() == 1 && rank == 2) v.push_back(v[0]);
  AS_CHECK(v.size() == size_t(rank), who, ": ", option, " needs ",
           rank == 2 ? "1 or 2 values" : "1 value", ", got ", v.size());
  for (int64_t d : v) AS_CHECK(d >= 1, who, ": ", option, " must be positive, got ", d);
  if (rank == 1) v.insert(v.begin(), 1);
  return v;
}

struct ConvLSTM2DImpl : LayerImpl {
  // rank: 2 (ConvLSTM2D) or 1 (ConvLSTM1D).
  ConvLSTM2DImpl(int rank, int64_t filters, std::vector<int64_t> kernel, ConvLSTM2DOptions o)
      : LayerImpl(layer_name_or_default(o.name_, rank == 2 ? "conv_lstm2d" : "conv_lstm1d")),
        rank_(rank),
        filters_(filters),
        o_(std::move(o)) {
    const std::string who = kind() + " " + name();
    AS_CHECK(filters > 0, who, ": filters must be positive, got ", filters);
    kernel_ = conv_lstm_pair(std::move(kernel), rank, who, "kernel_size");
    strides_ = conv_lstm_pair(o_.strides_, rank, who, "strides");
    dilations_ = conv_lstm_pair(o_.dilation_rate_, rank, who, "dilation_rate");
    AS_CHECK(o_.padding_ == "valid" || o_.padding_ == "same", who,
             ": padding must be 'valid' or 'same', got '", o_.padding_, "'");
    // Keras's ConvLSTMCell refuses any stride above 1 with any dilation above 1.
    AS_CHECK(std::max(strides_[0], strides_[1]) == 1 || std::max(dilations_[0], dilations_[1]) == 1,
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
             rank_ == 2 ? "rows, cols" : "steps", ", channels], got ",
             shape_str(inputs[0].shape()));
    AS_CHECK(!t.mask(inputs[0]).valid(), who,
             ": masked inputs are not supported (no Masking or mask_zero before it)");
    Shape rows = inputs[0].shape();
    if (rank_ == 1) rows.insert(rows.begin() + 2, 1);
    const Value x = ops::reshape(inputs[0], rows);
    const int64_t B = x.dim(0), T = x.dim(1), C = x.dim(4), F = filters_;
    // Keras's kernels: [kh, kw, in, 4F], ConvLSTM1D's [k, in, 4F].
    const auto kernel_shape = [&](int64_t in) {
      return rank_ == 2 ? Shape{kernel_[0], kernel_[1], in, 4 * F} : Shape{kernel_[1], in, 4 * F};
    };
    const Shape as_2d_c{kernel_[0], kernel_[1], C, 4 * F},
        as_2d_f{kernel_[0], kernel_[1], F, 4 * F};
    Value kernel =
        ops::reshape(t.weight("kernel", kernel_shape(C), o_.kernel_initializer_), as_2d_c);
    Value recurrent = ops::reshape(
        t.weight("recurrent_kernel", kernel_shape(F), o_.recurrent_initializer_), as_2d_f);
    // Every step's input transform in one convolution: [B T, rows', cols', 4F]
    // (with dropout, one per gate, each over its own masked copy).
    const Shape steps_in{B * T, x.dim(2), x.dim(3), C};
    std::vector<Value> xs;
    for (const Value& m : gate_masks(t, {B, 1, x.dim(2), x.dim(3), C}, o_.dropout_, "dropout"))
      xs.push_back(ops::reshape(x * m, steps_in));
    if (xs.empty()) xs.push_back(ops::reshape(x, steps_in));
    Value xp = gate_conv(xs, gates_of(kernel, xs.size()), input_attrs(x.dim(2), x.dim(3), who));
    if (o_.use_bias_) {
      const Initializer bias_init = o_.unit_forget_bias_
                                        ? Initializer::unit_forget_bias(F, o_.bias_initializer_)
                                        : o_.bias_initializer_;
      xp = xp + t.weight("bias", {4 * F}, bias_init);
    }
    const int64_t H = xp.dim(1), W = xp.dim(2), N = B * H * W;
    // Time-major steps [B, H, W, 4F].
    std::vector<Value> steps;
    sequence::split_rows(ops::transpose(ops::reshape(xp, {B, T, H, W, 4 * F}), {1, 0, 2, 3, 4}),
                         steps);
    Value h = ops::constant(t.graph(), {B, H, W, F}, 0.0);
    Value c = ops::constant(t.graph(), {B, H, W, F}, 0.0);
    const std::vector<Value> h_masks =
        gate_masks(t, {B, H, W, F}, o_.recurrent_dropout_, "recurrent_dropout");
    const std::vector<Value> recurrent_gates =
        gates_of(recurrent, std::max<size_t>(1, h_masks.size()));
    std::vector<Value> outputs;
    for (int64_t s = 0; s < T; ++s) {
      const Value z_x = steps[o_.go_backwards_ ? T - 1 - s : s];
      std::vector<Value> hs;
      for (const Value& m : h_masks) hs.push_back(h * m);
      if (hs.empty()) hs.push_back(h);
      const Value z_h = gate_conv(hs, recurrent_gates, recurrent_attrs(H, W));
      if (fused()) {
        // LstmCell over the positions as rows: gates [N, 4, F], state [2, N, F].
        const Shape one{1, N, F};
        Value state = sequence::concat(ops::reshape(h, one), ops::reshape(c, one), 0);
        state = ops::lstm_cell(ops::reshape(z_x, {N, 4, F}), ops::reshape(z_h, {N, 4, F}), state);
        h = ops::reshape(sequence::row(state, 0), {B, H, W, F});
        c = ops::reshape(sequence::row(state, 1), {B, H, W, F});
      } else {
        const Value z = z_x + z_h;
        const auto gate = [&](int k) { return sequence::slice(z, 3, k * F, F); };
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
      result.push_back(
          ops::transpose(sequence::stack_rows(outputs, 0, outputs.size()), {1, 0, 2, 3, 4}));
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
  // A kernel [kh, kw, in, 4F] whole (n == 1) or as its four gates' [kh, kw, in, F].
  std::vector<Value> gates_of(Value w, size_t n) const {
    if (n == 1) return {w};
    std::vector<Value> gates;
    for (int64_t k = 0; k < 4; ++k) gates.push_back(sequence::slice(w, 3, k * filters_, filters_));
    return gates;
  }
  // conv(x, w) of one input and kernel, or the four gates' conv(x_k, w_k)
  // side by side: [.., 4F] either way.
  static Value gate_conv(const std::vector<Value>& xs, const std::vector<Value>& ws,
                         const ConvAttrs& a) {
    if (xs.size() == 1) return ops::conv(xs[0], ws[0], a);
    std::vector<Value> z;
    for (size_t k = 0; k < 4; ++k) z.push_back(ops::conv(xs[k], ws[k], a));
    return sequence::concat(sequence::concat(z[0], z[1], 3), sequence::concat(z[2], z[3], 3), 3);
  }

  // Keras's default activations: each step's gates as one LstmCell op.
  bool fused() const { return o_.activation_ == "tanh" && o_.recurrent_activation_ == "sigmoid"; }

  ConvAttrs input_attrs(int64_t rows, int64_t cols, const std::string& who) const {
    ConvAttrs a;
    a.strides = strides_;
    a.dilations = dilations_;
    const int64_t in[2] = {rows, cols};
    for (int i = 0; i < 2; ++i) {
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
  ConvAttrs recurrent_attrs(int64_t rows, int64_t cols) const {
    ConvAttrs a;
    a.strides = a.dilations = {1, 1};
    const int64_t in[2] = {rows, cols};
    for (int i = 0; i < 2; ++i) {
      auto [lo, hi] = ops::same_padding(in[i], kernel_[i], 1, 1);
      a.pad_lo.push_back(lo), a.pad_hi.push_back(hi);
    }
    return a;
  }

  std::string kind() const { return rank_ == 2 ? "ConvLSTM2D" : "ConvLSTM1D"; }

  int rank_;
  int64_t filters_;
  std::vector<int64_t> kernel_, strides_, dilations_;
  ConvLSTM2DOptions o_;
};

}  // namespace

ConvLSTM2D::ConvLSTM2D(int64_t filters, std::vector<int64_t> kernel_size, ConvLSTM2DOptions options)
    : Layer(std::make_shared<ConvLSTM2DImpl>(2, filters, std::move(kernel_size),
                                             std::move(options))) {}

ConvLSTM1D::ConvLSTM1D(int64_t filters, int64_t kernel_size, ConvLSTM2DOptions options)
    : Layer(std::make_shared<ConvLSTM2DImpl>(1, filters, std::vector<int64_t>{kernel_size},
                                             std::move(options))) {}

}  // namespace autoshard
