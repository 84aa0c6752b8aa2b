// The Llama family's Hugging Face tensors, weight by weight (formats.cc's
// list), for the families whose checkpoints are Llama's rearranged
// (Phi-3 fuses some of them: models/phi3/formats.cc).
#pragma once

#include <vector>

#include "autoshard/models/llama/llama.h"
#include "io/hf_tensors.h"

namespace autoshard {

// Each weight of a model of `config` and the tensor holding it; a layer's
// q, k and v projections are listed one after another, and so are its
// gate and up projections.
std::vector<HfTensor> llama_hf_tensors(const LlamaConfig& config);

}  // namespace autoshard
