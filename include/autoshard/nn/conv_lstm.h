// keras.layers.ConvLSTM2D (and ConvLSTM1D and ConvLSTM3D, below): an LSTM whose input and
// recurrent transforms are 2-D convolutions (Shi et al. 2015), as Keras 3 computes it
// (keras/src/layers/rnn/conv_lstm.py, ConvLSTMCell.call):
//
//   x: [batch, time, rows, cols, channels]  (channels last)
//   kernel           [kh, kw, channels, 4 filters]
//   recurrent_kernel [kh, kw, filters, 4 filters]   (stride 1, 'same')
//   bias             [4 filters]                    gates in order i, f, c, o
//   z = conv(x_t, kernel) + b + conv(h, recurrent_kernel)
//   c' = sig(f) c + sig(i) tanh(c_z);  h' = sig(o) tanh(c')
//   out: the last h [batch, rows', cols', filters], or with return_sequences
//        every step's [batch, time, rows', cols', filters].
//
// Composed from existing ops, so the planner splits it like any other op
// sequence: the input convolution of every step is one Conv over
// [batch * time, ...]; then one Conv per step for the recurrent transform,
// and Keras's default activations run each step's gates as one LstmCell
// over [batch * rows' * cols', 4 filters] (other activations compose them).
// In training, dropout and recurrent_dropout draw four masks each (one per
// gate, ConvLSTMCell's dropout_mask_count) once per batch, shaped like a
// step's input and like h, and reuse them at every step; each gate's
// convolution then reads its own masked copy.
// Not supported, each refused in one line: masks, stateful, channels_first.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "autoshard/nn/initializer.h"
#include "autoshard/nn/layers.h"

namespace autoshard {

struct ConvLSTM2DOptions {
  AUTOSHARD_OPTION(std::vector<int64_t>, strides, {1})
  AUTOSHARD_OPTION(std::string, padding, "valid")  // of the input transform
  AUTOSHARD_OPTION(std::vector<int64_t>, dilation_rate, {1})
  AUTOSHARD_OPTION(std::string, activation, "tanh")
  AUTOSHARD_OPTION(std::string, recurrent_activation, "sigmoid")
  AUTOSHARD_OPTION(bool, use_bias, true)
  AUTOSHARD_OPTION(Initializer, kernel_initializer, Initializer::glorot_uniform())
  AUTOSHARD_OPTION(Initializer, recurrent_initializer, Initializer::orthogonal())
  AUTOSHARD_OPTION(Initializer, bias_initializer, Initializer::zeros())
  // The forget gate's bias starts at one (a loaded bias is used as given).
  AUTOSHARD_OPTION(bool, unit_forget_bias, true)
  AUTOSHARD_OPTION(bool, return_sequences, false)
  // Layer::outputs also gives the final h and c.
  AUTOSHARD_OPTION(bool, return_state, false)
  // Steps taken last to first; a returned sequence stays in that order.
  AUTOSHARD_OPTION(bool, go_backwards, false)
  // Fractions in [0, 1) of a step's input (dropout) and of h (recurrent
  // dropout) dropped in training.
  AUTOSHARD_OPTION(double, dropout, 0.0)
  AUTOSHARD_OPTION(double, recurrent_dropout, 0.0)
  // Keys the dropout masks (with the layer's path and the model's seed).
  AUTOSHARD_OPTION(uint64_t, seed, 0)
  AUTOSHARD_OPTION(std::string, name, "")
};

class ConvLSTM2D : public Layer {
 public:
  // kernel_size: {rows, cols} or one value for both.
  ConvLSTM2D(int64_t filters, std::vector<int64_t> kernel_size, ConvLSTM2DOptions options = {});
};

// keras.layers.ConvLSTM1D (keras/src/layers/rnn/conv_lstm1d.py): the same
// cell over [batch, time, steps, channels] with 1-D convolutions, kernels
// [k, channels, 4 filters] and [k, filters, 4 filters]; strides and
// dilation_rate take one value. Runs as ConvLSTM2D over rows of height one.
class ConvLSTM1D : public Layer {
 public:
  ConvLSTM1D(int64_t filters, int64_t kernel_size, ConvLSTM2DOptions options = {});
};

// keras.layers.ConvLSTM3D (keras/src/layers/rnn/conv_lstm3d.py): the same
// cell over [batch, time, depth, rows, cols, channels] with 3-D
// convolutions, kernels [kd, kh, kw, channels, 4 filters] and [kd, kh, kw,
// filters, 4 filters]; sizes take one value or three.
class ConvLSTM3D : public Layer {
 public:
  ConvLSTM3D(int64_t filters, std::vector<int64_t> kernel_size, ConvLSTM2DOptions options = {});
};

}  // namespace autoshard
