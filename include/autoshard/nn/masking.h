// Keras's masks (keras/src/layers/layer.py, "supports_masking" and
// compute_mask): padding steps of a sequence marked by a mask [batch, time]
// (f32, 1 for a step that counts, 0 for padding) that layers pass on and
// consume. The Masking layer and Embedding(mask_zero) make one; Dense,
// Dropout, Activation, LayerNormalization and the merges pass it on; the
// recurrent layers skip masked steps, GlobalAveragePooling1D averages over
// the kept ones, MultiHeadAttention masks those keys, and the loss of a
// masked output averages over its kept steps (losses::masked). Masks are
// values of the traced step (Trace::mask), split with the batch like any.
//
//   auto x = Input({T}, DType::I32);
//   auto h = Embedding(1000, 64, EmbeddingOptions().mask_zero(true))(x);
//   auto y = Dense(1)(LSTM(32)(h));        // the LSTM skips ids 0
#pragma once

#include <string>
#include <vector>

#include "autoshard/nn/layers.h"

namespace autoshard {

// keras.layers.Masking: a step whose features all equal `mask_value` is
// masked (its mask 0) and its features become 0.
class Masking : public Layer {
 public:
  explicit Masking(double mask_value = 0.0, std::string name = "");
};

// Keras's Merge.compute_mask: the product (logical and) of the masks the
// inputs have; invalid when none has one.
Value all_masks(const Trace& trace, const std::vector<Value>& inputs);

// 1 where x > 0, else 0 (f32), taking no gradient.
Value positive(Value x);

// x [batch, time, ...] times the mask [batch, time] over its other axes.
Value apply_mask(Value x, Value mask);

}  // namespace autoshard
