// Keras's reshaping layers: Flatten, Reshape, Permute, RepeatVector,
// ZeroPadding1D/2D/3D, Cropping1D/2D/3D, UpSampling2D/3D; and Rescaling (a preprocessing
// layer in Keras, beside these in nn/reshaping_layers.h).
#include "autoshard/error.h"
#include "autoshard/ir/ops.h"
#include "autoshard/nn/reshaping_layers.h"
#include "autoshard/nn/spatial_layers.h"
#include "io/keras/layer_table.h"

namespace autoshard::keras {

using nlohmann::json;

namespace {

// ZeroPadding2D/3D's padding or Cropping2D/3D's cropping over `rank`
// spatial dims: an int, `rank` ints or `rank` pairs ((top, bottom), (left,
// right)); keras/src/layers/reshaping/zero_padding3d.py and cropping3d.py,
// __init__ (get_config writes the pairs).
std::vector<int64_t> keras_pad_amounts(LayerConfig& f, const char* key, const json& def,
                                       size_t rank = 2) {
  std::vector<int64_t> amounts;
  const json v = f.has(key) ? f.raw(key) : def;
  auto whole = [&](const json& e) {
    if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() > (1 << 20))
      f.bad(key, v, "must be sizes >= 0");
    return e.get<int64_t>();
  };
  if (v.is_number_integer()) {
    amounts = {whole(v)};
  } else if (v.is_array() && v.size() == rank && v[0].is_array()) {
    for (const json& pair : v) {
      if (!pair.is_array() || pair.size() != 2)
        f.bad(key, v, "must be " + std::to_string(rank) + " pairs (before, after)");
      amounts.push_back(whole(pair[0]));
      amounts.push_back(whole(pair[1]));
    }
  } else if (v.is_array() && v.size() == rank) {
    for (const json& e : v) amounts.push_back(whole(e));
  } else {
    f.bad(key, v,
          "is not an int, " + std::to_string(rank) + " ints or " + std::to_string(rank) + " pairs");
  }
  return amounts;
}

// ZeroPadding1D and Cropping1D (keras/src/layers/reshaping/zero_padding1d.py,
// cropping1d.py): zeros added to, or steps cut from, both ends of the
// steps axis of [batch, steps, features].
class KerasPad1D : public LayerImpl {
 public:
  KerasPad1D(std::string name, int64_t before, int64_t after, bool crop)
      : LayerImpl(name.empty() ? default_layer_name(crop ? "cropping1d" : "zero_padding1d")
                               : std::move(name)),
        before_(before),
        after_(after),
        crop_(crop) {}
  Value call(Trace&, const std::vector<Value>& in) override {
    AS_CHECK(in.size() == 1 && in[0].rank() == 3, "layer ", name(),
             " needs one [batch, steps, features] input");
    const Value& x = in[0];
    AS_CHECK(!crop_ || before_ + after_ < x.dim(1), "layer ", name(), ": cropping ", before_, "+",
             after_, " steps leaves nothing of ", x.dim(1));
    const int64_t s = crop_ ? -1 : 1;
    return ops::pad(x, {0, s * before_, 0}, {0, s * after_, 0});
  }

 private:
  int64_t before_, after_;
  bool crop_;
};

BuiltLayer keras_pad1d(LayerConfig& f, bool crop) {
  const char* key = crop ? "cropping" : "padding";
  const std::vector<int64_t> v = keras_pad_amounts(f, key, json(1));  // Keras's default: 1 each end
  if (v.size() > 2) f.bad(key, f.raw(key), "must be an int or a pair (before, after)");
  f.channels_last();
  return {Layer(std::make_shared<KerasPad1D>(f.name(), v[0], v.back(), crop))};
}

BuiltLayer keras_upsampling2d(LayerConfig& f) {
  f.channels_last();
  const std::string interpolation = f.string("interpolation", "nearest");
  if (interpolation != "nearest")
    f.bad("interpolation", interpolation, "is not supported (nearest)");
  return {UpSampling2D(f.sizes("size", 2, {2, 2}), interpolation, f.name())};
}

// keras/src/layers/reshaping/up_sampling3d.py, __init__: size (2, 2, 2),
// nearest only (no interpolation field).
BuiltLayer keras_upsampling3d(LayerConfig& f) {
  f.channels_last();
  return {UpSampling3D(f.sizes("size", 3, {2, 2, 2}), "nearest", f.name())};
}

// Keras's default for both: ((1, 1), (1, 1), (1, 1)).
BuiltLayer keras_pad3d(LayerConfig& f, bool crop) {
  f.channels_last();
  const char* key = crop ? "cropping" : "padding";
  const std::vector<int64_t> v = keras_pad_amounts(f, key, json(1), 3);
  if (crop) return {Cropping3D(v, f.name())};
  return {ZeroPadding3D(v, f.name())};
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
    return {ZeroPadding2D(keras_pad_amounts(f, "padding", json(1)), f.name())};
  });
  table.add("Cropping2D", [](LayerConfig& f) -> BuiltLayer {
    f.channels_last();
    return {Cropping2D(keras_pad_amounts(f, "cropping", json(0)), f.name())};
  });
  table.add("UpSampling2D", keras_upsampling2d);
  table.add("ZeroPadding3D", [](LayerConfig& f) { return keras_pad3d(f, false); });
  table.add("Cropping3D", [](LayerConfig& f) { return keras_pad3d(f, true); });
  table.add("UpSampling3D", keras_upsampling3d);
  table.add("ZeroPadding1D", [](LayerConfig& f) { return keras_pad1d(f, false); });
  table.add("Cropping1D", [](LayerConfig& f) { return keras_pad1d(f, true); });
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
