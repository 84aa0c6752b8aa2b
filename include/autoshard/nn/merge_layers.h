// Keras's merge layers: elementwise combinations of several inputs (numpy
// broadcasting), and Concatenate. Add is in layers.h. None has weights.
//
//   SymbolicTensor y = Concatenate()({a, b});      // along the last axis
//   SymbolicTensor d = Subtract()({a, b});         // a - b
//   SymbolicTensor s = Dot({1, 1}, true)({a, b});  // cosine similarity, (batch, 1)
#pragma once

#include <string>
#include <vector>

#include "autoshard/nn/layers.h"

namespace autoshard {

// a - b (exactly two inputs).
class Subtract : public Layer {
 public:
  explicit Subtract(std::string name = "");
};
// The product of its inputs.
class Multiply : public Layer {
 public:
  explicit Multiply(std::string name = "");
};
// The mean of its inputs.
class Average : public Layer {
 public:
  explicit Average(std::string name = "");
};
// The elementwise maximum (minimum) of its inputs; at ties the gradient
// goes to the earlier input.
class Maximum : public Layer {
 public:
  explicit Maximum(std::string name = "");
};
class Minimum : public Layer {
 public:
  explicit Minimum(std::string name = "");
};

// Joins its inputs along `axis` (default the last; negative from the end,
// never the batch): every other dimension must agree.
class Concatenate : public Layer {
 public:
  explicit Concatenate(int64_t axis = -1, std::string name = "");
};

// Keras's Dot: the dot products of two inputs' examples along one axis of
// each (`axes`: the first input's, then the second's; negative from the
// end, never the batch), after an L2 normalisation along them where
// `normalize` (then the cosine similarity). The output holds the first
// input's other axes, then the second's: (batch, m, n) for (batch, m, d) and
// (batch, n, d) on axes {2, 2}, and (batch, 1) for two vectors.
class Dot : public Layer {
 public:
  explicit Dot(std::vector<int64_t> axes, bool normalize = false, std::string name = "");
};

}  // namespace autoshard
