// Taking a sequence apart into its steps and putting steps back together,
// for the recurrent layers (nn/recurrent_layers.cc, nn/conv_lstm.cc), from
// pad (which crops with negative counts), reshape and concat.
//
// Each step is its own crop of the sequence, so the sequence moves once. A
// crop's gradient is a pad to the whole; the T pads of one value's steps are
// summed by one concat of their inputs (ir/autodiff.cc), not T adds of the
// whole.
#pragma once

#include <cstdint>
#include <vector>

#include "autoshard/ir/graph.h"

namespace autoshard::sequence {

// [begin, begin + n) of x along `axis`: a crop.
Value slice(Value x, int axis, int64_t begin, int64_t n);

// Position i of x along `axis`, without that axis.
Value at(Value x, int axis, int64_t i);

// Row i of x [n, ...] without its first axis.
Value row(Value x, int64_t i);

// Every position of x along `axis` as its own value, in order.
std::vector<Value> split(Value x, int axis);

// The values v (one shape) stacked along a new axis `axis`: split's inverse.
Value stack(const std::vector<Value>& v, int axis);

}  // namespace autoshard::sequence
