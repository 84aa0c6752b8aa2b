// LoRA, low-rank adapters on a projection, as Keras defines them
// (keras/src/layers/core/einsum_dense.py, EinsumDense.enable_lora and its
// `kernel` property) and KerasHub enables them (keras_hub/src/models/
// backbone.py, Backbone.enable_lora: every weight frozen, adapters on the
// attention's query and value projections):
//
//   kernel [C, heads..., D]  ->  kernel + alpha / rank * a @ b
//   a: lora_kernel_a [C, heads, rank] (he_uniform), b: lora_kernel_b [rank, D] (zeros)
//
// A model adds lora_update to its query and value outputs and, after its
// last weight, calls freeze_all_but_adapters:
//
//   Value q = q_proj(t, x);
//   if (lora.enabled()) q = q + lora_update(t, lora, x, q, "q_proj");
#pragma once

#include <cstdint>
#include <string>

#include "autoshard/nn/layers.h"
#include "autoshard/nn/trace.h"

namespace autoshard {

struct LoraOptions {
  int64_t rank = 0;    // 0: no adapters
  double alpha = 0.0;  // Keras's lora_alpha (KerasHub: the rank)
  bool enabled() const { return rank > 0; }
};

// The adapters' part of the output y [B, T, heads..., D] of the projection
// of x [B, T, C] whose scope is `scope`: x @ (alpha / rank * a @ b), its
// weights `scope`.lora_kernel_a and .lora_kernel_b. b starts at zeros, so
// the model starts as it was.
Value lora_update(Trace& t, const LoraOptions& lora, Value x, const Value& y,
                  const std::string& scope);

// Declares every weight traced so far but the adapters again, non-trainable
// (Backbone.enable_lora's freezing): fit then trains the adapters alone.
void freeze_all_but_adapters(Trace& t);

// MultiHeadAttention with adapters on its query and value projections
// (Keras's MultiHeadAttention, whose `query` and `value` EinsumDense layers
// KerasHub's enable_lora targets): weights query.lora_kernel_a, ... .
Layer LoraMultiHeadAttention(int64_t num_heads, int64_t key_dim, MultiHeadAttentionOptions options,
                             LoraOptions lora);

}  // namespace autoshard
