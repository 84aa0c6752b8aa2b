// Text generation for decoder models: a prefill pass over the prompt, then
// one token at a time over the model's key-value cache (Model::
// predict_cached), each token chosen from the last position's logits:
// greedy, or sampled with temperature, top-k and top-p (nucleus) from a
// seeded generator, so that a seed gives the same text on any mesh.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <span>
#include <vector>

#include "autoshard/nn/model.h"

namespace autoshard {

struct GenerationOptions {
  int64_t max_new_tokens = 32;
  double temperature = 1.0;  // 0: greedy (the most likely token)
  int64_t top_k = 0;         // keep the k most likely tokens (0: all)
  double top_p = 1.0;        // keep the most likely tokens that reach this mass (1: all)
  uint64_t seed = 0;         // of the sampling draws
  // Stop once one of these is produced (it is kept in the output): the
  // config's eos_token_id.
  std::vector<int32_t> stop_token_ids = {};
  // Positions of the key-value cache (0: the prompt plus max_new_tokens).
  int64_t cache_length = 0;
};

struct Generation {
  std::vector<int32_t> output_ids;  // the new tokens, after the prompt
  int64_t prompt_tokens = 0;
  double prefill_seconds = 0;  // the prompt's pass, first token included
  double decode_seconds = 0;   // every later token
  // Prompt tokens per second of the prefill; new tokens per second after it.
  double prefill_tokens_per_s() const;
  double decode_tokens_per_s() const;
};

// Continues `prompt` (token ids, at least one). `on_token` sees each new
// token as soon as it is chosen (streaming). Under mpirun every rank must
// call it alike; every rank gets the same tokens.
Generation generate(Model& model, const std::vector<int32_t>& prompt,
                    const GenerationOptions& options,
                    const std::function<void(int32_t)>& on_token = {});

// The token chosen from one position's logits [vocab] under `options`,
// drawing from `rng` unless greedy (temperature 0).
int32_t choose_token(std::span<const float> logits, const GenerationOptions& options,
                     std::mt19937_64& rng);

}  // namespace autoshard
