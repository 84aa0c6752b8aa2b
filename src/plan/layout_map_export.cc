#include "plan/layout_map_export.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "autoshard/error.h"
#include "autoshard/runtime/memory.h"

namespace autoshard {

namespace {

// The Keras dimensions autoshard's dimension `d` of `v` flattens.
std::vector<int> group_of(const KerasVariable& v, int d) {
  if (v.dims_of.empty()) return {d};
  AS_CHECK(d < int(v.dims_of.size()), "internal: Keras variable '", v.path, "' maps ",
           v.dims_of.size(), " of autoshard's dimensions, not ", d + 1);
  return v.dims_of[d];
}

// The Keras dimension of `group` a split over `k` devices goes on (see
// keras_layout).
int split_dimension(const KerasVariable& v, const std::vector<int>& group, int k) {
  bool outer_ones = true;
  for (int g : group) {
    if (v.shape.at(g) % k == 0 && outer_ones) return g;
    outer_ones = outer_ones && v.shape.at(g) == 1;
  }
  for (int g : group)
    if (v.shape.at(g) % k == 0) return g;
  for (int g : group)
    if (v.shape.at(g) > 1) return g;
  return group.front();
}

// A Python tuple of the strings: ("a",) for one.
std::string python_tuple(const std::vector<std::string>& items) {
  std::string s = "(";
  for (size_t i = 0; i < items.size(); ++i) s += (i ? ", " : "") + items[i];
  return s + (items.size() == 1 ? ",)" : ")");
}

// One dimension's axes in Python: None, "model" or ("data", "model").
std::string python_axes(const TensorLayout::Axes& axes) {
  if (axes.empty()) return "None";
  if (axes.size() == 1) return nlohmann::json(axes[0]).dump();
  std::vector<std::string> quoted;
  for (const std::string& a : axes) quoted.push_back(nlohmann::json(a).dump());
  return python_tuple(quoted);
}

std::string layout_string(const TensorLayout& l) {
  std::vector<std::string> dims;
  for (const TensorLayout::Axes& axes : l.axes) dims.push_back(python_axes(axes));
  return python_tuple(dims);
}

// null, "model" or ["data", "model"] per dimension.
nlohmann::json layout_json(const TensorLayout& l) {
  nlohmann::json a = nlohmann::json::array();
  for (const TensorLayout::Axes& axes : l.axes)
    a.push_back(axes.empty()       ? nlohmann::json()
                : axes.size() == 1 ? nlohmann::json(axes[0])
                                   : nlohmann::json(axes));
  return a;
}

std::string axes_name(const TensorLayout::Axes& axes) {
  std::string s;
  for (const std::string& a : axes) s += (s.empty() ? "" : ",") + a;
  return axes.size() > 1 ? "(" + s + ")" : s;
}

// A Python string literal of `s`: JSON's escapes are Python's (\", \\, \n,
// \u0000), and a byte that is not UTF-8 (a path given on the command line)
// becomes U+FFFD rather than an exception.
std::string python_string(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

namespace {

// Repeated blocks (transformer_layer_0 ... transformer_layer_N) whose
// variables at one position all share a layout get one key for them all,
// `^transformer_layer_\d+/...$`, as KerasHub's own layout maps are written
// (a plan decides a repeated layer once). Only keys that were the exact
// path (`defaults`); a position whose layouts differ keeps its exact keys.
void share_block_keys(LayoutMapExport& e, const std::vector<bool>& defaults) {
  static const std::regex numbered(R"(_(\d+)/)");
  std::map<std::string, std::vector<size_t>> positions;  // path with its first number as #
  for (size_t i = 0; i < e.entries.size(); ++i) {
    std::smatch m;
    const std::string& path = e.entries[i].variable.path;
    if (defaults[i] && std::regex_search(path, m, numbered))
      positions[m.prefix().str() + "_#/" + m.suffix().str()].push_back(i);
  }
  for (const auto& [position, ids] : positions) {
    if (ids.size() < 2) continue;
    bool same = true;
    for (size_t id : ids) same = same && e.entries[id].layout.axes == e.entries[ids[0]].layout.axes;
    if (!same) continue;
    std::smatch m;
    const std::string path = e.entries[ids[0]].variable.path;
    std::regex_search(path, m, numbered);
    const std::string key =
        "^" + regex_escape(m.prefix().str()) + "_\\d+/" + regex_escape(m.suffix().str()) + "$";
    for (size_t id : ids) e.entries[id].variable.key = key;
  }
}

}  // namespace

std::string regex_escape(const std::string& text) {
  static const std::string special = R"(\^$.|?*+()[]{}-)";
  std::string out;
  for (char c : text) {
    if (special.find(c) != std::string::npos) out += '\\';
    out += c;
  }
  return out;
}

TensorLayout keras_layout(const KerasVariable& v, const Sharding& s, const DeviceMesh& mesh) {
  std::vector<TensorLayout::Axes> axes(v.shape.size());
  for (int d = 0; d < s.rank(); ++d) {
    if (s.dims[d] < 0) continue;
    const int g = split_dimension(v, group_of(v, d), mesh.axis_size(s.dims[d]));
    AS_CHECK(axes.at(g).empty(), "--export-layout-map: the plan splits Keras variable '", v.path,
             "' dimension ", g, " over two of its factors, by '", axes_name(axes[g]), "' and '",
             mesh.axis_name(s.dims[d]), "' (autoshard's '", v.weight, "' ", s.to_string(mesh),
             "), which a Keras layout cannot say; plan with another mesh");
    for (int a : axis_members(s.dims[d])) axes[g].push_back(mesh.axis_names()[a]);
  }
  return TensorLayout(std::move(axes));
}

Sharding autoshard_sharding(const KerasVariable& v, const TensorLayout& layout,
                            const DeviceMesh& mesh) {
  AS_CHECK(layout.axes.size() == v.shape.size(), "layout of Keras variable '", v.path, "' has ",
           layout.axes.size(), " axes but the variable ", shape_str(v.shape), " has ",
           v.shape.size(), " dimensions");
  Sharding s = Sharding::replicated(int(v.weight_shape.size()));
  for (int g = 0; g < int(v.shape.size()); ++g) {
    if (layout.axes[g].empty()) continue;
    const int a = layout_axis(mesh, layout.axes[g], "layout of Keras variable '" + v.path + "'");
    // The autoshard dimensions in Keras dimension g, outermost first.
    std::vector<int> holders;
    for (int d = 0; d < s.rank(); ++d) {
      const std::vector<int> group = group_of(v, d);
      if (std::find(group.begin(), group.end(), g) != group.end()) holders.push_back(d);
    }
    if (holders.empty()) continue;
    const auto rank = [&](int d) { return v.factor_order.empty() ? d : v.factor_order.at(d); };
    std::sort(holders.begin(), holders.end(), [&](int x, int y) { return rank(x) < rank(y); });
    int chosen = holders.front();
    for (int d : holders)
      if (v.weight_shape.at(d) > 1) {
        chosen = d;
        break;
      }
    s.dims[chosen] = a;
  }
  return s;
}

LayoutMapExport make_layout_map_export(
    std::vector<KerasVariable> variables, const DeviceMesh& mesh,
    const std::function<Sharding(const std::string& weight)>& plan) {
  LayoutMapExport e;
  e.mesh = mesh;
  std::vector<bool> defaults;  // the key is the variable's own path
  for (KerasVariable& v : variables) {
    defaults.push_back(v.key.empty());
    if (v.key.empty()) {  // appended in pieces: GCC 12 warns falsely on "^" + s + "$"
      v.key = "^";
      v.key += regex_escape(v.path);
      v.key += "$";
    }
    LayoutMapExport::Entry entry;
    // A variable autoshard has no weight for (GPT-2's key bias) stays whole.
    entry.layout = v.weight.empty() ? TensorLayout(std::vector<TensorLayout::Axes>(v.shape.size()))
                                    : keras_layout(v, plan(v.weight), mesh);
    for (size_t d = 0; d < entry.layout.axes.size(); ++d)
      if (const int a = layout_axis(mesh, entry.layout.axes[d], "--export-layout-map");
          a >= 0 && v.shape[d] % mesh.axis_size(a) != 0)
        entry.uneven.push_back(int(d));
    entry.variable = std::move(v);
    e.entries.push_back(std::move(entry));
  }
  share_block_keys(e, defaults);
  check_layout_map_export(e);
  return e;
}

void check_layout_map_export(const LayoutMapExport& e) {
  // Each distinct key once (variables of repeated blocks share one), with
  // the entry that first has it.
  std::map<std::string, size_t> by_key;
  std::vector<size_t> first;  // per distinct key
  std::vector<std::regex> keys;
  for (size_t i = 0; i < e.entries.size(); ++i) {
    const KerasVariable& v = e.entries[i].variable;
    auto [it, fresh] = by_key.emplace(v.key, i);
    if (!fresh) {
      AS_CHECK(e.entries[it->second].layout.axes == e.entries[i].layout.axes,
               "--export-layout-map: Keras variables '", e.entries[it->second].variable.path,
               "' and '", v.path, "' got the same key '", v.key,
               "' but different layouts; the model names two variables alike");
      continue;
    }
    try {
      keys.emplace_back(v.key);
    } catch (const std::regex_error& err) {
      fail("--export-layout-map: the key '", v.key, "' of Keras variable '", v.path,
           "' is not a valid regular expression: ", err.what());
    }
    first.push_back(i);
  }
  for (size_t i = 0; i < e.entries.size(); ++i) {
    const KerasVariable& v = e.entries[i].variable;
    std::vector<std::string> paths = {v.path};
    paths.insert(paths.end(), v.other_paths.begin(), v.other_paths.end());
    for (const std::string& p : paths) {
      if (auto exact = by_key.find(p); exact != by_key.end()) {
        AS_CHECK(exact->first == v.key, "--export-layout-map: Keras variable '", v.path,
                 "' (autoshard's '", v.weight, "') would take the layout of '",
                 e.entries[exact->second].variable.path, "', whose key is its path '", p, "'");
        continue;
      }
      std::vector<size_t> matched;
      for (size_t k = 0; k < keys.size(); ++k)
        if (std::regex_search(p, keys[k])) matched.push_back(first[k]);
      AS_CHECK(!matched.empty(), "--export-layout-map: no key matches Keras variable '", p,
               "' (autoshard's '", v.weight, "'): the map would leave it replicated");
      AS_CHECK(matched.size() == 1, "--export-layout-map: Keras variable '", p, "' (autoshard's '",
               v.weight, "') matches two keys, '", e.entries[matched[0]].variable.key, "' and '",
               e.entries[matched[1]].variable.key, "' (Keras refuses that)");
      AS_CHECK(e.entries[matched[0]].variable.key == v.key, "--export-layout-map: Keras variable '",
               p, "' (autoshard's '", v.weight, "') matches the key '",
               e.entries[matched[0]].variable.key, "' of '", e.entries[matched[0]].variable.path,
               "', not its own '", v.key, "'");
    }
  }
}

LayoutMap to_layout_map(const LayoutMapExport& e) {
  LayoutMap m;
  for (const auto& entry : e.entries) m[entry.variable.key] = entry.layout;
  return m;
}

std::vector<std::string> uneven_splits(const LayoutMapExport& e) {
  std::vector<std::string> out;
  for (const auto& entry : e.entries)
    for (int d : entry.uneven) {
      const TensorLayout::Axes& axes = entry.layout.axes[d];
      const int a = layout_axis(e.mesh, axes, "--export-layout-map");
      out.push_back(entry.variable.path + ": dimension " + std::to_string(d) + " (" +
                    std::to_string(entry.variable.shape[d]) + ") over " + axes_name(axes) + " (" +
                    std::to_string(e.mesh.axis_size(a)) + ")");
    }
  return out;
}

std::string layout_map_json(const LayoutMapExport& e) {
  using ojson = nlohmann::ordered_json;
  ojson map = ojson::object(), variables = ojson::object();
  for (const auto& entry : e.entries) {
    const KerasVariable& v = entry.variable;
    map[v.key] = layout_json(entry.layout);
    variables[v.path] = {{"key", v.key},
                         {"shape", v.shape},
                         {"layout", layout_json(entry.layout)},
                         {"autoshard_weight", v.weight},
                         {"uneven_dimensions", entry.uneven}};
  }
  ojson mesh = {{"shape", e.mesh.shape()}, {"axis_names", e.mesh.axis_names()}};
  ojson predicted = ojson::object();
  if (e.step_s > 0) predicted["step_s"] = e.step_s;
  if (e.bytes_per_device > 0) predicted["bytes_per_device"] = e.bytes_per_device;
  if (!e.cluster.empty()) predicted["cluster"] = e.cluster;
  ojson j = {{"format", "keras.distribution.LayoutMap"},
             {"model", e.model},
             {"mesh", mesh},
             {"batch_dim_name", e.batch_dim_name},
             {"layout_map", map},
             {"predicted", predicted},
             {"divisible", e.divisible},
             {"uneven_splits", uneven_splits(e)},
             {"lost_splits", e.lost_splits},
             {"variables", variables}};
  return j.dump(2, ' ', false, ojson::error_handler_t::replace) + "\n";
}

std::string layout_map_python(const LayoutMapExport& e) {
  std::string shape = "(", names = "(";
  for (int a = 0; a < e.mesh.rank(); ++a) {
    shape += std::to_string(e.mesh.axis_size(a)) + (e.mesh.rank() == 1 ? ",)" : "");
    names += python_string(e.mesh.axis_names()[a]) + (e.mesh.rank() == 1 ? ",)" : "");
    if (e.mesh.rank() > 1) {
      shape += a + 1 < e.mesh.rank() ? ", " : ")";
      names += a + 1 < e.mesh.rank() ? ", " : ")";
    }
  }
  std::string predicted = "a plan not priced";
  if (e.step_s > 0)
    predicted = "predicted on cluster " + python_string(e.cluster) + ": " +
                std::to_string(e.step_s * 1e3) + " ms per training step, " +
                format_in_mib(e.bytes_per_device) + " per device at the peak";
  auto list = [](const std::vector<std::string>& lines) {
    if (lines.empty()) return std::string("[]");
    std::string s = "[\n";
    for (const std::string& l : lines) s += "    " + python_string(l) + ",\n";
    return s + "]";
  };
  std::string py;
  py += "\"\"\"AutoShard's plan as a Keras LayoutMap (autoshard plan --export-layout-map).\n\n";
  py += "Model " + python_string(e.model) + " on mesh " + e.mesh.to_string() + ", batch_dim_name " +
        python_string(e.batch_dim_name) + "; " + predicted + ".\n\n";
  py +=
      "    import keras\n"
      "    mesh = keras.distribution.DeviceMesh(MESH_SHAPE, MESH_AXIS_NAMES)\n"
      "    keras.distribution.set_distribution(keras.distribution.ModelParallel(\n"
      "        layout_map=get_layout_map(mesh), batch_dim_name=BATCH_DIM_NAME))\n"
      "\"\"\"\n\n"
      "import keras\n\n";
  py += "MESH_SHAPE = " + shape + "\n";
  py += "MESH_AXIS_NAMES = " + names + "\n";
  py += "BATCH_DIM_NAME = " + python_string(e.batch_dim_name) + "\n";
  py += "PREDICTED_STEP_SECONDS = " + (e.step_s > 0 ? nlohmann::json(e.step_s).dump() : "None") +
        "\n";
  py += "PREDICTED_BYTES_PER_DEVICE = " +
        (e.bytes_per_device > 0 ? nlohmann::json(e.bytes_per_device).dump() : "None") + "\n";
  py +=
      "# Splits that do not divide their dimension (JAX's NamedSharding refuses them;\n"
      "# autoshard plan --divisible plans without them).\n";
  py += "UNEVEN_SPLITS = " + list(uneven_splits(e)) + "\n";
  py += "# With --divisible: the dimensions that lost their split, and what it costs.\n";
  py += "LOST_SPLITS = " + list(e.lost_splits) + "\n\n\n";
  py +=
      "def get_layout_map(device_mesh):\n"
      "    \"\"\"The plan's layout of every variable, keyed by anchored regular expressions\n"
      "    over variable.path; device_mesh needs the axes of MESH_AXIS_NAMES.\"\"\"\n"
      "    missing = [a for a in MESH_AXIS_NAMES if a not in device_mesh.axis_names]\n"
      "    if missing:\n"
      "        raise ValueError(f\"the device mesh has no axis {missing}; the plan was made for "
      "\"\n"
      "                         f\"{dict(zip(MESH_AXIS_NAMES, MESH_SHAPE))}\")\n"
      "    layout_map = keras.distribution.LayoutMap(device_mesh)\n";
  std::map<std::string, int> sharing;  // variables per key
  for (const auto& entry : e.entries) ++sharing[entry.variable.key];
  std::set<std::string> written;
  for (const auto& entry : e.entries) {
    const KerasVariable& v = entry.variable;
    if (!written.insert(v.key).second) continue;
    const int n = sharing[v.key];
    if (n > 1) py += "    # " + std::to_string(n) + " variables, the first:\n";
    // A comment is one line of text Python reads: control characters (a NUL
    // stops Python's import) and bad UTF-8 escaped (error.h's one_line).
    py += "    # " +
          one_line(v.path + " " + shape_str(v.shape) + " (autoshard: " + v.weight + ")") + "\n";
    py += "    layout_map[" + python_string(v.key) + "] = " + layout_string(entry.layout) + "\n";
  }
  py += "    return layout_map\n";
  return py;
}

}  // namespace autoshard
