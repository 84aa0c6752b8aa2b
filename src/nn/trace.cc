#include "autoshard/nn/trace.h"

#include <algorithm>

#include "autoshard/error.h"
#include "autoshard/ir/ops.h"

namespace autoshard {

std::string Trace::path(const std::string& name) const {
  std::string p;
  for (const std::string& s : prefix_) p += s + ".";
  return p + name;
}

Value Trace::weight(const std::string& name, Shape shape, Initializer init, bool trainable) {
  std::string full = path(name);
  const bool first = initializers_.emplace(full, init).second;
  const bool trained = trainable && !frozen();
  if (!trained) non_trainable_.insert(full);
  Value w = graph_.parameter(full, std::move(shape));
  // Keras 3 adds the regularizers of trainable weights only
  // (keras/src/layers/layer.py, Layer._get_regularization_losses).
  if (auto it = weight_penalties_.find(full); first && trained && it != weight_penalties_.end())
    add_loss(it->second(w));
  return w;
}

bool Trace::frozen() const {
  if (frozen_.empty()) return false;
  std::string scope;
  for (const std::string& s : prefix_) {
    scope += scope.empty() ? s : "." + s;
    if (frozen_.count(scope)) return true;
  }
  return false;
}

void Trace::penalize(std::map<std::string, Penalty> weights,
                     std::map<std::string, Penalty> activities) {
  weight_penalties_ = std::move(weights);
  activity_penalties_ = std::move(activities);
}

const Trace::Penalty* Trace::activity_penalty() const {
  if (activity_penalties_.empty() || prefix_.empty()) return nullptr;
  std::string scope;
  for (const std::string& s : prefix_) scope += scope.empty() ? s : "." + s;
  auto it = activity_penalties_.find(scope);
  return it == activity_penalties_.end() ? nullptr : &it->second;
}

void Trace::set_mask(Value v, Value mask) {
  AS_CHECK(mask.dtype() == DType::F32 && mask.rank() >= 1 && v.rank() >= mask.rank() &&
               std::equal(mask.shape().begin(), mask.shape().end(), v.shape().begin()),
           "a mask must be f32 of its value's leading dimensions ", shape_str(v.shape()), ", got ",
           dtype_name(mask.dtype()), shape_str(mask.shape()));
  masks_[v.id] = mask;
}

Value Trace::mask(Value v) const {
  auto it = masks_.find(v.id);
  return it == masks_.end() ? Value{} : it->second;
}

void Trace::use_cache(Value positions, int64_t cache_length) {
  AS_CHECK(cache_length > 0, "the key-value cache needs at least one position");
  cache_positions_ = positions;
  cache_length_ = cache_length;
}

Value Trace::positions(int64_t T) {
  if (!cached()) return ops::iota(graph_, {T});
  AS_CHECK(cache_positions_.shape() == Shape{T}, "generation: ", T, " tokens traced at ",
           shape_str(cache_positions_.shape()), " positions");
  return cache_positions_;
}

Value Trace::causal_attention(Value q, Value k, Value v, double scale, int64_t window,
                              double softcap) {
  if (!cached()) return ops::attention(q, k, v, /*causal=*/true, scale, window, softcap);
  Value positions = this->positions(q.dim(1));
  auto cache = [&](const char* name, Value rows) {
    Shape shape = rows.shape();
    shape[1] = cache_length_;
    return ops::cache_write(graph_.buffer(path(name), shape), rows, positions);
  };
  Value keys = cache("key_cache", k);  // in this order: buffers are listed as traced
  Value values = cache("value_cache", v);
  return ops::attention(q, keys, values, positions, scale, window, softcap);
}

}  // namespace autoshard
