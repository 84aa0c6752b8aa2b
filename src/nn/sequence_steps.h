// Taking a sequence apart into its steps and putting steps back together,
// for the recurrent layers (nn/recurrent_layers.cc, nn/conv_lstm.cc), from
// pad (which crops with negative counts), reshape and add.
//
// A crop's gradient is a pad to the whole, so the T steps of a time-major
// [T, ...] value are split off by a binary tree of crops: every level of the
// tree moves the sequence once (T log T in all, where T crops of the whole
// sequence would move it T times over). Steps are stacked by the same tree
// the other way: two runs of steps concatenated by two pads and an add.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "autoshard/ir/graph.h"

namespace autoshard::sequence {

// [begin, begin + n) of x along `axis`: a crop.
Value slice(Value x, int axis, int64_t begin, int64_t n);

// Row i of x [n, ...] without its first axis.
Value row(Value x, int64_t i);

// Every row of x [n, ...] as its own value [...], appended to `out` in order.
void split_rows(Value x, std::vector<Value>& out);

// a then b along `axis`.
Value concat(Value a, Value b, int axis);

// v[lo, hi) (each [...]) stacked along a new first axis: [hi - lo, ...].
Value stack_rows(const std::vector<Value>& v, size_t lo, size_t hi);

}  // namespace autoshard::sequence
