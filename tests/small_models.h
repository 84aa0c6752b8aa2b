// Small model configurations the equivalence tests share.
#pragma once

#include "autoshard/models/llama/llama.h"

namespace autoshard::testing {

// A Llama of 4 blocks, width 16, grouped-query attention (4 heads over 2
// key-value heads), vocabulary 61: every sharded run of it is seconds.
inline LlamaConfig small_llama_config() {
  LlamaConfig cfg;
  cfg.vocab_size = 61;
  cfg.hidden_size = 16;
  cfg.intermediate_size = 24;
  cfg.num_hidden_layers = 4;
  cfg.num_attention_heads = 4;
  cfg.num_key_value_heads = 2;
  cfg.head_dim = 4;
  cfg.max_position_embeddings = 32;
  return cfg;
}

}  // namespace autoshard::testing
