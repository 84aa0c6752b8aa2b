#include "io/keras/architecture.h"

#include <cctype>
#include <map>
#include <regex>
#include <set>

#include "autoshard/error.h"
#include "autoshard/io/keras_architecture.h"
#include "autoshard/json.h"

namespace autoshard::keras {

using nlohmann::json;

std::string snake_case(const std::string& class_name) {
  std::string name;
  for (char c : class_name)
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '_') name += c;
  name = std::regex_replace(name, std::regex("(.)([A-Z][a-z]+)"), "$1_$2");
  name = std::regex_replace(name, std::regex("([a-z])([A-Z])"), "$1_$2");
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

namespace {

const std::set<std::string> kModelClasses = {"Sequential", "Functional", "Model"};
const json kEmptyObject = json::object(), kEmptyArray = json::array();

std::string str_field(const json& j, const char* key, const std::string& where) {
  AS_CHECK(j.is_object() && j.contains(key) && j.at(key).is_string(), where, ": '", key,
           "' must be a string");
  return j.at(key).get<std::string>();
}

// Refuses layers whose behaviour is code: Lambda (Python bytecode) and
// custom classes (a registered_name, or a module outside Keras).
void refuse_code(const json& layer, const std::string& cls, const std::string& name,
                 const std::string& where) {
  if (cls == "Lambda" || cls == "TFOpLambda" || cls == "SlicingOpLambda")
    fail(where, ": layer '", name, "' of class '", cls,
         "' holds Python code; autoshard never runs code from a model file (rewrite it with "
         "built-in layers)");
  if (layer.contains("registered_name") && layer.at("registered_name").is_string()) {
    const std::string reg = layer.at("registered_name").get<std::string>();
    if (reg != cls && reg.find('>') != std::string::npos)
      fail(where, ": layer '", name, "' of class '", cls, "' is a custom class (registered_name '",
           reg, "'); autoshard never runs code from a model file");
  }
  if (layer.contains("module") && layer.at("module").is_string()) {
    const std::string module = layer.at("module").get<std::string>();
    if (module != "keras" && module.rfind("keras.", 0) != 0)
      fail(where, ": layer '", name, "' of class '", cls, "' comes from module '", module,
           "' (a custom class); autoshard never runs code from a model file");
  }
}

Shape batchless_shape(const json& batch_shape, const std::string& where) {
  AS_CHECK(batch_shape.is_array() && !batch_shape.empty(), where,
           ": the input shape must be a list starting with the batch dimension");
  Shape shape;
  for (size_t i = 1; i < batch_shape.size(); ++i) {
    const json& d = batch_shape[i];
    if (d.is_null()) {
      shape.push_back(-1);
      continue;
    }
    AS_CHECK(d.is_number_integer() && d.get<int64_t>() >= 0 && d.get<int64_t>() < (1LL << 40),
             where, ": input dimension ", d.dump(), " is not a size");
    shape.push_back(d.get<int64_t>());
  }
  return shape;
}

std::string dtype_name(const json& dtype, const std::string& where) {
  if (dtype.is_null()) return "float32";
  if (dtype.is_string()) return dtype.get<std::string>();
  if (dtype.is_object() && dtype.contains("config") && dtype.at("config").is_object())
    return str_field(dtype.at("config"), "name", where);
  fail(where, ": dtype ", dtype.dump(), " is not understood");
}

InputLayerSpec input_layer(const json& config, const std::string& name, const std::string& where) {
  InputLayerSpec in;
  in.name = name;
  const char* key = config.contains("batch_shape")         ? "batch_shape"
                    : config.contains("batch_input_shape") ? "batch_input_shape"
                                                           : nullptr;
  AS_CHECK(key, where, ": input layer '", name, "' has no batch_shape");
  in.shape = batchless_shape(config.at(key), where + ": input layer '" + name + "'");
  const std::string at = where + ": input layer '" + name + "'";
  in.dtype = dtype_name(config.value("dtype", json()), at);
  AS_CHECK(!json_bool_or(config, "sparse", false, at) && !json_bool_or(config, "ragged", false, at),
           at, " is sparse or ragged; only dense inputs are supported");
  return in;
}

TensorRef ref_of(const json& history, const std::string& where) {
  AS_CHECK(history.is_array() && history.size() >= 3 && history[0].is_string() &&
               history[1].is_number_integer() && history[2].is_number_integer(),
           where, ": a tensor reference must be [layer, node, index], got ", history.dump());
  // Checked as 64-bit numbers before narrowing: node 2^32 is not node 0. A
  // number above 2^63 is unsigned and reads as negative here.
  const int64_t node = history[1].get<int64_t>(), tensor = history[2].get<int64_t>();
  AS_CHECK(node >= 0 && node < 100000 && tensor >= 0 && tensor < 1000, where, ": tensor reference ",
           history.dump().substr(0, 200), " is out of range (node 0 to 99999, index 0 to 999)");
  return TensorRef{history[0].get<std::string>(), static_cast<int>(node), static_cast<int>(tensor)};
}

// Whether `j` is an object whose class_name is `cls` (any other type of
// class_name is simply not that class).
bool has_class(const json& j, const char* cls) {
  return j.is_object() && j.contains("class_name") && j.at("class_name") == cls;
}

bool is_keras_tensor(const json& j) {
  return has_class(j, "__keras_tensor__");
}

// Keras 3 node arguments: tensors in args (flattened lists); kwargs may only
// be empty values.
void collect_tensors(const json& arg, std::vector<TensorRef>& out, const std::string& where) {
  if (is_keras_tensor(arg)) {
    AS_CHECK(arg.contains("config") && arg.at("config").is_object() &&
                 arg.at("config").contains("keras_history"),
             where, ": a __keras_tensor__ without keras_history");
    out.push_back(ref_of(arg.at("config").at("keras_history"), where));
  } else if (arg.is_array()) {
    for (const json& a : arg) collect_tensors(a, out, where);
  } else if (has_class(arg, "__tuple__") && arg.contains("config")) {
    AS_CHECK(arg.at("config").is_object(), where, ": a __tuple__'s config must be an object, not ",
             json_type_phrase(arg.at("config")));
    collect_tensors(arg.at("config").value("value", json::array()), out, where);
  } else {
    fail(where, ": a call argument ", arg.dump().substr(0, 200), " is not a tensor");
  }
}

// `kwargs`, when given, collects the call arguments that are not tensors
// (the layer's builder reads them); without it they are refused.
std::vector<TensorRef> parse_call(const json& node, const std::string& where,
                                  json* kwargs = nullptr) {
  std::vector<TensorRef> call;
  if (node.is_object()) {  // Keras 3
    collect_tensors(node.value("args", json::array()), call, where);
    if (node.contains("kwargs") && node.at("kwargs").is_object())
      for (const auto& [k, v] : node.at("kwargs").items()) {
        if (v.is_null() || (k == "training" && v.is_boolean() && !v.get<bool>())) continue;
        // Keras's Layer.__call__ fills `mask` from the inputs' masks: the
        // engine propagates the same masks itself (Trace::mask).
        if (k == "mask") continue;
        // A recurrent layer's initial_state: tensors after its input, as
        // Keras 2 and TF.js list them (and Layer's [x, states...] form).
        if (k == "initial_state") {
          collect_tensors(v, call, where);
          continue;
        }
        if (kwargs && v.is_primitive()) {
          (*kwargs)[k] = v;
          continue;
        }
        fail(where, ": call argument '", k, "' = ", v.dump().substr(0, 200), " is not supported");
      }
    return call;
  }
  AS_CHECK(node.is_array(), where, ": an inbound node must be a list or an object");
  for (const json& t : node) {
    call.push_back(ref_of(t, where));
    if (t.size() >= 4 && t[3].is_object())
      for (const auto& [k, v] : t[3].items())
        AS_CHECK(v.is_null() || (k == "training" && v.is_boolean() && !v.get<bool>()), where,
                 ": call argument '", k, "' = ", v.dump().substr(0, 200), " is not supported");
  }
  return call;
}

std::vector<TensorRef> parse_endpoints(const json& list, const std::string& where) {
  std::vector<TensorRef> out;
  AS_CHECK(list.is_array(), where, " must be a list");
  if (!list.empty() && list[0].is_string()) return {ref_of(list, where)};
  for (const json& e : list) out.push_back(ref_of(e, where));
  return out;
}

void assign_saved_groups(ModelSpec& spec, const std::vector<std::string>& container_classes) {
  // container_classes: the class of each saved container entry in order;
  // InputLayers of a functional model take a name but hold nothing.
  std::map<std::string, int> used;
  std::map<std::string, std::string> snake;  // by class: snake_case's expressions are slow
  size_t layer = 0;
  for (const std::string& cls : container_classes) {
    auto known = snake.find(cls);
    if (known == snake.end()) known = snake.emplace(cls, snake_case(cls)).first;
    std::string name = known->second;
    if (used.count(name)) {
      const int repeat = ++used[name];
      name += '_';  // in pieces: GCC 12 warns falsely on "_" + std::to_string(...)
      name += std::to_string(repeat);
    } else {
      used[name] = 0;
    }
    if (cls == "InputLayer") continue;
    spec.layers.at(layer++).saved_group = "layers/" + name;
  }
}

// How deep models are nested (0: the file's model) and how many layers
// were read so far, against the limits.
struct Nesting {
  int depth = 0;
  int64_t* layers;
};

LayerSpec parse_layer(const json& l, Dialect dialect, const std::string& where, Nesting n);
ModelSpec parse_model_at(const json& model, Dialect dialect, const std::string& where, Nesting n);

ModelSpec parse_sequential(const json& config, Dialect dialect, const std::string& where,
                           Nesting n) {
  ModelSpec spec;
  spec.sequential = true;
  const json* layers = &config;
  if (config.is_object()) {
    spec.name = json_string_or(config, "name", "sequential", where + ": the model's config");
    AS_CHECK(config.contains("layers"), where, ": Sequential config has no 'layers'");
    layers = &config.at("layers");
  }
  AS_CHECK(layers->is_array(), where, ": Sequential 'layers' must be a list");
  std::vector<std::string> classes;
  std::string previous;
  for (const json& l : *layers) {
    const std::string cls = str_field(l, "class_name", where);
    const json& c = l.contains("config") ? l.at("config") : kEmptyObject;
    if (cls == "InputLayer") {
      AS_CHECK(spec.inputs.empty() && spec.layers.empty(), where,
               ": an InputLayer in the middle of a Sequential model");
      const std::string name = json_string_or(c, "name", "input_layer", where + ": an InputLayer");
      spec.inputs.push_back(input_layer(c, name, where));
      previous = name;
      continue;
    }
    LayerSpec layer = parse_layer(l, dialect, where, n);
    if (spec.inputs.empty()) {
      // Keras 2 / TF.js: the first layer carries the input's shape.
      if (!c.contains("batch_input_shape") && !c.contains("batch_shape") && layer.nested &&
          !layer.nested->inputs.empty()) {
        spec.inputs.push_back(layer.nested->inputs[0]);
        spec.inputs.back().name = "input_layer";
      } else {
        AS_CHECK(c.contains("batch_input_shape") || c.contains("batch_shape"), where,
                 ": the Sequential model does not say its input shape (no InputLayer, no "
                 "batch_input_shape on its first layer); save it after building it");
        spec.inputs.push_back(input_layer(c, "input_layer", where));
      }
      previous = spec.inputs.back().name;
    }
    layer.calls.push_back({TensorRef{previous, 0, 0}});
    previous = layer.name;
    classes.push_back(cls);
    spec.layers.push_back(std::move(layer));
  }
  AS_CHECK(!spec.layers.empty() || !spec.inputs.empty(), where, ": an empty Sequential model");
  AS_CHECK(!spec.inputs.empty(), where, ": the Sequential model has no input");
  spec.outputs.push_back({previous, 0, 0});
  assign_saved_groups(spec, classes);
  return spec;
}

ModelSpec parse_functional(const json& config, Dialect dialect, const std::string& where,
                           Nesting n) {
  ModelSpec spec;
  AS_CHECK(config.is_object() && config.contains("layers") && config.at("layers").is_array(), where,
           ": a functional model's config needs a 'layers' list");
  spec.name = json_string_or(config, "name", "model", where + ": the model's config");
  std::vector<std::string> classes;
  std::set<std::string> names;
  std::map<std::string, InputLayerSpec> inputs_by_name;
  for (const json& l : config.at("layers")) {
    const std::string cls = str_field(l, "class_name", where);
    classes.push_back(cls);
    if (cls == "InputLayer") {
      const json& c = l.contains("config") ? l.at("config") : kEmptyObject;
      const std::string name =
          l.contains("name") && l.at("name").is_string()
              ? l.at("name").get<std::string>()
              : json_string_or(c, "name", "input_layer", where + ": an InputLayer");
      AS_CHECK(names.insert(name).second, where, ": two layers are named '", name, "'");
      inputs_by_name[name] = input_layer(c, name, where);
      continue;
    }
    LayerSpec layer = parse_layer(l, dialect, where, n);
    AS_CHECK(names.insert(layer.name).second, where, ": two layers are named '", layer.name, "'");
    const json& nodes = l.contains("inbound_nodes") ? l.at("inbound_nodes") : kEmptyArray;
    AS_CHECK(nodes.is_array(), where, ": layer '", layer.name, "': inbound_nodes must be a list");
    for (const json& node : nodes) {
      const std::string at = where + ": layer '" + layer.name + "'";
      json kwargs = json::object();
      layer.calls.push_back(parse_call(node, at, &kwargs));
      AS_CHECK(layer.calls.size() == 1 || kwargs == layer.call_kwargs, at, ": call arguments ",
               kwargs.dump().substr(0, 200), " differ from its first call's ",
               layer.call_kwargs.dump().substr(0, 200), " (one set per layer is supported)");
      layer.call_kwargs = kwargs;
    }
    spec.layers.push_back(std::move(layer));
  }
  AS_CHECK(config.contains("input_layers"), where, ": the model has no 'input_layers'");
  for (const TensorRef& r : parse_endpoints(config.at("input_layers"), where + ": input_layers")) {
    AS_CHECK(inputs_by_name.count(r.layer), where, ": input_layers names '", r.layer,
             "', which is not an InputLayer");
    spec.inputs.push_back(inputs_by_name.at(r.layer));
  }
  AS_CHECK(config.contains("output_layers"), where, ": the model has no 'output_layers'");
  spec.outputs = parse_endpoints(config.at("output_layers"), where + ": output_layers");
  for (const TensorRef& r : spec.outputs)
    AS_CHECK(names.count(r.layer), where, ": output_layers names an unknown layer '", r.layer, "'");
  assign_saved_groups(spec, classes);
  return spec;
}

LayerSpec parse_layer(const json& l, Dialect dialect, const std::string& where, Nesting n) {
  AS_CHECK(++*n.layers <= kMaxLayers, where, ": the model has more than ", kMaxLayers,
           " layers (autoshard's limit for a model file, nested models included)");
  LayerSpec layer;
  layer.cls = str_field(l, "class_name", where);
  AS_CHECK(l.contains("config") && (l.at("config").is_object() || l.at("config").is_array()), where,
           ": layer of class '", layer.cls, "' has no config object");
  const json& config = l.at("config");
  if (config.is_object() && config.contains("name") && config.at("name").is_string())
    layer.name = config.at("name").get<std::string>();
  else if (l.contains("name") && l.at("name").is_string())
    layer.name = l.at("name").get<std::string>();
  AS_CHECK(!layer.name.empty(), where, ": a layer of class '", layer.cls, "' has no name");
  AS_CHECK(layer.name.find('.') == std::string::npos && layer.name.find('/') == std::string::npos,
           where, ": layer name '", layer.name, "' contains '.' or '/'");
  refuse_code(l, layer.cls, layer.name, where);
  // A nested model's config (all the models inside it) is read into
  // `nested`, not copied: a copy per level made nesting quadratic.
  if (kModelClasses.count(layer.cls)) {
    AS_CHECK(n.depth < kMaxModelNesting, where, ": models are nested more than ", kMaxModelNesting,
             " deep (autoshard's limit; model '", layer.name, "')");
    layer.nested = std::make_shared<ModelSpec>(
        parse_model_at(l, dialect, where, Nesting{n.depth + 1, n.layers}));
    layer.config = json::object();
  } else {
    layer.config = config;
  }
  if (layer.cls == "Bidirectional") {
    const json& inner = layer.config.contains("layer") ? layer.config.at("layer") : kEmptyObject;
    AS_CHECK(inner.is_object() && !inner.empty(), where, ": Bidirectional '", layer.name,
             "' has no inner 'layer'");
    refuse_code(inner,
                json_string_or(inner, "class_name", "",
                               where + ": Bidirectional '" + layer.name + "': its 'layer'"),
                layer.name, where);
  }
  return layer;
}

ModelSpec parse_model_at(const json& model, Dialect dialect, const std::string& where, Nesting n) {
  AS_CHECK(model.is_object(), where, ": the model config must be a JSON object");
  const std::string cls = str_field(model, "class_name", where);
  const json& config = model.contains("config") ? model.at("config") : kEmptyObject;
  refuse_code(model, cls, json_string_or(config, "name", cls, where + ": the model's config"),
              where);
  AS_CHECK(model.contains("config"), where, ": the model has no 'config'");
  if (cls == "Sequential") return parse_sequential(model.at("config"), dialect, where, n);
  if (cls == "Functional" || cls == "Model")
    return parse_functional(model.at("config"), dialect, where, n);
  fail(where, ": the model's class '", cls,
       "' is not Sequential or Functional (a subclassed model holds code and cannot be read)");
}

}  // namespace

ModelSpec parse_model(const json& model, Dialect dialect, const std::string& where) {
  int64_t layers = 0;
  return parse_model_at(model, dialect, where, Nesting{0, &layers});
}

}  // namespace autoshard::keras

// ---- Converting between Keras 3's and Keras 2's forms ----

namespace autoshard::keras {

namespace {

const std::set<std::string> kWrapperKeys = {"module", "registered_name", "build_config",
                                            "compile_config", "shared_object_id"};

bool is_serialized_object(const json& j) {
  return j.is_object() && j.contains("class_name") && j.contains("config") &&
         j.at("class_name").is_string();
}

// ---- to Keras 2 ----

json value_to2(const json& v);

// A layer's config in Keras 2's form: DTypePolicy -> its name, nested
// serialized objects (initializers, an inner layer) without Keras 3's keys.
json config_to2(const json& config) {
  if (!config.is_object()) return value_to2(config);
  json out = json::object();
  for (const auto& [k, v] : config.items()) {
    if (k == "dtype" && is_serialized_object(v)) {
      out[k] = v.at("config").value("name", "float32");
    } else if (k == "batch_shape") {
      out["batch_input_shape"] = v;
    } else {
      out[k] = value_to2(v);
    }
  }
  return out;
}

json model_to2(const json& model);

json value_to2(const json& v) {
  if (is_serialized_object(v)) {
    const std::string cls = v.at("class_name");
    if (kModelClasses.count(cls)) return model_to2(v);
    json out = json::object();
    for (const auto& [k, x] : v.items())
      if (!kWrapperKeys.count(k)) out[k] = k == "config" ? config_to2(x) : value_to2(x);
    return out;
  }
  if (v.is_array()) {
    json out = json::array();
    for (const json& x : v) out.push_back(value_to2(x));
    return out;
  }
  return v;
}

// [{"args": [...], "kwargs": {}}] -> [[[layer, node, index, {}], ...]]
json nodes_to2(const json& nodes, const std::string& layer) {
  json out = json::array();
  for (const json& node : nodes) {
    if (!node.is_object()) {
      out.push_back(node);
      continue;
    }
    // The arguments, then a recurrent layer's initial_state (Keras 2 lists them so).
    const std::vector<TensorRef> refs = parse_call(node, "layer '" + layer + "'");
    json call = json::array();
    for (const TensorRef& r : refs) call.push_back({r.layer, r.node, r.tensor, json::object()});
    out.push_back(call);
  }
  return out;
}

json model_to2(const json& model) {
  const std::string cls = model.at("class_name");
  json config = model.at("config");
  json layers = config.is_array() ? config : config.value("layers", json::array());
  json out_layers = json::array();
  for (const json& l : layers) {
    json e = json::object();
    e["class_name"] = l.at("class_name");
    if (kModelClasses.count(l.at("class_name").get<std::string>())) {
      e = model_to2(l);
    } else {
      e["config"] = config_to2(l.value("config", json::object()));
    }
    if (l.contains("name")) e["name"] = l.at("name");
    if (l.contains("inbound_nodes") && cls != "Sequential")
      e["inbound_nodes"] =
          nodes_to2(l.at("inbound_nodes"), l.value("name", e["config"].value("name", "")));
    out_layers.push_back(e);
  }
  json out_config = json::object();
  if (config.is_object())
    for (const auto& [k, v] : config.items())
      if (k != "layers" && !kWrapperKeys.count(k))
        out_config[k] = k == "dtype" ? config_to2({{k, v}})[k] : v;
  out_config["layers"] = out_layers;
  json out = {{"class_name", cls == "Model" ? "Functional" : cls}, {"config", out_config}};
  if (model.contains("name")) out["name"] = model.at("name");
  if (model.contains("inbound_nodes"))
    out["inbound_nodes"] = nodes_to2(model.at("inbound_nodes"), out_config.value("name", ""));
  return out;
}

// ---- to Keras 3 ----

json dtype_policy(const json& name) {
  return {{"module", "keras"},
          {"class_name", "DTypePolicy"},
          {"config", {{"name", name.is_string() ? name : json("float32")}}},
          {"registered_name", nullptr}};
}

std::string module_of(const std::string& key) {
  auto ends = [&](const char* s) {
    const std::string e(s);
    return key.size() >= e.size() && key.compare(key.size() - e.size(), e.size(), e) == 0;
  };
  if (ends("_initializer")) return "keras.initializers";
  if (ends("_regularizer")) return "keras.regularizers";
  if (ends("_constraint")) return "keras.constraints";
  if (key == "layer" || key == "backward_layer") return "keras.layers";
  return "keras";
}

json model_to3(const json& model, Dialect from, const std::string& where);

json config_to3(const json& config, bool input_layer, Dialect from, const std::string& where);

json object_to3(const json& v, const std::string& key, Dialect from, const std::string& where) {
  const std::string cls = v.at("class_name");
  if (kModelClasses.count(cls)) return model_to3(v, from, where);
  const bool layer = key == "layer" || key == "backward_layer";
  return {{"module", module_of(key)},
          {"class_name", cls},
          {"config", layer ? config_to3(v.at("config"), false, from, where) : v.at("config")},
          {"registered_name", nullptr}};
}

json config_to3(const json& config, bool input_layer, Dialect from, const std::string& where) {
  if (!config.is_object()) return config;
  json out = json::object();
  for (const auto& [k, v] : config.items()) {
    if (k == "batch_input_shape") {
      if (input_layer) out["batch_shape"] = v;  // other layers: the InputLayer says it
    } else if (k == "dtype") {
      out[k] = input_layer ? (v.is_string() ? v : json("float32")) : dtype_policy(v);
    } else if (is_serialized_object(v)) {
      out[k] = object_to3(v, k, from, where);
    } else {
      out[k] = v;
    }
  }
  if (!input_layer && !out.contains("dtype")) out["dtype"] = dtype_policy("float32");
  return out;
}

json keras_tensor(const TensorRef& r) {
  return {{"class_name", "__keras_tensor__"},
          {"config",
           {{"shape", json::array({nullptr})},
            {"dtype", "float32"},
            {"keras_history", {r.layer, r.node, r.tensor}}}}};
}

// [[[layer, node, index, kwargs], ...], ...] -> [{"args": [...], "kwargs": {}}]
json nodes_to3(const json& nodes, const std::string& where) {
  json out = json::array();
  for (const json& node : nodes) {
    if (node.is_object()) {
      out.push_back(node);
      continue;
    }
    const std::vector<TensorRef> refs = parse_call(node, where);
    json args = json::array();
    if (refs.size() == 1) {
      args.push_back(keras_tensor(refs[0]));
    } else {
      json list = json::array();
      for (const TensorRef& r : refs) list.push_back(keras_tensor(r));
      args.push_back(list);
    }
    out.push_back({{"args", args}, {"kwargs", json::object()}});
  }
  return out;
}

json layer_entry3(const std::string& cls, const std::string& name, json config) {
  return {{"module", "keras.layers"},
          {"class_name", cls},
          {"config", std::move(config)},
          {"registered_name", nullptr},
          {"name", name}};
}

json model_to3(const json& model, Dialect from, const std::string& where) {
  std::string cls = model.at("class_name");
  if (cls == "Model") cls = "Functional";
  const json& config = model.at("config");
  const json layers = config.is_array() ? config : config.value("layers", json::array());
  json out_layers = json::array();
  for (size_t i = 0; i < layers.size(); ++i) {
    const json& l = layers[i];
    const std::string lcls = l.at("class_name");
    if (kModelClasses.count(lcls)) {
      json nested = model_to3(l, from, where);
      if (l.contains("inbound_nodes"))
        nested["inbound_nodes"] = nodes_to3(l.at("inbound_nodes"), where);
      out_layers.push_back(nested);
      continue;
    }
    const json& c = l.value("config", json::object());
    const std::string name =
        c.is_object() && c.contains("name") ? c.value("name", "") : l.value("name", "");
    // A Sequential model without an InputLayer: its first layer's
    // batch_input_shape becomes one (Keras 3 layers take no batch shape).
    if (cls == "Sequential" && i == 0 && lcls != "InputLayer" && c.contains("batch_input_shape")) {
      json in = {{"batch_shape", c.at("batch_input_shape")},
                 {"dtype", c.value("dtype", json("float32")).is_string()
                               ? c.value("dtype", json("float32"))
                               : json("float32")},
                 {"sparse", false},
                 {"name", "input_layer"}};
      out_layers.push_back(layer_entry3("InputLayer", "input_layer", in));
    }
    json e = layer_entry3(lcls, name, config_to3(c, lcls == "InputLayer", from, where));
    if (cls != "Sequential")
      e["inbound_nodes"] = nodes_to3(l.value("inbound_nodes", json::array()), where);
    out_layers.push_back(e);
  }
  json out_config = json::object();
  if (config.is_object())
    for (const auto& [k, v] : config.items())
      if (k != "layers") out_config[k] = v;
  if (!out_config.contains("name"))
    out_config["name"] = cls == "Sequential" ? "sequential" : "functional";
  out_config["trainable"] = out_config.value("trainable", true);
  out_config["layers"] = out_layers;
  return {
      {"module", "keras"}, {"class_name", cls}, {"config", out_config}, {"registered_name", cls}};
}

}  // namespace

json convert_architecture(const json& model, Dialect from, Dialect to) {
  const bool from3 = from == Dialect::Keras3, to3 = to == Dialect::Keras3;
  if (from3 == to3) return model;
  // parse_model checked what is read here; a value it let through unread
  // still ends in one error.
  return with_json_errors("converting the architecture", [&] {
    return to3 ? model_to3(model, from, "converting the architecture") : model_to2(model);
  });
}

}  // namespace autoshard::keras

namespace autoshard {

nlohmann::json keras2_architecture(const nlohmann::json& keras3_model, const std::string& where) {
  keras::parse_model(keras3_model, keras::Dialect::Keras3, where);  // what the conversion relies on
  return keras::convert_architecture(keras3_model, keras::Dialect::Keras3, keras::Dialect::Keras2);
}

}  // namespace autoshard
