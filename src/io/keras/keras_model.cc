// load_keras_model: the three formats' architecture, compile config and
// weights, read into one KerasModel (see autoshard/io/keras_model.h).
#include "autoshard/io/keras_model.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <queue>
#include <set>

#include "autoshard/error.h"
#include "autoshard/input_file.h"
#include "autoshard/io/keras_regularizers.h"
#include "autoshard/json.h"
#include "io/keras/architecture.h"
#include "io/keras/compile_config.h"
#include "io/keras/hdf5_file.h"
#include "io/keras/layer_table.h"
#include "io/keras/optimizer_state.h"
#include "io/keras/weight_table.h"
#include "io/zip_archive.h"

namespace autoshard {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace keras;

namespace {

constexpr uint64_t kMaxJsonBytes = 64ull << 20;

json parse_json(const std::string& text, const std::string& where) {
  return parse_json_text(text, where);
}

// Where each weight of a layer is in the file, for the three formats.
struct FileWeights {
  Dialect dialect;
  std::shared_ptr<H5File> h5;  // Keras 3's model.weights.h5 or the legacy .h5
  WeightTable tfjs;
  std::vector<std::string> tfjs_optimizer;  // TF.js's optimizer weights, in order
};

DType dtype_of(const std::string& keras, const std::string& input, const std::string& where) {
  if (keras.rfind("float", 0) == 0 || keras == "bfloat16") return DType::F32;
  if (keras.rfind("int", 0) == 0 || keras.rfind("uint", 0) == 0 || keras == "bool")
    return DType::I32;
  fail(where, ": input '", input, "' has dtype '", keras, "', which is not supported");
}

struct Built {
  std::unique_ptr<Model> model;
  std::vector<KerasTensorSpec> inputs, outputs;
  // Per layer: its built roles.
  std::vector<std::pair<const LayerSpec*, std::vector<WeightRole>>> roles;
  // Per layer that has some: its counters (BuiltLayer::counters).
  std::vector<std::pair<const LayerSpec*, std::vector<WeightRole>>> counters;
};

// The key of a call in make_calls's map: "layer:node"; of a tensor in
// build_model's map: "layer:node:tensor" (which output of that call).
std::string tensor_key(const std::string& layer, size_t node) {
  return layer + ":" + std::to_string(node);
}
std::string tensor_key(const TensorRef& r) {
  return tensor_key(r.layer, r.node) + ":" + std::to_string(r.tensor);
}

// Makes every layer call of `spec` on the tensors it reads, adding what each
// makes to `tensors` (which holds the inputs'). Keras 2 configs need not list
// the layers in dependency order, so the calls are sorted topologically:
// each waits for the calls making its inputs and for the layer's call before
// it; ready calls run in list order (a min-heap), which for a sorted config
// is the list's order. Linear in the calls (n log n with the heap).
void make_calls(const ModelSpec& spec, const std::map<std::string, Layer>& layers,
                std::map<std::string, SymbolicTensor>& tensors, const std::string& where) {
  struct Call {
    size_t layer, index;       // spec.layers[layer].calls[index]
    size_t waiting = 0;        // inputs (and the previous call) not made yet
    std::vector<size_t> next;  // calls waiting for this one
  };
  std::vector<Call> calls;
  std::map<std::string, size_t> maker;  // tensor key -> the call making it
  for (size_t i = 0; i < spec.layers.size(); ++i)
    for (size_t c = 0; c < spec.layers[i].calls.size(); ++c) {
      maker[tensor_key(spec.layers[i].name, c)] = calls.size();
      calls.push_back(Call{i, c, 0, {}});
    }
  for (size_t id = 0; id < calls.size(); ++id) {
    const LayerSpec& l = spec.layers[calls[id].layer];
    if (calls[id].index > 0) {  // a layer's calls in order: call k makes node k
      calls[id - 1].next.push_back(id);
      ++calls[id].waiting;
    }
    for (const TensorRef& r : l.calls[calls[id].index]) {
      if (tensors.count(tensor_key(r))) continue;
      const std::string key = tensor_key(r.layer, r.node);
      const auto it = maker.find(key);
      AS_CHECK(it != maker.end(), where, ": layer '", l.name,
               "' is called on tensors no layer makes (a cycle or an unknown layer)");
      calls[it->second].next.push_back(id);
      ++calls[id].waiting;
    }
  }
  std::priority_queue<size_t, std::vector<size_t>, std::greater<>> ready;
  for (size_t id = 0; id < calls.size(); ++id)
    if (calls[id].waiting == 0) ready.push(id);
  size_t made = 0;
  while (!ready.empty()) {
    const Call& call = calls[ready.top()];
    ready.pop();
    const LayerSpec& l = spec.layers[call.layer];
    std::vector<SymbolicTensor> args;
    for (const TensorRef& r : l.calls[call.index]) {
      auto it = tensors.find(tensor_key(r));
      AS_CHECK(it != tensors.end(), where, ": layer '", l.name, "' reads output ", r.tensor,
               " of layer '", r.layer, "', which has no such output");
      args.push_back(it->second);
    }
    AS_CHECK(!args.empty(), where, ": layer '", l.name, "' is called on nothing");
    const std::vector<SymbolicTensor> outs = layers.at(l.name).outputs(args);
    for (size_t k = 0; k < outs.size(); ++k)
      tensors[tensor_key(TensorRef{l.name, int(call.index), int(k)})] = outs[k];
    ++made;
    for (size_t n : call.next)
      if (--calls[n].waiting == 0) ready.push(n);
  }
  if (made == calls.size()) return;
  for (const Call& call : calls)
    AS_CHECK(call.waiting == 0, where, ": layer '", spec.layers[call.layer].name,
             "' is called on tensors no layer makes (a cycle or an unknown layer)");
}

// The scopes of the layers a file saved with "trainable": false (Keras's
// frozen layers, nested models' by "<model>.<layer>"), for Model::set_frozen.
void frozen_scopes(const ModelSpec& spec, const std::string& prefix, std::set<std::string>& out) {
  for (const LayerSpec& l : spec.layers) {
    const json* trainable = l.config.is_object() ? json_member(l.config, "trainable") : nullptr;
    if (trainable && *trainable == json(false))
      out.insert(prefix + l.name);
    else if (l.nested)
      frozen_scopes(*l.nested, prefix + l.name + ".", out);
  }
}

// A layer's regularizers and constraints (Keras's "<w>_regularizer",
// "<w>_constraint" and "activity_regularizer"), for Model::set_regularizers
// and set_constraints.
struct Penalties {
  std::map<std::string, Trace::Penalty> weights, activities, constraints;
};

// The weight a "<w>_..." field is about: the role named w or w_kernel (a
// DepthwiseConv2D's "depthwise" is its kernel, by TF.js's name).
const WeightRole* role_named(const std::vector<WeightRole>& roles, const std::string& w) {
  for (const WeightRole& r : roles)
    if (r.cpp == w || r.cpp == w + "_kernel" || r.tfjs == w + "_kernel") return &r;
  return nullptr;
}

void penalties_of(const LayerSpec& l, const std::vector<WeightRole>& roles,
                  const std::string& prefix, const std::string& where, Penalties& out) {
  if (l.nested) {  // each inner layer, on its roles ("inner.kernel" -> "kernel")
    for (const LayerSpec& inner : l.nested->layers) {
      std::vector<WeightRole> own;
      for (const WeightRole& r : roles)
        if (r.cpp.rfind(inner.name + ".", 0) == 0)
          own.push_back({r.cpp.substr(inner.name.size() + 1), r.k3, r.tfjs});
      penalties_of(inner, own, prefix + l.name + ".", where, out);
    }
    return;
  }
  if (!l.config.is_object()) return;
  const std::string at = where + ": layer '" + l.name + "'";
  // A wrapper's inner layers (Bidirectional's forward and backward layer)
  // keep theirs in their own configs: not applied yet, so refused.
  for (const char* inner : {"layer", "backward_layer"}) {
    const json* c = json_member(l.config, inner);
    const json* cc = c && c->is_object() ? json_member(*c, "config") : nullptr;
    if (!cc || !cc->is_object()) continue;
    for (const auto& [key, value] : cc->items())
      AS_CHECK(value.is_null() || (key.find("_regularizer") == std::string::npos &&
                                   key.find("_constraint") == std::string::npos),
               at, ": ", inner, "'s ", key,
               " is not supported (regularizers and constraints inside a wrapper)");
  }
  for (const auto& [key, value] : l.config.items()) {
    if (value.is_null()) continue;
    for (const char* suffix : {"_regularizer", "_constraint"}) {
      const size_t n = std::char_traits<char>::length(suffix);
      if (key.size() <= n || key.compare(key.size() - n, n, suffix) != 0) continue;
      const std::string w = key.substr(0, key.size() - n);
      const bool constraint = suffix[1] == 'c';
      if (w == "activity" && !constraint) {
        out.activities[prefix + l.name] = keras_regularizer(value, at + ": " + key);
        continue;
      }
      const WeightRole* r = role_named(roles, w);
      if (!r) continue;  // no such weight (a bias_regularizer without a bias)
      const std::string path = prefix + l.name + "." + r->cpp;
      if (constraint)
        out.constraints[path] = keras_constraint(value, at + ": " + key);
      else
        out.weights[path] = keras_regularizer(value, at + ": " + key);
    }
  }
}

Built build_model(const ModelSpec& spec, const BuildContext& ctx, const KerasLoadOptions& options) {
  Built b;
  // Inputs feeding an Embedding or a CategoryEncoding take ids (TF.js says
  // float32 for them; Keras feeds them whole floats alike).
  std::set<std::string> token_inputs;
  for (const LayerSpec& l : spec.layers)
    if (l.cls == "Embedding" || l.cls == "CategoryEncoding")
      for (const auto& call : l.calls)
        for (const TensorRef& r : call) token_inputs.insert(r.layer);
  std::map<std::string, SymbolicTensor> tensors;  // "layer:node:tensor"
  std::vector<SymbolicTensor> inputs;
  for (const InputLayerSpec& in : spec.inputs) {
    KerasTensorSpec s{in.name, in.shape, dtype_of(in.dtype, in.name, ctx.where), in.dtype};
    if (token_inputs.count(in.name)) s.dtype = DType::I32;
    Shape shape = in.shape;
    auto given = options.input_shapes.find(in.name);
    if (given == options.input_shapes.end() && spec.inputs.size() == 1)
      given = options.input_shapes.find("");
    if (given != options.input_shapes.end()) {
      AS_CHECK(given->second.size() == shape.size(), ctx.where, ": input '", in.name, "' is ",
               shape_str(shape), " per example, the data gives ", shape_str(given->second));
      for (size_t d = 0; d < shape.size(); ++d) {
        AS_CHECK(shape[d] < 0 || shape[d] == given->second[d], ctx.where, ": input '", in.name,
                 "' is ", shape_str(shape), " per example (-1: any), the data gives ",
                 shape_str(given->second));
        shape[d] = given->second[d];
      }
    }
    for (int64_t d : shape)
      AS_CHECK(d >= 0 || options.unknown_dims, ctx.where, ": input '", in.name,
               "' has a dimension of any size (None) in ", shape_str(in.shape),
               "; give the data so that its size is known");
    const std::string key = tensor_key(TensorRef{in.name, 0, 0});
    tensors[key] = Input(shape, s.dtype, in.name);
    inputs.push_back(tensors[key]);
    b.inputs.push_back(s);
  }
  std::map<std::string, Layer> layers;
  for (const LayerSpec& l : spec.layers) {
    BuiltLayer built = build_layer(l, ctx);
    layers.emplace(l.name, built.layer);
    b.roles.emplace_back(&l, built.weights);
    if (!built.counters.empty()) b.counters.emplace_back(&l, built.counters);
  }
  make_calls(spec, layers, tensors, ctx.where);
  std::vector<SymbolicTensor> outputs;
  for (const TensorRef& r : spec.outputs) {
    auto it = tensors.find(tensor_key(r));
    AS_CHECK(it != tensors.end(), ctx.where, ": output ", r.tensor, " of layer '", r.layer,
             "' is never made (the layer is never called, or has fewer outputs)");
    outputs.push_back(it->second);
    b.outputs.push_back({r.layer, {}, DType::F32, "float32"});
  }
  AS_CHECK(!outputs.empty(), ctx.where, ": the model has no outputs");
  b.model = std::make_unique<Model>(inputs, outputs, spec.name.empty() ? "model" : spec.name);
  b.model->set_seed(options.seed);
  std::set<std::string> frozen;
  frozen_scopes(spec, "", frozen);
  if (!frozen.empty()) b.model->set_frozen(std::move(frozen));
  Penalties p;
  for (const auto& [layer, roles] : b.roles) penalties_of(*layer, roles, "", ctx.where, p);
  if (!p.weights.empty() || !p.activities.empty())
    b.model->set_regularizers(std::move(p.weights), std::move(p.activities));
  if (!p.constraints.empty()) b.model->set_constraints(std::move(p.constraints));
  return b;
}

// Keras 2's weights of a layer: model_weights/<layer>/ with its weight_names
// attribute, in the layer's weights order.
std::vector<std::string> keras2_names(const H5File& h5, const std::string& root,
                                      const std::string& layer) {
  const std::string group = root + "/" + layer;
  std::vector<std::string> names;
  for (const std::string& n : h5.strings_attribute(group, "weight_names"))
    names.push_back(group + "/" + n);
  return names;
}

std::string last_component(std::string name) {
  const size_t colon = name.rfind(':');
  if (colon != std::string::npos) name = name.substr(0, colon);
  const size_t slash = name.rfind('/');
  return slash == std::string::npos ? name : name.substr(slash + 1);
}

// A BatchNormalization's moving_variance holds no value below 0: one would
// make 1 / sqrt(variance + epsilon) NaN in every prediction. Read once here
// (a vector of the layer's features); NaN and infinity are stored_source's.
void check_variance(const StoredWeight& w, const std::string& where) {
  AS_CHECK(w.shape.size() == 1 && w.shape[0] <= (int64_t{1} << 24), where,
           " must be a vector of the layer's features, not ", shape_str(w.shape));
  std::vector<float> v(static_cast<size_t>(w.shape[0]));
  w.read({0}, w.shape, v.data());
  for (size_t i = 0; i < v.size(); ++i)
    AS_CHECK(!(v[i] < 0), where, " holds ", v[i], " at index ", i,
             "; a variance is at least 0 (a negative one makes every prediction NaN)");
}

// Keras 2.13-2.15 joined a layer's path with os.path.join-like
// tf.io.gfile.join (saving_lib.py, _save_container_state), so on Windows its
// .keras files name the group "layers\lstm\cell" (one HDF5 name with
// backslashes) and the variables under it "vars/0": "layers/lstm/cell/vars/0"
// saved there is "layers\lstm\cell/vars/0". Keras 3 reads only the first.
std::string windows_saved_path(const std::string& path) {
  const size_t vars = path.rfind("/vars/");
  if (vars == std::string::npos) return path;
  std::string group = path.substr(0, vars);
  std::replace(group.begin(), group.end(), '/', '\\');
  return group + path.substr(vars);
}

// Whether Keras 2's weight `name` ("model_weights/norm/norm/count:0") is a
// counter of layer `layer`: by its last name, as weights are matched.
bool names_a_counter(const std::string& name, const std::vector<KerasCounter>& counters,
                     const std::string& layer) {
  return std::any_of(counters.begin(), counters.end(), [&](const KerasCounter& c) {
    return c.name.layer == layer && last_component(name) == last_component(c.name.tfjs);
  });
}

// The counters' values as the file holds them (Keras 2 lists a layer's among
// its weights, in order); a file that has none (written by a Keras before the
// variable, or by autoshard before 2026-12) leaves 0, as Keras 3's adapt does.
void read_counters(KerasModel& k, const FileWeights& files, const std::string& root) {
  std::map<std::string, std::vector<std::string>> legacy;  // per layer: its counters' names
  for (KerasCounter& c : k.counters) {
    if (files.dialect == Dialect::Keras3) {
      std::string name = c.name.keras3;
      if (!files.h5->is_dataset(name)) name = windows_saved_path(name);
      if (files.h5->is_dataset(name)) c.value = files.h5->read_int(name);
    } else if (files.dialect == Dialect::Keras2) {
      if (!legacy.count(c.name.layer))
        for (const std::string& name : keras2_names(*files.h5, root, c.name.layer))
          if (names_a_counter(name, k.counters, c.name.layer)) legacy[c.name.layer].push_back(name);
      std::vector<std::string>& names = legacy[c.name.layer];
      if (names.empty()) continue;
      if (files.h5->is_dataset(names.front())) c.value = files.h5->read_int(names.front());
      names.erase(names.begin());
    }
  }
}

// The WeightSources of every model weight, checked against the C++ model.
// `shapes` receives each weight's shape.
std::map<std::string, WeightSource> weight_sources(KerasModel& k, const Built& b,
                                                   const FileWeights& files,
                                                   const std::string& where,
                                                   std::map<std::string, Shape>& shapes) {
  std::map<std::string, WeightSource> sources;
  const std::string root = files.h5 && files.h5->is_group("model_weights") ? "model_weights" : "";
  for (const auto& [layer, roles] : b.roles) {
    std::vector<std::string> legacy;
    if (files.dialect == Dialect::Keras2) {
      legacy = keras2_names(*files.h5, root, layer->name);
      std::erase_if(legacy, [&](const std::string& n) {
        return names_a_counter(n, k.counters, layer->name);
      });
      AS_CHECK(legacy.size() == roles.size(), where, ": layer '", layer->name, "' (", layer->cls,
               ") has ", legacy.size(), " weights in the file, the architecture needs ",
               roles.size(), " (a missing weight, or weights of another model)");
    }
    for (size_t i = 0; i < roles.size(); ++i) {
      const WeightRole& r = roles[i];
      const std::string cpp = layer->name + "." + r.cpp;
      std::string name;
      StoredWeight stored;
      if (files.dialect == Dialect::Keras3) {
        name = layer->saved_group + "/" + r.k3;
        if (!files.h5->is_dataset(name) && files.h5->is_dataset(windows_saved_path(name)))
          name = windows_saved_path(name);
        AS_CHECK(files.h5->is_dataset(name), where, ": layer '", layer->name, "' (", layer->cls,
                 "): weight '", r.cpp, "' is missing (no '", name, "' in model.weights.h5)");
        stored = h5_weight(files.h5, name);
      } else if (files.dialect == Dialect::Keras2) {
        name = legacy[i];
        // A nested weight ("forward_lstm.kernel") by its last name ("kernel").
        const std::string cpp_last = r.cpp.substr(r.cpp.rfind('.') + 1);
        const std::string want = last_component(cpp_last), got = last_component(name);
        AS_CHECK(got == want || (want == "kernel" && got == "depthwise_kernel"), where, ": layer '",
                 layer->name, "' (", layer->cls, "): weight ", i, " is '", name,
                 "' but the architecture expects its ", want);
        AS_CHECK(files.h5->is_dataset(name), where, ": layer '", layer->name, "': weight '", name,
                 "' is listed but missing");
        stored = h5_weight(files.h5, name);
      } else {
        name = layer->name + "/" + r.tfjs;
        auto it = files.tfjs.find(name);
        AS_CHECK(it != files.tfjs.end(), where, ": layer '", layer->name, "' (", layer->cls,
                 "): weight '", name, "' is missing from weightsManifest");
        stored = it->second;
      }
      // Only BatchNormalization has a moving_variance (nested models' too).
      if (r.cpp == "moving_variance" || r.cpp.ends_with(".moving_variance"))
        check_variance(stored, where + ": layer '" + layer->name + "': weight '" + r.cpp + "'");
      sources[cpp] = stored_source(stored, name);
      shapes[cpp] = stored.shape;
      k.weights.emplace_back(cpp, name);
    }
  }
  read_counters(k, files, root);
  // Every C++ weight has its source, and no more.
  const std::vector<std::string> paths = b.model->weight_paths();
  for (const std::string& p : paths)
    AS_CHECK(sources.count(p), where, ": internal: weight '", p, "' has no place in the file");
  for (const auto& [p, src] : sources)
    AS_CHECK(std::find(paths.begin(), paths.end(), p) != paths.end(), where,
             ": internal: the file's weight for '", p, "' has no weight in the model");
  return sources;
}

// The optimizer's variables as the file lists them (none: empty).
FileOptimizerState file_optimizer_state(const FileWeights& files, const std::string& where) {
  FileOptimizerState out;
  auto iterations_of = [&](double v, const std::string& name) {
    AS_CHECK(v >= 0 && v < 9.0e15 && v == static_cast<double>(static_cast<int64_t>(v)), where,
             ": optimizer variable '", name, "' (the iteration count) is ", v,
             ", not a whole number >= 0");
    return static_cast<int64_t>(v);
  };
  if (files.dialect == Dialect::TFJS) {
    for (const std::string& key : files.tfjs_optimizer) {
      out.names.push_back(key);
      out.values.push_back(files.tfjs.at(key));
    }
    if (out.values.empty()) return out;
    const StoredWeight& iter = out.values.front();
    AS_CHECK(iter.shape.empty(), where, ": optimizer weight '", out.names.front(),
             "' (TF.js's iteration count) must be a scalar");
    float v = 0;
    iter.read({}, {}, &v);
    out.iterations = iterations_of(v, out.names.front());
    out.layout = {1, false};
    return out;
  }
  const H5File& h5 = *files.h5;
  if (files.dialect == Dialect::Keras3) {
    for (int i = 0; h5.is_dataset("optimizer/vars/" + std::to_string(i)); ++i)
      out.names.push_back("optimizer/vars/" + std::to_string(i));
    out.layout = {2, true};
  } else if (h5.is_group("optimizer_weights")) {
    for (const std::string& n : h5.strings_attribute("optimizer_weights", "weight_names"))
      out.names.push_back("optimizer_weights/" + n);
    // Keras 3's legacy .h5 lists its own variables (iteration, learning_rate, ...).
    const bool keras3 = out.names.size() >= 2 && out.names[1].size() >= 13 &&
                        out.names[1].compare(out.names[1].size() - 13, 13, "learning_rate") == 0;
    out.layout = {keras3 ? 2 : 1, keras3};
  }
  for (const std::string& n : out.names) {
    AS_CHECK(h5.is_dataset(n), where, ": optimizer variable '", n, "' is listed but missing");
    out.values.push_back(h5_weight(files.h5, n));
  }
  if (!out.values.empty()) {
    AS_CHECK(out.values.front().shape.empty(), where, ": optimizer variable '", out.names.front(),
             "' (the iteration count) must be a scalar");
    out.iterations =
        iterations_of(static_cast<double>(h5.read_int(out.names.front())), out.names.front());
  }
  return out;
}

}  // namespace

namespace {

// Stops at the first top-level key of a JSON document: a TensorFlow.js
// layers model is an object whose keys include "modelTopology" (or
// "weightsManifest"); any other JSON (a Hugging Face config.json) is not.
class TfjsKeySniffer : public json::json_sax_t {
 public:
  bool found = false;
  bool start_object(std::size_t) override { return ++depth_ == 1; }
  bool key(string_t& k) override {
    if (depth_ == 1 && (k == "modelTopology" || k == "weightsManifest")) {
      found = true;
      return false;
    }
    return true;
  }
  bool end_object() override { return --depth_ > 0; }
  // Anything but an object at the top ends the scan; nested values go on.
  bool null() override { return depth_ > 0; }
  bool boolean(bool) override { return depth_ > 0; }
  bool number_integer(number_integer_t) override { return depth_ > 0; }
  bool number_unsigned(number_unsigned_t) override { return depth_ > 0; }
  bool number_float(number_float_t, const string_t&) override { return depth_ > 0; }
  bool string(string_t&) override { return depth_ > 0; }
  bool binary(binary_t&) override { return depth_ > 0; }
  bool start_array(std::size_t) override {
    if (depth_ == 0) return false;
    ++depth_;
    return true;
  }
  bool end_array() override { return --depth_ > 0; }
  bool parse_error(std::size_t, const std::string&, const json::exception&) override {
    return false;
  }

 private:
  int depth_ = 0;
};

// A regular .json file holding a TensorFlow.js layers model (read up to its
// first top-level "modelTopology" or "weightsManifest" key).
bool is_tfjs_json(const fs::path& p) {
  std::error_code ec;
  if (!fs::is_regular_file(p, ec)) return false;
  std::ifstream in(p, std::ios::binary);
  if (!in) return false;
  TfjsKeySniffer sniffer;
  json::sax_parse(in, &sniffer, json::input_format_t::json, /*strict=*/false);
  return sniffer.found;
}

}  // namespace

std::string keras_format_of(const std::string& path) {
  const fs::path p(path);
  const std::string ext = p.extension().string();
  if (ext == ".keras") return "keras";
  if (ext == ".h5" || ext == ".hdf5") return "h5";
  std::error_code ec;
  if (fs::is_directory(p, ec)) {
    // A TF.js directory; or, not yet written, the output directory of save.
    const fs::path json_path = p / "model.json";
    return is_tfjs_json(json_path) || !fs::exists(json_path, ec) ? "tfjs" : "";
  }
  if (ext == ".json") {
    // By content: a Hugging Face config.json is a .json too. A model.json
    // not yet written names save's output.
    if (!fs::exists(p, ec)) return p.filename() == "model.json" ? "tfjs" : "";
    return is_tfjs_json(p) ? "tfjs" : "";
  }
  if (!fs::exists(p, ec) && ext.empty()) return "tfjs";  // save's output directory
  return "";
}

bool is_keras_model_path(const std::string& path) {
  const std::string f = keras_format_of(path);
  if (f.empty()) return false;
  // Something that exists: a preset name such as "tiny" is not a Keras model.
  std::error_code ec;
  if (fs::is_directory(path, ec)) return is_tfjs_json(fs::path(path) / "model.json");
  return fs::is_regular_file(path, ec);
}

namespace {

// The model `model_config` describes, with the weights `files` hold (when
// options.weights), into `k` (its path, format and version already set).
KerasModel build_keras_model(KerasModel k, BuildContext ctx, const json& model_config,
                             const json& compile_config, const FileWeights& files,
                             const std::string& where, const KerasLoadOptions& options) {
  ctx.where = where;
  const ModelSpec spec = parse_model(model_config, ctx.dialect, where);
  k.architecture = model_config;
  k.compile = read_compile_config(compile_config, ctx.dialect, where);
  Built b = build_model(spec, ctx, options);
  k.inputs = b.inputs;
  k.outputs = b.outputs;
  k.compile_json = compile_config;
  k.compile_as_read = k.compile;
  for (const auto& [layer, roles] : b.roles)
    for (const WeightRole& r : roles)
      k.weight_names.push_back({layer->name + "." + r.cpp, layer->name,
                                layer->saved_group + "/" + r.k3, layer->name + "/" + r.tfjs});
  for (const auto& [layer, counters] : b.counters)
    for (const WeightRole& r : counters)
      k.counters.push_back({{layer->name + "." + r.cpp, layer->name,
                             layer->saved_group + "/" + r.k3, layer->name + "/" + r.tfjs}});
  if (options.weights) {
    std::map<std::string, Shape> shapes;
    std::map<std::string, WeightSource> sources = weight_sources(k, b, files, where, shapes);
    if (options.optimizer_state) {
      const std::vector<std::string> frozen = b.model->non_trainable_weight_paths();
      std::vector<std::string> trainable;
      for (const KerasWeightName& w : k.weight_names)
        if (std::find(frozen.begin(), frozen.end(), w.cpp) == frozen.end())
          trainable.push_back(w.cpp);
      const FileOptimizerState state = file_optimizer_state(files, where);
      k.optimizer_state_note =
          add_optimizer_sources(k.compile, files.dialect, state, trainable, shapes, sources);
      k.has_optimizer_state = k.optimizer_state_note.empty();
      if (k.has_optimizer_state) {
        k.iterations = state.iterations;
        b.model->set_iterations(state.iterations);
      }
    }
    b.model->load_weights(sources);
  }
  k.model = std::move(b.model);
  // The sources keep the HDF5 file, its zip member and the archive open.
  return k;
}

KerasModel read_keras_model(const std::string& path, const KerasLoadOptions& options) {
  KerasModel k;
  k.path = path;
  k.format = keras_format_of(path);
  AS_CHECK(!k.format.empty(), "--model '", path,
           "' is not a Keras file (.keras, .h5 or a TensorFlow.js model.json)");
  BuildContext ctx;
  ctx.inference = options.inference;
  ctx.seed = options.seed;
  FileWeights files;
  json model_config, compile_config;
  std::unique_ptr<ZipArchive> zip;
  std::string where;
  if (k.format == "keras") {
    where = "Keras file '" + path + "'";
    zip = std::make_unique<ZipArchive>(path);
    AS_CHECK(zip->contains("config.json"), where, " has no config.json (is it a .keras file?)");
    model_config =
        parse_json(zip->read_text("config.json", kMaxJsonBytes), where + ": config.json");
    if (zip->contains("metadata.json")) {
      const json meta =
          parse_json(zip->read_text("metadata.json", 1 << 20), where + ": metadata.json");
      k.keras_version = json_string_or(meta, "keras_version", "", where + ": metadata.json");
    }
    // Keras 2.13-2.15 wrote .keras files too (metadata.json says "2.x").
    ctx.keras2_hard_sigmoid = !k.keras_version.empty() && keras_version_is_2(k.keras_version);
    compile_config =
        model_config.is_object() ? model_config.value("compile_config", json()) : json();
    files.dialect = ctx.dialect = Dialect::Keras3;
    if (options.weights || options.optimizer_state) {
      AS_CHECK(zip->contains("model.weights.h5"), where,
               " has no model.weights.h5 (weights saved in another store are not supported)");
      files.h5 = H5File::open(zip->open_member("model.weights.h5"), where + ": model.weights.h5");
    }
  } else if (k.format == "h5") {
    where = "Keras file '" + path + "'";
    files.h5 = H5File::open(path, "Keras file");
    const std::optional<std::string> mc = files.h5->string_attribute("", "model_config");
    AS_CHECK(mc.has_value(), where,
             " has no model_config attribute (a weights-only .h5? give the whole model's file)");
    AS_CHECK(mc->size() <= kMaxJsonBytes, where, ": model_config is too large");
    model_config = parse_json(*mc, where + ": model_config");
    if (const auto tc = files.h5->string_attribute("", "training_config"))
      compile_config = parse_json(*tc, where + ": training_config");
    k.keras_version = files.h5->string_attribute("", "keras_version").value_or("");
    ctx.keras2_hard_sigmoid = keras_version_is_2(k.keras_version);  // Keras 3 writes .h5 too
    files.dialect = ctx.dialect = Dialect::Keras2;
  } else {
    std::string json_path = path;
    std::error_code ec;
    if (fs::is_directory(path, ec))  // inside the directory after symbolic links
      json_path = file_in_directory(path, "model.json", "TensorFlow.js model.json");
    where = "TensorFlow.js model '" + json_path + "'";
    const json doc =
        parse_json(read_input_file(json_path, "TensorFlow.js model.json", kMaxJsonBytes), where);
    AS_CHECK(doc.is_object() && doc.contains("modelTopology"), where,
             " has no modelTopology (a graph model? only layers models are read)");
    model_config = doc.at("modelTopology");
    if (model_config.is_object() && model_config.contains("model_config")) {
      compile_config = model_config.value("training_config", json());
      model_config = model_config.at("model_config");
    }
    k.keras_version = json_string_or(model_config, "keras_version", "", where + ": modelTopology");
    // A model converted from Keras says "keras v3.x" in generatedBy; one
    // TF.js wrote says "TensorFlow.js tfjs-layers v4.x" (Keras 2's form).
    const std::string by = json_string_or(doc, "generatedBy", "", where);
    ctx.keras2_hard_sigmoid =
        keras_version_is_2(by.rfind("keras v", 0) == 0 ? by : k.keras_version);
    if (doc.contains("trainingConfig")) compile_config = doc.at("trainingConfig");
    files.dialect = ctx.dialect = Dialect::TFJS;
    if (options.weights || options.optimizer_state) {
      AS_CHECK(doc.contains("weightsManifest"), where, " has no weightsManifest");
      files.tfjs =
          tfjs_weights(doc.at("weightsManifest"), fs::path(json_path).parent_path().string(),
                       json_path, &files.tfjs_optimizer);
    }
  }
  return build_keras_model(std::move(k), ctx, model_config, compile_config, files, where, options);
}

}  // namespace

KerasModel load_keras_model(const std::string& path, const KerasLoadOptions& options) {
  // The backstop for a JSON value read unchecked: one error naming the file.
  return with_json_errors("Keras model '" + path + "'",
                          [&] { return read_keras_model(path, options); });
}

KerasModel keras_model_of_config(const nlohmann::json& model_config, const std::string& format,
                                 const std::string& where, const std::string& weights_h5) {
  const std::string named = weights_h5.empty() ? where : where + " '" + weights_h5 + "'";
  return with_json_errors(named, [&] {
    KerasModel k;
    k.format = format;
    BuildContext ctx;
    FileWeights files;
    files.dialect = ctx.dialect = format == "keras" ? Dialect::Keras3
                                  : format == "h5"  ? Dialect::Keras2
                                                    : Dialect::TFJS;
    KerasLoadOptions options;
    options.weights = !weights_h5.empty();
    options.unknown_dims = true;  // Python's models: keras.Input(shape=(None, ...)) kept
    if (options.weights) {
      AS_CHECK(format == "keras", named, ": a weights file follows Keras 3's layout; this model ",
               "was described in the ", format, " format");
      files.h5 = H5File::open(weights_h5, where);
    }
    return build_keras_model(std::move(k), ctx, model_config, json(), files, named, options);
  });
}

}  // namespace autoshard
