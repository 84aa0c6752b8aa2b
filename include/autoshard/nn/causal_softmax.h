// Keras's causal mask (keras/src/layers/attention/attention.py,
// _calculate_score_mask; multi_head_attention.py, _compute_causal_mask):
// query i sees keys j <= i, the top-left triangle, whatever the lengths.
#pragma once

#include "autoshard/ir/graph.h"

namespace autoshard {

// Softmax over the last axis of scores [..., Tq, Tk] under Keras's causal
// mask. The softmax op's causal form aligns a wide block bottom-right (as
// generation over a cache needs), so a block of Tq < Tk rows is padded to a
// square and cropped back; of Tq > Tk rows, the rows past Tk see every key.
Value keras_causal_softmax(Value scores);

}  // namespace autoshard
