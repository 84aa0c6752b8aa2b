#include "autoshard/nn/lora.h"

#include <cmath>

#include "autoshard/error.h"
#include "autoshard/ir/ops.h"

namespace autoshard {

// a's initializer is Keras's he_uniform over a's fan-in as Keras computes it
// for [C, heads, rank] (C * heads): uniform in +-sqrt(6 / fan_in).
Value lora_update(Trace& t, const LoraOptions& lora, Value x, const Value& y,
                  const std::string& scope) {
  AS_CHECK(lora.enabled() && lora.alpha > 0, "lora_update: rank and alpha must be positive");
  AS_CHECK(x.rank() == 3 && y.rank() >= 3, "lora_update: x must be [B, T, C], y [B, T, ..., D]");
  Trace::Scope s(t, scope);
  const int64_t C = x.dim(2), r = lora.rank, D = y.dim(y.rank() - 1);
  int64_t heads = 1;  // y's dims between [B, T] and D
  for (int i = 2; i + 1 < y.rank(); ++i) heads *= y.dim(i);
  const double limit = std::sqrt(6.0 / double(C * heads));
  Value a = t.weight("lora_kernel_a", {C, heads, r}, Initializer::uniform(-limit, limit));
  Value b = t.weight("lora_kernel_b", {r, D}, Initializer::zeros());
  Value u = ops::einsum("bthr,rd->bthd", ops::einsum("btc,chr->bthr", x, a), b);
  return ops::scale(ops::reshape(u, y.shape()), lora.alpha / double(r));
}

void freeze_all_but_adapters(Trace& t) {
  Graph& g = t.graph();
  for (int id : g.parameters()) {
    const LeafAttrs& leaf = g.node(id).leaf();
    if (leaf.buffer || leaf.is_slot() || leaf.name.find(".lora_kernel_") != std::string::npos)
      continue;
    t.weight(leaf.name, leaf.shape, Initializer::zeros(), /*trainable=*/false);
  }
}

}  // namespace autoshard
