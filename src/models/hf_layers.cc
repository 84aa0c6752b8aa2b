#include "models/hf_layers.h"

#include "autoshard/ir/ops.h"

namespace autoshard {

Layer hf_projection(const std::string& equation, Shape out, const char* name,
                    const std::string& bias_axes) {
  return EinsumDense(equation, std::move(out),
                     EinsumDenseOptions()
                         .kernel_initializer(Initializer::normal(0.0, 0.02))
                         .bias_axes(bias_axes)
                         .name(name));
}

Value training_dropout(Trace& t, Value x, double rate, const std::string& where) {
  if (!t.training() || rate == 0) return x;
  Trace::Scope s(t, where);
  return Dropout(rate, 0, "dropout")(t, x);
}

Value with_softmax_ignored_bias(Trace& t, Value k, const std::string& scope) {
  Trace::Scope s(t, scope);
  const Shape heads(k.shape().end() - 2, k.shape().end());
  return k + ops::scale(t.weight("bias", heads, Initializer::zeros()), 0.0);
}

}  // namespace autoshard
