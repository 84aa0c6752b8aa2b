// ReduceOp: how values held by several devices combine into one: the
// reduction of a collective, and the kind of a partial value (sums that add
// up, or maxima whose largest is the true value).
#pragma once

namespace autoshard {

enum class ReduceOp { Sum, Max };

}  // namespace autoshard
