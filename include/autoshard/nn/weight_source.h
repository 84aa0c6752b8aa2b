// WeightSource: where a weight's values come from when they are not drawn by
// its initializer (a checkpoint, a Hugging Face file). It reads any device's
// block of the weight, so each device reads only its own share; the formats
// in io/ implement it.
#pragma once

#include <functional>
#include <string>

#include "autoshard/tensor/mesh.h"
#include "autoshard/tensor/sharding.h"
#include "autoshard/tensor/tensor.h"

namespace autoshard {

struct WeightSource {
  // Throws autoshard::Error naming `weight` and the source when the source
  // cannot supply a weight of `shape` (missing, another size, bad dtype).
  std::function<void(const std::string& weight, const Shape& shape)> check;
  // The block of the weight of global `shape` that `device` holds under
  // `layout` on `mesh`, as f32.
  std::function<Tensor(const Shape& shape, const Sharding& layout, const DeviceMesh& mesh,
                       int device)>
      read;
};

}  // namespace autoshard
