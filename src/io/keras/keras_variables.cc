#include "autoshard/io/keras_variables.h"

#include <functional>
#include <sstream>
#include <type_traits>
#include <variant>

#include "autoshard/error.h"
#include "autoshard/io/keras_hub.h"

namespace autoshard {

namespace {

// Keras class by layer name, for every layer the architecture describes at
// any depth (a Bidirectional's copies as forward_<name> and backward_<name>).
void collect_classes(const nlohmann::json& j, std::map<std::string, std::string>& out) {
  if (j.is_array()) {
    for (const auto& x : j) collect_classes(x, out);
    return;
  }
  if (!j.is_object()) return;
  const auto cls = j.find("class_name");
  const auto config = j.find("config");
  if (cls != j.end() && cls->is_string() && config != j.end() && config->is_object()) {
    const auto name = config->find("name");
    if (name != config->end() && name->is_string())
      out.emplace(name->get<std::string>(), cls->get<std::string>());
    const auto inner = config->find("layer");
    if (cls->get<std::string>() == "Bidirectional" && inner != config->end() &&
        inner->is_object() && inner->contains("config") && inner->at("config").is_object()) {
      std::string base = inner->at("config").value("name", "");
      for (const char* p : {"forward_", "backward_"})
        if (base.rfind(p, 0) == 0) base = base.substr(std::string(p).size());
      for (const char* p : {"forward_", "backward_"})
        out.emplace(p + base, inner->value("class_name", ""));
    }
  }
  for (const auto& [key, value] : j.items()) collect_classes(value, out);
}

bool is_model_class(const std::string& cls) {
  return cls == "Sequential" || cls == "Functional" || cls == "Model";
}

// The cell a Keras 3 recurrent layer of class `cls` builds its variables in.
std::string cell_of(const std::string& cls) {
  if (cls == "LSTM") return "lstm_cell";
  if (cls == "GRU") return "gru_cell";
  return "simple_rnn_cell";
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string part; std::getline(in, part, '/');) out.push_back(part);
  return out;
}

// One segment of a path: a scope that may be missing, or one that is not.
struct Segment {
  std::string name;
  bool optional = false;
};

}  // namespace

std::vector<KerasVariable> keras_file_variables(const KerasModel& model,
                                                const std::map<std::string, Shape>& weight_shapes) {
  std::map<std::string, std::string> classes;
  collect_classes(model.architecture, classes);
  const std::string top_class = model.architecture.value("class_name", "");
  const std::string top_name = model.architecture.contains("config")
                                   ? model.architecture.at("config").value("name", "")
                                   : std::string();
  std::vector<KerasVariable> out;
  for (const KerasWeightName& w : model.weight_names) {
    std::vector<std::string> parts = split(w.tfjs);
    AS_CHECK(parts.size() >= 2, "--export-layout-map: weight '", w.cpp,
             "' has no Keras layer in its name '", w.tfjs, "'");
    std::vector<Segment> segments;
    // Keras 3 builds a Sequential's layers inside its scope, a Functional's
    // outside: the canonical path has the scope for Sequential only.
    if (!top_name.empty()) segments.push_back({top_name, true});
    const std::string variable = parts.back();
    parts.pop_back();
    for (const std::string& p : parts) {
      auto it = classes.find(p);
      segments.push_back({p, it != classes.end() && is_model_class(it->second)});
    }
    const auto owner = classes.find(parts.back());
    const std::string owner_class = owner == classes.end() ? "" : owner->second;
    if (w.keras3.find("cell/vars/") != std::string::npos)
      segments.push_back({cell_of(owner_class), false});
    const std::string name =
        owner_class == "DepthwiseConv2D" && variable == "depthwise_kernel" ? "kernel" : variable;

    KerasVariable v;
    v.weight = w.cpp;
    auto shape = weight_shapes.find(w.cpp);
    AS_CHECK(shape != weight_shapes.end(), "--export-layout-map: the plan has no weight '", w.cpp,
             "' (Keras variable '", w.tfjs, "')");
    v.shape = v.weight_shape = shape->second;
    v.key = "^";
    for (const Segment& s : segments)
      v.key += s.optional ? "(?:" + regex_escape(s.name) + "/)?" : regex_escape(s.name) + "/";
    v.key += regex_escape(name) + "$";
    // Every spelling: each optional scope present or not (models nest a
    // level or two, so few).
    std::vector<size_t> optional;
    for (size_t i = 0; i < segments.size(); ++i)
      if (segments[i].optional) optional.push_back(i);
    AS_CHECK(optional.size() <= 8, "--export-layout-map: weight '", w.cpp, "' sits in ",
             optional.size(), " nested models; at most 8 are supported");
    const bool sequential = top_class == "Sequential";
    for (uint32_t mask = 0; mask < (1u << optional.size()); ++mask) {
      std::string path;
      for (size_t i = 0, o = 0; i < segments.size(); ++i) {
        const bool on = !segments[i].optional || (mask >> o++) & 1u;
        if (on) path += segments[i].name + "/";
      }
      path += name;
      // The canonical spelling: every nested scope, the model's own for a
      // Sequential only.
      const uint32_t all = (1u << optional.size()) - 1;
      const bool canonical =
          !top_name.empty() ? mask == (sequential ? all : all & ~1u) : mask == all;
      if (canonical)
        v.path = path;
      else
        v.other_paths.push_back(path);
    }
    out.push_back(std::move(v));
  }
  return out;
}

std::vector<KerasVariable> keras_hub_variables(const keras_hub::Variables& table,
                                               const std::map<std::string, Shape>& weight_shapes,
                                               std::string* class_name) {
  if (class_name) *class_name = table.class_name;
  std::vector<KerasVariable> out;
  for (const keras_hub::Variable& kv : table.variables) {
    KerasVariable v;
    v.path = kv.path;
    v.shape = kv.keras_shape;
    v.weight = kv.weight;
    if (!kv.weight.empty()) {
      v.weight_shape = kv.weight_shape();
      auto shape = weight_shapes.find(kv.weight);
      AS_CHECK(shape != weight_shapes.end(), "--export-layout-map: the plan has no weight '",
               kv.weight, "' (KerasHub's '", kv.path, "' of ", table.class_name, ")");
      AS_CHECK(shape->second == v.weight_shape, "--export-layout-map: the plan's '", kv.weight,
               "' is ", shape_str(shape->second), ", KerasHub's '", kv.path, "' ",
               shape_str(kv.keras_shape), " holds ", shape_str(v.weight_shape));
      for (int d : kv.keras_dims()) v.dims_of.push_back({d});
      v.factor_order = kv.perm;
    }
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace autoshard
