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

// Keys k [..., H, D] of projection `scope` plus its bias b [H, D], which adds
// q.b to every score of a query and so changes nothing after softmax. The
// bias enters as 0 * b: still a weight of the step (loaded, decayed, saved),
// with an exactly zero gradient rather than rounding noise that Adam would
// turn into full-size steps (OPT's k_proj, BERT's key).
Value with_softmax_ignored_bias(Trace& t, Value k, const std::string& scope);

}  // namespace autoshard
