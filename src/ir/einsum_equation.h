// Parsing a two-operand einsum equation "a,b->out" into its attributes.
#pragma once

#include <string>

#include "autoshard/ir/op_attrs.h"

namespace autoshard {

using EinsumEquation = EinsumAttrs;

// Throws autoshard::Error naming the problem for malformed equations.
EinsumAttrs parse_einsum(const std::string& equation);

}  // namespace autoshard
