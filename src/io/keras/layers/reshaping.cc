// Keras's reshaping layers: Flatten, Reshape, Permute, RepeatVector,
// ZeroPadding2D, Cropping2D, UpSampling2D; and Rescaling (a preprocessing
// layer in Keras, beside these in nn/reshaping_layers.h).
#include "autoshard/nn/reshaping_layers.h"
#include "autoshard/nn/spatial_layers.h"
#include "io/keras/layer_table.h"

namespace autoshard::keras {

using nlohmann::json;

namespace {

// ZeroPadding2D's padding or Cropping2D's cropping: an int, a pair or a pair
// of pairs ((top, bottom), (left, right)).
std::vector<int64_t> keras_pad_amounts(LayerConfig& f, const char* key, int64_t def) {
  std::vector<int64_t> amounts;
  const json v = f.has(key) ? f.raw(key) : json(def);
  auto whole = [&](const json& e) {
    if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() > (1 << 20))
      f.bad(key, v, "must be sizes >= 0");
    return e.get<int64_t>();
  };
  if (v.is_number_integer()) {
    amounts = {whole(v)};
  } else if (v.is_array() && v.size() == 2 && v[0].is_array()) {
    for (const json& pair : v) {
      if (!pair.is_array() || pair.size() != 2)
        f.bad(key, v, "must be ((top, bottom), (left, right))");
      amounts.push_back(whole(pair[0]));
      amounts.push_back(whole(pair[1]));
    }
  } else if (v.is_array() && v.size() == 2) {
    amounts = {whole(v[0]), whole(v[1])};
  } else {
    f.bad(key, v, "is not an int, a pair or a pair of pairs");
  }
  return amounts;
}

BuiltLayer keras_upsampling2d(LayerConfig& f) {
  f.channels_last();
  const std::string interpolation = f.string("interpolation", "nearest");
  if (interpolation != "nearest")
    f.bad("interpolation", interpolation, "is not supported (nearest)");
  return {UpSampling2D(f.sizes("size", 2, {2, 2}), interpolation, f.name())};
}

BuiltLayer keras_reshape(LayerConfig& f) {
  const json& t = f.raw("target_shape");
  Shape shape;
  if (!t.is_array()) f.bad("target_shape", t, "must be a list");
  for (const json& d : t) {
    if (!d.is_number_integer() || d.get<int64_t>() < -1 || d.get<int64_t>() == 0)
      f.bad("target_shape", t, "must be positive sizes (one may be -1)");
    shape.push_back(d.get<int64_t>());
  }
  return {Reshape(shape, f.name())};
}

BuiltLayer keras_permute(LayerConfig& f) {
  const json& d = f.raw("dims");
  std::vector<int64_t> dims;
  if (!d.is_array()) f.bad("dims", d, "must be a list");
  for (const json& e : d) {
    if (!e.is_number_integer()) f.bad("dims", d, "must be whole numbers");
    dims.push_back(e.get<int64_t>());
  }
  return {Permute(dims, f.name())};
}

BuiltLayer keras_rescaling(LayerConfig& f) {
  const json s = f.has("scale") ? f.raw("scale") : json(1.0);
  const json o = f.has("offset") ? f.raw("offset") : json(0.0);
  if (!s.is_number()) f.bad("scale", s, "is not supported (one number)");
  if (!o.is_number()) f.bad("offset", o, "is not supported (one number)");
  return {Rescaling(s.get<double>(), o.get<double>(), f.name())};
}

}  // namespace

void add_reshaping_layers(LayerTable& table) {
  table.add("ZeroPadding2D", [](LayerConfig& f) -> BuiltLayer {
    f.channels_last();
    return {ZeroPadding2D(keras_pad_amounts(f, "padding", 1), f.name())};
  });
  table.add("Cropping2D", [](LayerConfig& f) -> BuiltLayer {
    f.channels_last();
    return {Cropping2D(keras_pad_amounts(f, "cropping", 0), f.name())};
  });
  table.add("UpSampling2D", keras_upsampling2d);
  table.add("Flatten", [](LayerConfig& f) -> BuiltLayer {
    f.channels_last();
    return {Flatten(f.name())};
  });
  table.add("Reshape", keras_reshape);
  table.add("Permute", keras_permute);
  table.add("RepeatVector",
            [](LayerConfig& f) -> BuiltLayer { return {RepeatVector(f.positive("n"), f.name())}; });
  table.add("Rescaling", keras_rescaling);
}

}  // namespace autoshard::keras
