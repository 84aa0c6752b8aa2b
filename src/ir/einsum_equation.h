// The parsed form of a two-operand einsum equation "a,b->out".
#pragma once

#include <string>

namespace autoshard {

struct EinsumEquation {
  std::string a, b, out;
};

// Throws autoshard::Error naming the problem for malformed equations.
EinsumEquation parse_einsum(const std::string& equation);

}  // namespace autoshard
