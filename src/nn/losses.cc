#include "autoshard/nn/losses.h"

#include "autoshard/error.h"
#include "autoshard/ir/ops.h"

namespace autoshard::losses {

namespace {
std::vector<int64_t> all_axes(Value x) {
  std::vector<int64_t> axes;
  for (int i = 0; i < x.rank(); ++i) axes.push_back(i);
  return axes;
}
}  // namespace

Value sparse_categorical_crossentropy(Value logits, Value targets) {
  Value per_row = ops::cross_entropy(logits, targets);
  return ops::reduce_mean(per_row, all_axes(per_row));
}

Value mean_squared_error(Value predictions, Value targets) {
  Value d = predictions - targets;
  return ops::reduce_mean(d * d, all_axes(d));
}

Loss by_name(const std::string& name) {
  if (name == "sparse_categorical_crossentropy") return sparse_categorical_crossentropy;
  if (name == "mse" || name == "mean_squared_error") return mean_squared_error;
  fail("unknown loss '", name, "' (known: sparse_categorical_crossentropy, mse)");
}

}  // namespace autoshard::losses
