// Text generation for decoder models: a prefill pass over the prompt, then
// one token at a time over the model's key-value cache (Model::
// predict_cached), each token chosen from the last position's logits:
// greedy, or sampled with temperature, top-k and top-p (nucleus) from a
// seeded generator, so that a seed gives the same text on any mesh.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "autoshard/nn/model.h"
#include "autoshard/tensor/weights_dtype.h"

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

// Weights held in bf16 or int8 for decoding (weight-only quantization:
// activations, norms and biases stay f32), made by quantize_weights and
// active while this object lives.
//
// Every weight of rank 2 or more is rounded to the format, whole (each
// channel's int8 scale is the largest magnitude over its whole contraction,
// so a block split over any mesh keeps its channels' scales and every mesh
// computes with the same weights). Each device's f32 block then holds the
// dequantized values (read by prefill's GEMM, the embedding gather and
// evaluation: the same numbers as the decode kernels'), and its storage
// holds the compact copy (Tensor::quantized). The model's generation
// steps hold those weights in the format (Model::held_weights): their
// products are QuantizedEinsum ops, whose one-row products (a decode
// step's) read the copies, dequantizing in the kernel
// (ir/ops/quantized_gemv.h). Destroying this object takes the copies off
// the blocks and the formats off the model's graphs; the f32 blocks keep
// the rounded values.
class QuantizedWeights {
 public:
  struct Weight {
    int64_t elements = 0;
    int64_t bytes = 0;  // stored in the format, int8's scales included
  };
  QuantizedWeights();
  ~QuantizedWeights();
  QuantizedWeights(QuantizedWeights&&) noexcept;
  QuantizedWeights& operator=(QuantizedWeights&&) noexcept;

  WeightsDType dtype() const;
  // The weights rounded, by path (for bandwidth figures).
  const std::map<std::string, Weight>& weights() const;
  // Device blocks that hold a compact copy (made on the model's first step
  // after quantize_weights).
  int64_t compact_blocks() const;
  // Takes the compact copies off their blocks, and the formats off the
  // generation graphs, until resume(): products read the f32 blocks, which hold the same rounded
  // values (the numbers are the compact kernels' up to summation order, and int8's input, which its
  // kernel rounds to 16-bit fixed point). bench/decode.cc times f32 and a
  // compact format in turns on one model so, without rounding the weights
  // again for each turn. Call them while no step runs.
  void pause();
  void resume();

  struct State;

 private:
  std::shared_ptr<State> state_;
  friend QuantizedWeights quantize_weights(Model& model, WeightsDType dtype);
};

// Rounds `model`'s weights to `dtype` as described above (f32: nothing).
// Call it after set_distribution and loading, before the first step: on a
// mesh the compact copies are made with the devices' blocks, so a model
// that has run there already computes with the rounded weights at f32
// speed. On one device the live weights are rounded in place and their
// compact copies serve the next step, run or not. Under mpirun
// every rank calls it alike (each weight is gathered whole once). int8
// needs finite weights.
QuantizedWeights quantize_weights(Model& model, WeightsDType dtype);

}  // namespace autoshard
