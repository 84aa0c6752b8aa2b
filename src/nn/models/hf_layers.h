// Pieces the Hugging Face-layout models share (GPT-2, the Llama family, OPT).
#pragma once

#include <string>

#include "autoshard/nn/layers.h"
#include "autoshard/nn/trace.h"

namespace autoshard {

// A projection in nn.Linear's (out, in) kernel order, drawn from N(0, 0.02)
// as those models initialise; a bias on `bias_axes` when given.
Layer hf_projection(const std::string& equation, Shape out, const char* name,
                    const std::string& bias_axes = "");

// Dropout of `rate` on `x` in scope `where` while training (the identity
// otherwise, or at rate 0).
Value training_dropout(Trace& t, Value x, double rate, const std::string& where);

}  // namespace autoshard
